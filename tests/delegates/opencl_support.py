"""Shared by the `opencl` backend tests: small ONNX models, and running them delegated on PoCL."""

from __future__ import annotations

import functools
import importlib.util
import os
import weakref

import numpy as np
import pytest
from onnx import helper, numpy_helper

import offload
from offload import runtime
from offload.delegates import registry

RT = registry.get("opencl").runtime()

# Tests marked so need an OpenCL device that builds kernels. They are skipped only where the
# `opencl` extra is not installed, or on request (OFFLOAD_TEST_SKIP_OPENCL=1); where the extra is
# installed and no device works, they fail with the reason (the extra promises a device on every
# x86-64 Linux machine: docs/opencl.md).
needs_opencl = pytest.mark.needs_opencl
SKIP_VARIABLE = "OFFLOAD_TEST_SKIP_OPENCL"


@functools.cache
def _missing() -> tuple[str, str] | None:
    """("skip" | "fail", why) when the marked tests cannot run here, else None."""
    if importlib.util.find_spec("pyopencl") is None:
        return "skip", "the opencl extra is not installed (pip install 'offload[opencl]')"
    if os.environ.get(SKIP_VARIABLE) == "1":
        return "skip", f"{SKIP_VARIABLE}=1"
    available = RT.is_available()
    if not available:
        return "fail", (
            f"the opencl extra is installed but no OpenCL device works here: {available.reason} "
            f"(set {SKIP_VARIABLE}=1 to skip the opencl tests on purpose)"
        )
    return None


def require_opencl() -> None:
    """Skip or fail the calling test as ``needs_opencl`` would (for tests that find out late)."""
    missing = _missing()
    if missing is not None:
        action, why = missing
        pytest.skip(why) if action == "skip" else pytest.fail(why, pytrace=False)


def default_device() -> str:
    """The OpenCL device the marked tests run on, and why it was chosen ("" without one)."""
    if _missing() is not None:
        return ""
    from offload.delegates.opencl.device import choose, device_name

    dev, why = choose(None)
    return f"{device_name(dev)} [{why}]"


def model(nodes, inputs, outputs, initializers=()):
    """An ONNX model (opset 21) → offload program.

    Inputs are (name, shape) for float32 or (name, shape, numpy dtype); outputs are names (float32)
    or (name, numpy dtype). Initializers keep their dtype, except that float64 ones (Python floats)
    become float32.
    """
    arrays = [np.asarray(a) for _, a in initializers]
    arrays = [a.astype(np.float32) if a.dtype == np.float64 else a for a in arrays]

    def info(name, shape, dtype=np.float32):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)

    graph = helper.make_graph(
        nodes,
        "g",
        [info(*i) for i in inputs],
        [info(o, None) if isinstance(o, str) else info(o[0], None, o[1]) for o in outputs],
        [numpy_helper.from_array(a, n) for (n, _), a in zip(initializers, arrays)],
    )
    data = helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)]
    ).SerializeToString()
    program = offload.load(data)
    _ONNX[program] = data
    return program


def overflowing():
    """y = transpose(x * 1000) * 0.001: the stored product passes half's 65,504 once |x| > 65.5
    (the Transpose keeps the two Muls from fusing into one kernel, which would compute in float)."""
    nodes = [
        helper.make_node("Mul", ["x", "big"], ["t"]),
        helper.make_node("Transpose", ["t"], ["tt"], perm=[1, 0]),
        helper.make_node("Mul", ["tt", "small"], ["y"]),
    ]
    return model(nodes, [("x", [2, 3])], ["y"], [("big", np.float32(1000)), ("small", np.float32(0.001))])


_ONNX: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # program → the ONNX model it came from


def reference(program, feeds) -> dict:
    """The independent reference: onnxruntime on the ONNX model ``model()`` built (offload.evaluate
    only for programs that did not come from ``model()``)."""
    data = _ONNX.get(program)
    if data is None:
        return offload.evaluate(program, feeds)
    import onnxruntime as ort

    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def run_on_opencl(program, feeds, tmp_path, partitions=None, passes="none"):
    """to_backend("opencl") → save → runtime.load → run; every delegate must run on opencl.
    ``passes``: none by default (kernels tested on the graph as written)."""
    lowered = offload.to_backend(program, "opencl", passes=passes)
    path = tmp_path / "m.pte"
    offload.save(lowered, path)
    module = runtime.load(str(path))
    (name,) = module.method_names
    delegates = module.method(name).delegates
    assert delegates and all(d[:2] == ("opencl", "backend") for d in delegates), delegates
    if partitions is not None:
        assert len(delegates) == partitions, delegates
    return lowered, module.run(feeds)


def check(program, feeds, tmp_path, rtol=1e-5, atol=1e-6, whole=False):
    """OpenCL results against onnxruntime; ``whole``: the program is one Delegate op."""
    want = reference(program, feeds)
    lowered, got = run_on_opencl(program, feeds, tmp_path, partitions=1 if whole else None)
    if whole:
        assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, (
            k,
            got[k].dtype,
            got[k].shape,
            v.dtype,
            v.shape,
        )
        np.testing.assert_allclose(got[k], v, rtol=rtol, atol=atol)


def plan_and_handle(program):
    """The plan of a program lowered whole to opencl, and its OpenCL handle (destroy it after)."""
    import json

    from offload.delegates.opencl.runtime import OpenCLRuntime

    lowered = offload.to_backend(program, "opencl", passes="none")
    (delegate,) = [op for op in lowered.main.body.operations if op.op_type == "Delegate"]
    blob = delegate.attributes["processed"]
    weights = {n: v.const_value for n, v in delegate.attributes["fallback"].constants.items()}
    return json.loads(blob), OpenCLRuntime().init(blob, [], weights)


def specialized(handle):
    """The one specialization of a static plan's OpenCL handle (built at init)."""
    (spec,) = handle.specializations.entries.values()
    return spec


def device_kind() -> str:
    """ "cpu" or "gpu": the kind of the default OpenCL device, which picks the kernels made for it."""
    from offload.delegates.opencl import runtime as cl_runtime

    dev = cl_runtime.device_for(None).device
    return "cpu" if dev.type & cl_runtime.cl.device_type.CPU else "gpu"


def conv_kernels(kernels: set[str], ws, attrs: dict, bias: bool, kind: str) -> set[str]:
    """The kernels a Conv launches on a device of ``kind``, from those it launches on a GPU: a CPU
    device runs direct only depthwise convs, by rows, and where a GPU gathers im2col's columns in
    its GEMM (``conv_gemm``) writes them straight into the packed GEMM's panels, then adds a
    grouped conv's bias."""
    if kind != "cpu":
        return kernels
    if (ws[1] > 1 and "conv_direct" in kernels) or "conv_gemm" in kernels:
        kernels = {"im2col", "gemm"} | ({"add_bias"} if bias and attrs.get("group", 1) > 1 else set())
    rename = {"im2col": "im2col_packed", "conv_direct": "conv_depthwise_rows"}
    return {rename.get(k, k) for k in kernels}
