"""Symbolic per-sample geometry: how every output pixel maps back to the source.

A Compose of crops, resizes and flips is folded, per sample, into one affine map
per axis (``source = origin + step * (out + 0.5)``), a clamp region in the source
(what torchvision's resize sees as the image border) and a valid window in the
output (outside it the pixel is zero padding). That is exactly what the fused
kernel consumes, so the whole pipeline runs as one resampling pass.

This is the internal layer under both tiers: the transform classes apply their
per-sample parameters here, and the functionals build a one-image geometry here
before running the reference kernel. Everything is float64 numpy, one entry per
sample; the functions update a ``BatchGeometry`` in place.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from csrc_triton import layout


@dataclass
class BatchGeometry:
    """Geometry state of a batch, one entry per sample (float64 numpy arrays).

    The fields named like columns of the kernel's ``geometry`` and ``epilogue``
    parameter blocks (``csrc_triton.layout``) are exactly those columns; ``height``/``width`` are
    the size of the current (virtual) image and ``resampled`` whether a resize
    has happened yet, which changes what a later crop does. ``filter`` is the
    interpolation code (``layout.FILTER_*``) of the last resize.
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

    def __post_init__(self) -> None:
        for name in layout.block("epilogue").columns:
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(len(self.height)))

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

        Fills the ``geometry`` and ``epilogue`` blocks column by column from the
        fields of the same name and the ``output`` block from ``height``/``width``
        (the size of the output image); the other blocks stay zero until a stage
        reads per-sample values there.
        """
        rows = np.zeros((len(self), layout.NUM_PARAMS), dtype=np.float32)
        for name in layout.block("geometry").columns + layout.block("epilogue").columns:
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


def pad(g: BatchGeometry, left, top, right, bottom) -> None:
    """Pad the current images with zeros: ``left``/``top``/``right``/``bottom`` pixels on each side
    (negative values crop, as torchvision's constant ``pad`` does). A crop whose box starts at
    ``(-top, -left)``: the part outside the image is zero through the valid window."""
    n = len(g)
    left, top = _broadcast(left, n), _broadcast(top, n)
    crop(g, -top, -left, g.height + top + _broadcast(bottom, n), g.width + left + _broadcast(right, n))


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
