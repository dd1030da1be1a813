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

import torch

from . import layout

__all__ = ["axis_taps", "clamp_region", "colour", "cubic", "epilogue", "filter_width", "nearest_index", "sample",
           "source", "triangle"]


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


# --------------------------------------------------------------------------- #
# sample
# --------------------------------------------------------------------------- #


def clamp_region(params: torch.Tensor, shapes: torch.Tensor) -> torch.Tensor:
    """Copy of ``params`` with each clamp region forced to a non-empty part of
    its image (``0 <= lo <= size - 1``, ``lo < hi <= size``), as the kernel does."""
    p = params.clone()
    for ax, size in ((layout.axis("y"), shapes[:, 0]), (layout.axis("x"), shapes[:, 1])):
        size = size.to(p.dtype)
        lo = torch.minimum(p[:, ax.lo].clamp_min(0.0), size - 1.0)
        p[:, ax.lo] = lo
        p[:, ax.hi] = torch.maximum(torch.minimum(p[:, ax.hi], size), lo + 1.0)
    return p


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
             dst: torch.Tensor) -> None:
    """Write ``[out_h, out_w, 3]`` float32 ``values`` into ``dst`` (an HWC view of one
    output sample): optionally rounded to an integer in [0, 255] first, then
    ``values * scale + bias`` per channel, rounded and saturated for a uint8 ``dst``."""
    if quantize:
        values = values.clamp_(0.0, 255.0).add_(0.5).floor_()
    if dst.dtype == torch.float32:
        torch.addcmul(bias, values, scale, out=dst)
        return
    o = torch.addcmul(bias, values, scale)
    if dst.dtype == torch.uint8:
        o = o.clamp_(0.0, 255.0).add_(0.5).floor_()
    dst.copy_(o)
