"""The tensor byte limit (OFFLOAD_MAX_TENSOR_BYTES): shapes past it are refused before anything
allocates them — by type inference for static shapes, by the shape-making kernels at run time."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.errors import ShapeError
from offload.ir import budget
from offload.runtime.kernels import _util

HUGE = 1 << 40  # elements


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m.SerializeToString()


def test_a_static_shape_past_the_limit_is_refused_at_import():
    data = _model(
        [helper.make_node("ConstantOfShape", ["s"], ["y"])],
        [],
        [("y", TensorProto.FLOAT)],
        [("s", np.array([1 << 20, 1 << 20], np.int64))],
    )
    with pytest.raises(
        ShapeError, match=r"ConstantOfShape .*shape \[1048576, 1048576\] would take 4398046511104 bytes"
    ):
        offload.load(data)


def test_a_reshape_to_a_huge_shape_then_expanded_is_refused_at_import():
    data = _model(
        [
            helper.make_node("Reshape", ["x", "s"], ["r"]),
            helper.make_node("Expand", ["r", "e"], ["y"]),
        ],
        [("x", TensorProto.FLOAT, [1])],
        [("y", TensorProto.FLOAT)],
        [("s", np.array([1, 1], np.int64)), ("e", np.array([1 << 20, 1 << 20], np.int64))],
    )
    with pytest.raises(ShapeError, match="Expand"):
        offload.load(data)


@pytest.mark.parametrize(
    "node, feeds",
    [
        (helper.make_node("ConstantOfShape", ["s"], ["y"]), {"s": np.array([HUGE, 4], np.int64)}),
        (helper.make_node("Expand", ["x", "s"], ["y"]), {"x": np.ones(1, np.float32), "s": np.array([HUGE], np.int64)}),
        (helper.make_node("Range", ["a", "b", "c"], ["y"]), {"a": np.array(0, np.int64), "b": np.array(HUGE, np.int64), "c": np.array(1, np.int64)}),
        (helper.make_node("Pad", ["x", "s"], ["y"]), {"x": np.ones(1, np.float32), "s": np.array([0, HUGE], np.int64)}),
        (helper.make_node("OneHot", ["i", "d", "v"], ["y"]), {"i": np.zeros(1024, np.int64), "d": np.array(HUGE, np.int64), "v": np.array([0, 1], np.float32)}),
    ],
    ids=lambda v: v.op_type if hasattr(v, "op_type") else "",
)  # fmt: skip
def test_shape_making_kernels_refuse_before_allocating(node, feeds):
    """Shapes computed from tensor values at run time (the static check cannot see them)."""
    types = {np.dtype(np.int64): TensorProto.INT64, np.dtype(np.float32): TensorProto.FLOAT}
    data = _model(
        [node],
        [(k, types[v.dtype], list(v.shape)) for k, v in feeds.items()],
        [("y", types[np.dtype(np.float32)] if node.op_type != "Range" else TensorProto.INT64)],
    )
    program = offload.load(data)
    module = offload.runtime.load(offload.save(program))
    with pytest.raises(Exception, match="OFFLOAD_MAX_TENSOR_BYTES") as info:
        module.run(feeds)
    assert (
        isinstance(info.value, ShapeError)
        or isinstance(info.value.__cause__, ShapeError)
        or "ShapeError" in str(info.value)
    )


def test_the_limit_is_set_by_the_environment():
    code = (
        "import numpy as np, offload.runtime.kernels._util as u, offload.ir.types as t;"
        "print(t.MAX_TENSOR_BYTES, u.MAX_RESULT_BYTES);"
        "u.check_result((100,), np.float32, 'X')"
    )
    env = {"OFFLOAD_MAX_TENSOR_BYTES": "256", "PATH": ""}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.split() == ["256", "256"]
    assert (
        "ShapeError: X: a result of shape (100,) would take 400 bytes, over the 256-byte limit" in done.stderr
    )
    assert budget.TENSOR.value == _util.MAX_RESULT_BYTES  # this process: the machine's budget


@pytest.mark.parametrize(
    "node, inits",
    [
        (  # a depthwise conv whose dilation and pads make a padded input of about 1 TiB
            helper.make_node("Conv", ["x", "w"], ["y"], group=4, dilations=[65536] * 2, pads=[131072] * 4),
            [("w", np.ones((4, 1, 3, 3), np.float32))],
        ),
        (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 60000, 60000]), []),
        (helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[0, 0, 70000, 70000]), []),
        (  # stride 65,536 over 8 x 8: a result of 65,536 x 7 + 3 = 458,755 per axis
            helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[65536, 65536]),
            [("w", np.ones((4, 4, 3, 3), np.float32))],
        ),
    ],
    ids=["conv-dilated", "maxpool", "averagepool", "convtranspose-strided"],
)
def test_windows_past_the_limit_are_refused_before_padding(node, inits):
    """Symbolic input sizes: inference cannot refuse these; the kernel's geometry does, at once."""
    data = _model([node], [("x", TensorProto.FLOAT, ["N", 4, "H", "W"])], [("y", TensorProto.FLOAT)], inits)
    module = offload.runtime.load(offload.save(offload.load(data)))
    start = time.monotonic()
    what = r"\(1, 4, 458755, 458755\)" if node.op_type == "ConvTranspose" else r"\(1, 4, \d+, \d+\)"
    where = "" if node.op_type == "ConvTranspose" else r" \(padded input\)"
    with pytest.raises(
        Exception, match=rf"{node.op_type}{where}: a result of shape {what} would take"
    ) as info:
        module.run({"x": np.ones((1, 4, 8, 8), np.float32)})
    assert isinstance(info.value, ShapeError) or isinstance(info.value.__cause__, ShapeError)
    assert time.monotonic() - start < 1


@pytest.mark.parametrize(
    "node, what",
    [
        (
            helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[16, 16], pads=[8] * 4),
            "MaxPool (the windows the indices are read from)",
        ),
        (
            helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[16, 16], pads=[8] * 4),
            "LpPool (its windows' powers)",
        ),
    ],
    ids=["maxpool-indices", "lppool"],
)
def test_pools_that_copy_every_window_check_the_copy(node, what, monkeypatch):
    """Window copies of 65 x 65 outputs x 256 taps (4.3 MB) under a 1 MiB limit; the padded input
    (80 x 80) and the result fit it."""
    outputs = [("y", TensorProto.FLOAT)] + [("i", TensorProto.INT64)] * (len(node.output) - 1)
    data = _model([node], [("x", TensorProto.FLOAT, [1, 1, "H", "W"])], outputs)
    module = offload.runtime.load(offload.save(offload.load(data)))
    monkeypatch.setattr(_util, "MAX_RESULT_BYTES", 1 << 20)
    shape = r"\(1, 1, 65, 65, 16, 16\)"
    with pytest.raises(
        Exception, match=rf"{re.escape(what)}: a result of shape {shape} would take 4326400 bytes"
    ):
        module.run({"x": np.ones((1, 1, 64, 64), np.float32)})
