"""What runs in the DataLoader workers: read, tag, and pack (or decode) a batch.

The inner torch DataLoader iterates *tagged* indices ``(seed, epoch, position,
index)``: the position of a sample in the epoch keys its random parameters, so a
sample gets the same crop whichever worker reads it. A whole batch leaves the
worker as a handful of tensors (one bytes blob plus small metadata arrays),
never one tensor per sample: one shared-memory segment per sample exhausts file
descriptors at batch 256 with many workers.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.utils.data._utils.collate import default_collate

from .. import _rng
from ..errors import SampleError
from ..transforms._plan import Plan, run_reference, to_hwc

# Sample kinds inside a packed batch.
ENCODED = 0  # encoded image bytes, to be decoded (GPU path)
RAW = 1  # already decoded HWC uint8 pixels


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


NUM_SPARES = 4  # replacement candidates sent with each batch when on_error is not "raise"


@dataclass
class EpochState:
    """What the sampler wrapper and the workers need to know about the current epoch."""

    seed: int = 0
    epoch: int = 0
    skip_batches: int = 0  # resume: batches of this epoch already consumed
    spares: bool = False  # send replacement candidates with each batch
    next_seq: int = 0  # loader-wide batch counter: picks the staging-ring slot


class TaggedBatchSampler:
    """Wraps the loader's batch sampler; yields tagged batches.

    A tag is ``(seed, epoch, position, index, spare, seq)``; ``seq`` numbers the
    batches the loader has dispatched (all epochs) and picks their staging slot. With a bad-sample policy
    other than "raise", each batch also carries ``NUM_SPARES`` spare tags: samples
    drawn, deterministically from ``(seed, epoch, batch)``, out of the same epoch
    order. Spares are not read unless a sample of the batch fails.
    """

    def __init__(self, batch_sampler: Any, state: EpochState) -> None:
        self.batch_sampler = batch_sampler
        self.state = state
        self._lock = threading.Lock()
        self._generation = 0

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.batch_sampler) - self.state.skip_batches

    def retire(self) -> int:
        """End every pass started so far and return the last batch number handed out.

        An abandoned iterator's pass may still be asked for batches (torch refills its
        prefetch from whichever thread is inside it); after this it yields none, so
        no batch number beyond the returned one can belong to it.
        """
        with self._lock:
            self._generation += 1
            return self.state.next_seq - 1

    def __iter__(self):
        return self._pass(self._generation)

    def _pass(self, generation: int):
        seed, epoch, skip = self.state.seed, self.state.epoch, self.state.skip_batches
        self.state.skip_batches = 0  # a resume offset applies to one epoch only
        batches = self.batch_sampler
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
            with self._lock:
                if self._generation != generation:
                    return  # retired: its iterator was closed
                seq = self.state.next_seq
                self.state.next_seq += 1
            tags = [(seed, epoch, pos + i, idx, False, seq) for i, idx in enumerate(batch)]
            if order:
                picks = _rng.uniform(_rng.sample_keys(seed, epoch, np.array([b])), 1 << 20, NUM_SPARES)[0]
                for p in (picks * len(order)).astype(np.int64):
                    # spare positions live past the epoch's so their params differ from the original's
                    tags.append((seed, epoch, len(order) + int(p), order[int(p)], True, seq))
            yield tags
            pos += len(batch)


_SPARE = object()  # placeholder item: a spare candidate that has not been read


class TaggedDataset(torch.utils.data.Dataset):
    """Map-style wrapper: ``ds[tag] -> (tag, path, dataset[index])``; spares are not read."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, tag: tuple):
        idx = tag[3]
        if tag[4]:
            return tag, None, _SPARE
        return tag, sample_path(self.dataset, idx), self.dataset[idx]

    def __getitems__(self, tags: list[tuple]):
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is None:
            return [self[t] for t in tags]
        real = [t for t in tags if not t[4]]
        items = getitems([t[3] for t in real])
        out = [(t, sample_path(self.dataset, t[3]), it) for t, it in zip(real, items)]
        return out + [(t, None, _SPARE) for t in tags if t[4]]


class TaggedIterable(torch.utils.data.IterableDataset):
    """Iterable wrapper: tags samples with ``(seed, epoch, worker*2**40 + count, count, False)``."""

    def __init__(self, dataset: Any, state: EpochState) -> None:
        self.dataset = dataset
        self.state = state

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        wid = info.id if info is not None else 0
        seed, epoch = self.state.seed, self.state.epoch
        for count, item in enumerate(self.dataset):
            yield (seed, epoch, (wid << 40) + count, count, False), None, item


def _split_item(item: Any) -> tuple[Any, Any, bool]:
    """(data, target, has_target) of a dataset item."""
    if isinstance(item, (tuple, list)) and len(item) >= 2:
        target = item[1] if len(item) == 2 else tuple(item[1:])
        return item[0], target, True
    return item, None, False


def classify(data: Any) -> tuple[int, Any]:
    """(kind, payload): encoded bytes as a 1-D uint8 tensor, or HWC uint8 pixels."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        buf = bytes(data) if isinstance(data, memoryview) else data
        if len(buf) == 0:
            return ENCODED, torch.empty(0, dtype=torch.uint8)
        return ENCODED, torch.frombuffer(bytearray(buf) if isinstance(buf, bytes) else buf, dtype=torch.uint8)
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise TypeError(f"expected uint8 data, got numpy {data.dtype}")
        if data.ndim == 1:
            # torch wants writable memory; read-only arrays (np.frombuffer of bytes) are copied
            data = np.ascontiguousarray(data) if data.flags.writeable else data.copy()
            return ENCODED, torch.from_numpy(data)
        return RAW, to_hwc(data)
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8:
            raise TypeError(f"expected a uint8 tensor, got {data.dtype}")
        if data.ndim == 1:
            return ENCODED, data.contiguous()
        return RAW, to_hwc(data)
    if hasattr(data, "mode") and hasattr(data, "size") and hasattr(data, "convert"):  # PIL image
        return RAW, to_hwc(np.asarray(data.convert("RGB")))
    raise TypeError(
        f"expected encoded bytes (bytes, bytearray, 1-D uint8 array/tensor) or a decoded uint8 image, "
        f"got {type(data).__name__}"
    )


@dataclass
class PackedBatch:
    """A batch as it leaves a worker.

    ``images`` is set on the CPU path (already decoded and transformed). On the GPU
    path ``blob`` holds every sample's payload back to back; ``kinds``, ``offsets``,
    ``lengths`` and ``shapes`` (H, W, C) locate them. ``spares`` are replacement
    candidates ``(position, index)`` for failures found later, on the GPU.
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
    seq: int = -1  # the loader-wide batch number (-1: not numbered, e.g. an IterableDataset)
    ring_seq: int = -1  # >= 0: the bytes are in slot ``ring_seq`` of the staging ring, not in ``blob``
    spares: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # (index, path, reason) replaced under on_error
    seconds: float = 0.0  # worker time spent on this batch

    # Small tensors cross the worker queue as numpy arrays, pickled inline: a torch
    # tensor would travel as a shared-memory segment plus a file descriptor, whose
    # hand-over costs the main process more than the bytes do.
    _INLINE = ("params", "targets")

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for name in self._INLINE:
            v = state[name]
            if isinstance(v, torch.Tensor) and not v.is_cuda and v.numel() <= (1 << 16) and v.dtype in _NP_SAFE:
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


def check_on_error(on_error: Any) -> None:
    if not (on_error in ("raise", "skip") or callable(on_error)):
        raise ValueError(f'on_error must be "raise", "skip" or a callable (index, path, exception) -> '
                         f"replacement sample or None; got {on_error!r}")


class PrepareBatch:
    """The inner DataLoader's ``collate_fn``: turns tagged samples into a PackedBatch.

    ``mode="cpu"``: decode with the CPU decoder and run the reference kernel here,
    so the work scales with ``num_workers``. ``mode="gpu"``: read JPEG headers and
    pack the bytes; samples the GPU cannot decode (PNG, CMYK, ...) are decoded here.
    A sample that cannot be used is handled by ``on_error``.
    """

    def __init__(self, plan: Plan, mode: str, collate_fn: Callable | None = None,
                 channels_last: bool = False, on_error: Any = "raise", dataset: Any = None,
                 ring: Any = None) -> None:
        check_on_error(on_error)
        self.ring = ring  # HostRing the GPU path's workers write batches into, or None
        self.plan = plan
        self.mode = mode
        self.collate_fn = collate_fn or default_collate
        self.channels_last = channels_last
        self.on_error = on_error
        self.dataset = dataset

    def load(self, data: Any, idx: int, path: str | None) -> tuple[int, torch.Tensor, tuple, int, int]:
        """(kind, payload, (H, W, C), header code, scan start) of one sample; raises SampleError naming it."""
        from ..decode import DecodeError, decode_cpu

        try:
            kind, payload = classify(data)
        except (TypeError, ValueError) as e:
            raise SampleError.for_sample(idx, path, "unsupported sample", e) from None
        if kind == ENCODED:
            probe = _gpu_decodable_shape(payload) if self.mode == "gpu" else None
            if probe is not None:
                return kind, payload, probe[0], probe[1], probe[2]
            kind, payload = RAW, _decode_or_raise(decode_cpu, DecodeError, payload, idx, path)
        return kind, payload, tuple(payload.shape), -1, -1

    def replace(self, err: SampleError, spares: list, used: set) -> tuple:
        """A replacement for a failed sample: (tag, path, target, has_target, kind, payload, shape).

        The callable policy is asked first; then spare samples of the same epoch
        are tried in order. Raises the original error when nothing can replace it.
        """
        if callable(self.on_error):
            item = self.on_error(err.index, err.path, err)
            if item is not None:
                data, target, has = _split_item(item)
                kind, payload, shape, _, _ = self.load(data, err.index, err.path)
                return None, err.path, target, has, kind, payload, shape
        for tag in spares:
            if tag in used or self.dataset is None:
                continue
            used.add(tag)
            idx = tag[3]
            path = sample_path(self.dataset, idx)
            try:
                data, target, has = _split_item(self.dataset[idx])
                kind, payload, shape, _, _ = self.load(data, idx, path)
            except Exception:
                continue
            return tag, path, target, has, kind, payload, shape
        raise SampleError(f"{err} (on_error could not replace it: no usable spare sample in this batch)",
                          index=err.index, path=err.path) from err

    def __call__(self, samples: Sequence[tuple]) -> PackedBatch:
        import time

        t0 = time.perf_counter()
        spares = [s[0] for s in samples if s[0][4]]
        samples = [s for s in samples if not s[0][4]]
        n = len(samples)
        seed, epoch = samples[0][0][0], samples[0][0][1]
        indices = np.fromiter((s[0][3] for s in samples), dtype=np.int64, count=n)
        positions = np.fromiter((s[0][2] for s in samples), dtype=np.int64, count=n)
        paths = [s[1] for s in samples]
        targets, has_target = [], True
        kinds = np.empty(n, dtype=np.int8)
        payloads: list[torch.Tensor] = []
        shapes = np.zeros((n, 3), dtype=np.int64)
        hints = np.full(n, -1, dtype=np.int64)
        scan_starts = np.full(n, -1, dtype=np.int64)
        skipped: list = []
        used: set = set()
        for i, (_, path, item) in enumerate(samples):
            data, target, has = _split_item(item)
            try:
                kind, payload, shape, hints[i], scan_starts[i] = self.load(data, int(indices[i]), path)
            except SampleError as err:
                if self.on_error == "raise":
                    raise
                tag, path, target, has, kind, payload, shape = self.replace(err, spares, used)
                skipped.append((err.index, err.path, str(err)))
                if tag is not None:
                    indices[i], positions[i], paths[i] = tag[3], tag[2], path
            targets.append(target)
            has_target = has_target and has
            kinds[i], shapes[i] = kind, shape
            payloads.append(payload)

        keys = _rng.sample_keys(seed, epoch, positions)
        params = self.plan.params(shapes[:, :2], keys)
        collated = self.collate_fn(targets) if has_target else None
        batch = PackedBatch(seed=seed, epoch=epoch, indices=indices, positions=positions, paths=paths,
                            params=params, targets=collated, has_target=has_target,
                            spares=[t for t in spares if t not in used], skipped=skipped)
        if self.mode == "cpu":
            batch.images = run_reference(self.plan, payloads, params, channels_last=self.channels_last)
        else:
            lengths = np.fromiter((p.numel() for p in payloads), dtype=np.int64, count=n)
            offsets = np.zeros(n, dtype=np.int64)
            np.cumsum(lengths[:-1], out=offsets[1:])
            flat = [p.reshape(-1) for p in payloads]
            total = int(lengths.sum())
            seq = batch.seq = samples[0][0][5] if len(samples[0][0]) > 5 else -1
            # A numbered batch takes its slot even when it does not fit (and then travels as a
            # blob): slot ownership passes from batch to batch in order, so a release can
            # never free a slot that an earlier batch is still being decoded from.
            slot = self.ring.acquire(seq) if self.ring is not None and seq >= 0 else None
            if slot is not None and 0 < total <= self.ring.slot_bytes:
                torch.cat(flat, out=slot[:total])
                batch.ring_seq = seq
            else:
                batch.blob = torch.cat(flat) if n else torch.empty(0, dtype=torch.uint8)
            batch.kinds, batch.offsets, batch.lengths, batch.shapes = kinds, offsets, lengths, shapes
            batch.hints, batch.scan_starts = hints, scan_starts
        batch.seconds = time.perf_counter() - t0
        return batch


def _decode_or_raise(decode_cpu: Callable, decode_error: type, payload: torch.Tensor, idx: int,
                     path: str | None) -> torch.Tensor:
    try:
        return decode_cpu(payload)
    except decode_error as e:
        raise SampleError.for_sample(idx, path, "cannot decode image", e) from None
    except Exception as e:  # decoders raise a zoo of types on corrupt data
        raise SampleError.for_sample(idx, path, "cannot decode image", f"{type(e).__name__}: {e}") from None


def _gpu_decodable_shape(payload: torch.Tensor) -> tuple[tuple[int, int, int], int, int] | None:
    """((H, W, 3), header code, scan start) when nvJPEG should decode this sample, else None
    (decode on the CPU).

    CMYK/YCCK, RGB-coded, lossless, arithmetic-coded and 12-bit JPEGs go to the
    CPU, and so do files that do not end in an EOI marker. Whether the scan data
    holds a marker no scan can hold (nvJPEG may decode such a stream without
    complaint) is checked for the whole batch on the GPU, from the scan start.
    """
    from ..decode._jpeg_header import header_code, jpeg_info, scan_offset

    try:
        info = jpeg_info(payload.numpy())
    except ValueError:
        return None  # corrupt header: the CPU decoder produces the precise error
    if info is None or info.height <= 0 or info.width <= 0:
        return None
    if (info.num_components not in (1, 3) or info.lossless or info.arithmetic or info.precision != 8
            or info.is_cmyk or info.is_ycck or info.is_rgb_coded):
        return None
    tail = payload[-2:].numpy() if payload.numel() >= 2 else None
    if tail is None or tail[0] != 0xFF or tail[1] != 0xD9:
        return None
    start = scan_offset(payload.numpy())
    if start < 0:
        return None
    return (info.height, info.width, 3), header_code(info), start
