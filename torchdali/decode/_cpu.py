"""CPU decoder: Pillow, for every format.

Decodes the samples nvJPEG cannot (or should not) take (CMYK/YCCK and lossless JPEGs,
non-JPEG formats, files whose header nvJPEG rejects) and every sample on the CPU path.

The RGB bytes are the ones ``torchvision.io.decode_image(mode=ImageReadMode.RGB)`` gives
(deprecated since torchvision 0.29), bit for bit: Pillow's JPEG decoder is libjpeg-turbo
with the same settings (ISLOW IDCT, fancy upsampling, no scaling: ``draft`` is never
used) and the same Adobe convention and formula for CMYK; EXIF orientation is left as
stored, as ``decode_image`` leaves it by default; 16-bit PNG keeps the high byte; alpha
is dropped, not composited.
"""
from __future__ import annotations

import io
import re
import struct
from typing import TYPE_CHECKING, Optional, Union

import numpy as np
import torch

from ._errors import DecodeError
from ._formats import (
    FORMAT_JPEG,
    FORMAT_NAMES,
    FORMAT_PNG,
    FORMAT_UNKNOWN,
    FORMAT_WEBP,
    _sniff,
)
from ._limits import check_header, header_size

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["DecodeError", "decode_cpu"]

# Pillow names the file object it was given ("cannot identify image file <_io.BytesIO ...>").
_FILE_OBJECT = re.compile(r"\s*<_io\.BytesIO object at 0x[0-9a-fA-F]+>")
_GRAY16 = frozenset(("I;16", "I;16B", "I;16L", "I;16N"))


def _clean(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return _FILE_OBJECT.sub("", msg)


def _to_bytes(data) -> bytes:
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8 or data.dim() != 1:
            raise TypeError(f"decode_cpu expects a 1-D uint8 tensor, got dtype={data.dtype} "
                            f"shape={tuple(data.shape)}")
        return data.cpu().contiguous().numpy().tobytes()
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 1:
            raise TypeError(f"decode_cpu expects a 1-D uint8 array, got dtype={data.dtype} "
                            f"shape={data.shape}")
        return np.ascontiguousarray(data).tobytes()
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"decode_cpu expects a 1-D uint8 tensor, got {type(data).__name__}")


def _open(b: bytes, fmt: int) -> "Image.Image":
    """Pillow's (lazy) image of ``b``.

    JPEG, PNG and WebP go straight to their Pillow plugins, past ``Image.open``'s
    decompression-bomb check (``Image.MAX_IMAGE_PIXELS``): for them the limit is
    ``decode_cpu``'s ``max_pixels``, so ``max_image_pixels=None`` or a limit above
    Pillow's still decodes them (but for a WebP over twice Pillow's limit, which its
    plugin refuses by itself). Other formats keep Pillow's check.
    """
    fp = io.BytesIO(b)
    if fmt == FORMAT_JPEG:
        from PIL.JpegImagePlugin import jpeg_factory

        return jpeg_factory(fp)  # an MPO file (camera JPEG with a second picture) opens as MPO
    if fmt == FORMAT_PNG:
        from PIL.PngImagePlugin import PngImageFile

        return PngImageFile(fp)
    if fmt == FORMAT_WEBP:
        from PIL.WebPImagePlugin import WebPImageFile

        return WebPImageFile(fp)
    from PIL import Image

    return Image.open(fp)


def _pil_rgb(b: bytes, fmt: int) -> torch.Tensor:
    with _open(b, fmt) as im:
        im.seek(0)  # animations (GIF, APNG, WebP) and MPO: the first picture only
        if im.mode in _GRAY16 or (fmt == FORMAT_PNG and im.mode == "I"):  # Pillow < 11 opens 16-bit grey as "I"
            # keep the high byte (convert("RGB") would clip instead)
            arr = (np.asarray(im, dtype=np.uint16) >> 8).astype(np.uint8)
            arr = np.repeat(arr[:, :, None], 3, axis=2)
        elif im.mode == "RGB":
            arr = np.array(im)  # a writable copy: torch.from_numpy needs one
        else:
            arr = np.array(im.convert("RGB"))
    return torch.from_numpy(arr)


# JPEG markers that stand alone (no length field): TEM, RST0-7.
_JPEG_STANDALONE = frozenset((0x01, *range(0xD0, 0xD8)))


def _jpeg_without_skipped_app_segments(b: bytes) -> Optional[bytes]:
    """``b`` without the APPn segments that do not change libjpeg's pixels, or None when it has none.

    libjpeg reads two APPn segments to decode: a JFIF APP0 (at least 14 bytes) and an
    Adobe APP14 (at least 12), which tell it how the colours are coded; it skips every
    other APPn, and these two when shorter. Pillow parses APPn segments itself before
    decoding (JFIF density, Adobe transform, ICC chunks) and refuses a file whose
    segment is cut short, which libjpeg decodes.
    """
    n = len(b)
    pos, kept, dropped = 2, [b[:2]], False
    while pos + 4 <= n and b[pos] == 0xFF:
        marker = b[pos + 1]
        if marker == 0xFF:  # fill byte
            kept.append(b[pos:pos + 1])
            pos += 1
            continue
        if marker in _JPEG_STANDALONE:
            kept.append(b[pos:pos + 2])
            pos += 2
            continue
        if marker == 0xDA:  # start of scan: the rest is entropy-coded data
            break
        end = pos + 2 + struct.unpack_from(">H", b, pos + 2)[0]
        payload = b[pos + 4:end]
        if 0xE0 <= marker <= 0xEF and not (
                (marker == 0xE0 and len(payload) >= 14 and payload[:5] == b"JFIF\0")
                or (marker == 0xEE and len(payload) >= 12 and payload[:5] == b"Adobe")):
            dropped = True
        else:
            kept.append(b[pos:end])
        pos = end
    if not dropped:
        return None
    kept.append(b[pos:])
    return b"".join(kept)


def _png_without_ancillary_chunks(b: bytes) -> Optional[bytes]:
    """``b`` without its ancillary chunks, or None when it has none.

    An RGB decode reads only the critical chunks (IHDR, PLTE, IDAT, IEND): libpng
    discards an ancillary chunk whose checksum is wrong and keeps decoding; Pillow
    refuses the file, and also one whose compressed text or ICC profile holds more
    than its limits (``PngImagePlugin.MAX_TEXT_CHUNK``).
    """
    n = len(b)
    pos, kept, dropped = 8, [b[:8]], False
    while pos + 12 <= n:
        length, kind = struct.unpack_from(">I4s", b, pos)
        end = pos + 12 + length
        if end > n:
            break
        if kind[0] & 0x20:  # lower-case first letter: ancillary
            dropped = True
        else:
            kept.append(b[pos:end])
        pos = end
        if kind == b"IEND":
            break
    if not dropped:
        return None
    kept.append(b[pos:])
    return b"".join(kept)


def decode_cpu(data: Union[torch.Tensor, np.ndarray, bytes, bytearray, memoryview],
               max_pixels: Optional[int] = None) -> torch.Tensor:
    """Decode one encoded image to a contiguous ``(H, W, 3)`` uint8 RGB tensor on the CPU.

    Pillow decodes every format: JPEG (including CMYK/YCCK, progressive and
    arithmetic-coded), PNG (16-bit reduced to its high byte, alpha dropped), WebP, GIF,
    BMP, TIFF and anything else it can open; of an animation, the first frame only.
    EXIF orientation is not applied. A JPEG or PNG that Pillow refuses for its metadata
    alone (a cut-short APPn segment, an ancillary PNG chunk with a bad checksum) is
    decoded without it, as libjpeg and libpng decode it. Raises DecodeError on failure.

    The header is read first: an image claiming a size its data is far too short for,
    or more than ``max_pixels`` pixels when given, is refused before anything is
    allocated (``_limits.check_header``). Pillow's own limit
    (``Image.MAX_IMAGE_PIXELS``) does not apply to JPEG, PNG and WebP.
    """
    b = _to_bytes(data)
    n = len(b)
    if n == 0:
        raise DecodeError("empty file")
    # Also without max_pixels: a forged header must not make Pillow allocate what it claims.
    check_header(header_size(b), n, max_pixels)
    fmt = _sniff(b, 0, n)
    try:
        return _pil_rgb(b, fmt)
    except Exception as exc:  # Pillow raises a zoo of types (OSError, SyntaxError, ValueError, ...)
        error = _clean(exc)
    if fmt == FORMAT_JPEG:
        bare = _jpeg_without_skipped_app_segments(b)
    elif fmt == FORMAT_PNG:
        bare = _png_without_ancillary_chunks(b)
    else:
        bare = None
    if bare is not None:
        try:
            return _pil_rgb(bare, fmt)
        except Exception:  # the first error names the file's own defect
            pass
    if fmt == FORMAT_UNKNOWN:
        head = b[:8].hex(" ")
        raise DecodeError(f"unrecognised image format ({n} bytes, starts with {head}): {error}")
    raise DecodeError(f"cannot decode {FORMAT_NAMES[fmt]} image ({n} bytes): {error}")
