"""Kernels of a run of pointwise program slots: the contrast statistics and the one pass.

Imported on the first launch only (see ``_triton.py``); ``pointwise.py`` holds the
launchers and the plain-torch reference. One program works on one tile of one
sample and runs every slot of the run on it in registers: each op's result is a
whole number 0..255 held in float32 (``stages/colour.py``), exactly what the slot
kernel would have stored as uint8 and loaded back, so chaining in registers gives
the slot-by-slot result bit for bit.
"""
import triton
import triton.language as tl

from . import layout
from ._augment_kernel import add_combine
from .stages import colour
from .stages.source import load_tile, tile


@triton.jit
def contrast_mean(sums_ptr, b64, k, n_slots, m1, HW):
    """Contrast's mean for slot ``k`` of sample ``b64``: the floored luma's sum over the pixel
    count (``m1`` when positive: a row of a padded layout holds fewer pixels than ``H * W``)."""
    total = tl.load(sums_ptr + b64 * n_slots + k)
    pixels = tl.where(m1 > 0, m1, HW.to(tl.float32))
    return tl.div_rn(total.to(tl.float32), pixels)


@triton.jit
def pointwise_op(x0, x1, x2, sp, sums_ptr, b64, k, n_slots, HW, FMA64: tl.constexpr):
    """Slot ``k``'s op (its row at ``sp``) on the tile's channels (``colour.pointwise``)."""
    op = tl.load(sp + layout.SLOT_OP).to(tl.int32)
    m1 = tl.load(sp + layout.SLOT_M1)
    mean = contrast_mean(sums_ptr, b64, k, n_slots, m1, HW)  # (read by a contrast only)
    return colour.pointwise(x0, x1, x2, op, tl.load(sp + layout.SLOT_M0), m1, tl.load(sp + layout.SLOT_M2), mean,
                            FMA64)


@triton.jit
def run_slots(x0, x1, x2, slot_ptr, sums_ptr, b64, stop, n_slots, HW, FMA64: tl.constexpr):
    """Slots ``0 .. stop - 1`` of sample ``b64`` on the tile's channels, in order."""
    for k in range(0, stop):
        sp = slot_ptr + (b64 * n_slots + k) * layout.SLOT_WIDTH
        x0, x1, x2 = pointwise_op(x0, x1, x2, sp, sums_ptr, b64, k, n_slots, HW, FMA64)
    return x0, x1, x2


@triton.jit
def pointwise_luma_kernel(
    in_ptr,  # uint8 [B, 3, H, W], any strides
    slot_ptr,  # float32 [B, n_slots, layout.SLOT_WIDTH] contiguous
    sums_ptr,  # int32 [B, n_slots] contiguous: column k is written here, columns < k are read
    k, n_slots, H, W, n_tiles_w, n_tiles,
    s_b, s_c, s_h, s_w,
    FMA64: tl.constexpr,
    CACHE_KEY: tl.constexpr,  # _triton.cache_key(): the module constants read here are part of the key
    BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr,
):
    # Contrast's statistic for slot k: the sum of the floored luma of the image that slot k
    # sees (slots 0 .. k-1 applied on the fly), over the sample's own pixels only (its
    # count in the slot's m1, the first pixels in row-major order; all when 0).
    b64, rows, cols, mask = tile(tl.program_id(0), n_tiles, n_tiles_w, H, W, BLOCK_H, BLOCK_W)
    x0, x1, x2 = load_tile(in_ptr + b64 * s_b, s_c, s_h, s_w, rows, cols, mask)
    HW = H * W
    x0, x1, x2 = run_slots(x0, x1, x2, slot_ptr, sums_ptr, b64, k, n_slots, HW, FMA64)
    count = tl.load(slot_ptr + (b64 * n_slots + k) * layout.SLOT_WIDTH + layout.SLOT_M1)
    count = tl.where(count > 0, count, HW.to(tl.float32)).to(tl.int32)
    inside = mask & ((rows[:, None] * W + cols[None, :]) < count)
    g = tl.where(inside, tl.floor(colour.luma(x0, x1, x2, FMA64)), 0.0).to(tl.int32)
    tl.atomic_add(sums_ptr + b64 * n_slots + k, tl.reduce(tl.reduce(g, 1, add_combine), 0, add_combine))


@triton.jit
def pointwise_program_kernel(
    in_ptr,  # uint8 [B, 3, H, W], any strides
    out_ptr,  # uint8 [B, 3, H, W], any strides; may be in_ptr itself (each pixel is read before it is written)
    slot_ptr,  # float32 [B, n_slots, layout.SLOT_WIDTH] contiguous
    sums_ptr,  # int32 [B, n_slots]: the contrast slots' luma sums (pointwise_luma_kernel)
    n_slots, H, W, n_tiles_w, n_tiles,
    si_b, si_c, si_h, si_w,
    so_b, so_c, so_h, so_w,
    FMA64: tl.constexpr,
    CACHE_KEY: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr,
):
    b64, rows, cols, mask = tile(tl.program_id(0), n_tiles, n_tiles_w, H, W, BLOCK_H, BLOCK_W)
    x0, x1, x2 = load_tile(in_ptr + b64 * si_b, si_c, si_h, si_w, rows, cols, mask)
    o0, o1, o2 = run_slots(x0, x1, x2, slot_ptr, sums_ptr, b64, n_slots, n_slots, H * W, FMA64)
    dst = out_ptr + b64 * so_b + rows.to(tl.int64)[:, None] * so_h + cols.to(tl.int64)[None, :] * so_w
    tl.store(dst, o0.to(tl.uint8), mask=mask)
    tl.store(dst + so_c, o1.to(tl.uint8), mask=mask)
    tl.store(dst + 2 * so_c, o2.to(tl.uint8), mask=mask)
