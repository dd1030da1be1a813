"""What is known about a batch before any pixel is seen.

Compiling a pipeline folds every transform over a ``StaticState``: the output
dtype and size, and the per-channel affine (``value * scale + bias``) the
kernel's epilogue applies. A bad pipeline (Normalize on uint8, no fixed output
size) therefore fails when the loader is built, not in the first batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


@dataclass(frozen=True)
class EraseSpec:
    """A RandomErasing and the image it sees: its value, in the dtype and affine at its place."""

    #: erase value (1 or 3 floats), empty when ``random``
    value: tuple[float, ...]
    #: ``value="random"``: standard normal noise
    random: bool
    dtype: torch.dtype
    scale: tuple[float, float, float]
    bias: tuple[float, float, float]


@dataclass(frozen=True)
class StaticState:
    """Static state of a batch after some prefix of the pipeline.

    Frozen: a transform returns a new state (``dataclasses.replace``), so a state
    can be shared and compared, and no transform can change what an earlier one saw.
    """

    #: dtype of the image after the prefix
    dtype: torch.dtype = torch.uint8
    #: fixed (height, width) of the output; None when it depends on the input image
    size: tuple[int, int] | None = None
    #: round the resampled value to an integer before the affine, as a uint8 resize does
    quantize: bool = False
    #: antialias when downscaling (the last resize decides)
    antialias: bool = True
    #: per-channel affine of the epilogue: ``value * scale + bias``
    scale: tuple[float, float, float] = (1.0, 1.0, 1.0)
    bias: tuple[float, float, float] = (0.0, 0.0, 0.0)
    #: the RandomErasing of the pipeline, where it stands (None: no erasing)
    erase: EraseSpec | None = None
