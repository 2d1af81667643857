"""onnxruntime's weight-only quantized ops as a float constant and an ordinary ONNX op.

- **MatMulNBits**: A @ W (+ bias) with W [K, N] packed as B [N, k_blocks, blob_size] of
  ``bits``-bit codes (2, 4 or 8; low bits first in each byte), blocks of ``block_size`` along K,
  one scale per block and a zero point per block (packed uint8 codes, or floats of A's type;
  2^(bits-1) where omitted). g_idx [K], where given, names each k's block (refused beside packed
  zero points: onnxruntime's CPU kernel then ignores them). The import dequantizes W once,
  (code - zero_point) * scale in float32 as onnxruntime's float path does, into a constant of
  A's type, so a GPU backend takes the MatMul as any other. onnxruntime's accuracy_level 4 lets
  its CPU kernel quantize A to int8 per block instead; offload keeps A in float at every level.
- **GatherBlockQuantized**: Gather of a table quantized in blocks along ``quantize_axis``
  (int4 / uint4 codes, or uint8 holding 2, 4 or 8-bit codes packed along the last axis); the
  import dequantizes the table into a constant of the scales' type, with one row of zeros more,
  and gathers from it: an index out of range reads that row, zeros as onnxruntime gives (where
  ONNX Gather refuses it).

onnxruntime's quantizers write B, scales and zero points as initializers. Where a model feeds
them at run time instead, MatMulNBits dequantizes them with ONNX ops in each run (BitShift,
BitwiseAnd, Cast, Gather, Sub, Mul: the same arithmetic); g_idx and GatherBlockQuantized's
inputs other than its indices must be initializers. The dequantized weight must fit the tensor
budget (ir/budget.py).
"""

from __future__ import annotations

import numpy as np

from offload.errors import ModelFormatError
from offload.ir import DataType, Value, budget

from .onnx_contrib import _Node, contrib

_FLOATS = {DataType.FLOAT: np.float32, DataType.FLOAT16: np.float16}


def unpack_codes(packed: np.ndarray, bits: int) -> np.ndarray:
    """The ``bits``-bit codes packed low bits first into each uint8 of ``packed``'s last axis."""
    per_byte = 8 // bits
    shifts = (np.arange(per_byte) * bits).astype(np.uint8)
    codes = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return codes.reshape(*packed.shape[:-1], packed.shape[-1] * per_byte)


def _invalid(n: _Node, what: str) -> ModelFormatError:
    return ModelFormatError(f"{n.where}: {n.domain}::{n.op_type} {what}")


def _constant(n: _Node, v: Value | None, name: str) -> np.ndarray | None:
    if v is None:
        return None
    if v.const_value is None:
        raise n.refuse(f"with {name} '{v.name}' computed at run time (an initializer is needed)")
    return v.const_value


def _block_size(n: _Node, default: int | None) -> int:
    size = int(n.attrs["block_size"] if default is None else n.attr("block_size", default))
    if size < 16 or size & (size - 1):
        raise _invalid(n, f"has block_size {size}: a power of two and at least 16 is expected")
    return size


def _bits(n: _Node) -> int:
    bits = int(n.attr("bits", 4))
    if bits not in (2, 4, 8):
        raise n.refuse(f"with bits {bits} (only 2, 4 and 8)")
    return bits


def _within_budget(n: _Node, shape: tuple, dtype) -> None:
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    limit = budget.TENSOR.value
    if nbytes > limit:
        raise n.refuse(
            f"whose dequantized weight {shape} would take {nbytes} bytes, over the {limit}-byte limit "
            f"({budget.TENSOR.explain(limit)})"
        )


def _per_block(n: _Node, a: np.ndarray, name: str, rows: int, blocks: int) -> np.ndarray:
    """``a`` as [rows, blocks] where it holds rows * blocks values ([N * k_blocks] or [N, k_blocks])."""
    if a.size != rows * blocks or a.ndim not in (1, 2) or (a.ndim == 2 and a.shape != (rows, blocks)):
        raise _invalid(
            n, f"has {name} of shape {list(a.shape)}: [{rows}, {blocks}] or [{rows * blocks}] expected"
        )
    return a.reshape(rows, blocks)


def _zero_points(n: _Node, zero: np.ndarray | None, bits: int, rows: int, blocks: int) -> np.ndarray:
    """Each block's zero point as float32 [rows, blocks]."""
    if zero is None:
        return np.full((rows, blocks), 1 << (bits - 1), np.float32)
    if zero.dtype != np.uint8:
        return _per_block(n, zero, "zero_points", rows, blocks).astype(np.float32)
    packed = -(-blocks * bits // 8)
    codes = unpack_codes(_per_block(n, zero, "zero_points (packed)", rows, packed), bits)
    return codes[:, :blocks].astype(np.float32)


def _group(n: _Node, g_idx: Value | None, zero: Value | None, k: int, size: int, blocks: int) -> np.ndarray:
    """Each k's block: k // block_size, or g_idx's entry."""
    if g_idx is None:
        return np.arange(k) // size
    if zero is not None and n.dtype(zero) == DataType.UINT8:
        # onnxruntime's CPU kernel then dequantizes with the default zero point, not these
        raise n.refuse(f"with g_idx '{g_idx.name}' and packed uint8 zero_points '{zero.name}' together")
    group = _constant(n, g_idx, "g_idx").astype(np.int64)
    if group.shape != (k,) or group.min(initial=0) < 0 or group.max(initial=0) >= blocks:
        raise _invalid(n, f"has g_idx '{g_idx.name}' not of shape [{k}] with values in [0, {blocks})")
    return group


def _dequantized_now(n: _Node, b, scales, zero, group, bits: int, size: int, k: int, cols: int) -> np.ndarray:
    """W [K, N] in float32 from the initializers."""
    blocks = -(-k // size)
    packed = _constant(n, b, "B")
    scale = _per_block(n, _constant(n, scales, "scales"), "scales", cols, blocks).astype(np.float32)
    zero_point = _zero_points(n, _constant(n, zero, "zero_points"), bits, cols, blocks)
    codes = unpack_codes(packed, bits).reshape(cols, blocks * size)[:, :k].astype(np.float32)
    return np.ascontiguousarray(((codes - zero_point[:, group]) * scale[:, group]).T)


def _unpacked_at_run_time(n: _Node, packed: Value, bits: int, rows: int, width: int) -> Value:
    """uint8 [rows, width * 8 / bits]: the codes packed in ``packed``'s rows of ``width`` bytes."""
    per_byte = 8 // bits
    x = n.one("Reshape", [packed, n.const([rows, width, 1])])
    if bits < 8:
        shifts = n.const(np.arange(per_byte) * bits, np.uint8)
        x = n.one("BitShift", [x, shifts], {"direction": "RIGHT"})
        x = n.one("BitwiseAnd", [x, n.const((1 << bits) - 1, np.uint8)])
    return n.one("Reshape", [x, n.const([rows, width * per_byte])])


def _dequantized_at_run_time(
    n: _Node, b, scales, zero, group, bits: int, size: int, k: int, cols: int
) -> Value:
    """W [K, N] in float32 computed by ONNX ops from B, scales and zero points given at run time:
    the same (code - zero point) * scale as at import."""
    blocks = -(-k // size)
    f32 = {"to": int(DataType.FLOAT)}
    take = n.const(group)

    def per_k(v: Value) -> Value:  # [N, k_blocks] → [N, K], in float32
        v = n.one("Reshape", [v, n.const([cols, blocks])])
        return n.one("Gather", [n.one("Cast", [v], f32), take], {"axis": 1})

    codes = _unpacked_at_run_time(n, b, bits, cols, blocks * size * bits // 8)
    if k < blocks * size:
        codes = n.one("Slice", [codes, n.const([0]), n.const([k]), n.const([1])])
    if zero is None:
        zero_point = n.const(1 << (bits - 1), np.float32)
    elif n.dtype(zero) == DataType.UINT8:
        width = -(-blocks * bits // 8)
        zero_codes = _unpacked_at_run_time(n, zero, bits, cols, width)
        zero_point = n.one("Gather", [n.one("Cast", [zero_codes], f32), take], {"axis": 1})
    else:
        zero_point = per_k(zero)
    centered = n.one("Sub", [n.one("Cast", [codes], f32), zero_point])
    return n.one("Transpose", [n.one("Mul", [centered, per_k(scales)])], {"perm": [1, 0]})


@contrib("MatMulNBits")
def _matmul_nbits(n: _Node):
    a, b, scales, zero, g_idx, bias = (n.input(i) for i in range(6))
    k, cols = int(n.attrs["K"]), int(n.attrs["N"])
    bits, size = _bits(n), _block_size(n, None)
    dtype = n.dtype(a)
    if dtype not in _FLOATS:
        raise n.refuse(f"with A '{a.name}' of {dtype.name.lower()} (only float and float16)")
    last = n.type(a).shape[-1] if n.type(a).shape else None
    if isinstance(last, int) and last != k:
        raise _invalid(n, f"has A '{a.name}' of last dimension {last} where K is {k}")
    blocks = -(-k // size)
    want = (cols, blocks, size * bits // 8)
    b_type = n.type(b)
    if b_type.dtype != DataType.UINT8 or (b_type.shape is not None and tuple(b_type.shape) != want):
        shape = "?" if b_type.shape is None else list(b_type.shape)
        raise _invalid(
            n,
            f"has B '{b.name}' of {b_type.dtype.name.lower()} {shape}: uint8 {list(want)} expected "
            f"(N, ceil(K / block_size), block_size * bits / 8)",
        )
    _within_budget(n, (k, cols), np.float32)
    group = _group(n, g_idx, zero, k, size, blocks)
    args = (n, b, scales, zero, group, bits, size, k, cols)
    if all(v is None or v.const_value is not None for v in (b, scales, zero)):
        weight = n.const(_dequantized_now(*args), _FLOATS[dtype])
    else:
        weight = _dequantized_at_run_time(*args)
        if dtype != DataType.FLOAT:
            weight = n.one("Cast", [weight], {"to": int(dtype)})
    y = n.one("MatMul", [a, weight])
    return [y if bias is None else n.one("Add", [y, bias])]


_TABLE_TYPES = frozenset({DataType.INT4, DataType.UINT4, DataType.UINT8})


def _table_codes(n: _Node, data: np.ndarray, dtype: DataType, bits: int, gather: int, quant: int) -> tuple:
    """The table's codes as int32 (unpacked along the last axis for uint8 with bits < 8), and its
    default zero point."""
    if dtype in (DataType.INT4, DataType.UINT4):
        if bits != 4:
            raise n.refuse(f"with data of {dtype.name.lower()} and bits {bits}")
        return data.astype(np.int32), 0
    if bits < 8 and (gather != 0 or quant == gather):
        raise _invalid(
            n, f"packs {bits}-bit codes in uint8 but gathers along axis {gather} and quantizes along {quant}"
        )
    codes = data if bits == 8 else unpack_codes(data, bits)
    return codes.astype(np.int32), 1 << (bits - 1)


@contrib("GatherBlockQuantized")
def _gather_block_quantized(n: _Node):
    data_v, indices, scales_v, zero_v = (n.input(i) for i in range(4))
    dtype = n.dtype(data_v)
    if dtype not in _TABLE_TYPES:
        raise n.refuse(f"with data '{data_v.name}' of {dtype.name.lower()} (only int4, uint4 and uint8)")
    bits, size = _bits(n), _block_size(n, 128)
    data = _constant(n, data_v, "data")
    rank = data.ndim
    gather, quant = int(n.attr("gather_axis", 0)), int(n.attr("quantize_axis", 1))
    if not (-rank <= gather < rank and -rank <= quant < rank):
        raise _invalid(n, f"has gather_axis {gather} or quantize_axis {quant} outside [-{rank}, {rank - 1}]")
    gather, quant = gather % rank, quant % rank
    codes, default_zero = _table_codes(n, data, dtype, bits, gather, quant)
    scales = _constant(n, scales_v, "scales")
    want = list(codes.shape)
    want[quant] = -(-want[quant] // size)
    if list(scales.shape) != want:
        raise _invalid(n, f"has scales '{scales_v.name}' of shape {list(scales.shape)}: {want} expected")
    out_type = n.dtype(scales_v)
    if out_type not in _FLOATS:
        raise n.refuse(f"with scales '{scales_v.name}' of {out_type.name.lower()} (only float and float16)")
    _within_budget(n, codes.shape, np.float32)
    zero = _constant(n, zero_v, "zero_points")
    if zero is None:
        zero = np.full(want, default_zero, np.int32)
    else:
        zero, _ = _table_codes(n, zero, dtype, bits, gather, quant)
        zero = zero[..., : want[-1]]
        if list(zero.shape) != want:
            raise _invalid(
                n,
                f"has zero_points '{zero_v.name}' of shape {list(zero_v.const_value.shape)} for scales {want}",
            )
    block_of = np.arange(codes.shape[quant]) // size
    table = (codes - zero.take(block_of, axis=quant)).astype(np.float32)
    table *= scales.take(block_of, axis=quant).astype(np.float32)
    rows = table.shape[gather]
    zeros = np.zeros_like(table.take([0], axis=gather))
    table = np.concatenate([table, zeros], axis=gather)
    return [
        n.one("Gather", [n.const(table, _FLOATS[out_type]), _in_range(n, indices, rows)], {"axis": gather})
    ]


def _in_range(n: _Node, indices: Value, rows: int) -> Value:
    """``indices`` in [0, rows): a negative one counted from the end, one out of range ``rows``
    (the zero row the table gains), as onnxruntime reads them."""
    count = n.like(rows, indices)
    shifted = n.one(
        "Where", [n.one("Less", [indices, n.like(0, indices)]), n.one("Add", [indices, count]), indices]
    )
    inside = n.one(
        "And", [n.one("GreaterOrEqual", [shifted, n.like(0, indices)]), n.one("Less", [shifted, count])]
    )
    return n.one("Where", [inside, shifted, count])
