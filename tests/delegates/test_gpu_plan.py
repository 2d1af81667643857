"""Damaged or hostile GPU plans: init refuses them with ModelFormatError, never crashes or runs wild."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from onnx import helper

import offload
from offload.errors import ModelFormatError, OffloadError

from .opencl_support import model, needs_opencl

pytestmark = needs_opencl
RNG = np.random.default_rng(3)


def _lowered():
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    m = RNG.standard_normal((8, 5)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Add", ["r", "b"], ["a"]),
        helper.make_node("Reshape", ["a", "shape"], ["f"]),
        helper.make_node("MatMul", ["f", "m"], ["y"]),
    ]
    init = [("w", w), ("b", RNG.standard_normal((4, 1, 1)).astype(np.float32))]
    init += [("shape", np.array([-1, 8], np.int64)), ("m", m)]
    program = model(nodes, [("x", [1, 3, 4, 4])], ["y"], init)
    lowered = offload.to_backend(program, "opencl", passes="none")
    (delegate,) = [op for op in lowered.main.body.operations if op.op_type == "Delegate"]
    weights = {n: v.const_value for n, v in delegate.attributes["fallback"].constants.items()}
    return json.loads(delegate.attributes["processed"]), weights


def _init(plan, weights):
    from offload.delegates.opencl.runtime import OpenCLRuntime

    blob = plan if isinstance(plan, bytes) else json.dumps(plan).encode()
    rt = OpenCLRuntime()
    h = rt.init(blob, [], weights)
    return rt, h


def test_the_unmodified_plan_runs():
    plan, weights = _lowered()
    rt, h = _init(plan, weights)
    (i,) = h.plan["inputs"]
    (y,) = rt.execute(h, [RNG.standard_normal(h.plan["shapes"][str(i)]).astype(np.float32)])
    assert y.shape == (8, 5)
    rt.destroy(h)


def _mutations():
    def set_(path, value):
        def apply(plan):
            node = plan
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = value

        return apply

    return {
        "not json": lambda p: b"\xff{",
        "a list": lambda p: b"[1, 2]",
        "unknown format": set_(["format"], "offload-gpu-plan/99"),
        "negative dim": set_(["shapes", "0"], [1, -3, 4, 4]),
        "huge tensor": set_(["shapes", "0"], [65536, 65536, 4]),
        "dim not an int": set_(["shapes", "0"], [1, 3, 4.5, 4]),
        "unknown dtype": set_(["dtypes", "0"], "complex128"),
        "input names no value": set_(["inputs"], [999]),
        "step reads no value": set_(["ops", 0, "inputs", 0], 12345),
        "step is not a table": set_(["ops", 0], "Conv"),
        "weights not a table": set_(["weights"], ["w"]),
        "kept table not a table": set_(["fp32"], ["0"]),
        "kept value unknown": set_(["fp32"], {"12345": "why"}),
        "kept value not float32": lambda p: (
            p["dtypes"].__setitem__("0", "int64"),
            p.__setitem__("fp32", {"0": "why"}),
        ),
        "conv output too big": lambda p: p["shapes"].__setitem__(
            str(p["ops"][0]["outputs"][0]), [1, 4, 9, 9]
        ),
        "conv weight too small": lambda p: p["shapes"].__setitem__(
            str(p["ops"][0]["inputs"][1]), [4, 1, 3, 3]
        ),
        "leaf does not broadcast": lambda p: p["shapes"].__setitem__(
            str(p["ops"][1]["inputs"][1]), [4, 3, 3]
        ),
        "matmul inner mismatch": lambda p: p["shapes"].__setitem__(str(p["ops"][-1]["inputs"][1]), [9, 5]),
    }


@pytest.mark.parametrize("name", list(_mutations()))
def test_damaged_plans_are_refused(name):
    plan, weights = _lowered()
    mutate = _mutations()[name]
    result = mutate(plan)
    blob = result if isinstance(result, bytes) else plan
    with pytest.raises(ModelFormatError):
        _init(blob, weights)


def _walk(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, (*path, k))
    elif isinstance(node, list):
        for k, v in enumerate(node):
            yield from _walk(v, (*path, k))
    yield path


def test_random_damage_never_crashes():
    """Replace one random entry of the plan with a random value, 300 times: every outcome is a
    refusal (OffloadError) or a handle that runs; nothing else may escape."""
    base, weights = _lowered()
    paths = [p for p in _walk(base) if p]
    rnd = random.Random(7)
    choices = [0, 1, -1, 2, 3, 7, 100, 2**31, None, "x", [], {}, [1, 1], 0.5]
    for _ in range(300):
        plan = json.loads(json.dumps(base))
        path = rnd.choice(paths)
        node = plan
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = rnd.choice(choices)
        try:
            rt, h = _init(plan, weights)
        except OffloadError:
            continue
        try:
            shapes = [h.plan["shapes"][str(i)] for i in h.plan["inputs"]]
            # symbols made 2; an input whose rank the damage made unknown fed as a scalar
            shapes = [[d if type(d) is int else 2 for d in s or ()] for s in shapes]
            rt.execute(h, [np.zeros(s, h.dtypes[i]) for s, i in zip(shapes, h.plan["inputs"])])
        except OffloadError:
            pass
        finally:
            rt.destroy(h)


def test_tensors_past_int32_indexing_stay_on_the_cpu(monkeypatch):
    """Kernels index elements with int32: a tensor of 2**31 elements is never claimed. (Only
    lowered, never allocated: the tensor budget is raised past its 8 GiB, which a machine with
    less than 32 GiB would refuse at type inference.)"""
    from offload.ir import types

    monkeypatch.setattr(types, "MAX_TENSOR_BYTES", 1 << 36)
    p = model([helper.make_node("Relu", ["x"], ["y"])], [("x", [65536, 32768])], ["y"])
    lowered = offload.to_backend(p, "opencl", passes="none")
    assert all(op.op_type != "Delegate" for op in lowered.main.body.operations)
    small = model([helper.make_node("Relu", ["x"], ["y"])], [("x", [65536, 32767])], ["y"])
    assert [op.op_type for op in offload.to_backend(small, "opencl", passes="none").main.body.operations] == [
        "Delegate"
    ]
