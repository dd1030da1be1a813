"""Video datasets: each item is one clip of a video (a list of frames) and the video's target.

Every file is probed once, when the dataset is built (``probe``: demux only, in
threads); the index says which packets each clip needs, so reading a clip later
(``read``) demuxes only those. Items are cut from videos by a ``ClipSampler``:
``"uniform"`` clips are fixed, ``"random"`` clips move every epoch, their start chosen
by a uniform ``u`` in ``[0, 1)`` per sample (``read(index, u)``; ``__getitem__`` draws
``u`` from torch's default generator, so the datasets work under a plain
``torch.utils.data.DataLoader``).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .._file_list import read_file_list
from ..errors import SampleError
from ._clips import ClipMode, ClipSampler, PadMode, ShortVideoError
from ._container import EncodedClip, VideoInfo, decode_clip_rgb, probe, read_clip

__all__ = ["VideoFolder", "VideoFileList", "VIDEO_EXTENSIONS", "probe_videos"]

VIDEO_EXTENSIONS: tuple[str, ...] = (".mp4", ".mkv", ".webm", ".mov", ".avi")
#: lists at least this long show a progress bar while they are probed
PROGRESS_MIN_VIDEOS = 256


def probe_videos(paths: Sequence[str], num_threads: int | None = None) -> list[VideoInfo]:
    """``probe`` every path, in threads (PyAV's demuxing is mostly file reading), with a progress bar for
    long lists. The first file (in list order) that cannot be probed raises ``SampleError`` naming its
    position in ``paths`` and its path."""
    from tqdm.auto import tqdm

    def attempt(path: str) -> VideoInfo | BaseException:
        try:
            return probe(path)
        except ImportError:
            raise
        except Exception as e:  # FFmpeg raises many types on a bad file
            return e

    threads = num_threads or min(16, 4 * (os.cpu_count() or 1))
    results: list[VideoInfo | BaseException] = []
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(paths)))) as pool, \
            tqdm(total=len(paths), desc="probing videos", unit="video",
                 disable=len(paths) < PROGRESS_MIN_VIDEOS) as bar:
        for result in pool.map(attempt, paths):
            results.append(result)
            bar.update()
    for i, result in enumerate(results):
        if isinstance(result, BaseException):
            raise SampleError.for_sample(i, paths[i], "cannot index video",
                                         f"{type(result).__name__}: {result}") from None
    return results  # type: ignore[return-value]


class _VideoClips(torch.utils.data.Dataset):
    """Items ``(clip, target)`` cut from ``self.videos`` (``(path, target)`` pairs) by ``self.sampler``.

    ``samples`` and ``targets`` are per item, as torch's samplers and torchdali's
    loader expect (``samples[index]`` is the item's ``(path, target)``); ``videos``
    and ``infos`` per file.
    """

    def _index_videos(self, videos: list[tuple[str, int]], num_frames: int, stride: int, step: int | None,
                      clips: ClipMode, clips_per_video: int, pad_mode: PadMode, transform: Callable | None,
                      target_transform: Callable | None, num_threads: int | None) -> None:
        self.sampler = ClipSampler(num_frames, stride, step, clips, clips_per_video, pad_mode)
        self.transform = transform
        self.target_transform = target_transform
        self.videos = videos
        self.infos = probe_videos([p for p, _ in videos], num_threads)
        counts = np.array([self.sampler.clips_of(info.num_frames) for info in self.infos], dtype=np.int64)
        self._video = np.repeat(np.arange(len(videos), dtype=np.int64), counts)
        # the item's clip number within its video: 0, 1, ... counts[v] - 1
        firsts = np.cumsum(counts) - counts
        self._clip = np.arange(len(self._video), dtype=np.int64) - np.repeat(firsts, counts)
        self.samples = [videos[v] for v in self._video.tolist()]
        self.targets = [t for _, t in self.samples]

    def __len__(self) -> int:
        return len(self._video)

    def _check(self, index: int) -> int:
        return range(len(self))[index]

    def video_index(self, index: int) -> int:
        """Position in ``videos`` of item ``index``'s video."""
        return int(self._video[self._check(index)])

    def path_of(self, index: int) -> str:
        return self.videos[self.video_index(index)][0]

    def info(self, index: int) -> VideoInfo:
        """``probe`` of item ``index``'s video."""
        return self.infos[self.video_index(index)]

    def _target(self, index: int) -> Any:
        target = self.videos[self.video_index(index)][1]
        return self.target_transform(target) if self.target_transform is not None else target

    def clip_indices(self, index: int, u: float = 0.0) -> np.ndarray:
        """Frame indices (int64 ``[num_frames]``, -1 for constant padding) of item ``index`` given
        its uniform ``u`` in ``[0, 1)`` (ignored for uniform clips). A video shorter than one clip
        with ``pad_mode="none"`` raises ``SampleError``."""
        index = self._check(index)
        info = self.infos[int(self._video[index])]
        try:
            return self.sampler.frame_indices(info.num_frames, int(self._clip[index]), u)
        except ShortVideoError as e:
            raise SampleError.for_sample(index, self.path_of(index), "video too short", e) from None

    def read(self, index: int, u: float = 0.0) -> tuple[EncodedClip, Any]:
        """Item ``index``'s clip, encoded (``read_clip``), and its target; ``SampleError`` naming the
        item where the file cannot be read."""
        indices = self.clip_indices(index, u)
        path = self.path_of(index)
        try:
            clip = read_clip(path, indices, self.info(index))
        except ImportError:
            raise
        except Exception as e:  # FFmpeg raises many types on a bad file
            raise SampleError.for_sample(index, path, "cannot read clip", f"{type(e).__name__}: {e}") from None
        return clip, self._target(index)

    def decode(self, index: int, clip: EncodedClip) -> torch.Tensor:
        """``decode_clip_rgb(clip)`` as uint8 ``[F, 3, H, W]`` (torchvision's video layout); ``SampleError``
        naming item ``index`` where it does not decode."""
        try:
            frames = decode_clip_rgb(clip)
        except ImportError:
            raise
        except Exception as e:  # ClipDecodeError, and whatever FFmpeg raises besides
            raise SampleError.for_sample(index, self.path_of(index), "cannot decode clip",
                                         f"{type(e).__name__}: {e}") from None
        return frames.permute(0, 3, 1, 2)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """``(transform(frames), target)``: the clip decoded on the CPU, uint8 ``[F, 3, H, W]``, its
        random start (``"random"`` clips) drawn from torch's default generator."""
        u = float(torch.rand((), dtype=torch.float64)) if self.sampler.clips == "random" else 0.0
        clip, target = self.read(index, u)
        frames: Any = self.decode(index, clip)
        if self.transform is not None:
            frames = self.transform(frames)
        return frames, target


class VideoFolder(_VideoClips):
    """Videos in class folders (``root/<class>/**/<video>``), as ``torchvision.datasets.ImageFolder``
    finds images: ``classes`` (sorted folder names), ``class_to_idx``, and a file's target is its
    class index. Each item is a clip of ``num_frames`` frames (see ``ClipSampler``:
    ``stride``, ``step``, ``clips``, ``clips_per_video``, ``pad_mode``).

    ``videos`` holds ``(path, class index)`` per file, ``samples`` and ``targets`` per item.
    A class folder without videos raises ``FileNotFoundError`` unless ``allow_empty``, as in
    torchvision. A file that cannot be indexed raises ``SampleError`` here, naming its position in
    ``videos`` and its path.
    """

    def __init__(self, root: str | os.PathLike, num_frames: int, stride: int = 1, step: int | None = None,
                 clips: ClipMode = "random", clips_per_video: int = 1, pad_mode: PadMode = "none",
                 extensions: tuple[str, ...] = VIDEO_EXTENSIONS, transform: Callable | None = None,
                 target_transform: Callable | None = None, allow_empty: bool = False,
                 num_threads: int | None = None) -> None:
        from torchvision.datasets.folder import find_classes, make_dataset

        self.root = os.fspath(root)
        self.extensions = tuple(e.lower() for e in extensions)
        self.classes, self.class_to_idx = find_classes(self.root)
        videos = make_dataset(self.root, self.class_to_idx, self.extensions, allow_empty=allow_empty)
        self._index_videos([(os.fspath(p), t) for p, t in videos], num_frames, stride, step, clips,
                           clips_per_video, pad_mode, transform, target_transform, num_threads)


class VideoFileList(_VideoClips):
    """Videos with targets, given as a list of paths or ``(path, label)`` pairs, or a text file of
    ``path [label]`` lines (``torchdali.datasets.FileList``'s format: relative paths are taken from
    ``root``, by default the list's folder; ``#`` lines are skipped; without a label the target is -1).
    Items are clips as in ``VideoFolder``.
    """

    def __init__(self, files: str | os.PathLike | Sequence[str | tuple[str, int]], num_frames: int,
                 stride: int = 1, step: int | None = None, clips: ClipMode = "random", clips_per_video: int = 1,
                 pad_mode: PadMode = "none", root: str | os.PathLike | None = None,
                 transform: Callable | None = None, target_transform: Callable | None = None,
                 num_threads: int | None = None) -> None:
        self._index_videos(read_file_list(files, root), num_frames, stride, step, clips,
                           clips_per_video, pad_mode, transform, target_transform, num_threads)
