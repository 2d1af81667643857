"""The fused classifier chain LinearClassifier → [Normalizer] → ZipMap (runtime/ml_chains.py):
taken where it applies, against onnxruntime on the same models and bit for bit against
offload.evaluate (the kernels one by one); the chains it leaves alone still run."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import offload
from offload.runtime.ml_chains import _ClassifierChain
from offload.runtime.steps import _FusedAway, _KernelStep
from tests.runtime.ml_support import assert_same, ml_model, ml_node, run_onnxruntime

RNG = np.random.default_rng(5)


def _nodes(post: str, norm: str | None, zip_labels: dict, extra_scores: bool = False) -> list:
    scores = "raw" if norm else "probabilities"
    nodes = [
        ml_node(
            "LinearClassifier",
            ["x"],
            ["label", scores],
            classlabels_ints=[0, 1, 2],
            coefficients=RNG.standard_normal(12).astype(np.float32).tolist(),
            intercepts=[0.25, 0.58, -0.94],
            post_transform=post,
        ),
        ml_node("ZipMap", ["probabilities"], ["maps"], **zip_labels),
    ]
    if norm:
        nodes.insert(1, ml_node("Normalizer", ["raw"], ["probabilities"], norm=norm))
    return nodes


def _check(data: bytes, feeds: dict) -> list:
    """offload's .pte against onnxruntime and, bit for bit, against offload.evaluate; the
    method's steps."""
    program = offload.load(data)
    module = offload.runtime.load(offload.save(program))
    got, ref, want = module.run(feeds), offload.evaluate(program, feeds), run_onnxruntime(data, feeds)
    assert set(got) == set(want)
    for k in want:
        assert_same(got[k], want[k], what=k)
        if isinstance(ref[k], list):
            assert got[k] == ref[k], k  # the same Python floats (the same float32 values)
        else:
            np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
    return module.method("forward")._fast_steps


@pytest.mark.parametrize("post", ["LOGISTIC", "SOFTMAX", "NONE"])
@pytest.mark.parametrize("norm", ["L1", "L2", "MAX", None])
@pytest.mark.parametrize(
    "zip_labels,key",
    [({"classlabels_int64s": [0, 1, 2]}, "int64"), ({"classlabels_strings": ["a", "b", "c"]}, "str")],
)
def test_chain_is_one_step(post, norm, zip_labels, key):
    """skl2onnx's classifier ending (the iris logistic regression's): one fused step, the
    Normalizer's and ZipMap's steps left empty."""
    feeds = {"x": RNG.standard_normal((5, 4)).astype(np.float32)}
    data = ml_model(_nodes(post, norm, zip_labels), feeds, {"label": np.int64, "maps": ("map", key)})
    steps = _check(data, feeds)
    assert type(steps[0]) is _ClassifierChain
    assert (steps[0].normalizer is None) == (norm is None)
    assert all(type(s) is _FusedAway for s in steps[1:])


def test_scores_read_elsewhere_are_not_fused():
    """The normalizer's input is also a result of the method: the three ops keep their steps."""
    feeds = {"x": RNG.standard_normal((3, 4)).astype(np.float32)}
    nodes = _nodes("LOGISTIC", "L1", {"classlabels_int64s": [0, 1, 2]})
    outputs = {"label": np.int64, "raw": np.float32, "maps": ("map", "int64")}
    steps = _check(ml_model(nodes, feeds, outputs), feeds)
    assert not any(type(s) is _ClassifierChain for s in steps)
    assert any(type(s) is _KernelStep and s.op_name == "ai.onnx.ml::ZipMap" for s in steps)


def test_chain_of_any_batch_runs_its_kernels():
    """A batch dimension left open: no prepared calls to fuse; the kernels give onnxruntime's maps."""
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    data = ml_model(
        _nodes("LOGISTIC", "L1", {"classlabels_int64s": [0, 1, 2]}),
        {"x": x},
        {"label": np.int64, "maps": ("map", "int64")},
    )

    model = onnx.load_from_string(data)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    data = model.SerializeToString()
    for rows in (2, 7):
        feeds = {"x": RNG.standard_normal((rows, 4)).astype(np.float32)}
        _check(data, feeds)
