"""Fused resized-crop kernel: crop + flip + pad + antialiased resize + normalise.

One launch turns a ragged batch of decoded HWC ``uint8`` images, packed back to
back in a 1-D buffer, into a ``[B, 3, out_h, out_w]`` tensor. Each sample carries
its own geometry in a row of ``params`` (see :data:`NUM_PARAMS`), so
RandomResizedCrop, Resize, CenterCrop (with zero padding), and the flips all
come down to this one kernel with different parameters.

Per axis the resampling is the separable triangle filter of PyTorch's
``_upsample_bilinear2d_aa`` (``antialias=True``): for an output index ``i``

* ``c = origin + step * (i + 0.5)`` in absolute source coordinates, where a
  negative ``step`` walks the source backwards (a flip);
* ``support = |step|`` and ``inv = 1 / |step|`` when antialiasing a downscale
  (``|step| >= 1``), otherwise ``support = inv = 1`` (plain bilinear with
  ``align_corners=False``);
* taps ``k`` in ``[max(floor(c - support + 0.5), lo), min(floor(c + support + 0.5), hi))``
  with weight ``max(0, 1 - |(k - c + 0.5) * inv|)``, normalised to sum 1; if
  they sum to 0, the nearest pixel of ``[lo, hi)`` is used instead.

The 2-D value is ``sum_ky sum_kx wy * wx * src[ky, kx, min(ch, C - 1)]``; output
pixels outside the valid window are 0 (padding). Optionally the value is rounded
to an integer in ``[0, 255]`` (what torchvision's uint8 resize produces), then
``value * scale[ch] + bias[ch]`` is written in the requested dtype (rounded and
saturated for ``uint8``).

:func:`fused_resized_crop` is the Triton launcher; :func:`resized_crop_reference`
is the same function in plain torch, used for testing and as the CPU path.

The kernel gathers each output pixel's taps straight from the packed source. A
tensor-core formulation (source staged per tile, both passes as band-matrix
products) was measured slower on an H200 in every recipe and was dropped; see
benchmarks/RESULTS.md.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

# Triton is imported on the first launch, not here: the reference must work
# without it, and importing this module should stay cheap.
triton: Any = None
tl: Any = None
_max_combine: Any = None  # triton.jit(_max_combine_fn), set by _load_triton
_tile_axis: Any = None  # triton.jit(_tile_axis_fn), set by _load_triton

__all__ = ["NUM_PARAMS", "fused_resized_crop", "resized_crop_reference"]

#: Columns of ``params``, per sample (all float32):
#: 0 origin_y, 1 origin_x, 2 step_y, 3 step_x, 4 lo_y, 5 hi_y, 6 lo_x, 7 hi_x,
#: 8 valid_y0, 9 valid_y1, 10 valid_x0, 11 valid_x1.
NUM_PARAMS = 12

_OUT_DTYPES = (torch.uint8, torch.float32, torch.float16, torch.bfloat16)


def _max_combine_fn(a, b):
    # tl.reduce combiner: the most taps any pixel of a tile needs.
    return tl.maximum(a, b)


def _tile_axis_fn(idx, in_range, origin, step, lo, hi, valid0, valid1, support, inv, N: tl.constexpr):
    # One axis of the tile (output indices `idx`): sample centre, first tap, tap
    # count, 1 / sum of weights, and whether the nearest-pixel fallback applies.
    i = idx.to(tl.float32)
    c = origin + step * (i + 0.5)
    k_lo = tl.floor(c - support + 0.5)
    k_lo = tl.where(k_lo > lo, k_lo, lo)
    k_hi = tl.floor(c + support + 0.5)
    k_hi = tl.where(k_hi < hi, k_hi, hi)
    n_f = k_hi - k_lo
    act = in_range & (i >= valid0) & (i < valid1)
    # Indices that are padding or past the edge get no taps: they stay 0 and
    # cost no loads. With taps, lo <= k_lo < k_hi <= hi <= size, so the
    # float->int casts only ever see small non-negative values.
    has = act & (n_f > 0.0)
    n = tl.where(has, n_f, 0.0).to(tl.int32)
    k0 = tl.where(has, k_lo, 0.0).to(tl.int32)
    total = tl.full([N], 0.0, tl.float32)
    for t in range(0, tl.reduce(n, 0, _max_combine)):
        w = 1.0 - tl.abs(((k0 + t).to(tl.float32) - c + 0.5) * inv)
        total += tl.where((t < n) & (w > 0.0), w, 0.0)
    # A zero sum means the window missed [lo, hi) (the sample point lies
    # outside the clamp region): fall back to the nearest pixel in it.
    fb = act & (total == 0.0)
    near = tl.floor(c)
    near = tl.where(near < hi - 1.0, near, hi - 1.0)
    near = tl.where(near > lo, near, lo)
    k0 = tl.where(fb, near.to(tl.int32), k0)
    n = tl.where(fb, 1, n)
    rnorm = tl.div_rn(tl.full([N], 1.0, tl.float32), tl.where(total > 0.0, total, 1.0))
    return c, k0, n, rnorm, fb


# Compiled with triton.jit (or interpreted) on the first launch, see _kernel_for.
# It uses no jit'd helpers of triton.language (tl.max, tl.zeros): those are
# compiled or interpreted depending on TRITON_INTERPRET when triton is first
# imported, and torch may import triton long before a test sets the variable.
def _resized_crop_kernel(
    data_ptr,  # uint8, all images packed back to back (HWC each)
    offsets_ptr,  # int64 [B]
    shapes_ptr,  # int32/int64 [B, 3] contiguous: H, W, C
    params_ptr,  # float32 [B, NUM_PARAMS] contiguous
    affine_ptr,  # float32 [6]: scale[0..2], bias[0..2]
    out_ptr,
    n_data,  # number of elements in data; bounds every image read
    out_h,
    out_w,
    n_tiles_w,
    n_tiles,
    stride_ob,
    stride_oc,
    stride_oh,
    stride_ow,
    ANTIALIAS: tl.constexpr,
    QUANTIZE: tl.constexpr,
    OUT_UINT8: tl.constexpr,
    NPARAMS: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    # Batch and tiles share grid axis 0: axis 1/2 are capped at 65535, and
    # neighbouring programs then work on the same image (cache reuse).
    pid = tl.program_id(0)
    b = pid // n_tiles
    tile = pid % n_tiles
    rows = (tile // n_tiles_w) * BLOCK_H + tl.arange(0, BLOCK_H)
    cols = (tile % n_tiles_w) * BLOCK_W + tl.arange(0, BLOCK_W)
    row_in = rows < out_h
    col_in = cols < out_w

    b64 = b.to(tl.int64)
    off = tl.load(offsets_ptr + b64).to(tl.int64)
    H = tl.load(shapes_ptr + b64 * 3).to(tl.int64)
    W = tl.load(shapes_ptr + b64 * 3 + 1).to(tl.int64)
    C = tl.load(shapes_ptr + b64 * 3 + 2).to(tl.int64)
    # Metadata on the GPU is not validated by the launcher (that would need
    # a host sync), so an image that does not fit in `data` reads nothing.
    # The divisions keep H * W * C from overflowing on garbage shapes.
    Hs = tl.maximum(H, 1)
    Ws = tl.maximum(W, 1)
    img_ok = (H > 0) & (W > 0) & (C > 0) & (off >= 0)
    img_ok = img_ok & (H <= n_data) & (W <= n_data // Hs) & (C <= n_data // (Hs * Ws))
    img_ok = img_ok & (off <= n_data - H * W * C)
    Hf = H.to(tl.float32)
    Wf = W.to(tl.float32)

    p = params_ptr + b64 * NPARAMS
    origin_y = tl.load(p + 0)
    origin_x = tl.load(p + 1)
    step_y = tl.load(p + 2)
    step_x = tl.load(p + 3)
    # Clamp regions are forced to a non-empty part of the image so that bad
    # parameters can only give wrong pixels, never out-of-bounds reads: every
    # tap, and the nearest-pixel fallback, lies in [lo, hi). `where` instead
    # of min/max so that NaN (which compares false) cannot get through.
    lo_y = tl.load(p + 4)
    lo_y = tl.where(lo_y > 0.0, lo_y, 0.0)
    lo_y = tl.where(lo_y < Hf - 1.0, lo_y, Hf - 1.0)
    hi_y = tl.load(p + 5)
    hi_y = tl.where(hi_y < Hf, hi_y, Hf)
    hi_y = tl.where(hi_y > lo_y, hi_y, lo_y + 1.0)
    lo_x = tl.load(p + 6)
    lo_x = tl.where(lo_x > 0.0, lo_x, 0.0)
    lo_x = tl.where(lo_x < Wf - 1.0, lo_x, Wf - 1.0)
    hi_x = tl.load(p + 7)
    hi_x = tl.where(hi_x < Wf, hi_x, Wf)
    hi_x = tl.where(hi_x > lo_x, hi_x, lo_x + 1.0)
    valid_y0 = tl.load(p + 8)
    valid_y1 = tl.load(p + 9)
    valid_x0 = tl.load(p + 10)
    valid_x1 = tl.load(p + 11)

    s_y = tl.abs(step_y)
    s_x = tl.abs(step_x)
    if ANTIALIAS:
        # max(s, 1) in the divisor only avoids a 1/0 in the unused branch.
        # div_rn: `/` is an approximate division on NVIDIA GPUs, and the weights
        # should round like the float32 reference's.
        support_y = tl.where(s_y >= 1.0, s_y, 1.0)
        inv_y = tl.where(s_y >= 1.0, tl.div_rn(1.0, tl.maximum(s_y, 1.0)), 1.0)
        support_x = tl.where(s_x >= 1.0, s_x, 1.0)
        inv_x = tl.where(s_x >= 1.0, tl.div_rn(1.0, tl.maximum(s_x, 1.0)), 1.0)
    else:
        support_y = 1.0
        inv_y = 1.0
        support_x = 1.0
        inv_x = 1.0

    # Per output row, then per output column: first tap, tap count, weight
    # normaliser, nearest-pixel fallback. Rows of an image that does not fit
    # in `data` get no taps.
    cy, ky0, n_y, rnorm_y, fb_y = _tile_axis(
        rows, row_in & img_ok, origin_y, step_y, lo_y, hi_y, valid_y0, valid_y1, support_y, inv_y, BLOCK_H)
    cx, kx0, n_x, rnorm_x, fb_x = _tile_axis(
        cols, col_in, origin_x, step_x, lo_x, hi_x, valid_x0, valid_x1, support_x, inv_x, BLOCK_W)

    # Grayscale reads channel 0 three times: min(ch, C - 1).
    ch1 = tl.minimum(C - 1, 1)
    ch2 = tl.minimum(C - 1, 2)
    row_pitch = W * C
    acc0 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
    acc1 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
    acc2 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
    ty_max = tl.reduce(n_y, 0, _max_combine)
    tx_max = tl.reduce(n_x, 0, _max_combine)
    # Horizontal sums per source row, then weighted by the row's vertical
    # weight: fewer multiplies than 2-D weights, and the same order of
    # operations as the reference's x-first pass.
    for t in range(0, ty_max):
        ky = ky0 + t
        wy = 1.0 - tl.abs((ky.to(tl.float32) - cy + 0.5) * inv_y)
        wy = tl.where(fb_y, 1.0, tl.maximum(wy, 0.0) * rnorm_y)[:, None]
        m_y = (t < n_y)[:, None]
        row_base = (off + ky.to(tl.int64) * row_pitch)[:, None]
        r0 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
        r1 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
        r2 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
        for u in range(0, tx_max):
            kx = kx0 + u
            wx = 1.0 - tl.abs((kx.to(tl.float32) - cx + 0.5) * inv_x)
            wx = tl.where(fb_x, 1.0, tl.maximum(wx, 0.0) * rnorm_x)[None, :]
            m = m_y & (u < n_x)[None, :]
            src = data_ptr + (row_base + (kx.to(tl.int64) * C)[None, :])
            r0 += wx * tl.load(src, mask=m, other=0).to(tl.float32)
            r1 += wx * tl.load(src + ch1, mask=m, other=0).to(tl.float32)
            r2 += wx * tl.load(src + ch2, mask=m, other=0).to(tl.float32)
        acc0 += wy * r0
        acc1 += wy * r1
        acc2 += wy * r2

    out_mask = row_in[:, None] & col_in[None, :]
    dst = (
        out_ptr
        + b64 * stride_ob
        + rows.to(tl.int64)[:, None] * stride_oh
        + cols.to(tl.int64)[None, :] * stride_ow
    )
    for ch in tl.static_range(3):
        if ch == 0:
            v = acc0
        elif ch == 1:
            v = acc1
        else:
            v = acc2
        if QUANTIZE:
            v = tl.floor(tl.minimum(tl.maximum(v, 0.0), 255.0) + 0.5)
        o = v * tl.load(affine_ptr + ch) + tl.load(affine_ptr + 3 + ch)
        if OUT_UINT8:
            o = tl.floor(tl.minimum(tl.maximum(o, 0.0), 255.0) + 0.5)
        tl.store(dst + ch * stride_oc, o.to(out_ptr.dtype.element_ty), mask=out_mask)


# --------------------------------------------------------------------------- #
# Argument checking shared by the launcher and the reference
# --------------------------------------------------------------------------- #


@dataclass
class _Args:
    """Validated, normalised arguments (contiguous metadata, affine on device)."""

    data: torch.Tensor
    offsets: torch.Tensor
    shapes: torch.Tensor
    params: torch.Tensor
    affine: torch.Tensor  # float32 [6] on the data's device
    out_h: int
    out_w: int
    out: torch.Tensor  # allocated or the caller's


def _require_tensor(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def _affine_values(name: str, v: Sequence[float] | torch.Tensor, device: torch.device) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        if v.numel() != 3:
            raise ValueError(f"{name} must have 3 elements (one per output channel), got shape {tuple(v.shape)}")
        if v.is_complex() or v.dtype == torch.bool:
            raise TypeError(f"{name} must be real-valued, got {v.dtype}")
        # Any device is accepted: a CPU mean/std next to GPU data is common.
        return v.detach().reshape(3).to(device=device, dtype=torch.float32)
    try:
        vals = [float(x) for x in v]
    except TypeError as e:
        raise TypeError(f"{name} must be a sequence of 3 floats or a tensor, got {type(v).__name__}") from e
    if len(vals) != 3:
        raise ValueError(f"{name} must have 3 values (one per output channel), got {len(vals)}")
    return torch.tensor(vals, dtype=torch.float32, device=device)


def _check_values(data: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor, params: torch.Tensor) -> None:
    """Check per-sample metadata; reads the tensors, so only run where that is cheap."""
    shp = shapes.to(device="cpu", dtype=torch.int64)
    offs = offsets.to(device="cpu", dtype=torch.int64)
    prm = params.to(device="cpu")
    H, W, C = shp[:, 0], shp[:, 1], shp[:, 2]

    def first(bad: torch.Tensor) -> int:
        return int(bad.nonzero()[0, 0])

    bad = (C != 1) & (C != 3)
    if bad.any():
        i = first(bad)
        raise ValueError(f"sample {i}: channel count must be 1 or 3, got C={int(C[i])} (shape {shp[i].tolist()})")
    bad = (H < 1) | (W < 1)
    if bad.any():
        i = first(bad)
        raise ValueError(f"sample {i}: image height and width must be >= 1, got shape {shp[i].tolist()}")
    # float64: an int64 product of absurd shapes could wrap around and pass.
    end = offs.double() + H.double() * W.double() * C.double()
    bad = (offs < 0) | (end > data.numel())
    if bad.any():
        i = first(bad)
        raise ValueError(
            f"sample {i}: image at offset {int(offs[i])} with shape {shp[i].tolist()} does not fit in "
            f"data ({data.numel()} elements)"
        )
    if not torch.isfinite(prm).all():
        i = first(~torch.isfinite(prm).all(dim=1))
        raise ValueError(f"sample {i}: params contain a non-finite value: {prm[i].tolist()}")
    for axis, lo_col in (("y", 4), ("x", 6)):
        lo, hi = prm[:, lo_col], prm[:, lo_col + 1]
        bad = (lo != lo.floor()) | (hi != hi.floor())
        if bad.any():
            i = first(bad)
            raise ValueError(
                f"sample {i}: clamp region [{float(lo[i])}, {float(hi[i])}) along {axis} must have integer bounds"
            )


def _prepare(
    data: torch.Tensor,
    offsets: torch.Tensor,
    shapes: torch.Tensor,
    params: torch.Tensor,
    out_size: tuple[int, int],
    scale: Sequence[float] | torch.Tensor,
    bias: Sequence[float] | torch.Tensor,
    out_dtype: torch.dtype,
    channels_last: bool,
    out: torch.Tensor | None,
    check_values: bool,
) -> _Args:
    data = _require_tensor("data", data)
    offsets = _require_tensor("offsets", offsets)
    shapes = _require_tensor("shapes", shapes)
    params = _require_tensor("params", params)

    if data.dtype != torch.uint8:
        raise TypeError(f"data must be uint8 (decoded pixels), got {data.dtype}")
    if data.dim() != 1:
        raise ValueError(f"data must be 1-D (images packed back to back), got shape {tuple(data.shape)}")
    if params.dim() != 2 or params.shape[1] != NUM_PARAMS:
        raise ValueError(f"params must have shape [B, {NUM_PARAMS}], got {tuple(params.shape)}")
    B = params.shape[0]
    if params.dtype != torch.float32:
        raise TypeError(f"params must be float32, got {params.dtype}")
    if offsets.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"offsets must be int64 (or int32), got {offsets.dtype}")
    if offsets.shape != (B,):
        raise ValueError(f"offsets must have shape [B]=[{B}] to match params, got {tuple(offsets.shape)}")
    if shapes.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"shapes must be int32 or int64, got {shapes.dtype}")
    if shapes.shape != (B, 3):
        raise ValueError(f"shapes must have shape [B, 3]=[{B}, 3] (H, W, C per image), got {tuple(shapes.shape)}")
    device = data.device
    for name, t in (("offsets", offsets), ("shapes", shapes), ("params", params)):
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but data is on {device}; move them to the same device")

    if (
        not isinstance(out_size, (tuple, list))
        or len(out_size) != 2
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in out_size)
    ):
        raise TypeError(f"out_size must be a pair of ints (out_h, out_w), got {out_size!r}")
    out_h, out_w = out_size
    if out_h < 0 or out_w < 0:
        raise ValueError(f"out_size must be non-negative, got {tuple(out_size)}")
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {[str(d) for d in _OUT_DTYPES]}, got {out_dtype}")

    shape = (B, 3, out_h, out_w)
    if out is None:
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        out = torch.empty(shape, dtype=out_dtype, device=device, memory_format=fmt)
    else:
        out = _require_tensor("out", out)
        if tuple(out.shape) != shape:
            raise ValueError(f"out must have shape {list(shape)}, got {list(out.shape)}")
        if out.dtype != out_dtype:
            raise TypeError(f"out has dtype {out.dtype} but out_dtype is {out_dtype}")
        if out.device != device:
            raise ValueError(f"out is on {out.device} but data is on {device}")

    affine = torch.cat([_affine_values("scale", scale, device), _affine_values("bias", bias, device)])
    offsets = offsets.to(torch.int64).contiguous()
    shapes = shapes.contiguous()
    params = params.contiguous()
    if check_values and B > 0:
        _check_values(data, offsets, shapes, params)
    return _Args(data, offsets, shapes, params, affine, out_h, out_w, out)


# --------------------------------------------------------------------------- #
# Triton launcher
# --------------------------------------------------------------------------- #

_kernels: dict[str, Any] = {}  # "jit" / "interpret" -> launchable kernel


def _interpret_mode() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _load_triton() -> None:
    global triton, tl, _max_combine, _tile_axis
    if triton is not None:
        return
    try:
        import triton as triton_mod
        import triton.language as tl_mod
    except ImportError as e:
        raise RuntimeError(
            "fused_resized_crop needs Triton, which is not installed (pip install triton); "
            "resized_crop_reference computes the same result in plain torch"
        ) from e
    _max_combine = triton_mod.jit(_max_combine_fn)
    _tile_axis = triton_mod.jit(_tile_axis_fn)
    tl = tl_mod
    triton = triton_mod  # last: it marks the loading as done


def _kernel_for(device: torch.device) -> Any:
    """The kernel object able to run on ``device`` (built on first use)."""
    _load_triton()
    if device.type != "cpu":
        if "jit" not in _kernels:
            # Under TRITON_INTERPRET=1 this is already the interpreted version.
            _kernels["jit"] = triton.jit(_resized_crop_kernel)
        return _kernels["jit"]
    if not _interpret_mode():
        raise RuntimeError(
            "fused_resized_crop got CPU tensors: Triton kernels run on a GPU. Use resized_crop_reference "
            "on the CPU, or set TRITON_INTERPRET=1 to run the kernel interpreted"
        )
    from triton.runtime.interpreter import InterpretedFunction

    if "interpret" not in _kernels:
        _kernels["interpret"] = InterpretedFunction(_resized_crop_kernel)
    return _kernels["interpret"]


#: (BLOCK_H, BLOCK_W, num_warps[, maxnreg]) to use instead of the built-in choice; for
#: tuning only (benchmarks/kernel_bandwidth.py --sweep).
LAUNCH_OVERRIDE: tuple[int, ...] | None = None


def _clamped_pow2(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, triton.next_power_of_2(max(n, 1))))


def fused_resized_crop(
    data: torch.Tensor,
    offsets: torch.Tensor,
    shapes: torch.Tensor,
    params: torch.Tensor,
    out_size: tuple[int, int],
    scale: Sequence[float] | torch.Tensor,
    bias: Sequence[float] | torch.Tensor,
    *,
    out_dtype: torch.dtype = torch.float32,
    channels_last: bool = False,
    antialias: bool = True,
    quantize: bool = True,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Crop, flip, pad, resize and normalise a ragged batch of images in one kernel.

    Args:
        data: 1-D ``uint8`` tensor holding the decoded images back to back, each
            HWC contiguous.
        offsets: ``int64 [B]``, element offset of image ``b`` in ``data``.
        shapes: ``int32``/``int64 [B, 3]``, ``(H, W, C)`` of image ``b``; ``C`` is
            1 (replicated to 3 channels) or 3.
        params: ``float32 [B, NUM_PARAMS]`` per-sample geometry; columns are
            origin_y, origin_x, step_y, step_x, lo_y, hi_y, lo_x, hi_x,
            valid_y0, valid_y1, valid_x0, valid_x1 (see the module docstring).
            ``lo``/``hi`` are integers, normally ``0 <= lo < hi <= H`` (resp.
            ``W``); a region reaching outside the image is clamped to it,
            keeping at least one pixel.
        out_size: ``(out_h, out_w)`` for the whole batch.
        scale: 3 per-channel multipliers applied after resampling.
        bias: 3 per-channel addends applied after ``scale``. ``scale`` and
            ``bias`` may be tensors on any device.
        out_dtype: ``uint8`` (rounded, saturated), ``float32``, ``float16`` or
            ``bfloat16``.
        channels_last: allocate the output in channels-last memory format
            (ignored when ``out`` is given).
        antialias: widen the filter when downscaling (torchvision's default).
        quantize: round the resampled value to an integer in ``[0, 255]`` before
            ``scale``/``bias``, as torchvision does when resizing a uint8 image.
        out: optional preallocated ``[B, 3, out_h, out_w]`` output of dtype
            ``out_dtype`` on the data's device; any strides.

    Returns:
        ``[B, 3, out_h, out_w]`` tensor (``out`` when given).

    Raises:
        TypeError / ValueError: for unsupported or inconsistent arguments.
        RuntimeError: when Triton is missing, or for CPU tensors without
            ``TRITON_INTERPRET=1``.

    Per-sample values (``shapes``, ``offsets``, ``params``) are only checked when
    they are on the CPU: reading them back from a GPU would synchronise. On a GPU
    the kernel keeps every read inside its own image, so bad values give wrong
    pixels but never an illegal memory access.
    """
    device = data.device if isinstance(data, torch.Tensor) else None
    a = _prepare(
        data, offsets, shapes, params, out_size, scale, bias, out_dtype, channels_last, out,
        check_values=device is not None and device.type == "cpu",
    )
    B = a.params.shape[0]
    if B == 0 or a.out_h == 0 or a.out_w == 0:
        return a.out
    kernel = _kernel_for(a.data.device)
    # 8x64 tiles on 2 warps (8 output pixels per thread): a row of stores is 256
    # contiguous bytes in NCHW float32, source rows are reused across the 8 output
    # rows through L1. Measured 25-35% faster than 16x32 on 4 warps in every recipe
    # of benchmarks/kernel_bandwidth.py --sweep on an H200.
    block_w = _clamped_pow2(a.out_w, 8, 64)
    block_h = _clamped_pow2(a.out_h, 1, 512 // block_w)
    num_warps = 2
    extra = {}
    if LAUNCH_OVERRIDE is not None:
        block_h, block_w, num_warps = LAUNCH_OVERRIDE[:3]
        if len(LAUNCH_OVERRIDE) > 3 and LAUNCH_OVERRIDE[3] and not _interpret_mode():
            extra["maxnreg"] = LAUNCH_OVERRIDE[3]  # register cap per thread (compile option)
    n_tiles_w = triton.cdiv(a.out_w, block_w)
    n_tiles = triton.cdiv(a.out_h, block_h) * n_tiles_w
    grid = (B * n_tiles,)
    so = a.out.stride()
    # Triton launches on the current CUDA device, which need not be the data's.
    with torch.cuda.device(a.data.device) if a.data.device.type == "cuda" else nullcontext():
        kernel[grid](
            a.data, a.offsets, a.shapes, a.params, a.affine, a.out,
            a.data.numel(), a.out_h, a.out_w, n_tiles_w, n_tiles,
            so[0], so[1], so[2], so[3],
            ANTIALIAS=bool(antialias),
            QUANTIZE=bool(quantize),
            OUT_UINT8=out_dtype == torch.uint8,
            NPARAMS=NUM_PARAMS,
            BLOCK_H=block_h,
            BLOCK_W=block_w,
            num_warps=num_warps,
            **extra,
        )
    return a.out


# --------------------------------------------------------------------------- #
# Plain-torch reference (also the CPU execution path)
# --------------------------------------------------------------------------- #


def _clamp_regions(params: torch.Tensor, shapes: torch.Tensor) -> torch.Tensor:
    """Copy of ``params`` with each clamp region forced to a non-empty part of
    its image (``0 <= lo <= size - 1``, ``lo < hi <= size``), as the kernel does."""
    p = params.clone()
    for lo_col, size in ((4, shapes[:, 0]), (6, shapes[:, 1])):
        size = size.to(p.dtype)
        lo = torch.minimum(p[:, lo_col].clamp_min(0.0), size - 1.0)
        p[:, lo_col] = lo
        p[:, lo_col + 1] = torch.maximum(torch.minimum(p[:, lo_col + 1], size), lo + 1.0)
    return p


def _axis_taps(
    params: torch.Tensor, col: int, n_out: int, antialias: bool
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Gather form of one axis for the whole batch.

    ``col`` is 0 for y and 1 for x. Returns source indices ``[B, n_out, T]``
    (int64, relative to ``lo``, always inside ``[0, hi - lo)``), their
    normalised weights (float32; 0 on padding taps and on output positions
    outside the valid window) and, per sample, how many leading taps it needs.
    """
    p = params
    origin, step = p[:, col, None], p[:, 2 + col, None]
    lo, hi = p[:, 4 + 2 * col, None], p[:, 5 + 2 * col, None]
    v0, v1 = p[:, 8 + 2 * col, None], p[:, 9 + 2 * col, None]
    dev = p.device
    i = torch.arange(n_out, dtype=torch.float32, device=dev)
    c = origin + step * (i + 0.5)  # [B, n_out]
    s = step.abs()
    one = torch.ones_like(s)
    if antialias:
        wide = s >= 1.0
        support = torch.where(wide, s, one)
        inv = torch.where(wide, 1.0 / torch.maximum(s, one), one)
    else:
        support = inv = one
    kmin = torch.maximum(torch.floor(c - support + 0.5), lo)
    kmax = torch.minimum(torch.floor(c + support + 0.5), hi)
    n = (kmax - kmin).clamp_min(0)  # <= hi - lo, so T stays bounded
    n_per_sample = n.amax(dim=1).clamp_min(1).to(torch.int64).tolist()
    T = max(n_per_sample)
    taps = torch.arange(T, dtype=torch.float32, device=dev)
    k = kmin[..., None] + taps  # [B, n_out, T]
    w = (1.0 - ((k - c[..., None] + 0.5) * inv[..., None]).abs()).clamp_min(0)
    w = torch.where(taps < n[..., None], w, 0.0)
    total = w.sum(dim=2, keepdim=True)
    # The window can miss [lo, hi) entirely (sample point outside the clamp
    # region): use the nearest pixel of the region instead.
    fallback = total == 0
    nearest = torch.minimum(torch.maximum(torch.floor(c), lo), hi - 1)[..., None]
    first = taps == 0
    k = torch.where(fallback & first, nearest, k)
    w = torch.where(fallback, first.to(w.dtype), w / torch.where(fallback, 1.0, total))
    valid = (i >= v0) & (i < v1)
    w = w * valid[..., None]
    idx = (k - lo[..., None]).to(torch.int64)
    idx = torch.minimum(idx.clamp_min(0), (hi - lo - 1).to(torch.int64)[..., None])
    return idx, w, n_per_sample


def _gather_rows(x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``out[i] = sum_t w[i, t] * x[idx[i, t]]`` for ``x`` of shape ``[N, M, C]``.

    Gathering whole rows of a contiguous tensor is a run of memcpys, much faster
    than gathering along an inner dimension, so both passes are run this way.
    """
    acc = x.index_select(0, idx[:, 0]).mul_(w[:, 0, None, None])
    for t in range(1, idx.shape[1]):
        acc.addcmul_(x.index_select(0, idx[:, t]), w[:, t, None, None])
    return acc


def _resample_one(
    crop: torch.Tensor,
    idx_y: torch.Tensor,
    w_y: torch.Tensor,
    idx_x: torch.Tensor,
    w_x: torch.Tensor,
) -> torch.Tensor:
    """Resample a ``[Hc, Wc, C]`` uint8 crop to ``[out_h, out_w, C]`` float32."""
    Hc, Wc, _ = crop.shape
    out_h, Ty = idx_y.shape
    out_w, Tx = idx_x.shape
    # Both orders give the same separable sum; pick the one touching fewer
    # elements (gathers plus the transposes between passes).
    cost_y_first = out_h * Ty * Wc + out_h * Wc + out_w * Tx * out_h
    cost_x_first = Hc * Wc + out_w * Tx * Hc + out_w * Hc + out_h * Ty * out_w
    if cost_y_first <= cost_x_first:
        a = _gather_rows(crop.float(), idx_y, w_y)  # [out_h, Wc, C]
        b = _gather_rows(a.transpose(0, 1).contiguous(), idx_x, w_x)  # [out_w, out_h, C]
        return b.transpose(0, 1)
    a = _gather_rows(crop.transpose(0, 1).float().contiguous(), idx_x, w_x)  # [out_w, Hc, C]
    return _gather_rows(a.transpose(0, 1).contiguous(), idx_y, w_y)  # [out_h, out_w, C]


def resized_crop_reference(
    data: torch.Tensor,
    offsets: torch.Tensor,
    shapes: torch.Tensor,
    params: torch.Tensor,
    out_size: tuple[int, int],
    scale: Sequence[float] | torch.Tensor,
    bias: Sequence[float] | torch.Tensor,
    *,
    out_dtype: torch.dtype = torch.float32,
    channels_last: bool = False,
    antialias: bool = True,
    quantize: bool = True,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Plain-torch twin of :func:`fused_resized_crop` (same arguments and result).

    Separable gather resampling in float32, one sample at a time; works on any
    device and is the library's CPU path. Per-sample values are always
    validated here (they are read to the host anyway).
    """
    a = _prepare(
        data, offsets, shapes, params, out_size, scale, bias, out_dtype, channels_last, out,
        check_values=True,
    )
    B = a.params.shape[0]
    if B == 0 or a.out_h == 0 or a.out_w == 0:
        return a.out
    shapes_l = a.shapes.tolist()
    offsets_l = a.offsets.tolist()
    params = _clamp_regions(a.params, a.shapes)
    region = params[:, 4:8].to(torch.int64).tolist()
    idx_y, w_y, ty = _axis_taps(params, 0, a.out_h, antialias)
    idx_x, w_x, tx = _axis_taps(params, 1, a.out_w, antialias)
    scale_t, bias_t = a.affine[:3], a.affine[3:]
    for b in range(B):
        H, W, C = shapes_l[b]
        lo_y, hi_y, lo_x, hi_x = region[b]
        img = a.data[offsets_l[b] : offsets_l[b] + H * W * C].view(H, W, C)
        # Only the clamp region is ever read; converting just it keeps crops cheap.
        v = _resample_one(
            img[lo_y:hi_y, lo_x:hi_x],
            idx_y[b, :, : ty[b]], w_y[b, :, : ty[b]],
            idx_x[b, :, : tx[b]], w_x[b, :, : tx[b]],
        )
        if quantize:
            v = v.clamp_(0.0, 255.0).add_(0.5).floor_()
        # [oh, ow, C] * [3] broadcasts, which also turns grayscale into 3 channels.
        dst = a.out[b].permute(1, 2, 0)
        if out_dtype == torch.float32:
            torch.addcmul(bias_t, v, scale_t, out=dst)
        else:
            o = torch.addcmul(bias_t, v, scale_t)
            if out_dtype == torch.uint8:
                o = o.clamp_(0.0, 255.0).add_(0.5).floor_()
            dst.copy_(o)
    return a.out
