"""Source stage: where a sample's decoded pixels are, and how one pixel is read.

Kernel 1 reads one of three sources (``layout.SOURCE_*``, the batch formats are in
``layout.py``), each a locator and a loader with the same contract: the locator
gives ``off, H, W, C, ok`` (``C`` the channel count, the subsampling code of a
planar sample or the colour format code of an NV12 frame), the loader three
float32 channel values per source pixel.

* interleaved HWC uint8 with 1 or 3 channels: :func:`image`, then :func:`source`
  at rows from :func:`row_start`;
* planar YCbCr at native chroma resolution: :func:`planar_image`, then
  :func:`source_ycbcr`, which upsamples the chroma and converts to RGB at each
  source pixel a tap reads, with libjpeg's integer arithmetic (the result is
  the RGB image libjpeg would have decoded, exactly);
* NV12 video frames (4:2:0, interleaved chroma, BT.601 or BT.709, limited or full
  range): :func:`nv12_image`, then :func:`source_nv12`, which upsamples the chroma
  bilinearly (MPEG-2 siting) and converts to RGB at each source pixel a tap reads, in
  integers (``layout.Nv12Coefficients``): the RGB image ``reference.nv12_to_rgb``
  gives, exactly.

A pipeline that pads with more than zeros before it resamples (a fill, or
torchvision's edge, reflect and symmetric modes) compiles kernel 1 with a
``PAD_MODE`` (``layout.PAD_*``): then every tap index first goes through
:func:`fold_index`, which folds an index outside the sample's fold box (the
``source`` columns of ``layout.py``) back into it, or flags it to read the fill;
both loaders read the folded indices. :func:`fold_box` reads and bounds the box.

The kernels that run on an output-size batch (the augment program's slots, the
finish pass) read a planar ``[B, 3, H, W]`` uint8 batch instead: :func:`tile`
places a program on it and :func:`load_tile` reads its three channels.
"""
import triton
import triton.language as tl

from .. import layout


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
def row_start(off, ky, pitch):
    """Element offset of source rows ``ky`` (a block of row indices) of the image at
    ``off`` whose rows are ``pitch`` elements apart."""
    return off + ky.to(tl.int64) * pitch


@triton.jit
def source(data_ptr, row, kx, C: tl.constexpr):
    """Channels 0, 1, 2 of the source pixels at rows ``row`` (from :func:`row_start`)
    and columns ``kx`` of an image of ``C`` channels (1 or 3, compiled in: the channels
    then lie at constant offsets, which the load instructions add), as float32; a
    grayscale image's one channel is all three. Every pixel is read, without a mask:
    the caller keeps the indices in the image."""
    src = data_ptr + (row[:, None] + (kx.to(tl.int64) * C)[None, :])
    v0 = byte_value(tl.load(src))
    if C == 3:
        v1 = byte_value(tl.load(src + 1))
        v2 = byte_value(tl.load(src + 2))
    else:
        v1 = v0
        v2 = v0
    return v0, v1, v2


@triton.jit
def byte_value(x):
    """uint8 ``x`` as float32, exactly: the byte in the low mantissa bits of ``2**23``,
    less ``2**23`` (two full-rate instructions instead of a quarter-rate conversion)."""
    return (x.to(tl.uint32) | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0


@triton.jit
def fold_box(f0, f1, size):
    """One axis of the fold box ``[f0, f1)`` (float32 columns) as int32, forced inside the
    image ``[0, size)``: ``0 <= f0 <= size - 1``, ``f0 <= f1 <= size``. Empty (``f1 == f0``)
    only for a constant pad whose box left the image (every tap reads the fill).
    ``where`` rather than min/max, so that NaN cannot get through."""
    f0 = tl.where(f0 > 0.0, f0, 0.0)
    f0 = tl.where(f0 < size - 1.0, f0, size - 1.0)
    f1 = tl.where(f1 < size, f1, size)
    f1 = tl.where(f1 > f0, f1, f0)
    return f0.to(tl.int32), f1.to(tl.int32)


@triton.jit
def fold_index(k, f0, f1, PAD_MODE: tl.constexpr):
    """Source indices ``k`` (int32, any integers) folded into the fold box ``[f0, f1)`` as the
    padding mode ``PAD_MODE`` reads them, and whether each lies inside the box.

    ``PAD_EDGE``: the nearest index of the box; ``PAD_REFLECT``: mirrored about the border
    pixels (period ``2 (n - 1)``, ``n = f1 - f0``); ``PAD_SYMMETRIC``: mirrored about the
    borders (period ``2 n``); ``PAD_CONSTANT``: ``k`` clamped into the box (a safe address;
    the caller reads the fill where ``inside`` is false). Every result lies in the box,
    hence in the image. ``%`` only ever sees non-negative operands (its sign convention
    differs between compiled and interpreted Triton).
    """
    n = tl.maximum(f1 - f0, 1)
    x = k - f0
    inside = (x >= 0) & (x < f1 - f0)
    if PAD_MODE == layout.PAD_REFLECT:
        period = tl.maximum(2 * n - 2, 1)
        m = tl.abs(x) % period  # reflection without the border is even about f0
        idx = tl.where(m < n, m, period - m)
    elif PAD_MODE == layout.PAD_SYMMETRIC:
        m = tl.where(x < 0, -x - 1, x) % (2 * n)  # with the border: even about f0 - 1/2
        idx = tl.where(m < n, m, 2 * n - 1 - m)
    else:  # PAD_EDGE, PAD_CONSTANT
        idx = tl.minimum(tl.maximum(x, 0), n - 1)
    return f0 + idx, inside


@triton.jit
def chroma_factors(S):
    """Horizontal and vertical chroma shifts (``log2`` of ``hf``, ``vf``) of subsampling code ``S``."""
    hs = ((S == layout.S_422) | (S == layout.S_420)).to(tl.int32)
    vs = ((S == layout.S_420) | (S == layout.S_440)).to(tl.int32)
    return hs, vs


@triton.jit
def chroma_fancy(hs, vs, cw):
    """Whether libjpeg fancy-upsamples the chroma horizontally and vertically
    (jinit_upsampler): a plane halved horizontally only when it is more than 2
    samples wide, else it is replicated, along both axes for 4:2:0; a plane halved
    only vertically always."""
    fancy_h = (hs == 1) & (cw > 2)
    fancy_v = (vs == 1) & ((hs == 0) | (cw > 2))
    return fancy_h, fancy_v


@triton.jit
def chroma_planes(off, H, W, S):
    """Offsets of the Cb and Cr planes of the planar sample at ``off``, and their height and width."""
    hs, vs = chroma_factors(S)
    ch = (H + vs) >> vs
    cw = (W + hs) >> hs
    cb = off + H * W
    return cb, cb + ch * cw, ch, cw


@triton.jit
def planar_image(offsets_ptr, shapes_ptr, b64, n_data):
    """Offset, height, width, subsampling code of planar YCbCr sample ``b64``, and
    whether it lies inside ``data``: :func:`image` for ``layout.SOURCE_YCBCR``.

    A sample with an unknown code, or whose planes do not all fit in ``data``,
    is flagged and reads nothing.
    """
    off = tl.load(offsets_ptr + b64).to(tl.int64)
    H = tl.load(shapes_ptr + b64 * 3).to(tl.int64)
    W = tl.load(shapes_ptr + b64 * 3 + 1).to(tl.int64)
    S = tl.load(shapes_ptr + b64 * 3 + 2).to(tl.int64)
    S = tl.where(S >= layout.PLANAR, S - layout.PLANAR, S)  # a planar sample of a SOURCE_MIXED batch
    known = (S == layout.S_444) | (S == layout.S_422) | (S == layout.S_420) | (S == layout.S_440)
    Hs = tl.maximum(H, 1)
    ok = (H > 0) & (W > 0) & (off >= 0) & (known | (S == layout.S_GRAY))
    # H * W <= n_data first: a chroma plane is never larger than the luma one, so
    # the planar size (at most 3 H W) cannot overflow either.
    ok = ok & (H <= n_data) & (W <= n_data // Hs)
    _, _, ch, cw = chroma_planes(off, H, W, S)
    size = H * W + tl.where(known, 2 * ch * cw, 0)
    ok = ok & (off <= n_data - size)
    return off, H, W, S, ok


@triton.jit
def chroma_taps(i, shift, fancy, n):
    """One axis of the chroma upsampling at full-resolution indices ``i``: the chroma
    sample ``i >> shift`` that covers ``i``, the neighbour on the side of ``i``
    within it (both clamped to ``[0, n)``: libjpeg replicates the edge samples),
    and their weights, 3 and 1 where libjpeg's fancy upsampling applies on this
    axis (``fancy``), else 1 and 0 (the covering sample, replicated)."""
    j = tl.minimum(tl.maximum(i >> shift, 0), n - 1)
    nj = tl.where((i & 1) == 0, j - 1, j + 1)
    nj = tl.minimum(tl.maximum(nj, 0), n - 1)
    w0 = tl.where(fancy, 3, 1)
    w1 = tl.where(fancy, 1, 0)
    return j, nj, w0, w1


@triton.jit
def chroma_rounding(ky, kx, fancy_h, fancy_v):
    """Rounding bias ``[BLOCK_H, BLOCK_W]`` and right shift of libjpeg's upsampling
    sums at full-resolution rows ``ky`` and columns ``kx``: ``h2v2_fancy_upsample``
    adds 8 on even columns and 7 on odd ones before ``>> 4``; ``h2v1`` (resp.
    ``h1v2``) adds 1 on even columns (rows) and 2 on odd ones before ``>> 2``;
    replication needs neither."""
    xo = (kx & 1)[None, :]
    yo = (ky & 1)[:, None]
    bias = tl.where(fancy_h & fancy_v, 8 - xo, tl.where(fancy_h, 1 + xo, tl.where(fancy_v, 1 + yo, 0)))
    shift = tl.where(fancy_h, 2, 0) + tl.where(fancy_v, 2, 0)
    return bias, shift


@triton.jit
def upsample_chroma(plane_ptr, o00, o01, o10, o11, wr0, wr1, wk0, wk1, bias, shift, mask, m_r, m_k):
    """Upsampled chroma (int32) of the plane at ``plane_ptr``: libjpeg's column sums
    ``wr0 * c[r] + wr1 * c[nr]`` at columns ``k`` and ``nk``, weighted ``wk0``,
    ``wk1``, ``+ bias >> shift``. ``o00, o01, o10, o11`` are the offsets of
    ``c[r][k], c[r][nk], c[nr][k], c[nr][nk]`` (:func:`chroma_taps` of both axes),
    ``m_r``/``m_k`` the masks of the neighbours, not read when of weight 0."""
    c00 = tl.load(plane_ptr + o00, mask=mask, other=0).to(tl.int32)
    c01 = tl.load(plane_ptr + o01, mask=m_k, other=0).to(tl.int32)
    c10 = tl.load(plane_ptr + o10, mask=m_r, other=0).to(tl.int32)
    c11 = tl.load(plane_ptr + o11, mask=m_r & m_k, other=0).to(tl.int32)
    sum0 = wr0 * c00 + wr1 * c10
    sum1 = wr0 * c01 + wr1 * c11
    return (wk0 * sum0 + wk1 * sum1 + bias) >> shift


@triton.jit
def ycc_to_rgb(y, cb, cr):
    """libjpeg's ``ycc_rgb_convert`` (jdcolor.c, 16 fractional bits) of int32 Y, Cb,
    Cr: R, G, B clamped to ``0..255``, as float32."""
    cb = cb - 128
    cr = cr - 128
    r = y + ((91881 * cr + 32768) >> 16)
    g = y + ((-22554 * cb - 46802 * cr + 32768) >> 16)
    b = y + ((116130 * cb + 32768) >> 16)
    r = tl.minimum(tl.maximum(r, 0), 255)
    g = tl.minimum(tl.maximum(g, 0), 255)
    b = tl.minimum(tl.maximum(b, 0), 255)
    return r.to(tl.float32), g.to(tl.float32), b.to(tl.float32)


@triton.jit
def source_ycbcr(data_ptr, off, H, W, S, ky, kx, mask):
    """R, G, B of the planar YCbCr sample at ``off`` (from :func:`planar_image`) at
    source rows ``ky`` ``[BLOCK_H]`` and columns ``kx`` ``[BLOCK_W]``, as float32;
    masked pixels read 0 (Y = 0 with neutral chroma): :func:`source` for
    ``layout.SOURCE_YCBCR``.

    Per pixel: one luma load, and per chroma plane up to four (the covering
    sample and its neighbours of non-zero weight).
    """
    y = tl.load(data_ptr + (row_start(off, ky, W)[:, None] + kx.to(tl.int64)[None, :]),
                mask=mask, other=0).to(tl.int32)
    cb_off, cr_off, ch, cw = chroma_planes(off, H, W, S)
    hs, vs = chroma_factors(S)
    fancy_h, fancy_v = chroma_fancy(hs, vs, cw)
    r, nr, wr0, wr1 = chroma_taps(ky, vs, fancy_v, ch)
    k, nk, wk0, wk1 = chroma_taps(kx, hs, fancy_h, cw)
    bias, shift = chroma_rounding(ky, kx, fancy_h, fancy_v)
    m_c = mask & (S != layout.S_GRAY)
    m_r = m_c & (wr1 != 0)
    m_k = m_c & (wk1 != 0)
    # both planes read at the same offsets
    row0 = r.to(tl.int64)[:, None] * cw
    row1 = nr.to(tl.int64)[:, None] * cw
    col0 = k.to(tl.int64)[None, :]
    col1 = nk.to(tl.int64)[None, :]
    o00, o01, o10, o11 = row0 + col0, row0 + col1, row1 + col0, row1 + col1
    cb = upsample_chroma(data_ptr + cb_off, o00, o01, o10, o11, wr0, wr1, wk0, wk1, bias, shift, m_c, m_r, m_k)
    cr = upsample_chroma(data_ptr + cr_off, o00, o01, o10, o11, wr0, wr1, wk0, wk1, bias, shift, m_c, m_r, m_k)
    # grayscale: neutral chroma, which the conversion maps to R = G = B = Y
    cb = tl.where(m_c, cb, 128)
    cr = tl.where(m_c, cr, 128)
    return ycc_to_rgb(y, cb, cr)


@triton.jit
def nv12_image(offsets_ptr, shapes_ptr, b64, n_data):
    """Offset, height, width, colour format code of NV12 frame ``b64``, and whether it
    lies inside ``data``: :func:`image` for ``layout.SOURCE_NV12``.

    A frame with an unknown code, or whose planes do not both fit in ``data``, is
    flagged and reads nothing.
    """
    off = tl.load(offsets_ptr + b64).to(tl.int64)
    H = tl.load(shapes_ptr + b64 * 3).to(tl.int64)
    W = tl.load(shapes_ptr + b64 * 3 + 1).to(tl.int64)
    F = tl.load(shapes_ptr + b64 * 3 + 2).to(tl.int64)
    known = (F >= 0) & (F <= (layout.NV12_MATRIX_MASK | layout.NV12_FULL_RANGE))
    Hs = tl.maximum(H, 1)
    ok = (H > 0) & (W > 0) & (off >= 0) & known
    # H * W <= n_data first: the chroma plane is at most (H + 1) (W + 1) / 2 bytes, so
    # the frame's size cannot overflow either.
    ok = ok & (H <= n_data) & (W <= n_data // Hs)
    ch = (H + 1) >> 1
    cw = (W + 1) >> 1
    ok = ok & (off <= n_data - (H * W + 2 * ch * cw))
    return off, H, W, F, ok


@triton.jit
def nv12_chroma_taps(ky, kx, ch, cw):
    """The chroma rows ``j`` (weight 3) and ``nj`` (weight 1) of full-resolution rows ``ky``
    (MPEG-2 siting: chroma row ``r`` lies between luma rows ``2 r`` and ``2 r + 1``), and
    the chroma columns ``k``, ``nk`` (weight 1 each; the same column on even ``kx``, where
    chroma is co-sited) of columns ``kx``, clamped to the ``ch x cw`` grid."""
    j = tl.minimum(tl.maximum(ky >> 1, 0), ch - 1)
    nj = tl.where((ky & 1) == 0, j - 1, j + 1)
    nj = tl.minimum(tl.maximum(nj, 0), ch - 1)
    k = tl.minimum(tl.maximum(kx >> 1, 0), cw - 1)
    nk = tl.minimum(tl.maximum(k + (kx & 1), 0), cw - 1)
    return j, nj, k, nk


@triton.jit
def nv12_coefficients(F):
    """``y_offset, y_scale, cr_r, cb_g, cr_g, cb_b`` of ``layout.Nv12Coefficients`` for the
    NV12 colour format code ``F`` (a scalar: one program reads one frame)."""
    bt709 = (F & layout.NV12_MATRIX_MASK) == layout.NV12_BT709
    full = (F & layout.NV12_FULL_RANGE) != 0
    y_offset = tl.where(full, 0, layout.NV12_Y_OFFSET_LIMITED)
    y_scale = tl.where(full, layout.NV12_Y_SCALE_FULL, layout.NV12_Y_SCALE_LIMITED)
    cr_r = tl.where(full, tl.where(bt709, layout.NV12_CR_R_709_FULL, layout.NV12_CR_R_601_FULL),
                    tl.where(bt709, layout.NV12_CR_R_709, layout.NV12_CR_R_601))
    cb_g = tl.where(full, tl.where(bt709, layout.NV12_CB_G_709_FULL, layout.NV12_CB_G_601_FULL),
                    tl.where(bt709, layout.NV12_CB_G_709, layout.NV12_CB_G_601))
    cr_g = tl.where(full, tl.where(bt709, layout.NV12_CR_G_709_FULL, layout.NV12_CR_G_601_FULL),
                    tl.where(bt709, layout.NV12_CR_G_709, layout.NV12_CR_G_601))
    cb_b = tl.where(full, tl.where(bt709, layout.NV12_CB_B_709_FULL, layout.NV12_CB_B_601_FULL),
                    tl.where(bt709, layout.NV12_CB_B_709, layout.NV12_CB_B_601))
    return y_offset, y_scale, cr_r, cb_g, cr_g, cb_b


@triton.jit
def nv12_ycc_to_rgb(y, cb8, cr8, F):
    """R, G, B (float32, integers in ``0..255``) of int32 luma ``y`` and chroma ``cb8``,
    ``cr8`` (8 times the upsampled chroma) in the NV12 colour format ``F``: the fixed-point
    conversion of ``layout.Nv12Coefficients``, rounded half up (``>>`` floors), clamped."""
    y_offset, y_scale, cr_r, cb_g, cr_g, cb_b = nv12_coefficients(F)
    ys = y_scale * (y - y_offset) + (1 << (layout.NV12_FRAC_BITS - 1))
    cb = cb8 - 8 * 128
    cr = cr8 - 8 * 128
    r = (ys + cr_r * cr) >> layout.NV12_FRAC_BITS
    g = (ys - cb_g * cb - cr_g * cr) >> layout.NV12_FRAC_BITS
    b = (ys + cb_b * cb) >> layout.NV12_FRAC_BITS
    r = tl.minimum(tl.maximum(r, 0), 255)
    g = tl.minimum(tl.maximum(g, 0), 255)
    b = tl.minimum(tl.maximum(b, 0), 255)
    return r.to(tl.float32), g.to(tl.float32), b.to(tl.float32)


@triton.jit
def source_nv12(data_ptr, off, H, W, F, ky, kx, mask):
    """R, G, B of the NV12 frame at ``off`` (from :func:`nv12_image`) at source rows ``ky``
    ``[BLOCK_H]`` and columns ``kx`` ``[BLOCK_W]``, as float32; masked pixels read 0:
    :func:`source` for ``layout.SOURCE_NV12``.

    Per pixel: one luma load and eight chroma loads (Cb and Cr of the two chroma rows
    and the two columns; on even columns the two columns are one, a cached load).
    """
    y = tl.load(data_ptr + (row_start(off, ky, W)[:, None] + kx.to(tl.int64)[None, :]),
                mask=mask, other=0).to(tl.int32)
    ch = (H + 1) >> 1
    cw = (W + 1) >> 1
    j, nj, k, nk = nv12_chroma_taps(ky, kx, ch, cw)
    uv = data_ptr + off + H * W
    row0 = j.to(tl.int64)[:, None] * (2 * cw)
    row1 = nj.to(tl.int64)[:, None] * (2 * cw)
    col0 = 2 * k.to(tl.int64)[None, :]
    col1 = 2 * nk.to(tl.int64)[None, :]
    o00, o01, o10, o11 = row0 + col0, row0 + col1, row1 + col0, row1 + col1
    cb8 = (3 * (tl.load(uv + o00, mask=mask, other=0).to(tl.int32) + tl.load(uv + o01, mask=mask, other=0).to(tl.int32))
           + tl.load(uv + o10, mask=mask, other=0).to(tl.int32) + tl.load(uv + o11, mask=mask, other=0).to(tl.int32))
    cr8 = (3 * (tl.load(uv + o00 + 1, mask=mask, other=0).to(tl.int32)
                + tl.load(uv + o01 + 1, mask=mask, other=0).to(tl.int32))
           + tl.load(uv + o10 + 1, mask=mask, other=0).to(tl.int32)
           + tl.load(uv + o11 + 1, mask=mask, other=0).to(tl.int32))
    r, g, b = nv12_ycc_to_rgb(y, cb8, cr8, F.to(tl.int32))
    # a masked tap must read 0 (its weight need not be): Y = 0 with zero chroma is not black
    return tl.where(mask, r, 0.0), tl.where(mask, g, 0.0), tl.where(mask, b, 0.0)


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
