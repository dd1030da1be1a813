"""JPEG header parsing: what the marker segments before the first scan say
(:class:`JpegInfo`), and what that header decides for nvJPEG.

The DataLoader's workers parse the header of every JPEG they read (through
``_limits.header_size``), so :func:`jpeg_info` walks marker segments by their
length fields only (``struct.unpack_from`` on the original buffer, no copies) and
stops at the first SOS marker. :func:`scan_offset` finds where the entropy-coded
data starts; it does not read that data (``_jpeg_defects`` does).
:func:`planar_chroma` and :func:`header_code` turn a parsed header into the codes
the GPU path routes a JPEG by. Pure Python, CPU-only.
"""
from __future__ import annotations

import struct
from typing import NamedTuple, Optional, Tuple

import numpy as np

from ._formats import Buffer, _as_buffer

__all__ = ["JpegInfo", "jpeg_info"]

_U16BE = struct.Struct(">H").unpack_from
_U16LE = struct.Struct("<H").unpack_from
_U32BE = struct.Struct(">I").unpack_from
_U32LE = struct.Struct("<I").unpack_from
_SOF_HEAD = struct.Struct(">HBHHB").unpack_from  # length, precision, height, width, ncomp

# Start-of-frame markers: C0-C3, C5-C7, C9-CB, CD-CF (C4 = DHT, C8 = JPG, CC = DAC).
_SOF_MARKERS = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))
# Markers that carry no length field.
_STANDALONE = frozenset((0x01, 0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8))

_SUBSAMPLING_NAMES = {
    (1, 1): "444",
    (2, 1): "422",
    (2, 2): "420",
    (1, 2): "440",
    (4, 1): "411",
    (4, 2): "410",
}


class JpegInfo(NamedTuple):
    """What a JPEG header says, up to the first start-of-scan marker."""

    height: int
    width: int
    ncomp: int
    #: (horizontal, vertical) sampling factor of each component, in frame order.
    sampling: Tuple[Tuple[int, int], ...]
    component_ids: Tuple[int, ...]
    #: bits per sample (8 for nearly every JPEG; 12/16 exist).
    precision: int
    #: the start-of-frame marker code, 0xC0 (baseline) .. 0xCF.
    sof: int
    progressive: bool
    lossless: bool
    arithmetic: bool
    #: Adobe APP14 colour transform (0: none, i.e. RGB or CMYK; 1: YCbCr; 2: YCCK),
    #: None without an Adobe marker.
    adobe_transform: Optional[int]
    #: restart interval in MCUs from a DRI marker before the first SOS, 0 if none.
    restart_interval: int
    #: EXIF orientation tag (1..8) if present in an APP1 Exif segment, else None.
    orientation: Optional[int]

    @property
    def num_components(self) -> int:
        """Alias of ``ncomp``."""
        return self.ncomp

    @property
    def subsampling(self) -> str:
        """Chroma subsampling: "444", "422", "420", "440", "411", "410", "gray" or "other"."""
        if self.ncomp == 1:
            return "gray"
        if self.ncomp not in (3, 4):
            return "other"
        h0, v0 = self.sampling[0]
        rest = set(self.sampling[1:])
        if len(rest) != 1:
            return "other"
        (hc, vc), = rest
        if hc == 0 or vc == 0 or h0 % hc or v0 % vc:
            return "other"
        return _SUBSAMPLING_NAMES.get((h0 // hc, v0 // vc), "other")

    @property
    def is_cmyk(self) -> bool:
        """Four components: CMYK, or YCCK when ``adobe_transform == 2``."""
        return self.ncomp == 4

    @property
    def is_ycck(self) -> bool:
        return self.ncomp == 4 and self.adobe_transform == 2

    @property
    def is_rgb_coded(self) -> bool:
        """Three components stored as RGB rather than YCbCr (as libjpeg decides it)."""
        if self.ncomp != 3:
            return False
        if self.adobe_transform is not None:
            return self.adobe_transform == 0
        return self.component_ids == (0x52, 0x47, 0x42)  # 'R', 'G', 'B'

    @property
    def baseline(self) -> bool:
        """Sequential Huffman 8-bit (SOF0 or SOF1), the kind the hardware decoder handles."""
        return self.sof in (0xC0, 0xC1) and self.precision == 8

    @property
    def has_restart_markers(self) -> bool:
        return self.restart_interval > 0


def _exif_orientation(b, pos: int, end: int) -> Optional[int]:
    """Orientation tag from an APP1 payload starting at ``pos`` ("Exif\\0\\0" + TIFF)."""
    tiff = pos + 6
    if end - tiff < 8:
        return None
    order = bytes(b[tiff:tiff + 2])
    if order == b"II":
        u16, u32 = _U16LE, _U32LE
    elif order == b"MM":
        u16, u32 = _U16BE, _U32BE
    else:
        return None
    if u16(b, tiff + 2)[0] != 42:
        return None
    ifd = tiff + u32(b, tiff + 4)[0]
    if ifd + 2 > end:
        return None
    count = u16(b, ifd)[0]
    entry = ifd + 2
    # Orientation lives in IFD0, which is short; cap the walk on hostile counts.
    for _ in range(min(count, 256)):
        if entry + 12 > end:
            return None
        if u16(b, entry)[0] == 0x0112:
            if u16(b, entry + 2)[0] != 3:  # SHORT
                return None
            value = u16(b, entry + 8)[0]
            return value if 1 <= value <= 8 else None
        entry += 12
    return None


def _parse_jpeg(b, start: int, end: int) -> JpegInfo:
    """Parse JPEG markers of ``b[start:end]`` (which must begin with SOI) up to SOS.

    Raises ValueError when the header is truncated or corrupt before the frame header.
    """
    u16 = _U16BE
    pos = start + 2
    sof_info = None
    adobe: Optional[int] = None
    restart = 0
    orientation: Optional[int] = None
    while True:
        if pos + 1 >= end:
            break
        if b[pos] != 0xFF:
            # libjpeg tolerates junk between segments ("extraneous bytes before marker");
            # resynchronise on the next 0xFF inside the header area only.
            nxt = bytes(b[pos:min(end, pos + 65536)]).find(b"\xff")
            if nxt < 0:
                break
            pos += nxt
            continue
        marker = b[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        if marker == 0xD9:  # EOI
            if sof_info is None:
                raise ValueError("corrupt JPEG: end-of-image marker before the frame header (SOF)")
            break
        if pos + 4 > end:
            break
        seglen = u16(b, pos + 2)[0]
        if seglen < 2:
            raise ValueError(f"corrupt JPEG: marker 0xFF{marker:02X} at byte {pos - start} "
                             f"has invalid length {seglen}")
        seg_end = pos + 2 + seglen
        if marker in _SOF_MARKERS:
            if sof_info is not None:
                raise ValueError("corrupt JPEG: more than one frame header (SOF)")
            if seg_end > end or seglen < 8:
                raise ValueError("truncated JPEG: frame header (SOF) cut off")
            _, precision, height, width, ncomp = _SOF_HEAD(b, pos + 2)
            if ncomp == 0 or seglen != 8 + 3 * ncomp:
                raise ValueError(f"corrupt JPEG: frame header declares {ncomp} components "
                                 f"but is {seglen} bytes long")
            if width == 0:
                raise ValueError("corrupt JPEG: frame width is 0")
            if height == 0:
                raise ValueError("unsupported JPEG: frame height is 0 (height defined by a DNL "
                                 "marker, which libjpeg does not support either)")
            ids = []
            sampling = []
            c = pos + 10
            for _ in range(ncomp):
                ids.append(b[c])
                hv = b[c + 1]
                sampling.append((hv >> 4, hv & 0x0F))
                c += 3
            sof_info = (marker, precision, height, width, ncomp, tuple(sampling), tuple(ids))
        elif marker == 0xDA:  # SOS: entropy-coded data follows; stop here
            if sof_info is None:
                raise ValueError("corrupt JPEG: start-of-scan marker before the frame header (SOF)")
            break
        elif marker == 0xDD:  # DRI
            if seg_end <= end and seglen >= 4:
                restart = u16(b, pos + 4)[0]
        elif marker == 0xEE:  # APP14, Adobe
            if seglen >= 14 and seg_end <= end and bytes(b[pos + 4:pos + 9]) == b"Adobe":
                adobe = b[pos + 15]
        elif marker == 0xE1 and orientation is None:  # APP1, maybe Exif
            if seglen >= 16 and pos + 10 <= end and bytes(b[pos + 4:pos + 10]) == b"Exif\x00\x00":
                orientation = _exif_orientation(b, pos + 4, min(seg_end, end))
        pos = seg_end
    if sof_info is None:
        raise ValueError(f"truncated JPEG: no frame header (SOF) in {end - start} bytes")
    sof, precision, height, width, ncomp, sampling, ids = sof_info
    return JpegInfo(
        height=height,
        width=width,
        ncomp=ncomp,
        sampling=sampling,
        component_ids=ids,
        precision=precision,
        sof=sof,
        progressive=sof in (0xC2, 0xC6, 0xCA, 0xCE),
        lossless=sof in (0xC3, 0xC7, 0xCB, 0xCF),
        arithmetic=sof >= 0xC9,
        adobe_transform=adobe,
        restart_interval=restart,
        orientation=orientation,
    )


def jpeg_info(buf: Buffer) -> Optional[JpegInfo]:
    """Parse the header of one encoded JPEG.

    Returns None when ``buf`` does not start with a JPEG SOI marker (not a JPEG).
    Raises ValueError, naming the reason, when it is a JPEG whose header is
    truncated or corrupt before the frame header (SOF).
    """
    b = _as_buffer(buf)
    n = len(b)
    if n < 2 or b[0] != 0xFF or b[1] != 0xD8:
        return None
    return _parse_jpeg(b, 0, n)


def scan_offset(buf: np.ndarray) -> int:
    """Offset of the first byte after the first SOS header (where entropy-coded data
    starts), or -1 when the segment walk finds none."""
    b = np.asarray(buf, dtype=np.uint8).reshape(-1)
    n = b.shape[0]
    pos = 2
    while pos + 4 <= n:
        if b[pos] != 0xFF:
            return -1  # junk in the header area: the header parser has ruled on it
        marker = int(b[pos + 1])
        if marker == 0xFF or 0xD0 <= marker <= 0xD8 or marker == 0x01:
            pos += 1 if marker == 0xFF else 2
            continue
        seglen = (int(b[pos + 2]) << 8) | int(b[pos + 3])
        if marker == 0xDA:
            return min(pos + 2 + seglen, n)
        pos += 2 + seglen
    return -1


def planar_chroma(info: JpegInfo) -> Optional[Tuple[str, int, int]]:
    """(subsampling, chroma height, chroma width) of a JPEG whose planar Y/Cb/Cr decode the
    fused kernel converts exactly as libjpeg-turbo does; None for the others.

    The planes are ``ceil(size * factor / max factor)`` as libjpeg sizes them ((0, 0) for
    grayscale). 4:1:1, 4:1:0 and unequal chroma planes are left out.
    """
    kind = info.subsampling
    if kind == "gray":
        return kind, 0, 0
    if info.ncomp != 3 or kind not in ("444", "422", "420", "440"):
        return None
    h_max = max(h for h, _ in info.sampling)
    v_max = max(v for _, v in info.sampling)
    hc, vc = info.sampling[1]
    ch = -(-info.height * vc // v_max)
    cw = -(-info.width * hc // h_max)
    return kind, ch, cw


def header_code(info: JpegInfo) -> int:
    """A code for what decides which nvJPEG backend takes a JPEG: SOF type, precision,
    components and their sampling, restart markers, and a coarse size class."""
    code = info.sof | (info.precision << 8) | (info.ncomp << 14)
    for k, (h, v) in enumerate(info.sampling[:4]):
        code |= ((h << 4) | v) << (17 + 8 * k)
    small = min(info.height, info.width) < 16
    large = max(info.height, info.width) > 4096
    return code | (int(info.restart_interval > 0) << 49) | (int(small) << 50) | (int(large) << 51)
