"""The ai.onnx.ml opset-3 tree ensembles, TreeEnsembleRegressor and TreeEnsembleClassifier, on
TreeEnsemble's tree walk (runtime/kernels/ml.py).

The (tree id, node id) node lists are renumbered into TreeEnsemble's layout: interior nodes in
one array, each child either an interior node or a leaf; a tree that is a single leaf gets one
interior node whose two children are that leaf. Each leaf's (target or class, weight) pairs add
into a [leaves, targets] table that the reached leaves are summed (or min/maxed) from.

Where the spec leaves the scores open, these kernels do what onnxruntime's CPU kernels do
(measured in tests/runtime/test_ml_trees.py): base_values count only when there is one per
target (or one for a single target); a single-target regressor applies only PROBIT; a classifier
with more than two classes takes the first best class among those that any leaf or base value
scores; one with two classes follows onnxruntime's special cases (see _binary).
"""

from __future__ import annotations

import numpy as np

from . import kernel
from ._util import unsupported
from .ml import ML, _membership_sets, _tree_leaves
from .ml_linear import _transform

# nodes_modes strings to TreeEnsemble's mode numbers; LEAF marks a leaf.
_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5}
_LEAF = -1


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _floats(attrs: dict, name: str):
    tensor = attrs.get(f"{name}_as_tensor")
    values = tensor if tensor is not None else attrs.get(name)
    return None if values is None else np.asarray(values, np.float64).reshape(-1)


class _Forest:
    """The node lists of one model renumbered into TreeEnsemble's arrays (see the module doc)."""

    def __init__(self, op: str, attrs: dict):
        trees = np.asarray(attrs["nodes_treeids"] or [], np.int64)
        ids = np.asarray(attrs["nodes_nodeids"] or [], np.int64)
        if not len(trees) or len(ids) != len(trees) or ids.min() < 0:
            raise unsupported(op, f"{len(trees)} tree ids for {len(ids)} node ids")
        names = [_text(m) for m in attrs["nodes_modes"] or []]
        unknown = sorted(set(names) - set(_MODES) - {"LEAF"})
        if unknown:
            raise unsupported(op, f"node mode '{unknown[0]}'")
        modes = np.asarray([_MODES.get(m, _LEAF) for m in names], np.int64)
        values = _floats(attrs, "nodes_values")
        features = np.asarray(attrs["nodes_featureids"] or [], np.int64)
        true_ids = np.asarray(attrs["nodes_truenodeids"] or [], np.int64)
        false_ids = np.asarray(attrs["nodes_falsenodeids"] or [], np.int64)
        if any(f is None or len(f) != len(trees) for f in (modes, values, features, true_ids, false_ids)):
            raise unsupported(op, "node attributes of different lengths")
        tracks = attrs["nodes_missing_value_tracks_true"]
        tracks = np.zeros(len(trees), bool) if not tracks else np.asarray(tracks, bool)
        self.op, self.trees, self.ids = op, trees, ids
        self.span = int(max(ids.max(), true_ids.max(), false_ids.max())) + 1
        keys = trees * self.span + ids
        self.order = np.argsort(keys, kind="stable")
        self.sorted_keys = keys[self.order]
        is_leaf = modes == _LEAF
        inner, leaves = np.flatnonzero(~is_leaf), np.flatnonzero(is_leaf)
        self.leaf_number = np.full(len(trees), -1)
        self.leaf_number[leaves] = np.arange(len(leaves))
        inner_number = np.full(len(trees), -1)
        inner_number[inner] = np.arange(len(inner))
        # a root is the first node of its tree that no node of the tree points to
        child_keys = np.concatenate(
            [trees[inner] * self.span + true_ids[inner], trees[inner] * self.span + false_ids[inner]]
        )
        candidates = np.flatnonzero(~np.isin(keys, child_keys))
        tree_ids, first = np.unique(trees[candidates], return_index=True)
        if len(tree_ids) != len(np.unique(trees)):
            raise unsupported(op, "a tree without a root")
        roots = candidates[first]
        lone = roots[is_leaf[roots]]  # single-leaf trees: one interior node leading to the leaf
        extra = {int(r): len(inner) + k for k, r in enumerate(lone)}
        self.roots = np.array([extra[int(r)] if is_leaf[r] else inner_number[r] for r in roots], np.int64)
        self.n_leaves = len(leaves)

        def children(child_ids):
            at = self.find(trees[inner], child_ids[inner], "a child")
            leaf = is_leaf[at]
            return np.where(leaf, self.leaf_number[at], inner_number[at]), leaf

        t_ids, t_leaf = children(true_ids)
        f_ids, f_leaf = children(false_ids)
        lone_leaf = self.leaf_number[lone]
        self.walk = {
            "nodes_featureids": np.concatenate([features[inner], np.zeros(len(lone), np.int64)]),
            "nodes_truenodeids": np.concatenate([t_ids, lone_leaf]),
            "nodes_trueleafs": np.concatenate([t_leaf, np.ones(len(lone), bool)]),
            "nodes_falsenodeids": np.concatenate([f_ids, lone_leaf]),
            "nodes_falseleafs": np.concatenate([f_leaf, np.ones(len(lone), bool)]),
        }
        self.modes = np.concatenate([modes[inner], np.zeros(len(lone), np.int64)])
        self.splits = np.concatenate([values[inner], np.zeros(len(lone))])
        self.tracks = np.concatenate([tracks[inner], np.zeros(len(lone), bool)])

    def find(self, trees, ids, what: str) -> np.ndarray:
        """The positions of the nodes (tree id, node id) in the node lists."""
        trees, ids = np.asarray(trees, np.int64), np.asarray(ids, np.int64)
        keys = trees * self.span + ids
        at = np.searchsorted(self.sorted_keys, keys).clip(0, max(len(self.sorted_keys) - 1, 0))
        missing = (ids < 0) | (ids >= self.span) | (self.sorted_keys[at] != keys)
        if missing.any():
            k = int(np.argmax(missing))
            raise unsupported(
                self.op, f"{what} naming node {ids[k]} of tree {trees[k]}, which is not in the model"
            )
        return self.order[at]

    def leaf_table(self, tree_ids, node_ids, targets, weights, width: int):
        """[leaves, width] summed weights and [leaves, width] which targets a leaf scores."""
        targets = np.asarray(targets, np.int64)
        weights = np.asarray(weights, np.float64)
        if not (len(tree_ids) == len(node_ids) == len(targets) == len(weights)):
            raise unsupported(self.op, "weight attributes of different lengths")
        leaf = self.leaf_number[self.find(tree_ids, node_ids, "a weight")]
        bad = (leaf < 0) | (targets < 0) | (targets >= width)
        if bad.any():
            k = int(np.argmax(bad))
            raise unsupported(
                self.op,
                f"a weight of target {targets[k]} on node {node_ids[k]} (not a leaf, or no such target)",
            )
        table, hit = np.zeros((self.n_leaves, width)), np.zeros((self.n_leaves, width), bool)
        np.add.at(table, (leaf, targets), weights)
        hit[leaf, targets] = True
        return table, hit

    def leaves(self, X: np.ndarray) -> np.ndarray:
        """The leaf each row reaches in each tree: [N, trees]."""
        if X.ndim != 2:
            raise unsupported(self.op, f"an input of rank {X.ndim} (must be [N, F])")
        sets = _membership_sets(self.modes, None)
        return _tree_leaves(
            X.astype(np.float64), self.roots, self.walk, self.modes, self.splits, sets, self.tracks
        )


def _aggregate(leaves, table, hit, kind: str, op: str) -> tuple[np.ndarray, np.ndarray]:
    """Scores [N, width] and which of them any reached leaf scores."""
    reached = hit[leaves].any(axis=1)
    if kind in ("SUM", "AVERAGE"):
        scores = table[leaves].sum(axis=1)
        return (scores / leaves.shape[1] if kind == "AVERAGE" else scores), reached
    if kind not in ("MIN", "MAX"):
        raise unsupported(op, f"aggregate_function '{kind}'")
    pick = np.min if kind == "MIN" else np.max
    fill = np.inf if kind == "MIN" else -np.inf
    scores = pick(np.where(hit[leaves], table[leaves], fill), axis=1)
    return np.where(reached, scores, 0.0), reached


@kernel("TreeEnsembleRegressor", domain=ML)
def tree_ensemble_regressor(ctx, X, **attrs):
    op = "TreeEnsembleRegressor"
    forest = _Forest(op, attrs)
    width = attrs["n_targets"] or 1
    table, hit = forest.leaf_table(
        attrs["target_treeids"] or [],
        attrs["target_nodeids"] or [],
        attrs["target_ids"] or [],
        _floats(attrs, "target_weights") if _floats(attrs, "target_weights") is not None else [],
        width,
    )
    scores, _ = _aggregate(forest.leaves(X), table, hit, _text(attrs["aggregate_function"]), op)
    base = _floats(attrs, "base_values")
    if base is not None and (len(base) == width or (width == 1 and len(base) == 1)):
        scores = scores + base
    return _transform(op, scores.astype(np.float32), _text(attrs["post_transform"]))


def _binary(scores, scored, base, one_class: bool, all_positive: bool, labels, post_transform: str):
    """A two-class model's labels and [N, 2] scores, as onnxruntime 1.32 writes them.

    Its cases: with two base values, a row where class 1 scores gets s1 = b1 + s0 and s0 = -s1,
    other rows add b0 and b1; with one, s0 += b0. The label comes from p, s1 where class 1
    scores, else s0 (0 when neither does): where every weight is for one class (``one_class``)
    it is labels[1] when p > 0.5 (all weights >= 0) or p > 0 (some negative), else labels[0];
    where both classes have weights it is 1 or 0 by p > 0 (the index for string labels).
    Scores of a class no reached leaf scores are written as 0. A row where class 1 scores, or
    with two base values, writes both transformed; another row writes its one score v as
    [-v, v] (weights of one class, some negative; or of both classes and no base values) or
    [1 - v, v], or [1 - t, t] with t the LOGISTIC or PROBIT of v (onnxruntime leaves PROBIT's
    second column unwritten, and the second of a model with both classes' weights and one base
    value)."""
    op = "TreeEnsembleClassifier"
    s0, s1 = scores[:, 0], scores[:, 1]
    h0, h1 = scored[:, 0], scored[:, 1]
    both = h1.copy()
    if len(base) == 2:
        s1, s0 = np.where(h1, base[1] + s0, s1 + base[1]), np.where(h1, -(base[1] + s0), s0 + base[0])
        both[:] = True
    elif len(base) == 1:
        s0 = s0 + base[0]
    p = np.where(h1, s1, np.where(h0, s0, 0.0))
    threshold = 0.5 if one_class and all_positive else 0.0
    if one_class:
        label = labels[np.where(p > threshold, 1, 0)]
    elif labels.dtype == object:
        label = labels[np.where(p > 0, 1, 0)]
    else:
        label = np.where(p > 0, 1, 0).astype(np.int64)
    v0, v1 = np.where(h0, s0, 0.0), np.where(h1, s1, 0.0)
    pair = _transform(op, np.stack([v0, v1], axis=1).astype(np.float32), post_transform)
    v = v0.astype(np.float32)
    if post_transform in ("LOGISTIC", "PROBIT"):
        t = 1 / (1 + np.exp(-v.astype(np.float64))) if post_transform == "LOGISTIC" else v
        t = _transform(op, t.reshape(-1, 1).astype(np.float32), post_transform)[:, 0]
        single = np.stack([1 - t, t], axis=1)
    elif (one_class and not all_positive) or (not one_class and not len(base)):
        single = np.stack([-v, v], axis=1)
    else:
        single = np.stack([1 - v, v], axis=1)
    return label, np.where(both[:, None], pair, single).astype(np.float32)


@kernel("TreeEnsembleClassifier", domain=ML)
def tree_ensemble_classifier(ctx, X, **attrs):
    op = "TreeEnsembleClassifier"
    strings = attrs["classlabels_strings"]
    labels = np.asarray([_text(s) for s in strings], object) if strings else None
    if labels is None:
        labels = np.asarray(attrs["classlabels_int64s"] or [], np.int64)
    if len(labels) < 2:
        raise unsupported(op, f"a classifier of {len(labels)} class labels")
    forest = _Forest(op, attrs)
    weights = _floats(attrs, "class_weights")
    weights = weights if weights is not None else np.zeros(0)
    class_ids = attrs["class_ids"] or []
    table, hit = forest.leaf_table(
        attrs["class_treeids"] or [], attrs["class_nodeids"] or [], class_ids, weights, len(labels)
    )
    scores, scored = _aggregate(forest.leaves(X), table, hit, "SUM", op)
    base = _floats(attrs, "base_values")
    base = base if base is not None else np.zeros(0)
    post_transform = _text(attrs["post_transform"])
    if len(labels) == 2:
        if len(base) > 2:
            raise unsupported(op, f"{len(base)} base_values for 2 classes")
        one_class, all_positive = len(set(class_ids)) == 1, bool((weights >= 0).all())
        return _binary(scores, scored, base, one_class, all_positive, labels, post_transform)
    if len(base) > len(labels):
        raise unsupported(op, f"{len(base)} base_values for {len(labels)} classes")
    scores[:, : len(base)] += base
    scored[:, : len(base)] = True
    best = np.argmax(np.where(scored, scores, -np.inf), axis=1)
    return labels[best], _transform(op, scores.astype(np.float32), post_transform)
