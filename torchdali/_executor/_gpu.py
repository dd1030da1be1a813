"""GPU batch executor: nvJPEG decode + fused kernel on our own stream, prefetch ring.

A staging thread pulls packed batches from the inner DataLoader (whose workers
read bytes, parse JPEG headers and draw parameters). The workers have written
the bytes into a shared ring of pinned slots (``_ring.py``); a batch that did not
fit there is copied into a reused pinned buffer. A decode thread decodes them
with nvJPEG into a buffer from torch's caching allocator, runs the fused kernel
on our own stream, records an event, and hands the ring slot back once that
event has passed. At most
``prefetch_depth`` finished batches wait in the queue. The consumer's stream
waits on the batch's event (no host synchronisation) and the output is marked as
used by that stream, so the allocator reuses its memory only once the training
step that read it is done.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Any

import numpy as np
import torch

from ..errors import SampleError
from ._worker import ENCODED, RAW, PackedBatch

_END = object()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _PinnedSlot:
    """A reusable pinned host buffer, free again once ``event`` has completed."""

    def __init__(self) -> None:
        self.buffer = torch.empty(0, dtype=torch.uint8)
        self.event: torch.cuda.Event | None = None
        self.view = self.buffer

    def take(self, nbytes: int) -> torch.Tensor:
        if self.event is not None:
            self.event.synchronize()  # only blocks when the GPU is a whole ring behind
        if self.buffer.numel() < nbytes:
            # grow with headroom so a slightly larger batch does not reallocate
            self.buffer = torch.empty(int(nbytes * 1.25) + 4096, dtype=torch.uint8, pin_memory=True)
        self.view = self.buffer[:nbytes]
        return self.view


class _RingSlot:
    """A batch's bytes in the shared staging ring: nothing to copy, released by sequence number."""

    def __init__(self, view: torch.Tensor, seq: int) -> None:
        self.view = view
        self.seq = seq


class BatchExecutor:
    """Per-loader, per-device GPU state: streams, nvJPEG handles, pinned staging ring.

    Built once and reused across epochs, so GPU state is initialised once.
    ``stage`` (host copy into pinned memory) and ``process`` (decode + kernel) run
    on two threads so a batch is staged while the previous one decodes.
    """

    def __init__(self, plan: Any, device: torch.device, channels_last: bool, depth: int,
                 dataset: Any = None, on_error: Any = "raise", ring: Any = None) -> None:
        from ..decode import NvjpegDecoder
        from ._worker import PrepareBatch

        # CPU decoding for the rare sample nvJPEG rejects, and the on_error policy
        self.fallback = PrepareBatch(plan, "cpu", on_error=on_error, dataset=dataset)
        self.plan = plan
        self.device = device
        self.channels_last = channels_last
        with torch.cuda.device(device):
            self.stream = torch.cuda.Stream(device)
            # fancy (interpolating) chroma upsampling, as libjpeg-turbo does, so the
            # GPU and CPU paths agree on 4:2:0/4:2:2 images
            self.decoder = NvjpegDecoder(device, pipeline_depth=2, fancy_upsampling=True)
        self.free_slots: queue.Queue = queue.Queue()
        for _ in range(depth + 2):
            self.free_slots.put(_PinnedSlot())
        with torch.cuda.device(device):
            self.check_stream = torch.cuda.Stream(device)
        self._flags_host = torch.empty(0, dtype=torch.bool)
        self.ring = ring
        if ring is not None:
            ring.register()
        self._pending: list[tuple[torch.cuda.Event, int]] = []  # ring slots the GPU may still read
        self._last_kernel: tuple | None = None
        self.scale = torch.tensor(plan.scale, dtype=torch.float32, device=device)
        self.bias = torch.tensor(plan.bias, dtype=torch.float32, device=device)

    def close(self) -> None:
        if getattr(self, "decoder", None) is not None:
            self.decoder.close()
            self.decoder = None

    def stage(self, batch: PackedBatch, stop: threading.Event) -> tuple[Any, float]:
        """Copy the batch's bytes into a free pinned slot (staging thread); a batch in the
        staging ring is already there."""
        t0 = time.perf_counter()
        if batch.ring_seq >= 0:
            nbytes = int(batch.offsets[-1] + batch.lengths[-1]) if len(batch.offsets) else 0
            return _RingSlot(self.ring.slot(batch.ring_seq)[:nbytes], batch.ring_seq), 0.0
        while True:
            try:
                slot = self.free_slots.get(timeout=0.1)
                break
            except queue.Empty:
                if stop.is_set():
                    raise _Stopped() from None
        slot.take(batch.blob.numel()).copy_(batch.blob)
        return slot, time.perf_counter() - t0

    def release_ready(self) -> None:
        """Hand ring slots back to the workers once the GPU has read them."""
        while self._pending and self._pending[0][0].query():
            self.ring.release(self._pending.pop(0)[1])

    def release_all(self, last_seq: int) -> None:
        """After a stop: wait for the GPU, then free every slot up to ``last_seq``."""
        if self.ring is None:
            return
        with torch.cuda.device(self.device):
            self.stream.synchronize()
        self._pending.clear()
        self.ring.release_upto(last_seq)

    def _give_back(self, slot: Any) -> None:
        # A ring slot goes back by its batch number (see process); on a stop, release_all.
        if not isinstance(slot, _RingSlot):
            self.free_slots.put(slot)

    def process(self, batch: PackedBatch, slot: Any) -> tuple[torch.Tensor, Any, torch.cuda.Event, dict]:
        """Decode and transform one staged batch; returns (images, targets, ready event, stage timings).

        The kernel's GPU time is read from the previous batch's events, which
        have completed by then, so timing never waits on the GPU.
        """
        from ..csrc_triton import fused_resized_crop

        t0 = time.perf_counter()
        if self.ring is not None:
            self.release_ready()
        pinned = slot.view
        ready = None
        n = len(batch.indices)
        shapes = batch.shapes.copy()
        numel = shapes[:, 0] * shapes[:, 1] * shapes[:, 2]
        out_offsets = np.zeros(n, dtype=np.int64)
        if n > 1:
            np.cumsum(numel[:-1], out=out_offsets[1:])
        total = int(numel.sum())
        try:
            with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
                decoded = torch.empty(max(total, 1), dtype=torch.uint8, device=self.device)
                for i in np.nonzero(batch.kinds == RAW)[0]:  # decoded in the worker (CPU fallback, external source)
                    src = pinned[batch.offsets[i]: batch.offsets[i] + batch.lengths[i]]
                    decoded[out_offsets[i]: out_offsets[i] + numel[i]].copy_(src, non_blocking=True)
                enc = np.nonzero(batch.kinds == ENCODED)[0]
                if len(enc):
                    decoded = self._decode(batch, pinned, enc, shapes, decoded, out_offsets)
                t_decoded = time.perf_counter()
                shapes_d = torch.from_numpy(shapes).to(self.device, non_blocking=True)
                offsets_d = torch.from_numpy(out_offsets).to(self.device, non_blocking=True)
                params_d = batch.params.to(self.device, non_blocking=True)
                k_start, k_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                k_start.record(self.stream)
                images = fused_resized_crop(
                    decoded, offsets_d, shapes_d, params_d, self.plan.out_size, self.scale, self.bias,
                    out_dtype=self.plan.out_dtype, channels_last=self.channels_last,
                    antialias=self.plan.antialias, quantize=self.plan.quantize,
                )
                k_end.record(self.stream)
                targets = batch.targets
                if isinstance(targets, torch.Tensor):
                    targets = targets.to(self.device, non_blocking=True)
                self.stream.wait_stream(self.check_stream)  # it read the staged bytes too
                ready = torch.cuda.Event()
                ready.record(self.stream)
                slot.event = ready
        finally:
            self._give_back(slot)  # the event guards the reuse of a pinned slot
            if self.ring is not None and batch.seq >= 0:
                # Every numbered batch releases its ring slot, in order, once the GPU has
                # passed it, whether or not its bytes went through the ring: the next
                # batch for that slot waits for exactly this number.
                if ready is None:  # failed half-way: work may be queued that reads the slot
                    ready = torch.cuda.Event()
                    ready.record(self.stream)
                self._pending.append((ready, batch.seq))
        t_end = time.perf_counter()
        kernel_s = 0.0
        if self._last_kernel is not None and self._last_kernel[1].query():
            kernel_s = self._last_kernel[0].elapsed_time(self._last_kernel[1]) / 1e3
        self._last_kernel = (k_start, k_end)
        stages = {"executor_s": t_end - t0, "decode_s": t_decoded - t0, "launch_s": t_end - t_decoded,
                  "kernel_s": kernel_s}
        return images, targets, ready, stages

    def _decode(self, batch: PackedBatch, pinned: torch.Tensor, enc: np.ndarray, shapes: np.ndarray,
                decoded: torch.Tensor, out_offsets: np.ndarray) -> torch.Tensor:
        """nvJPEG on the encoded samples, then the CPU for what it rejects, then the
        on_error policy."""
        from ..decode import decode_cpu

        suspects = self._check_scans(batch, pinned, enc)
        hints = batch.hints[enc] if batch.hints is not None else None
        if hints is not None and (hints < 0).any():
            hints = None
        status = self.decoder.decode_batch(pinned, batch.offsets[enc], batch.lengths[enc], shapes[enc, :2],
                                           decoded, out_offsets[enc], self.stream, hints=hints)
        failed = []
        flagged = set(suspects())
        for k, st in enumerate(status):
            i = int(enc[k])
            if st == 0 and i not in flagged:
                continue
            reason = self.decoder.describe(st, k) if st != 0 else \
                "decoded, but its compressed data holds a marker no JPEG scan can hold"
            try:
                self._decode_on_cpu(i, batch, pinned, decoded, out_offsets[i], shapes[i], decode_cpu, reason)
            except SampleError as err:
                if self.fallback.on_error == "raise":
                    raise
                failed.append((i, err))
        if failed:
            decoded = self._replace(batch, failed, decoded, shapes, out_offsets)
        return decoded

    def _check_scans(self, batch: PackedBatch, pinned: torch.Tensor, enc: np.ndarray):
        """Start the scan-marker check of the batch's JPEGs on a side stream; returns a
        function giving the flagged sample numbers once the check is done.

        The engines decode a JPEG with an overwritten scan without an error; the
        check copies the batch's bytes to the GPU and looks at every 0xFF there,
        while the decoder works. Waiting for it costs nothing: the batched hardware
        decode holds the host far longer.
        """
        starts = batch.scan_starts
        if starts is None or not len(enc) or (starts[enc] < 0).all():
            return lambda: ()
        from ..csrc_triton.scan_check import bad_scan_markers

        with torch.cuda.stream(self.check_stream):
            on_gpu = pinned.to(self.device, non_blocking=True)
            flags = bad_scan_markers(on_gpu, batch.offsets[enc], batch.lengths[enc], starts[enc])
            if self._flags_host.numel() < len(enc):
                self._flags_host = torch.empty(max(len(enc), 256), dtype=torch.bool, pin_memory=True)
            host = self._flags_host[: len(enc)]
            host.copy_(flags, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.check_stream)

        def flagged():
            done.synchronize()
            return enc[host.numpy().nonzero()[0]].tolist()

        return flagged

    def _replace(self, batch: PackedBatch, failed: list, decoded: torch.Tensor, shapes: np.ndarray,
                 out_offsets: np.ndarray) -> torch.Tensor:
        """Apply on_error to samples that failed on the GPU and on the CPU: their
        replacements are decoded on the CPU and appended to the decode buffer."""
        from .. import _rng

        used: set = set()
        extra, end = [], decoded.numel()
        params = batch.params.clone()
        for i, err in failed:
            tag, path, target, _, _, payload, shape = self.fallback.replace(err, batch.spares, used)
            batch.skipped.append((err.index, err.path, str(err)))
            pos = tag[2] if tag is not None else int(batch.positions[i])
            if tag is not None:
                batch.indices[i], batch.positions[i], batch.paths[i] = tag[3], tag[2], path
            shapes[i] = shape
            out_offsets[i] = end
            end += payload.numel()
            extra.append(payload.reshape(-1))
            keys = _rng.sample_keys(batch.seed, batch.epoch, np.array([pos]))
            params[i] = self.plan.params(np.array([shape[:2]]), keys)[0]
            if batch.has_target:
                batch.targets[i] = torch.as_tensor(target) if isinstance(batch.targets, torch.Tensor) else target
        batch.params = params
        grown = torch.empty(end, dtype=torch.uint8, device=self.device)
        grown[: decoded.numel()].copy_(decoded)
        grown[decoded.numel():].copy_(torch.cat(extra).pin_memory(), non_blocking=True)
        return grown

    def _decode_on_cpu(self, i: int, batch: PackedBatch, pinned: torch.Tensor, decoded: torch.Tensor,
                       offset: int, shape: np.ndarray, decode_cpu: Any, gpu_reason: str) -> None:
        """A sample nvJPEG rejected: decode it on the CPU, or name it in the error."""
        idx, path = int(batch.indices[i]), batch.paths[i]
        data = pinned[batch.offsets[i]: batch.offsets[i] + batch.lengths[i]].clone()
        try:
            img = decode_cpu(data)
        except Exception as e:
            raise SampleError.for_sample(idx, path, "cannot decode image",
                                         f"{e} (GPU decoder: {gpu_reason})") from None
        if tuple(img.shape) != (int(shape[0]), int(shape[1]), 3):
            raise SampleError.for_sample(idx, path, "cannot decode image",
                                         f"header says {int(shape[0])}x{int(shape[1])} but the data decodes to "
                                         f"{img.shape[0]}x{img.shape[1]} (GPU decoder: {gpu_reason})")
        n = img.numel()
        decoded[offset: offset + n].copy_(img.reshape(-1).pin_memory(), non_blocking=True)


def executor_for(loader: Any, device: torch.device) -> BatchExecutor:
    cache = loader.__dict__.setdefault("_executors", {})
    ex = cache.get(device.index)
    if ex is None:
        ex = BatchExecutor(loader.plan, device, loader.memory_format == torch.channels_last,
                           loader.prefetch_depth, loader.dataset, loader.on_error,
                           ring=loader.__dict__.get("_ring"))
        cache[device.index] = ex
    return ex


class _Stopped(Exception):
    """Internal: the iterator is shutting down."""


class GpuIterator:
    """Iterator over GPU batches.

    Two background threads: one takes packed batches from the workers and stages
    their bytes in pinned memory, the other decodes and transforms them; at most
    ``prefetch_depth`` finished batches wait for the training loop.
    """

    def __init__(self, loader: Any, inner: torch.utils.data.DataLoader) -> None:
        device = loader.device
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self._loader = loader
        self._device = device
        self._executor = executor_for(loader, device)
        self._stats = loader._stats
        self._stats.start_epoch(loader._epoch_state.epoch)
        self._queue: queue.Queue = queue.Queue(maxsize=loader.prefetch_depth)
        self._staged: queue.Queue = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._closed = False
        self._inner = inner
        self._finished = False
        previous = getattr(inner, "_iterator", None)
        if previous is not None and hasattr(previous, "_timeout"):
            # persistent workers: their reset for this epoch waits with the user's timeout,
            # not with the short steps the last epoch's staging thread used
            previous._timeout = float(loader.timeout or 0)
        self._inner_it = iter(inner)
        self._threads = [threading.Thread(target=self._stage_loop, name="torchdali-stage", daemon=True),
                         threading.Thread(target=self._exec_loop, name="torchdali-executor", daemon=True)]
        for t in self._threads:
            t.start()

    # -- producers -------------------------------------------------------------
    def _put(self, q: queue.Queue, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                if q is self._queue and self._executor._pending:
                    self._executor.release_ready()  # the training loop is busy: workers need not be
                continue
        return False

    _POLL_S = 0.2

    def _next_inner(self) -> Any:
        """The workers' next batch; gives up when the iterator is closed.

        torch's iterator waits for a worker without end unless it has a timeout, and
        workers that were shut down never answer: so it waits in short steps (its
        own ``timeout`` mechanism, which leaves its state untouched when it fires)
        and checks between them whether to stop. The user's ``timeout`` still holds.
        """
        it = self._inner_it
        if not hasattr(it, "_timeout") or not hasattr(it, "_workers"):
            return next(it)
        user_timeout = float(self._loader.timeout or 0)
        it._timeout = self._POLL_S if not user_timeout else min(self._POLL_S, user_timeout)
        waited = 0.0
        while True:
            try:
                return next(it)
            except RuntimeError as e:
                if not str(e).startswith("DataLoader timed out after"):
                    raise
                if self._stop.is_set():
                    raise _Stopped() from None
                waited += it._timeout
                if user_timeout and waited >= user_timeout:
                    raise RuntimeError(f"DataLoader timed out after {user_timeout} seconds") from None

    def _stage_loop(self) -> None:
        try:
            t_fetch = time.perf_counter()
            while True:
                try:
                    batch = self._next_inner()
                except StopIteration:
                    break
                fetch_s = time.perf_counter() - t_fetch
                if self._stop.is_set():
                    return
                slot, seconds = self._executor.stage(batch, self._stop)
                t_fetch = time.perf_counter()
                if not self._put(self._staged, (batch, slot, (fetch_s, seconds))):
                    self._executor._give_back(slot)
                    return
            self._put(self._staged, _END)
        except _Stopped:
            return
        except BaseException as e:  # re-raised in the consumer's thread
            if not self._stop.is_set():
                self._put(self._staged, _Failure(e))

    def _exec_loop(self) -> None:
        try:
            torch.cuda.set_device(self._device)
            k = 0
            ex = self._executor
            while not self._stop.is_set():
                try:
                    # while ring slots wait for the GPU, poll often: a worker may wait for one
                    item = self._staged.get(timeout=0.002 if ex._pending else 0.1)
                except queue.Empty:
                    if ex._pending:
                        ex.release_ready()
                    continue
                if item is _END or isinstance(item, _Failure):
                    self._put(self._queue, item)
                    return
                batch, slot, stage_s = item
                try:
                    images, targets, ready, stages = self._executor.process(batch, slot)
                except SampleError:
                    raise
                except Exception as e:
                    raise RuntimeError(
                        f"torchdali GPU executor failed on batch {k} (samples {batch.indices[:8].tolist()}"
                        f"{'...' if len(batch.indices) > 8 else ''}): {type(e).__name__}: {e}") from e
                stages["fetch_s"], stages["stage_s"] = stage_s
                if not self._put(self._queue, (batch, images, targets, ready, stages)):
                    return
                k += 1
        except BaseException as e:
            if not self._stop.is_set():
                self._put(self._queue, _Failure(e))

    # -- consumer ------------------------------------------------------------
    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self):
        if self._closed:
            raise StopIteration
        t0 = time.perf_counter()
        try:
            while True:
                try:
                    item = self._queue.get(timeout=1.0)
                    break
                except queue.Empty:
                    if not any(t.is_alive() for t in self._threads):
                        raise RuntimeError("torchdali executor threads ended without a result") from None
        except BaseException:
            # also what torch's SIGCHLD handler raises here when a worker dies, and Ctrl-C
            self._close(wait_for_workers=False)
            raise
        if item is _END:
            self._finished = True
            self._stats.end_epoch()
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self._close(wait_for_workers=False)
            raise item.exc
        batch, images, targets, ready, stages = item
        consumer = torch.cuda.current_stream(self._device)
        consumer.wait_event(ready)
        images.record_stream(consumer)
        if isinstance(targets, torch.Tensor) and targets.is_cuda:
            targets.record_stream(consumer)
        self._stats.add_batch(len(batch.indices), wait=time.perf_counter() - t0, worker=batch.seconds,
                              stages=stages)
        self._loader._on_batch(batch)
        if batch.has_target:
            return images, targets
        return images

    def close(self) -> None:
        """Stop the threads and the workers; idempotent."""
        self._close(wait_for_workers=True)

    def _close(self, wait_for_workers: bool) -> None:
        """``wait_for_workers=False`` is the error path: a worker that is stuck (the
        reason for a timeout) must not hold the error back, so the workers are shut
        down on a background thread (torch's shutdown ends them within seconds)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        for q in (self._queue, self._staged):  # unblock producers waiting on a full queue
            while True:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
                if q is self._staged and isinstance(item, tuple):
                    self._executor._give_back(item[1])
        self._threads[1].join(timeout=2.0)
        # workers may be writing (or waiting to write) batches this iterator dispatched
        # and will never consume: once the GPU is done, every slot is theirs. Retiring
        # the sampler's pass first means no batch number past that can still be handed
        # out by this iterator (its staging thread may be inside it for a moment longer).
        sampler = getattr(self._inner, "batch_sampler", None)
        last = sampler.retire() if hasattr(sampler, "retire") else self._loader._epoch_state.next_seq - 1
        self._executor.release_all(last)
        shutdown = getattr(self._inner_it, "_shutdown_workers", None)
        if shutdown is not None and (not self._loader.persistent_workers or not self._finished):
            # Left mid-epoch: our staging thread may still be inside the workers' iterator,
            # so persistent workers cannot be reset for the next epoch safely; start anew.
            if wait_for_workers:
                shutdown()
            else:
                threading.Thread(target=shutdown, name="torchdali-worker-shutdown", daemon=True).start()
            if self._loader.persistent_workers and getattr(self._inner, "_iterator", None) is self._inner_it:
                self._inner._iterator = None
        for t in self._threads:
            t.join(timeout=5.0)
        while True:  # a slot put back while we drained
            try:
                item = self._staged.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, tuple):
                self._executor._give_back(item[1])

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
