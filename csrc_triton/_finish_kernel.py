"""The finish kernel: kernel 1's epilogue stage on a uint8 batch (normalise, erase, cast).

Imported on the first launch only (see ``_triton.py``); ``finish.py`` holds the
launcher and the plain-torch reference.
"""
import triton
import triton.language as tl

from . import layout
from .stages import epilogue, source


@triton.jit
def finish_kernel(
    in_ptr,  # uint8 [B, 3, H, W], any strides
    params_ptr,  # float32 [B, layout.NUM_PARAMS] contiguous (the epilogue block is read)
    affine_ptr,  # float32 [6]: scale[0..2], bias[0..2]
    erase_ptr,  # float32 [3]: the erase value (read when ERASE == 1)
    out_ptr,  # [B, 3, H, W] in the output dtype, any strides
    H, W, n_tiles_w, n_tiles,
    si_b, si_c, si_h, si_w,
    so_b, so_c, so_h, so_w,
    ERASE: tl.constexpr,
    OUT_UINT8: tl.constexpr,
    CACHE_KEY: tl.constexpr,  # _triton.cache_key(): the layout constants read here are part of the key
    BLOCK_H: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    b64, rows, cols, mask = source.tile(tl.program_id(0), n_tiles, n_tiles_w, H, W, BLOCK_H, BLOCK_W)
    v0, v1, v2 = source.load_tile(in_ptr + b64 * si_b, si_c, si_h, si_w, rows, cols, mask)
    p = params_ptr + b64 * layout.NUM_PARAMS
    epilogue.epilogue(out_ptr, b64, rows, cols, mask, so_b, so_c, so_h, so_w, affine_ptr, v0, v1, v2,
                      False, OUT_UINT8, p, erase_ptr, H, W, ERASE)
