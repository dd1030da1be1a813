"""Argument checks shared by the transform classes and the functionals."""
from __future__ import annotations

import numbers
from typing import Any, Sequence


def setup_size(size: Any, name: str) -> list[int]:
    """``size`` as a list of 1 or 2 ints (torchvision's convention); ``name`` prefixes the error."""
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        return [int(size)]
    if isinstance(size, Sequence) and len(size) in (1, 2) and all(
        isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in size
    ):
        return [int(s) for s in size]
    raise ValueError(f"{name}: size must be an int or a sequence of 1 or 2 ints, got {size!r}")


def check_bilinear(interpolation: Any, name: str) -> None:
    """Raise ValueError unless ``interpolation`` is bilinear (the only filter of the fused kernel)."""
    mode = getattr(interpolation, "value", interpolation)
    if mode not in ("bilinear", 2):  # PIL.Image.BILINEAR == 2
        raise ValueError(
            f"{name}: only bilinear interpolation is supported by the fused kernel, got {interpolation!r}"
        )
