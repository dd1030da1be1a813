"""Frames decoded per frame delivered: a clip is decoded from the keyframe at or before its first
frame, so a decoder decodes more pictures than the clip has. The counts are checked against the
arithmetic of a video whose keyframes are known (one every ``GOP`` frames, no B-frames: frames
``key(first) .. last`` are decoded), and against the frames an independent FFmpeg decoder gives
when fed the clip's packets."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

av = pytest.importorskip("av")

import torchdali as td  # noqa: E402
from tests import _video  # noqa: E402
from torchdali import transforms as T  # noqa: E402
from torchdali._stats import LoaderStats  # noqa: E402
from torchdali.video import clip_frame_indices, probe, read_clip  # noqa: E402

GOP = 10
NUM_FRAMES = 45
_NO_BFRAMES = {"bf": "0", "g": str(GOP),
               "x264-params": f"keyint={GOP}:min-keyint={GOP}:scenecut=0:bframes=0:log-level=error"}
_BFRAMES = {"bf": "2", "g": str(GOP),
            "x264-params": f"keyint={GOP}:min-keyint={GOP}:scenecut=0:bframes=2:log-level=error"}


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = _video.write_video(tmp_path_factory.mktemp("gop") / "gop10.mp4", frames=NUM_FRAMES, options=_NO_BFRAMES)
    # the premise of the arithmetic, from PyAV's sequential decode: a keyframe every GOP frames, nowhere else
    keys = [i for i, frame in enumerate(_video.decode_all(path)) if frame.key_frame]
    assert keys == list(range(0, NUM_FRAMES, GOP))
    return path


@pytest.fixture(scope="module")
def bframes_video(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _video.write_video(tmp_path_factory.mktemp("gop") / "gop10_b.mp4", frames=NUM_FRAMES, options=_BFRAMES)


def arithmetic(start: int, num_frames: int, stride: int) -> int:
    """Frames from the keyframe at or before ``start`` to the clip's last frame."""
    last = start + (num_frames - 1) * stride
    return last - (start // GOP) * GOP + 1


def frames_out(clip: Any) -> list[int]:
    """The pts of every frame FFmpeg's software decoder gives when fed the clip's packets, then flushed."""
    decoder = av.CodecContext.create(clip.codec, "r")
    if clip.extradata:
        decoder.extradata = clip.extradata
    out: list[int] = []
    for j in range(clip.num_packets):
        packet = av.Packet(bytes(clip.packet(j)))
        packet.pts, packet.dts = int(clip.pts[j]), int(clip.dts[j])
        out += [f.pts for f in decoder.decode(packet)]
    return out + [f.pts for f in decoder.decode(None)]


@pytest.mark.parametrize("start,num_frames,stride", [
    (0, 4, 1),  # at a keyframe: nothing decoded beyond the clip
    (13, 4, 1),  # 3 frames from its keyframe: 3 decoded only to reach it
    (18, 4, 1),  # crosses the keyframe at 20: decoded on from 10
    (20, 1, 1),
    (9, 1, 1),  # the frame before a keyframe: the whole GOP
    (5, 3, 3),  # frames 5, 8, 11: 0..11, the skipped frames decoded as well
    (38, 7, 1),  # the video's last frames
])
def test_clip_decodes_from_its_keyframe_to_its_last_frame(video: str, start: int, num_frames: int,
                                                          stride: int) -> None:
    indices = clip_frame_indices(NUM_FRAMES, start, num_frames, stride)
    clip = read_clip(video, indices, probe(video))
    want = arithmetic(start, num_frames, stride)
    assert clip.num_packets == want
    pts = frames_out(clip)
    assert len(pts) == want
    assert set(clip.frame_pts.tolist()) <= set(pts)


@pytest.mark.parametrize("start", [0, 4, 13, 18, 36])
def test_bframes_add_the_references_after_the_last_frame(bframes_video: str, start: int) -> None:
    """With B-frames, pictures shown after the clip's last frame but decoded before it are decoded too:
    at least the arithmetic's count, and exactly the frames a decoder gives from the clip's packets."""
    info = probe(bframes_video)
    assert np.flatnonzero(info.keyframe).tolist() == list(range(0, NUM_FRAMES, GOP))
    clip = read_clip(bframes_video, clip_frame_indices(NUM_FRAMES, start, 4), info)
    pts = frames_out(clip)
    assert clip.num_packets == len(pts) >= arithmetic(start, 4, 1)
    assert set(clip.frame_pts.tolist()) <= set(pts)


def test_epoch_stats_ratio() -> None:
    stats = LoaderStats()
    stats.start_epoch(0)
    assert stats.last is not None and stats.last.decoded_per_delivered_frame == 0.0
    stats.add_batch(2, 0.0, stages={"decoded_video_frames": 19, "delivered_video_frames": 8})
    stats.add_batch(2, 0.0, stages={"decoded_video_frames": 5, "delivered_video_frames": 8})
    assert stats.last.decoded_per_delivered_frame == pytest.approx(24 / 16)
    assert stats.last.as_dict()["decoded_per_delivered_frame"] == pytest.approx(1.5)


def merged_arithmetic(starts: list[int], num_frames: int) -> int:
    """Frames decoded for clips of ``num_frames`` frames at ``starts`` in one batch: each clip's frames
    ``key(start) .. last``, the ranges that overlap or touch decoded once (``_merge.merge_clips``)."""
    ranges = sorted(((s // GOP) * GOP, s + num_frames - 1) for s in starts)
    total, lo, hi = 0, *ranges[0]
    for a, b in ranges[1:]:
        if a > hi + 1:
            total, lo = total + hi - lo + 1, a
        hi = max(hi, b)
    return total + hi - lo + 1


def test_merged_arithmetic() -> None:
    assert merged_arithmetic([0, 4, 8], 4) == 12  # 0..3, 0..7, 8..11: one range
    assert merged_arithmetic([36, 40], 4) == 10 + 4  # 30..39 and 40..43 touch
    assert merged_arithmetic([0, 13], 4) == 4 + 7  # 0..3 and 10..16: apart
    assert merged_arithmetic([13], 4) == arithmetic(13, 4, 1)


@pytest.mark.cuda
def test_loader_counts_frames_decoded_per_frame_delivered(video: str) -> None:
    """The GPU loader's epoch stats: uniform starts 0, 4, ..., 40 in batches of 3, every clip decoded from its
    keyframe, and the clips of a batch whose ranges overlap or touch decoded together."""
    ds = td.video.VideoFileList([(video, 0)], num_frames=4, clips="uniform")
    starts = list(range(0, NUM_FRAMES - 3, 4))
    assert len(ds) == len(starts)
    dl = td.DataLoader(ds, batch_size=3, device="cuda", transforms=T.Compose([T.Resize((24, 32))]), seed=0)
    delivered = sum(int(x.shape[0] * x.shape[1]) for x, _ in dl)
    last = dl.stats().last
    assert last.delivered_video_frames == delivered == 4 * len(starts)
    batches = [starts[i: i + 3] for i in range(0, len(starts), 3)]
    assert last.decoded_video_frames == sum(merged_arithmetic(b, 4) for b in batches) == 56
    assert last.decoded_video_frames < sum(arithmetic(s, 4, 1) for s in starts) == 84
    assert last.decoded_per_delivered_frame == pytest.approx(last.decoded_video_frames / delivered)
    torch.cuda.synchronize()
    dl.close()
