"""EValue builders for a plan's values table: slots for IR values, constants and their bytes, scalars."""

from __future__ import annotations

import math
import struct

import numpy as np

from offload.errors import UnsupportedOpError
from offload.ir import DataType, OptionalType, SequenceType, TensorType
from offload.schemas.generated.executorch_flatbuffer.AllocationDetails import AllocationDetailsT
from offload.schemas.generated.executorch_flatbuffer.Bool import BoolT
from offload.schemas.generated.executorch_flatbuffer.Double import DoubleT
from offload.schemas.generated.executorch_flatbuffer.DoubleList import DoubleListT
from offload.schemas.generated.executorch_flatbuffer.EValue import EValueT
from offload.schemas.generated.executorch_flatbuffer.ExtraTensorInfo import ExtraTensorInfoT
from offload.schemas.generated.executorch_flatbuffer.Int import IntT
from offload.schemas.generated.executorch_flatbuffer.IntList import IntListT
from offload.schemas.generated.executorch_flatbuffer.KernelTypes import KernelTypes
from offload.schemas.generated.executorch_flatbuffer.Null import NullT
from offload.schemas.generated.executorch_flatbuffer.OptionalTensorList import OptionalTensorListT
from offload.schemas.generated.executorch_flatbuffer.String import StringT
from offload.schemas.generated.executorch_flatbuffer.Tensor import TensorT
from offload.schemas.generated.executorch_flatbuffer.TensorList import TensorListT
from offload.schemas.generated.executorch_flatbuffer.TensorShapeDynamism import TensorShapeDynamism
from offload.schemas.pte import SCALAR_TYPE_NAMES, SCALAR_TYPES

INT32_MAX = (1 << 31) - 1
MAX_PTE_RANK = 255  # dim_order holds one uint8 per dimension


def _evalue(kind: int, table) -> EValueT:
    e = EValueT()
    e.valType, e.val = kind, table
    return e


def null() -> EValueT:
    return _evalue(KernelTypes.Null, NullT())


def boolean(b: bool) -> EValueT:
    t = BoolT()
    t.boolVal = bool(b)
    return _evalue(KernelTypes.Bool, t)


def integer(i: int) -> EValueT:
    t = IntT()
    t.intVal = int(i)
    return _evalue(KernelTypes.Int, t)


def double(x: float) -> EValueT:
    t = DoubleT()
    t.doubleVal = float(x)
    return _evalue(KernelTypes.Double, t)


def string(s: str) -> EValueT:
    t = StringT()
    t.stringVal = s
    return _evalue(KernelTypes.String, t)


def int_list(xs) -> EValueT:
    t = IntListT()
    t.items = [int(x) for x in xs]
    return _evalue(KernelTypes.IntList, t)


def double_list(xs) -> EValueT:
    t = DoubleListT()
    t.items = [float(x) for x in xs]
    return _evalue(KernelTypes.DoubleList, t)


def tensor_list(items: list[int]) -> EValueT:
    t = TensorListT()
    t.items = list(items)
    return _evalue(KernelTypes.TensorList, t)


def optional_list(items: list[int]) -> EValueT:
    t = OptionalTensorListT()
    t.items = list(items)
    return _evalue(KernelTypes.OptionalTensorList, t)


def number(x) -> EValueT:
    """An int or float attribute by what the value is (a float-typed attribute may hold an int)."""
    if isinstance(x, (bool, int, np.integer)):
        return integer(int(x))
    return double(float(x))


def number_key(x) -> tuple:
    """A dedup key that keeps Int(1) and Double(1.0) apart, and -0.0 apart from 0.0."""
    if isinstance(x, (bool, int, np.integer)):
        return ("i", int(x))
    return ("d", struct.pack("<d", float(x)))


# ---- tensors --------------------------------------------------------------------------------


def _dims(shape, what: str) -> list[int]:
    out = []
    for d in shape:
        if isinstance(d, (int, np.integer)):
            if d > INT32_MAX:
                raise UnsupportedOpError(f"{what}: dimension {d} does not fit a .pte tensor size (int32)")
            out.append(int(d))
        else:
            out.append(-1)  # symbolic or unknown: known only at run time
    return out


def _tensor(dtype: DataType, shape, name: str, what: str) -> TensorT:
    t = TensorT()
    t.scalarType = SCALAR_TYPES[dtype.name]
    if shape is None:
        t.shapeDynamism = TensorShapeDynamism.DYNAMIC_UNBOUND
    else:
        if len(shape) > MAX_PTE_RANK:
            raise UnsupportedOpError(
                f"{what}: rank {len(shape)} does not fit a .pte tensor (at most {MAX_PTE_RANK})"
            )
        t.sizes = _dims(shape, what)
        t.dimOrder = list(range(len(t.sizes)))
        static = all(d >= 0 for d in t.sizes)
        t.shapeDynamism = TensorShapeDynamism.STATIC if static else TensorShapeDynamism.DYNAMIC_UNBOUND
    if name:
        info = ExtraTensorInfoT()
        info.fullyQualifiedName = name
        t.extraTensorInfo = info
    return t


def value_slot(t, name: str) -> EValueT:
    """The EValue of a non-constant IR value of type ``t`` (None when its type is unknown)."""
    if isinstance(t, SequenceType):
        return tensor_list([])
    if isinstance(t, OptionalType):
        return optional_list([])
    if not isinstance(t, TensorType) or t.dtype.name not in SCALAR_TYPES:
        # Unknown type: a tensor of unknown rank; the runtime binds whatever the kernel returns.
        return _evalue(KernelTypes.Tensor, _tensor(DataType.FLOAT, None, name, name))
    return _evalue(KernelTypes.Tensor, _tensor(t.dtype, t.shape, name, f"value '{name}'"))


def constant(array: np.ndarray, data_buffer_idx: int, name: str) -> EValueT:
    t = _tensor(DataType.from_numpy(array.dtype), array.shape, name, f"constant '{name}'")
    t.dataBufferIdx = data_buffer_idx
    return _evalue(KernelTypes.Tensor, t)


def plannable_bytes(e: EValueT) -> int | None:
    """Bytes a tensor slot takes in the arena, or None when it cannot be planned there."""
    if e.valType != KernelTypes.Tensor:
        return None
    t: TensorT = e.val
    if t.shapeDynamism != TensorShapeDynamism.STATIC or t.dataBufferIdx or t.sizes is None:
        return None
    if t.scalarType == SCALAR_TYPES["STRING"]:
        return None  # Python strings have no fixed-size representation
    dtype = scalar_dtype(t.scalarType)
    return math.prod(t.sizes) * dtype.itemsize


def scalar_dtype(code: int) -> np.dtype:
    """The numpy dtype of a Tensor.scalar_type code."""
    return DataType[SCALAR_TYPE_NAMES[code]].numpy


def set_allocation(e: EValueT, memory_id: int, offset: int) -> None:
    a = AllocationDetailsT()
    a.memoryId = memory_id
    a.memoryOffsetLow = offset & 0xFFFFFFFF
    a.memoryOffsetHigh = offset >> 32
    e.val.allocationInfo = a


# ---- constant data ---------------------------------------------------------------------------


def constant_bytes(array: np.ndarray) -> bytes:
    """A constant's data: raw little-endian C-order bytes; strings as count + (length, UTF-8)."""
    if DataType.from_numpy(array.dtype) == DataType.STRING:
        items = [_utf8(x) for x in np.asarray(array, dtype=object).reshape(-1)]
        parts = [struct.pack("<I", len(items))]
        for b in items:
            parts += [struct.pack("<I", len(b)), b]
        return b"".join(parts)
    a = np.ascontiguousarray(array)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return a.tobytes()


def _utf8(x) -> bytes:
    if isinstance(x, bytes):
        return x
    return str(x).encode("utf-8")
