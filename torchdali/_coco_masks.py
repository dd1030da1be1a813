"""COCO segmentations (polygons, RLE) to binary masks, as pycocotools makes them, in numpy.

torchvision's ``wrap_dataset_for_transforms_v2(CocoDetection(...))`` turns each
annotation's ``segmentation`` into a mask with pycocotools:
``mask.decode(mask.merge(mask.frPyObjects(polygons, h, w)))`` for polygons and
``mask.decode(rle)`` for run-length encodings. pycocotools is a compiled extension
that torchdali does not need otherwise, so this module does the same in numpy,
pixel for pixel (the test compares both on random polygons where pycocotools is
installed).

How pycocotools rasterises a polygon (``rleFrPoly`` of its ``maskApi.c``): the
vertices are scaled by 5 and rounded (``(int)(5 * v + .5)``), every edge is walked
one step per unit of its longer axis, rounding the other coordinate, and wherever
the walk changes column at a whole pixel's centre, the boundary point's row
(rounded up) toggles the mask from that pixel on, down the column and onwards in
column-major order. The run-length encoding it builds from the sorted toggle
positions is the parity of the toggles at or before each pixel, which is what
``_toggles_to_mask`` computes (``bincount`` + ``cumsum``). Several polygons of one
annotation are merged by union.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["polygons_to_mask", "rle_to_mask", "segmentation_to_mask"]

#: pycocotools' upsampling of polygon vertices before it walks the edges
_SCALE = 5.0
#: what ``(int)NaN`` gives on x86-64 (``cvttsd2si``): the row pycocotools records for a zero-length edge
_INT_MIN = -(2 ** 31)


def _toggles_to_mask(toggles: np.ndarray, height: int, width: int) -> np.ndarray:
    """``[H, W]`` uint8: 1 where an odd number of toggle positions (column-major, ``x * H + y``) lie at or before."""
    n = height * width
    hits = np.bincount(toggles, minlength=n + 1)[:n]
    return (np.cumsum(hits) & 1).astype(np.uint8).reshape(width, height).T


def _polygon_toggles(xy: np.ndarray, height: int, width: int) -> np.ndarray:
    """The column-major toggle positions of one polygon (``[x0, y0, x1, y1, ...]``), as ``rleFrPoly`` finds them."""
    k = len(xy) // 2  # an odd trailing coordinate is ignored, as pycocotools ignores it
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    xy = xy[: 2 * k]
    x = np.trunc(_SCALE * xy[0::2] + 0.5).astype(np.int64)
    y = np.trunc(_SCALE * xy[1::2] + 0.5).astype(np.int64)
    xs, ys, xe, ye = x, y, np.roll(x, -1), np.roll(y, -1)  # edge j runs from vertex j to vertex j + 1 (closing)
    dx, dy = np.abs(xe - xs), np.abs(ys - ye)
    along_x = dx >= dy  # walk one step per column, else one per row
    flip = (along_x & (xs > xe)) | (~along_x & (ys > ye))
    xs, xe = np.where(flip, xe, xs), np.where(flip, xs, xe)
    ys, ye = np.where(flip, ye, ys), np.where(flip, ys, ye)
    with np.errstate(divide="ignore", invalid="ignore"):  # 0/0 for a zero-length edge: NaN, as in C
        slope = np.where(along_x, (ye - ys) / dx, (xe - xs) / dy)
    steps = np.where(along_x, dx, dy) + 1
    edge = np.repeat(np.arange(k), steps)
    d = np.arange(len(edge)) - np.repeat(np.cumsum(steps) - steps, steps)
    t = np.where(flip[edge], (steps - 1)[edge] - d, d)
    # the rounded coordinate: (int)(start + slope * t + .5), evaluated in that order in float64
    with np.errstate(invalid="ignore"):
        minor = np.trunc(np.where(along_x[edge], ys[edge], xs[edge]) + slope[edge] * t + 0.5)
    minor = np.where(np.isnan(minor), _INT_MIN, minor).astype(np.int64)
    u = np.where(along_x[edge], xs[edge] + t, minor)
    v = np.where(along_x[edge], minor, ys[edge] + t)
    # boundary points: where the walk changes column, at a whole pixel (downsampled by the scale)
    u1, u0, v1, v0 = u[1:], u[:-1], v[1:], v[:-1]
    xd = (np.where(u1 < u0, u1, u1 - 1).astype(np.float64) + 0.5) / _SCALE - 0.5
    keep = (u1 != u0) & (np.floor(xd) == xd) & (xd >= 0) & (xd <= width - 1)
    yd = (np.minimum(v1, v0)[keep].astype(np.float64) + 0.5) / _SCALE - 0.5
    yd = np.ceil(np.clip(yd, 0, height))
    return xd[keep].astype(np.int64) * height + yd.astype(np.int64)


def polygons_to_mask(polygons: Sequence[Sequence[float]], height: int, width: int) -> np.ndarray:
    """``[H, W]`` uint8: the union of the polygons (each ``[x0, y0, x1, y1, ...]``), as pycocotools rasterises them.

    An empty list gives an empty mask (pycocotools raises IndexError there), and a
    polygon of two points is rasterised as a polygon (pycocotools reads a first
    polygon of four numbers as a box and fails). Raises ValueError for non-finite
    coordinates.
    """
    if height <= 0 or width <= 0:
        return np.zeros((max(height, 0), max(width, 0)), dtype=np.uint8)
    mask = np.zeros((height, width), dtype=np.uint8)
    for i, poly in enumerate(polygons):
        xy = np.asarray(poly, dtype=np.float64).reshape(-1)
        if not np.isfinite(xy).all():
            raise ValueError(f"polygon {i} has a non-finite coordinate")
        mask |= _toggles_to_mask(_polygon_toggles(xy, height, width), height, width)
    return mask


def _counts_from_string(s: str | bytes) -> np.ndarray:
    """The run lengths of pycocotools' compressed RLE string (``rleFrString``: 5 bits a character, offset 48,
    bit 0x20 = more characters follow, 0x10 of the last one = negative; from the fourth run on, a
    run is stored as the difference to the run two before)."""
    c = np.frombuffer(s.encode("ascii") if isinstance(s, str) else bytes(s), dtype=np.uint8).astype(np.int64) - 48
    if len(c) == 0:
        return np.zeros(0, dtype=np.int64)
    if (c < 0).any() or (c > 63).any():
        raise ValueError("the RLE string holds characters outside '0'..'o'")
    last = (c & 0x20) == 0
    if not last[-1]:
        raise ValueError("the RLE string ends inside a number")
    number = np.cumsum(np.concatenate([[0], last[:-1]]))  # which number each character belongs to
    first = np.flatnonzero(np.concatenate([[True], last[:-1]]))
    pos = np.arange(len(c)) - first[number]
    if pos.max() > 6:
        raise ValueError("the RLE string holds a number too large for a run length")
    x = np.bincount(number, weights=(c & 0x1F) << (5 * pos)).astype(np.int64)
    ends = np.flatnonzero(last)
    negative = (c[ends] & 0x10) != 0
    x -= np.where(negative, 1 << (5 * (pos[ends] + 1)), 0)
    # undo the differences: runs 3, 5, 7, ... add up from run 1; runs 4, 6, ... from run 2
    cnts = x.copy()
    cnts[3::2] = x[1] + np.cumsum(x[3::2]) if len(x) > 3 else cnts[3::2]
    cnts[4::2] = x[2] + np.cumsum(x[4::2]) if len(x) > 4 else cnts[4::2]
    return cnts & 0xFFFFFFFF  # (uint) in C


def rle_to_mask(rle: Mapping[str, Any]) -> np.ndarray:
    """``[H, W]`` uint8 from a COCO RLE ``{"size": [H, W], "counts": ...}``, compressed (a string) or not (a list).

    Runs alternate background and foreground, column-major, starting with background.
    Runs that do not cover the image exactly raise ValueError: pycocotools raises for
    runs past the last pixel, and leaves the pixels after runs that end short
    uninitialised.
    """
    try:
        height, width = (int(v) for v in rle["size"])
        counts = rle["counts"]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"an RLE needs 'size' [H, W] and 'counts', got keys {sorted(rle)}") from None
    if isinstance(counts, (str, bytes)):
        runs = _counts_from_string(counts)
    else:
        runs = np.asarray(counts, dtype=np.int64).reshape(-1)
        if (runs < 0).any():
            raise ValueError("an RLE run length is negative")
    n = height * width
    if height < 0 or width < 0:
        raise ValueError(f"the RLE's size {height}x{width} is negative")
    if int(runs.sum()) != n:
        # pycocotools raises past the end and leaves pixels short of it uninitialised
        raise ValueError(f"the RLE's runs cover {int(runs.sum())} pixels, not the {n} of its {height}x{width}")
    values = (np.arange(len(runs)) & 1).astype(np.uint8)
    return np.repeat(values, runs).reshape(width, height).T


#: how far outside its image (in image sizes) a polygon's vertex may lie: the rasteriser walks every
#: edge pixel by pixel, so one vertex at 1e9 would take gigabytes; real outlines stay within a pixel
_POLYGON_REACH = 1.0


def _check_polygon(i: int, xy: np.ndarray, height: int, width: int) -> None:
    """Raise ValueError for a polygon that does not fit an ``H x W`` image (see ``segmentation_to_mask``)."""
    if len(xy) % 2:
        raise ValueError(f"polygon {i} has an odd number of coordinates ({len(xy)}); it lists x, y pairs")
    if len(xy) < 6:
        raise ValueError(f"polygon {i} has {len(xy) // 2} points; a polygon needs 3 at least")
    if not np.isfinite(xy).all():
        raise ValueError(f"polygon {i} has a non-finite coordinate")
    x, y = xy[0::2], xy[1::2]
    far = ((x < -_POLYGON_REACH * width) | (x > (1 + _POLYGON_REACH) * width)
           | (y < -_POLYGON_REACH * height) | (y > (1 + _POLYGON_REACH) * height))
    if far.any():
        k = int(np.argmax(far))
        raise ValueError(f"polygon {i} has the point ({x[k]:g}, {y[k]:g}), far outside its {height}x{width} image")


def segmentation_to_mask(segmentation: Any, height: int, width: int) -> np.ndarray:
    """``[H, W]`` uint8 mask of one annotation's ``segmentation`` on an ``H x W`` image.

    Polygons (a list of lists) are rasterised at ``H x W``; an RLE (a dict) carries its own
    size, which must be ``H x W`` (ValueError otherwise, before it is decoded: torchvision
    would give a mask of another size than its image). A segmentation that does not fit
    its image raises ValueError before any mask is made: an RLE whose runs do not cover
    it exactly, a polygon with an odd number of coordinates (pycocotools drops the last)
    or fewer than 3 points, or with a point further than the image's size outside it.
    """
    if isinstance(segmentation, Mapping):
        size = segmentation.get("size")
        if isinstance(size, (list, tuple)) and len(size) == 2 and [height, width] != list(size):
            raise ValueError(f"the RLE is {size[0]}x{size[1]} but its image is {height}x{width}")
        return rle_to_mask(segmentation)
    if isinstance(segmentation, (list, tuple)):
        if segmentation and not all(isinstance(p, (list, tuple)) for p in segmentation):
            raise ValueError("polygons must be a list of [x0, y0, x1, y1, ...] lists")
        for i, poly in enumerate(segmentation):
            _check_polygon(i, np.asarray(poly, dtype=np.float64).reshape(-1), height, width)
        return polygons_to_mask(segmentation, height, width)
    raise ValueError(f"COCO segmentation expected to be a dict or a list, got {type(segmentation).__name__}")
