"""The .pte container: ExecuTorch's flatbuffer program, its extended header, and segments.

``serialize`` lays a ``ProgramT`` (the generated object API) and its segment payloads out the
way ExecuTorch does; ``parse`` reads such a file back. See docs/pte.md.
"""

from __future__ import annotations

import struct
from contextlib import contextmanager
from dataclasses import dataclass

import flatbuffers

from offload.errors import ModelFormatError

from .generated.executorch_flatbuffer.DataSegment import DataSegmentT
from .generated.executorch_flatbuffer.Program import Program, ProgramT
from .verify import FILE_IDENTIFIER, verify

HEADER_MAGIC = b"eh00"
HEADER_LENGTH = 32
DEFAULT_SEGMENT_ALIGNMENT = 128
DEFAULT_CONSTANT_ALIGNMENT = 16

# Element types by their ONNX name → the Tensor.scalar_type code in the file. ExecuTorch's
# codes where ExecuTorch has the type; offload's own codes (100 and up) for the others.
SCALAR_TYPES = {
    "UINT8": 0,
    "INT8": 1,
    "INT16": 2,
    "INT32": 3,
    "INT64": 4,
    "FLOAT16": 5,
    "FLOAT": 6,
    "DOUBLE": 7,
    "COMPLEX64": 9,
    "COMPLEX128": 10,
    "BOOL": 11,
    "BFLOAT16": 15,
    "FLOAT8E5M2": 23,
    "FLOAT8E4M3FN": 24,
    "FLOAT8E5M2FNUZ": 25,
    "FLOAT8E4M3FNUZ": 26,
    "UINT16": 27,
    "UINT32": 28,
    "UINT64": 29,
    "STRING": 100,
    "INT4": 101,
    "UINT4": 102,
    "FLOAT8E8M0": 103,
    "FLOAT4E2M1": 104,
    "INT2": 105,
    "UINT2": 106,
    "FLOAT6E2M3": 107,
    "FLOAT6E3M2": 108,
}
SCALAR_TYPE_NAMES = {code: name for name, code in SCALAR_TYPES.items()}


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


class ConstantData:
    """The constant segment being built: each added blob starts on an aligned offset."""

    def __init__(self, alignment: int = DEFAULT_CONSTANT_ALIGNMENT):
        if alignment < 1 or alignment & (alignment - 1):
            raise ValueError(f"constant alignment must be a power of two, got {alignment}")
        self.alignment = alignment
        self.offsets = [0]  # index 0 is reserved for non-constant tensors
        self._chunks: list[bytes] = []
        self._size = 0

    def add(self, data: bytes) -> int:
        """Append one constant's bytes; returns its data_buffer_idx."""
        start = _align(self._size, self.alignment)
        if start > self._size:
            self._chunks.append(b"\0" * (start - self._size))
        self._chunks.append(bytes(data))
        self._size = start + len(data)
        self.offsets.append(start)
        return len(self.offsets) - 1

    def payload(self) -> bytes:
        return b"".join(self._chunks)


def _header(program_size: int, segment_base: int, segment_data_size: int) -> bytes:
    return HEADER_MAGIC + struct.pack("<IQQQ", HEADER_LENGTH, program_size, segment_base, segment_data_size)


def serialize(
    program: ProgramT, segments: list[bytes], *, segment_alignment: int = DEFAULT_SEGMENT_ALIGNMENT
) -> bytes:
    """The bytes of a .pte file: ``program`` with ``segments`` appended after it.

    ``program.segments`` is filled in here (one DataSegment per payload, identical payloads
    stored once: callers refer to segments by the index of their payload in ``segments``,
    and duplicates resolve to the first copy's offset).
    """
    if segment_alignment < 1 or segment_alignment & (segment_alignment - 1):
        raise ValueError(f"segment alignment must be a power of two, got {segment_alignment}")
    placed: dict[bytes, int] = {}
    layout: list[tuple[int, bytes]] = []
    offset = 0
    program.segments = []
    for data in segments:
        data = bytes(data)
        if data not in placed:
            placed[data] = offset
            layout.append((offset, data))
            offset = _align(offset + len(data), segment_alignment)
        program.segments.append(_segment(placed[data], len(data)))
    builder = flatbuffers.Builder(1024)
    builder.Finish(program.Pack(builder), file_identifier=FILE_IDENTIFIER)
    flat = bytes(builder.Output())
    if not layout:
        return flat
    # The header goes right after the identifier; only the root offset (byte 0) points past it.
    root = struct.unpack_from("<I", flat, 0)[0]
    program_size = len(flat) + HEADER_LENGTH
    base = _align(program_size, segment_alignment)
    data_size = layout[-1][0] + len(layout[-1][1])
    out = bytearray(struct.pack("<I", root + HEADER_LENGTH) + flat[4:8])
    out += _header(program_size, base, data_size)
    out += flat[8:]
    out += b"\0" * (base - len(out))
    for seg_offset, data in layout:
        out += b"\0" * (base + seg_offset - len(out))
        out += data
    return bytes(out)


def _segment(offset: int, size: int) -> DataSegmentT:
    s = DataSegmentT()
    s.offset, s.size = offset, size
    return s


@dataclass
class ExtendedHeader:
    program_size: int
    segment_base_offset: int
    segment_data_size: int
    length: int = HEADER_LENGTH  # the header's own length field (≥ 32; later versions may grow it)


@dataclass
class PteFile:
    """A parsed .pte file: the program object tree and a view of each segment's bytes."""

    program: ProgramT
    header: ExtendedHeader | None
    segments: list[memoryview]

    def constant_bytes(self, index: int, size: int | None = None) -> memoryview:
        """Constant ``index``'s bytes: ``size`` of them, or up to the constant segment's end."""
        cs = self.program.constantSegment
        if cs is None or cs.offsets is None or not 0 < index < len(cs.offsets):
            raise ModelFormatError(f"constant index {index} is not in the constant segment")
        if not 0 <= cs.segmentIndex < len(self.segments):
            raise ModelFormatError(f"constant segment index {cs.segmentIndex} names no segment")
        seg = self.segments[cs.segmentIndex]
        start = int(cs.offsets[index])
        end = len(seg) if size is None else start + size
        if (size is not None and size < 0) or not start <= end <= len(seg):
            raise ModelFormatError(
                f"constant {index} [{start}, {end}) does not fit in its segment ({len(seg)} bytes)"
            )
        return seg[start:end]


def read_header(buffer) -> ExtendedHeader | None:
    """The eh00 header at byte 8, or None when the file has none."""
    if len(buffer) < 8 + HEADER_LENGTH or bytes(buffer[8:12]) != HEADER_MAGIC:
        return None
    length, program_size, base, data_size = struct.unpack_from("<IQQQ", buffer, 12)
    if length < HEADER_LENGTH:
        raise ModelFormatError(f"extended header says it is {length} bytes long; it must be at least 32")
    return ExtendedHeader(program_size, base, data_size, length)


def _check_header(h: ExtendedHeader, file_size: int) -> None:
    """The header's sizes must describe a program, then segment data, inside the file."""
    problems = [
        (h.program_size < 8 + h.length, f"program size {h.program_size} leaves no room for the header"),
        (
            h.program_size > file_size,
            f"program size {h.program_size} is past the end of the file ({file_size})",
        ),
        (
            h.segment_base_offset < h.program_size,
            f"segment base offset {h.segment_base_offset} is inside the program ({h.program_size} bytes)",
        ),
        (
            h.segment_base_offset + h.segment_data_size > file_size,
            f"segment data [{h.segment_base_offset}, +{h.segment_data_size}) is past the end ({file_size})",
        ),
    ]
    for bad, what in problems:
        if bad:
            raise ModelFormatError(f"extended header: {what}")


def _segments(program: ProgramT, header: ExtendedHeader | None, view: memoryview) -> list[memoryview]:
    listed = program.segments or []
    if listed and header is None:
        raise ModelFormatError("segments are listed but the file has no extended header")
    out = []
    for i, s in enumerate(listed):
        if s.offset + s.size > header.segment_data_size:
            raise ModelFormatError(
                f"segment {i} [{s.offset}, +{s.size}) is outside the segment data "
                f"({header.segment_data_size} bytes)"
            )
        start = header.segment_base_offset + s.offset
        out.append(view[start : start + s.size])
    return out


def _check_constants(program: ProgramT, segments: list[memoryview]) -> None:
    """Constant offsets must name a segment and start inside it (sizes are checked on use)."""
    cs = program.constantSegment
    if cs is None or cs.offsets is None or len(cs.offsets) < 2:
        return
    if not 0 <= cs.segmentIndex < len(segments):
        raise ModelFormatError(f"constant_segment.segment_index {cs.segmentIndex} names no segment")
    last = int(max(cs.offsets))
    if last > len(segments[cs.segmentIndex]):
        raise ModelFormatError(
            f"a constant starts at {last}, past its segment ({len(segments[cs.segmentIndex])} bytes)"
        )


def _unpack(data: bytes, origin: str) -> ProgramT:
    try:
        return ProgramT.InitFromObj(Program.GetRootAs(data, 0))
    # After verify() none of these can happen; if one does, it is still a bad file, not a crash.
    except (IndexError, ValueError, TypeError, OverflowError, struct.error) as e:
        raise ModelFormatError(f"{origin}: the verified program could not be read ({e!r})") from e


@contextmanager
def _from(origin: str):
    """Prefix the file's name to the ModelFormatErrors raised inside."""
    try:
        yield
    except ModelFormatError as e:
        raise ModelFormatError(f"{origin}: {e}") from None


def parse(buffer, origin: str = "<bytes>") -> PteFile:
    """Read a .pte file's bytes (bytes, mmap or memoryview) into a PteFile.

    Everything is checked before it is used: the identifier, the extended header, the whole
    flatbuffer (``verify``), the segment ranges and the constant offsets. A malformed file raises
    ModelFormatError naming ``origin``.
    """
    view = memoryview(buffer).cast("B")
    if len(view) < 8 or bytes(view[4:8]) != FILE_IDENTIFIER:
        raise ModelFormatError(f"{origin}: not a .pte file (no 'ET12' identifier at byte 4)")
    with _from(origin):
        header = read_header(view)
        if header is not None:
            _check_header(header, len(view))
    data = bytes(view[: header.program_size if header else len(view)])
    verify(data, origin, root_min=8 + header.length if header else 8)
    program = _unpack(data, origin)
    with _from(origin):
        segments = _segments(program, header, view)
        _check_constants(program, segments)
    return PteFile(program, header, segments)
