"""The per-sample parameter layout: one row of float32 columns per sample.

Every sample of a batch carries its own parameters in a row of the ``params``
tensor the fused kernel reads. The row is made of named blocks, one per kernel
stage that needs per-sample values, and every block of named columns. This
module is the only place that fixes the order: the transforms that draw the
values, the launcher that checks them, the Triton stages that load them and the
plain-torch reference all use the names below (``layout.ORIGIN_Y``,
``layout.axis("x")``), never a bare number.

Blocks:

* ``geometry``: how an output pixel maps back to the source, per axis
  ``source = origin + step * (out + 0.5)``; the clamp region ``[lo, hi)`` of the
  source the resampling may read (the image border torchvision's resize sees),
  and the valid window ``[valid0, valid1)`` of the output (outside it, padding).
* ``source``: where a sample's pixels are and how they are stored, beyond the
  packed HWC image the kernel reads today (plane offsets and pitches of a
  planar YCbCr decode go here).
* ``colour``: the per-sample colour program (jitter factors, grayscale, ...).
* ``epilogue``: per-sample values applied at the output size (an erase box, ...).

The last three are empty while no stage reads per-sample values there; adding a
column is a change to this file only, and ``NUM_PARAMS`` follows.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "AxisColumns", "BLOCKS", "Block", "COLUMNS", "NUM_PARAMS", "axis", "block", "column",
    "ORIGIN_Y", "ORIGIN_X", "STEP_Y", "STEP_X", "LO_Y", "HI_Y", "LO_X", "HI_X",
    "VALID_Y0", "VALID_Y1", "VALID_X0", "VALID_X1",
]


class Block(NamedTuple):
    """A run of named columns, starting at column ``start`` of a row."""

    name: str
    columns: tuple[str, ...]
    start: int

    @property
    def stop(self) -> int:
        return self.start + len(self.columns)


def _stack(*blocks: tuple[str, tuple[str, ...]]) -> tuple[Block, ...]:
    out, start = [], 0
    for name, columns in blocks:
        out.append(Block(name, columns, start))
        start += len(columns)
    return tuple(out)


BLOCKS: tuple[Block, ...] = _stack(
    ("geometry", ("origin_y", "origin_x", "step_y", "step_x",
                  "lo_y", "hi_y", "lo_x", "hi_x",
                  "valid_y0", "valid_y1", "valid_x0", "valid_x1")),
    ("source", ()),
    ("colour", ()),
    ("epilogue", ()),
)

#: column name -> index in a row
COLUMNS: dict[str, int] = {c: b.start + i for b in BLOCKS for i, c in enumerate(b.columns)}

#: width of a row (``params`` is ``[B, NUM_PARAMS]`` float32)
NUM_PARAMS: int = sum(len(b.columns) for b in BLOCKS)


def column(name: str) -> int:
    """Index of the column ``name``; a KeyError names the known columns."""
    try:
        return COLUMNS[name]
    except KeyError:
        raise KeyError(f"no parameter column {name!r}; the layout has {list(COLUMNS)}") from None


def block(name: str) -> Block:
    """The block ``name`` (``geometry``, ``source``, ``colour``, ``epilogue``)."""
    for b in BLOCKS:
        if b.name == name:
            return b
    raise KeyError(f"no parameter block {name!r}; the layout has {[b.name for b in BLOCKS]}")


class AxisColumns(NamedTuple):
    """The geometry columns of one axis."""

    origin: int
    step: int
    lo: int
    hi: int
    valid0: int
    valid1: int


def axis(name: str) -> AxisColumns:
    """Geometry columns of axis ``"y"`` or ``"x"``."""
    if name not in ("y", "x"):
        raise ValueError(f"axis must be 'y' or 'x', got {name!r}")
    return AxisColumns(*(column(f"{c}_{name}") for c in ("origin", "step", "lo", "hi")),
                       column(f"valid_{name}0"), column(f"valid_{name}1"))


# Module constants for the Triton stages, which read columns as `layout.ORIGIN_Y`
# (a Triton function can read a module's attributes, not a dict).
ORIGIN_Y, ORIGIN_X = column("origin_y"), column("origin_x")
STEP_Y, STEP_X = column("step_y"), column("step_x")
LO_Y, HI_Y, LO_X, HI_X = column("lo_y"), column("hi_y"), column("lo_x"), column("hi_x")
VALID_Y0, VALID_Y1 = column("valid_y0"), column("valid_y1")
VALID_X0, VALID_X1 = column("valid_x0"), column("valid_x1")
