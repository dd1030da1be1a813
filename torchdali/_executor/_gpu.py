"""GPU batch executor: nvJPEG decode + fused kernel on our own stream, prefetch ring.

A background thread pulls packed batches from the inner DataLoader (whose
workers read bytes, parse JPEG headers and draw parameters), stages the bytes in
reused pinned memory, decodes them with nvJPEG into a buffer from torch's caching
allocator, runs the fused kernel, and records an event. At most
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

    def take(self, nbytes: int) -> torch.Tensor:
        if self.event is not None:
            self.event.synchronize()  # only blocks when the GPU is a whole ring behind
        if self.buffer.numel() < nbytes:
            # grow with headroom so a slightly larger batch does not reallocate
            self.buffer = torch.empty(int(nbytes * 1.25) + 4096, dtype=torch.uint8, pin_memory=True)
        return self.buffer[:nbytes]


class BatchExecutor:
    """Per-loader, per-device GPU state: stream, nvJPEG handles, pinned staging ring.

    Built once and reused across epochs, so GPU state is initialised once.
    """

    def __init__(self, plan: Any, device: torch.device, channels_last: bool, depth: int,
                 dataset: Any = None, on_error: Any = "raise") -> None:
        from ..decode import NvjpegDecoder
        from ._worker import PrepareBatch

        # CPU decoding for the rare sample nvJPEG rejects, and the on_error policy
        self.fallback = PrepareBatch(plan, "cpu", on_error=on_error, dataset=dataset)
        self.plan = plan
        self.device = device
        self.channels_last = channels_last
        self.dataset = dataset
        with torch.cuda.device(device):
            self.stream = torch.cuda.Stream(device)
            # the decoder rotates nvJPEG states, keeping `depth` batches in flight
            # fancy (interpolating) chroma upsampling, as libjpeg-turbo does, so the
            # GPU and CPU paths agree on 4:2:0/4:2:2 images
            self.decoder = NvjpegDecoder(device, pipeline_depth=max(2, depth), fancy_upsampling=True)
        self.slots = [_PinnedSlot() for _ in range(depth + 2)]
        self._last_kernel: tuple | None = None
        self._next_slot = 0
        self.scale = torch.tensor(plan.scale, dtype=torch.float32, device=device)
        self.bias = torch.tensor(plan.bias, dtype=torch.float32, device=device)

    def close(self) -> None:
        dec = getattr(self, "decoder", None)
        if dec is not None:
            dec.close()
            self.decoder = None

    def process(self, batch: PackedBatch) -> tuple[torch.Tensor, Any, torch.cuda.Event, dict]:
        """Decode and transform one packed batch; returns (images, targets, ready event, stage timings).

        The kernel's GPU time is read from the previous batch's events, which
        have completed by then, so timing never waits on the GPU.
        """
        from ..csrc_triton import fused_resized_crop
        from ..decode import decode_cpu

        t0 = time.perf_counter()
        n = len(batch.indices)
        slot = self.slots[self._next_slot]
        self._next_slot = (self._next_slot + 1) % len(self.slots)
        pinned = slot.take(batch.blob.numel())
        pinned.copy_(batch.blob)
        t_staged = time.perf_counter()
        t_decoded = t_staged

        shapes = batch.shapes.copy()
        numel = shapes[:, 0] * shapes[:, 1] * shapes[:, 2]
        out_offsets = np.zeros(n, dtype=np.int64)
        if n > 1:
            np.cumsum(numel[:-1], out=out_offsets[1:])
        total = int(numel.sum())

        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            decoded = torch.empty(max(total, 1), dtype=torch.uint8, device=self.device)
            raw = np.nonzero(batch.kinds == RAW)[0]
            for i in raw:  # already-decoded samples (CPU fallback in the worker, external source)
                src = pinned[batch.offsets[i]: batch.offsets[i] + batch.lengths[i]]
                decoded[out_offsets[i]: out_offsets[i] + numel[i]].copy_(src, non_blocking=True)
            enc = np.nonzero(batch.kinds == ENCODED)[0]
            if len(enc):
                decoder = self.decoder
                status = decoder.decode_batch(
                    pinned, batch.offsets[enc], batch.lengths[enc], shapes[enc, :2],
                    decoded, out_offsets[enc], self.stream,
                )
                bad = [k for k, s in enumerate(status) if s != 0]
                for k in bad:
                    i = int(enc[k])
                    self._decode_on_cpu(i, batch, pinned, decoded, out_offsets[i], shapes[i], decode_cpu,
                                        decoder.describe(status[k], k))
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
            ready = torch.cuda.Event()
            ready.record(self.stream)
            slot.event = ready
        t_end = time.perf_counter()
        kernel_s = 0.0
        if self._last_kernel is not None and self._last_kernel[1].query():
            kernel_s = self._last_kernel[0].elapsed_time(self._last_kernel[1]) / 1e3
        self._last_kernel = (k_start, k_end)
        stages = {"executor_s": t_end - t0, "stage_s": t_staged - t0, "decode_s": t_decoded - t_staged,
                  "launch_s": t_end - t_decoded, "kernel_s": kernel_s}
        return images, targets, ready, stages

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
                           loader.prefetch_depth, loader.dataset, loader.on_error)
        cache[device.index] = ex
    return ex


class GpuIterator:
    """Iterator over GPU batches; a background thread keeps ``prefetch_depth`` ready."""

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
        self._stop = threading.Event()
        self._closed = False
        self._inner_it = iter(inner)
        self._thread = threading.Thread(target=self._run, name="torchdali-executor", daemon=True)
        self._thread.start()

    # -- producer ------------------------------------------------------------
    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            torch.cuda.set_device(self._device)
            for k, batch in enumerate(self._inner_it):
                if self._stop.is_set():
                    return
                try:
                    images, targets, ready, stages = self._executor.process(batch)
                except SampleError:
                    raise
                except Exception as e:
                    raise RuntimeError(
                        f"torchdali GPU executor failed on batch {k} (samples {batch.indices[:8].tolist()}"
                        f"{'...' if len(batch.indices) > 8 else ''}): {type(e).__name__}: {e}") from e
                if not self._put((batch, images, targets, ready, stages)):
                    return
            self._put(_END)
        except BaseException as e:  # re-raised in the consumer's thread
            if not self._stop.is_set():
                self._put(_Failure(e))

    # -- consumer ------------------------------------------------------------
    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self):
        if self._closed:
            raise StopIteration
        t0 = time.perf_counter()
        while True:
            try:
                item = self._queue.get(timeout=1.0)
                break
            except queue.Empty:
                if not self._thread.is_alive():
                    self.close()
                    raise RuntimeError("torchdali executor thread ended without a result") from None
        if item is _END:
            self._stats.end_epoch()
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
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
        """Stop the thread and the workers; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        while True:  # unblock a producer waiting on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout=2.0)
        shutdown = getattr(self._inner_it, "_shutdown_workers", None)
        if shutdown is not None and not self._loader.persistent_workers:
            shutdown()
        self._thread.join(timeout=5.0)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
