"""Building blocks of program transforms: writing ops into slots, argument checks.

A program transform (``stage = "program"``, see ``_plan.py``) fills its slots of
the augment program, ``[B, n_slots, SLOT_WIDTH]`` float32, one op per sample and
slot, with the op codes and argument names of ``csrc_triton/layout.py``.
``put_op`` is the one place that turns a named op and named arguments into slot
columns; the transform classes (``_colour.py``, ``_warp.py``) and the
auto-augment policies use it.
"""
from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np
from csrc_triton import layout

from .._warn import warn_user
from ._plan import Transform

__all__ = ["ProgramTransform", "RandomApplyOp", "check_p", "fill_values", "put_op", "warp_filter"]


def put_op(slot: np.ndarray, name: str, where: Any = None, *, interp: int | None = None,
           fill: Sequence[float] | None = None, **args: Any) -> None:
    """Write op ``name`` with its arguments (``layout.OP_ARGS`` names, scalars or ``[B]``
    arrays) into the samples ``where`` (bool ``[B]``, default all) of ``slot`` (``[B, SLOT_WIDTH]``).

    ``interp`` (a ``layout.FILTER_*`` code) and ``fill`` (3 values, NaN for torchvision's
    ``fill=None``) are the warps' sampling settings.
    """
    code = layout.op_code(name)
    names = layout.OP_ARGS[code][1]
    missing, extra = set(names) - set(args), set(args) - set(names)
    if missing or extra:
        raise TypeError(f"put_op({name!r}): arguments are {names}, got {sorted(args)}")
    rows: Any = slice(None)
    if where is not None:
        where = np.asarray(where, dtype=bool)
        if where.ndim == 0:
            if not where:
                return
        else:
            rows = np.flatnonzero(where)
    slot[rows, layout.SLOT_OP] = code
    for i, arg in enumerate(names):
        value = args[arg]
        slot[rows, layout.SLOT_M0 + i] = value if np.ndim(value) == 0 else np.asarray(value)[rows]
    if interp is not None:
        slot[rows, layout.SLOT_INTERP] = interp
    if fill is not None:
        for column, value in zip((layout.SLOT_FILL0, layout.SLOT_FILL1, layout.SLOT_FILL2), fill):
            slot[rows, column] = value


def warp_filter(interpolation: Any, name: str, bicubic_as_bilinear: bool = False) -> int:
    """``layout.FILTER_NEAREST``/``FILTER_BILINEAR`` for torchvision's warp interpolations
    (an ``InterpolationMode``, its value, or a PIL constant); ValueError for the others,
    which torchvision's tensor warps do not support either.

    ``bicubic_as_bilinear``: the transform classes accept bicubic, which torchvision
    only warps on PIL images (its tensor warps raise), and warp bilinearly instead,
    with a warning: the classification reference's bicubic presets hand bicubic to
    their auto-augment policy, and PIL's bicubic is no tensor operation to match.
    """
    mode = getattr(interpolation, "value", interpolation)
    if mode in ("nearest", 0):  # PIL.Image.NEAREST == 0
        return layout.FILTER_NEAREST
    if mode in ("bilinear", 2):  # PIL.Image.BILINEAR == 2
        return layout.FILTER_BILINEAR
    if bicubic_as_bilinear and mode in ("bicubic", 3):  # PIL.Image.BICUBIC == 3
        warn_user(f"{name}: bicubic warps run bilinear in torchdali (torchvision warps uint8 tensors with "
                  "nearest or bilinear only; its bicubic warp is PIL's); the resize keeps bicubic")
        return layout.FILTER_BILINEAR
    raise ValueError(f"{name}: interpolation must be nearest or bilinear (as torchvision's warps of tensors), "
                     f"got {interpolation!r}")


def fill_values(fill: Any, name: str) -> tuple[float, float, float]:
    """torchvision's ``fill`` of a warp as 3 per-channel values; ``None`` -> NaN (no fill mask).

    A dict (torchvision's per-type fill) gives its entry for images (``tv_tensors.Image``
    or ``"others"``).
    """
    if isinstance(fill, dict):
        chosen = None
        for key, value in fill.items():
            if getattr(key, "__name__", key) in ("Image", "others"):
                chosen = value
                if getattr(key, "__name__", None) == "Image":
                    break
        fill = chosen
    if fill is None:
        return (float("nan"),) * 3
    if isinstance(fill, numbers.Number) and not isinstance(fill, bool):
        return (float(fill),) * 3
    if isinstance(fill, (tuple, list)) and len(fill) in (1, 3):
        values = [float(v) for v in fill]
        return tuple(values * 3 if len(values) == 1 else values)  # type: ignore[return-value]
    raise ValueError(f"{name}: fill must be None, a number or a sequence of 1 or 3 numbers, got {fill!r}")


def check_p(p: float, name: str) -> float:
    """``p`` as a float; ValueError naming ``name`` unless it is a probability."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}: p must be in [0, 1], got {p}")
    return float(p)


class ProgramTransform(Transform):
    """Base of the transforms that run in the augment program (one slot unless set otherwise)."""

    stage = "program"
    n_slots = 1


class RandomApplyOp(ProgramTransform):
    """One op with fixed arguments, applied to each sample with probability ``p``
    (torchvision's ``_RandomApplyTransform``: applied when ``rand < p``)."""

    n_uniforms = 1
    op: str = "identity"

    def __init__(self, p: float = 0.5) -> None:
        self.p = check_p(p, type(self).__name__)

    def op_args(self) -> dict[str, float]:
        """The op's arguments (``layout.OP_ARGS`` names)."""
        return {}

    def make_params(self, geometry: Any, u: np.ndarray | None) -> dict[str, np.ndarray]:
        return {"apply": u[:, 0] < self.p}

    def write_slots(self, geometry: Any, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        put_op(slots[:, 0], self.op, params["apply"], **self.op_args())

    def extra_repr(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.op_args().items())
        return f"{args + ', ' if args else ''}p={self.p}"
