"""Recurrent-net kernels: RNN, GRU and LSTM, every direction advanced by one set of numpy calls per step.

At batch 1 a step is a product of a row by the recurrent weights and a few dozen to a few hundred
values of gate arithmetic, so what a step costs is the number of numpy calls it makes (each about
0.5-1 µs on the 2-core test machine, against a product of 1-10 µs below hidden size 128). The
frame (``_Frame``) therefore does once per call all it can:

- Layout 0 inside (X [seq, batch, input]); layout 1 is transposed on the way in and out. Shapes
  and sequence lengths are checked once per call. Y and the final states are written into the
  .pte arena's views where it offers them; an output no one reads is not computed.
- States are rows [batch, directions * hidden], kept as a history [seq + 1, ...]; gates are
  gate-major [batch, gates, directions, hidden], so that a gate of every direction is one
  contiguous slice at batch 1 and the directions of a bidirectional net run together: a
  reverse direction's inputs are put in the order it reads them (per batch entry where
  sequence_lens cut a sequence short), so step k of every direction reads ``xw[k]`` and writes
  ``hs[k + 1]``.
- The input projection of every step is one product up front, biases in (a last row of the
  matrix against a column of ones), landing gate-major (``_Frame.projection``).
- The recurrent product is one np.dot per step: by a block-diagonal matrix (the directions'
  blocks on its diagonal) up to directions * hidden = 64, else stacked per direction
  (``_BLOCK_MAX``, with its measurements).
- Gates are views of preallocated buffers; activations run in place with positional ufunc
  outputs (a keyword ``out=`` costs a parse per call); constants are 0-d arrays (a Python float
  operand costs a conversion per call, about twice the call); nothing is allocated per step.
- With ONNX's default activations, the columns of the sigmoid gates in W, R and the biases are
  halved once (exact in binary floating point), so that one tanh over all gates gives every
  activation: σ(x) = (1 + tanh(x / 2)) / 2 is an in-place multiply-add on the sigmoid gates'
  slice (the tanh form never overflows, unlike 1 / (1 + exp(-x))). Calls per step (for all
  directions): RNN 3, LSTM 9 (``_lstm``: one multiply gives i·c̃ and f·c), GRU 11 (12 with
  linear_before_reset 0, whose candidate needs the reset gate before its product: two
  dependent products per step are the minimum there, or for a stacked product); the previous
  kernels made 21 (LSTM) and 23 (GRU) per step and direction.
- Steps go on past a short sequence's end (their values unused; floating-point warnings from
  them are ignored): final states are gathered from the history afterwards and Y is zeroed past
  each end, instead of masking every step.
- Derived weights (halved, permuted, transposed, block-diagonal) of read-only inputs (a .pte's
  constants) are kept between calls, keyed by the arrays' identity (checked by weak reference).
- In a .pte method, a plain call whose input and output types are known at load (or in a shape
  plan) is a prepared call (``_PreparedCall``, runtime/steps.py's _PreparedOutputsStep): frame,
  checks and weights once, its buffers kept by the call per thread, Y and the final states
  copied into the arena's views by copies made once per set of views, outputs no one reads left
  out. The benchmark times runs after a pause, where every piece of Python and every first
  touch of numpy costs several times what it does in a loop: in paired rounds the geometric mean
  went 2.00-2.08 → 1.79-1.84, lstm_model 2.84-3.08 → 2.48-2.64, gru_model 2.90-3.08 → 2.50-2.54.

Measured with benchmarks/recurrent_vs_onnxruntime.py and the kernel alone (min of runs; before
these kernels → now): LSTM bidirectional, 16 steps, hidden 24 818 → 141 µs; forward hidden 128
786 → 236 µs; GRU (linear_before_reset 1) 16 steps, hidden 16 357 → 131 µs.

Other activations, clip, peepholes and the LSTM's coupled input-forget gate take a general step
in the same frame: per direction, the activation functions of the ONNX spec, allocating.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import threading
import weakref

import numpy as np

from offload.errors import OffloadError, ShapeError

from . import kernel, prepared_outputs
from ._util import out_for, unsupported


def _sigmoid(x):
    # The tanh form never overflows, unlike 1 / (1 + exp(-x)) for large negative x.
    return 0.5 * (1.0 + np.tanh(0.5 * x))


# name (lower case) → (fn(x, alpha, beta), default alpha, default beta); None where unused.
_ACTIVATIONS = {
    "relu": (lambda x, a, b: np.maximum(x, 0), None, None),
    "tanh": (lambda x, a, b: np.tanh(x), None, None),
    "sigmoid": (lambda x, a, b: _sigmoid(x), None, None),
    "affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0), 1.0, None),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * (np.exp(np.minimum(x, 0)) - 1)), 1.0, None),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), None, None),
    "softplus": (lambda x, a, b: np.logaddexp(0, x), None, None),
}

_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}

# Per op: gates, default activations per direction (lower case), the gates (in ONNX's order)
# that the first activation (a sigmoid by default) applies to.
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULTS = {"RNN": ("tanh",), "GRU": ("sigmoid", "tanh"), "LSTM": ("sigmoid", "tanh", "tanh")}
_SIGMOID_GATES = {"RNN": (), "GRU": (0, 1), "LSTM": (0, 1, 2)}  # GRU z, r; LSTM i, o, f


def _activations(op, names, alphas, betas, num_dirs: int) -> list[list]:
    """Per direction, the op's activation functions with their alpha/beta bound."""
    per_dir = len(_DEFAULTS[op])
    _check_count(op, names, num_dirs)
    alphas, betas = list(alphas or []), list(betas or [])
    bound = []
    for name in names:
        entry = _ACTIVATIONS.get(name.lower())
        if entry is None:
            raise unsupported(op, f"activation '{name}'")
        fn, alpha, beta = entry
        # Alphas and betas are consumed in order by the functions that take them.
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        bound.append(lambda x, fn=fn, a=alpha, b=beta: fn(x, a, b))
    return [bound[d * per_dir : (d + 1) * per_dir] for d in range(num_dirs)]


def _is_default(op, names) -> bool:
    if names is None:
        return True
    default = _DEFAULTS[op]
    return all(n.lower() == default[k % len(default)] for k, n in enumerate(names))


def _clipper(clip):
    if clip is None:
        return lambda x: x
    return lambda x: np.clip(x, -clip, clip)


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
        S, N = self.seq, self.batch
        lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
        if lens.shape != (N,) or lens.min(initial=0) < 0 or lens.max(initial=0) > S:
            raise ShapeError(
                f"{self.op}: sequence_lens {lens.tolist()} for batch {N} and sequence length {S}"
            )
        if (lens != S).any():
            self.lens = lens

    def state(self, init, name: str) -> np.ndarray:
        """An initial state in layout 0 ([directions, batch, hidden]), zeros when omitted."""
        shape = (self.dirs, self.batch, self.hidden)
        if init is None:
            return np.zeros(shape, dtype=self.dtype)
        init = np.asarray(init, dtype=self.dtype)
        init = init.transpose(1, 0, 2) if self.layout else init
        if init.shape != shape:
            raise ShapeError(
                f"{self.op}: {name} has shape {list(init.shape)} in layout 0, expected {list(shape)}"
            )
        return init

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

# Buffers and views of plain calls (_Plain), per thread and shape: building them took 13 µs at
# batch 1, and about 100 µs with the caches cold, as after a pause between runs (a run's first
# numpy call alone then takes 40 µs). Only workspaces up to _WORKSPACE_BYTES are kept.
_WORKSPACES: dict[tuple, tuple] = {}
_WORKSPACE_LIMIT = 32
_WORKSPACE_BYTES = 4 << 20


def _workspace(fr: _Frame, W, R, B, key: tuple, make):
    """The plain call's _Plain for this thread and these shapes (``make()`` on a miss)."""
    shapes = (threading.get_ident(), fr.seq, fr.batch, fr.x.shape[2], fr.dtype, *key)
    return _kept(
        _WORKSPACES, _WORKSPACE_LIMIT, W, R, B, shapes, make, lambda ws: ws.nbytes <= _WORKSPACE_BYTES
    )


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

_HALF = {np.float32: np.array(0.5, np.float32), np.float64: np.array(0.5, np.float64)}


def _check_count(op, names, D: int) -> None:
    if len(names) != len(_DEFAULTS[op]) * D:
        raise unsupported(op, f"{len(names)} activations for {D} direction(s)")


class _Plain:
    """A plain call's buffers and views for one shape (kept per thread by _workspace): the
    projection, the history of hidden states ``hs`` (with ``extra`` columns of ones), and what
    a subclass's step loop (``run``) needs."""

    def __init__(self, fr: _Frame, Wx: np.ndarray, extra: int = 0):
        self.projection = _Projection(fr, Wx)
        DH = fr.dirs * fr.hidden
        self.hs = np.empty((fr.seq + 1, fr.batch, DH + extra), dtype=fr.dtype)
        if extra:
            self.hs[:, :, DH:] = 1
        self.h0 = self.hs[0, :, :DH]
        self.inputs = fr.product_inputs(self.hs)
        self.half = _HALF[fr.dtype]
        self.buffers = [self.projection.xs, self.projection.xw, self.hs]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.buffers)


class _RNNSteps(_Plain):
    """Tanh, no clip: 3 calls per step (product, add, tanh); the block product straight into
    the next state."""

    def __init__(self, fr: _Frame, Wx, R_mm):
        super().__init__(fr, Wx)
        self.R, self.product, self.block = R_mm, fr.product, fr.block
        xw = self.projection.xw
        if fr.block:
            self.xs_k, self.outs, self.results = (
                xw.reshape(fr.seq, fr.batch, fr.dirs * fr.hidden),
                self.hs[1:],
                self.hs[1:],
            )
        else:
            out, result = fr.product_output(1)
            self.xs_k, self.outs, self.results = (
                xw[:, :, 0],
                itertools.repeat(out),
                itertools.repeat(result[:, 0]),
            )
            self.buffers.append(out)
        self.hs_k = self.hs[1:] if fr.block else fr.steps(self.hs)[1:]

    def run(self, fr: _Frame) -> np.ndarray:
        self.projection(fr)
        matmul, add, tanh, R = self.product, np.add, np.tanh, self.R
        for x_k, h_in, out, result, h in zip(self.xs_k, self.inputs, self.outs, self.results, self.hs_k):
            matmul(h_in, R, out)
            add(result, x_k, h)
            tanh(h, h)
        return self.hs


class _GRUSteps(_Plain):
    """Default activations, linear_before_reset 1: z, r and the candidate's h·Rh + Rbh in one
    product (the bias a row of the block product's matrix against the ones after each state;
    ``Rb_n`` added after a stacked one): 11 calls per step (12 stacked). z, r columns halved
    (σ by tanh)."""

    def __init__(self, fr: _Frame, Wx, R_mm, Rb_n):
        super().__init__(fr, Wx, extra=1 if fr.block else 0)
        N, DH = fr.batch, fr.dirs * fr.hidden
        self.R, self.product, self.Rb_n = R_mm, fr.product, None if fr.block else Rb_n
        self.out, product = fr.product_output(3)
        gates4 = fr.gate_buffer(product)
        gates = gates4.reshape(N, 3 * DH)
        self.views = (
            gates[:, : 2 * DH], gates[:, :DH], gates[:, DH : 2 * DH], gates[:, 2 * DH :],
            gates4[:, :2], gates4[:, 2], product[:, :2], product[:, 2],
        )  # fmt: skip
        xw = self.projection.xw
        self.x_zr, self.x_n = xw[:, :, :2], xw[:, :, 2]
        self.h_prev, self.h_next = self.hs[:-1, :, :DH], self.hs[1:, :, :DH]
        self.buffers += [self.out, gates4]

    def run(self, fr: _Frame) -> np.ndarray:
        self.projection(fr)
        zr, z, r, n, zr4, n4, p_zr, p_n = self.views
        matmul, out, R, Rb_n, half = self.product, self.out, self.R, self.Rb_n, self.half
        add, subtract, multiply, tanh = np.add, np.subtract, np.multiply, np.tanh
        for x_zr, x_n, h_in, h_prev, h in zip(self.x_zr, self.x_n, self.inputs, self.h_prev, self.h_next):
            matmul(h_in, R, out)
            add(p_zr, x_zr, zr4)
            if Rb_n is not None:
                add(p_n, Rb_n, n4)
            tanh(zr, zr)
            multiply(zr, half, zr)
            add(zr, half, zr)
            multiply(n, r, n)
            add(n4, x_n, n4)
            tanh(n, n)
            subtract(h_prev, n, h)  # h' = n + z (h - n)
            multiply(h, z, h)
            add(h, n, h)
        return self.hs


class _GRU0Steps(_Plain):
    """Default activations, linear_before_reset 0: the candidate's product takes r ⊙ h, so it
    waits for the z, r product: two products and 12 calls per step."""

    def __init__(self, fr: _Frame, Wx, R_zr, R_n):
        super().__init__(fr, Wx)
        N, DH = fr.batch, fr.dirs * fr.hidden
        self.R_zr, self.R_n, self.product = R_zr, R_n, fr.product
        zr_out, p_zr = fr.product_output(2)
        zr4 = fr.gate_buffer(p_zr)
        zr = zr4.reshape(N, 2 * DH)
        n_out, p_n = fr.product_output(1)
        n4 = fr.gate_buffer(p_n)
        rh = np.empty((N, DH), dtype=fr.dtype)
        self.views = (zr_out, p_zr, zr4, zr, zr[:, :DH], zr[:, DH:], n_out, p_n, n4, n4.reshape(N, DH), rh)
        self.rh_in = fr.product_inputs(rh)
        xw = self.projection.xw
        self.x_zr, self.x_n = xw[:, :, :2], xw[:, :, 2:]
        self.buffers += [zr_out, zr4, n_out, n4, rh]

    def run(self, fr: _Frame) -> np.ndarray:
        self.projection(fr)
        zr_out, p_zr, zr4, zr, z, r, n_out, p_n, n4, n, rh = self.views
        matmul, R_zr, R_n, rh_in, half = self.product, self.R_zr, self.R_n, self.rh_in, self.half
        add, subtract, multiply, tanh = np.add, np.subtract, np.multiply, np.tanh
        hs = self.hs
        for x_zr, x_n, h_in, h_prev, h in zip(self.x_zr, self.x_n, self.inputs, hs, hs[1:]):
            matmul(h_in, R_zr, zr_out)
            add(p_zr, x_zr, zr4)
            tanh(zr, zr)
            multiply(zr, half, zr)
            add(zr, half, zr)
            multiply(r, h_prev, rh)
            matmul(rh_in, R_n, n_out)
            add(p_n, x_n, n4)
            tanh(n, n)
            subtract(h_prev, n, h)  # h' = n + z (h - n)
            multiply(h, z, h)
            add(h, n, h)
        return hs


class _LSTMSteps(_Plain):
    """Default activations, no peepholes, clip or coupled gate: 9 calls per step. Gate order
    o, i, f, c (_PLAIN_ORDER), o, i, f columns halved (σ by tanh); the cell state kept in the
    gate buffer after c (``c``), so that one multiply gives [i·c̃, f·c] (one call fewer than
    two multiplies)."""

    def __init__(self, fr: _Frame, Wx, R_mm):
        super().__init__(fr, Wx)
        N, D, H = fr.batch, fr.dirs, fr.hidden
        DH = D * H
        buf = np.empty((N, 5 * DH), dtype=fr.dtype)
        gates = buf[:, : 4 * DH]
        gates4 = gates.reshape(N, 4, D, H)
        if fr.block:
            out, product = gates, gates4
        else:
            out, product = fr.product_output(4)
            self.buffers.append(out)
        pair = np.empty((N, 2 * DH), dtype=fr.dtype)
        self.c = buf[:, 4 * DH :]
        self.views = (
            out, product, gates4, gates, buf[:, : 3 * DH], buf[:, :DH], buf[:, DH : 3 * DH],
            buf[:, 3 * DH :], self.c, pair, pair[:, :DH], pair[:, DH:],
        )  # fmt: skip
        self.R = R_mm
        # np.dot wants a C-contiguous output: the gates' slice of the buffer is one at batch 1.
        self.product = fr.product if N == 1 else np.matmul
        self.buffers += [buf, pair]

    def run(self, fr: _Frame, cs) -> np.ndarray:
        """Runs the steps from ``hs[0]`` and ``c``; ``cs``, where given, gets every step's cell
        state after its initial one."""
        xw = self.projection(fr)
        out, product, gates4, gates, oif, o, i_f, g_c, c, pair, ig, fc = self.views
        matmul, R, half = self.product, self.R, self.half
        add, multiply, tanh, copyto = np.add, np.multiply, np.tanh, np.copyto
        keeps = cs[1:] if cs is not None else itertools.repeat(None)
        for x_k, h_in, h, keep in zip(xw, self.inputs, self.hs[1:], keeps):
            matmul(h_in, R, out)
            add(product, x_k, gates4)
            tanh(gates, gates)
            multiply(oif, half, oif)
            add(oif, half, oif)
            multiply(i_f, g_c, pair)
            add(ig, fc, c)
            tanh(c, h)
            multiply(h, o, h)
            if keep is not None:
                copyto(keep, c)
        return self.hs


def _steps(op: str, linear_before_reset: int, fr: _Frame, derived: tuple) -> _Plain:
    """A plain call's buffers and step loop for ``fr``'s shapes and the derived weights (_derive)."""
    Wx, _, Rb_n, *products = derived
    if op == "LSTM":
        return _LSTMSteps(fr, Wx, *products)
    if op == "RNN":
        return _RNNSteps(fr, Wx, *products)
    if linear_before_reset:
        return _GRUSteps(fr, Wx, *products, Rb_n)
    return _GRU0Steps(fr, Wx, *products)


def _run_plain(fr: _Frame, steps: _Plain, initial_h) -> tuple:
    """A plain RNN or GRU call: (Y, Y_h), None for an output no one reads."""
    with fr.quiet():
        fr.rows(initial_h, "initial_h", steps.h0)
        hs = steps.run(fr)
    return fr.sequence(hs), fr.final(1, hs)


def _run_lstm(fr: _Frame, steps: _LSTMSteps, initial_h, initial_c) -> tuple:
    """A plain LSTM call: (Y, Y_h, Y_c), None for an output no one reads."""
    with fr.quiet():
        fr.rows(initial_h, "initial_h", steps.h0)
        fr.rows(initial_c, "initial_c", steps.c)
        # The cell states' history only where sequence_lens asks for states before the end.
        cs = fr.history(fr.state(initial_c, "initial_c")) if fr.lens is not None else None
        hs = steps.run(fr, cs)
    return fr.sequence(hs), fr.final(1, hs), fr.final(2, cs, steps.c)


@kernel("RNN")
def rnn(
    ctx,
    X,
    W,
    R,
    B=None,
    sequence_lens=None,
    initial_h=None,
    *,
    activation_alpha,
    activation_beta,
    activations,
    clip,
    direction,
    hidden_size,
    layout,
):
    fr = _Frame(ctx, "RNN", X, W, R, B, sequence_lens, hidden_size, layout, direction)
    D = fr.dirs
    if D == 1 and activations == ["Tanh", "Tanh"]:
        activations = ["Tanh"]  # the schema's default names both directions of a bidirectional net
    names = activations or ["Tanh"] * D
    _check_count("RNN", names, D)
    plain = clip is None and _is_default("RNN", activations)
    derived = _derive("RNN", fr, W, R, B, plain)
    if plain:
        steps = _workspace(fr, W, R, B, ("RNN",), lambda: _steps("RNN", 0, fr, derived))
        return _run_plain(fr, steps, initial_h)
    Wx, Rt = derived[:2]
    with fr.quiet():
        hs = fr.history(fr.state(initial_h, "initial_h"))
        acts = _activations("RNN", names, activation_alpha, activation_beta, D)
        _rnn_general(fr, fr.projection(Wx), hs, Rt, acts, _clipper(clip))
    return fr.sequence(hs), fr.final(1, hs)


def _rnn_general(fr: _Frame, xw, hs, Rt, acts, clipped):
    """Any activation and clip, per direction."""
    h4 = fr.steps(hs)
    for k in range(fr.seq):
        for d, (f,) in enumerate(acts):
            h4[k + 1, :, d] = f(clipped(xw[k, :, 0, d] + h4[k, :, d] @ Rt[d]))


@kernel("GRU")
def gru(
    ctx,
    X,
    W,
    R,
    B=None,
    sequence_lens=None,
    initial_h=None,
    *,
    activation_alpha,
    activation_beta,
    activations,
    clip,
    direction,
    hidden_size,
    layout,
    linear_before_reset,
):
    fr = _Frame(ctx, "GRU", X, W, R, B, sequence_lens, hidden_size, layout, direction)
    D = fr.dirs
    names = activations or ["Sigmoid", "Tanh"] * D
    _check_count("GRU", names, D)
    plain = clip is None and _is_default("GRU", activations)
    lbr = 1 if linear_before_reset else 0
    derived = _derive("GRU", fr, W, R, B, plain, lbr)
    if plain:
        steps = _workspace(fr, W, R, B, ("GRU", lbr), lambda: _steps("GRU", lbr, fr, derived))
        return _run_plain(fr, steps, initial_h)
    Wx, Rt, Rb_n = derived[:3]
    with fr.quiet():
        hs = fr.history(fr.state(initial_h, "initial_h"))
        acts = _activations("GRU", names, activation_alpha, activation_beta, D)
        _gru_general(fr, fr.projection(Wx), hs, Rt, Rb_n, acts, _clipper(clip), lbr)
    return fr.sequence(hs), fr.final(1, hs)


def _gru_general(fr: _Frame, xw, hs, Rt, Rb_n, acts, clipped, linear_before_reset):
    """Any activations and clip: the ONNX formulas per direction, unhalved weights."""
    h4, H = fr.steps(hs), fr.hidden
    for k in range(fr.seq):
        for d, (f, g) in enumerate(acts):
            x_k, h_d = xw[k, :, :, d], h4[k, :, d]
            zr = f(clipped(x_k[:, :2].reshape(-1, 2 * H) + h_d @ Rt[d, :, : 2 * H]))
            z, r = zr[:, :H], zr[:, H:]
            if linear_before_reset:
                cand = g(clipped(x_k[:, 2] + r * (h_d @ Rt[d, :, 2 * H :] + Rb_n[d])))
            else:
                cand = g(clipped(x_k[:, 2] + (r * h_d) @ Rt[d, :, 2 * H :]))
            h4[k + 1, :, d] = (1 - z) * cand + z * h_d


@kernel("LSTM")
def lstm(
    ctx,
    X,
    W,
    R,
    B=None,
    sequence_lens=None,
    initial_h=None,
    initial_c=None,
    P=None,
    *,
    activation_alpha,
    activation_beta,
    activations,
    clip,
    direction,
    hidden_size,
    input_forget,
    layout,
):
    fr = _Frame(ctx, "LSTM", X, W, R, B, sequence_lens, hidden_size, layout, direction)
    D, H = fr.dirs, fr.hidden
    names = activations or ["Sigmoid", "Tanh", "Tanh"] * D
    _check_count("LSTM", names, D)
    if P is not None and tuple(P.shape) != (D, 3 * H):
        raise ShapeError(f"LSTM: P has shape {list(P.shape)}, expected {[D, 3 * H]}")
    plain = P is None and clip is None and not input_forget and _is_default("LSTM", activations)
    derived = _derive("LSTM", fr, W, R, B, plain)
    if plain:
        steps = _workspace(fr, W, R, B, ("LSTM",), lambda: _steps("LSTM", 0, fr, derived))
        return _run_lstm(fr, steps, initial_h, initial_c)
    Wx, Rt = derived[:2]
    with fr.quiet():
        hs = fr.history(fr.state(initial_h, "initial_h"))
        cs = fr.history(fr.state(initial_c, "initial_c"))
        acts = _activations("LSTM", names, activation_alpha, activation_beta, D)
        P = np.zeros((D, 3 * H), dtype=fr.dtype) if P is None else np.asarray(P, dtype=fr.dtype)
        _lstm_general(fr, fr.projection(Wx), hs, cs, Rt, P, acts, _clipper(clip), input_forget)
    return fr.sequence(hs), fr.final(1, hs), fr.final(2, cs)


def _lstm_general(fr: _Frame, xw, hs, cs, Rt, P, acts, clipped, input_forget):
    """Any activations, clip, peepholes (i, o, f) and coupled gate: the ONNX formulas per direction."""
    h4, c4, H = fr.steps(hs), fr.steps(cs), fr.hidden
    for k in range(fr.seq):
        for d, (f, g, h_act) in enumerate(acts):
            gd = xw[k, :, :, d].reshape(-1, 4 * H) + h4[k, :, d] @ Rt[d]
            c = c4[k, :, d]
            p_i, p_o, p_f = P[d, :H], P[d, H : 2 * H], P[d, 2 * H :]
            i = f(clipped(gd[:, :H] + p_i * c))
            forget = 1 - i if input_forget else f(clipped(gd[:, 2 * H : 3 * H] + p_f * c))
            c_new = forget * c + i * g(clipped(gd[:, 3 * H :]))
            o = f(clipped(gd[:, H : 2 * H] + p_o * c_new))
            c4[k + 1, :, d] = c_new
            h4[k + 1, :, d] = o * h_act(c_new)


# ---- prepared calls (runtime/steps.py's _PreparedOutputsStep) ----------------------------------


class _Outputs:
    """The arena views a prepared call writes its outputs into, offered to the frame as a
    kernel's context offers them (None for an output no one reads)."""

    __slots__ = ("views",)

    def __init__(self):
        self.views: list = []

    def output_wanted(self, i: int) -> bool:
        return i < len(self.views) and self.views[i] is not None

    def out(self, i: int):
        return self.views[i] if i < len(self.views) else None


class _Workspace:
    """A prepared call's own frame (X, sequence lengths and output views set per call), step
    buffers and the derived weights they were made for, per thread; for the output views of
    ``key`` (their ids), the copies that write them (``_PreparedCall._outputs``)."""

    __slots__ = ("copies", "derived", "frame", "h0_zero", "key", "outputs", "results", "steps")


class _PreparedCall:
    """A plain RNN, GRU or LSTM call prepared for its inputs' types: the frame (shapes, checks of
    X and the attributes) made once; the derived weights of the last read-only W, R and B it met
    (a .pte's constants, the same arrays at every run: an identity check instead of _kept's
    lookup) and, per thread, the step buffers kept by the call itself (_Workspace). Where every
    sequence runs the whole length, the outputs that steps read are copied from the buffers
    into their arena views by copies made once per set of views, and a zero initial state
    (omitted) is not written again while the last call's was one too (no step writes it); else
    the kernel's way with this frame (``_run_lstm``, ``_run_plain``). Initial states and sequence
    lengths are read at every call, checked as the kernel checks them (a ShapeError here sends
    the method to the kernel, which raises it). The same step loops, and copies of the same
    values, as the kernel's: the same bits. What this spares per call is Python (each piece of
    it some µs after a pause, as the benchmark times runs): the frame, the kept-weights and
    workspace lookups, the method's context and storing of each result, the outputs' checks."""

    def __init__(self, op: str, linear_before_reset: int, frame: _Frame):
        self.op, self.linear_before_reset, self.frame = op, linear_before_reset, frame
        self.shape, self.dtype = frame.X.shape, frame.X.dtype
        self.kept: tuple | None = None  # (W, R, B, derived weights)
        self.local = threading.local()

    def __call__(self, outs, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None):
        if X.shape != self.shape or X.dtype != self.dtype or P is not None:
            raise TypeError(f"{self.op}: X {X.dtype}{list(X.shape)}, P or its type not the prepared ones")
        kept = self.kept
        if kept is not None and kept[0] is W and kept[1] is R and kept[2] is B:
            derived = kept[3]
        else:
            derived = self._derive(W, R, B)
        ws = getattr(self.local, "ws", None)
        if ws is None or ws.derived is not derived:
            ws = self._workspace(derived)
        fr, steps = ws.frame, ws.steps
        fr.X = X
        fr.x = X.transpose(1, 0, 2) if fr.layout else X
        if sequence_lens is None:
            fr.lens = None
        else:
            fr.sequence_lengths(sequence_lens)
        if fr.lens is not None or fr.seq == 0:
            ws.outputs.views, ws.h0_zero = outs, False
            if self.op == "LSTM":
                return _run_lstm(fr, steps, initial_h, initial_c)
            return _run_plain(fr, steps, initial_h)
        if initial_h is not None:
            ws.h0_zero = False
            fr.rows(initial_h, "initial_h", steps.h0)
        elif not ws.h0_zero:
            steps.h0[...] = 0
            ws.h0_zero = True
        if self.op == "LSTM":
            if initial_c is None:
                steps.c[...] = 0
            else:
                fr.rows(initial_c, "initial_c", steps.c)
            steps.run(fr, None)
        else:
            steps.run(fr)
        if tuple(map(id, outs)) != ws.key:
            self._outputs(ws, outs)
        for dst, src in ws.copies:
            np.copyto(dst, src)
        return ws.results

    def _outputs(self, ws: _Workspace, outs: list) -> None:
        """The copies that write ``outs`` from the buffers (as _Frame.sequence and final do
        where every sequence runs the whole length), and the results to return."""
        fr, hs = ws.frame, ws.steps.hs
        S, N, D, H = fr.seq, fr.batch, fr.dirs, fr.hidden
        h4 = fr.steps(hs)
        shapes = [(S, D, N, H), (D, N, H), (D, N, H)]
        copies = []
        for i, view in enumerate(outs):
            if view is None:
                continue
            shape = shapes[i]
            if fr.layout:
                perm, back = _TO_LAYOUT_1[len(shape)]
                if view.shape != tuple(shape[p] for p in perm):
                    raise TypeError(f"{self.op}: output {i} of shape {view.shape}")
                out = view.transpose(back)
            else:
                out = view
            if out.shape != shape or view.dtype != fr.dtype or not view.flags.c_contiguous:
                raise TypeError(f"{self.op}: output {i} {view.dtype}{list(view.shape)}")
            if i == 0:
                for d, reverse in enumerate(fr.reverses):
                    copies.append((out[:, d], h4[S:0:-1, :, d] if reverse else h4[1:, :, d]))
            else:
                rows = hs[S] if i == 1 else ws.steps.c
                copies.append((out, rows[:, : D * H].reshape(N, D, H).transpose(1, 0, 2)))
        ws.copies, ws.results, ws.key = copies, tuple(outs), tuple(map(id, outs))

    def _derive(self, W, R, B) -> tuple:
        self.frame.check_weights(W, R, B)
        derived = _derive(self.op, self.frame, W, R, B, True, self.linear_before_reset)
        if not (W.flags.writeable or R.flags.writeable or (B is not None and B.flags.writeable)):
            self.kept = (W, R, B, derived)
        return derived

    def _workspace(self, derived: tuple) -> _Workspace:
        ws = _Workspace()
        ws.derived = derived
        ws.frame = fr = copy.copy(self.frame)
        fr.ctx = ws.outputs = _Outputs()
        ws.steps = _steps(self.op, self.linear_before_reset, fr, derived)
        ws.h0_zero, ws.key = False, None
        self.local.ws = ws
        return ws


def _plain_attrs(op: str, attrs: dict, dirs: int) -> bool:
    """Whether a call with these attributes takes the plain steps (as the kernels decide)."""
    names = attrs.get("activations")
    if op == "RNN" and dirs == 1 and names == ["Tanh", "Tanh"]:
        names = None
    if names is not None and len(names) != len(_DEFAULTS[op]) * dirs:
        return False
    if op == "LSTM" and attrs.get("input_forget"):
        return False
    return attrs.get("clip") is None and _is_default(op, names)


def _prepare(op: str, attrs: dict, inputs: list, outputs: list) -> _PreparedCall | None:
    """The prepared call of a plain ``op`` whose X is float32 or float64 and whose W, R (and B)
    have the shapes X and the attributes ask for, writing outputs of the types it computes; None
    otherwise (the kernel runs, and raises what it finds)."""
    if (
        len(inputs) < 3
        or any(s is None for s in inputs[:3])
        or (op == "LSTM" and len(inputs) > 7 and inputs[7])
    ):
        return None
    (dtype, x_shape), direction = inputs[0], attrs.get("direction")
    if dtype not in (np.float32, np.float64) or len(x_shape) != 3 or direction not in _DIRECTIONS:
        return None
    if not _plain_attrs(op, attrs, len(_DIRECTIONS[direction])):
        return None
    # Views of one element stand in for the weights: the frame checks their shapes.
    W, R, B = (
        None if s is None else np.broadcast_to(np.zeros((), s[0]), s[1])
        for s in (inputs[1], inputs[2], inputs[3] if len(inputs) > 3 else None)
    )
    X = np.zeros(x_shape, dtype)
    try:
        fr = _Frame(None, op, X, W, R, B, None, attrs.get("hidden_size"), attrs.get("layout", 0), direction)
    except OffloadError:
        return None
    S, N, D, H = fr.seq, fr.batch, fr.dirs, fr.hidden
    shapes = [(S, D, N, H), (D, N, H), (D, N, H)]
    for i, spec in enumerate(outputs):
        if spec is None:
            continue
        shape = shapes[i]
        if fr.layout:
            shape = tuple(shape[p] for p in _TO_LAYOUT_1[len(shape)][0])
        if np.dtype(spec[0]) != dtype or tuple(spec[1]) != shape:
            return None
    return _PreparedCall(op, int(bool(attrs.get("linear_before_reset"))) if op == "GRU" else 0, fr)


@prepared_outputs("RNN")
def _rnn_prepared(attrs, inputs, outputs):
    return _prepare("RNN", attrs, inputs, outputs)


@prepared_outputs("GRU")
def _gru_prepared(attrs, inputs, outputs):
    return _prepare("GRU", attrs, inputs, outputs)


@prepared_outputs("LSTM")
def _lstm_prepared(attrs, inputs, outputs):
    return _prepare("LSTM", attrs, inputs, outputs)
