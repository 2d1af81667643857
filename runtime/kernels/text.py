"""String kernels: StringNormalizer, StringConcat, StringSplit, RegexFullMatch and TfIdfVectorizer.

String tensors are numpy object arrays of Python ``str``.
"""

from __future__ import annotations

import re

import numpy as np

from . import kernel
from ._util import unsupported


def _strings(x) -> np.ndarray:
    """A string tensor as an object array of ``str`` (bytes decoded as UTF-8)."""
    x = np.asarray(x, dtype=object)
    flat = [s.decode("utf-8") if isinstance(s, bytes) else s for s in x.reshape(-1)]
    return np.array(flat, dtype=object).reshape(x.shape)


# Locales whose case mapping is Python's default Unicode mapping.
_DEFAULT_CASE_LOCALES = re.compile(r"^(|C|POSIX|en([_-].*)?)$")


@kernel("StringNormalizer")
def string_normalizer(ctx, X, *, case_change_action, is_case_sensitive, locale, stopwords):
    op = "StringNormalizer"
    if (X.ndim == 2 and X.shape[0] != 1) or X.ndim not in (1, 2):
        raise unsupported(op, f"an input of shape {X.shape} (must be [C] or [1, C])")
    if case_change_action not in ("NONE", "LOWER", "UPPER"):
        raise unsupported(op, f"case_change_action '{case_change_action}'")
    uses_case = case_change_action != "NONE" or (stopwords and not is_case_sensitive)
    if uses_case and not _DEFAULT_CASE_LOCALES.match(locale or ""):
        raise unsupported(op, f"locale '{locale}'")
    words = list(_strings(X).reshape(-1))
    if stopwords:
        if is_case_sensitive:
            stop = set(stopwords)
            words = [w for w in words if w not in stop]
        else:
            stop = {s.lower() for s in stopwords}
            words = [w for w in words if w.lower() not in stop]
    if case_change_action == "LOWER":
        words = [w.lower() for w in words]
    elif case_change_action == "UPPER":
        words = [w.upper() for w in words]
    if not words:  # everything dropped: a single empty string keeps the rank
        words = [""]
    return np.array(words, dtype=object).reshape((1, -1) if X.ndim == 2 else (-1,))


@kernel("StringConcat")
def string_concat(ctx, X, Y):
    # numpy's add on object arrays concatenates the str elements, with broadcasting.
    return np.asarray(np.add(_strings(X), _strings(Y)), dtype=object)


@kernel("StringSplit")
def string_split(ctx, X, *, delimiter, maxsplit):
    sep = delimiter or None  # unset or "": split on runs of whitespace
    limit = -1 if maxsplit is None else maxsplit
    parts = [s.split(sep, limit) for s in _strings(X).reshape(-1)]
    width = max((len(p) for p in parts), default=0)
    Y = np.array([p + [""] * (width - len(p)) for p in parts], dtype=object)
    Z = np.array([len(p) for p in parts], dtype=np.int64)
    return Y.reshape(X.shape + (width,)), Z.reshape(X.shape)


@kernel("RegexFullMatch")
def regex_full_match(ctx, X, *, pattern):
    try:
        regex = re.compile(pattern or "")
    except re.error as e:
        raise unsupported("RegexFullMatch", f"pattern '{pattern}' ({e})") from None
    flat = [regex.fullmatch(s) is not None for s in _strings(X).reshape(-1)]
    return np.array(flat, dtype=np.bool_).reshape(X.shape)


def _pool_ngrams(pool: list, ngram_counts: list[int]) -> dict[int, tuple[list, np.ndarray]]:
    """Per n-gram length n: the pool's n-grams (lists of n items) and their positions in ngram_indexes."""
    out = {}
    first = 0
    starts = list(ngram_counts) + [len(pool)]
    for n in range(1, len(ngram_counts) + 1):
        items = pool[starts[n - 1] : starts[n]]
        k = len(items) // n
        out[n] = ([items[i * n : (i + 1) * n] for i in range(k)], np.arange(first, first + k))
        first += k
    return out


def _token_ids(X: np.ndarray, vocab: dict) -> np.ndarray:
    """Each token's id in the pool's vocabulary (ids count up from 0), -1 for tokens not in it."""
    if X.dtype == object:
        return np.array([vocab.get(t, -1) for t in X.reshape(-1)], dtype=np.int64).reshape(X.shape)
    keys = np.array(list(vocab), dtype=np.int64)
    order = np.argsort(keys)
    pos = np.searchsorted(keys[order], X).clip(0, len(keys) - 1)
    return np.where(keys[order][pos] == X, order[pos], -1)


def _grams(ids: np.ndarray, n: int, skip: int) -> np.ndarray:
    """All n-grams of each row with ``skip`` items between neighbours: [rows, positions, n]."""
    span = (n - 1) * (skip + 1) + 1
    starts = np.arange(max(ids.shape[1] - span + 1, 0))
    return ids[:, starts[:, None] + np.arange(n) * (skip + 1)]


def _match(grams: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """For each gram [M, n], its row in pool [K, n], or -1 when the pool doesn't hold it."""
    both = np.concatenate([pool, grams])
    _, codes = np.unique(both, axis=0, return_inverse=True)
    codes = codes.reshape(-1)
    row_of_code = np.full(codes.max() + 1 if codes.size else 0, -1)
    row_of_code[codes[: len(pool)]] = np.arange(len(pool))
    return row_of_code[codes[len(pool) :]]


@kernel("TfIdfVectorizer")
def tfidf_vectorizer(
    ctx,
    X,
    *,
    max_gram_length,
    max_skip_count,
    min_gram_length,
    mode,
    ngram_counts,
    ngram_indexes,
    pool_int64s,
    pool_strings,
    weights,
):
    op = "TfIdfVectorizer"
    if mode not in ("TF", "IDF", "TFIDF"):
        raise unsupported(op, f"mode '{mode}'")
    if (pool_int64s is None) == (pool_strings is None):
        raise unsupported(op, "a model without exactly one of pool_int64s and pool_strings")
    if X.ndim not in (1, 2):
        raise unsupported(op, f"an input of rank {X.ndim}")
    pool = list(pool_int64s) if pool_int64s is not None else list(pool_strings)
    tokens = _strings(X) if pool_strings is not None else X.astype(np.int64)
    vocab = {t: i for i, t in enumerate(dict.fromkeys(pool))}
    ids = _token_ids(tokens, vocab).reshape(X.shape if X.ndim == 2 else (1, X.shape[0]))
    indexes = np.asarray(ngram_indexes, dtype=np.int64)
    counts = np.zeros((ids.shape[0], int(indexes.max()) + 1 if indexes.size else 0), np.float32)
    for n, (grams, positions) in _pool_ngrams(pool, ngram_counts).items():
        if not (min_gram_length <= n <= max_gram_length) or not grams:
            continue
        pool_ids = np.array([[vocab[t] for t in g] for g in grams], dtype=np.int64)
        # A 1-gram has no neighbours to skip: count it once, not once per skip.
        for skip in range(max_skip_count + 1 if n > 1 else 1):
            found = _grams(ids, n, skip)
            rows = np.repeat(np.arange(ids.shape[0]), found.shape[1])
            hit = _match(found.reshape(-1, n), pool_ids)
            keep = hit >= 0
            np.add.at(counts, (rows[keep], indexes[positions[hit[keep]]]), 1)
    if mode != "TF":
        scale = np.ones(counts.shape[1], np.float32)
        if weights is not None:
            scale[indexes] = np.asarray(weights, np.float32)[: len(indexes)]
        counts = (np.minimum(counts, 1) if mode == "IDF" else counts) * scale
    return counts.reshape(counts.shape[1:] if X.ndim == 1 else counts.shape)
