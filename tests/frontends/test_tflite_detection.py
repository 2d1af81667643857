"""TFLite_Detection_PostProcess (the custom operator ending SSD and EfficientDet-Lite detectors) and
the flexbuffer options it reads. Each model is one operator built by hand
(tests/frontends/tflite/build.py), run by LiteRT live, the reference; offload runs it with
``evaluate`` and from a ``.pte``, and with a convolution before it delegated to opencl.

LiteRT defines the rows it writes: on the fast path, ``min(max_classes_per_detection,
num_classes)`` rows per detection; on the regular path, the first ``max_detections`` rows (zeros
past the detections). Those are compared bit for bit; offload writes zeros in the others."""

from __future__ import annotations

import numpy as np
import pytest
from flatbuffers import flexbuffers

import offload
from offload import runtime
from offload.errors import ModelFormatError, ShapeError, UnsupportedOpError
from offload.frontends.flexbuffers import read_map
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator
from offload.schemas.generated.tflite.Padding import Padding
from offload.schemas.generated.tflite.TensorType import TensorType
from tests.delegates.opencl_support import needs_opencl, run_on_opencl
from tests.frontends.tflite.build import Graph, Op, T, build
from tests.frontends.tflite.litert import litert, options

pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT is the reference")

RNG = np.random.default_rng(20261128)
CODE = "TFLite_Detection_PostProcess"
OUTPUTS = ["boxes", "classes", "scores", "count"]
BASE = {
    "max_detections": 6,
    "max_classes_per_detection": 1,
    "nms_score_threshold": 0.3,  # not a float32: the writer stores a double
    "nms_iou_threshold": 0.5,
    "num_classes": 4,
    "y_scale": 10.0,
    "x_scale": 10.0,
    "h_scale": 5.0,
    "w_scale": 5.0,
}


def flex(values: dict) -> bytes:
    b = flexbuffers.Builder()
    with b.Map():
        for key, v in values.items():
            if isinstance(v, bool):
                b.Bool(key, v)
            elif isinstance(v, int):
                b.Int(key, v)
            elif isinstance(v, str):
                b.String(key, v)
            else:
                b.Float(key, v)
    return bytes(b.Finish())


def detection_model(boxes: int, columns: int, opts: dict, *, codings: int = 4, raw: bytes | None = None,
                    quant: dict | None = None, anchor_rows: int | None = None) -> bytes:  # fmt: skip
    """box_encodings [1, boxes, codings], class_predictions [1, boxes, columns], anchors
    [anchor_rows or boxes, 4] in, the four outputs out; ``quant`` maps an input name to its uint8
    (scale, zero point)."""
    quant = quant or {}
    rows = opts["max_detections"] * opts["max_classes_per_detection"]
    shapes = {"box_encodings": [1, boxes, codings], "class_predictions": [1, boxes, columns],
              "anchors": [anchor_rows or boxes, 4]}  # fmt: skip
    ins = [
        T(name, shape, TensorType.UINT8 if name in quant else TensorType.FLOAT32, quant=quant.get(name))
        for name, shape in shapes.items()
    ]
    outs = [T("boxes", [1, rows, 4]), T("classes", [1, rows]), T("scores", [1, rows]), T("count", [1])]
    op = Op(CODE, [0, 1, 2], [3, 4, 5, 6], custom_options=flex(opts) if raw is None else raw)
    return build([Graph([*ins, *outs], [op], [0, 1, 2], [3, 4, 5, 6])])


def feeds_for(boxes: int, columns: int, levels: int = 0) -> dict:
    """Random encodings, scores (``levels`` > 0: drawn from that many values, so that many tie)
    and anchors of positive size spread over the unit square."""
    scores = (
        RNG.integers(0, levels, (1, boxes, columns)) / levels if levels else RNG.random((1, boxes, columns))
    )
    centers = RNG.random((boxes, 2))
    sizes = RNG.uniform(0.1, 0.5, (boxes, 2))
    return {
        "box_encodings": RNG.normal(0, 1, (1, boxes, 4)).astype(np.float32),
        "class_predictions": scores.astype(np.float32),
        "anchors": np.concatenate([centers, sizes], axis=1).astype(np.float32),
    }


def defined_rows(opts: dict, count: int) -> np.ndarray:
    """The output rows LiteRT writes, for ``count`` detections."""
    per_row = opts["max_classes_per_detection"]
    if opts.get("use_regular_nms"):
        return np.arange(opts["max_detections"])
    used = min(per_row, opts["num_classes"])
    return (np.arange(count)[:, None] * per_row + np.arange(used)).reshape(-1)


def compare(want: dict, got: dict, opts: dict, rtol: float = 0.0) -> None:
    count = int(want["count"][0])
    rows = defined_rows(opts, count)
    assert got["count"].dtype == np.float32 and got["count"].shape == (1,)
    assert got["count"][0] == count
    for name in ("boxes", "classes", "scores"):
        w, g = want[name], got[name]
        assert g.shape == w.shape and g.dtype == w.dtype == np.float32, (name, g.shape, w.shape)
        np.testing.assert_allclose(g[0, rows], w[0, rows], rtol=rtol, atol=rtol, err_msg=name)
        rest = np.setdiff1d(np.arange(g.shape[1]), rows)
        assert not g[0, rest].any(), f"{name}: rows LiteRT leaves unwritten hold zeros in offload"


def check(data: bytes, feeds: dict, opts: dict, tmp_path) -> dict:
    """offload's evaluate and .pte run against LiteRT; LiteRT's results."""
    want = litert(data, feeds)
    program = offload.load(data)
    *before, last = [op.qualified_type for op in program.main.body.operations]
    assert last == "offload::DetectionPostProcess" and set(before) <= {"DequantizeLinear"}, before
    offload.save(program, tmp_path / "m.pte")
    for got in (offload.evaluate(program, feeds), runtime.load(str(tmp_path / "m.pte")).run(feeds)):
        compare(want, got, opts)
    return want


@pytest.mark.parametrize("per_row", [1, 2, 6])
@pytest.mark.parametrize("background", [1, 0])
def test_fast_suppression_matches_litert(per_row, background, tmp_path):
    """Per anchor its best classes, one suppression over the best scores; max_classes_per_detection
    past the class count (6 of 4) leaves rows unwritten."""
    opts = {**BASE, "max_classes_per_detection": per_row}
    data = detection_model(40, 4 + background, opts)
    want = check(data, feeds_for(40, 4 + background), opts, tmp_path)
    assert 0 < want["count"][0] <= opts["max_detections"]


@pytest.mark.parametrize("per_class, per_row", [(100, 1), (2, 1), (3, 2)])
def test_regular_suppression_matches_litert(per_class, per_row, tmp_path):
    """Suppression per class (at most detections_per_class each), the best max_detections over all."""
    opts = {
        **BASE,
        "use_regular_nms": True,
        "detections_per_class": per_class,
        "max_classes_per_detection": per_row,
    }
    data = detection_model(40, 5, opts)
    want = check(data, feeds_for(40, 5), opts, tmp_path)
    assert want["count"][0] == opts["max_detections"]


@pytest.mark.parametrize("regular, per_row", [(False, 1), (False, 3), (True, 1)])
def test_equal_scores_order_as_litert(regular, per_row, tmp_path):
    """Scores drawn from four values tie across anchors and across classes: equal scores go by
    anchor index, an anchor's classes in the order of LiteRT's partial sort, and on the regular
    path an earlier class before a later one."""
    opts = {**BASE, "use_regular_nms": regular, "max_detections": 10, "nms_score_threshold": 0.25,
            "max_classes_per_detection": per_row}  # fmt: skip
    check(detection_model(30, 5, opts), feeds_for(30, 5, levels=4), opts, tmp_path)


@pytest.mark.parametrize("regular", [False, True])
def test_overlapping_boxes_suppress_and_a_threshold_drops(regular, tmp_path):
    """Eight anchors of one place (all boxes the same): one detection per suppression; scores
    under the threshold are never detections, and none left is no detection at all."""
    opts = {**BASE, "use_regular_nms": regular, "num_classes": 2}
    feeds = feeds_for(8, 3)
    feeds["anchors"][:] = [0.5, 0.5, 0.2, 0.2]
    feeds["box_encodings"][:] = 0
    data = detection_model(8, 3, opts)
    want = check(data, feeds, opts, tmp_path)
    assert want["count"][0] == (2 if regular else 1)
    feeds["class_predictions"][:] = 0.1
    want = check(data, feeds, opts, tmp_path)
    assert want["count"][0] == 0


@pytest.mark.parametrize("regular", [False, True])
def test_crowded_and_empty_boxes(regular, monkeypatch, tmp_path):
    """200 boxes crowded into a corner (IoUs on both sides of the threshold), some of zero height
    (IoU 0: they suppress nothing and nothing suppresses them); the same with no suppression row
    kept for reuse."""
    from offload.runtime.kernels import detection_postprocess

    opts = {**BASE, "use_regular_nms": regular, "max_detections": 40, "detections_per_class": 15}
    feeds = feeds_for(200, 5)
    feeds["anchors"][:, :2] *= 0.2
    feeds["anchors"][::7, 2] = 0
    feeds["box_encodings"] *= 0.3
    data = detection_model(200, 5, opts)
    want = check(data, feeds, opts, tmp_path)
    boxes = want["boxes"][0, : int(want["count"][0])]
    assert (boxes[:, 0] == boxes[:, 2]).any(), "some detections are boxes of zero height"
    best = np.sort(feeds["class_predictions"][0, :, 1:].max(axis=1))[::-1][:40]
    if not regular:  # suppression dropped some of the 40 best anchors
        assert not np.array_equal(want["scores"][0], best)
    monkeypatch.setattr(detection_postprocess, "_CACHED_ELEMENTS", 0)
    check(data, feeds, opts, tmp_path)


def test_a_negative_anchor_size_fails_as_in_litert():
    """LiteRT refuses a decoded box whose min corner passes its max corner; offload names it."""
    from offload.errors import KernelError

    feeds = feeds_for(8, 5)
    feeds["anchors"][3, 3] = -0.2
    data = detection_model(8, 5, BASE)
    with pytest.raises(RuntimeError):
        litert(data, feeds)
    with pytest.raises(KernelError, match=r"DetectionPostProcess: decoded box 3 has its min corner"):
        offload.evaluate(offload.load(data), feeds)


def test_keypoint_columns_and_uint8_inputs(tmp_path):
    """uint8 box encodings (with two keypoint columns, unread), anchors and scores, dequantized as
    LiteRT does."""
    quant = {"box_encodings": (0.05, 128), "class_predictions": (1 / 255, 0), "anchors": (1 / 255, 0)}
    opts = {**BASE, "max_classes_per_detection": 2}
    data = detection_model(24, 5, opts, codings=6, quant=quant)
    feeds = {
        "box_encodings": RNG.integers(90, 170, (1, 24, 6)).astype(np.uint8),
        "class_predictions": RNG.integers(0, 256, (1, 24, 5)).astype(np.uint8),
        "anchors": RNG.integers(20, 230, (24, 4)).astype(np.uint8),
    }
    check(data, feeds, opts, tmp_path)


@needs_opencl
def test_a_convolution_before_it_runs_on_opencl(tmp_path):
    """A 1x1 CONV_2D and a RESHAPE make the box encodings: they are delegated to opencl, the
    post-processing stays on the CPU, and the detections follow LiteRT's."""
    n = 16
    w = RNG.normal(0, 0.5, (4, 1, 1, 3)).astype("<f4")
    tensors = [
        T("image", [1, n, 1, 3]), T("w", [4, 1, 1, 3], data=w), T("b", [4], data=np.zeros(4, "<f4")),
        T("conv", [1, n, 1, 4]), T("shape", [3], TensorType.INT32, data=np.array([1, n, 4], "<i4")),
        T("box_encodings", [1, n, 4]), T("class_predictions", [1, n, 5]), T("anchors", [n, 4]),
        T("boxes", [1, 6, 4]), T("classes", [1, 6]), T("scores", [1, 6]), T("count", [1]),
    ]  # fmt: skip
    conv = options("Conv2DOptions", padding=Padding.VALID, stride_w=1, stride_h=1)
    ops = [
        Op(BuiltinOperator.CONV_2D, [0, 1, 2], [3], conv),
        Op(BuiltinOperator.RESHAPE, [3, 4], [5], options("ReshapeOptions")),
        Op(CODE, [5, 6, 7], [8, 9, 10, 11], custom_options=flex(BASE)),
    ]
    data = build([Graph(tensors, ops, [0, 6, 7], [8, 9, 10, 11])])
    source = feeds_for(n, 5)
    feeds = {"image": RNG.normal(0, 1, (1, n, 1, 3)).astype(np.float32), **source}
    del feeds["box_encodings"]
    lowered, got = run_on_opencl(offload.load(data), feeds, tmp_path)
    types = [op.op_type for op in lowered.main.body.operations]
    assert "Delegate" in types and types[-1] == "DetectionPostProcess", types
    compare(litert(data, feeds), got, BASE, rtol=1e-5)


@pytest.mark.parametrize(
    "change, error, match",
    [
        ({"num_classes": None}, ModelFormatError, r"no 'num_classes'"),
        ({"num_classes": 0}, ModelFormatError, r"'num_classes' is 0"),
        ({"max_detections": 0}, ModelFormatError, r"'max_detections' is 0"),
        ({"max_detections": 1 << 30}, ModelFormatError, r"'max_detections' is 1073741824"),
        (
            {"max_detections": 1000, "max_classes_per_detection": 1000},
            ModelFormatError,
            r"1000000 detection rows",
        ),
        ({"nms_iou_threshold": 0.0}, ModelFormatError, r"'nms_iou_threshold' is 0.0"),
        ({"h_scale": 0.0}, ModelFormatError, r"'h_scale' is 0.0"),
        (
            {"use_regular_nms": True, "detections_per_class": 0},
            ModelFormatError,
            r"'detections_per_class' is 0",
        ),
        ({"detections_per_class": 1 << 40}, ModelFormatError, r"'detections_per_class' is 1099511627776"),
        ({"y_scale": "ten"}, ModelFormatError, r"'y_scale' is a string, not a float"),
        ({"num_classes": 2}, ShapeError, r"5 columns, but num_classes is 2"),
    ],
)
def test_bad_options_are_named(change, error, match):
    opts = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    shape_opts = {**BASE, **{k: v for k, v in change.items() if k.startswith("max_") and v is not None}}
    data = detection_model(8, 5, shape_opts, raw=flex(opts))
    with pytest.raises(error, match=rf"operator 0 \(CUSTOM '{CODE}'\).*{match}"):
        offload.load(data)


def test_bad_inputs_are_named():
    with pytest.raises(ShapeError, match=r"anchors of shape \[7, 4\] is not \[8, 4\]"):
        offload.load(detection_model(8, 5, BASE, anchor_rows=7))
    mixed = detection_model(8, 5, BASE, quant={"box_encodings": (0.1, 128)})
    with pytest.raises(UnsupportedOpError, match=r"box_encodings are uint8 and anchors float32"):
        offload.load(mixed)


@pytest.mark.parametrize("cut", [0, 2, 5, 30, -3])
def test_a_truncated_flexbuffer_is_a_format_error(cut):
    """Options cut short (or with bytes dropped from the front) name the operator."""
    raw = flex(BASE)
    raw = raw[:cut] if cut > 0 else raw[-cut:] if cut < 0 else b""
    with pytest.raises(ModelFormatError, match=rf"operator 0 \(CUSTOM '{CODE}'\)"):
        offload.load(detection_model(8, 5, BASE, raw=raw))


def test_flexbuffer_scalars_of_every_width_and_indirection():
    b = flexbuffers.Builder()
    with b.Map():
        b.Int("small", -3)
        b.Int("wide", -(1 << 40))
        b.UInt("unsigned", 1 << 63)
        b.Float("half", 0.5)
        b.IndirectInt("indirect", 123456)
        b.IndirectFloat("indirect_float", 2.25)
        b.Bool("flag", True)
        b.Null("nothing")
        b.String("name", "ssd")
        with b.Vector("list"):
            b.Int(1)
    m = read_map(bytes(b.Finish()), "op")
    assert (m.integer("small"), m.integer("wide"), m.integer("unsigned")) == (-3, -(1 << 40), 1 << 63)
    assert (m.real("half"), m.integer("indirect"), m.real("indirect_float")) == (0.5, 123456, 2.25)
    assert m.boolean("flag") is True and m.integer("nothing", 7) == 7 and "nothing" not in m
    assert m.real("absent", 1.5) == 1.5
    with pytest.raises(ModelFormatError, match=r"op: option 'list' is a vector, not an int"):
        m.integer("list")
    with pytest.raises(ModelFormatError, match=r"op: its options have no 'absent'"):
        m.integer("absent")


def test_flexbuffer_offsets_outside_the_buffer_are_refused():
    """Every byte of a map overwritten in turn: a ModelFormatError or a map, never another error."""
    raw = bytearray(flex({"a": 1, "bb": 2.5, "c": True}))
    for i in range(len(raw)):
        for value in (0, 0x7F, 0xFF):
            bad = bytearray(raw)
            bad[i] = value
            try:
                read_map(bytes(bad), "op")
            except ModelFormatError as e:
                assert str(e).startswith("op: ")
