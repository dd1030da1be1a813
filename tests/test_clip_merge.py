"""Clips of one video decoded together (``torchdali.video._merge.merge_clips``, ``_nvdec.plan_batch``).

Packet ranges are checked against PyAV's demuxer (the file's packets in decode order) on a video whose
keyframes are known, and every frame of a merged decode against the same clip decoded alone by FFmpeg's
software decoder and against PyAV's sequential decode of the whole file (``tests._video.decode_all``),
bit for bit. The GPU test runs merged clips through ``ClipDecoder``.
"""
from __future__ import annotations

import dataclasses
import pickle
import shutil
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest
import torch

av = pytest.importorskip("av")

from csrc_triton import layout  # noqa: E402
from tests import _video  # noqa: E402
from torchdali.video import (  # noqa: E402
    EncodedClip, VideoInfo, as_nv12, clip_frame_indices, decode_clip_nv12, decode_clip_rgb, probe, read_clip,
)
from torchdali.video._merge import merge_clips  # noqa: E402
from torchdali.video._nvdec import PendingClips, frame_runs, plan_batch  # noqa: E402

GOP = 10
NUM_FRAMES = 45
_NO_BFRAMES = {"bf": "0", "g": str(GOP),
               "x264-params": f"keyint={GOP}:min-keyint={GOP}:scenecut=0:bframes=0:log-level=error"}
#: B-frames, open GOPs, other codecs and containers (Matroska is demuxed, mp4 read directly)
DECODE_VIDEOS = ["h264_bframes.mp4", "h264_open_gop.mkv", "hevc.mp4", "hevc_odd.mkv", "vp9.webm", "av1.mp4",
                 "h264_vfr.mp4"]


@pytest.fixture(scope="module")
def gop(tmp_path_factory: pytest.TempPathFactory) -> str:
    """H.264 without B-frames, a keyframe every ``GOP`` frames: frame ``i`` is packet ``i``."""
    path = _video.write_video(tmp_path_factory.mktemp("merge") / "gop10.mp4", frames=NUM_FRAMES, options=_NO_BFRAMES)
    info = probe(path)
    assert np.array_equal(info.decode_index, np.arange(NUM_FRAMES))
    assert np.flatnonzero(info.packet_key).tolist() == list(range(0, NUM_FRAMES, GOP))
    return path


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return _video.write_all(tmp_path_factory.mktemp("merge_videos"), DECODE_VIDEOS)


def demuxed(path: str) -> list[tuple[int, int, bool, bytes]]:
    """``(pts, dts, keyframe, bytes)`` of every packet of the file's video stream, in decode order, from
    PyAV's demuxer."""
    with av.open(path, options={"fflags": "+genpts"}) as container:
        stream = container.streams.video[0]
        return [(int(p.pts), VideoInfo.NO_TIMESTAMP if p.dts is None else int(p.dts), bool(p.is_keyframe), bytes(p))
                for p in container.demux(stream) if not (p.size == 0 and p.pts is None)]


def packets(clip: EncodedClip) -> list[tuple[int, int, bool, bytes]]:
    return [(int(clip.pts[j]), int(clip.dts[j]), bool(clip.key[j]), bytes(clip.packet(j)))
            for j in range(clip.num_packets)]


def reference_nv12(frame: Any) -> tuple[np.ndarray, np.ndarray]:
    """PyAV's own NV12 conversion of a sequentially decoded frame, as ``(y [H, W], uv [H/2, W/2, 2])``."""
    a = frame.to_ndarray(format="nv12")
    h, w = frame.height, frame.width
    return a[:h], a[h:].reshape(h // 2, w // 2, 2)


def clips_of(path: str, windows: list[Any]) -> list[EncodedClip]:
    info = probe(path)
    return [read_clip(path, w, info) for w in windows]


# --------------------------------------------------------------------------- #
# what a clip knows of where it comes from
# --------------------------------------------------------------------------- #

def test_read_clip_names_its_stream_and_first_packet(gop: str, videos: dict[str, str]) -> None:
    for path in (gop, videos["h264_open_gop.mkv"]):
        info = probe(path)
        file_packets = demuxed(path)
        for window in ([13, 14], [3], [NUM_FRAMES - 1 if path == gop else info.num_frames - 1]):
            clip = read_clip(path, window, info)
            assert clip.source == (path, info.stream_index)
            assert packets(clip) == file_packets[clip.first_packet: clip.first_packet + clip.num_packets]
            back = pickle.loads(pickle.dumps(clip))
            assert (back.source, back.first_packet) == (clip.source, clip.first_packet)
    assert read_clip(gop, [13, 14], probe(gop)).first_packet == 10


# --------------------------------------------------------------------------- #
# merge_clips: which clips join, and the joined packets
# --------------------------------------------------------------------------- #

def test_overlapping_clips_join_into_the_union_of_their_packets(gop: str) -> None:
    file_packets = demuxed(gop)
    # frames 13..16 need packets 10..16; 15..18 packets 10..18; 10..19 and 12..13 one inside the other
    for windows, lo, hi in (([range(13, 17), range(15, 19)], 10, 19),
                            ([range(15, 19), range(13, 17)], 10, 19),
                            ([range(10, 20), range(12, 14)], 10, 20),
                            ([range(21, 23), range(20, 30, 3), [25, 25, 24]], 20, 30)):
        clips = clips_of(gop, [list(w) for w in windows])
        assert sum(c.num_packets for c in clips) > hi - lo
        (merged,) = merge_clips(clips)
        assert merged.members == tuple(range(len(clips)))
        assert merged.clip.first_packet == lo and merged.clip.source == clips[0].source
        assert packets(merged.clip) == file_packets[lo:hi]
        assert merged.clip.frame_indices.tolist() == [i for c in clips for i in c.frame_indices.tolist()]
        assert merged.clip.frame_pts.tolist() == [p for c in clips for p in c.frame_pts.tolist()]
        assert merged.clip.key.tolist() == [j % GOP == 0 for j in range(lo, hi)]


def test_adjacent_clips_join_and_a_gap_keeps_them_apart(gop: str) -> None:
    file_packets = demuxed(gop)
    adjacent = clips_of(gop, [range(0, 10), range(10, 14)])  # packets 0..9 and 10..13
    assert adjacent[0].first_packet + adjacent[0].num_packets == adjacent[1].first_packet
    (merged,) = merge_clips(adjacent)
    assert packets(merged.clip) == file_packets[0:14] and merged.members == (0, 1)
    gap = clips_of(gop, [range(0, 9), range(10, 14), range(30, 34)])  # packet 9 between the first two
    out = merge_clips(gap)
    assert [m.members for m in out] == [(0,), (1,), (2,)]
    assert all(m.clip is c for m, c in zip(out, gap))  # a clip decoded alone is the batch's clip itself


def test_clips_of_different_videos_never_join(gop: str, tmp_path: Any) -> None:
    """A byte-for-byte copy of the file: the packets are equal, the source is not."""
    copy = str(tmp_path / "copy.mp4")
    shutil.copyfile(gop, copy)
    a, b = clips_of(gop, [range(13, 17)])[0], clips_of(copy, [range(13, 17)])[0]
    assert packets(a) == packets(b) and a.first_packet == b.first_packet and a.source != b.source
    assert [m.members for m in merge_clips([a, b])] == [(0,), (1,)]
    # with another clip of each video between them: each video's clips join, nothing across
    clips = [a, b, clips_of(gop, [range(14, 19)])[0], clips_of(copy, [range(12, 15)])[0]]
    out = merge_clips(clips)
    assert [m.members for m in out] == [(0, 2), (1, 3)]
    assert [m.clip.source for m in out] == [a.source, b.source]


def test_clips_whose_shared_packets_differ_stay_apart(gop: str) -> None:
    """Clips of one source that disagree on a packet both hold (a file rewritten between two reads)."""
    a, b = clips_of(gop, [range(13, 17), range(15, 19)])
    data = b.data.copy()
    data[int(b.offsets[2])] ^= 0xFF  # packet 12, which a holds too
    changed = dataclasses.replace(b, data=data)
    assert [m.members for m in merge_clips([a, changed])] == [(0,), (1,)]
    moved = dataclasses.replace(b, pts=b.pts + 1)
    assert [m.members for m in merge_clips([a, moved])] == [(0,), (1,)]
    resized = dataclasses.replace(b, width=b.width + 2)
    assert [m.members for m in merge_clips([a, resized])] == [(0,), (1,)]
    # a byte past a's last packet is not shared: the clips still join
    data = b.data.copy()
    data[int(b.offsets[8])] ^= 0xFF  # packet 18
    (merged,) = merge_clips([a, dataclasses.replace(b, data=data)])
    assert bytes(merged.clip.packet(8)) == bytes(data[int(b.offsets[8]): int(b.offsets[9])])


def test_empty_and_sourceless_clips_are_left_alone(gop: str) -> None:
    info = probe(gop)
    a = read_clip(gop, [13, 14], info)
    empty = read_clip(gop, [-1, -1, -1], info)  # every frame padding: no packets
    assert empty.num_packets == 0
    unnamed = dataclasses.replace(read_clip(gop, [13, 15], info), source=None)
    out = merge_clips([empty, a, unnamed, read_clip(gop, [12, 16], info)])
    assert [m.members for m in out] == [(0,), (1, 3), (2,)]
    assert out[0].clip is empty and out[2].clip is unnamed
    assert merge_clips([]) == []


def test_padded_clips_join(gop: str) -> None:
    """``pad_mode="edge"`` repeats the last frame, ``"constant"`` pads with -1: both join a clip they overlap."""
    edge = clip_frame_indices(NUM_FRAMES, 42, 6, pad_mode="edge")
    constant = clip_frame_indices(NUM_FRAMES, 43, 4, pad_mode="constant")
    assert edge.tolist() == [42, 43, 44, 44, 44, 44] and constant.tolist() == [43, 44, -1, -1]
    clips = clips_of(gop, [edge, range(40, 44), constant])
    (merged,) = merge_clips(clips)
    assert merged.clip.frame_indices.tolist() == edge.tolist() + list(range(40, 44)) + constant.tolist()
    assert merged.clip.missing.tolist() == [False] * 10 + [False, False, True, True]
    assert packets(merged.clip) == demuxed(gop)[40:45]


# --------------------------------------------------------------------------- #
# a merged clip decodes to each clip's frames
# --------------------------------------------------------------------------- #

def batch_windows(n: int) -> list[Any]:
    """Clips of an ``n``-frame video that share packets, touch, repeat and pad, and one far from the others."""
    return [np.arange(0, 4), np.arange(2, 8), np.arange(n // 2, n // 2 + 3),
            np.arange(n // 2 + 1, min(n, n // 2 + 7), 2),
            np.arange(n // 2, n // 2 + 3), clip_frame_indices(n, n - 3, 6, pad_mode="edge"),
            clip_frame_indices(n, n - 2, 5, pad_mode="constant"), [9, 3, 3]]


def split(merged: Any, frames: np.ndarray, clips: list[EncodedClip]) -> dict[int, np.ndarray]:
    """A merged decode's frames (``[F, ...]``, in the merged clip's order) per member clip."""
    out, at = {}, 0
    for i in merged.members:
        out[i] = frames[at: at + clips[i].num_frames]
        at += clips[i].num_frames
    assert at == len(frames)
    return out


@pytest.mark.parametrize("name", DECODE_VIDEOS)
def test_merged_clips_decode_to_the_frames_each_clip_decodes_alone(videos: dict[str, str], name: str) -> None:
    path = videos[name]
    info = probe(path)
    sequential = [reference_nv12(f) for f in _video.decode_all(path)]
    clips = clips_of(path, batch_windows(info.num_frames))
    merged = merge_clips(clips)
    assert len(merged) < len(clips), "the batch must share packets"
    assert sum(m.clip.num_packets for m in merged) < sum(c.num_packets for c in clips)
    assert sorted(i for m in merged for i in m.members) == list(range(len(clips)))
    black = 0 if info.color.full_range else 16
    for m in merged:
        planes = decode_clip_nv12(m.clip)
        ys, uvs = split(m, planes.y, clips), split(m, planes.uv, clips)
        for i in m.members:
            alone = decode_clip_nv12(clips[i])
            assert np.array_equal(ys[i], alone.y) and np.array_equal(uvs[i], alone.uv), (name, i, m.members)
            for f, index in enumerate(clips[i].frame_indices.tolist()):
                if index < 0:
                    assert (ys[i][f] == black).all() and (uvs[i][f] == 128).all()
                else:
                    assert np.array_equal(ys[i][f], sequential[index][0]), (name, i, f, index)
                    assert np.array_equal(uvs[i][f], sequential[index][1]), (name, i, f, index)


def test_merged_clip_decodes_to_rgb_as_each_clip_alone(videos: dict[str, str]) -> None:
    path = videos["h264_open_gop.mkv"]
    clips = clips_of(path, [np.arange(5, 12), np.arange(9, 14), [20, 3, 3]])
    (merged,) = merge_clips(clips)
    rgb = split(merged, decode_clip_rgb(merged.clip).numpy(), clips)
    for i, clip in enumerate(clips):
        assert np.array_equal(rgb[i], decode_clip_rgb(clip).numpy()), i


# --------------------------------------------------------------------------- #
# ClipDecoder's jobs: every frame written at its place (no GPU)
# --------------------------------------------------------------------------- #

def test_frame_runs_join_frames_that_follow_each_other() -> None:
    assert frame_runs(np.array([], dtype=np.int64), 6) == []
    assert frame_runs(np.array([12, 18, 24]), 6) == [(0, 12, 18)]
    assert frame_runs(np.array([12, 18, 60, 66, 0]), 6) == [(0, 12, 12), (12, 60, 12), (24, 0, 6)]
    assert frame_runs(np.array([6, 6, 12]), 6) == [(0, 6, 6), (6, 6, 12)]


def cpu_decode(plan: Any) -> tuple[np.ndarray, np.ndarray]:
    """The batch's buffer filled as ``ClipDecoder``'s CPU routes fill it (``_on_cpu``, and swscale's RGB
    for clips ``as_nv12`` refuses), job by job through ``frame_runs``; and how often each byte was written."""
    data = np.zeros(plan.size, dtype=np.uint8)
    writes = np.zeros(plan.size, dtype=np.int64)
    for job in plan.jobs:
        clip = job.clip
        if as_nv12(clip):
            planes = decode_clip_nv12(clip)
            packed = np.concatenate([np.concatenate([planes.y[f].reshape(-1), planes.uv[f].reshape(-1)])
                                     for f in range(clip.num_frames)])
            frame_bytes = layout.nv12_size(clip.height, clip.width)
        else:
            packed = decode_clip_rgb(clip).numpy().reshape(-1)
            frame_bytes = clip.height * clip.width * 3
        assert len(packed) == frame_bytes * clip.num_frames
        for src, to, size in frame_runs(job.at, frame_bytes):
            data[to: to + size] = packed[src: src + size]
            writes[to: to + size] += 1
    return data, writes


def test_plan_batch_writes_each_clips_frames_at_their_offsets(videos: dict[str, str], tmp_path: Any) -> None:
    """Clips of three videos, one of them 4:4:4 (uploaded as RGB), interleaved: the merged jobs fill the
    buffer exactly as each clip decoded alone and laid out one after the other."""
    yuv444 = _video.write_video(tmp_path / "yuv444.mp4", frames=20, width=48, height=32, pix_fmt="yuv444p",
                                options={"bf": "2", "g": "8", "x264-params": "keyint=8:log-level=error"})
    a, b = videos["h264_bframes.mp4"], videos["vp9.webm"]
    clips = [*clips_of(a, [range(0, 4)]), *clips_of(yuv444, [range(3, 7)]), *clips_of(b, [range(10, 14)]),
             *clips_of(a, [range(2, 6)]), *clips_of(yuv444, [[5, 6, 7, 7]]), *clips_of(b, [[13, 12, 11, 10]]),
             *clips_of(a, [range(24, 28)]), *clips_of(a, [[-1, -1, -1, -1]])]
    assert not as_nv12(clips[1]) and as_nv12(clips[0])
    plan = plan_batch(clips)
    assert [job.clips for job in plan.jobs] == [2, 2, 2, 1, 1]
    assert plan.packets == sum(job.clip.num_packets for job in plan.jobs) < sum(c.num_packets for c in clips)
    # the layout: clip by clip, frame by frame, NV12 or RGB sized
    sizes = [layout.nv12_size(c.height, c.width) if as_nv12(c) else c.height * c.width * 3
             for c in clips for _ in range(c.num_frames)]
    assert plan.offsets.tolist() == np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
    assert plan.size == sum(sizes) and plan.rgb.tolist() == [not as_nv12(c) for c in clips for _ in range(4)]
    data, writes = cpu_decode(plan)
    assert (writes == 1).all(), "every byte of the buffer written once"
    for i, clip in enumerate(clips):
        for f in range(clip.num_frames):
            k = 4 * i + f
            o = int(plan.offsets[k])
            if as_nv12(clip):
                alone = decode_clip_nv12(clip)
                want = np.concatenate([alone.y[f].reshape(-1), alone.uv[f].reshape(-1)])
            else:
                want = decode_clip_rgb(clip)[f].numpy().reshape(-1)
            assert np.array_equal(data[o: o + len(want)], want), (i, f)


def test_pending_clips_count_routes_per_clip() -> None:
    """A merged decode counts each of its clips on its route, and the pictures of every decode."""
    futures = []
    for route, pictures in ((True, 5), (False, 4), (True, 8)):
        f: Future = Future()
        f.set_result((route, pictures))
        futures.append(f)
    out = PendingClips(torch.zeros(1), np.zeros(5, np.int64), np.zeros((5, 3), np.int64), futures,
                       clips=[3, 2, 1]).result()
    assert (out.nvdec, out.cpu, out.decoded_frames) == (4, 2, 17)
    assert (PendingClips(torch.zeros(1), np.zeros(2, np.int64), np.zeros((2, 3), np.int64), futures).result().nvdec
            == 2)


def nonref_unwanted(clip: EncodedClip) -> int:
    """Packets of an H.264 clip in MP4 form whose picture the clip does not want and no picture refers to:
    each slice's NAL unit header has ``nal_ref_idc`` 0 (H.264 7.3.1), read from the length-prefixed NAL
    units, their length size from the avcC record (its fifth byte's low two bits, plus one)."""
    size = (bytes(clip.extradata)[4] & 3) + 1
    wanted = {int(p) for p, i in zip(clip.frame_pts.tolist(), clip.frame_indices.tolist()) if i >= 0}
    count = 0
    for j in range(clip.num_packets):
        if int(clip.pts[j]) in wanted:
            continue
        data, at, refs = bytes(clip.packet(j)), 0, []
        while at + size < len(data):
            length = int.from_bytes(data[at: at + size], "big")
            header = data[at + size]
            if header & 0x1F in (1, 5):  # a coded slice (non-IDR, IDR)
                refs.append(header >> 5 & 3)
            at += size + length
        count += bool(refs) and not any(refs)
    return count


@pytest.mark.cuda
@pytest.mark.parametrize("name,windows", [
    ("h264_bframes.mp4", [range(3, 9), range(5, 11)]), ("h264_bframes.mp4", [range(13, 17)]),
    ("h264_open_gop.mkv", [range(13, 17)]), ("h264_open_gop.mkv", [[9, 11, 13, 15]]),
])
def test_unwanted_non_reference_pictures_are_skipped_and_the_frames_stay(videos: dict[str, str], name: str,
                                                                        windows: list[Any]) -> None:
    """NVDEC decodes the packets less the unwanted ones whose slices are all non-reference (read from the
    bitstream here), and every frame equals the CPU's, which decodes every packet."""
    from torchdali.video._nvdec import ClipDecoder

    clips = clips_of(videos[name], windows)
    clip = merge_clips(clips)[0].clip
    decoder = ClipDecoder("cuda", threads=1)
    try:
        out = decoder.decode(clips, torch.cuda.Stream())
    finally:
        decoder.close()
    assert (out.nvdec, out.cpu) == (len(clips), 0), decoder.reasons
    assert out.decoded_frames == clip.num_packets - nonref_unwanted(clip) < clip.num_packets
    k = 0
    for c in clips:
        ref = decode_clip_nv12(c)
        for f in range(c.num_frames):
            H, W = c.height, c.width
            host = out.data[int(out.offsets[k]): int(out.offsets[k]) + H * W * 3 // 2].cpu().numpy()
            assert np.array_equal(host[: H * W].reshape(H, W), ref.y[f]), (k, "Y")
            assert np.array_equal(host[H * W:].reshape(H // 2, W // 2, 2), ref.uv[f]), (k, "CbCr")
            k += 1


# --------------------------------------------------------------------------- #
# on the GPU
# --------------------------------------------------------------------------- #

@pytest.mark.cuda
def test_clip_decoder_decodes_shared_packets_once(gop: str, videos: dict[str, str], tmp_path: Any) -> None:
    """Overlapping, adjacent and padded clips of H.264 videos (NVDEC), of VP9 at a size NVDEC refuses
    (the CPU route, uploaded frame by frame) and of a 4:4:4 video (swscale's RGB), interleaved in one batch:
    every frame equals the clip's alone on the CPU, the pictures decoded are the merged clips' packets,
    and the routes count the batch's clips."""
    from torchdali.video._nvdec import ClipDecoder

    yuv444 = _video.write_video(tmp_path / "yuv444.mp4", frames=20, width=48, height=32, pix_fmt="yuv444p",
                                options={"bf": "2", "g": "8", "x264-params": "keyint=8:log-level=error"})
    bframes, vp9 = videos["h264_bframes.mp4"], videos["vp9.webm"]
    clips = [*clips_of(gop, [range(13, 17), range(0, 10)]), *clips_of(bframes, [range(3, 9)]),
             *clips_of(gop, [range(10, 14), range(15, 19)]), *clips_of(vp9, [range(10, 14)]),
             *clips_of(yuv444, [range(3, 7)]), *clips_of(bframes, [range(5, 11)]),
             *clips_of(gop, [clip_frame_indices(NUM_FRAMES, 42, 4, pad_mode="edge"),
                             clip_frame_indices(NUM_FRAMES, 43, 4, pad_mode="constant")]),
             *clips_of(vp9, [[13, 12, 12, 11]]), *clips_of(yuv444, [[6, 5, 4, 9]]), *clips_of(gop, [[-1] * 4])]
    merged = merge_clips(clips)
    assert [m.members for m in merged] == [(0, 1, 3, 4), (2, 7), (5, 10), (6, 11), (8, 9), (12,)]
    decoder, stream = ClipDecoder("cuda"), torch.cuda.Stream()
    try:
        out = decoder.decode(clips, stream)
        torch.cuda.synchronize()
        # NVDEC (the H.264 jobs) skips the pictures no clip wants that nothing refers to; the CPU decodes all
        skipped = [nonref_unwanted(m.clip) if m.clip.codec == "h264" and as_nv12(m.clip) else 0 for m in merged]
        assert skipped[1] > 0, "the B-frame video's merged clip has non-reference pictures before its frames"
        assert out.decoded_frames == sum(m.clip.num_packets for m in merged) - sum(skipped)
        assert out.nvdec + out.cpu == len(clips)
        assert out.nvdec >= 9, decoder.reasons  # every H.264 4:2:0 clip
        assert sum(decoder.reasons.values()) == out.cpu, decoder.reasons
        k = 0
        for i, clip in enumerate(clips):
            nv12 = as_nv12(clip)
            alone = decode_clip_nv12(clip) if nv12 else decode_clip_rgb(clip).numpy()
            H, W = clip.height, clip.width
            for f in range(clip.num_frames):
                o = int(out.offsets[k])
                if nv12:
                    host = out.data[o: o + layout.nv12_size(H, W)].cpu().numpy()
                    assert np.array_equal(host[: H * W].reshape(H, W), alone.y[f]), (i, f, "Y")
                    assert np.array_equal(host[H * W:].reshape(H // 2, W // 2, 2), alone.uv[f]), (i, f, "CbCr")
                else:
                    assert bool(out.rgb[k])
                    assert np.array_equal(out.data[o: o + H * W * 3].cpu().numpy().reshape(H, W, 3), alone[f]), (i, f)
                k += 1
        assert k == len(out.offsets)
    finally:
        decoder.close()
