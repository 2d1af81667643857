"""Element types and tensor types of IR values."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from .budget import TENSOR as TENSOR_BUDGET

# The largest tensor (bytes) type inference accepts for a static shape and the CPU kernels make
# from shape values (runtime/kernels/_util.check_result): the machine's tensor budget
# (ir/budget.py; environment OFFLOAD_MAX_TENSOR_BYTES).
MAX_TENSOR_BYTES = TENSOR_BUDGET.value


class DataType(enum.IntEnum):
    """Tensor element types, numbered as ONNX's TensorProto.DataType."""

    UNDEFINED = 0
    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    STRING = 8
    BOOL = 9
    FLOAT16 = 10
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13
    COMPLEX64 = 14
    COMPLEX128 = 15
    BFLOAT16 = 16
    FLOAT8E4M3FN = 17
    FLOAT8E4M3FNUZ = 18
    FLOAT8E5M2 = 19
    FLOAT8E5M2FNUZ = 20
    UINT4 = 21
    INT4 = 22
    FLOAT4E2M1 = 23
    FLOAT8E8M0 = 24
    UINT2 = 25
    INT2 = 26
    FLOAT6E2M3 = 27
    FLOAT6E3M2 = 28

    @property
    def short(self) -> str:
        return _SHORT.get(self, self.name.lower())

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that holds this element type (ml_dtypes for the narrow floats)."""
        try:
            return _TO_NUMPY[self]
        except KeyError:
            from offload.errors import DTypeError

            raise DTypeError(f"element type {self.name} has no numpy representation here") from None

    @staticmethod
    def from_numpy(dtype) -> DataType:
        dtype = np.dtype(dtype)
        if dtype.kind in "US" or dtype == object:
            return DataType.STRING
        try:
            return _FROM_NUMPY[dtype]
        except KeyError:
            from offload.errors import DTypeError

            raise DTypeError(f"numpy dtype {dtype} has no ONNX element type") from None


_TO_NUMPY = {
    DataType.FLOAT: np.dtype(np.float32),
    DataType.UINT8: np.dtype(np.uint8),
    DataType.INT8: np.dtype(np.int8),
    DataType.UINT16: np.dtype(np.uint16),
    DataType.INT16: np.dtype(np.int16),
    DataType.INT32: np.dtype(np.int32),
    DataType.INT64: np.dtype(np.int64),
    DataType.STRING: np.dtype(object),
    DataType.BOOL: np.dtype(np.bool_),
    DataType.FLOAT16: np.dtype(np.float16),
    DataType.DOUBLE: np.dtype(np.float64),
    DataType.UINT32: np.dtype(np.uint32),
    DataType.UINT64: np.dtype(np.uint64),
    DataType.COMPLEX64: np.dtype(np.complex64),
    DataType.COMPLEX128: np.dtype(np.complex128),
    DataType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    DataType.FLOAT8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    DataType.FLOAT8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    DataType.FLOAT8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    DataType.FLOAT8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    DataType.UINT4: np.dtype(ml_dtypes.uint4),
    DataType.INT4: np.dtype(ml_dtypes.int4),
    DataType.FLOAT4E2M1: np.dtype(ml_dtypes.float4_e2m1fn),
    DataType.FLOAT8E8M0: np.dtype(ml_dtypes.float8_e8m0fnu),
    DataType.UINT2: np.dtype(ml_dtypes.uint2),
    DataType.INT2: np.dtype(ml_dtypes.int2),
    DataType.FLOAT6E2M3: np.dtype(ml_dtypes.float6_e2m3fn),
    DataType.FLOAT6E3M2: np.dtype(ml_dtypes.float6_e3m2fn),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items() if k != DataType.STRING}
_SHORT = {
    DataType.FLOAT: "fp32",
    DataType.FLOAT16: "fp16",
    DataType.DOUBLE: "fp64",
    DataType.BFLOAT16: "bf16",
    DataType.INT8: "i8",
    DataType.INT16: "i16",
    DataType.INT32: "i32",
    DataType.INT64: "i64",
    DataType.UINT8: "u8",
    DataType.UINT16: "u16",
    DataType.UINT32: "u32",
    DataType.UINT64: "u64",
    DataType.BOOL: "bool",
    DataType.STRING: "str",
}

# A dimension is a known size, a symbolic name, or unknown (None).
Dim = int | str | None


@dataclass(frozen=True)
class QuantParams:
    """Affine quantization of a tensor: real = (q - zero_point) * scale, per tensor or per axis."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None


@dataclass(frozen=True)
class ValueRange:
    """Bounds on a float tensor's elements: proven from the ops and the input bounds
    (``observed`` False: ``ir/ranges.py``) or seen on calibration samples (True). Infinite bounds
    mean unknown. Read by the GPU backends' mixed precision (what fits half)."""

    lo: float
    hi: float
    observed: bool = False

    @property
    def magnitude(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    def __str__(self) -> str:
        return f"[{self.lo:.4g}, {self.hi:.4g}]{' seen' if self.observed else ''}"


@dataclass(frozen=True)
class TensorType:
    """A tensor's element type and shape; ``shape`` is None when even the rank is unknown.
    ``range`` (not part of equality: inference never makes it) bounds a float tensor's values."""

    dtype: DataType
    shape: tuple[Dim, ...] | None = None
    quant: QuantParams | None = None
    range: ValueRange | None = field(default=None, compare=False)

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def __str__(self) -> str:
        if self.shape is None:
            return f"(*,{self.dtype.short})"
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        return f"({dims}{',' if dims else ''}{self.dtype.short})"


@dataclass(frozen=True)
class SequenceType:
    """An ONNX sequence of values of one type."""

    elem: ValueType

    def __str__(self) -> str:
        return f"seq[{self.elem}]"


@dataclass(frozen=True)
class OptionalType:
    """An ONNX optional: a value of ``elem`` or nothing."""

    elem: ValueType

    def __str__(self) -> str:
        return f"optional[{self.elem}]"


ValueType = TensorType | SequenceType | OptionalType
