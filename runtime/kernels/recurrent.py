"""Recurrent-net kernels: RNN, GRU and LSTM, one Python step per time step, batched matmuls.

Every op works in layout 0 internally (X: [seq, batch, input], states: [directions, batch,
hidden]); layout 1 is transposed on the way in and out. Input projections of all time steps
are one matmul; each step then adds the recurrent projection of the previous hidden state.
"""

from __future__ import annotations

import numpy as np

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


def _activations(op, names, alphas, betas, per_dir: int, num_dirs: int) -> list[list]:
    """Per direction, the ``per_dir`` activation functions with their alpha/beta bound."""
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


def _clipper(clip):
    if clip is None:
        return lambda x: x
    return lambda x: np.clip(x, -clip, clip)


def _compute_dtype(X):
    return np.float64 if X.dtype == np.float64 else np.float32


def _states(init, num_dirs, batch, hidden, layout, dtype):
    """An initial state in layout 0 ([directions, batch, hidden]), zeros when omitted."""
    if init is None:
        return np.zeros((num_dirs, batch, hidden), dtype=dtype)
    init = np.asarray(init, dtype=dtype)
    return init.transpose(1, 0, 2) if layout else init


def _run(step, xw, state: tuple, lens, reverse: bool):
    """Run one direction over time; steps at or past a sequence's length keep its state and
    output zeros. Returns (Y [seq, batch, hidden], final state tuple)."""
    seq = xw.shape[0]
    ys = np.zeros((seq, *state[0].shape), dtype=state[0].dtype)
    for t in range(seq - 1, -1, -1) if reverse else range(seq):
        new = step(xw[t], state)
        if lens is not None:
            live = (t < lens)[:, None]
            new = tuple(np.where(live, n, s) for n, s in zip(new, state))
            ys[t] = np.where(live, new[0], 0)
        else:
            ys[t] = new[0]
        state = new
    if lens is not None:
        # A sequence of length zero has no last step: its final states are zeros (as in ORT).
        state = tuple(np.where((lens > 0)[:, None], s, 0) for s in state)
    return ys, state


def _recurrent(op, X, W, sequence_lens, inits, layout, direction, make_step):
    """The shared frame: layouts, directions and sequence lengths around per-direction steps.

    ``make_step(d, x)`` returns (xw, step) for direction ``d``: the input projection of all time
    steps ``x`` and the function (xw_t, state) → new state. Returns (Y, *final states).
    """
    if direction not in _DIRECTIONS:
        raise unsupported(op, f"direction '{direction}'")
    if layout not in (0, 1):
        raise unsupported(op, f"layout {layout}")
    reverses = _DIRECTIONS[direction]
    if W.shape[0] != len(reverses):
        raise unsupported(op, f"W with {W.shape[0]} direction(s) for direction '{direction}'")
    dtype = _compute_dtype(X)
    x = np.asarray(X, dtype=dtype)
    if layout:
        x = x.transpose(1, 0, 2)
    lens = None if sequence_lens is None else np.asarray(sequence_lens).astype(np.int64)
    ys, finals = [], []
    for d, reverse in enumerate(reverses):
        xw, step = make_step(d, x)
        y, state = _run(step, xw, tuple(s[d] for s in inits), lens, reverse)
        ys.append(y)
        finals.append(state)
    Y = np.stack(ys, axis=1)  # [seq, directions, batch, hidden]
    states = [np.stack([f[k] for f in finals]) for k in range(len(inits))]
    if layout:
        Y = Y.transpose(2, 0, 1, 3)
        states = [s.transpose(1, 0, 2) for s in states]
    return tuple(a.astype(X.dtype, copy=False) for a in (Y, *states))


def _setup(W, R, B, hidden_size, gates, dtype):
    """Weights as the compute dtype; biases as (Wb, Rb), each [directions, gates * hidden]."""
    hidden = hidden_size if hidden_size is not None else R.shape[-1]
    W = np.asarray(W, dtype=dtype)
    R = np.asarray(R, dtype=dtype)
    if B is None:
        B = np.zeros((W.shape[0], 2 * gates * hidden), dtype=dtype)
    B = np.asarray(B, dtype=dtype)
    return hidden, W, R, B[:, : gates * hidden], B[:, gates * hidden :]


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
    dtype = _compute_dtype(X)
    hidden, W, R, Wb, Rb = _setup(W, R, B, hidden_size, 1, dtype)
    if W.shape[0] == 1 and activations == ["Tanh", "Tanh"]:
        activations = ["Tanh"]  # the schema's default names both directions of a bidirectional net
    acts = _activations("RNN", activations, activation_alpha, activation_beta, 1, W.shape[0])
    clipped = _clipper(clip)
    batch = X.shape[1 - layout]
    h0 = _states(initial_h, W.shape[0], batch, hidden, layout, dtype)

    def make_step(d, x):
        xw = x @ W[d].T + (Wb[d] + Rb[d])
        (f,) = acts[d]
        return xw, lambda xw_t, s: (f(clipped(xw_t + s[0] @ R[d].T)),)

    return _recurrent("RNN", X, W, sequence_lens, [h0], layout, direction, make_step)


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
    dtype = _compute_dtype(X)
    hidden, W, R, Wb, Rb = _setup(W, R, B, hidden_size, 3, dtype)
    names = activations or ["Sigmoid", "Tanh"] * W.shape[0]
    acts = _activations("GRU", names, activation_alpha, activation_beta, 2, W.shape[0])
    clipped = _clipper(clip)
    batch = X.shape[1 - layout]
    h0 = _states(initial_h, W.shape[0], batch, hidden, layout, dtype)
    H = hidden

    plain = clip is None and _default(names, GRU_DEFAULT)

    def make_step(d, x):
        # Gate order z, r, h. The recurrent bias of h stays apart: it sits inside the reset
        # product when linear_before_reset is set.
        xw = x @ W[d].T + Wb[d]
        xw[..., : 2 * H] += Rb[d, : 2 * H]
        R_zr, R_h, Rb_h = R[d, : 2 * H].T, R[d, 2 * H :].T, Rb[d, 2 * H :]
        if plain:
            return xw, _plain_gru_step(R_zr, R_h, Rb_h, H, linear_before_reset)
        f, g = acts[d]

        def step(xw_t, s):
            (h,) = s
            zr = f(clipped(xw_t[:, : 2 * H] + h @ R_zr))
            z, r = zr[:, :H], zr[:, H:]
            if linear_before_reset:
                cand = g(clipped(xw_t[:, 2 * H :] + r * (h @ R_h + Rb_h)))
            else:
                cand = g(clipped(xw_t[:, 2 * H :] + (r * h) @ R_h + Rb_h))
            return ((1 - z) * cand + z * h,)

        return xw, step

    return _recurrent("GRU", X, W, sequence_lens, [h0], layout, direction, make_step)


LSTM_DEFAULT = ("sigmoid", "tanh", "tanh")
GRU_DEFAULT = ("sigmoid", "tanh")


def _default(names, per_direction: tuple[str, ...]) -> bool:
    return all(n.lower() == per_direction[k % len(per_direction)] for k, n in enumerate(names))


def _plain_lstm_step(Rt: np.ndarray, H: int):
    """The step of an LSTM with ONNX's default activations and no peepholes, clip or coupled
    input-forget gate, in as few numpy calls as its arithmetic allows: the three sigmoid gates
    (i, o, f: contiguous) in place in one slab, each value computed by the same operations in
    the same order as the general step, so the results are the same bits."""

    def step(xw_t, s):
        h, c = s
        gates = np.matmul(h, Rt)
        gates += xw_t
        ifo = gates[:, : 3 * H]  # _sigmoid in place: 0.5 * (1 + tanh(0.5 * x))
        ifo *= 0.5
        np.tanh(ifo, out=ifo)
        ifo += 1.0
        ifo *= 0.5
        g = np.tanh(gates[:, 3 * H :])
        c_new = ifo[:, 2 * H :] * c
        g *= ifo[:, :H]
        c_new += g
        h_new = np.tanh(c_new)
        h_new *= ifo[:, H : 2 * H]
        return h_new, c_new

    return step


def _plain_gru_step(R_zr: np.ndarray, R_h: np.ndarray, Rb_h: np.ndarray, H: int, linear_before_reset):
    """The step of a GRU with ONNX's default activations and no clip, in fewer numpy calls: the
    same operations in the same order as the general step, so the same bits."""

    def step(xw_t, s):
        (h,) = s
        zr = np.matmul(h, R_zr)
        zr += xw_t[:, : 2 * H]
        zr *= 0.5  # _sigmoid in place: 0.5 * (1 + tanh(0.5 * x))
        np.tanh(zr, out=zr)
        zr += 1.0
        zr *= 0.5
        z, r = zr[:, :H], zr[:, H:]
        if linear_before_reset:
            t = np.matmul(h, R_h)
            t += Rb_h
            t *= r
        else:
            t = np.matmul(r * h, R_h)
        t += xw_t[:, 2 * H :]
        if not linear_before_reset:
            t += Rb_h
        cand = np.tanh(t, out=t)
        out = 1 - z
        out *= cand
        out += z * h
        return (out,)

    return step


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
    dtype = _compute_dtype(X)
    hidden, W, R, Wb, Rb = _setup(W, R, B, hidden_size, 4, dtype)
    num_dirs = W.shape[0]
    names = activations or ["Sigmoid", "Tanh", "Tanh"] * num_dirs
    acts = _activations("LSTM", names, activation_alpha, activation_beta, 3, num_dirs)
    clipped = _clipper(clip)
    batch = X.shape[1 - layout]
    h0 = _states(initial_h, num_dirs, batch, hidden, layout, dtype)
    c0 = _states(initial_c, num_dirs, batch, hidden, layout, dtype)
    peepholes = P
    P = np.zeros((num_dirs, 3 * hidden), dtype=dtype) if P is None else np.asarray(P, dtype=dtype)
    H = hidden

    plain = peepholes is None and clip is None and not input_forget and _default(names, LSTM_DEFAULT)

    def make_step(d, x):
        # Gate order i, o, f, c; peepholes i, o, f.
        xw = x @ W[d].T + (Wb[d] + Rb[d])
        Rt = R[d].T
        if plain:
            return xw, _plain_lstm_step(Rt, H)
        p_i, p_o, p_f = P[d, :H], P[d, H : 2 * H], P[d, 2 * H :]
        f, g, h_act = acts[d]

        def step(xw_t, s):
            h, c = s
            gates = xw_t + h @ Rt
            i = f(clipped(gates[:, :H] + p_i * c))
            if input_forget:
                forget = 1 - i
            else:
                forget = f(clipped(gates[:, 2 * H : 3 * H] + p_f * c))
            c_new = forget * c + i * g(clipped(gates[:, 3 * H :]))
            o = f(clipped(gates[:, H : 2 * H] + p_o * c_new))
            return o * h_act(c_new), c_new

        return xw, step

    return _recurrent("LSTM", X, W, sequence_lens, [h0, c0], layout, direction, make_step)
