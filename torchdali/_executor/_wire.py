"""A batch as it leaves a DataLoader worker for the main process: ``PackedBatch``, the
kinds of sample it carries, and ``Skipped``, the record of a sample on_error replaced.

A whole batch leaves the worker as a handful of tensors (one bytes blob plus small
metadata arrays), never one tensor per sample: one shared-memory segment per sample
exhausts file descriptors at batch 256 with many workers. On the GPU path the bytes
usually stay in the batch's staging-ring slot (``ring_seq``) and only the metadata
crosses the worker queue.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np
import torch
from csrc_triton._triton import upload
from torch.utils._pytree import tree_flatten, tree_unflatten
from torchvision import tv_tensors

from ..transforms._box_ops import _bounding_boxes
from ..transforms._plan import BatchParams
from ..transforms._target_plan import TargetColumns, TargetList, flat_keys, flatten, unflatten
from ._tags import SampleTag

# Sample kinds inside a packed batch (``_classify.classify``).
ENCODED = 0  # encoded image bytes, to be decoded (GPU path)
RAW = 1  # already decoded HWC uint8 pixels


class Skipped(NamedTuple):
    """A sample on_error replaced (it crosses from the worker to the main process in ``PackedBatch``)."""

    index: int
    path: str | None
    reason: str


@dataclass
class PackedBatch:
    """A batch as it leaves a worker.

    ``images`` is set on the CPU path (already decoded and transformed). On the GPU
    path ``blob`` holds every sample's payload back to back; ``kinds``, ``offsets``,
    ``lengths`` and ``shapes`` (H, W, C) locate them. ``spares`` are the batch's
    unused spare ``SampleTag``s: replacement candidates for failures found later, on
    the GPU. ``params``, ``slots`` and ``batch_values`` are the batch's drawn
    ``BatchParams`` (``batch_params``).
    """

    seed: int
    epoch: int
    indices: np.ndarray
    positions: np.ndarray
    paths: list
    params: torch.Tensor
    targets: Any
    has_target: bool
    images: torch.Tensor | None = None
    blob: torch.Tensor | None = None
    kinds: np.ndarray | None = None
    offsets: np.ndarray | None = None
    lengths: np.ndarray | None = None
    shapes: np.ndarray | None = None
    hints: np.ndarray | None = None  # header codes for nvJPEG's backend routing (-1: none)
    scan_starts: np.ndarray | None = None  # where each JPEG's scan data starts (-1: not checked)
    scan_check: Any = None  # main process only: the scan check the staging thread started (``_decode.ScanCheck``)
    seq: int = -1  # the loader-wide batch number (-1: not numbered, e.g. an IterableDataset)
    ring_seq: int = -1  # >= 0: the bytes are in slot ``ring_seq`` of the staging ring, not in ``blob``
    first_position: int = -1  # epoch position of the batch's first sample as sampled: keys its batch-level draws
    output: Any = None  # CPU path with a batch transform or collate_fn: what the loop gets (see _deliver.py)
    has_output: bool = False
    spares: list[SampleTag] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)  # samples replaced under on_error
    seconds: float = 0.0  # worker time spent on this batch
    slots: torch.Tensor | None = None  # [B, K, SLOT_WIDTH] augment program slots (None: no program)
    batch_values: dict = field(default_factory=dict)  # batch-level drawn values
    # > 1: one of that many consecutive parts of a batch (``_tags.EpochStart``), its bytes in
    # its own share of the batch's ring slot, its targets not collated yet; ``_worker.merge_parts``
    # puts the batch together
    parts: int = 1
    # boxes and masks: the batch's ``_targets.trace_plan``, from the worker's draw (None: traced again
    # where the targets are mapped)
    trace: Any = None
    # GPU path, a video dataset: the samples' ``EncodedClip``s (small: pickled with the metadata, never
    # in the staging ring), ``params`` one row per clip, ``shapes`` (H, W, NV12 code); see ``_video.py``
    clips: list | None = None

    # Small tensors cross the worker queue as numpy arrays, pickled inline: a torch
    # tensor would travel as a shared-memory segment plus a file descriptor, whose
    # hand-over costs the main process more than the bytes do.
    _INLINE = ("params", "targets", "slots")

    @property
    def batch_params(self) -> BatchParams:
        """What was drawn for this batch, as ``_execute.execute`` takes it."""
        if self.slots is None:
            return BatchParams.without_program(self.params)
        return BatchParams(self.params, self.slots, self.batch_values)

    def set_params(self, drawn: BatchParams) -> None:
        """Store a draw (``_worker.draw_params``); a plan without program carries no slots."""
        self.params = drawn.params
        self.slots = drawn.slots if drawn.slots.shape[1] else None
        self.batch_values = dict(drawn.batch)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for name in self._INLINE:
            v = state[name]
            if isinstance(v, torch.Tensor) and not v.is_cuda and v.numel() <= (1 << 18) and v.dtype in _NP_SAFE:
                state[name] = _Inline(v.numpy())
        if isinstance(state["targets"], TargetList):  # CPU path: mapped boxes and masks, packed
            state["targets"] = PackedTargets.pack(state["targets"], mapped=True)
        return state

    def __setstate__(self, state: dict) -> None:
        for name in self._INLINE:
            if isinstance(state.get(name), _Inline):
                state[name] = torch.from_numpy(state[name].array)
        targets = state.get("targets")
        if isinstance(targets, PackedTargets) and targets.mapped:
            state["targets"] = TargetList(targets.unpack())
        self.__dict__.update(state)


#: byte alignment of each tensor in a ``PackedTargets`` buffer (any dtype can be viewed there)
_TARGET_ALIGN = 16
#: a ``PackedTargets`` buffer up to this size pickles inline (numpy); a larger one as one shared-memory tensor
_TARGET_INLINE_BYTES = 1 << 20
_PLAIN, _BOXES, _MASK = 0, 1, 2


class _TensorRef:
    """Where a tensor leaf of a packed target is: byte ``offset`` in the buffer, shape, dtype,
    and the tv_tensor it was (``kind``; a BoundingBoxes' format, canvas_size and clamping_mode)."""

    __slots__ = ("offset", "shape", "dtype", "kind", "meta")

    def __init__(self, offset: int, shape: tuple, dtype: torch.dtype, kind: int, meta: tuple) -> None:
        self.offset, self.shape, self.dtype, self.kind, self.meta = offset, shape, dtype, kind, meta

    def __getstate__(self) -> tuple:
        return (self.offset, self.shape, self.dtype, self.kind, self.meta)

    def __setstate__(self, state: tuple) -> None:
        self.offset, self.shape, self.dtype, self.kind, self.meta = state


class _Column(NamedTuple):
    """A key of every target whose leaves lie back to back in the buffer, sample after sample
    (``PackedTargets.columns``); the targets hold ``_IN_COLUMN`` in its place."""

    key: Any
    offset: int  # the first sample's leaf, in bytes
    dtype: torch.dtype
    tail: tuple  # the leaves' shape past their first dimension
    kind: int
    rows: np.ndarray  # [B] int64: each sample's first dimension
    meta: tuple  # BoundingBoxes: (format, clamping_mode); else ()
    canvas: np.ndarray | None  # BoundingBoxes: [B, 2] int64 (H, W) per sample


class _InColumn:
    """What a packed target holds for a leaf that travels in a ``_Column``."""

    def __reduce__(self) -> str:
        return "_IN_COLUMN"

    def __repr__(self) -> str:
        return "_IN_COLUMN"


_IN_COLUMN = _InColumn()


class PackedTargets:
    """A batch's targets as they cross processes: every tensor leaf of every sample's target
    in one byte buffer, the targets themselves with ``_TensorRef``s in their place.

    One buffer per batch, not one shared-memory segment per tensor (the file descriptors
    of a batch of detection targets would run out, as ``_wire``'s docstring says of
    images): a small one pickles inline as numpy, a large one (masks) as one tensor. Where
    every target is a flat dict with the same keys (a detection batch), a key's leaves of one
    dtype and trailing shape lie back to back (``columns``): they cross processes as a few
    arrays per key, not one object per leaf, and the executor makes a batch's views of them
    with one split. On the GPU path the buffer goes to the device in one copy
    (``unpack(device)``). A sequence of the samples' targets, unpacked (``[i]``, slices,
    iteration); setting one (on_error's replacement on the GPU) packs the batch again.
    ``mapped``: the targets were already mapped (the CPU path's result), so they arrive as
    a ``TargetList``; else (the GPU path) the executor maps them (``_executor.map_targets``).
    """

    def __init__(self, trees: list, data: Any, mapped: bool = False, columns: tuple = ()) -> None:
        self.trees = trees
        self.data = data  # 1-D uint8 numpy array or tensor
        self.mapped = mapped
        self.columns = columns  # _Column: keys whose leaves lie back to back, sample after sample

    @classmethod
    def pack(cls, targets: Sequence[Any], mapped: bool = False) -> PackedTargets:
        flat = [flatten(t) for t in targets]
        with torch._C.DisableTorchFunctionSubclass():  # shapes, dtypes and copies without the tv_tensors' dispatch
            columns = _columns(flat)
            in_column = {k for k, _ in columns}
            parts: list[tuple[int, torch.Tensor]] = []  # (byte offset, tensor) to write
            at = 0
            packed_columns = []
            for k, key in columns:  # a key's leaves back to back, so that one split gives the samples' views
                leaves = [leaves[k] for leaves, _ in flat]
                first = leaves[0]
                kind, meta = _kind_of(first)
                canvas = None
                if kind == _BOXES:
                    canvas = np.array([tuple(leaf.canvas_size) for leaf in leaves], dtype=np.int64).reshape(-1, 2)
                block = torch.cat([leaf.reshape(-1) for leaf in leaves])
                parts.append((at, block))
                packed_columns.append(_Column(key, at, first.dtype, tuple(first.shape[1:]), kind,
                                              np.array([leaf.shape[0] for leaf in leaves], dtype=np.int64),
                                              meta, canvas))
                at = _aligned(at + block.numel() * block.element_size())
            trees = []
            for leaves, spec in flat:
                out = []
                for k, leaf in enumerate(leaves):
                    if k in in_column:
                        out.append(_IN_COLUMN)
                        continue
                    if not isinstance(leaf, torch.Tensor) or leaf.is_cuda:  # a number, a string, a GPU tensor
                        out.append(leaf)
                        continue
                    kind, meta = _kind_of(leaf)
                    if kind == _BOXES:
                        meta = (meta[0], tuple(int(v) for v in leaf.canvas_size), meta[1])
                    out.append(_TensorRef(at, tuple(leaf.shape), leaf.dtype, kind, meta))
                    parts.append((at, leaf))
                    at = _aligned(at + leaf.numel() * leaf.element_size())
                trees.append(unflatten(out, spec))
            data = torch.empty(at, dtype=torch.uint8)
            for offset, t in parts:
                n = t.numel() * t.element_size()
                if n:
                    data[offset: offset + n] = t.detach().reshape(-1).view(torch.uint8)
        return cls(trees, data.numpy() if at <= _TARGET_INLINE_BYTES else data, mapped, tuple(packed_columns))

    def data_on(self, device: torch.device | str | None = None) -> torch.Tensor:
        """The buffer on ``device`` (one copy through pinned memory, ``upload``) or on the host."""
        data = self.data if isinstance(self.data, torch.Tensor) else torch.from_numpy(self.data)
        if device is not None and torch.device(device).type != "cpu":
            data = upload([data], torch.device(device))[0]
        return data

    def unpack(self, device: torch.device | str | None = None, data: torch.Tensor | None = None) -> list:
        """The samples' targets, every tensor a view of the buffer (``data``, or the buffer put
        on ``device`` by ``data_on``)."""
        data = self.data_on(device) if data is None else data
        typed: dict = {}
        if not self.columns:
            return [_unpacked(tree, data, typed) for tree in self.trees]
        # flat dicts with the same keys: each column's views in one split, the rest leaf by leaf
        out = [dict(tree) for tree in self.trees]
        for col in self.columns:
            view = _typed(data, col.dtype, typed)
            n = int(col.rows.sum())
            start = col.offset // view.element_size()
            parts = view[start: start + n * math.prod(col.tail)].view(n, *col.tail).split(col.rows.tolist())
            if col.kind == _BOXES:
                fmt, mode = col.meta
                parts = [_bounding_boxes(t, fmt, canvas, mode) for t, canvas in zip(parts, col.canvas.tolist())]
            elif col.kind == _MASK:
                parts = [tv_tensors.Mask(t) for t in parts]
            for target, t in zip(out, parts):
                target[col.key] = t
        in_columns = {col.key for col in self.columns}
        others = [key for key in out[0] if key not in in_columns]  # (every target has the same keys)
        for target in out:
            for key in others:
                if isinstance(target[key], _TensorRef):
                    target[key] = _tensor(target[key], data, typed)
        return out

    def columnar(self) -> TargetColumns | None:
        """The targets as ``TargetColumns`` (views of the host buffer), which ``TargetPlan.map`` maps a
        key at a time; None where no key lies in a column (``_columns``)."""
        if not self.columns:
            return None
        data, typed = self._host(), {}
        columns, rows, boxes, masks = {}, {}, {}, set()
        for col in self.columns:
            view = _typed(data, col.dtype, typed)
            n = int(col.rows.sum())
            start = col.offset // view.element_size()
            columns[col.key] = view[start: start + n * math.prod(col.tail)].view(n, *col.tail)
            rows[col.key] = col.rows
            if col.kind == _BOXES:
                boxes[col.key] = (*col.meta, col.canvas)
            elif col.kind == _MASK:
                masks.add(col.key)
        rest = [{k: _tensor(v, data, typed) if isinstance(v, _TensorRef) else v for k, v in tree.items()
                 if v is not _IN_COLUMN} for tree in self.trees]
        return TargetColumns(tuple(self.trees[0]), columns, rows, boxes, frozenset(masks), rest)

    def __len__(self) -> int:
        return len(self.trees)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.unpack())

    def __getitem__(self, index: int | slice) -> Any:
        if self.columns:
            return self.unpack()[index]
        if isinstance(index, slice):
            return [_unpacked(tree, self._host()) for tree in self.trees[index]]
        return _unpacked(self.trees[index], self._host())

    def __setitem__(self, index: int | slice, value: Any) -> None:
        targets = self.unpack()
        targets[index] = value
        new = PackedTargets.pack(targets, self.mapped)
        self.trees, self.data, self.columns = new.trees, new.data, new.columns

    def _host(self) -> torch.Tensor:
        return self.data if isinstance(self.data, torch.Tensor) else torch.from_numpy(self.data)


def _unpacked(tree: Any, data: torch.Tensor, typed: dict | None = None) -> Any:
    """``tree`` with its ``_TensorRef``s replaced by views of ``data``; ``typed``: the views of
    ``data`` as each dtype met so far, shared across a batch's trees (every offset is a multiple
    of ``_TARGET_ALIGN``, so a leaf is one slice of its dtype's view)."""
    typed = {} if typed is None else typed
    if type(tree) is dict and all(isinstance(v, _FLAT) for v in tree.values()):
        # a detection target: one flat dict per sample, many per batch (no pytree round trip)
        return {k: _tensor(v, data, typed) if isinstance(v, _TensorRef) else v for k, v in tree.items()}
    leaves, spec = tree_flatten(tree)
    for k, ref in enumerate(leaves):
        if isinstance(ref, _TensorRef):
            leaves[k] = _tensor(ref, data, typed)
    return tree_unflatten(leaves, spec)


#: values a target dict may hold for the fast path: leaves of any pytree (a container, or a class
#: registered as a pytree node, goes through tree_flatten)
_FLAT = (_TensorRef, torch.Tensor, np.ndarray, int, float, str, bytes, type(None))


def _tensor(ref: _TensorRef, data: torch.Tensor, typed: dict) -> torch.Tensor:
    """The leaf ``ref`` points at: a view of ``data`` (a BoundingBoxes or a Mask where it was one)."""
    view = _typed(data, ref.dtype, typed)
    start = ref.offset // view.element_size() if ref.offset < len(data) else 0  # (an empty leaf: any place)
    return _kind(view[start: start + math.prod(ref.shape)].view(ref.shape), ref)


def _typed(data: torch.Tensor, dtype: torch.dtype, typed: dict) -> torch.Tensor:
    """``data`` viewed as ``dtype`` (kept in ``typed``; every offset is a multiple of its element size)."""
    view = typed.get(dtype)
    if view is None:
        n = len(data) - len(data) % dtype.itemsize
        # an empty buffer (every leaf empty: a batch with no box) may have stride 0, which view() refuses
        view = typed[dtype] = data[:n].view(dtype) if n else torch.empty(0, dtype=dtype, device=data.device)
    return view


def _kind(t: torch.Tensor, ref: _TensorRef) -> torch.Tensor:
    """``t`` as the tv_tensor ``ref`` was (a BoundingBoxes or a Mask), else as it is."""
    if ref.kind == _BOXES:
        fmt, canvas, mode = ref.meta
        return _bounding_boxes(t, fmt, canvas, mode)
    if ref.kind == _MASK:
        return tv_tensors.Mask(t)
    return t


def _kind_of(leaf: torch.Tensor) -> tuple[int, tuple]:
    """A tensor leaf's kind and what a column of them shares: a BoundingBoxes' (format,
    clamping_mode); nothing for a Mask or a plain tensor."""
    if isinstance(leaf, tv_tensors.BoundingBoxes):
        return _BOXES, (leaf.format.name, getattr(leaf, "clamping_mode", "soft"))
    return (_MASK if isinstance(leaf, tv_tensors.Mask) else _PLAIN), ()


def _aligned(offset: int) -> int:
    return -(-offset // _TARGET_ALIGN) * _TARGET_ALIGN


def _columns(flat: list) -> list[tuple[int, Any]]:
    """``(leaf position, key)`` of each key whose leaves can be laid out as one column: every
    target a flat dict with the same keys, the key's leaves host tensors of one type, dtype and
    shape past the first dimension (boxes ``[n, 4]``, labels ``[n]``; BoundingBoxes of one format
    and clamping mode)."""
    keys = flat_keys(flat[0][1]) if flat else None
    if keys is None or any(flat_keys(spec) != keys for _, spec in flat):
        return []
    out = []
    for k, key in enumerate(keys):
        first = flat[0][0][k]
        if not isinstance(first, torch.Tensor) or first.is_cuda or first.dim() == 0:
            continue
        cls, dtype, dim, tail, meta = type(first), first.dtype, first.dim(), first.shape[1:], _kind_of(first)[1]
        if all(type(leaves[k]) is cls and leaves[k].dtype == dtype and not leaves[k].is_cuda and leaves[k].dim() == dim
               and leaves[k].shape[1:] == tail and (not meta or _kind_of(leaves[k])[1] == meta) for leaves, _ in flat):
            out.append((k, key))
    return out


class _Inline:
    """A tensor's data carried as a numpy array through pickling."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __getstate__(self):
        return self.array

    def __setstate__(self, array):
        self.array = array


_NP_SAFE = (torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8,
            torch.uint8, torch.bool)
