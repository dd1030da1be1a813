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

The photometric ops and the warps (``adjust_*``, ``autocontrast`` ...
``perspective``) run the augment program's reference op (``csrc_triton/augment.py``)
on the uint8 image, exactly as a pipeline's program slot does, with the arguments
in float32 as a slot holds them (a factor float32 cannot hold, such as 1.8, can
then differ from torchvision's double arithmetic by one level in a few pixels;
the classes draw float32 factors, as torchvision's ``uniform_`` does). ``erase``
runs the finishing pass's erase on a uint8 image (a float image is written directly).

The transform classes do not call these: they fold into a few kernel launches per
batch. Use these to apply a step to a single image, or to check the classes
(``make_params`` followed by the matching functional gives the same pixels).
"""
from __future__ import annotations

import numbers
from typing import Any, Callable, Sequence

import numpy as np
import torch
from csrc_triton import layout

from . import _geometry as G
from ._args import interpolation_code, setup_size
from ._execute import REFERENCE
from ._program import fill_values, put_op, warp_filter
from ._reference import resample, to_hwc
from ._state import FLOAT_DTYPES
from ._transforms import image_fill, padding_route
from ._warp import inverse_affine_matrix, perspective_coefficients

__all__ = [
    "adjust_brightness", "adjust_contrast", "adjust_hue", "adjust_saturation", "adjust_sharpness", "affine",
    "autocontrast", "center_crop", "crop", "equalize", "erase", "gaussian_blur", "horizontal_flip", "invert",
    "normalize", "pad", "perspective", "posterize", "resize", "resized_crop", "rgb_to_grayscale", "rotate",
    "solarize", "to_dtype", "vertical_flip",
]

_UNIT = (1.0, 1.0, 1.0)
_ZERO = (0.0, 0.0, 0.0)


def _run(image: Any, step: Callable[[G.BatchGeometry], None], *, antialias: bool = True,
         interpolation: int = layout.FILTER_BILINEAR, out_dtype: torch.dtype = torch.uint8,
         scale: Sequence[float] = _UNIT, bias: Sequence[float] = _ZERO, pad_mode: str = "none",
         fill: Sequence[float] | None = None) -> torch.Tensor:
    """Apply the geometry ``step`` to one image on the reference kernel; CHW result."""
    hwc = to_hwc(image)
    g = G.BatchGeometry.identity(np.array([hwc.shape[:2]]))
    step(g)
    out_size = (int(g.height[0]), int(g.width[0]))
    # quantize: a uint8 resize rounds the resampled value, as torchvision's does; on an
    # unresampled image the value is already an integer, so rounding changes nothing.
    return resample([hwc], g.to_params(), out_size, scale, bias, out_dtype=out_dtype,
                    antialias=antialias, quantize=True, interpolation=interpolation, pad_mode=pad_mode,
                    fill=fill)[0]


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


def pad(image: Any, padding: int | Sequence[int], fill: Any = None, padding_mode: str = "constant") -> torch.Tensor:
    """Pad: ``padding`` is an int for every side, ``(left/right, top/bottom)`` or
    ``(left, top, right, bottom)``; negative values crop. ``fill`` (a number or 3,
    None is 0, as torchvision; truncated into the uint8 image) for
    ``padding_mode="constant"``; ``"edge"``, ``"reflect"`` and ``"symmetric"`` as
    torchvision's ``pad`` (reflect padding must be smaller than the image, symmetric
    at most its size).
    """
    left, top, right, bottom = G.parse_padding(padding, "pad")
    mode = padding_route("pad", fill, padding_mode)
    values = image_fill(fill, "pad")
    if mode == "constant" and any(not 0.0 <= v < 256.0 for v in values):
        raise ValueError(f"pad: fill={fill!r} does not fit a uint8 image (0..255)")

    def step(g: G.BatchGeometry) -> None:
        if g.height[0] + top + bottom <= 0 or g.width[0] + left + right <= 0:
            raise ValueError(f"pad: padding {padding} leaves no pixels of a {int(g.height[0])}x{int(g.width[0])} image")
        G.pad(g, left, top, right, bottom, mode)

    if mode is None:
        return _run(image, step)
    return _run(image, step, pad_mode=mode, fill=[float(int(v)) for v in values] if mode == "constant" else None)


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


# --------------------------------------------------------------------------- #
# Program ops: one slot of the augment program on one image
# --------------------------------------------------------------------------- #


def _rgb(image: Any) -> torch.Tensor:
    """One image as a ``[3, H, W]`` uint8 tensor (a grayscale channel repeated)."""
    hwc = to_hwc(image)
    return hwc.permute(2, 0, 1).expand(3, -1, -1).contiguous()


def _op(image: Any, name: str, *, interp: int | None = None, fill: Sequence[float] | None = None,
        **args: Any) -> torch.Tensor:
    """Run the program op ``name`` with ``args`` on one image (reference backend); CHW uint8."""
    slot = np.zeros((1, layout.SLOT_WIDTH), dtype=np.float32)
    put_op(slot, name, interp=interp, fill=fill, **args)
    return REFERENCE.fn("augment_slot")(_rgb(image)[None], torch.from_numpy(slot))[0]


def adjust_brightness(image: Any, brightness_factor: float) -> torch.Tensor:
    """Scale the pixel values by ``brightness_factor`` (>= 0)."""
    if brightness_factor < 0:
        raise ValueError(f"brightness_factor ({brightness_factor}) is not non-negative")
    return _op(image, "brightness", factor=brightness_factor)


def adjust_contrast(image: Any, contrast_factor: float) -> torch.Tensor:
    """Blend with the mean of the grayscale image by ``contrast_factor`` (>= 0)."""
    if contrast_factor < 0:
        raise ValueError(f"contrast_factor ({contrast_factor}) is not non-negative")
    return _op(image, "contrast", factor=contrast_factor)


def adjust_saturation(image: Any, saturation_factor: float) -> torch.Tensor:
    """Blend with the grayscale image by ``saturation_factor`` (>= 0)."""
    if saturation_factor < 0:
        raise ValueError(f"saturation_factor ({saturation_factor}) is not non-negative")
    return _op(image, "saturation", factor=saturation_factor)


def adjust_hue(image: Any, hue_factor: float) -> torch.Tensor:
    """Shift the hue by ``hue_factor`` turns (in [-0.5, 0.5])."""
    if not -0.5 <= hue_factor <= 0.5:
        raise ValueError(f"hue_factor ({hue_factor}) is not in [-0.5, 0.5]")
    return _op(image, "hue", factor=hue_factor)


def adjust_sharpness(image: Any, sharpness_factor: float) -> torch.Tensor:
    """Blend with the 3x3-smoothed image (border kept) by ``sharpness_factor`` (>= 0)."""
    if sharpness_factor < 0:
        raise ValueError(f"sharpness_factor ({sharpness_factor}) is not non-negative")
    return _op(image, "sharpness", factor=sharpness_factor)


def autocontrast(image: Any) -> torch.Tensor:
    """Stretch each channel's range to [0, 255]."""
    return _op(image, "autocontrast")


def equalize(image: Any) -> torch.Tensor:
    """Equalize each channel's histogram."""
    return _op(image, "equalize")


def invert(image: Any) -> torch.Tensor:
    """``255 - image``."""
    return _op(image, "invert")


def posterize(image: Any, bits: int) -> torch.Tensor:
    """Keep the ``bits`` (0..8) high bits of each value."""
    if not isinstance(bits, numbers.Integral) or not 0 <= bits <= 8:
        raise ValueError(f"bits must be an int in [0, 8], got {bits!r}")
    return _op(image, "posterize", bits=bits)


def solarize(image: Any, threshold: float) -> torch.Tensor:
    """Invert the values ``>= threshold`` (uint8 units)."""
    if threshold > 255:
        raise TypeError(f"threshold should be less than bound of img (255), got {threshold}")
    return _op(image, "solarize", threshold=threshold)


def rgb_to_grayscale(image: Any, num_output_channels: int = 1) -> torch.Tensor:
    """Luma ``0.2989 R + 0.587 G + 0.114 B``, truncated to uint8; ``num_output_channels`` 1 or 3.

    (A pipeline's ``Grayscale`` keeps 3 channels; this single-image form returns 1 when asked.)
    """
    if num_output_channels not in (1, 3):
        raise ValueError(f"num_output_channels must be 1 or 3, got {num_output_channels}")
    out = _op(image, "grayscale")
    return out[:1].clone() if num_output_channels == 1 else out


def gaussian_blur(image: Any, kernel_size: int | Sequence[int], sigma: float | Sequence[float] | None = None
                  ) -> torch.Tensor:
    """Gaussian blur with ``kernel_size`` ``(kx, ky)`` (odd) and ``sigma`` ``(sx, sy)``
    (default ``0.15 * k + 0.35``), reflect padding, as torchvision."""
    ks = [int(kernel_size)] * 2 if isinstance(kernel_size, numbers.Integral) else [int(k) for k in kernel_size]
    ks = ks * 2 if len(ks) == 1 else ks
    if len(ks) != 2 or any(k <= 0 or k % 2 == 0 for k in ks):
        raise ValueError(f"kernel_size must be 1 or 2 odd positive ints, got {kernel_size!r}")
    if sigma is None:
        sig = [k * 0.15 + 0.35 for k in ks]
    elif isinstance(sigma, numbers.Number):
        sig = [float(sigma)] * 2
    else:
        sig = [float(v) for v in sigma]
        sig = sig * 2 if len(sig) == 1 else sig
    if len(sig) != 2 or any(v <= 0 for v in sig):
        raise ValueError(f"sigma must be 1 or 2 positive numbers, got {sigma!r}")
    return _op(image, "gaussian_blur", kernel_x=ks[0], kernel_y=ks[1], sigma_x=sig[0], sigma_y=sig[1])


def _centre(center: Sequence[float] | None, height: int, width: int) -> tuple[float, float]:
    if center is None:
        return (0.0, 0.0)
    return (float(center[0]) - width * 0.5, float(center[1]) - height * 0.5)


def rotate(image: Any, angle: float, interpolation: Any = "nearest", expand: bool = False,
           center: Sequence[float] | None = None, fill: Any = None) -> torch.Tensor:
    """Rotate anticlockwise by ``angle`` degrees about ``center`` (default: the image centre),
    keeping the size (``expand=True`` is not supported)."""
    if expand:
        raise ValueError("rotate: expand=True is not supported (torchdali batches keep their size)")
    img = _rgb(image)
    angle = float(angle) % 360
    if center is None and angle == 0:
        return img  # torchvision returns the image itself
    h, w = img.shape[-2:]
    m = inverse_affine_matrix(_centre(center, h, w), -angle, (0.0, 0.0), 1.0, (0.0, 0.0))
    return _op(img, "affine", interp=warp_filter(interpolation, "rotate"), fill=fill_values(fill, "rotate"),
               **dict(zip("abcdef", m)))


def affine(image: Any, angle: float, translate: Sequence[float], scale: float, shear: float | Sequence[float],
           interpolation: Any = "nearest", fill: Any = None, center: Sequence[float] | None = None) -> torch.Tensor:
    """Rotate by ``angle``, translate by ``translate`` pixels, scale and shear (degrees), about
    ``center`` (default: the image centre), keeping the size."""
    if scale <= 0:
        raise ValueError("affine: scale should be positive")
    if len(translate) != 2:
        raise ValueError("affine: translate should be a sequence of length 2")
    if isinstance(shear, numbers.Number):
        shear = [float(shear), 0.0]
    shear = [float(v) for v in shear]
    shear = shear * 2 if len(shear) == 1 else shear
    if len(shear) != 2:
        raise ValueError(f"affine: shear should be a number or a sequence of two values, got {shear}")
    img = _rgb(image)
    h, w = img.shape[-2:]
    m = inverse_affine_matrix(_centre(center, h, w), float(angle), (float(translate[0]), float(translate[1])),
                              float(scale), (shear[0], shear[1]))
    return _op(img, "affine", interp=warp_filter(interpolation, "affine"), fill=fill_values(fill, "affine"),
               **dict(zip("abcdef", m)))


def perspective(image: Any, startpoints: Sequence[Sequence[int]] | None, endpoints: Sequence[Sequence[int]] | None,
                interpolation: Any = "bilinear", fill: Any = None,
                coefficients: Sequence[float] | None = None) -> torch.Tensor:
    """Perspective warp taking ``startpoints`` (4 corners, (x, y)) to ``endpoints``, or given by
    its 8 ``coefficients``, keeping the size."""
    if coefficients is not None:
        if startpoints is not None or endpoints is not None:
            raise ValueError("perspective: give either startpoints/endpoints or coefficients, not both")
        if len(coefficients) != 8:
            raise ValueError("perspective: coefficients should have 8 float values")
        coeffs = [float(c) for c in coefficients]
    elif startpoints is not None and endpoints is not None:
        coeffs = perspective_coefficients(np.asarray(startpoints)[None], np.asarray(endpoints)[None])[0].tolist()
    else:
        raise ValueError("perspective: either the startpoints/endpoints or the coefficients must be given")
    return _op(image, "perspective", interp=warp_filter(interpolation, "perspective"),
               fill=fill_values(fill, "perspective"), **dict(zip("abcdefgh", coeffs)))


def erase(image: Any, i: int, j: int, h: int, w: int, v: Any, inplace: bool = False) -> torch.Tensor:
    """Set the box ``[i, i+h) x [j, j+w)`` to ``v`` (a number, or one value per channel).

    A uint8 image runs the finishing pass's erase (a float value is truncated, as
    torchvision's assignment into a uint8 tensor does); a float ``[..., C, H, W]``
    image is written directly. ``inplace`` applies to float images only.
    """
    values = torch.as_tensor(v, dtype=torch.float32).reshape(-1)
    if isinstance(image, torch.Tensor) and image.is_floating_point():
        out = image if inplace else image.clone()
        out[..., i: i + h, j: j + w] = values.to(image.dtype).view(-1, 1, 1) if values.numel() > 1 else values[0]
        return out
    if values.numel() not in (1, 3):
        raise ValueError(f"erase: v must be one value or one per channel (3), got {values.numel()} values")
    img = _rgb(image)
    H, W = img.shape[-2:]
    g = G.BatchGeometry.identity(np.array([[H, W]]))
    G.erase(g, True, i, j, h, w)
    value = values.expand(3).trunc().clamp(0, 255).tolist()
    return REFERENCE.fn("finish")(img[None], g.to_params(), (1.0, 1.0, 1.0), (0.0, 0.0, 0.0), out_dtype=torch.uint8,
                                  erase_value=value)[0]
