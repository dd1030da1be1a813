"""The augment program's kernels: per-image statistics, and one slot over output tiles.

Imported on the first launch only (see ``_triton.py``); ``augment.py`` holds the
launchers and the plain-torch references. One program works on one tile of one
sample; the sample's op is a runtime scalar branch on its op code, so a slot
with different ops per sample is one launch. Per-pixel math is in
``stages/colour.py`` and ``stages/warp.py``; this file reads pixels, their
neighbours and the statistics, and stores.
"""
import triton
import triton.language as tl

from . import augment, layout
from .stages import colour, sample, warp
from .stages.source import load_tile, tile


@triton.jit
def add_combine(a, b):
    """``tl.reduce`` combiner: sum."""
    return a + b


@triton.jit
def image_stats_kernel(
    in_ptr,  # uint8 [B, 3, H, W], any strides
    stats_ptr,  # int32 [B, STATS_W] contiguous, zeroed (min columns at 255)
    H, W, n_tiles_w, n_tiles,
    s_b, s_c, s_h, s_w,
    LUMA_SUM: tl.constexpr, MINMAX: tl.constexpr, HISTOGRAM: tl.constexpr,
    FMA64: tl.constexpr, STATS_W: tl.constexpr,
    CACHE_KEY: tl.constexpr,  # _triton.cache_key(): the module constants read here are part of the key
    BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr,
):
    # Each tile reduces its pixels, then one atomic per statistic adds it into
    # the sample's row: the row is tiny, the image is read once.
    b64, rows, cols, mask = tile(tl.program_id(0), n_tiles, n_tiles_w, H, W, BLOCK_H, BLOCK_W)
    x0, x1, x2 = load_tile(in_ptr + b64 * s_b, s_c, s_h, s_w, rows, cols, mask)
    row = stats_ptr + b64 * STATS_W
    if LUMA_SUM:
        g = tl.where(mask, tl.floor(colour.luma(x0, x1, x2, FMA64)), 0.0).to(tl.int32)
        tl.atomic_add(row + augment.STATS_LUMA_SUM, tl.reduce(tl.reduce(g, 1, add_combine), 0, add_combine))
    for ch in tl.static_range(3):
        if ch == 0:
            x = x0
        elif ch == 1:
            x = x1
        else:
            x = x2
        xi = x.to(tl.int32)
        if MINMAX:
            lo = tl.reduce(tl.reduce(tl.where(mask, xi, 255), 1, sample.min_combine), 0, sample.min_combine)
            hi = tl.reduce(tl.reduce(tl.where(mask, xi, 0), 1, sample.max_combine), 0, sample.max_combine)
            tl.atomic_min(row + augment.STATS_MIN + ch, lo)
            tl.atomic_max(row + augment.STATS_MAX + ch, hi)
        if HISTOGRAM:
            # pixels outside the image were loaded as 0: take them out of bin 0
            hist = tl.histogram(tl.reshape(xi, [BLOCK_H * BLOCK_W]), 256)
            n_out = BLOCK_H * BLOCK_W - tl.reduce(tl.reduce(mask.to(tl.int32), 1, add_combine), 0, add_combine)
            bins = tl.arange(0, 256)
            hist = hist - tl.where(bins == 0, n_out, 0)
            tl.atomic_add(row + augment.STATS_HIST + ch * 256 + bins, hist)


@triton.jit
def blur_channel(src, s_h, s_w, rows, cols, mask, H, W, kx, ky, wx_ptr, wy_ptr):
    """One channel of the Gaussian blur: ``sum_ty sum_tx (wy[ty] * wx[tx]) * x[reflect]``,
    row by row, rounded half to even (as ``reference.gaussian_blur``)."""
    acc = tl.full(mask.shape, 0.0, tl.float32)
    for ty in range(0, ky):
        yy = rows + ty - ky // 2
        yy = tl.where(yy < 0, -yy, yy)
        yy = tl.where(yy > H - 1, 2 * (H - 1) - yy, yy)
        yy = tl.minimum(tl.maximum(yy, 0), H - 1)  # only for kernels wider than the image allows
        wy = tl.load(wy_ptr + ty)
        row_ptr = src + yy.to(tl.int64)[:, None] * s_h
        for tx in range(0, kx):
            xx = cols + tx - kx // 2
            xx = tl.where(xx < 0, -xx, xx)
            xx = tl.where(xx > W - 1, 2 * (W - 1) - xx, xx)
            xx = tl.minimum(tl.maximum(xx, 0), W - 1)
            v = tl.load(row_ptr + xx.to(tl.int64)[None, :] * s_w, mask=mask, other=0).to(tl.float32)
            acc = acc + v * (wy * tl.load(wx_ptr + tx))
    return colour.rint(acc)


@triton.jit
def sharpness_channel(src, s_h, s_w, rows, cols, mask, x, factor, H, W, FMA64: tl.constexpr):
    """One channel of ``adjust_sharpness``: interior pixels blended with their 3x3
    smoothing; the one-pixel border (and images with a side <= 2) kept."""
    interior = (rows >= 1) & (rows < H - 1)
    interior = interior[:, None] & ((cols >= 1) & (cols < W - 1))[None, :] & mask & (H > 2) & (W > 2)
    acc = tl.full(mask.shape, 0.0, tl.float32)
    for dy in tl.static_range(3):
        for dx in tl.static_range(3):
            ptr = (src + (rows + dy - 1).to(tl.int64)[:, None] * s_h + (cols + dx - 1).to(tl.int64)[None, :] * s_w)
            v = tl.load(ptr, mask=interior, other=0).to(tl.float32)
            if dy == 1 and dx == 1:
                acc = acc + v * colour.SHARP_CENTRE
            else:
                acc = acc + v * colour.SHARP_EDGE
    return tl.where(interior, colour.sharpen(x, acc, factor, FMA64), x)


@triton.jit
def augment_slot_kernel(
    in_ptr,  # uint8 [B, 3, H, W], any strides
    out_ptr,  # uint8 [B, 3, H, W], any strides, not aliasing in_ptr
    slot_ptr,  # float32 [B, layout.SLOT_WIDTH] contiguous
    stats_ptr,  # int32 [B, STATS_W] from image_stats (read when HAS_STATS)
    lut_ptr,  # int32 [B, 3, 256] equalize lookup tables (read when HAS_LUT)
    blur_ptr,  # float32 [B, 2, KMAX] 1-D Gaussian kernels, x then y (read when HAS_BLUR)
    H, W, n_tiles_w, n_tiles, KMAX,
    si_b, si_c, si_h, si_w,
    so_b, so_c, so_h, so_w,
    HAS_STATS: tl.constexpr, HAS_LUT: tl.constexpr, HAS_BLUR: tl.constexpr,
    FMA64: tl.constexpr, STATS_W: tl.constexpr,
    CACHE_KEY: tl.constexpr,  # _triton.cache_key(): the module constants read here are part of the key
    BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr,
):
    b64, rows, cols, mask = tile(tl.program_id(0), n_tiles, n_tiles_w, H, W, BLOCK_H, BLOCK_W)
    sp = slot_ptr + b64 * layout.SLOT_WIDTH
    op = tl.load(sp + layout.SLOT_OP).to(tl.int32)
    m0 = tl.load(sp + layout.SLOT_M0)
    m1 = tl.load(sp + layout.SLOT_M1)
    src = in_ptr + b64 * si_b
    x0, x1, x2 = load_tile(src, si_c, si_h, si_w, rows, cols, mask)
    # Codes outside the table (and ops whose inputs were not computed) are the identity; contrast's
    # mean comes from the statistics, computed whenever the slot holds a contrast (``stats_needed``).
    mean = 0.0
    if HAS_STATS:
        total = tl.load(stats_ptr + b64 * STATS_W + augment.STATS_LUMA_SUM)
        pixels = tl.where(m1 > 0, m1, (H * W).to(tl.float32))  # a row of a padded layout: its own count
        mean = tl.div_rn(total.to(tl.float32), pixels)
    o0, o1, o2 = colour.pointwise(x0, x1, x2, op, m0, m1, tl.load(sp + layout.SLOT_M2), mean, FMA64)
    if (op == layout.OP_AFFINE) | (op == layout.OP_PERSPECTIVE):
        o0, o1, o2 = warp.warp(
            src, si_c, si_h, si_w, rows, cols, mask, H, W,
            m0, m1, tl.load(sp + layout.SLOT_M2), tl.load(sp + layout.SLOT_M3),
            tl.load(sp + layout.SLOT_M4), tl.load(sp + layout.SLOT_M5),
            tl.load(sp + layout.SLOT_M6), tl.load(sp + layout.SLOT_M7),
            op == layout.OP_PERSPECTIVE, tl.load(sp + layout.SLOT_INTERP).to(tl.int32) == layout.FILTER_NEAREST,
            tl.load(sp + layout.SLOT_FILL0), tl.load(sp + layout.SLOT_FILL1), tl.load(sp + layout.SLOT_FILL2))
    elif op == layout.OP_SHARPNESS:
        o0 = sharpness_channel(src, si_h, si_w, rows, cols, mask, x0, m0, H, W, FMA64)
        o1 = sharpness_channel(src + si_c, si_h, si_w, rows, cols, mask, x1, m0, H, W, FMA64)
        o2 = sharpness_channel(src + 2 * si_c, si_h, si_w, rows, cols, mask, x2, m0, H, W, FMA64)
    elif op == layout.OP_AUTOCONTRAST:
        if HAS_STATS:
            row = stats_ptr + b64 * STATS_W
            o0 = colour.autocontrast(x0, tl.load(row + augment.STATS_MIN).to(tl.float32),
                                     tl.load(row + augment.STATS_MAX).to(tl.float32))
            o1 = colour.autocontrast(x1, tl.load(row + augment.STATS_MIN + 1).to(tl.float32),
                                     tl.load(row + augment.STATS_MAX + 1).to(tl.float32))
            o2 = colour.autocontrast(x2, tl.load(row + augment.STATS_MIN + 2).to(tl.float32),
                                     tl.load(row + augment.STATS_MAX + 2).to(tl.float32))
    elif op == layout.OP_EQUALIZE:
        if HAS_LUT:
            lut = lut_ptr + b64 * 768
            o0 = tl.load(lut + x0.to(tl.int32), mask=mask, other=0).to(tl.float32)
            o1 = tl.load(lut + 256 + x1.to(tl.int32), mask=mask, other=0).to(tl.float32)
            o2 = tl.load(lut + 512 + x2.to(tl.int32), mask=mask, other=0).to(tl.float32)
    elif op == layout.OP_GAUSSIAN_BLUR:
        if HAS_BLUR:
            kx = tl.minimum(tl.maximum(m0.to(tl.int32), 1), KMAX)
            ky = tl.minimum(tl.maximum(m1.to(tl.int32), 1), KMAX)
            wx_ptr = blur_ptr + b64 * 2 * KMAX
            wy_ptr = wx_ptr + KMAX
            o0 = blur_channel(src, si_h, si_w, rows, cols, mask, H, W, kx, ky, wx_ptr, wy_ptr)
            o1 = blur_channel(src + si_c, si_h, si_w, rows, cols, mask, H, W, kx, ky, wx_ptr, wy_ptr)
            o2 = blur_channel(src + 2 * si_c, si_h, si_w, rows, cols, mask, H, W, kx, ky, wx_ptr, wy_ptr)
    dst = out_ptr + b64 * so_b + rows.to(tl.int64)[:, None] * so_h + cols.to(tl.int64)[None, :] * so_w
    tl.store(dst, o0.to(tl.uint8), mask=mask)
    tl.store(dst + so_c, o1.to(tl.uint8), mask=mask)
    tl.store(dst + 2 * so_c, o2.to(tl.uint8), mask=mask)
