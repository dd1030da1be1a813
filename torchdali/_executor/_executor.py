"""The GPU batch executor: one staged batch through decode and kernel, on our own stream.

``BatchExecutor.process`` runs on the executor thread (``_iterators.py``): it
decodes the batch with nvJPEG into a buffer from torch's caching allocator
(``_decode.py``), runs the fused kernel (``_launch.py``) and our batch
transforms (``_deliver.py``) on the executor's stream, records a ready event,
and hands the batch's staging memory back once that event has passed
(``_staging.py``). The consumer's stream waits on the ready event (no host
synchronisation).

Note [torchdali decode threads]
nvJPEG's hardware call holds its thread for the whole decode (8-10 ms a batch of 256
photographs on an H200), and the engines stand idle while the executor does the rest of
a batch in Python: preparing the next call, the CPU fallback, the kernel's launch (about
2 ms a batch). So the decode of a batch (``GpuDecoder.decode``) runs on one of two decode
threads, each with its own nvJPEG decoder, in turn: the executor thread starts batch
``n + 1``'s decode (``start``) before it finishes batch ``n`` (``finish``: the kernel, the
ready event), and a thread prepares its call while the other is in nvJPEG's. Two calls at
once decode no slower than one after the other (``benchmarks/two_calls.py``). Batches
claim their decode buffers in order on the executor thread (``GpuDecoder.claim_turn``),
and a batch is started only once the one two before it is finished: its buffer's reader
is known by then. A batch decoded in groups is processed on the executor thread alone,
after the batches before it are finished, and so is every batch when the executor thread
has a CPU of its own (``decode_core``, with a CPU share): two threads waiting in nvJPEG's
calls on one CPU were not measured. ``TORCHDALI_DECODE_THREADS=0`` turns the decode threads
off.
"""
from __future__ import annotations

import concurrent.futures
import os
import queue
import threading
import time
from typing import Any, NamedTuple

import torch

from .. import _rng
from ._decode import (ROUTE_COUNTERS, DecodedBatch, GpuDecoder, decode_groups, decoded_sizes, merge_sub_batch,
                      sub_batch)
from ._deliver import Delivery
from ._launch import KernelEvents, KernelLauncher
from ._staging import Slot, Staging
from ._worker import PackedBatch


class ReadyBatch(NamedTuple):
    """A batch the GPU is producing, as it waits in the prefetch queue for the training loop."""

    batch: PackedBatch
    images: torch.Tensor
    targets: Any
    ready: torch.cuda.Event  # passed once ``images`` (and ``targets``) are written
    stages: dict  # host/GPU seconds per stage, for LoaderStats


class Pending(NamedTuple):
    """A batch whose decode runs on a decode thread (``BatchExecutor.start``)."""

    batch: PackedBatch
    slot: Slot
    turn: int  # its decode buffer (``GpuDecoder.claim_turn``)
    decoded: concurrent.futures.Future  # of the DecodedBatch
    t0: float  # when it was started (perf_counter)
    t0_cpu: float  # the executor thread's CPU time then


class DecodeThread:
    """A thread that decodes the batches handed to it, one at a time, with its own nvJPEG
    decoder: Note [torchdali decode threads]."""

    def __init__(self, ex: BatchExecutor, number: int) -> None:
        self.ex = ex
        self.nvjpeg = ex.decoder.nvjpeg_for(number)
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"torchdali-decode-{number}",
                                       daemon=True)
        self.thread.start()

    def submit(self, batch: PackedBatch, view: torch.Tensor, numel: Any, turn: int) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.jobs.put((future, batch, view, numel, turn))
        return future

    def stop(self) -> None:
        self.jobs.put(None)

    def _loop(self) -> None:
        ex = self.ex
        torch.cuda.set_device(ex.device)
        while True:
            job = self.jobs.get()
            if job is None:
                return
            future, batch, view, numel, turn = job
            t, t_cpu = time.perf_counter(), time.thread_time()
            try:
                with torch.cuda.device(ex.device), torch.cuda.stream(ex.stream):
                    decoded = ex.decoder.decode(batch, view, ex.stream, numel=numel, turn=turn, nvjpeg=self.nvjpeg)
                decoded.counts["decode_thread_s"] = time.perf_counter() - t
                decoded.counts["decode_thread_cpu_s"] = time.thread_time() - t_cpu
            except BaseException as e:  # raised in the executor thread (``BatchExecutor.finish``)
                future.set_exception(e)
            else:
                future.set_result(decoded)


def decode_threads_wanted() -> bool:
    """Whether batches decode on the decode threads (Note [torchdali decode threads])."""
    return os.environ.get("TORCHDALI_DECODE_THREADS", "2") != "0"


class BatchExecutor:
    """Per-loader, per-device GPU state: the executor's stream, the decoder, the
    pinned staging memory and the kernel.

    Built once and reused across epochs, so GPU state is initialised once.
    ``staging.stage`` (host copy into pinned memory) and ``process`` (decode +
    kernel) run on two threads so a batch is staged while the previous one decodes.
    """

    def __init__(self, plan: Any, device: torch.device, channels_last: bool, depth: int,
                 dataset: Any = None, on_error: Any = "raise", ring: Any = None,
                 delivery: Delivery | None = None, max_image_pixels: int | None = None) -> None:
        self.device = device
        self.delivery = delivery or Delivery()
        with torch.cuda.device(device):
            self.stream = torch.cuda.Stream(device)
        self.decoder = GpuDecoder(plan, device, on_error=on_error, dataset=dataset,
                                  max_image_pixels=max_image_pixels)
        self.staging = Staging(depth, ring)
        self.launcher = KernelLauncher(plan, device, channels_last)
        self.threads: list[DecodeThread] = []  # made on first use (``start``)
        self._next_thread = 0
        # whether batches decode on the decode threads (Note [torchdali decode threads])
        self.overlap = decode_threads_wanted()

    def close(self) -> None:
        """Stop the decode threads, release the nvJPEG handles; idempotent. Nothing may be
        decoding (the iterators finish or abandon what they started first)."""
        for t in self.threads:
            t.stop()
        for t in self.threads:
            t.thread.join(timeout=5.0)
        self.threads = []
        self.decoder.close()

    def overlaps(self, numel: Any, batch: PackedBatch) -> bool:
        """Whether ``batch`` may decode on a decode thread: it decodes in one group."""
        if numel is None:
            numel = decoded_sizes(batch.shapes)
        return len(decode_groups(batch.shapes, sizes=numel)) == 1

    def start(self, batch: PackedBatch, slot: Slot, numel: Any) -> Pending:
        """Start decoding a staged batch that decodes in one group on the next decode thread
        (executor thread); ``finish`` completes it. Note [torchdali decode threads]."""
        t0, t0_cpu = time.perf_counter(), time.thread_time()
        if self.staging.ring is not None:
            self.staging.release_ready()
        if numel is None:
            numel = decoded_sizes(batch.shapes)
        while len(self.threads) < 2:
            self.threads.append(DecodeThread(self, len(self.threads)))
        thread = self.threads[self._next_thread]
        self._next_thread = (self._next_thread + 1) % len(self.threads)
        turn = self.decoder.claim_turn()
        return Pending(batch, slot, turn, thread.submit(batch, slot.view, numel, turn), t0, t0_cpu)

    def finish(self, pending: Pending) -> ReadyBatch:
        """Wait for a started batch's decode, then run its kernel (executor thread): as
        ``process``. Raises what the decode raised, after the batch's slot is handed back."""
        return self._run(pending.batch, pending.slot, None, pending)

    def prepare(self, batch: PackedBatch, slot: Slot) -> Any:
        """Staging thread, once ``batch`` is staged in ``slot``: its ``decoded_sizes``, and,
        when it decodes in one group, its scan check started (``batch.scan_check``), so the
        executor thread does less between nvJPEG's calls."""
        numel = decoded_sizes(batch.shapes)
        if len(decode_groups(batch.shapes, sizes=numel)) == 1:
            batch.scan_check = self.decoder.scan_check(batch, slot.view)
        return numel

    def release_all(self, last_seq: int) -> None:
        """After a stop: wait for the GPU, then free every ring slot up to ``last_seq``.
        See Note [torchdali iterator shutdown] in ``_iterators.py``."""
        if self.staging.ring is None:
            return
        with torch.cuda.device(self.device):
            self.stream.synchronize()
            self.decoder.check_stream.synchronize()  # checks of staged batches never decoded
        self.staging.release_all(last_seq)

    def process(self, batch: PackedBatch, slot: Slot, numel: Any = None) -> ReadyBatch:
        """Decode and transform one staged batch (executor thread); ``numel``: its
        ``decoded_sizes`` when the staging thread has them.

        The kernel's GPU time is read from the previous batch's events, which
        have completed by then, so timing never waits on the GPU.
        """
        return self._run(batch, slot, numel, None)

    def _run(self, batch: PackedBatch, slot: Slot, numel: Any, pending: Pending | None) -> ReadyBatch:
        staging = self.staging
        if pending is None:
            t0, t0_cpu = time.perf_counter(), time.thread_time()
            if staging.ring is not None:
                staging.release_ready()
        else:
            t0, t0_cpu = pending.t0, pending.t0_cpu
        ready = None
        decoded: DecodedBatch | None = None
        try:
            with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
                if pending is not None:
                    groups = [(0, len(batch.indices))]
                    decoded = pending.decoded.result()
                else:
                    if numel is None:
                        numel = decoded_sizes(batch.shapes)
                    groups = decode_groups(batch.shapes, sizes=numel)
                    if len(groups) == 1:
                        decoded = self.decoder.decode(batch, slot.view, self.stream, numel=numel)
                if decoded is not None:
                    counts = decoded.counts
                    t_decoded = time.perf_counter()
                    images, kernel_events, targets = self.launcher.launch(decoded, batch.batch_params, self.stream,
                                                                          batch.targets)
                else:
                    images, kernel_events, decode_s, counts = self._process_groups(batch, slot, groups)
                    t_decoded = t0 + decode_s
                    targets = batch.targets
                if isinstance(targets, torch.Tensor) and targets.device != self.device:
                    targets = targets.to(self.device, non_blocking=True)
                if self.delivery.native is not None:  # ours only: foreign callables run in the loop's thread
                    key = _rng.batch_key(batch.seed, batch.epoch, batch.first_position)
                    images, targets = self.delivery.run_native(images, targets, batch.has_target, key)
                # the scan check read the staged bytes too
                if decoded is not None and decoded.check_done is not None:
                    self.stream.wait_event(decoded.check_done)
                elif len(groups) > 1:
                    self.stream.wait_stream(self.decoder.check_stream)
                ready = torch.cuda.Event()
                ready.record(self.stream)
                slot.event = ready
        finally:
            if ready is None:  # failed half-way: work may be queued that reads the slot or the buffer
                ready = torch.cuda.Event()
                ready.record(self.stream)
            # the batch after next decodes into this buffer again
            self.decoder.read_until(ready, None if pending is None else pending.turn)
            staging.give_back(slot)  # the event guards the reuse of a pinned slot
            if staging.ring is not None and batch.seq >= 0:
                staging.hold(ready, batch.seq)
        t_end = time.perf_counter()
        kernel_s = self.launcher.previous_kernel_s(kernel_events)
        cpu_s = time.thread_time() - t0_cpu
        if pending is not None:  # the decode's share of the executor's work ran on a decode thread
            cpu_s += counts.pop("decode_thread_cpu_s", 0.0)
            counts.pop("decode_thread_s", None)
        stages = {"executor_s": t_end - t0, "executor_cpu_s": cpu_s,
                  "decode_s": t_decoded - t0, "launch_s": t_end - t_decoded,
                  "kernel_s": kernel_s, "share_decoded": batch.share_decoded,
                  "share_decode_s": batch.share_decode_s, **counts}
        return ReadyBatch(batch, images, targets, ready, stages)


    def _process_groups(self, batch: PackedBatch, slot: Slot,
                        groups: list[tuple[int, int]]) -> tuple[torch.Tensor, KernelEvents, float, dict]:
        """Decode and transform a batch too large to decode at once, group by group
        (``_decode.decode_groups``): (images, timing events, seconds spent decoding,
        decode route counters).

        Every group is decoded into the front of the decoder's next grow-only buffer,
        sized for the largest group: a group's decode waits (on the host, before nvJPEG's
        engines write) for the previous group's kernel, which read it. (Buffers freed and
        allocated in turn would not do: nvJPEG keeps the buffers of its last calls
        referenced until their work is done, and the caching allocator would keep a
        block per new size.)
        """
        images = first = last = None
        decode_s = 0.0
        counts = dict.fromkeys(ROUTE_COUNTERS, 0)
        numel = decoded_sizes(batch.shapes)
        buffer = self.decoder.next_buffer(int(max(numel[a:b].sum() for a, b in groups)))
        for start, stop in groups:
            sub = sub_batch(batch, start, stop)
            t = time.perf_counter()
            decoded = self.decoder.decode(sub, slot.view, self.stream, buffer)
            decode_s += time.perf_counter() - t
            for k, v in self.decoder.counts.items():
                counts[k] += v
            part, events, _ = self.launcher.launch(decoded, sub.batch_params, self.stream)
            merge_sub_batch(batch, sub, start, stop)
            if images is None:
                layout = torch.channels_last if self.launcher.channels_last and part.dim() == 4 \
                    else torch.contiguous_format
                images = torch.empty((len(batch.indices), *part.shape[1:]), dtype=part.dtype, device=part.device,
                                     memory_format=layout)
            images[start:stop].copy_(part)
            first = first or events
            last = events
        return images, KernelEvents(first.start, last.end), decode_s, counts


def executor_for(loader: Any, device: torch.device) -> BatchExecutor:
    """The loader's executor for ``device``, built on first use and kept until ``loader.close()``."""
    cache = loader.__dict__.setdefault("_executors", {})
    ex = cache.get(device.index)
    if ex is None:
        ex = BatchExecutor(loader.plan, device, loader.memory_format == torch.channels_last,
                           loader.prefetch_depth, loader.dataset, loader.on_error,
                           ring=loader.__dict__.get("_ring"), delivery=loader._delivery,
                           max_image_pixels=loader.__dict__.get("max_image_pixels"))
        if "_decode_threads" in loader.__dict__:  # benchmarks/recipes.py --serial: both ways in one process
            ex.overlap = bool(loader.__dict__["_decode_threads"])
        cache[device.index] = ex
    return ex
