"""The fused resized-crop kernel: the four stages of ``stages/`` composed over output tiles.

Imported on the first launch only (see ``_triton.py``); ``resized_crop.py`` holds
the launcher and the plain-torch reference.
"""
import triton
import triton.language as tl

from . import layout
from .stages import colour, epilogue, sample, source


@triton.jit
def resized_crop_kernel(
    data_ptr,  # uint8, all images packed back to back (HWC each)
    offsets_ptr,  # int64 [B]
    shapes_ptr,  # int32/int64 [B, 3] contiguous: H, W, C
    params_ptr,  # float32 [B, layout.NUM_PARAMS] contiguous
    affine_ptr,  # float32 [6]: scale[0..2], bias[0..2]
    erase_ptr,  # float32 [3]: the erase value (read when ERASE == 1)
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
    ERASE: tl.constexpr,  # 0: no erasing, 1: erase with erase_ptr's value, 2: with noise
    BLOCK_H: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    # Batch and tiles share grid axis 0: axes 1 and 2 are capped at 65535, and
    # neighbouring programs then work on the same image (cache reuse).
    pid = tl.program_id(0)
    b = pid // n_tiles
    tile = pid % n_tiles
    rows = (tile // n_tiles_w) * BLOCK_H + tl.arange(0, BLOCK_H)
    cols = (tile % n_tiles_w) * BLOCK_W + tl.arange(0, BLOCK_W)
    row_in = rows < out_h
    col_in = cols < out_w
    b64 = b.to(tl.int64)

    # source: where image b is; an image that does not fit in `data` reads nothing
    off, H, W, C, img_ok = source.image(offsets_ptr, shapes_ptr, b64, n_data)

    # sample: per output row, then per output column, the first tap, tap count,
    # weight normaliser and nearest-pixel fallback; then the weighted sums
    p = params_ptr + b64 * layout.NUM_PARAMS
    lo_y, hi_y = sample.clamp_region(tl.load(p + layout.LO_Y), tl.load(p + layout.HI_Y), H.to(tl.float32))
    lo_x, hi_x = sample.clamp_region(tl.load(p + layout.LO_X), tl.load(p + layout.HI_X), W.to(tl.float32))
    step_y = tl.load(p + layout.STEP_Y)
    step_x = tl.load(p + layout.STEP_X)
    support_y, inv_y = sample.filter_width(step_y, ANTIALIAS)
    support_x, inv_x = sample.filter_width(step_x, ANTIALIAS)
    cy, ky0, n_y, rnorm_y, fb_y = sample.axis_taps(
        rows, row_in & img_ok, tl.load(p + layout.ORIGIN_Y), step_y, lo_y, hi_y,
        tl.load(p + layout.VALID_Y0), tl.load(p + layout.VALID_Y1), support_y, inv_y, BLOCK_H)
    cx, kx0, n_x, rnorm_x, fb_x = sample.axis_taps(
        cols, col_in, tl.load(p + layout.ORIGIN_X), step_x, lo_x, hi_x,
        tl.load(p + layout.VALID_X0), tl.load(p + layout.VALID_X1), support_x, inv_x, BLOCK_W)
    v0, v1, v2 = sample.sample(data_ptr, off, W, C,
                               cy, ky0, n_y, rnorm_y, fb_y, inv_y,
                               cx, kx0, n_x, rnorm_x, fb_x, inv_x, BLOCK_H, BLOCK_W)

    # colour: the per-sample colour program at the output size
    v0, v1, v2 = colour.colour(v0, v1, v2)

    # epilogue: quantise, scale and bias, erase, cast, store
    epilogue.epilogue(out_ptr, b64, rows, cols, row_in[:, None] & col_in[None, :],
                      stride_ob, stride_oc, stride_oh, stride_ow, affine_ptr, v0, v1, v2, QUANTIZE, OUT_UINT8,
                      p, erase_ptr, out_h, out_w, ERASE)
