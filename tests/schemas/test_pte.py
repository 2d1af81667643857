"""The .pte container: byte layout (read with struct and with the generated reader) and round trips."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from offload.errors import ModelFormatError
from offload.schemas import pte
from offload.schemas.generated.executorch_flatbuffer.Program import Program
from tests.schemas import programs

HEADER = struct.Struct("<I4s4sIQQQ")  # root offset, identifier, then the 32-byte eh00 header


def plain(obj):
    """An object-API tree as nested dicts and lists, so two trees compare with ==."""
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (list, tuple)):
        return [plain(x) for x in obj]
    if hasattr(obj, "__dict__"):
        return {type(obj).__name__: {k: plain(v) for k, v in vars(obj).items()}}
    return obj


def header_fields(data: bytes) -> dict:
    root, ident, magic, length, program_size, base, data_size = HEADER.unpack_from(data, 0)
    return dict(
        root=root,
        ident=ident,
        magic=magic,
        length=length,
        program_size=program_size,
        base=base,
        data_size=data_size,
    )


def test_file_without_segments_has_identifier_and_no_header():
    data = programs.small(with_segments=False)
    assert data[4:8] == b"ET12"
    assert data[8:12] != b"eh00"
    assert pte.read_header(data) is None
    parsed = pte.parse(data)
    assert parsed.header is None and parsed.segments == []
    assert Program.GetRootAs(data, 0).ExecutionPlan(0).Name() == b"forward"


def test_header_fields_are_little_endian_and_consistent():
    data = programs.small()
    h = header_fields(data)
    assert h["ident"] == b"ET12" and h["magic"] == b"eh00" and h["length"] == 32
    assert h["root"] >= 8 + 32  # the root table lies past the header
    assert h["base"] % pte.DEFAULT_SEGMENT_ALIGNMENT == 0
    assert h["program_size"] <= h["base"] < h["program_size"] + pte.DEFAULT_SEGMENT_ALIGNMENT
    assert set(data[h["program_size"] : h["base"]]) <= {0}  # padding only
    assert h["base"] + h["data_size"] == len(data)
    parsed = pte.parse(data)
    assert parsed.header == pte.ExtendedHeader(h["program_size"], h["base"], h["data_size"], 32)


@pytest.mark.parametrize("alignment", [pte.DEFAULT_SEGMENT_ALIGNMENT, 4096])
def test_segments_are_aligned_and_identical_payloads_stored_once(alignment):
    payloads = [b"first", b"blob" * 50, b"blob" * 50, b"z"]
    p = programs.program([programs.plan("forward", programs.every_value_kind()[:6], [])], None)
    data = pte.serialize(p, payloads, segment_alignment=alignment)
    h = header_fields(data)
    assert h["base"] % alignment == 0
    root = Program.GetRootAs(data, 0)  # the generated reader, not our parser
    segs = [root.Segments(i) for i in range(root.SegmentsLength())]
    assert [s.Size() for s in segs] == [len(x) for x in payloads]
    assert all(s.Offset() % alignment == 0 for s in segs)
    assert segs[1].Offset() == segs[2].Offset()  # stored once
    assert len({s.Offset() for s in segs}) == 3
    assert data.count(b"blob" * 50) == 1
    for s, payload in zip(segs, payloads):
        assert data[h["base"] + s.Offset() : h["base"] + s.Offset() + s.Size()] == payload
    assert h["data_size"] == max(s.Offset() + s.Size() for s in segs)
    parsed = pte.parse(data)
    assert [bytes(s) for s in parsed.segments] == payloads


@pytest.mark.parametrize("alignment", [pte.DEFAULT_CONSTANT_ALIGNMENT, 64])
def test_constants_start_on_aligned_offsets(alignment):
    blobs = [b"\x01" * 3, b"\x02" * 17, b"", b"\x03" * 40]
    constants = pte.ConstantData(alignment)
    indices = [constants.add(b) for b in blobs]
    assert indices == [1, 2, 3, 4]
    p = programs.program([programs.plan("forward", programs.every_value_kind()[:6], [])], constants)
    data = pte.serialize(p, [constants.payload()])
    h = header_fields(data)
    root = Program.GetRootAs(data, 0)
    cs = root.ConstantSegment()
    offsets = [cs.Offsets(i) for i in range(cs.OffsetsLength())]
    assert offsets[0] == 0 and all(o % alignment == 0 for o in offsets)
    start = h["base"] + root.Segments(cs.SegmentIndex()).Offset()
    parsed = pte.parse(data)
    for k, blob in zip(indices, blobs):
        assert data[start + offsets[k] : start + offsets[k] + len(blob)] == blob
        assert bytes(parsed.constant_bytes(k, len(blob))) == blob
        assert bytes(parsed.constant_bytes(k)).startswith(blob)


def test_constant_bytes_bounds():
    parsed = pte.parse(programs.small())
    size = len(parsed.segments[0])
    for bad in [(0, None), (3, None), (-1, None), (1, size + 1), (1, -1)]:
        with pytest.raises(ModelFormatError):
            parsed.constant_bytes(*bad)
    assert bytes(parsed.constant_bytes(1, 24)) == np.arange(6, dtype="<f4").tobytes()


def test_alignments_must_be_powers_of_two():
    with pytest.raises(ValueError):
        pte.ConstantData(12)
    with pytest.raises(ValueError):
        pte.serialize(programs.program([], None), [b"x"], segment_alignment=100)


@pytest.mark.parametrize("with_segments", [True, False])
def test_round_trip_every_value_and_instruction_kind(with_segments):
    constants = programs.constants() if with_segments else None
    values = programs.every_value_kind()
    original = programs.program(
        [
            programs.plan("forward", values, programs.every_instruction_kind(), frames=True),
            programs.plan("forward/#0/body", values[:6], programs.every_instruction_kind()[2:]),
        ],
        constants,
    )
    payloads = [constants.payload(), b"delegate"] if with_segments else []
    data = pte.serialize(original, payloads)
    parsed = pte.parse(data, "round.pte")
    assert plain(parsed.program) == plain(original)
    assert [bytes(s) for s in parsed.segments] == payloads
    # ExecuTorch's schema (the generated reader) sees the same program.
    plan = Program.GetRootAs(data, 0).ExecutionPlan(0)
    assert plan.ValuesLength() == len(values) and plan.Chains(0).InstructionsLength() == 5
    assert [plan.Values(i).ValType() for i in range(len(values))] == [v.valType for v in values]


def test_parse_accepts_bytearray_memoryview_and_names_its_origin():
    data = programs.small()
    for buf in (bytearray(data), memoryview(data)):
        assert pte.parse(buf).program.executionPlan[0].name == "forward"
    with pytest.raises(ModelFormatError, match=r"^model\.pte: not a \.pte file"):
        pte.parse(b"\0" * 64, "model.pte")
