"""Triton kernels of torchdali, each next to a plain-torch reference.

* ``resized_crop.py``: the fused crop + resize + flip + normalise + cast launcher
  and its reference; the kernel is composed of the stages in ``stages/`` and their
  torch twins are in ``reference.py``.
* ``augment.py``: one slot of the augment program (per-sample photometric ops
  and warps of a uint8 batch) and the ``image_stats`` it needs, with references.
* ``pointwise.py``: a run of pointwise slots of the program in one pass (with the
  contrast statistics it needs), and its reference.
* ``finish.py``: normalise + cast + layout + RandomErasing of a uint8 batch (the
  epilogue after an augment program) and its reference.
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
from .augment import augment_slot_reference, fused_augment_slot, image_stats, image_stats_reference
from .finish import finish_reference, fused_finish
from .pointwise import fused_pointwise_program, pointwise_program_reference
from .resized_crop import fused_resized_crop, resized_crop_reference

__all__ = ["LaunchSettings", "NUM_PARAMS", "augment_slot_reference", "finish_reference", "fused_augment_slot",
           "fused_finish", "fused_pointwise_program", "fused_resized_crop", "image_stats", "image_stats_reference",
           "layout", "pointwise_program_reference", "resized_crop_reference"]
