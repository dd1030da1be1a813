"""Plain-torch twins of the fused kernel's stages, under the stages' names.

``stages/source.py``, ``stages/sample.py``, ``stages/colour.py`` and
``stages/epilogue.py`` compute a tile at a time on the GPU; the functions here
compute the same math a whole sample at a time, in float32, on any device. They
are the library's CPU path (through :func:`csrc_triton.resized_crop_reference`)
and the independent side of every kernel test. Per-sample values are read by
their names in ``layout.py``; the interpolation is a ``layout.FILTER_*`` code, as
the kernel's ``FILTER`` (the filters are described in ``stages/sample.py``).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from . import layout

__all__ = ["READERS", "axis_taps", "chroma_fancy", "chroma_rounding", "chroma_taps", "clamp_region", "colour", "cubic",
           "epilogue", "erase", "fill_outside", "filter_width", "fold_box", "fold_index", "nearest_index",
           "nv12_chroma_taps", "nv12_planes", "nv12_to_rgb", "nv12_ycc_to_rgb", "philox_normal", "sample", "source",
           "source_folded", "source_nv12", "source_ycbcr", "triangle", "upsample_chroma", "upsample_nv12_chroma",
           "ycbcr_planes_to_rgb", "ycc_to_rgb"]


# --------------------------------------------------------------------------- #
# source
# --------------------------------------------------------------------------- #


def source(data: torch.Tensor, offset: int, shape: tuple[int, int, int],
           region: tuple[int, int, int, int]) -> torch.Tensor:
    """The clamp region ``(lo_y, hi_y, lo_x, hi_x)`` of the HWC image at ``offset``
    in ``data``, as a ``[h, w, 3]`` uint8 view (grayscale repeats its one channel).

    Only the clamp region is ever read; converting just it keeps crops cheap.
    """
    H, W, C = shape
    lo_y, hi_y, lo_x, hi_x = region
    pixels = data[offset: offset + H * W * C].view(H, W, C)[lo_y:hi_y, lo_x:hi_x]
    return pixels.expand(-1, -1, 3) if C == 1 else pixels


# The planar YCbCr source (``layout.SOURCE_YCBCR``): libjpeg(-turbo)'s default
# decode after the IDCT, i.e. jdsample.c's upsampling and jdcolor.c's
# ycc_rgb_convert, in integers. For full-resolution pixel (y, x) and a chroma
# plane c (ch x cw, indices clamped to the plane: libjpeg replicates edge samples):
#
# * 4:2:0 (h2v2_fancy_upsample): r = y >> 1, nr = r - 1 for even y, r + 1 for odd;
#   colsum(j) = 3 c[r][j] + c[nr][j]; k = x >> 1, nk likewise from x;
#   value = (3 colsum(k) + colsum(nk) + (8 if x even else 7)) >> 4.
# * 4:2:2 (h2v1_fancy_upsample): value = (3 c[y][k] + c[y][nk] + (1 if x even else 2)) >> 2.
# * 4:4:0 (h1v2_fancy_upsample): value = (3 c[r][x] + c[nr][x] + (1 if y even else 2)) >> 2.
# * 4:4:4: value = c[y][x].
# * libjpeg installs the fancy h2v1/h2v2 upsamplers only for planes more than 2
#   samples wide (jinit_upsampler); narrower ones are replicated, value = c[y >> vs][x >> hs],
#   along both axes for 4:2:0. h1v2 has no such exception.
#
# Then, with cb = Cb - 128 and cr = Cr - 128, each clamped to 0..255:
# R = Y + ((91881 cr + 32768) >> 16), G = Y + ((-22554 cb - 46802 cr + 32768) >> 16),
# B = Y + ((116130 cb + 32768) >> 16). Grayscale: R = G = B = Y.
# ``stages/source.py`` computes the same per tap, with the same helper names.


def chroma_fancy(hs: int, vs: int, cw: int) -> tuple[bool, bool]:
    """Whether libjpeg fancy-upsamples chroma planes ``cw`` samples wide, halved
    horizontally (``hs == 1``) and/or vertically (``vs == 1``), along each axis."""
    fancy_h = hs == 1 and cw > 2
    fancy_v = vs == 1 and (hs == 0 or cw > 2)
    return fancy_h, fancy_v


def chroma_taps(i: torch.Tensor, shift: int, fancy: bool, n: int) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """One axis of the chroma upsampling at full-resolution indices ``i``: the covering
    chroma sample ``i >> shift``, its neighbour on the side of ``i`` (both clamped to
    ``[0, n)``), and their weights (3, 1) where fancy, else (1, 0)."""
    j = (i >> shift).clamp(0, n - 1)
    nj = torch.where(i % 2 == 0, j - 1, j + 1).clamp(0, n - 1)
    return (j, nj, 3, 1) if fancy else (j, nj, 1, 0)


def chroma_rounding(ky: torch.Tensor, kx: torch.Tensor, fancy_h: bool, fancy_v: bool) -> tuple[torch.Tensor, int]:
    """Rounding bias ``[len(ky), len(kx)]`` and right shift of the upsampling sums at rows
    ``ky`` and columns ``kx``."""
    xo = (kx % 2)[None, :]
    yo = (ky % 2)[:, None]
    zero = torch.zeros(len(ky), len(kx), dtype=torch.int32, device=ky.device)
    if fancy_h and fancy_v:
        return zero + 8 - xo, 4
    if fancy_h:
        return zero + 1 + xo, 2
    if fancy_v:
        return zero + 1 + yo, 2
    return zero, 0


def upsample_chroma(plane: torch.Tensor, S: int, ky: torch.Tensor, kx: torch.Tensor) -> torch.Tensor:
    """libjpeg's upsampled chroma (int32 ``[len(ky), len(kx)]``) of the ``[ch, cw]`` uint8
    ``plane`` of subsampling ``S`` at full-resolution rows ``ky`` and columns ``kx``."""
    ch, cw = plane.shape
    hf, vf = layout.SUBSAMPLING[S]
    hs, vs = hf - 1, vf - 1  # shifts: the factors are 1 or 2
    fancy_h, fancy_v = chroma_fancy(hs, vs, cw)
    r, nr, wr0, wr1 = chroma_taps(ky, vs, fancy_v, ch)
    k, nk, wk0, wk1 = chroma_taps(kx, hs, fancy_h, cw)
    c = plane.to(torch.int32)
    colsum = wr0 * c[r] + wr1 * c[nr]  # [len(ky), cw]
    bias, shift = chroma_rounding(ky, kx, fancy_h, fancy_v)
    return (wk0 * colsum[:, k] + wk1 * colsum[:, nk] + bias) >> shift


def ycc_to_rgb(y: torch.Tensor, cb: torch.Tensor, cr: torch.Tensor) -> torch.Tensor:
    """libjpeg's ``ycc_rgb_convert`` of integer Y, Cb, Cr planes: ``[..., 3]`` uint8 RGB."""
    y, cb, cr = y.to(torch.int32), cb.to(torch.int32) - 128, cr.to(torch.int32) - 128
    r = y + ((91881 * cr + 32768) >> 16)
    g = y + ((-22554 * cb - 46802 * cr + 32768) >> 16)
    b = y + ((116130 * cb + 32768) >> 16)
    return torch.stack([r, g, b], dim=-1).clamp_(0, 255).to(torch.uint8)


def ycbcr_planes_to_rgb(data: torch.Tensor, offset: int, H: int, W: int, S: int,
                        region: tuple[int, int, int, int] | None = None) -> torch.Tensor:
    """The RGB image libjpeg decodes from the planar YCbCr sample at ``offset`` in ``data``
    (``layout.SOURCE_YCBCR``: ``H x W``, subsampling code ``S``), as ``[h, w, 3]`` uint8;
    only the rows ``[lo_y, hi_y)`` and columns ``[lo_x, hi_x)`` of ``region`` (default:
    all)."""
    lo_y, hi_y, lo_x, hi_x = region if region is not None else (0, H, 0, W)
    luma = data[offset: offset + H * W].view(H, W)[lo_y:hi_y, lo_x:hi_x]
    if S == layout.S_GRAY:
        return luma[..., None].expand(-1, -1, 3).clone()
    ch, cw = layout.chroma_shape(H, W, S)
    cb_off = offset + H * W
    cb = data[cb_off: cb_off + ch * cw].view(ch, cw)
    cr = data[cb_off + ch * cw: cb_off + 2 * ch * cw].view(ch, cw)
    ky = torch.arange(lo_y, hi_y, device=data.device)
    kx = torch.arange(lo_x, hi_x, device=data.device)
    return ycc_to_rgb(luma, upsample_chroma(cb, S, ky, kx), upsample_chroma(cr, S, ky, kx))


def source_ycbcr(data: torch.Tensor, offset: int, shape: tuple[int, int, int],
                 region: tuple[int, int, int, int]) -> torch.Tensor:
    """:func:`source` of the planar YCbCr source: the clamp region ``(lo_y, hi_y, lo_x,
    hi_x)`` of the sample at ``offset`` (``shape = (H, W, S)``) as ``[h, w, 3]`` uint8 RGB."""
    H, W, S = shape
    return ycbcr_planes_to_rgb(data, offset, H, W, S % layout.PLANAR, region)


# The NV12 source (``layout.SOURCE_NV12``): 4:2:0 video frames, chroma sited as
# MPEG-2/H.264 default ("left"): chroma sample (r, k) at luma position (2 r + 1/2, 2 k).
# For full-resolution pixel (y, x), with indices clamped to the ch x cw chroma grid:
#
# * rows: j = y >> 1 and nj = j - 1 for even y, j + 1 for odd y, weights 3/4 and 1/4;
# * columns: k = x >> 1 and nk = k + (x & 1), weights 1/2 and 1/2 (on even columns
#   nk = k: the co-sited sample);
# * the sum 3 (c[j][k] + c[j][nk]) + c[nj][k] + c[nj][nk] is 8 times the upsampled
#   chroma, exact; then layout.Nv12Coefficients' fixed-point conversion (one rounding).
#
# ``stages/source.py`` computes the same per tap, with the same helper names.


def nv12_planes(data: torch.Tensor, offset: int, H: int, W: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the NV12 frame at ``offset`` in ``data``: the Y plane ``[H, W]`` and the
    chroma plane ``[ch, cw, 2]`` (``layout.nv12_chroma_shape``; Cb, Cr in the last axis)."""
    ch, cw = layout.nv12_chroma_shape(H, W)
    y = data[offset: offset + H * W].view(H, W)
    uv = data[offset + H * W: offset + layout.nv12_size(H, W)].view(ch, cw, 2)
    return y, uv


def nv12_chroma_taps(ky: torch.Tensor, kx: torch.Tensor, ch: int, cw: int
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chroma rows ``j`` (weight 3) and ``nj`` (weight 1) of full-resolution rows ``ky``,
    and the chroma columns ``k``, ``nk`` (weight 1 each) of columns ``kx``, clamped to the
    ``ch x cw`` grid."""
    j = (ky >> 1).clamp(0, ch - 1)
    nj = torch.where(ky % 2 == 0, j - 1, j + 1).clamp(0, ch - 1)
    k = (kx >> 1).clamp(0, cw - 1)
    nk = (k + kx % 2).clamp(0, cw - 1)
    return j, nj, k, nk


def upsample_nv12_chroma(uv: torch.Tensor, ky: torch.Tensor, kx: torch.Tensor) -> torch.Tensor:
    """8 times the bilinearly upsampled chroma (int32 ``[len(ky), len(kx), 2]``: Cb, Cr) of the
    ``[ch, cw, 2]`` uint8 chroma plane ``uv`` at full-resolution rows ``ky`` and columns ``kx``."""
    ch, cw, _ = uv.shape
    j, nj, k, nk = nv12_chroma_taps(ky, kx, ch, cw)
    c = uv.to(torch.int32)
    rows = 3 * c[j] + c[nj]  # [len(ky), cw, 2]
    return rows[:, k] + rows[:, nk]


def nv12_ycc_to_rgb(y: torch.Tensor, cb8: torch.Tensor, cr8: torch.Tensor, code: int) -> torch.Tensor:
    """R'G'B' (``[..., 3]`` uint8) of luma ``y`` and chroma ``cb8``, ``cr8`` (8 times the
    upsampled chroma, as :func:`upsample_nv12_chroma` gives them) in the NV12 colour format
    ``code``: ``layout.Nv12Coefficients``' fixed point, rounded half up, clamped."""
    k = layout.nv12_coefficients(code)
    half = 1 << (layout.NV12_FRAC_BITS - 1)
    ys = k.y_scale * (y.to(torch.int32) - k.y_offset) + half
    cb = cb8.to(torch.int32) - 8 * 128
    cr = cr8.to(torch.int32) - 8 * 128
    r = (ys + k.cr_r * cr) >> layout.NV12_FRAC_BITS
    g = (ys - k.cb_g * cb - k.cr_g * cr) >> layout.NV12_FRAC_BITS
    b = (ys + k.cb_b * cb) >> layout.NV12_FRAC_BITS
    return torch.stack([r, g, b], dim=-1).clamp_(0, 255).to(torch.uint8)


def nv12_to_rgb(y: torch.Tensor, uv: torch.Tensor, matrix: int | str, full_range: bool,
                region: tuple[int, int, int, int] | None = None) -> torch.Tensor:
    """The R'G'B' image (``[h, w, 3]`` uint8) of an NV12 frame: luma ``y`` ``[H, W]`` and
    chroma ``uv`` ``[ceil(H / 2), ceil(W / 2), 2]`` (Cb, Cr; or the plane's rows, ``[ceil(H /
    2), 2 ceil(W / 2)]``), both uint8, with the matrix ``matrix`` (``layout.NV12_BT601``,
    ``NV12_BT709`` or ``"bt601"``, ``"bt709"``) and range (full when ``full_range``, else
    limited); only the rows ``[lo_y, hi_y)`` and columns ``[lo_x, hi_x)`` of ``region``
    (default: all)."""
    if y.dtype != torch.uint8 or uv.dtype != torch.uint8:
        raise TypeError(f"y and uv must be uint8, got {y.dtype} and {uv.dtype}")
    if y.dim() != 2:
        raise ValueError(f"y must be [H, W], got shape {tuple(y.shape)}")
    H, W = y.shape
    ch, cw = layout.nv12_chroma_shape(H, W)
    if uv.dim() == 2 and tuple(uv.shape) == (ch, 2 * cw):
        uv = uv.reshape(ch, cw, 2)
    if tuple(uv.shape) != (ch, cw, 2):
        raise ValueError(f"uv of a {H} x {W} frame must be [{ch}, {cw}, 2] (or [{ch}, {2 * cw}]), "
                         f"got {tuple(uv.shape)}")
    code = layout.nv12_code(matrix, full_range)
    lo_y, hi_y, lo_x, hi_x = region if region is not None else (0, H, 0, W)
    ky = torch.arange(lo_y, hi_y, device=y.device)
    kx = torch.arange(lo_x, hi_x, device=y.device)
    c8 = upsample_nv12_chroma(uv, ky, kx)
    return nv12_ycc_to_rgb(y[lo_y:hi_y, lo_x:hi_x], c8[..., 0], c8[..., 1], code)


def source_nv12(data: torch.Tensor, offset: int, shape: tuple[int, int, int],
                region: tuple[int, int, int, int]) -> torch.Tensor:
    """:func:`source` of the NV12 source: the clamp region ``(lo_y, hi_y, lo_x, hi_x)`` of the
    frame at ``offset`` (``shape = (H, W, code)``) as ``[h, w, 3]`` uint8 RGB."""
    H, W, code = shape
    y, uv = nv12_planes(data, offset, H, W)
    return nv12_to_rgb(y, uv, *layout.nv12_format(code), region)


#: ``layout.SOURCE_*`` of a sample -> its reader (:func:`source` and its twins)
READERS = {layout.SOURCE_INTERLEAVED: source, layout.SOURCE_YCBCR: source_ycbcr, layout.SOURCE_NV12: source_nv12}


# Padding before the resampling (``layout.PAD_*``): the clamp region may reach past
# the image, and every tap index k is folded into the fold box [f0, f1) (n = f1 - f0,
# x = k - f0) before the read: edge: f0 + clamp(x, 0, n - 1); reflect: m = |x| mod
# 2 (n - 1), f0 + (m if m < n else 2 (n - 1) - m); symmetric: m = (x if x >= 0 else
# -x - 1) mod 2 n, f0 + (m if m < n else 2 n - 1 - m); constant: the fill outside the
# box. ``stages/source.py: fold_index`` computes the same per tap.


def fold_index(k: torch.Tensor, f0: int, f1: int, mode: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices ``k`` (int64) folded into the fold box ``[f0, f1)`` by the padding mode
    ``mode``, and whether each lies inside the box (constant: ``k`` clamped, read the fill
    outside)."""
    n = max(f1 - f0, 1)
    x = k - f0
    inside = (x >= 0) & (x < f1 - f0)
    if mode == layout.PAD_REFLECT:
        period = max(2 * n - 2, 1)
        m = x.abs() % period
        idx = torch.where(m < n, m, period - m)
    elif mode == layout.PAD_SYMMETRIC:
        m = torch.where(x < 0, -x - 1, x) % (2 * n)
        idx = torch.where(m < n, m, 2 * n - 1 - m)
    else:
        idx = x.clamp(0, n - 1)
    return f0 + idx, inside


def source_folded(data: torch.Tensor, offset: int, shape: tuple[int, int, int], region: tuple[int, int, int, int],
                  fold: tuple[int, int, int, int], mode: int, fill: torch.Tensor | None,
                  kind: int = layout.SOURCE_INTERLEAVED) -> torch.Tensor:
    """:func:`source` (or its twin for the sample's source ``kind``, ``layout.SOURCE_YCBCR``:
    :func:`source_ycbcr`, ``layout.SOURCE_NV12``: :func:`source_nv12`) of a clamp region that
    may reach past the image: its pixels read through :func:`fold_index` of the fold box
    ``fold`` ``(f0_y, f1_y, f0_x, f1_x)``; ``[h, w, 3]``, uint8 or, for the constant mode with
    a fill (3 values) that is not a uint8 value, float32, with the fill outside the box."""
    H, W, C = shape
    lo_y, hi_y, lo_x, hi_x = region
    dev = data.device
    ky, in_y = fold_index(torch.arange(lo_y, hi_y, device=dev), fold[0], fold[1], mode)
    kx, in_x = fold_index(torch.arange(lo_x, hi_x, device=dev), fold[2], fold[3], mode)
    # the part of the image the folded indices read, converted once
    box = (int(ky.min()), int(ky.max()) + 1, int(kx.min()), int(kx.max()) + 1)
    part = READERS[kind](data, offset, shape, box)
    pixels = part[ky - box[0]][:, kx - box[2]]
    if mode != layout.PAD_CONSTANT:
        return pixels
    inside = (in_y[:, None] & in_x[None, :])[..., None]
    fill = fill.to(device=dev, dtype=torch.float32).view(1, 1, 3)
    if bool(((fill == fill.round()) & (fill >= 0) & (fill <= 255)).all()):
        # a uint8 fill keeps the region uint8 (a zoomed-out canvas is large)
        return torch.where(inside, pixels, fill.to(torch.uint8))
    return torch.where(inside, pixels.float(), fill)


# --------------------------------------------------------------------------- #
# sample
# --------------------------------------------------------------------------- #

#: how far a padded clamp region may reach (``stages/sample.py: PAD_LIMIT``)
PAD_LIMIT = 16777216.0


def fold_box(f0: torch.Tensor, f1: torch.Tensor, end: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Fold boxes forced inside their images ``[0, end)`` as the kernel's ``source.fold_box``:
    ``0 <= f0 <= end - 1``, ``f0 <= f1 <= end``."""
    f0 = torch.minimum(torch.maximum(f0, torch.zeros_like(end)), end - 1.0)
    return f0, torch.maximum(torch.minimum(f1, end), f0)


def clamp_region(params: torch.Tensor, shapes: torch.Tensor, pad_mode: int = layout.PAD_NONE) -> torch.Tensor:
    """Copy of ``params`` with each clamp region forced to a non-empty part of its
    image (``0 <= lo <= size - 1``, ``lo < hi <= size``, ``size`` from ``shapes``), as
    the kernel does. With a padding mode the region may reach past the image (kept
    within ``+-PAD_LIMIT``) and the fold box is forced inside it instead (:func:`fold_box`)."""
    p = params.clone()
    for name, ax, size in (("y", layout.axis("y"), shapes[:, 0]), ("x", layout.axis("x"), shapes[:, 1])):
        end = size.to(p.dtype)
        if pad_mode == layout.PAD_NONE:
            lo = torch.minimum(torch.maximum(p[:, ax.lo], torch.zeros_like(end)), end - 1.0)
            p[:, ax.lo] = lo
            p[:, ax.hi] = torch.maximum(torch.minimum(p[:, ax.hi], end), lo + 1.0)
            continue
        lo = p[:, ax.lo].clamp(-PAD_LIMIT, PAD_LIMIT - 1.0)
        p[:, ax.lo] = lo
        p[:, ax.hi] = torch.maximum(p[:, ax.hi].clamp_max(PAD_LIMIT), lo + 1.0)
        c0, c1 = layout.column(f"fold_{name}0"), layout.column(f"fold_{name}1")
        p[:, c0], p[:, c1] = fold_box(p[:, c0], p[:, c1], end)
    return p


def fill_outside(values: torch.Tensor, params_row: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    """``[out_h, out_w, 3]`` ``values`` with the pixels outside the valid window of
    ``params_row`` set to ``fill`` (the constant padding mode, as the kernel's ``resample``)."""
    h, w, _ = values.shape
    dev = values.device
    row = params_row.to(dev)
    iy = torch.arange(h, device=dev, dtype=torch.float32)
    ix = torch.arange(w, device=dev, dtype=torch.float32)
    vy = (iy >= row[layout.VALID_Y0]) & (iy < row[layout.VALID_Y1])
    vx = (ix >= row[layout.VALID_X0]) & (ix < row[layout.VALID_X1])
    valid = (vy[:, None] & vx[None, :])[..., None]
    return torch.where(valid, values, fill.to(device=dev, dtype=values.dtype).view(1, 1, 3))


def filter_width(step: torch.Tensor, antialias: bool,
                 interpolation: int = layout.FILTER_BILINEAR) -> tuple[torch.Tensor, torch.Tensor]:
    """Support and inverse width of the filter ``interpolation`` for each sampling ``step``."""
    s = step.abs()
    one = torch.ones_like(s)
    half_width = 2.0 if interpolation == layout.FILTER_BICUBIC else 1.0
    if not antialias or interpolation not in (layout.FILTER_BILINEAR, layout.FILTER_BICUBIC):
        return one * half_width, one
    wide = s >= 1.0
    support = s if half_width == 1.0 else half_width * s
    return torch.where(wide, support, one * half_width), torch.where(wide, 1.0 / torch.maximum(s, one), one)


def triangle(x: torch.Tensor) -> torch.Tensor:
    """The bilinear filter at offsets ``x`` (already scaled by ``inv``)."""
    return (1.0 - x.abs()).clamp_min(0)


def cubic(x: torch.Tensor, a: float) -> torch.Tensor:
    """The Keys cubic with parameter ``a`` at offsets ``x``."""
    x = x.abs()
    inner = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    outer = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return torch.where(x < 1.0, inner, torch.where(x < 2.0, outer, 0.0))


def nearest_index(c: torch.Tensor, step: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor,
                  exact: bool) -> torch.Tensor:
    """Source index of torch's ``nearest`` (``exact``: ``nearest-exact``) for sample centres ``c``,
    as ``stages/sample.py`` computes it: the output index ``j`` in the resized image from ``c``,
    then ``floor(j * scale)`` (or ``floor((j + 0.5) * scale)``) in float32."""
    s = step.abs()
    j = torch.floor((c - lo) / s)
    if exact:
        j = j + 0.5
    k = lo + torch.floor(j * s)
    # `where`, as the kernel: a NaN (from a zero step) lands inside [lo, hi) too
    k = torch.where(k < hi - 1.0, k, hi - 1.0)
    return torch.where(k > lo, k, lo)


def axis_taps(params: torch.Tensor, axis: str, n_out: int, antialias: bool,
              interpolation: int = layout.FILTER_BILINEAR) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Gather form of axis ``"y"`` or ``"x"`` for the whole batch, with the filter ``interpolation``.

    Returns source indices ``[B, n_out, T]`` (int64, relative to ``lo``, always
    inside ``[0, hi - lo)``), their normalised weights (float32; 0 on padding taps
    and on output positions outside the valid window) and, per sample, how many
    leading taps it needs.
    """
    ax = layout.axis(axis)
    p = params
    origin, step = p[:, ax.origin, None], p[:, ax.step, None]
    lo, hi = p[:, ax.lo, None], p[:, ax.hi, None]
    v0, v1 = p[:, ax.valid0, None], p[:, ax.valid1, None]
    dev = p.device
    i = torch.arange(n_out, dtype=torch.float32, device=dev)
    c = origin + step * (i + 0.5)  # [B, n_out]
    valid = (i >= v0) & (i < v1)
    if interpolation in (layout.FILTER_NEAREST, layout.FILTER_NEAREST_EXACT):
        k = nearest_index(c, step, lo, hi, interpolation == layout.FILTER_NEAREST_EXACT)
        idx = (k - lo).to(torch.int64)[..., None]
        return idx, valid[..., None].to(torch.float32), [1] * p.shape[0]
    if interpolation == layout.FILTER_BICUBIC and not antialias:
        # four taps around c - 0.5, reading the edge pixel beyond [lo, hi)
        k = torch.floor(c - 0.5)[..., None] + torch.arange(-1.0, 3.0, device=dev)  # [B, n_out, 4]
        w = cubic(k - c[..., None] + 0.5, -0.75) * valid[..., None]
        idx = torch.minimum(torch.maximum(k, lo[..., None]), hi[..., None] - 1.0) - lo[..., None]
        return idx.to(torch.int64), w, [4] * p.shape[0]
    support, inv = filter_width(step, antialias, interpolation)
    kmin = torch.maximum(torch.floor(c - support + 0.5), lo)
    kmax = torch.minimum(torch.floor(c + support + 0.5), hi)
    n = (kmax - kmin).clamp_min(0)  # <= hi - lo, so T stays bounded
    n_per_sample = n.amax(dim=1).clamp_min(1).to(torch.int64).tolist()
    T = max(n_per_sample)
    taps = torch.arange(T, dtype=torch.float32, device=dev)
    k = kmin[..., None] + taps  # [B, n_out, T]
    x = (k - c[..., None] + 0.5) * inv[..., None]
    w = triangle(x) if interpolation == layout.FILTER_BILINEAR else cubic(x, -0.5)
    w = torch.where(taps < n[..., None], w, 0.0)
    total = w.sum(dim=2, keepdim=True)
    # The window can miss [lo, hi) entirely (sample point outside the clamp
    # region): use the nearest pixel of the region instead.
    fallback = total == 0
    nearest = torch.minimum(torch.maximum(torch.floor(c), lo), hi - 1)[..., None]
    first = taps == 0
    k = torch.where(fallback & first, nearest, k)
    w = torch.where(fallback, first.to(w.dtype), w / torch.where(fallback, 1.0, total))
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


def sample(pixels: torch.Tensor, idx_y: torch.Tensor, w_y: torch.Tensor,
           idx_x: torch.Tensor, w_x: torch.Tensor, quantize_rows: bool = False) -> torch.Tensor:
    """Resample a ``[h, w, C]`` uint8 region to ``[out_h, out_w, C]`` float32 with the
    taps of :func:`axis_taps` (one sample's ``[out, T]`` slices).

    ``quantize_rows``: horizontal pass first, its result rounded to ``0..255``
    before the vertical pass (bicubic on a uint8 image, as torch's uint8 kernel).
    """
    Hc, Wc, _ = pixels.shape
    out_h, Ty = idx_y.shape
    out_w, Tx = idx_x.shape
    # Both orders give the same separable sum; pick the one touching fewer
    # elements (gathers plus the transposes between passes).
    cost_y_first = out_h * Ty * Wc + out_h * Wc + out_w * Tx * out_h
    cost_x_first = Hc * Wc + out_w * Tx * Hc + out_w * Hc + out_h * Ty * out_w
    if cost_y_first <= cost_x_first and not quantize_rows:
        a = _gather_rows(pixels.float(), idx_y, w_y)  # [out_h, Wc, C]
        b = _gather_rows(a.transpose(0, 1).contiguous(), idx_x, w_x)  # [out_w, out_h, C]
        return b.transpose(0, 1)
    a = _gather_rows(pixels.transpose(0, 1).float().contiguous(), idx_x, w_x)  # [out_w, Hc, C]
    if quantize_rows:
        a.clamp_(0.0, 255.0).add_(0.5).floor_()
    return _gather_rows(a.transpose(0, 1).contiguous(), idx_y, w_y)  # [out_h, out_w, C]


# --------------------------------------------------------------------------- #
# colour
# --------------------------------------------------------------------------- #


def colour(values: torch.Tensor) -> torch.Tensor:
    """The per-sample colour program on ``[out_h, out_w, 3]`` values: none is emitted yet."""
    return values


# --------------------------------------------------------------------------- #
# epilogue
# --------------------------------------------------------------------------- #


def epilogue(values: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, quantize: bool,
             dst: torch.Tensor, erase_args: tuple | None = None) -> None:
    """Write ``[out_h, out_w, 3]`` float32 ``values`` into ``dst`` (an HWC view of one
    output sample): optionally rounded to an integer in [0, 255] first, then
    ``values * scale + bias`` per channel, then the :func:`erase` box (``erase_args``
    = ``(box, value, seed)``, None for none) in that output value space, rounded and
    saturated for a uint8 ``dst``."""
    if quantize:
        values = values.clamp_(0.0, 255.0).add_(0.5).floor_()
    if dst.dtype == torch.float32:
        torch.addcmul(bias, values, scale, out=dst)
        if erase_args is not None:
            erase(dst.permute(2, 0, 1), *erase_args)
        return
    o = torch.addcmul(bias, values, scale)
    if erase_args is not None:
        erase(o.permute(2, 0, 1), *erase_args)
    if dst.dtype == torch.uint8:
        o = o.clamp_(0.0, 255.0).add_(0.5).floor_()
    dst.copy_(o)


# --------------------------------------------------------------------------- #
# erase (epilogue): RandomErasing's box, with a constant or Philox noise
# --------------------------------------------------------------------------- #

# Philox-4x32-10 constants (Salmon et al., "Parallel random numbers: as easy as
# 1, 2, 3"), the generator `stages/epilogue.py: philox_normal` runs per pixel.
_PHILOX_ROUND_A, _PHILOX_ROUND_B = 0xD2511F53, 0xCD9E8D57
_PHILOX_KEY_A, _PHILOX_KEY_B = 0x9E3779B9, 0xBB67AE85
_M32 = 0xFFFFFFFF


def philox_normal(seed: int, offset: torch.Tensor) -> torch.Tensor:
    """Standard normal float32 noise for int64 counters ``offset`` under key ``seed``.

    Philox-4x32 with 10 rounds on the counter ``(offset, 0, 0, 0)`` and key
    ``(seed mod 2**32, 0)``; the first two words become uniforms
    ``u = (x if x >= 0 else ~x) * 4.6566127342e-10`` (as signed int32) and one
    Box-Muller draw ``sqrt(-2 log max(u1, 1e-7)) * cos(2 pi u2)``. Same integers
    as the kernel; the float transcendental functions agree to a few ulp.
    """
    c0 = offset.to(torch.int64) & _M32
    c1 = torch.zeros_like(c0)
    c2 = torch.zeros_like(c0)
    c3 = torch.zeros_like(c0)
    k0, k1 = int(seed) & _M32, 0
    for _ in range(10):
        # 32x32 -> 64-bit products in int64 would overflow for the high words;
        # split one factor in 16-bit halves.
        hi_b, lo_b = _mul_hi_lo(_PHILOX_ROUND_B, c2)
        hi_a, lo_a = _mul_hi_lo(_PHILOX_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0 = (k0 + _PHILOX_KEY_A) & _M32
        k1 = (k1 + _PHILOX_KEY_B) & _M32
    u1, u2 = _uniform(c0), _uniform(c1)
    u1 = torch.clamp_min(u1, 1.0e-7)
    r = torch.sqrt(-2.0 * torch.log(u1))
    return r * torch.cos(u2 * 6.283185307179586)


def _mul_hi_lo(a: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32-bit words of ``a * x`` for a 32-bit constant ``a`` and words ``x``."""
    a_lo, a_hi = a & 0xFFFF, a >> 16
    lo_part = a_lo * x  # < 2**48: exact in int64
    hi_part = a_hi * x
    total_lo = lo_part + ((hi_part & 0xFFFF) << 16)
    hi = (hi_part >> 16) + (total_lo >> 32)
    return hi & _M32, total_lo & _M32


def _uniform(x: torch.Tensor) -> torch.Tensor:
    signed = torch.where(x >= 2**31, x - 2**32, x)
    signed = torch.where(signed < 0, -signed - 1, signed)  # ~x on a negative int32
    return signed.to(torch.float32) * 4.6566127342e-10


def erase(values: torch.Tensor, box: tuple[int, int, int, int], value: torch.Tensor | None,
          seed: int | None) -> None:
    """Overwrite the box ``(y0, y1, x0, x1)`` of the ``[3, H, W]`` float32 output-space
    ``values`` in place with ``value`` (3 floats) or, when ``seed`` is given, with
    :func:`philox_normal` noise keyed by ``seed`` and each pixel's index ``(c*H + y)*W + x``."""
    _, H, W = values.shape
    y0, y1, x0, x1 = (max(0, v) for v in box)
    y1, x1 = min(y1, H), min(x1, W)
    if y1 <= y0 or x1 <= x0:
        return
    if seed is not None:
        c = torch.arange(3, device=values.device)[:, None, None]
        y = torch.arange(y0, y1, device=values.device)[None, :, None]
        x = torch.arange(x0, x1, device=values.device)[None, None, :]
        values[:, y0:y1, x0:x1] = philox_normal(seed, (c * H + y) * W + x)
    else:
        values[:, y0:y1, x0:x1] = value.to(values.dtype).view(3, 1, 1)


ERASE_NONE, ERASE_VALUE, ERASE_RANDOM = 0, 1, 2


def erase_mode(erase_value: Sequence[float] | torch.Tensor | None, erase_random: bool) -> int:
    """The epilogue's compile-time erase switch: none, a constant, or noise."""
    if erase_random and erase_value is not None:
        raise ValueError("give either erase_value or erase_random=True, not both")
    return ERASE_RANDOM if erase_random else ERASE_NONE if erase_value is None else ERASE_VALUE


def erase_args(params: torch.Tensor, b: int, mode: int, value: torch.Tensor | None) -> tuple | None:
    """``reference.erase``'s arguments for sample ``b`` (None when nothing is erased)."""
    if mode == ERASE_NONE:
        return None
    row = params[b].cpu()
    seed = int(row[layout.ERASE_SEED].item()) if mode == ERASE_RANDOM else None
    return erase_box(row), value, seed


def erase_box(params_row: torch.Tensor) -> tuple[int, int, int, int]:
    """The integer erase box ``(y0, y1, x0, x1)`` of one row of ``params`` (truncated
    toward zero, as the kernel converts the float32 columns)."""
    cols = (layout.ERASE_Y0, layout.ERASE_Y1, layout.ERASE_X0, layout.ERASE_X1)
    return tuple(int(params_row[c].item()) for c in cols)  # type: ignore[return-value]


# --------------------------------------------------------------------------- #
# augment program: twins of stages/colour.py (photometric ops) and stages/warp.py
# --------------------------------------------------------------------------- #
#
# Each function maps one uint8 [3, H, W] image to a new one, with the float32
# order of operations of torchvision.transforms.v2.functional on a uint8 tensor.

# ITU-R 601-2 luma weights, as float32 (torchvision's rgb_to_grayscale).
GRAY_WEIGHTS = (0.2989, 0.587, 0.114)
# float32(1 / 255) and the float -> uint8 scale (255 + 1 - 1e-3) of to_dtype(scale=True).
INV_255 = 1.0 / 255.0
TO_UINT8_SCALE = 255.0 + 1.0 - 1e-3


def _f32(v: float) -> float:
    """``v`` rounded to float32 (a scalar the kernel holds in a float32 register)."""
    return float(torch.tensor(v, dtype=torch.float32))


def fma(a: torch.Tensor, b: float | torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``a * b + c`` rounded once to float32, like a fused multiply-add.

    torch's CPU and CUDA kernels compute ``x.add_(y, alpha=s)`` as ``fma(y, s, x)``;
    the products here (8-bit pixel times float32) and sums fit in float64, so one
    rounding from float64 is the fused result.
    """
    b64 = b.double() if isinstance(b, torch.Tensor) else float(b)
    return (a.double() * b64 + c.double()).float()


def luma(img: torch.Tensor) -> torch.Tensor:
    """``0.2989 r + 0.587 g + 0.114 b`` of a ``[3, H, W]`` image in float32, rounded as
    ``r * 0.2989`` then two fused multiply-adds."""
    f = img.float()
    wr, wg, wb = (_f32(w) for w in GRAY_WEIGHTS)
    return fma(f[2], wb, fma(f[1], wg, f[0] * wr))


def truncate_uint8(v: torch.Tensor) -> torch.Tensor:
    """Clamp to [0, 255] and truncate toward zero (``.clamp_(0, 255).to(uint8)``)."""
    return v.clamp(0.0, 255.0).to(torch.uint8)


def blend(img: torch.Tensor, other: torch.Tensor | float, ratio: float) -> torch.Tensor:
    """torchvision's ``_blend`` on uint8: ``fma(other, 1 - ratio, img * ratio)``, clamped and
    truncated to uint8 (``other`` broadcasts: a grayscale plane or a scalar mean)."""
    ratio = _f32(ratio)
    other = other if isinstance(other, torch.Tensor) else torch.tensor(other, dtype=torch.float32)
    out = fma(other.float().expand_as(img), _f32(1.0 - ratio), img.float() * ratio)
    return truncate_uint8(out)


def brightness(img: torch.Tensor, factor: float) -> torch.Tensor:
    """``clamp(x * factor, 0, 255)`` truncated to uint8."""
    return truncate_uint8(img.float() * _f32(factor))


def contrast_mean(img: torch.Tensor, pixels: float = 0.0) -> torch.Tensor:
    """Mean of the floored luma of one image, as float32: an integer sum (exact) over
    the float32 pixel count (what ``image_stats`` computes for contrast); ``pixels`` > 0:
    the image is the first ``pixels`` pixels (row-major) of a longer padded row, and only
    they are summed (``pointwise.py``)."""
    g = luma(img).floor().to(torch.int64)
    total = g.reshape(-1)[: int(pixels)].sum() if pixels > 0 else g.sum()
    # a device tensor as divisor: CUDA torch turns division by a Python scalar into
    # a multiplication by its reciprocal, which rounds differently
    n = torch.tensor(float(pixels) if pixels > 0 else float(img.shape[-2] * img.shape[-1]), dtype=torch.float32,
                     device=img.device)
    return total.to(torch.float32) / n


def contrast(img: torch.Tensor, factor: float, mean: torch.Tensor | None = None, pixels: float = 0.0) -> torch.Tensor:
    """Blend with the mean of the floored luma (``mean`` from :func:`contrast_mean`)."""
    return blend(img, contrast_mean(img, pixels) if mean is None else mean, factor)


def saturation(img: torch.Tensor, factor: float) -> torch.Tensor:
    """Blend with the floored luma plane."""
    return blend(img, luma(img).floor(), factor)


def rgb_to_hsv(rgb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hue (in [0, 1)), saturation and value of float32 RGB in [0, 1], as torchvision's
    ``_rgb_to_hsv`` (Pillow's formulas; grey pixels get hue and saturation 0)."""
    r, g, b = rgb.unbind(0)
    maxc = torch.maximum(torch.maximum(r, g), b)
    minc = torch.minimum(torch.minimum(r, g), b)
    eqc = maxc == minc
    cr = maxc - minc
    s = cr / torch.where(eqc, 1.0, maxc)
    div = torch.where(eqc, 1.0, cr)
    rc, gc, bc = (maxc - r) / div, (maxc - g) / div, (maxc - b) / div
    is_r = maxc == r
    is_g = (maxc == g) & ~is_r
    is_b = ~is_r & ~is_g
    # one of the three sector formulas, the others multiplied by 0 (exact)
    h = (bc - gc) * is_r + (rc + 2.0 - bc) * is_g + (gc + 4.0 - rc) * is_b
    h = torch.fmod(h * _f32(1.0 / 6.0) + 1.0, 1.0)
    return h, s, maxc


def hsv_to_rgb(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Float32 RGB ``[3, H, W]`` of hue/saturation/value, as torchvision's ``_hsv_to_rgb``."""
    h6 = h * 6.0
    i = torch.floor(h6)
    f = h6 - i
    i = i.to(torch.int32).remainder(6)
    sxf = s * f
    q = ((1.0 - sxf) * v).clamp(0.0, 1.0)
    t = ((sxf + (1.0 - s)) * v).clamp(0.0, 1.0)
    p = ((1.0 - s) * v).clamp(0.0, 1.0)
    # sector i -> (r, g, b) among (v, p, q, t)
    table = ((v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q))
    out = torch.empty((3,) + h.shape, dtype=torch.float32, device=h.device)
    for c in range(3):
        acc = torch.zeros_like(h)
        for k in range(6):
            acc = torch.where(i == k, table[k][c], acc)
        out[c] = acc
    return out


def hue(img: torch.Tensor, factor: float) -> torch.Tensor:
    """Rotate the hue by ``factor`` (in [-0.5, 0.5]) in float32 HSV; ``x / 255`` in
    (as ``x * float32(1/255)``), ``trunc(y * 255.999)`` out."""
    x = img.float() * _f32(INV_255)
    h, s, v = rgb_to_hsv(x)
    h = torch.remainder(h + _f32(factor), 1.0)
    return (hsv_to_rgb(h, s, v) * _f32(TO_UINT8_SCALE)).to(torch.uint8)


def grayscale(img: torch.Tensor) -> torch.Tensor:
    """The luma, truncated to uint8, in all three channels."""
    return luma(img).to(torch.uint8).expand_as(img).clone()


def invert(img: torch.Tensor) -> torch.Tensor:
    """``255 - x``."""
    return 255 - img


def posterize_mask(bits: float) -> int:
    """The bit mask that keeps the top ``bits`` bits of a uint8 value (``bits >= 8``: all)."""
    n = min(max(int(bits), 0), 8)
    return ((1 << n) - 1) << (8 - n)


def posterize(img: torch.Tensor, bits: float) -> torch.Tensor:
    """``x & mask``, keeping the ``bits`` most significant bits."""
    return img & posterize_mask(bits)


def solarize(img: torch.Tensor, threshold: float) -> torch.Tensor:
    """``255 - x`` where ``x >= threshold`` (compared in float32)."""
    return torch.where(img.float() >= _f32(threshold), 255 - img, img)


def solarize_add(img: torch.Tensor, addition: float, threshold: float) -> torch.Tensor:
    """timm's SolarizeAdd: ``min(x + addition, 255)`` where ``x < threshold``, clamped at 0
    and truncated to uint8 (an integer ``addition`` is exact)."""
    f = img.float()
    return torch.where(f < _f32(threshold), truncate_uint8(f + _f32(addition)), img)


def permute_channels(img: torch.Tensor, permutation: Sequence[float]) -> torch.Tensor:
    """Output channel ``i`` is input channel ``permutation[i]`` (torchvision's ``permute_channels``)."""
    return img[[int(c) for c in permutation]].clone()


def sharpness(img: torch.Tensor, factor: float) -> torch.Tensor:
    """Blend of the image with its 3x3 smoothed version (weights 1/13, centre 5/13,
    rounded half to even) by ``factor``, as ``fma(smooth - x, 1 - factor, x)``, on the
    interior only; the one-pixel border is kept (as is an image with a side <= 2)."""
    _, H, W = img.shape
    if H <= 2 or W <= 2:
        return img.clone()
    f = img.float()
    a, b = _f32(1.0 / 13.0), _f32(5.0 / 13.0)
    acc = torch.zeros((3, H - 2, W - 2), dtype=torch.float32, device=img.device)
    for dy in range(3):
        for dx in range(3):
            acc = acc + f[:, dy:dy + H - 2, dx:dx + W - 2] * (b if dy == dx == 1 else a)
    smooth = torch.round(acc)
    centre = f[:, 1:-1, 1:-1]
    out = f.clone()
    out[:, 1:-1, 1:-1] = fma(smooth - centre, _f32(1.0 - _f32(factor)), centre)
    return truncate_uint8(out)


def autocontrast(img: torch.Tensor, lo: torch.Tensor | None = None, hi: torch.Tensor | None = None) -> torch.Tensor:
    """Per channel, ``(x - min) / ((max - min) * float32(1/255))`` clamped and truncated;
    a flat channel is kept. ``lo``/``hi`` are the per-channel min/max (computed when None)."""
    f = img.float()
    lo = f.amin(dim=(1, 2)) if lo is None else lo.float()
    hi = f.amax(dim=(1, 2)) if hi is None else hi.float()
    flat = hi == lo
    inv_scale = torch.where(flat, 1.0, (hi - lo) * _f32(INV_255))
    lo = torch.where(flat, 0.0, lo)
    return truncate_uint8((f - lo.view(3, 1, 1)) / inv_scale.view(3, 1, 1))


def histogram(img: torch.Tensor) -> torch.Tensor:
    """Per-channel 256-bin histograms ``[3, 256]`` int32 of a uint8 ``[3, H, W]`` image."""
    return torch.stack([torch.bincount(c.reshape(-1).to(torch.int64), minlength=256) for c in img]).to(torch.int32)


def equalize_lut(hist: torch.Tensor) -> torch.Tensor:
    """Pillow's equalize lookup tables from histograms ``[..., 256]`` (int), as int32.

    ``step = (n - count of the largest value present) // 255``; ``lut[0] = 0`` and
    ``lut[k] = min((cumsum[k - 1] + step // 2) // step, 255)``; a channel with
    ``step == 0`` maps every value to itself.
    """
    hist = hist.to(torch.int64)
    n = hist.sum(-1, keepdim=True)
    cum = hist.cumsum(-1)
    last = torch.where(hist > 0, torch.arange(256, device=hist.device), -1).amax(-1, keepdim=True)
    step = (n - hist.gather(-1, last.clamp_min(0))) // 255
    lut = ((cum[..., :-1] + step // 2) // step.clamp_min(1)).clamp(0, 255)
    lut = torch.cat([torch.zeros_like(lut[..., :1]), lut], dim=-1)
    identity = torch.arange(256, device=hist.device).expand_as(lut)
    return torch.where(step > 0, lut, identity).to(torch.int32)


def equalize(img: torch.Tensor, lut: torch.Tensor | None = None) -> torch.Tensor:
    """Map each channel through its :func:`equalize_lut` (``lut`` ``[3, 256]``; computed when None)."""
    lut = equalize_lut(histogram(img)) if lut is None else lut
    return torch.gather(lut.to(torch.int64), 1, img.reshape(3, -1).to(torch.int64)).reshape(img.shape).to(torch.uint8)


def gaussian_weights(size: torch.Tensor, sigma: torch.Tensor, width: int) -> torch.Tensor:
    """1-D Gaussian kernels ``[N, width]`` float32 for odd ``size`` ``[N]`` and ``sigma`` ``[N]``.

    As torchvision's ``_get_gaussian_kernel1d``: ``x`` = ``size`` points evenly spaced
    over ``[-lim, lim]``, ``lim = (size - 1) / (2 sqrt 2)`` (torch.linspace's float32
    formula: ``start + step * i`` on the first half, ``end - step * (size - 1 - i)``
    on the second), then ``softmax(-(x / sigma)**2)``, the sum taken left to right and
    applied as a multiplication by its reciprocal. Taps past ``size`` are 0.
    """
    dev = size.device
    k = size.to(torch.int64).clamp(1, width)
    lim = ((k.double() - 1.0) / (2.0 * 2.0 ** 0.5)).float()
    start, end = -lim, lim
    step = (end - start) / (k - 1).clamp_min(1).float()
    i = torch.arange(width, device=dev)[None, :]
    kk = k[:, None]
    first = start[:, None] + step[:, None] * i.float()
    second = end[:, None] - step[:, None] * (kk - 1 - i).float()
    x = torch.where(i < kk // 2, first, second)
    x = torch.where(kk == 1, start[:, None], x)
    z = -((x / sigma.float()[:, None]) ** 2)
    valid = i < kk
    z = torch.where(valid, z, -float("inf"))
    e = torch.exp(z - z.amax(dim=1, keepdim=True))
    total = torch.zeros_like(e[:, 0])
    for t in range(width):
        total = total + e[:, t]
    return e * (1.0 / total)[:, None]


def reflect_index(i: torch.Tensor, n: int) -> torch.Tensor:
    """Reflect-padding source index (``-1 -> 1``, ``n -> n - 2``) for offsets below ``n``."""
    i = torch.where(i < 0, -i, i)
    return torch.where(i > n - 1, 2 * (n - 1) - i, i)


def gaussian_blur(img: torch.Tensor, wy: torch.Tensor, wx: torch.Tensor) -> torch.Tensor:
    """Separable Gaussian kernel ``wy[:, None] * wx[None, :]`` (float32 products) applied
    with reflect padding, the taps summed row by row, left to right; rounded half to
    even. ``wy``/``wx`` are the 1-D kernels of :func:`gaussian_weights` (odd lengths)."""
    _, H, W = img.shape
    ky, kx = wy.numel(), wx.numel()
    f = img.float()
    ys = reflect_index(torch.arange(H, device=img.device)[:, None] + torch.arange(ky, device=img.device) - ky // 2, H)
    xs = reflect_index(torch.arange(W, device=img.device)[:, None] + torch.arange(kx, device=img.device) - kx // 2, W)
    acc = torch.zeros_like(f)
    for ty in range(ky):
        rows = f[:, ys[:, ty]]
        for tx in range(kx):
            acc = acc + rows[:, :, xs[:, tx]] * (wy[ty] * wx[tx])
    return torch.round(acc).to(torch.uint8)


def warp_grid(matrix: torch.Tensor, H: int, W: int, perspective: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised sampling grid ``(gx, gy)`` ``[H, W]`` float32 of an affine or perspective warp.

    Affine (torchvision's ``_affine_grid``): output pixel centres relative to the image
    centre, ``x = j - (W - 1) / 2``, ``y = i - (H - 1) / 2``, mapped by the inverse matrix
    ``m0..m5`` after dividing its rows by ``W / 2`` and ``H / 2``:
    ``gx = x * (m0 / (W/2)) + y * (m1 / (W/2)) + m2 / (W/2)``.
    Perspective (``_perspective_grid``): ``x = j + 0.5``, ``y = i + 0.5``,
    ``gx = (x * (m0 / (W/2)) + y * (m1 / (W/2)) + m2 / (W/2)) / (m6 x + m7 y + 1) - 1``
    (and ``gy`` with ``m3..m5`` and ``H/2``).
    """
    m = [matrix[i].float() for i in range(8)]
    dev = matrix.device
    j = torch.arange(W, device=dev, dtype=torch.float32)[None, :]
    i = torch.arange(H, device=dev, dtype=torch.float32)[:, None]
    # on the matrix's device: torch's CUDA division by a CPU scalar multiplies by
    # its reciprocal instead of dividing (torchvision divides by a device tensor)
    hw = torch.tensor(0.5 * W, dtype=torch.float32, device=dev)
    hh = torch.tensor(0.5 * H, dtype=torch.float32, device=dev)
    if perspective:
        x, y = j + 0.5, i + 0.5
    else:
        x, y = j - (W - 1) * 0.5, i - (H - 1) * 0.5
    gx = x * (m[0] / hw) + y * (m[1] / hw) + m[2] / hw
    gy = x * (m[3] / hh) + y * (m[4] / hh) + m[5] / hh
    if perspective:
        den = x * m[6] + y * m[7] + 1.0
        gx, gy = gx / den - 1.0, gy / den - 1.0
    return gx.expand(H, W), gy.expand(H, W)


def warp(img: torch.Tensor, matrix: torch.Tensor, perspective: bool, interp: int,
         fill: torch.Tensor | None) -> torch.Tensor:
    """``grid_sample(align_corners=False, padding_mode="zeros")`` of a uint8 ``[3, H, W]``
    image on :func:`warp_grid`, as torchvision's ``_apply_grid_transform``.

    Source position ``ix = (gx + 1) * (W / 2) - 0.5``. Nearest: the pixel at
    ``round_half_even(ix)``; bilinear: the four neighbours with weights from the
    fractional parts, summed nw, ne, sw, se. Taps outside the image read 0. With a
    ``fill`` (3 floats), the same weights on an all-ones image give ``mask``; nearest
    uses ``fill`` where ``mask < 0.5``, bilinear ``(v - fill) * mask + fill``. The result
    is rounded half to even.
    """
    _, H, W = img.shape
    gx, gy = warp_grid(matrix, H, W, perspective)
    ix = (gx + 1.0) * (W * 0.5) - 0.5
    iy = (gy + 1.0) * (H * 0.5) - 0.5
    f = img.float()

    def tap(yy: torch.Tensor, xx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inside = (xx >= 0) & (xx <= W - 1) & (yy >= 0) & (yy <= H - 1)
        yc = yy.clamp(0, H - 1).to(torch.int64)
        xc = xx.clamp(0, W - 1).to(torch.int64)
        return torch.where(inside, f[:, yc, xc], 0.0), inside.float()

    if interp == layout.FILTER_NEAREST:
        v, mask = tap(torch.round(iy), torch.round(ix))
        if fill is not None:
            v = torch.where(mask < 0.5, fill.float().view(3, 1, 1), v)
    else:
        x0, y0 = torch.floor(ix), torch.floor(iy)
        wx1, wy1 = ix - x0, iy - y0
        wx0, wy0 = 1.0 - wx1, 1.0 - wy1
        v = torch.zeros_like(f)
        mask = torch.zeros_like(ix)
        for yy, xx, w in ((y0, x0, wy0 * wx0), (y0, x0 + 1, wy0 * wx1),
                          (y0 + 1, x0, wy1 * wx0), (y0 + 1, x0 + 1, wy1 * wx1)):
            tv, inside = tap(yy, xx)
            v = v + tv * w
            mask = mask + inside * w
        if fill is not None:
            fv = fill.float().view(3, 1, 1)
            v = (v - fv) * mask + fv
    return torch.round(v).clamp(0.0, 255.0).to(torch.uint8)
