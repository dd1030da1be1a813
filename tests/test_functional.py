"""torchdali.transforms.functional against torchvision.transforms.v2.functional (independent reference)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as TF

from torchdali import _rng
from torchdali import transforms as T
from torchdali.transforms import _geometry as G
from torchdali.transforms import functional as F
from torchdali.transforms._plan import apply_to_images

from ._helpers import (
    affine_warp_matrix,
    assert_close_uint8,
    assert_equal_but_rounding_ties,
    assert_warp_matches_torchvision,
    perspective_warp_coeffs,
    smooth_image as _img,
    warp_ties,
)

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
SIZES = [(37, 53), (64, 64), (97, 61)]


@pytest.mark.parametrize("h,w", SIZES)
@pytest.mark.parametrize("size,max_size", [([24, 32], None), ([150, 90], None), ([30], None), (40, 50)])
@pytest.mark.parametrize("antialias", [True, False])
def test_resize(h, w, size, max_size, antialias):
    img = _img(h, w)
    ours = F.resize(img, size, max_size=max_size, antialias=antialias)
    ref = TF.resize(img, size if isinstance(size, list) else [size], max_size=max_size, antialias=antialias)
    assert_close_uint8(ours, ref)


@pytest.mark.parametrize("box", [(5, 7, 20, 30), (0, 0, 37, 53), (-3, 10, 30, 50), (20, 40, 25, 20)])
def test_crop_is_exact_and_pads_outside(box):
    img = _img(37, 53)
    assert torch.equal(F.crop(img, *box), TF.crop(img, *box))


@pytest.mark.parametrize("h,w", SIZES)
@pytest.mark.parametrize("size", [[32, 32], [20, 45], [70, 70], 33])
def test_center_crop_is_exact(h, w, size):
    img = _img(h, w, seed=1)
    assert torch.equal(F.center_crop(img, size), TF.center_crop(img, size if isinstance(size, list) else [size]))


@pytest.mark.parametrize("h,w", SIZES)
@pytest.mark.parametrize("box,size", [((3, 4, 30, 25), [48, 48]), ((10, 0, 20, 40), [16, 24])])
def test_resized_crop(h, w, box, size):
    img = _img(h, w, seed=2)
    assert_close_uint8(F.resized_crop(img, *box, size), TF.resized_crop(img, *box, size, antialias=True))


def test_flips_are_exact():
    img = _img(31, 44)
    assert torch.equal(F.horizontal_flip(img), TF.horizontal_flip(img))
    assert torch.equal(F.vertical_flip(img), TF.vertical_flip(img))


def test_functionals_take_hwc_images():
    img = _img(30, 40)
    assert torch.equal(F.horizontal_flip(img.permute(1, 2, 0).contiguous()), TF.horizontal_flip(img))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("scale", [True, False])
def test_to_dtype(dtype, scale):
    img = _img(20, 30)
    ours = F.to_dtype(img, dtype, scale=scale)
    ref = TF.to_dtype(img, dtype, scale=scale)
    assert ours.dtype == dtype
    torch.testing.assert_close(ours, ref)


def test_to_dtype_uint8_is_identity():
    img = _img(20, 30)
    assert torch.equal(F.to_dtype(img, torch.uint8), img)


def test_normalize():
    img = TF.to_dtype(_img(25, 35), torch.float32, scale=True)
    torch.testing.assert_close(F.normalize(img, MEAN, STD), TF.normalize(img, MEAN, STD))
    with pytest.raises(TypeError, match="float"):
        F.normalize(_img(5, 5), MEAN, STD)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_class_params_replayed_by_functional_give_the_same_pixels(seed):
    """make_params draws the box; the functional with that box computes what the pipeline does."""
    img = _img(90, 70, seed)
    rrc = T.RandomResizedCrop((40, 30), scale=(0.3, 0.9))
    keys = _rng.sample_keys(seed, 0, np.arange(1))
    g = G.BatchGeometry.identity(np.array([[90, 70]]))
    p = rrc.make_params(g, _rng.uniform(keys, 0, rrc.n_uniforms))
    box = [int(p[k][0]) for k in ("top", "left", "height", "width")]
    ours = apply_to_images(T.Compose([rrc]), [img], seed=seed)[0]
    assert torch.equal(ours, F.resized_crop(img, *box, [40, 30]))


# --------------------------------------------------------------------------- #
# Program ops and erase: the same op on one image, exactly torchvision's (within 1 where noted)
# --------------------------------------------------------------------------- #

_PERSP = ([[0, 0], [52, 0], [52, 36], [0, 36]], [[3, 2], [49, 1], [50, 33], [1, 35]])
OP_CASES = [
    ("adjust_brightness", (1.35,), 0), ("adjust_brightness", (0.4,), 0),
    ("adjust_contrast", (0.55,), 0), ("adjust_contrast", (1.7,), 0),
    ("adjust_saturation", (0.3,), 1), ("adjust_saturation", (1.8,), 1),
    ("adjust_hue", (0.23,), 0), ("adjust_hue", (-0.41,), 0),
    ("adjust_sharpness", (0.2,), 1), ("adjust_sharpness", (2.5,), 1),
    ("autocontrast", (), 0), ("equalize", (), 0), ("invert", (), 0),
    ("posterize", (2,), 0), ("posterize", (7,), 0), ("solarize", (97,), 0),
    ("rgb_to_grayscale", (1,), 0), ("rgb_to_grayscale", (3,), 0),
    # None: equal but at rounding ties, which the CPU decides (Note [warps against torchvision])
    ("gaussian_blur", ([5, 3], [1.3, 0.6]), None), ("gaussian_blur", (7,), None),
    ("rotate", (31.7, TF.InterpolationMode.NEAREST), None), ("rotate", (-120.5, TF.InterpolationMode.BILINEAR), None),
    ("affine", (12.0, [4, -3], 1.15, [8.0, -4.0], TF.InterpolationMode.BILINEAR), None),
    ("affine", (-40.0, [0, 5], 0.8, 10.0, TF.InterpolationMode.NEAREST), None),
    ("perspective", _PERSP + (TF.InterpolationMode.BILINEAR,), None),
    ("perspective", _PERSP + (TF.InterpolationMode.NEAREST,), None),
]


def _warp_ties(name: str, args: tuple, h: int, w: int, center=None) -> torch.Tensor:
    """The ties (``warp_ties``) of torchvision's warp ``name`` with ``args`` on an ``h`` x ``w`` image."""
    if name == "rotate":
        return warp_ties(h, w, matrix=affine_warp_matrix(h, w, args[0], center=center, rotate=True))
    if name == "affine":
        return warp_ties(h, w, matrix=affine_warp_matrix(h, w, *args[:4], center=center))
    return warp_ties(h, w, coeffs=perspective_warp_coeffs(*args[:2]))


@pytest.mark.parametrize("name,args,tol", OP_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(OP_CASES)])
def test_program_op_functionals_match_torchvision(name, args, tol):
    img = _img(37, 53, seed=4)
    ours, ref = getattr(F, name)(img, *args), getattr(TF, name)(img, *args)
    assert ours.shape == ref.shape and ours.dtype == torch.uint8
    if name in ("rotate", "affine", "perspective"):  # exact but at ties
        assert tol is None
        nearest = args[-1] == TF.InterpolationMode.NEAREST
        assert_warp_matches_torchvision(ours, ref, nearest, _warp_ties(name, args, 37, 53) if nearest else None,
                                        what=f"{name}{args}")
        return
    if name == "gaussian_blur":  # oneDNN's summation order depends on the instruction set
        assert tol is None
        assert_equal_but_rounding_ties(ours, ref, what=f"{name}{args}")
        return
    diff = (ours.int() - ref.int()).abs()
    assert diff.max().item() <= tol
    # tol 1: the factor travels in float32 (a slot's precision), so torchvision's double
    # ``1 - factor`` can round the other way for a factor like 1.8 that float32 cannot hold
    assert (diff > 0).double().mean().item() < (0.1 if tol else 1e-9)


@pytest.mark.parametrize("fill", [None, 0, [200, 10, 90]])
def test_warp_functionals_fill_like_torchvision(fill):
    img = _img(37, 53, seed=5)
    for interp in (TF.InterpolationMode.NEAREST, TF.InterpolationMode.BILINEAR):
        nearest = interp == TF.InterpolationMode.NEAREST
        ours, theirs = (f.rotate(img, 50.0, interp, center=[10, 7], fill=fill) for f in (F, TF))
        ties = _warp_ties("rotate", (50.0,), 37, 53, center=[10, 7]) if nearest else None
        assert_warp_matches_torchvision(ours, theirs, nearest, ties, what=f"rotate {interp}")
        ours, theirs = (f.perspective(img, *_PERSP, interp, fill=fill) for f in (F, TF))
        ties = _warp_ties("perspective", _PERSP, 37, 53) if nearest else None
        assert_warp_matches_torchvision(ours, theirs, nearest, ties, what=f"perspective {interp}")


def test_erase_functional():
    img = _img(37, 53, seed=6)
    v = torch.tensor([10.7, 250.0, 3.0]).view(3, 1, 1)
    assert torch.equal(F.erase(img, 4, 6, 11, 20, v), TF.erase(img, 4, 6, 11, 20, v))
    x = TF.to_dtype(img, torch.float32, scale=True)
    assert torch.equal(F.erase(x, 4, 6, 11, 20, torch.tensor(-0.5)), TF.erase(x, 4, 6, 11, 20, torch.tensor(-0.5)))


def test_rotate_refuses_expand():
    with pytest.raises(ValueError, match="expand"):
        F.rotate(_img(10, 12), 30.0, expand=True)
