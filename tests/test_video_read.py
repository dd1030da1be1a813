"""Video files: probe, read_clip, CPU decode and the video datasets, against PyAV's sequential decode.

The reference for every frame is PyAV decoding the whole file from its first packet
(``tests._video.decode_all``), which shares none of read_clip's seeking, packet
selection or standalone decoder. The same FFmpeg decoder gives the same bits, so
frames must be equal, not close.
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch

av = pytest.importorskip("av")

from tests import _video  # noqa: E402
from torchdali.errors import SampleError  # noqa: E402
from torchdali.video import (  # noqa: E402
    MISSING_FRAME, ClipDecodeError, ColorInfo, EncodedClip, UnsupportedVideoError, VideoFileList, VideoFolder,
    clip_span, decode_clip_nv12, decode_clip_rgb, probe, read_clip,
)

av.logging.set_level(av.logging.PANIC)  # the corrupt-input tests make FFmpeg log errors on purpose

VIDEO_NAMES = list(_video.VIDEOS)
CODECS = {"libx264": "h264", "libx265": "hevc", "libvpx-vp9": "vp9", "libsvtav1": "av1"}


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return _video.write_all(tmp_path_factory.mktemp("videos"))


_REFERENCE: dict[str, list[Any]] = {}


def reference(path: str) -> list[Any]:
    """Sequentially decoded frames of ``path`` (PyAV ``VideoFrame``), cached per file."""
    if path not in _REFERENCE:
        _REFERENCE[path] = _video.decode_all(path)
    return _REFERENCE[path]


def reference_nv12(frame: Any) -> tuple[np.ndarray, np.ndarray]:
    """PyAV's own NV12 conversion of a frame, as ``(y [H, W], uv [H/2, W/2, 2])``."""
    a = frame.to_ndarray(format="nv12")
    h, w = frame.height, frame.width
    return a[:h], a[h:].reshape(h // 2, w // 2, 2)


def assert_rgb_of(rgb: torch.Tensor, frame: Any, color: ColorInfo, where: Any) -> None:
    """``rgb`` (uint8 ``[H, W, 3]``) is ``frame`` converted with ``color``: within one level of the
    float formula (``_video.rgb_formula``; swscale's fixed point rounds near ties either way)."""
    want = _video.reference_rgb(frame, color.conversion_matrix, "full" if color.full_range else "limited")
    diff = np.abs(rgb.numpy().astype(np.int16) - want)
    assert diff.max() <= 1, (where, int(diff.max()))


# --------------------------------------------------------------------------- #
# probe
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("name", VIDEO_NAMES)
def test_probe_matches_sequential_decode(videos: dict[str, str], name: str) -> None:
    spec = _video.VIDEOS[name]
    info = probe(videos[name])
    frames = reference(videos[name])
    assert info.num_frames == len(frames) == spec["frames"]
    assert info.pts.tolist() == [f.pts for f in frames]
    assert info.codec == CODECS[spec["codec"]]
    assert (info.width, info.height) == (spec.get("width", 64), spec.get("height", 48))
    assert (info.width, info.height) == (frames[0].width, frames[0].height)
    # decode order is a permutation of the frames, consistent with the packet arrays
    assert sorted(info.decode_index.tolist()) == list(range(info.num_frames))
    assert np.array_equal(info.packet_pts[info.decode_index], info.pts)
    assert np.array_equal(info.packet_key[info.decode_index], info.keyframe)
    assert info.keyframe[0] and info.packet_key[0]
    assert info.color == ColorInfo(spec.get("matrix", "bt601"), spec.get("color_range", "limited"),
                                   primaries=1 if spec.get("matrix") == "bt709" else 6,
                                   transfer=1 if spec.get("matrix") == "bt709" else 6)
    if "pts_ms" in spec:  # variable frame rate: timestamps are the encoder's, not a multiple of a frame duration
        assert [Fraction(int(p)) * info.time_base for p in info.pts] == [Fraction(t, 1000) for t in spec["pts_ms"]]
        assert len(set(np.diff(info.pts).tolist())) > 5


def test_probe_sees_b_frames_and_open_gops(videos: dict[str, str]) -> None:
    """The test videos have what the packet selection must handle: reordered frames, and (open GOP)
    leading pictures, packets after a keyframe in decode order that precede it in presentation order."""
    for name in ("h264_bframes.mp4", "hevc.mp4", "h264_vfr.mp4"):
        info = probe(videos[name])
        assert not np.array_equal(info.decode_index, np.arange(info.num_frames)), name
    for name in ("h264_open_gop.mkv", "hevc_odd.mkv"):
        info = probe(videos[name])
        keys = np.flatnonzero(info.packet_key)
        leading = [k for k in keys[1:] if (info.packet_pts[k + 1:] < info.packet_pts[k]).any()]
        assert leading, name


# --------------------------------------------------------------------------- #
# read_clip + decode against the sequential decode
# --------------------------------------------------------------------------- #

def clip_windows(num_frames: int) -> list[np.ndarray]:
    """Clips starting at every frame: lengths 1 to 3 with stride 1, and stride 3, each as far as it fits."""
    out = []
    for start in range(num_frames):
        for length, stride in ((1, 1), (2, 1), (3, 1), (3, 3)):
            indices = start + np.arange(length) * stride
            if indices[-1] < num_frames:
                out.append(indices)
    return out


@pytest.mark.parametrize("name", VIDEO_NAMES)
def test_clip_frames_equal_sequential_decode(videos: dict[str, str], name: str) -> None:
    path = videos[name]
    info = probe(path)
    frames = reference(path)
    ref_nv12 = [reference_nv12(f) for f in frames]
    for indices in clip_windows(info.num_frames):
        clip = read_clip(path, indices, info)
        assert clip.key[0], "a clip's packets start at a keyframe"
        assert clip.frame_indices.tolist() == indices.tolist()
        y, uv, color = decode_clip_nv12(clip)
        assert color == info.color
        assert y.shape == (len(indices), info.height, info.width) and y.dtype == np.uint8
        assert uv.shape == (len(indices), info.height // 2, info.width // 2, 2) and uv.dtype == np.uint8
        for k, i in enumerate(indices.tolist()):
            assert np.array_equal(y[k], ref_nv12[i][0]), (name, indices.tolist(), i)
            assert np.array_equal(uv[k], ref_nv12[i][1]), (name, indices.tolist(), i)
    # RGB on a few clips: swscale with the stream's colour tags, and the frames are the ones asked for
    for indices in clip_windows(info.num_frames)[::7]:
        rgb = decode_clip_rgb(read_clip(path, indices, info))
        assert rgb.shape == (len(indices), info.height, info.width, 3) and rgb.dtype == torch.uint8
        for k, i in enumerate(indices.tolist()):
            assert_rgb_of(rgb[k], frames[i], info.color, (name, i))
            assert _video.frame_number(rgb[k].numpy()) == i


def test_clip_in_any_order_with_repeats(videos: dict[str, str]) -> None:
    path = videos["h264_open_gop.mkv"]
    info = probe(path)
    frames = reference(path)
    indices = [20, 3, 3, 29, 7, 20]
    clip = read_clip(path, indices, info)
    assert clip.frame_pts.tolist() == [int(info.pts[i]) for i in indices]
    rgb = decode_clip_rgb(clip)
    for k, i in enumerate(indices):
        assert_rgb_of(rgb[k], frames[i], info.color, i)
        assert _video.frame_number(rgb[k].numpy()) == i


def test_leading_picture_starts_before_its_keyframe(videos: dict[str, str]) -> None:
    """An open GOP's leading picture needs the previous GOP: its clip starts at an earlier keyframe."""
    path = videos["h264_open_gop.mkv"]
    info = probe(path)
    keys = np.flatnonzero(info.packet_key)
    k = next(k for k in keys[1:] if (info.packet_pts[k + 1:] < info.packet_pts[k]).any())
    leading_pts = int(info.packet_pts[k + 1:][info.packet_pts[k + 1:] < info.packet_pts[k]].min())
    frame = int(np.searchsorted(info.pts, leading_pts))
    clip = read_clip(path, [frame], info)
    assert clip.pts[0] < info.packet_pts[k]
    assert np.array_equal(decode_clip_nv12(clip).y[0], reference_nv12(reference(path)[frame])[0])
    key_frame = int(np.searchsorted(info.pts, info.packet_pts[k]))
    assert read_clip(path, [key_frame], info).pts[0] == info.packet_pts[k]


def test_a_clip_without_its_keyframe_does_not_decode_to_the_reference(videos: dict[str, str]) -> None:
    """The comparison above can fail: drop the keyframe that starts a clip and the frames are lost."""
    path = videos["h264_bframes.mp4"]
    info = probe(path)
    clip = read_clip(path, [9, 10], info)
    assert clip.num_packets > 2
    start = int(clip.offsets[1])
    cut = dataclasses.replace(clip, data=clip.data[start:], offsets=clip.offsets[1:] - start, pts=clip.pts[1:],
                              dts=clip.dts[1:], key=clip.key[1:])
    with pytest.raises(ClipDecodeError, match="no frame for pts"):
        decode_clip_nv12(cut)


def test_read_clip_reads_only_the_gop(videos: dict[str, str]) -> None:
    path = videos["vp9.webm"]  # no reordering: a clip is its keyframe up to its last frame
    info = probe(path)
    clip = read_clip(path, [12, 13], info)
    assert clip.pts.tolist() == info.pts[8:14].tolist()


@pytest.mark.parametrize("name", VIDEO_NAMES)
def test_packets_read_from_the_file_equal_the_demuxers(videos: dict[str, str], name: str) -> None:
    """mp4/mov: ``read_clip`` reads a clip's packets where ``probe`` found them, with no demuxer; they
    must be the demuxer's bytes. Other containers keep the demuxer."""
    from torchdali.video._container import _demux_from, _read_direct

    path = videos[name]
    info = probe(path)
    assert (info.packet_pos is not None) == name.endswith(".mp4"), name
    if info.packet_pos is None:
        return
    P = len(info.packet_pts)
    for start, stop in [(0, P - 1), (0, 0), (P // 3, P // 2), (P - 1, P - 1)]:
        assert _read_direct(path, info, start, stop) == _demux_from(path, info, start, stop, seek=False), (start, stop)


def test_a_file_changed_since_probing_is_demuxed_again(videos: dict[str, str], tmp_path: Any) -> None:
    """A rewritten mp4 (its size or time changed) is not read at the probed places: the demuxer's
    checks name what changed."""
    from torchdali.video._container import _read_direct

    path = _copy(videos["h264_bframes.mp4"], tmp_path / "v.mp4")
    info = probe(path)
    assert _read_direct(path, info, 0, 3) is not None
    data = open(path, "rb").read()
    open(path, "wb").write(data)  # the same bytes, written again: a new modification time
    os.utime(path, ns=(info.file_stamp[1] + 10 ** 9, info.file_stamp[1] + 10 ** 9))
    assert _read_direct(path, info, 0, 3) is None
    assert read_clip(path, [0, 1], info).num_packets > 0  # the demuxer finds the same packets
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises((ClipDecodeError, av.FFmpegError)):
        read_clip(path, [info.num_frames - 1], info)


def test_padding_frames(videos: dict[str, str]) -> None:
    path = videos["h264_odd.mp4"]
    info = probe(path)
    frames = reference(path)
    clip = read_clip(path, [10, 11, MISSING_FRAME, MISSING_FRAME], info)
    assert clip.missing.tolist() == [False, False, True, True]
    rgb = decode_clip_rgb(clip)
    assert rgb[2:].count_nonzero() == 0
    assert_rgb_of(rgb[1], frames[11], info.color, 11)
    y, uv, _ = decode_clip_nv12(clip)
    assert (y[2:] == 16).all() and (uv[2:] == 128).all()  # black, limited range
    empty = read_clip(path, [MISSING_FRAME], info)
    assert empty.num_packets == 0 and decode_clip_rgb(empty).count_nonzero() == 0
    with pytest.raises(IndexError):
        read_clip(path, [info.num_frames], info)


def test_encoded_clip_pickles(videos: dict[str, str]) -> None:
    path = videos["hevc.mp4"]
    info = probe(path)
    clip = read_clip(path, [5, 6, 7, 8], info)
    blob = pickle.dumps(clip, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(blob) < clip.data.nbytes + len(clip.extradata) + 2048
    back = pickle.loads(blob)
    assert isinstance(back, EncodedClip)
    assert np.array_equal(back.data, clip.data) and back.color == clip.color and back.codec == "hevc"
    a, b = decode_clip_nv12(clip), decode_clip_nv12(back)
    assert np.array_equal(a.y, b.y) and np.array_equal(a.uv, b.uv)
    assert b"".join(bytes(clip.packet(j)) for j in range(clip.num_packets)) == clip.data.tobytes()


@pytest.mark.parametrize("name", ["h264_bt709_full.mp4", "h264_bt709_limited.mp4", "h264_bt601_full.mp4",
                                  "h264_bframes.mp4", "vp9_bt709_full.webm"])
def test_rgb_uses_the_stream_colour_tags(videos: dict[str, str], name: str) -> None:
    """Decoded RGB is close to the pictures that were encoded; the other matrix or range is far off."""
    path = videos[name]
    info = probe(path)
    clip = read_clip(path, np.arange(info.num_frames), info)
    source = np.stack([_video.frame_rgb(i, info.width, info.height) for i in range(info.num_frames)])

    def error(c: EncodedClip) -> float:
        return float(np.abs(decode_clip_rgb(c).numpy().astype(np.int16) - source).mean())

    assert error(clip) < 3.5  # 1.5 to 2.6: lossy coding, and the 4:2:0 chroma interpolated across the blocks' edges
    other_matrix = "bt601" if info.color.matrix == "bt709" else "bt709"
    assert error(dataclasses.replace(clip, color=dataclasses.replace(info.color, matrix=other_matrix))) > 5
    if not info.pix_fmt.startswith("yuvj"):  # swscale takes FFmpeg's yuvj formats as full range whatever it is told
        other_range = "limited" if info.color.range == "full" else "full"
        assert error(dataclasses.replace(clip, color=dataclasses.replace(info.color, range=other_range))) > 8


def test_avi(tmp_path: Any) -> None:
    """AVI has no presentation timestamps: MPEG-4 Part 2 (B-frames packed in order) reads exactly; H.264
    with B-frames, whose order the demuxer cannot know, is refused."""
    path = _video.write_video(tmp_path / "mpeg4.avi", codec="mpeg4", frames=16, options={"g": "6", "bf": "2"})
    info = probe(path)
    frames = reference(path)
    assert info.codec == "mpeg4" and info.num_frames == len(frames) == 16
    for indices in clip_windows(info.num_frames):
        y, uv, _ = decode_clip_nv12(read_clip(path, indices, info))
        for k, i in enumerate(indices.tolist()):
            ref_y, ref_uv = reference_nv12(frames[i])
            assert np.array_equal(y[k], ref_y) and np.array_equal(uv[k], ref_uv)
    h264 = _video.write_video(tmp_path / "h264.avi", codec="libx264", frames=12, options={"bf": "2", "g": "6"})
    with pytest.raises(UnsupportedVideoError, match="AVI stores no presentation timestamps"):
        probe(h264)


# --------------------------------------------------------------------------- #
# datasets
# --------------------------------------------------------------------------- #

@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A class folder of a few videos: cats (2 files), dogs (2, one nested), and a file that is not a video."""
    root = tmp_path_factory.mktemp("folder")
    for cls, name, kwargs in [
        ("cats", "a.mp4", dict(frames=20)),
        ("cats", "b.mkv", dict(frames=9, first=100)),
        ("dogs", "c.webm", dict(codec="libvpx-vp9", frames=12, options={"deadline": "realtime", "cpu-used": "8"})),
        ("dogs/deep", "d.MP4", dict(frames=7)),
    ]:
        os.makedirs(root / cls, exist_ok=True)
        _video.write_video(root / cls / name, **kwargs)
    (root / "dogs" / "notes.txt").write_text("not a video")
    return str(root)


def test_video_folder_uniform(folder: str) -> None:
    ds = VideoFolder(folder, num_frames=3, stride=2, clips="uniform")
    assert ds.classes == ["cats", "dogs"] and ds.class_to_idx == {"cats": 0, "dogs": 1}
    names = [os.path.relpath(p, folder) for p, _ in ds.videos]
    assert names == ["cats/a.mp4", "cats/b.mkv", "dogs/c.webm", "dogs/deep/d.MP4"]
    counts = {"a.mp4": 20, "b.mkv": 9, "c.webm": 12, "d.MP4": 7}
    # span 5, step 6: DALI's starts per video
    expected = [(n, s) for n in names for s in range(0, counts[os.path.basename(n)] - clip_span(3, 2) + 1, 6)]
    assert len(ds) == len(expected) == 3 + 1 + 2 + 1
    assert [os.path.relpath(ds.path_of(i), folder) for i in range(len(ds))] == [n for n, _ in expected]
    assert ds.targets == [0, 0, 0, 0, 1, 1, 1]
    assert ds.samples[4] == (os.path.join(folder, "dogs", "c.webm"), 1)
    assert ds.info(1).num_frames == 20
    assert ds.clip_indices(2).tolist() == [12, 14, 16]
    frames, target = ds[3]  # b.mkv, whose frames are numbered from 100
    assert target == 0 and frames.shape == (3, 3, 48, 64) and frames.dtype == torch.uint8
    assert [_video.frame_number(f.permute(1, 2, 0).numpy()) for f in frames] == [100, 102, 104]
    clip, target = ds.read(5)
    assert target == 1 and clip.frame_indices.tolist() == [6, 8, 10]
    with pytest.raises(IndexError):
        ds.path_of(len(ds))


def test_video_folder_random_clips(folder: str) -> None:
    ds = VideoFolder(folder, num_frames=4, clips="random", clips_per_video=3, extensions=(".mp4",),
                     transform=lambda v: v.float() / 255)
    assert len(ds) == 6 and [os.path.basename(p) for p, _ in ds.samples] == ["a.mp4"] * 3 + ["d.MP4"] * 3
    assert ds.clip_indices(0, 0.0).tolist() == [0, 1, 2, 3]
    assert ds.clip_indices(1, 0.999).tolist() == [16, 17, 18, 19]
    torch.manual_seed(0)
    first = [ds[i][0] for i in range(len(ds))]
    torch.manual_seed(0)
    again = [ds[i][0] for i in range(len(ds))]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert first[0].dtype == torch.float32 and first[0].shape == (4, 3, 48, 64)
    for clip in first:
        numbers = [_video.frame_number((f.permute(1, 2, 0) * 255).round().byte().numpy()) for f in clip]
        assert numbers == list(range(numbers[0], numbers[0] + 4))


def test_video_folder_under_torch_dataloader(folder: str) -> None:
    with pytest.raises(FileNotFoundError):  # no .webm among the cats
        VideoFolder(folder, num_frames=2, extensions=(".webm",))
    ds = VideoFolder(folder, num_frames=2, clips="uniform", step=5, extensions=(".webm",), allow_empty=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=1)
    batches = list(loader)
    assert [b[0].shape for b in batches] == [(2, 2, 3, 48, 64), (1, 2, 3, 48, 64)]  # starts 0, 5, 10 of 12 frames
    assert [b[1].tolist() for b in batches] == [[1, 1], [1]]
    first = batches[0][0][1]  # the clip starting at frame 5
    assert [_video.frame_number(f.permute(1, 2, 0).numpy()) for f in first] == [5, 6]


def test_video_file_list(folder: str, tmp_path: Any) -> None:
    a, b = os.path.join(folder, "cats", "a.mp4"), os.path.join(folder, "dogs", "c.webm")
    ds = VideoFileList([a, (b, 7)], num_frames=5, clips="uniform")
    assert ds.videos == [(a, -1), (b, 7)] and len(ds) == 4 + 2 and ds.targets == [-1] * 4 + [7] * 2
    listing = tmp_path / "list.txt"
    listing.write_text(f"# clips\n{os.path.relpath(a, tmp_path)} 3\n\n{b}\n")
    ds = VideoFileList(str(listing), num_frames=5, clips="random", clips_per_video=2)
    assert ds.videos == [(os.path.join(str(tmp_path), os.path.relpath(a, tmp_path)), 3), (b, -1)]
    assert len(ds) == 4 and ds.targets == [3, 3, -1, -1]
    assert ds.path_of(2) == b
    frames, target = ds[3]
    assert target == -1 and frames.shape == (5, 3, 48, 64)


# --------------------------------------------------------------------------- #
# bad input
# --------------------------------------------------------------------------- #

def _copy(src: str, dst: Any) -> str:
    shutil.copyfile(src, dst)
    return str(dst)


def _corrupt_packet(src: str, dst: Any, frame: int) -> str:
    """Copy ``src`` with the bytes of frame ``frame``'s packet inverted from a third of the way in."""
    info = probe(src)
    with av.open(src) as container:
        stream = container.streams.video[0]
        packets = [(p.pos, p.size) for p in container.demux(stream) if p.size]
    pos, size = packets[int(info.decode_index[frame])]
    data = bytearray(open(src, "rb").read())
    for j in range(pos + size // 3, pos + size, 2):
        data[j] ^= 0xFF
    open(dst, "wb").write(data)
    return str(dst)


def _raises_for(err: pytest.ExceptionInfo, index: int, path: str) -> None:
    assert isinstance(err.value, SampleError)
    assert err.value.index == index and err.value.path == path
    assert str(err.value).startswith(f"sample {index} ({path}): ")


def test_unreadable_file_fails_at_construction(videos: dict[str, str], tmp_path: Any) -> None:
    good = videos["vp9.webm"]
    truncated = tmp_path / "truncated.mp4"  # mp4 keeps its index at the end: nothing left to find
    truncated.write_bytes(open(videos["h264_bframes.mp4"], "rb").read()[:2000])
    empty = tmp_path / "empty.mkv"
    empty.write_bytes(b"")
    unknown = tmp_path / "unknown_codec.mp4"  # the sample entry's codec renamed: no decoder for it
    unknown.write_bytes(open(videos["h264_bframes.mp4"], "rb").read().replace(b"avc1", b"zzzz"))
    with av.open(str(tmp_path / "audio.mkv"), "w") as out:  # no video stream at all
        stream = out.add_stream("flac", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 800), np.int16), format="s16", layout="mono")
        frame.sample_rate, frame.pts = 8000, 0
        for packet in [*stream.encode(frame), *stream.encode()]:
            out.mux(packet)
    for bad, reason in [(truncated, "no video stream"), (empty, "cannot index video"), (unknown, "no decoder"),
                        (tmp_path / "audio.mkv", "no video stream"), (tmp_path / "missing.mp4", "cannot index video")]:
        with pytest.raises(SampleError, match=reason) as err:
            VideoFileList([good, str(bad)], num_frames=2)
        _raises_for(err, 1, str(bad))
    with pytest.raises(UnsupportedVideoError):
        probe(unknown)


def test_file_truncated_after_probing(videos: dict[str, str], tmp_path: Any) -> None:
    path = _copy(videos["h264_open_gop.mkv"], tmp_path / "v.mkv")
    ds = VideoFileList([videos["vp9.webm"], path], num_frames=4, clips="uniform")
    index = len(ds) - 1
    assert ds.path_of(index) == path
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(SampleError, match="cannot read clip.*ends before packet") as err:
        ds.read(index)
    _raises_for(err, index, path)
    ds.read(0)  # a clip of the part that is left still reads
    open(path, "wb").write(b"")
    with pytest.raises(SampleError) as err:
        ds[index]
    _raises_for(err, index, path)


@pytest.mark.parametrize("name,frame,outcome", [
    ("h264_bframes.mp4", 12, "error"),  # FFmpeg's H.264 decoder rejects the packet
    ("vp9.webm", 10, "error"),
    ("hevc.mp4", 10, "lost"),  # the HEVC decoder drops the damaged frames
    ("h264_open_gop.mkv", 24, "concealed"),  # the H.264 decoder repairs the keyframe and carries on
])
def test_corrupt_packet(videos: dict[str, str], tmp_path: Any, name: str, frame: int, outcome: str) -> None:
    """Flipped bytes inside one packet: an error naming the sample, or (where FFmpeg conceals the damage)
    the right number of frames, the same every time."""
    path = _corrupt_packet(videos[name], tmp_path / name, frame)
    ds = VideoFileList([videos["vp9.webm"], path], num_frames=6, step=6, clips="uniform")
    index = next(i for i in range(len(ds)) if ds.path_of(i) == path and frame in ds.clip_indices(i).tolist())
    if outcome == "concealed":
        first, second = ds[index][0], ds[index][0]
        assert first.shape == (6, 3, ds.info(index).height, ds.info(index).width)
        assert torch.equal(first, second)
        return
    with pytest.raises(SampleError, match="cannot decode clip") as err:
        ds[index]
    _raises_for(err, index, path)
    assert ("no frame for pts" in str(err.value)) == (outcome == "lost")
    with pytest.raises(ClipDecodeError):
        decode_clip_nv12(ds.read(index)[0])


def test_short_video(videos: dict[str, str]) -> None:
    path = videos["hevc_odd.mkv"]  # 10 frames
    ds = VideoFileList([videos["vp9.webm"], path], num_frames=12, clips="uniform")
    assert len(ds) == 2  # vp9.webm: 20 frames, one clip; hevc_odd: too short, one sample that fails
    with pytest.raises(SampleError, match="video too short") as err:
        ds[1]
    _raises_for(err, 1, path)
    edge = VideoFileList([path], num_frames=12, clips="random", pad_mode="edge")
    frames, _ = edge[0]
    numbers = [_video.frame_number(f.permute(1, 2, 0).numpy()) for f in frames]
    assert numbers == list(range(10)) + [9, 9]
    constant = VideoFileList([path], num_frames=12, pad_mode="constant")
    frames, _ = constant[0]
    assert frames[10:].count_nonzero() == 0 and frames[9].count_nonzero() > 0
