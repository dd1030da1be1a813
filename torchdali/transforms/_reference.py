"""The CPU reference execution: decoded images in the kernel's input format, and
the plain-torch twin of the fused kernel run on them.

The loader's CPU path, ``Transform.__call__`` and the functionals all end here.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from csrc_triton import layout, resized_crop_reference


def _from_numpy(array: np.ndarray) -> torch.Tensor:
    """``array`` as a contiguous tensor, sharing its memory where torch may.

    torch wants writable memory (it warns once per process otherwise). ``np.asarray`` of a
    PIL image is a read-only view of the bytes PIL copied out, and datasets return such
    arrays: those are copied here, once; a writable contiguous array is shared.
    """
    array = np.ascontiguousarray(array)  # a copy (writable) where it was not contiguous
    return torch.from_numpy(array if array.flags.writeable else array.copy())


def to_hwc(image: Any) -> torch.Tensor:
    """A decoded image as a contiguous HWC uint8 tensor with 1 or 3 channels.

    numpy arrays are taken as HWC (or HW); torch tensors as CHW when the first
    dimension is 1, 3 or 4 and the last is not, else HWC. An alpha channel is dropped.
    """
    if isinstance(image, np.ndarray):
        t = _from_numpy(image)
        if t.ndim == 2:
            t = t[:, :, None]
    elif isinstance(image, torch.Tensor):
        t = image
        if t.ndim == 2:
            t = t[:, :, None]
        elif t.ndim == 3 and t.shape[0] in (1, 3, 4) and t.shape[2] not in (1, 3, 4):
            t = t.permute(1, 2, 0)
    else:
        t = _from_numpy(np.asarray(image))  # PIL images and array-likes
        if t.ndim == 2:
            t = t[:, :, None]
    if t.dtype != torch.uint8:
        raise TypeError(f"decoded images must be uint8, got {t.dtype}")
    if t.ndim != 3 or t.shape[2] not in (1, 2, 3, 4):
        raise ValueError(f"decoded image has unsupported shape {tuple(image.shape)}")
    if t.shape[2] == 2:  # gray + alpha
        t = t[:, :, :1]
    elif t.shape[2] == 4:  # RGBA
        t = t[:, :, :3]
    return t.contiguous()


def pack_images(images: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pack HWC uint8 images back to back: (data, offsets[B], shapes[B, 3])."""
    shapes = torch.tensor([list(im.shape) for im in images], dtype=torch.int64).reshape(-1, 3)
    numel = shapes.prod(dim=1)
    offsets = torch.zeros(len(images), dtype=torch.int64)
    if len(images) > 1:
        offsets[1:] = torch.cumsum(numel, 0)[:-1]
    data = torch.cat([im.reshape(-1) for im in images]) if images else torch.empty(0, dtype=torch.uint8)
    return data, offsets, shapes


def resample(images: Sequence[torch.Tensor], params: torch.Tensor, out_size: tuple[int, int],
             scale: Sequence[float], bias: Sequence[float], *, out_dtype: torch.dtype,
             channels_last: bool = False, antialias: bool = True, quantize: bool = True,
             interpolation: int = layout.FILTER_BILINEAR, pad_mode: str = "none",
             fill: Sequence[float] | None = None) -> torch.Tensor:
    """Run the reference kernel on HWC uint8 images with per-sample ``params``.

    ``interpolation`` is a ``layout.FILTER_*`` code (``FILTER_PER_SAMPLE``: each
    sample's ``filter`` column); ``pad_mode`` and ``fill`` the kernel's padding
    (``layout.PAD_MODES``; ``fill`` for ``"constant"`` only).

    Returns ``[B, 3, *out_size]`` of ``out_dtype`` (a grayscale image comes back
    as three identical channels, as the kernel writes them).
    """
    data, offsets, shapes = pack_images(images)
    return resized_crop_reference(
        data, offsets, shapes, params, out_size, scale, bias,
        out_dtype=out_dtype, channels_last=channels_last, antialias=antialias, quantize=quantize,
        interpolation=interpolation, pad_mode=pad_mode, fill=fill,
    )
