"""Video batches: one sample is one clip of ``F`` frames of a video, as a ``torchdali.video`` dataset
reads it (``read(index, u) -> (EncodedClip, target)``).

A clip's place in its video is chosen by its ``u`` (``_tags.clip_uniforms``: the counter-based
generator keyed by the sample's position in the epoch, stream ``_tags.CLIP_STREAM``), so clip
positions are seeded, the same for any ``num_workers``, resumed by ``state_dict`` and sharded like
the crops of images. The transform parameters are drawn once per clip from its frame size
(``_worker.draw_params``, keyed by the sample as an image's are) and repeated for each of its frames
(``frame_params``): every frame of a clip gets the same crop, flip and colour parameters, as
torchvision's transforms give every frame of a ``[T, C, H, W]`` video.

* Worker (``PrepareClips``, the inner DataLoader's ``collate_fn`` for a video dataset): reads each
  clip; a clip that cannot be read (or, on the CPU path, decoded) goes to on_error, whose spares
  are read with their own ``u`` (``_replace.replace``). CPU path: the clips are decoded by FFmpeg,
  8-bit 4:2:0 ones (``as_nv12``) to NV12 (``decode_clip_nv12``), each frame converted by
  ``reference.nv12_to_rgb`` (the conversion of the kernel's NV12 source), the others (4:2:2, 4:4:4,
  10 bits, a colour matrix other than BT.601 and BT.709) by swscale to RGB (``decode_clip_rgb``),
  and the reference kernel runs on the batch's ``B * F`` frames. GPU path: the clips
  travel pickled in the ``PackedBatch`` (``clips``: a clip's packets are a few kilobytes to a few
  hundred), never through the staging ring.
* Executor (``ClipRunner``, the video branch of ``BatchExecutor.process``): ``ClipDecoder``
  (``torchdali/video/_nvdec.py``: NVDEC, or FFmpeg per clip where NVDEC cannot) decodes every frame
  of the batch into one buffer of NV12 frames (one of two, ``ClipRunner.frames``: the staging thread starts
  a batch's decode once the kernel of the batch before the last is queued), and the fused kernel reads them through its NV12
  source (``csrc_triton/layout.py``). Clips that ``as_nv12`` sends to swscale come as RGB frames
  (the CPU path's conversion); a batch holding any is read through the interleaved source, its
  NV12 frames converted first by ``reference.nv12_to_rgb`` (``kernel_frames``). A clip that does
  not decode goes to on_error there.

The loop gets ``[B, F, C, H, W]`` (the loader's ``video_layout="BFCHW"``, the default) or
``[B, C, F, H, W]`` (``"BCFHW"``, what torchvision's video models take: a permuted view of the same
frames), so the pipeline must fix the output size (``check_video_pipeline``), and the targets
collated as for images (labels). Batch transforms and a ``collate_fn`` run as for images, at the same
stages (``_deliver.py``): the CPU path's worker calls ``PrepareBatch._deliver``, the GPU path's clips
pass ``BatchExecutor.process`` and the loop's iterator like images.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import wait
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch
from csrc_triton import layout
from csrc_triton.reference import nv12_planes, nv12_to_rgb

from ..errors import SampleError
from ..transforms._plan import BatchParams, Compose, Plan, run_reference
from ..transforms._target_plan import has_geometry
from ..video._container import EncodedClip, as_nv12, decode_clip_nv12, decode_clip_rgb
from ._classify import LoadedSample, split_item
from ._decode import GrowOnlyBuffer
from ._launch import KernelEvents, KernelLauncher
from ._replace import Replacement, replace
from ._staging import Turns
from ._tags import SampleTag, TaggedSample, batch_head, clip_uniforms
from ._wire import RAW, PackedBatch, Skipped
from ._worker import PrepareBatch, draw_params

#: batches of decoded frames a loader holds at once (``ClipRunner.frames``): the one whose kernel is being queued
#: and the next one, decoding. A third let NVDEC start one more batch ahead, for a batch of frames more on the
#: device (177 MB of NV12 for 8 clips of 16 frames at 720p; RESULTS.md, 2026-11-29 tenth).
FRAME_BUFFERS = 2

#: how the loop gets a batch of clips (the loader's ``video_layout``): ``[B, F, C, H, W]`` or
#: ``[B, C, F, H, W]`` (torchvision's video models)
VIDEO_LAYOUTS = ("BFCHW", "BCFHW")


def check_video_pipeline(plan: Plan, video_layout: str) -> None:
    """Raise ValueError for a loader of clips that cannot make one ``[B, F, C, H, W]`` tensor per
    batch: an unknown ``video_layout``, a pipeline without a fixed output size, a step that draws
    from boxes."""
    if video_layout not in VIDEO_LAYOUTS:
        raise ValueError(f"video_layout must be one of {VIDEO_LAYOUTS}, got {video_layout!r}")
    if plan.out_size is None or plan.batch_images is not None:
        why = "BatchImages pads each batch to its own size" if plan.batch_images is not None \
            else "no step fixes it, so each frame would keep its video's size"
        raise ValueError(
            f"a batch of video clips is one [B, F, C, H, W] tensor, so the pipeline must fix the output size, and "
            f"{why}: end it with a fixed-size step (CenterCrop(size), RandomCrop(size), RandomResizedCrop(size) "
            f"or Resize((h, w))). Pipeline: {Compose(list(plan.transforms))!r}")
    if plan.draws_from_boxes:
        step = next(t for t in plan.transforms if t.draws_from_boxes)
        raise ValueError(f"{step!r} draws from each sample's BoundingBoxes, which video clips do not have")


def frame_params(drawn: BatchParams, frames: np.ndarray) -> BatchParams:
    """``drawn`` (one row per clip) repeated for each clip's ``frames[b]`` frames, clip by clip. By numpy:
    torch's ``repeat_interleave`` on the CPU runs a parallel loop even for a few rows, waking the
    process's intra-op threads, which then spin for a while after each batch (on 16 cores they took a
    third of the loader process's CPU; RESULTS.md, 2026-11-29 ninth)."""
    repeats = np.asarray(frames, dtype=np.int64)
    return BatchParams(torch.from_numpy(np.repeat(drawn.params.numpy(), repeats, axis=0)),
                       torch.from_numpy(np.repeat(drawn.slots.numpy(), repeats, axis=0)), drawn.batch)


def clip_batch(frames: torch.Tensor, clips: int, video_layout: str) -> torch.Tensor:
    """The ``[B * F, C, H, W]`` output frames of ``clips`` clips as the loop gets them
    (``VIDEO_LAYOUTS``); views, nothing copied (a channels-last batch is ``channels_last_3d`` in
    ``"BCFHW"``)."""
    out = frames.unflatten(0, (clips, frames.shape[0] // clips))
    return out.permute(0, 2, 1, 3, 4) if video_layout == "BCFHW" else out


def frame_counts(clips: Sequence[Any], indices: np.ndarray, paths: Sequence[str | None]) -> np.ndarray:
    """int64 ``[B]``: each clip's frame count (``EncodedClip``, or decoded ``[F, H, W, 3]``
    frames); ValueError naming two samples when they differ (the batch is one tensor)."""
    counts = np.array([c.num_frames if isinstance(c, EncodedClip) else int(c.shape[0]) for c in clips],
                      dtype=np.int64)
    if len(counts) and (counts != counts[0]).any():
        j = int(np.flatnonzero(counts != counts[0])[0])
        raise ValueError(f"the clips of a batch must have one frame count, but sample {int(indices[0])} "
                         f"({paths[0]}) has {int(counts[0])} frames and sample {int(indices[j])} ({paths[j]}) "
                         f"{int(counts[j])}")
    return counts


def decode_frames(clip: EncodedClip) -> torch.Tensor:
    """``clip`` decoded on the CPU as uint8 RGB frames ``[F, H, W, 3]``, as the GPU path converts it:
    8-bit 4:2:0 (``as_nv12``) through its NV12 planes and ``reference.nv12_to_rgb`` (the NV12 source's
    conversion), other formats and matrices by swscale (``decode_clip_rgb``)."""
    if not as_nv12(clip):
        return decode_clip_rgb(clip)
    planes = decode_clip_nv12(clip)
    y, uv = torch.from_numpy(planes.y), torch.from_numpy(planes.uv)
    matrix, full = clip.color.conversion_matrix, clip.color.full_range
    return torch.stack([nv12_to_rgb(y[f], uv[f], matrix, full) for f in range(len(y))]) if len(y) \
        else torch.zeros((0, clip.height, clip.width, 3), dtype=torch.uint8)


class PrepareClips(PrepareBatch):
    """``PrepareBatch`` for a video dataset: one sample is one clip (see the module docstring).

    ``mode="cpu"``: the batch leaves the worker finished (``images``, laid out as
    ``video_layout``). ``mode="gpu"``: it leaves with its ``EncodedClip``s (``clips``) and one
    parameter row per clip, for ``ClipRunner``.
    """

    def __init__(self, plan: Plan, mode: str, video_layout: str = "BFCHW", **kwargs: Any) -> None:
        super().__init__(plan, mode, **kwargs)
        self.video_layout = video_layout

    def read(self, index: int, u: float, path: str | None) -> Any:
        """``dataset.read(index, u)``; SampleError naming the sample where it fails."""
        try:
            return self.dataset.read(index, u)
        except (SampleError, ImportError):
            raise
        except Exception as e:  # a dataset of the user's
            raise SampleError.for_sample(index, path, "cannot read clip", f"{type(e).__name__}: {e}") from None

    def read_spare(self, tag: SampleTag) -> Any:
        """A spare's item: its clip placed by its own ``u``."""
        u = float(clip_uniforms(tag.seed, tag.epoch, [tag.position])[0])
        return self.dataset.read(tag.index, u)

    def load(self, data: Any, idx: int, path: str | None) -> LoadedSample:
        """One clip as it is packed: on the GPU path the ``EncodedClip`` itself, shape ``(H, W, NV12
        code)`` (``(H, W, 3)`` for a clip swscale converts, see ``as_nv12``); on the CPU path its frames
        decoded (``[F, H, W, 3]``), shape ``(H, W, 3)``. SampleError naming the sample where it is no
        clip or does not decode."""
        if not isinstance(data, EncodedClip):
            raise SampleError.for_sample(idx, path, "unsupported sample", f"a video dataset's items must be "
                                         f"(EncodedClip, target), got {type(data).__name__}")
        if self.mode == "gpu":
            code = layout.nv12_code(data.color.conversion_matrix, data.color.full_range) if as_nv12(data) else 3
            return LoadedSample(RAW, data, (data.height, data.width, code), -1, -1)
        try:
            frames = decode_frames(data)
        except ImportError:
            raise
        except Exception as e:  # ClipDecodeError, and whatever FFmpeg raises besides
            raise SampleError.for_sample(idx, path, "cannot decode clip", f"{type(e).__name__}: {e}") from None
        return LoadedSample(RAW, frames, (data.height, data.width, 3), -1, -1)

    def check_target(self, target: Any, image_hw: Any, index: int, path: str | None) -> bool:
        """Refuse a target holding boxes or masks (ValueError): a clip's targets are not mapped."""
        if has_geometry(target):
            raise ValueError(f"sample {index} ({path}): its target holds BoundingBoxes or a Mask; targets of video "
                             f"clips are not moved with the frames, so they must be labels (or anything without "
                             f"boxes and masks)")
        return False

    def replace(self, err: SampleError, spares: list[SampleTag], used: set[SampleTag]) -> Replacement:
        return replace(err, spares, used, self.on_error, self.dataset, self.load, self.check_target,
                       self.read_spare)

    def __call__(self, samples: Sequence[TaggedSample]) -> PackedBatch:
        t0 = time.perf_counter()
        samples, spares, seed, epoch, indices, positions, paths = batch_head(samples)
        n = len(samples)
        us = clip_uniforms(seed, epoch, positions)
        payloads: list[Any] = []
        targets: list[Any] = []
        has_target = True
        shapes = np.zeros((n, 3), dtype=np.int64)
        skipped: list[Skipped] = []
        used: set[SampleTag] = set()
        for i in range(n):
            idx = int(indices[i])
            try:
                data, target, has = split_item(self.read(idx, float(us[i]), paths[i]))
                loaded = self.load(data, idx, paths[i])
                if has:
                    self.check_target(target, loaded.shape[:2], idx, paths[i])
            except SampleError as err:
                if self.on_error == "raise":
                    raise
                sub = self.replace(err, spares, used)
                skipped.append(Skipped(err.index, err.path, str(err)))
                if sub.tag is not None:
                    indices[i], positions[i], paths[i] = sub.tag.index, sub.tag.position, sub.path
                target, has = sub.target, sub.has_target
                loaded = LoadedSample(sub.kind, sub.payload, sub.shape, -1, -1)
            payloads.append(loaded.payload)
            shapes[i] = loaded.shape
            targets.append(target)
            has_target = has_target and has
        frames = frame_counts(payloads, indices, paths)
        drawn, _ = draw_params(self.plan, shapes, seed, epoch, positions)
        batch = PackedBatch(seed=seed, epoch=epoch, indices=indices, positions=positions, paths=paths,
                            params=drawn.params, targets=self.delivery.collate_targets(targets) if has_target else None,
                            has_target=has_target, first_position=samples[0].tag.position,
                            spares=[t for t in spares if t not in used], skipped=skipped)
        batch.set_params(drawn)
        batch.shapes = shapes
        if self.mode == "cpu":
            images = run_reference(self.plan, [f for clip in payloads for f in clip.unbind(0)],
                                   frame_params(drawn, frames), channels_last=self.channels_last)
            batch.images = clip_batch(images, n, self.video_layout)
            self._deliver(batch)
        else:
            batch.clips = payloads
            batch.seq = samples[0].tag.seq
            batch.blob = torch.empty(0, dtype=torch.uint8)  # nothing to stage: the clips travel in ``clips``
        batch.seconds = time.perf_counter() - t0
        return batch


class DecodedFrames(NamedTuple):
    """A batch's clips decoded for the kernel (``KernelLauncher.launch``), every frame back to back in
    one buffer: NV12 (``shapes`` rows ``(H, W, NV12 code)``) or interleaved RGB (``(H, W, 3)``)."""

    buffer: torch.Tensor
    shapes: np.ndarray
    offsets: np.ndarray
    source: int = layout.SOURCE_NV12


def kernel_frames(decoded: Any) -> DecodedFrames:
    """The frames of ``decoded`` (``_nvdec.DecodedClips``) as the kernel reads them: as they are when
    every frame is NV12; where some are RGB (clips swscale converted), every frame as interleaved RGB,
    the NV12 ones converted by ``reference.nv12_to_rgb``, which the NV12 source equals bit for bit, so
    that a clip comes out the same whatever clips share its batch. Queued on the current stream."""
    rgb = np.asarray(decoded.rgb, dtype=bool)
    if not rgb.any():
        return DecodedFrames(decoded.data, decoded.shapes, decoded.offsets)
    shapes = np.array(decoded.shapes, dtype=np.int64).reshape(-1, 3)
    sizes = shapes[:, 0] * shapes[:, 1] * 3
    offsets = np.zeros(len(shapes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    buffer = torch.empty(max(int(sizes.sum()), 1), dtype=torch.uint8, device=decoded.data.device)
    for k, (H, W, code) in enumerate(shapes.tolist()):
        src, dst = int(decoded.offsets[k]), int(offsets[k])
        out = buffer[dst: dst + H * W * 3]
        if rgb[k]:
            out.copy_(decoded.data[src: src + H * W * 3])
        else:
            y, uv = nv12_planes(decoded.data, src, H, W)
            out.view(H, W, 3).copy_(nv12_to_rgb(y, uv, *layout.nv12_format(code)))
    shapes[:, 2] = 3
    return DecodedFrames(buffer, shapes, offsets, layout.SOURCE_INTERLEAVED)


class StartedClips(NamedTuple):
    """A batch's decode as ``ClipRunner.start`` began it: ``pending`` (``_nvdec.PendingClips``) writes
    frame buffer ``turn``, which ``ClipRunner.process`` (or ``drop``) gives back."""

    pending: Any
    turn: int


class ClipRunner:
    """The GPU executor's video branch (``BatchExecutor.process``): a batch's clips decoded by
    ``ClipDecoder`` (built on first use, one per executor), the kernel over their frames with each
    clip's parameters repeated, and on_error for a clip that does not decode (``fallback``:
    the loader's ``PrepareClips`` in GPU mode, which reads the spares)."""

    def __init__(self, plan: Plan, device: torch.device, launcher: KernelLauncher, fallback: PrepareClips,
                 video_layout: str) -> None:
        self.plan = plan
        self.device = device
        self.launcher = launcher
        self.fallback = fallback
        self.video_layout = video_layout
        self._decoder: Any = None
        # the buffers the batches' frames are decoded into, taken in turn (``start``) and given back once the
        # kernels that read one are queued (``process``), which the next decode's copies wait for: the staging
        # thread starts a batch's decode only once one is free. Grown to the largest batch, without headroom.
        self.frames = [GrowOnlyBuffer(device, headroom=1.0, align=1) for _ in range(FRAME_BUFFERS)]
        self.turns = Turns(FRAME_BUFFERS)

    @property
    def decoder(self) -> Any:
        if self._decoder is None:
            from ..video._nvdec import ClipDecoder

            self._decoder = ClipDecoder(self.device)
        return self._decoder

    def close(self) -> None:
        """Release the decoders and the frame buffers; idempotent."""
        if self._decoder is not None:
            self._decoder.close()
            self._decoder = None
        for buffer in self.frames:
            buffer.release()

    def start(self, batch: PackedBatch, stream: torch.cuda.Stream, stop: threading.Event | None = None) -> Any:
        """Start decoding ``batch``'s clips (``ClipDecoder.start``; the loader's staging thread, so
        that NVDEC works on the next batch while the executor finishes this one) into the next of
        ``frames`` once it is free (raises ``Stopped`` when ``stop`` is set while it waits): a
        ``StartedClips``, or None where it cannot start (``process`` then decodes, and raises what fails)."""
        turn = self.turns.claim(stop)
        buffer = self.frames[turn]

        def take(numel: int) -> torch.Tensor:
            with torch.cuda.stream(stream):  # grown on the executor's stream, which reads it
                return buffer.take(numel)

        try:
            return StartedClips(self.decoder.start(batch.clips, stream, take), turn)
        except Exception:
            self.turns.give_back(turn)
            return None

    def drop(self, started: StartedClips) -> None:
        """Give up a batch ``start`` began (a stop): its buffer is claimed again once its decode has ended."""
        self.turns.give_back(started.turn, lambda: wait(started.pending.futures))

    def process(self, batch: PackedBatch, stream: torch.cuda.Stream,
                started: StartedClips | None = None) -> tuple[torch.Tensor, KernelEvents, dict, float]:
        """(the batch's images as ``video_layout`` lays them out, the kernel's timing events, the
        decode counters for ``EpochStats``, host seconds waiting for the decode), queued on ``stream``
        (current); ``started``: its decode as ``start`` began it, whose buffer goes back once the kernel is
        queued."""
        try:
            t0 = time.perf_counter()
            decoded = self._decode(batch, stream, started.pending if started is not None else None)
            decode_s = time.perf_counter() - t0
            frames = frame_counts(batch.clips, batch.indices, batch.paths)
            images, events, _ = self.launcher.launch(kernel_frames(decoded), frame_params(batch.batch_params, frames),
                                                     stream)
        finally:
            if started is not None:
                self.turns.give_back(started.turn)
        counts = {"decoded_nvdec": int(decoded.nvdec), "decoded_video_cpu": int(decoded.cpu),
                  "decoded_video_frames": int(decoded.decoded_frames),
                  "delivered_video_frames": int(frames.sum())}
        return clip_batch(images, len(batch.clips), self.video_layout), events, counts, decode_s

    def _decode(self, batch: PackedBatch, stream: torch.cuda.Stream, pending: Any = None) -> Any:
        """The batch's clips decoded (``pending``'s result, else ``ClipDecoder.decode``). Where it
        fails, each clip is decoded alone to find those that fail; they go to on_error (replaced in
        ``batch``, or raised as SampleError naming them), and the batch is decoded again."""
        used: set[SampleTag] = set()
        while True:
            try:
                return pending.result() if pending is not None else self.decoder.decode(batch.clips, stream)
            except ImportError:
                raise
            except Exception as e:
                error = e
            pending = None
            failed = self._failing(batch, stream)
            if not failed:  # no clip fails alone: the batch's failure is not a sample's
                raise error
            for i, err in failed:
                if self.fallback.on_error == "raise":
                    raise err
                self._replace(batch, i, err, used)

    def _failing(self, batch: PackedBatch, stream: torch.cuda.Stream) -> list[tuple[int, SampleError]]:
        failed = []
        for i, clip in enumerate(batch.clips):
            try:
                self.decoder.decode([clip], stream)
            except ImportError:
                raise
            except Exception as e:
                failed.append((i, SampleError.for_sample(int(batch.indices[i]), batch.paths[i], "cannot decode clip",
                                                         f"{type(e).__name__}: {e}")))
        return failed

    def _replace(self, batch: PackedBatch, i: int, err: SampleError, used: set[SampleTag]) -> None:
        """Clip ``i`` of ``batch`` replaced under on_error, its parameters drawn as in the worker."""
        sub = self.fallback.replace(err, batch.spares, used)
        batch.skipped.append(Skipped(err.index, err.path, str(err)))
        if sub.tag is not None:
            batch.indices[i], batch.positions[i], batch.paths[i] = sub.tag.index, sub.tag.position, sub.path
        batch.clips[i] = sub.payload
        batch.shapes[i] = sub.shape
        drawn, _ = draw_params(self.plan, batch.shapes[i: i + 1], batch.seed, batch.epoch, batch.positions[i: i + 1])
        params = batch.params.clone()
        params[i] = drawn.params[0]
        batch.params = params
        if batch.slots is not None:
            slots = batch.slots.clone()
            slots[i] = drawn.slots[0]
            batch.slots = slots
        if batch.has_target:
            batch.targets[i] = torch.as_tensor(sub.target) if isinstance(batch.targets, torch.Tensor) else sub.target
        batch.spares = [t for t in batch.spares if t not in used]
