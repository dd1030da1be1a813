"""timm's training augmentations: conversion, sampling statistics, and per-op parity with timm on PIL images.

Tolerances against timm's op functions on PIL images (measured on 224x224 images,
smooth and noisy, with the levels of the parity tests below):

* LUT ops and Brightness (Brightness, Posterize*, Solarize*, SolarizeAdd, Equalize,
  Invert) and Sharpness: equal (SharpnessIncreasing: within 1 on <1% of pixels).
* Contrast, Color, Desaturate, AutoContrast: within 1. PIL's Contrast blends with the
  grayscale mean rounded to an integer, its grayscale (Color) is rounded where
  torchvision's is truncated, and AutoContrast's LUT is computed in double.
* Warps with bilinear resampling: within 1 wherever the sampled source point is at
  least one pixel inside the image (PIL truncates the interpolated value,
  torchvision rounds it, so about half of the values are one higher). On the
  border ring (about 2% of a 224x224 image) they differ by design: PIL fills
  only points outside the image and clamps neighbours, torchvision blends the fill
  in with the interpolated validity mask. Where the source point is far outside
  both write ``img_mean``.
* Warps timm resamples bicubically (half of them when timm's interpolation is
  'random', all of them with interpolation='bicubic') are resampled bilinearly.
  Inside the image: mean absolute difference 1.3-1.8 levels (max 7) on a smooth
  image, 7-11 levels (max 46) on a noisy one.
"""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

timm = pytest.importorskip("timm")
aa = pytest.importorskip("timm.data.auto_augment")

from PIL import Image  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402
from torchvision.transforms.v2.functional._geometry import _affine_grid, _apply_grid_transform  # noqa: E402

from csrc_triton import layout  # noqa: E402
from torchdali import _rng  # noqa: E402
from torchdali.transforms import _geometry as G  # noqa: E402
from torchdali.transforms import _timm  # noqa: E402
from torchdali.transforms import to_torchdali  # noqa: E402

from ._helpers import ROUNDING_TIE_FRAC, assert_warp_matches_torchvision, warp_ties  # noqa: E402

FILL = (124, 116, 104)  # create_transform's img_mean for the ImageNet mean


# --------------------------------------------------------------------------- helpers


def _image(seed: int, noise: float, size: int = 224) -> torch.Tensor:
    """A CHW uint8 image: smooth colour blobs plus Gaussian noise of std ``noise``."""
    g = torch.Generator().manual_seed(seed)
    base = torch.nn.functional.interpolate(torch.rand(1, 3, 6, 6, generator=g) * 255, size=(size, size),
                                           mode="bicubic", align_corners=False)[0]
    return (base + torch.randn(3, size, size, generator=g) * noise).clamp(0, 255).to(torch.uint8)


def tv_slot(img: torch.Tensor, row: np.ndarray) -> torch.Tensor:
    """One slot row on a uint8 CHW image with torchvision.transforms.v2.functional (the ops' definition)."""
    row = [float(v) for v in row]
    name, names = layout.OP_ARGS[int(row[layout.SLOT_OP])]
    a = {n: row[layout.SLOT_M0 + i] for i, n in enumerate(names)}
    if name == "identity":
        return img.clone()
    if name == "affine":
        h, w = img.shape[-2:]
        theta = torch.tensor([a[c] for c in "abcdef"], dtype=torch.float32).reshape(1, 2, 3)
        mode = "nearest" if int(row[layout.SLOT_INTERP]) == layout.FILTER_NEAREST else "bilinear"
        fill = [row[layout.SLOT_FILL0 + i] for i in range(3)]
        return _apply_grid_transform(img, _affine_grid(theta, w=w, h=h, ow=w, oh=h), mode, fill=fill)
    if name == "solarize_add":
        added = (img.to(torch.int16) + int(a["addition"])).clamp(max=255).to(torch.uint8)
        return torch.where(img < a["threshold"], added, img)
    if name == "posterize":
        return F.posterize(img, int(a["bits"]))
    fn = {"brightness": F.adjust_brightness, "contrast": F.adjust_contrast, "saturation": F.adjust_saturation,
          "sharpness": F.adjust_sharpness, "solarize": F.solarize}
    if name in fn:
        return fn[name](img, next(iter(a.values())))
    return {"invert": F.invert, "autocontrast": F.autocontrast, "equalize": F.equalize}[name](img)


def _slot_row(name: str, level: float, size: int = 224, interpolation=None) -> np.ndarray:
    hparams = dict(img_mean=FILL)
    if interpolation is not None:
        hparams["interpolation"] = interpolation
    op = _timm.TimmRandAugment([dict(name=name, prob=1.0, magnitude=9, hparams=hparams)]).ops[0]
    slot = np.zeros((1, layout.SLOT_WIDTH), np.float32)
    _timm._write_op(op, np.array([float(level)]), np.array([float(size)]), np.array([float(size)]), slot,
                    np.array([True]))
    return slot[0]


def _timm_op(name: str, level: float, img: torch.Tensor, resample=Image.BILINEAR) -> torch.Tensor:
    """timm's op function ``name`` with level argument ``level`` on the PIL version of ``img``."""
    pil = Image.fromarray(img.permute(1, 2, 0).numpy())
    args = () if name in ("AutoContrast", "Equalize", "Invert") else (level,)
    if name.startswith(("Posterize", "Solarize")):
        args = (int(level),)
    out = aa.NAME_TO_OP[name](pil, *args, fillcolor=FILL, resample=resample)
    return torch.from_numpy(np.asarray(out).copy()).permute(2, 0, 1)


def _pil_matrix(name: str, level: float, w: int, h: int) -> tuple[float, ...]:
    """The output->input matrix (top-left origin) PIL applies for timm's warp ``name``."""
    if name == "Rotate":
        a = -math.radians(level)
        m = [math.cos(a), math.sin(a), 0.0, -math.sin(a), math.cos(a), 0.0]
        m[2] = m[0] * -w / 2 + m[1] * -h / 2 + w / 2
        m[5] = m[3] * -w / 2 + m[4] * -h / 2 + h / 2
        return tuple(m)
    return {"ShearX": (1, level, 0, 0, 1, 0), "ShearY": (1, 0, 0, level, 1, 0),
            "TranslateXRel": (1, 0, level * w, 0, 1, 0), "TranslateYRel": (1, 0, 0, 0, 1, level * h)}[name]


def _interior(name: str, level: float, w: int, h: int, margin: float = 1.0) -> torch.Tensor:
    """Output pixels whose source point lies at least ``margin`` pixels inside the image."""
    a, b, c, d, e, f = _pil_matrix(name, level, w, h)
    y, x = torch.meshgrid(torch.arange(h, dtype=torch.float64) + 0.5, torch.arange(w, dtype=torch.float64) + 0.5,
                          indexing="ij")
    xi, yi = a * x + b * y + c, d * x + e * y + f
    return (xi >= margin) & (xi <= w - margin) & (yi >= margin) & (yi <= h - margin)


def chi2_homogeneity(a: np.ndarray, b: np.ndarray) -> float:
    """p-value of the chi-square test that counts ``a`` and ``b`` (same categories) share one distribution."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    keep = (a + b) > 0
    a, b = a[keep], b[keep]
    table = np.stack([a, b])
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    stat = ((table - expected) ** 2 / expected).sum()
    dof = len(a) - 1
    if dof == 0:
        return 1.0
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


# --------------------------------------------------------------------------- level arguments


@pytest.mark.parametrize("name", list(_timm.TIMM_AUGMENT_OPS))
def test_levels_equal_timm(name, monkeypatch):
    hparams = dict(translate_const=100, img_mean=FILL, translate_pct=0.3)
    mags = np.concatenate([np.linspace(0, 10, 101), [0.123, 3.9999, 7.5, 9.31, 9.99]])
    for negate in (False, True):
        monkeypatch.setattr(aa, "_randomly_negate", (lambda v: -v) if negate else (lambda v: v))
        expected = [aa.LEVEL_TO_ARG[name](m, hparams)[0] if aa.LEVEL_TO_ARG[name] else 0.0 for m in mags]
        got = _timm._timm_level(name, mags, np.full(len(mags), negate), hparams)
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12, err_msg=name)


def test_refused_ops_and_interpolations():
    with pytest.raises(ValueError, match="GaussianBlur"):
        _timm.TimmRandAugment([dict(name="GaussianBlur", prob=1.0, magnitude=5)])
    with pytest.raises(ValueError, match="nearest, bilinear or bicubic"):
        _timm.TimmRandAugment([dict(name="Rotate", hparams=dict(interpolation=1))])  # LANCZOS
    with pytest.raises(ValueError, match="non-zero weight"):
        _timm.TimmRandAugment([dict(name="Invert"), dict(name="Equalize")], num_layers=2, choice_weights=[1.0, 0.0])
    nearest = _timm.TimmRandAugment([dict(name="Rotate", hparams=dict(interpolation=Image.NEAREST))])
    assert nearest.ops[0].interp == layout.FILTER_NEAREST
    assert _timm.TimmRandAugment([dict(name="Rotate")]).ops[0].interp == layout.FILTER_BILINEAR


# --------------------------------------------------------------------------- per-op parity with timm (PIL)

_COLOUR_CASES = {
    # name: (levels, max difference)
    "Brightness": ([0.1, 0.55, 1.0, 1.72, 1.9], 0),
    "BrightnessIncreasing": ([0.19, 0.6, 1.81], 0),
    "PosterizeIncreasing": ([1, 2, 4], 0),
    "Posterize": ([1, 3, 8], 0),
    "PosterizeOriginal": ([4, 6, 8], 0),
    "SolarizeIncreasing": ([26, 128, 230, 256], 0),
    "Solarize": ([0, 100, 256], 0),
    "SolarizeAdd": ([0, 55, 99, 110], 0),
    "Equalize": ([0], 0),
    "Invert": ([0], 0),
    "ContrastIncreasing": ([0.19, 0.6, 1.81], 1),
    "Contrast": ([0.1, 1.0, 1.9], 1),
    "ColorIncreasing": ([0.19, 0.6, 1.81], 1),
    "Color": ([0.1, 1.9], 1),
    "Desaturate": ([0.5, 0.75, 1.0], 1),
    "SharpnessIncreasing": ([0.19, 0.6, 1.81], 1),
    "Sharpness": ([0.1, 1.9], 1),
    "AutoContrast": ([0], 1),
}


@pytest.mark.parametrize("name", list(_COLOUR_CASES))
def test_colour_op_matches_timm_pil(name):
    levels, tol = _COLOUR_CASES[name]
    for level in levels:
        for seed, noise in ((0, 4.0), (1, 30.0)):
            img = _image(seed, noise, 64)
            if name == "AutoContrast":  # give it a range to stretch
                img = (img.float() * 0.6 + 30).to(torch.uint8)
            ours = tv_slot(img, _slot_row(name, level, 64))
            diff = (ours.int() - _timm_op(name, level, img).int()).abs().max().item()
            assert diff <= tol, f"{name}({level}) noise {noise}: max difference {diff} > {tol}"


def test_posterize_to_zero_bits_is_black():
    # timm's PosterizeIncreasing at magnitude 10 keeps 0 bits; recent PIL rejects bits=0 (timm then
    # raises), older PIL and torchvision return a black image, which is what the program does
    img = _image(0, 30.0, 32)
    assert tv_slot(img, _slot_row("PosterizeIncreasing", 0, 32)).eq(0).all()


_WARP_CASES = {
    "Rotate": [-27.0, -13.5, 9.0, 30.0],
    "ShearX": [-0.27, 0.15, 0.3],
    "ShearY": [-0.3, 0.12],
    "TranslateXRel": [-0.405, 0.2],
    "TranslateYRel": [0.405, -0.1],
}


@pytest.mark.parametrize("name", list(_WARP_CASES))
def test_bilinear_warp_matches_timm_pil_inside_the_image(name):
    size = 96
    for level in _WARP_CASES[name]:
        img = _image(2, 30.0, size)
        ours = tv_slot(img, _slot_row(name, level, size))
        theirs = _timm_op(name, level, img, Image.BILINEAR)
        inside = _interior(name, level, size, size)
        diff = (ours.int() - theirs.int()).abs().amax(0)
        assert diff[inside].max().item() <= 1, f"{name}({level}): {diff[inside].max().item()}"
        # the fill: where the source point is far outside, both write img_mean
        outside = ~_interior(name, level, size, size, margin=-1.5)
        if outside.any():
            assert (ours[:, outside].T == torch.tensor(FILL, dtype=torch.uint8)).all()
            assert (theirs[:, outside].T == torch.tensor(FILL, dtype=torch.uint8)).all()


@pytest.mark.parametrize("name", ["Rotate", "ShearX", "TranslateYRel"])
def test_nearest_warp_matches_timm_pil_inside_the_image(name):
    size = 64
    for level in _WARP_CASES[name]:
        img = _image(3, 30.0, size)
        ours = tv_slot(img, _slot_row(name, level, size, interpolation=Image.NEAREST))
        theirs = _timm_op(name, level, img, Image.NEAREST)
        inside = _interior(name, level, size, size)
        # nearest picks the same pixel except where a source point falls on a pixel edge
        same = (ours == theirs).all(0)[inside].double().mean().item()
        assert same >= 0.995, f"{name}({level}): {same}"


def test_bicubic_warps_are_resampled_bilinearly():
    """timm's bicubic half: the program resamples bilinearly; the difference is bounded and stated."""
    size = 96
    means = []
    for name, levels in _WARP_CASES.items():
        for level in levels:
            img = _image(4, 4.0, size)  # a smooth image: the bilinear/bicubic gap of natural images
            ours = tv_slot(img, _slot_row(name, level, size))
            theirs = _timm_op(name, level, img, Image.BICUBIC)
            inside = _interior(name, level, size, size)
            diff = (ours.int() - theirs.int()).abs().amax(0)[inside].double()
            means.append(diff.mean().item())
            # bilinear vs bicubic, not a wrong warp: a misplaced warp differs by tens of levels on average
            assert diff.mean().item() < 2.5, f"{name}({level}): mean {diff.mean().item()}"
    assert 0.2 < max(means), "bilinear and bicubic should differ measurably"


# --------------------------------------------------------------------------- sampling statistics vs timm

_CONFIGS = ["rand-m9-mstd0.5-inc1", "rand-m7-n3-mstd101-p0.7", "rand-m9-mstd0.5-tweights-p1.0", "rand-m10-mstd1-mmax15"]


def _timm_draws(aug, ops, n: int, seed: int) -> list[list[tuple[str, float]]]:
    """Run timm's ``aug.__call__`` ``n`` times, recording which of its AugmentOps ``ops`` apply,
    with their level argument (each op's function is replaced by a recorder)."""
    calls: list[tuple[str, float]] = []

    def recorder(name):
        def fn(img, *args, **kwargs):
            calls.append((name, float(args[0]) if args else 0.0))
            return img
        return fn

    for op in ops:
        op.aug_fn = recorder(op.name)
    random.seed(seed)
    np.random.seed(seed)
    img = Image.new("RGB", (4, 4))
    out = []
    for _ in range(n):
        calls.clear()
        aug(img)
        out.append(list(calls))
    return out


def _our_draws(t: _timm.TimmRandAugment, n: int, seed: int) -> list[list[tuple[str, float]]]:
    g = G.BatchGeometry.identity(np.full((n, 2), 224))
    u = _rng.uniform(_rng.sample_keys(seed, 0, np.arange(n)), 0, t.n_uniforms)
    p = t.make_params(g, u)
    return [[(t.ops[i].name, float(lv)) for i, lv in zip(row_op, row_lv) if i >= 0]
            for row_op, row_lv in zip(p["op"], p["level"])]


def _compare(theirs, ours, names, min_p: float) -> dict[str, float]:
    pvals = {}
    # ops applied per image (0 .. num_layers)
    k = max(len(r) for r in theirs + ours) + 1
    pvals["count"] = chi2_homogeneity(np.bincount([len(r) for r in theirs], minlength=k),
                                      np.bincount([len(r) for r in ours], minlength=k))
    # op frequency at each applied position
    for pos in range(k - 1):
        ct = [sum(1 for r in theirs if len(r) > pos and r[pos][0] == nm) for nm in names]
        co = [sum(1 for r in ours if len(r) > pos and r[pos][0] == nm) for nm in names]
        pvals[f"op@{pos}"] = chi2_homogeneity(ct, co)
    # level histograms per op
    for nm in names:
        lt = np.array([lv for r in theirs for (o, lv) in r if o == nm])
        lo = np.array([lv for r in ours for (o, lv) in r if o == nm])
        if len(lt) < 50 or len(lo) < 50:
            continue
        values = np.unique(np.concatenate([lt, lo]))
        if len(values) <= 12:  # discrete levels (bits, thresholds, and point masses at the clip bounds)
            ht = np.array([(lt == v).sum() for v in values])
            ho = np.array([(lo == v).sum() for v in values])
        else:
            edges = np.unique(np.quantile(np.concatenate([lt, lo]), np.linspace(0, 1, 11)))
            edges[0], edges[-1] = -np.inf, np.inf
            ht, _ = np.histogram(lt, edges)
            ho, _ = np.histogram(lo, edges)
        pvals[nm] = chi2_homogeneity(ht, ho)
    bad = {key: p for key, p in pvals.items() if p < min_p}
    assert not bad, f"distributions differ from timm's: {bad}"
    return pvals


@pytest.mark.parametrize("config", _CONFIGS)
def test_sampling_matches_timm(config):
    ra = aa.rand_augment_transform(config, dict(translate_const=100, img_mean=FILL))
    t = to_torchdali(ra)
    assert isinstance(t, _timm.TimmRandAugment) and t.n_slots == ra.num_layers
    n = 12000
    _compare(_timm_draws(ra, ra.ops, n, seed=1), _our_draws(t, n, seed=1), [op.name for op in ra.ops], min_p=1e-4)


def test_sampling_check_detects_a_wrong_magnitude_std():
    ra = aa.rand_augment_transform("rand-m9-mstd0.5-inc1", dict(img_mean=FILL))
    wrong = to_torchdali(aa.rand_augment_transform("rand-m9-mstd1.0-inc1", dict(img_mean=FILL)))
    with pytest.raises(AssertionError, match="differ"):
        _compare(_timm_draws(ra, ra.ops, 12000, seed=2), _our_draws(wrong, 12000, seed=2),
                 [op.name for op in ra.ops], min_p=1e-4)


def test_weighted_choice_is_without_replacement():
    ra = aa.rand_augment_transform("rand-m9-n4-tweights-p1.0", dict(img_mean=FILL))
    draws = _our_draws(to_torchdali(ra), 3000, seed=3)
    assert all(len(r) == 4 and len({o for o, _ in r}) == 4 for r in draws)


def test_slots_follow_the_drawn_ops():
    ra = aa.rand_augment_transform("rand-m9-mstd0.5-inc1", dict(translate_const=100, img_mean=FILL))
    t = to_torchdali(ra)
    n = 400
    g = G.BatchGeometry.identity(np.full((n, 2), 48))
    p = t.make_params(g, _rng.uniform(_rng.sample_keys(0, 0, np.arange(n)), 0, t.n_uniforms))
    slots = np.zeros((n, t.n_slots, layout.SLOT_WIDTH), np.float32)
    t.write_slots(g, p, slots)
    skipped = p["op"] < 0
    assert skipped.any() and (~skipped).any()
    assert (slots[skipped] == 0).all()  # identity
    img = _image(5, 10.0, 48)
    for s in range(0, n, 37):
        for k in range(t.n_slots):
            i = p["op"][s, k]
            if i < 0:
                continue
            name, level = t.ops[i].name, p["level"][s, k]
            if name.startswith("Posterize") and level == 0:
                continue  # PIL rejects 0 bits (see test_posterize_to_zero_bits_is_black)
            ours = tv_slot(img, slots[s, k])
            theirs = _timm_op(name, level, img, Image.BILINEAR)
            diff = (ours.int() - theirs.int()).abs().amax(0)
            if name in _timm._GEOMETRIC:
                diff = diff[_interior(name, level, 48, 48)]
            assert diff.numel() == 0 or diff.max().item() <= 1, (name, level)


def test_unregistered_timm_class_is_refused_by_name():
    unknown = type("SomeTimmTransform", (), {"__module__": "timm.data.transforms"})()
    with pytest.raises(ValueError, match="unsupported timm transform timm.SomeTimmTransform"):
        to_torchdali(unknown)


@pytest.mark.parametrize("config", ["v0", "original-mstd0.5", "v0r", "originalr"])
def test_autoaugment_sampling_matches_timm(config):
    policy = aa.auto_augment_transform(config, dict(translate_const=100, img_mean=FILL))
    t = to_torchdali(policy)
    assert isinstance(t, _timm.TimmAutoAugment) and t.n_slots == 2
    names = sorted({op.name for sub in policy.policy for op in sub})
    ops = [op for sub in policy.policy for op in sub]
    n = 12000
    _compare(_timm_draws(policy, ops, n, seed=4), _our_draws(t, n, seed=4), names, min_p=1e-4)


def test_autoaugment_3a_is_refused():
    with pytest.raises(ValueError, match="GaussianBlurRand"):
        to_torchdali(aa.auto_augment_transform("3a", dict(img_mean=FILL)))


# --------------------------------------------------------------------------- the program's reference


def test_augment_reference_runs_the_slots_as_torchvision_does():
    """The slots TimmRandAugment writes, run by the augment program's reference, equal the
    torchvision functionals those ops are defined as (so the PIL parity above carries over)."""
    from csrc_triton.augment import augment_slot_reference

    ra = aa.rand_augment_transform("rand-m9-mstd0.5-inc1", dict(translate_const=20, img_mean=FILL))
    t = to_torchdali(ra)
    n, size = 48, 40
    g = G.BatchGeometry.identity(np.full((n, 2), size))
    p = t.make_params(g, _rng.uniform(_rng.sample_keys(7, 0, np.arange(n)), 0, t.n_uniforms))
    slots = np.zeros((n, t.n_slots, layout.SLOT_WIDTH), np.float32)
    t.write_slots(g, p, slots)
    images = torch.stack([_image(s, 20.0, size) for s in range(n)])
    for k in range(t.n_slots):
        got = augment_slot_reference(images, torch.from_numpy(slots[:, k]))
        want = torch.stack([tv_slot(images[s], slots[s, k]) for s in range(n)])
        warp = slots[:, k, layout.SLOT_OP] == layout.OP_AFFINE
        for s in np.flatnonzero(warp):  # exact but at ties (Note [warps against torchvision])
            nearest = int(slots[s, k, layout.SLOT_INTERP]) == layout.FILTER_NEAREST
            ties = warp_ties(size, size, matrix=slots[s, k, layout.SLOT_M0:layout.SLOT_M0 + 6]) if nearest else None
            assert_warp_matches_torchvision(got[s], want[s], nearest, ties, what=f"slot {k} sample {s}")
        rest = torch.from_numpy(~warp)
        assert torch.equal(got[rest], want[rest]), \
            f"slot {k}: samples {torch.nonzero(rest & (got != want).flatten(1).any(1)).flatten()}"
        images = got


def _kernel_devices():
    import importlib.util
    import os

    has_triton = importlib.util.find_spec("triton") is not None
    interpret = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
    return [pytest.param("cpu", marks=pytest.mark.skipif(not (has_triton and interpret),
                                                         reason="kernel on CPU needs TRITON_INTERPRET=1")),
            pytest.param("cuda", marks=[pytest.mark.cuda,
                                        pytest.mark.skipif(not has_triton, reason="needs triton")])]


@pytest.mark.parametrize("device", _kernel_devices())
@pytest.mark.parametrize("config", ["rand-m9-mstd0.5-inc1", "rand-m9-mstd0.5"])
def test_slot_kernel_runs_timm_slots_as_the_reference(config, device):
    from csrc_triton.augment import augment_slot_reference, fused_augment_slot

    ra = aa.rand_augment_transform(config, dict(translate_const=5, img_mean=FILL))
    t = to_torchdali(ra)
    n, h, w = 16, 11, 14
    g = G.BatchGeometry.identity(np.full((n, 2), (h, w)))
    p = t.make_params(g, _rng.uniform(_rng.sample_keys(11, 0, np.arange(n)), 0, t.n_uniforms))
    slots = np.zeros((n, t.n_slots, layout.SLOT_WIDTH), np.float32)
    t.write_slots(g, p, slots)
    images = torch.stack([_image(s, 20.0, 16)[:, :h, :w] for s in range(n)]).to(device)
    for k in range(t.n_slots):
        slot = torch.from_numpy(slots[:, k])
        got = fused_augment_slot(images, slot.to(device), ops_host=slot[:, layout.SLOT_OP])
        want = augment_slot_reference(images.cpu(), slot)
        diff = (got.cpu().int() - want.int()).abs()
        # interpreted: the same float32 operations -> equal; compiled: FMA rounding, within 1
        assert diff.max().item() <= (0 if device == "cpu" else 1), f"slot {k}: {diff.flatten(1).amax(1).tolist()}"
        images = want.to(device)


# --------------------------------------------------------------------------- pipelines


def _timm_pipeline(size: int, **re_kwargs):
    """torchvision geometry + timm's RandAugment and RandomErasing (the timm pieces of create_transform)."""
    import torchvision.transforms as tv
    from timm.data.random_erasing import RandomErasing as TimmRE

    ra = aa.rand_augment_transform("rand-m9-mstd0.5-inc1",
                                   dict(translate_const=int(size * 0.45), img_mean=FILL))
    return [tv.RandomResizedCrop(size, antialias=True), tv.RandomHorizontalFlip(), ra, tv.ToTensor(),
            tv.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), TimmRE(device="cpu", **re_kwargs)]


def test_pipeline_with_timm_randaugment_and_erasing_runs_as_its_parts():
    from torchdali.transforms._plan import compile_transforms, run_reference, to_hwc

    size, n = 32, 12
    plan = compile_transforms(_timm_pipeline(size, probability=1.0))
    assert plan.n_slots == 2 and plan.erases
    images = [_image(s, 20.0, 40 + 3 * s)[:, : 37 + s] for s in range(n)]
    hwc = [to_hwc(im) for im in images]
    sizes = np.array([im.shape[:2] for im in hwc])
    keys = _rng.sample_keys(3, 0, np.arange(n))
    bp = plan.params(sizes, keys)
    out = run_reference(plan, hwc, bp)
    # the same crop/flip draws (streams 0 and 1) without the rest: kernel 1's uint8 output
    base = compile_transforms(plan.transforms[:2])
    crops = run_reference(base, hwc, base.params(sizes, keys))
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    erased, levels = 0, []
    for s in range(n):
        img = crops[s]
        for k in range(plan.n_slots):
            img = tv_slot(img, bp.slots[s, k].numpy())
        want = (img.float() / 255 - mean) / std
        row = bp.params[s]
        y0, y1 = int(row[layout.ERASE_Y0]), int(row[layout.ERASE_Y1])
        x0, x1 = int(row[layout.ERASE_X0]), int(row[layout.ERASE_X1])
        want[:, y0:y1, x0:x1] = 0.0  # timm's 'const' mode: 0 in the normalized image
        erased += (y1 > y0)
        levels.append(((out[s] - want) * std * 255).abs())  # the difference in uint8 levels
    assert erased >= n // 2  # p=1: erased unless no box fits in ten attempts
    # Equal but where a warp's bilinear value sits on a rounding boundary that torchvision's
    # grid (a bmm, rounded per the CPU's BLAS kernel) can move: one level there, up to two after
    # the contrast these draws give the same sample next (Note [warps against torchvision]).
    levels = torch.stack(levels)
    off = (levels > 1e-3).double().mean().item()
    assert levels.max().item() <= 2 + 1e-3 and off <= ROUNDING_TIE_FRAC, (levels.max().item(), off)


def _timm_boxes(re, n: int, h: int, w: int, seed: int) -> np.ndarray:
    """Boxes (top, left, height, width; zeros when none) timm's RandomErasing erases on ``n`` images."""
    random.seed(seed)
    torch.manual_seed(seed)
    boxes = np.zeros((n, 4))
    for i in range(n):
        img = torch.ones(3, h, w)
        re(img)
        ys, xs = torch.nonzero((img != 1).any(0), as_tuple=True)  # 0 ('const') or noise ('pixel')
        if len(ys):
            boxes[i] = (ys.min(), xs.min(), ys.max() - ys.min() + 1, xs.max() - xs.min() + 1)
    return boxes


def _our_boxes(t, n: int, h: int, w: int, seed: int) -> np.ndarray:
    g = G.BatchGeometry.identity(np.full((n, 2), (h, w)))
    t.transform(g, t.make_params(g, _rng.uniform(_rng.sample_keys(seed, 0, np.arange(n)), 0, t.n_uniforms)))
    params = g.to_params().numpy()
    y0, y1 = params[:, layout.ERASE_Y0], params[:, layout.ERASE_Y1]
    x0, x1 = params[:, layout.ERASE_X0], params[:, layout.ERASE_X1]
    hit = y1 > y0
    return np.where(hit[:, None], np.stack([y0, x0, y1 - y0, x1 - x0], 1), 0.0)


@pytest.mark.parametrize("kwargs", [dict(probability=0.25), dict(probability=0.7, min_area=0.1, max_area=0.6,
                                                                  min_aspect=0.5, max_aspect=3.0, mode="pixel")])
def test_erasing_boxes_match_timm(kwargs):
    from timm.data.random_erasing import RandomErasing as TimmRE

    h, w, n = 24, 30, 6000
    re = TimmRE(device="cpu", **kwargs)
    t = to_torchdali(re)
    assert isinstance(t, _timm.TimmRandomErasing)
    theirs, ours = _timm_boxes(re, n, h, w, seed=5), _our_boxes(t, n, h, w, seed=5)
    pvals = {"erased": chi2_homogeneity([(theirs[:, 3] > 0).sum(), (theirs[:, 3] == 0).sum()],
                                        [(ours[:, 3] > 0).sum(), (ours[:, 3] == 0).sum()])}
    hit_t, hit_o = theirs[theirs[:, 3] > 0], ours[ours[:, 3] > 0]
    for j, name in enumerate(("top", "left", "height", "width")):
        hi = int(max(hit_t[:, j].max(), hit_o[:, j].max())) + 1
        edges = np.unique(np.linspace(0, hi, 9).round())
        pvals[name] = chi2_homogeneity(np.histogram(hit_t[:, j], edges)[0], np.histogram(hit_o[:, j], edges)[0])
    area = lambda b: b[:, 2] * b[:, 3] / (h * w)  # noqa: E731
    edges = np.linspace(0, 1, 11)
    pvals["area"] = chi2_homogeneity(np.histogram(area(hit_t), edges)[0], np.histogram(area(hit_o), edges)[0])
    bad = {k: v for k, v in pvals.items() if v < 1e-4}
    assert not bad, f"erase boxes differ from timm's: {bad}"


def test_erasing_pixel_mode_writes_standard_normal_noise():
    from torchdali.transforms._plan import apply_to_images

    images = [_image(s, 5.0, 64) for s in range(8)]
    kw = dict(probability=1.0, min_area=0.2, max_area=0.4)
    noise = torch.stack(apply_to_images(_timm_pipeline(48, mode="pixel", **kw), images, seed=1))
    const = torch.stack(apply_to_images(_timm_pipeline(48, mode="const", **kw), images, seed=1))
    box = (const == 0).all(1, keepdim=True).expand_as(const)  # the same draws erase the same boxes
    assert box.any(1).any(1).any(1).all()
    torch.testing.assert_close(noise[~box], const[~box])
    values = noise[box]
    assert values.numel() > 5000
    assert abs(values.mean().item()) < 0.05 and abs(values.std().item() - 1) < 0.05


def test_erasing_refusals():
    from timm.data.random_erasing import RandomErasing as TimmRE

    with pytest.raises(ValueError, match="mode='rand'"):
        to_torchdali(TimmRE(mode="rand", device="cpu"))
    with pytest.raises(ValueError, match="one box per image"):
        to_torchdali(TimmRE(max_count=3, device="cpu"))
    assert to_torchdali(TimmRE(device="cpu")).value == (0.0,)
    assert to_torchdali(TimmRE(mode="pixel", device="cpu")).value == "random"


# --------------------------------------------------------------------------- timm's create_transform

_MEAN, _STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_CREATE = {
    "train-defaults": dict(is_training=True),
    "train-randaugment": dict(is_training=True, auto_augment="rand-m9-mstd0.5-inc1"),
    "train-randaugment-erasing": dict(is_training=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25),
    "train-jitter-erasing-pixel": dict(is_training=True, color_jitter=0.4, re_prob=0.25, re_mode="pixel"),
    "eval-bicubic-0.875": dict(is_training=False, interpolation="bicubic", crop_pct=0.875, mean=_MEAN, std=_STD),
    "eval-bicubic-0.95": dict(is_training=False, interpolation="bicubic", crop_pct=0.95, mean=_MEAN, std=_STD),
}


@pytest.mark.parametrize("name", list(_CREATE))
def test_create_transform_converts(name):
    from timm.data import create_transform
    from torchdali.transforms._plan import apply_to_images, compile_transforms

    # a pretrained model's data config, written out (resolve_data_config would need the weights)
    t = create_transform(input_size=(3, 224, 224), **_CREATE[name])
    plan = compile_transforms(t)
    assert plan.out_size == (224, 224) and plan.out_dtype == torch.float32
    if "randaugment" in name:
        assert plan.n_slots == 2  # RandAugment's two layers; timm turns ColorJitter off with it
        (ra,) = [x for x in plan.transforms if isinstance(x, _timm.TimmRandAugment)]
        # create_transform's hparams: fill = the mean in uint8, translations relative (TranslateXRel/YRel)
        assert all(o.fill == FILL for o in ra.ops) and {o.name for o in ra.ops} >= {"TranslateXRel", "Rotate"}
        assert all(o.magnitude == 9 and o.magnitude_std == 0.5 and o.prob == 0.5 for o in ra.ops)
    else:
        assert (plan.n_slots > 0) == name.startswith("train")  # ColorJitter
    out = apply_to_images(t, [_image(0, 10.0, 240)[:, :, :200], _image(1, 10.0, 260)], seed=0)
    assert [o.shape for o in out] == [torch.Size([3, 224, 224])] * 2 and all(o.isfinite().all() for o in out)
