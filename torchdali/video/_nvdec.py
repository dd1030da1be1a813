"""A batch of clips decoded on the GPU with NVDEC, into one packed NV12 buffer.

NVDEC is driven through the driver's own video library (``_cuvid``: NVIDIA's parser and decoder, reached
with ctypes, on torch's primary CUDA context; the per-picture callbacks in C). A decoded picture is mapped
and its two planes copied into the batch's buffer by the driver's 2-D copy, in the layout the fused
kernel's NV12 source reads (``csrc_triton/layout.py``: Y plane, then the CbCr plane, no pitch). FFmpeg
(PyAV) reads the packets and decodes on the CPU routes; it is not on NVDEC's path.

Only 8-bit 4:2:0 streams with a matrix the NV12 source converts (``as_nv12``) go to NVDEC:
its frames of other formats are not 8-bit NV12 (P010, P016, 4:4:4 planes). The others (4:2:2,
4:4:4, 10 and 12 bits, BT.2020, ...) are decided up front from the stream's parameters and
decoded on the CPU per clip to RGB by swscale at their chroma resolution and bit depth
(``decode_clip_rgb``), their frames stored as interleaved RGB (``DecodedClips.rgb``); 8-bit 4:2:0
clips NVDEC does not take (a codec ``_cuvid`` does not feed, odd frame sizes, sizes outside the
engines' range, a decode that fails) are decoded on the CPU to NV12 (``decode_clip_nv12``). Both are
uploaded; ``DecodedClips`` counts the routes.

Several clips decode at once, one per decode thread, each thread with its own NVDEC session (its
decoders, reused from clip to clip: creating one takes milliseconds) and its own copy stream.

Clips of one video that share packets are decoded once (``plan_batch``, ``_merge.merge_clips``): a clip
is decoded from the keyframe at or before its first frame, so the clips of one video in a batch
(``clips="uniform"`` validation, several ``clips_per_video`` without shuffling) would each decode the
pictures from a shared keyframe again. Clips of one file and stream whose packet ranges overlap or are
adjacent in decode order become one clip, the union of their packets, whose output frames are theirs,
each written to its own place in the batch's buffer: ``_nvdec`` maps a picture to every frame that wants
it, ``_pad`` works frame by frame, and the CPU routes upload frame by frame (``frame_runs``). One decode
thread decodes such a clip. ``DecodedClips.decoded_frames`` counts its pictures once, so
``decoded_per_delivered_frame`` falls where clips merge; the routes (``nvdec``, ``cpu``) and
``ClipDecoder.reasons`` still count the batch's clips.

An H.264 or HEVC stream in MP4 form (length-prefixed NAL units, its parameter sets in an avcC or hvcC
record: mp4, mov, mkv) is fed to the parser in Annex-B, its parameter sets (``_annexb``) before the clip's
first packet (``_packets``; the session's C side re-frames each packet). Failures are counted per stream
(``stream_key``: codec, extradata, size), so that a corrupt video does not send the others of its size to
the CPU.

Fork safety: a loader's workers are forked from the process whose decode threads hold NVDEC sessions,
which the child can never use (CUDA does not survive a fork) and must not free. So the sessions are never
in a ``threading.local`` (the child's after-fork clean-up drops the other threads' locals, freeing what
they hold): each thread's lane lives in ``ClipDecoder._lanes``, and in a forked child every lane is kept
alive to the end (``_keep_lanes_in_child``), never freed.

Synchronisation: the maps and the copies out of them run on the thread's copy stream, after an event
recorded on the stream that reads the batch's buffer once the buffer is taken (so after the kernels that
read it last, where the loader reuses its buffers: ``_executor._video.ClipRunner.frames``); a mapped
surface goes back to its decoder only once the stream has done its copies, and every copy is done when
``decode`` returns.
"""
from __future__ import annotations

import os
import threading
import warnings
import weakref
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import torch
from csrc_triton import layout

from ._annexb import START_CODE, parameter_sets
from ._container import NV12_PIX_FMTS, ClipDecodeError, EncodedClip, as_nv12, decode_clip_nv12, decode_clip_rgb
from ._cuvid import Outputs, Packets, Session, refuse
from ._merge import merge_clips

__all__ = ["ClipDecoder", "DecodedClips", "PendingClips", "plan_batch"]

#: clips decoded at once by a ``ClipDecoder``: each thread has its own NVDEC session (ctypes lets go of
#: the interpreter in every driver call), so the engines have several clips in flight
DECODE_THREADS = 8
#: failures in a row after which a stream (``stream_key``: codec, extradata, size) is no longer tried on NVDEC
NVDEC_FAILURES = 3


class DecodedClips(NamedTuple):
    """Every frame of a batch of clips, back to back: frame ``k`` at ``data[offsets[k]:]``, clip 0's
    frames first. An NV12 frame (the fused kernel's NV12 source) has ``shapes[k] = (H, W,
    layout.nv12_code(...))``; a frame of a clip swscale converted (``rgb[k]``, see ``as_nv12``) is
    ``H x W x 3`` interleaved RGB, ``shapes[k] = (H, W, 3)``. ``nvdec`` and ``cpu``: clips decoded
    by each route (clips decoded merged counted one by one). ``decoded_frames``: the pictures decoded
    to make them, those before a clip's first frame (from its keyframe on) and the references after
    its last included, packets that merged clips share counted once. Each decode is fed all of a
    clip's packets, one picture each, then flushed: on the CPU routes every packet's picture is
    decoded; NVDEC skips H.264's non-reference pictures the clip does not want (``_cuvid``), and the count
    is the pictures it gave."""

    data: torch.Tensor
    offsets: np.ndarray
    shapes: np.ndarray
    nvdec: int
    cpu: int
    rgb: np.ndarray  # bool [frames]
    decoded_frames: int = 0


def _code(clip: EncodedClip) -> int:
    return layout.nv12_code(clip.color.conversion_matrix, clip.color.full_range)


class DecodeJob(NamedTuple):
    """One decode thread's work: ``clip`` (one of the batch's clips, or several merged by
    ``merge_clips``) decoded into the batch's buffer, its output frame ``f`` at ``at[f]``; ``clips``:
    how many of the batch's clips it holds (routes are counted per clip)."""

    clip: EncodedClip
    at: np.ndarray  # int64 [clip.num_frames]
    clips: int


class BatchPlan(NamedTuple):
    """Where a batch's frames go and what decodes them (``plan_batch``): frame ``k`` of the batch (clip 0's
    frames first) at ``offsets[k]`` of a buffer of ``size`` bytes, ``shapes`` and ``rgb`` as in
    ``DecodedClips``; ``jobs`` write every frame."""

    offsets: np.ndarray  # int64 [frames]
    shapes: np.ndarray  # int64 [frames, 3]
    rgb: np.ndarray  # bool [frames]
    size: int
    jobs: list[DecodeJob]

    @property
    def packets(self) -> int:
        """Packets the jobs feed their decoders, one picture each (NVDEC skips H.264's non-reference pictures
        a clip does not want)."""
        return sum(job.clip.num_packets for job in self.jobs)


def plan_batch(clips: Sequence[EncodedClip]) -> BatchPlan:
    """The buffer layout of ``clips``' frames, one after the other, and the decodes that fill it: clips
    that share packets merged (``merge_clips``), each job's ``at`` its clips' frame offsets in its order."""
    nv12 = [as_nv12(c) for c in clips]
    sizes = [layout.nv12_size(c.height, c.width) if n else c.height * c.width * 3
             for c, n in zip(clips, nv12) for _ in range(c.num_frames)]
    offsets = np.zeros(len(sizes), dtype=np.int64)
    if sizes:
        np.cumsum(sizes[:-1], out=offsets[1:])
    shapes = np.array([(c.height, c.width, _code(c) if n else 3)
                       for c, n in zip(clips, nv12) for _ in range(c.num_frames)], dtype=np.int64).reshape(-1, 3)
    rgb = np.array([not n for c, n in zip(clips, nv12) for _ in range(c.num_frames)], dtype=bool)
    starts = np.cumsum([0] + [c.num_frames for c in clips])
    jobs = [DecodeJob(m.clip, np.concatenate([offsets[starts[i]: starts[i + 1]] for i in m.members]), len(m.members))
            for m in merge_clips(clips)]
    return BatchPlan(offsets, shapes, rgb, int(sum(sizes)), jobs)


def frame_runs(at: np.ndarray, frame_bytes: int) -> list[tuple[int, int, int]]:
    """The copies ``(from, to, bytes)`` that put frames of ``frame_bytes`` each, back to back in a host
    buffer, at ``at`` in the batch's buffer: frames that follow each other in both share one copy (a
    clip decoded alone is one copy; a merged clip's frames lie in several places)."""
    runs: list[tuple[int, int, int]] = []
    for f, to in enumerate(at.tolist()):
        src = f * frame_bytes
        if runs and runs[-1][0] + runs[-1][2] == src and runs[-1][1] + runs[-1][2] == to:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + frame_bytes)
        else:
            runs.append((src, int(to), frame_bytes))
    return runs


def stream_key(clip: EncodedClip) -> tuple[str, bytes, int, int]:
    """``clip``'s stream configuration, which NVDEC's failures are counted against: codec, extradata, size."""
    return (clip.codec, bytes(clip.extradata), clip.width, clip.height)


@dataclass
class _Lane:
    """A decode thread's copy stream and NVDEC session (made on its first clip NVDEC decodes)."""

    copy_stream: torch.cuda.Stream
    done: torch.cuda.Event  # blocking: ``sync`` and the session's waits sleep on it
    session: Session | None = None

    def sync(self) -> None:
        """Wait for the copy stream's work, asleep: a stream's own synchronize spins a core for as long
        as it waits (torch's context schedules spin waits), and eight decode threads wait often."""
        self.done.record(self.copy_stream)
        self.done.synchronize()


def _packets(clip: EncodedClip) -> Packets:
    """``clip``'s packets as NVDEC's parser takes them (``_cuvid.Packets``): an H.264 or HEVC stream in MP4
    form re-framed to Annex-B, its parameter sets before the first packet (``_annexb``); one already in
    Annex-B with its parameter sets in its extradata has them before the first packet; others as they are."""
    extradata = bytes(clip.extradata)
    sets = parameter_sets(clip.codec, extradata)
    if sets is not None:
        return Packets(clip.data, clip.offsets, clip.pts, sets.annexb, sets.length_size)
    annexb = clip.codec in ("h264", "hevc") and extradata.startswith((START_CODE, START_CODE[1:]))
    return Packets(clip.data, clip.offsets, clip.pts, extradata if annexb else b"")


def _outputs(clip: EncodedClip, offsets: np.ndarray) -> Outputs:
    """Where each packet's picture goes (``_cuvid.Outputs``): output frame ``f`` (not padding) is the picture
    of the packet whose pts is ``clip.frame_pts[f]``, written at ``offsets[f]``."""
    packet = {int(p): j for j, p in enumerate(clip.pts.tolist())}
    frames = np.flatnonzero(clip.frame_indices >= 0)
    of = np.array([packet.get(int(clip.frame_pts[f]), -1) for f in frames.tolist()], dtype=np.int64)
    if (of < 0).any():
        raise ClipDecodeError(f"no packet has the pts {int(clip.frame_pts[frames[of < 0][0]])} of a wanted frame")
    order = np.argsort(of, kind="stable")
    start = np.zeros(clip.num_packets + 1, dtype=np.int64)
    np.cumsum(np.bincount(of, minlength=clip.num_packets), out=start[1:])
    return Outputs(start, np.asarray(offsets, dtype=np.int64)[frames[order]])


_LIVE: "weakref.WeakSet[ClipDecoder]" = weakref.WeakSet()
_KEPT_IN_CHILD: list[Any] = []


def _keep_lanes_in_child() -> None:
    """In a forked child: hold every lane for good, so that no NVDEC session of the parent's decode
    threads is ever freed here (see the module docstring)."""
    for decoder in list(_LIVE):
        _KEPT_IN_CHILD.append((decoder._lanes, decoder._pool))  # the pool's threads are the parent's
        decoder._lanes, decoder._pool = {}, None


os.register_at_fork(after_in_child=_keep_lanes_in_child)


class PendingClips:
    """A batch's clips being decoded (``ClipDecoder.start``): ``futures`` gives per decode whether NVDEC
    did it and the pictures it decoded, ``clips`` how many of the batch's clips each holds (1 each where
    not given)."""

    def __init__(self, data: torch.Tensor, offsets: np.ndarray, shapes: np.ndarray, futures: list[Future],
                 rgb: np.ndarray | None = None, clips: Sequence[int] | None = None) -> None:
        self.data, self.offsets, self.shapes, self.futures = data, offsets, shapes, futures
        self.rgb = np.zeros(len(offsets), dtype=bool) if rgb is None else rgb
        self.clips = [1] * len(futures) if clips is None else list(clips)

    def result(self) -> DecodedClips:
        """Every clip decoded: the buffer is written. A clip's failure is raised once every clip
        is done (none writes the buffer any more)."""
        wait(self.futures)
        done = [f.result() for f in self.futures]  # the first failure, if any
        nvdec = sum(n for (on_nvdec, _), n in zip(done, self.clips) if on_nvdec)
        return DecodedClips(self.data, self.offsets, self.shapes, nvdec, sum(self.clips) - nvdec, self.rgb,
                            sum(pictures for _, pictures in done))


class ClipDecoder:
    """Decodes batches of ``EncodedClip`` on ``device`` (one per executor), ``threads`` clips at
    once (clips of one video that share packets as one, ``plan_batch``), those of several batches
    among them (``start`` returns at once).

    Each decode thread keeps an NVDEC session (``_cuvid.Session``), whose decoders serve clip after clip
    of their format: creating one costs milliseconds.
    """

    def __init__(self, device: torch.device | str, threads: int | None = None) -> None:
        self.device = torch.device(device)
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.threads = max(1, int(DECODE_THREADS if threads is None else threads))
        self._pool: ThreadPoolExecutor | None = None
        self._lanes: dict[int, _Lane] = {}  # per decode thread (its ident): not a threading.local, see above
        self._lock = threading.Lock()
        # failures in a row per stream (stream_key): after NVDEC_FAILURES its clips go straight to the CPU
        # (a stream NVDEC cannot take), while one corrupt video does not send the others of its size there
        self._failures: dict[tuple, int] = {}
        self.reasons: dict[str, int] = {}  # why clips went to the CPU, counted
        self._warned = False  # NVDEC unavailable: said once
        _LIVE.add(self)

    def close(self) -> None:
        """Stop the decode threads and destroy their NVDEC decoders; idempotent."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._lock:
            lanes, self._lanes = self._lanes, {}
        sessions = [lane.session for lane in lanes.values() if lane.session is not None]
        if sessions:
            with torch.cuda.device(self.device):
                torch.cuda.current_stream(self.device).query()  # the device's context current here too
                for session in sessions:
                    session.close()

    def start(self, clips: Sequence[EncodedClip], stream: torch.cuda.Stream,
              take: Callable[[int], torch.Tensor] | None = None) -> "PendingClips":
        """Start decoding ``clips`` into one buffer, ``threads`` decodes at once (clips of one video that
        share packets merged into one, see ``plan_batch``); returns at once. The buffer is ``take(bytes)``
        (the loader's frame buffers), else allocated on ``stream``; what ``stream`` has queued before
        (the kernels that read the buffer last) ends before the decode writes it. Any thread may call it:
        the loader's staging thread starts a batch's decode while the executor still works on the batch
        before it."""
        plan = plan_batch(clips)
        if take is not None:
            data = take(plan.size)
        else:
            with torch.cuda.stream(stream):
                data = torch.empty(max(plan.size, 1), dtype=torch.uint8, device=self.device)
        allocated = torch.cuda.Event()
        allocated.record(stream)  # the copy streams write the buffer after its allocation and its last readers
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="torchdali-nvdec")
            pool = self._pool
        # on the pool's threads, even one clip: the lanes belong to threads that live as long as the
        # pool, and go with it (``close``)
        futures = [pool.submit(self._one, job, data, allocated) for job in plan.jobs]
        return PendingClips(data, plan.offsets, plan.shapes, futures, plan.rgb, [job.clips for job in plan.jobs])

    def decode(self, clips: Sequence[EncodedClip], stream: torch.cuda.Stream) -> DecodedClips:
        """``start(clips, stream).result()``: when this returns, the buffer is written, and ``stream``
        may read it."""
        return self.start(clips, stream).result()

    def _lane(self) -> _Lane:
        """This thread's copy stream and decoders."""
        lane = self._lanes.get(threading.get_ident())
        if lane is None:
            torch.cuda.set_device(self.device)
            lane = _Lane(torch.cuda.Stream(self.device), torch.cuda.Event(blocking=True))
            # a runtime call that needs the device's context makes it current on this thread, where the
            # driver's video calls and copies take it; the record also makes the event (torch makes it on
            # first use), whose handle the session's C side records and waits on
            lane.done.record(lane.copy_stream)
            with self._lock:
                self._lanes[threading.get_ident()] = lane
        return lane

    def _one(self, job: DecodeJob, data: torch.Tensor, allocated: torch.cuda.Event) -> tuple[bool, int]:
        """One job's clip into ``data`` at ``job.at``, on this thread's lane; whether NVDEC decoded it, and
        the pictures decoded (on the CPU routes one per packet). Every copy is done when this returns (the
        lane's copy stream is waited for)."""
        clip, at = job.clip, job.at
        lane = self._lane()
        lane.copy_stream.wait_event(allocated)
        if not as_nv12(clip):  # decided from the stream's parameters, as ``start`` sized its frames
            self._count(f"pixel format {clip.pix_fmt}" if clip.pix_fmt not in NV12_PIX_FMTS
                        else f"colour matrix {clip.color.conversion_matrix}", job.clips)
            self._upload(decode_clip_rgb(clip).reshape(-1), data, at, clip.height * clip.width * 3)
            return False, clip.num_packets
        pictures = self._nvdec(clip, data, at, job.clips)
        if pictures is None:
            self._on_cpu(clip, data, at)
        lane.sync()
        return (False, clip.num_packets) if pictures is None else (True, pictures)

    # -- routes ------------------------------------------------------------------------------------
    def _refuse(self, clip: EncodedClip) -> str | None:
        """Why ``clip`` does not go to NVDEC (None: it does); the codecs and sizes NVDEC takes are
        ``_cuvid.refuse``'s."""
        if clip.width % 2 or clip.height % 2:
            return "odd frame size"
        if self._failures.get(stream_key(clip), 0) >= NVDEC_FAILURES:
            return f"NVDEC failed {NVDEC_FAILURES} times in a row on this stream"
        try:
            return refuse(clip.codec, clip.width, clip.height)
        except (RuntimeError, ClipDecodeError) as e:
            why = f"NVDEC unavailable: {e}"
            if not self._warned:
                self._warned = True
                warnings.warn(f"{why}; video clips decode on the CPU (FFmpeg), far slower", RuntimeWarning,
                              stacklevel=2)
            return why

    def _count(self, why: str, clips: int = 1) -> None:
        with self._lock:
            self.reasons[why] = self.reasons.get(why, 0) + clips

    def _session(self) -> Session:
        """This thread's NVDEC session (``_cuvid``), made on its first clip."""
        lane = self._lane()
        if lane.session is None:
            lane.session = Session(lane.copy_stream.cuda_stream, lane.done.cuda_event)
        return lane.session

    def _nvdec(self, clip: EncodedClip, data: torch.Tensor, offsets: np.ndarray, clips: int = 1) -> int | None:
        """Decode ``clip`` with NVDEC into ``data`` at ``offsets``; the pictures decoded, or None where it
        cannot, so that the clip goes to the CPU (which writes every frame again). ``clips``: the batch's
        clips it holds, for ``reasons``. Pictures no other refers to whose packets the clip does not want
        (the B-frames between a clip's keyframe and its first frame, say) are not decoded (``_cuvid``)."""
        why = self._refuse(clip)
        if why is not None:
            self._count(why, clips)
            return None
        stream = stream_key(clip)
        try:
            pictures = self._session().decode(clip.codec, _packets(clip), clip.width, clip.height,
                                              _outputs(clip, offsets), data.data_ptr())
        except (ClipDecodeError, RuntimeError) as e:
            with self._lock:
                self._failures[stream] = self._failures.get(stream, 0) + 1
            self._count(f"NVDEC failed: {type(e).__name__}: {str(e)[:160]}", clips)
            return None
        self._pad(clip, data, offsets)
        if self._failures.get(stream):
            with self._lock:
                self._failures.pop(stream, None)
        return pictures

    def _pad(self, clip: EncodedClip, data: torch.Tensor, offsets: np.ndarray) -> None:
        """Padding frames (``pad_mode="constant"``) black: Y at the range's black level, CbCr 128."""
        H, W = clip.height, clip.width
        black = 0 if clip.color.full_range else 16
        with torch.cuda.stream(self._lane().copy_stream):
            for f in np.flatnonzero(clip.missing).tolist():
                off = int(offsets[f])
                data[off: off + H * W].fill_(black)
                data[off + H * W: off + layout.nv12_size(H, W)].fill_(128)

    def _on_cpu(self, clip: EncodedClip, data: torch.Tensor, offsets: np.ndarray) -> None:
        """``clip`` decoded by FFmpeg's software decoder, its NV12 planes uploaded into ``data``."""
        planes = decode_clip_nv12(clip)
        packed = np.concatenate([np.concatenate([planes.y[f].reshape(-1), planes.uv[f].reshape(-1)])
                                 for f in range(clip.num_frames)]) if clip.num_frames else np.zeros(0, np.uint8)
        self._upload(torch.from_numpy(packed), data, offsets, layout.nv12_size(clip.height, clip.width))

    def _upload(self, packed: torch.Tensor, data: torch.Tensor, offsets: np.ndarray, frame_bytes: int) -> None:
        """A clip's frames decoded on the host (uint8, ``frame_bytes`` each, back to back) into ``data``,
        frame ``f`` at ``offsets[f]`` (``frame_runs``), on this thread's copy stream; done when this returns."""
        host = packed.pin_memory()
        with torch.cuda.stream(self._lane().copy_stream):
            for src, to, size in frame_runs(offsets, frame_bytes):
                data[to: to + size].copy_(host[src: src + size], non_blocking=True)
        self._lane().sync()  # the pinned buffer is freed on return
