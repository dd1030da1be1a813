"""A DataLoader worker's batch preparation: ``PrepareBatch``, the inner DataLoader's
``collate_fn``, turns a batch's tagged samples into one ``PackedBatch`` (``_wire.py``).

The workers receive ``TaggedSample`` records (``_tags.py``). For each sample a worker
gets its bytes (``_reads.py``: files read straight into the batch's staging-ring slot,
the header table), finds its kind and which decoder takes it (``_classify.py``),
replaces it under on_error when it cannot be used (``_replace.py``), then draws the
batch's random parameters (``draw_params``; a sample they cannot be drawn for is
replaced as well) and packs the bytes into the slot or one blob. On the CPU path it also decodes and runs the reference kernel here. In the main
process, ``merge_parts`` puts the parts of a batch sent in parts back together.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np
import torch

from .. import _rng
from ..errors import SampleDrawError, SampleError
from ..transforms._plan import BatchParams, Plan, run_reference
from ..transforms._target_plan import TargetPlan, has_geometry
from ..transforms._targets import BoxTrack, TargetGeometry, draw_and_trace
from ._classify import LoadedSample, load_sample, split_item
from ._deliver import Delivery, Pending, Stage
from ._reads import load_noted, read_into, sample_bytes
from ._replace import Replacement, check_on_error, replace
from ._tags import FailedRead, FileRef, SampleTag, TaggedSample, batch_head
from ._wire import PackedBatch, PackedTargets, Skipped

RING_PART_ALIGN = 4096  # where a part of a batch starts in its batch's staging-ring slot


def draw_params(plan: Plan, shapes: np.ndarray, seed: int, epoch: int, positions: np.ndarray,
                boxes: list[np.ndarray] | None = None,
                trace: bool = False) -> tuple[BatchParams, TargetGeometry | None]:
    """Kernel parameters and program slots of the samples at ``positions`` of ``epoch``,
    whose images are ``shapes`` ([B, >=2] H, W, ...), and whose ``boxes``
    (``TargetPlan.draw_boxes``) a plan drawing from boxes (RandomIoUCrop) needs; with
    ``trace``, also the steps their boxes and masks take (``_targets.draw_and_trace``),
    from the same draw.

    The one place parameters are drawn: a sample's draw depends on ``(seed, epoch,
    position)``, its size and its boxes only, so a sample packed in a worker and a
    replacement found later on the GPU get their parameters the same way. A sample the
    transforms cannot take (a pad larger than a reflected image, a resize to no pixels,
    non-finite parameters) raises ``SampleDrawError`` with its position in the batch.
    """
    keys = _rng.sample_keys(seed, epoch, positions)
    if trace:
        drawn, traced = draw_and_trace(plan, shapes[:, :2], keys, boxes)
    else:
        drawn, traced = plan.params(shapes[:, :2], keys, BoxTrack(boxes) if boxes is not None else None), None
    finite = torch.isfinite(drawn.params).all(dim=1)
    if not bool(finite.all()):  # the kernel refuses them: name the sample here, where on_error applies
        i = int(torch.argmin(finite.to(torch.uint8)))
        raise SampleDrawError(f"its transform parameters hold a non-finite value: {drawn.params[i].tolist()}", i)
    return drawn, traced


class PrepareBatch:
    """The inner DataLoader's ``collate_fn``: turns tagged samples into a PackedBatch.

    ``mode="cpu"``: decode with the CPU decoder and run the reference kernel here,
    so the work scales with ``num_workers``. ``mode="gpu"``: read JPEG headers and
    pack the bytes; samples the GPU cannot decode (PNG, CMYK, ...) are decoded here.
    A sample that cannot be used is handled by ``on_error``, whatever failed: the
    dataset reading it or building its target (``_tags.FailedRead``), its file, its
    header or decoding, its target against its image, or drawing its parameters
    (``errors.SampleDrawError``). Its replacement is drawn before it is taken, and the
    batch's other samples keep their draws: each depends on its own position only.

    Targets holding boxes or masks (``transforms/_target_plan.py``) are checked here
    against their image, sample by sample (a bad one goes to ``on_error``); the CPU
    path maps them after the reference kernel, the GPU path packs them
    (``PackedTargets``) for the executor, which maps them after its kernel.
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
        self.targets = TargetPlan.of(plan)

    def load(self, data: Any, idx: int, path: str | None) -> LoadedSample:
        """One sample's data, classified (and decoded here when the GPU cannot); raises
        SampleError naming it (``_classify.load_sample``)."""
        return load_sample(data, idx, path, self.mode, self.max_image_pixels)

    def replace(self, err: SampleError, spares: list[SampleTag], used: set[SampleTag],
                at: tuple[int, int, int] | None = None) -> Replacement:
        """A replacement for a failed sample (in the worker, or later on the GPU) under this
        batch's on_error policy (``_replace.replace``). With ``at``, the failed sample's
        ``(seed, epoch, position)``, only a replacement whose parameters can be drawn
        (``draw_params``, at the spare's own position) is taken."""
        vet = None
        if at is not None:
            seed, epoch, position = at

            def vet(tag: SampleTag | None, shape: tuple, target: Any) -> None:
                boxes = self.targets.draw_boxes([target])
                draw_params(self.plan, np.asarray([shape], dtype=np.int64), seed, epoch,
                            np.asarray([position if tag is None else tag.position], dtype=np.int64), boxes)

        return replace(err, spares, used, self.on_error, self.dataset, self.load, self.targets.check, vet=vet)

    def __call__(self, samples: Sequence[TaggedSample]) -> PackedBatch:
        t0 = time.perf_counter()
        samples, spares, seed, epoch, indices, positions, paths = batch_head(samples)
        n = len(samples)
        kinds = np.empty(n, dtype=np.int8)
        payloads: list[Any] = [None] * n
        targets: list[Any] = [None] * n
        has = np.zeros(n, dtype=bool)  # whether sample i's item holds a target
        geo = np.zeros(n, dtype=bool)  # ... one with boxes or masks
        shapes = np.zeros((n, 3), dtype=np.int64)
        hints = np.full(n, -1, dtype=np.int64)
        scan_starts = np.full(n, -1, dtype=np.int64)
        skipped: list[Skipped] = []
        used: set[SampleTag] = set()
        items = [split_item(s.item) for s in samples]
        seq = samples[0].tag.seq
        room = self._slot_room(samples[0].tag) if self.mode == "gpu" else None
        slot, direct, stamps, read_end = None, {}, {}, 0
        if room is not None and any(isinstance(it[0], FileRef) for it in items):
            # the batch's files go straight into its slot, each at the end of the one before
            slot = self.ring.acquire(seq)
            files = [(i, it[0].path) for i, it in enumerate(items) if isinstance(it[0], FileRef)]
            direct, stamps, read_end = read_into(slot, room[0], room[0] + room[1], files)

        def substitute(i: int, err: SampleError) -> None:
            """Sample ``i`` replaced under on_error (``_replace.replace``), by a sample whose
            parameters can be drawn; raises ``err`` under "raise"."""
            if self.on_error == "raise":
                raise err
            sub = self.replace(err, spares, used, at=(seed, epoch, int(positions[i])))
            skipped.append(Skipped(err.index, err.path, str(err)))
            if sub.tag is not None:
                indices[i], positions[i], paths[i] = sub.tag.index, sub.tag.position, sub.path
            targets[i], has[i], kinds[i], payloads[i], shapes[i] = (sub.target, sub.has_target, sub.kind,
                                                                    sub.payload, sub.shape)
            hints[i], scan_starts[i] = sub.hint, sub.scan_start
            geo[i] = sub.has_target and has_geometry(sub.target)  # (checked by replace)

        # reading, the target, decoding: one on_error policy for every way a sample fails
        for i, sample in enumerate(samples):
            data, targets[i], has[i] = items[i]
            try:
                if isinstance(data, FailedRead):  # the dataset raised reading it (_tags.TaggedDataset)
                    raise data.error
                data = sample_bytes(data, direct.get(i), int(indices[i]), sample.path)
                kinds[i], payloads[i], shape, hints[i], scan_starts[i] = load_noted(
                    self.ring, self.load, data, int(indices[i]), sample.path, stamps.get(i))
                shapes[i] = shape
                if has[i]:
                    geo[i] = self.targets.check(targets[i], shape[:2], int(indices[i]), sample.path)
            except SampleError as err:
                substitute(i, err)

        has_target = bool(has.all())
        if self.plan.draws_from_boxes and not has_target:
            step = next(t for t in self.plan.transforms if t.draws_from_boxes)
            raise ValueError(f"{step!r} draws from each sample's BoundingBoxes, but the dataset's items have no "
                             f"targets")
        geometry = bool(geo.any()) and has_target
        redrawn: set[int] = set()
        while True:  # boxes and masks: their steps are recorded by the same draw, for the mapping after the kernel
            boxes = self.targets.draw_boxes(targets)
            try:
                drawn, trace = draw_params(self.plan, shapes, seed, epoch, positions, boxes, trace=geometry)
                break
            except SampleDrawError as e:
                if e.sample is None:
                    raise
                i = e.sample
                err = SampleError.for_sample(int(indices[i]), paths[i], "cannot transform", e.reason)
                if self.on_error == "raise" or i in redrawn:  # (a replacement's draw was tried before it was taken)
                    raise err from None
                redrawn.add(i)
                substitute(i, err)
                has_target = bool(has.all())
                geometry = bool(geo.any()) and has_target
        parts = samples[0].tag.parts if self.mode == "gpu" else 1
        if geometry and self.mode == "cpu":  # boxes and masks: mapped here after the kernel
            collated = targets
        elif geometry:  # shipped as they are, with the trace of the draw: the executor maps them
            collated = PackedTargets.pack(targets)
        elif parts > 1:  # collated once the batch is whole again (merge_parts)
            collated = targets
        else:
            collated = self.delivery.collate_targets(targets) if has_target else None
        batch = PackedBatch(seed=seed, epoch=epoch, indices=indices, positions=positions, paths=paths,
                            params=drawn.params, targets=collated, has_target=has_target,
                            first_position=samples[0].tag.position,
                            spares=[t for t in spares if t not in used], skipped=skipped, parts=parts,
                            trace=trace)
        batch.set_params(drawn)
        if self.mode == "cpu":
            batch.images = run_reference(self.plan, payloads, drawn, channels_last=self.channels_last)
            if geometry:
                batch.targets = self.targets.map(targets, shapes[:, :2], _rng.sample_keys(seed, epoch, positions),
                                                 "cpu", trace=trace)
                batch.trace = None
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
        """CPU path: the worker's part of delivery (``_deliver.py``); a batch finished here
        carries what the loop gets in ``output``."""
        out = self.delivery.deliver(batch, batch.images, batch.targets, Stage.WORKER)
        if isinstance(out, Pending):
            batch.images, batch.targets = out
        else:
            batch.output, batch.has_output, batch.images, batch.targets = out, True, None, None


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
    targets = [t for p in parts for t in p.targets] if has_target else None
    trace = None
    if any(isinstance(p.targets, PackedTargets) for p in parts):  # boxes and masks: the executor maps them
        targets = PackedTargets.pack(targets)
        if all(p.trace is not None for p in parts):  # (else traced again where they are mapped)
            trace = TargetGeometry.cat([p.trace for p in parts])
    elif has_target:
        targets = delivery.collate_targets(targets)
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
        slots=None if first.slots is None else torch.cat([p.slots for p in parts]), trace=trace)
    return batch
