"""Colour stage: the per-sample colour program, applied to the resampled values.

It runs at the output size, after resampling and before the epilogue, in the
order torchvision applies colour transforms after a resize. No transform emits
a colour program yet, so the stage passes the three channels through; the
per-sample values it will read are the ``colour`` block of ``csrc_triton/layout.py``.
"""
import triton
import triton.language as tl  # noqa: F401  (Triton's interpreter patches the stage through it)


@triton.jit
def colour(v0, v1, v2):
    """The colour program applied to channels ``v0, v1, v2`` (float32, 0-255 scale)."""
    return v0, v1, v2
