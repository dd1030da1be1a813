"""The geometry steps of torchvision's detection and segmentation references, per sample.

``RandomShortestSize``, ``RandomResize`` and ``ScaleJitter`` resize each sample to a
size drawn per sample; ``RandomZoomOut`` pastes it into a larger canvas (SSD);
``FixedSizeCrop`` crops a large sample and pads a small one to a fixed size
(large-scale jitter); ``PadIfSmaller`` (the segmentation reference's) pads a small
sample up to a size. Each draws with ``torchvision.transforms.v2``'s formulas
(the prototype's and the detection reference's for ``FixedSizeCrop``), in the
dtypes torchvision computes them in: its ``torch.rand`` is float32, on 24 bits
(:func:`rand32`), and ``int()`` truncates. Apart from ``FixedSizeCrop`` their output
size is the sample's own, so a batch holds images of different sizes
(``_ragged.py``); each says how large an output can get (``bound_size``).

The padding of ``RandomZoomOut``, ``FixedSizeCrop`` and ``PadIfSmaller`` goes through the kernel's
fold box (``_geometry.pad``): the canvas that a later resize resamples is exact,
as is a fill after a resize (``FixedSizeCrop`` after ``ScaleJitter``).
"""
from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Sequence

import numpy as np

from . import _geometry as G
from ._args import interpolation_code, setup_size
from ._plan import Transform
from ._registry import register
from ._state import SizeBound, StaticState
from ._transforms import _mode_repr, _resampled, _tv_antialias, declare_padding, image_fill, padding_route

__all__ = ["FixedSizeCrop", "PadIfSmaller", "RandomResize", "RandomShortestSize", "RandomZoomOut", "ScaleJitter",
           "rand32"]


def rand32(u: np.ndarray) -> np.ndarray:
    """``torch.rand``'s float32 values (multiples of ``2**-24`` in ``[0, 1)``) from our float64 uniforms."""
    return (np.floor(u * 16777216.0) * (1.0 / 16777216.0)).astype(np.float32)


def _truncate(v: np.ndarray) -> np.ndarray:
    """Python's ``int()`` of each value, as float64."""
    return np.trunc(np.asarray(v, dtype=np.float64))


def _check_sizes(name: str, height: np.ndarray, width: np.ndarray) -> None:
    small = (height < 1) | (width < 1)
    if small.any():
        i = int(np.argmax(small))
        raise ValueError(f"{name}: sample {i} would be resized to {int(height[i])}x{int(width[i])}, which torchvision "
                         f"refuses too; the image is too small for this scale")


class _RandomSize(Transform):
    """A resize to a size drawn per sample: ``make_params`` gives ``height``/``width``."""

    stage = "geometry"
    filter: int
    antialias: bool

    def _setup(self, interpolation: Any, antialias: bool | None) -> None:
        self.interpolation = interpolation
        self.filter = interpolation_code(interpolation, type(self).__name__)
        self.antialias = True if antialias is None else bool(antialias)

    def update_state(self, state: StaticState) -> StaticState:
        return dataclasses.replace(_resampled(state, self.antialias, self.filter), size=None)

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        G.resize(geometry, params["height"], params["width"], self.filter)

    def _mode(self) -> str:
        return f"interpolation={_mode_repr(self.filter)}, antialias={self.antialias}"


@register("RandomShortestSize",
          usage="RandomShortestSize(min_size, max_size=None, interpolation=BILINEAR, antialias=True)",
          semantics="same size sampling (one of `min_size`, capped by `max_size`)", notes="drawn per sample")
class RandomShortestSize(_RandomSize):
    """Resize the shorter side to one of ``min_size``, drawn per sample, the longer side
    at most ``max_size`` (torchvision's ``RandomShortestSize``: ``r = min(min_size /
    short, max_size / long)``, each side ``int(side * r)``)."""

    n_uniforms = 1

    def __init__(self, min_size: int | Sequence[int], max_size: int | None = None, interpolation: Any = "bilinear",
                 antialias: bool | None = True) -> None:
        sizes = [min_size] if isinstance(min_size, numbers.Integral) else list(min_size)
        if not sizes or any(not isinstance(s, numbers.Integral) or isinstance(s, bool) or s <= 0 for s in sizes):
            raise ValueError(f"RandomShortestSize: min_size must be a positive int or a non-empty sequence of them, "
                             f"got {min_size!r}")
        if max_size is not None and (not isinstance(max_size, numbers.Integral) or max_size <= 0):
            raise ValueError(f"RandomShortestSize: max_size must be a positive int or None, got {max_size!r}")
        self.min_size = [int(s) for s in sizes]
        self.max_size = None if max_size is None else int(max_size)
        self._setup(interpolation, antialias)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomShortestSize:
        return cls(list(t.min_size), t.max_size, interpolation=t.interpolation, antialias=_tv_antialias(t))

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        h, w = geometry.height, geometry.width
        pick = np.minimum(np.floor(u[:, 0] * len(self.min_size)).astype(np.int64), len(self.min_size) - 1)
        r = np.asarray(self.min_size, dtype=np.float64)[pick] / np.minimum(h, w)
        if self.max_size is not None:
            r = np.minimum(r, self.max_size / np.maximum(h, w))
        height, width = _truncate(h * r), _truncate(w * r)
        _check_sizes("RandomShortestSize", height, width)
        return {"height": height, "width": width}

    def bound_size(self, bound: SizeBound) -> SizeBound:
        short = float(max(self.min_size))
        long = float(self.max_size) if self.max_size is not None else short * bound.aspect
        return SizeBound(long, long, min(short, long) * long)

    def extra_repr(self) -> str:
        return f"min_size={self.min_size}, max_size={self.max_size}, {self._mode()}"


@register("RandomResize", usage="RandomResize(min_size, max_size, interpolation=BILINEAR, antialias=True)",
          semantics="same size sampling (shorter side uniform in `[min_size, max_size)`)", notes="drawn per sample")
class RandomResize(_RandomSize):
    """Resize the shorter side to an integer drawn uniformly in ``[min_size, max_size)`` per
    sample (torchvision's ``RandomResize``: ``torch.randint(min_size, max_size)``, then
    ``resize(size=[size])``)."""

    n_uniforms = 1

    def __init__(self, min_size: int, max_size: int, interpolation: Any = "bilinear",
                 antialias: bool | None = True) -> None:
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in (min_size, max_size)):
            raise ValueError(f"RandomResize: min_size and max_size must be ints, got {min_size!r}, {max_size!r}")
        if not 0 < min_size < max_size:
            raise ValueError(f"RandomResize: need 0 < min_size < max_size (torch.randint's range), got "
                             f"{min_size}, {max_size}")
        self.min_size, self.max_size = int(min_size), int(max_size)
        self._setup(interpolation, antialias)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomResize:
        return cls(t.min_size, t.max_size, interpolation=t.interpolation, antialias=_tv_antialias(t))

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        n = self.max_size - self.min_size
        size = self.min_size + np.minimum(np.floor(u[:, 0] * n), n - 1)
        # resize(size=[size]): torchvision's _compute_resized_output_size, as G.resized_output_size
        h, w = geometry.height, geometry.width
        long = np.floor(size * np.maximum(h, w) / np.minimum(h, w))
        w_short = w <= h
        return {"height": np.where(w_short, long, size), "width": np.where(w_short, size, long), "size": size}

    def bound_size(self, bound: SizeBound) -> SizeBound:
        s = float(self.max_size - 1)
        long = s * bound.aspect
        return SizeBound(long, long, s * long)

    def extra_repr(self) -> str:
        return f"min_size={self.min_size}, max_size={self.max_size}, {self._mode()}"


@register("ScaleJitter",
          usage="ScaleJitter(target_size, scale_range=(0.1, 2.0), interpolation=BILINEAR, antialias=True)",
          semantics="same scale sampling (large-scale jitter)", notes="drawn per sample")
class ScaleJitter(_RandomSize):
    """Large-scale jitter: resize by ``min(target_size[1] / height, target_size[0] / width)``
    times a scale uniform in ``scale_range``, drawn per sample, each side ``int(side * r)``
    in float32, as torchvision's ``ScaleJitter`` (its ``target_size`` indexing kept)."""

    n_uniforms = 1

    def __init__(self, target_size: Sequence[int], scale_range: Sequence[float] = (0.1, 2.0),
                 interpolation: Any = "bilinear", antialias: bool | None = True) -> None:
        if not (isinstance(target_size, Sequence) and len(target_size) == 2 and all(v > 0 for v in target_size)):
            raise ValueError(f"ScaleJitter: target_size must be two positive ints, got {target_size!r}")
        if not (isinstance(scale_range, Sequence) and len(scale_range) == 2 and 0 < scale_range[0] <= scale_range[1]):
            raise ValueError(f"ScaleJitter: scale_range must be (min, max) with 0 < min <= max, got {scale_range!r}")
        self.target_size = (int(target_size[0]), int(target_size[1]))
        self.scale_range = (float(scale_range[0]), float(scale_range[1]))
        self._setup(interpolation, antialias)

    @classmethod
    def from_torchvision(cls, t: Any) -> ScaleJitter:
        return cls(tuple(t.target_size), tuple(t.scale_range), interpolation=t.interpolation,
                   antialias=_tv_antialias(t))

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        lo, hi = self.scale_range
        # scale_range[0] + torch.rand(1) * (scale_range[1] - scale_range[0]): float32
        scale = np.float32(lo) + rand32(u[:, 0]) * np.float32(hi - lo)
        h, w = geometry.height, geometry.width
        r = np.minimum(self.target_size[1] / h, self.target_size[0] / w).astype(np.float32) * scale
        height = _truncate(h.astype(np.float32) * r)
        width = _truncate(w.astype(np.float32) * r)
        _check_sizes("ScaleJitter", height, width)
        return {"height": height, "width": width}

    def bound_size(self, bound: SizeBound) -> SizeBound:
        s = self.scale_range[1]
        return SizeBound.fixed(self.target_size[1] * s + 1, self.target_size[0] * s + 1)  # +1: float32 rounding

    def extra_repr(self) -> str:
        return f"target_size={self.target_size}, scale_range={self.scale_range}, {self._mode()}"


@register("RandomZoomOut", usage="RandomZoomOut(fill=0, side_range=(1.0, 4.0), p=0.5)",
          semantics="same canvas and position sampling; fill as for `Pad` (a dict's image entry)",
          notes="drawn per sample; exact under a later resize; one fill per pipeline")
class RandomZoomOut(Transform):
    """SSD's zoom out: with probability ``p``, paste the image into a canvas ``r`` times its
    size (``r`` uniform in ``side_range``), at a uniform position, the rest ``fill``.

    As torchvision's ``RandomZoomOut``: ``canvas = int(side * r)`` in float32, ``left =
    int((canvas_w - w) * r0)``, ``top = int((canvas_h - h) * r1)``. A ``fill`` dict gives
    its image entry (``tv_tensors.Image``, else ``"others"``, else 0: the default of a
    ``defaultdict`` is not looked at, by torchvision either). The canvas is a constant
    pad through the kernel's fold box, so the resize that follows in SSD resamples it
    exactly.
    """

    stage = "geometry"
    n_uniforms = 4  # apply, r, left, top

    def __init__(self, fill: Any = 0, side_range: Sequence[float] = (1.0, 4.0), p: float = 0.5) -> None:
        if not (isinstance(side_range, Sequence) and len(side_range) == 2):
            raise TypeError(f"RandomZoomOut: side_range should be a sequence of two floats, got {side_range!r}")
        if side_range[0] < 1.0 or side_range[0] > side_range[1]:
            raise ValueError(f"Invalid side range provided {side_range}.")
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"RandomZoomOut: p must be in [0, 1], got {p}")
        self.fill = fill
        image_fill(fill, "RandomZoomOut")  # checked here, used by update_state
        self.side_range = (float(side_range[0]), float(side_range[1]))
        self.p = float(p)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomZoomOut:
        return cls(fill=t.fill, side_range=tuple(t.side_range), p=t.p)

    def update_state(self, state: StaticState) -> StaticState:
        return dataclasses.replace(declare_padding(state, self, "constant", self.fill), size=None)

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        h, w = geometry.height, geometry.width
        lo, hi = self.side_range
        r = np.float32(lo) + rand32(u[:, 1]) * np.float32(hi - lo)
        canvas_w = _truncate(w.astype(np.float32) * r)
        canvas_h = _truncate(h.astype(np.float32) * r)
        left = _truncate((canvas_w - w).astype(np.float32) * rand32(u[:, 2]))
        top = _truncate((canvas_h - h).astype(np.float32) * rand32(u[:, 3]))
        apply = u[:, 0] < self.p
        zero = np.zeros_like(h)
        return {"left": np.where(apply, left, zero), "top": np.where(apply, top, zero),
                "right": np.where(apply, canvas_w - (left + w), zero),
                "bottom": np.where(apply, canvas_h - (top + h), zero)}

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        G.pad(geometry, params["left"], params["top"], params["right"], params["bottom"], "constant")

    def bound_size(self, bound: SizeBound) -> SizeBound:
        s = self.side_range[1]
        return SizeBound(bound.height * s, bound.width * s, bound.pixels * s * s)

    def extra_repr(self) -> str:
        return f"fill={self.fill!r}, side_range={self.side_range}, p={self.p}"


@register("FixedSizeCrop", any_module=True, usage="FixedSizeCrop(size, fill=0, padding_mode=\"constant\")",
          semantics="crop larger images at one random offset, pad smaller ones bottom/right",
          notes="the detection reference's and torchvision.prototype's; fixed output size")
class FixedSizeCrop(Transform):
    """Crop to at most ``size`` at a random offset, then pad the bottom and right up to
    ``size``: the output is always ``size``.

    As the ``FixedSizeCrop`` of torchvision's detection reference (``references/detection/
    transforms.py``, the ``lsj`` preset) and of ``torchvision.prototype.transforms``: one
    uniform ``r`` places both axes, ``top = int(max(h - crop_h, 0) * r)``, ``left =
    int(max(w - crop_w, 0) * r)``; the padding (``fill``, ``padding_mode``) as ``Pad``'s.
    Matched by class name in any module (the reference script is not a package).
    """

    stage = "geometry"
    n_uniforms = 1

    def __init__(self, size: int | Sequence[int], fill: Any = 0, padding_mode: str = "constant") -> None:
        size = setup_size(size, "FixedSizeCrop")
        self.size = size * 2 if len(size) == 1 else size
        if any(v <= 0 for v in self.size):
            raise ValueError(f"FixedSizeCrop: size must be positive, got {self.size}")
        self.fill = fill
        self.padding_mode = padding_mode
        #: ``_geometry.pad``'s mode: None for zero padding through the valid window
        self.pad_mode = padding_route("FixedSizeCrop", fill, padding_mode)

    @classmethod
    def from_torchvision(cls, t: Any) -> FixedSizeCrop:
        return cls([t.crop_height, t.crop_width], fill=t.fill, padding_mode=t.padding_mode)

    def update_state(self, state: StaticState) -> StaticState:
        state = declare_padding(state, self, self.pad_mode, self.fill)
        return dataclasses.replace(state, size=(self.size[0], self.size[1]))

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        ch, cw = self.size
        h, w = geometry.height, geometry.width
        r = rand32(u[:, 0])
        top = _truncate(np.maximum(h - ch, 0).astype(np.float32) * r)
        left = _truncate(np.maximum(w - cw, 0).astype(np.float32) * r)
        return {"top": top, "left": left, "height": np.minimum(h, ch), "width": np.minimum(w, cw)}

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        G.crop(geometry, params["top"], params["left"], params["height"], params["width"])
        ch, cw = self.size
        G.pad(geometry, 0, 0, cw - params["width"], ch - params["height"], self.pad_mode)

    def extra_repr(self) -> str:
        out = f"size={self.size}"
        if self.pad_mode is not None:
            out += f", fill={self.fill!r}, padding_mode={self.padding_mode!r}"
        return out



@register("PadIfSmaller", any_module=True, usage="PadIfSmaller(size, fill=0)",
          semantics="pad bottom/right up to `size` where smaller; fill per type (`Mask` too)",
          notes="the segmentation reference's, matched by class name; output size per sample")
class PadIfSmaller(Transform):
    """Pad the bottom and right of each sample smaller than ``size`` up to ``size`` (a side
    already as large is left alone): the segmentation reference's ``PadIfSmaller``
    (``references/segmentation/v2_extras.py``), ``padding = [0, 0, max(size - width, 0),
    max(size - height, 0)]``, a constant ``F.pad`` with the fill of each tv_tensor type
    (the image's: ``tv_tensors.Image``, else ``"others"``; a Mask's: ``tv_tensors.Mask``,
    else ``"others"``, mapped by ``_target_plan.py``). Matched by class name in any module
    (the reference script is not a package).
    """

    stage = "geometry"

    def __init__(self, size: int, fill: Any = 0) -> None:
        if not isinstance(size, numbers.Integral) or isinstance(size, bool) or size <= 0:
            raise ValueError(f"PadIfSmaller: size must be a positive int (the reference's), got {size!r}")
        self.size = int(size)
        self.fill = fill
        #: ``_geometry.pad``'s mode: None for zero padding through the valid window
        self.pad_mode = padding_route("PadIfSmaller", fill, "constant")

    @classmethod
    def from_torchvision(cls, t: Any) -> PadIfSmaller:
        return cls(t.size, fill=t.fill)

    def update_state(self, state: StaticState) -> StaticState:
        state = declare_padding(state, self, self.pad_mode, self.fill)
        if state.size is None:
            return state
        return dataclasses.replace(state, size=(max(state.size[0], self.size), max(state.size[1], self.size)))

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        return {"right": np.maximum(self.size - geometry.width, 0),
                "bottom": np.maximum(self.size - geometry.height, 0)}

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        G.pad(geometry, 0, 0, params["right"], params["bottom"], self.pad_mode)

    def bound_size(self, bound: SizeBound) -> SizeBound:
        s = float(self.size)
        height, width = max(bound.height, s), max(bound.width, s)
        # max(h, s) * max(w, s) is one of h * w, s * w, h * s, s * s
        pixels = max(bound.pixels, s * bound.width, s * bound.height, s * s)
        return SizeBound(height, width, min(height * width, pixels))

    def extra_repr(self) -> str:
        return f"size={self.size}, fill={self.fill!r}"
