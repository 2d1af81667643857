"""com.microsoft::DynamicQuantizeLSTM: an LSTM whose two products take uint8 activations
quantized on the fly, computed the way onnxruntime's CPU kernel computes it.

The weights are int8 or uint8, W [directions, input, 4·hidden] and R [directions, hidden,
4·hidden] (gates i, o, f, c along the last axis, ONNX's order), with a scale and zero point per
direction ([directions]) or per column ([directions, 4·hidden]). Per direction:

- **Input product.** X of the steps that run (the first max(sequence_lens) steps, every batch
  entry) is quantized as one tensor, DynamicQuantizeLinear's rule: the range [min, max] widened
  to hold 0, scale (max − min) / 255, zero point round-half-even(−min / scale), values
  round-half-even(x / scale) + zero point saturated to [0, 255]. The integer products
  Σ (x_q − x_zero)(w_q − w_zero) over the input axis are exact integers (``_integer_product``);
  each becomes float32 and is multiplied by the float32 product x_scale · w_scale
  (of its column where the scales are per column).
- **Recurrent product, per step.** The previous hidden state of the whole batch [batch, hidden]
  is quantized the same way, its own scale and zero point each step; its integer products
  scaled by h_scale · r_scale are added to the step's input product. A batch entry whose
  sequence has ended holds 0 in that state (its Y row), so it leaves the range as it is.
- **Gates**, in float32 as onnxruntime orders them: the peephole term (p · c) added to the
  product, then the sum of the two biases (Wb + Rb), then clip, then the activation; the cell
  state c·f + i·g; the output gate's peephole on the new cell state; h = o · h(c).
- Steps past a sequence's end leave its state as it is and write zeros to Y; Y_h and Y_c are
  the states after its last step (zeros for an empty sequence). A reverse direction reads each
  sequence from its last step back, and writes Y in the input's order.

Measured on ddddocr-common-old's bidirectional LSTM (hidden 512, 16 steps, int8 weights), fed
onnxruntime's inputs to it: Y within 2.4e-7 of onnxruntime's at scale 1.0 (the float LSTM of the
dequantized weights: 2.0e-2); 10.6 ms of CPU a call at one thread, against 5.6 ms for that float
LSTM and 1.2-1.7 ms for onnxruntime (float64 products instead of ``_integer_product``'s float32
ones: 24 ms).

With the default activations and the compiled loops on, a direction's steps run in
recurrent_quantized_loops.py (``_compiled_direction``): three compiled calls and two numpy tanh
calls a step instead of about 45 numpy calls, the recurrent product in int32 from R's own 8 bits
(1 MB a direction instead of 4) — the same bits. The same op's shapes, random int8 weights, one
thread, in alternating rounds on the 2-core machine shared with other work: 14.8-15.6 ms a call
by the numpy step, 5.9-6.2 by the compiled one.

What this does not reproduce, by choice:

- onnxruntime splits the batch across its intra-op threads when the batch is larger than 4 (or
  at least 2 with hidden ≤ 256), and quantizes each part's hidden state separately; results then
  depend on the thread count. This kernel quantizes the whole batch (onnxruntime at one thread).
- Where the node has no Y output, onnxruntime keeps an ended sequence's last hidden state (not
  0) in the range of the later steps' quantization; this kernel always uses 0. The two differ
  only with sequence_lens cutting some sequences short at batch > 1.
- onnxruntime's uint8 × int8 products on x86-64 without VNNI (vpmaddubsw) saturate each sum of
  two neighbouring products to int16; this kernel computes the exact integers, which
  onnxruntime's other paths (VNNI, ARM, uint8 weights) compute too.
"""

from __future__ import annotations

import numpy as np

from offload.errors import ShapeError

from . import kernel
from ._util import compiled_loops, unsupported
from .linalg import exact_product
from .quantization import dynamic_quantize_linear
from .recurrent import _activations, _clipper
from .recurrent_frame import _kept, checked_lengths, initial_state

_OP = "DynamicQuantizeLSTM"
_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}

# Centered weights of read-only W and R (a .pte's constants), kept while they live.
_CENTERED: dict[tuple, tuple] = {}
_CENTERED_LIMIT = 16


def _quantized(a: np.ndarray) -> tuple[np.ndarray, np.float32]:
    """``a`` quantized to uint8 with its own range, as float32 values less the zero point, and
    the scale (1 for an all-zero ``a``, whose values are then all 0)."""
    q, scale, zero = dynamic_quantize_linear(None, a)
    return q.astype(np.float32) - np.float32(zero), np.float32(scale)


def _integer_product(a: np.ndarray, w: np.ndarray, w_max: float) -> np.ndarray:
    """``a @ w`` of integer-valued float32 matrices as float32, the sums exact before their one
    rounding to float32 (``linalg.exact_product``: float32 products over slices of the inner axis
    that keep every partial sum below 2^24, one slice for int8 weights up to 514 rows). float32
    products read half the bytes of float64 ones, which is what a step costs at batch 1 (a hidden
    size of 512: 4 MB of R per direction)."""
    return exact_product(a, w, w_max).astype(np.float32)


def _per_direction(name: str, a: np.ndarray, D: int, H: int) -> np.ndarray:
    """A scale or zero point as [D, 1] (per direction) or [D, 4H] (per column)."""
    a = np.asarray(a)
    if a.shape == (D,):
        return a.reshape(D, 1)
    if a.shape == (D, 4 * H):
        return a
    raise ShapeError(f"{_OP}: {name} has shape {list(a.shape)}, expected [{D}] or [{D}, {4 * H}]")


def _centered(W, R, w_zero, r_zero) -> tuple:
    """W − W_zero_point and R − R_zero_point in float32 ([D, rows, 4H], exact integers), and
    each direction's largest magnitude in them."""

    def make():
        Wc = W.astype(np.float32) - w_zero[:, None, :].astype(np.float32)
        Rc = R.astype(np.float32) - r_zero[:, None, :].astype(np.float32)
        return Wc, Rc, np.abs(Wc).max(axis=(1, 2)), np.abs(Rc).max(axis=(1, 2))

    key = (w_zero.tobytes(), w_zero.shape, r_zero.tobytes(), r_zero.shape)
    return _kept(_CENTERED, _CENTERED_LIMIT, W, R, None, key, make)


def _check(X, W, R, D: int, H: int) -> None:
    if X.ndim != 3:
        raise ShapeError(f"{_OP}: X has rank {X.ndim}, expected 3 ([seq, batch, input])")
    I = X.shape[2]
    for name, a, rows in (("W", W, I), ("R", R, H)):
        if a.dtype not in (np.int8, np.uint8):
            raise unsupported(_OP, f"{name} of type {a.dtype} (int8 or uint8 expected)")
        if tuple(a.shape) != (D, rows, 4 * H):
            raise ShapeError(
                f"{_OP}: {name} has shape {list(a.shape)}, expected {[D, rows, 4 * H]} "
                f"(directions, {'input' if name == 'W' else 'hidden'}, 4 * hidden_size {H})"
            )


@kernel(_OP, domain="com.microsoft")
def dynamic_quantize_lstm(
    ctx,
    X,
    W,
    R,
    B=None,
    sequence_lens=None,
    initial_h=None,
    initial_c=None,
    P=None,
    W_scale=None,
    W_zero_point=None,
    R_scale=None,
    R_zero_point=None,
    *,
    activation_alpha,
    activation_beta,
    activations,
    clip,
    direction,
    hidden_size,
    input_forget,
):
    if direction not in _DIRECTIONS:
        raise unsupported(_OP, f"direction '{direction}'")
    if X.dtype != np.float32:
        raise unsupported(_OP, f"X of type {X.dtype} (float32 expected)")
    reverses, H = _DIRECTIONS[direction], int(hidden_size)
    D = len(reverses)
    _check(X, W, R, D, H)
    S, N, _ = X.shape
    if B is not None and tuple(B.shape) != (D, 8 * H):
        raise ShapeError(f"{_OP}: B has shape {list(B.shape)}, expected {[D, 8 * H]}")
    if P is not None and tuple(P.shape) != (D, 3 * H):
        raise ShapeError(f"{_OP}: P has shape {list(P.shape)}, expected {[D, 3 * H]}")
    lens = np.full(N, S, np.int64) if sequence_lens is None else checked_lengths(_OP, sequence_lens, S, N)
    h0 = initial_state(_OP, initial_h, "initial_h", (D, N, H), np.float32)
    c0 = initial_state(_OP, initial_c, "initial_c", (D, N, H), np.float32)
    w_scale, r_scale = (
        _per_direction(n, a, D, H).astype(np.float32) for n, a in (("W_scale", W_scale), ("R_scale", R_scale))
    )
    w_zero = _per_direction("W_zero_point", W_zero_point, D, H)
    r_zero = _per_direction("R_zero_point", R_zero_point, D, H)
    acts = _activations(
        "LSTM", activations or ["Sigmoid", "Tanh", "Tanh"] * D, activation_alpha, activation_beta, D
    )
    clipped = _clipper(clip)

    Y = np.zeros((S, D, N, H), np.float32)
    Y_h = np.zeros((D, N, H), np.float32)
    Y_c = np.zeros((D, N, H), np.float32)
    steps = int(lens.max(initial=0))
    if steps == 0:
        return Y, Y_h, Y_c
    Wc, Rc, w_max, r_max = _centered(W, R, w_zero, r_zero)
    loops = _step_loops(activations, D, H)
    x, x_scale = _quantized(np.asarray(X[:steps], np.float32).reshape(steps * N, -1))
    with np.errstate(all="ignore"):
        for d, reverse in enumerate(reverses):
            # The input product of every step that runs, in the input's step order.
            xw = _integer_product(x, Wc[d], float(w_max[d])) * (x_scale * w_scale[d])
            xw = xw.reshape(steps, N, 4 * H)
            bias = None if B is None else B[d, : 4 * H] + B[d, 4 * H :]
            peep = None if P is None else P[d].reshape(3, H)
            if loops is None:
                ys, h, c = _direction(
                    xw,
                    lens,
                    reverse,
                    Rc[d],
                    float(r_max[d]),
                    r_scale[d],
                    h0[d].copy(),
                    c0[d].copy(),
                    bias,
                    peep,
                    acts[d],
                    clipped,
                    input_forget,
                )
            else:
                recurrent = (_transposed(R)[d], r_zero[d], r_scale[d])
                ys, h, c = _compiled_direction(
                    loops, xw, lens, reverse, recurrent, h0[d], c0[d], bias, peep, clip, input_forget
                )
            Y[:steps, d] = ys
            ended = (lens > 0)[:, None]
            Y_h[d] = np.where(ended, h, np.float32(0))
            Y_c[d] = np.where(ended, c, np.float32(0))
    return Y, Y_h, Y_c


def _direction(xw, lens, reverse, Rc, r_max, r_scale, h, c, bias, peep, acts, clipped, input_forget):
    """One direction's steps: Y rows in the input's step order, and the final h and c."""
    steps, N, H4 = xw.shape
    H = H4 // 4
    f, g, h_act = acts
    rows = np.arange(N)
    ys = np.zeros((steps, N, H), np.float32)
    one = np.float32(1)
    for k in range(steps):
        # Step k of a reverse direction reads step lens - 1 - k of its sequence.
        t = np.where(k < lens, lens - 1 - k, k) if reverse else np.full(N, k)
        running = k < lens
        held = h if k == 0 else np.where((lens >= k)[:, None], h, np.float32(0))
        hq, h_scale = _quantized(held)
        gates = xw[t, rows] + _integer_product(hq, Rc, r_max) * (h_scale * r_scale)
        gi, go, gf, gc = (gates[:, j * H : (j + 1) * H] for j in range(4))
        if peep is not None:
            gi = gi + c * peep[0]
            gf = gf + c * peep[2]
        if bias is not None:
            gi, gf, gc = gi + bias[:H], gf + bias[2 * H : 3 * H], gc + bias[3 * H :]
        i = f(clipped(gi))
        forget = one - i if input_forget else f(clipped(gf))
        c_new = c * forget + i * g(clipped(gc))
        if peep is not None:
            go = go + c_new * peep[1]
        if bias is not None:
            go = go + bias[H : 2 * H]
        h_new = h_act(c_new) * f(clipped(go))
        live = running[:, None]
        h = np.where(live, h_new, h)
        c = np.where(live, c_new, c)
        ys[t[running], rows[running]] = h_new[running]
    return ys, h, c


def _step_loops(activations, D: int, H: int):
    """recurrent_quantized_loops where the step can take them: the compiled loops on, the
    default activations (Sigmoid, Tanh, Tanh) and a hidden size whose int32 sums cannot
    overflow; else None (the numpy step)."""
    names = [a.lower() for a in activations or ["Sigmoid", "Tanh", "Tanh"] * D]
    if compiled_loops() is None or names != ["sigmoid", "tanh", "tanh"] * D or H > _LOOPS_MAX_HIDDEN:
        return None
    from . import recurrent_quantized_loops

    return recurrent_quantized_loops


# 2 · 255 · 255 · hidden below 2^31: the compiled step's int32 sums, zero-point term included.
_LOOPS_MAX_HIDDEN = 16384

# R of each direction transposed ([directions][4 · hidden, hidden], its own 8-bit type), for
# read-only R (a .pte's constants), kept while it lives.
_TRANSPOSED: dict[tuple, tuple] = {}


def _transposed(R: np.ndarray) -> tuple:
    return _kept(
        _TRANSPOSED, _CENTERED_LIMIT, R, R, None, (), lambda: tuple(np.ascontiguousarray(r.T) for r in R)
    )


def _compiled_direction(loops, xw, lens, reverse, recurrent, h, c, bias, peep, clip, input_forget):
    """``_direction`` of the default activations by recurrent_quantized_loops: per step one
    compiled call for the gate sums, numpy's tanh of i/2, f/2 and c, one compiled call for the
    cell state, numpy's tanh of it and of o/2, one compiled call for h, the states and Y."""
    rt, r_zero, r_scale = recurrent
    steps, N, H4 = xw.shape
    H = H4 // 4
    f32 = np.float32
    h, c = np.array(h, f32), np.array(c, f32)  # contiguous copies, updated in place
    zeros = np.broadcast_to(np.asarray(r_zero, np.int32).reshape(-1), (H4,)).copy()
    scales = np.broadcast_to(np.asarray(r_scale, f32).reshape(-1), (H4,)).copy()
    flags = np.array([bias is not None, peep is not None, clip is not None])
    bias = np.zeros(H4, f32) if bias is None else np.ascontiguousarray(bias, f32)
    peep = np.zeros((3, H), f32) if peep is None else np.ascontiguousarray(peep, f32)
    limit = f32(0 if clip is None else clip)
    lens = np.ascontiguousarray(lens, np.int64)
    hq, acc = np.empty((N, H), np.int16), np.empty((N, H4), np.int32)
    tanh_in, go = np.empty((N, 3 * H), f32), np.empty((N, H), f32)
    c_new, cell = np.empty((N, H), f32), np.empty((N, 2 * H), f32)
    ys = np.zeros((steps, N, H), f32)
    tanh = np.tanh
    for k in range(steps):
        loops.quantized_gates(
            k, reverse, lens, xw, h, c, rt, zeros, scales, bias, peep, flags, limit, hq, acc, tanh_in, go
        )
        tanh(tanh_in, tanh_in)
        loops.lstm_cells(tanh_in, go, c, bias, peep, flags, limit, bool(input_forget), c_new, cell)
        tanh(cell, cell)
        loops.lstm_outputs(k, reverse, lens, cell, c_new, h, c, ys)
    return ys, h, c
