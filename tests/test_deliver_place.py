"""Where delivery runs (``torchdali/_executor/_deliver.py``): our batch transforms and the user's
collate_fn or batch transform each once per batch, at the stage the policy names (the worker on the
CPU path; the executor thread for ours and the loop's thread for the user's on the GPU path), with
the global generators seeded from the batch's key; images and video clips alike.

References: torch's DataLoader with torchvision's ``center_crop`` (the pipeline is an exact crop),
and ``torch.Generator().manual_seed`` of the batch's key for the user's draws.
"""
from __future__ import annotations

import os
import threading
import uuid
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from torch.utils.data import DataLoader as TorchLoader, default_collate

import torchdali as td
from csrc_triton import layout
from torchdali import _rng
from torchdali import transforms as T
from torchdali._executor._deliver import Delivery, Pending, Stage
from torchdali._executor._wire import PackedBatch
from torchdali.transforms import _ragged

from ._helpers import make_folder

N, BATCH, CROP, SEED = 10, 4, 8, 3


class Images(torch.utils.data.Dataset):
    """Decoded HWC uint8 images of varied sizes; target ``i % 5``."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        g = np.random.default_rng(i)
        return g.integers(0, 256, (12 + i % 5, 15 + i % 3, 3), dtype=np.uint8), i % 5


class Cropped(Images):
    """What the loader must give for ``Images``: torchvision's center crop of each image."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        img, target = super().__getitem__(i)
        return TF.center_crop(torch.from_numpy(img).permute(2, 0, 1), [CROP, CROP]), target


def _loader(num_workers: int = 0, **kw: Any) -> td.DataLoader:
    return td.DataLoader(Images(), batch_size=BATCH, num_workers=num_workers, device="cpu", seed=SEED,
                         transforms=T.Compose([T.CenterCrop(CROP)]), **kw)


def _reference() -> list:
    return list(TorchLoader(Cropped(), batch_size=BATCH))


def _seeded_draw(loader: td.DataLoader, n: int) -> torch.Tensor:
    """``torch.rand(())`` from torch's generator seeded as the loader seeds it for batch ``n`` of epoch 0."""
    key = _rng.batch_key(loader._effective_seed(), 0, BATCH * n)
    return torch.rand((), generator=torch.Generator().manual_seed(key & 0x7FFFFFFFFFFFFFFF))


# -- the CPU path, through the loader ---------------------------------------------------------------

def test_cpu_path_collate_fn_runs_once_per_batch_in_a_worker(tmp_path: Any) -> None:
    def collate(samples: list) -> tuple:
        (tmp_path / f"{os.getpid()}-{uuid.uuid4().hex}").touch()  # one file per call, from any process
        images, targets = default_collate(samples)
        return images, targets, os.getpid()

    got = list(_loader(num_workers=2, collate_fn=collate))
    want = _reference()
    assert len(got) == len(want) == len(list(tmp_path.iterdir()))
    for (images, targets, pid), (want_images, want_targets) in zip(got, want):
        assert pid != os.getpid()
        assert torch.equal(images, want_images) and torch.equal(targets, want_targets)


def test_cpu_path_users_batch_transform_runs_seeded_in_a_worker() -> None:
    def transform(images: torch.Tensor, targets: torch.Tensor) -> tuple:
        return images.flip(-1), targets, torch.rand(()), os.getpid()

    loader = _loader(num_workers=2, batch_transforms=transform)
    got = list(loader)
    want = _reference()
    assert len(got) == len(want)
    for n, ((images, targets, draw, pid), (want_images, want_targets)) in enumerate(zip(got, want)):
        assert pid != os.getpid()
        assert torch.equal(images, want_images.flip(-1)) and torch.equal(targets, want_targets)
        assert torch.equal(draw, _seeded_draw(loader, n))


def test_cpu_path_without_workers_runs_them_in_the_loops_thread() -> None:
    seen: list[int] = []

    def collate(samples: list) -> Any:
        seen.append(threading.get_ident())
        return default_collate(samples)

    got = list(_loader(collate_fn=collate))
    assert seen == [threading.get_ident()] * len(got) and len(got) == len(_reference())


# -- each stage's part, on one batch ----------------------------------------------------------------

class AddOne(T.BatchTransform):
    """Ours (a ``BatchTransform``): images + 1, counting its calls by stage."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.stage: Any = None

    def transform(self, inputs: Any, params: dict) -> Any:
        self.calls.append(self.stage)
        images, targets = inputs
        return images + 1, targets


def _packed(b: int, has_target: bool = True) -> PackedBatch:
    return PackedBatch(seed=SEED, epoch=0, indices=np.arange(b), positions=np.arange(b), paths=[None] * b,
                       params=torch.zeros(b, 1), targets=None, has_target=has_target, first_position=8)


def _run_stages(d: Delivery, stages: list[Stage], images: Any, targets: Any, device: Any = None,
                recorder: Any = None) -> tuple[Any, list[Stage]]:
    """The batch through ``stages`` as the loader passes them (``recorder.stage``: the stage being
    called); returns what the loop gets and the stages after which the batch was still pending."""
    batch, pending = _packed(len(targets)), []
    out: Any = Pending(images, targets)
    for stage in stages:
        if recorder is not None:
            recorder.stage = stage
        out = d.deliver(batch, out.images, out.targets, stage, device)
        if not isinstance(out, Pending):
            return out, pending
        pending.append(stage)
    raise AssertionError(f"no stage of {stages} finished the batch")


CPU_STAGES = [Stage.WORKER, Stage.LOOP]
GPU_STAGES = [Stage.EXECUTOR, Stage.LOOP]


@pytest.mark.parametrize("path", ["cpu", "gpu"])
def test_ours_runs_once_where_the_policy_puts_it(path: str) -> None:
    ours = AddOne()
    images = torch.rand(3, 3, 4, 5)
    # a device is named, never touched: the targets are no tensor to move
    stages, device = (CPU_STAGES, None) if path == "cpu" else (GPU_STAGES, torch.device("cuda", 0))
    (got, targets), pending = _run_stages(Delivery(batch_transforms=ours), stages, images, [0, 1, 2], device,
                                          recorder=ours)
    assert torch.equal(got, images + 1) and targets == [0, 1, 2]
    assert ours.calls == [Stage.WORKER if path == "cpu" else Stage.EXECUTOR]
    # the CPU path finishes the batch in the worker; the GPU path's executor hands it on to the loop
    assert pending == ([] if path == "cpu" else [Stage.EXECUTOR])


@pytest.mark.parametrize("path", ["cpu", pytest.param("gpu", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("kind", ["collate_fn", "batch_transforms"])
def test_the_users_callable_runs_once_where_the_batch_is_finished(path: str, kind: str) -> None:
    calls: list[tuple[Stage, float]] = []
    recorder = SimpleNamespace(stage=None)

    def users(*args: Any) -> Any:
        calls.append((recorder.stage, float(torch.rand(()))))
        return args

    images = torch.rand(3, 3, 4, 5)
    stages, device = (CPU_STAGES, None) if path == "cpu" else (GPU_STAGES, torch.device("cuda", 0))
    d = Delivery(**{kind: users})
    got, pending = _run_stages(d, stages, images, [4, 5, 6], device, recorder=recorder)
    where = Stage.WORKER if path == "cpu" else Stage.LOOP
    key = _rng.batch_key(SEED, 0, 8)
    draw = float(torch.rand((), generator=torch.Generator().manual_seed(key & 0x7FFFFFFFFFFFFFFF)))
    assert calls == [(where, draw)]
    if kind == "collate_fn":  # the samples, each image a view of the batch, the targets uncollated
        (samples,) = got
        assert [t for _, t in samples] == [4, 5, 6]
        assert all(torch.equal(im, images[i]) for i, (im, _) in enumerate(samples))
    else:
        assert got[0] is images and got[1] == [4, 5, 6]
    assert pending == ([] if path == "cpu" else [Stage.EXECUTOR])


def _ragged_batch() -> tuple[_ragged.RaggedImages, list[torch.Tensor]]:
    """Two images of different sizes in one buffer, as a pipeline without a fixed output size lays them out."""
    chw = [torch.rand(3, 2, 3), torch.rand(3, 4, 2)]
    buffer = torch.cat([im.reshape(-1) for im in chw])
    placement = np.zeros((2, layout.PLACEMENT_WIDTH), dtype=np.int64)
    offset = 0
    for row, im in zip(placement, chw):
        c, h, w = im.shape
        row[[layout.PLACE_OFFSET, layout.PLACE_H, layout.PLACE_W]] = offset, h, w
        row[[layout.PLACE_STRIDE_C, layout.PLACE_STRIDE_H, layout.PLACE_STRIDE_W]] = h * w, w, 1
        offset += im.numel()
    return _ragged.RaggedImages(buffer, placement), chw


def test_a_cpu_batch_with_nothing_to_run_crosses_the_worker_queue_as_it_is() -> None:
    d = Delivery(plan=SimpleNamespace(varies=True))  # a pipeline without a fixed output size
    ragged, chw = _ragged_batch()
    targets = [{"label": 1}, {"label": 2}]
    out = d.deliver(_packed(2), ragged, targets, Stage.WORKER)
    # one buffer and the targets as they were (``_wire.py``), not a tensor per image
    assert isinstance(out, Pending) and out.images is ragged and out.targets is targets
    images, got_targets = d.deliver(_packed(2), ragged, targets, Stage.LOOP)
    assert got_targets == targets  # a ragged batch's targets stay the samples' list
    assert len(images) == 2 and all(torch.equal(a, b) for a, b in zip(images, chw))
    assert all(im.untyped_storage().data_ptr() == ragged.buffer.untyped_storage().data_ptr() for im in images)
    # a batch that came out stacked: its targets are collated at the loop
    stacked = torch.rand(2, 3, 4, 4)
    assert isinstance(d.deliver(_packed(2), stacked, [1, 2], Stage.WORKER), Pending)
    images, got_targets = d.deliver(_packed(2), stacked, [1, 2], Stage.LOOP)
    assert images is stacked and torch.equal(got_targets, torch.tensor([1, 2]))


# -- video clips: the same delivery ----------------------------------------------------------------

@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_video_batches_go_through_the_same_delivery(tmp_path: Any, device: str) -> None:
    pytest.importorskip("av")
    from tests import _video

    paths = [_video.write_video(tmp_path / f"{k}.mp4", frames=12, first=20 * k) for k in range(3)]
    ds = td.video.VideoFileList([(p, k) for k, p in enumerate(paths)], num_frames=4, stride=2)

    def make(**kw: Any) -> td.DataLoader:
        return td.DataLoader(ds, batch_size=2, device=device, seed=SEED, transforms=T.Compose([T.CenterCrop(16)]),
                             **kw)

    want = [(x.clone(), y.clone()) for x, y in make()]
    threads: list[int] = []

    def transform(clips: torch.Tensor, targets: torch.Tensor) -> tuple:
        threads.append(threading.get_ident())
        return clips.flip(-1), targets * 10

    got = list(make(batch_transforms=transform))
    # once per batch, in the loop's thread: no workers on the CPU path, the policy on the GPU path
    assert threads == [threading.get_ident()] * len(want)
    assert len(got) == len(want)
    for (clips, targets), (want_clips, want_targets) in zip(got, want):
        assert clips.shape == want_clips.shape and clips.shape[1:3] == (4, 3)  # [B, F, C, H, W]
        assert torch.equal(clips, want_clips.flip(-1)) and torch.equal(targets, want_targets * 10)


# -- the GPU path, through the loader --------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["collate_fn", "users_batch_transform", "ours"])
def test_gpu_path_runs_the_users_callables_in_the_loops_thread_and_ours_on_the_executor(
        tmp_path: Any, kind: str) -> None:
    ds = td.datasets.ImageFolder(make_folder(tmp_path, n=N, classes=5))
    threads: list[int] = []

    class Ours(T.BatchTransform):
        def transform(self, inputs: Any, params: dict) -> Any:
            threads.append(threading.get_ident())
            return inputs

    def record(out: Any) -> Any:
        threads.append(threading.get_ident())
        return out

    kw = {"collate_fn": {"collate_fn": lambda samples: record(default_collate(samples))},
          "users_batch_transform": {"batch_transforms": lambda x, y: record((x, y))},
          "ours": {"batch_transforms": Ours()}}[kind]

    def make(**kwargs: Any) -> td.DataLoader:
        return td.DataLoader(ds, batch_size=BATCH, num_workers=2, device="cuda", seed=SEED,
                             transforms=T.Compose([T.CenterCrop(16)]), **kwargs)

    want = [(x.clone(), y.clone()) for x, y in make()]
    loader = make(**kw)
    got = [(x.clone(), y.clone()) for x, y in loader]
    loader.close()
    loop = threading.get_ident()
    if kind == "ours":  # on the executor thread, never the loop's
        assert len(threads) >= len(want) and loop not in threads
    else:
        assert threads == [loop] * len(want)
    assert len(got) == len(want)
    for (images, targets), (want_images, want_targets) in zip(got, want):
        assert torch.equal(images, want_images)
        # a collate_fn gets the dataset's targets; the others get them collated on the device
        assert torch.equal(targets.cpu(), want_targets.cpu()) and targets.is_cuda == (kind != "collate_fn")
