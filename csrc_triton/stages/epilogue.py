"""Epilogue stage: quantise, per-channel scale and bias, cast, and store one tile.

``QUANTIZE`` rounds the resampled value to an integer in [0, 255], which is what
torchvision produces when it resizes a uint8 image; then ``value * scale[ch] +
bias[ch]`` (ToDtype's scaling and Normalize folded together) is written in the
output dtype, rounded and saturated for uint8.

``ERASE`` (0 none, 1 constant, 2 noise) overwrites the RandomErasing box of the
sample (``layout.ERASE_*`` columns) in the output value space, before the cast.
The noise is our own Philox-4x32-10 (:func:`philox_normal`; its torch twin is
``reference.philox_normal``), not ``tl.randn``: a jit'd helper of
``triton.language`` is compiled or interpreted by how Triton was first
imported (see ``stages/__init__.py``).
"""
import triton
import triton.language as tl

from .. import layout


@triton.jit
def finish(v, scale, bias, QUANTIZE: tl.constexpr, OUT_UINT8: tl.constexpr):
    """One channel's output value before the cast."""
    if QUANTIZE:
        v = tl.floor(tl.minimum(tl.maximum(v, 0.0), 255.0) + 0.5)
    o = v * scale + bias
    if OUT_UINT8:
        o = tl.floor(tl.minimum(tl.maximum(o, 0.0), 255.0) + 0.5)
    return o


@triton.jit
def philox_normal(seed, offset):
    """Standard normal float32 per int32 counter in ``offset`` (a block) under the
    32-bit key ``seed``: Philox-4x32-10 on ``(offset, 0, 0, 0)``, the first two words
    as uniforms, one Box-Muller draw ``sqrt(-2 log max(u1, 1e-7)) cos(2 pi u2)``."""
    c0 = offset.to(tl.uint32, bitcast=True)
    c1 = c0 * 0
    c2 = c0 * 0
    c3 = c0 * 0
    k0 = seed.to(tl.uint32, bitcast=True)
    k1 = k0 * 0
    ROUND_A: tl.constexpr = 0xD2511F53
    ROUND_B: tl.constexpr = 0xCD9E8D57
    KEY_A: tl.constexpr = 0x9E3779B9
    KEY_B: tl.constexpr = 0xBB67AE85
    for _ in tl.static_range(10):
        _c0, _c2 = c0, c2
        c0 = tl.umulhi(ROUND_B, _c2) ^ c1 ^ k0
        c2 = tl.umulhi(ROUND_A, _c0) ^ c3 ^ k1
        c1 = _c2 * ROUND_B
        c3 = _c0 * ROUND_A
        k0 = k0 + KEY_A
        k1 = k1 + KEY_B
    u1 = to_uniform(c0)
    u2 = to_uniform(c1)
    u1 = tl.maximum(u1, 1.0e-7)
    r = tl.sqrt(-2.0 * tl.log(u1))
    return r * tl.cos(u2 * 6.283185307179586)


@triton.jit
def to_uniform(x):
    """A uint32 word as a float32 in [0, 1): ``(x or ~x as int32, whichever is >= 0) * 2**-31``."""
    i = x.to(tl.int32, bitcast=True)
    i = tl.where(i < 0, ~i, i)
    return i.to(tl.float32) * 4.6566127342e-10


@triton.jit
def erase(o, ch, rows, cols, p, erase_ptr, out_h, out_w, ERASE: tl.constexpr):
    """Channel ``ch`` of the tile, ``o`` (output space), with sample row ``p``'s erase box
    overwritten: by ``erase_ptr[ch]`` (``ERASE == 1``) or by :func:`philox_normal` noise
    keyed by ``erase_seed`` at counter ``(ch * out_h + row) * out_w + col`` (``ERASE == 2``)."""
    if ERASE != 0:
        y0 = tl.load(p + layout.ERASE_Y0).to(tl.int32)
        y1 = tl.load(p + layout.ERASE_Y1).to(tl.int32)
        x0 = tl.load(p + layout.ERASE_X0).to(tl.int32)
        x1 = tl.load(p + layout.ERASE_X1).to(tl.int32)
        inside = ((rows >= y0) & (rows < y1))[:, None] & ((cols >= x0) & (cols < x1))[None, :]
        if ERASE == 1:
            o = tl.where(inside, tl.load(erase_ptr + ch), o)
        else:
            seed = tl.load(p + layout.ERASE_SEED).to(tl.int32)
            idx = (ch * out_h + rows)[:, None] * out_w + cols[None, :]
            o = tl.where(inside, philox_normal(seed, idx), o)
    return o


@triton.jit
def epilogue(out_ptr, b64, rows, cols, mask, stride_ob, stride_oc, stride_oh, stride_ow, affine_ptr,
             v0, v1, v2, QUANTIZE: tl.constexpr, OUT_UINT8: tl.constexpr,
             p, erase_ptr, out_h, out_w, ERASE: tl.constexpr):
    """Store channels ``v0, v1, v2`` of the tile at ``rows x cols`` of output sample ``b64``.

    ``affine_ptr`` holds scale[0..2] then bias[0..2]; any output strides. With
    ``ERASE``, sample row ``p`` of ``params`` gives the erase box (:func:`erase`).
    """
    dst = (
        out_ptr
        + b64 * stride_ob
        + rows.to(tl.int64)[:, None] * stride_oh
        + cols.to(tl.int64)[None, :] * stride_ow
    )
    for ch in tl.static_range(3):
        if ch == 0:
            v = v0
        elif ch == 1:
            v = v1
        else:
            v = v2
        o = finish(v, tl.load(affine_ptr + ch), tl.load(affine_ptr + 3 + ch), QUANTIZE, False)
        o = erase(o, ch, rows, cols, p, erase_ptr, out_h, out_w, ERASE)
        if OUT_UINT8:
            o = tl.floor(tl.minimum(tl.maximum(o, 0.0), 255.0) + 0.5)
        tl.store(dst + ch * stride_oc, o.to(out_ptr.dtype.element_ty), mask=mask)
