"""Source stage: where a sample's decoded pixels are, and how one pixel is read.

Today's source is the packed batch of decoded images, each interleaved HWC
uint8 with 1 or 3 channels. A planar YCbCr source (luma and subsampled chroma
planes, converted to RGB per tap) is another loader with the same contract:
:func:`source` returns three float32 channel values per source pixel.

The kernels that run on an output-size batch (the augment program's slots, the
finish pass) read a planar ``[B, 3, H, W]`` uint8 batch instead: :func:`tile`
places a program on it and :func:`load_tile` reads its three channels.
"""
import triton
import triton.language as tl


@triton.jit
def image(offsets_ptr, shapes_ptr, b64, n_data):
    """Offset, height, width, channels of image ``b64``, and whether it lies inside ``data``.

    Metadata on the GPU is not validated by the launcher (that would need a host
    sync), so an image that does not fit in ``data`` is flagged and reads nothing.
    """
    off = tl.load(offsets_ptr + b64).to(tl.int64)
    H = tl.load(shapes_ptr + b64 * 3).to(tl.int64)
    W = tl.load(shapes_ptr + b64 * 3 + 1).to(tl.int64)
    C = tl.load(shapes_ptr + b64 * 3 + 2).to(tl.int64)
    # The divisions keep H * W * C from overflowing on garbage shapes.
    Hs = tl.maximum(H, 1)
    Ws = tl.maximum(W, 1)
    ok = (H > 0) & (W > 0) & (C > 0) & (off >= 0)
    ok = ok & (H <= n_data) & (W <= n_data // Hs) & (C <= n_data // (Hs * Ws))
    ok = ok & (off <= n_data - H * W * C)
    return off, H, W, C, ok


@triton.jit
def channels(C):
    """Offsets of channels 1 and 2 within a pixel: grayscale reads channel 0 three times."""
    return tl.minimum(C - 1, 1), tl.minimum(C - 1, 2)


@triton.jit
def row_start(off, ky, pitch):
    """Element offset of source rows ``ky`` (a block of row indices) of the image at
    ``off`` whose rows are ``pitch`` elements apart."""
    return off + ky.to(tl.int64) * pitch


@triton.jit
def source(data_ptr, row, kx, C, ch1, ch2, mask):
    """Channels 0, 1, 2 of the source pixels at rows ``row`` (from :func:`row_start`)
    and columns ``kx``, as float32; masked pixels read 0."""
    src = data_ptr + (row[:, None] + (kx.to(tl.int64) * C)[None, :])
    v0 = tl.load(src, mask=mask, other=0).to(tl.float32)
    v1 = tl.load(src + ch1, mask=mask, other=0).to(tl.float32)
    v2 = tl.load(src + ch2, mask=mask, other=0).to(tl.float32)
    return v0, v1, v2


@triton.jit
def tile(pid, n_tiles, n_tiles_w, H, W, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    """Sample, rows and columns of program ``pid`` over a ``[B, 3, H, W]`` batch cut in
    ``n_tiles`` tiles per sample (``n_tiles_w`` per row), and the in-image mask."""
    b = pid // n_tiles
    t = pid % n_tiles
    rows = (t // n_tiles_w) * BLOCK_H + tl.arange(0, BLOCK_H)
    cols = (t % n_tiles_w) * BLOCK_W + tl.arange(0, BLOCK_W)
    mask = (rows < H)[:, None] & (cols < W)[None, :]
    return b.to(tl.int64), rows, cols, mask


@triton.jit
def load_tile(src, s_c, s_h, s_w, rows, cols, mask):
    """The three channels of a tile of a planar uint8 image at ``src`` (strides ``s_c``,
    ``s_h``, ``s_w``) as float32, 0 outside ``mask``: the source of the kernels that
    run on an output-size batch (the augment program, the finish pass)."""
    ptr = src + rows.to(tl.int64)[:, None] * s_h + cols.to(tl.int64)[None, :] * s_w
    x0 = tl.load(ptr, mask=mask, other=0).to(tl.float32)
    x1 = tl.load(ptr + s_c, mask=mask, other=0).to(tl.float32)
    x2 = tl.load(ptr + 2 * s_c, mask=mask, other=0).to(tl.float32)
    return x0, x1, x2
