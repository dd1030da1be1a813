"""Which samples form a batch, and the tag that follows each sample from the
sampler through the workers to the GPU.

The inner torch DataLoader iterates *tagged* indices (``SampleTag``, sent to
the workers a batch at a time as a ``TagBatch``): the position of a sample in
the epoch keys its random parameters, so a sample gets the same crop whichever
worker reads it. The dataset wrappers read the sample a tag names and hand
``TaggedSample`` records to the packing step (``_worker.py``).
"""
from __future__ import annotations

import collections
import itertools
import math
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

import numpy as np
import torch

from .. import _rng
from ..errors import SampleError

NUM_SPARES = 4  # replacement candidates sent with each batch when on_error is not "raise" ...
SPARES_PER_SAMPLE = 1 / 16  # ... or this many per sample of a larger batch: at 1% bad files a batch of
# 256 holds more than 4 bad ones one time in 8, more than 16 about once in 10^8


#: the random stream of a video clip's position (the ``u`` of ``dataset.read(index, u)``), keyed by the
#: sample like its transform parameters: apart from the transforms' streams (their place among the
#: pipeline's leaves) and from the spare draw's (``1 << 20``, keyed by the batch)
CLIP_STREAM = (1 << 20) + 1


def is_video_dataset(dataset: Any) -> bool:
    """Whether the dataset's items are clips of videos: ``torchdali.video``'s datasets, or any with
    ``read(index, u) -> (EncodedClip, target)`` and ``clip_indices(index, u)``."""
    return callable(getattr(dataset, "read", None)) and callable(getattr(dataset, "clip_indices", None))


def clip_uniforms(seed: int, epoch: int, positions: Any) -> np.ndarray:
    """float64 ``[len(positions)]``: the ``u`` in [0, 1) that places the clip of each sample at
    ``positions`` of ``epoch`` (``CLIP_STREAM``)."""
    return _rng.uniform(_rng.sample_keys(seed, epoch, np.asarray(positions, dtype=np.int64)), CLIP_STREAM, 1)[:, 0]


class SeededRandomSampler(torch.utils.data.RandomSampler):
    """The sampler of ``DataLoader(shuffle=True, seed=...)`` without a ``sampler`` or
    ``generator``: torch's ``RandomSampler`` (every sample once per epoch), whose order is
    the one torch's gives with a generator seeded ``_rng.order_seed(seed, epoch)``.

    The order thus depends on ``(seed, epoch)`` alone, as the samples' draws do, and not
    on torch's global generator: the same in any process and for any ``num_workers``.
    The loader sets ``seed`` and ``epoch`` to its draws' before each epoch (and for the
    draw of the epoch it runs ahead into; Note [torchdali run-ahead]). Each pass seeds a
    generator of its own, so two passes drawn at once never share one.
    """

    def __init__(self, data_source: Any, seed: int) -> None:
        super().__init__(data_source)
        self.seed = int(seed)
        self.epoch = 0

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator()
        generator.manual_seed(_rng.order_seed(self.seed, self.epoch))
        # drawn at iter(): the order is fixed by the (seed, epoch) of that moment
        return iter(torch.randperm(len(self.data_source), generator=generator).tolist())


def num_spares(batch_size: int) -> int:
    """Replacement candidates sent with a batch of ``batch_size`` samples."""
    return max(NUM_SPARES, math.ceil(batch_size * SPARES_PER_SAMPLE))


class SampleTag(NamedTuple):
    """One sample of an epoch, as the sampler hands it to a worker (pickled to it).

    ``position`` (in the epoch) keys the sample's random parameters; ``index`` is
    the dataset index to read; ``spare`` marks a replacement candidate that is
    only read if a sample of its batch fails; ``seq`` numbers the batches the
    loader has dispatched (all epochs) and picks their staging-ring slot (-1: not
    numbered, e.g. an IterableDataset's samples). ``parts`` is the number of parts
    the sample's batch was split into at the start of an epoch (1: sent whole; see
    ``TaggedBatchSampler``), ``part`` which of them holds it.
    """

    seed: int
    epoch: int
    position: int
    index: int
    spare: bool
    seq: int = -1
    parts: int = 1
    part: int = 0


@dataclass(slots=True)
class TagBatch:
    """One batch's tags as the sampler hands them to a worker; iterating it yields
    its ``SampleTag``s, the batch's samples first, then its spares.

    Torch pickles every batch's indices in the main process: the few numbers that
    describe a batch pickle many times faster than a list of NamedTuples, and the
    tags are built in the worker.
    """

    seed: int
    epoch: int
    seq: int
    first_position: int  # the batch's samples are at consecutive positions of the epoch
    indices: Sequence[int]
    spare_positions: Sequence[int] = ()
    spare_indices: Sequence[int] = ()
    parts: int = 1  # > 1: this is part ``part`` of that many consecutive parts of one batch
    part: int = 0

    def __reduce__(self) -> tuple:
        return TagBatch, (self.seed, self.epoch, self.seq, self.first_position, self.indices,
                          self.spare_positions, self.spare_indices, self.parts, self.part)

    def __len__(self) -> int:
        return len(self.indices) + len(self.spare_indices)

    def __iter__(self) -> Iterator[SampleTag]:
        seed, epoch, seq, pos, parts, part = (self.seed, self.epoch, self.seq, self.first_position,
                                              self.parts, self.part)
        for i, idx in enumerate(self.indices):
            yield SampleTag(seed, epoch, pos + i, idx, False, seq, parts, part)
        for p, idx in zip(self.spare_positions, self.spare_indices):
            yield SampleTag(seed, epoch, p, idx, True, seq, parts, part)

    def __getitem__(self, k: int) -> SampleTag:
        n = len(self.indices)
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(f"TagBatch index {k} out of range for {len(self)} tags")
        if k < n:
            return SampleTag(self.seed, self.epoch, self.first_position + k, self.indices[k], False, self.seq,
                             self.parts, self.part)
        return SampleTag(self.seed, self.epoch, self.spare_positions[k - n], self.spare_indices[k - n], True,
                         self.seq, self.parts, self.part)


class TaggedSample(NamedTuple):
    """What the dataset wrappers give the packing step for one tag."""

    tag: SampleTag
    path: str | None  # the file the dataset read, when it knows it
    item: Any  # dataset[index], or SPARE for a spare candidate not read yet


class BatchHead(NamedTuple):
    """What the packing step reads first from a batch's tagged samples (``batch_head``)."""

    samples: list[TaggedSample]  # the batch's own samples, in order
    spares: list[SampleTag]  # the spare candidates that came with them (on_error)
    seed: int
    epoch: int
    indices: np.ndarray  # int64, dataset indices
    positions: np.ndarray  # int64, positions in the epoch (they key the draws)
    paths: list[str | None]


def batch_head(samples: Sequence[TaggedSample]) -> BatchHead:
    """The batch's own samples apart from its spares, with their indices, positions and paths."""
    spares = [s.tag for s in samples if s.tag.spare]
    own = [s for s in samples if not s.tag.spare]
    n = len(own)
    return BatchHead(own, spares, own[0].tag.seed, own[0].tag.epoch,
                     np.fromiter((s.tag.index for s in own), dtype=np.int64, count=n),
                     np.fromiter((s.tag.position for s in own), dtype=np.int64, count=n),
                     [s.path for s in own])


#: what a dataset raises for a bad sample (its own SampleError; OSError for a file that cannot be
#: read or, from PIL, identified): the packing step applies on_error to it (``FailedRead``)
READ_ERRORS = (SampleError, OSError)

SPARE = object()  # placeholder item: a spare candidate that has not been read
# placeholder item: a video clip, read by the packing step with its ``u`` (``_video.PrepareClips``),
# where on_error applies
CLIP = object()


@dataclass(frozen=True)
class FailedRead:
    """The item of a sample whose dataset read raised (``TaggedDataset``): the error, naming
    the sample, raised again by the packing step, where on_error applies to it as to a
    sample that fails to decode (``_worker.PrepareBatch``). The two run in the same worker."""

    error: SampleError


def read_failure(err: BaseException, index: int, path: str | None) -> FailedRead:
    """``err``, raised reading sample ``index``, as a ``FailedRead`` whose error names the sample."""
    if not isinstance(err, SampleError):
        err = SampleError.for_sample(index, path, "cannot read sample", f"{type(err).__name__}: {err}")
    return FailedRead(err)


class FileRef(NamedTuple):
    """The data of a sample that is exactly a file's bytes (``file_item`` of torchdali's
    datasets), named instead of read: on the GPU path the worker reads the file straight
    into its batch's staging-ring slot (``_worker.PrepareBatch``), its only copy out of
    the page cache."""

    path: str


def sample_path(dataset: Any, index: int) -> str | None:
    """The file path of ``dataset[index]`` when the dataset knows it."""
    try:
        if hasattr(dataset, "path_of"):
            return str(dataset.path_of(index))
        samples = getattr(dataset, "samples", None) or getattr(dataset, "imgs", None)
        if samples is not None:
            entry = samples[index]
            return str(entry[0] if isinstance(entry, (tuple, list)) else entry)
    except Exception:
        pass
    return None


@dataclass
class EpochState:
    """What the sampler wrapper and the workers need to know about the current epoch."""

    seed: int = 0
    epoch: int = 0
    skip_batches: int = 0  # resume: batches of this epoch already consumed
    spares: bool = False  # send replacement candidates with each batch
    next_seq: int = 0  # loader-wide batch counter: picks the staging-ring slot


START_PART_SAMPLES = 16  # the smallest part an epoch's first batches are split into
START_BATCHES = 4  # an epoch starts with this many batches in parts (with at least 2 workers per batch)


class EpochStart(NamedTuple):
    """How the first batches of an epoch go to the workers: the first ``batches`` of
    them in ``parts`` parts each (``parts`` 1: every batch whole).

    A worker builds a batch alone, and at the start of an epoch every worker starts
    one at once: the first batch can only be decoded once a worker has read and
    packed all of it (several times as long as the executor takes over a batch, longer
    with every worker busy), while the GPU waits. Instead, the workers' first round of
    tasks (one each) builds the first ``batches`` batches in parts, so they are ready
    when a part is; the workers' next tasks are whole batches, which are ready by the
    time the executor is through the first ones (``benchmarks/RESULTS.md``, decisions
    table: epoch start in parts). The parts write their bytes into their batch's
    staging-ring slot, each into its own ``1 / parts`` of it, and the staging thread
    puts the batch back together from the parts' metadata (``_worker.merge_parts``).
    Later batches go whole: a whole batch costs the main process one hand-over instead
    of ``parts``.
    """

    batches: int = 0
    parts: int = 1


def plan_epoch_start(batch_size: int | None, num_workers: int, batches: int | None = None) -> EpochStart:
    """``batches`` (default ``START_BATCHES``) in as many parts each as spreads them over
    the workers' first round, each part of at least ``START_PART_SAMPLES`` samples and
    each batch in 2 parts at least; fewer batches where the workers are too few."""
    batches = START_BATCHES if batches is None else batches
    if not batch_size or num_workers < 2 or batches <= 0:
        return EpochStart()
    batches = min(batches, num_workers // 2)
    parts = min(num_workers // batches, batch_size // START_PART_SAMPLES)
    if parts < 2:
        return EpochStart()
    return EpochStart(batches, parts)


def split_sizes(n: int, parts: int) -> list[int]:
    """Sizes of ``parts`` consecutive parts of ``n`` samples, differing by at most one."""
    q, r = divmod(n, parts)
    return [q + (j < r) for j in range(parts)]


@dataclass
class EpochPlan:
    """The next epoch, drawn while the current one runs (Note [torchdali run-ahead] in
    ``_run_ahead.py``): its batch sampler's pass with the first batch already drawn,
    and what the draw depended on, which ``iter()`` compares before taking it."""

    seed: int
    epoch: int
    batches: Iterator[list[int]]
    count: int  # len(batch_sampler) when drawn
    rng_before: torch.Tensor  # the loader's generator (torch's global one by default) before the draw ...
    rng_after: torch.Tensor  # ... and after it
    sampler_epoch: int | None = None  # the DistributedSampler epoch drawn with (None: not one)

    @staticmethod
    def draw(batch_sampler: Iterable[list[int]]) -> Iterator[list[int]] | None:
        """``batch_sampler``'s next pass with its first batch drawn (so its random draw is done);
        None for an empty pass."""
        it = iter(batch_sampler)
        try:
            first = next(it)
        except StopIteration:
            return None
        return itertools.chain([first], it)


class TaggedBatchSampler:
    """Wraps the loader's batch sampler; yields ``TagBatch``es.

    With a bad-sample policy other than "raise", each batch also carries
    ``num_spares(batch size)`` spare tags: samples drawn, deterministically from ``(seed,
    epoch, batch)``, out of the same epoch order. Spares are not read unless a
    sample of the batch fails.

    The first ``start.batches`` batches of an epoch (counted from its start, so a
    resumed epoch splits the same batches) go out in ``start.parts`` consecutive
    parts (``EpochStart``); the parts of a batch share its number (and so its
    staging-ring slot), and each has ``num_spares(part size)`` spares of its own.

    A pass goes on into the epoch ``offer``-ed to it (an ``EpochPlan``) when the
    current epoch's batches run out, instead of ending: ``ends`` then gets the
    number of the epoch's last batch, and ``ahead`` the plan (Note [torchdali
    run-ahead] in ``_run_ahead.py``). The epoch it goes on to is sent whole: the
    workers are already busy when it starts.
    """

    def __init__(self, batch_sampler: Any, state: EpochState, start: EpochStart = EpochStart()) -> None:
        self.batch_sampler = batch_sampler
        self.state = state
        self.start = start
        self._lock = threading.Lock()
        self._generation = 0
        self._follow: EpochPlan | None = None  # where the pass goes on to when its epoch ends
        self.ahead: EpochPlan | None = None  # the epoch it went on to, until iter() takes it
        self.ends: collections.deque[int] = collections.deque()  # last batch numbers of epochs gone past

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_lock"]
        state["_follow"] = state["ahead"] = None  # a pass's iterators stay in the main process
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.batch_sampler) - self.state.skip_batches

    def offer(self, plan: EpochPlan | None) -> None:
        """Go on into ``plan`` when the current epoch's batches run out (None: end the pass there)."""
        with self._lock:
            self._follow = plan

    def retire(self) -> int:
        """End every pass started so far and return the last batch number handed out.

        See Note [torchdali iterator shutdown] in ``_iterators.py``: after this an
        abandoned iterator's pass yields no batch, so no batch number beyond the
        returned one can belong to it.
        """
        with self._lock:
            self._generation += 1
            self._follow = self.ahead = None
            self.ends.clear()
            return self.state.next_seq - 1

    def __iter__(self) -> Iterator[TagBatch]:
        return self._pass(self._generation)

    def _pass(self, generation: int) -> Iterator[TagBatch]:
        with self._lock:
            self._follow = self.ahead = None  # offers are made to the pass that is running
            self.ends.clear()
        state = self.state
        seed, epoch, skip = state.seed, state.epoch, state.skip_batches
        state.skip_batches = 0  # a resume offset applies to one epoch only
        batches: Iterable[list[int]] = self.batch_sampler
        start = self.start
        while True:
            last = -1
            for tags in self._epoch(seed, epoch, skip, batches, start, generation):
                last = tags.seq
                yield tags
            with self._lock:
                plan, self._follow = self._follow, None
                if self._generation != generation or plan is None or last < 0:
                    return
                self.ends.append(last)
                self.ahead = plan
            seed, epoch, skip, batches, start = plan.seed, plan.epoch, 0, plan.batches, EpochStart()

    def _epoch(self, seed: int, epoch: int, skip: int, batches: Iterable[list[int]], start: EpochStart,
               generation: int) -> Iterator[TagBatch]:
        """One epoch's ``TagBatch``es; stops early when the pass is retired."""
        order: list[int] | None = None
        if self.state.spares:
            batches = [list(b) for b in batches]
            order = [i for b in batches for i in b]
        pos = 0
        for b, batch in enumerate(batches):
            batch = list(batch)
            if b < skip:
                pos += len(batch)
                continue
            parts = min(start.parts, len(batch) // START_PART_SAMPLES) if b < start.batches else 1
            sizes = split_sizes(len(batch), max(parts, 1))  # [len(batch)]: sent whole
            spares = num_spares(sizes[-1])  # per part (the last is the smallest)
            picks: list[int] = []
            if order:
                drawn = _rng.uniform(_rng.sample_keys(seed, epoch, np.array([b])), 1 << 20, spares * len(sizes))[0]
                picks = [int(p) for p in (drawn * len(order)).astype(np.int64)]
            first = 0
            seq = -1
            for j, size in enumerate(sizes):
                with self._lock:
                    if self._generation != generation:
                        return  # retired: its iterator was closed
                    if j == 0:
                        seq = self.state.next_seq
                        self.state.next_seq += 1
                tags = TagBatch(seed, epoch, seq, pos + first, batch[first:first + size], parts=len(sizes), part=j)
                if order:
                    mine = picks[j * spares:(j + 1) * spares]
                    # spare positions live past the epoch's so their params differ from the original's
                    tags.spare_positions = [len(order) + p for p in mine]
                    tags.spare_indices = [order[p] for p in mine]
                yield tags
                first += size
            pos += len(batch)


class TaggedDataset(torch.utils.data.Dataset):
    """Map-style wrapper: ``ds[tag] -> TaggedSample(tag, path, dataset[index])``; spares are not read,
    nor are a video dataset's clips (``CLIP``: the packing step reads them with their ``u``).

    With ``records`` (``_records.WorkerRecords``), a worker notes the batch it reads
    there first, so its death can be blamed on that batch.
    """

    def __init__(self, dataset: Any, records: Any = None, defer_files: bool = False) -> None:
        self.dataset = dataset
        self.records = records
        # items that are a file's bytes (``dataset.file_item``) travel as a ``FileRef``, read later
        self.defer_files = defer_files and callable(getattr(dataset, "file_item", None))
        self.video = is_video_dataset(dataset)  # clips: read with their u by the packing step

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, tag: SampleTag) -> TaggedSample:
        if tag.spare:
            return TaggedSample(tag, None, SPARE)
        if self.video:
            return TaggedSample(tag, sample_path(self.dataset, tag.index), CLIP)
        try:
            if self.defer_files:
                found = self.dataset.file_item(tag.index)
                if found is not None:
                    path, target = found
                    return TaggedSample(tag, path, (FileRef(path), target))
            return TaggedSample(tag, sample_path(self.dataset, tag.index), self.dataset[tag.index])
        except READ_ERRORS as e:  # a bad sample: on_error decides (FailedRead)
            path = sample_path(self.dataset, tag.index)
            return TaggedSample(tag, path, read_failure(e, tag.index, path))

    def __getitems__(self, tags: TagBatch | list[SampleTag]) -> list[TaggedSample]:
        tags = list(tags)
        if self.records is None:
            return self._read(tags)
        self.records.begin([t.index for t in tags if not t.spare])  # cleared by _records.EndRecord
        try:
            return self._read(tags)
        except BaseException:
            self.records.end()  # the worker reports this error itself
            raise

    def _read(self, tags: list[SampleTag]) -> list[TaggedSample]:
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is None or self.defer_files or self.video:
            return [self[t] for t in tags]
        real = [t for t in tags if not t.spare]
        try:
            items = getitems([t.index for t in real])
        except READ_ERRORS:  # which sample failed is only known read one by one
            return [self[t] for t in tags]
        out = [TaggedSample(t, sample_path(self.dataset, t.index), it) for t, it in zip(real, items)]
        return out + [TaggedSample(t, None, SPARE) for t in tags if t.spare]


class TaggedIterable(torch.utils.data.IterableDataset):
    """Iterable wrapper: tags samples with ``SampleTag(seed, epoch, worker*2**40 + count, count, False)``
    (not numbered: ``seq`` is -1)."""

    def __init__(self, dataset: Any, state: EpochState) -> None:
        self.dataset = dataset
        self.state = state

    def __iter__(self) -> Iterator[TaggedSample]:
        info = torch.utils.data.get_worker_info()
        wid = info.id if info is not None else 0
        seed, epoch = self.state.seed, self.state.epoch
        for count, item in enumerate(self.dataset):
            yield TaggedSample(SampleTag(seed, epoch, (wid << 40) + count, count, False), None, item)
