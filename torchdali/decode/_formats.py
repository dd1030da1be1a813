"""Which image format a buffer holds, from its magic bytes, and the size that the
fixed-position headers of PNG, GIF, BMP and WebP state.

The bottom layer of header probing: ``_jpeg_header`` parses JPEG markers and
``_image_info`` probes a packed batch on top of it. Nothing here reads past the
first few dozen bytes of a sample or copies it (``struct.unpack_from`` on the
original buffer). Pure Python, CPU-only.
"""
from __future__ import annotations

import struct
from typing import Tuple, Union

import numpy as np

try:  # torch is a hard dependency of the package, but keep this module importable alone
    import torch
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]

__all__ = [
    "image_format",
    "FORMAT_UNKNOWN",
    "FORMAT_JPEG",
    "FORMAT_PNG",
    "FORMAT_GIF",
    "FORMAT_WEBP",
    "FORMAT_BMP",
    "FORMAT_TIFF",
    "FORMAT_NAMES",
]

#: The host buffers the header readers accept (1-D uint8 arrays and CPU tensors).
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

_U16LE = struct.Struct("<H").unpack_from
_U32BE = struct.Struct(">I").unpack_from
_U32LE = struct.Struct("<I").unpack_from
_I32LE = struct.Struct("<i").unpack_from


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
