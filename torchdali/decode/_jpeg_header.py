"""Cheap image header probing: format sniffing and JPEG header parsing.

This runs in the main process for every sample of every batch, so it only walks
marker segments by their length fields (``struct.unpack_from`` on the original
buffer, no copies) and stops at the first SOS marker; entropy-coded data is never
read.  Everything here is pure Python and CPU-only.
"""
from __future__ import annotations

import struct
from typing import NamedTuple, Optional, Tuple, Union

import numpy as np

try:  # torch is a hard dependency of the package, but keep this module importable alone
    import torch
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]

__all__ = [
    "JpegInfo",
    "ImageInfoBatch",
    "jpeg_info",
    "image_format",
    "image_info_batch",
    "FORMAT_UNKNOWN",
    "FORMAT_JPEG",
    "FORMAT_PNG",
    "FORMAT_GIF",
    "FORMAT_WEBP",
    "FORMAT_BMP",
    "FORMAT_TIFF",
    "FORMAT_NAMES",
    "FLAG_CORRUPT",
    "FLAG_PROGRESSIVE",
    "FLAG_LOSSLESS",
    "FLAG_ARITHMETIC",
    "FLAG_CMYK",
    "FLAG_YCCK",
    "FLAG_RGB_CODED",
    "FLAG_HIGH_PRECISION",
    "FLAG_RESTART",
    "FLAG_ORIENTED",
    "FLAG_GPU_UNSUITABLE",
]

Buffer = Union[bytes, bytearray, memoryview, np.ndarray, "torch.Tensor"]

# Format codes used by image_info_batch (index into FORMAT_NAMES).
FORMAT_UNKNOWN = 0
FORMAT_JPEG = 1
FORMAT_PNG = 2
FORMAT_GIF = 3
FORMAT_WEBP = 4
FORMAT_BMP = 5
FORMAT_TIFF = 6
FORMAT_NAMES: Tuple[str, ...] = ("unknown", "jpeg", "png", "gif", "webp", "bmp", "tiff")

# Bit flags reported per sample by image_info_batch.
FLAG_CORRUPT = 1 << 0  # header could not be parsed (JPEG: truncated/corrupt before SOF)
FLAG_PROGRESSIVE = 1 << 1  # JPEG SOF2/6/10/14
FLAG_LOSSLESS = 1 << 2  # JPEG SOF3/7/11/15
FLAG_ARITHMETIC = 1 << 3  # JPEG SOF9..15 (arithmetic entropy coding)
FLAG_CMYK = 1 << 4  # JPEG with 4 components (CMYK or YCCK)
FLAG_YCCK = 1 << 5  # Adobe APP14 transform 2 on a 4-component JPEG
FLAG_RGB_CODED = 1 << 6  # 3-component JPEG stored as RGB (Adobe transform 0 or ids 'R','G','B')
FLAG_HIGH_PRECISION = 1 << 7  # JPEG sample precision other than 8 bits
FLAG_RESTART = 1 << 8  # JPEG has a restart interval (DRI before the first SOS)
FLAG_ORIENTED = 1 << 9  # EXIF orientation present and not 1 (not applied by the decoders)
# JPEG features that nvJPEG either cannot decode or may decode with the wrong colours;
# such samples should go to the CPU decoder.
FLAG_GPU_UNSUITABLE = (
    FLAG_CORRUPT | FLAG_LOSSLESS | FLAG_ARITHMETIC | FLAG_CMYK | FLAG_RGB_CODED | FLAG_HIGH_PRECISION
)

_U16BE = struct.Struct(">H").unpack_from
_U16LE = struct.Struct("<H").unpack_from
_U32BE = struct.Struct(">I").unpack_from
_U32LE = struct.Struct("<I").unpack_from
_I32LE = struct.Struct("<i").unpack_from
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


class ImageInfoBatch(NamedTuple):
    """Per-sample header facts for a packed batch (all arrays int32, length N).

    ``height``/``width`` are 0 where unknown (corrupt header, TIFF, unknown format).
    ``ncomp`` is informational for non-JPEG formats.  ``orientation`` is the EXIF
    orientation (1..8) for JPEGs that carry one, else 0.
    """

    height: np.ndarray
    width: np.ndarray
    ncomp: np.ndarray
    format: np.ndarray
    flags: np.ndarray
    orientation: np.ndarray


def _as_buffer(buf: Buffer):
    """A zero-copy object that supports ``obj[i] -> int`` and the buffer protocol."""
    if isinstance(buf, (bytes, bytearray)):
        return buf
    if isinstance(buf, memoryview):
        if buf.format != "B" or buf.ndim != 1:
            buf = buf.cast("B")
        return buf
    if isinstance(buf, np.ndarray):
        if buf.dtype != np.uint8 or buf.ndim != 1:
            raise TypeError(f"expected a 1-D uint8 array, got dtype={buf.dtype} ndim={buf.ndim}")
        if not buf.flags.c_contiguous:
            buf = np.ascontiguousarray(buf)
        return memoryview(buf)
    if torch is not None and isinstance(buf, torch.Tensor):
        if buf.dtype != torch.uint8 or buf.dim() != 1:
            raise TypeError(f"expected a 1-D uint8 tensor, got dtype={buf.dtype} dim={buf.dim()}")
        if buf.device.type != "cpu":
            raise TypeError("header parsing needs the encoded bytes in host memory, got a "
                            f"tensor on {buf.device}")
        return memoryview(buf.contiguous().numpy())
    raise TypeError(f"unsupported buffer type {type(buf).__name__}")


def _sniff(b, start: int, end: int) -> int:
    """Format code from magic bytes of ``b[start:end]``."""
    n = end - start
    if n < 2:
        return FORMAT_UNKNOWN
    c0 = b[start]
    if c0 == 0xFF:
        if n >= 3 and b[start + 1] == 0xD8 and b[start + 2] == 0xFF:
            return FORMAT_JPEG
        return FORMAT_UNKNOWN
    head = bytes(b[start:min(end, start + 12)])
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return FORMAT_PNG
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return FORMAT_GIF
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return FORMAT_WEBP
    if head[:2] == b"BM":
        return FORMAT_BMP
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return FORMAT_TIFF
    return FORMAT_UNKNOWN


def image_format(buf: Buffer) -> str:
    """Name of the image format from magic bytes.

    One of "jpeg", "png", "webp", "gif", "bmp", "tiff" or "unknown".
    """
    b = _as_buffer(buf)
    return FORMAT_NAMES[_sniff(b, 0, len(b))]


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


def _jpeg_flags(info: JpegInfo) -> int:
    f = 0
    if info.progressive:
        f |= FLAG_PROGRESSIVE
    if info.lossless:
        f |= FLAG_LOSSLESS
    if info.arithmetic:
        f |= FLAG_ARITHMETIC
    if info.ncomp == 4:
        f |= FLAG_CMYK
        if info.adobe_transform == 2:
            f |= FLAG_YCCK
    elif info.is_rgb_coded:
        f |= FLAG_RGB_CODED
    if info.precision != 8:
        f |= FLAG_HIGH_PRECISION
    if info.restart_interval:
        f |= FLAG_RESTART
    if info.orientation is not None and info.orientation != 1:
        f |= FLAG_ORIENTED
    return f


# PNG colour type -> channels.
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}


def _other_dims(fmt: int, b, start: int, end: int) -> Tuple[int, int, int]:
    """(height, width, ncomp) from the fixed-position headers of PNG/GIF/BMP/WebP; zeros if unknown."""
    n = end - start
    if fmt == FORMAT_PNG:
        if n >= 26 and bytes(b[start + 12:start + 16]) == b"IHDR":
            return _U32BE(b, start + 20)[0], _U32BE(b, start + 16)[0], _PNG_CHANNELS.get(b[start + 25], 0)
    elif fmt == FORMAT_GIF:
        if n >= 10:
            return _U16LE(b, start + 8)[0], _U16LE(b, start + 6)[0], 3
    elif fmt == FORMAT_BMP:
        if n >= 30:
            hdr = _U32LE(b, start + 14)[0]
            if hdr == 12 and n >= 26:  # OS/2 BITMAPCOREHEADER
                return _U16LE(b, start + 20)[0], _U16LE(b, start + 18)[0], 3
            width = _I32LE(b, start + 18)[0]
            height = abs(_I32LE(b, start + 22)[0])  # negative: top-down rows
            bpp = _U16LE(b, start + 28)[0]
            return height, abs(width), 4 if bpp == 32 else 3
    elif fmt == FORMAT_WEBP:
        if n >= 30:
            chunk = bytes(b[start + 12:start + 16])
            if chunk == b"VP8 ":
                # frame tag (3) + start code 9d 01 2a, then 14-bit width/height
                if bytes(b[start + 23:start + 26]) == b"\x9d\x01\x2a":
                    w = _U16LE(b, start + 26)[0] & 0x3FFF
                    h = _U16LE(b, start + 28)[0] & 0x3FFF
                    return h, w, 3
            elif chunk == b"VP8L":
                if b[start + 20] == 0x2F:
                    bits = _U32LE(b, start + 21)[0]
                    w = (bits & 0x3FFF) + 1
                    h = ((bits >> 14) & 0x3FFF) + 1
                    return h, w, 4 if (bits >> 28) & 1 else 3
            elif chunk == b"VP8X":
                alpha = (b[start + 20] >> 4) & 1
                w = 1 + (b[start + 24] | (b[start + 25] << 8) | (b[start + 26] << 16))
                h = 1 + (b[start + 27] | (b[start + 28] << 8) | (b[start + 29] << 16))
                return h, w, 4 if alpha else 3
    return 0, 0, 0


def _as_index_list(x, name: str) -> list:
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise TypeError(f"{name} must be a 1-D integer array")
    return arr.astype(np.int64, copy=False).tolist()


def image_info_batch(buf: Buffer, offsets, lengths) -> ImageInfoBatch:
    """Probe every sample of a packed batch.

    ``buf`` is one packed host buffer (uint8 numpy array or CPU tensor, or bytes);
    sample ``i`` is ``buf[offsets[i]:offsets[i] + lengths[i]]``.  Never raises for a
    bad sample: corrupt JPEG headers get ``FLAG_CORRUPT`` and zero height/width,
    unknown formats get ``FORMAT_UNKNOWN``.
    """
    b = _as_buffer(buf)
    total = len(b)
    offs = _as_index_list(offsets, "offsets")
    lens = _as_index_list(lengths, "lengths")
    if len(offs) != len(lens):
        raise ValueError(f"offsets ({len(offs)}) and lengths ({len(lens)}) differ in length")
    n = len(offs)
    hs = [0] * n
    ws = [0] * n
    cs = [0] * n
    fs = [0] * n
    fl = [0] * n
    orient = [0] * n
    parse = _parse_jpeg
    sniff = _sniff
    for i in range(n):
        start = offs[i]
        end = start + lens[i]
        if start < 0 or lens[i] < 0 or end > total:
            raise ValueError(f"sample {i}: bytes [{start}, {end}) lie outside the buffer of {total} bytes")
        fmt = sniff(b, start, end)
        fs[i] = fmt
        if fmt == FORMAT_JPEG:
            try:
                info = parse(b, start, end)
            except ValueError:
                fl[i] = FLAG_CORRUPT
                continue
            hs[i] = info.height
            ws[i] = info.width
            cs[i] = info.ncomp
            fl[i] = _jpeg_flags(info)
            if info.orientation is not None:
                orient[i] = info.orientation
        elif fmt != FORMAT_UNKNOWN:
            try:
                hs[i], ws[i], cs[i] = _other_dims(fmt, b, start, end)
            except (struct.error, IndexError):
                pass
    i32 = np.int32
    return ImageInfoBatch(
        height=np.array(hs, dtype=i32),
        width=np.array(ws, dtype=i32),
        ncomp=np.array(cs, dtype=i32),
        format=np.array(fs, dtype=i32),
        flags=np.array(fl, dtype=i32),
        orientation=np.array(orient, dtype=i32),
    )


# Bytes that may follow 0xFF inside entropy-coded data; one table for this check
# and the batched GPU kernel (importing it compiles nothing).
from csrc_triton.scan_check import SCAN_OK as _SCAN_OK  # noqa: E402


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
