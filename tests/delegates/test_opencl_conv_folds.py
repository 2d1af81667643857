"""Launches a GPU plan saves around Convs, and the values it computes against onnxruntime.

Three folds: a Conv read only by a channel Concat stores into its slice of the Concat's output
(``gpu/slices.py``: SqueezeNet's fire modules); a grouped or depthwise Conv runs the residual Add and
Relu after it in its kernel (``gpu/epilogue.py``: ShuffleNet's units); a channel shuffle read by a
depthwise Conv is read through its indexing (``gpu/shuffle.py``). Launch counts are what the shared
launchers record for a GPU device, with and without a BLAS; values are PoCL's against onnxruntime,
at batch 2 so that image strides matter.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import helper

import offload
from offload.delegates.cuda.record import record
from offload.delegates.gpu.plan import FORMAT, parse

from .opencl_support import check, model, needs_opencl
from .test_opencl_conv import KINDS, made_for

RNG = np.random.default_rng(23)
N = 2


def _w(*shape):
    """Weights of He scale, so that values neither vanish nor grow through the layers."""
    fan_in = int(np.prod(shape[1:]))
    return (RNG.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def _b(n):
    return (RNG.standard_normal(n) * 0.1).astype(np.float32)


def _plan_and_host(program, passes="none"):
    lowered = offload.to_backend(program, "opencl", passes=passes)
    (d,) = [op for op in lowered.main.body.operations if op.op_type == "Delegate"]
    plan = json.loads(d.attributes["processed"])
    constants = d.attributes["fallback"].constants
    return plan, {int(i): constants[n].const_value for i, n in plan["weights"].items()}


def _launches(plan, host, blas: bool, kind: str = "gpu") -> tuple[int, list[str]]:
    """Launches one run of ``plan`` records (cuBLAS calls counted as one each), and their kernels."""
    b = record(plan, host, blas=blas, device_kind=kind)
    return len(b.launches) + len(b.gemms), [r.kernel for r in b.launches]


FIRES = ["sliced", "e1-read-too", "depthwise-expand", "axis-2", "concat-is-a-residual"]


def _fire(case="sliced"):
    """A fire module (squeeze 1x1, expand 1x1 and 3x3, Concat) and a 1x1 Conv reading it. By
    ``case`` (``FIRES``): "e1-read-too": the 1x1 expand's output is a model output too;
    "depthwise-expand": the 3x3 expand is depthwise (a direct conv); "axis-2": the Concat is along
    the rows; "concat-is-a-residual": a 1x1 + Relu, 1x1 then add the Concat's output, then Relu."""
    depthwise, axis = case == "depthwise-expand", 2 if case == "axis-2" else 1
    nodes = [
        helper.make_node("Conv", ["x", "ws", "bs"], ["s"]),
        helper.make_node("Relu", ["s"], ["sr"]),
        helper.make_node("Conv", ["sr", "w1", "b1"], ["e1"]),
        helper.make_node("Relu", ["e1"], ["e1r"]),
        helper.make_node("Conv", ["sr", "w3", "b3"], ["e3"], pads=[1, 1, 1, 1], group=8 if depthwise else 1),
        helper.make_node("Relu", ["e3"], ["e3r"]),
        helper.make_node("Concat", ["e1r", "e3r"], ["cat"], axis=axis),
    ]
    out3 = 8 if depthwise or axis != 1 else 12
    cat = 8 + out3 if axis == 1 else 8
    w3 = _w(8, 1, 3, 3) if depthwise else _w(out3, 8, 3, 3)
    init = [("ws", _w(8, 6, 1, 1)), ("bs", _b(8)), ("w1", _w(8, 8, 1, 1)), ("b1", _b(8))]
    init += [("w3", w3), ("b3", _b(out3))]
    if case == "concat-is-a-residual":
        nodes += [
            helper.make_node("Conv", ["cat", "wq"], ["q"]),
            helper.make_node("Relu", ["q"], ["qr"]),
            helper.make_node("Conv", ["qr", "wz"], ["z"]),
            helper.make_node("Add", ["z", "cat"], ["sz"]),
            helper.make_node("Relu", ["sz"], ["y"]),
        ]
        init += [("wq", _w(8, cat, 1, 1)), ("wz", _w(cat, 8, 1, 1))]
    else:
        nodes.append(helper.make_node("Conv", ["cat", "wz"], ["y"]))
        init.append(("wz", _w(5, cat, 1, 1)))
    outputs = ["y", "e1r"] if case == "e1-read-too" else ["y"]
    return model(nodes, [("x", [N, 6, 5, 7])], outputs, init)


def test_the_fire_modules_convs_store_into_the_concat_which_launches_nothing():
    plan, host = _plan_and_host(_fire())
    for blas in (False, True):
        launches, kernels = _launches(plan, host, blas)
        # squeeze: a GEMM; expand 1x1: a GEMM; the last 1x1: a GEMM; per image (N = 2); expand 3x3
        # (K = 72): one conv_gemm for both images, storing into its slice of the Concat
        assert launches == 3 * N + 1 <= 1.5 * 4 * N, kernels
        assert kernels.count("conv_gemm") == 1
        assert "concat_copy" not in kernels
    # a CPU device runs the 3x3 as im2col_packed + the packed GEMM: the Concat copies nothing there
    assert "concat_copy" not in _launches(plan, host, False, "cpu")[1]


@pytest.mark.parametrize("case,copies", list(zip(FIRES, [0, 1, 1, 2, 0])))
def test_only_convs_read_by_the_channel_concat_alone_and_stored_by_gemms_skip_its_copy(case, copies):
    plan, host = _plan_and_host(_fire(case))
    for kind in ("gpu", "cpu"):
        kernels = _launches(plan, host, False, kind)[1]
        assert kernels.count("concat_copy") == copies
        # the Conv adding the Concat's output adds it in place (the sliced views are read by nothing else)
        assert "add_residual" not in kernels


@needs_opencl
@pytest.mark.parametrize("device_kind", KINDS)
@pytest.mark.parametrize("case", FIRES)
def test_fire_modules_match_onnxruntime(case, device_kind, tmp_path):
    feeds = {"x": RNG.standard_normal((N, 6, 5, 7)).astype(np.float32)}
    with made_for(device_kind):  # the kernels made for a GPU run on PoCL too
        check(_fire(case), feeds, tmp_path, rtol=1e-4, atol=1e-5, whole=True)


def _grouped_units():
    """Three residual units whose last Conv is grouped: a 1x1 of 4 groups (one batched GEMM), a
    depthwise 3x3 (direct), a 3x3 of 2 groups with a bias (one implicit GEMM on a GPU; per-group
    GEMMs on a CPU device, its bias and the residual after them), each followed by Add(residual)
    + Relu."""
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        # unit 1: grouped 1x1 + Relu, depthwise, grouped 1x1 + Add + Relu
        helper.make_node("Conv", ["r0", "wa", "ba"], ["ca"], group=4),
        helper.make_node("Relu", ["ca"], ["ra"]),
        helper.make_node("Conv", ["ra", "wd", "bd"], ["cd"], group=16, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["cd", "wb", "bb"], ["cb"], group=4),
        helper.make_node("Add", ["cb", "r0"], ["s1"]),
        helper.make_node("Relu", ["s1"], ["y1"]),
        # unit 2: 1x1, depthwise + Add + Relu
        helper.make_node("Conv", ["y1", "we"], ["ce"]),
        helper.make_node("Conv", ["ce", "wf", "bf"], ["cf"], group=16, pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["y1", "cf"], ["s2"]),
        helper.make_node("Relu", ["s2"], ["y2"]),
        # unit 3: 1x1, grouped 3x3 with a bias + Add + Relu
        helper.make_node("Conv", ["y2", "wg"], ["cg"]),
        helper.make_node("Conv", ["cg", "wh", "bh"], ["ch"], group=2, pads=[1, 1, 1, 1]),
        helper.make_node("Sum", ["ch", "y2"], ["s3"]),
        helper.make_node("Relu", ["s3"], ["y"]),
    ]
    init = [("w0", _w(16, 8, 1, 1)), ("b0", _b(16)), ("wa", _w(16, 4, 1, 1)), ("ba", _b(16))]
    init += [("wd", _w(16, 1, 3, 3)), ("bd", _b(16)), ("wb", _w(16, 4, 1, 1)), ("bb", _b(16))]
    init += [("we", _w(16, 16, 1, 1)), ("wf", _w(16, 1, 3, 3)), ("bf", _b(16))]
    init += [("wg", _w(16, 16, 1, 1)), ("wh", _w(16, 8, 3, 3)), ("bh", _b(16))]
    return model(nodes, [("x", [N, 8, 6, 5])], ["y"], init)


def test_a_grouped_convs_residual_add_and_relu_are_its_epilogue():
    plan, host = _plan_and_host(_grouped_units())
    epilogues = [s.get("epilogue") for s in plan["ops"]]
    assert [s["type"] for s in plan["ops"]] == ["Conv"] * 8
    assert epilogues == [
        ["Relu"],
        ["Relu"],
        None,
        ["Add", "Relu"],
        None,
        ["Add", "Relu"],
        None,
        ["Add", "Relu"],
    ]
    for blas in (False, True):
        launches, kernels = _launches(plan, host, blas)
        # the batched GEMM, the direct conv and the implicit GEMM (the 2-group 3x3, all its
        # images and groups in one launch) add the bias and the residual in their kernel
        assert {"ew", "add_residual", "add_bias"}.isdisjoint(kernels), kernels
        # five 1x1s: one (batched) GEMM per image; two depthwise and the 3x3: one launch each
        assert launches == 5 * N + 2 + 1, kernels
    # a CPU device runs the 3x3 as im2col_packed + a packed GEMM per (image, group), then
    # add_bias and one add_residual
    kernels = _launches(plan, host, False, "cpu")[1]
    assert kernels.count("add_bias") == kernels.count("add_residual") == 1, kernels


@needs_opencl
@pytest.mark.parametrize("device_kind", KINDS)
def test_grouped_units_match_onnxruntime(device_kind, tmp_path):
    feeds = {"x": RNG.standard_normal((N, 8, 6, 5)).astype(np.float32)}
    with made_for(device_kind):
        check(_grouped_units(), feeds, tmp_path, rtol=1e-4, atol=1e-5, whole=True)


def _shuffled(read_too=False, consumer_groups=12):
    """A grouped 1x1 Conv, a channel shuffle of 3 groups of 4 (Reshape, Transpose, Reshape), a
    3x3 Conv of ``consumer_groups`` groups (12: depthwise), a grouped 1x1; ``read_too``: the
    transposed value is a model output as well."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c"], group=3),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["r", "split"], ["v"]),
        helper.make_node("Transpose", ["v"], ["t"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t", "merge"], ["u"]),
        helper.make_node("Conv", ["u", "wd", "bd"], ["d"], group=consumer_groups, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["d", "w2"], ["y"], group=3),
    ]
    init = [("w1", _w(12, 2, 1, 1)), ("b1", _b(12)), ("wd", _w(12, 12 // consumer_groups, 3, 3))]
    init += [("bd", _b(12)), ("w2", _w(12, 4, 1, 1))]
    init += [("split", np.array([N, 3, 4, 5, 7], np.int64)), ("merge", np.array([N, 12, 5, 7], np.int64))]
    return model(nodes, [("x", [N, 6, 5, 7])], ["y", "t"] if read_too else ["y"], init)


def test_a_channel_shuffle_before_a_depthwise_conv_is_read_through_its_indexing():
    plan, host = _plan_and_host(_shuffled())
    assert plan["format"] == FORMAT
    assert [(s["type"], s.get("shuffle")) for s in plan["ops"]] == [
        ("Conv", None),
        ("Conv", 3),
        ("Conv", None),
    ]
    first, depthwise = plan["ops"][0], plan["ops"][1]
    assert depthwise["inputs"][0] == first["outputs"][0]  # the shuffle's source, not its result
    for blas in (False, True):
        launches, kernels = _launches(plan, host, blas)
        assert launches == 2 * N + 1, kernels  # a batched GEMM per image twice, one depthwise conv
        assert "strided_copy" not in kernels
    # nothing of the shuffle is left in the plan's values (no buffer is placed for them)
    assert len(plan["shapes"]) == 3 + 5 + 1


@pytest.mark.parametrize(
    "read_too,groups", [(True, 12), (False, 3)], ids=["transposed-read-too", "not-depthwise"]
)
def test_a_shuffle_read_elsewhere_or_by_a_conv_of_many_channels_per_group_stays_a_copy(read_too, groups):
    plan, host = _plan_and_host(_shuffled(read_too, groups))
    assert "Transpose" in [s["type"] for s in plan["ops"]]
    assert not any(s.get("shuffle") for s in plan["ops"])
    assert "strided_copy" in _launches(plan, host, False)[1]


@needs_opencl
@pytest.mark.parametrize("device_kind", KINDS)
@pytest.mark.parametrize("read_too,groups", [(False, 12), (True, 12), (False, 3)])
def test_shuffles_match_onnxruntime(read_too, groups, device_kind, tmp_path):
    feeds = {"x": RNG.standard_normal((N, 6, 5, 7)).astype(np.float32)}
    with made_for(device_kind):
        check(_shuffled(read_too, groups), feeds, tmp_path, rtol=1e-4, atol=1e-5, whole=True)


@pytest.mark.parametrize(
    "change,where",
    [
        ({"shuffle": 0}, 1),
        ({"shuffle": "3"}, 1),
        ({"shuffle": 3}, 2),  # a 1x1 of 4 channels per group: not a direct conv
    ],
    ids=["zero-groups", "not-a-number", "not-depthwise"],
)
def test_a_damaged_shuffle_is_a_model_format_error(change, where):
    plan, host = _plan_and_host(_shuffled())
    plan["ops"][where].update(change)
    with pytest.raises(offload.errors.ModelFormatError, match="shuffle"):
        record(parse(json.dumps(plan).encode(), "opencl"), host)


def test_a_shuffle_on_another_step_is_refused():
    plan, _ = _plan_and_host(_shuffled())
    plan["ops"].append({"type": "Relu", "inputs": [plan["outputs"][0]], "outputs": [0], "shuffle": 3})
    with pytest.raises(offload.errors.ModelFormatError, match="shuffle"):
        parse(json.dumps(plan).encode(), "opencl")


def test_a_format_6_plan_still_loads_and_records_the_same_launches():
    plan, host = _plan_and_host(_fire())
    old = {**plan, "format": "offload-gpu-plan/6"}
    assert _launches(parse(json.dumps(old).encode(), "opencl"), host, False) == _launches(plan, host, False)


LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
def test_the_light_models_run_within_the_launch_target(name):
    """ONNX's light SqueezeNet and ShuffleNet (benchmarks/gpu_launches.py): launches a run at most
    1.5 times their Conv and Gemm ops, with and without cuBLAS."""
    program = offload.load(os.path.join(LIGHT, f"light_{name}.onnx"))
    lowered = offload.to_backend(program, "opencl")
    (d,) = [op for op in lowered.main.body.operations if op.op_type == "Delegate"]
    body = d.attributes["fallback"].operations
    heavy = sum(op.op_type in ("Conv", "Gemm", "MatMul") or op.op_type.endswith("Conv") for op in body)
    plan = parse(d.attributes["processed"], "opencl")
    constants = d.attributes["fallback"].constants
    host = {int(i): constants[n].const_value for i, n in plan["weights"].items()}
    for blas in (False, True):
        launches, kernels = _launches(plan, host, blas)
        assert launches <= 1.5 * heavy, (launches, heavy, kernels)
        assert "strided_copy" not in kernels  # ShuffleNet's 16 channel shuffles
        if name == "squeezenet":  # its 8 fire modules' Concats
            assert "concat_copy" not in kernels
