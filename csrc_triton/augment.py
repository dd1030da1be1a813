"""One slot of the augment program: a per-sample op on a uint8 batch, one launch.

The augment program (``layout.py``: ``SLOT_*``, ``OP_ARGS``) runs after the fused
resized crop, on the output-size uint8 batch ``[B, 3, H, W]``. A slot holds one
op per sample (``slot[b, SLOT_OP]``) with its arguments in ``m0..m7``, the warps'
interpolation in ``interp`` and their fill in ``fill0..2``. Every op is the
torchvision.transforms.v2.functional op of the same name on a uint8 CHW tensor
(timm's SolarizeAdd for ``solarize_add``), with its float32 order of operations,
clamping and final truncation or rounding:

* photometric ops (``stages/colour.py``): brightness, contrast, saturation, hue,
  grayscale, invert, posterize, solarize, solarize_add, sharpness, autocontrast,
  equalize, gaussian_blur, permute_channels;
* warps (``stages/warp.py``): affine and perspective, nearest or bilinear, with
  fill, as ``_apply_grid_transform``.

Ops that need a whole-image statistic get it from :func:`image_stats`, a small
kernel run before the slot only when the slot can contain such an op: the sum
of the floored luma (contrast's mean), per-channel min/max (autocontrast) and
per-channel 256-bin histograms (equalize, turned into lookup tables with torch
ops on the device).

:func:`fused_augment_slot` is the Triton launcher (kernel in
``_augment_kernel.py``); :func:`augment_slot_reference` computes the same result
in plain torch from the stage twins in ``reference.py`` and is the CPU path.
"""
from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import NamedTuple

import numpy as np
import torch

from . import _triton, layout, reference

__all__ = ["StatsNeeded", "augment_slot_reference", "fused_augment_slot", "image_stats", "image_stats_reference",
           "stats_needed"]

# Columns of the int32 statistics row of one sample (``image_stats``).
STATS_LUMA_SUM = 0  # sum over pixels of floor(luma)
STATS_MIN = 1  # 3 columns: per-channel minimum
STATS_MAX = 4  # 3 columns: per-channel maximum
STATS_HIST = 7  # 3 x 256 columns: per-channel histograms
STATS_WIDTH = STATS_HIST + 3 * 256

_BLUR_OPS = (layout.OP_GAUSSIAN_BLUR,)


class StatsNeeded(NamedTuple):
    """Which per-image statistics a slot needs (and whether it blurs)."""

    luma_sum: bool
    minmax: bool
    histogram: bool
    blur: bool

    @property
    def any_stats(self) -> bool:
        return self.luma_sum or self.minmax or self.histogram


def stats_needed(ops_host: np.ndarray | Sequence[float] | torch.Tensor | None) -> StatsNeeded:
    """What the op codes ``ops_host`` (host values, one per sample) need; all of it when None."""
    if ops_host is None:
        return StatsNeeded(True, True, True, True)
    ops = np.asarray(ops_host.cpu() if isinstance(ops_host, torch.Tensor) else ops_host).reshape(-1)
    present = set(np.unique(ops.astype(np.int64)).tolist())
    return StatsNeeded(layout.OP_CONTRAST in present, layout.OP_AUTOCONTRAST in present,
                       layout.OP_EQUALIZE in present, bool(present & set(_BLUR_OPS)))


# --------------------------------------------------------------------------- #
# Argument checking shared by the launcher and the reference
# --------------------------------------------------------------------------- #


def _check_images(name: str, images: object) -> torch.Tensor:
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(images).__name__}")
    if images.dtype != torch.uint8:
        raise TypeError(f"{name} must be uint8, got {images.dtype}")
    if images.dim() != 4 or images.shape[1] != 3:
        raise ValueError(f"{name} must have shape [B, 3, H, W], got {tuple(images.shape)}")
    return images


def _check_slot(images: torch.Tensor, slot: object) -> torch.Tensor:
    if not isinstance(slot, torch.Tensor):
        raise TypeError(f"slot must be a torch.Tensor, got {type(slot).__name__}")
    if slot.dtype != torch.float32:
        raise TypeError(f"slot must be float32, got {slot.dtype}")
    B = images.shape[0]
    if tuple(slot.shape) != (B, layout.SLOT_WIDTH):
        raise ValueError(f"slot must have shape [B, SLOT_WIDTH]=[{B}, {layout.SLOT_WIDTH}], got {tuple(slot.shape)}")
    if slot.device != images.device:
        raise ValueError(f"slot is on {slot.device} but images are on {images.device}; move them to the same device")
    return slot


def _check_slot_values(slot: torch.Tensor, H: int, W: int) -> None:
    """Check op codes and the arguments that would index out of range (host values)."""
    s = slot.cpu()
    ops = s[:, layout.SLOT_OP]
    for b in range(s.shape[0]):
        op = float(ops[b])
        if op != int(op) or int(op) not in layout.OP_ARGS:
            raise ValueError(f"sample {b}: unknown augment op code {op}; known: {layout.OPS}")
        if int(op) == layout.OP_GAUSSIAN_BLUR:
            kx, ky = float(s[b, layout.SLOT_M0]), float(s[b, layout.SLOT_M1])
            sx, sy = float(s[b, layout.SLOT_M2]), float(s[b, layout.SLOT_M3])
            for k, n, what in ((kx, W, "kernel_x"), (ky, H, "kernel_y")):
                if k != int(k) or k < 1 or k % 2 == 0 or k // 2 >= n:
                    raise ValueError(f"sample {b}: gaussian_blur {what} must be an odd integer with "
                                     f"{what} // 2 < {n} (reflect padding), got {k}")
            if not (sx > 0 and sy > 0):
                raise ValueError(f"sample {b}: gaussian_blur sigmas must be positive, got {(sx, sy)}")
        if int(op) == layout.OP_PERMUTE_CHANNELS:
            perm = sorted(float(s[b, layout.SLOT_M0 + i]) for i in range(3))
            if perm != [0.0, 1.0, 2.0]:
                raise ValueError(f"sample {b}: permute_channels needs a permutation of 0, 1, 2, got "
                                 f"{[float(s[b, layout.SLOT_M0 + i]) for i in range(3)]}")
        if int(op) in (layout.OP_AFFINE, layout.OP_PERSPECTIVE):
            interp = float(s[b, layout.SLOT_INTERP])
            if interp not in (layout.FILTER_NEAREST, layout.FILTER_BILINEAR):
                raise ValueError(f"sample {b}: warp interpolation must be FILTER_NEAREST or FILTER_BILINEAR, "
                                 f"got {interp}")


def _output(images: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return torch.empty(images.shape, dtype=torch.uint8, device=images.device)
    _check_images("out", out)
    if out.shape != images.shape or out.device != images.device:
        raise ValueError(f"out must be a uint8 tensor of shape {list(images.shape)} on {images.device}, "
                         f"got {list(out.shape)} on {out.device}")
    if out.data_ptr() == images.data_ptr() and out.numel() > 0:
        # Warps and neighbourhood ops read pixels other programs write.
        raise ValueError("out must not alias images (neighbourhood ops and warps read other pixels)")
    return out


def blur_width(H: int, W: int) -> int:
    """Width of the 1-D Gaussian tables: the largest kernel reflect padding allows."""
    return max(1, 2 * max(H, W) - 1)


def blur_tables(slot: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """``[B, 2, blur_width(H, W)]`` float32: per sample the x and y 1-D Gaussian kernels of
    its ``gaussian_blur`` arguments (meaningless rows for other ops), on the slot's device."""
    width = blur_width(H, W)
    size = torch.cat([slot[:, layout.SLOT_M0], slot[:, layout.SLOT_M1]])
    sigma = torch.cat([slot[:, layout.SLOT_M2], slot[:, layout.SLOT_M3]])
    # keep the unused rows finite (sigma 0 would divide by zero)
    sigma = torch.where(sigma > 0, sigma, 1.0)
    w = reference.gaussian_weights(size, sigma, width)
    B = slot.shape[0]
    return torch.stack([w[:B], w[B:]], dim=1).contiguous()


# --------------------------------------------------------------------------- #
# Statistics
# --------------------------------------------------------------------------- #


def image_stats_reference(images: torch.Tensor, needed: StatsNeeded | None = None) -> torch.Tensor:
    """Plain-torch twin of :func:`image_stats`: ``int32 [B, STATS_WIDTH]`` (columns not
    asked for are 0)."""
    images = _check_images("images", images)
    needed = needed or StatsNeeded(True, True, True, False)
    B = images.shape[0]
    stats = torch.zeros((B, STATS_WIDTH), dtype=torch.int32, device=images.device)
    for b in range(B):
        img = images[b]
        if needed.luma_sum:
            stats[b, STATS_LUMA_SUM] = reference.luma(img).floor().to(torch.int64).sum().to(torch.int32)
        if needed.minmax:
            stats[b, STATS_MIN:STATS_MIN + 3] = img.amin(dim=(1, 2)).to(torch.int32)
            stats[b, STATS_MAX:STATS_MAX + 3] = img.amax(dim=(1, 2)).to(torch.int32)
        if needed.histogram:
            stats[b, STATS_HIST:] = reference.histogram(img).reshape(-1)
    return stats


def image_stats(images: torch.Tensor, needed: StatsNeeded | None = None,
                launch: _triton.LaunchSettings | None = None) -> torch.Tensor:
    """Per-sample statistics of a uint8 ``[B, 3, H, W]`` batch, ``int32 [B, STATS_WIDTH]``.

    Column ``STATS_LUMA_SUM``: ``sum floor(luma)`` (contrast's mean is this over
    ``H * W``; exact as an integer sum below 2**31, i.e. up to ~8.4 Mpixel);
    ``STATS_MIN``/``STATS_MAX`` + c: channel c's min / max; ``STATS_HIST`` + 256 c + v:
    how many pixels of channel c have value v. Only the groups in ``needed`` are
    computed (default: all); the rest stay 0.
    """
    images = _check_images("images", images)
    needed = needed or StatsNeeded(True, True, True, False)
    B, _, H, W = images.shape
    stats = torch.zeros((B, STATS_WIDTH), dtype=torch.int32, device=images.device)
    if needed.minmax and B > 0:
        stats[:, STATS_MIN:STATS_MIN + 3] = 255
    if B == 0 or H == 0 or W == 0 or not needed.any_stats:
        return stats
    kernel = _triton.kernel("_augment_kernel", "image_stats_kernel", images.device,
                            "image_stats", "image_stats_reference")
    s = launch if launch is not None else _triton.tile_settings(H, W)
    n_tiles_w = _triton.cdiv(W, s.block_w)
    n_tiles = _triton.cdiv(H, s.block_h) * n_tiles_w
    si = images.stride()
    with torch.cuda.device(images.device) if images.device.type == "cuda" else nullcontext():
        kernel[(B * n_tiles,)](
            images, stats, H, W, n_tiles_w, n_tiles, si[0], si[1], si[2], si[3],
            LUMA_SUM=needed.luma_sum, MINMAX=needed.minmax, HISTOGRAM=needed.histogram,
            FMA64=_triton.interpret_mode(), STATS_W=STATS_WIDTH, CACHE_KEY=_triton.cache_key(),
            BLOCK_H=s.block_h, BLOCK_W=s.block_w, num_warps=s.num_warps, **_exact_options(s),
        )
    return stats


def _exact_options(s: _triton.LaunchSettings) -> dict:
    # Compiled code must round every float op like the reference: no mul+add
    # contraction into FMAs (the interpreter never contracts).
    opts = dict(s.options())
    if not _triton.interpret_mode():
        opts["enable_fp_fusion"] = False
    return opts


# --------------------------------------------------------------------------- #
# Triton launcher
# --------------------------------------------------------------------------- #


def fused_augment_slot(
    images: torch.Tensor,
    slot: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    ops_host: np.ndarray | Sequence[float] | torch.Tensor | None = None,
    launch: _triton.LaunchSettings | None = None,
) -> torch.Tensor:
    """Apply one slot of the augment program to a uint8 batch, one op per sample.

    Args:
        images: uint8 ``[B, 3, H, W]``, any strides (read through them; not modified).
        slot: float32 ``[B, layout.SLOT_WIDTH]`` on the images' device: op code and
            arguments per sample (``layout.OP_ARGS``).
        out: optional uint8 ``[B, 3, H, W]`` output, any strides, not aliasing ``images``.
        ops_host: optional host copy of the op codes (``slot[:, SLOT_OP]``), so the
            launcher knows without a device sync which statistics (and blur tables) to
            compute; without it everything any op could need is computed.
        launch: tile shape and warps instead of :func:`_triton.tile_settings`'s.

    Returns:
        uint8 ``[B, 3, H, W]`` (``out`` when given; contiguous otherwise).

    Per-sample values are checked only when the slot is on the CPU (reading a GPU
    slot would synchronise); on a GPU bad values give wrong pixels, never an
    out-of-bounds access (codes outside the table are the identity, blur sizes are
    clamped to the table width, indices to the image).
    """
    images = _check_images("images", images)
    slot = _check_slot(images, slot)
    out = _output(images, out)
    B, _, H, W = images.shape
    if B == 0 or H == 0 or W == 0:
        return out
    if slot.device.type == "cpu":
        _check_slot_values(slot, H, W)
    slot = slot.contiguous()
    needed = stats_needed(ops_host)
    dummy = torch.zeros(1, dtype=torch.int32, device=images.device)
    stats = image_stats(images, needed, launch) if needed.any_stats else dummy
    lut = (reference.equalize_lut(stats[:, STATS_HIST:].view(B, 3, 256)).contiguous()
           if needed.histogram else dummy)
    tables = blur_tables(slot, H, W) if needed.blur else dummy.float()
    kernel = _triton.kernel("_augment_kernel", "augment_slot_kernel", images.device,
                            "fused_augment_slot", "augment_slot_reference")
    s = launch if launch is not None else _triton.tile_settings(H, W)
    n_tiles_w = _triton.cdiv(W, s.block_w)
    n_tiles = _triton.cdiv(H, s.block_h) * n_tiles_w
    si, so = images.stride(), out.stride()
    with torch.cuda.device(images.device) if images.device.type == "cuda" else nullcontext():
        kernel[(B * n_tiles,)](
            images, out, slot, stats, lut, tables,
            H, W, n_tiles_w, n_tiles, blur_width(H, W),
            si[0], si[1], si[2], si[3], so[0], so[1], so[2], so[3],
            HAS_STATS=needed.any_stats, HAS_LUT=needed.histogram, HAS_BLUR=needed.blur,
            FMA64=_triton.interpret_mode(), STATS_W=STATS_WIDTH, CACHE_KEY=_triton.cache_key(),
            BLOCK_H=s.block_h, BLOCK_W=s.block_w, num_warps=s.num_warps, **_exact_options(s),
        )
    return out


# --------------------------------------------------------------------------- #
# Plain-torch reference (also the CPU execution path)
# --------------------------------------------------------------------------- #


def _apply_op(img: torch.Tensor, row: torch.Tensor, tables: torch.Tensor | None) -> torch.Tensor:
    """One sample's op (``row``: its slot row on the host) on a uint8 ``[3, H, W]`` image."""
    op = int(row[layout.SLOT_OP])
    m = [float(row[layout.SLOT_M0 + i]) for i in range(8)]
    r = reference
    if op == layout.OP_IDENTITY:
        return img.clone()
    if op in (layout.OP_AFFINE, layout.OP_PERSPECTIVE):
        fill = row[layout.SLOT_FILL0:layout.SLOT_FILL2 + 1].to(img.device)
        fill = None if bool(torch.isnan(row[layout.SLOT_FILL0])) else fill
        return r.warp(img, row[layout.SLOT_M0:layout.SLOT_M7 + 1].to(img.device), op == layout.OP_PERSPECTIVE,
                      int(row[layout.SLOT_INTERP]), fill)
    if op == layout.OP_BRIGHTNESS:
        return r.brightness(img, m[0])
    if op == layout.OP_CONTRAST:
        return r.contrast(img, m[0], pixels=m[1])
    if op == layout.OP_SATURATION:
        return r.saturation(img, m[0])
    if op == layout.OP_HUE:
        return r.hue(img, m[0])
    if op == layout.OP_GRAYSCALE:
        return r.grayscale(img)
    if op == layout.OP_INVERT:
        return r.invert(img)
    if op == layout.OP_POSTERIZE:
        return r.posterize(img, m[0])
    if op == layout.OP_SOLARIZE:
        return r.solarize(img, m[0])
    if op == layout.OP_SHARPNESS:
        return r.sharpness(img, m[0])
    if op == layout.OP_AUTOCONTRAST:
        return r.autocontrast(img)
    if op == layout.OP_EQUALIZE:
        return r.equalize(img)
    if op == layout.OP_GAUSSIAN_BLUR:
        assert tables is not None
        return r.gaussian_blur(img, tables[1, : int(m[1])], tables[0, : int(m[0])])
    if op == layout.OP_SOLARIZE_ADD:
        return r.solarize_add(img, m[0], m[1])
    if op == layout.OP_PERMUTE_CHANNELS:
        return r.permute_channels(img, m[:3])
    raise ValueError(f"unknown augment op code {op}; known: {layout.OPS}")


def augment_slot_reference(images: torch.Tensor, slot: torch.Tensor, *,
                           out: torch.Tensor | None = None) -> torch.Tensor:
    """Plain-torch twin of :func:`fused_augment_slot` (same arguments and result).

    One sample at a time with the op functions of ``reference.py``; works on any
    device and is the library's CPU path. Per-sample values are always validated
    (they are read to the host anyway). ``images`` is not modified.
    """
    images = _check_images("images", images)
    slot = _check_slot(images, slot)
    out = _output(images, out)
    B, _, H, W = images.shape
    if B == 0 or H == 0 or W == 0:
        return out
    _check_slot_values(slot, H, W)
    rows = slot.cpu()
    tables = None
    if bool((rows[:, layout.SLOT_OP] == layout.OP_GAUSSIAN_BLUR).any()):
        # the same tables (same width) as the launcher, so both round alike
        tables = blur_tables(slot, H, W)
    for b in range(B):
        out[b] = _apply_op(images[b], rows[b], None if tables is None else tables[b])
    return out
