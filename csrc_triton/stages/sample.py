"""Sample stage: which source pixels each output pixel reads, with what weights, and their sum.

Per axis, output index ``i`` samples the source at ``c = origin + step * (i + 0.5)``
(a negative ``step`` walks the source backwards: a flip). The filter is a
compile-time switch ``FILTER`` (codes in ``layout.py``), each exactly the
``torch.nn.functional.interpolate`` mode torchvision's ``resize`` uses, applied
to the clamp region ``[lo, hi)`` as to a cropped image:

* ``FILTER_BILINEAR``: the triangle of ``_upsample_bilinear2d_aa``; ``support =
  |step|`` and ``inv = 1 / |step|`` when antialiasing a downscale, else 1 and 1
  (plain bilinear, ``align_corners=False``). Taps ``k`` run over
  ``[max(floor(c - support + 0.5), lo), min(floor(c + support + 0.5), hi))`` with
  weight ``max(0, 1 - |(k - c + 0.5) * inv|)``, normalised to sum 1; if they sum to
  0 the nearest pixel of ``[lo, hi)`` is used.
* ``FILTER_BICUBIC`` with antialias: ``_upsample_bicubic2d_aa``, the same window
  with twice the support (``2 |step|`` when downscaling, else 2) and the Keys
  cubic with ``a = -0.5`` as weight, normalised to sum 1 (negative lobes included).
* ``FILTER_BICUBIC`` without antialias: ``upsample_bicubic2d``
  (``align_corners=False``): four taps ``floor(c - 0.5) - 1 .. + 2`` with the Keys
  cubic ``a = -0.75`` weights, unnormalised; taps outside ``[lo, hi)`` read the
  edge pixel.
* ``FILTER_NEAREST`` / ``FILTER_NEAREST_EXACT``: one tap, ``lo + min(floor(j *
  s), hi - lo - 1)`` resp. ``floor((j + 0.5) * s)``, in float32 as torch computes
  it, with ``s = |step|`` and ``j`` the output index in the resized image
  (recovered from ``c``). Antialias does not apply.

Bicubic on a quantised (uint8) image rounds and clamps the horizontal sums to
``0..255`` before the vertical pass, as torch's CPU uint8 kernel does (and so
torchvision on a uint8 CPU tensor): where the cubic overshoots, that differs
from a one-pass float resize (torchvision on a CUDA tensor) by far more than
rounding. Bilinear cannot overshoot and stays one float pass.

The 2-D sum is separable: horizontal sums per source row, weighted by the row's
vertical weight. A tile's output rows share most of their source rows (their
windows overlap), so :func:`sample` computes each source row's horizontal sums once
per tile and adds them into every output row of the tile, with weight 0 where the
row is outside the output row's window: the same sums, in the same order, as
reading each output row's taps one by one. :func:`resample` is the whole stage for
one filter; with ``FILTER_PER_SAMPLE`` the kernel calls it once per filter under a
runtime branch on the sample's ``filter`` column.

Each tap reads its source pixel through the source stage's loader for the
compile-time ``SOURCE`` (``layout.SOURCE_*``): the RGB of an interleaved image,
or that of a planar YCbCr sample (``source.source_ycbcr``) or an NV12 frame
(``source.source_nv12``) computed at the tap.

With a padding mode (``PAD_MODE``, ``layout.PAD_*``; see ``layout.py``), the clamp
region may reach past the image (the padded extent a later resize sees): every tap
index is folded into the sample's fold box by ``source.fold_index`` before the load,
and with ``PAD_CONSTANT`` the taps outside the box, and the pixels outside the valid
window, read the fill instead of 0. ``PAD_NONE`` compiles none of this.

The homography path of rotations and perspective warps is a second sampler
beside :func:`sample`, reading the same source stage.
"""
import triton
import triton.language as tl

from .. import layout
from . import source as src_stage


@triton.jit
def max_combine(a, b):
    """``tl.reduce`` combiner: maximum (the most taps any pixel of a tile needs, the end of its band)."""
    return tl.maximum(a, b)


@triton.jit
def min_combine(a, b):
    """``tl.reduce`` combiner: minimum (the first source row of a tile's band)."""
    return tl.minimum(a, b)


@triton.jit
def clamp_region(lo, hi, size):
    """The clamp region ``[lo, hi)`` forced to a non-empty part of the image ``[0, size)``.

    Bad parameters can then only give wrong pixels, never out-of-bounds reads:
    every tap, and the nearest-pixel fallback, lies in ``[lo, hi)``. ``where``
    instead of min/max so that NaN (which compares false) cannot get through.
    """
    lo = tl.where(lo > 0.0, lo, 0.0)
    lo = tl.where(lo < size - 1.0, lo, size - 1.0)
    hi = tl.where(hi < size, hi, size)
    hi = tl.where(hi > lo, hi, lo + 1.0)
    return lo, hi


# How far a padded clamp region may reach (exact integers in float32)
PAD_LIMIT = tl.constexpr(16777216.0)


@triton.jit
def padded_region(lo, hi):
    """The clamp region ``[lo, hi)`` of a padded sample, which may reach past the image:
    kept within ``+-PAD_LIMIT`` and non-empty (the fold box keeps the reads in the image)."""
    lo = tl.where(lo > -PAD_LIMIT, lo, -PAD_LIMIT)
    lo = tl.where(lo < PAD_LIMIT - 1.0, lo, PAD_LIMIT - 1.0)
    hi = tl.where(hi < PAD_LIMIT, hi, PAD_LIMIT)
    hi = tl.where(hi > lo, hi, lo + 1.0)
    return lo, hi


@triton.jit
def filter_width(step, FILTER: tl.constexpr, ANTIALIAS: tl.constexpr):
    """Support and inverse width of the filter ``FILTER`` for a sampling ``step``."""
    s = tl.abs(step)
    if FILTER == layout.FILTER_BICUBIC and ANTIALIAS:
        support = tl.where(s >= 1.0, 2.0 * s, 2.0)
        inv = tl.where(s >= 1.0, tl.div_rn(1.0, tl.maximum(s, 1.0)), 1.0)
    elif FILTER == layout.FILTER_BILINEAR and ANTIALIAS:
        # max(s, 1) in the divisor only avoids a 1/0 in the unused branch.
        # div_rn: `/` is an approximate division on NVIDIA GPUs, and the weights
        # should round like the float32 reference's.
        support = tl.where(s >= 1.0, s, 1.0)
        inv = tl.where(s >= 1.0, tl.div_rn(1.0, tl.maximum(s, 1.0)), 1.0)
    elif FILTER == layout.FILTER_BICUBIC:
        support = tl.full([], 2.0, tl.float32)
        inv = tl.full([], 1.0, tl.float32)
    else:
        # bilinear without antialias; the nearest filters read neither value
        support = tl.full([], 1.0, tl.float32)
        inv = tl.full([], 1.0, tl.float32)
    return support, inv


@triton.jit
def triangle(k, c, inv):
    """Unnormalised, unclipped triangle weight of source index ``k`` for centre ``c``."""
    return 1.0 - tl.abs((k.to(tl.float32) - c + 0.5) * inv)


@triton.jit
def cubic(k, c, inv, A: tl.constexpr):
    """Unnormalised Keys cubic weight (parameter ``A``) of source index ``k`` for centre ``c``."""
    x = tl.abs((k.to(tl.float32) - c + 0.5) * inv)
    inner = ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    outer = ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
    return tl.where(x < 1.0, inner, tl.where(x < 2.0, outer, 0.0))


@triton.jit
def nearest_index(c, step, lo, hi, EXACT: tl.constexpr):
    """Source index of torch's ``nearest`` (``EXACT``: ``nearest-exact``) for sample centre ``c``.

    ``j``, the output index within the resized image, is an integer and ``c - lo
    = |step| * (j + 0.5)`` up to float error, so the floor recovers it; the index
    is then computed in float32 as torch does, from ``j`` and ``scale = |step|``.
    """
    s = tl.abs(step)
    j = tl.floor(tl.div_rn(c - lo, s))
    if EXACT:
        j = j + 0.5
    k = lo + tl.floor(j * s)
    k = tl.where(k < hi - 1.0, k, hi - 1.0)
    return tl.where(k > lo, k, lo)


@triton.jit
def axis_taps(idx, in_range, origin, step, lo, hi, valid0, valid1, support, inv,
              FILTER: tl.constexpr, ANTIALIAS: tl.constexpr, N: tl.constexpr):
    """One axis of a tile (output indices ``idx``): sample centre, first tap, tap
    count, 1 / sum of weights, and whether the tap is a single pixel of weight 1
    (the nearest filters, and the fallback of the windowed ones)."""
    i = idx.to(tl.float32)
    c = origin + step * (i + 0.5)
    act = in_range & (i >= valid0) & (i < valid1)
    if FILTER == layout.FILTER_NEAREST or FILTER == layout.FILTER_NEAREST_EXACT:
        k = nearest_index(c, step, lo, hi, FILTER == layout.FILTER_NEAREST_EXACT)
        n = tl.where(act, 1, 0)
        k0 = tl.where(act, k, 0.0).to(tl.int32)
        return c, k0, n, tl.full([N], 1.0, tl.float32), act
    if FILTER == layout.FILTER_BICUBIC and not ANTIALIAS:
        # Taps floor(c - 0.5) - 1 .. + 2, read through an index clamped to
        # [lo, hi) (see tap_index). A first tap beyond lo - 3 or hi - 1 only
        # reads the edge pixel, so it is moved there with the centre, keeping
        # every weight and the float->int cast small. A NaN or infinite centre
        # (bad parameters) reads one edge pixel with weight 1.
        k_lo = tl.floor(c - 0.5) - 1.0
        k_in = tl.where(k_lo > lo - 3.0, k_lo, lo - 3.0)
        k_in = tl.where(k_in < hi - 1.0, k_in, hi - 1.0)
        c = c - (k_lo - k_in)
        c = tl.where(c == c, c, k_in + 1.5)
        n = tl.where(act, 4, 0)
        k0 = tl.where(act, k_in, 0.0).to(tl.int32)
        return c, k0, n, tl.full([N], 1.0, tl.float32), act & False  # no single-pixel taps
    k_lo = tl.floor(c - support + 0.5)
    k_lo = tl.where(k_lo > lo, k_lo, lo)
    k_hi = tl.floor(c + support + 0.5)
    k_hi = tl.where(k_hi < hi, k_hi, hi)
    n_f = k_hi - k_lo
    # Indices that are padding or past the edge get no taps: they stay 0 and
    # cost no loads. With taps, lo <= k_lo < k_hi <= hi <= size, so the
    # float->int casts only ever see small non-negative values.
    has = act & (n_f > 0.0)
    n = tl.where(has, n_f, 0.0).to(tl.int32)
    k0 = tl.where(has, k_lo, 0.0).to(tl.int32)
    total = tl.full([N], 0.0, tl.float32)
    for t in range(0, tl.reduce(n, 0, max_combine)):
        if FILTER == layout.FILTER_BICUBIC:
            total += tl.where(t < n, cubic(k0 + t, c, inv, -0.5), 0.0)
        else:
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
    if FILTER == layout.FILTER_BICUBIC:
        # the cubic's sum can be negative on a window cut short by the border
        rnorm = tl.div_rn(tl.full([N], 1.0, tl.float32), tl.where(total != 0.0, total, 1.0))
    else:
        rnorm = tl.div_rn(tl.full([N], 1.0, tl.float32), tl.where(total > 0.0, total, 1.0))
    return c, k0, n, rnorm, fb


@triton.jit
def tap_index(k, lo, hi):
    """Source index read by tap ``k``: the nearest index of ``[lo, hi)``. Plain bicubic
    reads the edge pixel for its taps beyond it; the other filters' taps lie inside, but
    for those past a pixel's tap count, which weigh 0 and only need a readable pixel."""
    k = tl.maximum(k, lo)
    return tl.minimum(k, hi - 1)


@triton.jit
def tap_weight(k, c, inv, rnorm, fb, FILTER: tl.constexpr, ANTIALIAS: tl.constexpr):
    """Normalised weight of tap ``k``: 1 for a single-pixel tap."""
    # Keys' a: -0.5 in torch's antialiased bicubic (as PIL), -0.75 in the plain one (as OpenCV)
    if FILTER == layout.FILTER_BICUBIC and ANTIALIAS:
        w = tl.where(fb, 1.0, cubic(k, c, inv, -0.5) * rnorm)
    elif FILTER == layout.FILTER_BICUBIC:
        w = tl.where(fb, 1.0, cubic(k, c, inv, -0.75) * rnorm)
    elif FILTER == layout.FILTER_BILINEAR:
        w = tl.where(fb, 1.0, tl.maximum(triangle(k, c, inv), 0.0) * rnorm)
    else:
        w = tl.where(fb, 1.0, 0.0)
    return w


@triton.jit
def band(ky0, n_y):
    """The tile's band: the source rows ``[first, end)`` from the first tap of any of its
    output rows to one past the last (tap indices, as :func:`axis_taps` gives them);
    ``first == end`` when no row has taps."""
    has = n_y > 0
    first = tl.reduce(tl.where(has, ky0, 2147483647), 0, min_combine)
    end = tl.reduce(tl.where(has, ky0 + n_y, -2147483647), 0, max_combine)
    any_taps = end > first
    return tl.where(any_taps, first, 0), tl.where(any_taps, end, 0)


@triton.jit
def row_sums(data_ptr, off, H, W, C, ky, m_y,
             cx, kx0, n_x, rnorm_x, fb_x, inv_x, lo_x, hi_x, tx_max, lo_y, hi_y,
             f0_y, f1_y, f0_x, f1_x, fill0, fill1, fill2,
             FILTER: tl.constexpr, ANTIALIAS: tl.constexpr, QUANTIZE: tl.constexpr,
             R: tl.constexpr, BLOCK_W: tl.constexpr, SOURCE: tl.constexpr, PAD_MODE: tl.constexpr):
    """The horizontal pass over source rows ``ky`` ``[R]`` (tap indices, read through
    :func:`tap_index` and, with a ``PAD_MODE``, folded): each output column's weighted
    sum of its taps, three float32 ``[R, BLOCK_W]`` channels (``tx_max`` taps, the most
    any column has). The rows not in ``m_y`` must weigh 0 in the vertical pass: they
    read 0 from the planar sources, and from an interleaved image the pixels of their
    index clamped to the clamp region. Rounded to ``0..255`` for quantised bicubic:
    torch's uint8 kernel stores this pass as uint8."""
    ky_src = tap_index(ky, lo_y, hi_y)
    if PAD_MODE != layout.PAD_NONE:
        ky_src, in_y = src_stage.fold_index(ky_src, f0_y, f1_y, PAD_MODE)
    else:
        in_y = m_y  # not read
    row = src_stage.row_start(off, ky_src, W * C)
    if SOURCE == layout.SOURCE_INTERLEAVED:
        # one loop per channel count: the channels then lie at constant offsets
        if C == 3:
            r0, r1, r2 = tap_sums(data_ptr, off, H, W, C, row, ky_src, in_y, m_y,
                                  cx, kx0, n_x, rnorm_x, fb_x, inv_x, lo_x, hi_x, tx_max,
                                  f0_x, f1_x, fill0, fill1, fill2, FILTER, ANTIALIAS, R, BLOCK_W, SOURCE, PAD_MODE, 3)
        else:
            r0, r1, r2 = tap_sums(data_ptr, off, H, W, C, row, ky_src, in_y, m_y,
                                  cx, kx0, n_x, rnorm_x, fb_x, inv_x, lo_x, hi_x, tx_max,
                                  f0_x, f1_x, fill0, fill1, fill2, FILTER, ANTIALIAS, R, BLOCK_W, SOURCE, PAD_MODE, 1)
    else:
        r0, r1, r2 = tap_sums(data_ptr, off, H, W, C, row, ky_src, in_y, m_y,
                              cx, kx0, n_x, rnorm_x, fb_x, inv_x, lo_x, hi_x, tx_max,
                              f0_x, f1_x, fill0, fill1, fill2, FILTER, ANTIALIAS, R, BLOCK_W, SOURCE, PAD_MODE, 3)
    if FILTER == layout.FILTER_BICUBIC and QUANTIZE:
        r0 = quantize(r0)
        r1 = quantize(r1)
        r2 = quantize(r2)
    return r0, r1, r2


@triton.jit
def tap_sums(data_ptr, off, H, W, C, row, ky_src, in_y, m_y,
             cx, kx0, n_x, rnorm_x, fb_x, inv_x, lo_x, hi_x, tx_max,
             f0_x, f1_x, fill0, fill1, fill2,
             FILTER: tl.constexpr, ANTIALIAS: tl.constexpr, R: tl.constexpr, BLOCK_W: tl.constexpr,
             SOURCE: tl.constexpr, PAD_MODE: tl.constexpr, CHANNELS: tl.constexpr):
    """:func:`row_sums`' loop over the taps of each output column, for the rows at
    ``row`` (``source.row_start``; ``ky_src`` for the planar sources), ``in_y`` whether
    they are inside the fold box; ``CHANNELS``: the channel count of an interleaved image.

    An interleaved image is read without a mask, a third of the instructions of a masked
    load: every tap reads a pixel of the image (its index clamped to the clamp region,
    then folded) and the taps past a column's count weigh 0. The planar loaders read 0
    outside ``m_y`` and the tap count."""
    m_y = m_y[:, None]
    r0 = tl.full([R, BLOCK_W], 0.0, tl.float32)
    r1 = tl.full([R, BLOCK_W], 0.0, tl.float32)
    r2 = tl.full([R, BLOCK_W], 0.0, tl.float32)
    for u in range(0, tx_max):
        kx = kx0 + u
        real = u < n_x
        wx = tl.where(real, tap_weight(kx, cx, inv_x, rnorm_x, fb_x, FILTER, ANTIALIAS), 0.0)[None, :]
        kx_src = tap_index(kx, lo_x, hi_x)
        if PAD_MODE != layout.PAD_NONE:
            kx_src, in_x = src_stage.fold_index(kx_src, f0_x, f1_x, PAD_MODE)
        m = m_y & real[None, :]
        if SOURCE == layout.SOURCE_YCBCR:
            v0, v1, v2 = src_stage.source_ycbcr(data_ptr, off, H, W, C, ky_src, kx_src, m)
        elif SOURCE == layout.SOURCE_NV12:
            v0, v1, v2 = src_stage.source_nv12(data_ptr, off, H, W, C, ky_src, kx_src, m)
        else:
            v0, v1, v2 = src_stage.source(data_ptr, row, kx_src, CHANNELS)
        if PAD_MODE == layout.PAD_CONSTANT:
            # the load above read the folded index: the taps outside the box read the fill
            # (the taps outside m keep what they read: they weigh 0)
            outside = m & ~(in_y[:, None] & in_x[None, :])
            v0 = tl.where(outside, fill0, v0)
            v1 = tl.where(outside, fill1, v1)
            v2 = tl.where(outside, fill2, v2)
        r0 += wx * v0
        r1 += wx * v1
        r2 += wx * v2
    return r0, r1, r2


@triton.jit
def sample(data_ptr, off, H, W, C,
           cy, ky0, n_y, rnorm_y, fb_y, inv_y, lo_y, hi_y,
           cx, kx0, n_x, rnorm_x, fb_x, inv_x, lo_x, hi_x,
           f0_y, f1_y, f0_x, f1_x, fill0, fill1, fill2,
           FILTER: tl.constexpr, ANTIALIAS: tl.constexpr, QUANTIZE: tl.constexpr,
           BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr, SOURCE: tl.constexpr, PAD_MODE: tl.constexpr):
    """The resampled tile, three float32 ``[BLOCK_H, BLOCK_W]`` channels, from the
    per-axis taps of :func:`axis_taps`; pixels with no taps are 0. ``lo_*``/``hi_*``
    are the clamp region as int32. ``off, H, W, C`` locate the sample in the source
    ``SOURCE`` (``source.image``, ``source.planar_image`` or ``source.nv12_image``). With a ``PAD_MODE``, tap
    indices are folded into the fold box ``[f0_*, f1_*)`` (int32) before the load, and
    with ``PAD_CONSTANT`` taps outside it read ``fill0..2``.

    Horizontal sums per source row (:func:`row_sums`), then weighted by the row's
    vertical weight: fewer multiplies than 2-D weights, and the same order of
    operations as the reference's x-first pass.

    The windowed filters walk the tile's band of source rows (:func:`band`) one row
    at a time: each row's horizontal sums are computed once and added, in ascending
    row, into every output row of the tile, weighted 0 where the row is outside the
    output row's window. Each output pixel so gets the operations of reading its own
    taps one by one, in the same order, plus added ``0 * h`` terms that change no sum
    (``h`` is finite for finite pixels and fill), while a source row's horizontal pass
    is done once per tile instead of once per output row whose window holds it (about
    twice for a 2x antialiased downscale). The nearest filters read one row per output
    row, far apart when shrinking: they read the rows tap by tap.
    """
    acc0 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
    acc1 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
    acc2 = tl.full([BLOCK_H, BLOCK_W], 0.0, tl.float32)
    tx_max = tl.reduce(n_x, 0, max_combine)
    if FILTER == layout.FILTER_NEAREST or FILTER == layout.FILTER_NEAREST_EXACT:
        for t in range(0, tl.reduce(n_y, 0, max_combine)):
            r0, r1, r2 = row_sums(data_ptr, off, H, W, C, ky0 + t, t < n_y,
                                  cx, kx0, n_x, rnorm_x, fb_x, inv_x, lo_x, hi_x, tx_max, lo_y, hi_y,
                                  f0_y, f1_y, f0_x, f1_x, fill0, fill1, fill2,
                                  FILTER, ANTIALIAS, QUANTIZE, BLOCK_H, BLOCK_W, SOURCE, PAD_MODE)
            wy = tap_weight(ky0 + t, cy, inv_y, rnorm_y, fb_y, FILTER, ANTIALIAS)[:, None]
            acc0 += wy * r0
            acc1 += wy * r1
            acc2 += wy * r2
    else:
        first, end = band(ky0, n_y)
        for s in range(first, end):
            ky = s + tl.arange(0, 1)  # row_sums takes rows [R]: one here
            h0, h1, h2 = row_sums(data_ptr, off, H, W, C, ky, ky < end,
                                  cx, kx0, n_x, rnorm_x, fb_x, inv_x, lo_x, hi_x, tx_max, lo_y, hi_y,
                                  f0_y, f1_y, f0_x, f1_x, fill0, fill1, fill2,
                                  FILTER, ANTIALIAS, QUANTIZE, 1, BLOCK_W, SOURCE, PAD_MODE)
            wy = tap_weight(ky, cy, inv_y, rnorm_y, fb_y, FILTER, ANTIALIAS)  # [BLOCK_H]
            wy = tl.where((ky >= ky0) & (ky < ky0 + n_y), wy, 0.0)[:, None]
            acc0 += wy * tl.reshape(h0, [BLOCK_W])[None, :]
            acc1 += wy * tl.reshape(h1, [BLOCK_W])[None, :]
            acc2 += wy * tl.reshape(h2, [BLOCK_W])[None, :]
    return acc0, acc1, acc2


@triton.jit
def quantize(v):
    """``v`` rounded half up and clamped to ``0..255``, as a uint8 store of torch's resize rounds it."""
    v = tl.floor(v + 0.5)
    v = tl.where(v > 0.0, v, 0.0)
    return tl.where(v < 255.0, v, 255.0)


@triton.jit
def resample(data_ptr, off, H, W, C, img_ok, p, rows, cols, row_in, col_in, fill0, fill1, fill2,
             FILTER: tl.constexpr, ANTIALIAS: tl.constexpr, QUANTIZE: tl.constexpr,
             BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr, SOURCE: tl.constexpr, PAD_MODE: tl.constexpr):
    """The whole stage for one filter: the tile ``rows x cols`` of the sample whose
    parameter row starts at ``p``, read from the source ``SOURCE``, three float32 channels.

    Per output row, then per output column, the first tap, tap count, weight
    normaliser and single-pixel flag; then the weighted sums. With ``PAD_CONSTANT``
    the pixels outside the valid window are the fill ``fill0..2`` rather than 0.
    """
    if PAD_MODE == layout.PAD_NONE:
        lo_y, hi_y = clamp_region(tl.load(p + layout.LO_Y), tl.load(p + layout.HI_Y), H.to(tl.float32))
        lo_x, hi_x = clamp_region(tl.load(p + layout.LO_X), tl.load(p + layout.HI_X), W.to(tl.float32))
        f0_y, f1_y, f0_x, f1_x = 0, 0, 0, 0  # not read
    else:
        lo_y, hi_y = padded_region(tl.load(p + layout.LO_Y), tl.load(p + layout.HI_Y))
        lo_x, hi_x = padded_region(tl.load(p + layout.LO_X), tl.load(p + layout.HI_X))
        f0_y, f1_y = src_stage.fold_box(tl.load(p + layout.FOLD_Y0), tl.load(p + layout.FOLD_Y1), H.to(tl.float32))
        f0_x, f1_x = src_stage.fold_box(tl.load(p + layout.FOLD_X0), tl.load(p + layout.FOLD_X1), W.to(tl.float32))
    step_y = tl.load(p + layout.STEP_Y)
    step_x = tl.load(p + layout.STEP_X)
    support_y, inv_y = filter_width(step_y, FILTER, ANTIALIAS)
    support_x, inv_x = filter_width(step_x, FILTER, ANTIALIAS)
    cy, ky0, n_y, rnorm_y, fb_y = axis_taps(
        rows, row_in & img_ok, tl.load(p + layout.ORIGIN_Y), step_y, lo_y, hi_y,
        tl.load(p + layout.VALID_Y0), tl.load(p + layout.VALID_Y1), support_y, inv_y,
        FILTER, ANTIALIAS, BLOCK_H)
    cx, kx0, n_x, rnorm_x, fb_x = axis_taps(
        cols, col_in, tl.load(p + layout.ORIGIN_X), step_x, lo_x, hi_x,
        tl.load(p + layout.VALID_X0), tl.load(p + layout.VALID_X1), support_x, inv_x,
        FILTER, ANTIALIAS, BLOCK_W)
    v0, v1, v2 = sample(data_ptr, off, H, W, C,
                        cy, ky0, n_y, rnorm_y, fb_y, inv_y, lo_y.to(tl.int32), hi_y.to(tl.int32),
                        cx, kx0, n_x, rnorm_x, fb_x, inv_x, lo_x.to(tl.int32), hi_x.to(tl.int32),
                        f0_y, f1_y, f0_x, f1_x, fill0, fill1, fill2,
                        FILTER, ANTIALIAS, QUANTIZE, BLOCK_H, BLOCK_W, SOURCE, PAD_MODE)
    if PAD_MODE == layout.PAD_CONSTANT:
        ry = rows.to(tl.float32)
        rx = cols.to(tl.float32)
        valid = (((ry >= tl.load(p + layout.VALID_Y0)) & (ry < tl.load(p + layout.VALID_Y1)))[:, None]
                 & ((rx >= tl.load(p + layout.VALID_X0)) & (rx < tl.load(p + layout.VALID_X1)))[None, :])
        v0 = tl.where(valid, v0, fill0)
        v1 = tl.where(valid, v1, fill1)
        v2 = tl.where(valid, v2, fill2)
    return v0, v1, v2


@triton.jit
def resample_filtered(data_ptr, off, H, W, C, img_ok, p, rows, cols, row_in, col_in, fill0, fill1, fill2,
                      FILTER: tl.constexpr, ANTIALIAS: tl.constexpr, QUANTIZE: tl.constexpr,
                      BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr, SOURCE: tl.constexpr,
                      PAD_MODE: tl.constexpr):
    """:func:`resample` with the filter ``FILTER`` compiled in or, for
    ``FILTER_PER_SAMPLE``, the filter of the sample's ``filter`` column (a runtime
    branch; one program is one sample, so it never diverges)."""
    if FILTER == layout.FILTER_PER_SAMPLE:
        code = tl.load(p + layout.FILTER)
        if code == layout.FILTER_BICUBIC:
            v0, v1, v2 = resample(data_ptr, off, H, W, C, img_ok, p, rows, cols, row_in, col_in, fill0, fill1, fill2,
                                  layout.FILTER_BICUBIC, ANTIALIAS, QUANTIZE, BLOCK_H, BLOCK_W, SOURCE, PAD_MODE)
        elif code == layout.FILTER_NEAREST:
            v0, v1, v2 = resample(data_ptr, off, H, W, C, img_ok, p, rows, cols, row_in, col_in, fill0, fill1, fill2,
                                  layout.FILTER_NEAREST, ANTIALIAS, QUANTIZE, BLOCK_H, BLOCK_W, SOURCE, PAD_MODE)
        elif code == layout.FILTER_NEAREST_EXACT:
            v0, v1, v2 = resample(data_ptr, off, H, W, C, img_ok, p, rows, cols, row_in, col_in, fill0, fill1, fill2,
                                  layout.FILTER_NEAREST_EXACT, ANTIALIAS, QUANTIZE, BLOCK_H, BLOCK_W, SOURCE, PAD_MODE)
        else:
            v0, v1, v2 = resample(data_ptr, off, H, W, C, img_ok, p, rows, cols, row_in, col_in, fill0, fill1, fill2,
                                  layout.FILTER_BILINEAR, ANTIALIAS, QUANTIZE, BLOCK_H, BLOCK_W, SOURCE, PAD_MODE)
    else:
        v0, v1, v2 = resample(data_ptr, off, H, W, C, img_ok, p, rows, cols, row_in, col_in, fill0, fill1, fill2,
                              FILTER, ANTIALIAS, QUANTIZE, BLOCK_H, BLOCK_W, SOURCE, PAD_MODE)
    return v0, v1, v2
