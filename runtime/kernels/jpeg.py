"""JPEG decoding for ImageDecoder: baseline, extended (8-bit) and progressive Huffman JPEGs.

The file's markers are read in order (quantization and Huffman tables, the frame header, the
restart interval, each scan, JFIF/Adobe colour hints); each scan's entropy-coded bytes are split
at its restart markers, unstuffed, and decoded into one array of quantized coefficients per
component (progressive scans refine that array in place: DC and AC first scans, DC and AC
successive-approximation refinements). The pixel stages then follow ``jpeg_pixels``, which
matches the integer arithmetic of the decoder Pillow links, so the result equals ONNX's
reference bit for bit.

Every size and count read from the file is bounded before use: a frame must declare at most
8 blocks per byte of the file (each block costs at least one bit of some scan), the scans
together at most ``_VISITS_PER_BYTE`` block visits per byte, table and component indices must
name tables the file defined, and a scan that runs out of bits, or a file without its
end-of-image marker, is an error (Pillow refuses a truncated file too). Bad data is a KernelError naming what is wrong; a JPEG feature outside the set above
(arithmetic coding, lossless, 12-bit samples, CMYK, hierarchical frames, unusual chroma
subsampling) is an UnsupportedOpError.
"""

from __future__ import annotations

import re
import struct
from array import array
from dataclasses import dataclass, field

import numpy as np

from offload.errors import KernelError

from . import jpeg_pixels
from ._util import check_result, unsupported

# ZIGZAG[k]: the natural (row-major) index of the k-th coefficient in zig-zag order.
ZIGZAG = [
    r * 8 + c
    for r, c in sorted(
        ((r, c) for r in range(8) for c in range(8)),
        key=lambda rc: (rc[0] + rc[1], rc[1] if (rc[0] + rc[1]) % 2 == 0 else rc[0]),
    )
]
_MAX_SCANS = 256
# Blocks all scans together may visit per byte of the file: a progressive scan skips up to
# 32767 blocks in one end-of-band run, so this bounds a hostile file's work by its size. Flat
# grey progressive files from Pillow (1024² and 2048², the cheapest per block) visit about 20.
_VISITS_PER_BYTE = 512
# After a scan's bytes, room for the bits one MCU may read past its end (10 blocks of at most
# 64 codes of 16 + 16 bits): the overrun is detected after the MCU and is an error.
_SLACK = 10 * 64 * 32 // 8 + 8
_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
_RESTART = re.compile(rb"\xff[\xd0-\xd7]")


def corrupt(what: str) -> KernelError:
    return KernelError(f"ImageDecoder: the JPEG stream is corrupt or truncated: {what}")


def _refuse(what: str):
    return unsupported("ImageDecoder", f"JPEG with {what}")


class _Bits:
    """An MSB-first bit reader over unstuffed scan bytes: a 24-bit window at every byte."""

    def __init__(self, data: bytes):
        b = np.frombuffer(data + b"\x00" * (_SLACK + 2), np.uint8).astype(np.uint32)
        self.w = ((b[:-2] << 16) | (b[1:-1] << 8) | b[2:]).tolist()
        self.p = 0

    def huff(self, look: list) -> int:
        p = self.p
        e = look[(self.w[p >> 3] >> (8 - (p & 7))) & 0xFFFF]
        if not e:
            raise corrupt(f"no Huffman code matches the bits at bit {p}")
        self.p = p + (e >> 8)
        return e & 0xFF

    def bits(self, s: int) -> int:
        p = self.p
        self.p = p + s
        return (self.w[p >> 3] >> (24 - (p & 7) - s)) & ((1 << s) - 1)

    def signed(self, s: int) -> int:
        """``s`` bits as JPEG's magnitude category value (EXTEND)."""
        if s == 0:
            return 0
        v = self.bits(s)
        return v if v >= 1 << (s - 1) else v - (1 << s) + 1


def _huffman_table(counts, symbols) -> list:
    """A 16-bit lookup: entry = code length << 8 | symbol, 0 where no code starts so."""
    look = np.zeros(1 << 16, np.int32)
    code = k = 0
    for length in range(1, 17):
        for _ in range(counts[length - 1]):
            if code >= 1 << length:
                raise corrupt("a Huffman table has more codes than its lengths allow")
            look[code << (16 - length) : (code + 1) << (16 - length)] = (length << 8) | symbols[k]
            code += 1
            k += 1
        code <<= 1
    return look.tolist()


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _wrap16(v: int) -> int:
    """A coefficient as the IJG decoder stores it (a 16-bit JCOEF): wrapped, never an overflow."""
    return ((v + 32768) & 0xFFFF) - 32768


@dataclass
class _Component:
    cid: int
    h: int
    v: int
    tq: int
    rows: int = 0  # block rows and columns stored (whole MCUs)
    cols: int = 0
    quant: np.ndarray | None = None  # natural order, latched at the component's first scan
    coefs: array | None = None  # rows * cols * 64 int32, natural order within a block


@dataclass
class _Frame:
    progressive: bool
    height: int
    width: int
    comps: list
    hmax: int
    vmax: int
    mcux: int
    mcuy: int


@dataclass
class _Stream:
    """What the markers read so far define."""

    size: int
    qt: dict = field(default_factory=dict)
    dc: dict = field(default_factory=dict)
    ac: dict = field(default_factory=dict)
    restart: int = 0
    frame: _Frame | None = None
    scans: int = 0
    visits: int = 0
    jfif: bool = False
    adobe: int | None = None


def _quant_tables(seg: bytes, st: _Stream) -> None:
    i = 0
    while i < len(seg):
        pq, tq = seg[i] >> 4, seg[i] & 15
        i += 1
        if pq > 1 or tq > 3:
            raise corrupt(f"quantization table {tq} of precision {pq}")
        size = 64 * (pq + 1)
        if i + size > len(seg):
            raise corrupt("a quantization table is cut short")
        table = np.zeros(64, np.int32)
        table[ZIGZAG] = np.frombuffer(seg, ">u2" if pq else np.uint8, 64, i)
        st.qt[tq] = table
        i += size


def _huffman_tables(seg: bytes, st: _Stream) -> None:
    i = 0
    while i < len(seg):
        tc, th = seg[i] >> 4, seg[i] & 15
        if tc > 1 or th > 3:
            raise corrupt(f"Huffman table class {tc} index {th}")
        counts = seg[i + 1 : i + 17]
        total = sum(counts)
        if len(counts) < 16 or total > 256 or i + 17 + total > len(seg):
            raise corrupt("a Huffman table is cut short or holds more than 256 codes")
        (st.ac if tc else st.dc)[th] = _huffman_table(counts, seg[i + 17 : i + 17 + total])
        i += 17 + total


_SOF_REFUSED = {0xC3: "lossless coding", 0xC5: "hierarchical frames", 0xC6: "hierarchical frames"}
_SOF_REFUSED.update({0xC7: "hierarchical frames", 0xCB: "lossless coding", 0xCF: "lossless coding"})
_SOF_REFUSED.update({m: "arithmetic coding" for m in (0xC9, 0xCA, 0xCC, 0xCD, 0xCE)})
# (hmax / h, vmax / v) of a component that the fancy upsampler (jpeg_pixels.upsample) handles.
_RATIOS = {(1, 1), (2, 1), (2, 2)}


def _frame(seg: bytes, marker: int, st: _Stream) -> _Frame:
    if st.frame is not None:
        raise corrupt("a second frame header")
    if len(seg) < 6:
        raise corrupt("the frame header is cut short")
    precision, height, width, nf = struct.unpack_from(">BHHB", seg)
    if precision != 8:
        raise _refuse(f"{precision}-bit samples (8-bit only)")
    if height == 0:
        raise _refuse("its height in a DNL marker")
    if nf not in (1, 3):
        raise _refuse(f"{nf} components (grey or three-component colour only)")
    if width == 0 or len(seg) < 6 + 3 * nf:
        raise corrupt("the frame header is cut short or has width 0")
    comps = []
    for k in range(nf):
        cid, hv, tq = seg[6 + 3 * k : 9 + 3 * k]
        h, v = (hv >> 4, hv & 15) if nf > 1 else (1, 1)  # one component: one block per MCU
        if not (1 <= h <= 4 and 1 <= v <= 4) or tq > 3 or any(c.cid == cid for c in comps):
            raise corrupt(f"component {cid}: sampling {hv >> 4}x{hv & 15}, table {tq}")
        comps.append(_Component(cid, h, v, tq))
    hmax, vmax = max(c.h for c in comps), max(c.v for c in comps)
    for c in comps:
        if hmax % c.h or vmax % c.v or (hmax // c.h, vmax // c.v) not in _RATIOS:
            raise _refuse(f"component sampling {c.h}x{c.v} of {hmax}x{vmax} (4:4:4, 4:2:2 and 4:2:0 only)")
    mcux, mcuy = _ceil(width, 8 * hmax), _ceil(height, 8 * vmax)
    blocks = sum(mcux * c.h * mcuy * c.v for c in comps)
    if blocks > 8 * st.size:  # every block costs at least one bit of the file
        raise corrupt(f"a {width}x{height} image cannot fit in {st.size} bytes")
    check_result((height, width, 3), np.uint8, "ImageDecoder")
    for c in comps:
        c.rows, c.cols = mcuy * c.v, mcux * c.h
        c.coefs = array("i", bytes(4 * c.rows * c.cols * 64))
    return _Frame(marker == 0xC2, height, width, comps, hmax, vmax, mcux, mcuy)


class _Scan:
    """One scan's parameters and running state (DC predictions, the EOB run, the bit reader)."""

    def __init__(self, comps, ss, se, ah, al, dc, ac):
        self.comps, self.ss, self.se, self.ah, self.al = comps, ss, se, ah, al
        self.dc, self.ac = dc, ac  # per component of the scan: lookup lists (or None)
        self.pred = [0] * len(comps)
        self.eobrun = 0
        self.bits: _Bits | None = None

    def _dc(self, co, base, i, al):
        s = self.bits.huff(self.dc[i])
        if s > 16:
            raise corrupt(f"DC magnitude category {s}")
        self.pred[i] += self.bits.signed(s)
        co[base] = _wrap16(self.pred[i] << al)

    def _ac(self, co, base, look, k, se, al) -> int | None:
        """Coefficients k..se of a block's first pass; the run field of the end-of-band code
        that stopped it, or None where the band ended by itself."""
        bits = self.bits
        while k <= se:
            rs = bits.huff(look)
            r, s = rs >> 4, rs & 15
            if s:
                k += r
                if k > 63:
                    raise corrupt("a block's coefficients run past the 64th")
                co[base + ZIGZAG[k]] = _wrap16(bits.signed(s) << al)
                k += 1
            elif r == 15:
                k += 16
            else:
                return r
        return None

    def sequential(self, co, base, i):
        self._dc(co, base, i, 0)
        self._ac(co, base, self.ac[i], 1, 63, 0)

    def dc_first(self, co, base, i):
        self._dc(co, base, i, self.al)

    def dc_refine(self, co, base, i):
        if self.bits.bits(1):
            co[base] |= 1 << self.al

    def ac_first(self, co, base, i):
        if self.eobrun:
            self.eobrun -= 1
            return
        r = self._ac(co, base, self.ac[i], self.ss, self.se, self.al)
        if r is not None:  # an end-of-band run over this block and the next (2^r - 1 + bits)
            self.eobrun = (1 << r) - 1 + (self.bits.bits(r) if r else 0)

    def _correct(self, co, z, p1):
        """A correction bit for an already nonzero coefficient: its magnitude grows by p1."""
        if self.bits.bits(1) and not co[z] & p1:
            co[z] += p1 if co[z] >= 0 else -p1

    def ac_refine(self, co, base, i):
        bits, look, k, se = self.bits, self.ac[i], self.ss, self.se
        p1 = 1 << self.al
        if not self.eobrun:
            while k <= se:
                rs = bits.huff(look)
                r, s = rs >> 4, rs & 15
                if s:  # a new coefficient of magnitude p1 (s is 1), after r zeros still zero
                    s = p1 if bits.bits(1) else -p1
                elif r != 15:
                    self.eobrun = (1 << r) + (bits.bits(r) if r else 0)
                    break
                while k <= se:
                    z = base + ZIGZAG[k]
                    if co[z]:
                        self._correct(co, z, p1)
                    else:
                        if r == 0:
                            break
                        r -= 1
                    k += 1
                if s and k <= se:
                    co[base + ZIGZAG[k]] = s
                k += 1
        if self.eobrun:
            for j in range(k, se + 1):
                z = base + ZIGZAG[j]
                if co[z]:
                    self._correct(co, z, p1)
            self.eobrun -= 1

    def block_fn(self, progressive: bool):
        if not progressive:
            return self.sequential
        if self.ss == 0:
            return self.dc_first if self.ah == 0 else self.dc_refine
        return self.ac_first if self.ah == 0 else self.ac_refine


def _scan(seg: bytes, st: _Stream) -> _Scan:
    fr = st.frame
    if fr is None:
        raise corrupt("a scan before the frame header")
    st.scans += 1
    if st.scans > (_MAX_SCANS if fr.progressive else len(fr.comps)):
        raise corrupt(f"{st.scans} scans, more than the frame can use")
    ns = seg[0] if seg else 0
    if not 1 <= ns <= 4 or len(seg) < 4 + 2 * ns:
        raise corrupt("the scan header is cut short")
    comps, dcs, acs = [], [], []
    for k in range(ns):
        cid, t = seg[1 + 2 * k], seg[2 + 2 * k]
        found = [c for c in fr.comps if c.cid == cid]
        if not found or found[0] in comps:
            raise corrupt(f"the scan names component {cid}, which the frame does not hold once")
        comps.append(found[0])
        dcs.append(t >> 4)
        acs.append(t & 15)
    ss, se, ahl = seg[1 + 2 * ns : 4 + 2 * ns]
    ah, al = ahl >> 4, ahl & 15
    if not fr.progressive:
        ss, se, ah, al = 0, 63, 0, 0
    elif ss > se or se > 63 or (ss == 0 and se != 0) or (ss > 0 and ns != 1) or al > 13 or ah > 13:
        raise corrupt(f"progressive scan parameters Ss={ss} Se={se} Ah={ah} Al={al} for {ns} components")
    if ns > 1 and sum(c.h * c.v for c in comps) > 10:
        raise corrupt("an MCU of more than 10 blocks")
    need_dc = not fr.progressive or (ss == 0 and ah == 0)
    need_ac = not fr.progressive or ss > 0
    for c, d, a in zip(comps, dcs, acs):
        if (need_dc and d not in st.dc) or (need_ac and a not in st.ac):
            raise corrupt(f"component {c.cid}'s scan uses a Huffman table the file never defines")
        if c.quant is None:
            if c.tq not in st.qt:
                raise corrupt(
                    f"component {c.cid} uses quantization table {c.tq}, which the file never defines"
                )
            c.quant = st.qt[c.tq]
    dc = [st.dc[d] if need_dc else None for d in dcs]
    ac = [st.ac[a] if need_ac else None for a in acs]
    return _Scan(comps, ss, se, ah, al, dc, ac)


def _units(fr: _Frame, comps: list) -> tuple[int, list]:
    """(MCU count, per MCU the (component index, block offset) of its blocks) for a scan."""
    if len(comps) == 1:
        c = comps[0]
        bw = _ceil(_ceil(fr.width * c.h, fr.hmax), 8)
        bh = _ceil(_ceil(fr.height * c.v, fr.vmax), 8)
        return bw * bh, [[(0, (by * c.cols + bx) * 64)] for by in range(bh) for bx in range(bw)]
    mcus = []
    for my in range(fr.mcuy):
        for mx in range(fr.mcux):
            mcus.append(
                [
                    (i, ((my * c.v + dv) * c.cols + mx * c.h + dh) * 64)
                    for i, c in enumerate(comps)
                    for dv in range(c.v)
                    for dh in range(c.h)
                ]
            )
    return len(mcus), mcus


def _decode_scan(sc: _Scan, raw: bytes, st: _Stream) -> None:
    fr = st.frame
    count, mcus = _units(fr, sc.comps)
    st.visits += sum(len(u) for u in mcus)
    if st.visits > _VISITS_PER_BYTE * st.size:
        raise corrupt(f"its scans visit more blocks than {st.size} bytes can describe")
    parts = _RESTART.split(raw) if st.restart else [raw]
    interval = st.restart or count
    intervals = _ceil(count, interval)
    if len(parts) < intervals:
        raise corrupt(f"the scan holds {len(parts)} restart intervals of the {intervals} its size needs")
    parts = [p.replace(b"\xff\x00", b"\xff") for p in parts[:intervals]]
    ends, total = [], 0
    for p in parts:
        total += len(p)
        ends.append(total * 8)
    bits = _Bits(b"".join(parts))
    sc.bits = bits
    block = sc.block_fn(fr.progressive)
    coefs = [c.coefs for c in sc.comps]
    start = 0
    for j in range(intervals):
        bits.p, end = start, ends[j]
        sc.pred = [0] * len(sc.comps)
        sc.eobrun = 0
        for units in mcus[j * interval : (j + 1) * interval]:
            for i, base in units:
                block(coefs[i], base, i)
            if bits.p > end:
                raise corrupt("the scan's data end inside a block")
        start = end


def _pixels(st: _Stream) -> np.ndarray:
    fr = st.frame
    planes = []
    for c in fr.comps:
        if c.quant is None:
            raise corrupt(f"component {c.cid} appears in no scan")
        co = np.frombuffer(c.coefs, np.int32).reshape(c.rows, c.cols, 64)
        ch, cw = _ceil(fr.height * c.v, fr.vmax), _ceil(fr.width * c.h, fr.hmax)
        step = 64  # block rows at a time: the transform's int64 temporaries stay small
        plane = np.concatenate(
            [
                jpeg_pixels.assemble(jpeg_pixels.idct_blocks(co[r : r + step], c.quant))
                for r in range(0, c.rows, step)
            ]
        )[:ch, :cw]
        planes.append(jpeg_pixels.upsample(plane, fr.hmax // c.h, fr.vmax // c.v)[: fr.height, : fr.width])
    if len(planes) == 1:
        return planes[0][..., None]
    if st.jfif:
        rgb = False
    elif st.adobe is not None:
        rgb = st.adobe == 0
    else:
        rgb = [c.cid for c in fr.comps] == [82, 71, 66]  # 'R', 'G', 'B'
    if rgb:
        return np.stack(planes, axis=-1)
    return jpeg_pixels.ycbcr_to_rgb(*planes)


def decode_jpeg(data: bytes) -> np.ndarray:
    """(H, W, 3) RGB or (H, W, 1) grey uint8 from a JPEG file's bytes."""
    st, pos, n = _Stream(len(data)), 2, len(data)
    while True:
        while pos < n and data[pos] != 0xFF:
            pos += 1  # bytes between segments are skipped, as decoders do
        while pos < n and data[pos] == 0xFF:
            pos += 1
        if pos >= n:  # Pillow, the reference, refuses such a file too ("image file is truncated")
            raise corrupt("the file ends before its end-of-image marker")
        marker = data[pos]
        pos += 1
        if marker == 0xD9:  # EOI
            break
        if 0xD0 <= marker <= 0xD7 or marker in (0x01, 0xD8):
            continue  # markers without a segment
        if pos + 2 > n:
            raise corrupt(f"marker 0x{marker:02X} at the end of the file")
        length = struct.unpack_from(">H", data, pos)[0]
        if length < 2 or pos + length > n:
            raise corrupt(f"marker 0x{marker:02X} declares {length} bytes, past the end of the file")
        seg = data[pos + 2 : pos + length]
        pos += length
        if marker == 0xDB:
            _quant_tables(seg, st)
        elif marker == 0xC4:
            _huffman_tables(seg, st)
        elif marker in (0xC0, 0xC1, 0xC2):
            st.frame = _frame(seg, marker, st)
        elif marker in _SOF_REFUSED:
            raise _refuse(_SOF_REFUSED[marker])
        elif marker == 0xDC:
            raise _refuse("a DNL marker")
        elif marker == 0xDD:
            if len(seg) < 2:
                raise corrupt("the restart interval segment is cut short")
            st.restart = struct.unpack_from(">H", seg)[0]
        elif marker == 0xE0 and seg[:5] == b"JFIF\x00":
            st.jfif = True
        elif marker == 0xEE and seg[:5] == b"Adobe" and len(seg) >= 12:
            st.adobe = seg[11]
        elif marker == 0xDA:
            sc = _scan(seg, st)
            m = _MARKER.search(data, pos)
            end = m.start() if m else n
            _decode_scan(sc, data[pos:end], st)
            pos = end
    if st.frame is None or not st.scans:
        raise corrupt("no frame or no scan")
    return _pixels(st)
