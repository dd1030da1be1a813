"""Colour stage: photometric ops on three float32 channels, one tile at a time.

Kernel 1's :func:`colour` runs at the output size, after resampling and before
the epilogue; no transform emits a colour program into it yet, so it passes the
channels through (its per-sample values will be the ``colour`` block of
``layout.py``).

The augment program's photometric ops (``_augment_kernel.py``) are the other
functions here, usable by kernel 1's colour stage later. Each takes the tile's
channels ``x0, x1, x2`` (float32 holding integers 0..255) and returns three
float32 channels holding the uint8 result, as torchvision.transforms.v2.functional
computes it on a uint8 tensor: the same float32 operations in the same order,
``x.add_(y, alpha=s)`` as a fused multiply-add (:func:`fma`), divisions rounded to
nearest (``tl.div_rn``: ``/`` is approximate on NVIDIA GPUs), and the final
``clamp(0, 255)`` + truncation (``.to(uint8)``) or round-half-even
(``.round_()``) of the op. Their plain-torch twins, under the same names, are in
``csrc_triton/reference.py``. Ops that read neighbours or whole-image statistics
(sharpness, gaussian_blur, contrast's mean, autocontrast, equalize) get those from
the kernel; the functions here do the per-pixel arithmetic.
"""
import triton
import triton.language as tl

from .. import layout

# ITU-R 601-2 luma weights (torchvision's rgb_to_grayscale)
GRAY_R = tl.constexpr(0.2989)
GRAY_G = tl.constexpr(0.587)
GRAY_B = tl.constexpr(0.114)
# 1 / 255 and the float -> uint8 scale 255 + 1 - 1e-3 of to_dtype(scale=True)
INV_255 = tl.constexpr(1.0 / 255.0)
TO_UINT8_SCALE = tl.constexpr(255.999)
# the 3x3 smoothing kernel of adjust_sharpness: 1/13 around a 5/13 centre
SHARP_EDGE = tl.constexpr(1.0 / 13.0)
SHARP_CENTRE = tl.constexpr(5.0 / 13.0)


@triton.jit
def colour(v0, v1, v2):
    """Kernel 1's colour program applied to channels ``v0, v1, v2`` (float32, 0-255 scale)."""
    return v0, v1, v2


@triton.jit
def fma(a, b, c, FMA64: tl.constexpr):
    """``a * b + c`` rounded once to float32. ``FMA64`` computes it in float64 and rounds
    once: Triton's interpreter evaluates ``tl.fma`` as two roundings, and the
    products and sums here fit in float64, so this is the fused result."""
    if FMA64:
        # tl.cast: b may be a float constant, taken as float32 first
        r = (tl.cast(tl.cast(a, tl.float32), tl.float64) * tl.cast(tl.cast(b, tl.float32), tl.float64)
             + tl.cast(tl.cast(c, tl.float32), tl.float64)).to(tl.float32)
    else:
        r = tl.fma(a, tl.cast(b, tl.float32), c)
    return r


@triton.jit
def rint(x):
    """Round half to even (``torch.round``) for ``|x| < 2**22``: adding and removing
    2**23 leaves float32 no fraction bits, and IEEE addition rounds to even."""
    big = 8388608.0
    r = (tl.abs(x) + big) - big
    return tl.where(x < 0.0, -r, r)


@triton.jit
def truncate_uint8(v):
    """``clamp(v, 0, 255)`` truncated toward zero (``.clamp_(0, 255).to(uint8)``), as float32."""
    return tl.floor(tl.minimum(tl.maximum(v, 0.0), 255.0))


@triton.jit
def luma(x0, x1, x2, FMA64: tl.constexpr):
    """``0.2989 r + 0.587 g + 0.114 b`` as torchvision rounds it: ``r * 0.2989``, then
    two fused multiply-adds (``.add_(g, alpha=0.587).add_(b, alpha=0.114)``)."""
    return fma(x2, GRAY_B, fma(x1, GRAY_G, x0 * GRAY_R, FMA64), FMA64)


@triton.jit
def blend(x, other, ratio, FMA64: tl.constexpr):
    """torchvision's ``_blend``: ``x * ratio + other * (1 - ratio)`` as
    ``fma(other, 1 - ratio, x * ratio)``, clamped and truncated."""
    return truncate_uint8(fma(other, 1.0 - ratio, x * ratio, FMA64))


@triton.jit
def brightness(x0, x1, x2, factor):
    """``adjust_brightness``: ``x * factor``, clamped and truncated."""
    return truncate_uint8(x0 * factor), truncate_uint8(x1 * factor), truncate_uint8(x2 * factor)


@triton.jit
def contrast(x0, x1, x2, factor, mean, FMA64: tl.constexpr):
    """``adjust_contrast``: blend with ``mean``, the mean of the floored luma."""
    return blend(x0, mean, factor, FMA64), blend(x1, mean, factor, FMA64), blend(x2, mean, factor, FMA64)


@triton.jit
def saturation(x0, x1, x2, factor, FMA64: tl.constexpr):
    """``adjust_saturation``: blend with the floored luma."""
    g = tl.floor(luma(x0, x1, x2, FMA64))
    return blend(x0, g, factor, FMA64), blend(x1, g, factor, FMA64), blend(x2, g, factor, FMA64)


@triton.jit
def grayscale(x0, x1, x2, FMA64: tl.constexpr):
    """``rgb_to_grayscale(num_output_channels=3)``: the luma truncated, three times."""
    g = tl.floor(luma(x0, x1, x2, FMA64))
    return g, g, g


@triton.jit
def remainder_one(x):
    """``torch.remainder(x, 1.0)`` in float32: ``fmod`` (exact: ``x - trunc(x)``), plus
    1 (rounded) when negative."""
    t = tl.where(x < 0.0, -tl.floor(-x), tl.floor(x))
    m = x - t
    return tl.where(m < 0.0, m + 1.0, m)


@triton.jit
def hue(x0, x1, x2, factor):
    """``adjust_hue``: RGB / 255 -> HSV (Pillow's formulas as torchvision's
    ``_rgb_to_hsv``), hue + ``factor`` mod 1, HSV -> RGB (``_hsv_to_rgb``), then
    ``trunc(v * 255.999)``."""
    r = x0 * INV_255
    g = x1 * INV_255
    b = x2 * INV_255
    maxc = tl.maximum(tl.maximum(r, g), b)
    minc = tl.minimum(tl.minimum(r, g), b)
    eqc = maxc == minc
    cr = maxc - minc
    s = tl.div_rn(cr, tl.where(eqc, 1.0, maxc))
    div = tl.where(eqc, 1.0, cr)
    rc = tl.div_rn(maxc - r, div)
    gc = tl.div_rn(maxc - g, div)
    bc = tl.div_rn(maxc - b, div)
    is_r = maxc == r
    is_g = (maxc == g) & (maxc != r)
    h = tl.where(is_r, bc - gc, tl.where(is_g, (rc + 2.0) - bc, (gc + 4.0) - rc))
    h = remainder_one(h * (1.0 / 6.0) + 1.0)
    h = remainder_one(h + factor)
    # back to RGB
    h6 = h * 6.0
    sector = tl.floor(h6)
    f = h6 - sector
    i = sector.to(tl.int32)
    i = tl.where(i >= 6, i - 6, i)
    sxf = s * f
    q = tl.minimum(tl.maximum((1.0 - sxf) * maxc, 0.0), 1.0)
    t = tl.minimum(tl.maximum((sxf + (1.0 - s)) * maxc, 0.0), 1.0)
    p = tl.minimum(tl.maximum((1.0 - s) * maxc, 0.0), 1.0)
    v = maxc
    # sector -> (r, g, b) among (v, p, q, t): 0 (v,t,p) 1 (q,v,p) 2 (p,v,t) 3 (p,q,v) 4 (t,p,v) 5 (v,p,q)
    o0 = tl.where((i == 0) | (i == 5), v, tl.where(i == 1, q, tl.where(i == 4, t, p)))
    o1 = tl.where((i == 1) | (i == 2), v, tl.where(i == 0, t, tl.where(i == 3, q, p)))
    o2 = tl.where((i == 3) | (i == 4), v, tl.where(i == 2, t, tl.where(i == 5, q, p)))
    return (tl.floor(o0 * TO_UINT8_SCALE), tl.floor(o1 * TO_UINT8_SCALE), tl.floor(o2 * TO_UINT8_SCALE))


@triton.jit
def invert(x0, x1, x2):
    """``invert``: ``255 - x``."""
    return 255.0 - x0, 255.0 - x1, 255.0 - x2


@triton.jit
def posterize(x0, x1, x2, bits):
    """``posterize``: keep the ``bits`` most significant bits (all of them for ``bits >= 8``)."""
    n = tl.minimum(tl.maximum(bits.to(tl.int32), 0), 8)
    mask = ((1 << n) - 1) << (8 - n)
    return ((x0.to(tl.int32) & mask).to(tl.float32), (x1.to(tl.int32) & mask).to(tl.float32),
            (x2.to(tl.int32) & mask).to(tl.float32))


@triton.jit
def solarize(x0, x1, x2, threshold):
    """``solarize``: ``255 - x`` where ``x >= threshold``."""
    return (tl.where(x0 >= threshold, 255.0 - x0, x0), tl.where(x1 >= threshold, 255.0 - x1, x1),
            tl.where(x2 >= threshold, 255.0 - x2, x2))


@triton.jit
def solarize_add(x0, x1, x2, addition, threshold):
    """timm's SolarizeAdd: ``x + addition`` (clamped, truncated) where ``x < threshold``."""
    return (tl.where(x0 < threshold, truncate_uint8(x0 + addition), x0),
            tl.where(x1 < threshold, truncate_uint8(x1 + addition), x1),
            tl.where(x2 < threshold, truncate_uint8(x2 + addition), x2))


@triton.jit
def permute_channels(x0, x1, x2, c0, c1, c2):
    """``permute_channels``: output channel ``i`` is input channel ``c_i`` (float32 codes 0, 1, 2;
    any other value reads channel 2)."""
    o0 = tl.where(c0 == 0.0, x0, tl.where(c0 == 1.0, x1, x2))
    o1 = tl.where(c1 == 0.0, x0, tl.where(c1 == 1.0, x1, x2))
    o2 = tl.where(c2 == 0.0, x0, tl.where(c2 == 1.0, x1, x2))
    return o0, o1, o2


@triton.jit
def sharpen(x, smooth_sum, factor, FMA64: tl.constexpr):
    """``adjust_sharpness`` on one channel's interior pixels: ``smooth_sum`` is the 3x3
    weighted sum (weights :data:`SHARP_EDGE`, :data:`SHARP_CENTRE`, summed row by
    row), rounded half to even, then ``fma(smooth - x, 1 - factor, x)``, clamped and
    truncated."""
    return truncate_uint8(fma(rint(smooth_sum) - x, 1.0 - factor, x, FMA64))


@triton.jit
def autocontrast(x, lo, hi):
    """``autocontrast`` on one channel with its min ``lo`` and max ``hi`` (float32):
    ``(x - lo) / ((hi - lo) / 255)``, clamped and truncated; a flat channel is kept."""
    flat = hi == lo
    inv_scale = tl.where(flat, 1.0, (hi - lo) * INV_255)
    lo = tl.where(flat, 0.0, lo)
    return truncate_uint8(tl.div_rn(x - lo, inv_scale))


@triton.jit
def pointwise(x0, x1, x2, op, m0, m1, m2, mean, FMA64: tl.constexpr):
    """The augment program's op ``op`` (a runtime scalar code, ``layout.OP_*``) with arguments
    ``m0 .. m2`` where it is a pointwise op (``pointwise.POINTWISE_OPS``: contrast's ``mean``
    comes from the caller); the identity for every other code."""
    o0, o1, o2 = x0, x1, x2
    if op == layout.OP_BRIGHTNESS:
        o0, o1, o2 = brightness(x0, x1, x2, m0)
    elif op == layout.OP_CONTRAST:
        o0, o1, o2 = contrast(x0, x1, x2, m0, mean, FMA64)
    elif op == layout.OP_SATURATION:
        o0, o1, o2 = saturation(x0, x1, x2, m0, FMA64)
    elif op == layout.OP_HUE:
        o0, o1, o2 = hue(x0, x1, x2, m0)
    elif op == layout.OP_GRAYSCALE:
        o0, o1, o2 = grayscale(x0, x1, x2, FMA64)
    elif op == layout.OP_INVERT:
        o0, o1, o2 = invert(x0, x1, x2)
    elif op == layout.OP_POSTERIZE:
        o0, o1, o2 = posterize(x0, x1, x2, m0)
    elif op == layout.OP_SOLARIZE:
        o0, o1, o2 = solarize(x0, x1, x2, m0)
    elif op == layout.OP_SOLARIZE_ADD:
        o0, o1, o2 = solarize_add(x0, x1, x2, m0, m1)
    elif op == layout.OP_PERMUTE_CHANNELS:
        o0, o1, o2 = permute_channels(x0, x1, x2, m0, m1, m2)
    return o0, o1, o2
