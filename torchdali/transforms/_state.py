"""What is known about a batch before any pixel is seen.

Compiling a pipeline folds every transform over a ``StaticState``: the output
dtype and size, and the per-channel affine (``value * scale + bias``) the
kernel's epilogue applies. A bad pipeline (Normalize on uint8, no fixed output
size) therefore fails when the loader is built, not in the first batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from csrc_triton import layout

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
class PadSpec:
    """How a pipeline pads where it pads with more than zeros: one padding mode and one fill
    per pipeline, the fused kernel's ``PAD_MODE`` switch and fill (``layout.PAD_*``)."""

    #: torchvision's ``padding_mode``: ``"constant"``, ``"edge"``, ``"reflect"`` or ``"symmetric"``
    mode: str
    #: the constant mode's fill per channel, on the 0..255 scale of the resampled pixels
    #: (before the epilogue's affine); zeros for the other modes
    fill: tuple[float, float, float]
    #: the step that set it (named when another step disagrees)
    by: str


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
    #: the kernel's interpolation, a ``layout.FILTER_*`` code (the last resize decides);
    #: ``FILTER_PER_SAMPLE`` when it is drawn per sample into the ``filter`` column
    interpolation: int = layout.FILTER_BILINEAR
    #: per-channel affine of the epilogue: ``value * scale + bias``
    scale: tuple[float, float, float] = (1.0, 1.0, 1.0)
    bias: tuple[float, float, float] = (0.0, 0.0, 0.0)
    #: the RandomErasing of the pipeline, where it stands (None: no erasing)
    erase: EraseSpec | None = None
    #: ``BatchImages``: deliver every batch padded to its largest image (None: see ``_ragged.py``)
    batch_images: BatchImagesSpec | None = None
    #: whether a step has resampled the image (resize or resized crop)
    resampled: bool = False
    #: padding with a fill or a padding mode (None: zero padding at most)
    pad: PadSpec | None = None
    #: the first step that may pad with zeros through the valid window (CenterCrop larger
    #: than the image, zero-fill RandomCrop/Pad): it rules out a non-zero fill elsewhere
    zero_pad: str | None = None


@dataclass(frozen=True)
class BatchImagesSpec:
    """How ``BatchImages`` pads a batch: to a multiple of ``size_divisible``, with ``fill``
    (a value of the output, after ToDtype and Normalize)."""

    size_divisible: int = 1
    fill: float = 0.0


@dataclass(frozen=True)
class SizeBound:
    """The largest output image a pipeline prefix can make: per side and in pixels.

    ``math.inf`` where nothing bounds it. A pipeline whose output size varies from
    image to image must end with a finite ``pixels``: it sizes the batch's one output
    buffer (``Plan.check_bound``). Each transform maps the bound of its input to that of
    its output (``Transform.bound_size``).
    """

    height: float
    width: float
    pixels: float

    @classmethod
    def of_input(cls, max_pixels: int | None) -> SizeBound:
        """The decoded images: at most ``max_pixels`` pixels, so at most that many per side
        too (a one-pixel-wide image); unbounded without a limit."""
        m = math.inf if max_pixels is None else float(max_pixels)
        return cls(m, m, m)

    @classmethod
    def fixed(cls, height: float, width: float) -> SizeBound:
        return cls(float(height), float(width), float(height) * float(width))

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.pixels)

    @property
    def aspect(self) -> float:
        """The largest long side / short side of an image within the bound (short side >= 1)."""
        return min(max(self.height, self.width), self.pixels)

    def union(self, other: SizeBound) -> SizeBound:
        """A bound holding both (a per-sample choice between two steps)."""
        return SizeBound(max(self.height, other.height), max(self.width, other.width),
                         max(self.pixels, other.pixels))


UNBOUNDED = SizeBound(math.inf, math.inf, math.inf)
