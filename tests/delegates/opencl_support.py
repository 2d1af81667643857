"""Shared by the `opencl` backend tests: small ONNX models, and running them delegated on PoCL."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload import runtime
from offload.delegates import registry

RT = registry.get("opencl").runtime()
needs_opencl = pytest.mark.skipif(not RT.is_available(), reason="no OpenCL platform")


def model(nodes, inputs, outputs, initializers=()):
    """An ONNX model (opset 21) → offload program; inputs are (name, shape), outputs names.

    Initializers keep their dtype, except that float64 ones (Python floats) become float32.
    """
    arrays = [np.asarray(a) for _, a in initializers]
    arrays = [a.astype(np.float32) if a.dtype == np.float64 else a for a in arrays]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(a, n) for (n, _), a in zip(initializers, arrays)],
    )
    return offload.load(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    )


def run_on_opencl(program, feeds, tmp_path, partitions=None):
    """to_backend("opencl") → save → runtime.load → run; every delegate must run on opencl."""
    lowered = offload.to_backend(program, "opencl")
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
    """OpenCL results against offload.evaluate; ``whole``: the program is one Delegate op."""
    want = offload.evaluate(program, feeds)
    lowered, got = run_on_opencl(program, feeds, tmp_path, partitions=1 if whole else None)
    if whole:
        assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=rtol, atol=atol)


def plan_and_handle(program):
    """The plan of a program lowered whole to opencl, and its OpenCL handle (destroy it after)."""
    import json

    from offload.delegates.opencl.runtime import OpenCLRuntime

    lowered = offload.to_backend(program, "opencl")
    (delegate,) = [op for op in lowered.main.body.operations if op.op_type == "Delegate"]
    blob = delegate.attributes["processed"]
    weights = {n: v.const_value for n, v in delegate.attributes["fallback"].constants.items()}
    return json.loads(blob), OpenCLRuntime().init(blob, [], weights)
