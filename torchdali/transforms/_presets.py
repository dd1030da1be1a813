"""Ready-made pipelines other code hands out, converted without a rewrite.

- ``torchvision.models`` weights' ``transforms()``: ``ImageClassification``
  (resize, center crop, float, normalize).
- torchvision's reference-script presets (``references/classification/presets.py``
  ``ClassificationPresetTrain``/``ClassificationPresetEval``): any object of that
  class name whose ``.transforms`` is a torchvision ``Compose``; no import of the
  script is needed.
- timm's simple classes (``timm.data.transforms``): ``RandomResizedCropAndInterpolation``,
  ``ResizeKeepRatio`` (without its random scale/aspect), ``MaybeToTensor``,
  ``MaybePILToTensor`` and timm's unscaled ``ToTensor``; with torchvision's
  Resize/CenterCrop/Normalize this covers ``timm.data.transforms_imagenet_eval``.
  timm is matched by module and class name, never imported.

Each class is registered like the others (``_registry.py``), so these rows appear
in the README's table too.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import torch

from . import _geometry as G
from ._plan import Compose
from ._registry import register
from ._state import SizeBound, StaticState
from ._transforms import CenterCrop, Identity, Normalize, RandomResizedCrop, Resize, ToDtype, ToTensor

__all__ = [
    "ClassificationPreset", "ImageClassification", "MaybePILToTensor", "MaybeToTensor",
    "RandomResizedCropAndInterpolation", "ResizeKeepRatio", "TimmToTensor",
]

_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


def _interpolation(mode: Any) -> Any:
    """timm keeps ``interpolation='random'`` as a tuple of modes: a per-sample choice among them."""
    return list(mode) if isinstance(mode, (list, tuple)) else mode


@register("ImageClassification", semantics="its forward: Resize, CenterCrop, to float, Normalize",
          notes="what `torchvision.models` weights' `transforms()` return (ResNet, EfficientNet, ViT, ...)")
class ImageClassification(Compose):
    """torchvision's ``ImageClassification`` preset as a fused pipeline."""

    def __init__(self, *, crop_size: int | Sequence[int], resize_size: int | Sequence[int] = 256,
                 mean: Sequence[float] = _IMAGENET_MEAN, std: Sequence[float] = _IMAGENET_STD,
                 interpolation: Any = "bilinear", antialias: bool | None = True) -> None:
        super().__init__([
            Resize(resize_size, interpolation=interpolation, antialias=antialias),
            CenterCrop(crop_size),
            ToDtype(torch.float32, scale=True),
            Normalize(mean, std),
        ])

    @classmethod
    def from_torchvision(cls, t: Any) -> ImageClassification:
        return cls(crop_size=list(t.crop_size), resize_size=list(t.resize_size), mean=list(t.mean),
                   std=list(t.std), interpolation=t.interpolation, antialias=getattr(t, "antialias", True))


@register("ClassificationPresetTrain", "ClassificationPresetEval", any_module=True,
          semantics="its `.transforms` Compose is converted",
          notes="torchvision's references/classification/presets.py, matched by class name in any module")
class ClassificationPreset(Compose):
    """A reference-script preset: converts the torchvision ``Compose`` it holds in ``.transforms``."""

    @classmethod
    def from_torchvision(cls, t: Any) -> ClassificationPreset:
        inner = getattr(t, "transforms", None)
        if type(inner).__name__ != "Compose" or not hasattr(inner, "transforms"):
            raise ValueError(f"{type(t).__name__}: expected a torchvision Compose in .transforms, "
                             f"got {type(inner).__name__}")
        return cls(list(inner.transforms))


@register("timm.RandomResizedCropAndInterpolation",
          usage="timm.RandomResizedCropAndInterpolation(size, scale, ratio, interpolation)",
          semantics="same box sampling; `'random'` picks the filter per sample",
          notes="converted to `RandomResizedCrop`")
class RandomResizedCropAndInterpolation(RandomResizedCrop):
    """timm's RandomResizedCrop (its box sampling is torchvision's)."""

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomResizedCrop:
        return RandomResizedCrop(list(t.size), scale=tuple(t.scale), ratio=tuple(t.ratio),
                                 interpolation=_interpolation(t.interpolation), antialias=True)


@register("timm.ResizeKeepRatio", usage="timm.ResizeKeepRatio(size, longest=0.0)",
          semantics="same size rule", notes="without random_scale_prob/random_aspect_prob")
class ResizeKeepRatio(Resize):
    """timm's ResizeKeepRatio: scale both sides by one factor that puts the image between
    fitting inside ``size`` (``longest=1``) and covering it (``longest=0``)."""

    def __init__(self, size: int | Sequence[int], longest: float = 0.0, interpolation: Any = "bilinear",
                 antialias: bool | None = True) -> None:
        target = [size, size] if isinstance(size, int) else list(size)
        if len(target) != 2:
            raise ValueError(f"ResizeKeepRatio: size must be an int or (h, w), got {size!r}")
        super().__init__(target, interpolation=interpolation, antialias=antialias)
        if not 0.0 <= float(longest) <= 1.0:
            raise ValueError(f"ResizeKeepRatio: longest must be in [0, 1], got {longest}")
        self.longest = float(longest)

    @classmethod
    def from_torchvision(cls, t: Any) -> ResizeKeepRatio:
        if getattr(t, "random_scale_prob", 0) > 0 or getattr(t, "random_aspect_prob", 0) > 0:
            raise ValueError("ResizeKeepRatio: random_scale_prob and random_aspect_prob are not supported")
        return cls(list(t.size), longest=t.longest, interpolation=_interpolation(t.interpolation))

    def update_state(self, state: StaticState) -> StaticState:
        return dataclasses.replace(super().update_state(state), size=None)  # depends on the image

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        ratio_h, ratio_w = geometry.height / self.size[0], geometry.width / self.size[1]
        ratio = np.maximum(ratio_h, ratio_w) * self.longest + np.minimum(ratio_h, ratio_w) * (1.0 - self.longest)
        # np.round rounds half to even, as Python's round in timm
        return {"height": np.round(geometry.height / ratio), "width": np.round(geometry.width / ratio)}

    def bound_size(self, bound: SizeBound) -> SizeBound:
        sh, sw = float(self.size[0]), float(self.size[1])
        if self.longest == 1.0:  # fits inside size
            return SizeBound.fixed(sh, sw)
        # covers size at most: a side <= the other's target times the aspect ratio (+1: rounding)
        h, w = max(sh, sw * bound.aspect) + 1.0, max(sw, sh * bound.aspect) + 1.0
        return SizeBound(h, w, h * w)

    def extra_repr(self) -> str:
        return f"size={self.size}, longest={self.longest}"


@register("timm.MaybeToTensor", semantics="accepted", notes="= `ToDtype(torch.float32, scale=True)`")
class MaybeToTensor(ToTensor):
    """timm's MaybeToTensor: torchvision's ToTensor that passes tensors through."""


@register("timm.MaybePILToTensor", semantics="accepted", notes="no-op, as `PILToTensor`")
class MaybePILToTensor(Identity):
    """timm's MaybePILToTensor: images reach the kernel decoded, as uint8."""


@register("timm.ToTensor", usage="timm.ToTensor(dtype=torch.float32)", semantics="accepted",
          notes="= `ToDtype(dtype, scale=False)` (no scaling, unlike torchvision's)")
class TimmToTensor(ToDtype):
    """timm's ToTensor: a dtype conversion without scaling."""

    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        super().__init__(dtype, scale=False)

    @classmethod
    def from_torchvision(cls, t: Any) -> TimmToTensor:
        return cls(getattr(t, "dtype", torch.float32))
