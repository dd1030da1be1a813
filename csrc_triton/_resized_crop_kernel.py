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
    data_ptr,  # uint8, all images packed back to back (HWC each, Y, Cb, Cr planes or NV12 frames: SOURCE)
    offsets_ptr,  # int64 [B]
    shapes_ptr,  # int32/int64 [B, 3] contiguous: H, W, C (or H, W, subsampling code or NV12 code)
    params_ptr,  # float32 [B, layout.NUM_PARAMS] contiguous
    affine_ptr,  # float32 [6]: scale[0..2], bias[0..2]
    erase_ptr,  # float32 [3]: the erase value (read when ERASE == 1)
    placement_ptr,  # int64 [B, layout.PLACEMENT_WIDTH] contiguous (read when RAGGED)
    fill_ptr,  # float32 [3]: the padding fill, 0..255 scale (read when PAD_MODE == layout.PAD_CONSTANT)
    out_ptr,
    n_data,  # number of elements in data; bounds every image read
    out_h,  # RAGGED: the largest sample's height (the grid's), each sample's own is in placement
    out_w,
    n_tiles_w,
    n_tiles,
    stride_ob,
    stride_oc,
    stride_oh,
    stride_ow,
    FILTER: tl.constexpr,
    ANTIALIAS: tl.constexpr,
    QUANTIZE: tl.constexpr,
    OUT_UINT8: tl.constexpr,
    ERASE: tl.constexpr,  # 0: no erasing, 1: erase with erase_ptr's value, 2: with noise
    SOURCE: tl.constexpr,  # layout.SOURCE_INTERLEAVED, SOURCE_YCBCR, SOURCE_MIXED or SOURCE_NV12
    RAGGED: tl.constexpr,  # per-sample output sizes, offsets and strides from placement_ptr
    PAD_MODE: tl.constexpr,  # layout.PAD_*: taps folded into the fold box, or the fill (PAD_NONE: neither)
    CACHE_KEY: tl.constexpr,  # _triton.cache_key(): the layout constants read here are part of the key
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
    b64 = b.to(tl.int64)
    if RAGGED:
        # The grid covers the largest sample; a tile outside this sample's own size gets
        # empty masks, so it computes no taps and stores nothing (no early return).
        q = placement_ptr + b64 * layout.PLACEMENT_WIDTH
        h_b = tl.load(q + layout.PLACE_H).to(tl.int32)
        w_b = tl.load(q + layout.PLACE_W).to(tl.int32)
        row_in = (rows < h_b) & ((tile % n_tiles_w) * BLOCK_W < w_b)
        col_in = cols < w_b
    else:
        row_in = rows < out_h
        col_in = cols < out_w

    # source and sample: where sample b is and how its pixels are read (compiled in, or
    # per sample in a mixed batch); the resampled tile, with the filter compiled in or,
    # per sample, the filter of the sample's `filter` column. An image that does not
    # fit in `data` reads nothing. One program = one sample: the branches never diverge.
    p = params_ptr + b64 * layout.NUM_PARAMS
    if PAD_MODE == layout.PAD_CONSTANT:
        fill0 = tl.load(fill_ptr)
        fill1 = tl.load(fill_ptr + 1)
        fill2 = tl.load(fill_ptr + 2)
    else:
        fill0, fill1, fill2 = 0.0, 0.0, 0.0  # not read
    if SOURCE == layout.SOURCE_MIXED:
        if tl.load(shapes_ptr + b64 * 3 + 2) >= layout.PLANAR:
            off, H, W, C, img_ok = source.planar_image(offsets_ptr, shapes_ptr, b64, n_data)
            v0, v1, v2 = sample.resample_filtered(data_ptr, off, H, W, C, img_ok, p, rows, cols, row_in, col_in,
                                                  fill0, fill1, fill2, FILTER, ANTIALIAS, QUANTIZE, BLOCK_H, BLOCK_W,
                                                  layout.SOURCE_YCBCR, PAD_MODE)
        else:
            off, H, W, C, img_ok = source.image(offsets_ptr, shapes_ptr, b64, n_data)
            v0, v1, v2 = sample.resample_filtered(data_ptr, off, H, W, C, img_ok, p, rows, cols, row_in, col_in,
                                                  fill0, fill1, fill2, FILTER, ANTIALIAS, QUANTIZE, BLOCK_H, BLOCK_W,
                                                  layout.SOURCE_INTERLEAVED, PAD_MODE)
    elif SOURCE == layout.SOURCE_YCBCR:
        off, H, W, C, img_ok = source.planar_image(offsets_ptr, shapes_ptr, b64, n_data)
        v0, v1, v2 = sample.resample_filtered(data_ptr, off, H, W, C, img_ok, p, rows, cols, row_in, col_in,
                                              fill0, fill1, fill2, FILTER, ANTIALIAS, QUANTIZE, BLOCK_H, BLOCK_W,
                                              SOURCE, PAD_MODE)
    elif SOURCE == layout.SOURCE_NV12:
        off, H, W, C, img_ok = source.nv12_image(offsets_ptr, shapes_ptr, b64, n_data)
        v0, v1, v2 = sample.resample_filtered(data_ptr, off, H, W, C, img_ok, p, rows, cols, row_in, col_in,
                                              fill0, fill1, fill2, FILTER, ANTIALIAS, QUANTIZE, BLOCK_H, BLOCK_W,
                                              SOURCE, PAD_MODE)
    else:
        off, H, W, C, img_ok = source.image(offsets_ptr, shapes_ptr, b64, n_data)
        v0, v1, v2 = sample.resample_filtered(data_ptr, off, H, W, C, img_ok, p, rows, cols, row_in, col_in,
                                              fill0, fill1, fill2, FILTER, ANTIALIAS, QUANTIZE, BLOCK_H, BLOCK_W,
                                              SOURCE, PAD_MODE)

    # colour: the per-sample colour program at the output size
    v0, v1, v2 = colour.colour(v0, v1, v2)

    # epilogue: quantise, scale and bias, erase, cast, store
    if RAGGED:
        # sample b at its own offset and strides in the one output buffer; its noise
        # counters run over its own size, as in a batch of its own
        epilogue.epilogue(out_ptr + tl.load(q + layout.PLACE_OFFSET), b64 * 0, rows, cols,
                          row_in[:, None] & col_in[None, :], stride_ob,
                          tl.load(q + layout.PLACE_STRIDE_C), tl.load(q + layout.PLACE_STRIDE_H),
                          tl.load(q + layout.PLACE_STRIDE_W), affine_ptr, v0, v1, v2, QUANTIZE, OUT_UINT8,
                          p, erase_ptr, h_b, w_b, ERASE)
    else:
        epilogue.epilogue(out_ptr, b64, rows, cols, row_in[:, None] & col_in[None, :],
                          stride_ob, stride_oc, stride_oh, stride_ow, affine_ptr, v0, v1, v2, QUANTIZE, OUT_UINT8,
                          p, erase_ptr, out_h, out_w, ERASE)
