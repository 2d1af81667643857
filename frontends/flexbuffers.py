"""A bounded FlexBuffers reader: the root map of scalars that custom operators keep their options in.

FlexBuffers (the schemaless half of FlatBuffers) is how TFLite converters write most custom
operators' options. The buffer ends with the root: its value, then its packed type, then the
byte width the value is stored with. A packed type is ``type << 2 | log2(child width)``. A map is
stored as a vector of values (``size`` of the map's width just before the first value, one packed
type byte per value after the last) preceded by the offset of its key vector and the key vector's
width; keys are null-terminated strings reached through offsets. Offsets are unsigned and point
backwards from where they are stored.

Only what custom options need is read: a root map whose values are null, ints, uints, floats and
bools, inline or indirect. Other values (strings, vectors, blobs, nested maps) are listed by type
and refused only when an option asks for one. Every offset, width and length is checked against the
buffer: a violation is a ``ModelFormatError`` naming ``where`` (the operator) and the key.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from offload.errors import ModelFormatError

# Type codes of the FlexBuffers format (the upper six bits of a packed type).
NULL, INT, UINT, FLOAT, KEY, STRING = 0, 1, 2, 3, 4, 5
INDIRECT_INT, INDIRECT_UINT, INDIRECT_FLOAT, MAP, VECTOR = 6, 7, 8, 9, 10
BOOL = 26
_TYPE_NAMES = {
    NULL: "null", INT: "int", UINT: "uint", FLOAT: "float", KEY: "key", STRING: "string",
    INDIRECT_INT: "indirect int", INDIRECT_UINT: "indirect uint", INDIRECT_FLOAT: "indirect float",
    MAP: "map", VECTOR: "vector", 25: "blob", BOOL: "bool",
}  # fmt: skip
_WIDTHS = (1, 2, 4, 8)
_REQUIRED = object()


def type_name(code: int) -> str:
    if code in _TYPE_NAMES:
        return _TYPE_NAMES[code]
    return "typed vector" if 11 <= code <= 24 or code == 36 else f"type {code}"


@dataclass(frozen=True)
class FlexValue:
    """One map value: its type code and, for a scalar, its value (None for the others)."""

    type: int
    value: int | float | bool | None


@dataclass(frozen=True)
class FlexMap:
    """A root map read from a flexbuffer: key → value, with typed accessors that convert scalars
    as FlexBuffers' own ``AsInt32`` / ``AsFloat`` / ``AsBool`` do (``integer``, ``real``,
    ``boolean``) and name ``where`` and the key
    in their errors."""

    where: str
    entries: dict[str, FlexValue]

    def __contains__(self, key: str) -> bool:
        entry = self.entries.get(key)
        return entry is not None and entry.type != NULL

    def _scalar(self, key: str, default, kinds: tuple, what: str):
        entry = self.entries.get(key)
        if entry is None or entry.type == NULL:
            if default is _REQUIRED:
                raise ModelFormatError(f"{self.where}: its options have no '{key}' (needs {what})")
            return None
        if entry.type not in kinds:
            raise ModelFormatError(f"{self.where}: option '{key}' is a {type_name(entry.type)}, not {what}")
        return entry.value

    def integer(self, key: str, default=_REQUIRED) -> int:
        """An int option (a float truncates toward zero, a bool is 0 or 1)."""
        kinds = (INT, UINT, INDIRECT_INT, INDIRECT_UINT, BOOL, FLOAT, INDIRECT_FLOAT)
        v = self._scalar(key, default, kinds, "an int")
        if v is None:
            return default
        if isinstance(v, float):
            if not np.isfinite(v):
                raise ModelFormatError(f"{self.where}: option '{key}' is {v}, not an int")
            v = int(v)
        return int(v)

    def real(self, key: str, default=_REQUIRED) -> float:
        """A float option rounded to float32, as the C++ reader's ``AsFloat`` returns it."""
        kinds = (FLOAT, INDIRECT_FLOAT, INT, UINT, INDIRECT_INT, INDIRECT_UINT)
        v = self._scalar(key, default, kinds, "a float")
        if v is None:
            return default
        with np.errstate(over="ignore"):  # past float32's range: inf, as the C++ cast gives
            return float(np.float32(v))

    def boolean(self, key: str, default=_REQUIRED) -> bool:
        v = self._scalar(key, default, (BOOL, INT, UINT, INDIRECT_INT, INDIRECT_UINT), "a bool")
        return default if v is None else bool(v)


class _Reader:
    def __init__(self, data: bytes, where: str):
        self.data = memoryview(bytes(data))
        self.where = where

    def fail(self, what: str, key: str | None = None) -> ModelFormatError:
        at = f" (key '{key}')" if key is not None else ""
        return ModelFormatError(f"{self.where}: malformed flexbuffer options{at}: {what}")

    def span(self, pos: int, size: int, what: str, key=None) -> memoryview:
        if pos < 0 or size < 0 or pos + size > len(self.data):
            raise self.fail(f"{what} at byte {pos} (+{size}) lies outside the {len(self.data)} bytes", key)
        return self.data[pos : pos + size]

    def uint(self, pos: int, width: int, what: str, key=None) -> int:
        return int.from_bytes(self.span(pos, width, what, key), "little")

    def sint(self, pos: int, width: int, what: str, key=None) -> int:
        return int.from_bytes(self.span(pos, width, what, key), "little", signed=True)

    def real(self, pos: int, width: int, what: str, key=None) -> float:
        if width not in (4, 8):
            raise self.fail(f"{what} is a float {width} byte(s) wide (4 or 8)", key)
        return struct.unpack("<f" if width == 4 else "<d", self.span(pos, width, what, key))[0]

    def target(self, pos: int, width: int, what: str, key=None) -> int:
        """Where the offset stored at ``pos`` points (backwards, inside the buffer)."""
        offset = self.uint(pos, width, f"the offset of {what}", key)
        if offset == 0 or offset > pos:
            raise self.fail(f"the offset {offset} of {what} at byte {pos} points outside the buffer", key)
        return pos - offset

    def key(self, pos: int, width: int, i: int) -> str:
        start = self.target(pos, width, f"key {i}")
        end = bytes(self.data[start:]).find(b"\0")
        if end < 0:
            raise self.fail(f"key {i} at byte {start} has no terminating zero byte")
        try:
            return bytes(self.data[start : start + end]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"key {i} at byte {start} is not UTF-8 ({e.reason})") from None

    def value(self, pos: int, parent: int, packed: int, key: str) -> FlexValue:
        code, child = packed >> 2, 1 << (packed & 3)
        if code == NULL:
            return FlexValue(code, None)
        if code == INT:
            return FlexValue(code, self.sint(pos, parent, "an int", key))
        if code in (UINT, BOOL):
            v = self.uint(pos, parent, "a uint", key)
            return FlexValue(code, bool(v) if code == BOOL else v)
        if code == FLOAT:
            return FlexValue(code, self.real(pos, parent, "a float", key))
        if code in (INDIRECT_INT, INDIRECT_UINT, INDIRECT_FLOAT):
            at = self.target(pos, parent, "an indirect scalar", key)
            read = {INDIRECT_INT: self.sint, INDIRECT_UINT: self.uint, INDIRECT_FLOAT: self.real}[code]
            return FlexValue(code, read(at, child, "an indirect scalar", key))
        return FlexValue(code, None)  # not a scalar: listed, read by no option

    def root_map(self) -> FlexMap:
        n = len(self.data)
        if n < 3:
            raise self.fail(f"{n} bytes cannot hold a root value, its type and its width")
        width, packed = self.data[n - 1], self.data[n - 2]
        if width not in _WIDTHS:
            raise self.fail(f"the root's byte width {width} is not 1, 2, 4 or 8")
        if packed >> 2 != MAP:
            raise self.fail(f"the root is a {type_name(packed >> 2)}, not a map")
        w = 1 << (packed & 3)
        p = self.target(n - 2 - width, width, "the root map")
        size = self.uint(p - w, w, "the map's size")
        keys_at = p - 3 * w
        keys = self.target(keys_at, w, "the map's keys")
        kw = self.uint(p - 2 * w, w, "the width of the map's keys")
        if kw not in _WIDTHS:
            raise self.fail(f"the map's keys are {kw} bytes wide, not 1, 2, 4 or 8")
        self.span(p, size * w + size, f"the map's {size} values and their types")
        key_count = self.uint(keys - kw, kw, "the number of keys")
        if key_count != size:
            raise self.fail(f"the map has {size} values but {key_count} keys")
        self.span(keys, size * kw, f"the map's {size} keys")
        entries: dict[str, FlexValue] = {}
        for i in range(size):
            name = self.key(keys + i * kw, kw, i)
            if name in entries:
                raise self.fail("the key appears twice", name)
            entries[name] = self.value(p + i * w, w, self.data[p + size * w + i], name)
        return FlexMap(self.where, entries)


def read_map(data: bytes, where: str) -> FlexMap:
    """The root map of flexbuffer ``data`` (an operator's custom options); ``where`` names the
    operator in errors."""
    return _Reader(data, where).root_map()
