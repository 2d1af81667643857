"""Object-detection operators of offload's own (domain ``offload``): their schemas and type inference.

``DetectionPostProcess`` is TFLite's ``TFLite_Detection_PostProcess`` (the custom operator that
ends SSD and EfficientDet-Lite detectors) as one operation: it decodes center-size box encodings
against anchors, runs non-maximum suppression (per anchor's best class, or per class with
``use_regular_nms``) and writes a fixed number of detection rows. No ONNX operator chain has its
tie and truncation rules, so it stays whole with a CPU kernel (runtime/kernels/detection_postprocess.py);
the GPU backends take default-domain ops only and leave it to the CPU.

Outputs, with N = max_detections · max_classes_per_detection rows: boxes [1, N, 4] (ymin, xmin,
ymax, xmax), classes [1, N] and scores [1, N] (float32), num_detections [1] (float32).
"""

from __future__ import annotations

from .registry import inference, parse_schema_line, register, register_shape_rules, shape_rules
from .types import DataType, TensorType

DOMAIN = "offload"

SCHEMAS = """
DetectionPostProcess(box_encodings, class_predictions, anchors) -> detection_boxes, detection_classes, detection_scores, num_detections  | max_detections: int!, max_classes_per_detection: int!, detections_per_class: int = 100, use_regular_nms: int = 0, nms_score_threshold: float!, nms_iou_threshold: float!, num_classes: int!, y_scale: float!, x_scale: float!, h_scale: float!, w_scale: float!  @1
"""

for _line in SCHEMAS.strip().splitlines():
    register(parse_schema_line(DOMAIN, _line))

# The output shapes follow from the attributes alone.
_from_shapes, _from_values = shape_rules(DOMAIN)
register_shape_rules(DOMAIN, _from_shapes | {"DetectionPostProcess"}, _from_values)


@inference("DetectionPostProcess", domain=DOMAIN)
def _detection_postprocess(op, attrs):
    rows = attrs["max_detections"] * attrs["max_classes_per_detection"]
    return [
        TensorType(DataType.FLOAT, (1, rows, 4)),
        TensorType(DataType.FLOAT, (1, rows)),
        TensorType(DataType.FLOAT, (1, rows)),
        TensorType(DataType.FLOAT, (1,)),
    ]
