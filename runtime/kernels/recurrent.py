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

import numpy as np

from offload.errors import ShapeError

from . import kernel
from ._util import unsupported
from .recurrent_frame import _DEFAULTS, _derive, _Frame, _is_default
from .recurrent_steps import _run_lstm, _run_plain, _steps, _workspace


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


def _clipper(clip):
    if clip is None:
        return lambda x: x
    return lambda x: np.clip(x, -clip, clip)


def _check_count(op, names, D: int) -> None:
    if len(names) != len(_DEFAULTS[op]) * D:
        raise unsupported(op, f"{len(names)} activations for {D} direction(s)")


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
