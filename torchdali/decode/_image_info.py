"""Header facts for every sample of a packed batch: format, size, components and
JPEG feature flags (:func:`image_info_batch`), from ``_formats`` and ``_jpeg_header``.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np
import torch

from ._formats import FORMAT_JPEG, FORMAT_UNKNOWN, Buffer, _as_buffer, _other_dims, _sniff
from ._jpeg_header import JpegInfo, _parse_jpeg

__all__ = [
    "ImageInfoBatch",
    "image_info_batch",
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


def _as_index_list(x, name: str) -> list:
    if isinstance(x, torch.Tensor):
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
