"""A verifier for ExecuTorch program flatbuffers: every offset is checked before a reader follows it.

The flatbuffers Python runtime trusts its input: a bad offset makes the generated classes read
garbage, raise IndexError or struct.error, or build absurdly large objects. ``verify`` walks the
whole ``Program`` tree the way program.fbs describes it (``TABLES``, ``UNIONS``, ``ENUMS`` below,
transcribed by hand from the .fbs) and raises ``ModelFormatError`` at the first thing out of
place, naming where it is (``Program.execution_plan[0].values[12].val (Tensor).sizes``).

Rules, from the flatbuffers binary format: a uoffset is a nonzero uint32 below 2**31 pointing
forward into the buffer; a table starts 4-aligned with an int32 soffset to its vtable; a vtable
is 2-aligned, holds its own size (≥ 4, even) and the table's inline size (≥ 4) followed by one
uint16 per field slot; a present field lies inside the table's inline bytes, aligned to its own
size; a vector is a 4-aligned uint32 length followed by its elements, aligned to the element
size; a string is a vector of bytes followed by a NUL (and, for the object API, valid UTF-8);
a union's type is 0 (NONE) or names one of its members, and a member type has a value.
"""

from __future__ import annotations

import struct

from offload.errors import ModelFormatError

# ---------------------------------------------------------------------------------------------
# program.fbs + scalar_type.fbs, by hand. Each table lists its fields in declaration order, which
# is their vtable slot order; a union field takes two slots (its type, then its value), the way
# flatc lays it out. Types are written as in the .fbs: a scalar or enum name, "string", a table,
# a union, or "[elem]" for a vector.

FILE_IDENTIFIER = b"ET12"
ROOT_TABLE = "Program"

ENUMS = {
    "ScalarType": "byte",
    "TensorShapeDynamism": "byte",
    "TensorDataLocation": "byte",
    "DataLocation": "byte",
}

UNIONS = {
    "KernelTypes": [
        "Null",
        "Int",
        "Bool",
        "Double",
        "Tensor",
        "String",
        "IntList",
        "DoubleList",
        "BoolList",
        "TensorList",
        "OptionalTensorList",
    ],
    "InstructionArguments": ["KernelCall", "DelegateCall", "MoveCall", "JumpFalseCall", "FreeCall"],
}

TABLES = {
    "ContainerMetadata": [("encoded_inp_str", "string"), ("encoded_out_str", "string")],
    "Null": [],
    "AllocationDetails": [
        ("memory_id", "uint"),
        ("memory_offset_low", "uint"),
        ("memory_offset_high", "uint"),
    ],
    "ExtraTensorInfo": [
        ("mutable_data_segments_idx", "uint64"),
        ("fully_qualified_name", "string"),
        ("location", "TensorDataLocation"),
    ],
    "Tensor": [
        ("scalar_type", "ScalarType"),
        ("storage_offset", "int"),
        ("sizes", "[int]"),
        ("dim_order", "[ubyte]"),
        ("requires_grad", "bool"),
        ("data_buffer_idx", "uint"),
        ("allocation_info", "AllocationDetails"),
        ("layout", "byte"),
        ("shape_dynamism", "TensorShapeDynamism"),
        ("extra_tensor_info", "ExtraTensorInfo"),
    ],
    "Int": [("int_val", "long")],
    "Bool": [("bool_val", "bool")],
    "Double": [("double_val", "double")],
    "String": [("string_val", "string")],
    "IntList": [("items", "[long]")],
    "DoubleList": [("items", "[double]")],
    "BoolList": [("items", "[bool]")],
    "TensorList": [("items", "[int]")],
    "OptionalTensorList": [("items", "[int]")],
    "EValue": [("val", "KernelTypes")],
    "Operator": [("name", "string"), ("overload", "string")],
    "KernelCall": [("op_index", "int"), ("args", "[int]")],
    "DelegateCall": [("delegate_index", "int"), ("args", "[int]")],
    "MoveCall": [("move_from", "int"), ("move_to", "int")],
    "JumpFalseCall": [("cond_value_index", "int"), ("destination_instruction", "int")],
    "FreeCall": [("value_index", "int")],
    "Instruction": [("instr_args", "InstructionArguments")],
    "Frame": [("filename", "string"), ("lineno", "int"), ("name", "string"), ("context", "string")],
    "FrameList": [("items", "[Frame]")],
    "BackendDelegateDataReference": [("location", "DataLocation"), ("index", "uint")],
    "CompileSpec": [("key", "string"), ("value", "[ubyte]")],
    "BackendDelegate": [
        ("id", "string"),
        ("processed", "BackendDelegateDataReference"),
        ("compile_specs", "[CompileSpec]"),
    ],
    "Chain": [
        ("inputs", "[int]"),
        ("outputs", "[int]"),
        ("instructions", "[Instruction]"),
        ("stacktrace", "[FrameList]"),
    ],
    "ExecutionPlan": [
        ("name", "string"),
        ("container_meta_type", "ContainerMetadata"),
        ("values", "[EValue]"),
        ("inputs", "[int]"),
        ("outputs", "[int]"),
        ("chains", "[Chain]"),
        ("operators", "[Operator]"),
        ("delegates", "[BackendDelegate]"),
        ("non_const_buffer_sizes", "[int64]"),
    ],
    "Buffer": [("storage", "[ubyte]")],
    "BackendDelegateInlineData": [("data", "[ubyte]")],
    "DataSegment": [("offset", "uint64"), ("size", "uint64")],
    "SubsegmentOffsets": [("segment_index", "uint"), ("offsets", "[uint64]")],
    "Program": [
        ("version", "uint"),
        ("execution_plan", "[ExecutionPlan]"),
        ("constant_buffer", "[Buffer]"),
        ("backend_delegate_data", "[BackendDelegateInlineData]"),
        ("segments", "[DataSegment]"),
        ("constant_segment", "SubsegmentOffsets"),
        ("mutable_data_segments", "[SubsegmentOffsets]"),
    ],
}

# ---------------------------------------------------------------------------------------------
# Limits beyond what the buffer size implies, so that a reader sizing things by these counts
# never allocates absurdly. Keyed "Table.field"; a vector longer than its limit is rejected.
LIMITS = {
    "Program.execution_plan": 1 << 16,
    "Program.segments": 1 << 20,
    "Program.mutable_data_segments": 1 << 16,
    "ExecutionPlan.values": 1 << 24,
    "ExecutionPlan.chains": 1 << 16,
    "ExecutionPlan.operators": 1 << 20,
    "ExecutionPlan.delegates": 1 << 16,
    "Chain.instructions": 1 << 24,
}
MAX_DEPTH = 64  # the schema nests 8 objects deep; anything past this is not a Program
MAX_BUFFER = (1 << 31) - 1  # offsets are 31-bit: flatbuffers' own limit
# Shared (aliased) subtrees are legal, but the object API unpacks every reference separately.
# The bytes reachable from the root, counted once per reference, may not exceed this many times
# the buffer (a tree without sharing counts each byte at most once).
SHARING_FACTOR = 4
SHARING_SLACK = 1 << 16

_SIZES = {
    1: "bool byte ubyte int8 uint8",
    2: "short ushort int16 uint16",
    4: "int uint int32 uint32 float float32",
    8: "long ulong int64 uint64 double float64",
}
SCALAR_SIZES = {name: size for size, names in _SIZES.items() for name in names.split()}

# ---------------------------------------------------------------------------------------------
# The description compiled into what the walk needs: per table, each field's kind, vtable
# offset(s), size (a scalar's, or a vector's element size) and target (table/union/type name).

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from


class _Field:
    __slots__ = ("key", "kind", "limit", "name", "size", "target", "voffset")

    def __init__(self, name, kind, slot, size, target, limit=None):
        self.name, self.kind, self.size, self.target, self.limit = name, kind, size, target, limit
        self.voffset = 4 + 2 * slot  # a union's value slot is the next one, at voffset + 2
        # Verified objects are remembered by (position, key); the limit is part of what was checked.
        self.key = (target, limit)


def _scalar_size(type_name: str) -> int:
    return SCALAR_SIZES[ENUMS.get(type_name, type_name)]


def _field(table: str, name: str, type_name: str, slot: int) -> _Field:
    limit = LIMITS.get(f"{table}.{name}")
    elem = type_name[1:-1] if type_name.startswith("[") else None
    if type_name == "string":
        return _Field(name, "string", slot, 1, "string")
    if type_name in TABLES:
        return _Field(name, "table", slot, 4, type_name)
    if type_name in UNIONS:
        return _Field(name, "union", slot, 4, type_name)
    if elem in TABLES:
        return _Field(name, "tables", slot, 4, elem, limit)
    if elem is not None:
        return _Field(name, "scalars", slot, _scalar_size(elem), type_name, limit)
    return _Field(name, "scalar", slot, _scalar_size(type_name), type_name)


def _compile(table: str, fields) -> tuple:
    out, slot = [], 0
    for name, type_name in fields:
        out.append(_field(table, name, type_name, slot))
        slot += 2 if type_name in UNIONS else 1
    return tuple(out)


_COMPILED = {table: _compile(table, fields) for table, fields in TABLES.items()}
# A reference to a table of each type: a vector's element, a union's member, the root.
_TABLE_REF = {table: _Field(table, "table", 0, 4, table) for table in TABLES}


# ---------------------------------------------------------------------------------------------
# Paths are built as (parent, step) pairs and only rendered into text when something is wrong.


def _render(path) -> str:
    steps = []
    while path is not None:
        path, step = path
        steps.append(f"[{step}]" if isinstance(step, int) else step)
    return "".join(reversed(steps))


class _Walk:
    """One verification: the buffer, the memo of verified objects, and the sharing budget."""

    def __init__(self, buf: bytes, origin: str):
        self.buf, self.size, self.origin = buf, len(buf), origin
        self.budget = SHARING_FACTOR * len(buf) + SHARING_SLACK
        self.done: dict = {}  # (position, field key) -> bytes reachable, counted per reference
        self.layouts: dict = {}  # (vtable, table, position % 8) -> (inline size, present fields)

    def fail(self, path, what: str):
        raise ModelFormatError(f"{self.origin}: {_render(path)}: {what}")

    def charge(self, total: int, path) -> None:
        if total > self.budget:
            self.fail(path, f"shared subtrees add up to {total} bytes, over {SHARING_FACTOR}× the buffer")

    def offset(self, at: int, path) -> int:
        """The position the uoffset stored at ``at`` points to (``at`` is already in bounds)."""
        rel = _U32(self.buf, at)[0]
        if rel == 0 or rel > MAX_BUFFER or at + rel >= self.size:
            self.fail(path, f"offset {rel} at byte {at} points outside the buffer ({self.size} bytes)")
        return at + rel

    def visit(self, pos: int, field: _Field, path, depth: int) -> int:
        """Check the object at ``pos`` once; returns the bytes reachable from it."""
        key = (pos, field.key)
        total = self.done.get(key)
        if total is None:
            if depth > MAX_DEPTH:
                self.fail(path, f"nested more than {MAX_DEPTH} deep")
            total = self.done[key] = _OBJECT_CHECKS[field.kind](self, pos, field, path, depth)
        return total

    # -- objects, by kind -----------------------------------------------------------------------

    def table(self, pos: int, ref: _Field, path, depth: int) -> int:
        name = ref.target
        if pos & 3 or pos + 4 > self.size:
            self.fail(path, f"{name} table at byte {pos} is misaligned or past the end")
        vtable = pos - _I32(self.buf, pos)[0]
        layout = self.layouts.get((vtable, name, pos & 7))
        if layout is None:
            layout = self.layouts[(vtable, name, pos & 7)] = self.layout(vtable, pos, name, path)
        inline, present = layout
        if pos + inline > self.size:
            self.fail(path, f"{name} table at byte {pos} ({inline} bytes) runs past the end")
        total = inline
        for field, at in present:
            total += _FIELD_CHECKS[field.kind](self, pos, at, field, (path, "." + field.name), depth)
            self.charge(total, path)
        return total

    def scalars(self, pos: int, field: _Field, path, depth: int) -> int:
        return 4 + self.vector(pos, field, path) * field.size

    def tables(self, pos: int, field: _Field, path, depth: int) -> int:
        count = self.vector(pos, field, path)
        ref, total = _TABLE_REF[field.target], 4 + 4 * count
        for i in range(count):
            at, sub = pos + 4 + 4 * i, (path, i)
            total += self.visit(self.offset(at, sub), ref, sub, depth + 1)
            self.charge(total, path)
        return total

    def string(self, pos: int, field: _Field, path, depth: int) -> int:
        if pos & 3 or pos + 4 > self.size:
            self.fail(path, f"string at byte {pos} is misaligned or past the end")
        n = _U32(self.buf, pos)[0]
        end = pos + 4 + n
        if end >= self.size or self.buf[end] != 0:
            self.fail(path, f"string of {n} bytes at byte {pos} runs past the end or lacks its NUL")
        try:  # the object API decodes every string
            self.buf[pos + 4 : end].decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(path, f"string at byte {pos} is not UTF-8 ({e.reason} at {e.start})")
        return n + 5

    def vector(self, pos: int, field: _Field, path) -> int:
        """Check a vector's alignment, bounds and limit; returns its length."""
        if pos & 3 or pos + 4 > self.size or (pos + 4) % field.size:
            self.fail(path, f"vector at byte {pos} is misaligned or past the end")
        count = _U32(self.buf, pos)[0]
        if pos + 4 + count * field.size > self.size:
            self.fail(path, f"vector of {count} × {field.size} bytes at byte {pos} runs past the end")
        if field.limit is not None and count > field.limit:
            self.fail(path, f"{count} elements, more than the limit of {field.limit}")
        return count

    # -- vtables ----------------------------------------------------------------------------------

    def layout(self, vtable: int, pos: int, name: str, path) -> tuple:
        """Check a vtable for table ``name`` at ``pos``: its inline size and its present references."""
        if vtable < 0 or vtable & 1 or vtable + 4 > self.size:
            self.fail(path, f"{name} table at byte {pos} has its vtable outside the buffer (byte {vtable})")
        vsize, inline = _U16(self.buf, vtable)[0], _U16(self.buf, vtable + 2)[0]
        if vsize < 4 or vsize & 1 or vtable + vsize > self.size or inline < 4:
            self.fail(path, f"{name} vtable at byte {vtable} is malformed (size {vsize}, table {inline})")
        present = []
        for field in _COMPILED[name]:
            sub = (path, "." + field.name)
            at = self.slot(vtable, vsize, field.voffset)
            if field.kind == "union":
                value_at = self.slot(vtable, vsize, field.voffset + 2)
                self.inline(pos, inline, at, 1, sub)
                self.inline(pos, inline, value_at, 4, sub)
                at = (at, value_at) if at or value_at else 0
            else:
                self.inline(pos, inline, at, field.size if field.kind == "scalar" else 4, sub)
            if at and field.kind != "scalar":
                present.append((field, at))
        return inline, tuple(present)

    def slot(self, vtable: int, vsize: int, voffset: int) -> int:
        # A slot past the vtable's end is absent: the writer knew fewer fields.
        return _U16(self.buf, vtable + voffset)[0] if voffset < vsize else 0

    def inline(self, pos: int, inline: int, at: int, size: int, path) -> None:
        if at and (at < 4 or at + size > inline or (pos + at) % size):
            self.fail(
                path, f"field at table offset {at} lies outside the table's {inline} bytes or is misaligned"
            )

    # -- present fields, given their table's position and their offset in it -----------------------

    def reference(self, pos: int, at: int, field: _Field, path, depth: int) -> int:
        return self.visit(self.offset(pos + at, path), field, path, depth + 1)

    def union(self, pos: int, at: tuple, field: _Field, path, depth: int) -> int:
        type_at, value_at = at
        members = UNIONS[field.target]
        kind = self.buf[pos + type_at] if type_at else 0
        if kind > len(members):
            self.fail(path, f"union {field.target} type {kind} is none of its {len(members)} members")
        if kind == 0:
            return 0  # NONE: the reader ignores any value
        member = members[kind - 1]
        if not value_at:
            self.fail(path, f"union type {member} but no value")
        sub = (path, f" ({member})")
        return self.visit(self.offset(pos + value_at, sub), _TABLE_REF[member], sub, depth + 1)


# How an object reached through an offset is checked, and how a present field is, by kind.
_OBJECT_CHECKS = {
    "table": _Walk.table,
    "tables": _Walk.tables,
    "scalars": _Walk.scalars,
    "string": _Walk.string,
}
_FIELD_CHECKS = {
    "table": _Walk.reference,
    "tables": _Walk.reference,
    "scalars": _Walk.reference,
    "string": _Walk.reference,
    "union": _Walk.union,
}


def verify(buf, origin: str = "<bytes>", *, root_min: int = 8) -> None:
    """Check that the flatbuffer ``buf`` holds a well-formed Program; raise ModelFormatError if not.

    ``root_min`` is the first byte the root table may start at: past the identifier, and past
    the extended header when the file has one.
    """
    buf = bytes(buf)
    if len(buf) > MAX_BUFFER:
        raise ModelFormatError(f"{origin}: the program is {len(buf)} bytes; flatbuffers stop at 2 GiB")
    if len(buf) < 8 or buf[4:8] != FILE_IDENTIFIER:
        raise ModelFormatError(
            f"{origin}: not a .pte file (no {FILE_IDENTIFIER.decode()!r} identifier at byte 4)"
        )
    walk, path = _Walk(buf, origin), (None, ROOT_TABLE)
    root = _U32(buf, 0)[0]
    if not root_min <= root < len(buf):
        walk.fail(path, f"root offset {root} is outside [{root_min}, {len(buf)})")
    walk.charge(walk.visit(root, _TABLE_REF[ROOT_TABLE], path, 0), path)
