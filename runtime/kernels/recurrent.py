"""Recurrent-net kernels: RNN, GRU and LSTM, every direction advanced by one set of numpy calls per step.

At batch 1 a step is a product of a row by the recurrent weights and a few dozen to a few hundred
values of gate arithmetic, so what a step costs is the number of numpy calls it makes (each about
0.5-1 µs on the 2-core test machine, against a product of 2-10 µs below hidden size 128). The
frame therefore does once per call all it can:

- Layout 0 inside (X [seq, batch, input], states [directions, batch, hidden]); layout 1 is
  transposed on the way in and out. Shapes and sequence lengths are checked once per call.
- The input projection of every step is one product per direction up front, biases added, into
  ``xw`` [seq, directions, batch, gates * hidden]; a reverse direction's rows are stored in the
  order it reads them (per batch entry where sequence_lens cut a sequence short), so that step
  k of every direction reads ``xw[k]`` and writes its hidden state to ``hs[k + 1]``: the
  directions of a bidirectional net run together, one product (stacked) and one set of
  elementwise calls per step for both.
- Gates are views of one preallocated buffer; activations run in place with positional ufunc
  outputs (a keyword ``out=`` costs a parse per call); constants are 0-d arrays (a Python float
  operand costs a conversion per call, about twice the call); nothing is allocated per step.
- With ONNX's default activations, the rows of the sigmoid gates in W, R and the biases are
  halved once per call (exact in binary floating point), so that one tanh over all gates gives
  every activation: σ(x) = (1 + tanh(x / 2)) / 2 is an in-place multiply-add on the sigmoid
  gates' slice (the tanh form never overflows, unlike 1 / (1 + exp(-x))). An LSTM step is 10
  calls, a GRU step 11 (12 with linear_before_reset 0, whose candidate needs the reset gate
  before its product: two dependent products per step are the minimum there); the previous
  kernels made 21 and 23 per step and direction.
- The GRU's recurrent bias of the candidate sits inside the reset product when
  linear_before_reset is set: it rides in the product as a last row of R against a constant
  1 kept after each hidden state in the history (one call fewer per step).
- Steps go on past a short sequence's end (their values unused; floating-point warnings from
  them are ignored): final states are gathered from the history afterwards and Y is zeroed past
  each end, instead of masking every step.
- Derived weights (halved, transposed, contiguous) of read-only inputs (a .pte's constants) are
  kept between calls, keyed by the arrays' identity (checked by weak reference).

Other activations, clip, peepholes and the LSTM's coupled input-forget gate take a general step
in the same frame: per direction, the activation functions of the ONNX spec, allocating.
"""

from __future__ import annotations

import weakref

import numpy as np

from offload.errors import ShapeError

from . import kernel
from ._util import unsupported


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
    if len(names) != per_dir * num_dirs:
        raise unsupported(op, f"{len(names)} activations for {num_dirs} direction(s)")
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
    default = _DEFAULTS[op]
    return all(n.lower() == default[k % len(default)] for k, n in enumerate(names))


def _clipper(clip):
    if clip is None:
        return lambda x: x
    return lambda x: np.clip(x, -clip, clip)


def _compute_dtype(X):
    return np.float64 if X.dtype == np.float64 else np.float32


class _Frame:
    """One call's shapes, checked once: X in layout 0, directions, sequence lengths.

    ``lens`` is None when every sequence runs the whole length (no gathering afterwards)."""

    def __init__(self, op, X, W, R, B, sequence_lens, hidden_size, layout, direction):
        if direction not in _DIRECTIONS:
            raise unsupported(op, f"direction '{direction}'")
        if layout not in (0, 1):
            raise unsupported(op, f"layout {layout}")
        self.op, self.layout = op, layout
        self.reverses = _DIRECTIONS[direction]
        D, G = len(self.reverses), _GATES[op]
        self.dtype = _compute_dtype(X)
        if X.ndim != 3:
            raise ShapeError(
                f"{op}: X has rank {X.ndim}, expected 3 ([seq, batch, input] or, with layout 1, [batch, seq, input])"
            )
        x = np.asarray(X, dtype=self.dtype)
        self.x = x.transpose(1, 0, 2) if layout else x
        S, N, I = self.x.shape
        H = hidden_size if hidden_size is not None else R.shape[-1]
        want = {"W": (W, (D, G * H, I)), "R": (R, (D, G * H, H)), "B": (B, (D, 2 * G * H))}
        for name, (a, shape) in want.items():
            if a is not None and tuple(a.shape) != shape:
                raise ShapeError(
                    f"{op}: {name} has shape {list(a.shape)}, expected {list(shape)} for direction "
                    f"'{direction}', hidden size {H}, input size {I}"
                )
        self.seq, self.batch, self.hidden, self.dirs = S, N, H, D
        self.lens = None
        if sequence_lens is not None:
            lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
            if lens.shape != (N,) or lens.min(initial=0) < 0 or lens.max(initial=0) > S:
                raise ShapeError(f"{op}: sequence_lens {lens.tolist()} for batch {N} and sequence length {S}")
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

    def projection(self, Wt: np.ndarray, bias: np.ndarray) -> np.ndarray:
        """x·W + bias of every step, [seq, directions, batch, gates * hidden], each direction's
        rows in the order its steps read them. ``Wt`` is [directions, input, gates * hidden]."""
        S, N, D = self.seq, self.batch, self.dirs
        xw = np.empty((S, D, N, Wt.shape[-1]), dtype=self.dtype)
        for d, reverse in enumerate(self.reverses):
            src = self.x
            if reverse and self.lens is None:
                src = src[::-1]
            elif reverse:  # step k of batch entry b reads time lens[b] - 1 - k (any row past it)
                k = np.arange(S)[:, None]
                t = np.where(k < self.lens, self.lens - 1 - k, k)
                src = src[t, np.arange(N)]
            np.matmul(src, Wt[d], out=xw[:, d])
        xw += bias[:, None, :]
        return xw

    def history(self, init: np.ndarray, extra: int = 0) -> np.ndarray:
        """[seq + 1, directions, batch, hidden + extra]: the initial state, then each step's."""
        hs = np.empty((self.seq + 1, self.dirs, self.batch, self.hidden + extra), dtype=self.dtype)
        hs[0, ..., : self.hidden] = init
        if extra:
            hs[..., self.hidden :] = 1
        return hs

    def sequence(self, hs: np.ndarray) -> np.ndarray:
        """Y [seq, directions, batch, hidden] from a history, in time order, zeros past each end."""
        S, H = self.seq, self.hidden
        Y = np.empty((S, self.dirs, self.batch, H), dtype=self.dtype)
        if self.lens is None:
            for d, reverse in enumerate(self.reverses):
                Y[:, d] = hs[S:0:-1, d, :, :H] if reverse else hs[1:, d, :, :H]
            return Y
        t = np.arange(S)[:, None]
        live = t < self.lens
        rows = np.arange(self.batch)
        for d, reverse in enumerate(self.reverses):
            k = np.where(live, self.lens - t, 0) if reverse else np.where(live, t + 1, 0)
            Y[:, d] = np.where(live[..., None], hs[k, d, rows, :H], 0)
        return Y

    def final(self, hs: np.ndarray) -> np.ndarray:
        """The state after each sequence's last step; zeros for a sequence of length zero."""
        H = self.hidden
        if self.lens is None:
            if self.seq == 0:
                return np.zeros((self.dirs, self.batch, H), dtype=self.dtype)
            return hs[self.seq, ..., :H].copy()
        last = hs[self.lens, :, np.arange(self.batch), :H].transpose(1, 0, 2)  # [dirs, batch, H]
        return np.where((self.lens > 0)[:, None], last, 0).astype(self.dtype, copy=False)

    def results(self, X, Y, *states) -> tuple:
        if self.layout:
            Y = Y.transpose(2, 0, 1, 3)
            states = [s.transpose(1, 0, 2) for s in states]
        return tuple(a.astype(X.dtype, copy=False) for a in (Y, *states))

    def warnings(self) -> dict:
        """np.errstate's arguments for the steps: steps past a sequence's end compute values that
        no result reads, whose overflows are no one's concern."""
        return {"all": "ignore"} if self.lens is not None else {}


# Derived weights of read-only arrays: key → (weak references to the arrays, derived).
_DERIVED: dict[tuple, tuple] = {}
_DERIVED_LIMIT = 64


def _derived(arrays: tuple, key: tuple, make):
    """``make()``, kept while ``arrays`` (None or read-only arrays: a .pte's constants) live."""
    if any(a is not None and (not isinstance(a, np.ndarray) or a.flags.writeable) for a in arrays):
        return make()
    full = (tuple(id(a) for a in arrays), key)
    hit = _DERIVED.get(full)
    if hit is not None and all((r() if r is not None else None) is a for r, a in zip(hit[0], arrays)):
        return hit[1]
    if len(_DERIVED) >= _DERIVED_LIMIT:
        _DERIVED.clear()
    value = make()
    for a in value if isinstance(value, tuple) else (value,):
        a.flags.writeable = False  # shared by later calls
    _DERIVED[full] = (tuple(weakref.ref(a) if a is not None else None for a in arrays), value)
    return value


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


def _operands(D: int, *arrays):
    """For one direction, [1, ...] arrays as their single entry: a 2-D product is cheaper than a
    stacked one of one matrix."""
    return [a[:, 0] if a.ndim == 4 and D == 1 else (a[0] if D == 1 else a) for a in arrays]


_HALF = {np.float32: np.array(0.5, np.float32), np.float64: np.array(0.5, np.float64)}


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
    fr = _Frame("RNN", X, W, R, B, sequence_lens, hidden_size, layout, direction)
    D, H = fr.dirs, fr.hidden
    if D == 1 and activations == ["Tanh", "Tanh"]:
        activations = ["Tanh"]  # the schema's default names both directions of a bidirectional net
    names = activations or ["Tanh"] * D
    acts = _activations("RNN", names, activation_alpha, activation_beta, D)
    Wt, Rt, Wb, Rb = _derived(
        (W, R, B), ("RNN", H, fr.dtype), lambda: _weights("RNN", W, R, B, H, fr.dtype, False)
    )
    xw = fr.projection(Wt, Wb + Rb)
    hs = fr.history(fr.state(initial_h, "initial_h"))
    with np.errstate(**fr.warnings()):
        if clip is None and _is_default("RNN", names):
            hin, R_mm = _operands(D, hs, Rt)
            matmul, add, tanh = np.matmul, np.add, np.tanh
            for x_k, h_prev, h_mm, h in zip(xw, hin, hin[1:], hs[1:]):
                matmul(h_prev, R_mm, h_mm)
                add(h, x_k, h)
                tanh(h, h)
        else:
            clipped = _clipper(clip)
            for k in range(fr.seq):
                pre = xw[k] + np.matmul(hs[k], Rt)
                for d in range(D):
                    hs[k + 1, d] = acts[d][0](clipped(pre[d]))
    return fr.results(X, fr.sequence(hs), fr.final(hs))


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
    fr = _Frame("GRU", X, W, R, B, sequence_lens, hidden_size, layout, direction)
    D, H = fr.dirs, fr.hidden
    names = activations or ["Sigmoid", "Tanh"] * D
    acts = _activations("GRU", names, activation_alpha, activation_beta, D)
    plain = clip is None and _is_default("GRU", names)
    Wt, Rt, Wb, Rb = _derived(
        (W, R, B), ("GRU", H, fr.dtype, plain), lambda: _weights("GRU", W, R, B, H, fr.dtype, plain)
    )
    # Gate order z, r, h. Every bias but the candidate's recurrent one (inside the reset
    # product when linear_before_reset is set) goes into the projection.
    bias = Wb + Rb
    if linear_before_reset:
        bias[:, 2 * H :] = Wb[:, 2 * H :]
    xw = fr.projection(Wt, bias)
    h0 = fr.state(initial_h, "initial_h")
    with np.errstate(**fr.warnings()):
        if plain and linear_before_reset:
            hs = fr.history(h0, extra=1)
            _gru_linear_before_reset(
                xw, hs, _derived((R, B), ("GRU+b", H, fr.dtype), lambda: _with_bias_row(Rt, Rb, H)), H
            )
        elif plain:
            hs = fr.history(h0)
            _gru(xw, hs, Rt, H)
        else:
            hs = fr.history(h0)
            _gru_general(xw, hs, Rt, Rb[:, 2 * H :], H, acts, _clipper(clip), linear_before_reset)
    return fr.results(X, fr.sequence(hs), fr.final(hs))


def _with_bias_row(Rt: np.ndarray, Rb: np.ndarray, H: int) -> np.ndarray:
    """[dirs, H + 1, 3H]: Rt with a last row of the candidate's recurrent bias (zeros under z, r),
    for hidden states followed by a constant 1."""
    D = Rt.shape[0]
    out = np.zeros((D, H + 1, 3 * H), dtype=Rt.dtype)
    out[:, :H] = Rt
    out[:, H, 2 * H :] = Rb[:, 2 * H :]
    return out


def _gru_linear_before_reset(xw, hs, Rt1, H: int):
    """Default activations, linear_before_reset 1: zr and the candidate's h·Rh + Rbh in one
    product of [h, 1] by ``Rt1``, 11 calls per step. z, r columns halved (σ by tanh)."""
    D, N = hs.shape[1:3]
    gates = np.empty((D, N, 3 * H), dtype=hs.dtype)
    zr, z, r, n = gates[..., : 2 * H], gates[..., :H], gates[..., H : 2 * H], gates[..., 2 * H :]
    half = _HALF[hs.dtype.type]
    hin, R_mm, g_mm = _operands(D, hs, Rt1, gates)
    matmul, add, subtract, multiply, tanh = np.matmul, np.add, np.subtract, np.multiply, np.tanh
    xw_zr, xw_n = xw[..., : 2 * H], xw[..., 2 * H :]
    h_prevs, hs_w = hs[:-1, ..., :H], hs[1:, ..., :H]
    for x_zr, x_n, h_in, h_prev, h in zip(xw_zr, xw_n, hin, h_prevs, hs_w):
        matmul(h_in, R_mm, g_mm)
        add(zr, x_zr, zr)
        tanh(zr, zr)
        multiply(zr, half, zr)
        add(zr, half, zr)
        multiply(n, r, n)
        add(n, x_n, n)
        tanh(n, n)
        subtract(h_prev, n, h)  # h' = n + z (h - n)
        multiply(h, z, h)
        add(h, n, h)


def _gru(xw, hs, Rt, H: int):
    """Default activations, linear_before_reset 0: the candidate's product takes r ⊙ h, so it
    waits for the z, r product: two products and 12 calls per step."""
    D, N = hs.shape[1:3]
    zr = np.empty((D, N, 2 * H), dtype=hs.dtype)
    n = np.empty((D, N, H), dtype=hs.dtype)
    rh = np.empty((D, N, H), dtype=hs.dtype)
    z, r = zr[..., :H], zr[..., H:]
    Rt_zr = np.ascontiguousarray(Rt[..., : 2 * H])
    Rt_n = np.ascontiguousarray(Rt[..., 2 * H :])
    half = _HALF[hs.dtype.type]
    hin, R_zr, zr_mm, rh_mm, R_n, n_mm = _operands(D, hs, Rt_zr, zr, rh, Rt_n, n)
    matmul, add, subtract, multiply, tanh = np.matmul, np.add, np.subtract, np.multiply, np.tanh
    xw_zr, xw_n = xw[..., : 2 * H], xw[..., 2 * H :]
    for x_zr, x_n, h_in, h_prev, h in zip(xw_zr, xw_n, hin, hs, hs[1:]):
        matmul(h_in, R_zr, zr_mm)
        add(zr, x_zr, zr)
        tanh(zr, zr)
        multiply(zr, half, zr)
        add(zr, half, zr)
        multiply(r, h_prev, rh)
        matmul(rh_mm, R_n, n_mm)
        add(n, x_n, n)
        tanh(n, n)
        subtract(h_prev, n, h)  # h' = n + z (h - n)
        multiply(h, z, h)
        add(h, n, h)


def _gru_general(xw, hs, Rt, Rb_n, H: int, acts, clipped, linear_before_reset):
    """Any activations and clip: the ONNX formulas per direction, unhalved weights."""
    for k in range(hs.shape[0] - 1):
        h = hs[k]
        for d, (f, g) in enumerate(acts):
            x_k, h_d = xw[k, d], h[d]
            zr = f(clipped(x_k[:, : 2 * H] + h_d @ Rt[d, :, : 2 * H]))
            z, r = zr[:, :H], zr[:, H:]
            if linear_before_reset:
                cand = g(clipped(x_k[:, 2 * H :] + r * (h_d @ Rt[d, :, 2 * H :] + Rb_n[d])))
            else:
                cand = g(clipped(x_k[:, 2 * H :] + (r * h_d) @ Rt[d, :, 2 * H :]))
            hs[k + 1, d] = (1 - z) * cand + z * h_d


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
    fr = _Frame("LSTM", X, W, R, B, sequence_lens, hidden_size, layout, direction)
    D, H = fr.dirs, fr.hidden
    names = activations or ["Sigmoid", "Tanh", "Tanh"] * D
    acts = _activations("LSTM", names, activation_alpha, activation_beta, D)
    if P is not None and tuple(P.shape) != (D, 3 * H):
        raise ShapeError(f"LSTM: P has shape {list(P.shape)}, expected {[D, 3 * H]}")
    plain = P is None and clip is None and not input_forget and _is_default("LSTM", names)
    Wt, Rt, Wb, Rb = _derived(
        (W, R, B), ("LSTM", H, fr.dtype, plain), lambda: _weights("LSTM", W, R, B, H, fr.dtype, plain)
    )
    xw = fr.projection(Wt, Wb + Rb)
    hs = fr.history(fr.state(initial_h, "initial_h"))
    cs = fr.history(fr.state(initial_c, "initial_c"))
    with np.errstate(**fr.warnings()):
        if plain:
            _lstm(xw, hs, cs, Rt, H)
        else:
            P = np.zeros((D, 3 * H), dtype=fr.dtype) if P is None else np.asarray(P, dtype=fr.dtype)
            _lstm_general(xw, hs, cs, Rt, P, H, acts, _clipper(clip), input_forget)
    return fr.results(X, fr.sequence(hs), fr.final(hs), fr.final(cs))


def _lstm(xw, hs, cs, Rt, H: int):
    """Default activations, no peepholes, clip or coupled gate: 10 calls per step. Gate order
    i, o, f, c; i, o, f columns halved (σ by tanh)."""
    D, N = hs.shape[1:3]
    gates = np.empty((D, N, 4 * H), dtype=hs.dtype)
    ifo, i, o, f, g = (
        gates[..., : 3 * H],
        gates[..., :H],
        gates[..., H : 2 * H],
        gates[..., 2 * H : 3 * H],
        gates[..., 3 * H :],
    )
    ig = np.empty((D, N, H), dtype=hs.dtype)
    half = _HALF[hs.dtype.type]
    hin, R_mm, g_mm = _operands(D, hs, Rt, gates)
    matmul, add, multiply, tanh = np.matmul, np.add, np.multiply, np.tanh
    for x_k, h_in, h, c_prev, c in zip(xw, hin, hs[1:], cs, cs[1:]):
        matmul(h_in, R_mm, g_mm)
        add(gates, x_k, gates)
        tanh(gates, gates)
        multiply(ifo, half, ifo)
        add(ifo, half, ifo)
        multiply(f, c_prev, c)
        multiply(i, g, ig)
        add(c, ig, c)
        tanh(c, h)
        multiply(h, o, h)


def _lstm_general(xw, hs, cs, Rt, P, H: int, acts, clipped, input_forget):
    """Any activations, clip, peepholes (i, o, f) and coupled gate: the ONNX formulas per direction."""
    for k in range(hs.shape[0] - 1):
        gates = xw[k] + np.matmul(hs[k], Rt)
        for d, (f, g, h_act) in enumerate(acts):
            gd, c = gates[d], cs[k, d]
            p_i, p_o, p_f = P[d, :H], P[d, H : 2 * H], P[d, 2 * H :]
            i = f(clipped(gd[:, :H] + p_i * c))
            forget = 1 - i if input_forget else f(clipped(gd[:, 2 * H : 3 * H] + p_f * c))
            c_new = forget * c + i * g(clipped(gd[:, 3 * H :]))
            o = f(clipped(gd[:, H : 2 * H] + p_o * c_new))
            cs[k + 1, d] = c_new
            hs[k + 1, d] = o * h_act(c_new)
