"""Functional forms, named and ordered like ``torchvision.transforms.v2.functional``.

Each function applies one operation with explicit parameters to one image (a
CHW or HWC uint8 tensor, numpy array or PIL image) and returns the result as a
CHW tensor, computed by torchdali's CPU reference kernel: the same arithmetic
the fused GPU kernel does for a pipeline with that step. As in the kernel's
output, the result has three channels (a grayscale image's channel repeated).
``normalize`` takes a float image, as torchvision's does, and applies the
kernel's epilogue arithmetic to it.

``resize`` and ``resized_crop`` take torchvision's ``interpolation`` (an
``InterpolationMode``, its string value, or PIL's 0/2/3) and compute what
``torchvision.transforms.v2.functional.resize`` computes on a uint8 tensor:

* bilinear: the triangle filter, widened by the scale when ``antialias`` and
  downscaling (torch's ``_upsample_bilinear2d_aa``), else plain bilinear
  (``align_corners=False``); computed in one float32 pass, so torchvision's CPU
  uint8 kernel (fixed-point weights, rounded between its two passes) is within 1;
* bicubic: the Keys cubic, ``a = -0.5`` with the support widened by the scale
  when ``antialias`` (``_upsample_bicubic2d_aa``), else ``a = -0.75`` over four
  border-clamped taps (``upsample_bicubic2d``); as torch's uint8 kernel, the
  horizontal pass is rounded and clamped to 0..255 before the vertical one, and
  the result is clamped and rounded (within 1 of torchvision's CPU result);
* nearest: source index ``floor(i * scale)``; nearest-exact: ``floor((i + 0.5) *
  scale)``, ``scale = in / out`` in float32 as torch; exact; ``antialias`` is ignored.

Lanczos, box and hamming raise ValueError.

The transform classes do not call these: they fold into one kernel launch per
batch. Use these to apply a step to a single image, or to check the classes
(``make_params`` followed by the matching functional gives the same pixels).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from . import _geometry as G
from csrc_triton import layout

from ._args import interpolation_code, setup_size
from ._reference import resample, to_hwc
from ._state import FLOAT_DTYPES

__all__ = [
    "center_crop", "crop", "horizontal_flip", "normalize", "resize", "resized_crop", "to_dtype",
    "vertical_flip",
]

_UNIT = (1.0, 1.0, 1.0)
_ZERO = (0.0, 0.0, 0.0)


def _run(image: Any, step: Callable[[G.BatchGeometry], None], *, antialias: bool = True,
         interpolation: int = layout.FILTER_BILINEAR, out_dtype: torch.dtype = torch.uint8,
         scale: Sequence[float] = _UNIT, bias: Sequence[float] = _ZERO) -> torch.Tensor:
    """Apply the geometry ``step`` to one image on the reference kernel; CHW result."""
    hwc = to_hwc(image)
    g = G.BatchGeometry.identity(np.array([hwc.shape[:2]]))
    step(g)
    out_size = (int(g.height[0]), int(g.width[0]))
    # quantize: a uint8 resize rounds the resampled value, as torchvision's does; on an
    # unresampled image the value is already an integer, so rounding changes nothing.
    return resample([hwc], g.to_params(), out_size, scale, bias, out_dtype=out_dtype,
                    antialias=antialias, quantize=True, interpolation=interpolation)[0]


def resize(image: Any, size: int | Sequence[int], interpolation: Any = "bilinear",
           max_size: int | None = None, antialias: bool | None = True) -> torch.Tensor:
    """Resize to ``size``: an int (or 1-element list) sets the shorter side, ``(h, w)`` the exact size.

    ``interpolation``: see the module docstring for what each mode computes.
    """
    code = interpolation_code(interpolation, "resize")
    size = setup_size(size, "resize")

    def step(g: G.BatchGeometry) -> None:
        G.resize(g, *G.resized_output_size(g.height, g.width, size, max_size), code)

    return _run(image, step, antialias=True if antialias is None else bool(antialias), interpolation=code)


def crop(image: Any, top: int, left: int, height: int, width: int) -> torch.Tensor:
    """The ``height x width`` box at ``(top, left)``; the part outside the image is zero."""
    return _run(image, lambda g: G.crop(g, top, left, height, width))


def center_crop(image: Any, output_size: int | Sequence[int]) -> torch.Tensor:
    """The central ``output_size`` box, padded with zeros where it is larger than the image."""
    size = setup_size(output_size, "center_crop")
    crop_h, crop_w = (size[0], size[0]) if len(size) == 1 else size

    def step(g: G.BatchGeometry) -> None:
        top, left = G.center_crop_box(g.height, g.width, crop_h, crop_w)
        G.crop(g, top, left, crop_h, crop_w)

    return _run(image, step)


def resized_crop(image: Any, top: int, left: int, height: int, width: int, size: Sequence[int],
                 interpolation: Any = "bilinear", antialias: bool | None = True) -> torch.Tensor:
    """Crop the box, then resize it to ``size`` (``(h, w)``; an int gives a square).

    ``interpolation``: see the module docstring for what each mode computes.
    """
    code = interpolation_code(interpolation, "resized_crop")
    size = setup_size(size, "resized_crop")
    out_h, out_w = (size[0], size[0]) if len(size) == 1 else size

    def step(g: G.BatchGeometry) -> None:
        G.crop(g, top, left, height, width)
        G.resize(g, out_h, out_w, code)

    return _run(image, step, antialias=True if antialias is None else bool(antialias), interpolation=code)


def horizontal_flip(image: Any) -> torch.Tensor:
    """Mirror left-right."""
    return _run(image, G.horizontal_flip)


def vertical_flip(image: Any) -> torch.Tensor:
    """Mirror top-bottom."""
    return _run(image, G.vertical_flip)


def to_dtype(image: Any, dtype: torch.dtype = torch.float32, scale: bool = False) -> torch.Tensor:
    """Convert a uint8 image to ``dtype``; ``scale=True`` maps [0, 255] to [0, 1] for a float dtype.

    float64 is computed in float32 (the kernel has no float64 output) and then cast.
    """
    if dtype == torch.uint8:
        return _run(image, lambda g: None)
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"to_dtype: unsupported dtype {dtype!r}; use uint8, float16, bfloat16, float32 or float64")
    factor = (1 / 255.0,) * 3 if scale else _UNIT
    kernel_dtype = torch.float32 if dtype == torch.float64 else dtype
    return _run(image, lambda g: None, out_dtype=kernel_dtype, scale=factor).to(dtype)


def normalize(image: torch.Tensor, mean: Sequence[float], std: Sequence[float],
              inplace: bool = False) -> torch.Tensor:
    """``(image - mean) / std`` per channel of a float ``[..., C, H, W]`` image.

    Computed as the kernel's epilogue does, ``image * (1 / std) + (-mean / std)`` in float32.
    """
    if not isinstance(image, torch.Tensor) or not image.is_floating_point():
        got = image.dtype if isinstance(image, torch.Tensor) else type(image).__name__
        raise TypeError(f"normalize: expected a float tensor image, got {got}; "
                        "convert it first with to_dtype(image, torch.float32, scale=True)")
    mean_t = torch.tensor([float(m) for m in mean], dtype=torch.float64)
    std_t = torch.tensor([float(v) for v in std], dtype=torch.float64)
    if (std_t == 0).any():
        raise ValueError(f"normalize: std evaluated to zero, leading to division by zero: {std_t.tolist()}")
    # the same fold as Normalize after an identity affine (scale 1, bias 0), rounded to float32
    scale_t = (1.0 / std_t).float()
    bias_t = ((0.0 - mean_t) / std_t).float()
    shape = (-1, 1, 1)
    out = torch.addcmul(bias_t.view(shape), image.float(), scale_t.view(shape)).to(image.dtype)
    if inplace:
        return image.copy_(out)
    return out
