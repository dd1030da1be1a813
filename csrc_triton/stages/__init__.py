"""The fused kernel's stages, as Triton functions: imported on the first launch only.

A fused kernel is one pass over the output tiles of a batch, in four stages:

* ``source``: where sample ``b``'s decoded pixels are and how one source pixel
  is read (interleaved HWC uint8, grayscale replicated to three channels; or a
  JPEG's planar Y, Cb, Cr, upsampled and converted to RGB as libjpeg does), and,
  with a padding mode, how a tap outside the padded image's fold box folds back
  into it;
* ``sample``: which source pixels an output pixel reads and with what weights
  (separable taps per axis of the compile-time filter: bilinear or bicubic,
  antialiased when shrinking, nearest or nearest-exact), and their sum;
* ``colour``: the per-sample colour program on the resampled values;
* ``epilogue``: quantise, per-channel scale and bias, RandomErasing, cast and store.

Beside them, ``warp`` samples a uint8 image through an affine or perspective
grid (torchvision's grid_sample path), and ``colour`` also holds the augment
program's photometric ops; ``_augment_kernel.py`` composes those two per
sample, ``_finish_kernel.py`` runs the epilogue on its own.

Each stage module holds ``@triton.jit`` functions only; ``csrc_triton/reference.py``
has a plain-torch twin of each stage under the same name, so a kernel test that
fails can be narrowed to one stage. Per-sample values are read by their names in
``csrc_triton/layout.py``.

These functions use no jit'd helpers of ``triton.language`` (``tl.max``,
``tl.zeros``): those are compiled or interpreted depending on ``TRITON_INTERPRET``
when Triton is first imported, and torch may import Triton long before a test
sets it. ``tl.reduce`` with our own combiner and ``tl.full`` are used instead.
"""
