"""The verifier and parse on hostile input: a malformed corpus, targeted patches, and the schema table."""

from __future__ import annotations

import importlib
import random
import re
import struct
import time
from pathlib import Path

import flatbuffers
import pytest

from offload.errors import ModelFormatError
from offload.schemas import pte, verify
from offload.schemas.generated.executorch_flatbuffer import EValue, ExecutionPlan, Program, String
from offload.schemas.generated.executorch_flatbuffer.KernelTypes import KernelTypes as KT
from tests.schemas import programs

SCHEMAS = Path(pte.__file__).parent
TIME_BOUND = 1.0  # seconds per file: a bound against hangs, not a benchmark
CORPUS = {
    "small": lambda: programs.small(),
    "small-flat": lambda: programs.small(with_segments=False),
    "medium": lambda: programs.medium(300),
    "medium-flat": lambda: programs.medium(300, with_segments=False),
}
_built: dict[str, bytes] = {}


def corpus(name: str) -> bytes:
    if name not in _built:
        _built[name] = CORPUS[name]()
    return _built[name]


def parse_or_reject(data: bytes, label: str) -> float:
    """Parse ``data``: it must succeed or raise ModelFormatError, within TIME_BOUND; returns the time."""
    start = time.perf_counter()
    try:
        parsed = pte.parse(data, label)
        cs = parsed.program.constantSegment
        for k in range(1, 0 if cs is None or cs.offsets is None else len(cs.offsets)):
            parsed.constant_bytes(k, 1)
    except ModelFormatError as e:
        assert str(e).startswith(label), e
        assert "verified program could not be read" not in str(e), e  # parse's safety net never fires
    elapsed = time.perf_counter() - start
    assert elapsed < TIME_BOUND, f"{label} took {elapsed:.2f} s"
    return elapsed


# -- the malformed corpus ------------------------------------------------------------------------


@pytest.mark.parametrize("name", CORPUS)
def test_valid_files_parse(name):
    assert pte.parse(corpus(name), name).program.executionPlan


@pytest.mark.parametrize("name", CORPUS)
def test_truncated_at_every_64th(name):
    data = corpus(name)
    for k in range(64):
        parse_or_reject(data[: len(data) * k // 64], f"{name}[:{k}/64]")


@pytest.mark.parametrize("name", CORPUS)
def test_flipped_bytes(name):
    rng = random.Random(f"offload-{name}")
    data = corpus(name)
    for i in range(500):
        mutant = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            mutant[rng.randrange(len(mutant))] ^= rng.randint(1, 255)
        parse_or_reject(bytes(mutant), f"{name}#{i}")


# -- targeted patches: each one is certainly invalid -----------------------------------------------


def u32(data, at):
    return struct.unpack_from("<I", data, at)[0]


def patched(data: bytes, at: int, fmt: str, value) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def field_at(table, voffset: int) -> int:
    """Where a present field of a generated-reader object lies in the buffer."""
    o = table._tab.Offset(voffset)
    assert o, "field absent"
    return table._tab.Pos + o


def places(data: bytes) -> dict:
    """Byte positions of a few things in ``data``, found with the generated reader."""
    root = Program.Program.GetRootAs(data, 0)
    plan = root.ExecutionPlan(0)
    plans_field = field_at(root, 6)
    values_field = field_at(plan, 8)
    tensor = plan.Values(4).Val()
    sizes_field = field_at(type("T", (), {"_tab": tensor})(), 8)
    name_field = field_at(plan, 4)
    evalue = plan.Values(2)
    return {
        "root table": u32(data, 0),
        "plans field": plans_field,
        "plans vector": plans_field + u32(data, plans_field),
        "values field": values_field,
        "values vector": values_field + u32(data, values_field),
        "sizes vector": sizes_field + u32(data, sizes_field),
        "name string": name_field + u32(data, name_field),
        "union type": field_at(evalue, 4),
        "plan vtable": plan._tab.Pos - struct.unpack_from("<i", data, plan._tab.Pos)[0],
    }


def patches(data: bytes):
    p = places(data)
    n = len(data)
    yield "root offset past the end", 0, "<I", n, "root offset"
    yield "root offset huge", 0, "<I", 0xFFFFFFF0, "root offset"
    yield "root vtable before the start", p["root table"], "<i", 0x7FFFFFFF, "vtable outside"
    yield "root vtable past the end", p["root table"], "<i", -0x7FFFFFF0, "vtable outside"
    yield "plan vtable size odd", p["plan vtable"], "<H", 3, "vtable at byte"
    yield "plan vtable size huge", p["plan vtable"], "<H", 0xFFFE, "vtable at byte"
    yield "plan table size small", p["plan vtable"] + 2, "<H", 4, "lies outside the table"
    yield "plans offset outside", p["plans field"], "<I", 0x7FFFFFF0, "Program.execution_plan: offset"
    yield "values offset outside", p["values field"], "<I", n, "execution_plan[0].values: offset"
    yield "values offset misaligned", p["values field"], "<I", u32(data, p["values field"]) + 1, "misaligned"
    yield "plans length huge", p["plans vector"], "<I", 0x7FFFFFFF, "Program.execution_plan: vector"
    yield "values length huge", p["values vector"], "<I", 0x7FFFFFFF, "execution_plan[0].values: vector"
    yield (
        "sizes length huge",
        p["sizes vector"],
        "<I",
        0x7FFFFFFF,
        "Program.execution_plan[0].values[4].val (Tensor).sizes: vector",
    )
    yield "name length huge", p["name string"], "<I", 0x7FFFFFFF, "execution_plan[0].name: string"
    yield "name without NUL", p["name string"] + 4 + len("forward"), "<B", ord("x"), "lacks its NUL"
    yield "name not UTF-8", p["name string"] + 4, "<B", 0xFF, "not UTF-8"
    yield "union type out of range", p["union type"], "<B", 200, "values[2].val: union KernelTypes type 200"


@pytest.mark.parametrize("name", CORPUS)
def test_patched_offsets_and_lengths_are_rejected(name):
    data = corpus(name)
    for label, at, fmt, value, message in patches(data):
        start = time.perf_counter()
        with pytest.raises(ModelFormatError) as e:
            pte.parse(patched(data, at, fmt, value), label)
        assert time.perf_counter() - start < TIME_BOUND
        assert message in str(e.value) and str(e.value).startswith(label), (label, str(e.value))


@pytest.mark.parametrize(
    "offset, value, message",
    [
        (12, 8, "at least 32"),  # header length 8
        (16, 1 << 40, "past the end of the file"),  # program size
        (16, 8, "no room for the header"),
        (24, 1 << 40, "past the end"),  # segment base
        (24, 64, "is inside the program"),
        (32, 1 << 40, "past the end"),  # segment data size
        (32, 1, "outside the segment data"),
    ],
)
def test_bad_extended_header_is_rejected(offset, value, message):
    data = corpus("small")
    with pytest.raises(ModelFormatError, match=message):
        pte.parse(patched(data, offset, "<I" if offset == 12 else "<Q", value), "bad.pte")


def test_segments_without_a_header_are_rejected():
    data = bytearray(corpus("small"))
    data[8:12] = b"eh01"  # no longer a header; the root offset still skips it
    with pytest.raises(ModelFormatError, match="no extended header"):
        pte.parse(bytes(data), "noheader.pte")


def test_constant_offsets_must_lie_in_their_segment():
    p = programs.program([programs.plan("forward", programs.every_value_kind(), [])], programs.constants())
    p.constantSegment.offsets = [0, 1 << 20]
    with pytest.raises(ModelFormatError, match="past its segment"):
        pte.parse(pte.serialize(p, [b"tiny"]), "const.pte")
    p.constantSegment.segmentIndex = 5
    with pytest.raises(ModelFormatError, match="names no segment"):
        pte.parse(pte.serialize(p, [b"tiny"]), "const.pte")


# -- sharing, limits, depth --------------------------------------------------------------------------


def shared_program(references: int, text: str) -> bytes:
    """A plan whose ``references`` EValues all point at one String table holding ``text``."""
    b = flatbuffers.Builder(0)
    s = b.CreateString(text)
    String.Start(b)
    String.AddStringVal(b, s)
    shared = String.End(b)
    evalues = []
    for _ in range(references):
        EValue.Start(b)
        EValue.AddValType(b, KT.String)
        EValue.AddVal(b, shared)
        evalues.append(EValue.End(b))
    ExecutionPlan.StartValuesVector(b, references)
    for ev in reversed(evalues):
        b.PrependUOffsetTRelative(ev)
    values = b.EndVector()
    ExecutionPlan.Start(b)
    ExecutionPlan.AddValues(b, values)
    plan = ExecutionPlan.End(b)
    Program.StartExecutionPlanVector(b, 1)
    b.PrependUOffsetTRelative(plan)
    plans = b.EndVector()
    Program.Start(b)
    Program.AddExecutionPlan(b, plans)
    b.Finish(Program.End(b), file_identifier=verify.FILE_IDENTIFIER)
    return bytes(b.Output())


def test_a_little_sharing_is_fine():
    parsed = pte.parse(shared_program(3, "abc"), "shared.pte")
    assert [v.val.stringVal for v in parsed.program.executionPlan[0].values] == ["abc"] * 3


def test_sharing_that_would_explode_the_object_tree_is_rejected():
    data = shared_program(20000, "x" * 100_000)  # ~0.4 MB that would unpack into 2 GB of strings
    start = time.perf_counter()
    with pytest.raises(ModelFormatError, match="shared subtrees"):
        pte.parse(data, "bomb.pte")
    assert time.perf_counter() - start < TIME_BOUND


def test_vector_limits(monkeypatch):
    plans = next(f for f in verify._COMPILED["Program"] if f.name == "execution_plan")
    monkeypatch.setattr(plans, "limit", 1)
    with pytest.raises(
        ModelFormatError, match=r"Program.execution_plan: 2 elements, more than the limit of 1"
    ):
        pte.parse(corpus("small"), "limit.pte")


def test_depth_limit(monkeypatch):
    monkeypatch.setattr(verify, "MAX_DEPTH", 3)
    with pytest.raises(ModelFormatError, match="nested more than 3 deep"):
        pte.parse(corpus("small"), "deep.pte")


def test_errors_name_origin_and_path():
    data = corpus("small-flat")
    at = places(data)["sizes vector"]
    with pytest.raises(ModelFormatError) as e:
        pte.parse(patched(data, at, "<I", 0x7FFFFFFF), "m.pte")
    assert str(e.value).startswith("m.pte: Program.execution_plan[0].values[4].val (Tensor).sizes: ")


# -- the schema table against program.fbs and the generated code ----------------------------------


def fbs_text() -> str:
    text = "\n".join((SCHEMAS / name).read_text() for name in ("scalar_type.fbs", "program.fbs"))
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"\([^)]*\)", "", text)  # attributes such as (force_align: 16)


def test_schema_table_matches_program_fbs():
    text = fbs_text()
    tables = {
        name: [(f, t) for f, t in re.findall(r"(\w+)\s*:\s*(\[?\w+\]?)", body)]
        for name, body in re.findall(r"\btable\s+(\w+)\s*\{([^}]*)\}", text)
    }
    unions = {
        name: re.findall(r"\w+", body) for name, body in re.findall(r"\bunion\s+(\w+)\s*\{([^}]*)\}", text)
    }
    enums = dict(re.findall(r"\benum\s+(\w+)\s*:\s*(\w+)", text))
    assert {k: [tuple(f) for f in v] for k, v in verify.TABLES.items()} == tables
    assert unions == verify.UNIONS
    assert enums == verify.ENUMS
    assert re.search(r"root_type\s+(\w+);", text).group(1) == verify.ROOT_TABLE
    assert re.search(r'file_identifier\s+"(\w+)";', text).group(1).encode() == verify.FILE_IDENTIFIER


class _SlotCounter:
    def StartObject(self, n):
        self.slots = n


@pytest.mark.parametrize("table", sorted(verify.TABLES))
def test_schema_table_matches_generated_code(table):
    module = importlib.import_module(f"offload.schemas.generated.executorch_flatbuffer.{table}")
    counter = _SlotCounter()
    module.Start(counter)
    fields = verify.TABLES[table]
    assert counter.slots == sum(2 if t in verify.UNIONS else 1 for _, t in fields)
