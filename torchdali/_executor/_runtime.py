"""The running state of one ``DataLoader``, in one object that the loader owns and hands down.

The ``DataLoader`` holds its configuration (its ``__init__`` arguments, as public
attributes); a ``LoaderRuntime`` holds everything that changes once it runs: the epoch
counters and the position for ``state_dict``, the generator's state at the epoch's start,
the inner torch loader with the staging ring and the workers' records, the GPU executors,
the iterator parked with the next epoch under way and run-ahead's misses, delivery and
stats. The iterators and run-ahead (``_iterators.py``, ``_run_ahead.py``) are handed the
runtime and read only the loader's public configuration.

Keeping the state off the loader's attributes also keeps it from frameworks that rebuild a
loader from its attributes: Lightning, while a dataloader hook runs, records every attribute
set on a DataLoader outside ``__init__`` and sets it again on the loader it re-instantiates
(to add a sampler), which must not get this loader's epoch counters, resume point, inner
loader or ring.

The functions below read the order's configuration (``seed``, ``generator``, ``sampler``,
``in_order``) from the loader's public attributes, at the time of the call: they may be
changed between epochs.
"""
from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils.data as tud

from .._stats import LoaderStats
from ._deliver import Delivery
from ._tags import EpochState, SeededRandomSampler

_log = logging.getLogger("torchdali")

HAS_IN_ORDER = "in_order" in inspect.signature(tud.DataLoader.__init__).parameters


@dataclass(eq=False)
class LoaderRuntime:
    """The state of a running loader (see the module docstring)."""

    delivery: Delivery  # what turns a finished batch into what the loop gets (``_deliver.py``)
    video: bool = False  # a dataset of video clips (``_video.py``)
    epoch_state: EpochState = field(default_factory=EpochState)  # shared with the inner sampler's passes
    stats: LoaderStats = field(default_factory=LoaderStats)
    epochs_started: int = 0  # the epoch the next iter() starts (``set_epoch``, ``load_state_dict``)
    batches_done: int = 0  # batches of the current epoch delivered (``state_dict``)
    epoch_rng_state: torch.Tensor | None = None  # the generator's state when the current epoch's order was drawn
    resume: dict | None = None  # what ``load_state_dict`` left for the next iter()
    logged_bad: set = field(default_factory=set)  # (index, path) of bad samples already logged
    inner: tud.DataLoader | None = None  # the torch loader whose workers read and pack batches
    ring: Any = None  # its staging ring (``_ring.HostRing``), on the GPU path
    records: Any = None  # what each of its workers is building (``_records.WorkerRecords``)
    executors: dict = field(default_factory=dict)  # device index -> ``_executor.BatchExecutor``
    running: Any = None  # a GpuIterator parked with the next epoch under way (Note [torchdali run-ahead])
    run_ahead_misses: int = 0  # epochs in a row not as drawn ahead (Note [torchdali run-ahead])
    stalled: Any = None  # the DecoderStalled that left the GPU executor stuck

    def on_batch(self, batch: Any, on_error: Any) -> None:
        """Book-keeping for a delivered batch: position for state_dict, skipped samples."""
        self.batches_done += 1
        for index, path, reason in batch.skipped:
            self.stats.last.skipped += 1
            if (index, path) not in self.logged_bad:
                self.logged_bad.add((index, path))
                _log.warning("skipped bad sample (on_error=%r): %s", "skip" if not callable(on_error)
                             else getattr(on_error, "__name__", "callable"), reason)


def effective_seed(loader: Any) -> int:
    """The seed of ``loader``'s per-sample draws: ``seed``, or one derived from the generator's
    or torch's initial seed (and the rank)."""
    if loader.seed is not None:
        return int(loader.seed)
    base = loader.generator.initial_seed() if loader.generator is not None else torch.initial_seed()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        base = base * 1_000_003 + torch.distributed.get_rank()
    return int(base)


def key_order(loader: Any, seed: int, epoch: int) -> None:
    """Key the order ``loader``'s sampler draws next by the ``(seed, epoch)`` that keys the
    samples' draws, when the order is the loader's own (``SeededRandomSampler``)."""
    if isinstance(loader.sampler, SeededRandomSampler):
        loader.sampler.seed, loader.sampler.epoch = seed, epoch


def orders_by_seed(loader: Any) -> bool:
    """Whether the order depends on ``(seed, epoch)`` alone, not on torch's global generator
    or the loader's ``generator``."""
    return isinstance(loader.sampler, SeededRandomSampler)


def rng_state(loader: Any) -> torch.Tensor:
    """A copy of the state of the generator that draws ``loader``'s order."""
    return (loader.generator.get_state() if loader.generator is not None else torch.get_rng_state()).clone()


def restore_rng(loader: Any, state: torch.Tensor) -> None:
    """Set the generator that draws ``loader``'s order to ``state``."""
    if loader.generator is not None:
        loader.generator.set_state(state)
    else:
        torch.set_rng_state(state)


def in_order(loader: Any) -> bool:
    """Whether the inner loader hands batches over in the order they were sampled (a torch
    without the ``in_order`` argument always does)."""
    return not HAS_IN_ORDER or loader.in_order
