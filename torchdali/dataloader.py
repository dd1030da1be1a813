"""``torchdali.DataLoader``: torch's DataLoader, with batches produced by a fused
decode + transform executor.

Everything that decides *which* samples form a batch (sampler, batch_sampler,
shuffle, generator, drop_last, len(), workers, worker_init_fn, persistent_workers)
is torch's own code, with one exception: ``shuffle=True`` with ``seed=`` and
neither a ``sampler`` nor a ``generator`` shuffles each epoch with a generator
seeded from ``(seed, epoch)`` (``_tags.SeededRandomSampler``), so that ``seed``
fixes the order as it fixes the draws. Only ``_get_iterator`` changes: an inner
torch DataLoader reads and packs bytes in the workers, and the executor turns
each packed batch into one ``[B, 3, H, W]`` tensor on ``device`` (the images at
their own sizes, in one buffer, when the pipeline does not fix the size);
``collate_fn`` then sees the samples with their images decoded and transformed.

A video dataset (``torchdali.video``) gives one clip per sample: each batch is
``[B, F, 3, H, W]`` (``_executor/_video.py``).

A torchvision folder dataset passed without ``transforms=`` has its own
``transform`` lifted onto the GPU when it converts (``_lift``), and otherwise runs
exactly as under torch.

On the GPU path, with persistent workers, the next epoch's batches are under way
before its ``iter()``: Note [torchdali run-ahead] in ``_executor/_run_ahead.py``.
"""
from __future__ import annotations

import os
from typing import Any, Callable

import torch
import torch.utils.data as tud

from ._executor import _run_ahead
from ._executor._deliver import Delivery
from ._executor._iterators import CpuIterator, GpuIterator
from ._executor._lifeline import Lifeline
from ._executor._records import EndRecord, WorkerRecords
from ._executor._replace import check_on_error
from ._executor._runtime import (HAS_IN_ORDER, LoaderRuntime, effective_seed, in_order, key_order, orders_by_seed,
                                 restore_rng, rng_state)
from ._executor._tags import (EpochStart, EpochState, SeededRandomSampler, TaggedBatchSampler, TaggedDataset,
                             TaggedIterable, is_video_dataset, plan_epoch_start)
from ._executor._video import PrepareClips, check_video_pipeline
from ._executor._worker import PrepareBatch
from . import _options
from ._cuda_env import warn_once_about_work_queues
from ._fork import keep_in_children
from ._stats import LoaderStats
from ._torch_compat import persistent_iterator, shutdown_workers, torch_get_iterator
from ._warn import warn_user
from .datasets import FileBytes, lift_blocker, read_file
from .transforms import compile_transforms

__all__ = ["DataLoader"]

_HAS_IN_ORDER = HAS_IN_ORDER
_PIL_LIMIT = object()  # max_image_pixels default: Pillow's Image.MAX_IMAGE_PIXELS


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


def _lift(dataset: Any, transforms: Any) -> tuple[Any, Any, str | None]:
    """(dataset to load, transforms, why the dataset's transform could not be lifted).

    Only a torchvision dataset that carries an image ``transform`` and was given no
    ``transforms=`` is a candidate. When its transform converts and its items are
    files decoded by torchvision's loader, the loader reads ``(file bytes, target)``
    (``FileBytes``) and runs that transform itself; otherwise the reason is returned
    and the dataset is used as it is.
    """
    from torchvision.datasets import VisionDataset

    transform = getattr(dataset, "transform", None)
    if (transforms is not None or transform is None or not isinstance(dataset, VisionDataset)
            or getattr(dataset, "loader", None) is read_file):
        return dataset, transforms, None
    reason = lift_blocker(dataset)
    if reason is None:
        try:
            compile_transforms(transform)
        except ValueError as e:
            reason = str(e)
    if reason is not None:
        return dataset, None, reason
    return FileBytes(dataset), transform, None


def _video_transforms(dataset: Any, transforms: Any) -> Any:
    """The pipeline of a loader of video clips: ``transforms``, or the dataset's own ``transform``
    (torchvision's transforms give every frame of a clip the same parameters, as the loader does)."""
    own = getattr(dataset, "transform", None)
    if own is not None and transforms is not None:
        raise ValueError("the video dataset has a transform and the DataLoader has transforms=: pass only one "
                         "(the loader runs it on the frames of each clip; the dataset's is not run)")
    return transforms if transforms is not None else own


# GPU executors and rings of loaders whose executor got stuck (DecoderStalled): kept for the
# life of the process, since a thread inside a hung nvJPEG call may still use them
_STUCK: list = []


class DataLoader(tud.DataLoader):
    """A ``torch.utils.data.DataLoader`` whose batches are decoded and transformed as a batch.

    Every torch argument keeps its meaning. The dataset returns ``(encoded bytes,
    target)`` (or an already decoded uint8 image, or just the image). By default a
    batch is ``(images, targets)``: ``images`` one ``[B, 3, H, W]`` tensor on
    ``device``, ``targets`` collated by ``default_collate`` in the workers. When the
    pipeline does not fix the output size, a batch whose images differ in size is
    ``(list of [3, h_i, w_i] images, list of targets)``, as torchvision's detection
    references load it (``torchdali/transforms/_ragged.py``; ``BatchImages`` pads it).
    Targets holding ``tv_tensors.BoundingBoxes`` or ``Mask`` (alone or in a dict, as
    torchvision's detection and segmentation datasets give them) follow every geometry
    step as ``torchvision.transforms.v2`` moves them and come as the list of the
    samples' targets, on ``device``, never collated
    (``torchdali/transforms/_target_plan.py``: what is checked, and what is refused).

    Video: a ``torchdali.video`` dataset (``VideoFolder``, ``VideoFileList``, or any with
    ``read(index, u) -> (EncodedClip, target)`` and ``clip_indices(index, u)``) gives one clip per
    sample, placed in its video by a ``u`` from the per-sample generator (seeded, the same for
    any ``num_workers``, resumable, sharded like images). The transform parameters are drawn
    once per clip and every frame of the clip gets them; the pipeline must fix the output
    size. A batch is ``(clips, targets)``, ``clips`` ``[B, F, 3, H, W]`` (or ``[B, 3, F, H, W]``:
    ``video_layout``). Targets with boxes or masks are refused. On the GPU path NVDEC decodes
    the clips (``_executor/_video.py``).

    ``collate_fn`` keeps torch's meaning: it receives the batch's samples
    ``[(image, target), ...]`` (``image``: that sample's transformed image, a view of
    the finished batch; just ``image`` when the dataset has no targets) and what it
    returns is what the loop gets, so torchvision's reference recipe works unchanged::

        collate_fn=lambda batch: mixup_cutmix(*default_collate(batch))

    It runs once the batch is finished: on the CPU path in the worker (as torch
    runs it); on the GPU path in the loop's thread, on its current stream, before
    ``next()`` returns. Its randomness (torch's, numpy's and Python's global
    generators; the device's CUDA generator) is seeded from ``(seed, epoch, batch)``
    and restored afterwards, so the same seed gives the same batches for any
    ``num_workers`` and after a resume.

    One-line swap: a torchvision ``ImageFolder`` (any ``DatasetFolder``-style
    dataset with ``samples`` and torchvision's decoding ``loader``) whose
    ``transform`` converts (a torchvision/timm pipeline, a weights' ``transforms()``,
    a reference-script preset) can be passed without ``transforms=``: the loader
    reads its files as bytes (``torchdali.datasets.FileBytes``, ``target_transform``
    kept) and runs that transform on the batch, on ``device``. When it cannot (an
    unsupported step, a custom loader, another kind of torchvision dataset), the
    dataset is used as it is, with torch's semantics (items and batches are what
    the dataset's own transform and ``collate_fn`` produce, on the CPU), and a
    warning lists every reason.

    With ``persistent_workers=True`` on the GPU path, the next epoch runs ahead: its order
    is drawn at this epoch's ``iter()`` (torch's generator is set back), and the workers and
    the executor go on into it when this epoch's batches run out, so the next epoch's first
    batches are ready at its ``iter()``. That ``iter()`` takes them only when nothing the
    order depends on changed in between; batches, ``state_dict()`` and the generator's state
    are the same as without it (Note [torchdali run-ahead] in ``torchdali/_executor/_run_ahead.py``
    says when it applies; ``TORCHDALI_RUN_AHEAD=0`` in the environment of ``import torchdali``
    turns it off).

    Args (in addition to torch's):
        transforms: a ``torchdali.transforms.Compose`` (torchvision v1/v2 and timm
            objects, weights' ``transforms()`` and reference-script presets are
            accepted too). Random parameters are drawn per sample. An unsupported
            pipeline raises one ``ValueError`` listing every unsupported step with its
            position and what to use instead. Without a step that fixes the output
            size, each image keeps its own (see above); its size must then be
            bounded, by ``max_image_pixels`` or a ``Resize(size, max_size=...)``, or
            the loader refuses the pipeline when it is built.
        device: where batches are produced: ``"cuda"`` (nvJPEG + fused Triton kernel)
            or ``"cpu"`` (decode + reference kernel inside the workers). Default:
            cuda if available.
        seed: seeds the per-sample random parameters and, with ``shuffle=True`` and
            neither a ``sampler`` nor a ``generator``, the order: each epoch's is the
            one torch's ``RandomSampler`` gives with a generator seeded from ``(seed,
            epoch)`` (the loader's epoch: ``set_epoch``, ``load_state_dict``), whatever
            torch's global generator holds, in any process. A ``generator`` or
            ``sampler`` decides the order as under torch (``distributed=True``: a
            ``DistributedSampler`` seeded ``seed``, moved on by ``set_epoch``). Default:
            derived from the ``generator``'s or torch's initial seed (the order is then
            torch's global generator's), so ``torch.manual_seed`` makes a run
            reproducible.
        batch_transforms: a callable ``(images, targets) -> (images, targets)`` run on
            the finished batch, e.g. ``torchdali.transforms.MixUp``/``CutMix``, or
            torchvision's ``v2.MixUp``, ``v2.CutMix`` or a ``v2.RandomChoice`` of them
            (converted to ours: they run on the GPU executor's thread and stream,
            drawing from torchdali's counter-based generator keyed by ``(seed,
            epoch, batch)``). Any other callable runs as it is, like ``collate_fn``
            and with the same seeding. Cannot be combined with ``collate_fn`` (call it
            inside ``collate_fn`` instead).
        memory_format: ``torch.contiguous_format`` or ``torch.channels_last``.
        prefetch_depth: batches prepared ahead on the GPU (ring of slots).
        distributed: build a ``DistributedSampler`` from the torchrun environment
            (RANK, WORLD_SIZE) and use the GPU given by LOCAL_RANK.
        on_error: what a sample that cannot be read or decoded does. ``"raise"``
            (default): raise ``SampleError`` naming its index, path and the
            decoder's reason. ``"skip"``: replace it by another sample of the same
            epoch (the batch keeps its size), log it once and count it in
            ``stats()``. A callable ``(index, path, exception)`` returns a
            replacement ``(data, target)`` or None to skip.
        max_image_pixels: an encoded image whose header claims more pixels is a
            bad sample (``SampleError`` naming the claimed size), refused before
            any memory is allocated for it, on both paths. Default: Pillow's
            ``Image.MAX_IMAGE_PIXELS`` (89,478,485) when the loader is built;
            None turns the limit off.
        gpu_timeout: GPU path: seconds the executor may spend on one batch (nvJPEG and
            the kernels; milliseconds normally, the first batch also compiles the
            kernels) before the training loop's wait ends in ``DecoderStalled``, naming
            the batch's samples: a file that hangs the decoder stops training with an
            error instead of forever. 0 waits forever. Independent of ``timeout``,
            which bounds the wait for the workers.
        video_layout: a video dataset's batches: ``"BFCHW"`` (default, ``[B, F, C, H, W]``)
            or ``"BCFHW"`` (``[B, C, F, H, W]``, what torchvision's video models take; a
            permuted view of the same memory: ``channels_last_3d`` with
            ``memory_format=torch.channels_last``).
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
        batch_transforms: Callable | None = None,
        device: str | torch.device | None = None,
        seed: int | None = None,
        memory_format: torch.memory_format = torch.contiguous_format,
        prefetch_depth: int = 2,
        distributed: bool = False,
        on_error: str | Callable = "raise",
        max_image_pixels: int | None | object = _PIL_LIMIT,
        gpu_timeout: float = 300.0,
        video_layout: str = "BFCHW",
    ) -> None:
        keep_in_children(self)
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
        video = is_video_dataset(dataset)
        if video:
            transforms = _video_transforms(dataset, transforms)
        dataset, transforms, not_lifted = _lift(dataset, transforms)
        if not_lifted is not None:
            warn_user(f"torchdali.DataLoader: the dataset's transform is not run by torchdali, so the dataset "
                      f"is used as it is, as under torch (its transform runs on the CPU in the workers). "
                      f"Why: {not_lifted}")
        if (shuffle not in (False, None) and seed is not None and sampler is None and batch_sampler is None
                and generator is None and not isinstance(dataset, tud.IterableDataset)):
            # the order from (seed, epoch), as the samples' draws; the rest is torch's shuffle=True.
            # self.generator stays the user's (None): Lightning re-creates loaders from it
            kwargs.update(sampler=SeededRandomSampler(dataset, seed), shuffle=None)
        super().__init__(dataset, **kwargs)
        if self.batch_sampler is None:
            raise ValueError("torchdali.DataLoader needs batches: batch_size=None (no automatic batching) "
                             "is not supported")
        if memory_format not in (torch.contiguous_format, torch.channels_last):
            raise ValueError(f"memory_format must be torch.contiguous_format or torch.channels_last, "
                             f"got {memory_format}")
        check_on_error(on_error)
        if max_image_pixels is _PIL_LIMIT:
            from .decode._limits import default_max_image_pixels

            max_image_pixels = default_max_image_pixels()
        if max_image_pixels is not None and (isinstance(max_image_pixels, bool) or int(max_image_pixels) < 1):
            raise ValueError(f"max_image_pixels must be a positive int or None, got {max_image_pixels!r}")
        if prefetch_depth < 1:
            raise ValueError(f"prefetch_depth must be >= 1, got {prefetch_depth}")
        if isinstance(gpu_timeout, bool) or not float(gpu_timeout) >= 0.0:
            raise ValueError(f"gpu_timeout must be seconds >= 0 (0: wait forever), got {gpu_timeout!r}")
        # The fields below are torchdali's; names match the __init__ arguments so
        # frameworks that re-instantiate loaders from their attributes (Lightning)
        # get every argument back. The running state lives in self._runtime.
        self.transforms = transforms
        # None: the dataset runs as under torch (its transform was not lifted)
        self.plan = None if not_lifted is not None else compile_transforms(transforms)
        if self.plan is not None and video:
            check_video_pipeline(self.plan, video_layout)  # one [B, F, C, H, W] tensor per batch
        if self.plan is not None:
            self.plan.check_bound(max_image_pixels)  # an output size that varies must be boundable
        self.batch_transforms = batch_transforms
        delivery = Delivery(self.collate_fn, batch_transforms, self.plan)
        if delivery.native is not None and self.plan is not None:
            delivery.native.check_dtype(self.plan.out_dtype)
        self.device = _resolve_device(device)
        self.seed = seed
        self.memory_format = memory_format
        self.prefetch_depth = prefetch_depth
        self.distributed = distributed
        self.in_order = in_order
        self.on_error = on_error
        self.max_image_pixels = None if max_image_pixels is None else int(max_image_pixels)
        self.gpu_timeout = float(gpu_timeout)
        self.video_layout = video_layout
        # everything that changes once the loader runs (_executor/_runtime.py)
        self._runtime = LoaderRuntime(delivery, video=video, epoch_state=EpochState(spares=on_error != "raise"))

    # -- torch hooks -------------------------------------------------------
    def __iter__(self):
        self._say_if_no_batches()
        if self.plan is None:
            return super().__iter__()
        if self.device.type == "cuda" and not self._runtime.video:  # nvJPEG's streams (_cuda_env.py)
            warn_once_about_work_queues()
        return self._get_iterator()

    def _say_if_no_batches(self) -> None:
        """torch gives an empty epoch without a word when drop_last drops its only, partial batch."""
        if not self.drop_last or self.batch_size is None:
            return
        try:
            batches, samples = len(self), len(self.sampler)
        except TypeError:  # an iterable dataset need not know its length
            return
        if batches == 0 and samples > 0:
            warn_user(f"torchdali.DataLoader: an epoch gives no batch: its {samples} samples are fewer than "
                      f"batch_size={self.batch_size}, and drop_last=True drops the partial batch")

    def _get_iterator(self):  # torch's hook: _torch_compat.ITERATOR_HOOK
        if self.plan is None:
            return torch_get_iterator(self)
        rt = self._runtime
        if rt.stalled is not None:
            raise RuntimeError(f"this DataLoader's GPU executor is stuck on an earlier batch ({rt.stalled}); "
                               "build a new DataLoader, without the files named there") from rt.stalled
        state = rt.epoch_state
        resume, running = rt.resume, rt.running
        rt.resume = rt.running = None
        if running is not None and running.parked and _run_ahead.take_parked(self, rt, running, resume):
            return running  # Note [torchdali run-ahead]
        if resume is not None:
            if not orders_by_seed(self):  # the generator that drew the order draws it again
                restore_rng(self, resume["rng_state"])
            # (the "cpu_share" of a state_dict saved when the loader had a CPU decode share is ignored)
            state.skip_batches = resume["batches_done"]
        rt.epoch_rng_state = rng_state(self)
        state.seed = effective_seed(self)
        state.epoch = rt.epochs_started
        key_order(self, state.seed, state.epoch)
        rt.batches_done, rt.epochs_started = state.skip_batches, rt.epochs_started + 1
        inner = self._inner_loader()
        if self.device.type == "cuda":
            return GpuIterator(self, rt, inner)
        return CpuIterator(self, rt, inner)

    def _run_ahead_blocker(self) -> str | None:
        """Why this loader would not run ahead into its next epoch on the GPU path (None: it would)."""
        return _run_ahead.blocker(self, self._runtime)

    # -- public ------------------------------------------------------------
    def stats(self) -> LoaderStats:
        """Per-epoch timings: how long the loop waited for data and what each stage took."""
        return self._runtime.stats

    def state_dict(self) -> dict:
        """Where the loader is, to resume mid-epoch with ``load_state_dict``.

        The resumed stream equals the uninterrupted one bitwise: the epoch's index
        order is drawn again from ``(seed, epoch)`` (``seed=`` with ``shuffle=True``) or
        replayed from the saved state of the generator that drew it, batches already
        consumed are skipped without being read, and per-sample parameters are keyed
        by position.
        """
        rt = self._runtime
        done = rt.batches_done
        if rt.epoch_rng_state is not None and 0 < done < len(self):  # mid-epoch
            epoch, state = rt.epochs_started - 1, rt.epoch_rng_state
        else:  # between epochs: the next one starts from the current RNG state
            epoch, state, done = rt.epochs_started, rng_state(self), 0
        return {
            "epoch": epoch,
            "batches_done": done,
            "seed": effective_seed(self),
            "rng_state": state,
            # a sampler moved on by set_epoch (DistributedSampler); the loader keys a SeededRandomSampler itself
            "sampler_epoch": getattr(self.sampler, "epoch", None) if hasattr(self.sampler, "set_epoch") else None,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from a ``state_dict()``: the next ``iter()`` resumes that epoch."""
        if state["seed"] != effective_seed(self):
            raise ValueError(f"state_dict was saved with seed {state['seed']}, this loader has "
                             f"{effective_seed(self)}; pass the same seed= to resume exactly")
        self._runtime.epochs_started, self._runtime.resume = state["epoch"], state
        if state.get("sampler_epoch") is not None and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(state["sampler_epoch"])

    def close(self) -> None:
        """Release GPU state (nvJPEG handles, streams, threads) and persistent workers. Idempotent;
        also runs when the loader is garbage-collected."""
        # what outlives iterators: Note [torchdali iterator shutdown] in _executor/_iterators.py
        rt = self.__dict__.get("_runtime")
        if rt is None:  # __init__ raised before the loader ran
            return
        running, rt.running = rt.running, None
        if running is not None:  # Note [torchdali run-ahead]
            running.close()
        executors, rt.executors = rt.executors, {}
        if rt.inner is not None:
            shutdown_workers(persistent_iterator(rt.inner))
        ring, rt.ring = rt.ring, None
        if rt.stalled is not None:
            # the stuck executor thread may still be reading the ring's pinned memory and be
            # inside nvJPEG: neither is ever freed (destroying its handles may block as well)
            _STUCK.append((executors, ring))
            rt.inner = None
            return
        for ex in executors.values():
            ex.close()
        if ring is not None:
            rt.inner = None  # its workers wrote into the ring: a later iter() builds anew
            ring.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch used for per-sample random parameters (and the sampler's, if it has one)."""
        self._runtime.epochs_started = int(epoch)
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    # -- internals ---------------------------------------------------------
    def _effective_seed(self) -> int:
        return effective_seed(self)

    def _rng_state(self) -> torch.Tensor:
        return rng_state(self)

    def _inner_loader(self) -> tud.DataLoader:
        rt = self._runtime
        if rt.inner is not None:
            return rt.inner
        mode = "gpu" if self.device.type == "cuda" else "cpu"
        options = _options.OPTIONS
        ring = None
        # torchdali's own file datasets: the workers read each file straight into the ring
        direct = options.direct_read and callable(getattr(self.dataset, "file_item", None))
        if mode == "gpu" and not isinstance(self.dataset, tud.IterableDataset) and options.staging_ring \
                and not rt.video:  # (clips travel pickled with their batch)
            from ._executor._ring import HostRing, plan_ring

            batch_size = self.batch_size or getattr(self.batch_sampler, "batch_size", None) or 256
            layout = plan_ring(self.dataset, batch_size, self.num_workers, self.prefetch_factor,
                               self.prefetch_depth)
            if layout is not None:
                # with those, the ring's table keeps what each file's header said for later epochs
                table = direct and options.header_table
                ring = HostRing(*layout, samples=len(self.dataset) if table else 0)
        rt.ring = ring
        prepare = PrepareBatch(self.plan, mode, delivery=rt.delivery,
                               channels_last=self.memory_format == torch.channels_last,
                               on_error=self.on_error, dataset=self.dataset, ring=ring,
                               max_image_pixels=self.max_image_pixels) if not rt.video else \
            PrepareClips(self.plan, mode, self.video_layout, delivery=rt.delivery,
                         channels_last=self.memory_format == torch.channels_last, on_error=self.on_error,
                         dataset=self.dataset)
        records = None
        if self.num_workers > 0:
            # what each worker is building, to name it if the worker dies (_executor/_records.py)
            capacity = (self.batch_size or getattr(self.batch_sampler, "batch_size", None) or 256)
            records = WorkerRecords(self.num_workers, capacity)
        rt.records = records
        kwargs: dict[str, Any] = dict(
            num_workers=self.num_workers, collate_fn=prepare if records is None else EndRecord(prepare, records),
            timeout=self.timeout,
            # each worker ends when this process does, however it ends (_executor/_lifeline.py)
            worker_init_fn=Lifeline(self.worker_init_fn), multiprocessing_context=self.multiprocessing_context,
            generator=self.generator, prefetch_factor=self.prefetch_factor,
            persistent_workers=self.persistent_workers,
        )
        if _HAS_IN_ORDER:
            kwargs["in_order"] = self.in_order
        if isinstance(self.dataset, tud.IterableDataset):
            inner = tud.DataLoader(TaggedIterable(self.dataset, rt.epoch_state), batch_size=self.batch_size,
                                   drop_last=self.drop_last, **kwargs)
        else:
            start = EpochStart()
            if mode == "gpu" and in_order(self) and not rt.video:  # parts are put together in order
                start = plan_epoch_start(self.batch_size or getattr(self.batch_sampler, "batch_size", None),
                                         self.num_workers)
            inner = tud.DataLoader(TaggedDataset(self.dataset, records, defer_files=direct and ring is not None),
                                   batch_sampler=TaggedBatchSampler(self.batch_sampler, rt.epoch_state, start),
                                   **kwargs)
        rt.inner = inner
        return inner

