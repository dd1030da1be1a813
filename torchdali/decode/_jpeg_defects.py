"""What libjpeg would refuse in a JPEG that nvJPEG might decode anyway: the loader's
workers send such a file to the CPU decoder, where libjpeg names the defect.

Two checks. :func:`scan_header` (and :func:`header_defect`, its verdict alone)
walks the tables and the first scan header. :func:`entropy_data_ok` reads the
entropy-coded data after the first SOS for a marker no scan can hold;
``csrc_triton/scan_check.py`` runs the same rule on a whole batch on the GPU.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

# Bytes that may follow 0xFF inside entropy-coded data; one table for this check
# and the batched GPU kernel (importing it compiles nothing).
from csrc_triton.scan_check import SCAN_OK as _SCAN_OK

from ._formats import Buffer
from ._jpeg_header import _SOF_MARKERS, _STANDALONE, scan_offset

__all__ = ["scan_header", "header_defect", "entropy_data_ok"]


def entropy_data_ok(buf: np.ndarray, start: Optional[int] = None) -> bool:
    """False when the data after the first SOS holds a marker no JPEG scan can hold.

    Random overwrites of compressed data almost always produce such a marker. The
    hardware decoder can run through them without an error; libjpeg stops with
    "Unsupported marker type". O(n) in numpy, no Huffman decoding, so it cannot
    catch corruption that keeps the marker structure intact.
    ``csrc_triton/scan_check.py`` runs the same check on a whole batch on the GPU.
    ``start``: where the entropy-coded data starts (``scan_offset``), when known.
    """
    b = np.asarray(buf, dtype=np.uint8).reshape(-1)
    if start is None:
        start = scan_offset(b)
    if start < 0:
        return True
    scan = b[start:]
    ff = np.flatnonzero(scan[:-1] == 0xFF)
    return bool(_SCAN_OK[scan[ff + 1]].all())


# DHT segments already checked, by their bytes: encoders without optimised tables write the
# same ones into every file, so most files skip the check
_DHT_SEEN: dict = {}
_DHT_SEEN_MAX = 1024


def _huffman_tables(b: memoryview, pos: int, end: int) -> Tuple[Optional[str], set]:
    """(the first defect libjpeg would refuse in the DHT body ``b[pos:end]``, or None;
    the (class, id) of the tables defined before it)."""
    defined = set()
    while pos < end:
        if pos + 17 > end:
            return "DHT segment cut inside a table", defined
        tc, th = int(b[pos]) >> 4, int(b[pos]) & 0x0F
        if tc > 1 or th > 3:
            return f"DHT table class {tc} id {th}", defined
        counts = b[pos + 1:pos + 17]
        total = sum(counts)
        if total > 256 or pos + 17 + total > end:
            return f"DHT table {tc}/{th} lists {total} symbols", defined
        code = 0
        for length in range(1, 17):  # canonical codes, none all ones (libjpeg: "Bogus Huffman table")
            code += int(counts[length - 1])
            if code >= 1 << length:
                return f"DHT table {tc}/{th} has more codes of {length} bits than fit", defined
            code <<= 1
        if tc == 0 and total and max(b[pos + 17:pos + 17 + total]) > 15:
            return f"DHT DC table {th} has a symbol over 15", defined
        defined.add((tc, th))
        pos += 17 + total
    return None, defined


def scan_header(buf: Buffer) -> Tuple[Optional[str], int]:
    """What makes the tables and scan header of a JPEG unfit for nvJPEG (None: nothing),
    and where its entropy-coded data starts (``scan_offset``; -1 with a defect).

    Walks every segment up to the first SOS: quantisation and Huffman tables must be
    well formed (libjpeg's checks: a complete canonical code, DC symbols up to 15), the
    frame's sampling factors 1 to 4 with defined quantisation tables, the first scan's
    components taken from the frame, once each, with defined Huffman tables, and its
    spectral selection valid for the frame's mode. libjpeg refuses or warns about each
    of these; nvJPEG's CUDA (hybrid) backend is not hardened against them, so the
    loader's workers decode such a file on the CPU, where libjpeg names the defect.
    Missing Huffman tables also send a file to the CPU: libjpeg falls back to the
    standard tables (Motion-JPEG), nvJPEG does not. The entropy-coded data is not read.
    """
    if isinstance(buf, (bytes, bytearray, memoryview)):
        buf = np.frombuffer(buf, dtype=np.uint8)
    if not (isinstance(buf, np.ndarray) and buf.dtype == np.uint8 and buf.ndim == 1 and buf.flags.c_contiguous):
        buf = np.ascontiguousarray(np.asarray(buf, dtype=np.uint8).reshape(-1))
    b = memoryview(buf)  # indexing a memoryview gives Python ints, several times faster than numpy's
    n = len(b)
    if n < 4 or b[0] != 0xFF or b[1] != 0xD8:
        return "no SOI marker", -1
    pos, quant, huff, frame = 2, set(), set(), None
    while pos + 4 <= n:
        if b[pos] != 0xFF:
            return f"junk at byte {pos} between segments", -1
        marker = int(b[pos + 1])
        if marker == 0xFF:
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        seglen = (int(b[pos + 2]) << 8) | int(b[pos + 3])
        body, seg_end = pos + 4, pos + 2 + seglen
        if seglen < 2 or seg_end > n:
            return f"segment 0xFF{marker:02X} at byte {pos} has length {seglen}", -1
        if marker == 0xDB:  # DQT
            q = body
            while q < seg_end:
                pq, tq = int(b[q]) >> 4, int(b[q]) & 0x0F
                size = 1 + 64 * (pq + 1)
                if pq > 1 or tq > 3 or q + size > seg_end:
                    return f"DQT table precision {pq} id {tq} at byte {q}", -1
                quant.add(tq)
                q += size
        elif marker == 0xC4:  # DHT
            key = bytes(b[body:seg_end])
            known = _DHT_SEEN.get(key)
            if known is None:
                known = _huffman_tables(b, body, seg_end)
                if len(_DHT_SEEN) >= _DHT_SEEN_MAX:
                    _DHT_SEEN.clear()
                _DHT_SEEN[key] = known
            defect, tables = known
            if defect:
                return defect, -1
            huff |= tables
        elif marker in _SOF_MARKERS:
            if frame is not None:
                return "a second frame header", -1
            ncomp = int(b[body + 5]) if body + 5 < seg_end else 0
            if ncomp == 0 or seglen != 8 + 3 * ncomp:
                return f"frame header for {ncomp} components is {seglen} bytes", -1
            comps, h, v = {}, [], []
            for c in range(body + 6, seg_end, 3):
                cid, hv, tq = int(b[c]), int(b[c + 1]), int(b[c + 2])
                if not (1 <= hv >> 4 <= 4 and 1 <= hv & 0x0F <= 4):
                    return f"component {cid} has sampling factors {hv >> 4}x{hv & 0x0F}", -1
                if tq > 3 or tq not in quant:
                    return f"component {cid} uses quantisation table {tq}, which is not defined", -1
                if cid in comps:
                    return f"component id {cid} appears twice in the frame header", -1
                comps[cid] = tq
                h.append(hv >> 4)
                v.append(hv & 0x0F)
            if any(max(h) % x for x in h) or any(max(v) % x for x in v):
                return f"sampling factors {list(zip(h, v))} are not whole ratios (libjpeg: fractional sampling)", -1
            if ncomp > 1 and sum(x * y for x, y in zip(h, v)) > 10:
                return f"sampling factors {list(zip(h, v))} exceed 10 blocks per MCU", -1
            frame = (marker, comps)
        elif marker == 0xDA:  # the first SOS
            if frame is None:
                return "scan before the frame header", -1
            ns = int(b[body]) if body < seg_end else 0
            if not 1 <= ns <= min(4, len(frame[1])) or seglen != 6 + 2 * ns:
                return f"scan header for {ns} components is {seglen} bytes", -1
            seen = set()
            ss, se, ah, al = int(b[body + 1 + 2 * ns]), int(b[body + 2 + 2 * ns]), \
                int(b[body + 3 + 2 * ns]) >> 4, int(b[body + 3 + 2 * ns]) & 0x0F
            progressive = frame[0] in (0xC2, 0xC6, 0xCA, 0xCE)
            for c in range(body + 1, body + 1 + 2 * ns, 2):
                cid, td, ta = int(b[c]), int(b[c + 1]) >> 4, int(b[c + 1]) & 0x0F
                if cid not in frame[1] or cid in seen:
                    return f"scan names component {cid}, not in the frame or twice", -1
                seen.add(cid)
                need_dc = ss == 0 and (not progressive or ah == 0)
                need_ac = se > 0 and (not progressive or ah == 0)
                if need_dc and (0, td) not in huff or need_ac and (1, ta) not in huff:
                    return f"scan uses Huffman tables DC {td} / AC {ta} of component {cid}, not defined", -1
            if not progressive:
                if (ss, se, ah, al) != (0, 63, 0, 0):
                    return f"sequential scan with spectral selection {ss}-{se}, approximation {ah}/{al}", -1
            elif se > 63 or ss > se or (ss == 0) != (se == 0) or ah > 13 or al > 13 or ss > 0 and ns != 1:
                return f"progressive scan with spectral selection {ss}-{se}, approximation {ah}/{al}", -1
            return None, seg_end
        pos = seg_end
    return "no scan header", -1


def header_defect(buf: Buffer) -> Optional[str]:
    """What makes the tables and scan header of a JPEG unfit for nvJPEG, or None
    (:func:`scan_header` without the scan offset)."""
    return scan_header(buf)[0]
