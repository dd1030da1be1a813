"""Transform classes named after ``torchvision.transforms.v2``.

Each class validates its arguments when constructed, describes how it changes the
static pipeline state (dtype, output size) so a bad Compose fails when the loader
is built, draws its per-sample random parameters for a whole batch at once, and
applies them to the symbolic batch geometry (see ``_geometry.py``). The pixels are
touched once, by the fused kernel, after every transform has had its say.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from .. import _rng
from . import _geometry as G

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


@dataclass
class _StaticState:
    """What is known about the batch before any data is seen."""

    dtype: torch.dtype = torch.uint8
    size: tuple[int, int] | None = None  # None: depends on the input image
    resampled: bool = False
    quantize: bool = False
    antialias: bool = True
    scale: list[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])
    bias: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    value_range: float = 255.0


def _setup_size(size: Any, name: str) -> list[int]:
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        return [int(size)]
    if isinstance(size, Sequence) and len(size) in (1, 2) and all(
        isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in size
    ):
        return [int(s) for s in size]
    raise ValueError(f"{name}: size must be an int or a sequence of 1 or 2 ints, got {size!r}")


def _check_bilinear(interpolation: Any, name: str) -> None:
    mode = getattr(interpolation, "value", interpolation)
    if mode not in ("bilinear", 2):  # PIL.Image.BILINEAR == 2
        raise ValueError(
            f"{name}: only bilinear interpolation is supported by the fused kernel, got {interpolation!r}"
        )


class Transform:
    """Base class: a step of a batched, fused pipeline."""

    #: uniforms this transform draws per sample
    n_uniforms: int = 0

    def _static(self, s: _StaticState) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _apply(self, g: G.BatchGeometry, u: np.ndarray | None) -> None:
        """Apply to the batch geometry given this transform's uniforms ``u``."""

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.extra_repr()})"

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        """Apply to one image (CHW or HWC uint8 tensor) on the CPU reference path."""
        from ._plan import apply_to_images

        return apply_to_images(Compose([self]), [image])[0]


class Compose(Transform):
    """Chain transforms, as ``torchvision.transforms.v2.Compose``."""

    def __init__(self, transforms: Sequence[Any]) -> None:
        if not isinstance(transforms, Sequence):
            raise TypeError("Compose: argument must be a sequence of transforms")
        from ._convert import to_torchdali

        self.transforms = [to_torchdali(t) for t in transforms]

    def _static(self, s: _StaticState) -> None:
        for t in self.transforms:
            t._static(s)

    def extra_repr(self) -> str:
        return ", ".join(repr(t) for t in self.transforms)


class Resize(Transform):
    """Resize; an int (or 1-element list) sets the shorter side, ``(h, w)`` the exact size."""

    def __init__(self, size: int | Sequence[int], interpolation: Any = "bilinear",
                 max_size: int | None = None, antialias: bool | None = True) -> None:
        self.size = _setup_size(size, "Resize")
        _check_bilinear(interpolation, "Resize")
        if max_size is not None and len(self.size) != 1:
            raise ValueError("Resize: max_size is only allowed when size sets the shorter side")
        if max_size is not None and max_size <= self.size[0]:
            raise ValueError(f"Resize: max_size={max_size} must be larger than size={self.size[0]}")
        if any(v <= 0 for v in self.size):
            raise ValueError(f"Resize: size must be positive, got {self.size}")
        self.interpolation = interpolation
        self.max_size = max_size
        self.antialias = True if antialias is None else bool(antialias)

    def _static(self, s: _StaticState) -> None:
        s.size = (self.size[0], self.size[1]) if len(self.size) == 2 else None
        s.quantize = s.quantize or s.dtype == torch.uint8
        s.resampled = True
        s.antialias = self.antialias

    def _apply(self, g: G.BatchGeometry, u: np.ndarray | None) -> None:
        h, w = G.resized_output_size(g.height, g.width, self.size, self.max_size)
        G.resize(g, h, w)

    def extra_repr(self) -> str:
        return f"size={self.size}, max_size={self.max_size}, antialias={self.antialias}"


class CenterCrop(Transform):
    """Crop the center; pads with zeros when the crop is larger than the image."""

    def __init__(self, size: int | Sequence[int]) -> None:
        size = _setup_size(size, "CenterCrop")
        self.size = size * 2 if len(size) == 1 else size
        if any(v <= 0 for v in self.size):
            raise ValueError(f"CenterCrop: size must be positive, got {self.size}")

    def _static(self, s: _StaticState) -> None:
        s.size = (self.size[0], self.size[1])

    def _apply(self, g: G.BatchGeometry, u: np.ndarray | None) -> None:
        top, left = G.center_crop_box(g.height, g.width, self.size[0], self.size[1])
        G.crop(g, top, left, self.size[0], self.size[1])

    def extra_repr(self) -> str:
        return f"size={self.size}"


class RandomCrop(Transform):
    """Crop at a random position (``padding``/``pad_if_needed`` are not supported)."""

    n_uniforms = 2

    def __init__(self, size: int | Sequence[int], padding: Any = None, pad_if_needed: bool = False,
                 fill: Any = 0, padding_mode: str = "constant") -> None:
        size = _setup_size(size, "RandomCrop")
        self.size = size * 2 if len(size) == 1 else size
        if padding is not None or pad_if_needed:
            raise ValueError("RandomCrop: padding and pad_if_needed are not supported; "
                             "use Resize before RandomCrop so the image is large enough")

    def _static(self, s: _StaticState) -> None:
        s.size = (self.size[0], self.size[1])

    def _apply(self, g: G.BatchGeometry, u: np.ndarray | None) -> None:
        ch, cw = self.size
        if np.any(g.height < ch) or np.any(g.width < cw):
            raise ValueError(f"RandomCrop: crop size {self.size} is larger than an input image "
                             f"(smallest is {int(g.height.min())}x{int(g.width.min())})")
        top = np.floor(u[:, 0] * (g.height - ch + 1))
        left = np.floor(u[:, 1] * (g.width - cw + 1))
        G.crop(g, top, left, ch, cw)

    def extra_repr(self) -> str:
        return f"size={self.size}"


class RandomResizedCrop(Transform):
    """Random area/aspect crop resized to ``size``, drawn independently per sample."""

    n_uniforms = 40

    def __init__(self, size: int | Sequence[int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0), interpolation: Any = "bilinear",
                 antialias: bool | None = True) -> None:
        size = _setup_size(size, "RandomResizedCrop")
        self.size = size * 2 if len(size) == 1 else size
        if not (isinstance(scale, Sequence) and len(scale) == 2 and isinstance(ratio, Sequence) and len(ratio) == 2):
            raise ValueError("RandomResizedCrop: scale and ratio must be sequences of two floats")
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError("RandomResizedCrop: scale and ratio must be given as (min, max)")
        if ratio[0] <= 0 or scale[0] < 0:
            raise ValueError("RandomResizedCrop: scale must be >= 0 and ratio > 0")
        _check_bilinear(interpolation, "RandomResizedCrop")
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.interpolation = interpolation
        self.antialias = True if antialias is None else bool(antialias)

    def _static(self, s: _StaticState) -> None:
        s.size = (self.size[0], self.size[1])
        s.quantize = s.quantize or s.dtype == torch.uint8
        s.resampled = True
        s.antialias = self.antialias

    def _apply(self, g: G.BatchGeometry, u: np.ndarray | None) -> None:
        top, left, h, w = G.random_resized_crop_box(g.height, g.width, self.scale, self.ratio, u)
        G.crop(g, top, left, h, w)
        G.resize(g, self.size[0], self.size[1])

    def extra_repr(self) -> str:
        return f"size={self.size}, scale={self.scale}, ratio={tuple(round(r, 4) for r in self.ratio)}"


class RandomHorizontalFlip(Transform):
    """Flip left-right with probability ``p``, decided per sample."""

    n_uniforms = 1

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"RandomHorizontalFlip: p must be in [0, 1], got {p}")
        self.p = float(p)

    def _static(self, s: _StaticState) -> None:
        pass

    def _apply(self, g: G.BatchGeometry, u: np.ndarray | None) -> None:
        G.horizontal_flip(g, u[:, 0] < self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class RandomVerticalFlip(RandomHorizontalFlip):
    """Flip top-bottom with probability ``p``, decided per sample."""

    def _apply(self, g: G.BatchGeometry, u: np.ndarray | None) -> None:
        G.vertical_flip(g, u[:, 0] < self.p)


class ToDtype(Transform):
    """Convert the dtype; ``scale=True`` maps uint8 [0, 255] to float [0, 1]."""

    def __init__(self, dtype: torch.dtype, scale: bool = False) -> None:
        if isinstance(dtype, dict):
            dtype = dtype.get("image", dtype.get(torch.Tensor, None)) if hasattr(dtype, "get") else None
        if dtype not in _FLOAT_DTYPES + (torch.uint8,):
            raise ValueError(f"ToDtype: unsupported dtype {dtype!r}; use uint8, float16, bfloat16 or float32")
        self.dtype = dtype
        self.scale = bool(scale)

    def _static(self, s: _StaticState) -> None:
        if self.dtype == torch.uint8 and s.dtype != torch.uint8:
            raise ValueError("ToDtype: converting a float image back to uint8 is not supported")
        if self.dtype in _FLOAT_DTYPES and s.dtype == torch.uint8 and self.scale:
            s.scale = [v / 255.0 for v in s.scale]
            s.bias = [v / 255.0 for v in s.bias]
            s.value_range = 1.0
        s.dtype = self.dtype

    def extra_repr(self) -> str:
        return f"dtype={self.dtype}, scale={self.scale}"


class Normalize(Transform):
    """``(x - mean) / std`` per channel, on a float image."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> None:
        mean, std = [float(m) for m in mean], [float(v) for v in std]
        if len(mean) == 1:
            mean = mean * 3
        if len(std) == 1:
            std = std * 3
        if len(mean) != 3 or len(std) != 3:
            raise ValueError("Normalize: mean and std need 1 or 3 values (the output has 3 channels)")
        if any(v == 0 for v in std):
            raise ValueError(f"Normalize: std evaluated to zero, leading to division by zero: {std}")
        self.mean, self.std, self.inplace = mean, std, inplace

    def _static(self, s: _StaticState) -> None:
        if s.dtype not in _FLOAT_DTYPES:
            raise ValueError("Normalize: the image is still uint8; put ToDtype(torch.float32, scale=True) "
                             "before Normalize (as torchvision requires)")
        s.scale = [a / sd for a, sd in zip(s.scale, self.std)]
        s.bias = [(b - m) / sd for b, m, sd in zip(s.bias, self.mean, self.std)]

    def extra_repr(self) -> str:
        return f"mean={self.mean}, std={self.std}"


class Identity(Transform):
    """No-op; stands for ``ToImage``/``PILToTensor``/``ToPureTensor`` in torchvision pipelines."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def _static(self, s: _StaticState) -> None:
        pass


ToImage = Identity
PILToTensor = Identity
ToPureTensor = Identity


class ToTensor(Transform):
    """torchvision's v1 ``ToTensor``: uint8 HWC to float [0, 1] CHW."""

    def __init__(self) -> None:
        self._inner = ToDtype(torch.float32, scale=True)

    def _static(self, s: _StaticState) -> None:
        self._inner._static(s)


class ConvertImageDtype(ToDtype):
    """``ConvertImageDtype(dtype)`` = ``ToDtype(dtype, scale=True)``."""

    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        super().__init__(dtype, scale=True)


def _iter_leaves(t: Transform):
    if isinstance(t, Compose):
        for c in t.transforms:
            yield from _iter_leaves(c)
    else:
        yield t
