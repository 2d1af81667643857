"""Sparse TFLite constants (a tensor's ``sparsity`` field) densified at import, and DENSIFY.

TFLite stores a sparse constant as its nonzero values plus a tree of index metadata
(``SparsityParameters``). For a tensor of rank n with a k-dimensional block (0 ≤ k ≤ n), the
stored tensor has n + k dimensions: original dimension j, when ``block_map`` names it for block
dimension n + i, is split into j (the block's position, size shape[j] / b_i) and n + i (the
position inside the block, size b_i). ``traversal_order`` lists those n + k dimensions in the
order the values are stored, and ``dim_metadata`` describes each in that order: DENSE with
``dense_size`` (every index present) or SPARSE_CSR with ``array_segments`` and ``array_indices``
(the indices present under each element of the level above: those of segment p are
``array_indices[segments[p] : segments[p + 1]]``).

Densifying walks the levels breadth first with whole arrays: each level turns the positions of
the level above into its own positions and adds its coordinate; the last level's positions index
the stored values. Everything read from the file is checked before it is used — traversal order a
permutation, block map naming distinct dimensions that the block divides, dense sizes equal to
the dimensions they describe, segments non-decreasing and inside the index array, indices inside
their dimension, as many values as leaves — so bad metadata is a ``ModelFormatError`` and never an
out-of-range read. A densified constant over ``MAX_DENSE_BYTES`` is refused the same way: the file
would make the importer allocate it.

DENSIFY's input is then already a dense constant: DENSIFY becomes an Identity of it.
"""

from __future__ import annotations

import numpy as np

from offload.errors import ModelFormatError

from .tflite_node import Node, rule

DENSE, SPARSE_CSR = 0, 1
MAX_DENSE_BYTES = 1 << 30


def densify(sparsity, values: np.ndarray, shape: tuple, fail) -> np.ndarray:
    """The dense array of ``shape`` that ``values`` (the stored nonzeros, flat) and ``sparsity``
    (a SparsityParameters table) describe; ``fail(what)`` makes the error to raise."""
    n = len(shape)
    order = [int(d) for d in sparsity.items("traversal_order")]
    block_map = [int(d) for d in sparsity.items("block_map")]
    levels = sparsity.items("dim_metadata")
    k = len(block_map)
    if sorted(order) != list(range(n + k)) or len(order) != n + k:
        raise fail(f"traversal order {order} is not a permutation of the {n + k} stored dimensions")
    if len(levels) != n + k:
        raise fail(f"{len(levels)} dimension metadata for {n + k} stored dimensions")
    if len(set(block_map)) != k or any(not 0 <= d < n for d in block_map):
        raise fail(f"block map {block_map} does not name distinct dimensions of rank {n}")
    dense_bytes = int(np.prod(shape, dtype=np.float64)) * values.dtype.itemsize
    if dense_bytes > MAX_DENSE_BYTES:
        raise fail(f"densified it would take {dense_bytes} bytes (at most {MAX_DENSE_BYTES})")

    block = {}  # original dimension → block size, read from the block dimension's DENSE level
    for i, d in enumerate(block_map):
        level = levels[order.index(n + i)]
        if level.get("format") != DENSE:
            raise fail(f"block dimension {n + i} is not DENSE")
        size = int(level.get("dense_size"))
        if size < 1 or shape[d] % size:
            raise fail(f"block size {size} does not divide dimension {d} of size {shape[d]}")
        block[d] = size
    sizes = [shape[j] // block.get(j, 1) for j in range(n)] + [block[d] for d in block_map]

    elements = int(np.prod(shape, dtype=np.int64))  # a tree of distinct coordinates has no more
    positions = np.zeros(1, np.int64)
    coords = np.zeros((n + k, 1), np.int64)
    for level_index, (dim, level) in enumerate(zip(order, levels)):
        where = f"dim_metadata[{level_index}]"
        kind = level.get("format")
        if kind == DENSE:
            size = int(level.get("dense_size"))
            if size != sizes[dim]:
                raise fail(f"{where}: dense size {size}, the dimension has {sizes[dim]}")
            if positions.size * size > elements:
                raise fail(f"{where}: more entries than the tensor has elements")
            child = np.arange(size, dtype=np.int64)
            coords = np.repeat(coords, size, axis=1)
            coords[dim] = np.tile(child, positions.size)
            positions = (positions[:, None] * size + child[None, :]).reshape(-1)
        elif kind == SPARSE_CSR:
            segments = _index_vector(level, "array_segments", where, fail)
            indices = _index_vector(level, "array_indices", where, fail)
            if positions.size and positions.max() + 1 >= segments.size:
                raise fail(f"{where}: {segments.size} segments for {positions.max() + 1} parents")
            starts, stops = segments[positions], segments[positions + 1]
            if (stops < starts).any() or (stops > indices.size).any() or (starts < 0).any():
                raise fail(f"{where}: segments decrease or run past the {indices.size} indices")
            counts = stops - starts
            total = int(counts.sum())
            if total > elements:
                raise fail(f"{where}: more entries than the tensor has elements")
            offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
            positions = np.arange(total, dtype=np.int64) + offsets
            coords = np.repeat(coords, counts, axis=1)
            chosen = indices[positions]
            if chosen.size and (chosen.min() < 0 or chosen.max() >= sizes[dim]):
                raise fail(f"{where}: an index outside dimension {dim} of size {sizes[dim]}")
            coords[dim] = chosen
        else:
            raise fail(f"{where}: dimension format {kind} is neither DENSE nor SPARSE_CSR")
    if positions.size != values.size or (positions.size and positions.max() >= values.size):
        raise fail(f"the metadata describes {positions.size} values, the buffer holds {values.size}")
    full = [coords[j] * block.get(j, 1) for j in range(n)]
    for i, d in enumerate(block_map):
        full[d] = full[d] + coords[n + i]
    dense = np.zeros(shape, values.dtype)
    dense[tuple(full)] = values[positions]
    return dense


def _index_vector(level, field: str, where: str, fail) -> np.ndarray:
    _, table = level.get(field)
    if table is None:
        raise fail(f"{where}: SPARSE_CSR without {field}")
    return np.asarray(table.items("values"), dtype=np.int64)


def sparse_constant(imp, t, data, ttype, path: str) -> np.ndarray:
    """The dense value of sparse tensor ``t`` whose buffer holds ``data`` (its nonzeros)."""

    def fail(what: str) -> ModelFormatError:
        return imp.fail(f"{path}.sparsity: {what}")

    dtype = ttype.dtype.numpy.newbyteorder("<")
    if len(data) % dtype.itemsize:
        raise fail(f"{len(data)} bytes of values is not a whole number of {ttype.dtype.name}")
    values = np.frombuffer(data, dtype, len(data) // dtype.itemsize)
    return densify(t.get("sparsity"), values, tuple(ttype.shape), fail)


@rule("DENSIFY", version=1)
def densify_op(node: Node) -> list:
    x = node.inputs[0]
    if x.const_value is None:
        raise node.unsupported("input 0 must be a constant tensor here (a sparse weight)")
    return node.op("Identity", [x])
