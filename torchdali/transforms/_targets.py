"""Boxes and masks through a batch's per-sample geometry, as ``torchvision.transforms.v2`` maps them.

The images of a batch go through one resampling pass whose per-sample geometry
``_geometry.py`` folds into one affine map per axis. Detection and segmentation
targets must follow the same drawn parameters:

* **Boxes** are points, so the folded map moves them exactly: a box corner at
  source position ``src`` lands at ``(src - origin) / step`` of the output (a
  negative ``step`` is a flip, which swaps the corners). torchvision clamps boxes
  to the canvas at every crop (``crop``, ``center_crop``, ``resized_crop``,
  ``pad``; not at ``resize`` or the flips); for boxes inside their image these
  clamps add up to one clamp to the intersection of the crops' canvases, which
  the folded geometry keeps as the valid window ``valid_*0/1``. ``map_boxes`` maps
  a whole batch at once: one ragged ``[N, 4]`` tensor with per-sample ``counts``,
  on the host. One torchvision quirk needs the steps: a CenterCrop
  larger than the image moves the boxes by ``round((size - crop) / 2)`` (half to
  even) but pads the image by ``(crop - size) // 2``, one pixel apart for some odd
  differences; a ``trace_plan`` geometry follows torchvision's boxes there, a
  folded one the image.
* **Masks** are resampled with nearest-neighbour sampling, and nearest sampling
  does not compose: torchvision computes the source index of each resize as
  ``floor(float32(out) * (float32(in) / float32(out_size)))``
  (``torch.nn.functional.interpolate``, ``mode="nearest"``), a flip before a
  resize is not a flip after it, and two resizes are two floors. The folded map
  cannot tell these apart, so the exact path needs the steps: ``trace_plan``
  replays a plan's draw and records one ``TargetStep`` per geometry transform (a
  crop, a resize of the crop, then a flip, per axis). ``map_masks`` composes the
  steps' index maps per axis (the maps are separable) and gathers every mask of
  the batch with two ``gather`` calls. From a folded geometry alone (kernel
  parameter rows) the masks are exact for a pipeline with one resize, crops at
  whole pixels before or after it and flips after it (RandomResizedCrop, Resize +
  CenterCrop, crops, each + flips); otherwise they are nearest in float64 of the
  folded map, which may pick a neighbouring source pixel. A mask pixel outside the
  image takes the Mask fill of the step that padded it (``TargetStep.mask_fill``, from
  the transform's ``fill``: ``step_mask_fill``), cast to the mask's dtype as
  torchvision casts it; a folded geometry pads with zeros.

Everything the functions take as geometry (``TargetGeometryLike``): a
``TargetGeometry`` (from ``trace_plan`` or ``target_geometry``), a
``_geometry.BatchGeometry``, a ``_plan.BatchParams`` or the ``[B, layout.NUM_PARAMS]``
float32 rows of the kernel (with the output ``size``, which the rows do not hold).
The rows are read by column name (``layout.column``).

Not mapped (yet): the warps of the augment program (``trace_plan`` refuses a
batch where a sample draws one), rotated box formats, integer boxes (torchvision
truncates them after every step, which a composed map cannot repeat).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, NamedTuple, Sequence, Union

import numpy as np
import torch
from csrc_triton import layout
from csrc_triton._triton import upload

from . import _geometry as G
from ._plan import BatchParams, Plan
from ._reference_geometry import FixedSizeCrop
from ._transforms import CenterCrop, RandomResizedCrop

__all__ = [
    "AxisStep", "BOX_FORMATS", "MappedBoxes", "TargetGeometry", "TargetGeometryLike", "TargetStep",
    "BoxTrack", "draw_and_trace", "map_boxes", "map_masks", "mask_fill", "step_mask_fill", "target_geometry",
    "trace_plan",
]

#: the box formats mapped (``tv_tensors.BoundingBoxFormat`` names of the axis-aligned ones)
BOX_FORMATS: tuple[str, ...] = ("XYXY", "XYWH", "CXCYWH")

#: augment-program ops that move pixels: boxes and masks do not follow them yet
_WARP_OPS: tuple[int, ...] = (layout.OP_AFFINE, layout.OP_PERSPECTIVE)

#: geometry transforms whose torchvision mask path ignores ``interpolation``:
#: ``resized_crop_mask`` calls ``resize_mask(mask, size)``, always NEAREST, where
#: ``Resize`` passes its mode on (NEAREST_EXACT stays NEAREST_EXACT for masks, in a
#: torchvision whose ``resize_mask`` takes it: ``_masks_take_nearest_exact``)
_MASK_ALWAYS_NEAREST: tuple[type, ...] = (RandomResizedCrop,)

#: geometry transforms whose torchvision box path has its own anchor. ``center_crop_bounding_boxes``
#: crops at ``round((size - crop) / 2)`` (Python's round, half to even) also when the crop is larger,
#: where ``center_crop_image`` (and so the Mask) pads ``(crop - size) // 2`` first: for an odd
#: difference ``2k + 1`` with ``k`` odd the boxes land one pixel further right/down than the image
#: (torchvision 0.29). Boxes follow torchvision's boxes, not its image, there.
_BOX_CENTER_CROP: tuple[type, ...] = (CenterCrop,)

# How far (in input pixels) an offset recovered from float arithmetic may lie from a
# whole number and still be one: float64 geometry is off by ~1e-12, float32
# parameter rows by a few float32 ulps of the coordinates involved.
_WHOLE_ABS = 1e-4
_WHOLE_REL = 1e-6


@functools.lru_cache(maxsize=None)
def _masks_take_nearest_exact() -> bool:
    """Whether the installed torchvision resizes a Mask with NEAREST_EXACT when asked to.

    Before pytorch/vision#9497 (May 2026) ``resize_mask`` took no ``interpolation`` and
    always used NEAREST; since, it honours NEAREST_EXACT (and coerces the other modes to
    NEAREST). Read from its signature rather than its version number.
    """
    from torchvision.transforms.v2 import functional as TF

    return "interpolation" in inspect.signature(TF.resize_mask).parameters


class AxisStep(NamedTuple):
    """One axis of a ``TargetStep``, one entry per sample (tensors ``[B]`` on one device).

    Continuous coordinates (pixel ``i`` spans ``[i, i + 1)``): the step's output
    position ``p`` reads its input at ``offset + scale * q``, with ``q = size - p``
    where ``flip`` is set and ``q = p`` elsewhere. In torchvision's terms: crop the
    input at ``offset`` to ``scale * size`` pixels (zero padding outside it), resize
    that to ``size``, then mirror.
    """

    offset: torch.Tensor  # float64: where the (unmirrored) output starts in the input
    #: float64: ``offset`` for boxes; differs only where torchvision's boxes do not follow its
    #: image (CenterCrop larger than the image, see ``_BOX_CENTER_CROP``)
    box_offset: torch.Tensor
    scale: torch.Tensor  # float64 > 0: input pixels per output pixel
    flip: torch.Tensor  # bool: mirrored after the crop and resize
    size: torch.Tensor  # float64: output pixels (whole)
    #: float64: boxes are clamped to ``[lo, hi]`` of the output (-inf, inf: not clamped), and mask
    #: pixels outside ``[lo, hi)`` are zero (the valid window of a folded map)
    lo: torch.Tensor
    hi: torch.Tensor


class TargetStep(NamedTuple):
    """A geometry step of every sample of a batch: both axes, and the nearest flavour of its resize."""

    y: AxisStep
    x: AxisStep
    #: bool ``[B]``: the masks' resize is torchvision's NEAREST_EXACT (``Resize(interpolation=NEAREST_EXACT)``
    #: with a torchvision that honours it for masks) rather than NEAREST
    nearest_exact: torch.Tensor
    #: what a mask pixel this step pads (reads outside its input) becomes: the transform's Mask
    #: fill (``step_mask_fill``), cast to the masks' dtype by ``map_masks``
    mask_fill: float = 0.0


class TargetGeometry(NamedTuple):
    """What boxes and masks need of a batch's geometry: its steps, in pipeline order.

    ``source_size`` and ``size`` stay on the host (they size the outputs and check
    the masks without waiting for the device); the steps' tensors live on one device.
    """

    steps: tuple[TargetStep, ...]
    #: ``[B, 2]`` int64 (H, W) of the images the targets belong to; None where not known
    source_size: np.ndarray | None
    #: ``[B, 2]`` int64 (H, W) of the output canvas
    size: np.ndarray
    #: ``trace_plan`` only: for each leaf of the plan, how many of ``steps`` come before it (where a
    #: target-only step such as SanitizeBoundingBoxes stands among the geometry steps)
    leaf_steps: tuple[int, ...] = ()
    #: ``trace_plan`` with boxes only: ``(leaf position, keep)`` of each step that set boxes to zeros
    #: after its crop (RandomIoUCrop), ``keep`` host bool with one entry per box of the batch
    #: (``BoxTrack``'s order), False where the box became ``[0, 0, 0, 0]``
    zeroed: tuple[tuple[int, np.ndarray], ...] = ()

    @property
    def batch(self) -> int:
        """Samples in the batch (``len`` is the tuple's, as for any NamedTuple)."""
        return len(self.size)

    def __reduce__(self) -> tuple:
        # A trace crosses from a worker to the main process with its batch: the steps' tensors
        # travel as numpy arrays (a tensor would take a shared-memory file descriptor each).
        steps = [(tuple(t.cpu().numpy() for t in s.y), tuple(t.cpu().numpy() for t in s.x),
                  s.nearest_exact.cpu().numpy(), s.mask_fill) for s in self.steps]
        return _trace_from_arrays, (steps, self.source_size, self.size, self.leaf_steps, self.zeroed)

    def to(self, device: torch.device | str) -> TargetGeometry:
        """The same geometry with the steps' tensors on ``device``: host tensors go over in one
        copy through pinned memory (``upload``), so the host never waits for the stream's work."""
        flat = [t for s in self.steps for t in (*s.y, *s.x, s.nearest_exact)]
        if all(t.device == torch.device(device) for t in flat):
            return self
        moved = iter(upload(flat, torch.device(device)))
        n = len(AxisStep._fields)
        steps = []
        for s in self.steps:
            y, x = AxisStep(*(next(moved) for _ in range(n))), AxisStep(*(next(moved) for _ in range(n)))
            steps.append(TargetStep(y, x, next(moved), s.mask_fill))
        return self._replace(steps=tuple(steps))

    def select(self, index: np.ndarray) -> TargetGeometry:
        """The geometry of samples ``index`` (host ints, repeats allowed): one row per entry, e.g.
        per box or mask tensor of a sample, so that entries map through their sample's steps."""
        index = np.asarray(index, dtype=np.int64)
        if len(index) == self.batch and np.array_equal(index, np.arange(self.batch)):
            return self  # (one entry per sample, in order: a detection batch's boxes)
        rows = torch.from_numpy(index)

        def pick(t: torch.Tensor) -> torch.Tensor:
            return t[rows.to(t.device)] if t.device.type == "cpu" else t.index_select(0, _on(t.device, index))

        steps = tuple(TargetStep(AxisStep(*map(pick, s.y)), AxisStep(*map(pick, s.x)), pick(s.nearest_exact),
                                 s.mask_fill) for s in self.steps)
        source = None if self.source_size is None else self.source_size[index]
        return TargetGeometry(steps, source, self.size[index], self.leaf_steps)

    @staticmethod
    def cat(parts: Sequence[TargetGeometry]) -> TargetGeometry:
        """The geometry of the samples of ``parts`` in order: traces of one plan (a batch built in
        parts, ``_executor/_worker.merge_parts``), on one device. A trace holds a step only where
        one of its samples moved (a flip none of its samples drew is no step): a part without a
        step that another part has gets that step as the identity, as its samples would have in
        a trace of the whole batch."""
        first = parts[0]
        if any(len(p.leaf_steps) != len(first.leaf_steps) for p in parts):
            raise ValueError("traces of different plans cannot be put together")
        if any(p.leaf_steps != first.leaf_steps or len(p.steps) != len(first.steps) for p in parts):
            parts = _aligned_steps(parts)
            first = parts[0]

        def axis(axes: list[AxisStep]) -> AxisStep:
            return AxisStep(*(torch.cat(col) for col in zip(*axes)))

        steps = tuple(TargetStep(axis([p.steps[k].y for p in parts]), axis([p.steps[k].x for p in parts]),
                                 torch.cat([p.steps[k].nearest_exact for p in parts]), first.steps[k].mask_fill)
                      for k in range(len(first.steps)))
        source = None if any(p.source_size is None for p in parts) else \
            np.concatenate([p.source_size for p in parts])
        zeroed = tuple((position, np.concatenate([dict(p.zeroed)[position] for p in parts]))
                       for position, _ in first.zeroed)
        return TargetGeometry(steps, source, np.concatenate([p.size for p in parts]), first.leaf_steps, zeroed)

    def put(self, index: int, one: TargetGeometry, counts: Sequence[int] | None = None) -> TargetGeometry:
        """This batch's geometry with sample ``index``'s replaced by ``one`` (a trace of one sample,
        of the same plan: on_error's replacement found on the GPU, ``_executor/_decode.py``).
        ``counts``: each sample's boxes here, needed where a step zeroed boxes (``zeroed`` holds a
        flag per box of the batch)."""
        if one.batch != 1:
            raise ValueError(f"put takes the trace of one sample, got {one.batch}")
        starts = None
        if self.zeroed:
            if counts is None:
                raise ValueError("this trace zeroes boxes: pass each sample's box count")
            starts = np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64))])

        def samples(start: int, stop: int) -> TargetGeometry:
            rows = self.select(np.arange(start, stop))
            zeroed = () if starts is None else \
                tuple((position, keep[starts[start]: starts[stop]]) for position, keep in self.zeroed)
            return rows._replace(zeroed=zeroed)

        return TargetGeometry.cat([g for g in (samples(0, index), one, samples(index + 1, self.batch)) if g.batch])

    def span(self, start: int, stop: int) -> TargetGeometry:
        """Steps ``start`` to ``stop`` alone (a trace on the host: the canvases are read from it)."""
        return TargetGeometry(self.steps[start:stop], self.canvas_after(start), self.canvas_after(stop))

    def canvas_after(self, k: int) -> np.ndarray:
        """``[B, 2]`` int64 (H, W) of the canvas after the first ``k`` steps (the source's for 0)."""
        if k == 0:
            if self.source_size is None:
                raise ValueError("the source size is not known (a folded geometry): trace the plan")
            return self.source_size
        if k == len(self.steps):
            return self.size
        s = self.steps[k - 1]
        return np.rint(torch.stack([s.y.size, s.x.size], dim=-1).cpu().numpy()).astype(np.int64)


def _aligned_steps(parts: Sequence[TargetGeometry]) -> list[TargetGeometry]:
    """``parts`` (traces of one plan) with the same steps: each leaf of the plan takes at most one
    step (``_Trace.watch``); where one part has a leaf's step, a part without it gets the identity
    there (what ``_leaf_step`` gives a sample the step leaves where it is)."""
    n_leaves = len(parts[0].leaf_steps)
    bounds = [(*p.leaf_steps, len(p.steps)) for p in parts]
    # the step of each leaf, per part (None: the part has none)
    own = [[p.steps[b[k]] if b[k + 1] > b[k] else None for k in range(n_leaves)] for p, b in zip(parts, bounds)]
    moved = [k for k in range(n_leaves) if any(o[k] is not None for o in own)]
    out = []
    for p, b, o in zip(parts, bounds, own):
        steps = []
        for k in moved:
            if o[k] is not None:
                steps.append(o[k])
                continue
            fill = next(x[k] for x in own if x[k] is not None).mask_fill
            canvas = torch.from_numpy(p.canvas_after(b[k]).astype(np.float64))
            steps.append(_identity_step(canvas, fill))
        leaf_steps = tuple(sum(1 for m in moved if m < k) for k in range(n_leaves))
        out.append(p._replace(steps=tuple(steps), leaf_steps=leaf_steps))
    return out


def _identity_step(canvas: torch.Tensor, mask_fill: float) -> TargetStep:
    """A step that leaves every sample where it is: ``canvas`` ``[B, 2]`` float64 (H, W)."""
    def axis(size: torch.Tensor) -> AxisStep:
        zero = torch.zeros_like(size)
        return AxisStep(zero, zero, torch.ones_like(size), torch.zeros(len(size), dtype=torch.bool), size,
                        torch.full_like(size, -np.inf), torch.full_like(size, np.inf))

    return TargetStep(axis(canvas[:, 0]), axis(canvas[:, 1]), torch.zeros(len(canvas), dtype=torch.bool), mask_fill)


def _trace_from_arrays(steps: list, source_size: Any, size: Any, leaf_steps: tuple, zeroed: tuple) -> TargetGeometry:
    """``TargetGeometry.__reduce__``'s inverse."""
    def axis(arrays: tuple) -> AxisStep:
        return AxisStep(*(torch.from_numpy(a) for a in arrays))

    return TargetGeometry(tuple(TargetStep(axis(y), axis(x), torch.from_numpy(e), f) for y, x, e, f in steps),
                          source_size, size, leaf_steps, zeroed)


TargetGeometryLike = Union[TargetGeometry, G.BatchGeometry, BatchParams, torch.Tensor]


def _on(device: torch.device, *arrays: Any) -> Any:
    """Host arrays on ``device`` (``_on_device``); one array gives one tensor."""
    out = _on_device(arrays, device)
    return out[0] if len(arrays) == 1 else out


def _on_device(arrays: Sequence[Any], device: torch.device | str) -> list[torch.Tensor]:
    """Arrays or tensors as new tensors on ``device``: on a GPU through one pinned copy
    (``upload``; a copy from pageable memory could make the host wait for the stream), on the
    host (the CPU path) as plain copies."""
    device = torch.device(device)
    if device.type == "cpu":
        return [torch.as_tensor(a if isinstance(a, torch.Tensor) else np.asarray(a)).to(device, copy=True)
                for a in arrays]
    return upload([a if isinstance(a, torch.Tensor) else np.asarray(a) for a in arrays], device)


class MappedBoxes(NamedTuple):
    """Boxes after ``map_boxes``."""

    #: ``[N, 4]`` in the input's format and dtype, on its device
    boxes: torch.Tensor
    #: ``[B, 2]`` int64 (H, W) canvas of each sample's boxes (the output image's size), on the host
    canvas_size: torch.Tensor


# --------------------------------------------------------------------------- #
# Geometry in: folded maps and traced steps
# --------------------------------------------------------------------------- #

def _folded_axis(origin: torch.Tensor, step: torch.Tensor, size: torch.Tensor, valid0: torch.Tensor,
                 valid1: torch.Tensor) -> AxisStep:
    """One axis of a folded map (``source = origin + step * out``) as a single step."""
    flip = step < 0
    scale = step.abs()
    offset = torch.where(flip, origin - scale * size, origin)
    return AxisStep(offset=offset, box_offset=offset, scale=scale, flip=flip, size=size, lo=valid0, hi=valid1)


def _output_size(size: Any, n: int) -> np.ndarray:
    if size is None:
        raise ValueError("the kernel's parameter rows do not hold the output size: pass size=plan.out_size "
                         "(or a [B, 2] array of per-sample sizes)")
    out = np.asarray(size.cpu() if isinstance(size, torch.Tensor) else size, dtype=np.float64)
    if out.shape == (2,):
        out = np.broadcast_to(out, (n, 2))
    if out.shape != (n, 2):
        raise ValueError(f"size must be (H, W) or one (H, W) per sample ([{n}, 2]), got shape {out.shape}")
    return np.rint(out).astype(np.int64)


def target_geometry(geometry: TargetGeometryLike, size: Any = None) -> TargetGeometry:
    """``geometry`` as a ``TargetGeometry`` (a folded one becomes a single step).

    ``size``: the output ``(H, W)`` (or ``[B, 2]``), needed only for parameter rows
    (``BatchParams`` or the ``[B, layout.NUM_PARAMS]`` tensor), which keep their device.
    """
    if isinstance(geometry, TargetGeometry):
        return geometry
    if isinstance(geometry, G.BatchGeometry):
        def col(name: str) -> torch.Tensor:
            return torch.as_tensor(np.asarray(getattr(geometry, name), dtype=np.float64))

        out = np.stack([np.asarray(geometry.height), np.asarray(geometry.width)], axis=-1).reshape(-1, 2)
        filt = col("filter")
    else:
        rows = geometry.params if isinstance(geometry, BatchParams) else geometry
        if not isinstance(rows, torch.Tensor) or rows.ndim != 2 or rows.shape[1] != layout.NUM_PARAMS:
            raise TypeError(f"geometry must be a TargetGeometry, a BatchGeometry, a BatchParams or "
                            f"[B, {layout.NUM_PARAMS}] kernel parameter rows, got "
                            f"{getattr(rows, 'shape', type(rows).__name__)}")

        def col(name: str) -> torch.Tensor:
            return rows[:, layout.column(name)].double()

        out = _output_size(size, rows.shape[0])
        filt = col("filter")
    height = torch.as_tensor(out[:, 0], dtype=torch.float64, device=filt.device)
    width = torch.as_tensor(out[:, 1], dtype=torch.float64, device=filt.device)
    step = TargetStep(
        y=_folded_axis(col("origin_y"), col("step_y"), height, col("valid_y0"), col("valid_y1")),
        x=_folded_axis(col("origin_x"), col("step_x"), width, col("valid_x0"), col("valid_x1")),
        nearest_exact=(filt == layout.FILTER_NEAREST_EXACT) & _masks_take_nearest_exact(),
    )
    return TargetGeometry((step,), None, np.rint(np.asarray(out, dtype=np.float64)).astype(np.int64))


class _Snapshot(NamedTuple):
    """The per-sample fields of a ``BatchGeometry`` a step is read from (copies)."""

    origin_y: np.ndarray
    origin_x: np.ndarray
    step_y: np.ndarray
    step_x: np.ndarray
    height: np.ndarray
    width: np.ndarray
    filter: np.ndarray

    @classmethod
    def of(cls, g: G.BatchGeometry) -> _Snapshot:
        return cls(*(np.array(getattr(g, name), dtype=np.float64) for name in cls._fields))


def _leaf_step(before: _Snapshot, after: _Snapshot, mask_nearest_only: bool, box_center_crop: bool) -> TargetStep:
    """The step one transform took, from the geometry before and after it.

    A transform's map from its output to its input is the ratio of the folded maps
    (``after = before o step``): ``step = after.step / before.step`` and
    ``offset = (after.origin - before.origin) / before.step``, read as a crop, a
    resize, then a mirror, which is what every geometry transform does. A step that
    crops or pads (moves the origin or changes the extent) clamps boxes to its
    canvas, as torchvision's crop, resized_crop and pad do; a resize or a flip does not.
    ``mask_nearest_only``: torchvision resizes this transform's masks with NEAREST whatever
    its mode; ``box_center_crop``: its boxes take torchvision's center-crop box anchor.
    """
    axes = {}
    crops = np.zeros(len(after.height), dtype=bool)
    for a in ("y", "x"):
        size_in = before.height if a == "y" else before.width
        size_out = after.height if a == "y" else after.width
        ratio = getattr(after, f"step_{a}") / getattr(before, f"step_{a}")
        shift = (getattr(after, f"origin_{a}") - getattr(before, f"origin_{a}")) / getattr(before, f"step_{a}")
        flip = ratio < 0
        scale = np.abs(ratio)
        offset = np.where(flip, shift - scale * size_out, shift)
        extent = scale * size_out  # the crop's size in the input
        tol = _WHOLE_ABS + _WHOLE_REL * extent
        crops |= (np.abs(offset) > tol) | (np.abs(extent - size_in) > tol)
        box_offset = np.round((size_in - size_out) / 2.0) if box_center_crop else offset
        axes[a] = (offset, box_offset, scale, flip, size_out)
    steps = {}
    for a, (offset, box_offset, scale, flip, size_out) in axes.items():
        lo = np.where(crops, 0.0, -np.inf)
        hi = np.where(crops, size_out, np.inf)
        steps[a] = AxisStep(*(torch.as_tensor(v) for v in (offset, box_offset, scale, flip, size_out, lo, hi)))
    exact = (after.filter == layout.FILTER_NEAREST_EXACT) & (not mask_nearest_only) & _masks_take_nearest_exact()
    return TargetStep(steps["y"], steps["x"], torch.as_tensor(exact))


def _moved(before: _Snapshot, after: _Snapshot) -> bool:
    """Whether a transform moved the geometry (a resize to the same size does not)."""
    return any(not np.array_equal(getattr(before, f), getattr(after, f)) for f in _Snapshot._fields if f != "filter")


def mask_fill(fill: Any) -> float:
    """What torchvision pads a ``tv_tensors.Mask`` with, from a transform's ``fill``: a number,
    None (0) or a dict keyed by type (its ``tv_tensors.Mask`` entry, else ``"others"``, else 0).
    Raises ValueError for a sequence, which torchvision's ``pad`` of a Mask refuses."""
    if isinstance(fill, dict):
        entries = {getattr(k, "__name__", k): v for k, v in fill.items()}
        fill = entries.get("Mask", entries.get("others", 0))
    if fill is None:
        return 0.0
    if isinstance(fill, (list, tuple)):
        raise ValueError(f"pads masks with fill={list(fill)}, a sequence, which torchvision's pad of a Mask refuses "
                         f"(\"Non-scalar fill value is not supported\"); give masks one number: "
                         f"fill={{tv_tensors.Mask: 0, 'others': ...}}")
    return float(fill)


def step_mask_fill(t: Any) -> float:
    """The Mask fill of transform ``t``'s step (``TargetStep.mask_fill``): its ``fill``'s (``mask_fill``);
    0 for a step without one (CenterCrop larger than the image pads with zeros) and for the detection
    reference's FixedSizeCrop (which pads masks with zeros whatever its fill). ValueError for a sequence.
    (RandomApply and the other containers hold no step that pads: flips, colour and warps only.)"""
    if isinstance(t, FixedSizeCrop):
        return 0.0
    return mask_fill(getattr(t, "fill", 0))


class BoxTrack:
    """The samples' boxes during a draw (``Plan._draw(..., boxes=)``), for a step that draws its
    parameters from them (RandomIoUCrop reads ``geometry.boxes``).

    XYXY float64 on the host, one block of rows per sample, moved through each geometry
    step as ``map_boxes`` moves them (clamped at crops; the step read from the geometry
    before and after it, as ``trace_plan`` reads it). A step may set boxes to zeros after
    it (``zero``), as RandomIoUCrop does with the boxes whose centre its crop leaves out;
    ``zeroed`` records where.
    """

    def __init__(self, boxes: Sequence[np.ndarray]) -> None:
        rows = [np.asarray(b, dtype=np.float64).reshape(-1, 4) for b in boxes]
        self.counts = np.array([len(b) for b in rows], dtype=np.int64)
        self.xyxy = np.concatenate(rows) if rows else np.zeros((0, 4))
        self._sample = np.repeat(np.arange(len(rows)), self.counts)
        self._keep: np.ndarray | None = None
        #: ``(leaf position, keep)`` of each step that zeroed boxes (``TargetGeometry.zeroed``)
        self.zeroed: list[tuple[int, np.ndarray]] = []

    def per_sample(self) -> list[np.ndarray]:
        """Each sample's ``[n, 4]`` XYXY boxes where the draw stands."""
        return np.split(self.xyxy, np.cumsum(self.counts)[:-1])

    def zero(self, keep: np.ndarray) -> None:
        """After the step being applied: set the boxes where ``keep`` (bool, one per box) is False to zeros."""
        self._keep = np.asarray(keep, dtype=bool)

    def before(self, g: G.BatchGeometry) -> _Snapshot:
        return _Snapshot.of(g)

    def after(self, before: _Snapshot, g: G.BatchGeometry, t: Any, position: int) -> None:
        """The boxes through the step leaf ``position`` (``t``) took from ``before`` to ``g``."""
        after = _Snapshot.of(g)
        if len(self.xyxy) and _moved(before, after):
            step = _leaf_step(before, after, isinstance(t, _MASK_ALWAYS_NEAREST), isinstance(t, _BOX_CENTER_CROP))
            b = self.xyxy
            x0, x1 = _box_axis(b[:, 0], b[:, 2], step.x, self._sample, True)
            y0, y1 = _box_axis(b[:, 1], b[:, 3], step.y, self._sample, True)
            self.xyxy = np.stack([x0, y0, x1, y1], axis=-1)
        if self._keep is not None:
            self.xyxy[~self._keep] = 0.0
            self.zeroed.append((position, self._keep))
            self._keep = None


class _Trace:
    """The steps of one draw, recorded by watching ``Plan._draw`` (``trace_plan``, ``draw_and_trace``)."""

    def __init__(self, plan: Plan, sizes: np.ndarray, keys: np.ndarray, boxes: Sequence[np.ndarray] | None) -> None:
        self.sizes = np.asarray(sizes, dtype=np.float64).reshape(-1, 2)
        if len(keys) != len(self.sizes):
            raise ValueError(f"trace_plan: {len(self.sizes)} sizes but {len(keys)} keys")
        self.steps: list[TargetStep] = []
        self.leaf_steps: list[int] = []
        self.track = BoxTrack(boxes) if boxes is not None and plan.draws_from_boxes else None
        self.g: G.BatchGeometry | None = None

    def watch(self, t: Any, g: G.BatchGeometry, p: Any, run: Any) -> None:
        self.g = g
        self.leaf_steps.append(len(self.steps))
        if t.stage == "program":
            region = run()
            warps = np.isin(region[..., layout.SLOT_OP], _WARP_OPS).any(axis=1)
            if warps.any():
                raise NotImplementedError(
                    f"{t!r} warps sample {int(np.argmax(warps))} of the batch: boxes and masks do not follow the "
                    f"augment program's warps yet; leave warps out of a detection/segmentation pipeline")
            return
        before = _Snapshot.of(g)
        run()
        after = _Snapshot.of(g)
        if _moved(before, after):
            step = _leaf_step(before, after, isinstance(t, _MASK_ALWAYS_NEAREST), isinstance(t, _BOX_CENTER_CROP))
            try:
                fill = step_mask_fill(t)
            except ValueError:  # TargetPlan.refuse refuses it before any mask is mapped
                fill = 0.0
            self.steps.append(step._replace(mask_fill=fill))

    def result(self, g: G.BatchGeometry) -> TargetGeometry:
        out = np.stack([g.height, g.width], axis=-1)
        return TargetGeometry(tuple(self.steps), np.rint(self.sizes).astype(np.int64),
                              np.rint(out).astype(np.int64), tuple(self.leaf_steps),
                              tuple(self.track.zeroed) if self.track is not None else ())


def trace_plan(plan: Plan, sizes: np.ndarray, keys: np.ndarray,
               boxes: Sequence[np.ndarray] | None = None) -> TargetGeometry:
    """The geometry steps ``plan`` draws for images of ``sizes`` (``[B, 2]`` H, W) with
    sample ``keys`` (and, for a plan that draws from boxes, each sample's XYXY ``boxes``):
    the same draw as ``plan.params(sizes, keys, BoxTrack(boxes))``, step by step.

    Runs ``Plan._draw`` itself (same random streams, same steps) and records one
    ``TargetStep`` per transform that moved the geometry. Raises NotImplementedError when a sample draws a warp of the augment
    program (RandomAffine, RandomPerspective, RandomRotation, an auto-augment
    shear/translate/rotate), which boxes and masks do not follow yet.
    """
    keys = np.asarray(keys)
    trace = _Trace(plan, sizes, keys, boxes)
    slots = np.zeros((len(keys), plan.n_slots, layout.SLOT_WIDTH), dtype=np.float32)
    return trace.result(plan._draw(trace.sizes, keys, slots, trace.watch, trace.track))


def draw_and_trace(plan: Plan, sizes: np.ndarray, keys: np.ndarray,
                   boxes: Sequence[np.ndarray] | None = None) -> tuple[BatchParams, TargetGeometry]:
    """``plan.params`` and ``trace_plan`` of the same batch from one draw (the worker's, where the
    targets hold boxes or masks: the main process then maps them without drawing again)."""
    keys = np.asarray(keys)
    trace = _Trace(plan, sizes, keys, boxes)
    params = plan.params(trace.sizes, keys, trace.track, trace.watch)
    return params, trace.result(trace.g if trace.g is not None else G.BatchGeometry.identity(trace.sizes))


# --------------------------------------------------------------------------- #
# Boxes
# --------------------------------------------------------------------------- #

def _box_format(fmt: Any, boxes: Any) -> str:
    if fmt is None:
        fmt = getattr(boxes, "format", "XYXY")  # a tv_tensors.BoundingBoxes carries its own
    name = str(getattr(fmt, "name", fmt)).upper()
    if name not in BOX_FORMATS:
        raise ValueError(f"box format {fmt!r} is not mapped; use one of {list(BOX_FORMATS)} "
                         f"(rotated formats are not supported yet)")
    return name


def _to_xyxy(b: torch.Tensor, fmt: str) -> torch.Tensor:
    if fmt == "XYWH":
        x, y, w, h = b.unbind(-1)
        return torch.stack([x, y, x + w, y + h], dim=-1)
    if fmt == "CXCYWH":
        cx, cy, w, h = b.unbind(-1)
        return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)
    return b


def _from_xyxy(b: torch.Tensor, fmt: str) -> torch.Tensor:
    x0, y0, x1, y1 = b.unbind(-1)
    if fmt == "XYWH":
        return torch.stack([x0, y0, x1 - x0, y1 - y0], dim=-1)
    if fmt == "CXCYWH":
        return torch.stack([0.5 * (x0 + x1), 0.5 * (y0 + y1), x1 - x0, y1 - y0], dim=-1)
    return b


def _box_axis(c0: np.ndarray, c1: np.ndarray, ax: AxisStep, sample: np.ndarray, clamp: bool,
              dtype: torch.dtype | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Both corners of every box along one axis through one step (``sample``: each box's sample),
    on the host.

    In the boxes' dtype, as torchvision computes them: the crop's offset subtracted, then
    the resize's ratio (``new / old``, a float32 tensor in torchvision) multiplied in, the
    mirror taken from the canvas size. Its float32 rounding decides which boxes at a
    canvas edge SanitizeBoundingBoxes keeps (``40.0000038 > 40`` is dropped), so it is
    repeated rather than computed more precisely. numpy's IEEE arithmetic gives torch's
    values; ``dtype``: the boxes' torch dtype where numpy does not compute as torch does
    (float16, bfloat16), the corners then held in float32 and rounded to it by torch after
    every operation, as torch's own kernels do.
    """
    if dtype is None:
        rnd = _same

        def cast(v: np.ndarray) -> np.ndarray:
            return v.astype(c0.dtype)
    else:
        def rnd(v: np.ndarray) -> np.ndarray:  # (torch's own conversion, from float32 or float64)
            return torch.from_numpy(np.ascontiguousarray(v)).to(dtype).float().numpy()

        cast = rnd

    def col(t: torch.Tensor) -> np.ndarray:
        return t.cpu().numpy()[sample]

    offset, size = cast(col(ax.box_offset)), cast(col(ax.size))
    ratio = cast((1.0 / col(ax.scale)).astype(np.float32))
    a, b = rnd(rnd(c0 - offset) * ratio), rnd(rnd(c1 - offset) * ratio)
    flip = col(ax.flip)
    a, b = np.where(flip, rnd(size - b), a), np.where(flip, rnd(size - a), b)
    if clamp:  # (torch.clamp: max, then min; NaN stays NaN)
        lo, hi = cast(col(ax.lo)), cast(col(ax.hi))
        a, b = np.minimum(np.maximum(a, lo), hi), np.minimum(np.maximum(b, lo), hi)
    return a, b


def _same(a: np.ndarray) -> np.ndarray:
    return a


#: torch dtypes of boxes that numpy computes in directly (``_box_axis``)
_NUMPY_FLOATS = (torch.float32, torch.float64)


def map_boxes(boxes: torch.Tensor, counts: torch.Tensor | Sequence[int], geometry: TargetGeometryLike, *,
              format: Any = None, size: Any = None, clamp: bool = True) -> MappedBoxes:
    """Boxes of a whole batch through each sample's geometry, as torchvision.transforms.v2 maps them.

    Args:
        boxes: ``[N, 4]`` float boxes of every sample, sample after sample (a
            ``tv_tensors.BoundingBoxes`` is read as a plain tensor, its format kept).
        counts: ``[B]`` boxes per sample (0 allowed); they sum to ``N``.
        geometry: the batch's geometry (see the module docstring).
        format: ``"XYXY"``, ``"XYWH"`` or ``"CXCYWH"`` (or the ``tv_tensors.BoundingBoxFormat``);
            default: the boxes' own, else XYXY. The result has the same format.
        size: the output ``(H, W)``, for kernel parameter rows only.
        clamp: clamp to the canvas of every crop, as torchvision does with a box's
            ``clamping_mode="soft"``/``"hard"`` (the same for axis-aligned boxes);
            False is ``clamping_mode=None``. Boxes that stay degenerate are kept
            (``SanitizeBoundingBoxes`` is a separate step).

    Returns ``MappedBoxes``: the boxes (same dtype, format and device) and each
    sample's new canvas size. Batched: no Python loop over samples or boxes. Computed on
    the host (numpy, a few microseconds an operation where torch takes several times that):
    boxes on a device are read back, which waits for it.

    Exactness: the arithmetic is torchvision's, step by step in the boxes' dtype
    (``_box_axis``); an XYWH or CXCYWH box is converted once at each end rather than
    at every step, which may differ in the last bit. From a folded geometry the clamp is to the valid window, which
    is the intersection of the crops' canvases; it differs from torchvision for boxes
    that reach outside their source image (torchvision leaves them alone until a crop,
    then clamps to that crop's canvas only) and, after a resize of zero padding
    (CenterCrop larger than the image, then Resize), by the valid window's rounding
    to whole pixels (up to half a pixel at the padding's edge). A ``trace_plan``
    geometry clamps at each crop step and has neither difference, except that a crop
    which keeps the whole canvas is not seen (torchvision's clamp there changes only
    boxes outside the image).
    """
    fmt = _box_format(format, boxes)
    if isinstance(boxes, torch.Tensor) and type(boxes) is not torch.Tensor:
        boxes = boxes.as_subclass(torch.Tensor)
    if not isinstance(boxes, torch.Tensor) or boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"boxes must be an [N, 4] tensor, got {getattr(boxes, 'shape', type(boxes).__name__)}")
    if not boxes.is_floating_point():
        raise TypeError(f"boxes must be floating point, got {boxes.dtype}: torchvision truncates integer boxes "
                        f"after every step, which one composed map cannot repeat; convert them with .float()")
    tg = target_geometry(geometry, size)
    device = boxes.device
    counts = np.asarray(counts.cpu() if isinstance(counts, torch.Tensor) else counts, dtype=np.int64)
    if counts.ndim != 1 or len(counts) != tg.batch:
        raise ValueError(f"counts must hold one count per sample ({tg.batch}), got shape {tuple(counts.shape)}")
    if int(counts.sum()) != boxes.shape[0]:
        raise ValueError(f"counts sum to {int(counts.sum())} but there are {boxes.shape[0]} boxes")
    canvas = torch.from_numpy(tg.size.copy())
    if boxes.shape[0] == 0:
        return MappedBoxes(boxes.clone(), canvas)
    sample = np.repeat(np.arange(tg.batch), counts)
    xyxy = _to_xyxy(boxes, fmt).detach().cpu()
    native = boxes.dtype in _NUMPY_FLOATS
    held = xyxy.numpy() if native else xyxy.float().numpy()
    x0, y0, x1, y1 = held[:, 0], held[:, 1], held[:, 2], held[:, 3]
    for step in tg.steps:
        x0, x1 = _box_axis(x0, x1, step.x, sample, clamp, None if native else boxes.dtype)
        y0, y1 = _box_axis(y0, y1, step.y, sample, clamp, None if native else boxes.dtype)
    out = _from_xyxy(torch.from_numpy(np.stack([x0, y0, x1, y1], axis=-1)).to(boxes.dtype), fmt)
    return MappedBoxes(out.to(device), canvas)


# --------------------------------------------------------------------------- #
# Masks
# --------------------------------------------------------------------------- #

def _nearest(o: torch.Tensor, in_size: torch.Tensor, out_size: torch.Tensor, half: torch.Tensor) -> torch.Tensor:
    """torch's nearest source index of output index ``o`` for a resize ``in_size -> out_size``:
    ``min(floor((o + half) * s), in_size - 1)`` with ``s = in_size / out_size``, all in float32
    as ``interpolate`` computes it (``half``: 0.5 for nearest-exact, else 0)."""
    s = in_size.float() / out_size.float()
    return torch.minimum(((o.float() + half) * s).floor().long(), in_size.long() - 1)


def _mask_axis(o: torch.Tensor, valid: torch.Tensor, ax: AxisStep, exact: torch.Tensor,
               in_size: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices ``o`` (``[B, L]`` int64) of a step's output into its input, and where they are
    inside it (outside: padding, which ``map_masks`` fills). ``in_size``: ``[B]`` float64 input sizes."""
    col = {name: getattr(ax, name)[:, None] for name in ("offset", "scale", "flip", "size", "lo", "hi")}
    offset, scale, size = col["offset"], col["scale"], col["size"]
    n_in = in_size[:, None]
    valid = valid & (o >= col["lo"]) & (o < col["hi"])
    o = torch.where(col["flip"], size.long() - 1 - o, o)
    half = torch.where(exact[:, None], 0.5, 0.0).float()
    whole = _WHOLE_ABS + _WHOLE_REL * (offset.abs() + scale * size)
    # crop at a whole offset, then resize the crop (crop, center_crop, pad, resized_crop)
    extent = (scale * size).round()
    crop_first = ((offset - offset.round()).abs() <= whole) & ((scale * size - extent).abs() <= whole)
    i_crop = offset.round().long() + _nearest(o, extent, size, half)
    # resize, then crop at a whole offset of the resized image (Resize + CenterCrop folded into one step)
    shift = (offset / scale).round()
    resized = (n_in / scale).round()
    resize_first = ~crop_first & ((offset / scale - shift).abs() <= whole / scale)
    p = o + shift.long()
    i_resize = _nearest(p, n_in, resized, half)
    # anything else (several resizes folded into one map): nearest of the map itself, in float64
    i_map = (offset + scale * (o.double() + half.double())).floor().long()
    idx = torch.where(crop_first, i_crop, torch.where(resize_first, i_resize, i_map))
    inside = (idx >= 0) & (idx < n_in.long()) & (~resize_first | ((p >= 0) & (p < resized.long())))
    # an index outside is read from pixel 0 (any pixel of the input would do) and zeroed later
    return torch.where(inside, idx, 0), valid & inside


def _as_channels(mask: torch.Tensor, i: int) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor) or mask.ndim < 2:
        raise ValueError(f"mask of sample {i} must be a tensor [..., H, W], got "
                         f"{getattr(mask, 'shape', type(mask).__name__)}")
    if mask.is_floating_point() or mask.is_complex():
        raise TypeError(f"mask of sample {i} is {mask.dtype}; masks are label maps (uint8, bool or an integer "
                        f"dtype)")
    if type(mask) is not torch.Tensor:
        mask = mask.as_subclass(torch.Tensor)  # a tv_tensors.Mask
    return mask.reshape(-1, mask.shape[-2], mask.shape[-1])


def map_masks(masks: Sequence[torch.Tensor], geometry: TargetGeometryLike, *, size: Any = None) -> list[torch.Tensor]:
    """Each sample's masks through its geometry, as torchvision.transforms.v2 maps ``tv_tensors.Mask``.

    Args:
        masks: one tensor per sample, ``[H, W]`` or ``[..., H, W]`` (e.g. ``[K, H, W]``,
            ``K`` may be 0), uint8, bool or integer, all of one dtype, on one device.
            ``H, W`` must be the sample's image size where ``geometry`` knows it
            (``trace_plan``), else it is taken as the image size.
        geometry: the batch's geometry (see the module docstring).
        size: the output ``(H, W)``, for kernel parameter rows only.

    Returns one tensor per sample, its leading dims kept and ``H, W`` the sample's
    output size: nearest sampling (NEAREST_EXACT where torchvision's Resize was given
    it), outside the image (padding) the Mask fill of the step that padded it (0 from a
    folded geometry), as torchvision's crop, pad, resize and flip give for a Mask. Exact
    for a ``trace_plan`` geometry; from a folded one see the module docstring.

    Batched: the index maps are built for the whole batch per axis, and one pair of
    ``gather`` calls reads every mask. Samples whose masks differ in size are first
    placed in one zero-padded buffer (a slice copy per sample); with different output
    sizes the outputs are views into a buffer of the largest one. Nothing waits for the
    device: host values reach it through ``upload``.
    """
    tg = target_geometry(geometry, size)
    if len(masks) != tg.batch:
        raise ValueError(f"{len(masks)} masks for a batch of {tg.batch} samples")
    if len(masks) == 0:
        return []
    chans = [_as_channels(m, i) for i, m in enumerate(masks)]
    device, dtype = chans[0].device, chans[0].dtype
    for i, c in enumerate(chans):
        if c.device != device or c.dtype != dtype:
            raise ValueError(f"mask of sample {i} is {c.dtype} on {c.device}, sample 0's {dtype} on {device}; "
                             f"pass one dtype on one device")
    src_hw = np.array([c.shape[1:] for c in chans], dtype=np.int64)
    if tg.source_size is not None:
        bad = np.flatnonzero((src_hw != tg.source_size).any(axis=1))
        if len(bad):
            i = int(bad[0])
            raise ValueError(f"mask of sample {i} is {tuple(src_hw[i])} (H, W) but its image is "
                             f"{tuple(tg.source_size[i])}; a mask must cover its image pixel for pixel")
    tg = tg.to(device)
    n = len(chans)
    out_hw = tg.size
    hmax, wmax = int(out_hw[:, 0].max()), int(out_hw[:, 1].max())
    iy = torch.arange(hmax, device=device).expand(n, hmax)
    ix = torch.arange(wmax, device=device).expand(n, wmax)
    vy = torch.ones(n, hmax, dtype=torch.bool, device=device)
    vx = torch.ones(n, wmax, dtype=torch.bool, device=device)
    k = np.array([c.shape[0] for c in chans], dtype=np.int64)
    src_hw_d, k_d = _on(device, src_hw.astype(np.float64), k)
    # each step's input is the previous step's output; the first step's is the mask itself
    in_sizes = [src_hw_d]
    for step in tg.steps[:-1]:
        in_sizes.append(torch.stack([step.y.size, step.x.size], dim=-1))
    # a pixel outside takes the fill of the last step (in pipeline order) whose input it is outside of:
    # per axis, the step where its index first leaves, walking back; per pixel, the later axis's
    fills = [float(step.mask_fill) for step in tg.steps]
    if any(fills):
        left_y = torch.full((n, hmax), -1, dtype=torch.int64, device=device)
        left_x = torch.full((n, wmax), -1, dtype=torch.int64, device=device)
    for pos in reversed(range(len(tg.steps))):
        step, in_hw = tg.steps[pos], in_sizes[pos]
        iy, now_y = _mask_axis(iy, vy, step.y, step.nearest_exact, in_hw[:, 0])
        ix, now_x = _mask_axis(ix, vx, step.x, step.nearest_exact, in_hw[:, 1])
        if any(fills):
            left_y = torch.where(vy & ~now_y, pos, left_y)
            left_x = torch.where(vx & ~now_x, pos, left_x)
        vy, vx = now_y, now_x

    total = int(k.sum())
    lead = [m.shape[:-2] if m.ndim > 2 else None for m in masks]
    if total == 0:
        outs = [torch.zeros(c.shape[0], int(h), int(w), dtype=dtype, device=device) for c, (h, w) in zip(chans, out_hw)]
        return [o.reshape(*(s or ()), *o.shape[1:]) for o, s in zip(outs, lead)]
    sample = torch.repeat_interleave(torch.arange(n, device=device), k_d, output_size=total)
    hs, ws = int(src_hw[:, 0].max()), int(src_hw[:, 1].max())
    if (src_hw == src_hw[0]).all():
        src = torch.cat(chans)
    else:
        # one zero-padded [C, hs, ws] buffer, a slice copy per sample: a boolean index would
        # make the host wait for the device (it counts the selected elements first)
        src = torch.zeros(total, hs, ws, dtype=dtype, device=device)
        at = 0
        for c in chans:
            src[at: at + c.shape[0], : c.shape[1], : c.shape[2]].copy_(c)
            at += c.shape[0]
    rows = src.gather(1, iy[sample][:, :, None].expand(total, hmax, src.shape[2]))
    out = rows.gather(2, ix[sample][:, None, :].expand(total, hmax, wmax))
    outside = ~(vy[:, :, None] & vx[:, None, :])
    if any(fills):
        # torchvision casts the fill to the mask's dtype (255 -> True for a bool mask, 3.7 -> 3 for int64)
        table = _on(device, np.asarray(fills, dtype=np.float64)).to(dtype)
        at = torch.maximum(left_y[:, :, None], left_x[:, None, :]).clamp_(min=0)
        out = torch.where(outside[sample], table[at][sample], out)
    else:
        out = out.masked_fill(outside[sample], 0)
    result = []
    for part, (h, w), s in zip(out.split(k.tolist()), out_hw, lead):
        part = part[:, : int(h), : int(w)]
        result.append(part.reshape(*s, *part.shape[1:]) if s is not None else part[0])
    return result
