"""cleanup::const_deduplication."""

import numpy as np

from .helpers import F32, check, model, node, op_types, rand

P = ["cleanup::const_deduplication"]


def _two_matmuls(w2):
    return model(
        [node("MatMul", ["q", "wq"], ["a"]), node("MatMul", ["k", "wk"], ["b"])],
        {"q": (F32, [2, 8]), "k": (F32, [2, 8])},
        {"a": (F32, [2, 8]), "b": (F32, [2, 8])},
        {"wq": rand(8, 8), "wk": w2},
    )


def test_equal_weights_become_one():
    out = check(_two_matmuls(rand(8, 8)), P, {"q": rand(2, 8, seed=1), "k": rand(2, 8, seed=2)})
    assert list(out.main.body.constants) == ["wq"]
    a, b = out.main.body.operations
    assert a.inputs[1] is b.inputs[1]
    assert op_types(out) == {"MatMul": 2}


def test_different_values_or_dtypes_stay_apart():
    w = rand(8, 8)
    w[0, 0] += 1e-6
    out = check(_two_matmuls(w), P, {"q": rand(2, 8, seed=1), "k": rand(2, 8, seed=2)})
    assert sorted(out.main.body.constants) == ["wk", "wq"]
    data = model(
        [node("Cast", ["a"], ["ad"], to=11), node("Add", ["ad", "b"], ["y"])],
        {},
        {"y": (11, [3])},
        {"a": np.ones(3, np.float32), "b": np.ones(3, np.float64)},
    )
    out = check(data, P, {})
    assert sorted(out.main.body.constants) == ["a", "b"]
