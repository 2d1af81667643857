"""The CPU kernel of ``offload::DetectionPostProcess`` (TFLite's ``TFLite_Detection_PostProcess``).

The arithmetic and the order of results are LiteRT's, so that its rows match bit for bit:

- decoding: per anchor (y, x, h, w) and encoding (ty, tx, th, tw), in float64 from the float32
  inputs and scales: ``yc = ty / y_scale · h + y``, ``xc = tx / x_scale · w + x``,
  ``half_h = 0.5 · exp(th / h_scale) · h``, ``half_w = 0.5 · exp(tw / w_scale) · w``, each
  rounded to float32; corners ``yc ∓ half_h``, ``xc ∓ half_w`` in float32. A box whose min
  corner exceeds its max corner (a negative anchor size) is an error, as in LiteRT.
- non-maximum suppression of one score column: scores ``>= nms_score_threshold`` in decreasing
  order, equal scores by anchor index; the best remaining box is kept and every later one whose
  IoU with it (float32; 0 where either area is <= 0) exceeds ``nms_iou_threshold`` is dropped,
  until ``limit`` boxes are kept.
- fast path (``use_regular_nms`` 0): each anchor's ``min(max_classes_per_detection,
  num_classes)`` best classes (the first maximum for one class; for several, equal scores in
  the order LiteRT's partial sort leaves them, ``heap_partial_order``), one suppression over each
  anchor's best score with limit ``max_detections``; kept anchor k fills rows
  ``k · max_classes_per_detection + j``.
- regular path: suppression per class with limit ``min(detections_per_class, max_detections)``,
  classes in order, each class's kept boxes merged into the running list by decreasing score
  (on equal scores the earlier class first, as LiteRT's merge places them), the list cut to
  ``max_detections``; it fills the first rows.

Classes are numbered without the background column. Rows past the detections hold zeros (LiteRT
writes zeros up to ``max_detections`` on the regular path and leaves the rest as it finds them).
"""

from __future__ import annotations

import numpy as np

from offload.errors import KernelError, ShapeError

from . import kernel

_OP = "DetectionPostProcess"


def decode_boxes(encodings: np.ndarray, anchors: np.ndarray, scales) -> np.ndarray:
    """Corner boxes [n, 4] (ymin, xmin, ymax, xmax), float32, from center-size encodings [n, >=4]
    and anchors [n, 4] (y, x, h, w)."""
    t = encodings[:, :4].astype(np.float32).astype(np.float64)
    a = anchors.astype(np.float32).astype(np.float64)
    sy, sx, sh, sw = (np.float64(np.float32(s)) for s in scales)
    yc = (t[:, 0] / sy * a[:, 2] + a[:, 0]).astype(np.float32)
    xc = (t[:, 1] / sx * a[:, 3] + a[:, 1]).astype(np.float32)
    half_h = (0.5 * np.exp(t[:, 2] / sh) * a[:, 2]).astype(np.float32)
    half_w = (0.5 * np.exp(t[:, 3] / sw) * a[:, 3]).astype(np.float32)
    return np.stack([yc - half_h, xc - half_w, yc + half_h, xc + half_w], axis=1)


# Rows of ``Overlaps`` kept for reuse by later classes, in bool elements (64 MiB).
_CACHED_ELEMENTS = 1 << 26


class Overlaps:
    """Which boxes one box suppresses: IoU with each box (float32, 0 where either area is <= 0,
    the box's own area first in the union as in LiteRT) above the threshold. A row is computed
    the first time a box is kept and reused while the rows fit ``_CACHED_ELEMENTS``."""

    def __init__(self, boxes: np.ndarray, iou_threshold: np.float32):
        self.ymin, self.xmin, self.ymax, self.xmax = (np.ascontiguousarray(boxes[:, k]) for k in range(4))
        self.areas = (self.ymax - self.ymin) * (self.xmax - self.xmin)
        self.threshold = iou_threshold
        self.rows: dict[int, np.ndarray] = {}

    def survivors(self, i: int) -> np.ndarray:
        """A bool per box: not suppressed by box ``i``."""
        row = self.rows.get(i)
        if row is not None:
            return row
        zero = np.float32(0)
        inter_h = np.maximum(np.minimum(self.ymax[i], self.ymax) - np.maximum(self.ymin[i], self.ymin), zero)
        inter_w = np.maximum(np.minimum(self.xmax[i], self.xmax) - np.maximum(self.xmin[i], self.xmin), zero)
        inter = inter_h * inter_w
        with np.errstate(divide="ignore", invalid="ignore"):
            iou = inter / (self.areas[i] + self.areas - inter)
        if self.areas[i] <= 0:
            iou[:] = zero
        iou[self.areas <= 0] = zero
        row = ~(iou > self.threshold)  # a NaN IoU suppresses nothing
        if (len(self.rows) + 1) * row.size <= _CACHED_ELEMENTS:
            self.rows[i] = row
        return row


def suppress(overlaps: Overlaps, scores: np.ndarray, limit: int, score_threshold) -> np.ndarray:
    """Anchor indices kept by greedy non-maximum suppression of one score column, best first."""
    candidates = np.flatnonzero(scores >= score_threshold)
    order = candidates[np.argsort(-scores[candidates], kind="stable")]
    active = np.zeros(scores.size, dtype=bool)
    active[candidates] = True
    kept: list[int] = []
    for i in order.tolist():
        if len(kept) >= limit:
            break
        if active[i]:  # those before i in the order are kept or suppressed already
            kept.append(i)
            np.logical_and(active, overlaps.survivors(i), out=active)
    return np.asarray(kept, dtype=np.int64)


def heap_partial_order(values: list, count: int) -> list[int]:
    """The first ``count`` indices of ``values`` by decreasing value, equal values in the order a
    heap selection leaves them: a binary heap of the first ``count`` indices with the smallest
    value on top, each later index that beats the top replacing it, then the heap sorted by
    popping. This is the order LiteRT's ``std::partial_sort`` (libstdc++) gives equal scores: a
    hole sifted down to a leaf along the child that sorts first (the right one unless the left
    one beats it), then the value pushed back up while it beats its parent."""
    order = list(range(len(values)))

    def beats(i: int, j: int) -> bool:
        return values[i] > values[j]

    def place(hole: int, length: int, index: int) -> None:
        top, child = hole, hole
        while child < (length - 1) // 2:
            child = 2 * child + 2
            if beats(order[child], order[child - 1]):
                child -= 1
            order[hole], hole = order[child], child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * child + 2
            order[hole], hole = order[child - 1], child - 1
        parent = (hole - 1) // 2
        while hole > top and beats(order[parent], index):
            order[hole], hole = order[parent], parent
            parent = (hole - 1) // 2
        order[hole] = index

    for parent in range((count - 2) // 2, -1, -1):
        place(parent, count, order[parent])
    for i in range(count, len(order)):
        if beats(order[i], order[0]):
            index, order[i] = order[i], order[0]
            place(0, count, index)
    for last in range(count - 1, 0, -1):
        index, order[last] = order[last], order[0]
        place(0, last, index)
    return order[:count]


def _fast(boxes, overlaps, scores, out, a) -> int:
    boxes_out, classes_out, scores_out = out
    per_row = a["max_classes_per_detection"]
    count = min(per_row, scores.shape[1])
    best = scores[np.arange(scores.shape[0]), np.argmax(scores, axis=1)]
    kept = suppress(overlaps, best, a["max_detections"], a["threshold"])
    if count == 1:  # LiteRT's arg max: the first maximum
        top = np.argmax(scores[kept], axis=1)[:, None]
    else:
        order = np.argsort(-scores[kept], axis=1, kind="stable")
        top = order[:, :count]
        # a tie among the first count scores, or between the last of them and the next one
        span = np.take_along_axis(scores[kept], order[:, : count + 1], axis=1)
        ties = (span[:, 1:] == span[:, :-1]).any(axis=1)
        for k in np.flatnonzero(ties):  # equal scores: the order of LiteRT's partial sort
            top[k] = heap_partial_order(scores[kept[k]].tolist(), count)
    rows = (np.arange(kept.size)[:, None] * per_row + np.arange(count)).reshape(-1)
    boxes_out[rows] = np.repeat(boxes[kept], count, axis=0)
    classes_out[rows] = top.reshape(-1)
    scores_out[rows] = np.take_along_axis(scores[kept], top, axis=1).reshape(-1)
    return kept.size


def _regular(boxes, overlaps, scores, out, a) -> int:
    boxes_out, classes_out, scores_out = out
    limit = min(a["detections_per_class"], a["max_detections"])
    if limit <= 0:
        raise KernelError(f"{_OP}: detections_per_class {a['detections_per_class']} keeps no box")
    anchors = np.zeros(0, np.int64)
    classes = np.zeros(0, np.int64)
    best = np.zeros(0, np.float32)
    for c in range(scores.shape[1]):
        column = scores[:, c]
        kept = suppress(overlaps, column, limit, a["threshold"])
        if not kept.size:
            continue
        # the new class's boxes after the kept ones: a stable sort keeps earlier classes first
        anchors = np.concatenate([anchors, kept])
        classes = np.concatenate([classes, np.full(kept.size, c)])
        best = np.concatenate([best, column[kept]])
        order = np.argsort(-best, kind="stable")[: a["max_detections"]]
        anchors, classes, best = anchors[order], classes[order], best[order]
    n = anchors.size
    boxes_out[:n] = boxes[anchors]
    classes_out[:n] = classes
    scores_out[:n] = best
    return n


@kernel(_OP, domain="offload")
def detection_postprocess(
    ctx,
    box_encodings,
    class_predictions,
    anchors,
    *,
    max_detections,
    max_classes_per_detection,
    detections_per_class,
    use_regular_nms,
    nms_score_threshold,
    nms_iou_threshold,
    num_classes,
    y_scale,
    x_scale,
    h_scale,
    w_scale,
):
    if box_encodings.ndim != 3 or box_encodings.shape[0] != 1 or box_encodings.shape[2] < 4:
        raise ShapeError(f"{_OP}: box_encodings of shape {list(box_encodings.shape)} is not [1, boxes, >=4]")
    n = box_encodings.shape[1]
    if class_predictions.ndim != 3 or class_predictions.shape[:2] != (1, n):
        raise ShapeError(
            f"{_OP}: class_predictions of shape {list(class_predictions.shape)} is not [1, {n}, classes]"
        )
    if anchors.shape != (n, 4):
        raise ShapeError(f"{_OP}: anchors of shape {list(anchors.shape)} is not [{n}, 4]")
    offset = class_predictions.shape[2] - num_classes
    if offset not in (0, 1):
        raise ShapeError(
            f"{_OP}: class_predictions hold {class_predictions.shape[2]} columns for {num_classes} "
            "classes (one background column at most)"
        )
    boxes = decode_boxes(box_encodings[0], anchors, (y_scale, x_scale, h_scale, w_scale))
    invalid = (boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3])
    if invalid.any():
        raise KernelError(
            f"{_OP}: decoded box {int(np.argmax(invalid))} has its min corner past its max corner "
            "(a negative anchor height or width)"
        )
    scores = class_predictions[0, :, offset:].astype(np.float32, copy=False)
    rows = max_detections * max_classes_per_detection
    out = (np.zeros((rows, 4), np.float32), np.zeros(rows, np.float32), np.zeros(rows, np.float32))
    settings = {
        "max_detections": max_detections,
        "max_classes_per_detection": max_classes_per_detection,
        "detections_per_class": detections_per_class,
        "threshold": np.float32(nms_score_threshold),
    }
    overlaps = Overlaps(boxes, np.float32(nms_iou_threshold))
    found = (_regular if use_regular_nms else _fast)(boxes, overlaps, scores, out, settings)
    return out[0][None], out[1][None], out[2][None], np.array([found], np.float32)
