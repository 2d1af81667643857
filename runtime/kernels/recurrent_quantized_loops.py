"""Compiled loops (numba) for a step of com.microsoft::DynamicQuantizeLSTM with the default
activations: the hidden state's quantization, its integer product by the raw 8-bit recurrent
weights and the gate arithmetic, in three calls per step around numpy's two tanh calls.

The numpy step (recurrent_quantized._direction) makes about 45 numpy calls a step and multiplies
by the recurrent weights as float32 (4 MB a direction at hidden 512, read every step). Here:

- ``quantized_gates``: the state the step reads (0 for a batch entry whose sequence has ended)
  quantized as one tensor by DynamicQuantizeLinear's float32 rule (quantization.py and
  loops.quantize8: the range widened to hold 0, NaN in it giving the range [0, 0], scale
  (max − min) / 255, zero point rint(−min / scale), values rint(x / scale) + zero point clipped
  to [0, 255]); the product Σ (h_q − h_zero)(r − r_zero) in int32 (exact: at most
  2 · 255 · 255 · hidden < 2^31 for hidden ≤ 16384), as r's products less r_zero · Σ (h_q −
  h_zero), from r transposed once to [4·hidden, hidden] in its own 8-bit type (1 MB a direction);
  converted to float32 (one rounding, as the numpy step's exact float64 sum converted);
  then, in the numpy step's order, times h_scale · r_scale, plus the step's input product, the
  peepholes and biases of i, f and c, the clip, and the halving that the sigmoid's tanh form
  takes. It writes the tanh arguments of i, f and c and the output gate's partial sum.
- ``lstm_cells``: σ(x) = 0.5 · (1 + tanh(x / 2)) of i and f (or f = 1 − i), the new cell state
  c·f + i·g, the output gate's peephole on it, its bias and clip, halved for its tanh; it writes
  the new cell state twice (once to be kept, once as tanh's argument).
- ``lstm_outputs``: h = tanh(c) · σ(o); the running entries' states and their Y rows.

Every float operation is one of the numpy step's, on float32, in its order (fastmath off, no
contraction into fused multiply-adds), and tanh is numpy's own, so that the results are the
numpy step's bit for bit (tests/runtime/test_recurrent_quantized.py).
"""

from __future__ import annotations

import numpy as np
from numba import njit

F32 = np.float32


@njit(cache=True, nogil=True, inline="always")
def _step_row(k, n, reverse, lens):  # pragma: no cover - compiled
    """The input row that step k of batch entry n reads: a reverse direction reads its sequence
    from its last step back (steps past its end read row k, their values unused)."""
    if reverse and k < lens[n]:
        return lens[n] - 1 - k
    return k


@njit(cache=True, nogil=True, error_model="numpy")
def quantized_gates(
    k, reverse, lens, xw, h, c, rt, r_zero, r_scale, bias, peep, flags, clip, hq, acc, tanh_in, go
):  # pragma: no cover - compiled
    """Step k's gate sums. ``flags`` = (has bias, has peepholes, has clip); ``tanh_in`` [N, 3H]
    receives the arguments of tanh for i, f (halved) and c, ``go`` [N, H] the output gate's
    input and recurrent products; ``hq`` [N, H] int16 and ``acc`` [N, 4H] int32 are scratch."""
    N, H = h.shape
    G = 4 * H
    has_bias, has_peep, has_clip = flags[0], flags[1], flags[2]
    # The state read: h itself at step 0, else 0 where the sequence ended before step k.
    lo, hi, nan = F32(0.0), F32(0.0), False
    for n in range(N):
        alive = k == 0 or lens[n] >= k
        for j in range(H):
            v = h[n, j] if alive else F32(0.0)
            if v != v:
                nan = True
            lo = min(lo, v)
            hi = max(hi, v)
    if nan:  # numpy's min and max give NaN, and min(0.0, NaN) is 0.0: the range [0, 0]
        lo, hi = F32(0.0), F32(0.0)
    scale = F32((hi - lo) / F32(255))
    zero = F32(0.0)
    if scale != 0:
        zero = min(max(np.rint(-lo / scale), F32(0.0)), F32(255.0))
    for n in range(N):
        alive = k == 0 or lens[n] >= k
        for j in range(H):
            if scale == 0:
                hq[n, j] = 0
                continue
            v = h[n, j] if alive else F32(0.0)
            q = np.rint(v / scale) + zero
            q = min(max(q, F32(0.0)), F32(255.0))
            hq[n, j] = np.int16(q - zero) if q == q else np.int16(-zero)
    for n in range(N):
        total = np.int32(0)
        for j in range(H):
            total += np.int32(hq[n, j])
        a = hq[n]
        for g in range(G):
            r = rt[g]
            s = np.int32(0)
            for j in range(H):
                s += np.int32(a[j]) * np.int32(r[j])
            acc[n, g] = s - np.int32(r_zero[g]) * total
    for n in range(N):
        t = _step_row(k, n, reverse, lens)
        for j in range(H):
            gi = xw[t, n, j] + F32(acc[n, j]) * (scale * r_scale[j])
            go[n, j] = xw[t, n, H + j] + F32(acc[n, H + j]) * (scale * r_scale[H + j])
            gf = xw[t, n, 2 * H + j] + F32(acc[n, 2 * H + j]) * (scale * r_scale[2 * H + j])
            gc = xw[t, n, 3 * H + j] + F32(acc[n, 3 * H + j]) * (scale * r_scale[3 * H + j])
            if has_peep:
                gi = gi + c[n, j] * peep[0, j]
                gf = gf + c[n, j] * peep[2, j]
            if has_bias:
                gi = gi + bias[j]
                gf = gf + bias[2 * H + j]
                gc = gc + bias[3 * H + j]
            if has_clip:
                gi = min(max(gi, -clip), clip) if gi == gi else gi
                gf = min(max(gf, -clip), clip) if gf == gf else gf
                gc = min(max(gc, -clip), clip) if gc == gc else gc
            tanh_in[n, j] = F32(0.5) * gi
            tanh_in[n, H + j] = F32(0.5) * gf
            tanh_in[n, 2 * H + j] = gc


@njit(cache=True, nogil=True, error_model="numpy")
def lstm_cells(
    tanh_out, go, c, bias, peep, flags, clip, input_forget, c_new, cell_in
):  # pragma: no cover - compiled
    """From tanh of i/2, f/2 and c: the new cell state into ``c_new`` [N, H] and, with the
    output gate's halved sum, into tanh's argument ``cell_in`` [N, 2H]."""
    N, H = c.shape
    has_bias, has_peep, has_clip = flags[0], flags[1], flags[2]
    one, half = F32(1.0), F32(0.5)
    for n in range(N):
        for j in range(H):
            i = half * (one + tanh_out[n, j])
            f = one - i if input_forget else half * (one + tanh_out[n, H + j])
            cn = c[n, j] * f + i * tanh_out[n, 2 * H + j]
            o = go[n, j]
            if has_peep:
                o = o + cn * peep[1, j]
            if has_bias:
                o = o + bias[H + j]
            if has_clip:
                o = min(max(o, -clip), clip) if o == o else o
            c_new[n, j] = cn
            cell_in[n, j] = cn
            cell_in[n, H + j] = half * o


@njit(cache=True, nogil=True)
def lstm_outputs(k, reverse, lens, cell_out, c_new, h, c, ys):  # pragma: no cover - compiled
    """h = tanh(c_new) · σ(o) from tanh's results ``cell_out`` [N, 2H]; the entries still
    running (k < their length) take the new states and write their Y row."""
    N, H = h.shape
    one, half = F32(1.0), F32(0.5)
    for n in range(N):
        if k >= lens[n]:
            continue
        t = _step_row(k, n, reverse, lens)
        for j in range(H):
            hn = cell_out[n, j] * (half * (one + cell_out[n, H + j]))
            h[n, j] = hn
            c[n, j] = c_new[n, j]
            ys[t, n, j] = hn
