"""Symbolic per-sample geometry: how every output pixel maps back to the source.

A Compose of crops, resizes and flips is folded, per sample, into one affine map
per axis (``source = origin + step * (out + 0.5)``), a clamp region in the source
(what torchvision's resize sees as the image border) and a valid window in the
output (outside it the pixel is zero padding). That is exactly what the fused
kernel consumes, so the whole pipeline runs as one resampling pass.

Padding with more than zeros (a fill, or the edge, reflect and symmetric modes)
before any resize widens the clamp region to the padded extent instead, and records
the image it pads as the fold box (the ``source`` columns of the kernel's
parameters): the kernel folds the taps that fall outside the box back into it, or
reads the fill there, so a resize after the padding resamples the padded image as
torchvision does (:func:`pad`).

This is the internal layer under both tiers: the transform classes apply their
per-sample parameters here, and the functionals build a one-image geometry here
before running the reference kernel. Everything is float64 numpy, one entry per
sample; the functions update a ``BatchGeometry`` in place.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from csrc_triton import layout

from ..errors import SampleDrawError


@dataclass
class BatchGeometry:
    """Geometry state of a batch, one entry per sample (float64 numpy arrays).

    The fields named like columns of the kernel's ``geometry`` and ``epilogue``
    parameter blocks (``csrc_triton.layout``) are exactly those columns; ``height``/``width`` are
    the size of the current (virtual) image and ``resampled`` whether a resize
    has happened yet, which changes what a later crop does. ``filter`` is the
    interpolation code (``layout.FILTER_*``) of the last resize. ``fold_*`` (the
    ``source`` block) is the fold box of a padding mode: by default the clamp region
    the geometry starts with, the source image.
    """

    height: np.ndarray  # current (virtual) image height
    width: np.ndarray
    origin_y: np.ndarray
    origin_x: np.ndarray
    step_y: np.ndarray
    step_x: np.ndarray
    lo_y: np.ndarray
    hi_y: np.ndarray
    lo_x: np.ndarray
    hi_x: np.ndarray
    valid_y0: np.ndarray
    valid_y1: np.ndarray
    valid_x0: np.ndarray
    valid_x1: np.ndarray
    filter: np.ndarray
    resampled: bool = False
    # the epilogue block: RandomErasing's box in the output and its noise key (empty box: no erase)
    erase_y0: np.ndarray | None = None
    erase_y1: np.ndarray | None = None
    erase_x0: np.ndarray | None = None
    erase_x1: np.ndarray | None = None
    erase_seed: np.ndarray | None = None
    # the source block: the fold box of a padding mode (default: the source image)
    fold_y0: np.ndarray | None = None
    fold_y1: np.ndarray | None = None
    fold_x0: np.ndarray | None = None
    fold_x1: np.ndarray | None = None
    #: the step of the pipeline whose non-zero fill is read outside the valid window, where a
    #: step padding with zeros (CenterCrop larger than the image) cannot pad (None: it can)
    fill_by: str | None = None
    #: during a draw from boxes (``Plan._draw``): the samples' boxes where the draw stands, for a
    #: step that draws its parameters from them (RandomIoUCrop; ``_targets.BoxTrack``); else None
    boxes: Any = None

    def __post_init__(self) -> None:
        for name in layout.block("epilogue").columns:
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(len(self.height)))
        for name, start in (("fold_y0", self.lo_y), ("fold_y1", self.hi_y), ("fold_x0", self.lo_x),
                            ("fold_x1", self.hi_x)):
            if getattr(self, name) is None:
                setattr(self, name, np.array(start, dtype=np.float64))

    @classmethod
    def identity(cls, sizes: np.ndarray) -> "BatchGeometry":
        """Geometry of the untouched source images; ``sizes`` is ``[B, 2]`` (H, W)."""
        sizes = np.asarray(sizes, dtype=np.float64).reshape(-1, 2)
        h, w = sizes[:, 0].copy(), sizes[:, 1].copy()
        zeros = np.zeros_like(h)
        ones = np.ones_like(h)
        return cls(
            height=h, width=w,
            origin_y=zeros.copy(), origin_x=zeros.copy(), step_y=ones.copy(), step_x=ones.copy(),
            lo_y=zeros.copy(), hi_y=h.copy(), lo_x=zeros.copy(), hi_x=w.copy(),
            valid_y0=zeros.copy(), valid_y1=h.copy(), valid_x0=zeros.copy(), valid_x1=w.copy(),
            filter=np.full_like(h, float(layout.FILTER_BILINEAR)),
        )

    def __len__(self) -> int:
        return len(self.height)

    def to_params(self) -> torch.Tensor:
        """``[B, layout.NUM_PARAMS]`` float32 kernel parameters.

        Fills the ``geometry``, ``source`` and ``epilogue`` blocks column by column from
        the fields of the same name and the ``output`` block from ``height``/``width``
        (the size of the output image); the other blocks stay zero until a stage
        reads per-sample values there.
        """
        rows = np.zeros((len(self), layout.NUM_PARAMS), dtype=np.float32)
        names = layout.block("geometry").columns + layout.block("source").columns + layout.block("epilogue").columns
        for name in names:
            rows[:, layout.column(name)] = getattr(self, name)
        rows[:, layout.OUT_H] = self.height
        rows[:, layout.OUT_W] = self.width
        return torch.from_numpy(rows)


def _broadcast(value, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(value, dtype=np.float64), (n,)).copy()


def crop(g: BatchGeometry, top, left, height, width) -> None:
    """Crop the current images to ``[top, top+height) x [left, left+width)``.

    Boxes may reach outside the image (CenterCrop larger than the image): the part
    outside becomes zero padding through the valid window.
    """
    n = len(g)
    top, left = _broadcast(top, n), _broadcast(left, n)
    height, width = _broadcast(height, n), _broadcast(width, n)
    if not g.resampled:
        # Before any resampling, a crop also moves the border that a later
        # resize clamps to (torchvision resizes the cropped image).
        for lo, hi, origin, step, start, size in (
            (g.lo_y, g.hi_y, g.origin_y, g.step_y, top, height),
            (g.lo_x, g.hi_x, g.origin_x, g.step_x, left, width),
        ):
            a = origin + step * start
            b = origin + step * (start + size)
            np.maximum(lo, np.minimum(a, b), out=lo)
            np.minimum(hi, np.maximum(a, b), out=hi)
            np.maximum(hi, lo + 1, out=hi)  # keep at least one source pixel
    g.origin_y += g.step_y * top
    g.origin_x += g.step_x * left
    g.valid_y0 = np.clip(g.valid_y0 - top, 0, height)
    g.valid_y1 = np.clip(g.valid_y1 - top, 0, height)
    g.valid_x0 = np.clip(g.valid_x0 - left, 0, width)
    g.valid_x1 = np.clip(g.valid_x1 - left, 0, width)
    g.height, g.width = height, width


#: torchvision's padding modes (``padding_mode``); the kernel's codes are ``layout.PAD_*``
PADDING_MODES = ("constant", "edge", "reflect", "symmetric")


def pad(g: BatchGeometry, left, top, right, bottom, mode: str | None = None) -> None:
    """Pad the current images by ``left``/``top``/``right``/``bottom`` pixels on each side
    (negative values crop, as torchvision's ``pad`` does for every mode).

    ``mode=None``: zero padding, a crop whose box starts at ``(-top, -left)``: the part
    outside the image is zero through the valid window (a resize after it sees the
    zeros only approximately: the valid window scales with the image).

    ``mode`` one of ``PADDING_MODES``: before any resize, the clamp region widens to the
    padded extent and the image being padded becomes the fold box; the kernel, compiled
    with that padding mode, folds the taps outside the box into it (edge, reflect,
    symmetric) or reads the pipeline's fill there (constant), so a later resize is
    exact. A constant pad after a resize is outside the resampled image: the valid
    window, which the constant mode fills. Raises ValueError where one fold box cannot
    say it: the other modes after a resize, or after zero padding, and a second reflect
    or symmetric pad of an image that already holds padding; and where torchvision
    raises: reflect padding not smaller than the image, symmetric padding larger.
    """
    n = len(g)
    left, top, right, bottom = (_broadcast(v, n) for v in (left, top, right, bottom))
    if mode is None or (mode == "constant" and g.resampled):
        crop(g, -top, -left, g.height + top + bottom, g.width + left + right)
        return
    if mode not in PADDING_MODES:
        raise ValueError(f"padding_mode must be one of {PADDING_MODES}, got {mode!r}")
    if (left < 0).any() or (top < 0).any() or (right < 0).any() or (bottom < 0).any():
        # torchvision crops the negative sides first, then pads the others
        t, lf = np.maximum(-top, 0), np.maximum(-left, 0)
        crop(g, t, lf, g.height - t - np.maximum(-bottom, 0), g.width - lf - np.maximum(-right, 0))
        left, top, right, bottom = (np.maximum(v, 0) for v in (left, top, right, bottom))
    if not ((left > 0).any() or (top > 0).any() or (right > 0).any() or (bottom > 0).any()):
        return
    if g.resampled:
        raise ValueError(f"padding_mode={mode!r} after a resize is not supported: the kernel folds source pixels, "
                         f"torchvision would fold the resized ones; pad before the resize")
    _fold_axis(g, "y", top, bottom, mode)
    _fold_axis(g, "x", left, right, mode)


def _fold_axis(g: BatchGeometry, axis: str, before: np.ndarray, after: np.ndarray, mode: str) -> None:
    """One axis of :func:`pad` with a padding mode, before any resize (whole-pixel geometry)."""
    size = g.height if axis == "y" else g.width
    origin, step = getattr(g, f"origin_{axis}"), getattr(g, f"step_{axis}")
    v0, v1 = getattr(g, f"valid_{axis}0"), getattr(g, f"valid_{axis}1")
    f0, f1 = getattr(g, f"fold_{axis}0"), getattr(g, f"fold_{axis}1")
    pads = (before > 0) | (after > 0)
    # the current image in source coordinates (a flip walks it backwards)
    a, b = origin, origin + step * size
    e0, e1 = np.minimum(a, b), np.maximum(a, b)
    full = (v0 <= 0) & (v1 >= size)
    within = (e0 >= f0) & (e1 <= f1)  # it holds no padding of an earlier fold
    side = "height" if axis == "y" else "width"
    if mode == "reflect" and (pads & ((before >= size) | (after >= size))).any():
        i = int(np.argmax(pads & ((before >= size) | (after >= size))))
        raise SampleDrawError(f"padding_mode='reflect' needs padding smaller than the image's {side} "
                              f"{int(size[i])}, got {int(before[i])} and {int(after[i])}, as torch's reflection pad", i)
    if mode == "symmetric" and (pads & ((before > size) | (after > size))).any():
        i = int(np.argmax(pads & ((before > size) | (after > size))))
        raise SampleDrawError(f"padding_mode='symmetric' needs padding at most the image's {side} "
                              f"{int(size[i])}, got {int(before[i])} and {int(after[i])}, as torchvision", i)
    if mode != "constant" and (pads & ~full).any():
        raise ValueError(f"padding_mode={mode!r} of an image that was padded with zeros before (sample "
                         f"{int(np.argmax(pads & ~full))}): one fold box cannot mirror zeros; pad with the mode first")
    if mode in ("reflect", "symmetric") and (pads & ~within).any():
        raise ValueError(f"padding_mode={mode!r} of an image that already holds padding (sample "
                         f"{int(np.argmax(pads & ~within))}): a mirror of a mirror needs two fold boxes; pad once")
    # a constant pad of an image with zero padding inside stays a crop (the valid window)
    fold = pads & (full | (mode != "constant"))
    if mode == "edge":
        # the border pixels of the current image: where it reaches past the box, the box's
        nf0 = np.minimum(np.maximum(e0, f0), f1 - 1)
        nf1 = np.maximum(np.minimum(e1, f1), nf0 + 1)
    else:
        # constant: the real pixels of the current image (may be empty); reflect and
        # symmetric: the current image (within the box)
        nf0 = np.maximum(e0, f0)
        nf1 = np.maximum(np.minimum(e1, f1), nf0)
    pa, pb = origin - step * before, origin + step * (size + after)
    setattr(g, f"lo_{axis}", np.where(fold, np.minimum(pa, pb), getattr(g, f"lo_{axis}")))
    setattr(g, f"hi_{axis}", np.where(fold, np.maximum(pa, pb), getattr(g, f"hi_{axis}")))
    setattr(g, f"fold_{axis}0", np.where(fold, nf0, f0))
    setattr(g, f"fold_{axis}1", np.where(fold, nf1, f1))
    new_size = size + before + after
    setattr(g, f"origin_{axis}", origin - step * before)
    setattr(g, f"valid_{axis}0", np.where(fold, 0.0, np.clip(v0 + before, 0, new_size)))
    setattr(g, f"valid_{axis}1", np.where(fold, new_size, np.clip(v1 + before, 0, new_size)))
    if axis == "y":
        g.height = new_size
    else:
        g.width = new_size


def resize(g: BatchGeometry, height, width, interpolation=layout.FILTER_BILINEAR) -> None:
    """Resample the current images to ``height x width`` with the filter ``interpolation``
    (a ``layout.FILTER_*`` code, or one per sample)."""
    n = len(g)
    height, width = _broadcast(height, n), _broadcast(width, n)
    sy, sx = g.height / height, g.width / width
    g.step_y = g.step_y * sy
    g.step_x = g.step_x * sx
    # Padding that existed before a resize scales with it (approximates
    # torchvision, which would blend the zero border into the edge pixels).
    g.valid_y0, g.valid_y1 = np.round(g.valid_y0 / sy), np.round(g.valid_y1 / sy)
    g.valid_x0, g.valid_x1 = np.round(g.valid_x0 / sx), np.round(g.valid_x1 / sx)
    g.height, g.width = height, width
    g.filter = _broadcast(interpolation, n)
    g.resampled = True


def _flip(g: BatchGeometry, axis: str, mask: np.ndarray | bool) -> None:
    m = _broadcast(mask, len(g)).astype(bool)
    size = g.width if axis == "x" else g.height
    origin, step = getattr(g, f"origin_{axis}"), getattr(g, f"step_{axis}")
    v0, v1 = getattr(g, f"valid_{axis}0"), getattr(g, f"valid_{axis}1")
    setattr(g, f"origin_{axis}", np.where(m, origin + step * size, origin))
    setattr(g, f"step_{axis}", np.where(m, -step, step))
    setattr(g, f"valid_{axis}0", np.where(m, size - v1, v0))
    setattr(g, f"valid_{axis}1", np.where(m, size - v0, v1))


def horizontal_flip(g: BatchGeometry, mask: np.ndarray | bool = True) -> None:
    """Mirror the selected samples left-right."""
    _flip(g, "x", mask)


def vertical_flip(g: BatchGeometry, mask: np.ndarray | bool = True) -> None:
    """Mirror the selected samples top-bottom."""
    _flip(g, "y", mask)


def erase(g: BatchGeometry, mask: np.ndarray | bool, top, left, height, width, seed=0) -> None:
    """Erase the box ``[top, top+height) x [left, left+width)`` of the output for the samples
    in ``mask`` (the others keep an empty box); ``seed`` keys ``value="random"`` noise."""
    n = len(g)
    m = _broadcast(mask, n).astype(bool)
    top, left = _broadcast(top, n), _broadcast(left, n)
    g.erase_y0 = np.where(m, top, 0.0)
    g.erase_y1 = np.where(m, top + _broadcast(height, n), 0.0)
    g.erase_x0 = np.where(m, left, 0.0)
    g.erase_x1 = np.where(m, left + _broadcast(width, n), 0.0)
    g.erase_seed = np.where(m, _broadcast(seed, n), 0.0)


def resized_output_size(height: np.ndarray, width: np.ndarray, size: list[int], max_size: int | None):
    """torchvision's output size rule for ``Resize`` (``int``/1-element = shorter side)."""
    if len(size) == 2:
        return _broadcast(size[0], len(height)), _broadcast(size[1], len(height))
    short = np.minimum(height, width)
    long = np.maximum(height, width)
    new_short = np.full_like(short, float(size[0]))
    new_long = np.floor(size[0] * long / short)
    if max_size is not None:
        over = new_long > max_size
        new_short = np.where(over, np.floor(max_size * new_short / new_long), new_short)
        new_long = np.where(over, float(max_size), new_long)
    w_short = width <= height
    new_w = np.where(w_short, new_short, new_long)
    new_h = np.where(w_short, new_long, new_short)
    return new_h, new_w


def center_crop_box(height: np.ndarray, width: np.ndarray, crop_h: int, crop_w: int):
    """torchvision's CenterCrop anchor, padding symmetrically when the crop is larger."""
    # np.round rounds half to even like Python's round, which torchvision uses.
    top = np.where(crop_h > height, -np.floor((crop_h - height) / 2), np.round((height - crop_h) / 2.0))
    left = np.where(crop_w > width, -np.floor((crop_w - width) / 2), np.round((width - crop_w) / 2.0))
    return top, left


def random_resized_crop_box(height, width, scale, ratio, u: np.ndarray):
    """Vectorised torchvision RandomResizedCrop box sampling.

    ``u`` holds 40 uniforms per sample: ten attempts of (area, log-ratio, top, left).
    The first attempt that fits wins; otherwise the central-crop fallback.
    """
    n = len(height)
    area = height * width
    log_r0, log_r1 = np.log(ratio[0]), np.log(ratio[1])
    u = u.reshape(n, 10, 4)
    target_area = area[:, None] * (scale[0] + (scale[1] - scale[0]) * u[..., 0])
    aspect = np.exp(log_r0 + (log_r1 - log_r0) * u[..., 1])
    w = np.round(np.sqrt(target_area * aspect))
    h = np.round(np.sqrt(target_area / aspect))
    ok = (w > 0) & (w <= width[:, None]) & (h > 0) & (h <= height[:, None])
    first = np.argmax(ok, axis=1)
    found = ok[np.arange(n), first]
    hs, ws = h[np.arange(n), first], w[np.arange(n), first]
    top = np.floor(u[np.arange(n), first, 2] * (height - hs + 1))
    left = np.floor(u[np.arange(n), first, 3] * (width - ws + 1))

    in_ratio = width / height
    rmin, rmax = min(ratio), max(ratio)
    fw = np.where(in_ratio < rmin, width, np.where(in_ratio > rmax, np.round(height * rmax), width))
    fh = np.where(in_ratio < rmin, np.round(width / rmin), np.where(in_ratio > rmax, height, height))
    ftop = np.floor((height - fh) / 2)
    fleft = np.floor((width - fw) / 2)
    return (
        np.where(found, top, ftop), np.where(found, left, fleft),
        np.where(found, hs, fh), np.where(found, ws, fw),
    )


def parse_padding(padding, name: str) -> tuple[int, int, int, int]:
    """torchvision's ``padding`` argument (an int, or a sequence of 1, 2 or 4 ints) as
    ``(left, top, right, bottom)``: 2 values are (left/right, top/bottom), 4 are (left, top, right, bottom)."""
    def is_int(v) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    if is_int(padding):
        p = int(padding)
        return p, p, p, p
    if isinstance(padding, (tuple, list)) and len(padding) in (1, 2, 4) and all(is_int(v) for v in padding):
        v = [int(x) for x in padding]
        if len(v) == 1:
            return v[0], v[0], v[0], v[0]
        if len(v) == 2:
            return v[0], v[1], v[0], v[1]
        return v[0], v[1], v[2], v[3]
    raise ValueError(f"{name}: padding must be an int or a 1, 2, or 4 element tuple or list of ints, got {padding!r}")


def random_crop_box(height: np.ndarray, width: np.ndarray, crop_h: int, crop_w: int,
                    padding: tuple[int, int, int, int], pad_if_needed: bool, u: np.ndarray):
    """Vectorised torchvision v2 ``RandomCrop.make_params``: the box's ``(top, left)`` in the
    coordinates of the unpadded image (negative where it starts in the padding).

    The image is padded by ``padding`` (left, top, right, bottom), then, with
    ``pad_if_needed``, on both sides of an axis by what the crop still lacks; top and
    left are drawn uniformly over the padded image from ``u[:, 0]`` and ``u[:, 1]``
    (0 where the padded image is as large as the crop). Also returns the padded
    sizes, of which a sample smaller than the crop cannot be cropped.
    """
    pad_left, pad_top, pad_right, pad_bottom = padding
    padded_h = height + (pad_top + pad_bottom)
    padded_w = width + (pad_left + pad_right)
    off_top = np.full_like(height, float(pad_top))
    off_left = np.full_like(width, float(pad_left))
    if pad_if_needed:
        dh = np.maximum(crop_h - padded_h, 0.0)
        dw = np.maximum(crop_w - padded_w, 0.0)
        off_top, padded_h = off_top + dh, padded_h + 2 * dh
        off_left, padded_w = off_left + dw, padded_w + 2 * dw
    top = np.floor(u[:, 0] * (padded_h - crop_h + 1))
    left = np.floor(u[:, 1] * (padded_w - crop_w + 1))
    return top - off_top, left - off_left, padded_h, padded_w
