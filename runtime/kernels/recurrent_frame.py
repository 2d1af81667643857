"""The recurrent kernels' frame (shapes, layouts, input projection, outputs) and derived weights."""

from __future__ import annotations

import contextlib
import weakref

import numpy as np

from offload.errors import ShapeError

from ._util import out_for, unsupported

_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}

# Per op: gates, default activations per direction (lower case), the gates (in ONNX's order)
# that the first activation (a sigmoid by default) applies to.
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULTS = {"RNN": ("tanh",), "GRU": ("sigmoid", "tanh"), "LSTM": ("sigmoid", "tanh", "tanh")}
_SIGMOID_GATES = {"RNN": (), "GRU": (0, 1), "LSTM": (0, 1, 2)}  # GRU z, r; LSTM i, o, f


def _is_default(op, names) -> bool:
    if names is None:
        return True
    default = _DEFAULTS[op]
    return all(n.lower() == default[k % len(default)] for k, n in enumerate(names))


def _compute_dtype(X):
    return np.float64 if X.dtype == np.float64 else np.float32


# The largest directions × hidden size whose recurrent product is one product by a block-diagonal
# matrix (gate-major columns, the directions' blocks on the diagonal); past it, a stacked product
# of one matrix per direction. A bidirectional step's product at batch 1 (µs, 2-core machine,
# OpenBLAS 1 thread; stacked / block): LSTM H=24 3.0 / 3.6, H=48 4.9 / 4.6, H=64 5.9 / 8.7,
# H=128 22 / 43; GRU H=24 2.6 / 1.7, H=48 4.3 / 8.5. The stacked product's result then takes one
# strided add into the gate-major buffer, about a call more.
_BLOCK_MAX = 64


# Rank → (the permutation from layout 0 to layout 1, and back): Y [seq, dirs, batch, hidden] ↔
# [batch, seq, dirs, hidden], states [dirs, batch, hidden] ↔ [batch, dirs, hidden].
_TO_LAYOUT_1 = {4: ((2, 0, 1, 3), (1, 2, 0, 3)), 3: ((1, 0, 2), (1, 0, 2))}


def checked_lengths(op: str, sequence_lens, S: int, N: int) -> np.ndarray:
    """sequence_lens as int64 [N], each within [0, S]."""
    lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
    if lens.shape != (N,) or lens.min(initial=0) < 0 or lens.max(initial=0) > S:
        raise ShapeError(f"{op}: sequence_lens {lens.tolist()} for batch {N} and sequence length {S}")
    return lens


def initial_state(op: str, init, name: str, shape: tuple, dtype) -> np.ndarray:
    """An initial state of ``shape`` (layout 0: [directions, batch, hidden]), zeros when omitted."""
    if init is None:
        return np.zeros(shape, dtype=dtype)
    init = np.asarray(init, dtype=dtype)
    if init.shape != shape:
        raise ShapeError(f"{op}: {name} has shape {list(init.shape)} in layout 0, expected {list(shape)}")
    return init


class _Frame:
    """One call's shapes, checked once: X in layout 0, directions, sequence lengths, and where
    the results go (the .pte arena's views of them where it offers them).

    ``lens`` is None when every sequence runs the whole length (no gathering afterwards). States
    are kept as rows [batch, directions * hidden] (``history``), gates gate-major
    [batch, gates, directions, hidden], so that every gate of every direction is one contiguous
    slice at batch 1."""

    def __init__(self, ctx, op, X, W, R, B, sequence_lens, hidden_size, layout, direction):
        if direction not in _DIRECTIONS:
            raise unsupported(op, f"direction '{direction}'")
        if layout not in (0, 1):
            raise unsupported(op, f"layout {layout}")
        self.ctx, self.op, self.layout, self.X = ctx, op, layout, X
        self.reverses = _DIRECTIONS[direction]
        D = len(self.reverses)
        self.dtype = _compute_dtype(X)
        if X.ndim != 3:
            raise ShapeError(
                f"{op}: X has rank {X.ndim}, expected 3 ([seq, batch, input]; layout 1: [batch, seq, input])"
            )
        x = np.asarray(X, dtype=self.dtype)
        self.x = x.transpose(1, 0, 2) if layout else x
        S, N, _ = self.x.shape
        H = hidden_size if hidden_size is not None else R.shape[-1]
        self.seq, self.batch, self.hidden, self.dirs, self.direction = S, N, H, D, direction
        self.check_weights(W, R, B)
        self.block = D == 1 or D * H <= _BLOCK_MAX
        # np.dot takes a 2-D product with less dispatch than np.matmul (at hidden 16 1.1 against
        # 2.8 µs); a stacked product needs matmul.
        self.product = np.dot if self.block else np.matmul
        self.sequence_lengths(sequence_lens)

    def check_weights(self, W, R, B) -> None:
        D, G, H, I = self.dirs, _GATES[self.op], self.hidden, self.x.shape[2]
        want = {"W": (W, (D, G * H, I)), "R": (R, (D, G * H, H)), "B": (B, (D, 2 * G * H))}
        for name, (a, shape) in want.items():
            if a is not None and tuple(a.shape) != shape:
                raise ShapeError(
                    f"{self.op}: {name} has shape {list(a.shape)}, expected {list(shape)} for direction "
                    f"'{self.direction}', hidden size {H}, input size {I}"
                )

    def sequence_lengths(self, sequence_lens) -> None:
        """``lens`` from a call's sequence_lens (None: every sequence runs the whole length)."""
        self.lens = None
        if sequence_lens is None:
            return
        lens = checked_lengths(self.op, sequence_lens, self.seq, self.batch)
        if (lens != self.seq).any():
            self.lens = lens

    def state(self, init, name: str) -> np.ndarray:
        """An initial state in layout 0 ([directions, batch, hidden]), zeros when omitted."""
        if init is not None and self.layout:
            init = np.asarray(init).transpose(1, 0, 2)
        return initial_state(self.op, init, name, (self.dirs, self.batch, self.hidden), self.dtype)

    def projection(self, Wx: np.ndarray) -> np.ndarray:
        """x·W + bias of every step (_Projection), in buffers of this call."""
        return _Projection(self, Wx)(self)

    def rows(self, init, name: str, out: np.ndarray) -> None:
        """An initial state (zeros when omitted) into ``out`` as rows [batch, directions * hidden]."""
        if init is None:
            out[...] = 0
            return
        out[...] = self.state(init, name).transpose(1, 0, 2).reshape(self.batch, self.dirs * self.hidden)

    def _reading_order(self, d: int) -> np.ndarray:
        """X [seq, batch, input] in the order direction ``d``'s steps read it."""
        if not self.reverses[d]:
            return self.x
        if self.lens is None:
            return self.x[::-1]
        # Step k of batch entry b reads time lens[b] - 1 - k (any row past its end).
        k = np.arange(self.seq)[:, None]
        t = np.where(k < self.lens, self.lens - 1 - k, k)
        return self.x[t, np.arange(self.batch)]

    def history(self, init: np.ndarray) -> np.ndarray:
        """[seq + 1, batch, directions * hidden]: the initial state, then each step's (the
        general steps' buffer of this call; plain calls keep theirs, _Plain)."""
        DH = self.dirs * self.hidden
        hs = np.empty((self.seq + 1, self.batch, DH), dtype=self.dtype)
        hs[0] = init.transpose(1, 0, 2).reshape(self.batch, DH)
        return hs

    def steps(self, hs: np.ndarray) -> np.ndarray:
        """A history as [seq + 1, batch, directions, hidden] (a view)."""
        return hs[:, :, : self.dirs * self.hidden].reshape(self.seq + 1, self.batch, self.dirs, self.hidden)

    def product_inputs(self, rows: np.ndarray) -> np.ndarray:
        """State rows [..., batch, directions * hidden (+ extra)] as the recurrent product takes
        them: as they are for the block product, [..., directions, batch, hidden] stacked."""
        if self.block:
            return rows
        D, H = self.dirs, self.hidden
        split = rows[..., : D * H].reshape(*rows.shape[:-1], D, H)
        return split.swapaxes(-2, -3)

    def product_output(self, gates: int) -> tuple[np.ndarray, np.ndarray]:
        """(the recurrent product's output buffer, the same as [batch, gates, directions, hidden])."""
        N, D, H = self.batch, self.dirs, self.hidden
        if self.block:
            out = np.empty((N, gates * D * H), dtype=self.dtype)
            return out, out.reshape(N, gates, D, H)
        out = np.empty((D, N, gates * H), dtype=self.dtype)
        return out, out.reshape(D, N, gates, H).transpose(1, 2, 0, 3)

    def gate_buffer(self, product: np.ndarray) -> np.ndarray:
        """Where a step's gates are computed, [batch, gates, directions, hidden] C-contiguous:
        the block product's own output; a new buffer after a stacked product."""
        return product if self.block else np.empty(product.shape, dtype=self.dtype)

    def quiet(self):
        """Steps past a sequence's end compute values no result reads: their floating-point
        warnings are no one's concern."""
        return np.errstate(all="ignore") if self.lens is not None else contextlib.nullcontext()

    def _result(self, i: int, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
        """(a buffer in layout 0 of ``shape``, the result it is in the op's layout): a view of
        the arena's output where it offers one of the type computed."""
        if self.layout:
            perm, back = _TO_LAYOUT_1[len(shape)]
            shape = tuple(shape[p] for p in perm)
        out = None
        if self.ctx is not None and self.X.dtype == self.dtype:
            out = out_for(self.ctx, i, shape, self.dtype)
        if out is None:
            out = np.empty(shape, dtype=self.dtype)
        return (out.transpose(back) if self.layout else out), out

    def sequence(self, hs: np.ndarray):
        """Y from a history, in time order, zeros past each end; None where no one reads it."""
        if self.ctx is not None and not self.ctx.output_wanted(0):
            return None
        S, N, D, H = self.seq, self.batch, self.dirs, self.hidden
        Y, result = self._result(0, (S, D, N, H))
        h4 = self.steps(hs)
        if self.lens is None:
            for d, reverse in enumerate(self.reverses):
                Y[:, d] = h4[S:0:-1, :, d] if reverse else h4[1:, :, d]
            return self._cast(result)
        t = np.arange(S)[:, None]
        live = t < self.lens
        rows = np.arange(N)
        for d, reverse in enumerate(self.reverses):
            k = np.where(live, self.lens - t, 0) if reverse else np.where(live, t + 1, 0)
            Y[:, d] = np.where(live[..., None], h4[k, rows, d], 0)
        return self._cast(result)

    def final(self, i: int, hs: np.ndarray | None, last: np.ndarray | None = None):
        """Output ``i``: the state after each sequence's last step, from the history ``hs`` or,
        where every sequence runs the whole length, the last state's rows ``last``; zeros for a
        sequence of length zero."""
        if self.ctx is not None and not self.ctx.output_wanted(i):
            return None
        N, D, H = self.batch, self.dirs, self.hidden
        out, result = self._result(i, (D, N, H))
        if self.lens is not None:
            last = self.steps(hs)[self.lens, np.arange(N)].transpose(1, 0, 2)
            out[...] = np.where((self.lens > 0)[:, None], last, 0)
        elif self.seq == 0:
            out[...] = 0
        else:
            rows = hs[self.seq] if last is None else last
            out[...] = rows[:, : D * H].reshape(N, D, H).transpose(1, 0, 2)
        return self._cast(result)

    def _cast(self, a: np.ndarray) -> np.ndarray:
        return a.astype(self.X.dtype, copy=False)


class _Projection:
    """x·W + bias of every step as ``xw`` [seq, batch, gates, directions, hidden], each
    direction's rows in the order its steps read them, from ``Wx`` (_input_weights). For the
    block product, one product of the rows [x_forward, x_reverse, 1] by a matrix that puts each
    direction's W under its own gate-major columns and the biases in the last row: adding per
    direction into strided views of the result took 25 µs each at 16 steps, hidden 24, the
    product of twice the width 4. For the stacked product (larger nets, where the zero half of
    that product costs more than it saves), a product per direction of [x, 1], ``xw`` a view of
    them. The buffers are built once per shape (``__init__``), filled per call (``__call__``)."""

    def __init__(self, fr: _Frame, Wx: np.ndarray):
        S, N, D, H = fr.seq, fr.batch, fr.dirs, fr.hidden
        I = fr.x.shape[2]
        G = Wx.shape[-1] // (D * H if fr.block else H)
        width = D * I + 1 if fr.block else I + 1
        self.xs = np.empty((S, N, width), dtype=fr.dtype)
        self.xs[:, :, -1] = 1
        rows = self.xs.reshape(S * N, width)
        if fr.block:
            self.xw = np.empty((S, N, G, D, H), dtype=fr.dtype)
            self.products = [(rows, Wx, self.xw.reshape(S * N, G * D * H))]
            self.slots = [self.xs[:, :, d * I : (d + 1) * I] for d in range(D)]
        else:
            xw = np.empty((D, S, N, G, H), dtype=fr.dtype)
            self.xw = xw.transpose(1, 2, 3, 0, 4)
            self.products = [(rows, Wx[d], xw[d].reshape(S * N, G * H)) for d in range(D)]
            self.slots = [self.xs[:, :, :I]] * D

    def __call__(self, fr: _Frame) -> np.ndarray:
        # np.matmul: np.dot took twice as long on this many rows (13.8 against 6.4 µs, 16 x 33 x 192)
        if len(self.products) == 1:
            for d, slot in enumerate(self.slots):
                slot[...] = fr._reading_order(d)
            np.matmul(*self.products[0])
        else:
            for d, (slot, product) in enumerate(zip(self.slots, self.products)):
                slot[...] = fr._reading_order(d)
                np.matmul(*product)
        return self.xw


def _kept(table: dict, limit: int, W, R, B, key: tuple, make, keep=lambda value: True):
    """``make()``, kept in ``table`` under ``key`` while W, R and B live, where they are
    read-only arrays (B also None: a .pte's constants) and ``keep(value)``; a hit costs about
    2 µs of checks."""
    if W.flags.writeable or R.flags.writeable or (B is not None and B.flags.writeable):
        return make()
    full = (id(W), id(R), id(B), *key)
    hit = table.get(full)
    if hit is not None:
        (w, r, b), value = hit
        if w() is W and r() is R and (b() if b is not None else None) is B:
            return value
    value = make()
    if keep(value):
        if len(table) >= limit:
            table.clear()

        def drop(_, full=full):  # the weights are gone: so is what was kept for them
            table.pop(full, None)

        refs = (weakref.ref(W, drop), weakref.ref(R, drop), weakref.ref(B, drop) if B is not None else None)
        table[full] = (refs, value)
    return value


# Derived weights of read-only arrays: key → (weak references to the arrays, derived).
_DERIVED: dict[tuple, tuple] = {}
_DERIVED_LIMIT = 64


def _weights(op, W, R, B, H: int, dtype, halve: bool):
    """Wt [dirs, input, G*H], Rt [dirs, H, G*H] (C-contiguous), Wb and Rb [dirs, G*H], with the
    sigmoid gates' columns halved when ``halve``."""
    G = _GATES[op]
    scale = np.ones(G * H, dtype=dtype)
    if halve:
        for g in _SIGMOID_GATES[op]:
            scale[g * H : (g + 1) * H] = 0.5
    W = np.asarray(W, dtype=dtype)
    R = np.asarray(R, dtype=dtype)
    Wt = np.multiply(W.transpose(0, 2, 1), scale, out=np.empty((W.shape[0], W.shape[2], G * H), dtype))
    Rt = np.multiply(R.transpose(0, 2, 1), scale, out=np.empty((R.shape[0], H, G * H), dtype))
    if B is None:
        Wb = Rb = np.zeros((W.shape[0], G * H), dtype=dtype)
    else:
        B = np.asarray(B, dtype=dtype)
        Wb, Rb = B[:, : G * H] * scale, B[:, G * H :] * scale
    return Wt, Rt, Wb, Rb


def _recurrent_weights(Rt: np.ndarray, block: bool, bias_row=None) -> np.ndarray:
    """The recurrent product's matrix: for the block product [dirs * H (+ 1), C * dirs * H],
    block-diagonal with gate-major columns (and a last row ``bias_row`` [dirs, H] under the last
    gate, against the constant 1 after each state); else Rt [dirs, H, C * H] itself."""
    if not block:
        return np.ascontiguousarray(Rt)
    D, H, CH = Rt.shape
    C = CH // H
    out = np.zeros((D * H + (bias_row is not None), C, D, H), dtype=Rt.dtype)
    for d in range(D):
        out[d * H : (d + 1) * H, :, d] = Rt[d].reshape(H, C, H)
    if bias_row is not None:
        out[D * H, C - 1] = bias_row
    return out.reshape(-1, C * D * H)


def _input_weights(Wt: np.ndarray, bias: np.ndarray, H: int, block: bool) -> np.ndarray:
    """The input projection's matrix (Frame.projection). Block: [dirs * input + 1, G * dirs * H],
    each direction's W (rows of its inputs) and bias (the last row) under its own gate-major
    columns, zeros elsewhere. Stacked: [dirs, input + 1, G * H], each W with its bias under it."""
    D, I, GH = Wt.shape
    if not block:
        return np.concatenate([Wt, bias[:, None, :]], axis=1)
    G = GH // H
    Wx = np.zeros((D * I + 1, G, D, H), dtype=Wt.dtype)
    for d in range(D):
        Wx[d * I : (d + 1) * I, :, d] = Wt[d].reshape(I, G, H)
        Wx[D * I, :, d] = bias[d].reshape(G, H)
    return Wx.reshape(D * I + 1, G * D * H)


def _derive(op, fr: _Frame, W, R, B, plain: bool, linear_before_reset: int = 0) -> tuple:
    """What a call derives from its weights alone (kept for constants): (Wx (_input_weights),
    Rt, the candidate's recurrent bias [dirs, H] (GRU), the recurrent products' matrices)."""
    H, block = fr.hidden, fr.block

    def make():
        Wt, Rt, Wb, Rb = _weights(op, W, R, B, H, fr.dtype, plain)
        bias = Wb + Rb
        Rb_n = Rb[:, 2 * H :] if op == "GRU" else None
        if op == "GRU" and linear_before_reset:
            bias[:, 2 * H :] = Wb[:, 2 * H :]  # inside the reset product
        if not plain:
            products = ()
        elif op == "GRU" and not linear_before_reset:
            products = (
                _recurrent_weights(Rt[..., : 2 * H], block),
                _recurrent_weights(Rt[..., 2 * H :], block),
            )
        elif op == "GRU":
            products = (_recurrent_weights(Rt, block, Rb_n if block else None),)
        else:
            order = _PLAIN_ORDER.get(op)
            if order is not None:  # gate blocks permuted (columns of Wt, Rt and the bias)
                G = len(order)
                Wt = Wt.reshape(*Wt.shape[:-1], G, H)[..., order, :].reshape(Wt.shape)
                Rt = Rt.reshape(*Rt.shape[:-1], G, H)[..., order, :].reshape(Rt.shape)
                bias = bias.reshape(-1, G, H)[:, order].reshape(bias.shape)
            products = (_recurrent_weights(Rt, block),)
        return (_input_weights(Wt, bias, H, block), Rt, Rb_n, *products)

    return _kept(
        _DERIVED, _DERIVED_LIMIT, W, R, B, (op, H, fr.dtype, plain, linear_before_reset, block), make
    )


# The plain LSTM step's gate order, from ONNX's (i, o, f, c): o, i, f, c, so that [i, f] and
# [c, the cell state kept after it] are slices one multiply takes (_lstm).
_PLAIN_ORDER = {"LSTM": (1, 0, 2, 3)}
