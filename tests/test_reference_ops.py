"""The geometry steps of torchvision's detection and segmentation references, per sample.

``RandomShortestSize``, ``RandomResize``, ``ScaleJitter``, ``RandomZoomOut`` and
``FixedSizeCrop`` (``torchdali/transforms/_reference_geometry.py``):

* per sample against torchvision.transforms.v2 for the drawn parameters: exact for
  pads and crops, within 1 for resizes (``FixedSizeCrop`` against the detection
  reference's semantics, transliterated below: torchvision ships it only in its
  prototype and the reference script);
* the draws replay torchvision's own ``make_params`` (its ``torch.rand``/``randint``
  patched to return our numbers) and their distributions match its sampling
  (chi-square, Kolmogorov-Smirnov);
* the kernel (interpreted; natively in the ``cuda`` twins) against its reference;
* the reference presets' steps through the loader: per-image lists for the
  multiscale preset, a stacked batch for large-scale jitter, the GPU path against the
  CPU path.
"""
from __future__ import annotations

import os
from collections import Counter, defaultdict
from unittest import mock

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torchvision.transforms.v2 as v2  # noqa: E402
import torchvision.transforms.v2.functional as TF  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

import torchdali as td  # noqa: E402
from torchdali import _rng  # noqa: E402
from torchdali import transforms as T  # noqa: E402
from torchdali.transforms import _execute  # noqa: E402
from torchdali.transforms._plan import apply_to_images  # noqa: E402
from torchdali.transforms._reference_geometry import rand32  # noqa: E402
from torchdali.transforms._state import SizeBound  # noqa: E402

from ._helpers import (  # noqa: E402
    assert_close_uint8,
    assert_gpu_loader_matches_cpu_path,
    drawn_params,
    kernel_devices,
    run_plan,
    smooth_image,
)
from .test_auto_augment import _ks, _ks_critical, chi_square_p  # noqa: E402
from .test_variable_size import Decoded, Jpegs  # noqa: E402

DEVICES = kernel_devices()
MEAN = (123, 117, 104)  # the detection presets' fill
SIZES = [(20, 30), (33, 21), (40, 40), (17, 25), (26, 26)]
N_DRAWS = 3000


def _images(sizes=SIZES) -> list[torch.Tensor]:
    return [smooth_image(h, w, seed=i) for i, (h, w) in enumerate(sizes)]


def _drawn(pipe, sizes=SIZES, seed: int = 0) -> list[dict]:
    plan = T.compile_transforms(pipe)
    return drawn_params(plan, np.array(sizes), _rng.sample_keys(seed, 0, np.arange(len(sizes))))


def _fixed_size_crop(img: torch.Tensor, size, r: float, fill, padding_mode: str = "constant") -> torch.Tensor:
    """``FixedSizeCrop.forward`` of torchvision's references/detection/transforms.py on an image,
    with its ``torch.rand(1)`` given as ``r``."""
    crop_h, crop_w = size
    _, height, width = img.shape
    new_h, new_w = min(height, crop_h), min(width, crop_w)
    if new_h != height or new_w != width:
        r32 = torch.tensor([r], dtype=torch.float32)
        top, left = int(max(height - crop_h, 0) * r32), int(max(width - crop_w, 0) * r32)
        img = TF.crop(img, top, left, new_h, new_w)
    pad_bottom, pad_right = max(crop_h - new_h, 0), max(crop_w - new_w, 0)
    if pad_bottom or pad_right:
        img = TF.pad(img, [0, 0, pad_right, pad_bottom], fill=fill, padding_mode=padding_mode)
    return img


# -- the size steps: per sample against torchvision ----------------------------------------------

SIZE_OPS = [
    (lambda m: m.RandomShortestSize((16, 20, 24), max_size=40), "shortest-max"),
    (lambda m: m.RandomShortestSize([18, 30]), "shortest"),
    (lambda m: m.RandomShortestSize(20, interpolation=v2.InterpolationMode.NEAREST), "shortest-nearest"),
    (lambda m: m.RandomResize(12, 30), "resize"),
    (lambda m: m.RandomResize(15, 19, interpolation=v2.InterpolationMode.BICUBIC, antialias=False), "resize-bicubic"),
    (lambda m: m.ScaleJitter((32, 32)), "jitter"),
    (lambda m: m.ScaleJitter((40, 24), scale_range=(0.5, 1.5)), "jitter-asym"),
]


@pytest.mark.parametrize("make", [c[0] for c in SIZE_OPS], ids=[c[1] for c in SIZE_OPS])
def test_size_steps_match_torchvision_per_sample(make):
    tv = make(v2)
    ours = T.to_torchdali(tv)
    assert type(ours).__name__ == type(tv).__name__
    imgs = _images()
    outs = apply_to_images(T.Compose([ours]), imgs, seed=2)
    drawn = _drawn([ours], seed=2)[0]
    for i, img in enumerate(imgs):
        size = [int(drawn["height"][i]), int(drawn["width"][i])]
        ref = TF.resize(img, size, interpolation=tv.interpolation, antialias=tv.antialias)
        assert_close_uint8(outs[i], ref)
    # the sizes differ per sample: each image comes back at its own
    assert len({tuple(o.shape) for o in outs}) > 1


@pytest.mark.parametrize("make", [c[0] for c in SIZE_OPS], ids=[c[1] for c in SIZE_OPS])
def test_size_draws_replay_torchvision_make_params(make):
    """torchvision's make_params with its random calls returning our numbers gives our sizes."""
    tv = make(v2)
    ours = T.to_torchdali(tv)
    n = 200
    sizes = np.array([SIZES[i % len(SIZES)] for i in range(n)])
    keys = _rng.sample_keys(5, 0, np.arange(n))
    u = _rng.uniform(keys, 0, ours.n_uniforms)
    drawn = drawn_params(T.compile_transforms([ours]), sizes, keys)[0]
    for i in range(n):
        if isinstance(ours, T.RandomShortestSize):
            pick = min(int(u[i, 0] * len(ours.min_size)), len(ours.min_size) - 1)
            patch = mock.patch("torch.randint", return_value=torch.tensor(pick))
        elif isinstance(ours, T.RandomResize):
            patch = mock.patch("torch.randint", return_value=torch.tensor(int(drawn["size"][i])))
        else:
            patch = mock.patch("torch.rand", return_value=torch.from_numpy(rand32(u[i, :1])))
        with patch:
            params = tv.make_params([torch.empty(3, *sizes[i])])
        got = params["size"] if "size" in params else None
        if isinstance(ours, T.RandomResize):  # resize(size=[s]): the shorter side
            h, w = sizes[i]
            assert min(drawn["height"][i], drawn["width"][i]) == got[0]
            assert (drawn["height"][i], drawn["width"][i]) == tuple(
                TF.resize(torch.empty(3, h, w), got).shape[1:])
        else:
            assert (drawn["height"][i], drawn["width"][i]) == tuple(got), i


def _torchvision_sizes(tv, size, n: int, seed: int = 0) -> list[tuple[int, int]]:
    torch.manual_seed(seed)
    img = torch.empty(3, *size)
    out = []
    for _ in range(n):
        s = tv.make_params([img])["size"]
        out.append(tuple(TF.resize(img, s).shape[1:]) if len(s) == 1 else tuple(s))
    return out


@pytest.mark.parametrize("make", [c[0] for c in SIZE_OPS if c[1] in ("shortest-max", "resize", "jitter")],
                         ids=["shortest-max", "resize", "jitter"])
def test_size_distributions_match_torchvision(make):
    tv = make(v2)
    size = (37, 53)
    drawn = _drawn([T.to_torchdali(tv)], [size] * N_DRAWS, seed=11)[0]
    ours = list(zip(drawn["height"].astype(int).tolist(), drawn["width"].astype(int).tolist()))
    theirs = _torchvision_sizes(tv, size, N_DRAWS)
    stat, p, df = chi_square_p(Counter(ours), Counter(theirs))
    assert p > 1e-3, f"chi-square {stat:.1f} on {df} degrees of freedom, p = {p:.2e}"
    w_ours, w_theirs = np.array([w for _, w in ours]), np.array([w for _, w in theirs])
    assert _ks(w_ours, w_theirs) < _ks_critical(N_DRAWS, N_DRAWS)


def test_size_steps_bound_the_output():
    assert T.compile_transforms([T.ScaleJitter((32, 48))]).size_bound(None).bounded
    assert T.compile_transforms([T.RandomShortestSize((20, 30), max_size=50)]).size_bound(None) == \
        SizeBound(50, 50, 1500)
    assert not T.compile_transforms([T.RandomShortestSize(20)]).size_bound(None).bounded
    assert T.compile_transforms([T.RandomShortestSize(20)]).size_bound(400).bounded
    assert T.compile_transforms([T.RandomResize(10, 20)]).size_bound(100).height == 19 * 100
    for t in (T.RandomShortestSize(20), T.RandomResize(10, 20), T.ScaleJitter((8, 8))):
        assert T.compile_transforms([t]).out_size is None


def test_too_small_a_result_is_refused_as_torchvision_does():
    with pytest.raises(ValueError, match="would be resized to 0x"):
        apply_to_images(T.Compose([T.ScaleJitter((4, 4), scale_range=(0.1, 0.1))]), [smooth_image(20, 40)])
    with pytest.raises(ValueError, match="min_size < max_size"):
        T.RandomResize(10, 10)
    with pytest.raises(ValueError, match="min_size must be"):
        T.RandomShortestSize([])


# -- RandomZoomOut ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fill,image_fill", [
    (0, (0, 0, 0)),
    ((123, 117, 104), (123, 117, 104)),
    ({tv_tensors.Image: (123, 117, 104), "others": 0}, (123, 117, 104)),
    # the SSD preset's defaultdict: torchvision looks the Image type up with `in`, misses, fills with 0
    (defaultdict(lambda: (123, 117, 104), {tv_tensors.Mask: 0}), (0, 0, 0)),
])
def test_zoom_out_matches_torchvision_per_sample(fill, image_fill):
    imgs = _images()
    tv = v2.RandomZoomOut(fill=fill, side_range=(1.0, 2.5), p=0.5)
    ours = T.to_torchdali(tv)
    outs = apply_to_images(T.Compose([ours]), imgs, seed=3)
    drawn = _drawn([ours], seed=3)[0]
    applied = 0
    for i, img in enumerate(imgs):
        pad = [int(drawn[k][i]) for k in ("left", "top", "right", "bottom")]
        applied += any(pad)
        ref = tv.transform(tv_tensors.Image(img), {"padding": pad}).as_subclass(torch.Tensor)
        assert torch.equal(outs[i], ref), i
        assert torch.equal(ref, TF.pad(img, pad, fill=list(image_fill)))
    assert 0 < applied < len(imgs)


def test_zoom_out_then_resize_is_exact_like_torchvision():
    """SSD resizes the canvas: torchvision blends the fill into the image's border pixels,
    and so does the kernel (the canvas is a fold box, not the valid window)."""
    imgs = _images()
    pipe = [T.RandomZoomOut(fill=MEAN, p=1.0), T.Resize((30, 30)), T.RandomHorizontalFlip()]
    outs = apply_to_images(T.Compose(pipe), imgs, seed=4)
    drawn = _drawn(pipe, seed=4)
    for i, img in enumerate(imgs):
        pad = [int(drawn[0][k][i]) for k in ("left", "top", "right", "bottom")]
        ref = TF.resize(TF.pad(img, pad, fill=list(MEAN)), [30, 30])
        if drawn[2]["flip"][i]:
            ref = TF.horizontal_flip(ref)
        assert_close_uint8(outs[i], ref, max_off=1, frac_within_1=1.0)


def test_zoom_out_draws_replay_and_match_torchvision_sampling():
    tv = v2.RandomZoomOut(fill=0, side_range=(1.0, 4.0), p=1.0)
    ours = T.to_torchdali(tv)
    size = (23, 31)
    n = 300
    keys = _rng.sample_keys(6, 0, np.arange(n))
    u = _rng.uniform(keys, 0, 4)
    drawn = drawn_params(T.compile_transforms([ours]), np.array([size] * n), keys)[0]
    img = torch.empty(3, *size)
    for i in range(n):
        with mock.patch("torch.rand", side_effect=[torch.from_numpy(rand32(u[i, 1:2])),
                                                   torch.from_numpy(rand32(u[i, 2:4]))]):
            pad = tv.make_params([img])["padding"]
        assert pad == [int(drawn[k][i]) for k in ("left", "top", "right", "bottom")], i
    # distributions: canvas width and horizontal position against torchvision's sampler
    drawn = _drawn([ours], [size] * N_DRAWS, seed=12)[0]
    torch.manual_seed(0)
    theirs = np.array([tv.make_params([img])["padding"] for _ in range(N_DRAWS)])
    ours_pad = np.stack([drawn[k] for k in ("left", "top", "right", "bottom")], axis=1)
    for what, a, b in (("canvas width", ours_pad[:, 0] + ours_pad[:, 2], theirs[:, 0] + theirs[:, 2]),
                       ("left", ours_pad[:, 0], theirs[:, 0]), ("top", ours_pad[:, 1], theirs[:, 1])):
        assert _ks(a, b) < _ks_critical(N_DRAWS, N_DRAWS), what
    # p: the share of samples left alone
    half = _drawn([T.RandomZoomOut(p=0.3)], [size] * N_DRAWS, seed=13)[0]
    kept = float(np.mean((half["left"] + half["right"] + half["top"] + half["bottom"]) == 0))
    assert abs(kept - 0.7) < 0.04


def test_zoom_out_plan():
    plan = T.compile_transforms([T.RandomZoomOut(fill=MEAN), T.Resize((16, 16))])
    assert plan.pad_mode == "constant" and plan.fill == (123.0, 117.0, 104.0) and plan.out_size == (16, 16)
    plan = T.compile_transforms([T.RandomZoomOut()])
    assert plan.out_size is None and plan.fill == (0.0, 0.0, 0.0)
    assert plan.size_bound(100) == SizeBound(400, 400, 1600)
    with pytest.raises(ValueError, match="Invalid side range"):
        T.RandomZoomOut(side_range=(0.5, 2.0))
    with pytest.raises(ValueError, match="pads with zeros"):
        T.compile_transforms([T.Resize((20, 20)), T.CenterCrop(30), T.RandomZoomOut(fill=MEAN)])


# -- FixedSizeCrop ---------------------------------------------------------------------------------

class FixedSizeCrop(torch.nn.Module):
    """Stands for references/detection/transforms.py's class (its attributes; the script is
    not importable): matched by class name from any module."""

    def __init__(self, size, fill=0, padding_mode="constant") -> None:
        super().__init__()
        self.crop_height, self.crop_width = (size, size) if isinstance(size, int) else size
        self.fill = fill
        self.padding_mode = padding_mode


@pytest.mark.parametrize("fill,mode", [(0, "constant"), (MEAN, "constant"), (0, "edge")])
def test_fixed_size_crop_matches_the_reference_per_sample(fill, mode):
    imgs = _images()
    ours = T.to_torchdali(FixedSizeCrop((24, 28), fill=fill, padding_mode=mode))
    assert isinstance(ours, T.FixedSizeCrop) and ours.size == [24, 28]
    plan = T.compile_transforms([ours, T.RandomHorizontalFlip()])
    assert plan.out_size == (24, 28)
    outs = apply_to_images(T.Compose([ours, T.RandomHorizontalFlip()]), imgs, seed=5)
    keys = _rng.sample_keys(5, 0, np.arange(len(imgs)))
    r = rand32(_rng.uniform(keys, 0, 1)[:, 0])
    drawn = _drawn([ours, T.RandomHorizontalFlip()], seed=5)
    for i, img in enumerate(imgs):
        ref = _fixed_size_crop(img, (24, 28), float(r[i]), list(fill) if isinstance(fill, tuple) else fill, mode)
        if drawn[1]["flip"][i]:
            ref = TF.horizontal_flip(ref)
        assert torch.equal(outs[i], ref), i


def test_large_scale_jitter_matches_torchvision_and_the_reference():
    """The lsj preset: ScaleJitter, then FixedSizeCrop(fill=mean) pads outside the resized image
    (the valid window, filled), then the flip."""
    imgs = _images()
    pipe = [T.ScaleJitter((32, 32)), T.FixedSizeCrop(32, fill=MEAN), T.RandomHorizontalFlip()]
    outs = apply_to_images(T.Compose(pipe), imgs, seed=6)
    drawn = _drawn(pipe, seed=6)
    r = rand32(_rng.uniform(_rng.sample_keys(6, 0, np.arange(len(imgs))), 1, 1)[:, 0])
    for i, img in enumerate(imgs):
        ref = TF.resize(img, [int(drawn[0]["height"][i]), int(drawn[0]["width"][i])])
        ref = _fixed_size_crop(ref, (32, 32), float(r[i]), list(MEAN))
        if drawn[2]["flip"][i]:
            ref = TF.horizontal_flip(ref)
        assert_close_uint8(outs[i], ref, max_off=1, frac_within_1=1.0)


def test_fixed_size_crop_offset_distribution():
    drawn = _drawn([T.FixedSizeCrop(10)], [(30, 50)] * N_DRAWS, seed=7)[0]
    g = torch.Generator().manual_seed(0)
    theirs = np.array([int(20 * torch.rand(1, generator=g)) for _ in range(N_DRAWS)])
    assert _ks(drawn["top"], theirs) < _ks_critical(N_DRAWS, N_DRAWS)
    # one uniform places both axes, as the reference: top = int(20 r), left = int(40 r)
    assert np.all(np.abs(drawn["top"] / 20 - drawn["left"] / 40) < 1 / 20 + 1 / 40)
    assert np.corrcoef(drawn["top"], drawn["left"])[0, 1] > 0.99


# -- the kernel --------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pipe", [
    [T.RandomZoomOut(fill=MEAN, side_range=(1.0, 2.0), p=1.0), T.Resize((9, 11))],
    [T.ScaleJitter((12, 12), scale_range=(0.5, 1.2)), T.FixedSizeCrop(12, fill=MEAN), T.RandomHorizontalFlip()],
    [T.RandomShortestSize((6, 8), max_size=12), T.RandomVerticalFlip()],
], ids=["zoom-out", "lsj", "multiscale"])
def test_kernel_matches_reference(device, pipe):
    imgs = [smooth_image(h, w, seed=h) for h, w in [(11, 9), (7, 12), (10, 10)]]
    plan = T.compile_transforms(pipe)
    got = run_plan(plan, imgs, device, _execute.KERNEL, seed=1)
    exp = run_plan(plan, imgs, "cpu", _execute.REFERENCE, seed=1)
    for a, b in zip(got, exp):
        assert a.shape == b.shape
        diff = (a.int() - b.int()).abs()
        assert diff.max().item() <= 1 and (diff != 0).double().mean().item() <= 0.01


# -- the presets' steps through the loader ------------------------------------------------------------

def test_multiscale_preset_through_the_cpu_loader():
    ds = Decoded(SIZES + [(30, 20)])
    tv = v2.Compose([v2.RandomShortestSize(min_size=(16, 20, 24), max_size=40), v2.RandomHorizontalFlip(p=0.5),
                     v2.ToDtype(torch.float32, scale=True)])
    loader = td.DataLoader(ds, batch_size=3, transforms=tv, device="cpu", seed=8)
    keys = _rng.sample_keys(loader._effective_seed(), 0, np.arange(len(ds)))
    drawn = drawn_params(loader.plan, np.array(ds.sizes), keys)
    seen = 0
    for images, targets in loader:
        assert isinstance(images, list)
        for image, t in zip(images, targets):
            ref = TF.resize(ds.image(t), [int(drawn[0]["height"][t]), int(drawn[0]["width"][t])])
            if drawn[1]["flip"][t]:
                ref = TF.horizontal_flip(ref)
            ref = TF.to_dtype(ref, torch.float32, scale=True)
            assert image.shape == ref.shape and (image - ref).abs().max().item() <= 2 / 255 + 1e-6
            seen += 1
    assert seen == len(ds)


def test_large_scale_jitter_preset_through_the_cpu_loader_is_stacked():
    ds = Decoded(SIZES)
    pipe = v2.Compose([v2.ScaleJitter(target_size=(32, 32), antialias=True),
                       FixedSizeCrop(size=(32, 32), fill=MEAN), v2.RandomHorizontalFlip(p=0.5)])
    loader = td.DataLoader(ds, batch_size=5, transforms=pipe, device="cpu", seed=9)
    images, targets = next(iter(loader))
    assert isinstance(images, torch.Tensor) and images.shape == (5, 3, 32, 32) and targets.tolist() == list(range(5))


# -- GPU path twins ------------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("tf", [
    [T.RandomShortestSize((16, 20, 24), max_size=40), T.RandomHorizontalFlip()],
    [T.ScaleJitter((32, 32), scale_range=(0.5, 2.0)), T.FixedSizeCrop(32, fill=MEAN), T.RandomHorizontalFlip()],
    [T.RandomZoomOut(fill=MEAN), T.Resize((40, 40)), T.ToDtype(torch.float32, scale=True)],
    [T.RandomCrop(20, pad_if_needed=True, padding_mode="reflect"), T.RandomResize(16, 32)],
    [T.RandomCrop(24, padding=4, padding_mode="reflect"), T.RandomHorizontalFlip()],
], ids=["multiscale", "lsj", "zoom-out", "reflect-resize", "cifar-reflect"])
def test_gpu_loader_matches_the_cpu_path(tf):
    assert_gpu_loader_matches_cpu_path(Jpegs(SIZES + [(23, 31), (31, 23)]), batch_size=4, transforms=tf, seed=3)


def test_registry_rows():
    table = T.supported_table()
    for usage in ("RandomShortestSize(min_size, max_size=None", "RandomResize(min_size, max_size",
                  "ScaleJitter(target_size, scale_range=(0.1, 2.0)", "RandomZoomOut(fill=0, side_range=(1.0, 4.0)",
                  "FixedSizeCrop(size, fill=0"):
        assert usage in table
    for name in ("RandomShortestSize", "RandomResize", "ScaleJitter", "RandomZoomOut", "FixedSizeCrop"):
        assert name in T.SUPPORTED
