"""Region-of-interest decode on the GPU path (``TORCHDALI_ROI_DECODE=1``): the workers
choose each image's window (``_worker.decode_windows``), nvJPEG decodes only it, and
kernel 1 reads it with the window's start in the params.

On the CPU: the windows hold what the kernel reads, and a batch whose images are cut
to their windows (as nvJPEG returns them) gives exactly the whole images' output,
through the kernel and the reference. On a GPU: the loader's output with windows
equals its output without.
"""
from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torchdali as td  # noqa: E402
from csrc_triton import layout  # noqa: E402
from torchdali import transforms as T  # noqa: E402
from torchdali._executor._tags import TagBatch, TaggedSample  # noqa: E402
from torchdali._executor._worker import (ENCODED, ROI_ALIGN, ROI_MARGIN, ROI_MAX_SHARE,  # noqa: E402
                                         PrepareBatch, decode_windows)
from torchdali.decode import decode_cpu  # noqa: E402
from torchdali.transforms import compile_transforms  # noqa: E402
from torchdali.transforms._execute import KERNEL, REFERENCE, execute  # noqa: E402

from ._helpers import make_folder  # noqa: E402

RECIPE = T.Compose([T.RandomResizedCrop(24, scale=(0.05, 0.6)), T.RandomHorizontalFlip(),
                    T.ToDtype(torch.uint8)])


def _folder(root, n: int, lo: int, hi: int, classes: int = 2) -> str:
    """JPEGs (4:2:0 and 4:4:4), every other one with sides on whole MCUs of 16 pixels,
    where windows may reach the right and bottom edges."""
    return make_folder(root, n=n, classes=classes, lo=lo, hi=hi, align=ROI_ALIGN, every_444=3)


def _tagged(ds, n, seed=0):
    tags = pickle.loads(pickle.dumps(TagBatch(seed, 0, 0, 0, list(range(n)))))
    return [TaggedSample(tag, ds.samples[tag.index][0], ds[tag.index]) for tag in tags]


def test_windows_hold_the_clamp_region_with_its_margin():
    rng = np.random.default_rng(0)
    plan = compile_transforms(RECIPE)
    shapes = np.stack([rng.integers(40, 400, 64), rng.integers(40, 400, 64), np.full(64, 3)], 1)
    shapes[::2, :2] = shapes[::2, :2] // ROI_ALIGN * ROI_ALIGN  # edges on whole MCUs: windows may reach them
    from torchdali._executor._worker import draw_params

    params = draw_params(plan, shapes, 0, 0, np.arange(64)).params
    eligible = np.arange(64) % 5 != 0
    rois = decode_windows(params, shapes, eligible)
    y, x = layout.axis("y"), layout.axis("x")
    windowed = rois[:, 2] > 0
    assert windowed.sum() > 20 and not windowed[~eligible].any()
    reaches = (rois[:, 0] + rois[:, 2] == shapes[:, 1]) | (rois[:, 1] + rois[:, 3] == shapes[:, 0])
    assert (windowed & reaches).any()
    for b in np.flatnonzero(windowed):
        x0, y0, w, h = rois[b]
        H, W = shapes[b, :2]
        p = params[b]
        assert (p[layout.ROI_Y0], p[layout.ROI_X0]) == (y0, x0)
        assert 0 <= y0 and y0 + h <= H and 0 <= x0 and x0 + w <= W and h * w <= ROI_MAX_SHARE * H * W
        assert y0 % ROI_ALIGN == 0 and x0 % ROI_ALIGN == 0
        assert (y0 + h) % ROI_ALIGN == 0 or y0 + h == H
        # a window never ends at a right or bottom edge that cuts an MCU (nvJPEG upsamples from its padding)
        assert (x0 + w < W or W % ROI_ALIGN == 0) and (y0 + h < H or H % ROI_ALIGN == 0)
        assert y0 <= max(0, float(p[y.lo]) - ROI_MARGIN) and x0 <= max(0, float(p[x.lo]) - ROI_MARGIN)
        assert y0 + h >= min(H, float(p[y.hi]) + ROI_MARGIN) and x0 + w >= min(W, float(p[x.hi]) + ROI_MARGIN)
    for b in np.flatnonzero(~windowed):
        assert (params[b, layout.ROI_Y0], params[b, layout.ROI_X0]) == (0, 0)


def _decoded(batch, windows: bool):
    """What the executor's decode gives for ``batch``: each JPEG decoded (on the CPU here)
    and, with windows, cut to its window."""
    images = []
    for i in range(len(batch.indices)):
        raw = batch.blob[batch.offsets[i]: batch.offsets[i] + batch.lengths[i]]
        assert batch.kinds[i] == ENCODED
        img = decode_cpu(raw.clone())
        if windows and batch.rois is not None and batch.rois[i, 2] > 0:
            x0, y0, w, h = (int(v) for v in batch.rois[i])
            img = img[y0:y0 + h, x0:x0 + w]
        assert tuple(img.shape) == tuple(batch.shapes[i])
        images.append(img.reshape(-1))
    sizes = [im.numel() for im in images]
    offsets = torch.tensor([0] + sizes[:-1], dtype=torch.int64).cumsum(0)
    return torch.cat(images), offsets, torch.as_tensor(batch.shapes, dtype=torch.int32)


@pytest.mark.parametrize("backend", [REFERENCE, KERNEL], ids=["reference", "kernel"])
def test_windowed_batch_gives_the_whole_images_output(tmp_path, backend):
    ds = td.datasets.ImageFolder(_folder(tmp_path / "f", n=12, lo=60, hi=140))
    plan = compile_transforms(RECIPE)
    whole = PrepareBatch(plan, "gpu")(_tagged(ds, 12))
    windowed = PrepareBatch(plan, "gpu", roi=True)(_tagged(ds, 12))
    assert whole.rois is None and windowed.rois is not None and (windowed.rois[:, 2] > 0).sum() >= 6
    assert (windowed.frames == whole.shapes[:, :2]).all()
    on = windowed.rois[:, 2] > 0
    assert (windowed.shapes[on, :2] < whole.shapes[on, :2]).any(axis=1).all()
    a = execute(plan, *_decoded(whole, False), whole.batch_params, backend)
    b = execute(plan, *_decoded(windowed, True), windowed.batch_params, backend)
    assert torch.equal(a, b)


@pytest.mark.cuda
def test_the_gpu_loader_with_windows_equals_the_loader_without(tmp_path, monkeypatch):
    """nvJPEG decodes only the windows (hardware engines through nvjpegDecodeBatchedEx
    where the GPU has them): the batches are the same, pixel for pixel."""
    ds = td.datasets.ImageFolder(_folder(tmp_path / "f", n=96, lo=100, hi=300, classes=3))
    recipe = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToDtype(torch.uint8)])
    runs = []
    for roi in ("0", "1"):
        monkeypatch.setenv("TORCHDALI_ROI_DECODE", roi)
        loader = td.DataLoader(ds, batch_size=32, num_workers=2, transforms=recipe, device="cuda", seed=5,
                               gpu_decode="rgb")  # windows are cut from RGB decodes only
        runs.append([x.cpu() for x, _ in loader])
        stats = loader.stats().epochs[-1]
        loader.close()
    assert stats.decoded_cpu == 0
    for k, (a, b) in enumerate(zip(*runs)):
        differ = (a != b).flatten(1).any(1).nonzero().flatten().tolist()
        assert not differ, f"batch {k}: samples {differ} differ in {int((a != b).sum())} values"
