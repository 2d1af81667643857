"""ImageDecoder (runtime/kernels/image.py) against Pillow, the decoder of ONNX's reference
evaluator: images Pillow encodes in every layout offload decodes (BMP, PNM, PNG, TIFF), each
decoded as RGB, BGR and Grayscale, bit for bit; and the formats it does not decode, refused.
JPEG has its own tests in test_jpeg_decoder.py."""

from __future__ import annotations

import io

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from PIL import Image

import offload
from offload.errors import UnsupportedOpError

RNG = np.random.default_rng(20)
# odd sizes: BMP rows pad to 4 bytes, packed 1-bit rows to a byte, PNG's Adam7 passes are uneven
PIXELS = RNG.integers(0, 256, (13, 7, 4), dtype=np.uint8)


def _image(mode: str) -> Image.Image:
    if mode == "1":
        return Image.fromarray(PIXELS[..., 0] > 127)
    if mode == "P":
        return Image.fromarray(PIXELS[..., :3]).quantize(colors=200)
    if mode == "I;16":
        return Image.fromarray(PIXELS[..., 0].astype(np.uint16) * 257 + PIXELS[..., 1])
    rgba = Image.fromarray(PIXELS)
    return rgba if mode == "RGBA" else rgba.convert(mode)


# (format, Pillow mode, save options)
ENCODINGS = [
    ("BMP", "RGB", {}),
    ("BMP", "RGBA", {}),
    ("BMP", "P", {}),
    ("BMP", "L", {}),
    ("BMP", "1", {}),
    ("PPM", "RGB", {}),
    ("PPM", "L", {}),
    ("PPM", "1", {}),
    ("PNG", "RGB", {}),
    ("PNG", "RGBA", {}),
    ("PNG", "L", {}),
    ("PNG", "LA", {}),
    ("PNG", "P", {}),
    ("PNG", "1", {}),
    ("PNG", "I;16", {}),
    ("PNG", "RGB", {"optimize": True}),  # other filter choices
    ("TIFF", "RGB", {}),
    ("TIFF", "L", {}),
]


def _encoded(fmt, mode, options) -> np.ndarray:
    buf = io.BytesIO()
    _image(mode).save(buf, format=fmt, **options)
    return np.frombuffer(buf.getvalue(), np.uint8)


def _model(pixel_format: str) -> bytes:
    node = helper.make_node("ImageDecoder", ["x"], ["y"], pixel_format=pixel_format)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [None])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [None, None, None])],
    )
    m = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 20)])
    return m.SerializeToString()


def _reference(x: np.ndarray, mode: str, pixel_format: str) -> np.ndarray:
    """What ImageDecoder gives by its spec, through Pillow: RGB (H, W, 3) by Pillow's
    convert("RGB") (alpha dropped), BGR its channels reversed, Grayscale (H, W, 1) by Pillow's
    convert("L") (ITU-R 601-2 luma). ONNX's reference evaluator returns Pillow's array as the
    file holds it, which is (H, W, 3) only for RGB files: it is the reference for those."""
    img = Image.open(io.BytesIO(x.tobytes()))
    if mode == "I;16":  # Pillow clips 16-bit grey to 8 bits; a decoder scales it: v·255/65535
        grey = np.asarray(img).astype(np.int64)
        grey = ((grey * 255 + 32767) // 65535).astype(np.uint8)[..., None]
        return grey if pixel_format == "Grayscale" else np.repeat(grey, 3, axis=2)
    if pixel_format == "Grayscale":
        return np.asarray(img.convert("L"))[..., None]
    rgb = np.asarray(img.convert("RGB"))
    return rgb[..., ::-1] if pixel_format == "BGR" else rgb


@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
@pytest.mark.parametrize("fmt, mode, options", ENCODINGS, ids=lambda v: v if isinstance(v, str) else "")
def test_decodes_as_pillow(fmt, mode, options, pixel_format):
    data = _model(pixel_format)
    x = _encoded(fmt, mode, options)
    want = _reference(x, mode, pixel_format)
    if mode == "RGB":
        (evaluator,) = ReferenceEvaluator(data).run(None, {"x": x})
        np.testing.assert_array_equal(want, evaluator)
    got = offload.evaluate(offload.load(data), {"x": x})["y"]
    assert got.dtype == np.uint8 and got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


def test_an_interlaced_png():
    """Adam7: Pillow writes no interlaced PNG, so the seven passes are written here with zlib."""
    import struct
    import zlib

    h, w = PIXELS.shape[:2]
    rgb = PIXELS[..., :3]
    raw = b""
    for r0, c0, dr, dc in [
        (0, 0, 8, 8),
        (0, 4, 8, 8),
        (4, 0, 8, 4),
        (0, 2, 4, 4),
        (2, 0, 4, 2),
        (0, 1, 2, 2),
        (1, 0, 2, 1),
    ]:
        sub = rgb[r0::dr, c0::dc]
        if sub.size:
            raw += b"".join(b"\x00" + row.tobytes() for row in sub)

    def chunk(name, body):
        return struct.pack(">I", len(body)) + name + body + struct.pack(">I", zlib.crc32(name + body))

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1))
    png += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    x = np.frombuffer(png, np.uint8)
    got = offload.evaluate(offload.load(_model("RGB")), {"x": x})["y"]
    np.testing.assert_array_equal(got, rgb)
    np.testing.assert_array_equal(got, np.asarray(Image.open(io.BytesIO(png)).convert("RGB")))


@pytest.mark.parametrize("fmt", ["WEBP"])
def test_formats_that_need_a_codec_are_refused(fmt):
    x = _encoded(fmt, "RGB", {})
    with pytest.raises(UnsupportedOpError, match="offload decodes BMP, PNM, PNG, uncompressed TIFF and JPEG"):
        offload.evaluate(offload.load(_model("RGB")), {"x": x})
