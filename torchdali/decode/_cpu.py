"""CPU fallback decoder: torchvision.io for JPEG/PNG/WebP, Pillow for the rest.

Used for samples nvJPEG cannot (or should not) decode: CMYK/YCCK and lossless JPEGs,
non-JPEG formats, files whose header nvJPEG rejects.
"""
from __future__ import annotations

import io
import re
from typing import Optional, Union

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

__all__ = ["DecodeError", "decode_cpu"]

# Formats torchvision.io.decode_image handles itself; anything else goes to Pillow.
# Not GIF: torchvision decodes every frame of an animation at the full canvas size
# (a small file of many tiny frames claims gigabytes the header check cannot see),
# Pillow decodes only the first frame, which is all that is kept.
_TORCHVISION_FORMATS = frozenset((FORMAT_JPEG, FORMAT_PNG, FORMAT_WEBP))
# torchvision prefixes C++ errors with "function, /path/to/file.cpp:LINE, ".
_CPP_LOCATION = re.compile(r"^.*?\.(?:cpp|h|cu):\d+,\s*")
# Pillow names the file object it was given ("cannot identify image file <_io.BytesIO ...>").
_FILE_OBJECT = re.compile(r"\s*<_io\.BytesIO object at 0x[0-9a-fA-F]+>")


def _clean(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return _FILE_OBJECT.sub("", _CPP_LOCATION.sub("", msg))


def _to_tensor(data) -> torch.Tensor:
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8 or data.dim() != 1:
            raise TypeError(f"decode_cpu expects a 1-D uint8 tensor, got dtype={data.dtype} "
                            f"shape={tuple(data.shape)}")
        if data.device.type != "cpu":
            data = data.cpu()
        return data.contiguous()
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 1:
            raise TypeError(f"decode_cpu expects a 1-D uint8 array, got dtype={data.dtype} "
                            f"shape={data.shape}")
        if not data.flags.writeable:  # torch warns on read-only arrays; a copy is cheap next to decoding
            data = np.array(data)
        return torch.from_numpy(np.ascontiguousarray(data))
    if isinstance(data, (bytes, bytearray, memoryview)):
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)
    raise TypeError(f"decode_cpu expects a 1-D uint8 tensor, got {type(data).__name__}")


def _torchvision_rgb(data: torch.Tensor) -> torch.Tensor:
    from torchvision.io import ImageReadMode, decode_image

    img = decode_image(data, mode=ImageReadMode.RGB)
    if img.dtype != torch.uint8:  # 16-bit PNG comes back as uint16
        img = (img.to(torch.int32) >> 8).to(torch.uint8)
    # decode_image returns a CHW view of HWC storage, so this is usually free.
    return img.permute(1, 2, 0).contiguous()


def _pil_rgb(data: torch.Tensor) -> torch.Tensor:
    from PIL import Image

    with Image.open(io.BytesIO(data.numpy().tobytes())) as im:
        im.seek(0)
        if im.mode in ("I;16", "I;16B", "I;16L", "I;16N"):
            # 16-bit grayscale: keep the high byte (convert("RGB") would clip instead).
            arr = (np.asarray(im, dtype=np.uint16) >> 8).astype(np.uint8)
            arr = np.repeat(arr[:, :, None], 3, axis=2)
        else:
            arr = np.array(im.convert("RGB"))  # writable copy: torch.from_numpy needs one
    return torch.from_numpy(np.ascontiguousarray(arr))


def decode_cpu(data: Union[torch.Tensor, np.ndarray, bytes, bytearray, memoryview],
               max_pixels: Optional[int] = None) -> torch.Tensor:
    """Decode one encoded image to a contiguous ``(H, W, 3)`` uint8 RGB tensor on the CPU.

    JPEG (including CMYK/YCCK and progressive), PNG (16-bit reduced to 8-bit, alpha
    dropped) and WebP go through ``torchvision.io.decode_image``; GIF (first frame
    only), BMP, TIFF and anything else Pillow can open go through Pillow, which is
    also the second chance for files torchvision rejects.  Raises DecodeError on failure.

    With ``max_pixels``, the header is read first and an image claiming more pixels
    (or a size its data is far too short for) is refused before anything is
    allocated (``_limits.check_header``).
    """
    t = _to_tensor(data)
    n = t.numel()
    if n == 0:
        raise DecodeError("empty file")
    if max_pixels is not None:
        check_header(header_size(t), n, max_pixels)
    fmt = _sniff(memoryview(t.numpy()), 0, n)
    tv_error = None
    if fmt in _TORCHVISION_FORMATS:
        try:
            return _torchvision_rgb(t)
        except Exception as exc:  # torchvision raises RuntimeError with the libjpeg/libpng reason
            tv_error = _clean(exc)
    try:
        return _pil_rgb(t)
    except Exception as exc:
        pil_error = _clean(exc)
    name = FORMAT_NAMES[fmt]
    if tv_error is not None:
        raise DecodeError(f"cannot decode {name} image ({n} bytes): {tv_error} (Pillow: {pil_error})")
    if fmt == FORMAT_UNKNOWN:
        head = t[:8].numpy().tobytes().hex(" ")
        raise DecodeError(f"unrecognised image format ({n} bytes, starts with {head}): {pil_error}")
    raise DecodeError(f"cannot decode {name} image ({n} bytes): {pil_error}")
