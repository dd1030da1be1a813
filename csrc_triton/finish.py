"""The finish pass after an augment program: normalise, cast, lay out, erase.

When an augment program ran, kernel 1 wrote uint8 images and left the epilogue
to this pass: :func:`fused_finish` reads the uint8 ``[B, 3, H, W]`` batch and
writes ``value * scale[c] + bias[c]`` (ToDtype's scaling and Normalize folded
into one affine map) in the output dtype and memory format, with the
RandomErasing box of each sample (the epilogue block of ``params``, see
``layout.py``) overwritten by a constant or by standard normal noise. It is the
epilogue stage of kernel 1 (``stages/epilogue.py``) on its own; without a
program kernel 1 does all of this itself.

Kernel in ``_finish_kernel.py``; :func:`finish_reference` is the plain-torch twin.
"""
from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext

import torch

from . import _triton, layout, reference
from .reference import ERASE_VALUE, erase_args, erase_mode
from .resized_crop import _OUT_DTYPES, _affine_values

__all__ = ["finish_reference", "fused_finish"]

def _prepare(images, params, scale, bias, out_dtype, channels_last, erase_value, erase_random, out):
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.dim() != 4 \
            or images.shape[1] != 3:
        got = (f"{images.dtype} {tuple(images.shape)}" if isinstance(images, torch.Tensor)
               else type(images).__name__)
        raise TypeError(f"images_u8 must be a uint8 tensor of shape [B, 3, H, W], got {got}")
    B = images.shape[0]
    if not isinstance(params, torch.Tensor) or params.dtype != torch.float32 \
            or tuple(params.shape) != (B, layout.NUM_PARAMS):
        got = (f"{params.dtype} {tuple(params.shape)}" if isinstance(params, torch.Tensor)
               else type(params).__name__)
        raise ValueError(f"params must be float32 [B, {layout.NUM_PARAMS}] with B={B}, got {got}")
    if params.device != images.device:
        raise ValueError(f"params is on {params.device} but images are on {images.device}")
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {[str(d) for d in _OUT_DTYPES]}, got {out_dtype}")
    mode = erase_mode(erase_value, erase_random)
    device = images.device
    value = _affine_values("erase_value", erase_value, device) if mode == ERASE_VALUE else None
    affine = torch.cat([_affine_values("scale", scale, device), _affine_values("bias", bias, device)])
    if out is None:
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        out = torch.empty(images.shape, dtype=out_dtype, device=device, memory_format=fmt)
    elif not isinstance(out, torch.Tensor) or out.shape != images.shape or out.dtype != out_dtype \
            or out.device != device:
        raise ValueError(f"out must be a {out_dtype} tensor of shape {list(images.shape)} on {device}")
    return params.contiguous(), affine, mode, value, out


def fused_finish(
    images_u8: torch.Tensor,
    params: torch.Tensor,
    scale: Sequence[float] | torch.Tensor,
    bias: Sequence[float] | torch.Tensor,
    *,
    out_dtype: torch.dtype,
    channels_last: bool = False,
    erase_value: Sequence[float] | torch.Tensor | None = None,
    erase_random: bool = False,
    out: torch.Tensor | None = None,
    launch: _triton.LaunchSettings | None = None,
) -> torch.Tensor:
    """Normalise, cast and erase a uint8 batch in one launch.

    ``out[b, c, y, x] = images_u8[b, c, y, x] * scale[c] + bias[c]`` in float32, then
    inside sample ``b``'s box ``[erase_y0, erase_y1) x [erase_x0, erase_x1)`` (columns
    of ``params`` ``[B, layout.NUM_PARAMS]``, truncated to integers; empty when
    ``erase_y1 <= erase_y0``) the value is replaced by ``erase_value[c]`` (in the
    output's value space, i.e. after normalisation) or, with ``erase_random``, by
    standard normal noise from the Philox generator keyed by the sample's
    ``erase_seed`` at counter ``(c * H + y) * W + x`` (``reference.philox_normal``).
    Finally the cast: uint8 rounds half up and saturates; float16/bfloat16 round
    to nearest.

    ``images_u8`` may have any strides; the output is contiguous or, with
    ``channels_last``, channels-last (``out``, when given, any strides).
    """
    params, affine, mode, value, out = _prepare(images_u8, params, scale, bias, out_dtype, channels_last,
                                                erase_value, erase_random, out)
    B, _, H, W = images_u8.shape
    if B == 0 or H == 0 or W == 0:
        return out
    kernel = _triton.kernel("_finish_kernel", "finish_kernel", images_u8.device, "fused_finish", "finish_reference")
    s = launch if launch is not None else _triton.tile_settings(H, W)
    n_tiles_w = _triton.cdiv(W, s.block_w)
    n_tiles = _triton.cdiv(H, s.block_h) * n_tiles_w
    si, so = images_u8.stride(), out.stride()
    erase_ptr = value if value is not None else affine
    with torch.cuda.device(images_u8.device) if images_u8.device.type == "cuda" else nullcontext():
        kernel[(B * n_tiles,)](
            images_u8, params, affine, erase_ptr, out, H, W, n_tiles_w, n_tiles,
            si[0], si[1], si[2], si[3], so[0], so[1], so[2], so[3],
            ERASE=mode, OUT_UINT8=out_dtype == torch.uint8, CACHE_KEY=_triton.cache_key(),
            BLOCK_H=s.block_h, BLOCK_W=s.block_w, num_warps=s.num_warps, **s.options(),
        )
    return out


def finish_reference(
    images_u8: torch.Tensor,
    params: torch.Tensor,
    scale: Sequence[float] | torch.Tensor,
    bias: Sequence[float] | torch.Tensor,
    *,
    out_dtype: torch.dtype,
    channels_last: bool = False,
    erase_value: Sequence[float] | torch.Tensor | None = None,
    erase_random: bool = False,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Plain-torch twin of :func:`fused_finish` (same arguments and result; the noise of
    ``erase_random`` agrees to a few float32 ulp, its integers exactly)."""
    params, affine, mode, value, out = _prepare(images_u8, params, scale, bias, out_dtype, channels_last,
                                                erase_value, erase_random, out)
    B, _, H, W = images_u8.shape
    if B == 0 or H == 0 or W == 0:
        return out
    scale_t, bias_t = affine[:3], affine[3:]
    for b in range(B):
        reference.epilogue(images_u8[b].permute(1, 2, 0).float(), scale_t, bias_t, False,
                           out[b].permute(1, 2, 0), erase_args(params, b, mode, value))
    return out
