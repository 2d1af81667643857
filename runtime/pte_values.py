"""Reading a plan's values table: tensor declarations, constant data, attribute values.

Everything read from the file is checked before use (a file can be hostile even after the
flatbuffer verifier): errors are ModelFormatErrors that say which plan and value.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from offload.errors import ModelFormatError, UnsupportedOpError
from offload.ir import DataType, OptionalType, SequenceType, TensorType
from offload.ir.type_text import parse_type_text
from offload.schemas.generated.executorch_flatbuffer.KernelTypes import KernelTypes
from offload.schemas.generated.executorch_flatbuffer.TensorDataLocation import TensorDataLocation
from offload.schemas.generated.executorch_flatbuffer.TensorShapeDynamism import TensorShapeDynamism
from offload.schemas.pte import SCALAR_TYPE_NAMES

KIND_NAMES = {v: k for k, v in vars(KernelTypes).items() if not k.startswith("_")}


@dataclass(frozen=True)
class TensorDecl:
    """What a Tensor EValue declares: element type, shape (None: unknown rank; -1 dims unknown)."""

    dtype: DataType
    sizes: tuple[int, ...] | None
    static: bool

    @property
    def numpy(self) -> np.dtype:
        return self.dtype.numpy

    @property
    def nbytes(self) -> int:
        return math.prod(self.sizes) * self.numpy.itemsize

    def value_type(self) -> TensorType:
        shape = None if self.sizes is None else tuple(None if d < 0 else d for d in self.sizes)
        return TensorType(self.dtype, shape)


def tensor_decl(t, where: str) -> TensorDecl:
    name = SCALAR_TYPE_NAMES.get(t.scalarType)
    if name is None:
        raise ModelFormatError(f"{where}: unknown scalar type {t.scalarType}")
    sizes = None if t.sizes is None else tuple(int(d) for d in t.sizes)
    if sizes is not None and any(d < -1 for d in sizes):
        raise ModelFormatError(f"{where}: negative size in {list(sizes)}")
    static = t.shapeDynamism == TensorShapeDynamism.STATIC
    if static and (sizes is None or -1 in sizes):
        raise ModelFormatError(f"{where}: a STATIC tensor needs every size, got {sizes}")
    return TensorDecl(DataType[name], sizes, static)


def value_type(e):
    """The IR type an EValue slot declares (what input checks compare against), or None."""
    if e.valType == KernelTypes.Tensor:
        try:
            return tensor_decl(e.val, "").value_type()
        except ModelFormatError:
            return None
    if e.valType == KernelTypes.TensorList:
        return SequenceType(None)
    if e.valType == KernelTypes.OptionalTensorList:
        return OptionalType(None)
    return None


def tensor_name(e) -> str:
    info = e.val.extraTensorInfo if e.valType == KernelTypes.Tensor else None
    return (info.fullyQualifiedName or "") if info is not None else ""


def _check_dense(t, decl: TensorDecl, where: str) -> None:
    """Constants and planned tensors are read as dense C-order arrays; nothing else is supported."""
    if not decl.static:
        raise UnsupportedOpError(f"{where}: a constant or planned tensor must have a static shape")
    if t.storageOffset:
        raise UnsupportedOpError(f"{where}: storage_offset {t.storageOffset} is not supported")
    if t.dimOrder is not None and [int(d) for d in t.dimOrder] != list(range(len(decl.sizes))):
        raise UnsupportedOpError(
            f"{where}: dim_order {list(t.dimOrder)} is not contiguous; only C order runs here"
        )


# ---- constants --------------------------------------------------------------------------------


def constant_array(pte, t, where: str) -> np.ndarray:
    """A read-only array over the constant's bytes in the mapped file (strings are decoded)."""
    decl = tensor_decl(t, where)
    _check_dense(t, decl, where)
    info = t.extraTensorInfo
    if info is not None and info.location == TensorDataLocation.EXTERNAL:
        raise UnsupportedOpError(f"{where}: constant data outside the .pte file is not supported")
    try:
        data = pte.constant_bytes(int(t.dataBufferIdx))
    except ModelFormatError as e:
        raise ModelFormatError(f"{where}: {e}") from None
    if decl.dtype == DataType.STRING:
        return _strings(data, decl.sizes, where)
    count = math.prod(decl.sizes)
    if decl.nbytes > len(data):
        raise ModelFormatError(
            f"{where}: {decl.dtype.name}{list(decl.sizes)} needs {decl.nbytes} bytes; "
            f"only {len(data)} remain in the constant segment"
        )
    array = np.frombuffer(data, dtype=decl.numpy, count=count).reshape(decl.sizes)
    array.flags.writeable = False
    return array


def _strings(data: memoryview, sizes: tuple[int, ...], where: str) -> np.ndarray:
    """``uint32 count``, then per string ``uint32 length`` and its UTF-8 bytes."""
    if len(data) < 4:
        raise ModelFormatError(f"{where}: string constant is truncated")
    (count,) = struct.unpack_from("<I", data, 0)
    if count != math.prod(sizes):
        raise ModelFormatError(f"{where}: {count} strings for sizes {list(sizes)}")
    out, pos = [], 4
    for _ in range(count):
        if pos + 4 > len(data):
            raise ModelFormatError(f"{where}: string constant is truncated")
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if pos + n > len(data):
            raise ModelFormatError(f"{where}: a string of {n} bytes runs past the constant segment")
        try:
            out.append(bytes(data[pos : pos + n]).decode("utf-8"))
        except UnicodeDecodeError:
            raise ModelFormatError(f"{where}: a string constant is not valid UTF-8") from None
        pos += n
    array = np.empty(count, dtype=object)
    array[:] = out
    return array.reshape(sizes)


def planned_view(t, arenas: dict, buffer_sizes: list[int], alloc, where: str) -> np.ndarray:
    """The tensor's view into its arena (allocating the arena on first use)."""
    decl = tensor_decl(t, where)
    _check_dense(t, decl, where)
    if decl.numpy == np.dtype(object):
        raise ModelFormatError(f"{where}: {decl.dtype.name} tensors cannot live in an arena")
    memory_id = int(alloc.memoryId)
    if not 1 <= memory_id < len(buffer_sizes):
        raise ModelFormatError(f"{where}: memory_id {memory_id} names no non_const_buffer_sizes entry")
    offset = int(alloc.memoryOffsetHigh) << 32 | int(alloc.memoryOffsetLow)
    size = buffer_sizes[memory_id]
    if offset + decl.nbytes > size:
        raise ModelFormatError(
            f"{where}: [{offset}, {offset + decl.nbytes}) lies outside arena {memory_id} of {size} bytes"
        )
    arena = arenas.get(memory_id)
    if arena is None:
        try:
            arena = arenas[memory_id] = np.zeros(size, dtype=np.uint8)
        except (MemoryError, ValueError):
            raise ModelFormatError(f"{where}: cannot allocate arena {memory_id} of {size} bytes") from None
    return arena[offset : offset + decl.nbytes].view(decl.numpy).reshape(decl.sizes)


# ---- plain values -----------------------------------------------------------------------------


def scalar_value(e):
    """The Python value of a non-tensor EValue (None for Null and for list slots)."""
    decode = _SCALARS.get(e.valType)
    return decode(e.val) if decode else None


_SCALARS = {
    KernelTypes.Int: lambda v: int(v.intVal),
    KernelTypes.Bool: lambda v: bool(v.boolVal),
    KernelTypes.Double: lambda v: float(v.doubleVal),
    KernelTypes.String: lambda v: v.stringVal or "",
    KernelTypes.IntList: lambda v: [int(x) for x in (v.items if v.items is not None else [])],
    KernelTypes.DoubleList: lambda v: [float(x) for x in (v.items if v.items is not None else [])],
    KernelTypes.BoolList: lambda v: [bool(x) for x in (v.items if v.items is not None else [])],
}


# ---- attributes --------------------------------------------------------------------------------


class AttributeReader:
    """Decodes attribute EValues of one plan by the schema's attribute type."""

    def __init__(self, values: list, initial: list, where: str, subplan):
        self.values = values  # the plan's EValueT list
        self.initial = initial  # decoded constants / scalars by index
        self.where = where
        self.subplan = subplan  # (plan index, captured indices) -> sub-plan reference

    def read(self, spec, index: int):
        e = self.values[index]
        if e.valType == KernelTypes.Null:
            return None
        decode = _ATTRIBUTES.get(spec.type)
        if decode is None:
            raise UnsupportedOpError(
                f"{self.where}: attribute '{spec.name}' of type {spec.type} has no .pte form"
            )
        return decode(self, spec, e, index)

    def fail(self, spec, e, want: str) -> ModelFormatError:
        got = KIND_NAMES.get(e.valType, e.valType)
        return ModelFormatError(
            f"{self.where}: attribute '{spec.name}' ({spec.type}) is {got}, expected {want}"
        )

    def kind(self, spec, e, *kinds: int, want: str):
        if e.valType not in kinds:
            raise self.fail(spec, e, want)
        return scalar_value(e)

    def items(self, spec, e, want: str) -> list[int]:
        if e.valType != KernelTypes.TensorList:
            raise self.fail(spec, e, "TensorList")
        out = []
        for i in e.val.items if e.val.items is not None else []:
            i = int(i)
            if not 0 <= i < len(self.values):
                raise ModelFormatError(f"{self.where}: attribute '{spec.name}' names value {i}, out of range")
            out.append(i)
        return out

    def constant(self, spec, index: int):
        e = self.values[index]
        if e.valType != KernelTypes.Tensor or not e.val.dataBufferIdx:
            raise self.fail(spec, e, "a constant Tensor")
        return self.initial[index]


def _number(r: AttributeReader, spec, e, index):
    return r.kind(spec, e, KernelTypes.Int, KernelTypes.Double, want="Int or Double")


def _string(r: AttributeReader, spec, e, index):
    return r.kind(spec, e, KernelTypes.String, want="String")


def _ints(r: AttributeReader, spec, e, index):
    return r.kind(spec, e, KernelTypes.IntList, want="IntList")


def _floats(r: AttributeReader, spec, e, index):
    return r.kind(spec, e, KernelTypes.DoubleList, want="DoubleList")


def _strs(r: AttributeReader, spec, e, index):
    return [_string(r, spec, r.values[i], i) for i in r.items(spec, e, "TensorList")]


def _tensor(r: AttributeReader, spec, e, index):
    return r.constant(spec, index)


def _tensors(r: AttributeReader, spec, e, index):
    return [r.constant(spec, i) for i in r.items(spec, e, "TensorList")]


def _type(r: AttributeReader, spec, e, index):
    text = _string(r, spec, e, index)
    try:
        return parse_type_text(text)
    except ValueError as err:
        raise ModelFormatError(f"{r.where}: attribute '{spec.name}': {err}") from None


def _graph(r: AttributeReader, spec, e, index):
    items = r.kind(spec, e, KernelTypes.IntList, want="IntList [plan, captured values…]")
    if not items:
        raise ModelFormatError(f"{r.where}: graph attribute '{spec.name}' names no plan")
    for i in items[1:]:
        if not 0 <= i < len(r.values):
            raise ModelFormatError(
                f"{r.where}: graph attribute '{spec.name}' captures value {i}, out of range"
            )
    return r.subplan(items[0], items[1:], f"{r.where}: graph attribute '{spec.name}'")


_ATTRIBUTES = {
    "int": _number,
    "float": _number,
    "str": _string,
    "ints": _ints,
    "floats": _floats,
    "strs": _strs,
    "tensor": _tensor,
    "sparse_tensor": _tensor,
    "tensors": _tensors,
    "type": _type,
    "graph": _graph,
}
