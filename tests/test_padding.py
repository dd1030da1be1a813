"""RandomCrop's padding and pad_if_needed, and Pad, against torchvision.transforms.v2.

Zero padding (``fill=0, padding_mode="constant"``) runs fused, as a crop box that
starts at negative coordinates; every test compares, sample by sample, with
torchvision applying the same drawn top/left. CIFAR-10's recipe, ``RandomCrop(32,
padding=4)`` + flip + ToDtype + Normalize, runs through the functional path, the
kernel backend and the loader's CPU path. Other fills and the edge, reflect and
symmetric modes run through the kernel's fold box: ``test_padding_modes.py``; what
is still refused here is a malformed argument, by name.
"""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torchvision.transforms as v1  # noqa: E402
import torchvision.transforms.v2 as v2  # noqa: E402
import torchvision.transforms.v2.functional as TF  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

import torchdali as td  # noqa: E402
from torchdali import _rng  # noqa: E402
from torchdali import transforms as T  # noqa: E402
from torchdali.transforms import _execute  # noqa: E402
from torchdali.transforms import _geometry as G  # noqa: E402
from torchdali.transforms import functional as F  # noqa: E402
from torchdali.transforms._plan import apply_to_images, pack_images, to_hwc  # noqa: E402

from ._helpers import assert_close_uint8, kernel_devices, smooth_image  # noqa: E402

DEVICES = kernel_devices()
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
# our ToDtype + Normalize is one folded float32 affine, torchvision's two steps: a few ulps apart
FLOAT_ATOL = 2e-6


def _cifar(module=T, flip: bool = True, normalize: bool = True) -> list:
    steps = [module.RandomCrop(32, padding=4)]
    if flip:
        steps.append(module.RandomHorizontalFlip())
    if normalize:
        steps += [module.ToDtype(torch.float32, scale=True), module.Normalize(CIFAR_MEAN, CIFAR_STD)]
    return steps


def _images(n: int, h: int = 32, w: int = 32, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g) for _ in range(n)]


def _drawn(plan: T.Plan, sizes: np.ndarray, keys: np.ndarray) -> dict[str, np.ndarray]:
    """The per-sample top/left (image coordinates) and flip the plan draws for these samples."""
    g = G.BatchGeometry.identity(sizes)
    out: dict[str, np.ndarray] = {}
    for stream, t in enumerate(plan.transforms):  # a leaf's stream is its position (Plan._draw)
        u = _rng.uniform(keys, stream, t.n_uniforms) if t.n_uniforms else None
        p = t.make_params(g, u)
        if isinstance(t, T.RandomCrop):
            out.update(p)
        elif isinstance(t, T.RandomHorizontalFlip):
            out["flip"] = p["flip"]
        t.transform(g, p)
    return out


def _torchvision(img: torch.Tensor, tv_crop, top: int, left: int, flip: bool, normalize: bool) -> torch.Tensor:
    """torchvision's own RandomCrop.transform with the padding of its own make_params and our
    top/left (shifted into its padded image's coordinates), then flip, ToDtype, Normalize."""
    params = tv_crop.make_params([img])
    pad_left, pad_top = params["padding"][0], params["padding"][1]
    params.update(top=top + pad_top, left=left + pad_left, needs_crop=True)
    assert 0 <= params["top"] <= img.shape[-2] + pad_top + params["padding"][3] - params["height"]
    assert 0 <= params["left"] <= img.shape[-1] + pad_left + params["padding"][2] - params["width"]
    out = tv_crop.transform(img, params)
    if flip:
        out = TF.horizontal_flip(out)
    if normalize:
        out = TF.normalize(TF.to_dtype(out, torch.float32, scale=True), CIFAR_MEAN, CIFAR_STD)
    return out


def _assert_same(ours: torch.Tensor, ref: torch.Tensor) -> None:
    assert ours.shape == ref.shape and ours.dtype == ref.dtype, (ours.shape, ref.shape, ours.dtype, ref.dtype)
    if ours.dtype == torch.uint8:
        assert torch.equal(ours, ref)
    else:
        torch.testing.assert_close(ours, ref, rtol=0, atol=FLOAT_ATOL)


# -- CIFAR-10's recipe --------------------------------------------------------------------------


@pytest.mark.parametrize("normalize", [False, True])
def test_cifar_recipe_matches_torchvision_per_sample(normalize):
    n, seed = 48, 3
    imgs = _images(n)
    plan = T.compile_transforms(_cifar(normalize=normalize))
    outs = apply_to_images(_cifar(normalize=normalize), imgs, seed=seed)
    drawn = _drawn(plan, np.array([[32, 32]] * n), _rng.sample_keys(seed, 0, np.arange(n)))
    tv_crop = v2.RandomCrop(32, padding=4)
    for i in range(n):
        ref = _torchvision(imgs[i], tv_crop, int(drawn["top"][i]), int(drawn["left"][i]), bool(drawn["flip"][i]),
                           normalize)
        _assert_same(outs[i], ref)
    # the batch really reaches into the padding, on every side, and flips some samples
    assert drawn["top"].min() < 0 < drawn["top"].max() and drawn["left"].min() < 0 < drawn["left"].max()
    assert 0 < drawn["flip"].sum() < n


@pytest.mark.parametrize("device", DEVICES)
def test_cifar_recipe_on_the_kernel_backend_matches_torchvision(device):
    n, seed = 12, 5
    imgs = _images(n, seed=1)
    plan = T.compile_transforms(_cifar())
    hwc = [to_hwc(im) for im in imgs]
    data, offsets, shapes = pack_images(hwc)
    keys = _rng.sample_keys(seed, 0, np.arange(n))
    bp = plan.params(shapes[:, :2].numpy(), keys)
    got = _execute.execute(plan, data.to(device), offsets.to(device), shapes.to(device), bp, _execute.KERNEL).cpu()
    drawn = _drawn(plan, shapes[:, :2].numpy(), keys)
    tv_crop = v2.RandomCrop(32, padding=4)
    for i in range(n):
        ref = _torchvision(imgs[i], tv_crop, int(drawn["top"][i]), int(drawn["left"][i]), bool(drawn["flip"][i]),
                           True)
        _assert_same(got[i], ref)


class _Cifar(torch.utils.data.Dataset):
    """32x32 decoded HWC uint8 images, target = index % 10."""

    def __init__(self, n: int) -> None:
        self.images = [im.permute(1, 2, 0).numpy().copy() for im in _images(n, seed=7)]

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return self.images[i], i % 10


@pytest.mark.parametrize("module", [v2, v1], ids=["v2", "v1"])
def test_cifar_recipe_through_the_cpu_loader_with_torchvision_objects(module):
    """The one-line swap: torchvision's objects, unchanged, as transforms=."""
    steps = _cifar(module, normalize=False)
    steps += [module.ToDtype(torch.float32, scale=True) if module is v2 else module.ConvertImageDtype(torch.float32),
              module.Normalize(CIFAR_MEAN, CIFAR_STD)]
    ds, seed = _Cifar(20), 11
    loader = td.DataLoader(ds, batch_size=8, transforms=module.Compose(steps), device="cpu", seed=seed)
    batches = list(loader)  # one epoch: epoch 0's keys
    images = torch.cat([b for b, _ in batches])
    targets = torch.cat([t for _, t in batches])
    assert images.shape == (20, 3, 32, 32) and images.dtype == torch.float32
    assert targets.tolist() == [i % 10 for i in range(20)]
    plan = T.compile_transforms(module.Compose(steps))
    drawn = _drawn(plan, np.array([[32, 32]] * 20), _rng.sample_keys(seed, 0, np.arange(20)))
    tv_crop = v2.RandomCrop(32, padding=4)
    for i in range(20):
        img = torch.from_numpy(ds.images[i]).permute(2, 0, 1)
        ref = _torchvision(img, tv_crop, int(drawn["top"][i]), int(drawn["left"][i]), bool(drawn["flip"][i]), True)
        _assert_same(images[i], ref)


@pytest.mark.parametrize("make", [
    lambda: v2.RandomCrop(32, padding=4),
    lambda: v1.RandomCrop(32, padding=4),
    lambda: v2.RandomCrop(32, padding=[4]),
    lambda: v2.RandomCrop([32], padding=(4, 4), pad_if_needed=True, fill=0, padding_mode="constant"),
])
def test_torchvision_random_crop_with_padding_converts(make):
    plan = T.compile_transforms(v2.Compose([make(), v2.RandomHorizontalFlip(), v2.ToImage(),
                                            v2.ToDtype(torch.float32, scale=True),
                                            v2.Normalize(CIFAR_MEAN, CIFAR_STD)]))
    crop = plan.transforms[0]
    assert isinstance(crop, T.RandomCrop) and crop.size == [32, 32] and crop.pads == (4, 4, 4, 4)
    assert plan.out_size == (32, 32) and plan.out_dtype == torch.float32


@pytest.mark.parametrize("module", [v2, v1], ids=["v2", "v1"])
def test_converted_padding_keeps_torchvision_sides(module):
    """v2 stores its padding in torch's (left, right, top, bottom) order; the sides must survive."""
    crop = T.to_torchdali(module.RandomCrop((30, 36), padding=(1, 2, 3, 4)))
    assert crop.pads == (1, 2, 3, 4)
    assert T.to_torchdali(module.RandomCrop(30, padding=(1, 2))).pads == (1, 2, 1, 2)
    pad = T.to_torchdali(module.Pad((1, 2, 3, 4)))
    assert isinstance(pad, T.Pad) and pad.pads == (1, 2, 3, 4)


# -- padding forms and pad_if_needed ------------------------------------------------------------


@pytest.mark.parametrize("kwargs,size", [
    (dict(padding=(1, 2, 3, 4)), (30, 36)),  # left, top, right, bottom
    (dict(padding=(3, 1)), (33, 30)),  # left/right, top/bottom
    (dict(padding=[5]), (40, 40)),
    (dict(padding=(-2, 3, 1, -1)), (30, 30)),  # negative padding crops
    (dict(pad_if_needed=True), (48, 40)),  # images smaller than the crop
    (dict(padding=2, pad_if_needed=True), (45, 41)),
    (dict(padding=(0, 0, 0, 0), padding_mode="reflect"), (28, 20)),  # nothing to pad: the mode does not matter
])
def test_random_crop_padding_forms_match_torchvision(kwargs, size):
    sizes = [(32, 32), (28, 40), (20, 25), (37, 30), (44, 44)]
    seed = 2
    tv_crop = v2.RandomCrop(size, **kwargs)
    ours = T.RandomCrop(size, **kwargs)
    usable = [s for s in sizes if _fits(tv_crop, s)]
    imgs = [smooth_image(h, w, seed=i) for i, (h, w) in enumerate(usable)]
    outs = apply_to_images(T.Compose([ours]), imgs, seed=seed)
    u = _rng.uniform(_rng.sample_keys(seed, 0, np.arange(len(imgs))), 0, 2)
    p = ours.make_params(G.BatchGeometry.identity(np.array(usable)), u)
    for i, img in enumerate(imgs):
        ref = _torchvision(img, tv_crop, int(p["top"][i]), int(p["left"][i]), False, False)
        _assert_same(outs[i], ref)


def _fits(tv_crop, size) -> bool:
    try:
        tv_crop.make_params([torch.empty(3, *size)])
    except ValueError:
        return False
    return True


def test_pad_if_needed_pads_small_images_on_both_sides():
    """A 20x25 image and a 32x32 crop: 12 rows and 7 columns on each side, as torchvision."""
    t = T.RandomCrop(32, pad_if_needed=True)
    n = 4000
    u = _rng.uniform(_rng.sample_keys(4, 0, np.arange(n)), 0, 2)
    p = t.make_params(G.BatchGeometry.identity(np.array([[20, 25]] * n)), u)
    assert set(p["top"].astype(int)) == set(range(-12, 1))  # padded height 44: top in 0..12, minus 12
    assert set(p["left"].astype(int)) == set(range(-7, 1))  # padded width 39: left in 0..7, minus 7
    tv = v2.RandomCrop(32, pad_if_needed=True).make_params([torch.empty(3, 20, 25)])
    assert tv["padding"] == [7, 12, 7, 12]


def test_crop_larger_than_the_padded_image_is_refused_like_torchvision():
    img = smooth_image(20, 30)
    with pytest.raises(ValueError, match=r"required crop size \(32, 32\) is larger than padded input image size "
                                         r"\(24, 34\).*pad_if_needed=True"):
        apply_to_images(T.Compose([T.RandomCrop(32, padding=2)]), [img])
    with pytest.raises(ValueError, match=r"larger than padded input image size \(24, 34\)"):
        v2.RandomCrop(32, padding=2)(img)


def test_unpadded_random_crop_draws_are_unchanged():
    """Without padding the draws are those of the RandomCrop before padding existed."""
    sizes = np.array([[100, 120], [64, 200], [40, 33], [32, 32]], dtype=np.float64)
    u = _rng.uniform(_rng.sample_keys(1, 0, np.arange(4)), 0, 2)
    p = T.RandomCrop(32).make_params(G.BatchGeometry.identity(sizes), u)
    assert np.array_equal(p["top"], np.floor(u[:, 0] * (sizes[:, 0] - 32 + 1)))
    assert np.array_equal(p["left"], np.floor(u[:, 1] * (sizes[:, 1] - 32 + 1)))


def test_positions_cover_every_offset_uniformly():
    """RandomCrop(32, padding=4) on 32x32: all 9 x 9 offsets, each about 1/81 of the samples,
    and each axis's marginal matches torchvision's own sampler."""
    n = 16200
    t = T.RandomCrop(32, padding=4)
    u = _rng.uniform(_rng.sample_keys(9, 0, np.arange(n)), 0, 2)
    p = t.make_params(G.BatchGeometry.identity(np.array([[32, 32]] * n)), u)
    top, left = p["top"].astype(int), p["left"].astype(int)
    counts = np.zeros((9, 9), dtype=int)
    np.add.at(counts, (top + 4, left + 4), 1)
    assert (counts > 0).all() and counts.sum() == n  # every offset, none outside -4..4
    expected = n / 81
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 130  # 80 degrees of freedom: p < 1e-3 above ~124
    torch.manual_seed(0)
    tv = v2.RandomCrop(32, padding=4)
    tv_top = np.array([tv.make_params([torch.empty(3, 32, 32)])["top"] - 4 for _ in range(4000)])
    assert abs(tv_top.mean() - top.mean()) < 0.15 and abs(tv_top.std() - top.std()) < 0.15
    # per sample: the draws differ across a batch
    assert len(set(zip(top[:100], left[:100]))) > 50


# -- Pad ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("padding", [3, [2], [1, 2], [1, 2, 3, 4], (0, 5, 0, 0), [-2, 3, 1, -1]])
def test_pad_alone_matches_torchvision(padding):
    img = smooth_image(17, 23)
    ref = TF.pad(img, padding)
    assert torch.equal(T.Pad(padding)(img), ref)
    assert torch.equal(F.pad(img, padding), ref)
    assert torch.equal(F.pad(img.permute(1, 2, 0), padding), ref)  # HWC in, CHW out


def test_pad_in_a_pipeline_matches_torchvision():
    imgs = [smooth_image(h, w, seed=h) for h, w in [(20, 30), (33, 21), (40, 40)]]
    pipe = [T.Pad([3, 1]), T.CenterCrop(36), T.RandomHorizontalFlip(p=1.0)]
    tv = v2.Compose([v2.Pad([3, 1]), v2.CenterCrop(36), v2.RandomHorizontalFlip(p=1.0)])
    for ours, img in zip(apply_to_images(T.Compose(pipe), imgs), imgs):
        assert torch.equal(ours, tv(img))
    # after a resize the padding is exact too (it is outside the resized image)
    pipe = T.Compose([T.Resize((24, 28)), T.Pad((1, 2, 3, 4))])
    ref = TF.pad(TF.resize(imgs[0], [24, 28], antialias=True), [1, 2, 3, 4])
    assert T.compile_transforms(pipe).out_size == (30, 32)
    assert_close_uint8(apply_to_images(pipe, imgs[:1])[0], ref)


def test_pad_through_the_cpu_loader():
    ds = _Cifar(6)
    tv = v2.Compose([v2.Pad(4), v2.CenterCrop(36), v2.ToDtype(torch.float32, scale=True),
                     v2.Normalize(CIFAR_MEAN, CIFAR_STD)])
    images = torch.cat([b for b, _ in td.DataLoader(ds, batch_size=4, transforms=tv, device="cpu")])
    for i in range(len(ds)):
        _assert_same(images[i], tv(torch.from_numpy(ds.images[i]).permute(2, 0, 1)))


def test_pad_static_size():
    from torchdali.transforms._state import StaticState

    assert T.Pad((1, 2, 3, 4)).update_state(StaticState(size=(10, 20))).size == (16, 24)
    assert T.Pad(2).update_state(StaticState()).size is None  # still depends on the image
    with pytest.raises(ValueError, match="leaves no pixels"):
        T.Pad(-5).update_state(StaticState(size=(10, 20)))


# -- what is refused ----------------------------------------------------------------------------


@pytest.mark.parametrize("make,error,match", [
    (lambda: T.Pad(2, padding_mode="wrap"), ValueError, "padding_mode='wrap'"),
    (lambda: T.RandomCrop(32, padding=4, padding_mode="circular"), ValueError, "padding_mode='circular'"),
    (lambda: T.RandomCrop(32, padding=4, fill=(1, 2)), TypeError, "fill must be"),
    (lambda: F.pad(smooth_image(8, 8), 2, fill="red"), TypeError, "fill must be"),
    (lambda: F.pad(smooth_image(8, 8), 2, fill=-1), ValueError, "does not fit a uint8 image"),
    (lambda: T.RandomCrop(32, padding=(1, 2, 3)), ValueError, "padding must be"),
    (lambda: T.Pad(2.5), ValueError, "padding must be"),
])
def test_malformed_padding_arguments_are_refused_by_name(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize("make", [
    lambda: T.RandomCrop(32, padding=4, fill=None),
    lambda: T.RandomCrop(32, padding=4, fill=(0, 0, 0)),
    lambda: T.RandomCrop(32, padding=4, fill={tv_tensors.Image: 0, tv_tensors.Mask: 255}),
    lambda: T.RandomCrop(32, padding_mode="reflect"),  # no padding: the mode is never used (torchvision)
    lambda: T.Pad([-1, -2], padding_mode="edge"),  # only crops
    lambda: T.to_torchdali(v2.RandomCrop(32, padding=4, fill={tv_tensors.Image: 0, "others": 0})),
])
def test_zero_fills_are_accepted(make):
    make()


def test_refused_padding_is_listed_with_the_padding_advice():
    pipe = v2.Compose([v2.RandomCrop(32, padding=4, fill=(1, 2)), v2.Pad(2, fill=[7, 8]),
                       v2.RandomHorizontalFlip()])
    with pytest.raises(ValueError) as info:
        T.compile_transforms(pipe)
    text = str(info.value)
    assert text.startswith("2 steps")
    assert "pipeline[0] RandomCrop: RandomCrop: fill must be" in text
    assert "pipeline[1] Pad: Pad: fill must be" in text
    assert text.count("padding_mode constant, edge, reflect or symmetric") == 2
    assert "no fused equivalent" not in text


def test_registry_rows():
    table = T.supported_table()
    assert "`Pad(padding, fill=0, padding_mode=\"constant\")`" in table
    assert "`RandomCrop(size, padding=None, pad_if_needed=False, fill=0, padding_mode=\"constant\")`" in table
    assert "Pad" in T.SUPPORTED and "RandomCrop" in T.SUPPORTED
