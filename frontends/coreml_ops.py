"""MIL op rules: elementwise math, activations, reductions, linear algebra, convolution, pooling,
normalization. Semantics are MIL's as coremltools' op definitions state them (iOS15–iOS18); where
MIL and ONNX differ (epsilons inside ``log``/``rsqrt``/``inverse``, ``mod``'s sign, ``pad_type``,
``gelu`` modes) the rule writes MIL's formula out in ONNX ops. Optional inputs take MIL's
defaults when a producer leaves them out.
"""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, Value

from . import coreml_sequence_ops, coreml_tensor_ops  # noqa: F401  (register their rules)
from .coreml_node import Node, rule

FLOATS = (DataType.FLOAT, DataType.FLOAT16, DataType.DOUBLE, DataType.BFLOAT16)

# ---------------------------------------------------------------------------------------------
# Elementwise binary.

BINARY = {
    "add": "Add",
    "sub": "Sub",
    "mul": "Mul",
    "real_div": "Div",
    "pow": "Pow",
    "maximum": "Max",
    "minimum": "Min",
    "equal": "Equal",
    "greater": "Greater",
    "greater_equal": "GreaterOrEqual",
    "less": "Less",
    "less_equal": "LessOrEqual",
    "logical_and": "And",
    "logical_or": "Or",
    "logical_xor": "Xor",
}


@rule(*BINARY)
def binary(node: Node) -> list:
    return node.op(BINARY[node.type], [node.x("x"), node.x("y")])


@rule("not_equal")
def not_equal(node: Node) -> list:
    return node.op("Not", [node.one("Equal", [node.x("x"), node.x("y")])])


@rule("floor_div")
def floor_div(node: Node) -> list:
    x, y = node.x("x"), node.x("y")
    if node.dtype("x") in FLOATS:
        return node.op("Floor", [node.one("Div", [x, y])])
    # Integers: ONNX's Div truncates toward zero; floor is one less where the signs differ and
    # the division leaves a remainder.
    q = node.one("Div", [x, y])
    r = node.one("Sub", [x, node.one("Mul", [q, y])])
    zero = node.full(0, node.dtype("x"))
    signs_differ = node.one("Xor", [node.one("Less", [x, zero]), node.one("Less", [y, zero])])
    adjust = node.one("And", [signs_differ, node.one("Not", [node.one("Equal", [r, zero])])])
    return node.op("Sub", [q, node.cast(adjust, node.dtype("x"))])


@rule("mod")
def mod(node: Node) -> list:
    """MIL's mod takes the sign of the divisor: x - floor(x / y)·y."""
    x, y = node.x("x"), node.x("y")
    if node.dtype("x") not in FLOATS:
        return node.op("Mod", [x, y], {"fmod": 0})
    return node.op("Sub", [x, node.one("Mul", [node.one("Floor", [node.one("Div", [x, y])]), y])])


# ---------------------------------------------------------------------------------------------
# Elementwise unary.

UNARY = {
    "abs": "Abs",
    "acos": "Acos",
    "asin": "Asin",
    "atan": "Atan",
    "atanh": "Atanh",
    "ceil": "Ceil",
    "cos": "Cos",
    "cosh": "Cosh",
    "erf": "Erf",
    "exp": "Exp",
    "floor": "Floor",
    "logical_not": "Not",
    "round": "Round",
    "sign": "Sign",
    "sin": "Sin",
    "sinh": "Sinh",
    "sqrt": "Sqrt",
    "tan": "Tan",
    "tanh": "Tanh",
    "relu": "Relu",
    "sigmoid": "Sigmoid",
    "softsign": "Softsign",
    "softplus": "Softplus",
    "identity": "Identity",
}


@rule(*UNARY)
def unary(node: Node) -> list:
    return node.op(UNARY[node.type], [node.x("x")])


@rule("square")
def square(node: Node) -> list:
    x = node.x("x")
    return node.op("Mul", [x, x])


@rule("exp2")
def exp2(node: Node) -> list:
    x = node.x("x")
    return node.op("Pow", [node.full(2.0, node.dtype("x")), x])


def _plus_epsilon(node: Node, default: float) -> Value:
    x = node.x("x")
    eps = float(node.scalar("epsilon", default))
    return node.one("Add", [x, node.full(eps, node.dtype("x"))]) if eps else x


@rule("log")
def log(node: Node) -> list:
    return node.op("Log", [_plus_epsilon(node, 1e-45)])


@rule("rsqrt")
def rsqrt(node: Node) -> list:
    return node.op("Reciprocal", [node.one("Sqrt", [_plus_epsilon(node, 1e-12)])])


@rule("inverse")
def inverse(node: Node) -> list:
    return node.op("Reciprocal", [_plus_epsilon(node, 1e-4)])


@rule("clip")
def clip(node: Node) -> list:
    return node.op("Clip", [node.x("x"), node.x("alpha"), node.x("beta")])


@rule("threshold")
def threshold(node: Node) -> list:
    return node.op("Max", [node.x("x"), node.x("alpha")])


@rule("cast")
def cast(node: Node) -> list:
    return [node.cast(node.x("x"), node.out().dtype)]


# ---------------------------------------------------------------------------------------------
# Activations.


@rule("relu6")
def relu6(node: Node) -> list:
    x, t = node.x("x"), node.dtype("x")
    return node.op("Clip", [x, node.full(0.0, t), node.full(6.0, t)])


@rule("elu")
def elu(node: Node) -> list:
    return node.op("Elu", [node.x("x")], {"alpha": float(node.scalar("alpha", 1.0))})


@rule("leaky_relu")
def leaky_relu(node: Node) -> list:
    return node.op("LeakyRelu", [node.x("x")], {"alpha": float(node.scalar("alpha", 0.01))})


@rule("thresholded_relu")
def thresholded_relu(node: Node) -> list:
    return node.op("ThresholdedRelu", [node.x("x")], {"alpha": float(node.scalar("alpha", 1.0))})


@rule("silu")
def silu(node: Node) -> list:
    x = node.x("x")
    return node.op("Mul", [x, node.one("Sigmoid", [x])])


@rule("gelu")
def gelu(node: Node) -> list:
    """EXACT: x·Φ(x); TANH_APPROXIMATION: ONNX's tanh form; SIGMOID_APPROXIMATION: x·σ(1.702·x)."""
    x, mode = node.x("x"), node.scalar("mode", "EXACT")
    if mode == "EXACT":
        return node.op("Gelu", [x])
    if mode == "TANH_APPROXIMATION":
        return node.op("Gelu", [x], {"approximate": "tanh"})
    if mode == "SIGMOID_APPROXIMATION":
        return node.op(
            "Mul", [x, node.one("Sigmoid", [node.one("Mul", [x, node.full(1.702, node.dtype("x"))])])]
        )
    raise node.unsupported(f"gelu mode '{mode}'")


@rule("prelu")
def prelu(node: Node) -> list:
    """alpha has one value per channel (axis 1 of x, rank ≥ 3)."""
    x, alpha = node.x("x"), node.const("alpha")
    rank = node.rank("x")
    slope = node.imp.const(np.asarray(alpha).reshape([-1] + [1] * (rank - 2)).astype(node.dtype("x").numpy))
    return node.op("PRelu", [x, slope])


@rule("clamped_relu")
def clamped_relu(node: Node) -> list:
    """min(beta, x) for x ≥ 0, min(beta, alpha·x) below."""
    x, t = node.x("x"), node.dtype("x")
    alpha, beta = (
        node.full(float(node.scalar("alpha", 0.0)), t),
        node.full(float(node.scalar("beta", 6.0)), t),
    )
    leaky = node.one("Where", [node.one("Less", [x, node.full(0.0, t)]), node.one("Mul", [x, alpha]), x])
    return node.op("Min", [leaky, beta])


@rule("linear_activation")
def linear_activation(node: Node) -> list:
    x, t = node.x("x"), node.dtype("x")
    alpha, beta = float(node.scalar("alpha", 1.0)), float(node.scalar("beta", 0.0))
    return node.op("Add", [node.one("Mul", [x, node.full(alpha, t)]), node.full(beta, t)])


@rule("scaled_tanh")
def scaled_tanh(node: Node) -> list:
    x, t = node.x("x"), node.dtype("x")
    alpha, beta = float(node.scalar("alpha", 1.0)), float(node.scalar("beta", 1.0))
    return node.op("Mul", [node.one("Tanh", [node.one("Mul", [x, node.full(beta, t)])]), node.full(alpha, t)])


@rule("sigmoid_hard")
def sigmoid_hard(node: Node) -> list:
    alpha, beta = float(node.scalar("alpha", 0.2)), float(node.scalar("beta", 0.5))
    return node.op("HardSigmoid", [node.x("x")], {"alpha": alpha, "beta": beta})


@rule("softplus_parametric")
def softplus_parametric(node: Node) -> list:
    """alpha·log(1 + exp(beta·x)), alpha and beta per channel (axis 1)."""
    x, rank, t = node.x("x"), node.rank("x"), node.dtype("x").numpy
    shape = [-1] + [1] * (rank - 2)
    alpha = node.imp.const(np.asarray(node.const("alpha")).reshape(shape).astype(t))
    beta = node.imp.const(np.asarray(node.const("beta")).reshape(shape).astype(t))
    return node.op("Mul", [node.one("Softplus", [node.one("Mul", [x, beta])]), alpha])


@rule("softmax")
def softmax(node: Node) -> list:
    return node.op("Softmax", [node.x("x")], {"axis": int(node.scalar("axis", -1))})


# ---------------------------------------------------------------------------------------------
# Reductions.

REDUCE = {
    "reduce_sum": "ReduceSum",
    "reduce_mean": "ReduceMean",
    "reduce_max": "ReduceMax",
    "reduce_min": "ReduceMin",
    "reduce_prod": "ReduceProd",
    "reduce_l1_norm": "ReduceL1",
    "reduce_l2_norm": "ReduceL2",
    "reduce_log_sum": "ReduceLogSum",
    "reduce_log_sum_exp": "ReduceLogSumExp",
    "reduce_sum_square": "ReduceSumSquare",
}


@rule(*REDUCE)
def reduce(node: Node) -> list:
    inputs = [node.x("x")]
    axes = node.const("axes", None)
    if axes is not None:  # MIL: no axes reduces every axis, as ONNX does without the input
        inputs.append(node.int64s(np.asarray(axes).reshape(-1)))
    return node.op(REDUCE[node.type], inputs, {"keepdims": int(bool(node.scalar("keep_dims", False)))})


@rule("reduce_argmax", "reduce_argmin")
def reduce_arg(node: Node) -> list:
    op = "ArgMax" if node.type == "reduce_argmax" else "ArgMin"
    attrs = {"axis": int(node.scalar("axis", -1)), "keepdims": int(bool(node.scalar("keep_dims", False)))}
    y = node.one(op, [node.x("x")], attrs)
    return [node.cast(y, node.out().dtype)]  # MIL's indices are int32


# ---------------------------------------------------------------------------------------------
# Linear algebra.


@rule("linear")
def linear(node: Node) -> list:
    """x·Wᵀ + b, W of shape [out, in]."""
    x = node.x("x")
    w = node.x("weight")
    if node.rank("x") == 2:
        return node.op("Gemm", [x, w, node.maybe("bias")], {"transB": 1})
    wt = node.one("Transpose", [w], {"perm": [1, 0]})
    y = node.one("MatMul", [x, wt])
    return node.op("Add", [y, node.x("bias")]) if node.has("bias") else [y]


def _swap_last(node: Node, v: Value, rank: int) -> Value:
    perm = list(range(rank))
    perm[-2:] = [rank - 1, rank - 2]
    return node.one("Transpose", [v], {"perm": perm})


@rule("matmul")
def matmul(node: Node) -> list:
    x, y = node.x("x"), node.x("y")
    if node.scalar("transpose_x", False):
        x = _swap_last(node, x, node.rank("x"))
    if node.scalar("transpose_y", False):
        y = _swap_last(node, y, node.rank("y"))
    return node.op("MatMul", [x, y])


@rule("einsum")
def einsum(node: Node) -> list:
    return node.op("Einsum", node.values("values"), {"equation": str(node.scalar("equation"))})


# ---------------------------------------------------------------------------------------------
# Convolution and pooling.


def window_attrs(node: Node, spatial: int, kernel: list[int], dilations: list[int]) -> dict:
    """strides, dilations and padding of a window op, MIL's pad_type written the ONNX way."""
    strides = node.ints("strides", [1] * spatial)
    attrs = {"strides": strides}
    pad_type = node.scalar("pad_type", "valid")
    if pad_type == "custom":
        pad = node.ints("pad", [0] * 2 * spatial)  # MIL: [begin, end] per axis
        if len(pad) != 2 * spatial:
            raise node.fail(f"pad {pad} does not have 2 values for each of {spatial} axes")
        attrs["pads"] = pad[0::2] + pad[1::2]
    elif pad_type == "valid":
        attrs["pads"] = [0] * 2 * spatial
    elif pad_type in ("same", "same_lower"):
        attrs["auto_pad"] = "SAME_UPPER" if pad_type == "same" else "SAME_LOWER"
    else:
        raise node.unsupported(f"pad_type '{pad_type}'")
    if len(strides) != spatial:
        raise node.fail(f"strides {strides} for {spatial} spatial axes")
    return attrs


@rule("conv")
def conv(node: Node) -> list:
    rank = node.rank("weight")
    spatial = rank - 2
    kernel = list(node.shape("weight")[2:])
    dilations = node.ints("dilations", [1] * spatial)
    attrs = window_attrs(node, spatial, kernel, dilations)
    attrs.update(dilations=dilations, group=int(node.scalar("groups", 1)), kernel_shape=kernel)
    return node.op("Conv", [node.x("x"), node.x("weight"), node.maybe("bias")], attrs)


@rule("conv_transpose")
def conv_transpose(node: Node) -> list:
    """weight [C_in, C_out/groups, *K] as ONNX's; output_shape fixes the extra end padding."""
    spatial = node.rank("weight") - 2
    kernel = list(node.shape("weight")[2:])
    dilations = node.ints("dilations", [1] * spatial)
    attrs = window_attrs(node, spatial, kernel, dilations)
    attrs.update(dilations=dilations, group=int(node.scalar("groups", 1)), kernel_shape=kernel)
    out = node.out().shape
    if out is not None and all(isinstance(d, int) for d in out[2:]) and "pads" in attrs:
        in_shape = node.shape("x")[2:]
        extra = []
        for i in range(spatial):
            natural = (
                (in_shape[i] - 1) * attrs["strides"][i]
                - attrs["pads"][i]
                - attrs["pads"][i + spatial]
                + dilations[i] * (kernel[i] - 1)
                + 1
            )
            extra.append(out[2 + i] - natural)
        if any(e < 0 for e in extra):
            raise node.fail(f"declared output {list(out)} is smaller than the convolution gives")
        if any(extra):
            attrs["output_padding"] = extra
    return node.op("ConvTranspose", [node.x("x"), node.x("weight"), node.maybe("bias")], attrs)


@rule("avg_pool", "max_pool", "l2_pool")
def pool(node: Node) -> list:
    kernel = node.ints("kernel_sizes")
    spatial = len(kernel)
    attrs = window_attrs(node, spatial, kernel, [1] * spatial)
    attrs["kernel_shape"] = kernel
    if node.type != "l2_pool":
        attrs["ceil_mode"] = int(bool(node.scalar("ceil_mode", False)))
    if node.type == "avg_pool":
        attrs["count_include_pad"] = int(not node.scalar("exclude_padding_from_average", False))
        return node.op("AveragePool", [node.x("x")], attrs)
    if node.type == "max_pool":
        return node.op("MaxPool", [node.x("x")], attrs)
    attrs["p"] = 2
    return node.op("LpPool", [node.x("x")], attrs)


# ---------------------------------------------------------------------------------------------
# Normalization.


def _channel_param(node: Node, name: str, fill: float, channels) -> Value:
    if node.has(name):
        return node.x(name)
    if not isinstance(channels, int):
        raise node.unsupported(f"'{name}' left out with an unknown channel count")
    return node.imp.const(np.full(channels, fill, node.dtype("x").numpy))


@rule("batch_norm")
def batch_norm(node: Node) -> list:
    channels = node.shape("mean")[0]
    gamma = _channel_param(node, "gamma", 1.0, channels)
    beta = _channel_param(node, "beta", 0.0, channels)
    eps = float(node.scalar("epsilon", 1e-5))
    return node.op(
        "BatchNormalization", [node.x("x"), gamma, beta, node.x("mean"), node.x("variance")], {"epsilon": eps}
    )


@rule("instance_norm")
def instance_norm(node: Node) -> list:
    channels = node.shape("x")[1]
    gamma = _channel_param(node, "gamma", 1.0, channels)
    beta = _channel_param(node, "beta", 0.0, channels)
    eps = float(node.scalar("epsilon", 1e-5))
    return node.op("InstanceNormalization", [node.x("x"), gamma, beta], {"epsilon": eps})


@rule("layer_norm")
def layer_norm(node: Node) -> list:
    """Normalize over ``axes`` (all when absent); gamma/beta have the normalized axes' shape."""
    x, rank = node.x("x"), node.rank("x")
    axes = node.ints("axes", None)
    axes = list(range(rank)) if axes is None else sorted(a % rank for a in axes)
    eps = float(node.scalar("epsilon", 1e-5))
    t = node.dtype("x")
    if axes and axes == list(range(axes[0], rank)):  # trailing axes: one LayerNormalization
        shape = node.shape("x")[axes[0] :]
        if not all(isinstance(d, int) for d in shape):
            raise node.unsupported(f"layer_norm over axes of unknown size {list(shape)}")
        gamma = node.x("gamma") if node.has("gamma") else node.imp.const(np.ones(shape, t.numpy))
        beta = node.x("beta") if node.has("beta") else node.imp.const(np.zeros(shape, t.numpy))
        return node.op("LayerNormalization", [x, gamma, beta], {"axis": axes[0], "epsilon": eps})
    # Other axes: (x - mean) / sqrt(var + eps) written out; gamma/beta broadcast over the rest.
    ax = node.int64s(axes)
    mean = node.one("ReduceMean", [x, ax], {"keepdims": 1})
    d = node.one("Sub", [x, mean])
    var = node.one("ReduceMean", [node.one("Mul", [d, d]), ax], {"keepdims": 1})
    y = node.one("Div", [d, node.one("Sqrt", [node.one("Add", [var, node.full(eps, t)])])])
    keep = [1 if i not in axes else node.shape("x")[i] for i in range(rank)]
    for name, op in (("gamma", "Mul"), ("beta", "Add")):
        if node.has(name):
            p = node.one("Reshape", [node.x(name), node.int64s(keep)])
            y = node.one(op, [y, p])
    return [y]


@rule("l2_norm")
def l2_norm(node: Node) -> list:
    """x / sqrt(Σx² + eps) over the last three axes."""
    x, t = node.x("x"), node.dtype("x")
    eps = float(node.scalar("epsilon", 1e-6))
    ss = node.one("ReduceSumSquare", [x, node.int64s([-3, -2, -1])], {"keepdims": 1})
    return node.op("Div", [x, node.one("Sqrt", [node.one("Add", [ss, node.full(eps, t)])])])


@rule("local_response_norm")
def local_response_norm(node: Node) -> list:
    size = int(node.scalar("size"))
    attrs = {
        "size": size,
        "alpha": float(node.scalar("alpha", 1e-4)),
        "beta": float(node.scalar("beta", 0.75)),
        "bias": float(node.scalar("k", 1.0)),
    }
    return node.op("LRN", [node.x("x")], attrs)
