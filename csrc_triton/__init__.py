"""Triton kernels of torchdali, each next to a plain-torch reference.

* ``resized_crop.py``: the fused crop + resize + flip + normalise + cast launcher
  and its reference; the kernel is composed of the stages in ``stages/`` and their
  torch twins are in ``reference.py``.
* ``scan_check.py``: the batched scan-marker check of compressed JPEG data.
* ``layout.py``: the named columns of the per-sample parameters.
* ``_triton.py``: lazy import of Triton, interpret mode, launch settings.

Importing this package compiles nothing and does not import Triton; Triton
itself is optional (the references work without it, the launchers then raise a
RuntimeError).
"""
from . import layout
from ._triton import LaunchSettings
from .layout import NUM_PARAMS
from .resized_crop import fused_resized_crop, resized_crop_reference

__all__ = ["LaunchSettings", "NUM_PARAMS", "fused_resized_crop", "layout", "resized_crop_reference"]
