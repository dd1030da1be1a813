"""A batch of clips decoded on the GPU with NVDEC, into one packed NV12 buffer.

NVDEC is reached through FFmpeg's ``cuda`` hardware acceleration in PyAV's wheel
(``av.codec.hwaccel.HWAccel``, frames kept on the device, FFmpeg on torch's primary
CUDA context), so no system FFmpeg and no binding of our own is needed. A decoded
frame's planes (pitched device memory that belongs to FFmpeg's frame pool, read by the
address and pitch PyAV gives) are copied into the batch's buffer by the driver's 2-D
copy (``_copy2d``), in the layout the fused kernel's NV12 source reads
(``csrc_triton/layout.py``: Y plane, then the CbCr plane, no pitch).

Only 8-bit 4:2:0 streams with a matrix the NV12 source converts (``as_nv12``) go to NVDEC:
its frames of other formats are not 8-bit NV12 (P010, P016, 4:4:4 planes). The others (4:2:2,
4:4:4, 10 and 12 bits, BT.2020, ...) are decided up front from the stream's parameters and
decoded on the CPU per clip to RGB by swscale at their chroma resolution and bit depth
(``decode_clip_rgb``), their frames stored as interleaved RGB (``DecodedClips.rgb``); 8-bit 4:2:0
clips NVDEC does not take (a codec it lacks, odd frame sizes, a decoder that fails) are decoded
on the CPU to NV12 (``decode_clip_nv12``). Both are uploaded; ``DecodedClips`` counts the routes.

Several clips decode at once, one per decode thread, each thread with its own FFmpeg
decoders and its own copy stream (one NVDEC session decodes one picture at a time).

Clips of one video that share packets are decoded once (``plan_batch``, ``_merge.merge_clips``): a clip
is decoded from the keyframe at or before its first frame, so the clips of one video in a batch
(``clips="uniform"`` validation, several ``clips_per_video`` without shuffling) would each decode the
pictures from a shared keyframe again. Clips of one file and stream whose packet ranges overlap or are
adjacent in decode order become one clip, the union of their packets, whose output frames are theirs,
each written to its own place in the batch's buffer: ``_nvdec`` maps a picture to every frame that wants
it, ``_copy`` and ``_pad`` work frame by frame, and the CPU routes upload frame by frame (``frame_runs``).
One decode thread decodes such a clip. ``DecodedClips.decoded_frames`` counts its pictures once, so
``decoded_per_delivered_frame`` falls where clips merge; the routes (``nvdec``, ``cpu``) and
``ClipDecoder.reasons`` still count the batch's clips.

Decoders are reused from clip to clip (flushed between them): creating one costs milliseconds of CPU. Which
clips share one is ``decoder_key``'s. An H.264 or HEVC stream in MP4 form (length-prefixed NAL units, its
parameter sets in an avcC or hvcC record: mp4, mov, mkv) is fed Annex-B by ``_annexb``, its parameter sets
before the clip's first packet, to a decoder created without extradata: such streams of a codec, size and
pixel format share one, although nearly every video's record differs (its SPS's timing fields, say). FFmpeg
takes the in-band parameter sets and keeps its hardware decoder while the size and format stay the same;
H.264's then keeps the surfaces it counted from the first stream's SPS, so H.264 streams share a decoder
only where their SPSs count the same pictures (``ParameterSets.dpb``: reference frames, reorder depth).
Other streams (already Annex-B, other codecs, records that do not parse) are decoded as they are, one
decoder per codec, extradata and size. Failures are counted per stream (``stream_key``: codec, extradata,
size), so that a corrupt video does not send the others of its size to the CPU.

Fork safety: a loader's workers are forked from the process whose decode threads hold FFmpeg
decoders. In the child those threads do not exist, and freeing a decoder there waits for its
FFmpeg threads for ever (``avcodec_free_context`` joins them). So the decoders are never in a
``threading.local`` (the child's after-fork clean-up drops the other threads' locals, freeing what
they hold): each thread's lane lives in ``ClipDecoder._lanes``, and in a forked child every lane
is kept alive to the end (``_keep_lanes_in_child``), never freed.

Synchronisation: FFmpeg copies each decoded surface into its frame on the legacy
default stream; the copies into the batch's buffer run on the thread's copy stream
after an event recorded there, and a frame goes back to FFmpeg's pool only once they
are done (the pool is small: frames held longer would starve the decoder). Every copy
is done when ``decode`` returns.
"""
from __future__ import annotations

import os
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Container, NamedTuple, Sequence

import numpy as np
import torch
from csrc_triton import layout

from ._annexb import parameter_sets, to_annexb
from ._container import (
    NV12_PIX_FMTS, ClipDecodeError, EncodedClip, VideoInfo, _av, as_nv12, decode_clip_nv12, decode_clip_rgb,
)
from ._copy2d import copy_2d
from ._merge import merge_clips

__all__ = ["ClipDecoder", "DecodedClips", "PendingClips", "plan_batch", "skip_frame"]

#: clips decoded at once by a ``ClipDecoder``: each thread feeds its own FFmpeg decoders (PyAV lets
#: go of the interpreter while FFmpeg decodes), so NVDEC has several sessions in flight
DECODE_THREADS = 8
#: FFmpeg decoders a decode thread keeps, least recently used dropped: one per ``decoder_key`` (for MP4's
#: H.264 and HEVC a codec, size and pixel format, and H.264's reference counts; for other streams each
#: extradata makes its own), each holding its NVDEC surfaces
_DECODERS_PER_THREAD = 4
#: failures in a row after which a stream (``stream_key``: codec, extradata, size) is no longer tried on NVDEC
NVDEC_FAILURES = 3
#: FFmpeg codec names NVDEC decodes (where the engine supports the profile)
NVDEC_CODECS = frozenset({"h264", "hevc", "vp9", "vp8", "av1", "mpeg2video", "mpeg4", "vc1"})
#: device frames a decoder's pool holds beyond its reference frames: decoded frames are held until
#: this many wait, then copied out together (NVDEC takes at most 32 surfaces, references included)
_HELD_FRAMES = 8


class DecodedClips(NamedTuple):
    """Every frame of a batch of clips, back to back: frame ``k`` at ``data[offsets[k]:]``, clip 0's
    frames first. An NV12 frame (the fused kernel's NV12 source) has ``shapes[k] = (H, W,
    layout.nv12_code(...))``; a frame of a clip swscale converted (``rgb[k]``, see ``as_nv12``) is
    ``H x W x 3`` interleaved RGB, ``shapes[k] = (H, W, 3)``. ``nvdec`` and ``cpu``: clips decoded
    by each route (clips decoded merged counted one by one). ``decoded_frames``: the pictures decoded
    to make them, those before a clip's first frame (from its keyframe on) and the references after
    its last included, packets that merged clips share counted once. Each decode is fed all of a
    clip's packets, one picture each, then flushed: on the CPU routes every packet's picture is
    decoded; NVDEC's decoder skips the non-reference pictures the clip does not want, and the count
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
        """Packets the jobs feed their decoders, one picture each (NVDEC skips the non-reference pictures
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


def skip_frame(pts: int, wanted: Container[int]) -> str:
    """FFmpeg's ``skip_frame`` for a clip's packet of ``pts``: ``"NONREF"`` where the clip wants no frame of
    it (the decoder then skips its picture unless other pictures refer to it), else ``"DEFAULT"``. A packet
    without a timestamp is decoded."""
    return "DEFAULT" if pts in wanted or pts == VideoInfo.NO_TIMESTAMP else "NONREF"


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


class DecoderKey(NamedTuple):
    """What an FFmpeg decoder is created for; the clips of equal keys share a decode thread's decoder."""

    codec: str
    extradata: bytes  # given to the decoder; empty for a stream fed Annex-B with its parameter sets in band
    width: int
    height: int
    pix_fmt: str
    dpb: tuple  # what the decoder's surfaces are counted from (``ParameterSets.dpb``); () where extradata is given


def decoder_key(clip: EncodedClip) -> DecoderKey:
    """The decoder ``clip`` is decoded with: for an H.264 or HEVC stream in MP4 form (fed Annex-B, see the
    module docstring) its codec, size, pixel format and (H.264) the pictures its SPS keeps; for other
    streams their extradata instead of the last."""
    sets = parameter_sets(clip.codec, bytes(clip.extradata))
    if sets is None:
        return DecoderKey(clip.codec, bytes(clip.extradata), clip.width, clip.height, clip.pix_fmt, ())
    return DecoderKey(clip.codec, b"", clip.width, clip.height, clip.pix_fmt, sets.dpb)


def stream_key(clip: EncodedClip) -> tuple[str, bytes, int, int]:
    """``clip``'s stream configuration, which NVDEC's failures are counted against: codec, extradata, size."""
    return (clip.codec, bytes(clip.extradata), clip.width, clip.height)


@dataclass
class _Lane:
    """A decode thread's copy stream and FFmpeg decoders (least recently used first)."""

    copy_stream: torch.cuda.Stream
    decoders: dict[DecoderKey, Any] = field(default_factory=dict)


_LIVE: "weakref.WeakSet[ClipDecoder]" = weakref.WeakSet()
_KEPT_IN_CHILD: list[Any] = []


def _keep_lanes_in_child() -> None:
    """In a forked child: hold every lane for good, so that no FFmpeg decoder of the parent's
    decode threads is ever freed here (see the module docstring)."""
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

    Each decode thread keeps FFmpeg decoders with NVDEC for its last ``_DECODERS_PER_THREAD`` decoder
    keys (``decoder_key``), flushed between clips: creating one costs milliseconds.
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
        _LIVE.add(self)

    def close(self) -> None:
        """Stop the decode threads and free their FFmpeg decoders; idempotent."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._lock:
            self._lanes = {}

    def start(self, clips: Sequence[EncodedClip], stream: torch.cuda.Stream) -> "PendingClips":
        """Start decoding ``clips`` into one buffer, allocated on ``stream`` (where it will be read),
        ``threads`` decodes at once (clips of one video that share packets merged into one, see
        ``plan_batch``); returns at once. Any thread may call it: the loader's staging thread starts a
        batch's decode while the executor still works on the batches before it."""
        plan = plan_batch(clips)
        with torch.cuda.stream(stream):
            data = torch.empty(max(plan.size, 1), dtype=torch.uint8, device=self.device)
        allocated = torch.cuda.Event()
        allocated.record(stream)  # the copy streams must not write the buffer before its allocation
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
            lane = _Lane(torch.cuda.Stream(self.device))
            # a runtime call that needs the device's context makes it current on this thread, where
            # FFmpeg takes it (``current_ctx``); the query waits for nothing
            lane.copy_stream.query()
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
        lane.copy_stream.synchronize()
        return (False, clip.num_packets) if pictures is None else (True, pictures)

    # -- routes ------------------------------------------------------------------------------------
    def _refuse(self, clip: EncodedClip) -> str | None:
        """Why ``clip`` does not go to NVDEC (None: it does)."""
        if clip.codec not in NVDEC_CODECS:
            return f"codec {clip.codec}"
        if clip.width % 2 or clip.height % 2:
            return "odd frame size"
        if self._failures.get(stream_key(clip), 0) >= NVDEC_FAILURES:
            return f"NVDEC failed {NVDEC_FAILURES} times in a row on this stream"
        return None

    def _count(self, why: str, clips: int = 1) -> None:
        with self._lock:
            self.reasons[why] = self.reasons.get(why, 0) + clips

    def _decoder(self, clip: EncodedClip) -> Any:
        key = decoder_key(clip)
        decoders = self._lane().decoders
        ctx = decoders.pop(key, None)
        if ctx is None:
            av = _av()
            from av.codec.hwaccel import HWAccel

            if len(decoders) >= _DECODERS_PER_THREAD:  # each holds NVDEC surfaces: the oldest goes
                decoders.pop(next(iter(decoders)))
            # FFmpeg on torch's context, current on this thread (``_lane``): its primary-context
            # option would refuse a context torch made active with other scheduling flags
            hw = HWAccel("cuda", device=str(self.device.index), allow_software_fallback=False, is_hw_owned=True,
                         options={"primary_ctx": "0", "current_ctx": "1"})
            ctx = av.CodecContext.create(clip.codec, "r", hwaccel=hw)
            # frames are held until _HELD_FRAMES wait: the pool must have room for them
            ctx.options = {"extra_hw_frames": str(_HELD_FRAMES)}
            if key.extradata:
                ctx.extradata = key.extradata
            ctx.width, ctx.height = clip.width, clip.height
        else:
            ctx.flush_buffers()
        decoders[key] = ctx  # the most recently used
        return ctx

    def _nvdec(self, clip: EncodedClip, data: torch.Tensor, offsets: np.ndarray, clips: int = 1) -> int | None:
        """Decode ``clip`` with NVDEC into ``data`` at ``offsets``; the pictures decoded, or None where it
        cannot, so that the clip goes to the CPU (which writes every frame again). ``clips``: the batch's
        clips it holds, for ``reasons``.

        A packet whose picture the clip does not want is decoded only if other pictures refer to it:
        FFmpeg skips non-reference pictures (``skip_frame="NONREF"``) for those packets, the B-frames
        between a clip's keyframe and its first frame, say."""
        why = self._refuse(clip)
        if why is not None:
            self._count(why, clips)
            return None
        av = _av()
        # an H.264 or HEVC stream in MP4 form is fed Annex-B, its parameter sets first (see the module docstring)
        sets = parameter_sets(clip.codec, bytes(clip.extradata))
        stream = stream_key(clip)
        wanted: dict[int, list[int]] = {}
        for f, (pts, index) in enumerate(zip(clip.frame_pts.tolist(), clip.frame_indices.tolist())):
            if index >= 0:
                wanted.setdefault(pts, []).append(f)
        done: set[int] = set()
        held: list[tuple[Any, np.ndarray]] = []  # the clip's device frames, copied once all are decoded
        pictures, skip = 0, ""
        try:
            ctx = self._decoder(clip)
            for j in range(clip.num_packets + 1):
                if j < clip.num_packets:
                    pts = int(clip.pts[j])
                    wants = skip_frame(pts, wanted)
                    if wants != skip:
                        ctx.skip_frame = skip = wants
                    payload: Any = clip.packet(j)
                    if sets is not None:
                        payload = to_annexb(payload, sets.length_size, sets.annexb if j == 0 else b"")
                    packet = av.Packet(bytes(payload))
                    packet.pts = pts
                    packet.dts = None if clip.dts[j] == VideoInfo.NO_TIMESTAMP else int(clip.dts[j])
                    packet.is_keyframe = bool(clip.key[j])
                    frames = ctx.decode(packet)
                else:
                    frames = ctx.decode(None)
                pictures += len(frames)
                for frame in frames:
                    if frame.pts in wanted and frame.pts not in done:
                        if frame.format.name != "cuda":
                            raise ClipDecodeError(f"the decoder gave a {frame.format.name} frame, not a device one")
                        held.append((frame, offsets[wanted[frame.pts]]))
                        done.add(frame.pts)
                        if len(held) == _HELD_FRAMES:
                            self._copy(held, clip, data)
        except (ClipDecodeError, av.FFmpegError, NotImplementedError, ValueError, TypeError, RuntimeError) as e:
            with self._lock:
                self._failures[stream] = self._failures.get(stream, 0) + 1
            self._lane().decoders.pop(decoder_key(clip), None)
            self._count(f"NVDEC failed: {type(e).__name__}: {str(e)[:160]}", clips)
            return None
        if len(done) != len(wanted):
            self._count("NVDEC gave too few frames", clips)
            return None
        self._copy(held, clip, data)
        self._pad(clip, data, offsets)
        if self._failures.get(stream):
            with self._lock:
                self._failures.pop(stream, None)
        return pictures

    def _copy(self, held: list[tuple[Any, np.ndarray]], clip: EncodedClip, data: torch.Tensor) -> None:
        """The planes of a clip's device frames into ``data``, each at its offsets (a frame repeated
        by ``pad_mode="edge"``, or wanted by several merged clips, goes to each), one driver copy per
        plane (``copy_2d``), then the frames released to FFmpeg's pool."""
        H, W = clip.height, clip.width
        lane = self._lane()
        ready = torch.cuda.Event()
        ready.record(torch.cuda.default_stream(self.device))  # FFmpeg's copies out of the surfaces
        lane.copy_stream.wait_event(ready)
        base, handle = data.data_ptr(), lane.copy_stream.cuda_stream
        for frame, at in held:
            y, uv = frame.planes[0], frame.planes[1]
            # the copies read H rows of W bytes from each plane: a frame of another size (a stream
            # that changes size) must not be read past its end
            if frame.width < W or frame.height < H or y.line_size < W or uv.line_size < W:
                raise ClipDecodeError(f"the decoder gave a {frame.width}x{frame.height} frame (pitches "
                                      f"{y.line_size}, {uv.line_size}); the stream is {W}x{H}")
            for off in at.tolist():
                copy_2d(base + off, W, y.buffer_ptr, y.line_size, W, H, handle)
                copy_2d(base + off + H * W, W, uv.buffer_ptr, uv.line_size, W, H // 2, handle)
        lane.copy_stream.synchronize()  # the frames go back to FFmpeg's pool when dropped
        held.clear()

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
        self._lane().copy_stream.synchronize()  # the pinned buffer is freed on return
