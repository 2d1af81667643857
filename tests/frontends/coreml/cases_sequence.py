"""Single-op cases: recurrent layers, attention, compressed weights (constexpr_*), quantize /
dequantize (generate_ops.py; needs coremltools). References follow MIL's op definitions; for
the recurrent layers, where the docstrings leave it open, as coremltools' own tests of the ops
(which run them in Core ML) state it: a unidirectional reverse layer lists its outputs in the
order it processes the steps, a GRU's candidate reads R_o·(r ⊙ h), an LSTM's peepholes read the
previous cell state for the input and forget gates and the new one for the output gate."""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types
from generate_ops import Case

rng = np.random.default_rng(4321)


def randn(*shape, scale=1.0, dtype=np.float32):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


ACT = {
    "sigmoid": sigmoid,
    "tanh": np.tanh,
    "scaled_tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0),
    "linear": lambda x: x,
    "hard_sigmoid": lambda x: np.clip(0.2 * x + 0.5, 0, 1),
}

# ---------------------------------------------------------------------------------------------
# Recurrent layers: one direction as a numpy loop; x [T, B, I], states [B, H].


def lstm_dir(x, h, c, wih, whh, b, p, acts, reverse, clip=None):
    """Hidden states in processing order, final h and c. Gates [i, f, o, z], peephole [i, f, o];
    clip bounds the cell state."""
    ra, ca, act = (ACT[a] for a in acts)
    H = whh.shape[1]
    wi, wf, wo, wz = np.split(wih, 4)
    ri, rf, ro, rz = np.split(whh, 4)
    bi, bf, bo, bz = np.split(b, 4)
    pi, pf, po = np.split(p, 3)
    steps = range(len(x) - 1, -1, -1) if reverse else range(len(x))
    hs = []
    for t in steps:
        xt = x[t].astype(np.float64)
        i = ra(xt @ wi.T + h @ ri.T + bi + pi * c)
        f = ra(xt @ wf.T + h @ rf.T + bf + pf * c)
        z = ca(xt @ wz.T + h @ rz.T + bz)
        c = f * c + i * z
        if clip is not None:
            c = np.clip(c, -clip, clip)
        o = ra(xt @ wo.T + h @ ro.T + bo + po * c)
        h = o * act(c)
        hs.append(h)
    assert h.shape[-1] == H
    return np.stack(hs), h, c


def lstm_ref(x, h0, c0, fwd, back=None, acts=("sigmoid", "tanh", "tanh"), reverse=False, seq=True, clip=None):
    H = fwd[1].shape[1]
    if back is None:
        ys, h, c = lstm_dir(x, h0, c0, *fwd, acts, reverse, clip)
        y = ys if seq else ys[-1:]
        return [y.astype(np.float32), h.astype(np.float32), c.astype(np.float32)]
    yf, hf, cf = lstm_dir(x, h0[:, :H], c0[:, :H], *fwd, acts, False, clip)
    yb, hb, cb = lstm_dir(x, h0[:, H:], c0[:, H:], *back, acts, True, clip)
    yb = yb[::-1]  # aligned with the input steps
    y = np.concatenate([yf, yb], -1) if seq else np.concatenate([yf[-1:], yb[:1]], -1)
    return [a.astype(np.float32) for a in (y, np.concatenate([hf, hb], -1), np.concatenate([cf, cb], -1))]


def gru_ref(x, h, wih, whh, b, acts=("sigmoid", "tanh"), reverse=False, seq=True, input_bias=None):
    """Gates [r, o, z]: o = act(W_o x + R_o (r ⊙ h) + b_o), h = (1 − z) o + z h; iOS18's
    input_bias adds to the bias (both outside the reset product when reset_after is False)."""
    ra, act = ACT[acts[0]], ACT[acts[1]]
    wr, wo, wz = np.split(wih, 3)
    rr, ro, rz = np.split(whh, 3)
    br, bo, bz = np.split(b if input_bias is None else b + input_bias, 3)
    hs = []
    for t in range(len(x) - 1, -1, -1) if reverse else range(len(x)):
        xt = x[t].astype(np.float64)
        z = ra(xt @ wz.T + h @ rz.T + bz)
        r = ra(xt @ wr.T + h @ rr.T + br)
        o = act(xt @ wo.T + (r * h) @ ro.T + bo)
        h = (1 - z) * o + z * h
        hs.append(h)
    ys = np.stack(hs)
    return [(ys if seq else ys[-1:]).astype(np.float32), h.astype(np.float32)]


def rnn_ref(x, h, wih, whh, b, act="tanh", reverse=False, seq=True):
    hs = []
    for t in range(len(x) - 1, -1, -1) if reverse else range(len(x)):
        h = ACT[act](x[t].astype(np.float64) @ wih.T + h @ whh.T + b)
        hs.append(h)
    ys = np.stack(hs)
    return [(ys if seq else ys[-1:]).astype(np.float32), h.astype(np.float32)]


T, B, I, H = 5, 2, 3, 4
X = randn(T, B, I)
H0, C0 = randn(B, H, scale=0.5), randn(B, H, scale=0.5)
H02, C02 = randn(B, 2 * H, scale=0.5), randn(B, 2 * H, scale=0.5)


def lstm_weights(peephole=False):
    return (
        randn(4 * H, I, scale=0.5),
        randn(4 * H, H, scale=0.5),
        randn(4 * H, scale=0.5),
        randn(3 * H, scale=0.5) if peephole else np.zeros(3 * H, np.float32),
    )


LW, LWP, LWB = lstm_weights(), lstm_weights(True), lstm_weights(True)
GW = (randn(3 * H, I, scale=0.5), randn(3 * H, H, scale=0.5), randn(3 * H, scale=0.5))
GIB = randn(3 * H, scale=0.5)
RW = (randn(H, I, scale=0.5), randn(H, H, scale=0.5), randn(H, scale=0.5))


def lstm_build(w, back=None, **kw):
    def build(x, h, c):
        args = dict(x=x, initial_h=h, initial_c=c, weight_ih=w[0], weight_hh=w[1], bias=w[2], **kw)
        if np.any(w[3]):
            args["peephole"] = w[3]
        if back is not None:
            args.update(
                weight_ih_back=back[0], weight_hh_back=back[1], bias_back=back[2], peephole_back=back[3]
            )
        return mb.lstm(**args)

    return build


RECURRENT = [
    Case(
        "s_lstm_forward",
        {"x": X, "h": H0, "c": C0},
        lstm_build(LW, output_sequence=True),
        lambda x, h, c: lstm_ref(x, h, c, LW),
    ),
    Case(
        "s_lstm_peephole_acts_last",
        {"x": X, "h": H0, "c": C0},
        lstm_build(
            LWP,
            output_sequence=False,
            recurrent_activation="hard_sigmoid",
            cell_activation="scaled_tanh",
            activation="linear",
        ),
        lambda x, h, c: lstm_ref(x, h, c, LWP, acts=("hard_sigmoid", "scaled_tanh", "linear"), seq=False),
    ),
    Case(
        "s_lstm_reverse",
        {"x": X, "h": H0, "c": C0},
        lstm_build(LWP, direction="reverse", output_sequence=True, cell_activation="relu"),
        lambda x, h, c: lstm_ref(x, h, c, LWP, acts=("sigmoid", "relu", "tanh"), reverse=True),
    ),
    Case(
        "s_lstm_bidirectional",
        {"x": X, "h": H02, "c": C02},
        lstm_build(LWP, LWB, direction="bidirectional", output_sequence=True),
        lambda x, h, c: lstm_ref(x, h, c, LWP, LWB),
    ),
    Case(
        "s_lstm_bidirectional_last",
        {"x": X, "h": H02, "c": C02},
        lstm_build(LW, LWB, direction="bidirectional", output_sequence=False),
        lambda x, h, c: lstm_ref(x, h, c, LW, LWB, seq=False),
    ),
    Case(
        "s_lstm_fp16",
        {"x": X, "h": H0, "c": C0},
        lstm_build(LW, output_sequence=True),
        lambda x, h, c: lstm_ref(x, h, c, LW),
        opset="iOS17",
        fp16=True,
        tolerance=1e-2,
    ),
    Case(
        "s_lstm_clip",
        {"x": X * 4, "h": H0, "c": C0},
        lstm_build(LW, output_sequence=True, clip=np.float32(0.3)),
        lambda x, h, c: lstm_ref(x, h, c, LW, clip=0.3),
    ),
    Case(
        "s_lstm_clip_bidirectional_peephole_last",
        {"x": X * 4, "h": H02, "c": C02},
        lstm_build(
            LWP,
            LWB,
            direction="bidirectional",
            output_sequence=False,
            clip=np.float32(0.4),
            recurrent_activation="hard_sigmoid",
            activation="linear",
        ),
        lambda x, h, c: lstm_ref(
            x, h, c, LWP, LWB, acts=("hard_sigmoid", "tanh", "linear"), seq=False, clip=0.4
        ),
    ),
    Case(
        "s_lstm_clip_reverse_seq",
        {"x": X * 4, "h": H0, "c": C0},
        lstm_build(LWP, direction="reverse", output_sequence=True, clip=np.float32(0.5)),
        lambda x, h, c: lstm_ref(x, h, c, LWP, reverse=True, clip=0.5),
    ),
    Case(
        "s_gru_ios18_input_bias",
        {"x": X, "h": H0},
        lambda x, h: mb.gru(
            x=x,
            initial_h=h,
            weight_ih=GW[0],
            weight_hh=GW[1],
            bias=GW[2],
            input_bias=GIB,
            output_sequence=True,
            reset_after=False,
        ),
        lambda x, h: gru_ref(x, h, *GW, input_bias=GIB),
        opset="iOS18",
    ),
    Case(
        "s_gru_forward",
        {"x": X, "h": H0},
        lambda x, h: mb.gru(
            x=x, initial_h=h, weight_ih=GW[0], weight_hh=GW[1], bias=GW[2], output_sequence=True
        ),
        lambda x, h: gru_ref(x, h, *GW),
    ),
    Case(
        "s_gru_reverse_last",
        {"x": X, "h": H0},
        lambda x, h: mb.gru(
            x=x,
            initial_h=h,
            weight_ih=GW[0],
            weight_hh=GW[1],
            bias=GW[2],
            direction="reverse",
            recurrent_activation="hard_sigmoid",
            activation="tanh",
        ),
        lambda x, h: gru_ref(x, h, *GW, acts=("hard_sigmoid", "tanh"), reverse=True, seq=False),
    ),
    Case(
        "s_gru_reverse_seq_nobias",
        {"x": X, "h": H0},
        lambda x, h: mb.gru(
            x=x, initial_h=h, weight_ih=GW[0], weight_hh=GW[1], direction="reverse", output_sequence=True
        ),
        lambda x, h: gru_ref(x, h, GW[0], GW[1], np.zeros(3 * H), reverse=True),
    ),
    Case(
        "s_rnn_forward",
        {"x": X, "h": H0},
        lambda x, h: mb.rnn(
            x=x, initial_h=h, weight_ih=RW[0], weight_hh=RW[1], bias=RW[2], output_sequence=True
        ),
        lambda x, h: rnn_ref(x, h, *RW),
    ),
    Case(
        "s_rnn_reverse_relu",
        {"x": X, "h": H0},
        lambda x, h: mb.rnn(
            x=x,
            initial_h=h,
            weight_ih=RW[0],
            weight_hh=RW[1],
            bias=RW[2],
            direction="reverse",
            output_sequence=True,
            activation="relu",
        ),
        lambda x, h: rnn_ref(x, h, *RW, act="relu", reverse=True),
    ),
]

# ---------------------------------------------------------------------------------------------
# Attention.


def sdpa_ref(q, k, v, mask=None):
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = s + (np.where(mask, 0.0, -np.inf) if mask.dtype == np.bool_ else mask)
    e = np.exp(s - s.max(-1, keepdims=True))
    return [((e / e.sum(-1, keepdims=True)) @ v).astype(np.float32)]


Q4, K4, V4 = randn(2, 3, 5, 8), randn(2, 3, 6, 8), randn(2, 3, 6, 7)
Q3, K3, V3 = randn(2, 5, 8), randn(2, 6, 8), randn(2, 6, 4)
BOOL_MASK = rng.random((5, 6)) > 0.4
BOOL_MASK[:, 0] = True  # every row keeps one key
FLOAT_MASK = randn(2, 1, 5, 6)

ATTENTION = [
    Case(
        "s_sdpa",
        {"q": Q4, "k": K4, "v": V4},
        lambda q, k, v: mb.scaled_dot_product_attention(query=q, key=k, value=v),
        lambda q, k, v: sdpa_ref(q, k, v),
        opset="iOS18",
    ),
    Case(
        "s_sdpa_bool_mask",
        {"q": Q3, "k": K3, "v": V3, "m": BOOL_MASK.astype(np.float32)},  # Core ML has no bool inputs
        lambda q, k, v, m: mb.scaled_dot_product_attention(
            query=q, key=k, value=v, attn_mask=mb.cast(x=m, dtype="bool")
        ),
        lambda q, k, v, m: sdpa_ref(q, k, v, m != 0),
        opset="iOS18",
    ),
    Case(
        "s_sdpa_float_mask",
        {"q": Q4, "k": K4, "v": V4},
        lambda q, k, v: mb.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=FLOAT_MASK),
        lambda q, k, v: sdpa_ref(q, k, v, FLOAT_MASK),
        opset="iOS18",
    ),
]

# ---------------------------------------------------------------------------------------------
# Quantize / dequantize (iOS17).

QX = randn(2, 3, 4, scale=3.0)
QSCALE = np.array([0.02, 0.05, 0.1], np.float32)
QZP = np.array([0, 128, 250], np.uint8)


def quantize_ref(x, scale, zp, lo, hi):
    return np.clip(np.round(x / scale) + zp, lo, hi)  # np.round: half to even, as MIL's


QUANT = [
    Case(
        "s_quantize_dequantize_axis",
        {"x": QX},
        lambda x: mb.dequantize(
            input=mb.quantize(input=x, scale=QSCALE, zero_point=QZP, axis=1, output_dtype="uint8"),
            scale=QSCALE,
            zero_point=QZP,
            axis=1,
        ),
        lambda x: [
            (
                (quantize_ref(x, QSCALE[:, None], QZP[:, None], 0, 255) - QZP[:, None]) * QSCALE[:, None]
            ).astype(np.float32)
        ],
        opset="iOS17",
    ),
    Case(
        "s_quantize_int8_scalar",
        {"x": QX},
        lambda x: mb.dequantize(
            input=mb.quantize(input=x, scale=np.float32(0.03), output_dtype="int8"), scale=np.float32(0.03)
        ),
        lambda x: [(quantize_ref(x, np.float32(0.03), 0, -128, 127) * np.float32(0.03)).astype(np.float32)],
        opset="iOS17",
    ),
]

# ---------------------------------------------------------------------------------------------
# Compressed weights: each decompressed tensor feeds an op with a runtime input.


def pack_bits(values, bits):
    """values packed ``bits`` bits each, low bits first (MIL's iOS16 constexpr packing)."""
    values = np.asarray(values, np.uint16).reshape(-1)
    flat = ((values[:, None] >> np.arange(bits)) & 1).astype(np.uint8).reshape(-1)
    return np.packbits(flat, bitorder="little")


AQ = rng.integers(0, 256, (6, 4)).astype(np.uint8)
AZP = np.array([3, 128, 7, 200], np.uint8)
ASCALE = np.array([0.01, 0.02, 0.005, 0.04], np.float32)
AQ8 = rng.integers(-128, 128, (6, 4)).astype(np.int8)
XA = randn(2, 6)
F16 = randn(6, 4).astype(np.float16)

LUT16 = randn(4)
IDX16 = rng.integers(0, 4, 15)
LUT64 = randn(64)
IDX64 = rng.integers(0, 64, (6, 5))
SPARSE_MASK = rng.random(30) > 0.5
SPARSE_VALS = randn(int(SPARSE_MASK.sum()))
X65 = randn(2, 6, 5)


def lut_groups_ref(idx, lut):
    """iOS18 lut [*groups, palettes, 1]: element (i, j) reads group (i // bi, j // bj)."""
    bi, bj = idx.shape[0] // lut.shape[0], idx.shape[1] // lut.shape[1]
    out = np.empty(idx.shape, lut.dtype)
    for i in range(idx.shape[0]):
        for j in range(idx.shape[1]):
            out[i, j] = lut[i // bi, j // bj, idx[i, j], 0]
    return out


IDX2 = rng.integers(0, 4, (8, 6))
LUT2 = randn(2, 1, 4, 1)
IDX3 = rng.integers(0, 8, (5, 7))
LUT3 = randn(1, 1, 8, 1)
IDX6 = rng.integers(0, 64, (4, 5))
LUT6 = randn(1, 1, 64, 1)
IDX4 = rng.integers(0, 16, (16, 8))
LUT4 = randn(1, 2, 16, 1).astype(np.float16)
VIDX = rng.integers(0, 2, (3, 2, 4))
VLUT = randn(1, 1, 1, 2, 3)


def vector_lut_ref(idx, lut):
    out = np.empty((3, 6, 4), np.float32)
    for a in range(3):
        for j in range(2):
            for k in range(4):
                out[a, j * 3 : j * 3 + 3, k] = lut[0, 0, 0, idx[a, j, k]]
    return out


SD = rng.integers(-8, 8, (8, 6))
SSCALE = np.abs(randn(2, 3)) + 0.1
SOFF = rng.integers(-8, 8, (2, 3))
UD = rng.integers(0, 16, (4, 8))
USCALE = (np.abs(randn(4, 2)) + 0.1).astype(np.float16)


def shift_scale_ref(data, scale, offset=None):
    out = np.empty(data.shape, np.float64)
    bi, bj = data.shape[0] // scale.shape[0], data.shape[1] // scale.shape[1]
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            off = 0 if offset is None else offset[i // bi, j // bj]
            out[i, j] = scale[i // bi, j // bj] * (float(data[i, j]) - off)
    return out.astype(scale.dtype)


MASK18 = rng.random((6, 5)) > 0.5
VALS18 = randn(int(MASK18.sum()))
QLUT = rng.integers(-128, 128, (1, 1, 16, 1)).astype(np.int8)
QIDX = rng.integers(0, 16, (6, 5))
SMASK = rng.random((6, 4)) > 0.4
SIDX = rng.integers(0, 4, int(SMASK.sum()))
SLUT = randn(1, 1, 4, 1)
SQ = rng.integers(-128, 128, int(SMASK.sum()))
SQSCALE = np.abs(randn(1, 4)) + 0.1
SQOFF = rng.integers(-5, 5, (1, 4)).astype(np.int8)
X64 = randn(2, 6)


def sparse_ref(mask, vals):
    out = np.zeros(mask.size, np.float32)
    out[mask.reshape(-1)] = vals
    return out.reshape(mask.shape)


def dense(pair):
    """constexpr_sparse_to_dense of a (mask, nonzero_data) pair."""
    mask, values = pair
    return mb.constexpr_sparse_to_dense(nonzero_data=values, mask=mask)


def u(dtype):
    return lambda a: np.asarray(a).astype(dtype)


COMPRESSED = [
    Case(
        "s_constexpr_affine_uint8_axis",
        {"x": XA},
        lambda x: mb.matmul(
            x=x, y=mb.constexpr_affine_dequantize(quantized_data=AQ, zero_point=AZP, scale=ASCALE, axis=1)
        ),
        lambda x: [x @ ((AQ.astype(np.float32) - AZP) * ASCALE)],
        opset="iOS16",
    ),
    Case(
        "s_constexpr_affine_int8_scalar",
        {"x": XA},
        lambda x: mb.matmul(
            x=x,
            y=mb.constexpr_affine_dequantize(
                quantized_data=AQ8, zero_point=np.int8(-3), scale=np.float32(0.01), axis=0
            ),
        ),
        lambda x: [x @ ((AQ8.astype(np.float32) + 3) * np.float32(0.01))],
        opset="iOS16",
    ),
    Case(
        "s_constexpr_cast",
        {"x": XA},
        lambda x: mb.matmul(x=x, y=mb.constexpr_cast(source_val=F16, output_dtype="fp32")),
        lambda x: [x @ F16.astype(np.float32)],
        opset="iOS16",
    ),
    Case(
        "s_constexpr_lut_ios16_2bit",
        {"x": randn(3, 5)},
        lambda x: mb.add(
            x=x,
            y=mb.constexpr_lut_to_dense(indices=pack_bits(IDX16, 2), lut=LUT16, shape=np.array([3, 5], np.uint32)),
        ),
        lambda x: [x + LUT16[IDX16].reshape(3, 5)],
        opset="iOS16",
    ),
    Case(
        "s_constexpr_lut_ios16_6bit",
        {"x": randn(6, 5)},
        lambda x: mb.add(
            x=x,
            y=mb.constexpr_lut_to_dense(indices=pack_bits(IDX64, 6), lut=LUT64, shape=np.array([6, 5], np.uint32)),
        ),
        lambda x: [x + LUT64[IDX64]],
        opset="iOS16",
    ),
    Case(
        "s_constexpr_sparse_ios16",
        {"x": X65},
        lambda x: mb.add(
            x=x,
            y=mb.constexpr_sparse_to_dense(
                nonzero_data=SPARSE_VALS, mask=pack_bits(SPARSE_MASK, 1), shape=np.array([6, 5], np.uint32)
            ),
        ),
        lambda x: [x + sparse_ref(SPARSE_MASK.reshape(6, 5), SPARSE_VALS)],
        opset="iOS16",
    ),
    Case(
        "s_constexpr_lut_uint2_groups",
        {"x": randn(8, 6)},
        lambda x: mb.add(x=x, y=mb.constexpr_lut_to_dense(indices=u(types.np_uint2_dtype)(IDX2), lut=LUT2)),
        lambda x: [x + lut_groups_ref(IDX2, LUT2)],
        opset="iOS18",
    ),
    Case(
        "s_constexpr_lut_uint3",
        {"x": randn(5, 7)},
        lambda x: mb.add(x=x, y=mb.constexpr_lut_to_dense(indices=u(types.np_uint3_dtype)(IDX3), lut=LUT3)),
        lambda x: [x + lut_groups_ref(IDX3, LUT3)],
        opset="iOS18",
    ),
    Case(
        "s_constexpr_lut_uint6",
        {"x": randn(4, 5)},
        lambda x: mb.add(x=x, y=mb.constexpr_lut_to_dense(indices=u(types.np_uint6_dtype)(IDX6), lut=LUT6)),
        lambda x: [x + lut_groups_ref(IDX6, LUT6)],
        opset="iOS18",
    ),
    Case(
        "s_constexpr_lut_uint4_fp16",
        {"x": randn(16, 8)},
        lambda x: mb.add(
            x=x,
            y=mb.cast(x=mb.constexpr_lut_to_dense(indices=u(types.np_uint4_dtype)(IDX4), lut=LUT4), dtype="fp32"),
        ),
        lambda x: [x + lut_groups_ref(IDX4, LUT4).astype(np.float32)],
        opset="iOS18",
    ),
    Case(
        "s_constexpr_lut_vector",
        {"x": randn(3, 6, 4)},
        lambda x: mb.add(
            x=x,
            y=mb.constexpr_lut_to_dense(indices=u(types.np_uint1_dtype)(VIDX), lut=VLUT, vector_axis=np.int32(1)),
        ),
        lambda x: [x + vector_lut_ref(VIDX, VLUT)],
        opset="iOS18",
    ),
    Case(
        "s_constexpr_shift_scale_int4",
        {"x": randn(2, 8)},
        lambda x: mb.matmul(
            x=x,
            y=mb.constexpr_blockwise_shift_scale(
                data=u(types.np_int4_dtype)(SD), scale=SSCALE, offset=u(types.np_int4_dtype)(SOFF)
            ),
        ),
        lambda x: [x @ shift_scale_ref(SD, SSCALE, SOFF)],
        opset="iOS18",
    ),
    Case(
        "s_constexpr_shift_scale_uint4_fp16",
        {"x": randn(2, 4)},
        lambda x: mb.matmul(
            x=x,
            y=mb.cast(
                x=mb.constexpr_blockwise_shift_scale(data=u(types.np_uint4_dtype)(UD), scale=USCALE), dtype="fp32"
            ),
        ),
        lambda x: [x @ shift_scale_ref(UD, USCALE).astype(np.float32)],
        opset="iOS18",
        tolerance=1e-4,
    ),
    Case(
        "s_constexpr_sparse_ios18",
        {"x": randn(6, 5)},
        lambda x: mb.add(
            x=x, y=mb.constexpr_sparse_to_dense(nonzero_data=VALS18, mask=u(types.np_uint1_dtype)(MASK18))
        ),
        lambda x: [x + sparse_ref(MASK18, VALS18)],
        opset="iOS18",
    ),
    Case(
        "s_constexpr_chain_quantized_lut",
        {"x": randn(6, 5)},
        lambda x: mb.add(
            x=x,
            y=mb.constexpr_lut_to_dense(
                indices=u(types.np_uint4_dtype)(QIDX),
                lut=mb.constexpr_blockwise_shift_scale(
                    data=QLUT, scale=np.full((1, 1, 1, 1), 0.02, np.float32), offset=np.full((1, 1, 1, 1), 5, np.int8)
                ),
            ),
        ),
        lambda x: [x + ((QLUT[0, 0, :, 0].astype(np.float32) - 5) * np.float32(0.02))[QIDX]],
        opset="iOS18",
    ),
    Case(
        "s_constexpr_chain_lut_to_sparse",
        {"x": X64},
        lambda x: mb.matmul(
            x=x,
            y=dense(
                mb.constexpr_lut_to_sparse(
                    indices_mask=u(types.np_uint1_dtype)(SMASK),
                    indices_nonzero_data=u(types.np_uint2_dtype)(SIDX),
                    lut=SLUT,
                )
            ),
        ),
        lambda x: [x @ sparse_ref(SMASK, SLUT[0, 0, SIDX, 0])],
        opset="iOS18",
    ),
    Case(
        "s_constexpr_chain_sparse_shift_scale",
        {"x": X64},
        lambda x: mb.matmul(
            x=x,
            y=dense(
                mb.constexpr_sparse_blockwise_shift_scale(
                    data_mask=u(types.np_uint1_dtype)(SMASK), nonzero_data=SQ.astype(np.int8), scale=SQSCALE,
                    offset=SQOFF,
                )
            ),
        ),
        lambda x: [x @ (shift_scale_ref(sparse_ref(SMASK, SQ), SQSCALE, SQOFF) * SMASK)],
        opset="iOS18",
    ),
]  # fmt: skip

DQ = rng.integers(-128, 128, (6, 4)).astype(np.int8)
DQ_SCALE = np.array([0.01, 0.02, 0.005, 0.04], np.float32)
DQ_ZP = np.array([3, -7, 0, 100], np.int8)
LQ = rng.integers(-128, 128, (4 * H, I)).astype(np.int8)
LQ_SCALE = (np.abs(randn(4 * H, 1)) * 0.01 + 0.001).astype(np.float32)

COMPRESSED += [
    Case(
        "s_constexpr_affine_from_dequantize",
        {"x": XA},
        lambda x: mb.matmul(x=x, y=mb.dequantize(input=DQ, scale=DQ_SCALE, zero_point=DQ_ZP, axis=1)),
        lambda x: [x @ ((DQ.astype(np.float32) - DQ_ZP) * DQ_SCALE)],
        opset="iOS17",
    ),
    Case(
        "s_lstm_compressed_weight",
        {"x": X, "h": H0, "c": C0},
        lambda x, h, c: mb.lstm(
            x=x,
            initial_h=h,
            initial_c=c,
            weight_ih=mb.constexpr_blockwise_shift_scale(data=LQ, scale=LQ_SCALE),
            weight_hh=LW[1],
            bias=LW[2],
            output_sequence=True,
        ),
        lambda x, h, c: lstm_ref(x, h, c, (LQ.astype(np.float32) * LQ_SCALE, *LW[1:])),
        opset="iOS18",
    ),
]

CASES = RECURRENT + ATTENTION + QUANT + COMPRESSED
