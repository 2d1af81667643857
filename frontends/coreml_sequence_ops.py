"""MIL op rules: recurrent layers, attention, and the compressed-weight ops (constexpr_*,
quantize/dequantize), with MIL's semantics written in ONNX ops.

Recurrent layers (``lstm``, ``gru``, ``rnn``) become ONNX LSTM / GRU / RNN with the gates
reordered (MIL: LSTM ``i f o z``, peephole ``i f o``, GRU ``r o z``; ONNX: ``i o f c``, ``i o f``,
``z r h``), MIL's bias as ONNX's recurrent bias (an iOS18 GRU's input_bias as its input bias),
and MIL's ``[batch, directions·hidden]`` states and outputs reshaped from ONNX's ``[directions,
batch, hidden]``. An lstm with ``clip`` (which bounds MIL's cell state, not ONNX's gate inputs)
is written out step by step. A unidirectional ``reverse``
layer gives its output sequence in the order it processes the steps (last input step first, as
Core ML's own tests of the op check it); a bidirectional one gives both directions aligned with
the input steps, as ONNX does.

The ``constexpr_*`` ops decompress weights when the model is loaded: here they are evaluated at
import and give constants (which chain: a constexpr may read another's output).
"""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, Value

from .coreml_node import Const, Node, rule

# MIL activation name → (ONNX activation, alpha, beta); alpha / beta None where it takes none.
# MIL's scaled_tanh in a recurrent layer has alpha = beta = 1 (tanh), linear is 1·x + 0, and
# hard_sigmoid is min(max(0.2·x + 0.5, 0), 1).
ACTIVATIONS = {
    "sigmoid": ("Sigmoid", None, None),
    "tanh": ("Tanh", None, None),
    "scaled_tanh": ("Tanh", None, None),
    "relu": ("Relu", None, None),
    "linear": ("Affine", 1.0, 0.0),
    "hard_sigmoid": ("HardSigmoid", 0.2, 0.5),
    "sigmoid_hard": ("HardSigmoid", 0.2, 0.5),
}
INT64_MIN = -(1 << 63)


def _activation_attrs(node: Node, names: list[str]) -> dict:
    acts, alphas, betas = [], [], []
    for name in names:
        entry = ACTIVATIONS.get(str(name).lower())
        if entry is None:
            raise node.unsupported(f"activation '{name}'")
        onnx, alpha, beta = entry
        acts.append(onnx)
        if alpha is not None:
            alphas.append(alpha)
        if beta is not None:
            betas.append(beta)
    attrs: dict = {"activations": acts}
    if alphas:
        attrs["activation_alpha"] = alphas
    if betas:
        attrs["activation_beta"] = betas
    return attrs


def _gates(w: np.ndarray, order: list[int]) -> np.ndarray:
    """The gate blocks of ``w`` (stacked on axis 0) in the given order."""
    blocks = np.split(np.asarray(w), len(order), axis=0)
    return np.concatenate([blocks[k] for k in order], axis=0)


def _states_in(node: Node, v: Value, dirs: int, hidden: int) -> Value:
    """MIL's [batch, dirs·hidden] state → ONNX's [dirs, batch, hidden]."""
    if dirs == 1:
        return node.one("Unsqueeze", [v, node.int64s([0])])
    split = node.one("Reshape", [v, node.int64s([0, dirs, hidden])])
    return node.one("Transpose", [split], {"perm": [1, 0, 2]})


def _states_out(node: Node, v: Value, dirs: int) -> Value:
    """ONNX's [dirs, batch, hidden] state → MIL's [batch, dirs·hidden] (forward first)."""
    if dirs == 1:
        return node.one("Squeeze", [v, node.int64s([0])])
    t = node.one("Transpose", [v], {"perm": [1, 0, 2]})
    return node.one("Reshape", [t, node.int64s([0, -1])])


def _sequence_out(node: Node, y: Value, dirs: int, reverse: bool) -> Value:
    """ONNX's Y [T, dirs, batch, hidden] → MIL's [T, batch, dirs·hidden]; a unidirectional
    reverse layer's steps in processing order (Y reversed in time)."""
    if dirs == 1:
        y = node.one("Squeeze", [y, node.int64s([1])])
        if reverse:
            y = node.one(
                "Slice", [y, node.int64s([-1]), node.int64s([INT64_MIN]), node.int64s([0]), node.int64s([-1])]
            )
        return y
    t = node.one("Transpose", [y], {"perm": [0, 2, 1, 3]})
    return node.one("Reshape", [t, node.int64s([0, 0, -1])])


def _recurrent(
    node: Node, op_type: str, gates: int, order: list[int], directions: tuple, act_names: list[str]
):
    """An lstm / gru / rnn as the ONNX op: MIL's outputs (output sequence or last step, h[, c])."""
    direction = str(node.scalar("direction", "forward"))
    if direction not in directions:
        raise node.unsupported(f"direction '{direction}'")
    dirs = 2 if direction == "bidirectional" else 1
    t = node.dtype("x")
    w_ih, w_hh = np.asarray(node.const("weight_ih")), np.asarray(node.const("weight_hh"))
    if (
        w_ih.ndim != 2
        or w_hh.ndim != 2
        or w_hh.shape[0] != gates * w_hh.shape[1]
        or w_ih.shape[0] != w_hh.shape[0]
    ):
        raise node.fail(f"weights of shapes {list(w_ih.shape)} and {list(w_hh.shape)} for {gates} gates")
    hidden = w_hh.shape[1]
    suffixes = [""] if dirs == 1 else ["", "_back"]
    Ws, Rs, Bs, Ps = [], [], [], []
    for s in suffixes:
        wi = np.asarray(node.const("weight_ih" + s))
        wh = np.asarray(node.const("weight_hh" + s))
        if wi.shape != w_ih.shape or wh.shape != w_hh.shape:
            raise node.fail(f"weight_ih{s} / weight_hh{s} of shapes {list(wi.shape)}, {list(wh.shape)}")
        Ws.append(_gates(wi, order))
        Rs.append(_gates(wh, order))
        b = node.const("bias" + s, None)
        b = np.zeros(gates * hidden, t.numpy) if b is None else _gates(np.asarray(b).reshape(-1), order)
        # MIL's bias is added outside the reset product (GRU) or with the input's (LSTM, RNN):
        # ONNX's recurrent bias; a GRU's input_bias (iOS18) is ONNX's input bias.
        ib = node.const("input_bias", None) if op_type == "GRU" else None
        ib = np.zeros_like(b) if ib is None else _gates(np.asarray(ib).reshape(-1), order)
        Bs.append(np.concatenate([ib, b]))
        if op_type == "LSTM":
            p = node.const("peephole" + s, None)
            Ps.append(
                np.zeros(3 * hidden, t.numpy) if p is None else _gates(np.asarray(p).reshape(-1), [0, 2, 1])
            )
    attrs = {"direction": direction, "hidden_size": hidden}
    attrs.update(_activation_attrs(node, act_names * dirs))
    inputs = [
        node.x("x"),
        node.imp.const(np.stack(Ws).astype(t.numpy)),
        node.imp.const(np.stack(Rs).astype(t.numpy)),
        node.imp.const(np.stack(Bs).astype(t.numpy)),
        None,
        _states_in(node, node.x("initial_h"), dirs, hidden),
    ]
    if op_type == "LSTM":
        inputs.append(_states_in(node, node.x("initial_c"), dirs, hidden))
        if any(np.any(p) for p in Ps):
            inputs.append(node.imp.const(np.stack(Ps).astype(t.numpy)))
    if op_type == "GRU":
        attrs["linear_before_reset"] = 0
    outs = node.op(op_type, inputs, attrs, num_outputs=3 if op_type == "LSTM" else 2)
    y = _sequence_out(node, outs[0], dirs, direction == "reverse")
    states = [_states_out(node, s, dirs) for s in outs[1:]]
    if not node.scalar("output_sequence", False):
        y = node.one("Unsqueeze", [states[0], node.int64s([0])])
    return [y, *states]


@rule("lstm")
def lstm(node: Node) -> list:
    """MIL's ``clip`` bounds the cell state (ONNX's the gates' inputs): a clipped lstm is written
    out step by step (a sequence of known length)."""
    acts = [
        node.scalar("recurrent_activation", "sigmoid"),
        node.scalar("cell_activation", "tanh"),
        node.scalar("activation", "tanh"),
    ]
    if node.has("clip"):
        return _lstm_written_out(node, float(node.scalar("clip")), acts)
    return _recurrent(node, "LSTM", 4, [0, 2, 1, 3], ("forward", "reverse", "bidirectional"), acts)


def _activate(node: Node, name: str, v: Value) -> Value:
    onnx, alpha, beta = ACTIVATIONS[str(name).lower()]
    if onnx == "Affine":
        return v  # linear: 1·x + 0
    attrs = {"alpha": alpha, "beta": beta} if alpha is not None else None
    return node.one(onnx, [v], attrs)


def _lstm_written_out(node: Node, clip: float, acts: list[str]) -> list:
    """The LSTM of MIL's definition, one group of ops per step: gates [i f o z] = x·Wᵀ + h·Rᵀ + b
    (+ peephole·c for i, f from c_{t−1}, for o from c_t), c_t = clip(f·c + i·z), h_t = o·act(c_t)."""
    for name in acts:
        if str(name).lower() not in ACTIVATIONS:
            raise node.unsupported(f"activation '{name}'")
    direction = str(node.scalar("direction", "forward"))
    if direction not in ("forward", "reverse", "bidirectional"):
        raise node.unsupported(f"direction '{direction}'")
    steps = node.shape("x")[0] if node.shape("x") is not None else None
    if not isinstance(steps, int):
        raise node.unsupported("lstm clip with a sequence of unknown length")
    t = node.dtype("x")
    x = node.x("x")
    w_hh = np.asarray(node.const("weight_hh"))
    hidden = w_hh.shape[1]
    dirs = 2 if direction == "bidirectional" else 1
    bound = [node.full(-clip, t), node.full(clip, t)]
    sizes = node.int64s([hidden] * 4)
    ys, hs, cs = [], [], []
    for d, suffix in enumerate([""] if dirs == 1 else ["", "_back"]):
        w = np.asarray(node.const("weight_ih" + suffix))
        r = np.asarray(node.const("weight_hh" + suffix))
        b = node.const("bias" + suffix, None)
        p = node.const("peephole" + suffix, None)
        xw = node.one("MatMul", [x, node.imp.const(np.ascontiguousarray(w.T.astype(t.numpy)))])
        if b is not None:
            xw = node.one("Add", [xw, node.imp.const(np.asarray(b).astype(t.numpy))])
        rt = node.imp.const(np.ascontiguousarray(r.T.astype(t.numpy)))
        peep = None
        if p is not None and np.any(p):
            peep = [node.imp.const(a.astype(t.numpy)) for a in np.split(np.asarray(p).reshape(-1), 3)]
        h, c = node.x("initial_h"), node.x("initial_c")
        if dirs == 2:
            span = [node.int64s([d * hidden]), node.int64s([(d + 1) * hidden]), node.int64s([1])]
            h, c = node.one("Slice", [h, *span]), node.one("Slice", [c, *span])
        reverse = direction == "reverse" or d == 1
        outs = []
        for step in range(steps - 1, -1, -1) if reverse else range(steps):
            g = node.one("Gather", [xw, node.imp.const(np.asarray(step, np.int64))], {"axis": 0})
            g = node.one("Add", [g, node.one("MatMul", [h, rt])])
            gi, gf, go, gz = node.op("Split", [g, sizes], {"axis": 1}, num_outputs=4)
            if peep is not None:
                gi = node.one("Add", [gi, node.one("Mul", [peep[0], c])])
                gf = node.one("Add", [gf, node.one("Mul", [peep[1], c])])
            i, f = _activate(node, acts[0], gi), _activate(node, acts[0], gf)
            z = _activate(node, acts[1], gz)
            c = node.one("Add", [node.one("Mul", [f, c]), node.one("Mul", [i, z])])
            c = node.one("Clip", [c, *bound])
            if peep is not None:
                go = node.one("Add", [go, node.one("Mul", [peep[2], c])])
            h = node.one("Mul", [_activate(node, acts[0], go), _activate(node, acts[2], c)])
            outs.append(h)
        if dirs == 2 and reverse:
            outs.reverse()  # a bidirectional layer's backward outputs follow the input steps
        ys.append(outs)
        hs.append(h)
        cs.append(c)
    h = hs[0] if dirs == 1 else node.one("Concat", hs, {"axis": 1})
    c = cs[0] if dirs == 1 else node.one("Concat", cs, {"axis": 1})
    if not node.scalar("output_sequence", False):
        return [node.one("Unsqueeze", [h, node.int64s([0])]), h, c]
    per_step = [outs[0] if dirs == 1 else node.one("Concat", list(outs), {"axis": 1}) for outs in zip(*ys)]
    y = node.one("Concat", [node.one("Unsqueeze", [v, node.int64s([0])]) for v in per_step], {"axis": 0})
    return [y, h, c]


@rule("gru")
def gru(node: Node) -> list:
    """MIL's candidate is activation(W_o·x + R_o·(r ⊙ h) + b_o): ONNX's linear_before_reset = 0,
    MIL's bias ONNX's recurrent bias, iOS18's input_bias ONNX's input bias. iOS18's
    reset_after = True is refused: its docstring ("the reset gate is applied before the
    elementwise matrix multiplication") and coremltools' PyTorch parity test of it (marked as
    failing) do not settle its formula."""
    if node.scalar("reset_after", False):
        raise node.unsupported("gru reset_after = True (its formula is not settled by MIL's definition)")
    acts = [node.scalar("recurrent_activation", "sigmoid"), node.scalar("activation", "tanh")]
    return _recurrent(node, "GRU", 3, [2, 0, 1], ("forward", "reverse"), acts)


@rule("rnn")
def rnn(node: Node) -> list:
    return _recurrent(node, "RNN", 1, [0], ("forward", "reverse"), [node.scalar("activation", "tanh")])


# ---------------------------------------------------------------------------------------------
# Attention.


@rule("scaled_dot_product_attention", since="iOS18")
def scaled_dot_product_attention(node: Node) -> list:
    """softmax(Q·Kᵀ / √E + mask)·V over the last axis; a bool mask keeps where true (−∞ elsewhere)."""
    q, k, v = node.x("query"), node.x("key"), node.x("value")
    rank, t = node.rank("key"), node.dtype("query")
    e = node.shape("query")[-1]
    if not isinstance(e, int):
        raise node.unsupported("a query of unknown embedding size")
    perm = list(range(rank))
    perm[-2:] = [rank - 1, rank - 2]
    scores = node.one("MatMul", [q, node.one("Transpose", [k], {"perm": perm})])
    scores = node.one("Div", [scores, node.full(np.sqrt(e), t)])
    if node.has("attn_mask"):
        mask = node.x("attn_mask")
        if node.dtype("attn_mask") == DataType.BOOL:
            scores = node.one("Where", [mask, scores, node.full(-np.inf, t)])
        else:
            if node.dtype("attn_mask") != t:
                mask = node.cast(mask, t)
            scores = node.one("Add", [scores, mask])
    weights = node.one("Softmax", [scores], {"axis": -1})
    return node.op("MatMul", [weights, v])


# ---------------------------------------------------------------------------------------------
# Quantization.


def _along(p: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """A scalar as it is, a vector shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    p = np.asarray(p)
    if p.ndim == 0:
        return p
    shape = [1] * rank
    shape[axis] = -1
    return p.reshape(shape)


def _qparams(node: Node, zp_dtype: DataType) -> tuple[np.ndarray, np.ndarray, dict]:
    """scale and zero_point (0 when absent) as ONNX takes them: scalars, or vectors along axis."""
    rank = node.rank("input")
    scale = np.array(node.const("scale"))  # a copy, contiguous, of its own rank
    zp = node.const("zero_point") if node.has("zero_point") else np.zeros(scale.shape, zp_dtype.numpy)
    zp = np.array(zp, dtype=zp_dtype.numpy)
    if scale.ndim > 1 or zp.shape != scale.shape:
        raise node.fail(f"scale of shape {list(scale.shape)}, zero_point {list(zp.shape)}")
    attrs = {}
    if scale.ndim == 1:
        axis = node.scalar("axis", None)
        if axis is None:
            raise node.fail("vector scale without axis")
        attrs["axis"] = int(axis) % rank
        size = node.shape("input")[attrs["axis"]]
        if isinstance(size, int) and size != scale.size:
            raise node.fail(f"{scale.size} scales along axis {attrs['axis']} of size {size}")
    return scale, zp, attrs


@rule("quantize", since="iOS17")
def quantize(node: Node) -> list:
    """clip(round_half_even(x / scale) + zero_point) as int8 / uint8; zero_point 0 when absent."""
    scale, zp, attrs = _qparams(node, node.out().dtype)
    return node.op("QuantizeLinear", [node.x("input"), node.imp.const(scale), node.imp.const(zp)], attrs)


@rule("dequantize", since="iOS17")
def dequantize(node: Node) -> list:
    """scale · (x − zero_point) in scale's type; zero_point 0 when absent. A constant input (a
    quantized weight) is dequantized at import, so that it stays known (computed in float32,
    then rounded to scale's type, as coremltools materializes it)."""
    scale, zp, attrs = _qparams(node, node.dtype("input"))
    if node.is_const("input"):
        q = np.asarray(node.const("input"))
        if "axis" in attrs:
            scale, zp = _along(scale, q.ndim, attrs["axis"]), _along(zp, q.ndim, attrs["axis"])
        return _result(node, ((q.astype(np.float32) - zp.astype(np.float32)) * scale).astype(scale.dtype))
    return node.op("DequantizeLinear", [node.x("input"), node.imp.const(scale), node.imp.const(zp)], attrs)


# ---------------------------------------------------------------------------------------------
# Compressed weights (constexpr_*): evaluated here. iOS16's versions hold their parameters as
# attributes of the op, iOS18's as inputs.


def _param(node: Node, name: str, default=None) -> np.ndarray | None:
    """A constexpr parameter: an input (iOS18) or an attribute (iOS16)."""
    if node.has(name):
        return np.asarray(node.const(name))
    if name in node.proto.attributes:
        return np.asarray(node.imp.const_array(node.proto.attributes[name], f"{node.where}.{name}").array)
    if default is None:
        raise node.fail(f"has no input '{name}'")
    return default


_NONE = np.asarray(None, dtype=object)


def _result(node: Node, *arrays: np.ndarray) -> list:
    outs = []
    for k, a in enumerate(arrays):
        declared = node.out(k)
        a = np.asarray(a, dtype=declared.dtype.numpy, order="C")
        if declared.shape is not None and tuple(declared.shape) != a.shape:
            raise node.fail(f"decompresses to shape {list(a.shape)}, MIL declares {list(declared.shape)}")
        outs.append(Const(a, declared.dtype))
    return outs


def _unpack(node: Node, packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    from .coreml_reader import unpack_bits

    packed = np.asarray(packed).reshape(-1).astype(np.uint8)
    if packed.size * 8 < bits * count:
        raise node.fail(f"{packed.size} bytes hold fewer than {count} values of {bits} bits")
    return unpack_bits(packed, bits, count, signed=False)


@rule("constexpr_affine_dequantize", since="iOS16")
def constexpr_affine_dequantize(node: Node) -> list:
    """scale · (quantized_data − zero_point), scale / zero_point scalars or vectors along axis."""
    q = _param(node, "quantized_data")
    axis = int(_param(node, "axis").reshape(-1)[0]) % max(q.ndim, 1)
    zp, scale = _param(node, "zero_point"), _param(node, "scale")
    for name, p in (("zero_point", zp), ("scale", scale)):
        if p.ndim > 1 or (p.ndim == 1 and p.size != q.shape[axis]):
            raise node.fail(f"{name} of shape {list(p.shape)} for data of shape {list(q.shape)}, axis {axis}")
    zp, scale = _along(zp, q.ndim, axis), _along(scale, q.ndim, axis)
    out = (q.astype(np.float32) - zp.astype(np.float32)) * scale
    return _result(node, out.astype(scale.dtype))


@rule("constexpr_cast", since="iOS16")
def constexpr_cast(node: Node) -> list:
    dtype = str(_param(node, "output_dtype").reshape(-1)[0])
    if dtype != "fp32":
        raise node.unsupported(f"output_dtype '{dtype}'")
    return _result(node, _param(node, "source_val").astype(np.float32))


def _lut_to_dense(node: Node, indices: np.ndarray, lut: np.ndarray, vector_axis) -> np.ndarray:
    """iOS18: lut [*groups, palettes, vector]; each group serves a block of indices; a vector
    entry fills vector_axis."""
    rank = indices.ndim
    if lut.ndim != rank + 2 or any(g == 0 or s % g for s, g in zip(indices.shape, lut.shape[:rank])):
        raise node.fail(f"lut of shape {list(lut.shape)} for indices of shape {list(indices.shape)}")
    if indices.size and int(indices.max()) >= lut.shape[-2]:
        raise node.fail(f"an index past the lut's {lut.shape[-2]} entries")
    groups = np.ix_(*[np.arange(s) // (s // g) for s, g in zip(indices.shape, lut.shape[:rank])])
    values = lut[(*groups, indices.astype(np.intp))]  # [*indices.shape, vector]
    size = lut.shape[-1]
    if size == 1:
        return values[..., 0]
    if vector_axis is None:
        raise node.fail("a vector lut without vector_axis")
    axis = int(vector_axis) % rank
    shape = list(indices.shape)
    shape[axis] *= size
    return np.moveaxis(values, -1, axis + 1).reshape(shape)


def _sparse_to_dense(node: Node, nonzero: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The mask's set places, in row-major order, take nonzero_data's values; zeros elsewhere."""
    nonzero = nonzero.reshape(-1)
    places = mask.reshape(-1) != 0
    if int(places.sum()) != nonzero.size:
        raise node.fail(f"mask sets {int(places.sum())} places for {nonzero.size} values")
    dense = np.zeros(mask.size, nonzero.dtype)
    dense[places] = nonzero
    return dense.reshape(mask.shape)


def _shift_scale(node: Node, data: np.ndarray, scale: np.ndarray, offset: np.ndarray | None) -> np.ndarray:
    """scale · (data − offset), scale and offset repeated over blocks of data (computed in
    scale's type, as MIL defines it)."""
    if scale.ndim != data.ndim or any(s == 0 or d % s for d, s in zip(data.shape, scale.shape)):
        raise node.fail(f"scale of shape {list(scale.shape)} for data of shape {list(data.shape)}")
    if offset is not None and offset.shape != scale.shape:
        raise node.fail(f"offset of shape {list(offset.shape)}, scale {list(scale.shape)}")
    data = data.astype(scale.dtype)
    for axis, (d, s) in enumerate(zip(data.shape, scale.shape)):
        if d // s > 1:
            scale = np.repeat(scale, d // s, axis)
            if offset is not None:
                offset = np.repeat(offset, d // s, axis)
    if offset is not None:
        data = data - offset
    return scale * data


@rule("constexpr_lut_to_dense", since="iOS16")
def constexpr_lut_to_dense(node: Node) -> list:
    """iOS16: indices packed n bits each (low bits first) in bytes, lut of 2ⁿ values, shape.
    iOS18: indices of uint1…uint8 (unpacked when read), lut per block, vector_axis."""
    if node.has("shape") or "shape" in node.proto.attributes:
        lut, shape = _param(node, "lut").reshape(-1), _param(node, "shape").astype(np.int64).reshape(-1)
        bits = int(np.log2(lut.size)) if lut.size else 0
        if lut.size not in (2, 4, 16, 64, 256):
            raise node.fail(f"a lut of {lut.size} values")
        count = int(np.prod(shape))
        indices = _unpack(node, _param(node, "indices"), bits, count)
        return _result(node, lut[indices.astype(np.intp)].reshape(shape))
    vector_axis = _param(node, "vector_axis", _NONE)
    vector_axis = None if vector_axis is _NONE else int(vector_axis.reshape(-1)[0])
    return _result(node, _lut_to_dense(node, _param(node, "indices"), _param(node, "lut"), vector_axis))


@rule("constexpr_sparse_to_dense", since="iOS16")
def constexpr_sparse_to_dense(node: Node) -> list:
    """iOS16: mask packed one bit per element (low bits first) in bytes, shape; iOS18: mask of
    uint1 in the output's shape."""
    nonzero = _param(node, "nonzero_data")
    if node.has("shape") or "shape" in node.proto.attributes:
        shape = _param(node, "shape").astype(np.int64).reshape(-1)
        mask = _unpack(node, _param(node, "mask"), 1, int(np.prod(shape))).reshape(shape)
    else:
        mask = _param(node, "mask")
    return _result(node, _sparse_to_dense(node, nonzero, mask))


@rule("constexpr_blockwise_shift_scale", since="iOS18")
def constexpr_blockwise_shift_scale(node: Node) -> list:
    offset = _param(node, "offset", _NONE)
    offset = None if offset is _NONE else offset
    return _result(node, _shift_scale(node, _param(node, "data"), _param(node, "scale"), offset))


@rule("constexpr_lut_to_sparse", since="iOS18")
def constexpr_lut_to_sparse(node: Node) -> list:
    """(mask, values): the lut's values at the mask's set places; a vector lut repeats the mask
    along vector_axis."""
    mask = _param(node, "indices_mask")
    indices = _sparse_to_dense(node, _param(node, "indices_nonzero_data"), mask)
    vector_axis = _param(node, "vector_axis", _NONE)
    vector_axis = None if vector_axis is _NONE else int(vector_axis.reshape(-1)[0])
    dense = _lut_to_dense(node, indices, _param(node, "lut"), vector_axis)
    if vector_axis is not None:
        mask = np.repeat(mask, _param(node, "lut").shape[-1], axis=vector_axis)
    return _result(node, mask, dense[mask != 0].reshape(-1))


@rule("constexpr_sparse_blockwise_shift_scale", since="iOS18")
def constexpr_sparse_blockwise_shift_scale(node: Node) -> list:
    """(mask, values): the nonzero values shift-scaled as in their dense places."""
    mask = _param(node, "data_mask")
    data = _sparse_to_dense(node, _param(node, "nonzero_data"), mask)
    offset = _param(node, "offset", _NONE)
    offset = None if offset is _NONE else offset
    dense = _shift_scale(node, data, _param(node, "scale"), offset)
    return _result(node, mask, dense[mask != 0].reshape(-1))
