"""Clip sampling (torchdali.video._clips): which frame indices make each clip. No video files needed."""
from __future__ import annotations

import numpy as np
import pytest

from torchdali.video import (
    MISSING_FRAME, ClipSampler, ShortVideoError, clip_frame_indices, clip_span, random_clip_start,
    uniform_clip_starts,
)


def dali_starts(num_video_frames: int, num_frames: int, stride: int, step: int) -> list[int]:
    """DALI's fn.readers.video enumeration, written out: every step-th start whose last frame exists."""
    starts = []
    start = 0
    while start + (num_frames - 1) * stride < num_video_frames:
        starts.append(start)
        start += step
    return starts


@pytest.mark.parametrize("n,frames,stride,step,expected", [
    (10, 3, 1, None, [0, 3, 6]),  # default step: num_frames * stride
    (10, 3, 1, 1, list(range(8))),
    (10, 3, 2, None, [0]),  # span 5, step 6
    (16, 4, 2, 3, [0, 3, 6, 9]),  # span 7: 9 + 6 = 15 is the last frame
    (7, 7, 1, None, [0]),  # exactly one clip
    (6, 7, 1, None, []),  # too short
    (1, 1, 5, None, [0]),
])
def test_uniform_starts_table(n: int, frames: int, stride: int, step: int | None, expected: list[int]) -> None:
    starts = uniform_clip_starts(n, frames, stride, step)
    assert starts.dtype == np.int64
    assert starts.tolist() == expected


def test_uniform_starts_match_dali_enumeration() -> None:
    for n in range(0, 40):
        for frames in (1, 2, 3, 8):
            for stride in (1, 2, 3):
                for step in (None, 1, 2, 5):
                    got = uniform_clip_starts(n, frames, stride, step).tolist()
                    assert got == dali_starts(n, frames, stride, step or frames * stride), (n, frames, stride, step)


def test_uniform_short_video_pads_to_one_clip() -> None:
    assert uniform_clip_starts(3, 8, pad_mode="none").tolist() == []
    assert uniform_clip_starts(3, 8, pad_mode="edge").tolist() == [0]
    assert uniform_clip_starts(3, 8, pad_mode="constant").tolist() == [0]
    assert uniform_clip_starts(0, 8, pad_mode="edge").tolist() == []


def test_clip_frame_indices_stride() -> None:
    got = clip_frame_indices(100, 10, 4, stride=3)
    assert got.dtype == np.int64
    assert got.tolist() == [10, 13, 16, 19]
    assert clip_span(4, 3) == 10
    assert clip_frame_indices(10, 0, 10).tolist() == list(range(10))


def test_pad_modes() -> None:
    assert clip_frame_indices(5, 0, 8, pad_mode="edge").tolist() == [0, 1, 2, 3, 4, 4, 4, 4]
    assert clip_frame_indices(5, 0, 8, pad_mode="constant").tolist() == [0, 1, 2, 3, 4] + [MISSING_FRAME] * 3
    assert clip_frame_indices(5, 1, 3, stride=2, pad_mode="edge").tolist() == [1, 3, 4]
    with pytest.raises(ShortVideoError, match="spans 8 frames"):
        clip_frame_indices(5, 0, 8)
    with pytest.raises(ShortVideoError):
        clip_frame_indices(0, 0, 1, pad_mode="edge")
    with pytest.raises(ValueError, match="outside"):
        clip_frame_indices(5, 5, 1)
    with pytest.raises(ValueError, match="pad_mode"):
        clip_frame_indices(5, 0, 1, pad_mode="wrap")  # type: ignore[arg-type]


def test_random_start_range_and_uniformity() -> None:
    n, frames, stride = 50, 8, 3  # span 22: starts 0..28
    count = n - clip_span(frames, stride) + 1
    assert random_clip_start(n, 0.0, frames, stride) == 0
    assert random_clip_start(n, np.nextafter(1.0, 0.0), frames, stride) == count - 1
    # a fine grid of u: every start exactly equally often
    grid = (np.arange(count * 64) + 0.5) / (count * 64)
    starts = np.array([random_clip_start(n, float(u), frames, stride) for u in grid])
    assert starts.min() == 0 and starts.max() == count - 1
    assert np.bincount(starts).tolist() == [64] * count
    # random u: roughly uniform (chi-square far below the 0.001 quantile of 28 degrees of freedom: 56.9)
    u = np.random.default_rng(0).random(20000)
    hist = np.bincount([random_clip_start(n, float(x), frames, stride) for x in u], minlength=count)
    expected = len(u) / count
    assert ((hist - expected) ** 2 / expected).sum() < 56.9
    assert random_clip_start(5, 0.7, 8) == 0  # shorter than a clip
    with pytest.raises(ValueError):
        random_clip_start(n, 1.0, frames)


def test_sampler_uniform() -> None:
    s = ClipSampler(4, stride=2, clips="uniform")
    assert s.span == 7
    assert s.clips_of(30) == len(dali_starts(30, 4, 2, 8)) == 3
    assert [s.frame_indices(30, k).tolist() for k in range(3)] == [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18, 20, 22]]
    assert s.frame_indices(30, 1, u=0.9).tolist() == [8, 10, 12, 14]  # u does not move uniform clips
    assert ClipSampler(4, step=1, clips="uniform").clips_of(10) == 7
    # short videos: one sample, which pads or fails when its indices are asked for
    assert s.clips_of(3) == 1
    with pytest.raises(ShortVideoError):
        s.frame_indices(3, 0)
    assert ClipSampler(4, stride=2, clips="uniform", pad_mode="edge").frame_indices(3, 0).tolist() == [0, 2, 2, 2]


def test_sampler_random() -> None:
    s = ClipSampler(3, clips="random", clips_per_video=4)
    assert s.clips_of(100) == 4 and s.clips_of(1) == 4
    assert s.frame_indices(100, 0, u=0.5).tolist() == [49, 50, 51]  # 98 starts: int(0.5 * 98)
    assert s.frame_indices(100, 3, u=0.5).tolist() == [49, 50, 51]  # k does not change a random clip's start
    assert ClipSampler(3, pad_mode="constant").frame_indices(2, 0, u=0.99).tolist() == [0, 1, MISSING_FRAME]


@pytest.mark.parametrize("kwargs", [
    dict(num_frames=0), dict(num_frames=2, stride=0), dict(num_frames=2, step=0), dict(num_frames=2, clips="all"),
    dict(num_frames=2, clips_per_video=0), dict(num_frames=2, pad_mode="reflect"), dict(num_frames=1.5),
])
def test_sampler_refuses_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        ClipSampler(**kwargs)
