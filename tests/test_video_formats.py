"""Every common pixel format decodes: 4:2:0, 4:2:2 and 4:4:4, 8 and 10 bits, in H.264, HEVC, VP9 and AV1
(those of the formats that the encoders of PyAV's FFmpeg write), on the CPU path and on the GPU path.

The reference is independent of the library's conversions: PyAV decodes each file, and each frame's
planes go through the matrix's float formula (``_video.rgb_formula``: chroma interpolated bilinearly at
H.264's default siting). 8-bit 4:2:0 frames take the NV12 route (NVDEC on the GPU path); the others
are converted by swscale at their chroma resolution and bit depth, which must keep what NV12 would
lose (the test pictures' colour edges are sharp). PyAV's plain ``to_ndarray(format="rgb24")`` is the
reference only for 4:4:4: without ``full_chroma_int`` and ``accurate_rnd`` swscale repeats chroma
samples and rounds coarsely, 8 to 17 levels from the formula on subsampled chroma.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

av = pytest.importorskip("av")

import torchdali as td  # noqa: E402
from csrc_triton import layout  # noqa: E402
from csrc_triton.reference import nv12_to_rgb  # noqa: E402
from tests import _video  # noqa: E402
from torchdali import transforms as T  # noqa: E402
from torchdali._executor._tags import TagBatch, TaggedDataset  # noqa: E402
from torchdali._executor._video import PrepareClips, kernel_frames  # noqa: E402
from torchdali.transforms import compile_transforms  # noqa: E402
from torchdali.video import as_nv12, decode_clip_nv12, decode_clip_rgb, probe, read_clip  # noqa: E402
from torchdali.video._nvdec import DecodedClips  # noqa: E402

PIX_FMTS = ("yuv420p", "yuv422p", "yuv444p", "yuv420p10le", "yuv422p10le", "yuv444p10le")
#: codec -> its encoders, the first that PyAV's FFmpeg has writes the codec's files, and their options
#: (fast settings; x264 and x265 with B-frames, so that frames come out of order)
ENCODERS: dict[str, tuple[tuple[str, dict[str, str]], ...]] = {
    "h264": (("libx264", {"bf": "2", "x264-params": "log-level=error"}),),
    "hevc": (("libx265", {"x265-params": "bframes=2:log-level=error"}),),
    "vp9": (("libvpx-vp9", {"deadline": "realtime", "cpu-used": "8"}),),
    "av1": (("libsvtav1", {"preset": "12"}), ("libaom-av1", {"cpu-used": "8"}), ("librav1e", {"speed": "10"})),
}
_EXT = {"h264": "mp4", "hevc": "mp4", "vp9": "webm", "av1": "mp4"}
FRAMES = 8
CLIP = 4  # frames per clip: two uniform clips per file, the second starting between keyframes


def _formats() -> list[tuple[str, str, str, dict[str, str]]]:
    """(codec, pixel format, encoder, options) of every format an available encoder writes."""
    out = []
    for codec, candidates in ENCODERS.items():
        for encoder, options in candidates:
            if encoder not in av.codecs_available:
                continue
            writes = {f.name for f in av.Codec(encoder, "w").video_formats or ()}
            out += [(codec, fmt, encoder, options) for fmt in PIX_FMTS if fmt in writes]
            break
    return out


FORMATS = _formats()
FORMAT_IDS = [f"{codec}-{fmt}" for codec, fmt, _, _ in FORMATS]


def _write(folder: Any, width: int, height: int) -> dict[str, str]:
    """One file per format (``FORMAT_IDS``), plus a BT.2020 one (10-bit HEVC where there is one): id -> path."""
    paths = {}
    for (codec, fmt, encoder, options), name in zip(FORMATS, FORMAT_IDS):
        paths[name] = _video.write_video(folder / f"{name}.{_EXT[codec]}", codec=encoder, frames=FRAMES,
                                         width=width, height=height, pix_fmt=fmt, options=options)
    if "libx265" in av.codecs_available:
        paths["bt2020"] = _video.write_video(folder / "bt2020.mkv", codec="libx265", frames=FRAMES, width=width,
                                             height=height, pix_fmt="yuv420p10le", matrix="bt2020",
                                             options=dict(ENCODERS["hevc"][0][1]))
    return paths


@pytest.fixture(scope="session")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return _write(tmp_path_factory.mktemp("formats"), 64, 48)


def _dataset(paths: list[str]) -> td.video.VideoFileList:
    return td.video.VideoFileList([(p, k) for k, p in enumerate(paths)], num_frames=CLIP, clips="uniform")


def _reference(ds: td.video.VideoFileList, index: int) -> np.ndarray:
    """uint8 ``[F, H, W, 3]``: the frames of clip ``index`` as PyAV decodes them, by the float formula."""
    info = ds.info(index)
    frames = _video.decode_all(ds.path_of(index))
    color = info.color
    return np.stack([_video.reference_rgb(frames[i], color.conversion_matrix,
                                          "full" if color.full_range else "limited")
                     for i in ds.clip_indices(index).tolist()])


def _assert_matches(got: torch.Tensor, want: np.ndarray, where: Any) -> None:
    """Within 2 levels everywhere, and off by any at all on under 2% of the values (measured: 0.5% at most,
    swscale's rounding near ties): rounding 10-bit samples to 8 bits, or chroma sited elsewhere, shows."""
    diff = np.abs(got.numpy().astype(np.int16) - want)
    assert diff.max() <= 2, (where, int(diff.max()))
    assert (diff > 0).mean() < 0.02, (where, float((diff > 0).mean()))


def _clips(dl: td.DataLoader) -> torch.Tensor:
    """Every clip of an epoch, uint8 ``[N, F, H, W, 3]``, in dataset order (the loader does not shuffle)."""
    return torch.cat([x.cpu() for x, _ in dl]).permute(0, 1, 3, 4, 2)


def test_every_format_is_written() -> None:
    """The formats the tests cover: at least every format H.264 has, and 4:2:0 in each codec here."""
    assert {fmt for codec, fmt, _, _ in FORMATS if codec == "h264"} == set(PIX_FMTS)
    assert {codec for codec, fmt, _, _ in FORMATS if fmt == "yuv420p"} == set(ENCODERS)


@pytest.mark.parametrize("name", FORMAT_IDS)
def test_cpu_path_decodes_every_format(small: dict[str, str], name: str) -> None:
    ds = _dataset([small[name]])
    info = ds.info(0)
    assert as_nv12(info) == (info.pix_fmt == "yuv420p")  # the route: NV12, or swscale's RGB
    dl = td.DataLoader(ds, batch_size=2, device="cpu", on_error="skip",
                       transforms=T.Compose([T.CenterCrop((info.height, info.width))]))
    got = _clips(dl)
    assert got.shape == (2, CLIP, info.height, info.width, 3)
    assert dl.stats().last.skipped == 0  # no clip replaced by another
    for i in range(len(ds)):
        want = _reference(ds, i)
        _assert_matches(got[i], want, (name, i))
        assert [_video.frame_number(f) for f in got[i].numpy()] == ds.clip_indices(i).tolist()
    if info.pix_fmt.startswith("yuv444"):  # full chroma: PyAV's own conversion agrees too
        frames = _video.decode_all(ds.path_of(0))
        plain = np.stack([frames[i].to_ndarray(format="rgb24") for i in ds.clip_indices(0).tolist()])
        assert np.abs(got[0].numpy().astype(np.int16) - plain).max() <= 2


def test_bt2020_decodes_with_its_matrix(small: dict[str, str]) -> None:
    if "bt2020" not in small:
        pytest.skip("no HEVC encoder")
    clip = read_clip(small["bt2020"], np.arange(FRAMES), probe(small["bt2020"]))
    assert clip.color.conversion_matrix == "bt2020" and not as_nv12(clip)
    frames = _video.decode_all(small["bt2020"])
    want = np.stack([_video.reference_rgb(f, "bt2020") for f in frames])
    got = decode_clip_rgb(clip)
    _assert_matches(got, want, "bt2020")
    for matrix in ("bt709", "bt601"):  # the tolerance tells the matrices apart
        other = np.stack([_video.reference_rgb(f, matrix) for f in frames])
        assert np.abs(got.numpy().astype(np.int16) - other).max() > 2, matrix


def test_gpu_worker_packs_each_clip_with_its_route(small: dict[str, str]) -> None:
    """On the GPU path the worker sends every clip on (a BT.2020 one too: no longer refused), shape
    ``(H, W, NV12 code)`` for the NV12 route and ``(H, W, 3)`` for swscale's RGB."""
    names = ["h264-yuv420p", "h264-yuv444p10le"] + (["bt2020"] if "bt2020" in small else [])
    ds = _dataset([small[n] for n in names])
    tags = TagBatch(0, 0, 0, 0, list(range(len(ds))))
    plan = compile_transforms(T.Compose([T.CenterCrop((48, 64))]))
    batch = PrepareClips(plan, "gpu", dataset=ds)([TaggedDataset(ds)[t] for t in tags])
    assert batch.skipped == []
    codes = [layout.nv12_code("bt601", False)] + [3] * (len(names) - 1)
    assert batch.shapes.tolist() == [[48, 64, c] for c in [codes[i // 2] for i in range(len(ds))]]


def _nv12_bytes(planes: Any) -> list[np.ndarray]:
    return [np.concatenate([planes.y[f].reshape(-1), planes.uv[f].reshape(-1)]) for f in range(len(planes.y))]


def test_a_batch_with_rgb_clips_reads_every_frame_as_rgb(small: dict[str, str]) -> None:
    """``kernel_frames``: a batch holding an RGB clip (swscale's) is read through the interleaved source,
    its NV12 frames converted by the NV12 source's conversion; a batch of NV12 clips stays as it is."""
    nv12_info, rgb_info = probe(small["h264-yuv420p"]), probe(small["hevc-yuv422p10le"])
    nv12_clip = read_clip(small["h264-yuv420p"], [0, 1, 5], nv12_info)
    rgb_clip = read_clip(small["hevc-yuv422p10le"], [2, 3, 4], rgb_info)
    planes = decode_clip_nv12(nv12_clip)
    rgb = decode_clip_rgb(rgb_clip)
    chunks = _nv12_bytes(planes) + [f.reshape(-1).numpy() for f in rgb]
    chunks = chunks[3:] + chunks[:3]  # the RGB clip first: offsets need not follow one layout
    sizes = np.array([len(c) for c in chunks])
    offsets = np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(np.int64)
    code = layout.nv12_code("bt601", False)
    shapes = np.array([[48, 64, 3]] * 3 + [[48, 64, code]] * 3, dtype=np.int64)
    decoded = DecodedClips(torch.from_numpy(np.concatenate(chunks)), offsets, shapes, 1, 1,
                           np.array([True] * 3 + [False] * 3))
    out = kernel_frames(decoded)
    assert out.source == layout.SOURCE_INTERLEAVED and out.shapes.tolist() == [[48, 64, 3]] * 6
    frames = [out.buffer[o: o + 48 * 64 * 3].view(48, 64, 3) for o in out.offsets.tolist()]
    for f in range(3):
        assert torch.equal(frames[f], rgb[f])
        want = nv12_to_rgb(torch.from_numpy(planes.y[f]), torch.from_numpy(planes.uv[f]), "bt601", False)
        assert torch.equal(frames[3 + f], want)
    alone = DecodedClips(decoded.data, offsets[3:], shapes[3:], 1, 0, np.zeros(3, dtype=bool))
    kept = kernel_frames(alone)
    assert kept.source == layout.SOURCE_NV12 and kept.buffer is decoded.data


# -- GPU path (run on a GPU machine) -------------------------------------------------------------------

@pytest.mark.cuda
def test_gpu_path_decodes_every_format_and_counts_the_cpu_fallback(tmp_path_factory: pytest.TempPathFactory) -> None:
    """192 x 144: large enough for NVDEC in every codec (HEVC's smallest frame is 144 x 144). Batches of
    4 clips mix the NV12 route with swscale's RGB (files in ``FORMAT_IDS`` order, two clips each). The
    CPU fallback counts exactly the clips of streams NVDEC cannot take: every format but 8-bit 4:2:0,
    decided up front, and a codec this GPU's NVDEC lacks (AV1 on some)."""
    from torchdali.video._nvdec import ClipDecoder

    paths = _write(tmp_path_factory.mktemp("formats_gpu"), 192, 144)
    names = list(paths)
    decoder, stream = ClipDecoder("cuda"), torch.cuda.Stream()
    nvdec = [n for n in names if as_nv12(probe(paths[n]))
             and decoder.decode([read_clip(paths[n], [0], probe(paths[n]))], stream).nvdec == 1]
    decoder.close()
    assert {n.split("-")[0] for n in nvdec} >= {"h264", "hevc", "vp9"}, nvdec
    assert all(n.endswith("-yuv420p") for n in nvdec)

    ds = _dataset([paths[n] for n in names])
    dl = td.DataLoader(ds, batch_size=4, device="cuda", num_workers=2, on_error="skip",
                       transforms=T.Compose([T.CenterCrop((144, 192))]))
    got = _clips(dl)
    assert got.shape == (len(ds), CLIP, 144, 192, 3)
    for i in range(len(ds)):
        _assert_matches(got[i], _reference(ds, i), (names[i // 2], i))
    last = dl.stats().last
    assert last.skipped == 0
    assert (last.decoded_nvdec, last.decoded_video_cpu) == (2 * len(nvdec), len(ds) - 2 * len(nvdec))
    dl.close()
