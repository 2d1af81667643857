"""ImageDecoder's JPEG decoder (runtime/kernels/jpeg.py, jpeg_pixels.py) against Pillow, the
decoder of ONNX's reference evaluator, bit for bit: JPEGs Pillow encodes at odd and even sizes,
grey and colour, 4:4:4 / 4:2:2 / 4:2:0, several qualities, restart intervals, progressive; and
truncated, corrupt or hostile files, which fail with offload's errors and never hang."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from PIL import Image

import offload
from offload.errors import KernelError, OffloadError, UnsupportedOpError
from offload.runtime.kernels.jpeg import decode_jpeg
from tests.runtime.test_image_decoder import _model, _reference

RNG = np.random.default_rng(31)


def _picture(h: int, w: int) -> np.ndarray:
    """Smooth gradients plus noise: both flat and busy blocks, every chroma plane different."""
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack(
        [128 + 100 * np.sin(x / 7 + y / 11), 128 + 90 * np.cos(x / 5 - y / 9), (3 * x + 5 * y) % 256], -1
    )
    return np.clip(img + RNG.normal(0, 20, img.shape), 0, 255).astype(np.uint8)


def _jpeg(h: int, w: int, mode: str = "RGB", **options) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(_picture(h, w)).convert(mode).save(buf, format="JPEG", **options)
    return buf.getvalue()


def _pillow(data: bytes) -> np.ndarray:
    a = np.asarray(Image.open(io.BytesIO(data)))
    return a[..., None] if a.ndim == 2 else a


SIZES = [(1, 1), (2, 3), (8, 8), (7, 13), (16, 16), (17, 33), (61, 45), (100, 75)]
OPTIONS = [
    {"subsampling": 0},
    {"subsampling": 1},
    {"subsampling": 2},
    {"quality": 5},
    {"quality": 50, "subsampling": 1},
    {"quality": 100, "subsampling": 0},
    {"restart_marker_blocks": 1},
    {"restart_marker_rows": 1, "subsampling": 2},
    {"progressive": True},
    {"progressive": True, "subsampling": 1, "quality": 95},
    {"progressive": True, "subsampling": 0, "restart_marker_blocks": 3},
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("h,w", SIZES, ids=lambda v: str(v))
def test_decodes_as_pillow(h, w, mode, options):
    data = _jpeg(h, w, mode, **options)
    got = decode_jpeg(data)
    want = _pillow(data)
    assert got.dtype == np.uint8 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_the_file_holds_what_the_options_ask():
    """The encodings above really differ: progressive frames, restart markers, subsampling."""
    assert b"\xff\xc2" in _jpeg(16, 16, progressive=True) and b"\xff\xc2" not in _jpeg(16, 16)
    with_restarts = _jpeg(40, 40, restart_marker_blocks=1)
    assert b"\xff\xdd" in with_restarts and b"\xff\xd3" in with_restarts
    sampling = {s: Image.open(io.BytesIO(_jpeg(16, 16, subsampling=s))).layer[0][1:3] for s in (0, 1, 2)}
    assert sampling == {0: (1, 1), 1: (2, 1), 2: (2, 2)}


@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
def test_through_the_operator(pixel_format):
    """ImageDecoder on a JPEG, as ONNX's reference evaluator (Pillow) decodes it."""
    x = np.frombuffer(_jpeg(23, 19, subsampling=2), np.uint8)
    got = offload.evaluate(offload.load(_model(pixel_format)), {"x": x})["y"]
    np.testing.assert_array_equal(got, _reference(x, "RGB", pixel_format))


def test_rgb_without_colour_transform():
    """Components stored as R, G, B (Adobe transform 0): no YCbCr conversion."""
    data = _jpeg(12, 20, keep_rgb=True, subsampling=0)
    assert b"Adobe" in data
    np.testing.assert_array_equal(decode_jpeg(data), _pillow(data))


def test_a_large_image_decodes_in_reasonable_time():
    import time

    data = _jpeg(240, 320, progressive=True, quality=90)
    t = time.perf_counter()
    got = decode_jpeg(data)
    assert time.perf_counter() - t < 20
    np.testing.assert_array_equal(got, _pillow(data))


def _errors_only(data: bytes) -> None:
    """Decode; any failure must be one of offload's errors."""
    try:
        out = decode_jpeg(data)
    except OffloadError:
        return
    assert out.dtype == np.uint8 and out.ndim == 3


@pytest.mark.parametrize("options", [{}, {"progressive": True}, {"restart_marker_blocks": 2}])
def test_truncated_files_fail_with_an_offload_error(options):
    data = _jpeg(24, 40, **options)
    last_scan_byte = len(data) - 3  # the file ends with the scan's last byte, then EOI (FF D9)
    for cut in range(0, last_scan_byte, 7):
        with pytest.raises(OffloadError):
            decode_jpeg(data[:cut])
    with pytest.raises(KernelError, match="corrupt or truncated"):
        decode_jpeg(data[: len(data) - 40])


@pytest.mark.parametrize(
    "options", [{}, {"progressive": True}, {"subsampling": 0, "restart_marker_blocks": 1}]
)
def test_corrupt_bytes_never_crash(options):
    data = bytearray(_jpeg(24, 40, **options))
    rng = np.random.default_rng(5)
    for _ in range(150):
        bad = bytearray(data)
        for i in rng.integers(2, len(bad), 3):
            bad[i] = int(rng.integers(0, 256))
        _errors_only(bytes(bad))


def _segments(data: bytes) -> list[tuple[int, int, int]]:
    """(marker, offset of its length field, length) of each segment before the first scan."""
    out, pos = [], 2
    while data[pos + 1] != 0xDA:
        marker, length = data[pos + 1], struct.unpack_from(">H", data, pos + 2)[0]
        out.append((marker, pos + 2, length))
        pos += 2 + length
    return out


def _patched(data: bytes, marker: int, at: int, value: bytes) -> bytes:
    (_, off, _), *_ = [s for s in _segments(data) if s[0] == marker]
    return data[: off + at] + value + data[off + at + len(value) :]


def test_a_huge_declared_size_in_a_small_file_is_refused_before_allocating():
    data = _jpeg(16, 16)
    huge = _patched(data, 0xC0, 3, struct.pack(">HH", 65000, 65000))  # height, width
    with pytest.raises(KernelError, match="cannot fit"):
        decode_jpeg(huge)


def test_an_overfull_huffman_table_is_refused():
    data = _jpeg(16, 16)
    # The first table's 16 code counts: two codes of length 1 and one more is one too many.
    bad = _patched(data, 0xC4, 3, bytes([2, 1]))
    with pytest.raises(KernelError):
        decode_jpeg(bad)


@pytest.mark.parametrize(
    "marker,what", [(0xC9, "arithmetic coding"), (0xC3, "lossless coding"), (0xC5, "hierarchical")]
)
def test_other_jpeg_processes_are_refused(marker, what):
    data = bytearray(_jpeg(16, 16))
    (_, off, _), *_ = [s for s in _segments(bytes(data)) if s[0] == 0xC0]
    data[off - 1] = marker
    with pytest.raises(UnsupportedOpError, match=what):
        decode_jpeg(bytes(data))


def test_twelve_bit_samples_and_cmyk_are_refused():
    data = _jpeg(16, 16)
    with pytest.raises(UnsupportedOpError, match="12-bit"):
        decode_jpeg(_patched(data, 0xC0, 2, bytes([12])))
    buf = io.BytesIO()
    Image.fromarray(_picture(16, 16)).convert("CMYK").save(buf, format="JPEG")
    with pytest.raises(UnsupportedOpError, match="4 components"):
        decode_jpeg(buf.getvalue())
