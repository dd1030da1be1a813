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

``TargetPlan.map`` maps a batch's targets after its kernel, in one call: on the GPU path in the
executor (``_executor.map_targets``), on the CPU path in the worker.

1. Every sample's geometry, step by step: the worker records it with the draw of the
   kernel's parameters (``_targets.draw_and_trace``) and ships it with the batch, the
   targets unmapped; ``_targets.trace_plan`` draws it again only for a batch with a
   replacement found on the GPU, or put together from parts of which one held no boxes
   or masks. One step per geometry transform, where each target-only step stands among
   them, and which boxes RandomIoUCrop zeroes. The steps (not the folded map of the
   kernel's rows) make masks exact: nearest sampling does not compose.
2. The boxes of the whole batch are one ragged ``[N, 4]`` tensor, one block of rows
   per BoundingBoxes, mapped by ``_targets.map_boxes`` through the steps up to the
   next target-only step, which runs on the whole tensor; and so on.
3. ``SanitizeBoundingBoxes`` keeps rows of the boxes, of the labels (its
   ``labels_getter``) and of every Mask with one row per box, as torchvision's does.
   ``FixedSizeCrop`` (the detection reference's) drops the boxes its crop empties, with
   ``target["labels"]`` and ``target["masks"]``, the same way. Steps 2-3 run on the host,
   on the targets as they arrive: what a drop keeps sizes every output, and a device
   would make the host wait for it each batch, on the one executor thread that serves
   every worker (the boxes' arithmetic is numpy's, which costs the host a fraction of
   torch's per operation on a batch's few hundred boxes). A detection batch reaches the
   executor as ``TargetColumns`` (each key's tensors of every sample back to back, views
   of the batch's packed buffer), whose boxes and labels are mapped a key at a time, not
   a sample at a time; other targets are mapped one by one. The masks' rows are only
   recorded there: selecting rows commutes with resampling, so they are selected where
   they are resampled, once.
4. Every tensor goes to the device in one copy. The masks are resampled through all the
   steps by ``_targets.map_masks``; a pixel a step pads takes that step's Mask fill (a
   ``fill`` dict's ``tv_tensors.Mask`` entry, or a plain fill, as torchvision pads masks;
   zeros for the detection reference's FixedSizeCrop). A ``ToDtype`` whose dict gives
   ``tv_tensors.Mask`` a dtype converts the masks (``scale`` does not apply to them, as in
   torchvision); the conversion is done once, before the masks are mapped, with the fills
   of the steps before it cast through the dtype they met, which is what converting in
   place gives.
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
from csrc_triton._triton import upload
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
from ._targets import BOX_FORMATS, TargetGeometry, _to_xyxy, map_boxes, map_masks, step_mask_fill, trace_plan
from ._timm import _TimmOps
from ._transforms import ToDtype
from ._warp import _Warp

__all__ = ["TargetColumns", "TargetList", "TargetPlan", "flat_keys", "flatten", "has_geometry", "target_tensors",
           "unflatten"]

#: target-only steps of a pipeline (they change no pixel)
TARGET_STEPS: tuple[type, ...] = (SanitizeBoundingBoxes, ClampBoundingBoxes, ConvertBoundingBoxFormat)
#: program transforms that move pixels (or may: the auto-augment policies' shear, translate, rotate)
_WARPS: tuple[type, ...] = (_Warp, _AutoAugmentBase, _TimmOps)
_SCALARS = (int, float, str, bytes, bool, np.integer, np.floating)


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
    def map(self, targets: Sequence[Any] | TargetColumns, sizes: np.ndarray, keys: np.ndarray,
            device: torch.device | str, boxes: Sequence[np.ndarray] | None = None,
            trace: TargetGeometry | None = None) -> TargetList:
        """The batch's targets through the pipeline, their tensors on ``device``, for images of
        ``sizes`` (``[B, 2]`` H, W) with sample ``keys`` (the module docstring). ``targets``: on
        the host (a tensor on a device is read back, which waits for it), one per sample or as
        ``TargetColumns``. ``trace``: the batch's ``trace_plan``, where the worker drew it
        (``_targets.draw_and_trace``); else it is drawn here, from ``boxes`` (``draw_boxes`` of
        the same targets), or from the targets.

        The boxes, the labels and which rows of each Mask stay are computed on the host (steps
        2-3); every tensor then goes to ``device`` in one copy, where the masks are selected and
        resampled (step 4)."""
        device = torch.device(device)
        if isinstance(targets, TargetColumns):
            if trace is not None and self._by_columns(targets):
                return self._map_columns(targets, device, trace)
            targets = targets.targets()
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
        mapped = None
        if box_at or self.sanitizes:
            mapped = _LeafBoxes(self, trace, targets, leaves, box_at)
            mapped.run()
        tensors = _place(leaves, mapped, device)
        frozen = mapped.frozen if mapped is not None else {}
        mask_at = [(i, j) for i, ls in enumerate(leaves) for j, x in enumerate(ls) if isinstance(x, tv_tensors.Mask)]
        resampled = self._resample(trace, [(i, leaves[i][j], frozen.get((i, j))) for i, j in mask_at])
        for (i, j), m in zip(mask_at, resampled):
            leaves[i][j] = m
        out = TargetList(unflatten(ls, spec) for ls, (_, spec) in zip(leaves, flat))
        out.tensors = None if tensors is None else tensors + _storages(resampled)
        return out

    def _by_columns(self, cols: TargetColumns) -> bool:
        """Whether ``_map_columns`` maps ``cols``: one column of BoundingBoxes and none elsewhere,
        the default labels_getter (or none), whose labels, and a FixedSizeCrop's, are a column of
        plain tensors; a FixedSizeCrop's ``masks`` that, or Masks. Else the targets are mapped one
        by one (a Mask taken for labels, a labels_getter that reads each target)."""
        if len(cols.boxes) != 1 or any(isinstance(v, tv_tensors.BoundingBoxes) for r in cols.rest for v in r.values()):
            return False

        def plain(key: Any) -> bool:
            return key in cols.columns and key not in cols.boxes and key not in cols.masks

        for op in self.sanitizes:
            if op.labels_getter is None:
                continue
            key = default_label_key(cols.keys) if isinstance(op.labels_getter, str) else None
            if op.labels_getter != "default" or key is None or not plain(key):
                return False
        if any(isinstance(op, FixedSizeCrop) for _, op in self.steps):
            if "labels" in cols.keys and not plain("labels"):
                return False
            if "masks" in cols.keys and not (plain("masks") or "masks" in cols.masks
                                             or all(isinstance(r["masks"], tv_tensors.Mask) for r in cols.rest)):
                return False
        return True

    def _map_columns(self, cols: TargetColumns, device: torch.device, trace: TargetGeometry) -> TargetList:
        """``map`` of targets in columns (``_by_columns``), a key at a time: the boxes, labels and
        any other column go to ``device`` whole and are split there, one view per sample."""
        rest = [dict(r) for r in cols.rest]
        for key in cols.masks:  # resampled per sample: from here on, one Mask per sample
            for r, part in zip(rest, cols.columns[key].split(cols.rows[key].tolist())):
                r[key] = tv_tensors.Mask(part)
        mapped = _ColumnBoxes(self, trace, cols, rest)
        self.refuse(True, mapped.masks)
        mapped.run()
        columns = [(key, t, rows) for key, (t, rows) in mapped.columns.items()]
        mask_at = [(i, k) for i, r in enumerate(rest) for k, v in r.items() if isinstance(v, tv_tensors.Mask)]
        picks = [(at, index) for at, index in mapped.rows.items()]
        if device.type == "cpu":
            block, moved, tensors = mapped.boxes, [t for _, t, _ in columns], None
            for (i, k), index in picks:
                rest[i][k] = tv_tensors.Mask(_rows(rest[i][k], index))
        else:
            small_at = [(i, k) for i, r in enumerate(rest) for k, v in r.items()
                        if isinstance(v, torch.Tensor) and not isinstance(v, tv_tensors.Mask)]
            small, whole, tensors = _to_device([rest[i][k] for i, k in small_at],
                                               [mapped.boxes, *(t for _, t, _ in columns),
                                                *(rest[i][k] for i, k in mask_at), *(r for _, r in picks)], device)
            for (i, k), t in zip(small_at, small):
                rest[i][k] = t
            block, moved = whole[0], whole[1:1 + len(columns)]
            kept = {at: index for (at, _), index in zip(picks, whole[1 + len(columns) + len(mask_at):])}
            for (i, k), t in zip(mask_at, whole[1 + len(columns):1 + len(columns) + len(mask_at)]):
                rest[i][k] = tv_tensors.Mask(t.index_select(0, kept[(i, k)]) if (i, k) in kept else t)
        resampled = self._resample(trace, [(i, rest[i][k], None) for i, k in mask_at])
        for (i, k), m in zip(mask_at, resampled):
            rest[i][k] = m
        fmt, mode = mapped.format, mapped.mode
        split = {key: t.split(rows.tolist()) for (key, _, rows), t in zip(columns, moved)}
        split[mapped.key] = [_bounding_boxes(part, fmt, size, mode)
                             for part, size in zip(block.split(mapped.counts.tolist()), trace.size.tolist())]
        out = TargetList({k: split[k][i] if k in split else r[k] for k in cols.keys} for i, r in enumerate(rest))
        out.tensors = None if tensors is None else tensors + _storages(resampled)
        return out

    def _resample(self, trace: TargetGeometry, masks: list[tuple[int, torch.Tensor, int | None]]) -> list[Any]:
        """Each ``(sample, Mask, stop)`` resampled through the sample's trace steps, all of them or the
        first ``stop`` (a Mask a SanitizeBoundingBoxes took for labels there, which leaves as a plain
        tensor); the others leave as Masks."""
        out: list[Any] = [None] * len(masks)
        n_steps = len(trace.steps)
        stops = [n_steps if stop is None else stop for _, _, stop in masks]
        for dtype, stop in {(m.dtype, s) for (_, m, _), s in zip(masks, stops)}:
            group = [e for e, ((_, m, _), s) in enumerate(zip(masks, stops)) if m.dtype == dtype and s == stop]
            geometry = trace.select(np.array([masks[e][0] for e in group], dtype=np.int64))
            plain = [masks[e][1].as_subclass(torch.Tensor) for e in group]
            # a Mask a SanitizeBoundingBoxes took for labels leaves as a plain tensor, which a ToDtype dict's
            # Mask entry no longer reaches: its dtype is kept
            if self.mask_dtypes and stop == n_steps:
                plain, geometry = self._converted(plain, geometry, dtype)
            for e, m in zip(group, map_masks(plain, geometry if stop == n_steps else geometry.span(0, stop))):
                out[e] = m if masks[e][2] is not None else tv_tensors.Mask(m)
        return out

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


class TargetColumns(NamedTuple):
    """A batch of targets that are flat dicts with the same keys, the tensors of the keys in
    ``columns`` back to back, sample after sample (``_executor._wire.PackedTargets`` lays a
    detection batch out so): ``TargetPlan.map`` maps them a key at a time, not a sample at a time."""

    #: every target's keys, in order
    keys: tuple
    #: key -> ``[N, ...]`` host tensor holding every sample's leaf (a BoundingBoxes' or Mask's plain data)
    columns: dict
    #: key -> ``[B]`` int64: each sample's leaf's first dimension
    rows: dict
    #: key of a BoundingBoxes column -> (format name, clamping_mode, ``[B, 2]`` canvas sizes)
    boxes: dict
    #: keys of the Mask columns
    masks: frozenset
    #: per sample: the other keys and their values
    rest: list

    def targets(self) -> list[dict]:
        """The targets, one dict per sample (views of the columns)."""
        split = {}
        for key, t in self.columns.items():
            parts = t.split(self.rows[key].tolist())
            if key in self.boxes:
                fmt, mode, canvas = self.boxes[key]
                parts = [_bounding_boxes(p, fmt, c, mode) for p, c in zip(parts, canvas.tolist())]
            elif key in self.masks:
                parts = [tv_tensors.Mask(p) for p in parts]
            split[key] = parts
        return [{k: split[k][i] if k in split else r[k] for k in self.keys} for i, r in enumerate(self.rest)]


def _place(leaves: list[list[Any]], mapped: _LeafBoxes | None, device: torch.device) -> tuple | None:
    """The batch's tensors on ``device``, in place in ``leaves``: the mapped boxes (``mapped``),
    every other tensor leaf as the tv_tensor it was, each Mask with only the rows ``mapped`` kept.
    Off the host, one copy (``_to_device``) takes them all, the kept rows' indices too, and the
    storages that then hold every tensor are returned (``TargetList.tensors``); on the host, None."""
    rows = mapped.rows if mapped is not None else {}
    if device.type == "cpu":
        for (i, j), index in rows.items():
            leaves[i][j] = tv_tensors.Mask(_rows(leaves[i][j], index))
        if mapped is not None:
            mapped.write(mapped.boxes)
        return None
    boxes_at = set(mapped.at) if mapped is not None else set()
    small_at, mask_at = [], []
    for i, ls in enumerate(leaves):
        for j, x in enumerate(ls):
            if isinstance(x, tv_tensors.Mask):
                mask_at.append((i, j))
            elif isinstance(x, torch.Tensor) and (i, j) not in boxes_at:
                small_at.append((i, j))
    picks = list(rows.items())
    block = [mapped.boxes] if mapped is not None else []
    small, whole, tensors = _to_device([leaves[i][j] for i, j in small_at],
                                       block + [leaves[i][j] for i, j in mask_at] + [r for _, r in picks], device)
    for (i, j), t in zip(small_at, small):
        leaves[i][j] = t
    n = len(block) + len(mask_at)
    kept = {at: index for (at, _), index in zip(picks, whole[n:])}
    for (i, j), t in zip(mask_at, whole[len(block):n]):
        leaves[i][j] = tv_tensors.Mask(t.index_select(0, kept[(i, j)]) if (i, j) in kept else t)
    if mapped is not None:
        mapped.write(whole[0])
    return tensors


def _to_device(small: list[torch.Tensor], whole: list[Any],
               device: torch.device) -> tuple[list[torch.Tensor], list[torch.Tensor], tuple]:
    """``small`` (host tensors) and ``whole`` (host tensors or arrays) on ``device`` in one copy
    (``upload``): the small ones in a block per dtype and trailing shape, split again there (a
    part per leaf costs the host more than the copy does: a batch's labels are one block), the
    others a part each. Returns both lists moved, and one tensor per storage that holds them."""
    groups: dict[tuple, list[int]] = {}
    with torch._C.DisableTorchFunctionSubclass():  # the tv_tensors' bytes, without their Python dispatch
        for n, t in enumerate(small):
            groups.setdefault((t.dtype, tuple(t.shape[1:]) if t.ndim else None), []).append(n)
        blocks = [torch.cat([small[n].reshape(-1, *(tail or ())) for n in ns]) for (_, tail), ns in groups.items()]
        parts = upload(blocks + list(whole), device)
    out: list[Any] = [None] * len(small)
    for ((_, tail), ns), moved in zip(groups.items(), parts):
        sizes = [small[n].shape[0] if tail is not None else 1 for n in ns]
        for n, t in zip(ns, moved.split(sizes)):
            out[n] = t if tail is not None else t.reshape(())
    return out, parts[len(blocks):], _storages(parts)


def _rows(t: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    """Rows ``rows`` of ``t`` as a plain tensor (on the host through numpy: a batch selects many)."""
    t = t.as_subclass(torch.Tensor) if type(t) is not torch.Tensor else t
    if t.device.type == "cpu" and t.dtype in _NUMPY_DTYPES and not t.requires_grad:
        return torch.from_numpy(t.numpy()[rows])
    return t.index_select(0, torch.from_numpy(rows).to(t.device))


#: torch dtypes a host tensor is indexed in through numpy (``_rows``)
_NUMPY_DTYPES = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                           torch.float16, torch.float32, torch.float64})


def _storages(tensors: Sequence[torch.Tensor]) -> tuple:
    """One tensor per distinct storage among ``tensors`` that hold elements (``target_tensors``)."""
    out, seen = [], set()
    with torch._C.DisableTorchFunctionSubclass():
        for t in tensors:
            if t.numel():
                key = t.untyped_storage().data_ptr()
                if key not in seen:
                    seen.add(key)
                    out.append(t)
    return tuple(out)


class _Boxes:
    """The boxes of one batch through its trace and target-only steps, on the host
    (``TargetPlan.map``, 2-3): every box set (a sample's BoundingBoxes) in one ``[N, 4]`` tensor.
    What travels with them (labels, masks) is the subclass's: a sample's leaves (``_LeafBoxes``)
    or a batch's columns (``_ColumnBoxes``); a Mask that loses rows has them recorded (``rows``),
    to be selected where it is resampled."""

    def __init__(self, tp: TargetPlan, trace: TargetGeometry, boxes: torch.Tensor, counts: np.ndarray,
                 samples: np.ndarray, fmt: str, mode: str | None, n_targets: int) -> None:
        self.tp, self.trace, self.boxes, self.counts, self.samples = tp, trace, boxes, counts, samples
        self.format, self.mode, self.n_targets = fmt, mode, n_targets
        self.geometry = trace.select(samples)  # one row per box set, on the host
        #: (sample, leaf) of a Mask that loses rows -> host int64 indices of the rows it keeps
        self.rows: dict[tuple[int, Any], np.ndarray] = {}

    def _move(self, start: int, stop: int) -> None:
        """The boxes through trace steps ``start`` to ``stop``."""
        if stop > start and len(self.boxes):
            self.boxes = map_boxes(self.boxes, self.counts, self.geometry.span(start, stop),
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
                    self.boxes = self.boxes.index_fill(0, torch.from_numpy(np.flatnonzero(~keep)), 0.0)
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
                    self.boxes = clamp_boxes(self.boxes, self.counts, canvas, format=self.format, clamping_mode=mode)
            else:
                self._sanitize(op, canvas, stop)
        self._move(done, len(self.trace.steps))

    def _leaf_steps(self, position: int) -> int:
        """How many trace steps come before leaf ``position`` of the plan (all of them past its end)."""
        marks = self.trace.leaf_steps
        return marks[position] if position < len(marks) else len(self.trace.steps)

    def _sanitize(self, op: SanitizeBoundingBoxes, canvas: np.ndarray, stop: int) -> None:
        """``op``, after trace step ``stop``, on every sample (one BoundingBoxes each:
        ``TargetPlan.check``): the kept rows of the boxes, the labels and every Mask with one
        row per box, as torchvision's does."""
        if len(self.samples) != self.n_targets:
            missing = sorted(set(range(self.n_targets)) - set(self.samples.tolist()))
            raise ValueError(f"{op!r}: sample {missing[0]} of the batch has no BoundingBoxes")
        keep = np.zeros(0, dtype=bool)
        if len(self.boxes):
            keep = sanitize_boxes(self.boxes, self.counts, canvas, op.min_size, op.min_area,
                                  format=self.format).numpy()
        self._keep(keep, self._labels(op, stop), any_mask=True)

    def _fixed_size_crop(self, op: FixedSizeCrop, before: np.ndarray) -> None:
        """The drop of ``op`` (the detection reference's FixedSizeCrop): after a crop, the boxes
        with ``x0 < x1`` and ``y0 < y1`` stay, and the same rows of ``target["labels"]`` and
        ``target["masks"]``; a sample it did not crop keeps every box."""
        if not len(self.boxes):
            return
        xyxy = convert_boxes(self.boxes, self.format, "XYXY")
        keep_h = ((xyxy[:, 0] < xyxy[:, 2]) & (xyxy[:, 1] < xyxy[:, 3])).numpy()
        cropped = (before > np.asarray(op.size)).any(axis=1)
        keep_h |= ~np.repeat(cropped, self.counts)
        self._keep(keep_h, self._keyed(("labels", "masks")), any_mask=False)

    def _keep(self, keep_h: np.ndarray, rows_of: Any, any_mask: bool) -> None:
        """Keep the boxes ``keep_h`` (host bool, one per box) and the same rows of what ``rows_of``
        names (``_labels``, ``_keyed``) and, ``any_mask``, of every Mask with one row per box."""
        starts = np.concatenate([[0], np.cumsum(self.counts)])
        kept_before = np.concatenate([[0], np.cumsum(keep_h, dtype=np.int64)])
        kept = kept_before[starts[1:]] - kept_before[starts[:-1]]
        lose = np.flatnonzero(kept != self.counts)  # the box sets that lose a box
        if not len(lose):
            return
        flat = np.flatnonzero(keep_h)

        def losers() -> list[tuple[int, int, np.ndarray]]:
            """``(box set, its boxes, the rows it keeps)`` of each box set that loses a box."""
            return [(e, int(self.counts[e]), flat[kept_before[starts[e]]: kept_before[starts[e + 1]]] - starts[e])
                    for e in lose.tolist()]

        self._keep_rows(flat, kept, rows_of, any_mask, losers)
        self.boxes = self.boxes.index_select(0, torch.from_numpy(flat))
        self.counts = kept

    def _mask_rows(self, at: tuple[int, Any], leaf: Any, n: int, rows: np.ndarray, named: bool,
                   any_mask: bool) -> bool:
        """Record the rows a Mask ``leaf`` (at ``at``) keeps, where it is ``named`` or, ``any_mask``,
        has one row per box (``n``); whether it is a Mask."""
        if not isinstance(leaf, tv_tensors.Mask):
            return False
        chosen = self.rows.get(at)
        # an instance mask has one row per box; a 2-D mask's first dim is its height, which
        # torchvision indexes only when the mapped height happens to equal the box count
        if named or any_mask and leaf.ndim > 2 and (leaf.shape[0] if chosen is None else len(chosen)) == n:
            # selecting rows commutes with resampling: selected where resampled
            self.rows[at] = rows if chosen is None else chosen[rows]
        return True


class _LeafBoxes(_Boxes):
    """``_Boxes`` of targets given one by one: what travels with the boxes are leaves of the
    samples' targets, ``leaves`` (each target flattened), which the steps update in place."""

    def __init__(self, tp: TargetPlan, trace: TargetGeometry, targets: Sequence[Any], leaves: list[list[Any]],
                 at: list[tuple[int, int]]) -> None:
        first = [leaves[i][j] for i, j in at]
        fmt = _one({b.format.name for b in first}, "format") if first else "XYXY"
        mode = _one({getattr(b, "clamping_mode", "soft") for b in first}, "clamping_mode") if first else "soft"
        dtype = _one({b.dtype for b in first}, "dtype") if first else torch.float32
        with torch._C.DisableTorchFunctionSubclass():  # a plain tensor, without the tv_tensors' Python dispatch
            boxes = torch.cat([b.cpu() for b in first]) if first else torch.zeros(0, 4, dtype=dtype)
        super().__init__(tp, trace, boxes, np.array([b.shape[0] for b in first], dtype=np.int64),
                         np.array([i for i, _ in at], dtype=np.int64), fmt, mode, len(targets))
        self.targets, self.leaves, self.at = targets, leaves, at
        #: the targets' own leaves (``leaves`` as the steps leave them): what a labels_getter names
        self.source = [list(ls) for ls in leaves]
        #: (sample, leaf) of a Mask a SanitizeBoundingBoxes took for labels: mapped through the steps
        #: before it only, then a plain tensor (as torchvision's sanitize returns labels)
        self.frozen: dict[tuple[int, int], int] = {}

    def write(self, boxes: torch.Tensor) -> None:
        """Each sample's BoundingBoxes into its leaf, from ``boxes``: the mapped boxes (on any device)."""
        size = self.trace.size
        for (i, j), part in zip(self.at, boxes.split(self.counts.tolist())):
            self.leaves[i][j] = _bounding_boxes(part, self.format, (int(size[i, 0]), int(size[i, 1])), self.mode)

    def _labels(self, op: SanitizeBoundingBoxes, stop: int) -> list[list[int]]:
        """Per box set, the leaves ``op``'s labels_getter names; a Mask among them is frozen after
        trace step ``stop``, any other leaves as a plain tensor, as torchvision gives labels back."""
        labels = []
        for i, _ in self.at:
            named = _labels(op, self.targets[i], self.source[i])
            for k in named:
                leaf = self.leaves[i][k]
                if isinstance(leaf, tv_tensors.Mask):  # which later steps then leave alone
                    self.frozen.setdefault((i, k), stop)
                elif type(leaf) is not torch.Tensor:
                    self.leaves[i][k] = leaf.as_subclass(torch.Tensor)
            labels.append(named)
        return labels

    def _keyed(self, keys: tuple) -> list[list[int]]:
        """Per box set, the leaves its target holds at ``keys`` (a dict target)."""
        keyed = []
        for i, _ in self.at:
            target, leaves = self.targets[i], self.source[i]
            named = [target[k] for k in keys if isinstance(target, Mapping) and k in target]
            keyed.append([j for j, leaf in enumerate(leaves) if any(leaf is x for x in named)])
        return keyed

    def _keep_rows(self, flat: np.ndarray, kept: np.ndarray, rows_of: list[list[int]], any_mask: bool,
                   losers: Callable[[], list[tuple[int, int, np.ndarray]]]) -> None:
        for e, n, rows in losers():
            i = self.at[e][0]
            for k, leaf in enumerate(self.leaves[i]):
                named = k in rows_of[e]
                if not self._mask_rows((i, k), leaf, n, rows, named, any_mask) and named:
                    self.leaves[i][k] = _rows(leaf, rows)


class _ColumnBoxes(_Boxes):
    """``_Boxes`` of ``TargetColumns`` (``TargetPlan._by_columns``): the boxes are their column; the
    other columns (``columns``, key -> ``(tensor, rows)``) lose rows a key at a time, and the Masks
    among the samples' other values (``rest``) a sample at a time."""

    def __init__(self, tp: TargetPlan, trace: TargetGeometry, cols: TargetColumns, rest: list[dict]) -> None:
        self.key = next(iter(cols.boxes))
        fmt, mode, _ = cols.boxes[self.key]
        n = len(rest)
        super().__init__(tp, trace, cols.columns[self.key], cols.rows[self.key], np.arange(n, dtype=np.int64),
                         fmt, mode, n)
        self.keys, self.rest = cols.keys, rest
        self.masks = any(isinstance(v, tv_tensors.Mask) for r in rest for v in r.values())
        self.columns = {k: (t, cols.rows[k]) for k, t in cols.columns.items() if k != self.key and k not in cols.masks}

    def _labels(self, op: SanitizeBoundingBoxes, stop: int) -> set:
        return set() if op.labels_getter is None else {default_label_key(self.keys)}

    def _keyed(self, keys: tuple) -> set:
        return set(keys) & set(self.keys)

    def _keep_rows(self, flat: np.ndarray, kept: np.ndarray, rows_of: set, any_mask: bool,
                   losers: Callable[[], list[tuple[int, int, np.ndarray]]]) -> None:
        for key in rows_of & set(self.columns):
            t, rows_per = self.columns[key]
            if np.array_equal(rows_per, self.counts):  # one row per box: the kept boxes' rows
                self.columns[key] = (_rows(t, flat), kept)
                continue
            # not lined up with the boxes (an earlier drop left it alone): each sample's rows, as a leaf's
            parts = list(t.split(rows_per.tolist()))
            for i, _, rows in losers():
                parts[i] = _rows(parts[i], rows)
            self.columns[key] = (torch.cat(parts), np.array([len(p) for p in parts], dtype=np.int64))
        if self.masks:
            for i, n, rows in losers():
                for k, leaf in self.rest[i].items():
                    self._mask_rows((i, k), leaf, n, rows, k in rows_of, any_mask)
