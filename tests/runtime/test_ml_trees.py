"""ai.onnx.ml TreeEnsembleRegressor and TreeEnsembleClassifier (runtime/kernels/ml_trees.py), saved
as a .pte and run by the CPU executor, against onnxruntime on random forests in the node-list
layout that sklearn-onnx writes."""

from __future__ import annotations

import numpy as np
import pytest

from offload.errors import UnsupportedOpError
from tests.runtime.ml_support import check, ml_model, ml_node, run_offload

RNG = np.random.default_rng(21)
FEATURES = 4
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def forest(
    trees: int, depth: int, modes=("BRANCH_LEQ",), single_leaf_tree: bool = False
) -> tuple[dict, list]:
    """Node-list attributes of ``trees`` random trees (node ids shuffled within each tree, so a
    tree's root is not always node 0) and the (tree id, node id) of every leaf."""
    attrs = {
        k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values")
    }
    attrs.update(nodes_truenodeids=[], nodes_falsenodeids=[], nodes_missing_value_tracks_true=[])
    leaves = []
    for t in range(trees):
        lone = single_leaf_tree and t == trees - 1
        size = 1 if lone else 2 ** (depth + 1) - 1  # a full tree, heap-numbered, then relabelled
        label = RNG.permutation(size) + 3
        for i in range(size):
            leaf = lone or 2 * i + 1 >= size
            attrs["nodes_treeids"].append(t * 2 + 1)
            attrs["nodes_nodeids"].append(int(label[i]))
            attrs["nodes_featureids"].append(0 if leaf else int(RNG.integers(FEATURES)))
            attrs["nodes_modes"].append("LEAF" if leaf else str(RNG.choice(modes)))
            # thresholds on a grid the integer-valued inputs hit, so that EQ / NEQ branch both ways
            attrs["nodes_values"].append(0.0 if leaf else float(RNG.integers(-2, 3)))
            attrs["nodes_truenodeids"].append(0 if leaf else int(label[2 * i + 1]))
            attrs["nodes_falsenodeids"].append(0 if leaf else int(label[2 * i + 2]))
            attrs["nodes_missing_value_tracks_true"].append(0 if leaf else int(RNG.integers(2)))
            if leaf:
                leaves.append((t * 2 + 1, int(label[i])))
    return attrs, leaves


def inputs(rows: int = 12, missing: bool = False) -> np.ndarray:
    x = RNG.integers(-3, 4, (rows, FEATURES)).astype(np.float32)
    x[::3] += RNG.random((len(x[::3]), FEATURES)).astype(np.float32) - 0.5
    if missing:
        x[RNG.random(x.shape) < 0.15] = np.nan
    return x


def weights(leaves, targets: int, per_leaf: int, prefix: str) -> dict:
    picks = [(t, n, int(k)) for t, n in leaves for k in RNG.choice(targets, per_leaf, replace=False)]
    return {
        f"{prefix}_treeids": [p[0] for p in picks],
        f"{prefix}_nodeids": [p[1] for p in picks],
        f"{prefix}_ids": [p[2] for p in picks],
        f"{prefix}_weights": RNG.standard_normal(len(picks)).astype(np.float32).tolist(),
    }


@pytest.mark.parametrize(
    "aggregate,targets,per_leaf,base,post_transform",
    [
        ("SUM", 1, 1, [0.5], "NONE"),
        ("AVERAGE", 1, 1, None, "NONE"),
        ("MIN", 3, 2, [0.1, 0.2, 0.3], "NONE"),
        ("MAX", 3, 1, None, "NONE"),
        ("SUM", 3, 2, [1.0, -1.0, 0.5], "SOFTMAX"),
        ("AVERAGE", 2, 1, None, "LOGISTIC"),
        ("SUM", 1, 1, None, "LOGISTIC"),
    ],
)
def test_tree_ensemble_regressor(aggregate, targets, per_leaf, base, post_transform):
    attrs, leaves = forest(trees=4, depth=3, modes=MODES, single_leaf_tree=True)
    attrs.update(weights(leaves, targets, per_leaf, "target"))
    attrs.update(n_targets=targets, aggregate_function=aggregate, post_transform=post_transform)
    if base is not None:
        attrs["base_values"] = base
    feeds = {"x": inputs(missing=True)}
    check([ml_node("TreeEnsembleRegressor", ["x"], ["y"], **attrs)], feeds, {"y": np.float32})


@pytest.mark.parametrize("post_transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
@pytest.mark.parametrize(
    "labels", [{"classlabels_int64s": [4, 5, 6, 7]}, {"classlabels_strings": ["a", "b", "c", "d"]}]
)
@pytest.mark.parametrize("with_base", [False, True])
def test_tree_ensemble_classifier_multiclass(post_transform, labels, with_base):
    """A random forest (every leaf scores every class) and, with one class per leaf, classes that
    no reached leaf scores: those are out of the running for the label unless a base value
    scores them."""
    attrs, leaves = forest(trees=5, depth=2, modes=MODES)
    attrs.update(weights(leaves, 4, 1 if with_base else 4, "class"))
    attrs["post_transform"] = post_transform
    if with_base:
        attrs["base_values"] = [0.25, -0.5, 0.0, 0.125]
    outs = {"label": object if "classlabels_strings" in labels else np.int64, "scores": np.float32}
    feeds = {"x": inputs(rows=20)}
    check([ml_node("TreeEnsembleClassifier", ["x"], ["label", "scores"], **labels, **attrs)], feeds, outs)


def test_tree_ensemble_classifier_with_one_class_per_leaf_and_no_base():
    attrs, leaves = forest(trees=2, depth=2)
    attrs.update(weights(leaves, 3, 1, "class"))
    feeds = {"x": inputs(rows=30)}
    outs = {"label": np.int64, "scores": np.float32}
    node = ml_node(
        "TreeEnsembleClassifier", ["x"], ["label", "scores"], classlabels_int64s=[0, 1, 2], **attrs
    )
    check([node], feeds, outs)


def _binary_weights(leaves, pattern: str) -> dict:
    """Class weights of a two-class forest as exporters write them: "both", each leaf's two
    class probabilities (a random forest); "c0" / "c1", one positive weight a leaf for class 0 /
    1; "g0" / "g1", one weight of either sign (a boosted model's raw score)."""
    if pattern == "both":
        p = RNG.random(len(leaves))
        picks = [(t, n, k, w) for (t, n), q in zip(leaves, p) for k, w in ((0, 1 - q), (1, q))]
    else:
        k = int(pattern[1])
        w = RNG.random(len(leaves)) if pattern[0] == "c" else RNG.standard_normal(len(leaves))
        picks = [(t, n, k, v) for (t, n), v in zip(leaves, w)]
    return {
        "class_treeids": [p[0] for p in picks],
        "class_nodeids": [p[1] for p in picks],
        "class_ids": [p[2] for p in picks],
        "class_weights": [float(np.float32(p[3])) for p in picks],
    }


@pytest.mark.parametrize("pattern", ["both", "c0", "c1", "g0", "g1"])
@pytest.mark.parametrize("base", [None, [0.1], [0.1, -0.2]])
@pytest.mark.parametrize("post_transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_tree_ensemble_classifier_binary(pattern, base, post_transform):
    """Two classes, as onnxruntime 1.32 scores them (ml_trees._binary): labels and scores."""
    attrs, leaves = forest(trees=3, depth=2, modes=MODES)
    attrs.update(_binary_weights(leaves, pattern), post_transform=post_transform)
    if base is not None:
        attrs["base_values"] = base
    labels = {"classlabels_strings": ["no", "yes"]} if pattern == "g1" else {"classlabels_int64s": [5, 9]}
    outs = {"label": object if pattern == "g1" else np.int64, "scores": np.float32}
    node = ml_node("TreeEnsembleClassifier", ["x"], ["label", "scores"], **labels, **attrs)
    check([node], {"x": inputs(rows=24)}, outs)


def test_tree_ensemble_regressor_refuses_a_dangling_child():
    attrs, leaves = forest(trees=1, depth=1)
    attrs.update(weights(leaves, 1, 1, "target"), n_targets=1)
    attrs["nodes_truenodeids"][attrs["nodes_modes"].index("BRANCH_LEQ")] = 99
    feeds = {"x": inputs()}
    data = ml_model([ml_node("TreeEnsembleRegressor", ["x"], ["y"], **attrs)], feeds, {"y": np.float32})
    with pytest.raises(UnsupportedOpError, match="naming node 99 of tree 1, which is not in the model"):
        run_offload(data, feeds)
