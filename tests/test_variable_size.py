"""Pipelines without a fixed output size: per-sample sizes, one output buffer, what the loop gets.

* the kernel with a ``placement`` (each sample at its own offset, size and strides in
  one buffer) against its reference, and each sample against a batch of its own;
* ``_execute.execute`` on variable-size plans, kernel backend against reference
  backend (list, padded, with an augment program, channels-last);
* the loader (CPU path; the GPU path in ``cuda``-marked twins): per-image tensors
  equal to torchvision's, equal sizes stacked with collated targets, ``BatchImages``,
  ``collate_fn``, batch transforms;
* the memory bound refused at construction, with what to add.
"""
from __future__ import annotations

import dataclasses
import math
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torchvision.transforms.v2 as v2  # noqa: E402
import torchvision.transforms.v2.functional as TF  # noqa: E402

import torchdali as td  # noqa: E402
from csrc_triton import fused_resized_crop, layout, resized_crop_reference  # noqa: E402
from csrc_triton.resized_crop import placement_extent  # noqa: E402
from torchdali import _rng  # noqa: E402
from torchdali import transforms as T  # noqa: E402
from torchdali.transforms import _execute, _ragged  # noqa: E402
from torchdali.transforms import _geometry as G  # noqa: E402
from torchdali.transforms._plan import pack_images, run_reference, to_hwc  # noqa: E402
from torchdali.transforms._state import BatchImagesSpec, SizeBound  # noqa: E402

from ._helpers import assert_gpu_loader_matches_cpu_path, jpeg_bytes, kernel_devices, make_folder, smooth_image  # noqa: E402

DEVICES = kernel_devices()
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
SIZES = [(23, 31), (17, 12), (23, 31), (30, 19), (9, 40)]  # two share a size: a group of two


class Decoded(torch.utils.data.Dataset):
    """Decoded HWC uint8 images of the given sizes (numpy), target = index."""

    def __init__(self, sizes) -> None:
        self.sizes = list(sizes)

    def __len__(self) -> int:
        return len(self.sizes)

    def image(self, i: int) -> torch.Tensor:
        return smooth_image(*self.sizes[i], seed=i)  # CHW

    def __getitem__(self, i: int):
        return self.image(i).permute(1, 2, 0).numpy(), i


class Jpegs(Decoded):
    """The same images as JPEG bytes (the GPU path decodes them); ``image`` is what they decode to."""

    def image(self, i: int) -> torch.Tensor:
        from torchvision.io import decode_jpeg

        return decode_jpeg(torch.frombuffer(bytearray(self[i][0]), dtype=torch.uint8))

    def __getitem__(self, i: int):
        arr = smooth_image(*self.sizes[i], seed=i).permute(1, 2, 0).contiguous().numpy()
        return np.frombuffer(jpeg_bytes(arr, quality=95), dtype=np.uint8), i


def _within_one(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.shape == b.shape, (a.shape, b.shape)
    assert (a.cpu().int() - b.cpu().int()).abs().max().item() <= 1


# --------------------------------------------------------------------------- #
# Kernel: placement against the reference
# --------------------------------------------------------------------------- #

def _resize_rows(shapes: list[tuple[int, int]], outs: list[tuple[int, int]], erase: bool = False) -> torch.Tensor:
    """Parameter rows resizing each whole image to its output size (flipping every other one)."""
    g = G.BatchGeometry.identity(np.array(shapes))
    G.horizontal_flip(g, np.arange(len(shapes)) % 2 == 1)
    G.resize(g, np.array([o[0] for o in outs]), np.array([o[1] for o in outs]))
    if erase:
        G.erase(g, True, 1, 2, 4, 5, seed=np.arange(len(shapes)) + 7)
    return g.to_params()


def _list_placement(outs, channels_last=False) -> torch.Tensor:
    return torch.from_numpy(_ragged.output_layout(np.array(outs).reshape(-1, 2), channels_last, stack=False).placement)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["list", "channels_last", "padded", "erase_random", "one", "grayscale"])
def test_kernel_placement_matches_reference_and_a_batch_of_its_own(device, case):
    shapes = [(20, 30), (17, 9), (40, 41)] if case != "one" else [(20, 30)]
    outs = [(10, 15), (17, 9), (33, 50)][: len(shapes)]
    channels = 1 if case == "grayscale" else 3
    images = [smooth_image(h, w, seed=i)[:channels].permute(1, 2, 0).contiguous() for i, (h, w) in enumerate(shapes)]
    data, offsets, shapes_t = pack_images(images)
    params = _resize_rows(shapes, outs, erase=case == "erase_random")
    kw = dict(out_dtype=torch.float32, erase_random=case == "erase_random")
    if case == "padded":
        lay = _ragged.output_layout(np.array(outs), batch_images=BatchImagesSpec(size_divisible=8))
        placement = torch.from_numpy(lay.placement)
    else:
        placement = _list_placement(outs, channels_last=case == "channels_last")
    grid = (max(o[0] for o in outs), max(o[1] for o in outs))
    scale, bias = [1 / 255] * 3, [0.0] * 3
    n = placement_extent(placement)
    ref = resized_crop_reference(data, offsets, shapes_t, params, grid, scale, bias, placement=placement,
                                 out=torch.full((n,), -7.0), **kw)
    out = torch.full((n,), -7.0, device=device)  # what no sample covers stays -7
    got = fused_resized_crop(data.to(device), offsets.to(device), shapes_t.to(device), params.to(device), grid,
                             scale, bias, placement=placement.to(device), out=out, **kw)
    assert got is out and got.shape == ref.shape
    # float32 out of a bilinear uint8 resize: the same float sums; the noise agrees to a few ulp
    assert torch.allclose(got.cpu(), ref, atol=1e-5, rtol=0), (got.cpu() - ref).abs().max()
    views = _ragged.RaggedImages(got.cpu(), placement.numpy()).images()
    for b, (oh, ow) in enumerate(outs):
        alone = fused_resized_crop(data.to(device), offsets[b:b + 1].to(device), shapes_t[b:b + 1].to(device),
                                   params[b:b + 1].to(device), (oh, ow), scale, bias, **kw)
        assert views[b].shape == (3, oh, ow)
        assert torch.equal(views[b], alone[0].cpu()), b
    if case == "padded":
        covered = torch.zeros(ref.numel(), dtype=torch.bool)
        for v in _ragged.RaggedImages(covered, placement.numpy()).images():
            v.fill_(True)
        assert (got.cpu()[~covered] == -7.0).all()  # the kernel writes nothing outside a sample


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_placement_uint8_resize_within_one_of_torchvision(device):
    shapes, outs = [(40, 60), (50, 30), (33, 33)], [(32, 48), (53, 32), (32, 32)]
    chw = [smooth_image(h, w, seed=i) for i, (h, w) in enumerate(shapes)]
    data, offsets, shapes_t = pack_images([c.permute(1, 2, 0).contiguous() for c in chw])
    g = G.BatchGeometry.identity(np.array(shapes))
    G.resize(g, np.array([o[0] for o in outs]), np.array([o[1] for o in outs]))
    placement = _list_placement(outs)
    got = fused_resized_crop(data.to(device), offsets.to(device), shapes_t.to(device), g.to_params().to(device),
                             (53, 48), [1.0] * 3, [0.0] * 3, out_dtype=torch.uint8, placement=placement)
    for view, img, (oh, ow) in zip(_ragged.RaggedImages(got.cpu(), placement.numpy()).images(), chw, outs):
        _within_one(view, TF.resize(img, [oh, ow], antialias=True))


def test_kernel_placement_is_validated():
    data, offsets, shapes = pack_images([smooth_image(8, 8).permute(1, 2, 0).contiguous()])
    params = _resize_rows([(8, 8)], [(4, 4)])
    ok = _list_placement([(4, 4)])
    with pytest.raises(ValueError, match="placement must be int64"):
        resized_crop_reference(data, offsets, shapes, params, (4, 4), [1.0] * 3, [0.0] * 3, placement=ok.int())
    with pytest.raises(ValueError, match="fit in out_size"):
        resized_crop_reference(data, offsets, shapes, params, (3, 4), [1.0] * 3, [0.0] * 3, placement=ok)
    with pytest.raises(ValueError, match="writes up to element 48 but out has 47"):
        resized_crop_reference(data, offsets, shapes, params, (4, 4), [1.0] * 3, [0.0] * 3, placement=ok,
                               out=torch.empty(47))
    with pytest.raises(ValueError, match="1-D buffer"):
        resized_crop_reference(data, offsets, shapes, params, (4, 4), [1.0] * 3, [0.0] * 3, placement=ok,
                               out=torch.empty(1, 3, 4, 4))


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_placement_batch_of_zero(device):
    empty = torch.empty(0, dtype=torch.uint8, device=device)
    out = fused_resized_crop(empty, torch.zeros(0, dtype=torch.int64, device=device),
                             torch.zeros(0, 3, dtype=torch.int64, device=device),
                             torch.zeros(0, layout.NUM_PARAMS, device=device), (0, 0), [1.0] * 3, [0.0] * 3,
                             placement=torch.zeros(0, layout.PLACEMENT_WIDTH, dtype=torch.int64))
    assert out.shape == (0,)


# --------------------------------------------------------------------------- #
# execute: kernel backend against reference backend on variable-size plans
# --------------------------------------------------------------------------- #

VARYING = {
    "resize_short": [T.Resize(12), T.RandomHorizontalFlip()],
    "pad_normalize_erase": [T.Pad(2), T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD),
                            T.RandomErasing(p=0.9, value="random")],
    "program_u8": [T.Resize(11), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomEqualize()],
    "program_finish": [T.ColorJitter(0.4, 0.4, 0.4), T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD),
                       T.RandomErasing(p=0.9, value=(0.1, 0.2, 0.3))],
    "padded": [T.Resize(12), T.ToDtype(torch.float32, scale=True), T.BatchImages(size_divisible=4, fill=-1.0)],
    "padded_program": [T.Pad(1), T.RandomAutocontrast(p=0.9), T.BatchImages(fill=9)],
}


def _varying_batch(plan, sizes=SIZES):
    images = [to_hwc(smooth_image(h, w, seed=i)) for i, (h, w) in enumerate(sizes)]
    data, offsets, shapes = pack_images(images)
    keys = _rng.sample_keys(3, 0, np.arange(len(images)))
    return images, data, offsets, shapes, plan.params(shapes[:, :2].numpy(), keys)


def _levels(plan, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    d = (a.cpu().double() - b.double()).abs()
    if plan.out_dtype != torch.uint8:
        d = d * torch.tensor(STD, dtype=torch.float64).view(3, 1, 1) * 255
    return d


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(VARYING))
@pytest.mark.parametrize("channels_last", [False, True])
def test_execute_kernel_matches_reference_on_variable_sizes(device, name, channels_last):
    plan = T.compile_transforms(VARYING[name])
    assert plan.varies
    _, data, offsets, shapes, bp = _varying_batch(plan)
    ref = _execute.execute(plan, data, offsets, shapes, bp, _execute.REFERENCE, channels_last=channels_last)
    got = _execute.execute(plan, data.to(device), offsets.to(device), shapes.to(device), bp, _execute.KERNEL,
                           channels_last=channels_last)
    assert type(got) is type(ref)
    if isinstance(got, _ragged.ImageList):
        assert got.image_sizes == ref.image_sizes and got.tensors.shape == ref.tensors.shape
        assert got.tensors.is_contiguous(memory_format=torch.channels_last if channels_last
                                         else torch.contiguous_format)
        fill = plan.batch_images.fill
        for t, (h, w) in zip(got.tensors.cpu(), got.image_sizes):
            assert (t[:, h:] == fill).all() and (t[:, :, w:] == fill).all()
    expected = _ragged.unbind(ref)
    for a, b in zip(_ragged.unbind(got), expected):
        assert a.shape == b.shape and a.dtype == b.dtype == plan.out_dtype
        levels = _levels(plan, a, b)
        assert levels.max().item() <= 1 + 1e-3
    n = sum(a.numel() for a in expected)
    off = sum((_levels(plan, a, b) > 1e-3).sum().item() for a, b in zip(_ragged.unbind(got), expected))
    assert off / n < 0.02
    # a variable-size plan's sample equals that sample of a fixed-size plan of its size
    sizes = _ragged.output_sizes(bp.params)
    assert [tuple(a.shape[1:]) for a in expected] == [tuple(s) for s in sizes.tolist()]


def test_execute_stacks_a_batch_of_equal_sizes_with_the_fixed_size_kernel():
    plan = T.compile_transforms([T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.ToDtype(torch.float32, scale=True)])
    _, data, offsets, shapes, bp = _varying_batch(plan, [(13, 17)] * 4)
    out = _execute.execute(plan, data, offsets, shapes, bp, _execute.REFERENCE)
    assert isinstance(out, torch.Tensor) and out.shape == (4, 3, 13, 17)
    fixed = dataclasses.replace(plan, out_size=(13, 17))
    assert not fixed.varies
    assert torch.equal(out, _execute.execute(fixed, data, offsets, shapes, bp, _execute.REFERENCE))


@pytest.mark.parametrize("device", DEVICES)
def test_batch_images_of_equal_sizes_with_a_program(device):
    plan = T.compile_transforms([T.RandomAutocontrast(p=0.9), T.BatchImages(size_divisible=8, fill=3)])
    _, data, offsets, shapes, bp = _varying_batch(plan, [(13, 17)] * 3)
    ref = _execute.execute(plan, data, offsets, shapes, bp, _execute.REFERENCE)
    got = _execute.execute(plan, data.to(device), offsets.to(device), shapes.to(device), bp, _execute.KERNEL)
    assert isinstance(got, _ragged.ImageList) and got.tensors.shape == (3, 3, 16, 24)
    assert got.image_sizes == [(13, 17)] * 3 and torch.equal(got.tensors.cpu(), ref.tensors)
    assert (ref.tensors[:, :, 13:] == 3).all() and (ref.tensors[:, :, :, 17:] == 3).all()


def test_output_size_columns_and_layouts():
    plan = T.compile_transforms([T.Resize(12)])
    _, _, _, shapes, bp = _varying_batch(plan)
    sizes = _ragged.output_sizes(bp.params)
    expected = [TF.resize(torch.zeros(1, h, w), [12]).shape[1:] for h, w in SIZES]
    assert sizes.tolist() == [list(s) for s in expected]
    lay = _ragged.output_layout(sizes)
    assert lay.kind == "list" and lay.numel == 3 * int(sizes.prod(axis=1).sum())
    # grouped by size, in order of their first sample: samples 0 and 2 share a size and are adjacent
    assert [g.index.tolist() for g in lay.groups] == [[0, 2], [1], [3], [4]]
    off = lay.placement[:, layout.PLACE_OFFSET]
    assert off[2] - off[0] == 3 * sizes[0].prod() and off[1] == 2 * 3 * sizes[0].prod()
    assert _ragged.output_layout(sizes[[0, 2]]).kind == "stacked"
    padded = _ragged.output_layout(sizes, batch_images=BatchImagesSpec(size_divisible=5))
    assert padded.kind == "padded" and padded.size == (-(-sizes[:, 0].max() // 5) * 5, -(-sizes[:, 1].max() // 5) * 5)
    # fixed-size plans keep their rows: the output columns hold the fixed size
    fixed = T.compile_transforms([T.CenterCrop(8)])
    rows = fixed.params(shapes[:, :2].numpy(), _rng.sample_keys(3, 0, np.arange(len(SIZES)))).params
    assert (rows[:, layout.OUT_H] == 8).all() and (rows[:, layout.OUT_W] == 8).all()


def test_concat_of_parts_lays_out_the_whole_batch():
    plan = T.compile_transforms([T.Resize(12)])
    images, _, _, _, bp = _varying_batch(plan)
    whole = run_reference(plan, images, bp)
    views = whole.images()
    parts = [_ragged.concat([v[None] for v in views[:2]]), _ragged.concat([v[None] for v in views[2:]])]
    assert [type(p) for p in parts] == [_ragged.RaggedImages, _ragged.RaggedImages]
    joined = _ragged.concat(parts)
    assert isinstance(joined, _ragged.RaggedImages)
    assert (joined.placement == whole.placement).all()
    assert all(torch.equal(a, b) for a, b in zip(joined.images(), views))
    same = _ragged.concat([torch.zeros(2, 3, 4, 5), torch.ones(1, 3, 4, 5)])
    assert isinstance(same, torch.Tensor) and same.shape == (3, 3, 4, 5) and same[2].eq(1).all()


# --------------------------------------------------------------------------- #
# The loader: what the loop gets
# --------------------------------------------------------------------------- #

def test_resize_shorter_side_alone_gives_per_image_tensors_like_torchvision():
    ds = Decoded([(40, 60), (50, 30), (33, 33), (41, 62), (20, 25)])
    loader = td.DataLoader(ds, batch_size=3, transforms=[T.Resize(32)], device="cpu")
    seen = 0
    for images, targets in loader:
        assert isinstance(images, list) and isinstance(targets, list)
        for image, t in zip(images, targets):
            _within_one(image, TF.resize(ds.image(t), [32], antialias=True))
            seen += 1
    assert seen == len(ds)


def test_resize_with_torchvision_objects_and_workers():
    ds = Decoded([(40, 60), (50, 30), (33, 33), (41, 62)])
    loader = td.DataLoader(ds, batch_size=2, num_workers=2,
                           transforms=v2.Compose([v2.Resize(24, max_size=40), v2.ToDtype(torch.float32, scale=True)]),
                           device="cpu", max_image_pixels=None)
    for images, targets in loader:
        for image, t in zip(images, targets):
            expected = TF.to_dtype(TF.resize(ds.image(t), [24], max_size=40, antialias=True), torch.float32,
                                   scale=True)
            assert image.shape == expected.shape and (image - expected).abs().max().item() <= 1 / 255 + 1e-6


def test_pad_alone_on_different_sizes_equals_torchvision():
    ds = Decoded(SIZES)
    loader = td.DataLoader(ds, batch_size=5, transforms=v2.Compose([v2.Pad([1, 2, 3, 4])]), device="cpu")
    images, targets = next(iter(loader))
    assert isinstance(images, list) and targets == list(range(5))
    for image, t in zip(images, targets):
        assert torch.equal(image, TF.pad(ds.image(t), [1, 2, 3, 4]))
    # views into one buffer
    assert len({im.untyped_storage().data_ptr() for im in images}) == 1


def _color_jitter_expected(plan, keys, sizes, b, img):
    g = G.BatchGeometry.identity(sizes)
    t = plan.transforms[0]
    p = t.make_params(g, _rng.uniform(keys, 0, t.n_uniforms))
    for fn in p["order"][b]:
        name = T.ColorJitter.OPS[fn]
        if name in p:
            img = getattr(TF, f"adjust_{name}")(img, float(p[name][b]))
    return TF.to_dtype(img, torch.float32, scale=True)


def test_color_jitter_on_equal_size_decoded_images_is_stacked_and_matches_torchvision():
    ds = Decoded([(21, 27)] * 6)
    pipeline = [T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.ToDtype(torch.float32, scale=True)]
    loader = td.DataLoader(ds, batch_size=4, transforms=pipeline, device="cpu", seed=5)
    batches = list(loader)
    assert [b[0].shape for b in batches] == [(4, 3, 21, 27), (2, 3, 21, 27)]
    images = torch.cat([b[0] for b in batches])
    targets = torch.cat([b[1] for b in batches])  # collated, as default_collate would
    assert targets.tolist() == list(range(6))
    plan = loader.plan
    keys = _rng.sample_keys(loader._effective_seed(), 0, np.arange(6))
    sizes = np.array([[21, 27]] * 6)
    for b in range(6):
        expected = _color_jitter_expected(plan, keys, sizes, b, ds.image(b))
        assert (images[b] - expected).abs().max().item() <= 1e-6


def test_equal_sizes_stack_per_batch_and_different_sizes_give_lists():
    ds = Decoded([(20, 24), (20, 24), (30, 16), (12, 12)])
    loader = td.DataLoader(ds, batch_size=2, transforms=[T.Pad(3)], device="cpu")
    (a, ta), (b, tb) = list(loader)
    assert isinstance(a, torch.Tensor) and a.shape == (2, 3, 26, 30) and torch.equal(ta, torch.tensor([0, 1]))
    assert isinstance(b, list) and [im.shape for im in b] == [(3, 36, 22), (3, 18, 18)] and tb == [2, 3]


def test_batch_of_one_is_stacked():
    loader = td.DataLoader(Decoded(SIZES), batch_size=1, transforms=[T.Resize(10)], device="cpu")
    shapes = [(images.shape, targets.tolist()) for images, targets in loader]
    assert all(len(s) == 4 and s[0] == 1 for s, _ in shapes)
    assert [t for _, t in shapes] == [[i] for i in range(len(SIZES))]


def test_batch_images_pads_to_the_largest_image():
    ds = Decoded(SIZES)
    tf = [T.Pad(1), T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD),
          T.BatchImages(size_divisible=8, fill=0.0)]
    loader = td.DataLoader(ds, batch_size=5, transforms=tf, device="cpu")
    images, targets = next(iter(loader))
    assert isinstance(images, T.ImageList) and targets == list(range(5))
    sizes = [(h + 2, w + 2) for h, w in SIZES]
    assert images.image_sizes == sizes
    H, W = (-(-max(s[0] for s in sizes) // 8) * 8, -(-max(s[1] for s in sizes) // 8) * 8)
    assert images.tensors.shape == (5, 3, H, W)
    for b, (h, w) in enumerate(sizes):
        expected = TF.normalize(TF.to_dtype(TF.pad(ds.image(b), [1]), torch.float32, scale=True), MEAN, STD)
        assert torch.allclose(images.tensors[b, :, :h, :w], expected, atol=1e-5)
        assert (images.tensors[b, :, h:] == 0).all() and (images.tensors[b, :, :, w:] == 0).all()


def test_collate_fn_gets_each_sample_with_its_own_image():
    ds = Decoded(SIZES)
    loader = td.DataLoader(ds, batch_size=5, transforms=[T.Pad(2)], device="cpu",
                           collate_fn=lambda batch: tuple(zip(*batch)))
    images, targets = next(iter(loader))
    assert targets == tuple(range(5))
    for image, t in zip(images, targets):
        assert torch.equal(image, TF.pad(ds.image(t), [2]))


def test_native_batch_transform_refuses_a_ragged_batch():
    ds = Decoded(SIZES)
    loader = td.DataLoader(ds, batch_size=5, transforms=[T.Pad(2), T.ToDtype(torch.float32, scale=True)],
                           batch_transforms=T.MixUp(num_classes=5), device="cpu")
    with pytest.raises(ValueError, match="must share one size"):
        next(iter(loader))


def test_unbounded_output_size_is_refused_at_construction_saying_what_to_add():
    ds = Decoded(SIZES)
    with pytest.raises(ValueError, match="has no bound") as info:
        td.DataLoader(ds, batch_size=2, transforms=[T.ColorJitter(0.4), T.ToDtype(torch.float32, scale=True)],
                      device="cpu", max_image_pixels=None)
    text = str(info.value)
    assert "max_image_pixels=None" in text and "max_size=" in text and "CenterCrop" in text
    # a Resize with max_size, or a crop, bounds it whatever the inputs
    td.DataLoader(ds, batch_size=2, transforms=[T.Resize(16, max_size=30)], device="cpu", max_image_pixels=None)
    td.DataLoader(ds, batch_size=2, transforms=[T.Pad(4), T.CenterCrop(8)], device="cpu", max_image_pixels=None)
    # with the default limit (Pillow's) the pipeline is bounded
    td.DataLoader(ds, batch_size=2, transforms=[T.Resize(16)], device="cpu")


def test_size_bounds():
    P = 1000
    bound = SizeBound.of_input(P)
    assert T.compile_transforms([T.Resize(16)]).size_bound(P) == SizeBound(16 * P, 16 * P, 256 * P)
    assert T.compile_transforms([T.Resize(16, max_size=30)]).size_bound(None) == SizeBound(30, 30, 480)
    assert T.compile_transforms([T.Pad([1, 2, 3, 4])]).size_bound(P) == SizeBound(P + 6, P + 4, P + 4 * P + 6 * P + 24)
    assert T.compile_transforms([T.Pad(2), T.CenterCrop(5)]).size_bound(None) == SizeBound.fixed(5, 5)
    assert T.compile_transforms([T.RandomApply([T.Pad(3)])]).size_bound(P).height == P + 6
    assert T.compile_transforms([T.RandomHorizontalFlip(), T.ColorJitter(0.2)]).size_bound(P) == bound
    assert not T.compile_transforms([T.Resize(16)]).size_bound(None).bounded
    assert math.isinf(T.compile_transforms([T.Pad(1)]).size_bound(None).pixels)


def test_a_step_after_batch_images_is_refused():
    with pytest.raises(ValueError, match="BatchImages must be the last step"):
        T.compile_transforms([T.Resize(8), T.BatchImages(), T.Pad(1)])
    with pytest.raises(ValueError, match="integer in 0..255"):
        T.compile_transforms([T.Resize(8), T.BatchImages(fill=0.5)])


def test_image_folder_with_a_shorter_side_resize_is_lifted(tmp_path):
    import torchvision

    root = make_folder(tmp_path, n=4, lo=30, hi=60)
    ds = torchvision.datasets.ImageFolder(root, transform=v2.Compose([v2.PILToTensor(), v2.Resize(20)]))
    loader = td.DataLoader(ds, batch_size=4, device="cpu", collate_fn=lambda b: tuple(zip(*b)))
    images, targets = next(iter(loader))
    ref_images, ref_targets = next(iter(torch.utils.data.DataLoader(ds, batch_size=4,
                                                                    collate_fn=lambda b: tuple(zip(*b)))))
    assert targets == ref_targets
    for a, b in zip(images, ref_images):
        _within_one(a, b)


# --------------------------------------------------------------------------- #
# GPU path twins
# --------------------------------------------------------------------------- #

@pytest.mark.cuda
@pytest.mark.parametrize("tf", [
    [T.Resize(24), T.RandomHorizontalFlip()],
    [T.Pad(2), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)],
    [T.Resize(20), T.ToDtype(torch.float32, scale=True), T.BatchImages(size_divisible=16, fill=-1.0)],
], ids=["list", "program", "padded"])
def test_gpu_loader_matches_the_cpu_path(tf):
    ds = Jpegs(SIZES + [(23, 31), (31, 23)])
    pairs = assert_gpu_loader_matches_cpu_path(ds, value_scale=255 * (max(STD) if len(tf) > 3 else 1),
                                               batch_size=4, transforms=tf, seed=3)
    for (_, gt), (_, ct) in pairs:
        if isinstance(gt, torch.Tensor):
            assert gt.is_cuda and torch.equal(gt.cpu(), ct)
        else:
            assert gt == ct


@pytest.mark.cuda
def test_gpu_loader_equal_sizes_are_stacked_with_targets_on_the_device():
    ds = Jpegs([(24, 32)] * 6)
    loader = td.DataLoader(ds, batch_size=3, device="cuda",
                           transforms=[T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.ToDtype(torch.float32, scale=True)])
    for images, targets in loader:
        assert images.shape == (3, 3, 24, 32) and images.is_cuda and targets.is_cuda


@pytest.mark.cuda
def test_gpu_loader_ragged_batch_is_one_buffer():
    loader = td.DataLoader(Jpegs(SIZES), batch_size=5, transforms=[T.Resize(16)], device="cuda")
    images, targets = next(iter(loader))
    assert isinstance(images, list) and targets == list(range(5))
    assert len({im.untyped_storage().data_ptr() for im in images}) == 1
