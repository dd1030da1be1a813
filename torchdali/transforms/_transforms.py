"""Transform classes named after ``torchvision.transforms.v2``.

Each class validates its arguments when constructed and follows the protocol of
``Transform`` (``_plan.py``): ``update_state`` for what it changes before data is
seen, ``make_params`` to draw its per-sample parameters for a whole batch, and
``transform`` to apply them to the batch geometry (``_geometry.py``). Its
``@register`` line (``_registry.py``) names the torchvision classes it stands
for and its row in the README's table; ``from_torchvision`` converts one.

Adding a transform: a class here with ``stage``, ``n_uniforms`` (if random), the
steps it takes part in, ``from_torchvision`` and its ``@register`` line.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import torch
from csrc_triton import layout

from ..errors import SampleDrawError
from . import _geometry as G
from ._args import interpolation_code, interpolation_codes, setup_size
from ._plan import Compose, Transform, _KeepSize, apply_to_images, to_hwc
from ._registry import register
from ._state import FLOAT_DTYPES, BatchImagesSpec, PadSpec, SizeBound, StaticState

__all__ = [
    "BatchImages", "CenterCrop", "Compose", "ConvertImageDtype", "Identity", "Normalize", "PILToTensor", "Pad",
    "RandomCrop",
    "RandomHorizontalFlip", "RandomResizedCrop", "RandomVerticalFlip", "Resize", "ToDtype", "ToImage",
    "ToPureTensor", "ToTensor", "Transform",
]


def _tv_antialias(t: Any) -> Any:
    # torchvision v1 transforms older than 0.15 have no antialias attribute.
    return getattr(t, "antialias", True)


def _resampled(state: StaticState, antialias: bool, interpolation: int) -> StaticState:
    """State after a resize: a uint8 image is rounded after resampling, as torchvision does;
    the resize's filter and antialias are the kernel's."""
    return dataclasses.replace(state, quantize=state.quantize or state.dtype == torch.uint8, antialias=antialias,
                               interpolation=interpolation, resampled=True)


def _mode_repr(code: int) -> str:
    return f"InterpolationMode.{layout.filter_name(code).upper().replace('-', '_')}"


@register("RandomResizedCrop",
          usage="RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3/4, 4/3), interpolation=BILINEAR, "
                "antialias=True)",
          semantics="same box sampling (10 attempts, central fallback)",
          notes="drawn per sample; bilinear, bicubic, nearest, nearest-exact, or a list of modes drawn per "
                "sample (timm's `interpolation=\"random\"`)")
class RandomResizedCrop(Transform):
    """Random area/aspect crop resized to ``size``, drawn independently per sample.

    ``interpolation`` is a torchvision mode (bilinear, bicubic, nearest,
    nearest-exact), or a list of them of which each sample draws one uniformly,
    as timm's ``RandomResizedCropAndInterpolation(interpolation="random")`` does
    per call with ``[BILINEAR, BICUBIC]`` (``"random"`` is accepted for that).
    """

    stage = "geometry"
    n_uniforms = 40  # ten attempts of (area, log-ratio, top, left), as torchvision

    def __init__(self, size: int | Sequence[int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0), interpolation: Any = "bilinear",
                 antialias: bool | None = True) -> None:
        size = setup_size(size, "RandomResizedCrop")
        self.size = size * 2 if len(size) == 1 else size
        if not (isinstance(scale, Sequence) and len(scale) == 2 and isinstance(ratio, Sequence) and len(ratio) == 2):
            raise ValueError("RandomResizedCrop: scale and ratio must be sequences of two floats")
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError("RandomResizedCrop: scale and ratio must be given as (min, max)")
        if ratio[0] <= 0 or scale[0] < 0:
            raise ValueError("RandomResizedCrop: scale must be >= 0 and ratio > 0")
        codes = interpolation_codes(interpolation, "RandomResizedCrop")
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.interpolation = interpolation
        #: the filter codes a sample draws from; None for one fixed filter
        self.filters: tuple[int, ...] | None = codes if isinstance(codes, tuple) else None
        self.filter: int = layout.FILTER_PER_SAMPLE if self.filters is not None else codes
        if self.filters is not None:
            # one more uniform picks the filter; the box's 40 stay the first,
            # so the boxes equal those of a single-filter pipeline
            self.n_uniforms = 41
        self.antialias = True if antialias is None else bool(antialias)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomResizedCrop:
        return cls(list(t.size), scale=tuple(t.scale), ratio=tuple(t.ratio), interpolation=t.interpolation,
                   antialias=_tv_antialias(t))

    def update_state(self, state: StaticState) -> StaticState:
        return dataclasses.replace(_resampled(state, self.antialias, self.filter), size=(self.size[0], self.size[1]))

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        top, left, height, width = G.random_resized_crop_box(geometry.height, geometry.width,
                                                             self.scale, self.ratio, u[:, :40])
        params = {"top": top, "left": left, "height": height, "width": width}
        if self.filters is not None:
            pick = np.minimum((u[:, 40] * len(self.filters)).astype(np.int64), len(self.filters) - 1)
            params["filter"] = np.asarray(self.filters, dtype=np.float64)[pick]
        return params

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        G.crop(geometry, params["top"], params["left"], params["height"], params["width"])
        G.resize(geometry, self.size[0], self.size[1], params.get("filter", self.filter))

    def extra_repr(self) -> str:
        if self.filters is not None:
            mode = "[" + ", ".join(_mode_repr(c) for c in self.filters) + "]"
        else:
            mode = _mode_repr(self.filter)
        return (f"size={self.size}, scale={self.scale}, ratio={tuple(round(r, 4) for r in self.ratio)}, "
                f"interpolation={mode}, antialias={self.antialias}")


@register("Resize", usage="Resize(size, interpolation=BILINEAR, max_size=None, antialias=True)",
          semantics="int = shorter side, `(h, w)` exact",
          notes="bilinear, bicubic, nearest, nearest-exact, as `resize(..., antialias=...)`")
class Resize(Transform):
    """Resize; an int (or 1-element list) sets the shorter side, ``(h, w)`` the exact size."""

    stage = "geometry"

    def __init__(self, size: int | Sequence[int], interpolation: Any = "bilinear",
                 max_size: int | None = None, antialias: bool | None = True) -> None:
        self.size = setup_size(size, "Resize")
        self.filter = interpolation_code(interpolation, "Resize")
        if max_size is not None and len(self.size) != 1:
            raise ValueError("Resize: max_size is only allowed when size sets the shorter side")
        if max_size is not None and max_size <= self.size[0]:
            raise ValueError(f"Resize: max_size={max_size} must be larger than size={self.size[0]}")
        if any(v <= 0 for v in self.size):
            raise ValueError(f"Resize: size must be positive, got {self.size}")
        self.interpolation = interpolation
        self.max_size = max_size
        self.antialias = True if antialias is None else bool(antialias)

    @classmethod
    def from_torchvision(cls, t: Any) -> Resize:
        if t.size is None:
            raise ValueError("Resize(size=None, max_size=...) is not supported")
        return cls(t.size, interpolation=t.interpolation, max_size=t.max_size, antialias=_tv_antialias(t))

    def update_state(self, state: StaticState) -> StaticState:
        size = (self.size[0], self.size[1]) if len(self.size) == 2 else None
        return dataclasses.replace(_resampled(state, self.antialias, self.filter), size=size)

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        height, width = G.resized_output_size(geometry.height, geometry.width, self.size, self.max_size)
        empty = (height < 1) | (width < 1)
        if np.any(empty):  # an extreme aspect ratio under max_size: torchvision fails on it as well
            i = int(np.argmax(empty))
            raise SampleDrawError(f"{self!r} gives a {int(geometry.height[i])}x{int(geometry.width[i])} image a size "
                                  f"of {int(height[i])}x{int(width[i])}, without pixels", i)
        return {"height": height, "width": width}

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        G.resize(geometry, params["height"], params["width"], self.filter)

    def bound_size(self, bound: SizeBound) -> SizeBound:
        if len(self.size) == 2:
            return SizeBound.fixed(*self.size)
        s = float(self.size[0])
        if self.max_size is not None:  # shorter side <= size, longer side <= max_size
            return SizeBound(float(self.max_size), float(self.max_size), s * self.max_size)
        # the shorter side becomes s, the longer one s * (long / short) <= s * the largest aspect ratio
        long = s * bound.aspect
        return SizeBound(long, long, s * long)

    def extra_repr(self) -> str:
        return (f"size={self.size}, interpolation={_mode_repr(self.filter)}, max_size={self.max_size}, "
                f"antialias={self.antialias}")


class _FixedCrop(Transform):
    """A crop of a fixed output size at a per-sample position (``make_params`` picks it)."""

    stage = "geometry"
    size: list[int]

    def update_state(self, state: StaticState) -> StaticState:
        return dataclasses.replace(state, size=(self.size[0], self.size[1]))

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        G.crop(geometry, params["top"], params["left"], self.size[0], self.size[1])

    def extra_repr(self) -> str:
        return f"size={self.size}"


@register("CenterCrop", usage="CenterCrop(size)", semantics="same anchor, zero padding when larger")
class CenterCrop(_FixedCrop):
    """Crop the center; pads with zeros when the crop is larger than the image."""

    def update_state(self, state: StaticState) -> StaticState:
        if state.size is not None and (self.size[0] > state.size[0] or self.size[1] > state.size[1]):
            state = declare_padding(state, self, None, 0)  # pads every image with zeros
        return super().update_state(state)

    def __init__(self, size: int | Sequence[int]) -> None:
        size = setup_size(size, "CenterCrop")
        self.size = size * 2 if len(size) == 1 else size
        if any(v <= 0 for v in self.size):
            raise ValueError(f"CenterCrop: size must be positive, got {self.size}")

    @classmethod
    def from_torchvision(cls, t: Any) -> CenterCrop:
        return cls(list(t.size))

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        larger = (geometry.height < self.size[0]) | (geometry.width < self.size[1])
        if geometry.fill_by is not None and larger.any():
            i = int(np.argmax(larger))
            raise ValueError(f"{self!r} pads sample {i} ({int(geometry.height[i])}x{int(geometry.width[i])}) with "
                             f"zeros, but {geometry.fill_by} pads with a fill: the kernel pads a pipeline with one "
                             f"fill; resize the images first, or pad them to the crop with that fill")
        top, left = G.center_crop_box(geometry.height, geometry.width, self.size[0], self.size[1])
        return {"top": top, "left": left}


PADDING_MODES = G.PADDING_MODES


def image_fill(fill: Any, name: str) -> tuple[float, float, float]:
    """The fill torchvision's ``pad`` uses on an image, from a ``fill`` argument, as 3 values:
    a number, a sequence of 1 or 3, None (0), or a dict keyed by type or ``"others"``, of
    which the entry for images is read (``tv_tensors.Image``, else ``torch.Tensor``, else
    ``"others"``, else 0: torchvision looks the type up with ``in``, so a defaultdict's
    default is never used)."""
    if isinstance(fill, dict):
        entries = {getattr(k, "__name__", k): v for k, v in fill.items()}
        fill = next((entries[k] for k in ("Image", "Tensor", "others") if k in entries), None)
    if fill is None:
        return (0.0, 0.0, 0.0)
    if isinstance(fill, (int, float)) and not isinstance(fill, bool):
        return (float(fill),) * 3
    if isinstance(fill, (tuple, list)) and len(fill) in (1, 3) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in fill):
        values = [float(v) for v in fill]
        return tuple(values * 3 if len(values) == 1 else values)  # type: ignore[return-value]
    raise TypeError(f"{name}: fill must be a number, a sequence of 1 or 3 numbers, None or a dict of them, "
                    f"got {fill!r}")


def padding_route(name: str, fill: Any, padding_mode: str) -> str | None:
    """How a step with these arguments pads (``_geometry.pad``'s ``mode``): None for zero
    padding through the valid window (``fill=0, padding_mode="constant"``, the exact
    fast path when no resize follows), else the padding mode. Checks both arguments."""
    if padding_mode not in PADDING_MODES:
        raise ValueError(f"{name}: padding_mode={padding_mode!r} is not a padding mode; torchvision's are "
                         f"constant, edge, reflect and symmetric")
    values = image_fill(fill, name)
    if padding_mode == "constant" and not any(values):
        return None
    return padding_mode


def declare_padding(state: StaticState, step: Any, mode: str | None, fill: Any) -> StaticState:
    """The state after ``step`` may pad with ``mode`` (``padding_route``; None: zeros through
    the valid window) and ``fill``.

    The kernel pads a whole pipeline one way (``PadSpec``): one padding mode and one fill.
    Raises ValueError naming both steps when two disagree, when a non-zero fill meets a step
    that pads with zeros (CenterCrop larger than the image), for a fill outside 0..255 on a
    uint8 image, and for the edge, reflect and symmetric modes after a resize (torchvision
    mirrors the resized pixels there; the kernel mirrors source pixels).
    """
    name = repr(step)
    if mode is None:
        if state.pad is not None and state.pad.mode == "constant" and any(state.pad.fill):
            raise ValueError(f"{name} pads with zeros but {state.pad.by} pads with a fill: the kernel pads a "
                             f"pipeline with one fill; give both the same fill")
        return state if state.zero_pad is not None else dataclasses.replace(state, zero_pad=name)
    if mode != "constant" and state.resampled:
        raise ValueError(f"{name}: padding_mode={mode!r} after a resize is not supported (torchvision mirrors the "
                         f"resized pixels, the kernel the source's); pad before the resize, or use "
                         f"padding_mode='constant'")
    values = image_fill(fill, name) if mode == "constant" else (0.0, 0.0, 0.0)
    if mode == "constant" and state.dtype == torch.uint8:
        if any(not 0.0 <= v < 256.0 for v in values):
            raise ValueError(f"{name}: fill={fill!r} does not fit a uint8 image (0..255)")
        pixel = tuple(float(int(v)) for v in values)  # torchvision truncates the fill into the uint8 image
    else:
        # a fill given on a float image: the resampled pixel the epilogue's affine maps onto it
        pixel = tuple((v - b) / sc for v, sc, b in zip(values, state.scale, state.bias))
    spec = PadSpec(mode, pixel, name)  # type: ignore[arg-type]
    if state.pad is None:
        if mode == "constant" and any(pixel) and state.zero_pad is not None:
            raise ValueError(f"{name} pads with fill={fill!r} but {state.zero_pad} pads with zeros: the kernel pads "
                             f"a pipeline with one fill; give both the same fill")
        return dataclasses.replace(state, pad=spec)
    if (state.pad.mode, state.pad.fill) != (spec.mode, spec.fill):
        raise ValueError(f"{name} pads with padding_mode={mode!r}, fill={pixel} but {state.pad.by} with "
                         f"padding_mode={state.pad.mode!r}, fill={state.pad.fill}: the kernel pads a pipeline one "
                         f"way; make them agree")
    return state


def _is_v2(t: Any) -> bool:
    return (type(t).__module__ or "").startswith("torchvision.transforms.v2")


@register("RandomCrop", usage="RandomCrop(size, padding=None, pad_if_needed=False, fill=0, padding_mode=\"constant\")",
          semantics="same padding, pad_if_needed, fill, padding modes and position sampling",
          notes="drawn per sample; one padding mode and fill per pipeline")
class RandomCrop(_FixedCrop):
    """Crop at a random position, drawn per sample, after optional padding.

    As ``torchvision.transforms.v2.RandomCrop``: ``padding`` (an int, ``(left/right,
    top/bottom)`` or ``(left, top, right, bottom)``) pads every image first;
    ``pad_if_needed`` then pads both sides of an axis by what the crop still lacks;
    top and left are uniform over the padded image. The padding is not materialised.
    Zero padding (``fill=0, padding_mode="constant"``) is a crop box that starts at
    negative coordinates, the part outside the image zero (the valid window of
    ``_geometry.py``); a resize after it sees the padding only approximately (as after
    a CenterCrop larger than the image). Any other ``fill`` or ``padding_mode``
    (``edge``, ``reflect``, ``symmetric``) pads through the kernel's fold box
    (``_geometry.pad``): exact, also under a later resize. A pipeline pads one way
    (one mode, one fill; ``declare_padding``).
    """

    n_uniforms = 2  # top, left

    def __init__(self, size: int | Sequence[int], padding: Any = None, pad_if_needed: bool = False,
                 fill: Any = 0, padding_mode: str = "constant") -> None:
        size = setup_size(size, "RandomCrop")
        self.size = size * 2 if len(size) == 1 else size
        if any(v <= 0 for v in self.size):
            raise ValueError(f"RandomCrop: size must be positive, got {self.size}")
        # torchvision v2 drops a falsy padding (0, None, [])
        self.padding = padding if padding else None
        #: (left, top, right, bottom)
        self.pads = G.parse_padding(padding, "RandomCrop") if self.padding is not None else (0, 0, 0, 0)
        self.pad_if_needed = bool(pad_if_needed)
        self.fill = fill
        self.padding_mode = padding_mode
        #: ``_geometry.pad``'s mode: None for zero padding through the valid window
        self.pad_mode = padding_route("RandomCrop", fill, padding_mode)

    @property
    def may_pad(self) -> bool:
        return any(p > 0 for p in self.pads) or self.pad_if_needed

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomCrop:
        padding = t.padding
        if padding is not None and _is_v2(t):
            # v2 keeps its padding parsed as (left, right, top, bottom), torch's pad order
            left, right, top, bottom = padding
            padding = [left, top, right, bottom]
        return cls(list(t.size), padding=padding, pad_if_needed=t.pad_if_needed, fill=t.fill,
                   padding_mode=t.padding_mode)

    def update_state(self, state: StaticState) -> StaticState:
        if self.may_pad:
            state = declare_padding(state, self, self.pad_mode, self.fill)
        return super().update_state(state)

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        ch, cw = self.size
        top, left, padded_h, padded_w = G.random_crop_box(geometry.height, geometry.width, ch, cw, self.pads,
                                                          self.pad_if_needed, u)
        small = (padded_h < ch) | (padded_w < cw)
        if np.any(small):
            i = int(np.argmax(small))
            padded = "padded " if self.padding is not None else ""
            raise SampleDrawError(f"RandomCrop: required crop size {(ch, cw)} is larger than {padded}input image "
                                  f"size {(int(padded_h[i]), int(padded_w[i]))}; pass pad_if_needed=True to pad "
                                  f"small images, or Resize them first", i)
        params = {"top": top, "left": left}
        if self.pad_mode is not None:
            # the padding of each side, pad_if_needed's included (what the padded image adds)
            pl, pt, pr, pb = self.pads
            dh = (padded_h - geometry.height - (pt + pb)) / 2
            dw = (padded_w - geometry.width - (pl + pr)) / 2
            params.update(pad_left=pl + dw, pad_top=pt + dh, pad_right=pr + dw, pad_bottom=pb + dh)
        return params

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        if self.pad_mode is None:
            G.crop(geometry, params["top"], params["left"], self.size[0], self.size[1])
            return
        G.pad(geometry, params["pad_left"], params["pad_top"], params["pad_right"], params["pad_bottom"],
              self.pad_mode)
        G.crop(geometry, params["top"] + params["pad_top"], params["left"] + params["pad_left"], self.size[0],
               self.size[1])

    def extra_repr(self) -> str:
        out = f"size={self.size}"
        if self.padding is not None:
            out += f", padding={self.padding}"
        if self.pad_if_needed:
            out += ", pad_if_needed=True"
        if self.pad_mode is not None and self.may_pad:
            out += f", fill={self.fill!r}, padding_mode={self.padding_mode!r}"
        return out


@register("Pad", usage="Pad(padding, fill=0, padding_mode=\"constant\")",
          semantics="same padding: int, `(left/right, top/bottom)` or `(left, top, right, bottom)`; fill and "
                    "padding modes",
          notes="one padding mode and fill per pipeline; zero padding before a resize approximates the blended "
                "border, as CenterCrop's")
class Pad(Transform):
    """Pad every image, as ``torchvision.transforms.v2.Pad(padding, fill, padding_mode)``.

    ``padding``: an int for every side, ``(left/right, top/bottom)`` or ``(left, top,
    right, bottom)``; negative values crop. Zero padding (``fill=0,
    padding_mode="constant"``) is a crop whose box starts at ``(-top, -left)``, exact
    unless a resize follows (which sees the padding approximately, as RandomCrop's);
    any other fill or mode pads through the kernel's fold box (``_geometry.pad``),
    exact also under a later resize. The output size is the input's plus the padding,
    so a pipeline over images of different sizes gets images of different sizes.
    """

    stage = "geometry"

    def __init__(self, padding: int | Sequence[int], fill: Any = 0, padding_mode: str = "constant") -> None:
        #: (left, top, right, bottom)
        self.pads = G.parse_padding(padding, "Pad")
        self.padding = padding if isinstance(padding, int) else list(padding)
        self.fill = fill
        self.padding_mode = padding_mode
        #: ``_geometry.pad``'s mode: None for zero padding through the valid window
        self.pad_mode = padding_route("Pad", fill, padding_mode)

    @classmethod
    def from_torchvision(cls, t: Any) -> Pad:
        return cls(t.padding, fill=t.fill, padding_mode=t.padding_mode)

    def update_state(self, state: StaticState) -> StaticState:
        if any(p > 0 for p in self.pads):
            state = declare_padding(state, self, self.pad_mode, self.fill)
        if state.size is None:
            return state
        left, top, right, bottom = self.pads
        height, width = state.size[0] + top + bottom, state.size[1] + left + right
        if height <= 0 or width <= 0:
            raise ValueError(f"Pad: padding {self.padding} leaves no pixels of a {state.size[0]}x{state.size[1]} "
                             f"image")
        return dataclasses.replace(state, size=(height, width))

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        left, top, right, bottom = self.pads
        empty = (geometry.height + top + bottom <= 0) | (geometry.width + left + right <= 0)
        if np.any(empty):
            i = int(np.argmax(empty))
            raise SampleDrawError(f"Pad: padding {self.padding} leaves no pixels of a "
                                  f"{int(geometry.height[i])}x{int(geometry.width[i])} image", i)
        return {}

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        G.pad(geometry, *self.pads, self.pad_mode)

    def bound_size(self, bound: SizeBound) -> SizeBound:
        left, top, right, bottom = self.pads
        dh, dw = max(top + bottom, 0), max(left + right, 0)  # a negative pad (a crop) only shrinks
        # (h + dh)(w + dw) = hw + h dw + w dh + dh dw
        return SizeBound(bound.height + dh, bound.width + dw,
                         bound.pixels + bound.height * dw + bound.width * dh + dh * dw)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        """Pad one image (CHW or HWC uint8) on the CPU reference path; returns CHW."""
        hwc = to_hwc(image)  # a single image's size is known, so the padded size is too
        return apply_to_images(Compose([_KeepSize(int(hwc.shape[0]), int(hwc.shape[1])), self]), [hwc])[0]

    def extra_repr(self) -> str:
        out = f"padding={self.padding}"
        if self.pad_mode is not None:
            out += f", fill={self.fill!r}, padding_mode={self.padding_mode!r}"
        return out


@register("RandomHorizontalFlip", usage="RandomHorizontalFlip(p=0.5)", semantics="yes", notes="drawn per sample")
class RandomHorizontalFlip(Transform):
    """Flip left-right with probability ``p``, decided per sample."""

    stage = "geometry"
    n_uniforms = 1

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{type(self).__name__}: p must be in [0, 1], got {p}")
        self.p = float(p)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomHorizontalFlip:
        return cls(p=t.p)

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        return {"flip": u[:, 0] < self.p}

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        G.horizontal_flip(geometry, params["flip"])

    def bound_size(self, bound: SizeBound) -> SizeBound:
        return bound  # a flip keeps the size

    def extra_repr(self) -> str:
        return f"p={self.p}"


@register("RandomVerticalFlip", usage="RandomVerticalFlip(p=0.5)", semantics="yes", notes="drawn per sample")
class RandomVerticalFlip(RandomHorizontalFlip):
    """Flip top-bottom with probability ``p``, decided per sample."""

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        G.vertical_flip(geometry, params["flip"])


@register("ToDtype", usage="ToDtype(dtype, scale=False)",
          semantics="uint8 → float16/bfloat16/float32; a dtype dict's `Mask` entry converts the masks",
          notes="output dtype of the kernel")
class ToDtype(Transform):
    """Convert the dtype; ``scale=True`` maps uint8 [0, 255] to float [0, 1]."""

    stage = "epilogue"

    def __init__(self, dtype: torch.dtype, scale: bool = False) -> None:
        #: the dtype a dict gives ``tv_tensors.Mask`` targets (its Mask entry, else ``"others"``; None: kept),
        #: which ``_target_plan.py`` converts them to, as torchvision does (``scale`` does not apply to masks)
        self.mask_dtype: torch.dtype | None = None
        if isinstance(dtype, dict):
            entries = {getattr(k, "__name__", k): v for k, v in dtype.items()}
            self.mask_dtype = entries.get("Mask", entries.get("others"))
            dtype = dtype.get("image", dtype.get(torch.Tensor, None)) if hasattr(dtype, "get") else None
        if dtype not in FLOAT_DTYPES + (torch.uint8,):
            raise ValueError(f"ToDtype: unsupported dtype {dtype!r}; use uint8, float16, bfloat16 or float32")
        self.dtype = dtype
        self.scale = bool(scale)

    @classmethod
    def from_torchvision(cls, t: Any) -> ToDtype:
        return cls(t.dtype, scale=t.scale)

    def update_state(self, state: StaticState) -> StaticState:
        if self.dtype == torch.uint8 and state.dtype != torch.uint8:
            raise ValueError("ToDtype: converting a float image back to uint8 is not supported")
        if self.dtype in FLOAT_DTYPES and state.dtype == torch.uint8 and self.scale:
            state = dataclasses.replace(state, scale=tuple(v / 255.0 for v in state.scale),
                                        bias=tuple(v / 255.0 for v in state.bias))
        return dataclasses.replace(state, dtype=self.dtype)

    def extra_repr(self) -> str:
        masks = f", masks={self.mask_dtype}" if self.mask_dtype is not None else ""
        return f"dtype={self.dtype}, scale={self.scale}{masks}"


@register("Normalize", usage="Normalize(mean, std)", semantics="needs a float image first, as torchvision",
          notes="fused into the kernel")
class Normalize(Transform):
    """``(x - mean) / std`` per channel, on a float image."""

    stage = "epilogue"

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

    @classmethod
    def from_torchvision(cls, t: Any) -> Normalize:
        return cls(t.mean, t.std)

    def update_state(self, state: StaticState) -> StaticState:
        if state.dtype not in FLOAT_DTYPES:
            raise ValueError("Normalize: the image is still uint8; put ToDtype(torch.float32, scale=True) "
                             "before Normalize (as torchvision requires)")
        # (value * scale + bias - mean) / std, folded into one affine
        return dataclasses.replace(
            state,
            scale=tuple(a / sd for a, sd in zip(state.scale, self.std)),
            bias=tuple((b - m) / sd for b, m, sd in zip(state.bias, self.mean, self.std)),
        )

    def extra_repr(self) -> str:
        return f"mean={self.mean}, std={self.std}"


@register("ToImage", "PILToTensor", "ToPureTensor", "Identity", "RGB", semantics="accepted",
          notes="no-op: images reach the kernel decoded")
class Identity(Transform):
    """No-op; stands for ``ToImage``/``PILToTensor``/``ToPureTensor`` in torchvision pipelines.

    The loader hands the kernel decoded uint8 images already, which is what these produce.
    """

    stage = "meta"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @classmethod
    def from_torchvision(cls, t: Any) -> Identity:
        return cls()


ToImage = Identity
PILToTensor = Identity
ToPureTensor = Identity


@register("ToTensor", semantics="accepted", notes="= `ToDtype(torch.float32, scale=True)`")
class ToTensor(Transform):
    """torchvision's v1 ``ToTensor``: uint8 HWC to float [0, 1] CHW."""

    stage = "epilogue"

    def __init__(self) -> None:
        self._inner = ToDtype(torch.float32, scale=True)

    @classmethod
    def from_torchvision(cls, t: Any) -> ToTensor:
        return cls()

    def update_state(self, state: StaticState) -> StaticState:
        return self._inner.update_state(state)


@register("ConvertImageDtype", usage="ConvertImageDtype(dtype=torch.float32)", semantics="accepted",
          notes="= `ToDtype(dtype, scale=True)`")
class ConvertImageDtype(ToDtype):
    """``ConvertImageDtype(dtype)`` = ``ToDtype(dtype, scale=True)``."""

    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        super().__init__(dtype, scale=True)

    @classmethod
    def from_torchvision(cls, t: Any) -> ConvertImageDtype:
        return cls(t.dtype)


class BatchImages(Transform):
    """Deliver every batch as one tensor padded to its largest image, with the images' sizes.

    The last step of a pipeline whose output size varies (``Resize(800, max_size=1333)``,
    ``Pad``, photometric ops on images of their own size): instead of a list of
    per-image tensors, the loop gets an ``ImageList(tensors, image_sizes)`` (the fields
    of torchvision's detection ``ImageList``): ``tensors`` ``[B, 3, H, W]`` with ``H``,
    ``W`` the batch's largest height and width rounded up to a multiple of
    ``size_divisible``, image ``i`` at ``tensors[i, :, :h_i, :w_i]`` and ``fill``
    elsewhere, as torchvision's ``GeneralizedRCNNTransform.batch_images`` pads. ``fill``
    is a value of the output (after ToDtype and Normalize; an integer for a uint8
    output). The kernel writes the images into the padded tensor directly.

    Not a torchvision transform: torchvision pads inside its detection models.
    """

    stage = "meta"

    def __init__(self, size_divisible: int = 1, fill: float = 0.0) -> None:
        if isinstance(size_divisible, bool) or not isinstance(size_divisible, int) or size_divisible < 1:
            raise ValueError(f"BatchImages: size_divisible must be a positive int, got {size_divisible!r}")
        if isinstance(fill, bool) or not isinstance(fill, (int, float)):
            raise TypeError(f"BatchImages: fill must be a number, got {fill!r}")
        self.size_divisible = size_divisible
        self.fill = float(fill)

    def update_state(self, state: StaticState) -> StaticState:
        return dataclasses.replace(state, batch_images=BatchImagesSpec(self.size_divisible, self.fill))

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        raise TypeError("BatchImages pads a batch: use it as the last step of a DataLoader's transforms")

    def extra_repr(self) -> str:
        return f"size_divisible={self.size_divisible}, fill={self.fill}"
