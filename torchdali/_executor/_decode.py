"""GPU decode of a staged batch: nvJPEG, the scan check, the CPU fallback, on_error.

Every sample's pixels land back to back in one buffer from torch's caching
allocator: samples the workers already decoded (``RAW``) are copied in, the
JPEGs are decoded there by nvJPEG. A JPEG nvJPEG rejects, or whose compressed
data the scan check flags, is decoded on the CPU; one the CPU cannot decode
either is replaced under the on_error policy, its parameters drawn by
``_worker.draw_params`` like every other sample's (with the steps its boxes and masks
take, put in the batch's trace: the executor maps its target with the others).

A batch whose pixels would take more than ``DECODE_GROUP_BYTES`` is decoded
(and transformed) in groups of consecutive samples that each fit, one group
after the other into the same buffer, ordered on the executor's stream
(``decode_groups``; ``BatchExecutor.process``). An image larger than the cap is
a group of its own, so a batch's decode buffer never exceeds the larger of the
cap and its largest image.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Callable, NamedTuple

import numpy as np
import torch
from csrc_triton import layout
from csrc_triton.scan_check import bad_scan_markers

from ..errors import SampleError, without_frames
from ._staging import Turns
from ._tags import SampleTag
from ._wire import ENCODED, RAW, PackedBatch, PackedTargets, Skipped
from ._worker import PrepareBatch, draw_params


# Most decoded bytes (H x W x 3 summed over a group of samples) on the GPU at a time
# for one batch: 256 MiB holds a typical batch of 256 ImageNet images twice over, and
# exactly one image of Pillow's MAX_IMAGE_PIXELS (the default max_image_pixels).
DECODE_GROUP_BYTES = 256 << 20

# Per-batch counters of where samples were decoded (``GpuDecoder.counts``, EpochStats fields).
ROUTE_COUNTERS = ("decoded_hardware", "decoded_hybrid", "decoded_one_by_one", "decoded_cpu",
                  "nvjpeg_s", "nvjpeg_cpu_s", "scan_wait_s")
# (and the host seconds in nvJPEG's calls, the executor thread's CPU seconds in them, the scan check's wait)


# (hf, vf) of each planar subsampling code, and whether it has chroma planes (layout.SUBSAMPLING)
_FACTORS = np.ones((layout.PLANAR, 2), dtype=np.int64)
_HAS_CHROMA = np.zeros(layout.PLANAR, dtype=np.int64)
for _s, _f in layout.SUBSAMPLING.items():
    _FACTORS[_s] = _f
    _HAS_CHROMA[_s] = _s != layout.S_GRAY


def chroma_shapes(shapes: np.ndarray) -> np.ndarray:
    """``(ch, cw)`` of each planar sample's Cb and Cr planes (``shapes[:, 2]`` is
    ``layout.PLANAR + S``; ``(0, 0)`` for grayscale), as ``layout.chroma_shape``."""
    shapes = np.asarray(shapes, dtype=np.int64).reshape(-1, 3)
    s = shapes[:, 2] - layout.PLANAR
    hf, vf = _FACTORS[s, 0], _FACTORS[s, 1]
    return np.stack([-(-shapes[:, 0] // vf), -(-shapes[:, 1] // hf)], 1) * _HAS_CHROMA[s][:, None]


def decoded_sizes(shapes: np.ndarray) -> np.ndarray:
    """Bytes each sample takes decoded: ``H * W * C`` for interleaved pixels
    (``shapes[:, 2]`` 1 or 3), the planes' size for a planar one (``layout.PLANAR + S``)."""
    shapes = np.asarray(shapes, dtype=np.int64).reshape(-1, 3)
    H, W, C = shapes[:, 0], shapes[:, 1], shapes[:, 2]
    planar = C >= layout.PLANAR
    if not planar.any():
        return H * W * C
    sizes = H * W * np.where(planar, 1, C)
    chroma = chroma_shapes(shapes[planar])
    sizes[planar] += 2 * chroma[:, 0] * chroma[:, 1]
    return sizes


def kernel_source(shapes: np.ndarray) -> int:
    """The kernel's ``layout.SOURCE_*`` for a decoded batch: mixed when any sample is planar."""
    shapes = np.asarray(shapes).reshape(-1, 3)
    return layout.SOURCE_MIXED if (shapes[:, 2] >= layout.PLANAR).any() else layout.SOURCE_INTERLEAVED


def decode_groups(shapes: np.ndarray, cap: int | None = None,
                  sizes: np.ndarray | None = None) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges of consecutive samples whose decoded bytes stay within
    ``cap`` (default ``DECODE_GROUP_BYTES``); one range for a batch that fits.
    ``sizes``: ``decoded_sizes(shapes)`` when the caller has it."""
    cap = DECODE_GROUP_BYTES if cap is None else cap
    if sizes is None:
        sizes = decoded_sizes(shapes) if len(shapes) else np.zeros(0, dtype=np.int64)
    if int(sizes.sum()) <= cap:
        return [(0, len(sizes))]
    sizes = sizes.tolist()
    groups, start, held = [], 0, 0
    for i, size in enumerate(sizes):
        if i > start and held + size > cap:
            groups.append((start, i))
            start, held = i, 0
        held += size
    groups.append((start, len(sizes)))
    return groups


RAW_SPAN_SLACK = 1.25  # a batch's CPU-decoded pixels are copied as one span if it wastes no more than this


def decoded_layout(kinds: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, numel: np.ndarray,
                   room: int | None = None) -> tuple[np.ndarray, int, tuple[int, int, int] | None]:
    """Where each sample of a batch goes in its decode buffer: ``(out_offsets, total bytes,
    raw span)``.

    Samples decoded on the GPU come first, in batch order. The pixels the workers decoded
    (``RAW``) lie together in the staged bytes (the packer writes them one after another),
    and go to the GPU as one copy of their span: ``raw span`` is ``(start, stop, at)``,
    the staged bytes ``[start, stop)`` copied to ``at`` in the buffer, each such sample
    at its own place within. One copy instead of one per sample: each copy hands the
    interpreter lock to the loader's other threads and waits to get it back, on the
    thread that feeds nvJPEG. When the span would carry much else (the samples scattered
    among encoded ones), or a payload is not exactly its pixels, the samples are placed
    in batch order and ``raw span`` is None: copy them one by one. So they are when the
    span would not fit in ``room`` bytes (a buffer of a fixed size, given).
    """
    n = len(kinds)
    out_offsets = np.zeros(n, dtype=np.int64)
    raw = np.flatnonzero(kinds == RAW)
    if len(raw):
        starts, stops = offsets[raw], offsets[raw] + lengths[raw]
        lo, hi = int(starts.min()), int(stops.max())
        exact = bool((lengths[raw] == numel[raw]).all())
        others = np.flatnonzero(kinds != RAW)
        base = int(numel[others].sum())
        if exact and hi - lo <= RAW_SPAN_SLACK * int(numel[raw].sum()) + (1 << 16) \
                and (room is None or base + hi - lo <= room):
            out_offsets[others] = np.cumsum(numel[others]) - numel[others]
            out_offsets[raw] = base + starts - lo
            return out_offsets, base + hi - lo, (lo, hi, base)
    if n > 1:
        np.cumsum(numel[:-1], out=out_offsets[1:])
    return out_offsets, int(numel.sum()), None


def _grown(decoded: torch.Tensor, extra: list[torch.Tensor], into: GrowOnlyBuffer) -> torch.Tensor:
    """``decoded`` with the host images ``extra`` appended, at the front of ``into`` (the
    copies are ordered on the current stream). ``decoded`` may already be that front, as
    when a batch grows twice: its bytes then stay where they are."""
    n = decoded.numel()
    held = into.tensor
    in_place = held is not None and decoded.data_ptr() == held.data_ptr()
    grown = into.take(n + sum(e.numel() for e in extra))
    if not (in_place and grown.data_ptr() == decoded.data_ptr()):
        grown[:n].copy_(decoded)
    host = torch.cat(extra)
    grown[n:].copy_(host.pin_memory() if grown.is_cuda else host, non_blocking=True)
    return grown


def sub_batch(batch: PackedBatch, start: int, stop: int) -> PackedBatch:
    """Samples ``[start, stop)`` of ``batch`` as a batch of their own (their bytes stay where
    they are); ``merge_sub_batch`` carries what decoding changed back."""
    def part(a: Any) -> Any:
        return None if a is None else a[start:stop]

    targets = batch.targets
    if isinstance(targets, (torch.Tensor, list, PackedTargets)):
        targets = targets[start:stop]
    return dataclasses.replace(
        batch, indices=batch.indices[start:stop], positions=batch.positions[start:stop],
        paths=batch.paths[start:stop], params=batch.params[start:stop], slots=part(batch.slots), targets=targets,
        kinds=part(batch.kinds), offsets=part(batch.offsets), lengths=part(batch.lengths),
        shapes=part(batch.shapes), hints=part(batch.hints), scan_starts=part(batch.scan_starts),
        spares=batch.spares, skipped=[], scan_check=None, trace=None)  # (the batch's trace: merge_sub_batch)


def merge_sub_batch(batch: PackedBatch, sub: PackedBatch, start: int, stop: int) -> None:
    """Carry on_error's replacements in ``sub`` (from ``sub_batch``) back into ``batch``."""
    if not sub.skipped:
        return
    batch.indices[start:stop] = sub.indices
    batch.positions[start:stop] = sub.positions
    batch.paths[start:stop] = sub.paths
    if batch.params is not sub.params:
        batch.params = batch.params.clone()
        batch.params[start:stop] = sub.params
    if batch.slots is not None and batch.slots is not sub.slots:
        batch.slots = batch.slots.clone()
        batch.slots[start:stop] = sub.slots
    if isinstance(batch.targets, (list, PackedTargets)):
        batch.targets[start:stop] = sub.targets
    elif isinstance(batch.targets, torch.Tensor) and sub.targets is not None:
        batch.targets[start:stop] = sub.targets
    batch.spares = sub.spares
    batch.skipped.extend(sub.skipped)
    batch.trace = None  # boxes and masks: traced again where they are mapped, with the replacements


class GrowOnlyBuffer:
    """The batch decode buffer, kept from batch to batch and only ever grown.

    A new buffer per batch let torch's caching allocator keep one block for every new
    largest batch it had seen (batches of photographs vary in decoded bytes), so its
    reserved memory rose in steps over a long run. Kept and grown to ``HEADROOM`` times
    the need, rounded up to ``ALIGN`` bytes, the buffer is reallocated a few times early
    and then not at all (each time after the stream's queued work is done). Views of it
    are reused by the next batch: everything reading or writing it must be ordered on
    the one stream it is used from (the executor's), as the grouped decode's buffer is.
    """

    HEADROOM = 1.25
    ALIGN = 32 << 20

    def __init__(self, device: torch.device | str, headroom: float | None = None, align: int | None = None) -> None:
        """``headroom``, ``align``: how it grows, ``HEADROOM`` and ``ALIGN`` where not given (a video loader's
        batches of clips keep one size: 1 and 1)."""
        self.device = torch.device(device)
        self.headroom = self.HEADROOM if headroom is None else headroom
        self.align = self.ALIGN if align is None else align
        self.tensor: torch.Tensor | None = None
        self.grown = 0  # how often it was (re)allocated

    def take(self, numel: int) -> torch.Tensor:
        """A view of ``numel`` bytes at the front of the buffer, growing it first if needed."""
        numel = max(int(numel), 1)
        if self.tensor is None or self.tensor.numel() < numel:
            if self.tensor is not None and self.device.type == "cuda":
                # nvJPEG may hold the old buffer until its queued work is done (see
                # _executor._process_groups): let that finish before the block is freed
                torch.cuda.current_stream(self.device).synchronize()
            self.tensor = None
            size = -(-int(numel * self.headroom) // self.align) * self.align
            self.tensor = torch.empty(size, dtype=torch.uint8, device=self.device)
            self.grown += 1
        return self.tensor[:numel]

    def release(self) -> None:
        self.tensor = None


class ScanCheck(NamedTuple):
    """A batch's scan-marker check, queued on the decoder's check stream (``GpuDecoder.scan_check``)."""

    samples: np.ndarray  # the batch's sample numbers it checks (its JPEGs)
    flagged: Callable[[], list]  # waits for the check; the flagged sample numbers
    done: torch.cuda.Event | None  # recorded on the check stream after it (None: nothing queued)


class DecodedBatch(NamedTuple):
    """A batch's pixels on the GPU, as the kernel reads them."""

    buffer: torch.Tensor  # uint8, every image back to back: HWC, or Y, Cb, Cr planes
    shapes: np.ndarray  # int64 [B, 3]: (H, W, C), or (H, W, layout.PLANAR + S) for planes
    offsets: np.ndarray  # int64 [B]: where each image starts in ``buffer``
    counts: dict  # ROUTE_COUNTERS: where its samples were decoded
    check_done: Any  # its scan check's event on the check stream (None: nothing queued)

    @property
    def source(self) -> int:
        """The kernel's ``layout.SOURCE_*`` for this batch."""
        return kernel_source(self.shapes)


class GpuDecoder:
    """Per-loader, per-device decode state: the nvJPEG decoder, the scan-check stream
    and the CPU fallback with the on_error policy."""

    def __init__(self, plan: Any, device: torch.device, on_error: Any = "raise", dataset: Any = None,
                 max_image_pixels: int | None = None) -> None:
        from ..decode import NvjpegDecoder

        # CPU decoding for the rare sample nvJPEG rejects, and the on_error policy
        self.fallback = PrepareBatch(plan, "cpu", on_error=on_error, dataset=dataset,
                                     max_image_pixels=max_image_pixels)
        self.plan = plan
        self.device = device
        with torch.cuda.device(device):
            self.nvjpeg = NvjpegDecoder(device, pipeline_depth=2)
            # the scan check runs beside the decode (see _check_scans)
            self.check_stream = torch.cuda.Stream(device)
        # checks are queued from the staging and the executor thread; each one's copy into the
        # shared scan buffer and its kernel must stay together on the check stream
        self._check_lock = threading.Lock()
        # one nvJPEG call at a time: the staging thread decodes a batch ahead (``BatchExecutor.prepare``)
        # while the executor thread may decode a batch in groups
        self._decode_lock = threading.Lock()
        # The batch decode buffers, claimed in turn (``claim``) and used on the executor's stream.
        # nvJPEG's hardware engines write a buffer during the call, not in the stream's order, so a
        # batch is decoded into a buffer only once the batch before that read it is done with it:
        # its ``read_until`` gave the buffer back with the event after which it is no longer read.
        # With two, the staging thread decodes the next batch while the executor launches this one.
        self.buffers = (GrowOnlyBuffer(device), GrowOnlyBuffer(device))
        self.turns = Turns(len(self.buffers))
        # the decode buffers with the CPU's images appended (fallbacks, replacements), one per decode
        # buffer, and one for the batches decoded in groups (``group_buffer``, the executor thread's)
        self.grown_buffers = (GrowOnlyBuffer(device), GrowOnlyBuffer(device))
        self.grown_buffer = GrowOnlyBuffer(device)
        self.group_buffer = GrowOnlyBuffer(device)
        self.scan_buffer = GrowOnlyBuffer(device)  # the batch's bytes for the scan check, on check_stream

    def close(self) -> None:
        """Release the nvJPEG handles; idempotent."""
        nvjpeg = getattr(self, "nvjpeg", None)
        if nvjpeg is not None:
            nvjpeg.close()
            self.nvjpeg = None
        for buffer in (*getattr(self, "buffers", ()), *getattr(self, "grown_buffers", ()),
                       getattr(self, "scan_buffer", None), getattr(self, "grown_buffer", None),
                       getattr(self, "group_buffer", None)):
            if buffer is not None:
                buffer.release()

    def decode(self, batch: PackedBatch, pinned: torch.Tensor, stream: torch.cuda.Stream,
               buffer: torch.Tensor | None = None, numel: np.ndarray | None = None,
               turn: int | None = None) -> DecodedBatch:
        """Decode every sample of ``batch`` (bytes staged in ``pinned``) into one GPU buffer.

        Runs with ``stream`` current on the executor's device, into the front of the decode
        buffer ``turn`` (``claim``), or of ``buffer`` (a group of a batch decoded in groups:
        nvJPEG's engines then wait on the host for the work queued on ``stream`` before
        them, which may still read it). Every copy is ordered on ``stream``. May replace
        samples under on_error, which updates ``batch`` (indices, positions, paths, params,
        targets, skipped). ``numel``: ``decoded_sizes(batch.shapes)`` when the caller has it.
        """
        with self._decode_lock:
            return self._decode(batch, pinned, stream, buffer, numel, turn)

    def _decode(self, batch: PackedBatch, pinned: torch.Tensor, stream: torch.cuda.Stream,
                buffer: torch.Tensor | None, numel: np.ndarray | None, turn: int | None) -> DecodedBatch:
        counts = dict.fromkeys(ROUTE_COUNTERS, 0)
        raw = np.flatnonzero(batch.kinds == RAW)
        counts["decoded_cpu"] = len(raw)
        shapes = batch.shapes.copy()
        numel = decoded_sizes(shapes) if numel is None else numel
        # a group of a large batch comes with a buffer sized for the groups' own bytes
        out_offsets, total, span = decoded_layout(batch.kinds, batch.offsets, batch.lengths, numel,
                                                  room=None if buffer is None else buffer.numel())
        if turn is None:  # (``decoded_layout`` kept the group within ``buffer``)
            decoded = buffer[: max(total, 1)]
            stream_order = True
            grown = self.grown_buffer
        else:
            decoded = self.buffers[turn].take(total)
            stream_order = False
            grown = self.grown_buffers[turn]
        # decoded in the worker (formats or files nvJPEG does not take, already decoded samples)
        if span is not None:
            start, stop, at = span
            decoded[at: at + stop - start].copy_(pinned[start:stop], non_blocking=True)
        else:
            for i in raw:
                src = pinned[batch.offsets[i]: batch.offsets[i] + batch.lengths[i]]
                decoded[out_offsets[i]: out_offsets[i] + numel[i]].copy_(src, non_blocking=True)
        enc = np.nonzero(batch.kinds == ENCODED)[0]
        check_done = None
        if len(enc):
            decoded, check_done = self._decode_encoded(batch, pinned, enc, shapes, decoded, out_offsets, stream,
                                                       counts, grown, stream_order)
        return DecodedBatch(decoded, shapes, out_offsets, counts, check_done)

    def claim(self, stop: threading.Event | None = None) -> int:
        """The next decode buffer in turn, once the batch decoded there before gave it back
        (``read_until``) and the work that read it has ended (in a running pipeline: the kernels of
        the batch launched last). Raises ``Stopped`` when ``stop`` is set while it waits."""
        return self.turns.claim(stop)

    def read_until(self, event: torch.cuda.Event, turn: int) -> None:
        """Give decode buffer ``turn`` back: what reads it has ended when ``event`` has passed,
        and the next batch decoded there waits for that (``claim``)."""
        self.turns.give_back(turn, event.synchronize)

    def _decode_encoded(self, batch: PackedBatch, pinned: torch.Tensor, enc: np.ndarray, shapes: np.ndarray,
                        decoded: torch.Tensor, out_offsets: np.ndarray, stream: torch.cuda.Stream, counts: dict,
                        grown: GrowOnlyBuffer, stream_order: bool = True) -> tuple[torch.Tensor, Any]:
        """nvJPEG on the encoded samples, then the CPU for what it rejects (or the scan
        check flags), then the on_error policy: (the decoded batch, its scan check's event)."""
        from ..decode import decode_cpu

        check = batch.scan_check
        if check is None or not np.array_equal(check.samples, enc):
            check = self._check_scans(batch, pinned, enc)
        reasons: dict[int, str] = {}
        # One nvJPEG call per output format: planar Y/Cb/Cr (layout.PLANAR + S), or RGB for the
        # JPEGs the kernel has no planar reader for (``_classify._gpu_decodable_shape``).
        planar = shapes[enc, 2] >= layout.PLANAR
        for part in (enc[~planar], enc[planar]):
            if not len(part):
                continue
            hints = batch.hints[part] if batch.hints is not None else None
            if hints is not None and (hints < 0).any():
                hints = None
            chroma = chroma_shapes(shapes[part]) if shapes[part[0], 2] >= layout.PLANAR else None
            t, t_cpu = time.perf_counter(), time.thread_time()
            status = self.nvjpeg.decode_batch(pinned, batch.offsets[part], batch.lengths[part], shapes[part, :2],
                                              decoded, out_offsets[part], stream, hints=hints, chroma=chroma,
                                              stream_order=stream_order)
            counts["nvjpeg_s"] += time.perf_counter() - t
            counts["nvjpeg_cpu_s"] += time.thread_time() - t_cpu
            routed = self.nvjpeg.last_stats
            counts["decoded_hardware"] += routed.get("hardware", 0)
            counts["decoded_hybrid"] += routed.get("hybrid", 0)
            counts["decoded_one_by_one"] += routed.get("hardware_retried", 0)
            reasons.update((int(part[k]), self.nvjpeg.describe(st, k)) for k, st in enumerate(status) if st != 0)
        t = time.perf_counter()
        flagged = check.flagged()
        counts["scan_wait_s"] += time.perf_counter() - t
        for i in flagged:
            reasons.setdefault(int(i), "decoded, but its compressed data holds a marker no JPEG scan can hold")
        failed, relocated = [], []
        end = decoded.numel()
        for i in sorted(reasons):
            counts["decoded_cpu"] += 1
            try:
                img = self._decode_on_cpu(i, batch, pinned, shapes[i], decode_cpu, reasons[i])
            except SampleError as err:
                if self.fallback.on_error == "raise":
                    raise
                failed.append((i, without_frames(err)))  # not the frames: they hold the batch
                continue
            if shapes[i, 2] >= layout.PLANAR:
                # its slot holds planes, smaller than the RGB image: the image goes after the batch
                shapes[i, 2] = 3
                out_offsets[i] = end
                end += img.numel()
                relocated.append(img.reshape(-1))
            else:
                decoded[out_offsets[i]: out_offsets[i] + img.numel()].copy_(img.reshape(-1).pin_memory(),
                                                                             non_blocking=True)
        if relocated:
            decoded = _grown(decoded, relocated, grown)
        if failed:
            decoded = self._replace(batch, failed, decoded, shapes, out_offsets, grown)
        return decoded, check.done

    def scan_check(self, batch: PackedBatch, pinned: torch.Tensor) -> ScanCheck:
        """Start the scan-marker check of ``batch``'s JPEGs (bytes staged in ``pinned``).

        The staging thread starts it as soon as a batch is staged, so the executor
        thread, which decodes the batch after it, has less to do between nvJPEG's
        calls; ``decode`` uses it (``batch.scan_check``) or starts its own.
        """
        with torch.cuda.device(self.device):
            return self._check_scans(batch, pinned, np.flatnonzero(batch.kinds == ENCODED))

    def _check_scans(self, batch: PackedBatch, pinned: torch.Tensor, enc: np.ndarray) -> ScanCheck:
        """Start the scan-marker check of the batch's JPEGs ``enc`` on the check stream.

        The engines decode a JPEG with an overwritten scan without an error; the
        check copies the batch's bytes to the GPU and looks at every 0xFF there,
        while the decoder works. Waiting for it costs nothing: the batched hardware
        decode holds the host far longer. Each check has its own pinned flags, so
        checks of later batches may be queued before this one is read.
        """
        starts = batch.scan_starts
        if starts is None or not len(enc) or (starts[enc] < 0).all():
            return ScanCheck(enc, lambda: (), None)
        with self._check_lock, torch.cuda.stream(self.check_stream):
            on_gpu = self.scan_buffer.take(pinned.numel())
            on_gpu.copy_(pinned, non_blocking=True)
            flags = bad_scan_markers(on_gpu, batch.offsets[enc], batch.lengths[enc], starts[enc])
            host = torch.empty(len(enc), dtype=torch.bool, pin_memory=True)
            host.copy_(flags, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.check_stream)

        def flagged():
            done.synchronize()
            return enc[host.numpy().nonzero()[0]].tolist()

        return ScanCheck(enc, flagged, done)

    def _replace(self, batch: PackedBatch, failed: list[tuple[int, SampleError]], decoded: torch.Tensor,
                 shapes: np.ndarray, out_offsets: np.ndarray, grown: GrowOnlyBuffer) -> torch.Tensor:
        """Apply on_error to samples that failed on the GPU and on the CPU: their
        replacements are decoded on the CPU and appended to the decode buffer."""
        used: set[SampleTag] = set()
        extra, end = [], decoded.numel()
        params = batch.params.clone()
        slots = batch.slots.clone() if batch.slots is not None else None
        for i, err in failed:
            # a replacement whose parameters can be drawn (at its own position): drawn again below
            sub = self.fallback.replace(err, batch.spares, used, at=(batch.seed, batch.epoch, int(batch.positions[i])))
            batch.skipped.append(Skipped(err.index, err.path, str(err)))
            if sub.tag is not None:
                batch.indices[i], batch.positions[i], batch.paths[i] = sub.tag.index, sub.tag.position, sub.path
            shapes[i] = sub.shape
            out_offsets[i] = end
            end += sub.payload.numel()
            extra.append(sub.payload.reshape(-1))
            # the sample's own position (that of the spare when one replaced it), drawn as in the worker
            boxes = self.fallback.targets.draw_boxes([sub.target])
            drawn, trace = draw_params(self.plan, shapes[i: i + 1], batch.seed, batch.epoch, batch.positions[i: i + 1],
                                       boxes, trace=batch.trace is not None)
            if trace is not None:  # the executor maps the replacement's target with the others, from its own steps
                counts = ([len(b) for b in self.fallback.targets.draw_boxes(batch.targets)]
                          if batch.trace.zeroed else None)
                batch.trace = batch.trace.put(i, trace, counts)
            params[i] = drawn.params[0]
            if slots is not None:
                slots[i] = drawn.slots[0]
            if batch.has_target:
                target = sub.target
                batch.targets[i] = torch.as_tensor(target) if isinstance(batch.targets, torch.Tensor) else target
        batch.params, batch.slots = params, slots
        batch.spares = [t for t in batch.spares if t not in used]  # a later group must not reuse them
        return _grown(decoded, extra, grown)

    def _decode_on_cpu(self, i: int, batch: PackedBatch, pinned: torch.Tensor, shape: np.ndarray,
                       decode_cpu: Any, gpu_reason: str) -> torch.Tensor:
        """A sample nvJPEG rejected, decoded on the CPU (HWC RGB), or named in the error."""
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
        return img
