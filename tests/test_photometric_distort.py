"""RandomPhotometricDistort (SSD), and colour/warp transforms that lead a pipeline.

* per sample against torchvision.transforms.v2's ``RandomPhotometricDistort.transform``
  for our drawn parameters (within 1 on >= 99.9% of pixels, never more than 2: the
  blends and hue, as the augment program's own tests);
* the draws: each op's coin, the contrast-before coin, the channel permutation and the
  factors against torchvision's ``make_params`` (chi-square, Kolmogorov-Smirnov);
* the ``permute_channels`` op of the augment program is in ``test_augment_kernel.py``;
* a *leading* program (colour or warp transforms before every geometry transform, as in
  torchvision's SSD preset) runs on each decoded image at its own size before the
  geometry: against torchvision, kernel against reference, through the loaders.
"""
from __future__ import annotations

import os
from collections import Counter, defaultdict

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torchvision.transforms.v2 as v2  # noqa: E402
import torchvision.transforms.v2.functional as TF  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

import torchdali as td  # noqa: E402
from csrc_triton import layout  # noqa: E402
from torchdali import _rng  # noqa: E402
from torchdali import transforms as T  # noqa: E402
from torchdali.transforms import _execute  # noqa: E402
from torchdali.transforms._execute import SIZE_SLOT  # noqa: E402
from torchdali.transforms._plan import apply_to_images, run_reference  # noqa: E402

from ._helpers import (  # noqa: E402
    assert_close_uint8,
    assert_gpu_loader_matches_cpu_path,
    drawn_params,
    kernel_devices,
    run_plan,
    smooth_image,
)
from .test_auto_augment import _ks, _ks_critical, chi_square_p  # noqa: E402
from .test_variable_size import Jpegs  # noqa: E402

DEVICES = kernel_devices()
SIZES = [(20, 30), (33, 21), (20, 30), (17, 25), (26, 26), (19, 23)]
MEAN = (123, 117, 104)
N_DRAWS = 3000
NAMES = ("brightness", "contrast", "saturation", "hue")


def _images(sizes=SIZES) -> list[torch.Tensor]:
    return [smooth_image(h, w, seed=i) for i, (h, w) in enumerate(sizes)]


def _tv_params(p: dict, i: int) -> dict:
    """torchvision's ``RandomPhotometricDistort`` parameters of sample ``i`` of our draw ``p``."""
    params = {f"{n}_factor": float(p[n][i]) if p[f"apply_{n}"][i] else None for n in NAMES}
    params["contrast_before"] = bool(p["contrast_before"][i])
    params["channel_permutation"] = torch.from_numpy(p["permutation"][i].copy()) if p["permute"][i] else None
    return params


def _keys(n: int, seed: int = 0) -> np.ndarray:
    return _rng.sample_keys(seed, 0, np.arange(n))


# -- per sample against torchvision --------------------------------------------------------------

@pytest.mark.parametrize("p", [0.5, 1.0])
def test_photometric_distort_matches_torchvision_per_sample(p):
    imgs = _images([(21, 27)] * 8)
    tv = v2.RandomPhotometricDistort(p=p)
    ours = T.to_torchdali(tv)
    assert isinstance(ours, T.RandomPhotometricDistort) and ours.p == p
    outs = apply_to_images(T.Compose([ours]), imgs, seed=3)
    drawn = drawn_params(T.compile_transforms([ours]), np.array([(21, 27)] * 8), _keys(8, 3))[0]
    for i, img in enumerate(imgs):
        ref = tv.transform(img, _tv_params(drawn, i))
        assert_close_uint8(outs[i], ref, max_off=2, frac_within_1=0.999)
    if p == 1.0:  # every op on every sample, contrast both before and after, several permutations
        assert drawn["contrast_before"].any() and not drawn["contrast_before"].all()
        assert len({tuple(r) for r in drawn["permutation"]}) > 2


def test_photometric_distort_ranges_are_torchvisions():
    tv = v2.RandomPhotometricDistort(brightness=(0.5, 1.5), contrast=(0.9, 1.1), saturation=(0.0, 2.0),
                                     hue=(-0.5, 0.25), p=0.7)
    ours = T.to_torchdali(tv)
    assert (ours.brightness, ours.contrast, ours.saturation, ours.hue, ours.p) == \
        ((0.5, 1.5), (0.9, 1.1), (0.0, 2.0), (-0.5, 0.25), 0.7)
    imgs = _images([(15, 18)] * 6)
    outs = apply_to_images(T.Compose([ours]), imgs, seed=5)
    drawn = drawn_params(T.compile_transforms([ours]), np.array([(15, 18)] * 6), _keys(6, 5))[0]
    for i, img in enumerate(imgs):
        assert_close_uint8(outs[i], tv.transform(img, _tv_params(drawn, i)), max_off=2, frac_within_1=0.999)
    with pytest.raises(ValueError, match="hue"):
        T.RandomPhotometricDistort(hue=(-0.6, 0.0))
    with pytest.raises(ValueError, match=r"\(min, max\)"):
        T.RandomPhotometricDistort(contrast=(1.5, 0.5))


def _torchvision_draws(tv, n: int) -> list[dict]:
    torch.manual_seed(0)
    img = torch.empty(3, 8, 8)
    return [tv.make_params([img]) for _ in range(n)]


def test_photometric_distort_draws_match_torchvision_sampling():
    tv = v2.RandomPhotometricDistort(p=0.4)
    drawn = drawn_params(T.compile_transforms([T.to_torchdali(tv)]), np.array([(8, 8)] * N_DRAWS),
                         _keys(N_DRAWS, 9))[0]
    theirs = _torchvision_draws(tv, N_DRAWS)
    # which ops apply (16 combinations), the contrast coin, the permutation (7 outcomes with "none")
    ours_apply = Counter(tuple(bool(drawn[f"apply_{n}"][i]) for n in NAMES) for i in range(N_DRAWS))
    tv_apply = Counter(tuple(d[f"{n}_factor"] is not None for n in NAMES) for d in theirs)
    for what, a, b in (
        ("ops applied", ours_apply, tv_apply),
        ("contrast before", Counter(drawn["contrast_before"].tolist()), Counter(d["contrast_before"] for d in theirs)),
        ("permutation", Counter(tuple(drawn["permutation"][i]) if drawn["permute"][i] else None
                                for i in range(N_DRAWS)),
         Counter(tuple(d["channel_permutation"].tolist()) if d["channel_permutation"] is not None else None
                 for d in theirs)),
    ):
        stat, p, df = chi_square_p(a, b)
        assert p > 1e-3, f"{what}: chi-square {stat:.1f} on {df} degrees of freedom, p = {p:.2e}"
    for n in NAMES:
        a = drawn[n][drawn[f"apply_{n}"]]
        b = np.array([d[f"{n}_factor"] for d in theirs if d[f"{n}_factor"] is not None])
        assert _ks(a, b) < _ks_critical(len(a), len(b)), n
        lo, hi = getattr(tv, n)
        assert lo <= a.min() and a.max() <= hi


# -- a leading program: colour and warps before the geometry -----------------------------------------

def test_ssd_photometric_and_zoom_out_match_torchvision_per_sample():
    """torchvision's SSD preset order: distort the decoded image, paste it into the canvas,
    flip, and (the model's transform) resize."""
    imgs = _images()
    fill = defaultdict(lambda: MEAN, {tv_tensors.Mask: 0})  # the preset's: the image gets 0 (torchvision)
    pipe = v2.Compose([v2.RandomPhotometricDistort(), v2.RandomZoomOut(fill=fill), v2.RandomHorizontalFlip(),
                       v2.Resize((32, 32))])
    plan = T.compile_transforms(pipe)
    assert plan.leading == 1 and len(plan.program) == 1 and plan.out_size == (32, 32)
    outs = apply_to_images(pipe, imgs, seed=4)
    drawn = drawn_params(plan, np.array(SIZES), _keys(len(imgs), 4))
    tv = pipe.transforms[0]
    for i, img in enumerate(imgs):
        ref = tv.transform(img, _tv_params(drawn[0], i))
        ref = TF.pad(ref, [int(drawn[1][k][i]) for k in ("left", "top", "right", "bottom")], fill=0)
        if drawn[2]["flip"][i]:
            ref = TF.horizontal_flip(ref)
        assert_close_uint8(outs[i], TF.resize(ref, [32, 32]), max_off=2, frac_within_1=0.999)


@pytest.mark.parametrize("make,tv_apply", [
    (lambda m: [m.ColorJitter(0.4, 0.4, 0.4, 0.1), m.RandomResizedCrop(12)], None),
    (lambda m: [m.RandomPerspective(0.4, p=1.0), m.Resize((10, 14))], None),
], ids=["jitter-then-crop", "perspective-then-resize"])
def test_colour_and_warps_before_the_geometry_run_at_the_decoded_size(make, tv_apply):
    """Refused before: now the leading transforms run at the decoded size, as torchvision runs them
    (the step alone is checked against torchvision in its own tests; here the geometry after it)."""
    imgs = _images([(20, 30), (33, 21), (20, 30)])
    ours = make(T)
    plan = T.compile_transforms(ours)
    assert plan.leading == 1
    outs = apply_to_images(T.Compose(ours), imgs, seed=6)
    # torchvision on each image: the leading step's output from our own pipeline without the geometry
    lead = apply_to_images(T.Compose([ours[0]]), imgs, seed=6)
    drawn = drawn_params(plan, np.array([im.shape[1:] for im in imgs]), _keys(len(imgs), 6))
    for i, img in enumerate(imgs):
        if isinstance(ours[1], T.RandomResizedCrop):
            d = drawn[1]
            ref = TF.resized_crop(lead[i], int(d["top"][i]), int(d["left"][i]), int(d["height"][i]),
                                  int(d["width"][i]), [12, 12])
        else:
            ref = TF.resize(lead[i], [10, 14])
        assert_close_uint8(outs[i], ref, max_off=1, frac_within_1=1.0)
    # and the leading step alone is the one at the output size, already tested against torchvision
    solo = T.compile_transforms([ours[0]])
    assert solo.leading == 0


def test_a_program_between_two_geometry_steps_is_still_refused():
    with pytest.raises(ValueError, match="move RandomInvert after RandomHorizontalFlip"):
        T.compile_transforms([T.CenterCrop(8), T.RandomInvert(), T.RandomHorizontalFlip()])
    with pytest.raises(ValueError, match="move ColorJitter after CenterCrop"):
        T.compile_transforms([T.RandomInvert(), T.Resize(20), T.ColorJitter(0.3), T.CenterCrop(8)])


def test_leading_program_on_an_empty_batch():
    plan = T.compile_transforms([T.RandomPhotometricDistort(), T.Resize((8, 8))])
    assert run_reference(plan, [], plan.params(np.zeros((0, 2)), _keys(0))).shape == (0, 3, 8, 8)


def test_leading_program_draws_carry_the_source_sizes_in_a_slot():
    """Slots are host rows per sample on every path (merged with a batch's parts, replaced with
    its samples): the leading pass sizes its buffer from them without waiting for the device."""
    plan = T.compile_transforms([T.RandomPhotometricDistort(), T.Resize((8, 8))])
    assert plan.n_slots == 7 and plan.program[0].start == 1
    bp = plan.params(np.array([[20, 30], [9, 7]]), _keys(2))
    assert bp.slots[:, SIZE_SLOT, layout.SLOT_OP].eq(layout.OP_IDENTITY).all()
    assert bp.slots[:, SIZE_SLOT, layout.SLOT_M0:layout.SLOT_M1 + 1].tolist() == [[20, 30], [9, 7]]
    assert bp.batch == {}
    assert T.compile_transforms([T.Resize((8, 8)), T.RandomPhotometricDistort()]).n_slots == 6


# -- the kernel ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pipe,exact", [
    ([T.RandomPhotometricDistort(p=0.7), T.ToDtype(torch.float32, scale=True)], True),
    ([T.Resize(9, max_size=12), T.RandomPhotometricDistort(p=0.7)], False),
    ([T.RandomPhotometricDistort(p=0.7), T.RandomZoomOut(fill=MEAN), T.RandomHorizontalFlip(), T.Resize((9, 9))],
     False),
], ids=["alone", "after-resize", "leading"])
def test_kernel_matches_reference(device, pipe, exact):
    imgs = [smooth_image(h, w, seed=h) for h, w in [(11, 9), (7, 12), (11, 9), (10, 10)]]
    if exact:
        imgs = [smooth_image(11, 9, seed=s) for s in range(4)]
    plan = T.compile_transforms(pipe)
    got = run_plan(plan, imgs, device, _execute.KERNEL, seed=1)
    exp = run_plan(plan, imgs, "cpu", _execute.REFERENCE, seed=1)
    for a, b in zip(got, exp):
        assert a.shape == b.shape
        diff = (a.double() - b.double()).abs() * (255 if a.dtype != torch.uint8 else 1)
        if exact and device == "cpu":  # interpreted: the same float32 operations
            assert diff.max().item() <= 1e-3
        else:
            assert diff.max().item() <= 1 + 1e-3 and (diff > 1e-3).double().mean().item() <= 0.01


# -- the loaders -------------------------------------------------------------------------------------

def test_ssd_steps_through_the_cpu_loader_with_torchvision_objects():
    ds = Jpegs(SIZES)
    pipe = v2.Compose([v2.RandomPhotometricDistort(), v2.RandomZoomOut(fill=MEAN), v2.RandomHorizontalFlip(),
                       v2.Resize((24, 24)), v2.ToDtype(torch.float32, scale=True)])
    batches = list(td.DataLoader(ds, batch_size=4, transforms=pipe, device="cpu", seed=2))
    assert [b[0].shape for b in batches] == [(4, 3, 24, 24), (2, 3, 24, 24)]


@pytest.mark.cuda
@pytest.mark.parametrize("tf", [
    [T.RandomPhotometricDistort(), T.ToDtype(torch.float32, scale=True)],
    [T.RandomPhotometricDistort(), T.RandomZoomOut(fill=MEAN), T.RandomHorizontalFlip(), T.Resize((40, 40))],
    [T.RandomShortestSize((16, 24), max_size=40), T.RandomPhotometricDistort(p=1.0)],
], ids=["alone", "ssd", "after-resize"])
def test_gpu_loader_matches_the_cpu_path(tf):
    assert_gpu_loader_matches_cpu_path(Jpegs(SIZES + [(23, 31), (31, 23)]), batch_size=4, transforms=tf, seed=3)


def test_registry_row():
    assert "RandomPhotometricDistort(brightness=(0.875, 1.125)" in T.supported_table()
    assert "RandomPhotometricDistort" in T.SUPPORTED
