"""TFLite builtin network layers beyond the 2-D core as IR ops: L2 pooling, local response
normalization, 3-D convolution and transposed convolution, non-max suppression."""

from __future__ import annotations

import numpy as np

from offload.ir import DataType
from offload.schemas.generated.tflite.Padding import Padding

from .tflite_node import Node, _int64, in_nchw, permuted, rule, same_pads, spatial_attrs

NDHWC_TO_NCDHW = [0, 4, 1, 2, 3]
NCDHW_TO_NDHWC = [0, 2, 3, 4, 1]


@rule("L2_POOL_2D", version=1)
def l2_pool_2d(node: Node) -> list:
    """sqrt of the mean of x² over the window's elements inside the input (LiteRT divides by
    their count, as AveragePool with count_include_pad = 0)."""
    kernel = (node.opt("filter_height"), node.opt("filter_width"))
    attrs = spatial_attrs(node, kernel, (1, 1))
    attrs.update(kernel_shape=list(kernel), count_include_pad=0)
    x = node.inputs[0]
    mean = in_nchw(node, "AveragePool", [node.one("Mul", [x, x])], attrs)
    return [node.activation(node.one("Sqrt", [mean]))]


@rule("LOCAL_RESPONSE_NORMALIZATION", version=1)
def local_response_normalization(node: Node) -> list:
    """x / (bias + alpha · Σ x²)^beta, the sum over channels c - radius … c + radius: ONNX LRN
    with size 2·radius + 1, whose alpha is divided by the size."""
    radius = int(node.opt("radius"))
    if radius < 0:
        raise node.fail(f"radius {radius} is negative")
    size = 2 * radius + 1
    attrs = {
        "size": size,
        "alpha": float(np.float32(node.opt("alpha")) * size),
        "beta": float(node.opt("beta")),
        "bias": float(node.opt("bias")),
    }
    return [in_nchw(node, "LRN", node.inputs[:1], attrs)]


def _conv3d_attrs(node: Node, kernel: tuple, in_dhw: tuple, dilation: tuple) -> dict:
    strides = [node.opt("stride_d"), node.opt("stride_h"), node.opt("stride_w")]
    if min(strides) < 1 or min(dilation) < 1 or min(kernel) < 1:
        raise node.fail(
            f"strides {strides}, window {list(kernel)} and dilations {list(dilation)} must be positive"
        )
    attrs = {"strides": strides, "kernel_shape": list(kernel), "dilations": list(dilation)}
    padding = node.opt("padding")
    if padding == Padding.VALID:
        attrs["pads"] = [0] * 6
    elif padding == Padding.SAME:
        if not all(isinstance(d, int) for d in in_dhw):
            attrs["auto_pad"] = "SAME_UPPER"
        else:
            pads = [same_pads(s, k, st, d) for s, k, st, d in zip(in_dhw, kernel, strides, dilation)]
            attrs["pads"] = [p[0] for p in pads] + [p[1] for p in pads]
    else:
        raise node.fail(f"padding {padding} is neither SAME nor VALID")
    return attrs


def _in_ncdhw(node: Node, op_type: str, inputs: list, attrs: dict):
    x = node.one("Transpose", [inputs[0]], {"perm": NDHWC_TO_NCDHW})
    y = node.one(op_type, [x, *inputs[1:]], attrs)
    return node.one("Transpose", [y], {"perm": NCDHW_TO_NDHWC})


@rule("CONV_3D", version=1, inputs=2)
def conv_3d(node: Node) -> list:
    """NDHWC input, DHWIO filter: Conv on NCDHW with the filter as OIDHW."""
    kd, kh, kw, i, _ = node.shape(1, 5)
    dims = node.dims(0, 5)
    if dims[4] != i:
        raise node.fail(f"input channels {dims[4]} differ from the filter's {i}")
    dilation = (node.opt("dilation_d_factor"), node.opt("dilation_h_factor"), node.opt("dilation_w_factor"))
    attrs = _conv3d_attrs(node, (kd, kh, kw), dims[1:4], dilation)
    w = permuted(node, 1, [4, 3, 0, 1, 2])
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    y = _in_ncdhw(node, "Conv", [node.inputs[0], w, bias], attrs)
    return [node.activation(y)]


@rule("CONV_3D_TRANSPOSE", version=1, inputs=3)
def conv_3d_transpose(node: Node) -> list:
    """Inputs (output shape, DHWOI filter, NDHWC input, optional bias): ConvTranspose with the
    pads TRANSPOSE_CONV takes (the SAME padding of a conv from the output back to the input),
    output_padding where the output shape asks for more."""
    out_shape = node.const(0).astype(np.int64).reshape(-1)
    if len(out_shape) != 5:
        raise node.fail(f"output shape {out_shape.tolist()} is not 5 dims")
    kd, kh, kw, _, _ = node.shape(1, 5)
    dims = node.dims(2, 5)
    if not all(isinstance(d, int) for d in dims[1:4]):
        raise node.unsupported(f"input of shape {dims}: its spatial dimensions must be known")
    dilation = (node.opt("dilation_d_factor"), node.opt("dilation_h_factor"), node.opt("dilation_w_factor"))
    strides = [node.opt("stride_d"), node.opt("stride_h"), node.opt("stride_w")]
    if min(strides) < 1 or min(dilation) < 1:
        raise node.fail(f"strides {strides} and dilations {list(dilation)} must be positive")
    padding = node.opt("padding")
    if padding not in (Padding.SAME, Padding.VALID):
        raise node.fail(f"padding {padding} is neither SAME nor VALID")
    begin, end, extra = [], [], []
    for size, k, s, d, out in zip(dims[1:4], (kd, kh, kw), strides, dilation, out_shape[1:4]):
        before = same_pads(int(out), k, s, d)[0] if padding == Padding.SAME else 0
        after = s * (size - 1) + (k - 1) * d + 1 - before - int(out)
        begin.append(before)
        end.append(max(after, 0))
        extra.append(max(-after, 0))
    attrs = {
        "strides": strides,
        "kernel_shape": [kd, kh, kw],
        "dilations": list(dilation),
        "pads": begin + end,
    }
    if any(extra):
        attrs["output_padding"] = extra
    w = permuted(node, 1, [4, 3, 0, 1, 2])  # DHWOI → IODHW
    bias = node.inputs[3] if len(node.inputs) > 3 else None
    y = _in_ncdhw(node, "ConvTranspose", [node.inputs[2], w, bias], attrs)
    return [node.activation(y)]


@rule("NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5", version=1, inputs=5)
def non_max_suppression(node: Node) -> list:
    """Boxes [N, 4] (corners in either order), scores [N], max_output_size, iou_threshold,
    score_threshold (and V5's soft_nms_sigma, which must be 0: soft NMS is refused): ONNX
    NonMaxSuppression on one batch and class, its box indices padded with zeros to
    max_output_size (V5 also their scores), and the count of valid ones. Both keep boxes
    scoring above the threshold, best first (equal scores: ONNX takes the lower index, LiteRT's
    priority queue either), and drop a box whose IoU with a kept one reaches the IoU threshold."""
    if node.name == "NON_MAX_SUPPRESSION_V5":
        sigma = node.const(5).reshape(-1)
        if sigma.size != 1 or float(sigma[0]) != 0.0:
            raise node.unsupported(f"soft_nms_sigma {sigma.tolist()} (soft NMS) is not supported")
    boxes = node.one("Unsqueeze", [node.inputs[0], node.ints([0])])
    scores = node.one("Reshape", [node.inputs[1], node.ints([1, 1, -1])])
    limit = node.one("Reshape", [_int64(node, 2), node.ints([1])])
    iou, score = (node.one("Reshape", [node.inputs[i], node.ints([1])]) for i in (3, 4))
    # LiteRT drops a box at IoU >= the threshold, ONNX above it: the float32 just below a positive
    # threshold (t·(1 - 2⁻²⁴) rounds to it), and below any IoU for a threshold of 0 or less
    below = node.one("Mul", [iou, node.scalar(1.0 - 2.0**-24)])
    iou = node.one("Where", [node.one("Greater", [iou, node.scalar(0.0)]), below, node.scalar(-1.0)])
    chosen = node.one("NonMaxSuppression", [boxes, scores, limit, iou, score])
    indices = node.one("Gather", [chosen, node.ints(2)], {"axis": 1})
    count = node.one("Shape", [indices])
    fill = node.one("Concat", [node.ints([0]), node.one("Sub", [limit, count])], {"axis": 0})
    results = [node.one("Cast", [node.one("Pad", [indices, fill])], {"to": int(DataType.INT32)})]
    if node.name == "NON_MAX_SUPPRESSION_V5":
        results.append(node.one("Pad", [node.one("Gather", [node.inputs[1], indices], {"axis": 0}), fill]))
    valid = node.one("Reshape", [count, node.ints([])])
    return [*results, node.one("Cast", [valid], {"to": int(DataType.INT32)})]
