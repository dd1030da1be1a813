"""Video files: probe (demux only), read a clip's encoded packets, decode them on the CPU.

The three steps split where a loader's processes split: ``probe`` runs once per file
when a dataset is built; ``read_clip`` runs in a DataLoader worker and returns an
``EncodedClip`` (the packets one clip needs, in one buffer: small and picklable);
``decode_clip_nv12`` / ``decode_clip_rgb`` turn an ``EncodedClip`` into pixels with
FFmpeg's software decoders (through PyAV), where NVDEC cannot.

Which of the two a clip takes (``as_nv12``): 8-bit 4:2:0 frames (``NV12_PIX_FMTS``) with a matrix
the NV12 conversion has (BT.601, BT.709) go through their NV12 planes, which hold them exactly,
and are converted by the fused kernel's NV12 source (``reference.nv12_to_rgb`` on the CPU), as
NVDEC's frames are. Every other format (4:2:2, 4:4:4, 10 and 12 bits, BT.2020, ...) goes to RGB
through swscale in one step (``_RgbConverter``), at the frame's chroma resolution and bit depth:
NV12 would drop the chroma resolution of 4:2:2 and 4:4:4 and round 10-bit samples to 8 bits
before the conversion.

Frame ``i`` of a video is the ``i``-th frame in presentation order, i.e. the packet
with the ``i``-th smallest presentation timestamp (pts) among the video stream's
packets. Nothing is derived from the frame rate, so variable-rate videos index exactly.

Which packets a clip needs: decoding starts at the last keyframe (in decode order)
whose pts is at most the smallest wanted pts and stops after the last packet (in
decode order) whose pts is at most the largest wanted pts; the decoder is then
flushed. Every wanted frame's packet lies in that range, and so do its references:
frames that follow a keyframe in presentation order do not reference frames before
it. Frames decoded on the way that were not asked for are dropped by their pts, which
also drops an open GOP's leading pictures (those after a non-IDR keyframe in decode
order whose pts precede it), the only ones that may reference packets before the start.

PyAV (``pip install av``, or ``pip install -e ".[video]"`` in a clone) is imported when first needed, so
``import torchdali`` works without it.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch
from csrc_triton import layout

__all__ = [
    "ColorInfo", "VideoInfo", "EncodedClip", "NV12Clip", "ClipDecodeError", "UnsupportedVideoError",
    "NV12_PIX_FMTS", "as_nv12", "probe", "read_clip", "decode_clip_nv12", "decode_clip_rgb",
]

# FFmpeg's AVColorSpace codes and the matrix names used here
_MATRIX_NAMES = {0: "rgb", 1: "bt709", 2: "unspecified", 4: "fcc", 5: "bt601", 6: "bt601", 7: "smpte240m",
                 8: "ycgco", 9: "bt2020", 10: "bt2020"}
_RANGE_NAMES = {0: "unspecified", 1: "limited", 2: "full"}  # AVColorRange
# the matrices whose YCbCr->RGB coefficients swscale has (the scale filter's names); others fall back to BT.601
_SWS_MATRICES = frozenset({"bt601", "bt709", "bt2020", "smpte240m", "fcc"})
# FFmpeg's decoder for a codec, where the one FFmpeg registers first is not the one to use:
# its own AV1 decoder decodes only through a hardware accelerator
_DECODERS = {"av1": "libdav1d"}
# codecs whose B-frames AVI stores packed with the frame they follow, so packets come in presentation order
_AVI_IN_ORDER = frozenset({"mpeg4"})
# demuxer options shared by probe and read_clip, so both see the same timestamps
_OPEN_OPTIONS = {"fflags": "+genpts"}
#: FFmpeg's pixel formats of 8-bit 4:2:0 frames: NV12 holds their planes as decoded, and NVDEC decodes
#: their streams to NV12 (its frames of other formats are P010, P016 or 4:4:4 planes)
NV12_PIX_FMTS = frozenset({"yuv420p", "yuvj420p", "nv12"})
#: FFmpeg's names of the ISO media family (its ``mov`` demuxer), which hands over each sample's bytes
#: as the file stores them: ``read_clip`` reads those straight from the file
_DIRECT_FORMATS = frozenset({"mov", "mp4", "m4a", "3gp", "3g2", "mj2"})


def _av() -> Any:
    try:
        import av
    except ImportError as e:
        raise ImportError("torchdali.video reads videos with PyAV, which is not installed: "
                          "pip install av (in a clone of torchdali: pip install -e '.[video]')") from e
    return av


class ClipDecodeError(ValueError):
    """A clip's packets could not be read or decoded into the frames asked for.

    ``reason`` says what went wrong; callers that know the sample wrap this in a
    ``torchdali.SampleError`` naming its index and path.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnsupportedVideoError(ValueError):
    """A file has no video stream this library can index or decode (no decoder for its codec,
    packets without timestamps, no frames)."""


@dataclass(frozen=True)
class ColorInfo:
    """How a video's YCbCr samples map to RGB, from the stream's codec parameters.

    ``matrix``: "bt601", "bt709", "bt2020", "smpte240m", "fcc", "ycgco", "rgb" or
    "unspecified"; ``range``: "limited" (16-235 luma), "full" or "unspecified";
    ``primaries`` and ``transfer``: FFmpeg's AVColorPrimaries and
    AVColorTransferCharacteristic codes (2: unspecified), kept for the record.
    """

    matrix: str = "unspecified"
    range: str = "unspecified"
    primaries: int = 2
    transfer: int = 2

    @property
    def conversion_matrix(self) -> str:
        """The matrix the YCbCr->RGB conversion uses: ``matrix``, or BT.601 where it is
        unspecified or one swscale lacks (swscale's own default)."""
        return self.matrix if self.matrix in _SWS_MATRICES else "bt601"

    @property
    def full_range(self) -> bool:
        """Whether the conversion takes the samples as full range (unspecified is limited, as in FFmpeg)."""
        return self.range == "full"


def _color_of(codec_context: Any) -> ColorInfo:
    rng = _RANGE_NAMES.get(int(codec_context.color_range or 0), "unspecified")
    pix_fmt = codec_context.pix_fmt or ""
    if rng == "unspecified" and pix_fmt.startswith("yuvj"):  # FFmpeg's deprecated full-range formats
        rng = "full"
    return ColorInfo(
        matrix=_MATRIX_NAMES.get(int(codec_context.colorspace if codec_context.colorspace is not None else 2),
                                 "unspecified"),
        range=rng,
        primaries=int(codec_context.color_primaries if codec_context.color_primaries is not None else 2),
        transfer=int(codec_context.color_trc if codec_context.color_trc is not None else 2),
    )


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class VideoInfo:
    """What ``probe`` learns about a file's video stream without decoding it.

    Frame arrays are in presentation order (``pts`` ascending); packet arrays in
    decode order (the file's order). ``decode_index[i]`` is the position in decode
    order of frame ``i``'s packet. Packets the demuxer marks as discarded (before an
    edit list's start) are packets, not frames: they may be needed as references.
    Timestamps are in ``time_base`` units.
    """

    codec: str  # FFmpeg's codec name: "h264", "hevc", "vp9", "av1", ...
    width: int
    height: int
    pix_fmt: str
    color: ColorInfo
    time_base: Fraction
    average_rate: Fraction | None
    stream_index: int
    extradata: bytes
    pts: np.ndarray  # int64 [N]
    keyframe: np.ndarray  # bool [N]
    decode_index: np.ndarray  # int64 [N]
    packet_pts: np.ndarray  # int64 [P]
    packet_dts: np.ndarray  # int64 [P], NO_TIMESTAMP where the container has none
    packet_key: np.ndarray  # bool [P]
    #: where each packet's bytes lie in the file, verbatim (``packet_pos`` int64 [P], ``packet_size``
    #: int64 [P]), and the file's (size, mtime_ns) when probed: set for the ISO media family (mp4,
    #: mov), whose demuxer hands over a sample's bytes as stored, so that ``read_clip`` reads them
    #: with one ``pread``; None for other containers (Matroska's blocks are not the packets)
    packet_pos: np.ndarray | None = None
    packet_size: np.ndarray | None = None
    file_stamp: tuple[int, int] | None = None

    #: ``packet_dts`` of a packet without a decode timestamp
    NO_TIMESTAMP = np.iinfo(np.int64).min

    @property
    def num_frames(self) -> int:
        return len(self.pts)

    @property
    def duration(self) -> float:
        """Seconds from the first frame's pts to the last's (0 for one frame)."""
        return float((int(self.pts[-1]) - int(self.pts[0])) * self.time_base) if len(self.pts) else 0.0


def probe(path: str | os.PathLike) -> VideoInfo:
    """Index the video stream of ``path`` (FFmpeg's best video stream) by demuxing it; nothing is decoded
    beyond what opening the file needs to fill in the codec parameters.

    Raises ``UnsupportedVideoError`` for a file without a decodable video stream or without
    timestamps, PyAV's errors (``av.FFmpegError``, ``OSError``) for one FFmpeg cannot open.
    """
    av = _av()
    path = os.fspath(path)
    stat = os.stat(path)
    with av.open(path, options=_OPEN_OPTIONS) as container:
        try:
            stream = container.streams.best("video")
        except Exception:  # PyAV raises when no stream of the type exists in some versions
            stream = None
        if stream is None:
            raise UnsupportedVideoError("FFmpeg finds no video stream in the file (not a video, or an mp4 "
                                        "whose index is missing: truncated?)")
        cc = stream.codec_context
        codec = _codec_name(stream)
        _decoder(codec)  # fail here, not in every worker
        if "avi" in container.format.name.split(",") and cc.has_b_frames and codec not in _AVI_IN_ORDER:
            raise UnsupportedVideoError(
                f"AVI stores no presentation timestamps, and this {codec} stream reorders frames (B-frames), "
                f"so its frame order is unknown without decoding it; convert it to mp4 or mkv")
        pts, dts, key = [], [], []
        shown = []
        pos, size = [], []
        for packet in container.demux(stream):
            if packet.size == 0 and packet.pts is None:  # the end-of-stream marker
                continue
            if packet.pts is None:
                raise UnsupportedVideoError(f"packet {len(pts)} of the video stream has no timestamp")
            pts.append(packet.pts)
            dts.append(VideoInfo.NO_TIMESTAMP if packet.dts is None else packet.dts)
            key.append(packet.is_keyframe)
            shown.append(not packet.is_discard)
            pos.append(-1 if packet.pos is None else packet.pos)
            size.append(packet.size)
        direct = _DIRECT_FORMATS.issuperset(container.format.name.split(",")) and min(pos, default=-1) >= 0
        packet_pts = np.array(pts, dtype=np.int64)
        if len(np.unique(packet_pts)) != len(packet_pts):
            raise UnsupportedVideoError("two packets of the video stream have the same presentation timestamp, "
                                        "so frames cannot be told apart")
        frames = np.flatnonzero(np.array(shown, dtype=bool))
        if len(frames) == 0:
            raise UnsupportedVideoError("the video stream has no frames")
        order = frames[np.argsort(packet_pts[frames], kind="stable")]
        packet_key = np.array(key, dtype=bool)
        return VideoInfo(
            codec=codec, width=int(cc.width), height=int(cc.height), pix_fmt=cc.pix_fmt or "",
            color=_color_of(cc), time_base=Fraction(stream.time_base), stream_index=stream.index,
            average_rate=Fraction(stream.average_rate) if stream.average_rate else None,
            extradata=bytes(cc.extradata or b""),
            pts=_readonly(packet_pts[order]), keyframe=_readonly(packet_key[order]),
            decode_index=_readonly(order.astype(np.int64)), packet_pts=_readonly(packet_pts),
            packet_dts=_readonly(np.array(dts, dtype=np.int64)), packet_key=_readonly(packet_key),
            packet_pos=_readonly(np.array(pos, dtype=np.int64)) if direct else None,
            packet_size=_readonly(np.array(size, dtype=np.int64)) if direct else None,
            file_stamp=(stat.st_size, stat.st_mtime_ns) if direct else None,
        )


def _codec_name(stream: Any) -> str:
    """FFmpeg's name of the stream's codec (``"av1"``, not its decoder's ``"libdav1d"``)."""
    cc = stream.codec_context
    if cc is None or cc.codec is None:
        raise UnsupportedVideoError("FFmpeg knows no decoder for the video stream's codec")
    return cc.codec.canonical_name


def _decoder(codec: str) -> str:
    """The name of the FFmpeg software decoder for ``codec``."""
    av = _av()
    name = _DECODERS.get(codec, codec)
    try:
        av.Codec(name, "r")
    except Exception:
        raise UnsupportedVideoError(f"this FFmpeg (PyAV {av.__version__}) has no decoder {name!r} "
                                    f"for codec {codec!r}") from None
    return name


@dataclass(frozen=True, eq=False)
class EncodedClip:
    """The encoded packets one clip needs, and what a decoder needs to turn them into its frames.

    ``data`` holds the packets back to back in decode order (packet ``j`` is
    ``data[offsets[j]:offsets[j + 1]]``) with their ``pts``, ``dts`` and ``key`` flags;
    decoding them all (then flushing) yields every wanted frame. Output frame ``f`` is
    the decoded frame whose pts is ``frame_pts[f]``, or a zero frame where
    ``frame_indices[f]`` is ``MISSING_FRAME`` (-1, ``pad_mode="constant"``); repeated
    indices (``pad_mode="edge"``) repeat a frame. Small and picklable: made in a
    DataLoader worker, decoded in the main process.

    ``source`` names the stream the packets come from (``read_clip``: the file's path and the
    stream's index; None where unknown) and ``first_packet`` is the place of packet 0 in that
    stream's decode order, so packet ``j`` is the stream's packet ``first_packet + j``. Clips of one
    source whose packets overlap or touch are decoded in one pass on the GPU path (``_merge``);
    a clip without a source is always decoded alone.
    """

    codec: str
    extradata: bytes
    width: int
    height: int
    pix_fmt: str
    color: ColorInfo
    time_base: Fraction
    data: np.ndarray  # uint8 [sum of packet sizes]
    offsets: np.ndarray  # int64 [P + 1]
    pts: np.ndarray  # int64 [P]
    dts: np.ndarray  # int64 [P]
    key: np.ndarray  # bool [P]
    frame_pts: np.ndarray  # int64 [F], output order
    frame_indices: np.ndarray  # int64 [F], output order
    source: tuple[str, int] | None = None  # (path, stream index); None: not merged with other clips
    first_packet: int = 0  # decode-order index in the source's stream of packet 0

    @property
    def num_packets(self) -> int:
        return len(self.pts)

    @property
    def num_frames(self) -> int:
        return len(self.frame_indices)

    @property
    def missing(self) -> np.ndarray:
        """bool ``[F]``: output frames that are padding (zero frames)."""
        return self.frame_indices < 0

    def packet(self, j: int) -> memoryview:
        """Packet ``j``'s bytes."""
        return memoryview(self.data)[int(self.offsets[j]):int(self.offsets[j + 1])]


def as_nv12(clip: "EncodedClip | VideoInfo") -> bool:
    """Whether ``clip``'s frames are converted to RGB from their NV12 planes (``decode_clip_nv12``, the
    fused kernel's NV12 source; NVDEC on the GPU path): 8-bit 4:2:0 (``NV12_PIX_FMTS``) with a matrix of
    ``layout.NV12_MATRICES``. Otherwise swscale converts them to RGB (``decode_clip_rgb``) on the CPU,
    keeping their chroma resolution and bit depth (see the module docstring)."""
    return clip.pix_fmt in NV12_PIX_FMTS and clip.color.conversion_matrix in layout.NV12_MATRICES


def _packet_range(info: VideoInfo, wanted: np.ndarray) -> tuple[int, int]:
    """First and last packet (decode order, inclusive) to decode the frames ``wanted`` (sorted indices)."""
    first_pts, last_pts = int(info.pts[wanted[0]]), int(info.pts[wanted[-1]])
    # A keyframe shown no later than the first wanted frame is decoded before every wanted frame in
    # conforming streams (what is decoded before a keyframe is shown before it); the second
    # condition keeps that true in streams that break the rule.
    first_packet = int(info.decode_index[wanted].min())
    keys = np.flatnonzero(info.packet_key[:first_packet + 1] & (info.packet_pts[:first_packet + 1] <= first_pts))
    # a stream that does not start with a keyframe decodes from its first packet
    start = int(keys[-1]) if len(keys) else 0
    # the first wanted frame's packet is at or after start, so this is never empty
    stop = start + int(np.flatnonzero(info.packet_pts[start:] <= last_pts)[-1])
    return start, stop


def read_clip(path: str | os.PathLike, frame_indices: Any, info: VideoInfo) -> EncodedClip:
    """The packets of ``path`` that decode to the frames ``frame_indices`` (presentation order;
    -1 marks a padding frame), as indexed by ``info = probe(path)``.

    Raises ``ClipDecodeError`` where the file no longer matches ``info`` (truncated,
    rewritten) and PyAV's errors where FFmpeg cannot read it.
    """
    indices = np.asarray(frame_indices, dtype=np.int64).reshape(-1)
    if (indices >= info.num_frames).any() or (indices < -1).any():
        raise IndexError(f"frame indices {indices.tolist()} are outside the video's {info.num_frames} frames")
    valid = indices >= 0
    frame_pts = np.zeros(len(indices), dtype=np.int64)
    frame_pts[valid] = info.pts[indices[valid]]
    wanted = np.unique(indices[valid])
    chunks: Sequence[bytes | memoryview] = []
    start = stop = 0
    if len(wanted):
        start, stop = _packet_range(info, wanted)
        chunks = _demux_packets(os.fspath(path), info, start, stop)
    sizes = np.array([len(c) for c in chunks], dtype=np.int64)
    offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    data = np.empty(int(offsets[-1]), dtype=np.uint8)
    for j, chunk in enumerate(chunks):
        data[offsets[j]:offsets[j + 1]] = np.frombuffer(chunk, dtype=np.uint8)
    span = slice(start, stop + 1) if chunks else slice(0, 0)
    return EncodedClip(
        codec=info.codec, extradata=info.extradata, width=info.width, height=info.height,
        pix_fmt=info.pix_fmt, color=info.color, time_base=info.time_base, data=data, offsets=offsets,
        pts=np.array(info.packet_pts[span]), dts=np.array(info.packet_dts[span]),
        key=np.array(info.packet_key[span]), frame_pts=frame_pts, frame_indices=indices.copy(),
        source=(os.fspath(path), int(info.stream_index)), first_packet=int(span.start),
    )


def _demux_packets(path: str, info: VideoInfo, start: int, stop: int) -> Sequence[bytes | memoryview]:
    """Bytes of packets ``start..stop`` (decode order) of the video stream, checked against ``info``."""
    chunks = _read_direct(path, info, start, stop)
    if chunks is not None:
        return chunks
    # a seek lands on a keyframe at or before its target; where a demuxer lands after the
    # start packet instead, read again from the beginning
    chunks = _demux_from(path, info, start, stop, seek=start > 0)
    if chunks is None and start > 0:
        chunks = _demux_from(path, info, start, stop, seek=False)
    if chunks is None:
        raise ClipDecodeError(f"cannot find packet {start} of the video stream (pts {int(info.packet_pts[start])})")
    return chunks


def _read_direct(path: str, info: VideoInfo, start: int, stop: int) -> list[memoryview] | None:
    """Packets ``start..stop`` read where ``probe`` found them (one read of the span they lie in), for
    a file of the ISO media family unchanged since (size and mtime); None otherwise (demux then).
    Opening a file with FFmpeg costs several times more than reading a clip's packets."""
    if info.packet_pos is None or info.packet_size is None or info.file_stamp is None:
        return None
    pos = info.packet_pos[start: stop + 1]
    size = info.packet_size[start: stop + 1]
    lo, hi = int(pos.min()), int((pos + size).max())
    with open(path, "rb", buffering=0) as f:
        stat = os.fstat(f.fileno())
        if (stat.st_size, stat.st_mtime_ns) != info.file_stamp:
            return None  # changed since it was probed: the demuxer's checks decide
        span = os.pread(f.fileno(), hi - lo, lo)
    if len(span) != hi - lo:
        return None
    view = memoryview(span)  # the packets as views of the one read: read_clip copies them once, into its buffer
    return [view[p - lo: p - lo + n] for p, n in zip(pos.tolist(), size.tolist())]


def _demux_from(path: str, info: VideoInfo, start: int, stop: int, seek: bool) -> list[bytes] | None:
    """``_demux_packets`` after seeking to packet ``start`` (or from the file's beginning); None where
    the first packet at or after ``start`` in the file is not ``start``."""
    av = _av()
    by_pts = np.argsort(info.packet_pts, kind="stable")
    sorted_pts = info.packet_pts[by_pts]

    def position(pts: int | None) -> int:
        """The packet's place in decode order, found by its (unique) pts; -1 if probe never saw it."""
        if pts is None:
            return -1
        i = int(np.searchsorted(sorted_pts, pts))
        return int(by_pts[i]) if i < len(sorted_pts) and sorted_pts[i] == pts else -1

    chunks: list[bytes] = []
    with av.open(path, options=_OPEN_OPTIONS) as container:
        streams = container.streams
        if info.stream_index >= len(streams) or streams[info.stream_index].type != "video":
            raise ClipDecodeError(f"the file has no video stream {info.stream_index} any more "
                                  f"(truncated or rewritten since it was probed?)")
        stream = streams[info.stream_index]
        if seek:
            # by pts: mp4 and Matroska land on the keyframe itself (a dts lands a GOP early)
            container.seek(int(info.packet_pts[start]), backward=True, any_frame=False, stream=stream)
        for packet in container.demux(stream):
            if packet.size == 0 and packet.pts is None:  # the end-of-stream marker
                continue
            at = position(packet.pts)
            if not chunks:
                if at == -1 or at < start:
                    continue
                if at > start:
                    return None
            elif at != start + len(chunks):
                raise ClipDecodeError(f"packet {start + len(chunks)} of the video stream is not where probe "
                                      f"found it (the file changed since it was probed?)")
            chunks.append(bytes(packet))
            if at == stop:
                return chunks
    raise ClipDecodeError(f"the file ends before packet {stop} of its video stream (pts {int(info.packet_pts[stop])}); "
                          f"{len(chunks)} of the clip's {stop - start + 1} packets were read "
                          f"(truncated since it was probed?)")


class NV12Clip(NamedTuple):
    """A clip's frames as NV12 planes: ``y`` uint8 ``[F, H, W]``, ``uv`` uint8
    ``[F, ceil(H/2), ceil(W/2), 2]`` (Cb, Cr interleaved), and the colour metadata the
    YCbCr->RGB conversion needs. Padding frames are black: Y at the range's black
    level (16 limited, 0 full) and Cb = Cr = 128, so they convert to RGB zeros."""

    y: np.ndarray
    uv: np.ndarray
    color: ColorInfo


def _decoded_frames(clip: EncodedClip, convert: Any) -> dict[int, Any]:
    """``{pts: convert(frame)}`` for each wanted frame, decoded from the clip's packets by FFmpeg's
    software decoder. Raises ``ClipDecodeError`` where the decoder fails or a wanted frame does not come out."""
    av = _av()
    wanted = set(clip.frame_pts[~clip.missing].tolist())
    if not wanted:
        return {}
    decoder = av.CodecContext.create(_decoder(clip.codec), "r")
    if clip.extradata:
        decoder.extradata = clip.extradata
    decoder.width, decoder.height = clip.width, clip.height
    out: dict[int, Any] = {}

    def take(frames: list) -> None:
        for frame in frames:
            if frame.pts in wanted and frame.pts not in out:
                if (frame.width, frame.height) != (clip.width, clip.height):
                    raise ClipDecodeError(f"frame at pts {frame.pts} is {frame.width}x{frame.height}, the "
                                          f"stream {clip.width}x{clip.height} (resolution changes are not supported)")
                out[frame.pts] = convert(frame)

    try:
        for j in range(clip.num_packets):
            packet = av.Packet(bytes(clip.packet(j)))
            packet.pts, packet.dts = int(clip.pts[j]), None if clip.dts[j] == VideoInfo.NO_TIMESTAMP \
                else int(clip.dts[j])
            packet.is_keyframe = bool(clip.key[j])
            take(decoder.decode(packet))
        take(decoder.decode(None))
    except av.FFmpegError as e:
        raise ClipDecodeError(f"the {clip.codec} decoder failed: {e}") from None
    lost = sorted(wanted - out.keys())
    if lost:
        raise ClipDecodeError(f"the {clip.codec} decoder gave no frame for pts {lost} "
                              f"({len(lost)} of the clip's {len(wanted)} frames; corrupt data?)")
    return out


def _plane(frame: Any, i: int) -> np.ndarray:
    """Plane ``i`` of a planar 8-bit frame as ``[rows, columns]`` uint8 (no copy)."""
    plane = frame.planes[i]
    rows = np.frombuffer(plane, dtype=np.uint8).reshape(plane.height, plane.line_size)
    return rows[:, :plane.width]


def _nv12_planes(frame: Any, color: ColorInfo) -> tuple[np.ndarray, np.ndarray]:
    if frame.format.name in ("yuv420p", "yuvj420p"):  # the planes as decoded, exactly
        y = _plane(frame, 0).copy()
        uv = np.stack([_plane(frame, 1), _plane(frame, 2)], axis=-1)
        return y, uv
    if frame.format.name != "nv12":
        # other layouts (10-bit, 4:2:2, 4:4:4) through swscale, the range kept as it is
        rng = "JPEG" if color.full_range else "MPEG"
        frame = frame.reformat(format="nv12", src_color_range=rng, dst_color_range=rng)
    y = _plane(frame, 0).copy()
    # PyAV gives the CbCr plane's width in chroma samples, each two bytes (Cb, Cr)
    chroma = frame.planes[1]
    rows = np.frombuffer(chroma, dtype=np.uint8).reshape(chroma.height, chroma.line_size)
    uv = rows[:, :2 * chroma.width].reshape(chroma.height, chroma.width, 2).copy()
    return y, uv


def decode_clip_nv12(clip: EncodedClip) -> NV12Clip:
    """Decode ``clip`` on the CPU into NV12 planes (``NV12Clip``), in the clip's frame order.

    4:2:0 8-bit frames are copied as decoded; other pixel formats are converted to NV12
    by swscale (chroma subsampled, 8 bits: ``decode_clip_rgb`` keeps what those lose), keeping
    the stream's range. Raises ``ClipDecodeError`` where the data does not decode to every
    wanted frame.
    """
    height, width = clip.height, clip.width
    frames = _decoded_frames(clip, lambda frame: _nv12_planes(frame, clip.color))
    count = clip.num_frames
    y = np.empty((count, height, width), dtype=np.uint8)
    uv = np.empty((count, (height + 1) // 2, (width + 1) // 2, 2), dtype=np.uint8)
    for f in range(count):
        if clip.frame_indices[f] < 0:
            y[f] = 0 if clip.color.full_range else 16
            uv[f] = 128
        else:
            y[f], uv[f] = frames[int(clip.frame_pts[f])]
    return NV12Clip(y, uv, clip.color)


@functools.lru_cache(maxsize=None)
def _has_chroma_loc() -> bool:
    """Whether this FFmpeg's scale filter takes ``in_chroma_loc`` (FFmpeg 8, which deprecates the
    chroma positions that older ones take instead)."""
    av = _av()
    try:
        graph = av.filter.Graph()
        src = graph.add_buffer(width=2, height=2, format="yuv420p", time_base=1)
        scale = graph.add("scale", "in_chroma_loc=left")
        sink = graph.add("buffersink")
        src.link_to(scale)
        scale.link_to(sink)
        graph.configure()
    except Exception:  # the option does not exist
        return False
    return True


class _RgbConverter:
    """swscale's conversion of decoded frames to RGB (``rgb24``) with the stream's matrix and range,
    exact rounding and the chroma interpolated at every pixel, where the chroma samples lie in
    H.264's and HEVC's default siting (what the NV12 source assumes): horizontally on the even
    columns, vertically half-way between two rows where the rows are subsampled. A filter graph per
    frame format: ``VideoFrame.reformat`` cannot say where the chroma lies (it takes what the decoder
    says, centred where it says nothing), and by default interpolates no chroma and rounds coarsely
    (8 to 17 levels off on saturated gradients)."""

    def __init__(self, color: ColorInfo) -> None:
        self.color = color
        self._graphs: dict[tuple[str, int, int], Any] = {}

    def _build(self, frame: Any, siting: str) -> Any:
        av = _av()
        graph = av.filter.Graph()
        src = graph.add_buffer(width=frame.width, height=frame.height, format=frame.format.name, time_base=1)
        scale = graph.add("scale", f"in_color_matrix={self.color.conversion_matrix}:"
                                   f"in_range={'pc' if self.color.full_range else 'tv'}:out_range=pc:{siting}:"
                                   f"flags=bilinear+accurate_rnd+full_chroma_int+bitexact")
        out = graph.add("format", "rgb24")
        sink = graph.add("buffersink")
        src.link_to(scale)
        scale.link_to(out)
        out.link_to(sink)
        graph.configure()
        return graph

    def _graph(self, frame: Any) -> Any:
        key = (frame.format.name, frame.width, frame.height)
        graph = self._graphs.get(key)
        if graph is None:
            if _has_chroma_loc():
                siting = "in_chroma_loc=left"
            else:  # positions in 1/256 of a luma sample; vertically halfway only where rows are subsampled
                chroma = frame.planes[1] if len(frame.planes) > 1 else None
                v_sub = chroma is not None and frame.format.name.startswith(("yuv", "nv")) \
                    and chroma.height < frame.height
                siting = f"in_h_chr_pos=0:in_v_chr_pos={128 if v_sub else 0}"
            graph = self._graphs[key] = self._build(frame, siting)
        return graph

    def __call__(self, frame: Any) -> np.ndarray:
        graph = self._graph(frame)
        # the graph is told the matrix and range: the frame's own tags would only make its source
        # filter log that they differ from its (unset) ones
        frame.colorspace, frame.color_range = 2, 0
        graph.push(frame)
        rgb = graph.pull()
        plane = rgb.planes[0]
        rows = np.frombuffer(plane, dtype=np.uint8).reshape(rgb.height, plane.line_size)
        return rows[:, :3 * rgb.width].reshape(rgb.height, rgb.width, 3).copy()


def decode_clip_rgb(clip: EncodedClip) -> torch.Tensor:
    """Decode ``clip`` on the CPU into RGB, uint8 ``[F, H, W, 3]``, in the clip's frame order.

    swscale converts with the stream's colour matrix and range (``clip.color``; BT.601 and
    limited where unspecified), given explicitly rather than taken from each frame, at the
    frame's chroma resolution and bit depth, with exact rounding (``_RgbConverter``): within a
    level of the float formula, for any pixel format. Padding frames are zeros. Raises
    ``ClipDecodeError`` where the data does not decode to every wanted frame.
    """
    frames = _decoded_frames(clip, _RgbConverter(clip.color))
    out = torch.zeros((clip.num_frames, clip.height, clip.width, 3), dtype=torch.uint8)
    for f in range(clip.num_frames):
        if clip.frame_indices[f] >= 0:
            out[f] = torch.from_numpy(frames[int(clip.frame_pts[f])])
    return out
