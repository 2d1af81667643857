"""A bounded reader of TFLite flatbuffers: every offset, vector and buffer is checked before use.

The flatbuffers Python runtime (and the code flatc generates from it) trusts its input: a bad
offset reads garbage, raises IndexError or struct.error, or sizes an allocation by a hostile
count. This reader reads tables in place and checks each step against the buffer before taking
it, so a truncated or hostile file ends in ``ModelFormatError`` naming the file and the path
to what is wrong (``subgraphs[0].tensors[12].shape``).

The table layouts (field slots, types, defaults) come from ``schemas/tflite.fbs`` itself, read by
a small parser of the part of the flatbuffers schema language that file uses; the enums
(operator codes, tensor types) come from the code flatc generated from it.

Rules, from the flatbuffers binary format: a uoffset is a nonzero uint32 pointing forward into
the buffer; a table starts 4-aligned with an int32 soffset to its vtable; a vtable is 2-aligned,
holds its own size (≥ 4, even) and the table's inline size (≥ 4) followed by one uint16 per
field slot; a present field lies inside the table's inline bytes; a vector is a 4-aligned uint32
length followed by its elements; a string is a vector of bytes followed by a NUL. Reading is lazy
and follows only the fixed shape of a model (model → subgraph → tensor/operator → options), so
no file can make it loop or recurse.
"""

from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass
from importlib import resources

import numpy as np

from offload.errors import ModelFormatError

FILE_IDENTIFIER = b"TFL3"
SCHEMA = "tflite.fbs"  # package data of offload.schemas

SCALARS = {
    "bool": "?",
    "byte": "b",
    "ubyte": "B",
    "short": "h",
    "ushort": "H",
    "int": "i",
    "uint": "I",
    "long": "q",
    "ulong": "Q",
    "float": "f",
    "double": "d",
    "int8": "b",
    "uint8": "B",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "uint64": "Q",
    "float32": "f",
    "float64": "d",
}


# ---------------------------------------------------------------------------------------------
# The schema: tables (fields with their vtable offset), enums and unions, parsed from tflite.fbs.


@dataclass(frozen=True)
class FieldDef:
    name: str
    type: str  # a scalar, an enum, "string", a table, a union, or "[elem]"
    voffset: int  # the field's vtable entry; a union's value entry is voffset + 2
    default: object


@dataclass(frozen=True)
class Schema:
    tables: dict  # table name -> {field name: FieldDef}
    enums: dict  # enum name -> underlying scalar type
    unions: dict  # union name -> member table names, in order (type 1 is the first)

    def scalar_format(self, type_name: str) -> str | None:
        return SCALARS.get(self.enums.get(type_name, type_name))


_DECL = re.compile(
    r"\b(table|struct|enum|union)\s+(\w+)\s*(?::\s*(\w+))?\s*(?:\([^)]*\))?\s*\{([^}]*)\}", re.S
)
_FIELD = re.compile(r"(\w+)\s*:\s*(\[?\s*\w+\s*\]?)\s*(?:=\s*([^;(\s]+))?\s*(?:\([^)]*\))?\s*;")


@functools.cache
def schema() -> Schema:
    """tflite.fbs, parsed: only what the reader needs (no structs appear in it)."""
    text = re.sub(r"//[^\n]*", "", (resources.files("offload.schemas") / SCHEMA).read_text())
    tables, enums, unions, names = {}, {}, {}, {}
    for kind, name, base, body in _DECL.findall(text):
        if kind == "enum":
            enums[name] = base
            value = -1
            for member in body.split(","):
                m = re.match(r"\s*(\w+)\s*(?:=\s*(-?\d+))?", member)
                if m:
                    value = int(m.group(2)) if m.group(2) else value + 1
                    names[(name, m.group(1))] = value
        elif kind == "union":
            unions[name] = [re.sub(r"\(.*", "", m).strip() for m in body.split(",") if m.strip()]
        elif kind == "table":
            tables[name] = body
        else:
            raise ModelFormatError(f"{SCHEMA}: structs are not read by this parser ({name})")
    parsed = {}
    for name, body in tables.items():
        fields, slot = {}, 0
        for fname, ftype, default in _FIELD.findall(body):
            ftype = ftype.replace(" ", "")
            fields[fname] = FieldDef(fname, ftype, 4 + 2 * slot, _default(ftype, default, enums, names))
            slot += 2 if ftype in unions else 1
        parsed[name] = fields
    return Schema(parsed, enums, unions)


def _default(type_name: str, text: str, enums: dict, names: dict):
    base = enums.get(type_name, type_name)
    if base not in SCALARS:
        return None
    if base == "bool":
        return text == "true"
    if base in ("float", "double", "float32", "float64"):
        return float(text) if text else 0.0
    if text and not re.fullmatch(r"-?\d+", text):
        return names[(type_name, text)]  # an enum value by name
    return int(text) if text else 0


# ---------------------------------------------------------------------------------------------
# Checked access.


class Buffer:
    """The bytes of one model file and the checks every read goes through."""

    def __init__(self, data: bytes, origin: str):
        self.data, self.size, self.origin = data, len(data), origin
        self.view = memoryview(data)

    def fail(self, path: str, what: str) -> ModelFormatError:
        return ModelFormatError(f"{self.origin}: malformed tflite model: {path}: {what}")

    def unpack(self, fmt: str, at: int, path: str):
        size = struct.calcsize("<" + fmt)
        if at < 0 or at + size > self.size:
            raise self.fail(path, f"{size}-byte value at byte {at} lies outside the file ({self.size} bytes)")
        return struct.unpack_from("<" + fmt, self.data, at)[0]

    def follow(self, at: int, path: str) -> int:
        """The position the uoffset stored at ``at`` points to."""
        rel = self.unpack("I", at, path)
        if rel == 0 or at + rel >= self.size:
            raise self.fail(path, f"offset {rel} at byte {at} points outside the file ({self.size} bytes)")
        return at + rel

    def vector(self, pos: int, elem_size: int, path: str) -> int:
        """Check the vector at ``pos``; returns its length."""
        if pos & 3:
            raise self.fail(path, f"vector at byte {pos} is not 4-aligned")
        count = self.unpack("I", pos, path)
        if pos + 4 + count * elem_size > self.size:
            raise self.fail(path, f"vector of {count} × {elem_size} bytes at byte {pos} runs past the end")
        return count

    def root(self) -> Table:
        if self.size < 8 or self.data[4:8] != FILE_IDENTIFIER:
            raise ModelFormatError(
                f"{self.origin}: not a TFLite model (no {FILE_IDENTIFIER.decode()!r} identifier at byte 4)"
            )
        return Table(self, self.unpack("I", 0, "root"), "Model", "Model")


class Table:
    """One table, its vtable checked; fields are read by name, each checked as it is read."""

    def __init__(self, buf: Buffer, pos: int, name: str, path: str):
        self.buf, self.pos, self.name, self.path = buf, pos, name, path
        self.fields = schema().tables[name]
        if pos & 3 or pos + 4 > buf.size:
            raise buf.fail(path, f"{name} table at byte {pos} is misaligned or past the end")
        vtable = pos - buf.unpack("i", pos, path)
        if vtable < 0 or vtable & 1 or vtable + 4 > buf.size:
            raise buf.fail(
                path, f"{name} table at byte {pos} has its vtable outside the file (byte {vtable})"
            )
        self.vtable = vtable
        self.vsize = buf.unpack("H", vtable, path)
        self.inline = buf.unpack("H", vtable + 2, path)
        if self.vsize < 4 or self.vsize & 1 or vtable + self.vsize > buf.size or self.inline < 4:
            raise buf.fail(path, f"{name} vtable at byte {vtable} is malformed (size {self.vsize})")
        if pos + self.inline > buf.size:
            raise buf.fail(path, f"{name} table at byte {pos} ({self.inline} bytes) runs past the end")

    def _slot(self, voffset: int, size: int, path: str) -> int:
        """The absolute position of a field's inline bytes, or 0 when the field is absent."""
        if voffset >= self.vsize:
            return 0  # written by an older schema that knew fewer fields
        at = self.buf.unpack("H", self.vtable + voffset, path)
        if at == 0:
            return 0
        if at < 4 or at + size > self.inline:
            raise self.buf.fail(
                path, f"field at table offset {at} lies outside the table's {self.inline} bytes"
            )
        return self.pos + at

    def has(self, name: str) -> bool:
        f = self.fields[name]
        return self._slot(f.voffset, 1, f"{self.path}.{name}") != 0

    def get(self, name: str):
        """A field's value: a scalar (its default when absent), str, Table, tuple of Tables,
        a little-endian numpy view of a scalar vector, or None for an absent reference."""
        f, path = self.fields[name], f"{self.path}.{name}"
        sch, buf = schema(), self.buf
        fmt = sch.scalar_format(f.type)
        if fmt is not None:
            at = self._slot(f.voffset, struct.calcsize(fmt), path)
            return f.default if not at else buf.unpack(fmt, at, path)
        if f.type in sch.unions:
            return self._union(f, path)
        at = self._slot(f.voffset, 4, path)
        if not at:
            return None
        pos = buf.follow(at, path)
        if f.type == "string":
            n = buf.vector(pos, 1, path)
            if pos + 4 + n >= buf.size or buf.data[pos + 4 + n] != 0:
                raise buf.fail(path, f"string of {n} bytes at byte {pos} lacks its NUL")
            return bytes(buf.view[pos + 4 : pos + 4 + n]).decode("utf-8", errors="replace")
        if f.type.startswith("["):
            elem = f.type[1:-1]
            efmt = sch.scalar_format(elem)
            if efmt is not None:
                dtype = np.dtype("<" + efmt)
                count = buf.vector(pos, dtype.itemsize, path)
                return np.frombuffer(buf.data, dtype, count, pos + 4)
            if elem == "string":
                raise buf.fail(path, "vectors of strings are not read")
            count = buf.vector(pos, 4, path)
            return TableVector(buf, pos + 4, count, elem, path)
        return Table(buf, pos, f.type, path)

    def items(self, name: str):
        """A vector field's elements; an empty tuple when the field is absent."""
        value = self.get(name)
        return () if value is None else value

    def _union(self, f: FieldDef, path: str):
        """(member name, Table) of a union field, or (None, None) for NONE."""
        type_at = self._slot(f.voffset, 1, path)
        kind = self.buf.data[type_at] if type_at else 0
        if kind == 0:
            return None, None
        members = schema().unions[f.type]
        if kind > len(members):
            raise self.buf.fail(path, f"union {f.type} type {kind} is none of its {len(members)} members")
        value_at = self._slot(f.voffset + 2, 4, path)
        if not value_at:
            raise self.buf.fail(path, f"union type {members[kind - 1]} but no value")
        member = members[kind - 1]
        return member, Table(self.buf, self.buf.follow(value_at, path), member, f"{path} ({member})")


class TableVector:
    """A checked vector of tables; each element is checked when it is read."""

    def __init__(self, buf: Buffer, start: int, count: int, elem: str, path: str):
        self.buf, self.start, self.count, self.elem, self.path = buf, start, count, elem, path

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> Table:
        i = int(i)  # a numpy index read from the file would make the offsets below int32
        if not 0 <= i < self.count:
            raise self.buf.fail(self.path, f"index {i} is outside its {self.count} elements")
        at, path = self.start + 4 * i, f"{self.path}[{i}]"
        return Table(self.buf, self.buf.follow(at, path), self.elem, path)

    def __iter__(self):
        return (self[i] for i in range(self.count))
