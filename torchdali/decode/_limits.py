"""Refusing images too large to decode, from their headers, before any pixel memory exists.

A decoder allocates its output from the size the header claims: a 2 KB JPEG whose
frame header says 65500 x 65500 makes libjpeg (and nvJPEG) reserve 12.9 GB before
reading a single coefficient. ``check_header`` reads the claimed size with the
cheap parsers of ``_jpeg_header`` (JPEG SOF) and ``_formats`` (PNG IHDR, GIF, BMP
and WebP headers; Pillow's lazy ``Image.open``, which reads the header only, for
TIFF and the rest) and refuses, before decoding:

- an image of more than ``max_pixels`` pixels (the DataLoader's
  ``max_image_pixels``, by default Pillow's ``Image.MAX_IMAGE_PIXELS``);
- a JPEG or PNG whose data is far too short for the size it claims (the bounds are
  explained at ``_jpeg_min_bytes`` and ``_png_min_bytes``). Such a file is never a
  valid image: it is a truncated file or a hand-edited header.
"""
from __future__ import annotations

import io
import re
import struct
import warnings
from typing import NamedTuple, Optional

import numpy as np
import torch

from ._errors import DecodeError
from ._formats import (
    FORMAT_BMP,
    FORMAT_GIF,
    FORMAT_JPEG,
    FORMAT_NAMES,
    FORMAT_PNG,
    FORMAT_UNKNOWN,
    FORMAT_WEBP,
    _other_dims,
    _sniff,
)
from ._jpeg_header import JpegInfo, _parse_jpeg

__all__ = ["ImageTooLarge", "ImplausibleHeader", "HeaderSize", "check_header", "default_max_image_pixels",
           "header_size"]

# Deflate codes at most 258 bytes with one length and one distance code of at
# least 1 bit each: no zlib stream expands more than 1032:1.
_DEFLATE_MAX_RATIO = 1032
# Both minimum sizes are divided by this before comparing, so a file has to be
# short by more than a factor of 2 below the floor to be refused.
_SLACK = 2

_PIL_BOMB = re.compile(r"\((\d+) pixels\)")


class ImageTooLarge(DecodeError):
    """The header claims more pixels than the limit allows."""


class ImplausibleHeader(DecodeError):
    """The header claims a size the file's data is far too short to hold."""


class HeaderSize(NamedTuple):
    """What a header says about an image's size (0 where unknown)."""

    format: int  # FORMAT_* code of _formats
    height: int
    width: int
    jpeg: Optional[JpegInfo]  # the parsed JPEG header; None for other formats or a corrupt one
    png_bits: int = 0  # PNG: bits per pixel (channels x bit depth)
    pixels_only: bool = False  # only the pixel count is known (in ``height``; ``width`` is 1)


def default_max_image_pixels() -> Optional[int]:
    """Pillow's ``Image.MAX_IMAGE_PIXELS`` as it is now (89,478,485 unless changed)."""
    from PIL import Image

    return Image.MAX_IMAGE_PIXELS


def _as_bytes_view(data) -> memoryview | bytes:
    if isinstance(data, torch.Tensor):
        return memoryview(data.contiguous().numpy())
    if isinstance(data, np.ndarray):
        return memoryview(np.ascontiguousarray(data))
    return data


# PNG colour type -> samples per pixel (palette: one index per pixel).
_PNG_SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def header_size(data) -> HeaderSize:
    """The size ``data``'s header claims. Never raises: an unreadable header gives zeros
    (the decoder then produces the precise error)."""
    b = _as_bytes_view(data)
    n = len(b)
    fmt = _sniff(b, 0, n)
    if fmt == FORMAT_JPEG:
        try:
            info = _parse_jpeg(b, 0, n)
        except (ValueError, struct.error, IndexError):
            return HeaderSize(fmt, 0, 0, None)
        return HeaderSize(fmt, info.height, info.width, info)
    if fmt in (FORMAT_PNG, FORMAT_GIF, FORMAT_BMP, FORMAT_WEBP):
        try:
            h, w, _ = _other_dims(fmt, b, 0, n)
        except (struct.error, IndexError):
            h = w = 0
        if h and w:
            bits = 0
            if fmt == FORMAT_PNG and n >= 26:
                bits = _PNG_SAMPLES.get(b[25], 0) * b[24]
            return HeaderSize(fmt, h, w, None, bits)
    return _pil_size(b, fmt)


def _pil_size(b, fmt: int) -> HeaderSize:
    """Size from Pillow's lazy open (reads the header only: TIFF, ICO, PPM, ...)."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(bytes(b))) as im:
                w, h = im.size
    except Image.DecompressionBombError as e:
        # Pillow refuses past twice its own limit before telling the size; keep its pixel count
        m = _PIL_BOMB.search(str(e))
        pixels = int(m.group(1)) if m else 0
        return HeaderSize(fmt, pixels, 1, None, pixels_only=True) if pixels else HeaderSize(fmt, 0, 0, None)
    except Exception:
        return HeaderSize(fmt, 0, 0, None)
    return HeaderSize(fmt, int(h), int(w), None)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _jpeg_min_bytes(info: JpegInfo) -> int:
    """Fewest bytes a Huffman-coded JPEG of this frame can have (0: no bound known).

    Every 8x8 block of every component is coded at least once, by a DC Huffman code
    of at least one bit (baseline and progressive alike; an AC end-of-band code comes
    on top in baseline). So the entropy-coded data holds at least one bit per block
    of the component with the fewest blocks. A flat image at quality 1 spends several
    times that (libjpeg's shortest DC and EOB codes are 2 bits), and ``_SLACK`` halves
    the floor again. Arithmetic coding can go below one bit per block: no bound.
    """
    if info.arithmetic or not info.sampling:
        return 0
    if any(h <= 0 or v <= 0 for h, v in info.sampling):
        return 0  # libjpeg rejects a zero sampling factor itself
    hmax = max(h for h, _ in info.sampling)
    vmax = max(v for _, v in info.sampling)
    blocks = min([_ceil_div(_ceil_div(info.width * h, hmax), 8) * _ceil_div(_ceil_div(info.height * v, vmax), 8)
                  for h, v in info.sampling])
    return blocks // 8 // _SLACK


def _png_min_bytes(height: int, width: int, bits: int) -> int:
    """Fewest bytes a PNG of this size can have (0: no bound known).

    The pixel rows are one zlib stream, which expands at most ``_DEFLATE_MAX_RATIO``
    times; an all-zero image compressed by zlib at level 9 reaches about 1030:1.
    """
    if bits <= 0:
        return 0
    return height * width * bits // 8 // _DEFLATE_MAX_RATIO // _SLACK


def check_header(header: HeaderSize, nbytes: int, max_pixels: Optional[int]) -> None:
    """Raise ``ImageTooLarge`` or ``ImplausibleHeader`` when the image must not be decoded."""
    h, w = header.height, header.width
    if h <= 0 or w <= 0:
        return
    name = FORMAT_NAMES[header.format] if header.format != FORMAT_UNKNOWN else "image"
    size = f"{h:,} pixels" if header.pixels_only else f"{h}x{w} pixels"
    if max_pixels is not None and h * w > max_pixels:
        raise ImageTooLarge(
            f"the {name} header claims {size}{'' if header.pixels_only else f' ({h * w:,})'}, more than max_image_pixels={max_pixels:,}; "
            f"pass a larger max_image_pixels (or None) to the DataLoader if such images are expected")
    if header.format == FORMAT_JPEG and header.jpeg is not None:
        need = _jpeg_min_bytes(header.jpeg)
    elif header.format == FORMAT_PNG:
        need = _png_min_bytes(h, w, header.png_bits)
    else:
        need = 0
    if nbytes < need:
        raise ImplausibleHeader(
            f"the {name} header claims {size}, but the file has only {nbytes:,} bytes and "
            f"no valid {name} of that size has fewer than {need * _SLACK:,}: a truncated file or a forged header")
