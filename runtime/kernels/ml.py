"""Classic ML kernels (domain ai.onnx.ml): ArrayFeatureExtractor, Binarizer, LabelEncoder, TreeEnsemble."""

from __future__ import annotations

import numpy as np

from . import kernel
from ._util import unsupported

ML = "ai.onnx.ml"


@kernel("ArrayFeatureExtractor", domain=ML)
def array_feature_extractor(ctx, X, Y):
    indices = Y.reshape(-1).astype(np.int64)
    if indices.size and not (indices.min() >= 0 and indices.max() < X.shape[-1]):
        raise unsupported("ArrayFeatureExtractor", f"indices outside [0, {X.shape[-1]})")
    picked = X[..., indices]
    return picked.reshape(1, -1) if X.ndim == 1 else picked


@kernel("Binarizer", domain=ML)
def binarizer(ctx, X, *, threshold):
    return (threshold < X).astype(X.dtype)


def _label_encoder_table(op: str, attrs: dict):
    """The (keys, values, default) the attributes define; exactly one keys_* and values_* is set."""
    key_names = ("keys_tensor", "keys_strings", "keys_int64s", "keys_floats")
    keys = [attrs[k] for k in key_names if attrs[k] is not None]
    values = [
        (name, attrs[name])
        for name in ("values_tensor", "values_strings", "values_int64s", "values_floats")
        if attrs[name] is not None
    ]
    if len(keys) != 1 or len(values) != 1:
        raise unsupported(op, "a model without exactly one keys_* and one values_* attribute")
    kind, vals = values[0]
    out_type = {"values_strings": object, "values_int64s": np.int64, "values_floats": np.float32}.get(kind)
    vals = np.asarray(vals) if out_type is None else np.array(vals, dtype=out_type)
    if attrs["default_tensor"] is not None:
        default = attrs["default_tensor"].reshape(-1)[0]
    elif vals.dtype == object:
        default = attrs["default_string"]
    elif vals.dtype.kind in "iu":
        default = attrs["default_int64"]
    else:
        default = attrs["default_float"]
    keys = np.asarray(keys[0])
    if len(keys) != len(vals):
        raise unsupported(op, f"{len(keys)} keys for {len(vals)} values")
    return keys, vals, default


@kernel("LabelEncoder", domain=ML)
def label_encoder(ctx, X, **attrs):
    keys, vals, default = _label_encoder_table("LabelEncoder", attrs)
    out = np.full(X.shape, default, dtype=vals.dtype)
    if X.dtype == object or keys.dtype == object:
        table = dict(zip(keys.tolist(), vals.tolist()))  # a later repeated key wins
        flat = [table.get(x, default) for x in X.reshape(-1)]
        out.reshape(-1)[:] = flat
        return out
    x = X.astype(keys.dtype, copy=False)
    # Keep the last of repeated keys: unique over the reversed keys finds last occurrences.
    uniq, first_in_reversed = np.unique(keys[::-1], return_index=True)
    last = len(keys) - 1 - first_in_reversed
    nan_key = np.isnan(uniq) if uniq.dtype.kind == "f" else np.zeros(len(uniq), bool)
    if nan_key.any():  # a NaN key matches every NaN input, whatever its bits
        out[np.isnan(x)] = vals[last[nan_key][-1]]
        uniq, last = uniq[~nan_key], last[~nan_key]
    if len(uniq):
        pos = np.searchsorted(uniq, x).clip(0, len(uniq) - 1)
        hit = uniq[pos] == x
        out[hit] = vals[last[pos[hit]]]
    return out


# TreeEnsemble's node comparison modes (nodes_modes values).
_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)
_AVERAGE, _SUM, _MIN, _MAX = range(4)


def _membership_sets(modes: np.ndarray, values) -> np.ndarray:
    """Per node, its BRANCH_MEMBER set as a NaN-padded row (all NaN for other nodes)."""
    member_nodes = np.flatnonzero(modes == _MEMBER)
    flat = np.asarray(values if values is not None else [], dtype=np.float64).reshape(-1)
    cuts = np.flatnonzero(np.isnan(flat))
    groups = np.split(flat, cuts + 1) if flat.size else []
    groups = [g[~np.isnan(g)] for g in groups][: len(member_nodes)]
    if len(groups) < len(member_nodes):
        raise unsupported("TreeEnsemble", f"{len(groups)} membership sets for {len(member_nodes)} nodes")
    width = max((len(g) for g in groups), default=0)
    sets = np.full((len(modes), max(width, 1)), np.nan)
    for node, g in zip(member_nodes, groups):
        sets[node, : len(g)] = g
    return sets


def _branch_true(mode, x, split, member_rows, tracks_true) -> np.ndarray:
    """Each visited node's test outcome; a NaN feature also goes true where its node tracks missing
    values to true (as onnxruntime and onnx's reference: NaN != split still holds elsewhere)."""
    cond = np.select(
        [mode == _LEQ, mode == _LT, mode == _GTE, mode == _GT, mode == _EQ, mode == _NEQ],
        [x <= split, x < split, x >= split, x > split, x == split, x != split],
        default=(member_rows == x[:, None]).any(axis=1),
    )
    return cond | (np.isnan(x) & tracks_true)


def _tree_leaves(X, roots, attrs, modes, splits, sets, tracks_true) -> np.ndarray:
    """The leaf each sample reaches in each tree: [samples, trees], all trees walked together."""
    features = np.asarray(attrs["nodes_featureids"], np.int64)
    true_ids = np.asarray(attrs["nodes_truenodeids"], np.int64)
    false_ids = np.asarray(attrs["nodes_falsenodeids"], np.int64)
    true_leaf = np.asarray(attrs["nodes_trueleafs"], bool)
    false_leaf = np.asarray(attrs["nodes_falseleafs"], bool)
    n, t = X.shape[0], len(roots)
    node = np.broadcast_to(roots, (n, t)).copy()
    at_leaf = np.zeros((n, t), bool)
    sample = np.broadcast_to(np.arange(n)[:, None], (n, t))
    for _ in range(len(modes) + 1):  # a path visits each interior node at most once
        walking = ~at_leaf
        if not walking.any():
            return node
        nd, s = node[walking], sample[walking]
        go_true = _branch_true(modes[nd], X[s, features[nd]], splits[nd], sets[nd], tracks_true[nd])
        node[walking] = np.where(go_true, true_ids[nd], false_ids[nd])
        at_leaf[walking] = np.where(go_true, true_leaf[nd], false_leaf[nd])
    raise unsupported("TreeEnsemble", "trees with cycles")


def _probit(p: np.ndarray) -> np.ndarray:
    """The standard normal quantile, by Acklam's rational approximation (relative error < 1.2e-9)."""
    a = (
        -3.969683028665376e01,
        2.209460984245205e02,
        -2.759285104469687e02,
        1.383577518672690e02,
        -3.066479806614716e01,
        2.506628277459239e00,
    )
    b = (
        -5.447609879822406e01,
        1.615858368580409e02,
        -1.556989798598866e02,
        6.680131188771972e01,
        -1.328068155288572e01,
    )
    c = (
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e00,
        -2.549732539343734e00,
        4.374664141464968e00,
        2.938163982698783e00,
    )
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    p = np.asarray(p, np.float64)
    tail = np.minimum(p, 1 - p)
    with np.errstate(all="ignore"):
        q = np.sqrt(-2 * np.log(tail))
        tail_value = np.polyval(c, q) / (np.polyval(d + (1.0,), q))
        r = (p - 0.5) ** 2
        central = (p - 0.5) * np.polyval(a, r) / np.polyval(b + (1.0,), r)
    tail_value = np.where(p < 0.5, tail_value, -tail_value)
    value = np.where(tail < 0.02425, tail_value, central)
    return np.where(tail == 0, np.copysign(np.inf, p - 0.5), value)


def _softmax(scores: np.ndarray, ignore_zeros: bool) -> np.ndarray:
    mask = scores != 0 if ignore_zeros else np.ones(scores.shape, bool)
    shifted = np.where(mask, scores, -np.inf)
    peak = np.max(shifted, axis=1, keepdims=True)
    e = np.where(mask, np.exp(shifted - np.where(np.isfinite(peak), peak, 0)), 0.0)
    total = e.sum(axis=1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def _post_transform(scores: np.ndarray, kind: int) -> np.ndarray:
    if kind == 0:
        return scores
    if kind in (1, 3):
        return _softmax(scores, ignore_zeros=kind == 3)
    if kind == 2:
        return 1 / (1 + np.exp(-scores))
    if kind == 4:
        return _probit(scores)
    raise unsupported("TreeEnsemble", f"post_transform {kind}")


@kernel("TreeEnsemble", domain=ML)
def tree_ensemble(ctx, X, **attrs):
    op = "TreeEnsemble"
    if X.ndim != 2:
        raise unsupported(op, f"an input of rank {X.ndim} (must be [N, F])")
    aggregate = attrs["aggregate_function"]
    if aggregate not in (_AVERAGE, _SUM, _MIN, _MAX):
        raise unsupported(op, f"aggregate_function {aggregate}")
    modes = np.asarray(attrs["nodes_modes"]).reshape(-1).astype(np.int64)
    if modes.size and modes.max() > _MEMBER:
        raise unsupported(op, f"node mode {modes.max()}")
    splits = np.asarray(attrs["nodes_splits"], np.float64).reshape(-1)
    tracks = attrs["nodes_missing_value_tracks_true"]
    tracks_true = np.asarray(tracks if tracks is not None else np.zeros(len(modes)), bool)
    sets = _membership_sets(modes, attrs["membership_values"])
    roots = np.asarray(attrs["tree_roots"], np.int64)
    leaves = _tree_leaves(X.astype(np.float64), roots, attrs, modes, splits, sets, tracks_true)
    targets = np.asarray(attrs["leaf_targetids"], np.int64)[leaves]
    weights = np.asarray(attrs["leaf_weights"], np.float64).reshape(-1)[leaves]
    n_targets = attrs["n_targets"] if attrs["n_targets"] is not None else int(targets.max(initial=-1)) + 1
    rows = np.broadcast_to(np.arange(X.shape[0])[:, None], leaves.shape)
    scores = np.zeros((X.shape[0], n_targets))
    if aggregate in (_SUM, _AVERAGE):
        np.add.at(scores, (rows, targets), weights)
        if aggregate == _AVERAGE:
            scores /= max(len(roots), 1)
    else:
        ufunc, start = (np.minimum, np.inf) if aggregate == _MIN else (np.maximum, -np.inf)
        scores[:] = start
        ufunc.at(scores, (rows, targets), weights)
        reached = np.zeros(scores.shape, bool)
        reached[rows, targets] = True
        scores[~reached] = 0
    return _post_transform(scores, attrs["post_transform"]).astype(X.dtype)
