"""Warp sampler: affine and perspective warps of a uint8 image, one output tile at a time.

Exactly torchvision's tensor implementation (``_apply_grid_transform`` on the
grid of ``_affine_grid`` or ``_perspective_grid``), in float32:

* grid: affine, output pixel centres relative to the image centre
  ``x = j - (W - 1) / 2``, ``y = i - (H - 1) / 2`` and
  ``gx = x * (m0 / (W/2)) + y * (m1 / (W/2)) + m2 / (W/2)`` (``gy`` with ``m3..m5``
  and ``H/2``), ``m`` the inverse matrix of ``_get_inverse_affine_matrix``;
  perspective, ``x = j + 0.5``, ``y = i + 0.5`` and
  ``gx = (x * (m0 / (W/2)) + y * (m1 / (W/2)) + m2 / (W/2)) / (m6 x + m7 y + 1) - 1``;
* ``grid_sample(align_corners=False, padding_mode="zeros")``: source position
  ``ix = (gx + 1) * (W / 2) - 0.5``; nearest reads the pixel at
  ``round_half_even(ix)``; bilinear the four neighbours with weights from the
  fractional parts, summed nw, ne, sw, se; taps outside the image read 0;
* fill: torchvision appends a channel of ones and samples it too (``mask``);
  nearest then takes ``fill`` where ``mask < 0.5``, bilinear
  ``(v - fill) * mask + fill``. A NaN ``fill0`` is ``fill=None``: no mask.
* the float result is rounded half to even to uint8.

The plain-torch twin is ``reference.warp`` (with ``reference.warp_grid``).
"""
import triton
import triton.language as tl

from . import colour


@triton.jit
def grid(rows, cols, H, W, m0, m1, m2, m3, m4, m5, m6, m7, PERSPECTIVE):
    """Normalised sampling grid ``(gx, gy)`` ``[BLOCK_H, BLOCK_W]`` of the output pixels
    ``rows x cols`` (``PERSPECTIVE``: a runtime flag)."""
    Wf = W.to(tl.float32)
    Hf = H.to(tl.float32)
    hw = 0.5 * Wf
    hh = 0.5 * Hf
    j = cols.to(tl.float32)[None, :]
    i = rows.to(tl.float32)[:, None]
    x = tl.where(PERSPECTIVE, j + 0.5, j - (Wf - 1.0) * 0.5)
    y = tl.where(PERSPECTIVE, i + 0.5, i - (Hf - 1.0) * 0.5)
    gx = (x * tl.div_rn(m0, hw) + y * tl.div_rn(m1, hw)) + tl.div_rn(m2, hw)
    gy = (x * tl.div_rn(m3, hh) + y * tl.div_rn(m4, hh)) + tl.div_rn(m5, hh)
    if PERSPECTIVE:
        den = (x * m6 + y * m7) + 1.0
        gx = tl.div_rn(gx, den) - 1.0
        gy = tl.div_rn(gy, den) - 1.0
    return gx, gy


@triton.jit
def tap(src, s_c, s_h, s_w, yy, xx, H, W, valid):
    """Channels of the source pixels at float indices ``yy, xx`` (integers), 0 outside the
    image, and whether each was inside (as 1.0 / 0.0). Indices are clamped before the
    integer conversion, so NaN or huge coordinates cannot address memory."""
    inside = valid & (xx >= 0.0) & (xx <= W.to(tl.float32) - 1.0) & (yy >= 0.0) & (yy <= H.to(tl.float32) - 1.0)
    xc = tl.where(inside, xx, 0.0).to(tl.int64)
    yc = tl.where(inside, yy, 0.0).to(tl.int64)
    ptr = src + yc * s_h + xc * s_w
    v0 = tl.load(ptr, mask=inside, other=0).to(tl.float32)
    v1 = tl.load(ptr + s_c, mask=inside, other=0).to(tl.float32)
    v2 = tl.load(ptr + 2 * s_c, mask=inside, other=0).to(tl.float32)
    return v0, v1, v2, inside.to(tl.float32)


@triton.jit
def warp(src, s_c, s_h, s_w, rows, cols, valid, H, W,
         m0, m1, m2, m3, m4, m5, m6, m7, PERSPECTIVE, NEAREST, f0, f1, f2):
    """The warped tile: three float32 channels holding the uint8 result. ``src`` points
    at the sample's input image (strides ``s_c, s_h, s_w``); ``valid`` masks the tile;
    ``NEAREST`` (runtime flag) picks nearest over bilinear; ``f0..f2`` the fill
    (NaN ``f0``: none)."""
    gx, gy = grid(rows, cols, H, W, m0, m1, m2, m3, m4, m5, m6, m7, PERSPECTIVE)
    ix = (gx + 1.0) * (0.5 * W.to(tl.float32)) - 0.5
    iy = (gy + 1.0) * (0.5 * H.to(tl.float32)) - 0.5
    has_fill = f0 == f0
    if NEAREST:
        v0, v1, v2, mask = tap(src, s_c, s_h, s_w, colour.rint(iy), colour.rint(ix), H, W, valid)
        # where, not `&`: the interpreter cannot AND a scalar from a float compare with a block
        use_fill = tl.where(mask < 0.5, has_fill, False)
        v0 = tl.where(use_fill, f0, v0)
        v1 = tl.where(use_fill, f1, v1)
        v2 = tl.where(use_fill, f2, v2)
    else:
        x0 = tl.floor(ix)
        y0 = tl.floor(iy)
        wx1 = ix - x0
        wy1 = iy - y0
        wx0 = 1.0 - wx1
        wy0 = 1.0 - wy1
        a0, a1, a2, ma = tap(src, s_c, s_h, s_w, y0, x0, H, W, valid)
        w = wy0 * wx0
        v0 = a0 * w
        v1 = a1 * w
        v2 = a2 * w
        mask = ma * w
        a0, a1, a2, ma = tap(src, s_c, s_h, s_w, y0, x0 + 1.0, H, W, valid)
        w = wy0 * wx1
        v0 = v0 + a0 * w
        v1 = v1 + a1 * w
        v2 = v2 + a2 * w
        mask = mask + ma * w
        a0, a1, a2, ma = tap(src, s_c, s_h, s_w, y0 + 1.0, x0, H, W, valid)
        w = wy1 * wx0
        v0 = v0 + a0 * w
        v1 = v1 + a1 * w
        v2 = v2 + a2 * w
        mask = mask + ma * w
        a0, a1, a2, ma = tap(src, s_c, s_h, s_w, y0 + 1.0, x0 + 1.0, H, W, valid)
        w = wy1 * wx1
        v0 = v0 + a0 * w
        v1 = v1 + a1 * w
        v2 = v2 + a2 * w
        mask = mask + ma * w
        v0 = tl.where(has_fill, (v0 - f0) * mask + f0, v0)
        v1 = tl.where(has_fill, (v1 - f1) * mask + f1, v1)
        v2 = tl.where(has_fill, (v2 - f2) * mask + f2, v2)
    return (tl.minimum(tl.maximum(colour.rint(v0), 0.0), 255.0),
            tl.minimum(tl.maximum(colour.rint(v1), 0.0), 255.0),
            tl.minimum(tl.maximum(colour.rint(v2), 0.0), 255.0))
