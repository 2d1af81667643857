"""The `opencl` backend's losses (``loss.cl``: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss)
on PoCL, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from offload.delegates import registry

from .opencl_support import check, model, needs_opencl

pytestmark = needs_opencl
RNG = np.random.default_rng(17)
NLL, SCE = "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"


def _model(op, shape, weight=False, log_prob=False, target_dtype=np.int64, **attrs):
    inputs = ["x", "t", "w"] if weight else ["x", "t"]
    outputs = ["loss", "log_prob"] if log_prob else ["loss"]
    node = helper.make_node(op, inputs, outputs, **attrs)
    ins = [("x", list(shape)), ("t", [shape[0], *shape[2:]], target_dtype)]
    if weight:
        ins.append(("w", [shape[1]]))
    return model([node], ins, outputs)


def _feeds(shape, weight=False, target_dtype=np.int64, ignore=None):
    x = RNG.standard_normal(shape).astype(np.float32)
    t = RNG.integers(0, shape[1], size=(shape[0], *shape[2:])).astype(target_dtype)
    if ignore is not None:
        t.reshape(-1)[::3] = ignore  # a third of the elements ignored
    feeds = {"x": x, "t": t}
    if weight:
        feeds["w"] = RNG.uniform(0.2, 2.0, size=shape[1]).astype(np.float32)
    return feeds


SHAPES = [(3, 5), (3, 5, 2), (2, 4, 3, 5), (2, 3, 2, 2, 2, 2, 3)]


@pytest.mark.parametrize("op", [NLL, SCE])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_loss(op, reduction, weight, shape, tmp_path):
    p = _model(op, shape, weight, reduction=reduction)
    check(p, _feeds(shape, weight), tmp_path, whole=True, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", [NLL, SCE])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("ignore", [0, 2, -1, 7])
def test_ignore_index(op, reduction, weight, ignore, tmp_path):
    shape = (4, 5, 3)
    p = _model(op, shape, weight, reduction=reduction, ignore_index=ignore)
    feeds = _feeds(shape, weight, ignore=ignore)
    check(p, feeds, tmp_path, whole=True, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduction", ["none", "mean"])
@pytest.mark.parametrize("shape", [(3, 5), (2, 4, 3, 5)])
def test_sce_log_prob(reduction, shape, tmp_path):
    p = _model(SCE, shape, weight=True, log_prob=True, reduction=reduction)
    check(p, _feeds(shape, weight=True), tmp_path, whole=True, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", [NLL, SCE])
def test_int32_target(op, tmp_path):
    p = _model(op, (6, 4, 3), target_dtype=np.int32, reduction="mean")
    check(p, _feeds((6, 4, 3), target_dtype=np.int32), tmp_path, whole=True, rtol=1e-5, atol=1e-5)


def test_large_sum_is_deterministic(tmp_path):
    """More elements than the work-group: every run folds them in the same order."""
    shape = (64, 10, 50)
    p = _model(SCE, shape, weight=True, reduction="mean")
    feeds = _feeds(shape, weight=True)
    from .opencl_support import run_on_opencl

    _, first = run_on_opencl(p, feeds, tmp_path)
    check(p, feeds, tmp_path, whole=True, rtol=1e-5, atol=1e-5)
    _, again = run_on_opencl(p, feeds, tmp_path)
    assert first["loss"].tobytes() == again["loss"].tobytes()


def test_out_of_range_target_gives_nan(tmp_path):
    """onnxruntime rejects such a target; the device reads nothing out of bounds and flags it."""
    from .opencl_support import run_on_opencl

    p = _model(NLL, (3, 5), reduction="none")
    feeds = _feeds((3, 5))
    feeds["t"][1] = 9
    _, got = run_on_opencl(p, feeds, tmp_path)
    assert np.isnan(got["loss"][1]) and not np.isnan(got["loss"][[0, 2]]).any()
    np.testing.assert_allclose(got["loss"][[0, 2]], -feeds["x"][[0, 2], feeds["t"][[0, 2]]], rtol=1e-6)


def _refused(p) -> str:
    support = registry.get("opencl").compiler().supports(p.main.body.operations[0])
    assert not support
    return support.reason


def test_float64_is_refused():
    node = helper.make_node(NLL, ["x", "t"], ["loss"], reduction="sum")
    p = model([node], [("x", [3, 5], np.float64), ("t", [3], np.int64)], [("loss", np.float64)])
    assert "dtype" in _refused(p)


def test_rank_1_input_is_refused():
    node = helper.make_node(NLL, ["x", "t"], ["loss"], reduction="sum")
    p = model([node], [("x", [5]), ("t", [], np.int64)], ["loss"])
    assert "rank-1" in _refused(p)
