"""The targets' side of a pipeline: boxes and masks that travel with their image.

A dataset item's target may hold geometry: ``tv_tensors.BoundingBoxes`` and
``tv_tensors.Mask``, alone or anywhere in a dict, tuple or list, as torchvision's
detection and segmentation datasets give them (``{"boxes", "labels", "masks",
"image_id", ...}``). Every geometry step of the pipeline moves them exactly as
``torchvision.transforms.v2`` does for the same drawn parameters; every other leaf
passes through untouched (a tensor goes to the batch's device). The target-only
steps, ``SanitizeBoundingBoxes``, ``ClampBoundingBoxes`` and
``ConvertBoundingBoxFormat`` (``_box_ops.py``), run on the targets where they stand
in the pipeline.

``TargetPlan.map`` maps a batch's targets after its kernel:

1. Every sample's geometry, step by step: the worker records it with the draw of the
   kernel's parameters (``_targets.draw_and_trace``) and ships it with the batch;
   ``_targets.trace_plan`` draws it again only for a batch put together from parts or
   with a replacement found on the GPU. One step per geometry transform, where each
   target-only step stands among them, and which boxes RandomIoUCrop zeroes. The
   steps (not the folded map of the kernel's rows) make masks exact: nearest
   sampling does not compose.
2. The boxes of the whole batch are one ragged ``[N, 4]`` tensor, one block of rows
   per BoundingBoxes, mapped by ``_targets.map_boxes`` through the steps up to the
   next target-only step, which runs on the whole tensor; and so on.
3. ``SanitizeBoundingBoxes`` keeps rows of the boxes, of the labels (its
   ``labels_getter``) and of every Mask with one row per box, as torchvision's does.
   Its result has a size only the device knows, so steps 2-3 run on the host: on the
   GPU path in the worker, from the trace of its draw (``part="boxes"``), which leaves
   the executor the masks (``part="masks"``) and nothing to wait for. Selecting rows
   commutes with resampling, so masks are selected first and mapped after, once. ``FixedSizeCrop`` (the detection reference's) drops the boxes
   its crop empties, with ``target["labels"]`` and ``target["masks"]``, the same way.
4. The masks are resampled through all the steps by ``_targets.map_masks``; a pixel a
   step pads takes that step's Mask fill (a ``fill`` dict's ``tv_tensors.Mask`` entry,
   or a plain fill, as torchvision pads masks; zeros for the detection reference's
   FixedSizeCrop). A ``ToDtype`` whose dict gives ``tv_tensors.Mask`` a dtype converts
   the masks (``scale`` does not apply to them, as in torchvision); the conversion is
   done once, before the masks are mapped, with the fills of the steps before it cast
   through the dtype they met, which is what converting in place gives.
5. Each target is rebuilt with its mapped leaves (a BoundingBoxes with its new
   ``canvas_size``, a Mask); the batch's targets are a ``TargetList``, never
   collated: the loop gets a list of per-sample targets (``_executor/_deliver.py``).

Checked per sample, in the worker, before the batch is packed (``TargetPlan.check``):
a mask whose size is not its image's, boxes that are not ``[N, 4]`` or whose
``canvas_size`` is not the image's size, labels that do not line up with the boxes
of a pipeline that sanitizes them: a ``SampleError`` naming the sample, which
``on_error`` handles. What is not supported yet raises TypeError or ValueError
naming the sample instead (``on_error`` does not skip it: every such sample would
fail): integer boxes (torchvision truncates them after every resize, which a
mapped composition cannot repeat), rotated formats, other tv_tensors (KeyPoints).

Refused at the first batch whose targets hold boxes or masks, whatever was drawn
(``TargetPlan.refuse``, a ValueError): the augment program's warps (RandomRotation,
RandomAffine, RandomPerspective and the auto-augment policies, which torchvision
itself refuses with boxes or masks), padding with a ``padding_mode`` (which
torchvision refuses with boxes; masks follow constant padding only here) and a Mask
fill that is a sequence (torchvision refuses it).
Targets are only known once a worker reads them, so the loader cannot refuse these
when it is built; the first batch refuses them every time, not only when a sample
happens to draw a warp.

One batch's BoundingBoxes share one format, one floating dtype and one
``clamping_mode``. ``ToPureTensor`` is a no-op here: boxes and masks keep their
tv_tensor types (torchvision's models take either).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten
from torchvision import tv_tensors

from ..errors import SampleError
from ._auto_augment import _AutoAugmentBase
from ._box_ops import (
    ClampBoundingBoxes, ConvertBoundingBoxFormat, SanitizeBoundingBoxes, _bounding_boxes, clamp_boxes, convert_boxes,
    default_label_key, sanitize_boxes,
)
from ._iou_crop import RandomIoUCrop
from ._plan import Plan, Transform
from ._random import _PerSample
from ._reference_geometry import FixedSizeCrop
from ._targets import (BOX_FORMATS, TargetGeometry, _on, _on_device, _to_xyxy, map_boxes, map_masks, step_mask_fill,
                       trace_plan)
from ._timm import _TimmOps
from ._transforms import ToDtype
from ._warp import _Warp

__all__ = ["BoxesMapped", "TargetList", "TargetPlan", "flat_keys", "flatten", "has_geometry", "target_tensors",
           "unflatten"]

#: target-only steps of a pipeline (they change no pixel)
TARGET_STEPS: tuple[type, ...] = (SanitizeBoundingBoxes, ClampBoundingBoxes, ConvertBoundingBoxFormat)
#: program transforms that move pixels (or may: the auto-augment policies' shear, translate, rotate)
_WARPS: tuple[type, ...] = (_Warp, _AutoAugmentBase, _TimmOps)
_SCALARS = (int, float, str, bytes, bool, np.integer, np.floating)


class BoxesMapped(NamedTuple):
    """What ``TargetPlan.map(part="boxes")`` leaves for ``part="masks"``: the ``(sample, leaf)`` of
    each Mask a SanitizeBoundingBoxes took for labels, with the trace steps it goes through
    (``_Boxes.frozen``), and the samples mapped whole since (a replacement found on the GPU)."""

    frozen: dict
    done: frozenset = frozenset()


class TargetList(list):
    """A batch's targets, one per sample, after their boxes and masks were mapped: a list that is
    never collated (``Delivery.settle_targets``) and crosses processes packed (``_wire.py``).
    ``tensors``: where known, the tensors whose storage holds every tensor of the targets (a
    packed batch's buffer), which ``target_tensors`` then returns without visiting the leaves."""

    tensors: tuple | None = None


#: the leaves a flat target dict holds (a detection target: one per sample, many per batch); anything
#: else (a container, a class registered as a pytree node) goes through tree_flatten
_LEAVES = (torch.Tensor, np.ndarray, int, float, str, bytes, type(None))


class _FlatDict(NamedTuple):
    """``flatten``'s spec of a flat dict: its keys."""

    keys: tuple


def flatten(target: Any) -> tuple[list, Any]:
    """``tree_flatten(target)``, without the pytree round trip for a flat dict (its values in
    order, as torch's pytree flattens a dict); ``unflatten`` undoes either."""
    if type(target) is dict and all(isinstance(v, _LEAVES) for v in target.values()):
        return list(target.values()), _FlatDict(tuple(target))
    return tree_flatten(target)


def unflatten(leaves: list, spec: Any) -> Any:
    """The target ``flatten`` gave ``(leaves, spec)`` for, with ``leaves``."""
    if isinstance(spec, _FlatDict):
        return dict(zip(spec.keys, leaves))
    return tree_unflatten(leaves, spec)


def flat_keys(spec: Any) -> tuple | None:
    """The keys of a flat dict ``flatten`` gave ``spec`` for (its leaves are the values in that
    order), else None."""
    return spec.keys if isinstance(spec, _FlatDict) else None


def has_geometry(target: Any) -> bool:
    """Whether ``target`` holds a BoundingBoxes or a Mask (anywhere in its dicts, tuples, lists)."""
    if target is None or isinstance(target, _SCALARS):
        return False
    if isinstance(target, torch.Tensor):
        return isinstance(target, (tv_tensors.BoundingBoxes, tv_tensors.Mask))
    return any(isinstance(leaf, (tv_tensors.BoundingBoxes, tv_tensors.Mask)) for leaf in flatten(target)[0])


def target_tensors(targets: Sequence[Any]) -> list[torch.Tensor]:
    """One tensor per distinct storage among the targets' tensors: what a consumer's stream must
    record (``record_stream``) and a fork keep alive."""
    known = getattr(targets, "tensors", None)
    if known is not None:
        return list(known)
    out, seen = [], set()
    with torch._C.DisableTorchFunctionSubclass():  # a tv_tensor's methods without its Python dispatch
        for target in targets:
            for leaf in flatten(target)[0]:
                if isinstance(leaf, torch.Tensor):
                    key = (leaf.device, leaf.untyped_storage().data_ptr())
                    if key not in seen:
                        seen.add(key)
                        out.append(leaf)
    return out


def _default_labels(inputs: Any) -> Any:
    """torchvision's default ``labels_getter`` heuristic on ``inputs`` = ``(image, target)``."""
    target = inputs[1]
    if isinstance(target, torch.Tensor) and type(target) is torch.Tensor:
        return target
    if not isinstance(target, Mapping):
        raise ValueError(f"When using the default labels_getter, the input passed to forward must be a dictionary or "
                         f"a two-tuple whose second item is a dictionary or a tensor, but got {type(target).__name__} "
                         f"instead.")
    key = default_label_key(list(target))
    if key is not None:
        return target[key]
    raise ValueError("Could not infer where the labels are in the sample. Try passing a callable as the "
                     "labels_getter parameter? If there are no labels in the sample by design, pass "
                     "labels_getter=None.")


def _labels(op: SanitizeBoundingBoxes, target: Any, leaves: list[Any]) -> list[int]:
    """Positions in ``leaves`` (``target`` flattened) of what ``op``'s labels_getter names."""
    getter = op.labels_getter
    if getter is None:
        return []
    if getter == "default" and type(target) is dict and len(leaves) == len(target):
        # a flat dict (its leaves are its values in order): the default getter names a key, found once per key set
        keys = tuple(target)
        at = _default_label_at.get(keys)
        if at is None:
            key = default_label_key(keys)
            at = _default_label_at[keys] = [] if key is None else [keys.index(key)]
        if at and isinstance(leaves[at[0]], torch.Tensor):
            return [j for j, leaf in enumerate(leaves) if leaf is leaves[at[0]]]
    got = _default_labels((None, target)) if getter == "default" else getter((None, target))
    if got is None:
        return []
    got = (got,) if isinstance(got, torch.Tensor) else tuple(got)
    for g in got:
        if not isinstance(g, torch.Tensor):
            raise ValueError(f"The labels in the input to forward() must be a tensor or None, got {type(g)} instead.")
    return [j for j, leaf in enumerate(leaves) if any(leaf is g for g in got)]


#: a flat dict's key set -> the leaf positions the default labels_getter names (``_labels``)
_default_label_at: dict = {}


class _Pad(NamedTuple):
    """A geometry step whose padding boxes or masks cannot follow (``TargetPlan.refuse``)."""

    step: Transform
    boxes: bool
    masks: bool
    #: what it does, after "pads" / "pads masks" in the message
    why: str


def _cast_fill(fill: float, dtypes: Sequence[torch.dtype]) -> float:
    """``fill`` cast through ``dtypes`` in turn (the mask's dtype where the step padded, then each
    later ToDtype's), as torchvision's pad, then ToDtype, would leave it."""
    v = torch.tensor(fill, dtype=torch.float64)
    for d in dtypes:
        v = v.to(d)
    return float(v.to(torch.float64))


def _where(index: int, path: str | None) -> str:
    return f"sample {index}" + (f" ({path})" if path else "")


def _one(values: set, what: str) -> Any:
    if len(values) != 1:
        raise ValueError(f"the batch's BoundingBoxes have {what}s {sorted(map(str, values))}: torchdali maps a "
                         f"batch's boxes together, so they must share one {what}")
    return values.pop()


@dataclass(frozen=True)
class TargetPlan:
    """A compiled pipeline seen from its targets: its target-only steps and what it cannot map."""

    plan: Plan
    #: ``(leaf position, step)`` of each target-only step, in pipeline order, of each FixedSizeCrop
    #: (which drops the boxes its crop leaves empty, as the detection reference's does) and of each
    #: RandomIoUCrop (which sets the boxes whose centre it leaves out to zeros)
    steps: tuple[tuple[int, Transform], ...]
    #: the program transforms whose warps boxes and masks cannot follow yet
    warps: tuple[Transform, ...]
    #: geometry steps whose padding boxes (a ``padding_mode``, which torchvision refuses) or masks (a
    #: ``padding_mode``, a Mask fill that is a sequence) cannot follow
    pads: tuple[_Pad, ...] = ()
    #: ``(leaf position, dtype)`` of each ToDtype whose dict converts ``tv_tensors.Mask`` targets
    mask_dtypes: tuple[tuple[int, torch.dtype], ...] = ()

    @classmethod
    def of(cls, plan: Plan) -> TargetPlan:
        steps = tuple((k, t) for k, t in enumerate(plan.transforms) if isinstance(t, TARGET_STEPS)
                      or isinstance(t, (FixedSizeCrop, RandomIoUCrop)))
        draws = [k for k, t in enumerate(plan.transforms) if t.draws_from_boxes]
        drops = [t for k, t in steps if isinstance(t, (SanitizeBoundingBoxes, FixedSizeCrop)) and draws and k < draws[-1]]
        if drops:
            raise ValueError(f"{drops[0]!r} drops boxes before {plan.transforms[draws[-1]]!r}, which draws from the "
                             f"boxes: torchdali draws from every box of the sample; move the drop after it")
        warps = tuple(t for t in plan.transforms if isinstance(t, _WARPS)
                      or isinstance(t, _PerSample) and any(isinstance(c, _WARPS) for c in t.contents))
        pads = []
        for t in plan.transforms:
            # the detection reference's FixedSizeCrop pads only below and right of the boxes, and its
            # masks with zeros whatever its fill
            if t.stage != "geometry" or isinstance(t, FixedSizeCrop):
                continue
            if getattr(t, "padding_mode", "constant") not in (None, "constant"):
                pads.append(_Pad(t, True, True, "pads with a padding mode"))
                continue
            try:
                step_mask_fill(t)
            except ValueError as e:
                pads.append(_Pad(t, False, True, str(e)))
        mask_dtypes = tuple((k, t.mask_dtype) for k, t in enumerate(plan.transforms)
                            if isinstance(t, ToDtype) and getattr(t, "mask_dtype", None) is not None)
        return cls(plan, steps, warps, tuple(pads), mask_dtypes)

    @property
    def sanitizes(self) -> tuple[SanitizeBoundingBoxes, ...]:
        return tuple(t for _, t in self.steps if isinstance(t, SanitizeBoundingBoxes))

    def refuse(self, boxes: bool = True, masks: bool = True) -> None:
        """Raise ValueError when the pipeline has a step that the targets' boxes or masks cannot follow."""
        if self.warps:
            names = ", ".join(repr(t) for t in self.warps)
            raise ValueError(
                f"the dataset's targets hold boxes or masks (tv_tensors.BoundingBoxes, tv_tensors.Mask), but the "
                f"pipeline moves pixels with {names}, which boxes and masks do not follow yet (torchvision refuses "
                f"the auto-augment policies with them too): remove it, or apply it in the dataset's own transform")
        for pad in self.pads:
            if boxes and pad.boxes:
                raise ValueError(f"the dataset's targets hold boxes, but {pad.step!r} {pad.why}: torchvision refuses "
                                 f"a padding mode other than 'constant' with boxes")
            if masks and pad.masks:
                raise ValueError(f"the dataset's targets hold masks, but {pad.step!r} {pad.why}"
                                 + (": masks follow constant padding only here (padding_mode='constant')"
                                    if pad.boxes else ""))

    # -- in the worker: one sample ---------------------------------------------------------------
    def check(self, target: Any, image_hw: Sequence[int], index: int, path: str | None) -> bool:
        """Whether sample ``index``'s target holds boxes or masks, checked against its image's
        ``(H, W)``; raises SampleError for bad data (on_error handles it), TypeError or
        ValueError for what is not supported yet (the module docstring)."""
        leaves = [] if target is None or isinstance(target, _SCALARS) else flatten(target)[0]
        if self.plan.draws_from_boxes:
            count = sum(isinstance(leaf, tv_tensors.BoundingBoxes) for leaf in leaves)
            if count != 1:
                step = next(t for t in self.plan.transforms if t.draws_from_boxes)
                raise SampleError.for_sample(index, path, "bad target",
                                             f"{step!r} draws from the sample's boxes, so its target must hold one "
                                             f"tv_tensors.BoundingBoxes; it holds {count}")
        if not any(isinstance(leaf, (tv_tensors.BoundingBoxes, tv_tensors.Mask)) for leaf in leaves):
            return False
        with torch._C.DisableTorchFunctionSubclass():  # shapes and dtypes without the tv_tensors' Python dispatch
            return self._check_geometry(target, leaves, image_hw, index, path)

    def _check_geometry(self, target: Any, leaves: list, image_hw: Sequence[int], index: int,
                        path: str | None) -> bool:
        hw = (int(image_hw[0]), int(image_hw[1]))
        where = _where(index, path)
        boxes = []
        for leaf in leaves:
            if isinstance(leaf, tv_tensors.BoundingBoxes):
                boxes.append(leaf)
                fmt = getattr(leaf.format, "name", str(leaf.format))
                if fmt not in BOX_FORMATS:
                    raise TypeError(f"{where}: BoundingBoxes of format {fmt} are not mapped yet; use one of "
                                    f"{list(BOX_FORMATS)}")
                if not leaf.is_floating_point():
                    raise TypeError(f"{where}: BoundingBoxes are {leaf.dtype}: torchvision truncates integer boxes "
                                    f"after every resize, which torchdali does not repeat; give float boxes "
                                    f"(e.g. a target_transform that calls .float() on them)")
                if leaf.ndim != 2 or leaf.shape[1] != 4:
                    raise SampleError.for_sample(index, path, "bad target",
                                                 f"boxes must be an [N, 4] BoundingBoxes, got shape "
                                                 f"{tuple(leaf.shape)}")
                if tuple(int(v) for v in leaf.canvas_size) != hw:
                    raise SampleError.for_sample(index, path, "bad target",
                                                 f"the boxes' canvas_size {tuple(leaf.canvas_size)} is not the "
                                                 f"image's size {hw} (H, W)")
            elif isinstance(leaf, tv_tensors.Mask):
                if leaf.ndim < 2 or tuple(leaf.shape[-2:]) != hw:
                    raise SampleError.for_sample(index, path, "bad target",
                                                 f"a mask of shape {tuple(leaf.shape)} does not cover the image, "
                                                 f"{hw} (H, W): a mask must be [..., H, W] of its image's size")
                if leaf.is_floating_point() or leaf.is_complex():
                    raise TypeError(f"{where}: a Mask of {leaf.dtype}: masks are label maps (uint8, bool or an "
                                    f"integer dtype)")
            elif isinstance(leaf, tv_tensors.TVTensor):
                raise TypeError(f"{where}: its target holds a {type(leaf).__name__}, which torchdali does not map "
                                f"yet (BoundingBoxes and Mask are)")
        self.refuse(bool(boxes), any(isinstance(leaf, tv_tensors.Mask) for leaf in leaves))
        for op in self.sanitizes:
            if len(boxes) != 1:
                raise ValueError(f"{where}: {op!r} needs one BoundingBoxes in the target, found {len(boxes)}")
            for j in _labels(op, target, leaves):
                if leaves[j].ndim == 0 or leaves[j].shape[0] != boxes[0].shape[0]:
                    raise SampleError.for_sample(index, path, "bad target",
                                                 f"{boxes[0].shape[0]} boxes but labels of shape "
                                                 f"{tuple(leaves[j].shape)} ({op!r} keeps one label per box)")
        return True

    def draw_boxes(self, targets: Sequence[Any]) -> list[np.ndarray] | None:
        """Each sample's XYXY float64 boxes (host) that a plan drawing from boxes (RandomIoUCrop) draws
        the batch from (``Plan._draw``); None for any other plan. Each target holds one BoundingBoxes
        (``check``); read them from host tensors: a device tensor makes the host wait."""
        if not self.plan.draws_from_boxes:
            return None
        out = []
        for b, target in enumerate(targets):
            boxes = [leaf for leaf in flatten(target)[0] if isinstance(leaf, tv_tensors.BoundingBoxes)]
            if len(boxes) != 1:
                step = next(t for t in self.plan.transforms if t.draws_from_boxes)
                raise ValueError(f"{step!r} draws from each sample's boxes, but the target of sample {b} of the "
                                 f"batch holds {len(boxes)} BoundingBoxes (it needs one)")
            plain = boxes[0].as_subclass(torch.Tensor).detach().cpu().double().reshape(-1, 4)
            out.append(_to_xyxy(plain, boxes[0].format.name).numpy())
        return out

    # -- after the kernel: the whole batch -------------------------------------------------------
    def map(self, targets: Sequence[Any], sizes: np.ndarray, keys: np.ndarray,
            device: torch.device | str, boxes: Sequence[np.ndarray] | None = None,
            trace: TargetGeometry | None = None, part: str = "all",
            boxes_mapped: BoxesMapped | None = None) -> TargetList:
        """The batch's targets (tensors on ``device``) through the pipeline, for images of
        ``sizes`` (``[B, 2]`` H, W) with sample ``keys`` (the module docstring). ``trace``: the
        batch's ``trace_plan``, where the worker drew it (``_targets.draw_and_trace``); else it
        is drawn here, from ``boxes`` (``draw_boxes`` of the same targets on the host, where
        they are on the device).

        ``part``: ``"all"``; ``"boxes"``, steps 2-3 only (the GPU path's worker, on the host: the
        boxes mapped, the rows of labels and masks kept, the masks not resampled), which gives
        the TargetList an attribute ``boxes_mapped``; ``"masks"``, steps 4-5 only, on targets that
        went through ``"boxes"`` (the executor, with their ``boxes_mapped``), where the samples
        of ``boxes_mapped.done`` are skipped (already mapped whole)."""
        if part not in ("all", "boxes", "masks"):
            raise ValueError(f"part must be 'all', 'boxes' or 'masks', got {part!r}")
        if part == "masks" and trace is None:
            raise ValueError("part='masks' maps with the trace that part='boxes' used")
        device = torch.device(device)
        flat = [flatten(t) for t in targets]
        leaves = [list(f[0]) for f in flat]
        box_at = [(i, j) for i, ls in enumerate(leaves) for j, x in enumerate(ls)
                  if isinstance(x, tv_tensors.BoundingBoxes)]
        self.refuse(bool(box_at), any(isinstance(x, tv_tensors.Mask) for ls in leaves for x in ls))
        try:
            if trace is None:
                if boxes is None:
                    boxes = self.draw_boxes(targets)
                trace = trace_plan(self.plan, np.asarray(sizes)[:, :2], keys, boxes)
        except NotImplementedError as e:
            raise ValueError(f"boxes and masks cannot follow this pipeline: {e}") from None
        frozen: dict[tuple[int, int], int] = dict(boxes_mapped.frozen) if boxes_mapped is not None else {}
        if part != "masks" and (box_at or self.sanitizes):
            boxes = _Boxes(self, trace, targets, leaves, box_at, device)
            boxes.run()
            frozen = boxes.frozen
        if part == "boxes":
            out = TargetList(unflatten(ls, spec) for ls, (_, spec) in zip(leaves, flat))
            out.boxes_mapped = BoxesMapped(frozen)
            return out
        done = boxes_mapped.done if boxes_mapped is not None else frozenset()
        mask_at = [(i, j) for i, ls in enumerate(leaves) for j, x in enumerate(ls)
                   if isinstance(x, tv_tensors.Mask) and i not in done]
        n_steps = len(trace.steps)
        for dtype, stop in {(leaves[i][j].dtype, frozen.get((i, j), n_steps)) for i, j in mask_at}:
            group = [(i, j) for i, j in mask_at if leaves[i][j].dtype == dtype and frozen.get((i, j), n_steps) == stop]
            geometry = trace.select(np.array([i for i, _ in group], dtype=np.int64))
            masks = [leaves[i][j].as_subclass(torch.Tensor) for i, j in group]
            # a Mask a SanitizeBoundingBoxes took for labels leaves as a plain tensor, which a ToDtype dict's
            # Mask entry no longer reaches: its dtype is kept
            if self.mask_dtypes and stop == n_steps:
                masks, geometry = self._converted(masks, geometry, dtype)
            mapped = map_masks(masks, geometry if stop == n_steps else geometry.span(0, stop))
            for (i, j), m in zip(group, mapped):
                leaves[i][j] = m if (i, j) in frozen else tv_tensors.Mask(m)
        return TargetList(unflatten(ls, spec) for ls, (_, spec) in zip(leaves, flat))

    def _converted(self, masks: list[torch.Tensor], geometry: TargetGeometry,
                   dtype: torch.dtype) -> tuple[list[torch.Tensor], TargetGeometry]:
        """The masks (all of ``dtype``) in the dtype the plan's ToDtype steps give them, and the geometry
        with each step's Mask fill cast through the dtypes it meets from there on: converting once,
        before the mapping, is then what converting at each ToDtype gives (resampling moves values, a
        pad adds its fill in the dtype of its place)."""
        marks = geometry.leaf_steps
        at = [marks[k] if k < len(marks) else len(geometry.steps) for k, _ in self.mask_dtypes]
        dtypes = [d for _, d in self.mask_dtypes]
        steps = []
        for k, step in enumerate(geometry.steps):
            # the mask's dtype where step k pads: the last ToDtype before it, else the source's
            before = [d for a, d in zip(at, dtypes) if a <= k]
            after = [d for a, d in zip(at, dtypes) if a > k]
            chain = [before[-1] if before else dtype, *after]
            steps.append(step._replace(mask_fill=_cast_fill(step.mask_fill, chain)))
        out = []
        for m in masks:
            for d in dtypes:
                m = m.to(d)
            out.append(m)
        return out, geometry._replace(steps=tuple(steps))


class _Boxes:
    """The boxes of one batch through its trace and target-only steps (``TargetPlan.map``, 2-3)."""

    def __init__(self, tp: TargetPlan, trace: TargetGeometry, targets: Sequence[Any], leaves: list[list[Any]],
                 at: list[tuple[int, int]], device: torch.device) -> None:
        self.tp, self.trace, self.targets, self.leaves, self.at, self.device = tp, trace, targets, leaves, at, device
        first = [leaves[i][j] for i, j in at]
        self.format = _one({b.format.name for b in first}, "format") if first else "XYXY"
        self.mode = _one({getattr(b, "clamping_mode", "soft") for b in first}, "clamping_mode") if first else "soft"
        dtype = _one({b.dtype for b in first}, "dtype") if first else torch.float32
        self.samples = np.array([i for i, _ in at], dtype=np.int64)
        self.counts = np.array([b.shape[0] for b in first], dtype=np.int64)
        self.boxes = torch.cat([b.as_subclass(torch.Tensor) for b in first]) if first else \
            torch.zeros(0, 4, dtype=dtype, device=device)
        self.geometry = trace.select(self.samples)  # one row per BoundingBoxes, on the host
        #: (sample, leaf) of a Mask a SanitizeBoundingBoxes took for labels: mapped through the steps
        #: before it only, then a plain tensor (as torchvision's sanitize returns labels)
        self.frozen: dict[tuple[int, int], int] = {}

    def _move(self, start: int, stop: int) -> None:
        """The boxes through trace steps ``start`` to ``stop``."""
        if stop > start and len(self.boxes):
            self.boxes = map_boxes(self.boxes, _on(self.device, self.counts), self.geometry.span(start, stop),
                                   format=self.format, clamp=self.mode is not None).boxes

    def run(self) -> None:
        done = 0
        zeroed = dict(self.trace.zeroed)
        for position, op in self.tp.steps:
            if isinstance(op, RandomIoUCrop):  # its zeros come after its crop
                stop = self._leaf_steps(position + 1)
                self._move(done, stop)
                done = stop
                keep = zeroed.get(position)
                if keep is not None and not keep.all() and len(self.boxes):
                    drop = _on(self.device, np.flatnonzero(~keep))
                    self.boxes = self.boxes.index_fill(0, drop, 0.0)
                continue
            if isinstance(op, FixedSizeCrop):  # its own drop comes after its crop and pad
                stop = self._leaf_steps(position + 1)
                self._move(done, stop)
                self._fixed_size_crop(op, self.geometry.canvas_after(self._leaf_steps(position)))
                done = stop
                continue
            stop = self._leaf_steps(position)
            self._move(done, stop)
            done = stop
            canvas = self.geometry.canvas_after(stop)
            if isinstance(op, ConvertBoundingBoxFormat):
                self.boxes = convert_boxes(self.boxes, self.format, op._format)
                self.format = op._format
            elif isinstance(op, ClampBoundingBoxes):
                mode = self.mode if op.clamping_mode == "auto" else op.clamping_mode
                if len(self.boxes):
                    counts, canvas_d = _on(self.device, self.counts, canvas)
                    self.boxes = clamp_boxes(self.boxes, counts, canvas_d, format=self.format, clamping_mode=mode)
            else:
                self._sanitize(op, canvas, stop)
        self._move(done, len(self.trace.steps))
        size = self.trace.size
        for (i, j), part in zip(self.at, self.boxes.split(self.counts.tolist())):
            self.leaves[i][j] = _bounding_boxes(part, self.format, (int(size[i, 0]), int(size[i, 1])), self.mode)

    def _leaf_steps(self, position: int) -> int:
        """How many trace steps come before leaf ``position`` of the plan (all of them past its end)."""
        marks = self.trace.leaf_steps
        return marks[position] if position < len(marks) else len(self.trace.steps)

    def _sanitize(self, op: SanitizeBoundingBoxes, canvas: np.ndarray, stop: int) -> None:
        """``op``, after trace step ``stop``, on every sample (one BoundingBoxes each:
        ``TargetPlan.check``): the kept rows of the boxes, the labels and every Mask with one
        row per box, as torchvision's does."""
        if len(self.at) != len(self.targets):
            missing = sorted(set(range(len(self.targets))) - set(self.samples.tolist()))
            raise ValueError(f"{op!r}: sample {missing[0]} of the batch has no BoundingBoxes")
        keep = torch.zeros(0, dtype=torch.bool)
        if len(self.boxes):
            counts, canvas_d = _on(self.device, self.counts, canvas)
            keep = sanitize_boxes(self.boxes, counts, canvas_d, op.min_size, op.min_area, format=self.format)
        keep_h = keep.cpu().numpy()  # the host waits here: the kept counts size every output
        labels = []
        for i, _ in self.at:
            named = _labels(op, self.targets[i], flatten(self.targets[i])[0])
            for k in named:  # torchvision gives labels back as plain tensors, even a Mask named as one,
                if isinstance(self.leaves[i][k], tv_tensors.Mask):  # which later steps then leave alone
                    self.frozen.setdefault((i, k), stop)
                else:
                    self.leaves[i][k] = self.leaves[i][k].as_subclass(torch.Tensor)
            labels.append(set(named))
        self._keep(keep_h, labels, any_mask=True)

    def _fixed_size_crop(self, op: FixedSizeCrop, before: np.ndarray) -> None:
        """The drop of ``op`` (the detection reference's FixedSizeCrop): after a crop, the boxes
        with ``x0 < x1`` and ``y0 < y1`` stay, and the same rows of ``target["labels"]`` and
        ``target["masks"]``; a sample it did not crop keeps every box."""
        if not len(self.boxes):
            return
        xyxy = convert_boxes(self.boxes, self.format, "XYXY")
        keep_h = ((xyxy[:, 0] < xyxy[:, 2]) & (xyxy[:, 1] < xyxy[:, 3])).cpu().numpy()  # the host waits
        cropped = (before > np.asarray(op.size)).any(axis=1)
        keep_h |= ~np.repeat(cropped, self.counts)
        keyed = []
        for i, _ in self.at:
            target, leaves = self.targets[i], flatten(self.targets[i])[0]
            named = [target[k] for k in ("labels", "masks") if isinstance(target, Mapping) and k in target]
            keyed.append({j for j, leaf in enumerate(leaves) if any(leaf is x for x in named)})
        self._keep(keep_h, keyed, any_mask=False)

    def _keep(self, keep_h: np.ndarray, rows_of: list[set[int]], any_mask: bool) -> None:
        """Keep the boxes ``keep_h`` (host bool, one per box) and the same rows of each box set's
        sample's leaves ``rows_of[e]`` (and, ``any_mask``, of every Mask with one row per box)."""
        starts = np.concatenate([[0], np.cumsum(self.counts)])
        picks: list[tuple[int, int, np.ndarray]] = []
        for e, (i, _) in enumerate(self.at):
            n = int(self.counts[e])
            rows = np.flatnonzero(keep_h[starts[e]: starts[e + 1]])
            if len(rows) == n:
                continue
            for k, leaf in enumerate(self.leaves[i]):
                # an instance mask has one row per box; a 2-D mask's first dim is its height, which
                # torchvision indexes only when the mapped height happens to equal the box count
                mask = any_mask and isinstance(leaf, tv_tensors.Mask) and leaf.ndim > 2 and leaf.shape[0] == n
                if k in rows_of[e] or mask:
                    picks.append((i, k, rows))
        *indices, kept_rows = _on_device([r for _, _, r in picks] + [np.flatnonzero(keep_h)], self.device)
        for (i, k, _), index in zip(picks, indices):
            leaf = self.leaves[i][k]
            kept = leaf.as_subclass(torch.Tensor).index_select(0, index)
            self.leaves[i][k] = tv_tensors.Mask(kept) if isinstance(leaf, tv_tensors.Mask) else kept
        self.boxes = self.boxes.index_select(0, kept_rows)
        kept_before = np.concatenate([[0], np.cumsum(keep_h, dtype=np.int64)])
        self.counts = kept_before[starts[1:]] - kept_before[starts[:-1]]
