"""What runs in the DataLoader workers: read and pack (or, on the CPU path, decode
and transform) a batch, and draw its samples' random parameters.

The workers receive ``TaggedSample`` records (``_tags.py``). A whole batch
leaves the worker as a handful of tensors (one bytes blob plus small metadata
arrays), never one tensor per sample: one shared-memory segment per sample
exhausts file descriptors at batch 256 with many workers.

Note [torchdali scan check once]
nvJPEG's hardware engines decode a JPEG whose compressed data holds a marker no scan
can hold (a bad disk block, a cut download) into garbage without an error, so the GPU
path checks every JPEG's scan data (``GpuDecoder._check_scans``). On the GPU that check
copies each batch's bytes over the bus a second time, beside the engines' own reads;
the loader ran 2-5% faster without it (``benchmarks/RESULTS.md``). So a worker that
reads a file straight into the ring and notes its header in the header table
(``HostRing.note``) checks its scan data here first, in numpy (``entropy_data_ok``, the
same rule), and notes a clean file with no scan start: no batch checks it again while
the file keeps its size and modification time, whichever worker reads it. A file
written again is checked again. A file that fails keeps its scan start, and the GPU
check sends it to the CPU decoder in every epoch, which names what is wrong with it.
Samples that are not files read into the ring, and every sample with the table off
(``_options.Options.header_table``), are checked on the GPU in every epoch. What the table
cannot see is a file's bytes changing on the medium under the same size and time.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import torch
from csrc_triton import layout

from .. import _rng
from ..errors import SampleError
from ..transforms._plan import BatchParams, Plan, run_reference, to_hwc
from ._deliver import Delivery
from ._tags import FileRef, SampleTag, TaggedSample, sample_path

RING_PART_ALIGN = 4096  # where a part of a batch starts in its batch's staging-ring slot

# Sample kinds inside a packed batch.
ENCODED = 0  # encoded image bytes, to be decoded (GPU path)
RAW = 1  # already decoded HWC uint8 pixels


def draw_params(plan: Plan, shapes: np.ndarray, seed: int, epoch: int, positions: np.ndarray) -> BatchParams:
    """Kernel parameters and program slots of the samples at ``positions`` of ``epoch``,
    whose images are ``shapes`` ([B, >=2] H, W, ...).

    The one place parameters are drawn: a sample's draw depends on ``(seed, epoch,
    position)`` and its size only, so a sample packed in a worker and a replacement
    found later on the GPU get their parameters the same way.
    """
    keys = _rng.sample_keys(seed, epoch, positions)
    return plan.params(shapes[:, :2], keys)


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


class Skipped(NamedTuple):
    """A sample on_error replaced (it crosses from the worker to the main process in ``PackedBatch``)."""

    index: int
    path: str | None
    reason: str


class LoadedSample(NamedTuple):
    """One sample ready to pack: its kind, payload and (H, W, C)."""

    kind: int  # ENCODED or RAW
    payload: torch.Tensor  # encoded bytes (1-D) or HWC uint8 pixels
    shape: tuple  # (H, W, C) of the decoded image
    hint: int  # header code for nvJPEG's backend routing (-1: none)
    scan_start: int  # where the JPEG's scan data starts (-1: not checked)


class Replacement(NamedTuple):
    """What on_error put in place of a failed sample (``PrepareBatch.replace``)."""

    tag: SampleTag | None  # the spare sample used; None when the callable policy supplied the sample
    path: str | None
    target: Any
    has_target: bool
    kind: int
    payload: torch.Tensor
    shape: tuple


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
    # its own share of the batch's ring slot, its targets not collated yet; ``merge_parts``
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
        """Store a draw (``draw_params``); a plan without program carries no slots."""
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


def check_on_error(on_error: Any) -> None:
    """Raise ValueError unless ``on_error`` is a valid bad-sample policy."""
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

    def __init__(self, plan: Plan, mode: str, delivery: Delivery | None = None,
                 channels_last: bool = False, on_error: Any = "raise", dataset: Any = None,
                 ring: Any = None, max_image_pixels: int | None = None) -> None:
        check_on_error(on_error)
        self.max_image_pixels = max_image_pixels  # larger images are refused from their header
        self.ring = ring  # HostRing the GPU path's workers write batches into, or None
        self.plan = plan
        self.mode = mode
        self.delivery = delivery or Delivery()  # how targets leave the worker; the CPU path's last step
        self.channels_last = channels_last
        self.on_error = on_error
        self.dataset = dataset

    def load(self, data: Any, idx: int, path: str | None) -> LoadedSample:
        """One sample's data, classified (and decoded here when the GPU cannot); raises
        SampleError naming it."""
        try:
            kind, payload = classify(data)
        except (TypeError, ValueError) as e:
            raise SampleError.for_sample(idx, path, "unsupported sample", e) from None
        if kind == ENCODED:
            header = _checked_header(payload, self.max_image_pixels, idx, path)
            probe = _gpu_decodable_shape(payload, header.jpeg) if self.mode == "gpu" else None
            if probe is not None:
                shape, hint, scan_start = probe
                return LoadedSample(kind, payload, shape, hint, scan_start)
            dec = _decoders()
            kind, payload = RAW, _decode_or_raise(dec.decode_cpu, dec.DecodeError, payload, idx, path)
        return LoadedSample(kind, payload, tuple(payload.shape), -1, -1)

    def replace(self, err: SampleError, spares: list[SampleTag], used: set[SampleTag]) -> Replacement:
        """A replacement for a failed sample (in the worker, or later on the GPU).

        The callable policy is asked first; then spare samples of the same epoch
        are tried in order. Raises the original error when nothing can replace it.
        """
        if callable(self.on_error):
            item = self.on_error(err.index, err.path, err)
            if item is not None:
                data, target, has = _split_item(item)
                loaded = self.load(data, err.index, err.path)
                return Replacement(None, err.path, target, has, loaded.kind, loaded.payload, loaded.shape)
        for tag in spares:
            if tag in used or self.dataset is None:
                continue
            used.add(tag)
            path = sample_path(self.dataset, tag.index)
            try:
                data, target, has = _split_item(self.dataset[tag.index])
                loaded = self.load(data, tag.index, path)
            except Exception:
                continue
            return Replacement(tag, path, target, has, loaded.kind, loaded.payload, loaded.shape)
        raise SampleError(f"{err} (on_error could not replace it: the {len(spares)} spare samples sent with this "
                          "batch are used up or unreadable; more bad files in one batch than that)",
                          index=err.index, path=err.path) from err

    def __call__(self, samples: Sequence[TaggedSample]) -> PackedBatch:
        t0 = time.perf_counter()
        spares = [s.tag for s in samples if s.tag.spare]
        samples = [s for s in samples if not s.tag.spare]
        n = len(samples)
        seed, epoch = samples[0].tag.seed, samples[0].tag.epoch
        indices = np.fromiter((s.tag.index for s in samples), dtype=np.int64, count=n)
        positions = np.fromiter((s.tag.position for s in samples), dtype=np.int64, count=n)
        paths = [s.path for s in samples]
        targets, has_target = [], True
        kinds = np.empty(n, dtype=np.int8)
        payloads: list[torch.Tensor] = []
        shapes = np.zeros((n, 3), dtype=np.int64)
        hints = np.full(n, -1, dtype=np.int64)
        scan_starts = np.full(n, -1, dtype=np.int64)
        skipped: list[Skipped] = []
        used: set[SampleTag] = set()
        items = [_split_item(s.item) for s in samples]
        seq = samples[0].tag.seq
        room = self._slot_room(samples[0].tag) if self.mode == "gpu" else None
        slot, direct, stamps, read_end = None, {}, {}, 0
        if room is not None and any(isinstance(it[0], FileRef) for it in items):
            # the batch's files go straight into its slot, each at the end of the one before
            slot = self.ring.acquire(seq)
            files = [(i, it[0].path) for i, it in enumerate(items) if isinstance(it[0], FileRef)]
            direct, stamps, read_end = read_into(slot, room[0], room[0] + room[1], files)
        for i, sample in enumerate(samples):
            data, target, has = items[i]
            try:
                if isinstance(data, FileRef):
                    data = direct.get(i)
                    if data is None:  # not read into the slot: no room left
                        data = read_file_of(items[i][0].path, int(indices[i]))
                    elif isinstance(data, BaseException):
                        raise SampleError.for_sample(int(indices[i]), sample.path, "cannot read file", data)
                stamp = stamps.get(i)
                known = self.ring.known(int(indices[i]), *stamp) if stamp is not None else None
                if known is not None:  # this file's header, as a worker found it in an earlier epoch
                    kind, payload, (shape, hints[i], scan_starts[i]) = ENCODED, data, known
                else:
                    kind, payload, shape, hints[i], scan_starts[i] = self.load(data, int(indices[i]), sample.path)
                    if stamp is not None and kind == ENCODED and hints[i] >= 0:
                        # the scan-marker check, once per version of the file: Note [torchdali scan check once]
                        if scan_starts[i] >= 0 and self.ring.table is not None \
                                and _decoders().entropy_data_ok(payload, int(scan_starts[i])):
                            scan_starts[i] = -1
                        self.ring.note(int(indices[i]), *stamp, shape, int(hints[i]), int(scan_starts[i]))
            except SampleError as err:
                if self.on_error == "raise":
                    raise
                sub = self.replace(err, spares, used)
                target, has, kind, payload, shape = sub.target, sub.has_target, sub.kind, sub.payload, sub.shape
                skipped.append(Skipped(err.index, err.path, str(err)))
                if sub.tag is not None:
                    indices[i], positions[i], paths[i] = sub.tag.index, sub.tag.position, sub.path
            targets.append(target)
            has_target = has_target and has
            kinds[i], shapes[i] = kind, shape
            payloads.append(payload)

        drawn = draw_params(self.plan, shapes, seed, epoch, positions)
        parts = samples[0].tag.parts if self.mode == "gpu" else 1
        if parts > 1:  # collated once the batch is whole again (merge_parts)
            collated = targets
        else:
            collated = self.delivery.collate_targets(targets) if has_target else None
        batch = PackedBatch(seed=seed, epoch=epoch, indices=indices, positions=positions, paths=paths,
                            params=drawn.params, targets=collated, has_target=has_target,
                            first_position=samples[0].tag.position,
                            spares=[t for t in spares if t not in used], skipped=skipped, parts=parts)
        batch.set_params(drawn)
        if self.mode == "cpu":
            batch.images = run_reference(self.plan, payloads, drawn, channels_last=self.channels_last)
            self._deliver(batch)
        else:
            lengths = np.fromiter((p.numel() for p in payloads), dtype=np.int64, count=n)
            flat = [p.reshape(-1) for p in payloads]
            total = int(lengths.sum())
            batch.seq = seq
            # A numbered batch takes its slot even when it does not fit (and then travels as a
            # blob): slot ownership passes from batch to batch in order, so a release can
            # never free a slot that an earlier batch is still being decoded from.
            if slot is None and room is not None:
                slot = self.ring.acquire(seq)
            # payloads read into the slot stay where they are; the others go after them
            offsets = np.full(n, -1, dtype=np.int64)
            for i, view in direct.items():
                if payloads[i] is view:
                    offsets[i] = view.data_ptr() - slot.data_ptr()
            rest = np.flatnonzero(offsets < 0)
            start = max(read_end, room[0]) if room is not None else 0
            need = int(lengths[rest].sum())
            if slot is not None and 0 < total and start + need <= room[0] + room[1]:
                offsets[rest] = start + np.cumsum(lengths[rest]) - lengths[rest]
                if need:
                    torch.cat([flat[i] for i in rest], out=slot[start:start + need])
                batch.ring_seq = seq
            else:
                offsets = np.zeros(n, dtype=np.int64)
                np.cumsum(lengths[:-1], out=offsets[1:])
                batch.blob = torch.cat(flat) if n else torch.empty(0, dtype=torch.uint8)
            batch.kinds, batch.offsets, batch.lengths, batch.shapes = kinds, offsets, lengths, shapes
            batch.hints, batch.scan_starts = hints, scan_starts
        batch.seconds = time.perf_counter() - t0
        return batch

    def _slot_room(self, tag: SampleTag) -> tuple[int, int] | None:
        """(start, bytes) of the staging-ring slot that the batch of ``tag`` may fill (a part
        of a batch: its own share of the slot); None when the batch has no slot."""
        if self.ring is None or tag.seq < 0:
            return None
        room = self.ring.slot_bytes
        if tag.parts > 1:
            room = room // tag.parts // RING_PART_ALIGN * RING_PART_ALIGN
            return tag.part * room, room
        return 0, room

    def _deliver(self, batch: PackedBatch) -> None:
        """CPU path: batch transforms and the user's collate_fn run here, in the worker (``_deliver.py``)."""
        d = self.delivery
        if d.native is None and not d.has_foreign:
            return
        key = _rng.batch_key(batch.seed, batch.epoch, batch.first_position)
        batch.output = d.finish(batch.images, batch.targets, batch.has_target, key)
        batch.has_output, batch.images, batch.targets = True, None, None


def merge_parts(parts: Sequence[PackedBatch], delivery: Delivery, ring: Any = None) -> PackedBatch:
    """One batch from its consecutive parts (GPU path; ``_tags.EpochStart``), as the batch
    would have been packed whole: samples, parameters and bytes in order, the targets
    collated, the unused spares and replaced samples of every part.

    The parts share their batch's number and staging-ring slot, each with its bytes in
    its own share of the slot, where they stay: the batch is the parts' metadata put
    together. A part too large for its share travels as a blob; then the batch's bytes
    are copied into one blob (the batch keeps its number, so its slot is released in
    turn).
    """
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    if any(p.images is not None or p.kinds is None for p in parts):
        raise ValueError("merge_parts takes packed parts of a GPU-path batch")
    if any(p.seq != first.seq for p in parts):
        raise ValueError(f"merge_parts: the parts belong to batches {sorted({p.seq for p in parts})}, not one")
    if any(p.batch_values for p in parts):
        raise ValueError("merge_parts: batch-level values are drawn per batch and cannot be merged from parts")
    cat = np.concatenate
    lengths = cat([p.lengths for p in parts])
    blob, ring_seq = None, first.seq
    if all(p.ring_seq >= 0 for p in parts):
        offsets = cat([p.offsets for p in parts])
    else:
        chunks, offsets, at = [], [], 0
        for p in parts:
            if p.ring_seq < 0:
                chunks.append(p.blob)
                offsets.append(p.offsets + at)
                at += p.blob.numel()
            elif len(p.offsets):
                if ring is None:
                    raise ValueError("merge_parts: a part's bytes are in the staging ring, and no ring was given")
                # the span of the slot that holds the part's bytes (in any order)
                lo, hi = int(p.offsets.min()), int((p.offsets + p.lengths).max())
                chunks.append(ring.slot(p.ring_seq)[lo:hi])
                offsets.append(p.offsets - lo + at)
                at += hi - lo
        blob = torch.cat(chunks) if chunks else torch.empty(0, dtype=torch.uint8)
        offsets = cat(offsets) if offsets else np.zeros(0, dtype=np.int64)
        ring_seq = -1
    has_target = all(p.has_target for p in parts)
    targets = delivery.collate_targets([t for p in parts for t in p.targets]) if has_target else None
    batch = PackedBatch(
        seed=first.seed, epoch=first.epoch, indices=cat([p.indices for p in parts]),
        positions=cat([p.positions for p in parts]), paths=[x for p in parts for x in p.paths],
        params=torch.cat([p.params for p in parts]), targets=targets, has_target=has_target,
        blob=blob, kinds=cat([p.kinds for p in parts]), offsets=offsets,
        lengths=lengths, shapes=cat([p.shapes for p in parts]), hints=cat([p.hints for p in parts]),
        scan_starts=cat([p.scan_starts for p in parts]), seq=first.seq, ring_seq=ring_seq,
        first_position=first.first_position,
        spares=[t for p in parts for t in p.spares], skipped=[s for p in parts for s in p.skipped],
        seconds=sum(p.seconds for p in parts),
        slots=None if first.slots is None else torch.cat([p.slots for p in parts]))
    return batch


def read_into(slot: torch.Tensor, start: int, stop: int,
              files: Sequence[tuple[int, str]]) -> tuple[dict[int, Any], dict[int, tuple[int, int]], int]:
    """Read ``files`` (``(sample, path)`` pairs) one after the other into ``slot[start:stop]``.

    Returns ``{sample: its bytes, a view of the slot, or the OSError that stopped the
    read}``, ``{sample: (size, mtime_ns) of the file read}`` and where the bytes read
    end. A file that does not fit in what is left, or that grew while it was read, is
    left out (the caller reads it the ordinary way).
    """
    out: dict[int, Any] = {}
    stamps: dict[int, tuple[int, int]] = {}
    if not files:
        return out, stamps, start
    mem = memoryview(slot.numpy())
    pos = start
    for i, path in files:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as e:
            out[i] = e
            continue
        try:
            st = os.fstat(fd)
            size = st.st_size
            if size <= 0 or pos + size >= stop:  # empty, or no room: one byte more tells a grown file
                continue
            got = os.readv(fd, [mem[pos:pos + size + 1]])
            while 0 < got < size and (more := os.readv(fd, [mem[pos + got:pos + size + 1]])):
                got += more  # a short read before the end (regular files do not, other files may)
        except OSError as e:
            out[i] = e
            continue
        finally:
            os.close(fd)
        if got > size:  # it grew while it was read
            continue
        out[i] = slot[pos:pos + got]
        if got == size:
            stamps[i] = (size, st.st_mtime_ns)
        pos += got
    return out, stamps, pos


def read_file_of(path: str, idx: int) -> torch.Tensor:
    """The bytes of a sample's file (``datasets.read_file``), or a SampleError naming it."""
    from ..datasets import read_file

    try:
        return read_file(path)
    except OSError as e:
        raise SampleError.for_sample(idx, path, "cannot read file", e) from None


def _decode_or_raise(decode_cpu: Callable, decode_error: type, payload: torch.Tensor, idx: int,
                     path: str | None) -> torch.Tensor:
    try:
        return decode_cpu(payload)
    except decode_error as e:
        raise SampleError.for_sample(idx, path, "cannot decode image", e) from None
    except Exception as e:  # decoders raise a zoo of types on corrupt data
        raise SampleError.for_sample(idx, path, "cannot decode image", f"{type(e).__name__}: {e}") from None


def _checked_header(payload: torch.Tensor, max_pixels: int | None, idx: int, path: str | None) -> Any:
    """The size the sample's header claims (``decode._limits.HeaderSize``); raises SampleError,
    before anything is decoded, for an image over ``max_pixels`` or a header its data cannot fill."""
    dec = _decoders()
    header = dec.header_size(payload)
    try:
        dec.check_header(header, payload.numel(), max_pixels)
    except (dec.ImageTooLarge, dec.ImplausibleHeader) as e:
        raise SampleError.for_sample(idx, path, "refused before decoding", e) from None
    return header


def _gpu_decodable_shape(payload: torch.Tensor, info: Any) -> tuple[tuple[int, int, int], int, int] | None:
    """((H, W, layout.PLANAR + S), header code, scan start) when nvJPEG should decode this
    sample, else None (decode on the CPU): nvJPEG decodes it to its Y/Cb/Cr planes at their
    own subsampling ``S``, which the fused kernel converts. A JPEG whose planes the kernel
    has no reader for (4:1:1, unequal chroma planes: ``planar_chroma`` is None) gets
    ``(H, W, 3)``: nvJPEG decodes it to interleaved RGB.

    CMYK/YCCK, RGB-coded, lossless, arithmetic-coded and 12-bit JPEGs go to the
    CPU, and so do files that do not end in an EOI marker and files whose tables or
    scan header libjpeg would refuse (``scan_header``). Whether the scan data
    holds a marker no scan can hold (nvJPEG may decode such a stream without
    complaint) is checked for the whole batch on the GPU, from the scan start.
    ``info`` is the parsed JPEG header (None: not a JPEG, or a corrupt header, which
    the CPU decoder reports precisely).
    """
    if info is None or info.height <= 0 or info.width <= 0:
        return None
    if (info.ncomp not in (1, 3) or info.lossless or info.arithmetic or info.precision != 8
            or info.is_rgb_coded):  # (4 components, CMYK or YCCK, are out with the count)
        return None
    data = payload.numpy()
    if len(data) < 2 or data[-2] != 0xFF or data[-1] != 0xD9:
        return None
    dec = _decoders()
    defect, start = dec.scan_header(data)  # one walk over the segments: defects and the scan start
    if defect is not None:
        return None
    chroma = dec.planar_chroma(info)
    channels = 3 if chroma is None else layout.PLANAR + layout.SUBSAMPLINGS[chroma[0]]
    return (info.height, info.width, channels), dec.header_code(info), start


_DECODERS: Any = None


def _decoders() -> Any:
    """The ``decode`` package's header checks and CPU decoder, imported on first use (in the
    workers; ``import torchdali`` does not load the decode package), then looked up once."""
    global _DECODERS
    if _DECODERS is None:
        from types import SimpleNamespace

        from ..decode import DecodeError, decode_cpu
        from ..decode._jpeg_defects import entropy_data_ok, scan_header
        from ..decode._jpeg_header import header_code, planar_chroma
        from ..decode._limits import ImageTooLarge, ImplausibleHeader, check_header, header_size

        _DECODERS = SimpleNamespace(
            DecodeError=DecodeError, decode_cpu=decode_cpu, header_code=header_code, planar_chroma=planar_chroma,
            scan_header=scan_header, ImageTooLarge=ImageTooLarge, ImplausibleHeader=ImplausibleHeader,
            check_header=check_header, header_size=header_size, entropy_data_ok=entropy_data_ok)
    return _DECODERS
