"""Which frames of a video make a clip: pure functions of the video's frame count.

A clip is ``num_frames`` frames, ``stride`` frames apart (frame indices in presentation
order), so it spans ``(num_frames - 1) * stride + 1`` frames of the video. Two ways to
place clips, as NVIDIA DALI's ``fn.readers.video`` and torchcodec's samplers do:

* ``"uniform"``: every start ``0, step, 2 * step, ...`` whose clip fits in the video
  (DALI's enumeration; ``step`` defaults to ``num_frames * stride``: clips that do not
  overlap, where DALI's default step is ``num_frames``). A video gives as many samples as
  it has starts.
* ``"random"``: ``clips_per_video`` samples per video; each sample's start is drawn
  anew every epoch from a uniform ``u`` in ``[0, 1)`` that the caller supplies (the
  loader draws it from its counter-based per-sample generator, so clip positions are
  seeded, resumable and shardable like image crops). Every start that fits is equally
  likely.

A video shorter than one clip's span is handled by ``pad_mode``:

* ``"none"``: the clip cannot be made and ``ShortVideoError`` is raised (the datasets
  report it as a ``SampleError`` naming the sample).
* ``"edge"``: the clip starts at frame 0 and frame indices past the end repeat the
  last frame.
* ``"constant"``: the clip starts at frame 0 and frame indices past the end are
  ``-1``; decoding gives zero (black) frames there.

In both padding modes a short video gives one clip in ``"uniform"`` mode.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = [
    "ClipSampler", "ShortVideoError", "PAD_MODES", "CLIP_MODES", "MISSING_FRAME",
    "clip_span", "uniform_clip_starts", "random_clip_start", "clip_frame_indices",
]

PadMode = Literal["none", "edge", "constant"]
ClipMode = Literal["random", "uniform"]
PAD_MODES: tuple[str, ...] = ("none", "edge", "constant")
CLIP_MODES: tuple[str, ...] = ("random", "uniform")
#: the frame index of a padded frame in ``"constant"`` mode
MISSING_FRAME = -1


class ShortVideoError(ValueError):
    """A video has fewer frames than one clip spans and ``pad_mode`` is ``"none"``."""


def _check(num_frames: int, stride: int, pad_mode: str) -> None:
    if int(num_frames) != num_frames or num_frames < 1:
        raise ValueError(f"num_frames must be a positive integer, got {num_frames!r}")
    if int(stride) != stride or stride < 1:
        raise ValueError(f"stride must be a positive integer, got {stride!r}")
    if pad_mode not in PAD_MODES:
        raise ValueError(f"pad_mode must be one of {PAD_MODES}, got {pad_mode!r}")


def clip_span(num_frames: int, stride: int = 1) -> int:
    """How many consecutive video frames one clip covers, from its first frame to its last."""
    return (num_frames - 1) * stride + 1


def uniform_clip_starts(num_video_frames: int, num_frames: int, stride: int = 1, step: int | None = None,
                        pad_mode: PadMode = "none") -> np.ndarray:
    """The starts ``0, step, 2 * step, ...`` of the clips that fit in the video (int64).

    ``step`` defaults to ``num_frames * stride``. A video shorter than one clip has no
    start with ``pad_mode="none"`` (the caller decides whether that is an error) and the
    single start 0 with ``"edge"`` or ``"constant"``.
    """
    _check(num_frames, stride, pad_mode)
    step = num_frames * stride if step is None else step
    if int(step) != step or step < 1:
        raise ValueError(f"step must be a positive integer, got {step!r}")
    last = num_video_frames - clip_span(num_frames, stride)
    if last < 0:
        return np.zeros(0 if pad_mode == "none" or num_video_frames < 1 else 1, dtype=np.int64)
    return np.arange(0, last + 1, step, dtype=np.int64)


def random_clip_start(num_video_frames: int, u: float, num_frames: int, stride: int = 1) -> int:
    """The start picked by ``u`` in ``[0, 1)`` among the ``num_video_frames - span + 1`` starts
    that fit, each equally likely; 0 for a video shorter than one clip."""
    if not 0.0 <= u < 1.0:
        raise ValueError(f"u must be in [0, 1), got {u!r}")
    count = num_video_frames - clip_span(num_frames, stride) + 1
    if count <= 1:
        return 0
    return min(int(u * count), count - 1)


def clip_frame_indices(num_video_frames: int, start: int, num_frames: int, stride: int = 1,
                       pad_mode: PadMode = "none") -> np.ndarray:
    """Frame indices (presentation order, int64 ``[num_frames]``) of the clip starting at ``start``.

    Indices past the video's last frame are the last frame's with ``pad_mode="edge"``,
    ``MISSING_FRAME`` (-1) with ``"constant"``; with ``"none"`` they raise ``ShortVideoError``.
    """
    _check(num_frames, stride, pad_mode)
    if num_video_frames < 1:
        raise ShortVideoError("the video has no frames")
    if not 0 <= start < num_video_frames:
        raise ValueError(f"clip start {start} is outside the video's {num_video_frames} frames")
    indices = start + np.arange(num_frames, dtype=np.int64) * stride
    past = indices >= num_video_frames
    if past.any():
        if pad_mode == "none":
            raise ShortVideoError(
                f"a clip of {num_frames} frames with stride {stride} spans {clip_span(num_frames, stride)} "
                f"frames from frame {start}; the video has {num_video_frames} (pad_mode='edge' or "
                f"'constant' pads short videos)")
        indices[past] = num_video_frames - 1 if pad_mode == "edge" else MISSING_FRAME
    return indices


@dataclass(frozen=True)
class ClipSampler:
    """How a dataset cuts its videos into samples (see the module docstring for the modes).

    ``clips_of(n)`` is how many samples a video of ``n`` frames gives; sample ``k`` of
    that video (``0 <= k < clips_of(n)``) has the frame indices ``frame_indices(n, k, u)``,
    ``u`` being the sample's uniform in ``[0, 1)`` (used in ``"random"`` mode only).
    """

    num_frames: int
    stride: int = 1
    step: int | None = None
    clips: ClipMode = "random"
    clips_per_video: int = 1
    pad_mode: PadMode = "none"

    def __post_init__(self) -> None:
        _check(self.num_frames, self.stride, self.pad_mode)
        if self.clips not in CLIP_MODES:
            raise ValueError(f"clips must be one of {CLIP_MODES}, got {self.clips!r}")
        if self.step is not None and (int(self.step) != self.step or self.step < 1):
            raise ValueError(f"step must be a positive integer, got {self.step!r}")
        if int(self.clips_per_video) != self.clips_per_video or self.clips_per_video < 1:
            raise ValueError(f"clips_per_video must be a positive integer, got {self.clips_per_video!r}")

    @property
    def span(self) -> int:
        """Video frames covered by one clip."""
        return clip_span(self.num_frames, self.stride)

    def clips_of(self, num_video_frames: int) -> int:
        """Samples of a video of ``num_video_frames`` frames: its uniform starts (one for a
        video shorter than a clip, which then pads or fails when read), or ``clips_per_video``."""
        if self.clips == "random":
            return self.clips_per_video
        starts = uniform_clip_starts(num_video_frames, self.num_frames, self.stride, self.step, "edge")
        return len(starts)

    def start(self, num_video_frames: int, k: int, u: float = 0.0) -> int:
        """The first frame of the video's sample ``k``."""
        if self.clips == "random":
            return random_clip_start(num_video_frames, u, self.num_frames, self.stride)
        step = self.num_frames * self.stride if self.step is None else self.step
        return k * step

    def frame_indices(self, num_video_frames: int, k: int, u: float = 0.0) -> np.ndarray:
        """Frame indices (int64 ``[num_frames]``) of the video's sample ``k`` given its uniform ``u``."""
        return clip_frame_indices(num_video_frames, self.start(num_video_frames, k, u), self.num_frames,
                                  self.stride, self.pad_mode)
