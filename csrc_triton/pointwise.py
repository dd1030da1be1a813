"""A run of pointwise slots of the augment program in one pass (and its contrast statistics).

The augment program (``augment.py``) runs one launch per slot: the batch is read and
written once per op. Where a run of consecutive slots holds only pointwise ops
(:data:`POINTWISE_OPS`: each output pixel depends on that pixel alone, and for contrast
on the image's mean luma), :func:`fused_pointwise_program` applies the whole run in one
pass, in place if asked, after one small statistics pass per slot that holds a
contrast: the sum of the floored luma of the image as that slot sees it, the slots
before it applied on the fly. RandomPhotometricDistort's six slots are three launches
(two statistics, one pass) instead of eight, and the batch is written once.

A contrast slot's ``m1``, when positive, is the sample's own pixel count: the image is
then the first ``m1`` pixels of its ``[3, H, W]`` in row-major order (a row of a padded
layout), and only those are summed.

:func:`pointwise_program_reference` is the plain-torch twin: the slots one after the
other through ``augment.augment_slot_reference``.
"""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import torch

from . import _triton, layout
from .augment import _check_images, _exact_options, augment_slot_reference

__all__ = ["POINTWISE_OPS", "fused_pointwise_program", "is_pointwise", "pointwise_program_reference"]

#: op codes whose output pixel depends on the pixel alone (and, for contrast, the image's mean luma)
POINTWISE_OPS = (layout.OP_IDENTITY, layout.OP_BRIGHTNESS, layout.OP_CONTRAST, layout.OP_SATURATION, layout.OP_HUE,
                 layout.OP_GRAYSCALE, layout.OP_INVERT, layout.OP_POSTERIZE, layout.OP_SOLARIZE,
                 layout.OP_SOLARIZE_ADD, layout.OP_PERMUTE_CHANNELS)
_POINTWISE = np.array(POINTWISE_OPS, dtype=np.float32)


def is_pointwise(ops: np.ndarray | torch.Tensor) -> bool:
    """Whether every op code in ``ops`` (host values) is in :data:`POINTWISE_OPS`."""
    ops = ops.numpy() if isinstance(ops, torch.Tensor) else np.asarray(ops)
    return bool(np.isin(ops, _POINTWISE).all())


def _check(images: torch.Tensor, slots: object, out: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    images = _check_images("images", images)
    if not isinstance(slots, torch.Tensor):
        raise TypeError(f"slots must be a torch.Tensor, got {type(slots).__name__}")
    if slots.dtype != torch.float32:
        raise TypeError(f"slots must be float32, got {slots.dtype}")
    B = images.shape[0]
    if slots.dim() != 3 or slots.shape[0] != B or slots.shape[2] != layout.SLOT_WIDTH:
        raise ValueError(f"slots must have shape [B, n_slots, SLOT_WIDTH]=[{B}, n, {layout.SLOT_WIDTH}], "
                         f"got {tuple(slots.shape)}")
    if out is None:
        out = torch.empty(images.shape, dtype=torch.uint8, device=images.device)
    else:
        _check_images("out", out)
        if out.shape != images.shape or out.device != images.device:
            raise ValueError(f"out must be a uint8 tensor of shape {list(images.shape)} on {images.device}, "
                             f"got {list(out.shape)} on {out.device}")
        if out.data_ptr() == images.data_ptr() and out.stride() != images.stride():
            raise ValueError("out may be images itself, but not another view of its memory")
    return images, out


def _check_ops(ops: np.ndarray) -> None:
    bad = ~np.isin(ops, _POINTWISE)
    if bad.any():
        b, k = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"sample {b}, slot {k}: op code {float(ops[b, k])} is not a pointwise op; pointwise: "
                         f"{[layout.OP_ARGS[c][0] for c in POINTWISE_OPS]}")


def fused_pointwise_program(images: torch.Tensor, slots: torch.Tensor, *, ops_host: np.ndarray | torch.Tensor,
                            out: torch.Tensor | None = None,
                            launch: _triton.LaunchSettings | None = None) -> torch.Tensor:
    """Apply the slots ``slots[:, 0], slots[:, 1], ...`` of the augment program to a uint8
    batch in one pass: the result of ``augment_slot_reference`` slot after slot.

    Args:
        images: uint8 ``[B, 3, H, W]``, any strides.
        slots: float32 ``[B, n_slots, layout.SLOT_WIDTH]`` on the images' device.
        ops_host: the host copy of the op codes ``[B, n_slots]``: every one must be in
            :data:`POINTWISE_OPS`; it also says which slots need contrast's statistic.
        out: optional uint8 ``[B, 3, H, W]``; ``images`` itself runs in place.
        launch: tile shape and warps instead of :func:`_triton.tile_settings`'s.

    Returns:
        uint8 ``[B, 3, H, W]`` (``out`` when given).
    """
    images, out = _check(images, slots, out)
    ops = np.asarray(ops_host.numpy() if isinstance(ops_host, torch.Tensor) else ops_host).reshape(slots.shape[:2])
    _check_ops(ops)
    B, _, H, W = images.shape
    n_slots = slots.shape[1]
    if B == 0 or H == 0 or W == 0:
        return out
    if slots.device != images.device:
        raise ValueError(f"slots are on {slots.device} but images are on {images.device}; move them to the same device")
    slots = slots.contiguous()
    sums = torch.zeros((B, max(n_slots, 1)), dtype=torch.int32, device=images.device)
    s = launch if launch is not None else _triton.tile_settings(H, W)
    n_tiles_w = _triton.cdiv(W, s.block_w)
    n_tiles = _triton.cdiv(H, s.block_h) * n_tiles_w
    si, so = images.stride(), out.stride()
    common = dict(FMA64=_triton.interpret_mode(), CACHE_KEY=_triton.cache_key(), BLOCK_H=s.block_h,
                  BLOCK_W=s.block_w, num_warps=s.num_warps, **_exact_options(s))
    with torch.cuda.device(images.device) if images.device.type == "cuda" else nullcontext():
        for k in np.flatnonzero((ops == layout.OP_CONTRAST).any(axis=0)).tolist():
            luma = _triton.kernel("_pointwise_kernel", "pointwise_luma_kernel", images.device,
                                  "fused_pointwise_program", "pointwise_program_reference")
            luma[(B * n_tiles,)](images, slots, sums, k, n_slots, H, W, n_tiles_w, n_tiles,
                                 si[0], si[1], si[2], si[3], **common)
        kernel = _triton.kernel("_pointwise_kernel", "pointwise_program_kernel", images.device,
                                "fused_pointwise_program", "pointwise_program_reference")
        kernel[(B * n_tiles,)](images, out, slots, sums, n_slots, H, W, n_tiles_w, n_tiles,
                               si[0], si[1], si[2], si[3], so[0], so[1], so[2], so[3], **common)
    return out


def pointwise_program_reference(images: torch.Tensor, slots: torch.Tensor, *,
                                ops_host: np.ndarray | torch.Tensor | None = None,
                                out: torch.Tensor | None = None) -> torch.Tensor:
    """Plain-torch twin of :func:`fused_pointwise_program` (same arguments and result): the
    slots one after the other with ``augment_slot_reference``."""
    images, out = _check(images, slots, out)
    _check_ops(slots[..., layout.SLOT_OP].cpu().numpy())
    result = images
    for k in range(slots.shape[1]):
        result = augment_slot_reference(result, slots[:, k])
    out.copy_(result)
    return out
