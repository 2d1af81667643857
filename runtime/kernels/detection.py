"""Object-detection post-processing kernels: NonMaxSuppression."""

from __future__ import annotations

import numpy as np

from . import kernel


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """Boxes as (y1, x1, y2, x2) with y1 <= y2 and x1 <= x2."""
    boxes = boxes.astype(np.float64)
    if center_point_box:
        xc, yc, w, h = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=1)
    y = np.sort(boxes[:, [0, 2]], axis=1)
    x = np.sort(boxes[:, [1, 3]], axis=1)
    return np.stack([y[:, 0], x[:, 0], y[:, 1], x[:, 1]], axis=1)


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Intersection over union of one box with many (0 where the union is empty)."""
    top = np.maximum(box[0], others[:, 0])
    left = np.maximum(box[1], others[:, 1])
    bottom = np.minimum(box[2], others[:, 2])
    right = np.minimum(box[3], others[:, 3])
    inter = np.clip(bottom - top, 0, None) * np.clip(right - left, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def _select(
    boxes: np.ndarray, scores: np.ndarray, limit: int, iou_threshold: float, score_threshold
) -> list[int]:
    """Greedy selection: best score first, dropping boxes that overlap a kept one too much."""
    order = np.argsort(-scores, kind="stable")
    if score_threshold is not None:
        order = order[scores[order] > score_threshold]
    kept: list[int] = []
    while order.size and len(kept) < limit:
        best = order[0]
        kept.append(int(best))
        rest = order[1:]
        order = rest[_iou(boxes[best], boxes[rest]) <= iou_threshold]
    return kept


@kernel("NonMaxSuppression")
def non_max_suppression(
    ctx,
    boxes,
    scores,
    max_output_boxes_per_class=None,
    iou_threshold=None,
    score_threshold=None,
    *,
    center_point_box,
):
    limit = (
        0
        if max_output_boxes_per_class is None
        else int(np.asarray(max_output_boxes_per_class).reshape(-1)[0])
    )
    iou = 0.0 if iou_threshold is None else float(np.asarray(iou_threshold).reshape(-1)[0])
    floor = None if score_threshold is None else float(np.asarray(score_threshold).reshape(-1)[0])
    selected = []
    for b in range(boxes.shape[0]):
        corners = _corners(boxes[b], center_point_box)
        for c in range(scores.shape[1]):
            for i in _select(corners, scores[b, c].astype(np.float64), limit, iou, floor):
                selected.append((b, c, i))
    return np.array(selected, dtype=np.int64).reshape(-1, 3)
