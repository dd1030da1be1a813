"""``torchdali.DataLoader``: torch's DataLoader, with batches produced by a fused
decode + transform executor.

Everything that decides *which* samples form a batch (sampler, batch_sampler,
shuffle, generator, drop_last, len(), workers, worker_init_fn, persistent_workers)
is torch's own code. Only ``_get_iterator`` changes: an inner torch DataLoader
reads and packs bytes in the workers, and the executor turns each packed batch
into one ``[B, 3, H, W]`` tensor on ``device``.
"""
from __future__ import annotations

import inspect
import os
import time
from typing import Any, Callable

import torch
import torch.utils.data as tud

from ._executor._worker import EpochState, PrepareBatch, TaggedBatchSampler, TaggedDataset, TaggedIterable
from ._stats import LoaderStats
from .transforms import compile_transforms

__all__ = ["DataLoader"]

_HAS_IN_ORDER = "in_order" in inspect.signature(tud.DataLoader.__init__).parameters


def _resolve_device(device: Any) -> torch.device:
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was requested but torch.cuda.is_available() is False; "
                         "pass device='cpu' to run the CPU path")
    return device


class DataLoader(tud.DataLoader):
    """A ``torch.utils.data.DataLoader`` whose batches are decoded and transformed as a batch.

    Every torch argument keeps its meaning. The dataset returns ``(encoded bytes,
    target)`` (or an already decoded uint8 image); ``collate_fn`` collates the targets.

    Args (in addition to torch's):
        transforms: a ``torchdali.transforms.Compose`` (torchvision v2 objects are
            accepted too) whose output size is fixed. Random parameters are drawn
            per sample.
        device: where batches are produced: ``"cuda"`` (nvJPEG + fused Triton kernel)
            or ``"cpu"`` (decode + reference kernel inside the workers). Default:
            cuda if available.
        seed: seeds the per-sample random parameters. Default: derived from the
            ``generator``'s or torch's initial seed, so ``torch.manual_seed`` makes
            a run reproducible.
        memory_format: ``torch.contiguous_format`` or ``torch.channels_last``.
        prefetch_depth: batches prepared ahead on the GPU (ring of slots).
        distributed: build a ``DistributedSampler`` from the torchrun environment
            (RANK, WORLD_SIZE) and use the GPU given by LOCAL_RANK.
    """

    def __init__(
        self,
        dataset: tud.Dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        transforms: Any = None,
        device: str | torch.device | None = None,
        seed: int | None = None,
        memory_format: torch.memory_format = torch.contiguous_format,
        prefetch_depth: int = 2,
        distributed: bool = False,
    ) -> None:
        if distributed and sampler is None and batch_sampler is None:
            from .distributed import distributed_sampler

            sampler = distributed_sampler(dataset, shuffle=bool(shuffle), seed=seed or 0, drop_last=drop_last)
            shuffle = None
        if distributed and device is None and torch.cuda.is_available():
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
        kwargs: dict[str, Any] = dict(
            batch_size=batch_size, shuffle=shuffle, sampler=sampler, batch_sampler=batch_sampler,
            num_workers=num_workers, collate_fn=collate_fn, pin_memory=pin_memory, drop_last=drop_last,
            timeout=timeout, worker_init_fn=worker_init_fn, multiprocessing_context=multiprocessing_context,
            generator=generator, prefetch_factor=prefetch_factor, persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
        )
        if _HAS_IN_ORDER:
            kwargs["in_order"] = in_order
        super().__init__(dataset, **kwargs)
        if self.batch_sampler is None:
            raise ValueError("torchdali.DataLoader needs batches: batch_size=None (no automatic batching) "
                             "is not supported")
        if memory_format not in (torch.contiguous_format, torch.channels_last):
            raise ValueError(f"memory_format must be torch.contiguous_format or torch.channels_last, "
                             f"got {memory_format}")
        if prefetch_depth < 1:
            raise ValueError(f"prefetch_depth must be >= 1, got {prefetch_depth}")
        # The fields below are torchdali's; names match the __init__ arguments so
        # frameworks that re-instantiate loaders from their attributes (Lightning)
        # get every argument back.
        self.__dict__["transforms"] = transforms
        self.__dict__["plan"] = compile_transforms(transforms)
        self.__dict__["device"] = _resolve_device(device)
        self.__dict__["seed"] = seed
        self.__dict__["memory_format"] = memory_format
        self.__dict__["prefetch_depth"] = prefetch_depth
        self.__dict__["distributed"] = distributed
        self.__dict__["in_order"] = in_order
        self.__dict__["_epoch_state"] = EpochState()
        self.__dict__["_epochs_started"] = 0
        self.__dict__["_inner"] = None
        self.__dict__["_stats"] = LoaderStats()

    # -- torch hooks -------------------------------------------------------
    def __iter__(self):
        return self._get_iterator()

    def _get_iterator(self):
        state = self._epoch_state
        state.seed = self._effective_seed()
        state.epoch = self._epochs_started
        self.__dict__["_epochs_started"] = self._epochs_started + 1
        inner = self._inner_loader()
        if self.device.type == "cuda":
            from ._executor._gpu import GpuIterator

            return GpuIterator(self, inner)
        return _CpuIterator(self, inner)

    # -- public ------------------------------------------------------------
    def stats(self) -> LoaderStats:
        """Per-epoch timings: how long the loop waited for data and what each stage took."""
        return self._stats

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch used for per-sample random parameters (and the sampler's, if it has one)."""
        self.__dict__["_epochs_started"] = int(epoch)
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    # -- internals ---------------------------------------------------------
    def _effective_seed(self) -> int:
        if self.seed is not None:
            return int(self.seed)
        base = self.generator.initial_seed() if self.generator is not None else torch.initial_seed()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            base = base * 1_000_003 + torch.distributed.get_rank()
        return int(base)

    def _inner_loader(self) -> tud.DataLoader:
        if self._inner is not None:
            return self._inner
        mode = "gpu" if self.device.type == "cuda" else "cpu"
        prepare = PrepareBatch(self.plan, mode, collate_fn=self.collate_fn,
                               channels_last=self.memory_format == torch.channels_last)
        kwargs: dict[str, Any] = dict(
            num_workers=self.num_workers, collate_fn=prepare, timeout=self.timeout,
            worker_init_fn=self.worker_init_fn, multiprocessing_context=self.multiprocessing_context,
            generator=self.generator, prefetch_factor=self.prefetch_factor,
            persistent_workers=self.persistent_workers,
        )
        if _HAS_IN_ORDER:
            kwargs["in_order"] = self.in_order
        if isinstance(self.dataset, tud.IterableDataset):
            inner = tud.DataLoader(TaggedIterable(self.dataset, self._epoch_state), batch_size=self.batch_size,
                                   drop_last=self.drop_last, **kwargs)
        else:
            inner = tud.DataLoader(TaggedDataset(self.dataset),
                                   batch_sampler=TaggedBatchSampler(self.batch_sampler, self._epoch_state),
                                   **kwargs)
        self.__dict__["_inner"] = inner
        return inner


def _unpack(batch: Any, images: torch.Tensor):
    if batch.has_target:
        return images, batch.targets
    return images


class _CpuIterator:
    """Batches are finished in the workers; the main process only hands them over."""

    def __init__(self, loader: DataLoader, inner: tud.DataLoader) -> None:
        self._loader = loader
        self._it = iter(inner)
        self._stats = loader._stats
        self._stats.start_epoch(loader._epoch_state.epoch)

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self):
        t0 = time.perf_counter()
        try:
            batch = next(self._it)
        except StopIteration:
            self._stats.end_epoch()
            raise
        self._stats.add_batch(len(batch.indices), wait=time.perf_counter() - t0, worker=batch.seconds)
        return _unpack(batch, batch.images)
