"""Target-only box transforms of a whole batch: SanitizeBoundingBoxes, ClampBoundingBoxes, ConvertBoundingBoxFormat.

torchvision.transforms.v2 applies these to one sample's ``BoundingBoxes``. Here the
boxes of every sample of a batch are one ragged ``[N, 4]`` tensor with per-sample
``counts`` (``[B]``, summing to ``N``) and per-sample canvas sizes (``[B, 2]``,
``(H, W)``), as ``_targets.map_boxes`` takes and returns them, on whatever device
they live. Each functional is a handful of torch ops over the whole batch; none
loops over samples or boxes, and none waits for the device (the sample of each
box comes from ``repeat_interleave`` with a known output size).

Three tiers, as elsewhere: the classes (torchvision's names, arguments and
defaults) work on a ``BoxBatch`` (boxes + the per-box tensors that travel with
them, such as labels and instance masks); the functionals (``convert_boxes``,
``clamp_boxes``, ``sanitize_boxes``, ``kept_counts``) on plain tensors.

Exactness: the arithmetic is torchvision's, in the boxes' dtype, so the results
are bit for bit those of the v2 transforms applied sample by sample (format
conversions call torchvision's own ``convert_bounding_box_format``, which works
on any ``[..., 4]`` tensor). ``_targets._to_xyxy``/``_from_xyxy`` are not used:
they compute the CXCYWH corners as ``cx -/+ w / 2`` in float64, where
torchvision computes ``x2 = (cx - w / 2) + w`` in the boxes' dtype, which can
differ in the last bit and so flip a ``>= min_size`` test.

Not handled: rotated box formats (``_targets.BOX_FORMATS`` lists the three
axis-aligned ones, which ``_targets._box_format`` checks).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple, Sequence, Union

import torch
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as TF

from ._plan import Transform
from ._registry import register
from ._targets import _box_format

__all__ = [
    "BoxBatch", "ClampBoundingBoxes", "ConvertBoundingBoxFormat", "SanitizeBoundingBoxes",
    "box_samples", "clamp_boxes", "convert_boxes", "default_label_key", "kept_counts", "sanitize_boxes",
]

#: ``clamping_mode`` values torchvision's ClampBoundingBoxes takes ("auto": the boxes' own)
CLAMPING_MODES: tuple[str | None, ...] = ("soft", "hard", "auto", None)

#: a per-box entry of a ``BoxBatch``: one ``[N, ...]`` tensor lined up with the boxes, or one
#: tensor per sample (instance masks of differently sized images, or an entry that no longer
#: lines up with the boxes because SanitizeBoundingBoxes left it alone, as torchvision does)
PerBox = Union[torch.Tensor, list]


def _plain(t: torch.Tensor) -> torch.Tensor:
    return t.as_subclass(torch.Tensor) if type(t) is not torch.Tensor else t


def _checked_boxes(boxes: Any) -> torch.Tensor:
    if not isinstance(boxes, torch.Tensor) or boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"boxes must be an [N, 4] tensor, got {getattr(boxes, 'shape', type(boxes).__name__)}")
    return _plain(boxes)


def box_samples(counts: torch.Tensor | Sequence[int], n: int, device: torch.device | str) -> torch.Tensor:
    """``[n]`` int64: the sample each box belongs to (``counts``: boxes per sample, summing to ``n``).

    ``n`` is given so that ``repeat_interleave`` need not read the counts back from the device.
    """
    counts = torch.as_tensor(counts, dtype=torch.int64)
    if counts.ndim != 1:
        raise ValueError(f"counts must be one count per sample ([B]), got shape {tuple(counts.shape)}")
    if counts.device.type == "cpu" and int(counts.sum()) != n:
        raise ValueError(f"counts sum to {int(counts.sum())} but there are {n} boxes")
    counts = counts.to(device)
    return torch.repeat_interleave(torch.arange(len(counts), device=device), counts, output_size=n)


def _box_canvas(canvas_sizes: Any, counts: Any, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Each box's canvas height and width (``[n]`` int64 each) from per-sample sizes ``[B, 2]`` or one ``(H, W)``."""
    canvas = torch.as_tensor(canvas_sizes, dtype=torch.int64, device=device)
    if canvas.shape == (2,):
        return canvas[0].expand(n), canvas[1].expand(n)
    n_samples = len(torch.as_tensor(counts))
    if canvas.ndim != 2 or canvas.shape != (n_samples, 2):
        raise ValueError(f"canvas_sizes must be (H, W) or one (H, W) per sample ([{n_samples}, 2]), "
                         f"got shape {tuple(canvas.shape)}")
    per_box = canvas[box_samples(counts, n, device)]
    return per_box[:, 0], per_box[:, 1]


def convert_boxes(boxes: torch.Tensor, old_format: Any = None, new_format: Any = "XYXY") -> torch.Tensor:
    """``boxes`` (``[..., 4]``) from ``old_format`` (default: their own, else XYXY) to ``new_format``.

    torchvision's ``convert_bounding_box_format`` on the plain tensor: the batch is one
    tensor, so this is already batched; the result is a plain tensor (the input
    itself when the formats agree, as torchvision returns it).
    """
    old = _box_format(old_format, boxes)
    new = _box_format(new_format, boxes)
    return TF.convert_bounding_box_format(_plain(boxes), old_format=old, new_format=new)


def clamp_boxes(boxes: torch.Tensor, counts: torch.Tensor | Sequence[int], canvas_sizes: Any, *,
                format: Any = None, clamping_mode: str | None = "soft") -> torch.Tensor:
    """Every box clamped to its own sample's canvas, as ``torchvision.transforms.v2.functional.clamp_bounding_boxes``.

    Args:
        boxes: ``[N, 4]`` boxes of every sample, sample after sample (float or integer).
        counts: ``[B]`` boxes per sample.
        canvas_sizes: ``[B, 2]`` ``(H, W)`` per sample, or one ``(H, W)`` for all.
        format: ``"XYXY"``, ``"XYWH"`` or ``"CXCYWH"``; default the boxes' own, else XYXY.
        clamping_mode: ``"soft"`` or ``"hard"`` (the same for axis-aligned boxes), or
            None: no clamping (a copy). ``"auto"`` needs the boxes' own mode: resolve it first.

    Returns a new ``[N, 4]`` tensor of the input's dtype and format: the corners are
    clamped to ``[0, W] x [0, H]`` in XYXY, in float32 for integer boxes, then
    converted back and cast, as torchvision does.
    """
    if clamping_mode not in ("soft", "hard", None):
        raise ValueError(f"clamping_mode must be 'soft', 'hard' or None here, got {clamping_mode!r}"
                         + (" (resolve 'auto' to the boxes' own mode first)" if clamping_mode == "auto" else ""))
    fmt = _box_format(format, boxes)
    boxes = _checked_boxes(boxes)
    if clamping_mode is None:
        return boxes.clone()
    in_dtype = boxes.dtype
    work = boxes.clone() if boxes.is_floating_point() else boxes.float()
    height, width = _box_canvas(canvas_sizes, counts, boxes.shape[0], boxes.device)
    xyxy = TF.convert_bounding_box_format(work, old_format=fmt, new_format="XYXY", inplace=True)
    # clamp(min=0, max=W) with a per-box W: max(x, 0) then min(., W), the order torch's clamp uses
    xyxy[:, 0::2] = torch.minimum(xyxy[:, 0::2].clamp_min(0), width.to(xyxy.dtype)[:, None])
    xyxy[:, 1::2] = torch.minimum(xyxy[:, 1::2].clamp_min(0), height.to(xyxy.dtype)[:, None])
    out = TF.convert_bounding_box_format(xyxy, old_format="XYXY", new_format=fmt, inplace=True)
    return out.to(in_dtype)


def sanitize_boxes(boxes: torch.Tensor, counts: torch.Tensor | Sequence[int], canvas_sizes: Any,
                   min_size: float = 1.0, min_area: float = 1.0, *, format: Any = None) -> torch.Tensor:
    """``[N]`` bool: the boxes ``torchvision.transforms.v2.SanitizeBoundingBoxes`` keeps, each against its sample's canvas.

    A box is kept when, in XYXY (converted in the boxes' dtype), its width and height
    are at least ``min_size``, its area at least ``min_area``, no coordinate is
    negative and none lies past its canvas (``x <= W``, ``y <= H``). NaN boxes are
    dropped. Same arguments as ``clamp_boxes``; ``kept_counts`` gives the new counts.
    """
    fmt = _box_format(format, boxes)
    boxes = _checked_boxes(boxes)
    height, width = _box_canvas(canvas_sizes, counts, boxes.shape[0], boxes.device)
    xyxy = TF.convert_bounding_box_format(boxes, old_format=fmt, new_format="XYXY")
    x0, y0, x1, y1 = xyxy.unbind(-1)
    ws, hs = x1 - x0, y1 - y0
    # the same comparisons, in the same order and dtypes, as torchvision's _get_sanitize_bounding_boxes_mask
    valid = (ws >= min_size) & (hs >= min_size) & (xyxy >= 0).all(dim=-1) & (ws * hs >= min_area)
    valid &= (x0 <= width) & (x1 <= width)
    valid &= (y0 <= height) & (y1 <= height)
    return valid


def kept_counts(keep: torch.Tensor, counts: torch.Tensor | Sequence[int]) -> torch.Tensor:
    """``[B]`` int64: boxes per sample left after keeping ``keep`` (``[N]`` bool), on ``keep``'s device."""
    sample = box_samples(counts, keep.shape[0], keep.device)
    n_samples = len(torch.as_tensor(counts))
    return torch.zeros(n_samples, dtype=torch.int64, device=keep.device).index_add_(0, sample, keep.long())


# --------------------------------------------------------------------------- #
# The batch of boxes and what travels with them
# --------------------------------------------------------------------------- #

class BoxBatch(NamedTuple):
    """The boxes of a batch and the per-box entries that travel with them (labels, instance masks, ...).

    ``per_box`` values are either one ``[N, ...]`` tensor lined up with ``boxes`` (its
    rows follow ``counts``), or a list with one tensor per sample (masks of samples
    of different sizes; or an entry SanitizeBoundingBoxes did not filter, which, as
    in torchvision, no longer lines up with the boxes). A ``tv_tensors.Mask`` entry
    (or a list of them) is a mask, which SanitizeBoundingBoxes filters as torchvision does.
    """

    boxes: torch.Tensor  # [N, 4] plain tensor
    counts: torch.Tensor  # [B] int64, on the boxes' device
    canvas_size: torch.Tensor  # [B, 2] int64 (H, W), on the host
    format: str  # "XYXY", "XYWH" or "CXCYWH"
    #: the boxes' ``clamping_mode`` (torchvision's BoundingBoxes attribute; "soft" is its default)
    clamping_mode: str | None = "soft"
    per_box: Mapping[str, PerBox] = MappingProxyType({})

    @classmethod
    def from_samples(cls, targets: Sequence[Mapping[str, Any]], key: str = "boxes",
                     per_box: Sequence[str] | None = None) -> BoxBatch:
        """One ``BoxBatch`` from per-sample targets as torchvision's detection datasets give them.

        ``targets[i][key]`` is a ``tv_tensors.BoundingBoxes``; all of one format. ``per_box``:
        the other keys to carry (default: every key whose value is a tensor in every sample,
        in the order of the first sample's keys). An entry whose tensors all have one row
        per box and equal trailing dims is concatenated, otherwise kept as a list.
        Loops over the samples (it builds the ragged batch); the ops do not.
        """
        if not targets:
            return cls(torch.zeros(0, 4), torch.zeros(0, dtype=torch.int64), torch.zeros(0, 2, dtype=torch.int64),
                       "XYXY")
        boxes = [t[key] for t in targets]
        for i, b in enumerate(boxes):
            if not isinstance(b, tv_tensors.BoundingBoxes):
                raise TypeError(f"target {i}[{key!r}] must be a tv_tensors.BoundingBoxes, got {type(b).__name__}")
        fmt = _box_format(None, boxes[0])
        modes = {getattr(b, "clamping_mode", "soft") for b in boxes}
        if {_box_format(None, b) for b in boxes} != {fmt} or len(modes) != 1:
            raise ValueError("every sample's boxes must have one format and one clamping_mode")
        counts = torch.tensor([b.shape[0] for b in boxes], dtype=torch.int64)
        if per_box is None:
            per_box = [k for k, v in targets[0].items()
                       if k != key and all(isinstance(t.get(k), torch.Tensor) for t in targets)]
        entries: dict[str, PerBox] = {}
        for k in per_box:
            values = [t[k] for t in targets]
            lined_up = all(v.ndim >= 1 and v.shape[0] == n and v.shape[1:] == values[0].shape[1:]
                           for v, n in zip(values, counts.tolist()))
            if lined_up:
                cat = torch.cat([_plain(v) for v in values])
                entries[k] = tv_tensors.Mask(cat) if all(isinstance(v, tv_tensors.Mask) for v in values) else cat
            else:
                entries[k] = list(values)
        canvas = torch.tensor([tuple(b.canvas_size) for b in boxes], dtype=torch.int64)
        return cls(torch.cat([_plain(b) for b in boxes]), counts.to(boxes[0].device), canvas, fmt,
                   modes.pop(), entries)

    def to_samples(self, key: str = "boxes") -> list[dict[str, Any]]:
        """Per-sample dicts ``{key: BoundingBoxes, **per_box}`` (loops over the samples)."""
        sizes = self.counts.tolist()
        boxes = self.boxes.split(sizes)
        split = {k: (v if isinstance(v, list) else v.split(sizes)) for k, v in self.per_box.items()}
        out = []
        for i, b in enumerate(boxes):
            sample: dict[str, Any] = {key: _bounding_boxes(b, self.format, tuple(self.canvas_size[i].tolist()),
                                                           self.clamping_mode)}
            for k, v in split.items():
                part = v[i]
                sample[k] = tv_tensors.Mask(part) if isinstance(self.per_box[k], tv_tensors.Mask) else part
            out.append(sample)
        return out


def _bounding_boxes(data: torch.Tensor, fmt: str, canvas: tuple[int, int], mode: str | None) -> tv_tensors.BoundingBoxes:
    """``data`` as BoundingBoxes, as ``tv_tensors.wrap`` makes them (no copy; a detection batch makes
    one per sample): the attributes torchvision's wrap gave a template of ``(fmt, mode)``, set on
    ``data.as_subclass`` (wrap's own dispatch costs several times that)."""
    fields = _box_fields.get((fmt, mode))
    if fields is None:
        try:
            like = tv_tensors.BoundingBoxes(torch.zeros(0, 4), format=fmt, canvas_size=(1, 1), clamping_mode=mode)
        except TypeError:  # a torchvision before clamping_mode (< 0.23)
            like = tv_tensors.BoundingBoxes(torch.zeros(0, 4), format=fmt, canvas_size=(1, 1))
        fields = _box_fields[(fmt, mode)] = dict(tv_tensors.wrap(torch.zeros(0, 4), like=like).__dict__)
    if data.dim() == 1:  # (as the constructor: one box)
        data = data.unsqueeze(0)
    boxes = data.as_subclass(tv_tensors.BoundingBoxes)
    boxes.__dict__.update(fields)
    boxes.canvas_size = tuple(canvas)
    return boxes


#: the attributes of a BoundingBoxes per (format, clamping_mode), as ``tv_tensors.wrap`` sets them
_box_fields: dict = {}


def default_label_key(keys: Sequence[Any]) -> Any:
    """The key torchvision's default ``labels_getter`` picks among ``keys``: ``labels`` (any case),
    else the first string key holding ``label``; None when there is none."""
    names = [k for k in keys if isinstance(k, str)]
    key = next((k for k in names if k.lower() == "labels"), None)
    return key if key is not None else next((k for k in names if "label" in k.lower()), None)


def _default_labels(per_box: Mapping[str, PerBox]) -> PerBox:
    """torchvision's default ``labels_getter`` on the batch's per-box entries."""
    key = default_label_key(list(per_box))
    if key is not None:
        return per_box[key]
    raise ValueError("Could not infer where the labels are in the batch's per-box entries. Pass a callable as "
                     "the labels_getter parameter, or labels_getter=None if there are no labels by design.")


def _sanitized(value: PerBox, keep: torch.Tensor, keep_split: Callable[[], tuple[torch.Tensor, ...]],
               must_match: bool, name: str) -> PerBox:
    """``value`` with the dropped boxes' rows removed (a list: per sample, as torchvision indexes it)."""
    if isinstance(value, torch.Tensor):
        out = _plain(value)[keep]
        return tv_tensors.Mask(out) if isinstance(value, tv_tensors.Mask) and not must_match else out
    parts = keep_split()
    if len(value) != len(parts):
        raise ValueError(f"per-box entry {name!r} holds {len(value)} samples, the batch {len(parts)}")
    out_list = []
    for i, (v, k) in enumerate(zip(value, parts)):
        if must_match and (v.ndim == 0 or v.shape[0] != k.shape[0]):
            raise ValueError(f"sample {i}: {k.shape[0]} boxes but {name!r} has shape {tuple(v.shape)}; labels "
                             f"must have one row per box")
        try:
            kept = v[k]
        except IndexError:  # torchvision passes a mask its mask cannot index through unchanged
            out_list.append(v)
            continue
        # torchvision gives labels back plain and masks as masks
        out_list.append(tv_tensors.wrap(kept, like=v) if isinstance(v, tv_tensors.Mask) and not must_match else kept)
    return out_list


def _entries_to_filter(labels_getter: Any, per_box: Mapping[str, PerBox]) -> set[str]:
    if labels_getter is None:
        return set()
    got = _default_labels(per_box) if labels_getter == "default" else labels_getter(per_box)
    if isinstance(got, torch.Tensor) or any(got is v for v in per_box.values()):
        got = (got,)  # one entry (a per-sample list entry is one too)
    if not isinstance(got, (tuple, list)):
        raise ValueError(f"labels_getter must give a tensor (or a tuple of them) from the per-box entries, got "
                         f"{type(got).__name__}")
    return {k for k, v in per_box.items() if any(v is g for g in got)}


def _box_batch(batch: Any, name: str) -> BoxBatch:
    if not isinstance(batch, BoxBatch):
        raise TypeError(f"{name} takes a BoxBatch (a batch's boxes, counts and per-box entries), got "
                        f"{type(batch).__name__}; build one with BoxBatch.from_samples")
    return batch


@register("SanitizeBoundingBoxes", usage="SanitizeBoundingBoxes(min_size=1.0, min_area=1.0, labels_getter='default')",
          semantics="same keep rule; a dropped box's labels and instance mask go too",
          notes="runs on the targets where it stands, the batch's boxes at once (the host waits once per batch "
                "for the kept counts); a callable labels_getter gets `(None, target)`")
class SanitizeBoundingBoxes(Transform):
    """``torchvision.transforms.v2.SanitizeBoundingBoxes`` for a whole batch (a ``BoxBatch``).

    Drops the boxes ``sanitize_boxes`` rejects, each against its own sample's canvas,
    and the same rows of the per-box entries torchvision filters: the labels (per
    ``labels_getter``) and every ``tv_tensors.Mask`` (a per-sample mask whose first dim
    the sample's keep mask cannot index is passed through, as in torchvision). Other
    entries are left as they are (split per sample, no longer lined up with the boxes),
    as torchvision leaves them. Returns a new ``BoxBatch`` with the new counts.

    ``labels_getter``: ``"default"`` (the entry named ``labels`` in any case, else the
    first whose name holds ``label``; an error when there is none), None (boxes and
    masks only), or a callable given the ``per_box`` mapping that returns the entries
    (a tensor or a tuple of them, the very objects in ``per_box``) to filter.

    In a loader's pipeline it is a step on the samples' targets (``_target_plan.py``),
    applied where it stands among the geometry steps; there a callable ``labels_getter``
    is called as torchvision calls it, with the sample ``(image, target)``, the image
    being None (the targets are mapped apart from the pixels).
    """

    stage = "meta"  # no effect on the pixels

    def __init__(self, min_size: float = 1.0, min_area: float = 1.0,
                 labels_getter: Union[Callable[[Any], Any], str, None] = "default") -> None:
        if min_size < 1:
            raise ValueError(f"min_size must be >= 1, got {min_size}.")
        if min_area < 1:
            raise ValueError(f"min_area must be >= 1, got {min_area}.")
        if not (labels_getter == "default" or labels_getter is None or callable(labels_getter)):
            raise ValueError(f"labels_getter should either be 'default', a callable, or None, but got "
                             f"{labels_getter}.")
        self.min_size = min_size
        self.min_area = min_area
        self.labels_getter = labels_getter

    @classmethod
    def from_torchvision(cls, t: Any) -> SanitizeBoundingBoxes:
        return cls(t.min_size, getattr(t, "min_area", 1.0), t.labels_getter)

    def __call__(self, batch: BoxBatch) -> BoxBatch:
        batch = _box_batch(batch, type(self).__name__)
        if len(batch.counts) == 0:
            return batch  # no sample: nothing to drop, and no target to find the labels in
        labels = _entries_to_filter(self.labels_getter, batch.per_box)
        keep = sanitize_boxes(batch.boxes, batch.counts, batch.canvas_size, self.min_size, self.min_area,
                              format=batch.format)
        sizes: list[int] | None = None

        def keep_split() -> tuple[torch.Tensor, ...]:
            nonlocal sizes
            sizes = batch.counts.tolist() if sizes is None else sizes
            return keep.split(sizes)

        per_box: dict[str, PerBox] = {}
        for k, v in batch.per_box.items():
            is_mask = isinstance(v, tv_tensors.Mask) or (isinstance(v, list) and v
                                                          and all(isinstance(m, tv_tensors.Mask) for m in v))
            if k in labels or is_mask:
                if isinstance(v, torch.Tensor) and v.shape[:1] != keep.shape:
                    raise ValueError(f"per-box entry {k!r} has {v.shape[0] if v.ndim else 0} rows for "
                                     f"{keep.shape[0]} boxes")
                per_box[k] = _sanitized(v, keep, keep_split, k in labels, k)
            else:
                per_box[k] = list(v.split(batch.counts.tolist())) if isinstance(v, torch.Tensor) else v
        return batch._replace(boxes=batch.boxes[keep], counts=kept_counts(keep, batch.counts), per_box=per_box)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(min_size={self.min_size}, min_area={self.min_area}, "
                f"labels_getter={self.labels_getter!r})")


@register("ClampBoundingBoxes", usage="ClampBoundingBoxes(clamping_mode='auto')", semantics="yes",
          notes="runs on the targets where it stands, the batch's boxes at once")
class ClampBoundingBoxes(Transform):
    """``torchvision.transforms.v2.ClampBoundingBoxes`` for a whole batch: ``clamp_boxes`` on a ``BoxBatch``.

    ``clamping_mode="auto"`` uses the batch's own ``clamping_mode``, as torchvision uses the boxes'.
    In a loader's pipeline: a step on the samples' targets, where it stands.
    """

    stage = "meta"

    def __init__(self, clamping_mode: str | None = "auto") -> None:
        if clamping_mode not in CLAMPING_MODES:
            raise ValueError(f"clamping_mode must be soft, hard, auto or None, got {clamping_mode}")
        self.clamping_mode = clamping_mode

    @classmethod
    def from_torchvision(cls, t: Any) -> ClampBoundingBoxes:
        return cls(getattr(t, "clamping_mode", "auto"))  # torchvision < 0.23: no argument, the boxes' own

    def __call__(self, batch: BoxBatch) -> BoxBatch:
        batch = _box_batch(batch, type(self).__name__)
        mode = batch.clamping_mode if self.clamping_mode == "auto" else self.clamping_mode
        boxes = clamp_boxes(batch.boxes, batch.counts, batch.canvas_size, format=batch.format, clamping_mode=mode)
        return batch._replace(boxes=boxes)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(clamping_mode={self.clamping_mode!r})"


@register("ConvertBoundingBoxFormat", usage="ConvertBoundingBoxFormat(format)", semantics="yes",
          notes="XYXY, XYWH, CXCYWH; runs on the targets where it stands, the batch's boxes at once")
class ConvertBoundingBoxFormat(Transform):
    """``torchvision.transforms.v2.ConvertBoundingBoxFormat`` for a whole batch: ``convert_boxes`` on a ``BoxBatch``.

    In a loader's pipeline: a step on the samples' targets, where it stands.
    """

    stage = "meta"

    def __init__(self, format: Any) -> None:
        self.format = format
        self._format = _box_format(format, None)

    @classmethod
    def from_torchvision(cls, t: Any) -> ConvertBoundingBoxFormat:
        return cls(t.format)

    def __call__(self, batch: BoxBatch) -> BoxBatch:
        batch = _box_batch(batch, type(self).__name__)
        return batch._replace(boxes=convert_boxes(batch.boxes, batch.format, self._format), format=self._format)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(format={self.format!r})"

