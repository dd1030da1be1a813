"""Triton kernels of torchdali, each next to a plain-torch reference.

Importing this package compiles nothing; Triton itself is optional (the
references work without it, the launchers then raise a RuntimeError).
"""
from .resized_crop import NUM_PARAMS, fused_resized_crop, resized_crop_reference

__all__ = ["NUM_PARAMS", "fused_resized_crop", "resized_crop_reference"]
