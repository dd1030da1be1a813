"""Video clips through ``td.DataLoader``: one sample is one clip, its position and its transform
parameters drawn per clip from the loader's keyed generator, every frame of a clip transformed alike.

The reference for every output frame is independent of the loader: PyAV decodes the whole file
(``tests._video.decode_all``), the frames the dataset's ``clip_indices(index, u)`` names (``u``
being the loader's draw) are converted from their NV12 planes by ``reference.nv12_to_rgb``, and
torchvision.transforms.v2's functional ops apply the parameters the loader drew for the clip to the
whole ``[F, C, H, W]`` clip.
"""
from __future__ import annotations

import os
import pickle
from typing import Any

import numpy as np
import pytest
import torch

av = pytest.importorskip("av")

import torchvision.transforms.v2.functional as TF  # noqa: E402
from csrc_triton.reference import nv12_to_rgb  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

import torchdali as td  # noqa: E402
from tests import _video  # noqa: E402
from torchdali import _rng  # noqa: E402
from torchdali import transforms as T  # noqa: E402
from csrc_triton import layout  # noqa: E402
from torchdali._executor._tags import EpochStart, TagBatch, TaggedDataset, clip_uniforms  # noqa: E402
from torchdali._executor._video import ClipRunner, PrepareClips, frame_params  # noqa: E402
from torchdali._executor._wire import PackedBatch  # noqa: E402
from torchdali.transforms import compile_transforms  # noqa: E402

av.logging.set_level(av.logging.PANIC)  # the corrupt-input tests make FFmpeg log errors on purpose

SEED = 5
FRAMES = 4
SIZE = (24, 32)
_GOP = {"bf": "2", "g": "6", "x264-params": "keyint=6:min-keyint=6:scenecut=0:log-level=error"}
# (name, write_video arguments): sizes, colour formats and codecs differ from video to video
VIDEOS = [
    ("a.mp4", dict(frames=14, options=_GOP)),
    ("b.mp4", dict(frames=12, width=80, height=64, first=40, options=_GOP)),
    ("c.mkv", dict(frames=16, first=90, matrix="bt709", color_range="full", options=_GOP)),
    ("d.webm", dict(codec="libvpx-vp9", frames=10, first=7, options={"deadline": "realtime", "cpu-used": "8"})),
    ("e.mp4", dict(frames=13, width=96, height=64, first=130, matrix="bt709", options=_GOP)),
    ("f.mp4", dict(frames=11, first=200, options=_GOP)),
]


def pipeline() -> Any:
    return T.Compose([T.RandomResizedCrop(SIZE, scale=(0.3, 1.0)), T.RandomHorizontalFlip()])


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = tmp_path_factory.mktemp("clips")
    return [_video.write_video(folder / name, **kw) for name, kw in VIDEOS]


def clips(paths: list[str], **kw: Any) -> td.video.VideoFileList:
    """One random clip of FRAMES frames, stride 2, per video; a video's target is its position."""
    kw = {"num_frames": FRAMES, "stride": 2, **kw}
    return td.video.VideoFileList([(p, k) for k, p in enumerate(paths)], **kw)


def loader(ds: Any, device: str = "cpu", **kw: Any) -> td.DataLoader:
    kw = {"batch_size": 2, "transforms": pipeline(), "seed": SEED, **kw}
    return td.DataLoader(ds, device=device, **kw)


def batches(dl: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.cpu().clone(), y.cpu().clone()) for x, y in dl]


_DECODED: dict[str, list[Any]] = {}


def reference_clip(ds: Any, index: int, u: float) -> torch.Tensor:
    """uint8 ``[F, 3, H, W]``: the frames ``clip_indices(index, u)`` of PyAV's sequential decode,
    from their NV12 planes through ``reference.nv12_to_rgb``."""
    path = ds.path_of(index)
    if path not in _DECODED:
        _DECODED[path] = _video.decode_all(path)
    color = ds.info(index).color
    out = []
    for i in ds.clip_indices(index, u).tolist():
        frame = _DECODED[path][i]
        a = frame.to_ndarray(format="nv12")
        h, w = frame.height, frame.width
        y, uv = torch.from_numpy(a[:h].copy()), torch.from_numpy(a[h:].reshape(h // 2, w // 2, 2).copy())
        out.append(nv12_to_rgb(y, uv, color.conversion_matrix, color.full_range))
    return torch.stack(out).permute(0, 3, 1, 2)


def drawn(transforms: Any, sizes: list[tuple[int, int]], positions: np.ndarray) -> list[dict]:
    """Each sample's parameters as the loader draws them (epoch 0): ``{transform class: params}``."""
    plan = compile_transforms(transforms)
    rec: dict[str, dict] = {}

    def watch(t: Any, g: Any, p: dict, run: Any) -> None:
        rec[type(t).__name__] = p
        run()

    plan.params(np.array(sizes, dtype=np.int64).reshape(-1, 2), _rng.sample_keys(SEED, 0, positions), watch=watch)
    return [{name: {k: v[b] for k, v in p.items()} for name, p in rec.items()} for b in range(len(positions))]


def expected(ds: Any, indices: list[int], positions: list[int]) -> list[torch.Tensor]:
    """torchvision's ``[F, 3, *SIZE]`` clip of each sample, with the loader's draws."""
    positions_a = np.asarray(positions, dtype=np.int64)
    us = clip_uniforms(SEED, 0, positions_a)
    sizes = [(ds.info(i).height, ds.info(i).width) for i in indices]
    out = []
    for i, u, p in zip(indices, us, drawn(pipeline(), sizes, positions_a)):
        video = tv_tensors.Video(reference_clip(ds, i, float(u)))
        crop = p["RandomResizedCrop"]
        video = TF.resized_crop(video, int(crop["top"]), int(crop["left"]), int(crop["height"]), int(crop["width"]),
                                size=list(SIZE), antialias=True)
        if p["RandomHorizontalFlip"]["flip"]:
            video = TF.horizontal_flip(video)
        out.append(video.as_subclass(torch.Tensor))
    return out


def assert_close_pixels(got: torch.Tensor, want: torch.Tensor, where: str) -> None:
    """Within 1 on at least 99% of the values, within 2 everywhere (uint8 bilinear resampling)."""
    assert got.shape == want.shape, (where, got.shape, want.shape)
    diff = (got.int() - want.int()).abs()
    assert float((diff <= 1).float().mean()) >= 0.99, (where, float((diff <= 1).float().mean()))
    assert int(diff.max()) <= 2, (where, int(diff.max()))


# -- CPU path -------------------------------------------------------------------------------------------

def test_output_shape_layout_and_targets(paths: list[str]) -> None:
    ds = clips(paths)
    b = batches(loader(ds))
    assert [x.shape for x, _ in b] == [(2, FRAMES, 3, *SIZE)] * 3
    assert all(x.dtype == torch.uint8 for x, _ in b)
    assert torch.cat([y for _, y in b]).tolist() == list(range(6))
    bcfhw = batches(loader(ds, video_layout="BCFHW"))
    for (x, y), (x2, y2) in zip(b, bcfhw):
        assert x2.shape == (2, 3, FRAMES, *SIZE)
        assert torch.equal(x2, x.permute(0, 2, 1, 3, 4)) and torch.equal(y, y2)
    floats = next(iter(loader(ds, transforms=T.Compose([pipeline(), T.ToDtype(torch.float32, scale=True)]))))[0]
    assert floats.dtype == torch.float32 and torch.allclose(floats * 255, b[0][0].float(), atol=1e-3)


def test_frames_equal_torchvision_on_the_clip_the_loader_placed(paths: list[str]) -> None:
    ds = clips(paths)
    got = torch.cat([x for x, _ in batches(loader(ds))])
    for i, want in enumerate(expected(ds, list(range(len(ds))), list(range(len(ds))))):
        assert_close_pixels(got[i], want, f"sample {i}")


def test_uniform_clips_and_the_dataset_transform(paths: list[str]) -> None:
    """Uniform clips (no u); the dataset's own transform runs when the loader is given none."""
    ds = clips(paths[:2], clips="uniform", stride=1, transform=pipeline())
    assert len(ds) == 3 + 3  # 14 and 12 frames: 3 clips of 4 each
    got = torch.cat([x for x, _ in batches(td.DataLoader(ds, batch_size=4, seed=SEED, device="cpu"))])
    for i, want in enumerate(expected(ds, list(range(len(ds))), list(range(len(ds))))):
        assert_close_pixels(got[i], want, f"sample {i}")
    with pytest.raises(ValueError, match="pass only one"):
        loader(ds)


def test_every_frame_of_a_clip_gets_the_same_parameters(paths: list[str]) -> None:
    """A one-frame video padded to a clip ("edge"): its frames are one picture, so its output frames
    are equal exactly when crop, flip and colour are the same for every frame; the clips differ."""
    one = _video.write_video(os.path.join(os.path.dirname(paths[0]), "one.mp4"), frames=1, width=64, height=48,
                             first=77)
    ds = td.video.VideoFileList([one] * 8, num_frames=FRAMES, pad_mode="edge")
    transforms = T.Compose([pipeline(), T.ColorJitter(brightness=0.5, saturation=0.5, hue=0.1)])
    x = torch.cat([x for x, _ in batches(loader(ds, transforms=transforms, batch_size=4))])
    assert x.shape == (8, FRAMES, 3, *SIZE)
    assert torch.equal(x, x[:, :1].expand_as(x))
    assert len({tuple(c.flatten().tolist()) for c in x[:, 0]}) == 8


def test_clip_positions_are_seeded_and_the_same_for_any_num_workers(paths: list[str]) -> None:
    ds = clips(paths)
    g = lambda: torch.Generator().manual_seed(1)  # noqa: E731
    one = batches(loader(ds, shuffle=True, generator=g()))
    two = batches(loader(ds, shuffle=True, generator=g(), num_workers=2))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(one, two))
    other = batches(loader(ds, shuffle=True, generator=g(), seed=SEED + 1))
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(one, other))
    # where each clip starts: the loader's u for its position, through the dataset's clip_indices
    order = torch.cat([y for _, y in one]).tolist()
    want = expected(ds, order, list(range(len(ds))))
    for k, got in enumerate(torch.cat([x for x, _ in one])):
        assert_close_pixels(got, want[k], f"position {k}")


def test_resume_mid_epoch_gives_the_same_batches(paths: list[str]) -> None:
    ds = clips(paths)
    make = lambda: loader(ds, shuffle=True, generator=torch.Generator().manual_seed(2))  # noqa: E731
    full = batches(make())
    first = make()
    it = iter(first)
    next(it)
    state = first.state_dict()
    del it
    resumed = make()
    resumed.load_state_dict(state)
    rest = batches(resumed)
    assert len(rest) == len(full) - 1
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(rest, full[1:]))


def test_distributed_shards_are_disjoint_and_complete(paths: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    ds = clips(paths)
    seen = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        shard = batches(loader(ds, distributed=True, shuffle=True))
        seen.append(torch.cat([y for _, y in shard]).tolist())
        assert sum(x.shape[0] for x, _ in shard) == len(ds) // 2
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == list(range(len(ds)))


def _corrupt_packet(src: str, dst: str, frame: int) -> str:
    """A copy of ``src`` with the bytes of frame ``frame``'s packet inverted (its NAL unit lengths too: no
    decoder, hardware or software, can take it)."""
    info = td.video.probe(src)
    with av.open(src) as container:
        packets = [(p.pos, p.size) for p in container.demux(container.streams.video[0]) if p.size]
    pos, size = packets[int(info.decode_index[frame])]
    data = bytearray(open(src, "rb").read())
    for j in range(pos, pos + size):
        data[j] ^= 0xFF
    open(dst, "wb").write(data)
    return dst


@pytest.fixture
def bad(paths: list[str], tmp_path: Any) -> tuple[list[str], int]:
    """The videos with the fourth one's clip corrupt (uniform clips of stride 3: one per video, frames
    0, 3, 6, 9, so the damaged frame is in it); (paths, its index)."""
    src = _video.write_video(tmp_path / "src.mp4", frames=12, options=_GOP)
    return paths[:3] + [_corrupt_packet(src, str(tmp_path / "bad.mp4"), 3)] + paths[4:], 3


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_a_corrupt_clip_raises_sample_error_naming_it(bad: tuple[list[str], int], device: str) -> None:
    paths, index = bad
    ds = clips(paths, clips="uniform", stride=3)
    assert len(ds) == len(paths) and ds.clip_indices(index).tolist() == [0, 3, 6, 9]
    with pytest.raises(td.SampleError, match="cannot decode clip") as err:
        batches(loader(ds, device=device))
    assert err.value.index == index and err.value.path == paths[index]
    assert str(err.value).startswith(f"sample {index} ({paths[index]}): ")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_on_error_skip_replaces_a_corrupt_clip(bad: tuple[list[str], int], device: str) -> None:
    paths, index = bad
    ds = clips(paths, clips="uniform", stride=3)
    dl = loader(ds, device=device, on_error="skip")
    b = batches(dl)
    labels = torch.cat([y for _, y in b]).tolist()
    assert [x.shape[0] for x, _ in b] == [2, 2, 2] and index not in labels
    assert dl.stats().last.skipped == 1
    want = expected(ds, labels, list(range(len(ds))))
    for k, got in enumerate(torch.cat([x for x, _ in b])):
        if k != index:  # (the replacement's parameters are drawn at its spare position)
            assert_close_pixels(got, want[k], f"position {k}")


def test_a_clip_that_cannot_be_read_raises_sample_error(paths: list[str], tmp_path: Any) -> None:
    copy = str(tmp_path / "gone.mp4")
    open(copy, "wb").write(open(paths[0], "rb").read())
    ds = clips([paths[1], copy])
    os.remove(copy)
    with pytest.raises(td.SampleError, match="cannot read clip") as err:
        batches(loader(ds))
    assert err.value.index == 1 and err.value.path == copy
    with pytest.raises(td.SampleError, match=f"sample 1 \\({copy}\\): cannot read clip"):  # (from a worker)
        batches(loader(ds, num_workers=1))


def test_a_forked_child_keeps_the_decode_threads_lanes() -> None:
    """A worker forked from a process whose decode threads hold NVDEC sessions must never free them:
    their threads do not exist in the child, and freeing one waits for them for ever. The child keeps
    every lane and starts with none; the parent's are untouched."""
    from torchdali.video._nvdec import _KEPT_IN_CHILD, ClipDecoder, _Lane

    decoder = ClipDecoder("cuda:0")  # nothing runs on the device
    lane = _Lane(copy_stream=None, done=None)  # type: ignore[arg-type]
    decoder._lanes[12345] = lane
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave at once
        ok = decoder._lanes == {} and any(kept[0].get(12345) is lane for kept in _KEPT_IN_CHILD)
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1"
    os.close(r)
    assert decoder._lanes == {12345: lane}


def test_a_batch_decode_raises_a_clip_failure_only_once_every_clip_is_done() -> None:
    """The executor decodes a failed batch again, clip by clip, into a new buffer: no clip of the
    first attempt may still be writing the old one then."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from torchdali.video._nvdec import PendingClips

    gate, done = threading.Event(), []

    def slow() -> bool:
        gate.wait(5)
        done.append(True)
        return True

    def corrupt() -> bool:
        raise ValueError("corrupt NAL")

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(corrupt), pool.submit(slow)]
        threading.Timer(0.2, gate.set).start()
        with pytest.raises(ValueError, match="corrupt NAL"):
            PendingClips(torch.zeros(1), np.zeros(2, np.int64), np.zeros((2, 3), np.int64), futures).result()
        assert done == [True]


def test_refusals(paths: list[str]) -> None:
    ds = clips(paths)
    with pytest.raises(ValueError, match=r"must fix the output size.*RandomResizedCrop\(size\)"):
        loader(ds, transforms=T.Compose([T.RandomHorizontalFlip()]))
    with pytest.raises(ValueError, match="video_layout"):
        loader(ds, video_layout="TCHW")
    boxes = clips(paths, target_transform=lambda k: {"boxes": tv_tensors.BoundingBoxes(
        torch.tensor([[0.0, 0.0, 4.0, 4.0]]), format="XYXY", canvas_size=(48, 64)), "labels": torch.tensor([k])})
    with pytest.raises(ValueError, match="BoundingBoxes or a Mask"):
        batches(loader(boxes, collate_fn=lambda b: b))


def test_collate_fn_gets_each_clip(paths: list[str]) -> None:
    ds = clips(paths)
    want = batches(loader(ds))
    got = list(loader(ds, collate_fn=lambda samples: samples))
    for b, samples in enumerate(got):
        assert [s[1] for s in samples] == want[b][1].tolist()
        assert all(torch.equal(s[0], want[b][0][k]) for k, s in enumerate(samples))


# -- GPU path: what runs without a GPU ------------------------------------------------------------------

def test_gpu_loader_sends_clips_whole_and_outside_the_ring(paths: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the plan only: nothing runs
    dl = loader(clips(paths), "cuda", batch_size=32, num_workers=2)
    inner = dl._inner_loader()
    assert inner.batch_sampler.start == EpochStart() and dl._runtime.ring is None
    prepare = inner.collate_fn.collate  # (an EndRecord: the workers' records)
    assert isinstance(prepare, PrepareClips) and prepare.mode == "gpu"
    dl.close()


def _gpu_batch(ds: Any, on_error: Any = "raise") -> PackedBatch:
    """The GPU path's packed batch of every sample of ``ds`` (with two spares: positions 100, 101)."""
    tags = TagBatch(SEED, 0, 0, 0, list(range(len(ds))), [100, 101], [0, 1])
    batch = PrepareClips(compile_transforms(pipeline()), "gpu", on_error=on_error, dataset=ds)(
        [TaggedDataset(ds)[t] for t in tags])
    return pickle.loads(pickle.dumps(batch))  # as it crosses from a worker


def test_gpu_worker_packs_encoded_clips_with_one_parameter_row_each(paths: list[str]) -> None:
    ds = clips(paths)
    batch = _gpu_batch(ds)
    assert batch.images is None and batch.ring_seq < 0 and batch.blob.numel() == 0
    assert [type(c) for c in batch.clips] == [td.video.EncodedClip] * len(ds)
    positions = np.arange(len(ds))
    us = clip_uniforms(SEED, 0, positions)
    assert [c.frame_indices.tolist() for c in batch.clips] == [ds.clip_indices(i, u).tolist()
                                                               for i, u in zip(range(len(ds)), us)]
    codes = [layout.nv12_code(ds.info(i).color.conversion_matrix, ds.info(i).color.full_range)
             for i in range(len(ds))]
    assert batch.shapes.tolist() == [[ds.info(i).height, ds.info(i).width, codes[i]] for i in range(len(ds))]
    cpu = compile_transforms(pipeline()).params(batch.shapes[:, :2], _rng.sample_keys(SEED, 0, positions))
    assert torch.equal(batch.params, cpu.params)
    frames = frame_params(batch.batch_params, np.full(len(ds), FRAMES))
    assert frames.params.shape[0] == len(ds) * FRAMES
    assert torch.equal(frames.params[FRAMES: 2 * FRAMES], batch.params[1:2].expand(FRAMES, -1))


def test_frame_params_repeat_each_clips_rows_as_repeat_interleave() -> None:
    """``frame_params`` (numpy's repeat) against torch's ``repeat_interleave``: rows and program slots,
    dtypes kept, uneven and zero counts."""
    from torchdali.transforms._plan import BatchParams

    g = torch.Generator().manual_seed(5)
    params = torch.rand(4, 24, generator=g)
    slots = torch.rand(4, 2, 13, generator=g).to(torch.float64)
    counts = np.array([3, 0, 5, 1])
    got = frame_params(BatchParams(params, slots, {"k": 1}), counts)
    repeats = torch.from_numpy(counts)
    assert torch.equal(got.params, params.repeat_interleave(repeats, dim=0)) and got.params.dtype == torch.float32
    assert torch.equal(got.slots, slots.repeat_interleave(repeats, dim=0)) and got.slots.dtype == torch.float64
    assert got.batch == {"k": 1}


class _SoftwareDecoder:
    """``ClipDecoder``'s interface with FFmpeg's software decoders (what its fallback does per clip)."""

    def decode(self, clips: list, stream: Any) -> list:
        return [td.video.decode_clip_nv12(c) for c in clips]


def test_gpu_executor_replaces_a_clip_that_does_not_decode(bad: tuple[list[str], int]) -> None:
    paths, index = bad
    ds = clips(paths, clips="uniform", stride=3)
    batch = _gpu_batch(ds, on_error="skip")  # the worker does not decode: the bad clip reaches the executor
    params = batch.params.clone()
    runner = ClipRunner(compile_transforms(pipeline()), torch.device("cpu"), None,
                        PrepareClips(compile_transforms(pipeline()), "gpu", on_error="skip", dataset=ds), "BFCHW")
    runner._decoder = _SoftwareDecoder()
    assert len(runner._decode(batch, None)) == len(ds)
    assert [s.index for s in batch.skipped] == [index] and batch.indices.tolist()[index] == 0
    assert batch.positions.tolist() == [0, 1, 2, 100, 4, 5] and batch.targets.tolist() == [0, 1, 2, 0, 4, 5]
    drawn = compile_transforms(pipeline()).params(batch.shapes[index:index + 1, :2],
                                                  _rng.sample_keys(SEED, 0, np.array([100])))
    assert torch.equal(batch.params[index], drawn.params[0])
    assert torch.equal(torch.cat([batch.params[:index], batch.params[index + 1:]]),
                       torch.cat([params[:index], params[index + 1:]]))
    assert batch.clips[index].frame_indices.tolist() == ds.clip_indices(0).tolist()
    strict = ClipRunner(runner.plan, runner.device, None, PrepareClips(runner.plan, "gpu", dataset=ds), "BFCHW")
    strict._decoder = _SoftwareDecoder()
    with pytest.raises(td.SampleError, match=f"sample {index} .*cannot decode clip"):
        strict._decode(_gpu_batch(ds), None)


class _FakeDecoder:
    """``ClipDecoder.start``'s interface: the batch's buffer taken with ``take``, its decode already done
    (``futures``: one that the test may hold back)."""

    def __init__(self) -> None:
        self.buffers: list[torch.Tensor] = []
        self.futures: list[Any] = []

    def start(self, clips: list, stream: Any, take: Any = None) -> Any:
        from torchdali.video._nvdec import PendingClips

        frames = sum(c.num_frames for c in clips)
        data = take(frames * 6)
        self.buffers.append(data)
        offsets = np.arange(frames, dtype=np.int64) * 6
        shapes = np.tile(np.array([[2, 2, layout.nv12_code("bt601", False)]], dtype=np.int64), (frames, 1))
        return PendingClips(data, offsets, shapes, list(self.futures))

    def close(self) -> None:
        pass


class _Launched(Exception):
    pass


class _FakeLauncher:
    """``KernelLauncher.launch``: records the frames it was given (or raises ``_Launched`` when ``fail``)."""

    def __init__(self) -> None:
        self.fail = False
        self.frames: list[Any] = []

    def launch(self, frames: Any, params: Any, stream: Any) -> tuple[torch.Tensor, Any, Any]:
        if self.fail:
            raise _Launched()
        self.frames.append(frames)
        return torch.zeros(len(frames.offsets), 3, 2, 2), None, None


def test_frame_buffers_bound_the_decodes_started_ahead(paths: list[str]) -> None:
    """``ClipRunner.start`` takes one of two frame buffers; a third batch's decode starts only once the
    kernel of the first is queued (``process``: also where it fails) or the first is given up (``drop``,
    once its decode has ended). The buffers are reused, grown to the largest batch."""
    import threading
    from concurrent.futures import Future

    from torchdali._executor._staging import Stopped

    ds = clips(paths)
    batch = _gpu_batch(ds)
    launcher = _FakeLauncher()
    runner = ClipRunner(compile_transforms(pipeline()), torch.device("cpu"), launcher,
                        PrepareClips(compile_transforms(pipeline()), "gpu", dataset=ds), "BFCHW")
    runner._decoder = decoder = _FakeDecoder()
    first, second = runner.start(batch, None), runner.start(batch, None)
    assert (first.turn, second.turn) == (0, 1)
    stop = threading.Event()
    stop.set()
    with pytest.raises(Stopped):  # no buffer free: it waits, and a stop ends the wait
        runner.start(batch, None, stop)
    images, _, counts, _ = runner.process(batch, None, first)
    assert images.shape[:2] == (len(ds), batch.clips[0].num_frames)
    assert launcher.frames[0].buffer.data_ptr() == decoder.buffers[0].data_ptr()
    assert counts["delivered_video_frames"] == sum(c.num_frames for c in batch.clips)
    held = Future()  # the third's decode, still writing its buffer when its batch is given up (below)
    decoder.futures = [held]
    third = runner.start(batch, None, stop)  # the first's buffer, free again
    assert third.turn == 0 and decoder.buffers[2].data_ptr() == decoder.buffers[0].data_ptr()
    launcher.fail = True
    with pytest.raises(_Launched):
        runner.process(batch, None, second)
    assert runner.start(batch, None, stop).turn == 1  # given back where the launch failed
    smaller = _gpu_batch(clips(paths[:1]))
    with pytest.raises(Stopped):
        runner.start(smaller, None, stop)

    decoder.futures = []
    runner.drop(third)
    done: list[Any] = []
    waiter = threading.Thread(target=lambda: done.append(runner.start(smaller, None)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not done  # claimed, but waits for the decode given up to end
    held.set_result((True, 1))
    waiter.join(5)
    assert done[0].turn == 0 and decoder.buffers[-1].data_ptr() == decoder.buffers[0].data_ptr()
    grown = runner.frames[0].take(runner.frames[0].tensor.numel() + 1)
    assert grown.numel() == runner.frames[0].tensor.numel() and runner.frames[0].tensor.data_ptr() != \
        decoder.buffers[0].data_ptr()
    runner.close()
    assert [b.tensor for b in runner.frames] == [None, None]


# -- GPU path (NVDEC; run on a GPU machine) -----------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("video_layout", ["BFCHW", "BCFHW"])
def test_gpu_path_matches_the_cpu_path(paths: list[str], video_layout: str) -> None:
    ds = clips(paths)
    cpu = batches(loader(ds, video_layout=video_layout, shuffle=True, generator=torch.Generator().manual_seed(3)))
    dl = loader(ds, "cuda", video_layout=video_layout, shuffle=True, generator=torch.Generator().manual_seed(3),
                num_workers=2)
    gpu = batches(dl)
    for (x, y), (gx, gy) in zip(cpu, gpu):
        assert torch.equal(y, gy)
        assert_close_pixels(gx, x, "gpu vs cpu")
    last = dl.stats().last
    assert last.decoded_nvdec + last.decoded_video_cpu == len(ds)


@pytest.mark.cuda
def test_fresh_workers_start_after_nvdec_has_decoded(paths: list[str]) -> None:
    """Without persistent workers each epoch forks new ones while the decode threads hold NVDEC
    decoders (the hang this guards against: a child freeing them); every epoch gives every clip."""
    ds = clips(paths)
    dl = loader(ds, "cuda", num_workers=2, timeout=60)
    for epoch in range(3):
        labels = sorted(torch.cat([y for _, y in batches(dl)]).tolist())
        assert labels == list(range(len(ds))), epoch
    assert dl.stats().last.decoded_nvdec > 0
    dl.close()


@pytest.mark.cuda
def test_gpu_path_frames_equal_torchvision(paths: list[str]) -> None:
    ds = clips(paths)
    got = torch.cat([x for x, _ in batches(loader(ds, "cuda"))])
    for i, want in enumerate(expected(ds, list(range(len(ds))), list(range(len(ds))))):
        assert_close_pixels(got[i], want, f"sample {i}")
