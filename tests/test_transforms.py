"""torchdali.transforms against torchvision.transforms.v2 (independent reference)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as v2
import torchvision.transforms.v2.functional as TF

from torchdali import _rng
from torchdali import transforms as T
from torchdali.transforms import _geometry as G
from torchdali.transforms._plan import apply_to_images

from ._helpers import assert_close_uint8, smooth_image as _img

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
SIZES = [(37, 53), (64, 64), (97, 61), (120, 180), (211, 157)]


@pytest.mark.parametrize("h,w", SIZES)
@pytest.mark.parametrize("size", [(24, 32), (150, 90)])
def test_resize_hw_matches_torchvision(h, w, size):
    img = _img(h, w)
    ours = apply_to_images(T.Compose([T.Resize(size)]), [img])[0]
    ref = TF.resize(img, list(size), antialias=True)
    assert_close_uint8(ours, ref)


@pytest.mark.parametrize("h,w", SIZES)
@pytest.mark.parametrize("short,crop", [(32, 28), (40, 40), (256, 224)])
def test_resize_shorter_side_then_center_crop_matches_torchvision(h, w, short, crop):
    img = _img(h, w, seed=1)
    ours = apply_to_images(T.Compose([T.Resize(short), T.CenterCrop(crop)]), [img])[0]
    ref = TF.center_crop(TF.resize(img, [short], antialias=True), [crop, crop])
    assert_close_uint8(ours, ref)


def _rrc_box(h: int, w: int, seed: int, t: T.RandomResizedCrop, stream: int = 0):
    keys = _rng.sample_keys(seed, 0, np.arange(1))
    u = _rng.uniform(keys, stream, 40)
    top, left, bh, bw = G.random_resized_crop_box(np.array([h], float), np.array([w], float), t.scale, t.ratio, u)
    return int(top[0]), int(left[0]), int(bh[0]), int(bw[0])


@pytest.mark.parametrize("h,w", SIZES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_resized_crop_matches_torchvision_with_same_box(h, w, seed):
    img = _img(h, w, seed)
    rrc = T.RandomResizedCrop(48)
    ours = apply_to_images(T.Compose([rrc]), [img], seed=seed)[0]
    top, left, bh, bw = _rrc_box(h, w, seed, rrc)
    ref = TF.resized_crop(img, top, left, bh, bw, [48, 48], antialias=True)
    assert_close_uint8(ours, ref)


def test_random_resized_crop_then_flip_matches_torchvision():
    img = _img(90, 70)
    rrc = T.RandomResizedCrop((40, 30), scale=(0.3, 0.9))
    ours = apply_to_images(T.Compose([rrc, T.RandomHorizontalFlip(p=1.0)]), [img], seed=5)[0]
    top, left, bh, bw = _rrc_box(90, 70, 5, rrc)
    ref = TF.horizontal_flip(TF.resized_crop(img, top, left, bh, bw, [40, 30], antialias=True))
    assert_close_uint8(ours, ref)
    # flip before the crop mirrors the box instead
    ours_pre = apply_to_images(T.Compose([T.RandomVerticalFlip(p=1.0), T.CenterCrop(50)]), [img])[0]
    assert torch.equal(ours_pre, TF.center_crop(TF.vertical_flip(img), [50, 50]))


def test_random_resized_crop_boxes_follow_torchvision_rules():
    t = T.RandomResizedCrop(32, scale=(0.2, 0.8), ratio=(0.5, 2.0))
    n = 4000
    h = np.full(n, 300.0)
    w = np.full(n, 400.0)
    u = _rng.uniform(_rng.sample_keys(3, 0, np.arange(n)), 0, 40)
    top, left, bh, bw = G.random_resized_crop_box(h, w, t.scale, t.ratio, u)
    assert (top >= 0).all() and (left >= 0).all() and (top + bh <= h).all() and (left + bw <= w).all()
    frac = bh * bw / (h * w)
    assert frac.min() >= 0.2 * 0.95 and frac.max() <= 0.8 * 1.05
    ratio = bw / bh
    assert ratio.min() >= 0.5 * 0.95 and ratio.max() <= 2.0 * 1.05
    # compare the area distribution with torchvision's own sampler
    tv = v2.RandomResizedCrop(32, scale=(0.2, 0.8), ratio=(0.5, 2.0))
    torch.manual_seed(0)
    tv_frac = []
    for _ in range(2000):
        p = tv.make_params([torch.empty(3, 300, 400)])
        tv_frac.append(p["height"] * p["width"] / (300 * 400))
    assert abs(np.mean(frac) - np.mean(tv_frac)) < 0.02
    # per-sample: different samples of a batch get different boxes
    assert len(set(zip(top[:50], left[:50]))) > 40


def test_center_crop_larger_than_image_pads_like_torchvision():
    img = _img(20, 30)
    ours = apply_to_images(T.Compose([T.CenterCrop((28, 33))]), [img])[0]
    assert torch.equal(ours, TF.center_crop(img, [28, 33]))


def test_float_output_normalized_matches_torchvision():
    img = _img(120, 160)
    ours = apply_to_images(
        T.Compose([T.Resize(64), T.CenterCrop(56), T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)]),
        [img])[0]
    ref = v2.Compose([v2.Resize(64), v2.CenterCrop(56), v2.ToDtype(torch.float32, scale=True),
                      v2.Normalize(MEAN, STD)])(img)
    assert ours.dtype == torch.float32
    # one uint8 step of difference after scaling by 1/(255*std)
    assert (ours - ref).abs().max().item() <= 2.01 / (255 * min(STD))
    assert (ours - ref).abs().mean().item() < 0.2 / (255 * min(STD))


def test_grayscale_becomes_three_identical_channels():
    gray = _img(40, 50)[:1]
    out = apply_to_images(T.Compose([T.Resize((20, 25))]), [gray])[0]
    assert out.shape == (3, 20, 25)
    assert torch.equal(out[0], out[1]) and torch.equal(out[1], out[2])
    assert_close_uint8(out[:1], TF.resize(gray, [20, 25], antialias=True))


def test_torchvision_compose_is_accepted():
    tv = v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(), v2.ToImage(),
                     v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    plan = T.compile_transforms(tv)
    assert plan.out_size == (32, 32) and plan.out_dtype == torch.float32
    ours = T.compile_transforms(T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(),
                                           T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)]))
    assert plan.scale == ours.scale and plan.bias == ours.bias


def test_a_pipeline_without_a_fixed_size_compiles_with_per_sample_sizes():
    plan = T.compile_transforms(T.Compose([T.Resize(64)]))  # tests/test_variable_size.py runs it
    assert plan.out_size is None and plan.varies


@pytest.mark.parametrize("bad,match", [
    (lambda: T.Compose([T.CenterCrop(8), T.Normalize(MEAN, STD)]), "uint8"),
    (lambda: T.Compose([T.Resize((8, 8), interpolation=v2.InterpolationMode.LANCZOS)]),
     "closest supported mode is bicubic"),
    (lambda: v2.Compose([v2.RandomResizedCrop(8), v2.ElasticTransform()]), "ElasticTransform"),
    (lambda: T.Compose([T.CenterCrop(8), lambda x: x]), "unsupported transform"),
])
def test_invalid_pipelines_raise_value_error_when_compiled(bad, match):
    with pytest.raises(ValueError, match=match):
        T.compile_transforms(bad())


def test_params_are_per_sample_and_reproducible():
    plan = T.compile_transforms(T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip()]))
    sizes = np.array([[100, 120]] * 64)
    keys = _rng.sample_keys(7, 0, np.arange(64))
    p1, p2 = plan.params(sizes, keys).params, plan.params(sizes, keys).params
    assert torch.equal(p1, p2)
    assert len({tuple(r.tolist()) for r in p1}) == 64
    flips = (p1[:, 3] < 0).float().mean().item()
    assert 0.3 < flips < 0.7
    other_epoch = plan.params(sizes, _rng.sample_keys(7, 1, np.arange(64))).params
    assert not torch.equal(p1, other_epoch)


def test_make_params_then_transform_replays_the_same_geometry():
    """Randomness is only in make_params: the same params give the same geometry."""
    sizes = np.array([[100, 120], [64, 200], [300, 90]])
    u = _rng.uniform(_rng.sample_keys(1, 0, np.arange(3)), 0, 40)
    for t in [T.RandomResizedCrop(16), T.RandomCrop(20), T.RandomHorizontalFlip(), T.Resize(50), T.CenterCrop(70)]:
        params = t.make_params(G.BatchGeometry.identity(sizes), u[:, : t.n_uniforms] if t.n_uniforms else None)
        assert all(len(v) == len(sizes) for v in params.values())
        rows = []
        for _ in range(2):
            g = G.BatchGeometry.identity(sizes)
            t.transform(g, params)
            rows.append(g.to_params())
        assert torch.equal(rows[0], rows[1])


def test_static_state_is_frozen_and_each_transform_returns_a_new_one():
    import dataclasses

    from torchdali.transforms._state import StaticState

    s0 = StaticState()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s0.size = (1, 1)
    s1 = T.ToDtype(torch.float32, scale=True).update_state(s0)
    s2 = T.Normalize(MEAN, STD).update_state(s1)
    assert s0 == StaticState() and s1.dtype == torch.float32 and s2.scale != s1.scale


def test_every_class_declares_a_kernel_stage():
    from torchdali.transforms._plan import STAGES

    assert T.RandomResizedCrop.stage == "geometry" and T.Normalize.stage == "epilogue"
    assert T.Identity.stage == "meta"
    leaves = [T.RandomResizedCrop(8), T.Resize(8), T.CenterCrop(8), T.RandomCrop(8), T.RandomHorizontalFlip(),
              T.RandomVerticalFlip(), T.ToDtype(torch.float32), T.Normalize(MEAN, STD), T.ToImage(), T.ToTensor(),
              T.ConvertImageDtype()]
    assert all(t.stage in STAGES for t in leaves)
    with pytest.raises(TypeError, match="stage"):
        type("Bad", (T.Transform,), {"stage": "warp"})


def test_supported_comes_from_the_registry():
    assert "RandomResizedCrop" in T.SUPPORTED and "ColorJitter" in T.SUPPORTED and "ElasticTransform" not in T.SUPPORTED
    for name in T.SUPPORTED:
        assert f"`{name}" in T.supported_table()


def test_readme_transform_table_is_the_registry_table():
    import pathlib

    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Transforms", 1)[1]
    lines = section.strip().splitlines()
    table = "\n".join(line for line in lines[: next(i for i, ln in enumerate(lines) if not ln.startswith("|"))])
    assert table == T.supported_table(), "README's transform table is stale: paste T.supported_table() into it"
