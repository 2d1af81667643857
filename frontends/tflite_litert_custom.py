"""The custom operators LiteRT runs without a registration by the user: MediaPipe's, which LiteRT's
XNNPACK delegate implements (``Convolution2DTransposeBias``), as builtin-like rules.

MediaPipe's graphs (face and hand landmarks, segmentation, detection) write their upsampling as
``Convolution2DTransposeBias``: inputs (NHWC input, OHWI filter, bias), options a raw 12-byte
struct (padding: 1 SAME / 2 VALID, stride width, stride height, little-endian int32s), the output
size the one the file records for the output tensor.
"""

from __future__ import annotations

import struct

from offload.schemas.generated.tflite.Padding import Padding

from .tflite_custom import register_custom_op
from .tflite_node import Node
from .tflite_ops import transposed_conv

# the C enum TfLitePadding of the raw options → the schema's Padding
_PADDING = {1: Padding.SAME, 2: Padding.VALID}


def convolution_2d_transpose_bias(node: Node) -> list:
    options = node.custom_options
    if len(options) < 12:
        raise node.fail(f"options hold {len(options)} bytes, not the 12 of (padding, stride w, stride h)")
    padding, stride_w, stride_h = struct.unpack_from("<iii", options)
    if padding not in _PADDING:
        raise node.fail(f"padding {padding} is neither 1 (SAME) nor 2 (VALID)")
    if len(node.inputs) != 3:
        raise node.fail(f"has {len(node.inputs)} inputs, not (input, filter, bias)")
    out = node.shape(0, 4, output=True)
    return [transposed_conv(node, 0, 1, node.inputs[2], out[1:3], [stride_h, stride_w], _PADDING[padding])]


register_custom_op("Convolution2DTransposeBias", convolution_2d_transpose_bias)
