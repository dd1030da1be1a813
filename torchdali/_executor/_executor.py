"""The GPU batch executor: one staged batch through decode and kernel, on our own stream.

``BatchExecutor.prepare`` runs on the staging thread, once a batch is staged: on a
machine with ``DECODE_AHEAD_MIN_CPUS`` or more, it decodes the batch with nvJPEG into
one of two decode buffers (``_decode.py``; a batch of video clips starts on NVDEC
instead, into one of two frame buffers, ``_video.ClipRunner``), so that the next batch
decodes while the executor thread launches this one's kernels. ``BatchExecutor.process``
runs on the executor thread (``_iterators.py``): it decodes the batch when ``prepare`` did not, runs the
fused kernel (``_launch.py``), maps the targets' boxes
and masks (``transforms/_target_plan.py``) and runs the executor's part of delivery
(``_deliver.py``) on the executor's stream, records a ready event,
and hands the batch's staging memory and decode buffer back once that event has passed
(``_staging.py``, ``GpuDecoder.read_until``). The consumer's stream waits on the ready
event (no host synchronisation). A batch too large to decode at once is decoded group
by group on the executor thread instead (``_process_groups``).
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, NamedTuple

import numpy as np
import torch

from .. import _rng
from ..transforms import _ragged
from ..transforms._target_plan import TargetList, TargetPlan
from ._decode import (ROUTE_COUNTERS, DecodedBatch, GpuDecoder, decode_groups, decoded_sizes, merge_sub_batch,
                      sub_batch)
from ._deliver import Delivery, Stage
from ._launch import KernelEvents, KernelLauncher
from ._staging import Slot, Staging
from ._video import ClipRunner, PrepareClips, StartedClips
from ._wire import PackedBatch, PackedTargets


#: CPUs (of the process's affinity) from which ``prepare`` decodes a batch on the staging thread:
#: nvJPEG's call keeps a core busy while it waits for the engines, and beside the executor's
#: launches that pays where cores are spare (SSD preset, 16 cores: 5,234-5,853 -> 8,298-9,113
#: img/s) and costs where they are not (3 cores: SSD 3,790 -> 3,264; classification -8 to -10%).
#: benchmarks/RESULTS.md, 2026-11-26/27.
DECODE_AHEAD_MIN_CPUS = 6


class DecodedAhead(NamedTuple):
    """What ``BatchExecutor.prepare`` made of a batch that decodes at once: the decode buffer it
    claimed, and the decoded batch or the error decoding raised (re-raised by ``process``)."""

    turn: int
    decoded: DecodedBatch | None
    error: BaseException | None
    seconds: float  # host seconds of the decode, on the staging thread

    def result(self) -> DecodedBatch:
        if self.error is not None:
            raise self.error
        return self.decoded


class ReadyBatch(NamedTuple):
    """A batch the GPU is producing, as it waits in the prefetch queue for the training loop."""

    batch: PackedBatch
    images: Any  # [B, 3, H, W], or a RaggedImages or ImageList (a pipeline without a fixed size)
    targets: Any
    ready: torch.cuda.Event  # passed once ``images`` (and ``targets``) are written
    stages: dict  # host/GPU seconds per stage, for LoaderStats


class BatchExecutor:
    """Per-loader, per-device GPU state: the executor's stream, the decoder, the
    pinned staging memory and the kernel.

    Built once and reused across epochs, so GPU state is initialised once.
    ``staging.stage`` (host copy into pinned memory) and ``process`` (decode +
    kernel) run on two threads so a batch is staged while the previous one decodes.
    """

    def __init__(self, plan: Any, device: torch.device, channels_last: bool, depth: int,
                 dataset: Any = None, on_error: Any = "raise", ring: Any = None,
                 delivery: Delivery | None = None, max_image_pixels: int | None = None,
                 video_layout: str | None = None) -> None:
        self.device = device
        self.delivery = delivery or Delivery()
        with torch.cuda.device(device):
            self.stream = torch.cuda.Stream(device)
        self.decoder = GpuDecoder(plan, device, on_error=on_error, dataset=dataset,
                                  max_image_pixels=max_image_pixels)
        self.staging = Staging(depth, ring)
        self.launcher = KernelLauncher(plan, device, channels_last)
        self.targets = TargetPlan.of(plan)
        self.decode_ahead = len(os.sched_getaffinity(0)) >= DECODE_AHEAD_MIN_CPUS
        # (since, batch) while ``prepare`` decodes a batch: the consumer's watchdog (a hung nvJPEG call)
        self.decoding: tuple[float, PackedBatch] | None = None
        # a video dataset's batches (``video_layout`` given): clips, decoded by NVDEC (``_video.py``)
        self.clips = None if video_layout is None else ClipRunner(
            plan, device, self.launcher, PrepareClips(plan, "gpu", video_layout, on_error=on_error, dataset=dataset),
            video_layout)

    def close(self) -> None:
        """Release the nvJPEG handles (and the video decoders); idempotent."""
        self.decoder.close()
        if self.clips is not None:
            self.clips.close()

    def prepare(self, batch: PackedBatch, slot: Slot, stop: threading.Event | None = None) -> Any:
        """Staging thread, once ``batch`` is staged in ``slot``: when it decodes in one group,
        its scan check started (``batch.scan_check``) and, with ``decode_ahead``, the batch
        decoded (``DecodedAhead``) once a decode buffer is free (``GpuDecoder.claim``: the batch
        before the last one has launched its kernels); else its ``decoded_sizes``. A batch of
        clips: its decode started (``ClipRunner.start``) once a frame buffer is free. ``process``
        gets what this returns; ``drop`` gives it up. Raises ``Stopped`` when ``stop`` is set while it waits for a buffer."""
        if batch.clips is not None:  # video: nothing staged; NVDEC starts on the batch's clips
            with torch.cuda.device(self.device):
                return self.clips.start(batch, self.stream, stop)
        numel = decoded_sizes(batch.shapes)
        if len(decode_groups(batch.shapes, sizes=numel)) > 1:
            return numel
        batch.scan_check = self.decoder.scan_check(batch, slot.view)
        if not self.decode_ahead:
            return numel
        return self._decode_whole(batch, slot, numel, stop)

    def _decode_whole(self, batch: PackedBatch, slot: Slot, numel: np.ndarray,
                      stop: threading.Event | None = None) -> DecodedAhead:
        """``batch`` decoded into the next decode buffer, or the error decoding raised."""
        turn = self.decoder.claim(stop)
        t = time.perf_counter()
        self.decoding = (time.monotonic(), batch)
        try:
            with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
                decoded = self.decoder.decode(batch, slot.view, self.stream, numel=numel, turn=turn)
        except Exception as e:  # the batch's own failure: raised where the executor takes the batch
            return DecodedAhead(turn, None, e, time.perf_counter() - t)
        except BaseException:
            self.drop(DecodedAhead(turn, None, None, 0.0))
            raise
        finally:
            self.decoding = None
        return DecodedAhead(turn, decoded, None, time.perf_counter() - t)

    def drop(self, prepared: Any) -> None:
        """Give up what ``prepare`` made of a batch that will not be processed (a stop): its
        decode buffer goes back once the work queued on it has ended."""
        if isinstance(prepared, StartedClips):
            self.clips.drop(prepared)
        elif isinstance(prepared, DecodedAhead):
            with torch.cuda.device(self.device):
                event = torch.cuda.Event()
                event.record(self.stream)
            self.decoder.read_until(event, prepared.turn)

    def release_all(self, last_seq: int) -> None:
        """After a stop: wait for the GPU, then free every ring slot up to ``last_seq``.
        See Note [torchdali iterator shutdown] in ``_iterators.py``."""
        if self.staging.ring is None:
            return
        with torch.cuda.device(self.device):
            self.stream.synchronize()
            self.decoder.check_stream.synchronize()  # checks of staged batches never decoded
        self.staging.release_all(last_seq)

    def process(self, batch: PackedBatch, slot: Slot, prepared: Any = None) -> ReadyBatch:
        """Transform one staged batch (executor thread); ``prepared``: what ``prepare`` made of it
        on the staging thread (the batch decoded, its ``decoded_sizes`` when it decodes in groups
        here, or its clips' decode started); ``prepare`` runs here when it is None.

        The kernel's GPU time is read from the previous batch's events, which
        have completed by then, so timing never waits on the GPU.
        """
        staging = self.staging
        if prepared is None:
            prepared = self.prepare(batch, slot)
        t0, t0_cpu = time.perf_counter(), time.thread_time()
        if staging.ring is not None:
            staging.release_ready()
        ready = None
        check_done = None  # the scan check of a batch decoded at once, which read its staged bytes
        turn = prepared.turn if isinstance(prepared, DecodedAhead) else None
        try:
            with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
                video = batch.clips is not None
                groups: list[tuple[int, int]] = []  # nvJPEG's calls (a batch of clips: none)
                if turn is not None:
                    groups = [(0, len(batch.indices))]
                elif not video:
                    groups = decode_groups(batch.shapes, sizes=prepared)
                    if len(groups) == 1:  # decoded here (``decode_ahead`` off)
                        prepared = self._decode_whole(batch, slot, prepared)
                        turn = prepared.turn
                if video:  # a batch of video clips: NVDEC and the kernel's NV12 source (``_video.py``)
                    images, kernel_events, counts, decode_s = self.clips.process(batch, self.stream, prepared)
                    t_decoded = t0 + decode_s
                    targets = batch.targets
                elif len(groups) == 1:
                    decoded = prepared.result()
                    counts, check_done = decoded.counts, decoded.check_done
                    t_decoded = time.perf_counter()
                    decode_s = prepared.seconds
                    images, kernel_events, targets = self.launcher.launch(decoded, batch.batch_params, self.stream,
                                                                          batch.targets)
                    shapes = decoded.shapes
                else:
                    images, kernel_events, decode_s, counts, shapes = self._process_groups(batch, slot, groups)
                    t_decoded = t0 + decode_s
                    targets = batch.targets
                if isinstance(targets, PackedTargets):  # boxes and masks, through the batch's geometry
                    targets = map_targets(self.targets, targets, batch, shapes, self.device)
                # the executor's part of delivery; the loop finishes the batch (``_deliver.py``)
                images, targets = self.delivery.deliver(batch, images, targets, Stage.EXECUTOR, self.device)
                # the scan check read the staged bytes too
                if check_done is not None:
                    self.stream.wait_event(check_done)
                elif len(groups) > 1:
                    self.stream.wait_stream(self.decoder.check_stream)
                ready = torch.cuda.Event()
                ready.record(self.stream)
                slot.event = ready
        finally:
            if ready is None:  # failed half-way: work may be queued that reads the slot or the buffer
                ready = torch.cuda.Event()
                ready.record(self.stream)
            if turn is not None:
                self.decoder.read_until(ready, turn)  # the batch after next decodes into this buffer
            staging.give_back(slot)  # the event guards the reuse of a pinned slot
            if staging.ring is not None and batch.seq >= 0:
                staging.hold(ready, batch.seq)
        t_end = time.perf_counter()
        kernel_s = self.launcher.previous_kernel_s(kernel_events)
        stages = {"executor_s": t_end - t0, "executor_cpu_s": time.thread_time() - t0_cpu,
                  "decode_s": decode_s, "launch_s": t_end - t_decoded,
                  "kernel_s": kernel_s, **counts}
        return ReadyBatch(batch, images, targets, ready, stages)


    def _process_groups(self, batch: PackedBatch, slot: Slot,
                        groups: list[tuple[int, int]]) -> tuple[Any, KernelEvents, float, dict, np.ndarray]:
        """Decode and transform a batch too large to decode at once, group by group
        (``_decode.decode_groups``): (images, timing events, seconds spent decoding,
        decode route counters, the decoded images' shapes).

        Every group is decoded into the front of the decoder's next grow-only buffer,
        sized for the largest group: a group's decode waits (on the host, before nvJPEG's
        engines write) for the previous group's kernel, which read it. (Buffers freed and
        allocated in turn would not do: nvJPEG keeps the buffers of its last calls
        referenced until their work is done, and the caching allocator would keep a
        block per new size.)
        """
        images = first = last = None
        parts = []  # a pipeline without a fixed size: each group's output, put together at the end
        shapes = []
        decode_s = 0.0
        counts = dict.fromkeys(ROUTE_COUNTERS, 0)
        numel = decoded_sizes(batch.shapes)
        buffer = self.decoder.group_buffer.take(int(max(numel[a:b].sum() for a, b in groups)))
        for start, stop in groups:
            sub = sub_batch(batch, start, stop)
            t = time.perf_counter()
            decoded = self.decoder.decode(sub, slot.view, self.stream, buffer)
            decode_s += time.perf_counter() - t
            for k, v in decoded.counts.items():
                counts[k] += v
            part, events, _ = self.launcher.launch(decoded, sub.batch_params, self.stream)
            merge_sub_batch(batch, sub, start, stop)
            shapes.append(decoded.shapes)
            first = first or events
            last = events
            if self.launcher.plan.varies:
                parts.append(part)
                continue
            if images is None:
                layout = torch.channels_last if self.launcher.channels_last and part.dim() == 4 \
                    else torch.contiguous_format
                images = torch.empty((len(batch.indices), *part.shape[1:]), dtype=part.dtype, device=part.device,
                                     memory_format=layout)
            images[start:stop].copy_(part)
        if parts:
            plan = self.launcher.plan
            images = _ragged.concat(parts, self.launcher.channels_last, plan.batch_images)
        return images, KernelEvents(first.start, last.end), decode_s, counts, np.concatenate(shapes)


def map_targets(tp: TargetPlan, targets: PackedTargets, batch: PackedBatch, shapes: np.ndarray,
                device: torch.device) -> TargetList:
    """A batch's packed targets through its geometry (``shapes``: its decoded images' ``(H, W,
    ...)``), on ``device``: one ``TargetPlan.map`` of the targets as views of the host buffer,
    with the worker's trace (a batch without one is traced again here: one merged from parts of
    which one held no boxes or masks, one decoded in groups with a replacement). The boxes are
    mapped on the host, so this thread never waits for the device; the masks are resampled there."""
    keys = _rng.sample_keys(batch.seed, batch.epoch, batch.positions)
    if batch.trace is None:
        host = targets.unpack()
        return tp.map(host, shapes[:, :2], keys, device, tp.draw_boxes(host))
    # a detection batch's boxes and labels in columns: mapped a key at a time, not a sample at a time
    return tp.map(targets.columnar() or targets.unpack(), shapes[:, :2], keys, device, trace=batch.trace)


def executor_for(loader: Any, rt: Any, device: torch.device) -> BatchExecutor:
    """The executor for ``device`` of ``loader`` (its configuration) and ``rt`` (its
    ``LoaderRuntime``, which keeps it), built on first use and kept until ``loader.close()``."""
    ex = rt.executors.get(device.index)
    if ex is None:
        ex = BatchExecutor(loader.plan, device, loader.memory_format == torch.channels_last,
                           loader.prefetch_depth, loader.dataset, loader.on_error,
                           ring=rt.ring, delivery=rt.delivery, max_image_pixels=loader.max_image_pixels,
                           video_layout=loader.video_layout if rt.video else None)
        rt.executors[device.index] = ex
    return ex
