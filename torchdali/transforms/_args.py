"""Argument checks shared by the transform classes and the functionals."""
from __future__ import annotations

import enum
import numbers
from typing import Any, Sequence

from csrc_triton import layout

#: torchvision's integer (PIL) interpolation constants -> mode name
_PIL_CODES = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
#: modes torchvision has and the fused kernel has not -> the closest mode it has
_CLOSEST = {"lanczos": "bicubic", "box": "bilinear", "hamming": "bilinear"}
#: timm's RandomResizedCropAndInterpolation(interpolation="random") draws one of these per call
RANDOM_INTERPOLATION = ("bilinear", "bicubic")


def setup_size(size: Any, name: str) -> list[int]:
    """``size`` as a list of 1 or 2 ints (torchvision's convention); ``name`` prefixes the error."""
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        return [int(size)]
    if isinstance(size, Sequence) and len(size) in (1, 2) and all(
        isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in size
    ):
        return [int(s) for s in size]
    raise ValueError(f"{name}: size must be an int or a sequence of 1 or 2 ints, got {size!r}")


def interpolation_code(interpolation: Any, name: str) -> int:
    """The ``layout.FILTER_*`` code of a torchvision ``interpolation`` argument.

    Accepts what ``torchvision.transforms.v2.functional.resize`` accepts for the
    modes the fused kernel has: an ``InterpolationMode`` (v1 and v2 share the
    enum), its string value (``"bilinear"``, ``"bicubic"``, ``"nearest"``,
    ``"nearest-exact"``) or a PIL integer constant (0 nearest, 2 bilinear, 3
    bicubic; ``PIL.Image.Resampling`` members too). Lanczos, box and hamming
    raise a ValueError naming the closest supported mode; ``name`` prefixes errors.
    """
    mode = interpolation
    if isinstance(mode, enum.Enum) and isinstance(mode.value, str):
        mode = mode.value
    elif isinstance(mode, numbers.Integral) and not isinstance(mode, bool):
        mode = _PIL_CODES.get(int(mode), mode)
    if isinstance(mode, str):
        if mode in layout.FILTERS:
            return layout.FILTERS[mode]
        if mode in _CLOSEST:
            closest = _CLOSEST[mode]
            raise ValueError(
                f"{name}: {mode} interpolation is not supported by the fused kernel; the closest supported "
                f"mode is {closest} (InterpolationMode.{closest.upper()})"
            )
    raise ValueError(
        f"{name}: interpolation must be an InterpolationMode, one of {list(layout.FILTERS)} or a PIL "
        f"constant (0 nearest, 2 bilinear, 3 bicubic), got {interpolation!r}"
    )


def interpolation_codes(interpolation: Any, name: str) -> int | tuple[int, ...]:
    """Like :func:`interpolation_code`, but a list or tuple of modes (or timm's
    ``"random"``, bilinear or bicubic) gives a tuple of codes, one drawn per sample."""
    if isinstance(interpolation, str) and interpolation == "random":
        interpolation = RANDOM_INTERPOLATION
    if isinstance(interpolation, (list, tuple)):
        if not interpolation:
            raise ValueError(f"{name}: interpolation is an empty list; give at least one mode")
        return tuple(interpolation_code(m, name) for m in interpolation)
    return interpolation_code(interpolation, name)
