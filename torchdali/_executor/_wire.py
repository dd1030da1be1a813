"""A batch as it leaves a DataLoader worker for the main process: ``PackedBatch``, the
kinds of sample it carries, and ``Skipped``, the record of a sample on_error replaced.

A whole batch leaves the worker as a handful of tensors (one bytes blob plus small
metadata arrays), never one tensor per sample: one shared-memory segment per sample
exhausts file descriptors at batch 256 with many workers. On the GPU path the bytes
usually stay in the batch's staging-ring slot (``ring_seq``) and only the metadata
crosses the worker queue.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from ..transforms._plan import BatchParams
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
        return state

    def __setstate__(self, state: dict) -> None:
        for name in self._INLINE:
            if isinstance(state.get(name), _Inline):
                state[name] = torch.from_numpy(state[name].array)
        self.__dict__.update(state)


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
