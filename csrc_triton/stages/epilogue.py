"""Epilogue stage: quantise, per-channel scale and bias, cast, and store one tile.

``QUANTIZE`` rounds the resampled value to an integer in [0, 255], which is what
torchvision produces when it resizes a uint8 image; then ``value * scale[ch] +
bias[ch]`` (ToDtype's scaling and Normalize folded together) is written in the
output dtype, rounded and saturated for uint8.
"""
import triton
import triton.language as tl


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
def epilogue(out_ptr, b64, rows, cols, mask, stride_ob, stride_oc, stride_oh, stride_ow, affine_ptr,
             v0, v1, v2, QUANTIZE: tl.constexpr, OUT_UINT8: tl.constexpr):
    """Store channels ``v0, v1, v2`` of the tile at ``rows x cols`` of output sample ``b64``.

    ``affine_ptr`` holds scale[0..2] then bias[0..2]; any output strides.
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
        o = finish(v, tl.load(affine_ptr + ch), tl.load(affine_ptr + 3 + ch), QUANTIZE, OUT_UINT8)
        tl.store(dst + ch * stride_oc, o.to(out_ptr.dtype.element_ty), mask=mask)
