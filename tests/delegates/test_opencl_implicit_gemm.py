"""Conv as one implicit-GEMM launch (matmul.cl ``conv_gemm``, ``ops/conv.py``) on PoCL, against
onnxruntime: a spread of conv shapes and epilogues in one model (one delegate, so each kernel
builds once), planned with the kernels made for a GPU device and for a CPU device."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from onnx import helper

import offload
from offload.delegates.backend import CompileSpecError
from offload.delegates.cuda.record import RecordingBuilder, record
from offload.delegates.gpu.plan import parse
from offload.delegates.opencl.runtime import OpenCLRuntime

from .opencl_support import model, needs_opencl, reference, specialized
from .test_opencl_conv import made_for

RNG = np.random.default_rng(11)
INPUTS = {
    "xa": (2, 8, 9, 11),  # batch 2, non-square
    "xb": (1, 3, 20, 17),
    "xc": (1, 64, 6, 5),
    "xd": (2, 16, 7, 8),
    "xe": (1, 16, 16, 16),
}
# name → (input, W shape, attributes, bias, what follows the Conv): every one runs as conv_gemm on
# a GPU (more than one input channel per group, C/G * prod(kernel) >= 64, not a plain 1x1)
CONVS = {
    "pad": ("xa", (12, 8, 3, 3), {"pads": [1, 1, 1, 1]}, True, None),
    "dilated": (
        "xa",
        (6, 8, 3, 3),
        {"strides": [2, 1], "dilations": [2, 3], "pads": [2, 0, 1, 3]},
        True,
        None,
    ),
    "nonsquare": ("xa", (6, 8, 5, 3), {"strides": [2, 1], "pads": [2, 1, 2, 1]}, False, None),
    "7x7s2": ("xb", (16, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}, True, "Relu"),
    "1x1s2": ("xc", (24, 64, 1, 1), {"strides": [2, 2]}, False, None),
    "1x1pad": ("xc", (8, 64, 1, 1), {"pads": [1, 0, 0, 1]}, True, "Clip"),
    "grouped": ("xd", (10, 8, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, True, "Relu"),
    "add": ("xa", (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}, True, "Add"),
    "grouped_add_relu": ("xd", (16, 8, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, True, "AddRelu"),
    "blocked8": ("xe", (64, 16, 3, 3), {"pads": [1, 1, 1, 1]}, True, "Relu"),  # 64 x 256: WPT 8
    "blocked4": ("xe", (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}, False, None),  # 32 x 256: WPT 4
    "bn": ("xe", (32, 16, 3, 3), {"strides": [2, 2]}, False, "BatchNormalization"),  # folded
}


def _spread():
    nodes, init = [], []
    for name, (x, ws, attrs, bias, after) in CONVS.items():
        init.append((f"w_{name}", RNG.standard_normal(ws).astype(np.float32) / np.sqrt(np.prod(ws[1:]))))
        ins = [x, f"w_{name}"] + ([f"b_{name}"] if bias else [])
        if bias:
            init.append((f"b_{name}", RNG.standard_normal(ws[0]).astype(np.float32)))
        c = f"c_{name}" if after else name
        nodes.append(helper.make_node("Conv", ins, [c], **attrs))
        if after in ("Relu", "Clip"):
            bounds = [f"lo_{name}", f"hi_{name}"] if after == "Clip" else []
            init += [(f"lo_{name}", np.float32(0)), (f"hi_{name}", np.float32(0.5))] if bounds else []
            nodes.append(helper.make_node(after, [c, *bounds], [name]))
        elif after in ("Add", "AddRelu"):  # the residual: computed in the model, read by the Add only
            nodes.append(helper.make_node("Abs", [x], [f"r_{name}"]))
            s = name if after == "Add" else f"s_{name}"
            nodes.append(helper.make_node("Add", [f"r_{name}", c], [s]))
            if after == "AddRelu":
                nodes.append(helper.make_node("Relu", [s], [name]))
        elif after == "BatchNormalization":
            m = ws[0]
            stats = [
                RNG.standard_normal(m),
                RNG.standard_normal(m),
                RNG.standard_normal(m),
                RNG.random(m) + 0.5,
            ]
            init += [(f"{k}_{name}", v.astype(np.float32)) for k, v in zip(("g", "be", "mu", "var"), stats)]
            bn = [c] + [f"{k}_{name}" for k in ("g", "be", "mu", "var")]
            nodes.append(helper.make_node("BatchNormalization", bn, [name]))
    return model(nodes, [(k, list(v)) for k, v in INPUTS.items()], list(CONVS), init)


PROGRAM = _spread()
FEEDS = {k: RNG.standard_normal(v).astype(np.float32) for k, v in INPUTS.items()}


def _delegate(program):
    """The one Delegate of ``program`` lowered to opencl with the default passes (BatchNormalization
    folded into its Conv)."""
    lowered = offload.to_backend(program, "opencl")
    (d,) = [op for op in lowered.main.body.operations if op.op_type == "Delegate"]
    return d


@functools.cache
def _spread_delegate():
    """``PROGRAM``'s Delegate, lowered once for the tests here (none changes it)."""
    return _delegate(PROGRAM)


def _run(blob: bytes, d, device_kind: str):
    """The outputs of the plan ``blob`` on PoCL with the kernels made for ``device_kind``, by name,
    and the kernels it launched."""
    weights = {n: v.const_value for n, v in d.attributes["fallback"].constants.items()}
    runtime = OpenCLRuntime()
    with made_for(device_kind):
        handle = runtime.init(blob, [], weights)
    try:
        outs = runtime.execute(handle, [FEEDS[v.name] for v in d.inputs])
        kernels = [launch.kernel.function_name for launch in specialized(handle).launches]
    finally:
        runtime.destroy(handle)
    return dict(zip([v.name for v in d.outputs], outs)), kernels


def _old_format(blob: bytes) -> bytes:
    """The same plan in format 7: no Conv step asks for implicit columns."""
    plan = json.loads(blob)
    for step in plan["ops"]:
        step.pop("columns", None)
    return json.dumps({**plan, "format": "offload-gpu-plan/7"}).encode()


@needs_opencl
def test_a_gpu_runs_each_conv_as_one_implicit_gemm_bit_for_bit_as_im2col_then_the_gemm():
    d = _spread_delegate()
    want = reference(PROGRAM, FEEDS)
    got, kernels = _run(d.attributes["processed"], d, "gpu")
    assert kernels.count("conv_gemm") == len(CONVS), kernels
    assert {"im2col", "im2col_packed", "add_bias", "add_residual"}.isdisjoint(kernels), kernels
    for name in CONVS:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4, err_msg=name)
    # a plan of format 7 runs im2col then a GEMM per image and group: the same sums in the same order
    old, old_kernels = _run(_old_format(d.attributes["processed"]), d, "gpu")
    assert "conv_gemm" not in old_kernels and "im2col" in old_kernels
    for name in CONVS:
        np.testing.assert_array_equal(got[name], old[name], err_msg=name)


@needs_opencl
def test_a_cpu_device_writes_the_columns_into_the_packed_gemms_panels():
    d = _spread_delegate()
    want = reference(PROGRAM, FEEDS)
    got, kernels = _run(d.attributes["processed"], d, "cpu")
    assert "conv_gemm" not in kernels and "im2col_packed" in kernels
    for name in CONVS:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4, err_msg=name)


def _recorded(blas: bool) -> list[str]:
    d = _spread_delegate()
    plan = parse(d.attributes["processed"], "opencl")
    constants = d.attributes["fallback"].constants
    host = {int(i): constants[n].const_value for i, n in plan["weights"].items()}
    b = record(plan, host, blas=blas, device_kind="gpu")
    return [r.kernel for r in b.launches] + ["cublas"] * len(b.gemms)


@pytest.mark.parametrize("blas", [False, True], ids=["opencl-gpu", "cuda"])
def test_each_conv_is_one_launch_on_a_gpu(blas):
    kernels = _recorded(blas)
    # the Convs, the Clip and the two Abs of the residuals: nothing else
    assert kernels.count("conv_gemm") == len(CONVS) and len(kernels) == len(CONVS) + 3, kernels


def test_a_device_whose_work_groups_hold_fewer_than_256_items_writes_the_columns(monkeypatch):
    monkeypatch.setattr(RecordingBuilder, "max_local_size", 64, raising=False)
    kernels = _recorded(False)
    assert "conv_gemm" not in kernels and kernels.count("im2col") >= len(CONVS), kernels


def test_the_plan_asks_for_implicit_columns_on_convs_that_gather_them_only():
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["y", "wd"], ["z"], group=4, pads=[1, 1, 1, 1]),  # depthwise
    ]
    init = [("w", np.ones((4, 4, 3, 3), np.float32)), ("wd", np.ones((4, 1, 3, 3), np.float32))]
    d = _delegate(model(nodes, [("x", [1, 4, 5, 5])], ["z"], init))
    plan = parse(d.attributes["processed"], "opencl")
    assert plan["format"] == "offload-gpu-plan/8"
    assert [s.get("columns") for s in plan["ops"]] == ["implicit", None]


def test_the_implicit_conv_spec_off_plans_the_columns_into_a_buffer():
    lowered = offload.to_backend(PROGRAM, "opencl", compile_specs={"opencl": {"implicit_conv": "0"}})
    (d,) = [op for op in lowered.main.body.operations if op.op_type == "Delegate"]
    plan = parse(d.attributes["processed"], "opencl")
    assert not any("columns" in s for s in plan["ops"])
    with pytest.raises(CompileSpecError, match="implicit_conv"):
        offload.to_backend(PROGRAM, "opencl", compile_specs={"opencl": {"implicit_conv": "yes"}})


@pytest.mark.parametrize(
    "step,why", [({"type": "Relu", "columns": "implicit"}, "columns"), ({"columns": "im2col"}, "columns")]
)
def test_a_damaged_columns_key_is_a_model_format_error(step, why):
    plan = json.loads(_spread_delegate().attributes["processed"])
    conv = next(s for s in plan["ops"] if s["type"] == "Conv")
    conv.update(step)
    with pytest.raises(offload.errors.ModelFormatError, match=why):
        parse(json.dumps(plan).encode(), "opencl")
