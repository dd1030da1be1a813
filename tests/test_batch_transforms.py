"""Batch transforms (MixUp, CutMix) and torch's collate_fn semantics, against torchvision."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import torchvision
from torch.utils.data import DataLoader as TorchLoader, default_collate
from torchvision import tv_tensors
from torchvision.transforms import v2

import torchdali as td
from torchdali import _rng
from torchdali import transforms as T
from torchdali._executor._deliver import seeded
from torchdali.transforms._batch import sample_beta

from ._helpers import make_folder

NUM_CLASSES = 5
FLOAT = T.Compose([T.Resize((10, 14)), T.ToDtype(torch.float32, scale=True)])


class Images(torch.utils.data.Dataset):
    """Decoded images of varied sizes; target = index % NUM_CLASSES."""

    def __init__(self, n: int = 22, targets: bool = True):
        self.n, self.targets = n, targets

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = np.random.default_rng(i)
        img = g.integers(0, 256, (12 + i % 5, 15 + i % 3, 3), dtype=np.uint8)
        return (img, i % NUM_CLASSES) if self.targets else img


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    return float(np.abs(np.searchsorted(a, grid, side="right") / len(a)
                        - np.searchsorted(b, grid, side="right") / len(b)).max())


def _batch(seed: int = 0, b: int = 6, dtype=torch.float32, h: int = 7, w: int = 9):
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(b, 3, h, w, generator=g)
    if dtype == torch.uint8:
        images = (images * 255).to(torch.uint8)
    else:
        images = images.to(dtype)
    labels = torch.randint(0, NUM_CLASSES, (b,), generator=g)
    return images, labels


# -- the sampler --------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.2, 1.0, 2.5])
def test_beta_sampler_matches_torch_beta(alpha):
    n = 4000
    rng = _rng.Stream(123)
    ours = np.array([sample_beta(alpha, alpha, rng) for _ in range(n)])
    torch.manual_seed(0)
    ref = torch.distributions.Beta(torch.tensor(alpha), torch.tensor(alpha)).sample((n,)).double().numpy()
    assert ((ours >= 0) & (ours <= 1)).all()
    # critical value of the two-sample KS test at p = 0.001 for n = m = 4000: 1.95 * sqrt(2 / n)
    assert _ks(ours, ref) < 1.95 * np.sqrt(2 / n), alpha
    other = torch.distributions.Beta(torch.tensor(alpha * 3), torch.tensor(alpha)).sample((n,)).double().numpy()
    assert _ks(ours, other) > 1.95 * np.sqrt(2 / n)  # the test tells distributions apart


def test_cutmix_box_sampling_matches_torchvision():
    n, h, w = 3000, 13, 17
    images, labels = _batch(b=2, h=h, w=w)
    ours, theirs = CutMixOf(), v2.CutMix(alpha=1.0, num_classes=NUM_CLASSES)
    torch.manual_seed(0)
    ref = [theirs.make_params([images]) for _ in range(n)]
    rng = _rng.Stream(7)
    got = [ours.make_params((images, labels), rng) for _ in range(n)]
    for k in range(4):  # each box coordinate
        assert _ks(np.array([p["box"][k] for p in got], float), np.array([p["box"][k] for p in ref], float)) < 0.05
    assert _ks(np.array([p["lam_adjusted"] for p in got]), np.array([p["lam_adjusted"] for p in ref])) < 0.05
    for p in got:
        x1, y1, x2, y2 = p["box"]
        assert 0 <= x1 <= x2 <= w and 0 <= y1 <= y2 <= h
        assert p["lam_adjusted"] == 1.0 - (x2 - x1) * (y2 - y1) / (w * h)


def CutMixOf(alpha: float = 1.0) -> T.CutMix:
    return T.CutMix(alpha=alpha, num_classes=NUM_CLASSES)


# -- the same parameters give torchvision's result ---------------------------------

@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("label_kind", ["index", "probs64"])
def test_mixup_equals_torchvision_with_the_same_lambda(seed, label_kind):
    images, labels = _batch(seed)
    if label_kind == "probs64":
        labels = torch.nn.functional.one_hot(labels, NUM_CLASSES).double() * 0.9 + 0.02
    ours = T.MixUp(alpha=0.2, num_classes=NUM_CLASSES)
    params = ours.make_params((images, labels), _rng.Stream(seed))
    theirs = v2.MixUp(alpha=0.2, num_classes=NUM_CLASSES)
    theirs.make_params = lambda flat: dict(params)
    exp_images, exp_labels = theirs(images.clone(), labels.clone())
    got_images, got_labels = ours.transform((images, labels), params)
    assert 0.0 <= params["lam"] <= 1.0
    assert torch.equal(got_images, exp_images)
    assert got_labels.dtype == exp_labels.dtype and got_labels.shape == exp_labels.shape
    assert torch.equal(got_labels, exp_labels)
    # a different lambda gives a different batch: the comparison can fail
    other, _ = ours.transform((images, labels), {"lam": params["lam"] * 0.5 + 0.25})
    assert not torch.equal(other, exp_images)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_cutmix_equals_torchvision_with_the_same_box(seed, dtype):
    images, labels = _batch(seed, dtype=dtype, h=11, w=8)
    images = images.contiguous(memory_format=torch.channels_last) if seed % 2 else images
    ours = CutMixOf()
    params = ours.make_params((images, labels), _rng.Stream(seed))
    theirs = v2.CutMix(alpha=1.0, num_classes=NUM_CLASSES)
    theirs.make_params = lambda flat: dict(params)
    exp_images, exp_labels = theirs(images.clone(), labels.clone())
    before = images.clone()
    got_images, got_labels = ours.transform((images, labels), params)
    assert torch.equal(images, before)  # the input is not modified
    assert got_images.dtype == exp_images.dtype and torch.equal(got_images, exp_images)
    assert got_labels.dtype == torch.float32 and torch.equal(got_labels, exp_labels)


def test_call_keeps_tv_tensors_and_follows_torch_manual_seed():
    images, labels = _batch()
    ours = T.MixUp(alpha=1.0, num_classes=NUM_CLASSES)
    torch.manual_seed(3)
    a = ours(tv_tensors.Image(images), labels)
    torch.manual_seed(3)
    b = ours(tv_tensors.Image(images), labels)
    assert isinstance(a[0], tv_tensors.Image) and torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    d = ours({"image": images, "Labels": labels})  # torchvision's default labels getter on a dict
    assert d["Labels"].shape == (6, NUM_CLASSES)
    with pytest.raises(ValueError, match="num_classes"):
        T.MixUp()(images, labels)
    with pytest.raises(TypeError, match="floating-point"):
        ours(images.mul(255).to(torch.uint8), labels)
    with pytest.raises(ValueError, match="alpha"):
        T.CutMix(alpha=0.0)


def test_torchvision_objects_convert():
    mix = v2.MixUp(alpha=0.2, num_classes=7)
    cut = v2.CutMix(alpha=1.0, num_classes=7)
    for tv, cls in ((mix, T.MixUp), (cut, T.CutMix)):
        ours = T.to_batch_transform(tv)
        assert type(ours) is cls and ours.alpha == tv.alpha and ours.num_classes == 7
    choice = T.to_batch_transform(v2.RandomChoice([mix, cut], p=[1.0, 3.0]))
    assert isinstance(choice, T.BatchRandomChoice) and choice.p == [0.25, 0.75]
    assert [type(t) for t in choice.transforms] == [T.MixUp, T.CutMix]
    images, labels = _batch()
    rng = _rng.Stream(0)
    picks = [choice.make_params((images, labels), rng)["index"] for _ in range(2000)]
    assert abs(np.mean(picks) - 0.75) < 0.04
    assert T.to_batch_transform(v2.RandomChoice([mix, v2.RandomHorizontalFlip()])) is None  # runs as it is
    assert T.to_batch_transform(lambda x, y: (x, y)) is None
    assert "MixUp" in T.SUPPORTED and "CutMix" in T.SUPPORTED
    for bad in (T.Compose([T.Resize(8)]).transforms + [T.MixUp(num_classes=3)], [v2.Resize((8, 8)), cut]):
        with pytest.raises(ValueError, match="batch_transforms"):
            T.compile_transforms(bad)


# -- through the DataLoader: torch's collate_fn semantics ---------------------------

class V1Mixup(torch.nn.Module):
    """A transforms-v1-style batch transform: forward(batch, target) on collated tensors, torch's global RNG."""

    def __init__(self, num_classes: int, alpha: float) -> None:
        super().__init__()
        self.num_classes, self.alpha = num_classes, alpha

    def forward(self, batch: torch.Tensor, target: torch.Tensor):
        target = torch.nn.functional.one_hot(target, self.num_classes).to(batch.dtype)
        lam = float(torch.distributions.Beta(self.alpha, self.alpha).sample())
        return batch.roll(1, 0) * (1 - lam) + batch * lam, target.roll(1, 0) * (1 - lam) + target * lam


class V1Cutmix(torch.nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.num_classes = num_classes

    def forward(self, batch: torch.Tensor, target: torch.Tensor):
        target = torch.nn.functional.one_hot(target, self.num_classes).to(batch.dtype)
        h, w = batch.shape[-2:]
        y, x = int(torch.randint(h, ())), int(torch.randint(w, ()))
        out = batch.clone()
        out[..., y:, x:] = batch.roll(1, 0)[..., y:, x:]
        lam = 1.0 - (h - y) * (w - x) / (h * w)
        return out, target.roll(1, 0) * (1 - lam) + target * lam


def _v2_choice():
    return v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=NUM_CLASSES),
                            v2.CutMix(alpha=1.0, num_classes=NUM_CLASSES)])


def _v1_choice():
    return torchvision.transforms.RandomChoice([V1Mixup(NUM_CLASSES, 0.2), V1Cutmix(NUM_CLASSES)])


def _reference_collate(mixup_cutmix):
    return lambda batch: mixup_cutmix(*default_collate(batch))  # torchvision's references/classification


def _loader(num_workers: int = 0, seed: int = 0, device: str = "cpu", ds=None, **kwargs):
    return td.DataLoader(ds if ds is not None else Images(), batch_size=4, shuffle=True,
                         generator=torch.Generator().manual_seed(5), num_workers=num_workers,
                         transforms=kwargs.pop("transforms", FLOAT), device=device, seed=seed, **kwargs)


def test_collate_fn_receives_the_transformed_samples_as_torch_does():
    resize = T.Compose([T.Resize((10, 14))])
    ds = Images(9)
    seen = []

    def collate(samples):
        seen.append(samples)
        return {"images": torch.stack([im for im, _ in samples]), "ids": [t * 10 for _, t in samples]}

    ours = list(td.DataLoader(ds, batch_size=4, transforms=resize, device="cpu", collate_fn=collate))
    plain = list(td.DataLoader(ds, batch_size=4, transforms=resize, device="cpu"))
    ref = list(TorchLoader([(None, ds[i][1]) for i in range(len(ds))], batch_size=4,
                           collate_fn=lambda b: [t * 10 for _, t in b]))
    assert [b["ids"] for b in ours] == ref
    for b, (images, targets) in zip(ours, plain):
        assert torch.equal(b["images"], images)
    samples = seen[0]
    assert isinstance(samples, list) and len(samples) == 4 and all(len(s) == 2 for s in samples)
    assert samples[0][0].shape == (3, 10, 14) and samples[0][1] == 0 and type(samples[1][1]) is int
    # a dataset without targets: the samples are the images alone
    no_targets = td.DataLoader(Images(5, targets=False), batch_size=2, transforms=resize, device="cpu",
                               collate_fn=lambda s: [tuple(im.shape) for im in s])
    assert list(no_targets) == [[(3, 10, 14)] * 2, [(3, 10, 14)] * 2, [(3, 10, 14)]]


@pytest.mark.parametrize("make", [_v2_choice, _v1_choice], ids=["v2", "v1"])
def test_reference_recipe_collate_runs_unchanged(make):
    mixup_cutmix = make()
    loader = _loader(collate_fn=_reference_collate(mixup_cutmix))
    plain = _loader()
    n = 0
    for (images, targets), (raw, labels) in zip(loader, plain):
        assert images.shape == raw.shape and images.dtype == torch.float32
        assert targets.shape == (len(labels), NUM_CLASSES) and targets.dtype == torch.float32
        assert torch.allclose(targets.sum(1), torch.ones(len(labels)))
        # the batch key seeds the global generators: recompute what the collate_fn gave
        key = _rng.batch_key(loader._effective_seed(), 0, 4 * n)
        with seeded(key):
            exp_images, exp_targets = mixup_cutmix(raw, labels)
        assert torch.equal(images, exp_images) and torch.equal(targets, exp_targets)
        n += 1
    assert n == len(loader)


def test_loader_argument_errors():
    with pytest.raises(ValueError, match="either collate_fn or batch_transforms"):
        _loader(collate_fn=_reference_collate(_v2_choice()), batch_transforms=_v2_choice())
    with pytest.raises(ValueError, match="ToDtype"):  # MixUp of uint8 images: caught when the loader is built
        _loader(transforms=T.Compose([T.Resize((10, 14))]), batch_transforms=_v2_choice())
    _loader(transforms=T.Compose([T.Resize((10, 14))]), batch_transforms=CutMixOf())  # CutMix copies pixels
    with pytest.raises(TypeError, match="callable"):
        _loader(batch_transforms=3)


@pytest.mark.parametrize("kind", ["ours", "tv_converted", "tv_collate", "foreign_batch_transforms"])
def test_mixed_batches_are_mixes_of_the_plain_batch(kind):
    ours = T.BatchRandomChoice([T.MixUp(alpha=0.2, num_classes=NUM_CLASSES), CutMixOf()])
    kwargs = {
        "ours": dict(batch_transforms=ours),
        "tv_converted": dict(batch_transforms=_v2_choice()),
        "tv_collate": dict(collate_fn=_reference_collate(_v2_choice())),
        "foreign_batch_transforms": dict(batch_transforms=lambda x, y: _v1_choice()(x, y)),
    }[kind]
    loader = _loader(**kwargs)
    transformed = list(loader)
    plain = list(_loader())
    mixed = 0
    for n, ((images, targets), (raw, labels)) in enumerate(zip(transformed, plain)):
        assert targets.shape == (len(labels), NUM_CLASSES) and targets.dtype == torch.float32
        # rows are one-hot mixes of the sample's class and its predecessor's (the batch rolled by one),
        # with one weight for the whole batch
        onehot = torch.nn.functional.one_hot(labels, NUM_CLASSES).float()
        lam = targets[torch.arange(len(labels)), labels]
        differ = labels != labels.roll(1, 0)
        if differ.any():
            lam = lam[differ][0].expand(len(labels))
        assert torch.allclose(targets, onehot * lam[:, None] + onehot.roll(1, 0) * (1 - lam[:, None]), atol=1e-6)
        mixed += int(not torch.equal(images, raw))
        if kind in ("ours", "tv_converted"):  # converted: our transform with the batch's key, exactly
            key = _rng.batch_key(loader._effective_seed(), 0, 4 * n)
            exp = ours.forward((raw, labels), _rng.Stream(key))
            assert torch.equal(images, exp[0]) and torch.equal(targets, exp[1])
    assert mixed > 0


def _epochs(loader, n: int = 2) -> list:
    return [b for _ in range(n) for b in loader]


def _equal(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))


@pytest.mark.parametrize("kind", ["converted", "collate_fn"])
def test_same_seed_same_mixed_batches_across_num_workers_and_resume(kind):
    def make(num_workers: int = 0, seed: int = 0):
        if kind == "converted":
            return _loader(num_workers, seed, batch_transforms=_v2_choice())
        return _loader(num_workers, seed, collate_fn=_reference_collate(_v1_choice()))

    a = _epochs(make(0))
    assert _equal(a, _epochs(make(2)))
    assert not _equal(a, _epochs(make(0, seed=1)))
    assert not torch.equal(a[0][1], a[len(a) // 2][1])  # another epoch mixes differently
    # a mid-epoch resume continues the same stream
    first = make(0)
    it = iter(first)
    head = [next(it), next(it)]
    state = first.state_dict()
    resumed = make(2)
    resumed.load_state_dict(state)
    tail = list(resumed)
    assert _equal(head + tail, a[: len(first)])


def test_collate_fn_leaves_the_global_generators_alone():
    def draws(batch):
        images, targets = default_collate(batch)
        return images, targets, torch.rand(()), np.random.rand(), random.random()

    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    out = list(_loader(collate_fn=draws))
    assert torch.equal(torch.get_rng_state(), states[0])
    assert np.array_equal(np.random.get_state()[1], states[1]) and random.getstate() == states[2]
    assert len({float(b[2]) for b in out}) == len(out)  # each batch has its own seed


# -- the GPU path ------------------------------------------------------------------

@pytest.mark.cuda
def test_gpu_path_batch_transforms_and_collate_fn(tmp_path):
    folder = make_folder(tmp_path, n=22, classes=NUM_CLASSES)
    ds = td.datasets.ImageFolder(folder)
    tf = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])

    def make(num_workers=0, seed=0, device="cuda", **kwargs):
        return _loader(num_workers, seed, device=device, ds=ds, transforms=tf, **kwargs)

    for kwargs in (dict(batch_transforms=_v2_choice()), dict(collate_fn=_reference_collate(_v2_choice())),
                   dict(batch_transforms=lambda x, y: _v1_choice()(x, y))):
        torch.manual_seed(0)
        cpu_state, cuda_state = torch.get_rng_state(), torch.cuda.get_rng_state()
        reference = make(**kwargs)
        a = _epochs(reference)
        # foreign callables ran seeded in this thread; the loop's own generators are as they were
        assert torch.equal(torch.get_rng_state(), cpu_state) and torch.equal(torch.cuda.get_rng_state(), cuda_state)
        for images, targets in a:
            assert images.is_cuda and images.dtype == torch.float32 and images.shape[1:] == (3, 24, 24)
            assert targets.shape == (images.shape[0], NUM_CLASSES) and targets.dtype == torch.float32
            # batch_transforms get the targets on the device; a collate_fn gets the dataset's targets
            assert targets.is_cuda == ("batch_transforms" in kwargs)
        two = make(2, **kwargs)
        # where each sample was decoded, should the batches differ (a hardware batch that
        # failed is decoded again, one image at a time, by nvJPEG's CUDA backend)
        assert _equal(a, _epochs(two)), (reference.stats().summary(), two.stats().summary())
        assert not _equal(a, _epochs(make(0, seed=1, **kwargs)))
        first = make(**kwargs)
        it = iter(first)
        head = [next(it), next(it)]
        state = first.state_dict()
        it.close()  # a half-read epoch's threads end with its iterator
        first.close()
        resumed = make(2, **kwargs)
        resumed.load_state_dict(state)
        assert _equal(head + list(resumed), a[: len(first)])
        resumed.close()
        # the same batch keys on the CPU path: the same labels (they depend on lambda and box only),
        # images within the kernels' rounding
        cpu = _epochs(make(device="cpu", **kwargs))
        for (gi, gt), (ci, ct) in zip(a, cpu):
            assert torch.equal(gt.cpu(), ct)
            assert (gi.cpu() - ci).abs().max() <= 2 / 255 + 1e-6
