"""ImageDecoder: the formats that numpy and Python's zlib decode alone.

BMP (uncompressed, 1/4/8-bit paletted, 24- and 32-bit), PNM (P1-P6 with 8-bit samples), PNG
(every colour type at bit depth 8, palettes and grey at 1, 2 and 4 bits, Adam7 interlacing),
TIFF (uncompressed strips of 8-bit grey or RGB) and JPEG (baseline, extended and progressive
Huffman coding, 8-bit grey or colour: ``jpeg.py``, bit for bit what Pillow gives). JPEG 2000
and WebP need codecs beyond these and are refused with the reason. The result is uint8
(H, W, 3) in RGB or BGR order, or (H, W, 1) for Grayscale: ITU-R 601-2 luma,
(19595·R + 38470·G + 7471·B + 2^15) >> 16, as the ONNX reference (Pillow's convert("L"))
computes it.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from . import kernel
from ._util import unsupported
from .jpeg import decode_jpeg


@kernel("ImageDecoder")
def image_decoder(ctx, encoded_stream, *, pixel_format="RGB"):
    data = np.ascontiguousarray(encoded_stream, np.uint8).tobytes()
    rgb = _decode(data)  # (H, W, 3) or (H, W, 1) for grey images, uint8
    if pixel_format == "Grayscale":
        if rgb.shape[2] == 1:
            return rgb
        r, g, b = (rgb[..., k].astype(np.uint32) for k in range(3))
        return ((19595 * r + 38470 * g + 7471 * b + 0x8000) >> 16).astype(np.uint8)[..., None]
    if rgb.shape[2] == 1:
        rgb = np.repeat(rgb, 3, axis=2)
    if pixel_format == "BGR":
        return np.ascontiguousarray(rgb[..., ::-1])
    if pixel_format == "RGB":
        return rgb
    raise unsupported("ImageDecoder", f"pixel_format {pixel_format!r} (RGB, BGR or Grayscale)")


def _decode(data: bytes) -> np.ndarray:
    if data[:2] == b"BM":
        return _bmp(data)
    if data[:1] == b"P" and data[1:2] in b"123456":
        return _pnm(data)
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return _png(data)
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return _tiff(data)
    if data[:2] == b"\xff\xd8":
        return decode_jpeg(data)
    if data[:12] == b"\x00\x00\x00\x0cjP  \r\n\x87\n" or data[:4] == b"\xff\x4f\xff\x51":
        kind = "JPEG 2000"
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        kind = "WebP"
    else:
        kind = "an unknown format"
    raise unsupported("ImageDecoder", f"{kind} (offload decodes BMP, PNM, PNG, uncompressed TIFF and JPEG)")


def _bad(what: str):
    return unsupported("ImageDecoder", what)


# ---- BMP ------------------------------------------------------------------------------------------


def _bmp(data: bytes) -> np.ndarray:
    offset, header = struct.unpack_from("<I", data, 10)[0], struct.unpack_from("<I", data, 14)[0]
    if header == 12:  # OS/2 BITMAPCOREHEADER
        width, height, _, bits = struct.unpack_from("<HhHH", data, 18)
        compression, colors, entry = 0, 0, 3
    else:
        width, height, _, bits, compression = struct.unpack_from("<iiHHI", data, 18)
        colors, entry = struct.unpack_from("<I", data, 46)[0], 4
    if compression == 3 and bits in (16, 32):
        masks = struct.unpack_from("<III", data, 54)  # after a 40-byte header, or inside a longer one
    elif compression != 0:
        raise _bad(f"BMP compression {compression} (uncompressed BMPs only)")
    else:
        masks = None
    top_down, height = height < 0, abs(height)
    stride = (width * bits + 31) // 32 * 4
    rows = np.frombuffer(data, np.uint8, stride * height, offset).reshape(height, stride)
    if bits in (1, 4, 8):
        count = colors or 1 << bits
        table = np.frombuffer(data, np.uint8, count * entry, 14 + header).reshape(count, entry)[:, 2::-1]
        index = np.unpackbits(rows, axis=1) if bits == 1 else rows
        if bits == 4:
            index = np.stack([rows >> 4, rows & 15], axis=2).reshape(height, -1)
        rgb = table[index[:, :width]]
    elif bits == 24:
        rgb = rows[:, : width * 3].reshape(height, width, 3)[..., ::-1]
    elif bits == 32 and masks is None:
        rgb = rows.reshape(height, width, 4)[..., 2::-1]
    elif bits in (16, 32):
        px = rows[:, : width * bits // 8].copy().view("<u2" if bits == 16 else "<u4").astype(np.uint64)
        masks = masks if masks is not None else (0x7C00, 0x3E0, 0x1F)
        channels = []
        for m in masks:
            shift = (m & -m).bit_length() - 1
            top = (m >> shift) or 1
            channels.append(((px & m) >> shift) * 255 // top)
        rgb = np.stack(channels, axis=2).astype(np.uint8)
    else:
        raise _bad(f"BMP of {bits} bits per pixel")
    rgb = rgb if top_down else rgb[::-1]
    return np.ascontiguousarray(rgb, np.uint8)


# ---- PNM ------------------------------------------------------------------------------------------


def _pnm(data: bytes) -> np.ndarray:
    kind = data[1] - ord("0")
    fields, pos = [], 2
    need = 2 if kind in (1, 4) else 3
    while len(fields) < need:
        while data[pos : pos + 1].isspace():
            pos += 1
        if data[pos : pos + 1] == b"#":
            pos = data.index(b"\n", pos) + 1
            continue
        start = pos
        while pos < len(data) and not data[pos : pos + 1].isspace() and data[pos : pos + 1] != b"#":
            pos += 1
        fields.append(int(data[start:pos]))
    width, height = fields[:2]
    maxval = fields[2] if need == 3 else 1
    channels = 3 if kind in (3, 6) else 1
    if kind in (1, 2, 3):  # plain: whitespace-separated decimal samples
        text = b" ".join(line.split(b"#")[0] for line in data[pos:].splitlines())
        if kind == 1:
            text = b" ".join(bytes([c]) for c in text if c in b"01")
        values = np.array(text.split()[: width * height * channels], np.int64)
    elif kind == 4:
        stride = (width + 7) // 8
        bits = np.unpackbits(
            np.frombuffer(data, np.uint8, stride * height, pos + 1).reshape(height, stride), axis=1
        )
        values = bits[:, :width].astype(np.int64).reshape(-1)
    else:
        dtype = np.uint8 if maxval < 256 else np.dtype(">u2")
        values = np.frombuffer(data, dtype, width * height * channels, pos + 1).astype(np.int64)
    if kind in (1, 4):  # 1 is black
        values = (1 - values) * 255
    elif maxval != 255:
        values = (values * 255 + maxval // 2) // maxval
    return values.astype(np.uint8).reshape(height, width, channels)


# ---- PNG ------------------------------------------------------------------------------------------


def _png(data: bytes) -> np.ndarray:
    pos, idat, palette, alpha_table = 8, [], None, None
    while pos < len(data):
        length, name = struct.unpack_from(">I4s", data, pos)
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if name == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif name == b"PLTE":
            palette = np.frombuffer(body, np.uint8).reshape(-1, 3)
        elif name == b"tRNS":
            alpha_table = body
        elif name == b"IDAT":
            idat.append(body)
        elif name == b"IEND":
            break
    del alpha_table  # transparency does not change the colours ImageDecoder returns
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
    raw = zlib.decompress(b"".join(idat))
    if interlace:
        image = np.zeros((height, width, channels), np.uint16 if depth == 16 else np.uint8)
        # Adam7: (row start, column start, row step, column step) of the seven passes
        passes = [
            (0, 0, 8, 8),
            (0, 4, 8, 8),
            (4, 0, 8, 4),
            (0, 2, 4, 4),
            (2, 0, 4, 2),
            (0, 1, 2, 2),
            (1, 0, 2, 1),
        ]
        offset = 0
        for r0, c0, dr, dc in passes:
            h, w = (height - r0 + dr - 1) // dr, (width - c0 + dc - 1) // dc
            if h == 0 or w == 0:
                continue
            sub, offset = _png_rows(raw, offset, h, w, depth, channels)
            image[r0::dr, c0::dc] = sub
    else:
        image, _ = _png_rows(raw, 0, height, width, depth, channels)
    if depth == 16:
        image = (image.astype(np.uint32) * 255 + 32767) // 65535
    elif depth < 8 and color == 0:  # grey at 1, 2 or 4 bits, scaled to 0 .. 255
        image = image * (255 // ((1 << depth) - 1))
    if color == 3:
        return np.ascontiguousarray(palette[image[..., 0]])
    image = image.astype(np.uint8)
    if color in (4, 6):  # alpha dropped
        image = image[..., :-1]
    return np.ascontiguousarray(image)


def _png_rows(raw: bytes, offset: int, h: int, w: int, depth: int, channels: int):
    """Unfilter h scanlines of w pixels starting at ``offset``: the samples (h, w, channels) and
    the offset after them."""
    bits = depth * channels
    stride, bpp = (w * bits + 7) // 8, max(1, bits // 8)
    lines = np.frombuffer(raw, np.uint8, h * (stride + 1), offset).reshape(h, stride + 1)
    out = np.zeros((h, stride), np.uint8)
    prior = np.zeros(stride, np.int32)
    for y in range(h):
        kind, line = lines[y, 0], lines[y, 1:].astype(np.int32)
        if kind == 0:
            cur = line
        elif kind == 2:
            cur = (line + prior) & 255
        elif kind in (1, 3, 4):
            cur = line.copy()
            for x in range(stride):  # each byte depends on the one bpp before it
                a = cur[x - bpp] if x >= bpp else 0
                if kind == 1:
                    pred = a
                elif kind == 3:
                    pred = (a + prior[x]) >> 1
                else:
                    b, c = prior[x], prior[x - bpp] if x >= bpp else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                cur[x] = (cur[x] + pred) & 255
        else:
            raise _bad(f"PNG filter type {kind}")
        out[y], prior = cur, cur
    if depth == 16:
        samples = out.view(">u2").reshape(h, w, channels)
    elif depth == 8:
        samples = out.reshape(h, w, channels)
    else:
        unpacked = np.unpackbits(out, axis=1).reshape(h, -1, depth)
        weights = (1 << np.arange(depth - 1, -1, -1)).astype(np.uint8)
        samples = (unpacked * weights).sum(axis=2, dtype=np.uint8)[:, :w, None]
    return samples, offset + h * (stride + 1)


# ---- TIFF -----------------------------------------------------------------------------------------


def _tiff(data: bytes) -> np.ndarray:
    end = "<" if data[:2] == b"II" else ">"
    (ifd,) = struct.unpack_from(end + "I", data, 4)
    (count,) = struct.unpack_from(end + "H", data, ifd)
    sizes = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8}
    tags = {}
    for k in range(count):
        tag, typ, n = struct.unpack_from(end + "HHI", data, ifd + 2 + 12 * k)
        at = ifd + 2 + 12 * k + 8
        if sizes.get(typ, 1) * n > 4:
            (at,) = struct.unpack_from(end + "I", data, at)
        fmt = {1: "B", 3: "H", 4: "I"}.get(typ)
        tags[tag] = list(struct.unpack_from(end + fmt * n, data, at)) if fmt else []
    width, height = tags[256][0], tags[257][0]
    bits, compression = tags.get(258, [1])[0], tags.get(259, [1])[0]
    photometric, samples = tags.get(262, [2])[0], tags.get(277, [1])[0]
    if compression != 1 or bits != 8 or tags.get(284, [1])[0] != 1:
        raise _bad(
            f"TIFF with compression {compression}, {bits} bits or planar data (uncompressed 8 bits only)"
        )
    pixels = b"".join(data[o : o + n] for o, n in zip(tags[273], tags[279]))
    image = np.frombuffer(pixels, np.uint8, width * height * samples).reshape(height, width, samples)
    if photometric == 0:  # white is zero
        image = 255 - image
    if photometric in (0, 1):
        return np.ascontiguousarray(image[..., :1])
    if photometric != 2:
        raise _bad(f"TIFF photometric interpretation {photometric}")
    return np.ascontiguousarray(image[..., :3])
