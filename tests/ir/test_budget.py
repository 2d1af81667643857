"""Budgets from the machine (ir/budget.py) and the window checks that use them
(ir/window_cost.py): how a budget is derived, and convolutions and pools refused at import from
their declared shapes, each against sizes worked out here by hand."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.errors import OffloadError, ShapeError
from offload.ir import budget, types

GIB = 1 << 30


@pytest.mark.parametrize(
    "memory, address_space, value, source",
    [
        (None, None, 16 * GIB, "offload's default of 16 GiB"),
        (128 * GIB, None, 16 * GIB, "offload's default of 16 GiB"),
        (24 * GIB, None, 6 * GIB, "a quarter of the 24 GiB memory"),
        (24 * GIB, 4 * GIB, GIB, "a quarter of the 4 GiB address-space limit (RLIMIT_AS)"),
        (2 * GIB, 4 * GIB, GIB // 2, "a quarter of the 2 GiB memory"),
    ],
)
def test_the_tensor_budget_is_the_smallest_of_the_constant_and_the_shares(
    memory, address_space, value, source
):
    got = budget.machine_budget(
        "OFFLOAD_MAX_TENSOR_BYTES", 16 * GIB, 4, environ={}, memory=memory, address_space=address_space
    )
    assert (got.value, got.source) == (value, source)
    assert got.explain(value) == f"{source}; set OFFLOAD_MAX_TENSOR_BYTES to change it"
    assert got.explain(256).startswith("as lowered in this process")


def test_the_variable_overrides_the_machine():
    env = {"OFFLOAD_MAX_PACKAGE_BYTES": str(64 * GIB)}
    got = budget.machine_budget(
        "OFFLOAD_MAX_PACKAGE_BYTES", 8 * GIB, 2, environ=env, memory=GIB, address_space=GIB
    )
    assert got.value == 64 * GIB
    with pytest.raises(OffloadError, match=r"OFFLOAD_MAX_PACKAGE_BYTES='lots' is not a number of bytes"):
        budget.machine_budget(
            "OFFLOAD_MAX_PACKAGE_BYTES", 8 * GIB, 2, environ={"OFFLOAD_MAX_PACKAGE_BYTES": "lots"}
        )
    assert budget.fixed_budget("W", 10, "steps", environ={}).value == 10
    assert budget.fixed_budget("W", 10, "steps", environ={"W": "3"}).value == 3


def test_this_machine_is_read_from_the_operating_system():
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    memory = budget.physical_memory()
    assert memory is not None and 0 < memory <= physical
    code = (
        "import resource\n"
        "resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))\n"
        "from offload.ir import budget, types\n"
        "print(budget.address_space_limit(), types.MAX_TENSOR_BYTES, budget.PACKAGE.value)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_MAX_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    limit, tensor, package = map(int, done.stdout.split())
    assert limit == 6 * GIB
    assert tensor == min(16 * GIB, memory // 4, 6 * GIB // 4)
    assert package == min(8 * GIB, memory // 2, 3 * GIB)


def _model(node, x_shape, inits=()):
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in inits],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m.SerializeToString()


def _refused(data: bytes, match: str) -> None:
    start = time.monotonic()
    with pytest.raises(ShapeError, match=match):
        offload.load(data)
    assert time.monotonic() - start < 1


def test_a_dilated_depthwise_conv_of_static_size_is_refused_at_import():
    """Dilation 65,536 over 8 x 8: pads of 65,536 keep the output 8 x 8 (the window spans
    131,073) but make a padded input of 4 x 131,080² floats; pads of 131,072 also make the
    output 4 x 131,080²."""
    w = [("w", np.ones((4, 1, 3, 3), np.float32))]
    for pads, what, size in ((65536, r" \(padded input\)", 131080), (131072, "", 131080)):
        node = helper.make_node("Conv", ["x", "w"], ["y"], group=4, dilations=[65536] * 2, pads=[pads] * 4)
        nbytes = 4 * 4 * size * size
        shape = rf"\(1, 4, {size}, {size}\)" if what else rf"\[1, 4, {size}, {size}\]"
        _refused(
            _model(node, [1, 4, 8, 8], w),
            rf"Conv 'y'{what}: .*{shape} would take {nbytes} bytes, over the \d+-byte limit .*OFFLOAD_MAX_TENSOR_BYTES",
        )


def test_same_padding_counts_toward_the_padded_input(monkeypatch):
    """auto_pad SAME_UPPER with a 20,001-wide window over 10 x 10, stride 3: out 4, padding
    (4 - 1) * 3 + 20,001 - 10 = 20,000, a padded input of 4 x 20,010² floats."""
    node = helper.make_node(
        "MaxPool", ["x"], ["y"], kernel_shape=[20001, 20001], strides=[3, 3], auto_pad="SAME_UPPER"
    )
    monkeypatch.setattr(types, "MAX_TENSOR_BYTES", GIB)  # 6.4 GB: past it on every machine
    _refused(
        _model(node, [1, 4, 10, 10]),
        r"MaxPool 'y' \(padded input\): a result of shape \(1, 4, 20010, 20010\)",
    )


def test_a_pool_over_many_taps_is_refused_by_its_work():
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2049, 2049], pads=[1024] * 4)
    taps = 2049 * 2049
    _refused(
        _model(node, [1, 2, 8, 8]),
        rf"AveragePool 'y': a window of {taps} taps \(2049 x 2049\) over 128 outputs would take "
        rf"{taps * (128 + (1 << 14))} element steps, over the limit of {1 << 34} \(offload's default",
    )
    # the same window over a small map fits: it imports, and runs to numpy's answer
    small = helper.make_node(
        "AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1] * 4, count_include_pad=1
    )
    module = offload.runtime.load(offload.save(offload.load(_model(small, [1, 2, 8, 8]))))
    x = np.random.default_rng(0).standard_normal((1, 2, 8, 8)).astype(np.float32)
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 1), (1, 1)])
    want = sum(padded[:, :, i : i + 8, j : j + 8] for i in range(3) for j in range(3)) / 9
    np.testing.assert_allclose(module.run({"x": x})["y"], want, rtol=1e-5, atol=1e-6)


def test_a_pool_of_symbolic_size_is_refused_by_its_work_when_it_runs():
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2049, 2049], pads=[1024] * 4)
    module = offload.runtime.load(offload.save(offload.load(_model(node, ["N", 2, "H", "W"]))))
    start = time.monotonic()
    with pytest.raises(
        OffloadError, match=r"MaxPool: a window of 4198401 taps .* element steps, over the limit"
    ):
        module.run({"x": np.ones((1, 2, 8, 8), np.float32)})
    assert time.monotonic() - start < 1
