"""Sample stage: which source pixels each output pixel reads, with what weights, and their sum.

Per axis, output index ``i`` samples the source at ``c = origin + step * (i + 0.5)``
(a negative ``step`` walks the source backwards: a flip). The filter is the
triangle of PyTorch's ``_upsample_bilinear2d_aa``: ``support = |step|`` and
``inv = 1 / |step|`` when antialiasing a downscale, else 1 and 1 (plain bilinear,
``align_corners=False``). Taps ``k`` run over ``[max(floor(c - support + 0.5), lo),
min(floor(c + support + 0.5), hi))`` with weight ``max(0, 1 - |(k - c + 0.5) * inv|)``,
normalised to sum 1; if they sum to 0 the nearest pixel of ``[lo, hi)`` is used.
The 2-D sum is separable: horizontal sums per source row, weighted by the row's
vertical weight.

The homography path of rotations and perspective warps is a second sampler
beside :func:`sample`, reading the same source stage.
"""
import triton
import triton.language as tl

from . import source as src_stage


@triton.jit
def max_combine(a, b):
    """``tl.reduce`` combiner: the most taps any pixel of a tile needs."""
    return tl.maximum(a, b)


@triton.jit
def clamp_region(lo, hi, size):
    """The clamp region ``[lo, hi)`` forced to a non-empty part of ``[0, size)``.

    Bad parameters can then only give wrong pixels, never out-of-bounds reads:
    every tap, and the nearest-pixel fallback, lies in ``[lo, hi)``. ``where``
    instead of min/max so that NaN (which compares false) cannot get through.
    """
    lo = tl.where(lo > 0.0, lo, 0.0)
    lo = tl.where(lo < size - 1.0, lo, size - 1.0)
    hi = tl.where(hi < size, hi, size)
    hi = tl.where(hi > lo, hi, lo + 1.0)
    return lo, hi


@triton.jit
def filter_width(step, ANTIALIAS: tl.constexpr):
    """Support and inverse width of the triangle filter for a sampling ``step``."""
    s = tl.abs(step)
    if ANTIALIAS:
        # max(s, 1) in the divisor only avoids a 1/0 in the unused branch.
        # div_rn: `/` is an approximate division on NVIDIA GPUs, and the weights
        # should round like the float32 reference's.
        support = tl.where(s >= 1.0, s, 1.0)
        inv = tl.where(s >= 1.0, tl.div_rn(1.0, tl.maximum(s, 1.0)), 1.0)
    else:
        support = tl.full([], 1.0, tl.float32)
        inv = tl.full([], 1.0, tl.float32)
    return support, inv


@triton.jit
def triangle(k, c, inv):
    """Unnormalised, unclipped triangle weight of source index ``k`` for centre ``c``."""
    return 1.0 - tl.abs((k.to(tl.float32) - c + 0.5) * inv)


@triton.jit
def axis_taps(idx, in_range, origin, step, lo, hi, valid0, valid1, support, inv, N: tl.constexpr):
    """One axis of a tile (output indices ``idx``): sample centre, first tap, tap
    count, 1 / sum of weights, and whether the nearest-pixel fallback applies."""
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
    for t in range(0, tl.reduce(n, 0, max_combine)):
        w = triangle(k0 + t, c, inv)
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


@triton.jit
def tap_weight(k, c, inv, rnorm, fb):
    """Normalised weight of tap ``k``: 1 for the nearest-pixel fallback."""
    return tl.where(fb, 1.0, tl.maximum(triangle(k, c, inv), 0.0) * rnorm)


@triton.jit
def sample(data_ptr, off, W, C,
           cy, ky0, n_y, rnorm_y, fb_y, inv_y,
           cx, kx0, n_x, rnorm_x, fb_x, inv_x,
           BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    """The resampled tile, three float32 ``[BLOCK_H, BLOCK_W]`` channels, from the
    per-axis taps of :func:`axis_taps`; pixels with no taps are 0."""
    ch1, ch2 = src_stage.channels(C)
    pitch = W * C
    acc0 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
    acc1 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
    acc2 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
    ty_max = tl.reduce(n_y, 0, max_combine)
    tx_max = tl.reduce(n_x, 0, max_combine)
    # Horizontal sums per source row, then weighted by the row's vertical
    # weight: fewer multiplies than 2-D weights, and the same order of
    # operations as the reference's x-first pass.
    for t in range(0, ty_max):
        ky = ky0 + t
        wy = tap_weight(ky, cy, inv_y, rnorm_y, fb_y)[:, None]
        m_y = (t < n_y)[:, None]
        row = src_stage.row_start(off, ky, pitch)
        r0 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
        r1 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
        r2 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
        for u in range(0, tx_max):
            kx = kx0 + u
            wx = tap_weight(kx, cx, inv_x, rnorm_x, fb_x)[None, :]
            v0, v1, v2 = src_stage.source(data_ptr, row, kx, C, ch1, ch2, m_y & (u < n_x)[None, :])
            r0 += wx * v0
            r1 += wx * v1
            r2 += wx * v2
        acc0 += wy * r0
        acc1 += wy * r1
        acc2 += wy * r2
    return acc0, acc1, acc2
