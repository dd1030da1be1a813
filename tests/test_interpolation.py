"""Interpolation modes (bilinear, bicubic, nearest, nearest-exact, per sample) of the
fused kernel, its reference and the transforms, against torchvision.

Tolerances, uint8 output:

=====================================================  ======================  ===========================
comparison                                             nearest, nearest-exact  bilinear, bicubic
=====================================================  ======================  ===========================
ours vs torchvision.transforms.v2.functional on a      exact                   max |diff| <= 2, >= 99.9%
uint8 CPU tensor (fixed-point weights there)                                   of pixels within 1
reference without quantisation vs torchvision on the   exact                   atol 1e-2 (float32 sums)
float image (the float math of the same filter)
kernel vs reference (``test_kernel._check``)           exact                   atol 1 on <= 1% of pixels
per-sample kernel vs the same filter compiled in       exact                   exact
=====================================================  ======================  ===========================

Bicubic on a uint8 image rounds and clamps its horizontal pass to 0..255 before
the vertical one, as torch's CPU uint8 kernel does; a one-pass float resize
(torchvision on a CUDA tensor) differs from both where the cubic overshoots.
:func:`test_bicubic_uint8_rounds_between_passes` pins that down.
"""
from __future__ import annotations

import os

import torch

# Must precede the first `import triton` (the kernel module imports it lazily).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import PIL.Image  # noqa: E402
import pytest  # noqa: E402
import torchvision.transforms as v1  # noqa: E402
import torchvision.transforms.v2 as v2  # noqa: E402
import torchvision.transforms.v2.functional as TF  # noqa: E402
from torchvision.transforms import InterpolationMode as IM  # noqa: E402

from csrc_triton import NUM_PARAMS, fused_resized_crop, layout, resized_crop_reference  # noqa: E402
from torchdali import _rng  # noqa: E402
from torchdali import transforms as T  # noqa: E402
from torchdali.transforms import _geometry as G  # noqa: E402
from torchdali.transforms import functional as F  # noqa: E402
from torchdali.transforms._args import interpolation_code, interpolation_codes  # noqa: E402
from torchdali.transforms._plan import apply_to_images  # noqa: E402

from ._helpers import assert_close_uint8, smooth_image  # noqa: E402
from .test_kernel import DEVICES, IDENTITY, _check, _geom, _images  # noqa: E402

MODES = {"bilinear": IM.BILINEAR, "bicubic": IM.BICUBIC, "nearest": IM.NEAREST, "nearest-exact": IM.NEAREST_EXACT}
NEAREST = ("nearest", "nearest-exact")


def _noise(h: int, w: int, seed: int = 0) -> torch.Tensor:
    """CHW uint8 noise: the hardest case for the cubic (overshoot at every pixel)."""
    return torch.randint(0, 256, (3, h, w), generator=torch.Generator().manual_seed(seed * 7919 + h * 31 + w),
                         dtype=torch.uint8)


def _assert_matches_torchvision(ours: torch.Tensor, ref: torch.Tensor, mode: str) -> None:
    if mode in NEAREST:
        assert torch.equal(ours, ref), f"{(ours.int() - ref.int()).abs().max()} max |diff|"
    else:
        assert_close_uint8(ours, ref, max_off=2, frac_within_1=0.999)


def _row(H: int, W: int, out: tuple[int, int], box=None, flip=(False, False), code: int = 0, **kw) -> list[float]:
    """A full params row: test_kernel's geometry, the rest zero, the sample's filter code."""
    row = _geom(H, W, out, box, flip, **kw)
    row = row + [0.0] * (NUM_PARAMS - len(row))
    row[layout.FILTER] = float(code)
    return row


def _run_reference(img: torch.Tensor, rows: list[list[float]], out, **kw) -> torch.Tensor:
    C, H, W = img.shape
    data = img.permute(1, 2, 0).contiguous().flatten()
    n = len(rows)
    return resized_crop_reference(data.repeat(n), torch.arange(n) * data.numel(), torch.tensor([[H, W, C]] * n),
                                  torch.tensor(rows, dtype=torch.float32), out, *IDENTITY, **kw)


# --------------------------------------------------------------------------- #
# Argument parsing
# --------------------------------------------------------------------------- #


def _tv_takes_names() -> bool:
    """Whether this torchvision's resize takes an interpolation mode by its name."""
    try:
        TF.resize(torch.zeros(1, 2, 2, dtype=torch.uint8), [1, 1], interpolation="nearest")
        return True
    except ValueError:
        return False


_TV_TAKES_NAMES = _tv_takes_names()


@pytest.mark.parametrize("arg,code", [
    (IM.BILINEAR, layout.FILTER_BILINEAR), (v1.InterpolationMode.BICUBIC, layout.FILTER_BICUBIC),
    (v2.InterpolationMode.NEAREST, layout.FILTER_NEAREST), (IM.NEAREST_EXACT, layout.FILTER_NEAREST_EXACT),
    ("bilinear", layout.FILTER_BILINEAR), ("bicubic", layout.FILTER_BICUBIC), ("nearest", layout.FILTER_NEAREST),
    ("nearest-exact", layout.FILTER_NEAREST_EXACT),
    (0, layout.FILTER_NEAREST), (2, layout.FILTER_BILINEAR), (3, layout.FILTER_BICUBIC),
    (PIL.Image.Resampling.BICUBIC, layout.FILTER_BICUBIC), (PIL.Image.NEAREST, layout.FILTER_NEAREST),
])
def test_interpolation_arguments_torchvision_accepts(arg, code):
    assert interpolation_code(arg, "t") == code
    # torchvision accepts the same argument and means the same mode (a mode's name where this torchvision
    # takes names: 0.29 does, 0.26 takes only the InterpolationMode)
    img = _noise(9, 11)
    if isinstance(arg, str) and not _TV_TAKES_NAMES:
        arg = v2.InterpolationMode(arg)
    assert torch.equal(TF.resize(img, [5, 7], interpolation=arg),
                       TF.resize(img, [5, 7], interpolation=v2.InterpolationMode(layout.filter_name(code))))


@pytest.mark.parametrize("arg,closest", [
    (IM.LANCZOS, "bicubic"), ("lanczos", "bicubic"), (1, "bicubic"), (PIL.Image.Resampling.LANCZOS, "bicubic"),
    (IM.BOX, "bilinear"), (4, "bilinear"), (IM.HAMMING, "bilinear"), ("hamming", "bilinear"),
])
def test_unsupported_modes_name_the_closest_supported_one(arg, closest):
    with pytest.raises(ValueError, match=f"closest supported mode is {closest}"):
        interpolation_code(arg, "Resize")
    with pytest.raises(ValueError, match=f"closest supported mode is {closest}"):
        T.Resize(8, interpolation=arg)
    with pytest.raises(ValueError, match=f"closest supported mode is {closest}"):
        F.resize(_noise(8, 8), [4, 4], interpolation=arg)


@pytest.mark.parametrize("arg", ["BILINEAR", "cubic", 7, -1, 2.0, None, True])
def test_invalid_interpolation_arguments_raise(arg):
    with pytest.raises(ValueError, match="interpolation must be"):
        interpolation_code(arg, "Resize")


def test_interpolation_lists_are_per_sample_only_where_drawn():
    assert interpolation_codes([IM.BILINEAR, "bicubic"], "t") == (layout.FILTER_BILINEAR, layout.FILTER_BICUBIC)
    assert interpolation_codes("random", "t") == (layout.FILTER_BILINEAR, layout.FILTER_BICUBIC)
    with pytest.raises(ValueError, match="empty"):
        interpolation_codes([], "t")
    with pytest.raises(ValueError, match="interpolation must be"):
        T.Resize(8, interpolation=[IM.BILINEAR, IM.BICUBIC])
    assert T.RandomResizedCrop(8).n_uniforms == 40
    assert T.RandomResizedCrop(8, interpolation=IM.BICUBIC).n_uniforms == 40
    assert T.RandomResizedCrop(8, interpolation=[IM.BILINEAR, IM.BICUBIC]).n_uniforms == 41


def test_launcher_interpolation_argument():
    img = _noise(10, 12)
    rows = [_row(10, 12, (5, 6))]
    for name, code in layout.FILTERS.items():
        assert torch.equal(_run_reference(img, rows, (5, 6), interpolation=name),
                           _run_reference(img, rows, (5, 6), interpolation=code))
    with pytest.raises(ValueError, match="interpolation must be one of"):
        _run_reference(img, rows, (5, 6), interpolation="lanczos")
    bad = [_row(10, 12, (5, 6), code=layout.FILTER_BICUBIC), _row(10, 12, (5, 6), code=5)]
    with pytest.raises(ValueError, match="sample 1: filter column holds 5.0"):
        _run_reference(img, bad, (5, 6), interpolation=layout.FILTER_PER_SAMPLE)
    # the filter column is only read in the per-sample mode
    _run_reference(img, bad, (5, 6), interpolation=layout.FILTER_BICUBIC)


# --------------------------------------------------------------------------- #
# Reference vs torchvision
# --------------------------------------------------------------------------- #

# (H, W, out): down, up, mixed (one axis each way), odd sizes throughout
RESIZE_CASES = [(57, 71, (17, 23)), (23, 19, (45, 51)), (64, 47, (31, 77)), (137, 211, (61, 97)), (30, 40, (30, 13))]


@pytest.mark.parametrize("antialias", [True, False], ids=["aa", "no_aa"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("H,W,out", RESIZE_CASES)
def test_resize_matches_torchvision(H, W, out, mode, antialias):
    img = _noise(H, W)
    ours = F.resize(img, list(out), interpolation=MODES[mode], antialias=antialias)
    ref = TF.resize(img, list(out), interpolation=MODES[mode], antialias=antialias)
    _assert_matches_torchvision(ours, ref, mode)
    # the same on a smooth image, and through the transform class
    img = smooth_image(H, W)
    ours = apply_to_images(T.Compose([T.Resize(out, interpolation=MODES[mode], antialias=antialias)]), [img])[0]
    _assert_matches_torchvision(ours, TF.resize(img, list(out), interpolation=MODES[mode], antialias=antialias), mode)


@pytest.mark.parametrize("antialias", [True, False], ids=["aa", "no_aa"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("seed", range(3))
def test_resized_crop_matches_torchvision(seed, mode, antialias):
    g = torch.Generator().manual_seed(seed)

    def ri(lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    H, W = ri(30, 150), ri(30, 150)
    h, w = ri(5, H), ri(5, W)
    top, left = ri(0, H - h), ri(0, W - w)
    out = [ri(3, 2 * h), ri(3, 2 * w)]
    img = _noise(H, W, seed)
    ours = F.resized_crop(img, top, left, h, w, out, interpolation=mode, antialias=antialias)
    ref = TF.resized_crop(img, top, left, h, w, out, interpolation=MODES[mode], antialias=antialias)
    _assert_matches_torchvision(ours, ref, mode)


@pytest.mark.parametrize("antialias", [True, False], ids=["aa", "no_aa"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("H,W,out", RESIZE_CASES[:4])
def test_float_math_matches_torchvision_on_float_images(H, W, out, mode, antialias):
    """Unquantised, the reference is the float math torchvision runs on a float image
    (one pass, no clamp): the same filter to float32 precision."""
    img = _noise(H, W, seed=1)
    box = (2, 3, H - 5, W - 4)
    for flip in ((False, False), (True, False), (False, True)):
        ours = _run_reference(img, [_row(H, W, out, box, flip)], out, antialias=antialias, interpolation=mode,
                              quantize=False)[0]
        ref = TF.resized_crop(img.float(), *box, list(out), interpolation=MODES[mode], antialias=antialias)
        ref = ref.flip(-2) if flip[0] else ref.flip(-1) if flip[1] else ref
        if mode in NEAREST:
            assert torch.equal(ours, ref)
        else:
            torch.testing.assert_close(ours, ref, atol=1e-2, rtol=0)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("vertical", [False, True], ids=["hflip", "vflip"])
def test_resized_crop_then_flip_matches_torchvision(vertical, mode):
    img = _noise(61, 83, seed=4)
    box, out = (5, 7, 40, 61), (29, 45)
    rrc_flip = T.Compose([T.Resize(out, interpolation=mode),
                          T.RandomVerticalFlip(1.0) if vertical else T.RandomHorizontalFlip(1.0)])
    crop = TF.crop(img, *box)
    ours = apply_to_images(rrc_flip, [crop])[0]
    flip = TF.vertical_flip if vertical else TF.horizontal_flip
    _assert_matches_torchvision(ours, flip(TF.resize(crop, list(out), interpolation=MODES[mode])), mode)
    # the same through the kernel's geometry: flip inside the crop of the whole image
    row = _row(61, 83, out, box, flip=(vertical, not vertical))
    ours = _run_reference(img, [row], out, out_dtype=torch.uint8, interpolation=mode)[0]
    ref = flip(TF.resized_crop(img, *box, list(out), interpolation=MODES[mode]))
    _assert_matches_torchvision(ours, ref, mode)


@pytest.mark.parametrize("mode", list(MODES))
def test_resize_then_center_crop_matches_torchvision(mode):
    img = smooth_image(97, 131, seed=2)
    ours = apply_to_images(T.Compose([T.Resize(40, interpolation=mode), T.CenterCrop(36)]), [img])[0]
    ref = TF.center_crop(TF.resize(img, [40], interpolation=MODES[mode]), [36, 36])
    _assert_matches_torchvision(ours, ref, mode)


@pytest.mark.parametrize("antialias", [True, False], ids=["aa", "no_aa"])
@pytest.mark.parametrize("mode", list(MODES))
def test_same_size_resize_is_identity(mode, antialias):
    """torchvision returns the image unchanged when the size does not change; every filter
    is the identity at scale 1."""
    img = _noise(13, 17)
    assert torch.equal(F.resize(img, [13, 17], interpolation=mode, antialias=antialias), img)
    assert torch.equal(F.resized_crop(img, 2, 3, 9, 11, [9, 11], interpolation=mode, antialias=antialias),
                       img[:, 2:11, 3:14])


@pytest.mark.parametrize("size", [2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 31, 33, 64, 100, 127, 224, 255, 256, 299])
@pytest.mark.parametrize("mode", NEAREST)
def test_nearest_index_is_torchs_float32_index_for_many_sizes(size, mode):
    """The nearest filters pick their pixel from float32 products that can land on an
    integer: check many scale factors (down and up) against torch on a ramp image."""
    for n_in in (size, 3 * size + 1, max(1, size // 3), 500):
        ramp = torch.arange(n_in, dtype=torch.int64)
        img = torch.stack([ramp % 256, ramp // 256, torch.zeros_like(ramp)])[:, None, :].to(torch.uint8)
        # as HWC numpy: a 3-wide CHW tensor would read as HWC
        ours = F.resize(img.permute(1, 2, 0).numpy(), [1, size], interpolation=mode)
        ref = TF.resize(img, [1, size], interpolation=MODES[mode])
        assert torch.equal(ours, ref), (n_in, size)


def test_bicubic_uint8_rounds_between_passes():
    """On noise the cubic overshoots 0..255 between the passes. torch's CPU uint8 kernel
    rounds and clamps there; so does our uint8 path (within 1 of it), while the one-pass
    float result (what torchvision computes on a CUDA tensor) is far off in places."""
    img = _noise(20, 23, seed=3)
    for antialias in (True, False):
        cpu = TF.resize(img, [45, 51], interpolation=IM.BICUBIC, antialias=antialias)
        ours = F.resize(img, [45, 51], interpolation="bicubic", antialias=antialias)
        one_pass = TF.resize(img.float(), [45, 51], interpolation=IM.BICUBIC, antialias=antialias)
        one_pass = one_pass.clamp(0, 255).round().to(torch.uint8)
        assert_close_uint8(ours, cpu)
        assert (one_pass.int() - cpu.int()).abs().max() > 5


# --------------------------------------------------------------------------- #
# Transforms: fixed and per-sample filters
# --------------------------------------------------------------------------- #


def _rrc_box(h: int, w: int, seed: int, t: T.RandomResizedCrop, stream: int = 0):
    u = _rng.uniform(_rng.sample_keys(seed, 0, np.arange(1)), stream, 40)
    top, left, bh, bw = G.random_resized_crop_box(np.array([h], float), np.array([w], float), t.scale, t.ratio, u)
    return int(top[0]), int(left[0]), int(bh[0]), int(bw[0])


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("seed", [0, 1])
def test_random_resized_crop_matches_torchvision_with_same_box(seed, mode):
    img = smooth_image(83, 120, seed)
    rrc = T.RandomResizedCrop(40, interpolation=MODES[mode])
    ours = apply_to_images(T.Compose([rrc]), [img], seed=seed)[0]
    ref = TF.resized_crop(img, *_rrc_box(83, 120, seed, rrc), [40, 40], interpolation=MODES[mode])
    _assert_matches_torchvision(ours, ref, mode)


def test_plan_interpolation_is_the_last_resize():
    plan = T.compile_transforms([T.RandomResizedCrop(16, interpolation=IM.BICUBIC)])
    assert plan.interpolation == layout.FILTER_BICUBIC
    plan = T.compile_transforms([T.RandomResizedCrop(16, interpolation="bicubic"), T.Resize((8, 8))])
    assert plan.interpolation == layout.FILTER_BILINEAR
    plan = T.compile_transforms([T.Resize(20, interpolation=IM.NEAREST), T.CenterCrop(16)])
    assert plan.interpolation == layout.FILTER_NEAREST
    plan = T.compile_transforms([T.RandomResizedCrop(16, interpolation="random"), T.RandomHorizontalFlip()])
    assert plan.interpolation == layout.FILTER_PER_SAMPLE
    assert T.compile_transforms([T.CenterCrop(8)]).interpolation == layout.FILTER_BILINEAR
    # torchvision objects convert with their mode
    tv = v2.Compose([v2.Resize(20, interpolation=IM.NEAREST_EXACT), v2.CenterCrop(16)])
    assert T.compile_transforms(tv).interpolation == layout.FILTER_NEAREST_EXACT
    tv = v2.Compose([v2.RandomResizedCrop(16, interpolation=IM.BICUBIC)])
    assert T.compile_transforms(tv).interpolation == layout.FILTER_BICUBIC
    assert "InterpolationMode.BICUBIC" in repr(T.RandomResizedCrop(16, interpolation=3))


def test_per_sample_filters_are_drawn_and_boxes_unchanged():
    sizes = np.array([[90, 120]] * 400)
    keys = _rng.sample_keys(11, 0, np.arange(400))
    single = T.compile_transforms([T.RandomResizedCrop(16), T.RandomHorizontalFlip()]).params(sizes, keys).params
    per = T.compile_transforms([T.RandomResizedCrop(16, interpolation=[IM.BILINEAR, IM.BICUBIC]),
                                T.RandomHorizontalFlip()]).params(sizes, keys).params
    codes = per[:, layout.FILTER]
    assert set(codes.tolist()) == {float(layout.FILTER_BILINEAR), float(layout.FILTER_BICUBIC)}
    assert 0.4 < (codes == layout.FILTER_BICUBIC).double().mean().item() < 0.6
    # the extra uniform comes after the box's 40, and the flip has its own stream
    others = [c for c in range(NUM_PARAMS) if c != layout.FILTER]
    assert torch.equal(single[:, others], per[:, others])
    assert (single[:, layout.FILTER] == layout.FILTER_BILINEAR).all()
    # three modes: each drawn about a third of the time
    three = T.compile_transforms([T.RandomResizedCrop(16, interpolation=["nearest", "bilinear", "bicubic"])])
    codes = three.params(sizes, keys).params[:, layout.FILTER]
    for code in (layout.FILTER_NEAREST, layout.FILTER_BILINEAR, layout.FILTER_BICUBIC):
        assert 0.25 < (codes == code).double().mean().item() < 0.42


def test_per_sample_output_is_each_samples_filter():
    images = [smooth_image(60 + 7 * i, 80 - 5 * i, seed=i) for i in range(12)]
    per = apply_to_images(T.Compose([T.RandomResizedCrop(24, interpolation="random")]), images, seed=2)
    bil = apply_to_images(T.Compose([T.RandomResizedCrop(24)]), images, seed=2)
    bic = apply_to_images(T.Compose([T.RandomResizedCrop(24, interpolation="bicubic")]), images, seed=2)
    plan = T.compile_transforms([T.RandomResizedCrop(24, interpolation="random")])
    keys = _rng.sample_keys(2, 0, np.arange(12))
    codes = plan.params(np.array([im.shape[1:] for im in images]), keys).params[:, layout.FILTER].tolist()
    assert set(codes) == {0.0, 1.0}
    for k in range(12):
        assert torch.equal(per[k], bic[k] if codes[k] == layout.FILTER_BICUBIC else bil[k]), k
    assert any(not torch.equal(bil[k], bic[k]) for k in range(12))


# --------------------------------------------------------------------------- #
# Kernel vs reference
# --------------------------------------------------------------------------- #


def _kernel_cases() -> list[tuple[list[torch.Tensor], list[list[float]], tuple[int, int]]]:
    """(images, rows, out): odd down, up with flips, gray + padding window + clamp region."""
    return [
        (_images([(37, 45, 3), (29, 17, 1)], 1),
         [_row(37, 45, (13, 11), (2, 3, 33, 40)), _row(29, 17, (13, 11), (0, 1, 29, 15), flip=(True, False))],
         (13, 11)),
        (_images([(9, 11, 3), (6, 7, 1)], 2),
         [_row(9, 11, (20, 17), flip=(False, True)), _row(6, 7, (20, 17), (1, 1, 5, 6), flip=(True, True))], (20, 17)),
        (_images([(40, 20, 3), (15, 21, 1)], 3),
         [_row(40, 20, (16, 16), valid=(0, 16, 3, 13)), _row(15, 21, (16, 16), (2, 2, 11, 17), clamp=(2, 13, 2, 19))],
         (16, 16)),
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("antialias", [True, False], ids=["aa", "no_aa"])
@pytest.mark.parametrize("mode", list(MODES))
def test_kernel_matches_reference(mode, antialias, device):
    exact = mode in NEAREST
    for images, rows, out in _kernel_cases():
        _check(images, rows, out, device, out_dtype=torch.uint8, antialias=antialias, interpolation=mode, exact=exact)
        _check(images, rows, out, device, out_dtype=torch.float32, quantize=False, antialias=antialias,
               interpolation=layout.FILTERS[mode], exact=exact)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("antialias", [True, False], ids=["aa", "no_aa"])
def test_kernel_per_sample_filter(antialias, device):
    """One batch, every filter: the per-sample kernel equals the reference, and each
    sample equals the kernel compiled with that sample's filter, bit for bit."""
    sizes = [(31, 40, 3), (22, 19, 1), (35, 28, 3), (12, 14, 3), (27, 33, 1)]
    out = (14, 17)
    codes = [layout.FILTER_BICUBIC, layout.FILTER_NEAREST, layout.FILTER_BILINEAR, layout.FILTER_NEAREST_EXACT,
             layout.FILTER_BICUBIC]
    g = torch.Generator().manual_seed(9)
    rows = []
    for (H, W, _), code in zip(sizes, codes):
        h = int(torch.randint(H // 2, H + 1, (1,), generator=g))
        w = int(torch.randint(W // 2, W + 1, (1,), generator=g))
        rows.append(_row(H, W, out, (H - h, W - w, h, w), flip=(code % 2 == 1, code < 2), code=code))
    images = _images(sizes, 9)
    for kw in (dict(out_dtype=torch.uint8), dict(out_dtype=torch.float32, quantize=False)):
        per = _check(images, rows, out, device, antialias=antialias, interpolation="per-sample", **kw)
        for b, code in enumerate(codes):
            one = _check(images[b:b + 1], rows[b:b + 1], out, device, antialias=antialias, interpolation=code, **kw)
            assert torch.equal(per[b], one[0]), (b, code)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("antialias", [True, False], ids=["aa", "no_aa"])
@pytest.mark.parametrize("mode", list(MODES))
def test_kernel_bad_geometry_stays_in_bounds(mode, antialias, device, monkeypatch):
    """Parameters the launcher does not check on a GPU (NaN, a zero or huge step, a
    clamp region past the image) give finite pixels read from inside the image."""
    import csrc_triton.resized_crop as rc

    monkeypatch.setattr(rc, "_check_values", lambda *a: None)
    sizes = [(10, 12, 3), (9, 8, 3), (11, 7, 1), (6, 5, 3)]
    images = _images(sizes, seed=19)
    out = (6, 7)
    rows = [_row(H, W, out) for H, W, _ in sizes]
    rows[0][layout.ORIGIN_X] = float("nan")
    rows[1][layout.LO_Y] = 1000.0  # only the last row is usable
    rows[2][layout.STEP_X] = 0.0
    rows[3][layout.ORIGIN_Y], rows[3][layout.STEP_Y] = 3e38, 3e38  # centres overflow to inf
    from .test_kernel import _pack, _params

    args = [t.to(device) for t in (*_pack(images), _params(rows))]
    got = fused_resized_crop(*args, out, *IDENTITY, quantize=False, antialias=antialias, interpolation=mode).cpu()
    assert torch.isfinite(got).all()
    assert (got >= -128).all() and (got <= 383).all()  # pixel values, plus the cubic's overshoot at most
    # every output row reads the last source row (plain bicubic: weights summing to 1 up to rounding)
    torch.testing.assert_close(got[1], got[1][:, -1:, :].expand_as(got[1]), atol=1e-3, rtol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("antialias", [True, False], ids=["aa", "no_aa"])
def test_kernel_matches_torchvision_cuda(antialias):
    """ImageNet-like sizes natively: every mode, and the per-sample mode, against
    torchvision on the CPU uint8 tensor and against the reference."""
    from .test_kernel import _pack, _params

    g = torch.Generator().manual_seed(1)
    sizes = [(375, 500), (500, 333), (256, 256), (97, 131)]
    imgs = [torch.randint(0, 256, (3, H, W), generator=g, dtype=torch.uint8) for H, W in sizes]
    out = (224, 224)
    boxes = []
    for H, W in sizes:
        h = int(torch.randint(H // 3, H + 1, (1,), generator=g))
        w = int(torch.randint(W // 3, W + 1, (1,), generator=g))
        boxes.append((int(torch.randint(0, H - h + 1, (1,), generator=g)),
                      int(torch.randint(0, W - w + 1, (1,), generator=g)), h, w))
    codes = list(layout.FILTERS.values())
    rows = [_row(H, W, out, box, code=code) for (H, W), box, code in zip(sizes, boxes, codes)]
    data, offsets, shapes = _pack([im.permute(1, 2, 0).contiguous() for im in imgs])
    args = [t.cuda() for t in (data, offsets, shapes, _params(rows))]
    for interpolation in [*layout.FILTERS, "per-sample"]:
        got = fused_resized_crop(*args, out, *IDENTITY, out_dtype=torch.uint8, antialias=antialias,
                                 interpolation=interpolation).cpu()
        exp = resized_crop_reference(*[a.cpu() for a in args], out, *IDENTITY, out_dtype=torch.uint8,
                                     antialias=antialias, interpolation=interpolation)
        d = (got.int() - exp.int()).abs()
        assert d.max() <= 1 and (d > 0).double().mean() <= 0.01, interpolation
        for b, (img, box) in enumerate(zip(imgs, boxes)):
            name = interpolation if interpolation != "per-sample" else layout.filter_name(codes[b])
            ref = TF.resized_crop(img, *box, list(out), interpolation=MODES[name], antialias=antialias)
            _assert_matches_torchvision(got[b], ref, name)


@pytest.mark.cuda
def test_gpu_loader_per_sample_filter_matches_cpu_loader():
    import torchdali as td

    from .test_checksums import _Mixed

    tf = T.Compose([T.RandomResizedCrop(24, interpolation=["bilinear", "bicubic", "nearest"]),
                    T.RandomHorizontalFlip()])
    kw = dict(batch_size=8, shuffle=True, seed=5, transforms=tf)
    gpu = td.DataLoader(_Mixed(), device="cuda", generator=torch.Generator().manual_seed(0), **kw)
    cpu = td.DataLoader(_Mixed(), device="cpu", generator=torch.Generator().manual_seed(0), **kw)
    try:
        for (gi, gt), (ci, ct) in zip(gpu, cpu):
            assert torch.equal(gt.cpu(), ct)
            d = (gi.cpu().int() - ci.int()).abs()
            assert d.max() <= 1 and (d > 0).double().mean() <= 0.01
    finally:
        gpu.close()
        cpu.close()
