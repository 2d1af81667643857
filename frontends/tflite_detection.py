"""``TFLite_Detection_PostProcess``, the custom operator LiteRT's builtin resolver runs at the end of
most TFLite object detectors (SSD MobileNet, SSDLite, EfficientDet-Lite), as one
``offload::DetectionPostProcess`` op (ir/detection_ops.py) run by a CPU kernel.

Inputs: box_encodings [1, boxes, >=4] (y, x, h, w center-size encodings; further columns are
keypoints, unread), class_predictions [1, boxes, num_classes (+1 background column first)],
anchors [boxes, 4] (y, x, h, w). Float32, or uint8 with a scale and zero point, which the importer
dequantizes as LiteRT does (``(q - zero_point) · scale`` in float32); uint8 box encodings need
uint8 anchors and float32 ones float32 anchors, the two pairs LiteRT reads.

Options, a flexbuffer map (frontends/flexbuffers.py): max_detections, max_classes_per_detection,
nms_score_threshold, nms_iou_threshold, num_classes, y_scale, x_scale, h_scale, w_scale, and
optionally detections_per_class (100) and use_regular_nms (false). They are checked here, before
anything is allocated: a missing or malformed option is a ``ModelFormatError``, a class or anchor
count that disagrees with the input shapes a ``ShapeError``.
"""

from __future__ import annotations

import math

from offload.errors import ModelFormatError, ShapeError, UnsupportedOpError
from offload.schemas.generated.tflite.TensorType import TensorType as TflType

from .flexbuffers import read_map
from .tflite_custom import register_custom_op
from .tflite_node import Node

CODE = "TFLite_Detection_PostProcess"
# The most detection rows (max_detections · max_classes_per_detection) a model may ask for: real
# detectors ask for 10 to 100; a larger count is refused before the outputs are typed.
MAX_ROWS = 1 << 16
_INPUTS = ("box_encodings", "class_predictions", "anchors")
_TYPES = {TflType.FLOAT32: "float32", TflType.UINT8: "uint8"}


def _options(node: Node, where: str) -> dict:
    opts = read_map(node.custom_options, where)
    attrs = {
        "max_detections": opts.integer("max_detections"),
        "max_classes_per_detection": opts.integer("max_classes_per_detection"),
        "detections_per_class": opts.integer("detections_per_class", 100),
        "use_regular_nms": int(opts.boolean("use_regular_nms", False)),
        "nms_score_threshold": opts.real("nms_score_threshold"),
        "nms_iou_threshold": opts.real("nms_iou_threshold"),
        "num_classes": opts.integer("num_classes"),
    }
    for key in ("y_scale", "x_scale", "h_scale", "w_scale"):
        attrs[key] = opts.real(key)
        if attrs[key] == 0 or not math.isfinite(attrs[key]):
            raise ModelFormatError(
                f"{where}: option '{key}' is {attrs[key]}; a box scale is finite and not 0"
            )
    for key in ("max_detections", "max_classes_per_detection", "num_classes"):
        if not 1 <= attrs[key] <= MAX_ROWS:
            raise ModelFormatError(f"{where}: option '{key}' is {attrs[key]}, not between 1 and {MAX_ROWS}")
    rows = attrs["max_detections"] * attrs["max_classes_per_detection"]
    if rows > MAX_ROWS:
        raise ModelFormatError(
            f"{where}: max_detections {attrs['max_detections']} × max_classes_per_detection "
            f"{attrs['max_classes_per_detection']} = {rows} detection rows, more than {MAX_ROWS}"
        )
    per_class = attrs["detections_per_class"]
    if not -(1 << 31) <= per_class < 1 << 31:
        raise ModelFormatError(f"{where}: option 'detections_per_class' is {per_class}, past LiteRT's int32")
    if attrs["use_regular_nms"] and per_class < 1:
        raise ModelFormatError(
            f"{where}: option 'detections_per_class' is {per_class}; "
            "regular suppression keeps at least one box per class"
        )
    iou = attrs["nms_iou_threshold"]
    if not 0 < iou <= 1:
        raise ModelFormatError(f"{where}: option 'nms_iou_threshold' is {iou}, not in (0, 1]")
    return attrs


def _check_inputs(node: Node, where: str, num_classes: int) -> None:
    if len(node.inputs) != 3 or any(v is None for v in node.inputs):
        raise node.fail(f"has {len(node.inputs)} inputs, not ({', '.join(_INPUTS)})")
    if len(node.outputs) != 4:
        raise node.fail(f"has {len(node.outputs)} outputs, not (boxes, classes, scores, num_detections)")
    types = [node.tensors[i].get("type") for i in range(3)]
    for name, code in zip(_INPUTS, types):
        if code not in _TYPES:
            raise UnsupportedOpError(f"{where}: {name} of TFLite type {code} is neither float32 nor uint8")
    if types[0] != types[2]:
        raise UnsupportedOpError(
            f"{where}: box_encodings are {_TYPES[types[0]]} and anchors {_TYPES[types[2]]}; LiteRT "
            "reads anchors of the box encodings' type only"
        )
    for i, (name, code) in enumerate(zip(_INPUTS, types)):
        quant = node.imp.tensor_type(node.tensors[i], f"operator {node.index} input {i}").quant
        if code == TflType.UINT8 and (quant is None or quant.scale.size != 1):
            raise UnsupportedOpError(f"{where}: {name} is uint8 without one scale and zero point")
    boxes, classes, anchors = node.shape(0, 3), node.shape(1, 3), node.shape(2, 2)
    if boxes[0] != 1 or boxes[2] < 4:
        raise ShapeError(f"{where}: box_encodings of shape {list(boxes)} is not [1, boxes, >=4]")
    n = boxes[1]
    if classes[:2] != (1, n):
        raise ShapeError(f"{where}: class_predictions of shape {list(classes)} is not [1, {n}, classes]")
    if anchors != (n, 4):
        raise ShapeError(f"{where}: anchors of shape {list(anchors)} is not [{n}, 4] ({n} boxes)")
    if classes[2] - num_classes not in (0, 1):
        raise ShapeError(
            f"{where}: class_predictions hold {classes[2]} columns, but num_classes is {num_classes} "
            "(one background column at most)"
        )


def detection_postprocess(node: Node) -> list:
    where = f"{node.imp.origin}: operator {node.index} ({node.name})"
    attrs = _options(node, where)
    _check_inputs(node, where, attrs["num_classes"])
    return node.op("DetectionPostProcess", node.inputs, attrs, num_outputs=4, domain="offload")


register_custom_op(CODE, detection_postprocess)
