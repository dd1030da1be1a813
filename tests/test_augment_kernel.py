"""Tests of the augment program's slot kernel, image_stats, and the finish/erase epilogue.

* (a) ``augment_slot_reference`` vs torchvision.transforms.v2.functional (timm for
  SolarizeAdd), op by op, on random and smooth uint8 images of odd sizes;
* (b) the Triton kernels vs their references (interpreted on the CPU, tiny images,
  several ops per slot), batches of 0 and 1, strided inputs, input untouched;
* (c) ``fused_finish``/``finish_reference`` and kernel 1's erase vs plain torch;
* (d) ``cuda``: (a) and (b) natively on larger images.

Tolerances vs torchvision (``_check_tv``): exact for the ops whose float math is a
single rounding or integer arithmetic (invert, posterize, solarize, solarize_add,
equalize, grayscale, brightness, autocontrast). The blends (contrast, saturation,
sharpness), hue and gaussian_blur are within 1 on >= 99.9% of pixels and never more
than 2 apart, and exact on >= 99% (measured on the CPU, these images plus two
224-pixel ones: max 1, exact 99.9994% for gaussian_blur, 100% for the rest): torch
fuses ``x.add_(y, alpha=s)`` into an FMA in its vectorised CPU loops (the reference
does too) but may not in the scalar tail, and convolves with its own summation
order, so a value sitting on a rounding boundary can land one apart. The warps
(torchvision builds their grid with a bmm, whose rounding depends on the CPU's BLAS
kernel) go through ``assert_warp_matches_torchvision``: nearest exact except where the
source coordinate is a tie, bilinear within 1 on all but 0.1% of values (measured: exact
on 99.990% for affine, 99.9998% for perspective; Note [warps against torchvision] in
tests/_helpers.py). On CUDA, whose grid_sample blends with FMAs, bilinear warps take the
blends' bound.
"""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import torch

# Must precede the first `import triton` (the kernel module imports it lazily).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torchvision.transforms.v2.functional as TF  # noqa: E402
from torchvision.transforms.v2.functional._geometry import (  # noqa: E402
    _get_inverse_affine_matrix,
    _get_perspective_coeffs,
)

from csrc_triton import (  # noqa: E402
    NUM_PARAMS,
    augment_slot_reference,
    finish_reference,
    fused_augment_slot,
    fused_finish,
    fused_resized_crop,
    image_stats,
    image_stats_reference,
    layout,
    reference,
    resized_crop_reference,
)
from csrc_triton.augment import StatsNeeded  # noqa: E402
from tests._helpers import (  # noqa: E402
    assert_close_uint8,
    assert_warp_matches_torchvision,
    smooth_image,
    warp_ties,
)

HAS_TRITON = importlib.util.find_spec("triton") is not None
INTERPRET = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
needs_kernel_cpu = pytest.mark.skipif(not (HAS_TRITON and INTERPRET),
                                      reason="kernel on CPU needs triton and TRITON_INTERPRET=1")
DEVICES = [
    pytest.param("cpu", marks=needs_kernel_cpu),
    pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not HAS_TRITON, reason="needs triton")]),
]
NAN = float("nan")


def f32(v: float) -> float:
    """``v`` as the float32 the slot stores (torchvision then gets the same number)."""
    return float(np.float32(v))


def make_slot(rows: list[tuple]) -> torch.Tensor:
    """Slot ``[B, SLOT_WIDTH]`` from rows ``(op name, args[, interp[, fill]])``; fill None -> NaN."""
    s = torch.zeros(len(rows), layout.SLOT_WIDTH, dtype=torch.float32)
    for b, row in enumerate(rows):
        name, args = row[0], row[1]
        interp = row[2] if len(row) > 2 else layout.FILTER_NEAREST
        fill = row[3] if len(row) > 3 else (0, 0, 0)
        s[b, layout.SLOT_OP] = layout.op_code(name)
        for i, v in enumerate(args):
            s[b, layout.SLOT_M0 + i] = float(v)
        s[b, layout.SLOT_INTERP] = interp
        s[b, layout.SLOT_FILL0:layout.SLOT_FILL2 + 1] = torch.tensor((NAN,) * 3 if fill is None else fill)
    return s


def _images() -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [("random", torch.randint(0, 256, (3, 37, 45), generator=g, dtype=torch.uint8)),
            ("smooth", smooth_image(41, 53)),
            ("random-wide", torch.randint(0, 256, (3, 23, 131), generator=g, dtype=torch.uint8))]


def _timm_solarize_add(img: torch.Tensor, add: int, thresh: int) -> torch.Tensor:
    from PIL import Image
    from timm.data.auto_augment import solarize_add

    out = solarize_add(Image.fromarray(img.permute(1, 2, 0).numpy()), add, thresh=thresh)
    return torch.from_numpy(np.asarray(out).copy()).permute(2, 0, 1)


def _affine(angle: float, translate: tuple[float, float], scale: float, shear: tuple[float, float]) -> list[float]:
    return _get_inverse_affine_matrix([0.0, 0.0], angle, list(translate), scale, list(shear))


_AFFINES = [(30.0, (2.0, -3.0), 1.1, (0.0, 0.0)), (-17.3, (0.5, 1.5), 0.9, (12.0, -5.0)),
            (90.0, (0.0, 0.0), 1.0, (0.0, 0.0)), (0.0, (7.0, 0.0), 1.0, (0.0, 0.0))]
_PERSPECTIVES = [([[0, 0], [44, 0], [44, 36], [0, 36]], [[3, 2], [40, 5], [42, 33], [1, 30]]),
                 ([[0, 0], [10, 0], [10, 10], [0, 10]], [[1, 0], [12, 2], [9, 11], [0, 9]])]
_MODES = {layout.FILTER_NEAREST: TF.InterpolationMode.NEAREST, layout.FILTER_BILINEAR: TF.InterpolationMode.BILINEAR}


def tv_cases() -> list[tuple[str, tuple, object]]:
    """(group, slot row, torchvision function of a CHW uint8 image)."""
    cases: list[tuple[str, tuple, object]] = []
    for f in map(f32, (0.0, 0.3, 0.77, 1.0, 1.6)):
        cases += [("brightness", ("brightness", (f,)), lambda x, f=f: TF.adjust_brightness(x, f)),
                  ("contrast", ("contrast", (f,)), lambda x, f=f: TF.adjust_contrast(x, f)),
                  ("saturation", ("saturation", (f,)), lambda x, f=f: TF.adjust_saturation(x, f)),
                  ("sharpness", ("sharpness", (f,)), lambda x, f=f: TF.adjust_sharpness(x, f))]
    for h in map(f32, (-0.5, -0.23, 0.0, 0.1, 0.41, 0.5)):
        cases.append(("hue", ("hue", (h,)), lambda x, h=h: TF.adjust_hue(x, h)))
    cases += [("grayscale", ("grayscale", ()), lambda x: TF.rgb_to_grayscale(x, num_output_channels=3)),
              ("invert", ("invert", ()), TF.invert),
              ("autocontrast", ("autocontrast", ()), TF.autocontrast),
              ("equalize", ("equalize", ()), TF.equalize)]
    for perm in ((0, 1, 2), (2, 0, 1), (1, 2, 0), (2, 1, 0), (0, 2, 1)):
        cases.append(("permute_channels", ("permute_channels", perm),
                      lambda x, p=list(perm): TF.permute_channels(x, p)))
    for bits in (0, 1, 4, 7, 8):
        cases.append(("posterize", ("posterize", (bits,)), lambda x, b=bits: TF.posterize(x, b)))
    for t in (0.0, 64.0, 128.5, 255.0):
        cases.append(("solarize", ("solarize", (t,)), lambda x, t=t: TF.solarize(x, t)))
    for add, t in ((0, 128), (30, 128), (110, 256), (77, 13)):
        cases.append(("solarize_add", ("solarize_add", (add, t)), lambda x, a=add, t=t: _timm_solarize_add(x, a, t)))
    for (kx, ky), (sx, sy) in (((3, 3), (0.8, 0.8)), ((5, 5), (1.7, 1.7)), ((3, 7), (0.5, 2.3)), ((9, 1), (3.0, 1.0)),
                               ((23, 23), (4.0, 4.0))):
        sx, sy = f32(sx), f32(sy)
        cases.append(("gaussian_blur", ("gaussian_blur", (kx, ky, sx, sy)),
                      lambda x, k=[kx, ky], s=[sx, sy]: TF.gaussian_blur(x, k, s)))
    for interp, mode in _MODES.items():
        for fill in (None, (0, 0, 0), (128, 64, 255)):
            tv_fill = None if fill is None else list(fill)
            for a in _AFFINES:
                cases.append((f"affine-{mode.value}", ("affine", _affine(*a), interp, fill),
                              lambda x, a=a, m=mode, f=tv_fill: TF.affine(
                                  x, angle=a[0], translate=list(a[1]), scale=a[2], shear=list(a[3]),
                                  interpolation=m, fill=f)))
            for sp, ep in _PERSPECTIVES:
                co = _get_perspective_coeffs(sp, ep)
                cases.append((f"perspective-{mode.value}", ("perspective", co, interp, fill),
                              lambda x, co=co, m=mode, f=tv_fill: TF.perspective(
                                  x, None, None, interpolation=m, fill=f, coefficients=co)))
    return cases


_EXACT = {"brightness", "grayscale", "invert", "autocontrast", "equalize", "posterize", "solarize", "solarize_add",
          "permute_channels"}


def _ties(row: tuple, h: int, w: int) -> torch.Tensor | None:
    """A warp row's ties (``warp_ties``) on an ``h`` x ``w`` image; None for the other ops."""
    if row[0] == "affine":
        return warp_ties(h, w, matrix=row[1])
    if row[0] == "perspective":
        return warp_ties(h, w, coeffs=row[1])
    return None


def _check_tv(group: str, actual: torch.Tensor, expected: torch.Tensor, ties: torch.Tensor | None = None) -> None:
    nearest = group.endswith("-nearest")
    if group.startswith(("affine-", "perspective-")) and (nearest or not actual.is_cuda):
        # nearest on CUDA: ties also where torch's CUDA grid_sample unnormalises as
        # ((g + 1) * W - 1) / 2 and its CPU kernel (which we follow) as (g + 1) * (W / 2) - 0.5.
        # (Bilinear on CUDA: grid_sample's blend compiles to FMAs, the general bound below.)
        assert_warp_matches_torchvision(actual, expected, nearest=nearest, ties=ties, what=group)
        return
    if group in _EXACT:
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)
        return
    assert_close_uint8(actual, expected, max_off=2, frac_within_1=0.999)
    exact = (actual == expected).double().mean().item()
    assert exact >= 0.99, f"{group}: only {exact:.4f} of pixels exact"


_CASES = tv_cases()
_GROUPS = sorted({c[0] for c in _CASES})


@pytest.mark.parametrize("group", _GROUPS)
def test_reference_matches_torchvision(group: str) -> None:
    cases = [c for c in _CASES if c[0] == group]
    for _, img in _images():
        slot = make_slot([c[1] for c in cases])
        batch = img.expand(len(cases), -1, -1, -1)
        got = augment_slot_reference(batch, slot)
        for i, (_, row, fn) in enumerate(cases):
            expected = fn(img)
            _check_tv(group, got[i], expected, _ties(row, *img.shape[1:]))


def test_reference_rejects_bad_slots() -> None:
    img = torch.zeros(1, 3, 5, 6, dtype=torch.uint8)
    with pytest.raises(ValueError, match="unknown augment op"):
        augment_slot_reference(img, make_slot([("identity", ())]).index_fill_(1, torch.tensor([0]), 99.0))
    with pytest.raises(ValueError, match="kernel_x"):
        augment_slot_reference(img, make_slot([("gaussian_blur", (4, 3, 1.0, 1.0))]))
    with pytest.raises(ValueError, match="kernel_y"):
        augment_slot_reference(img, make_slot([("gaussian_blur", (3, 11, 1.0, 1.0))]))
    with pytest.raises(ValueError, match="permutation of 0, 1, 2"):
        augment_slot_reference(img, make_slot([("permute_channels", (0, 0, 2))]))
    with pytest.raises(ValueError, match="SLOT_WIDTH"):
        augment_slot_reference(img, torch.zeros(1, 3))
    with pytest.raises(TypeError, match="uint8"):
        augment_slot_reference(img.float(), make_slot([("identity", ())]))


# --------------------------------------------------------------------------- #
# (b) kernel vs reference
# --------------------------------------------------------------------------- #

# Mixed slots: every op (and both samplers, with and without fill) appears with
# other ops in the same launch.
_SLOTS = [
    [("brightness", (1.37,)), ("contrast", (0.61,)), ("saturation", (1.8,)), ("hue", (-0.27,))],
    [("grayscale", ()), ("invert", ()), ("posterize", (3,)), ("solarize", (100.5,))],
    [("solarize_add", (60, 128)), ("sharpness", (1.9,)), ("autocontrast", ()), ("equalize", ())],
    [("permute_channels", (2, 0, 1)), ("permute_channels", (1, 2, 0)), ("permute_channels", (0, 1, 2)),
     ("hue", (0.04,))],
    [("gaussian_blur", (3, 5, 0.9, 1.6)), ("identity", ()),
     ("affine", _affine(25.0, (1.0, -2.0), 1.2, (8.0, 0.0)), layout.FILTER_BILINEAR, (128, 64, 255)),
     ("perspective", _get_perspective_coeffs([[0, 0], [12, 0], [12, 8], [0, 8]], [[1, 1], [11, 0], [12, 7], [0, 8]]),
      layout.FILTER_NEAREST, None)],
    [("affine", _affine(-40.0, (0.0, 0.0), 0.8, (0.0, 10.0)), layout.FILTER_NEAREST, (10, 20, 30)),
     ("affine", _affine(13.0, (2.0, 0.0), 1.0, (0.0, 0.0)), layout.FILTER_BILINEAR, None),
     ("perspective", _get_perspective_coeffs([[0, 0], [12, 0], [12, 8], [0, 8]], [[2, 0], [12, 1], [10, 8], [1, 6]]),
      layout.FILTER_BILINEAR, (0, 0, 0)),
     ("sharpness", (0.2,))],
]


def _batch(B: int, H: int, W: int, seed: int, device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    imgs = torch.randint(0, 256, (B, 3, H, W), generator=g, dtype=torch.uint8)
    if B > 1:
        imgs[1] = smooth_image(H, W, seed)  # smooth content: blends and warps round differently
        imgs[-1, 2] = 77  # a flat channel: autocontrast keeps it, equalize maps it to itself
    return imgs.to(device)


def _check_kernel(images: torch.Tensor, slot: torch.Tensor, **kwargs) -> torch.Tensor:
    before = images.clone()
    got = fused_augment_slot(images, slot, **kwargs)
    expected = augment_slot_reference(images, slot)
    assert torch.equal(images, before), "input modified"
    assert got.shape == images.shape and got.dtype == torch.uint8
    diff = (got.int() - expected.int()).abs()
    if images.device.type == "cpu":
        # interpreted: the same float32 operations in the same order -> bitwise equal
        assert diff.max().item() == 0 if diff.numel() else True, f"max diff {diff.max().item()} per sample " \
            f"{diff.flatten(1).amax(1).tolist()} (ops {slot[:, 0].tolist()})"
    else:
        # compiled: tl.fma is a true FMA, the reference's a float64 emulation of one
        assert_close_uint8(got, expected, max_off=1, frac_within_1=1.0)
        assert (diff == 0).double().mean().item() >= 0.9999
    return got


@needs_kernel_cpu
@pytest.mark.parametrize("k", range(len(_SLOTS)))
def test_kernel_matches_reference(k: int) -> None:
    rows = _SLOTS[k]
    images = _batch(len(rows), 9, 13, seed=k, device="cpu")
    _check_kernel(images, make_slot(rows))


@needs_kernel_cpu
def test_kernel_strided_input_out_and_ops_host() -> None:
    rows = _SLOTS[2]
    base = _batch(len(rows), 11, 7, seed=9, device="cpu")
    images = base.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)  # channels-last strides
    slot = make_slot(rows)
    out = torch.full((len(rows), 3, 7, 11), 3, dtype=torch.uint8).transpose(2, 3)
    got = _check_kernel(images, slot, out=out, ops_host=slot[:, 0].numpy())
    assert got.data_ptr() == out.data_ptr()
    # ops_host without stat ops: no statistics are computed, the result is the same
    slot = make_slot(_SLOTS[1])
    _check_kernel(images, slot, ops_host=np.asarray([layout.op_code(r[0]) for r in _SLOTS[1]]))


@needs_kernel_cpu
@pytest.mark.parametrize("shape", [(0, 3, 5, 6), (1, 3, 1, 1), (1, 3, 2, 9), (1, 3, 3, 4)])
def test_kernel_small_batches(shape: tuple[int, int, int, int]) -> None:
    images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    for rows in ([("sharpness", (1.5,))], [("equalize", ())], [("contrast", (0.4,))],
                 [("affine", _affine(10.0, (0.0, 0.0), 1.0, (0.0, 0.0)), layout.FILTER_BILINEAR, (9, 9, 9))]):
        slot = make_slot(rows * shape[0])
        got = _check_kernel(images, slot)
        assert got.shape == shape


@needs_kernel_cpu
def test_image_stats_matches_reference() -> None:
    images = _batch(3, 10, 19, seed=4, device="cpu")[:, :, 1:, ::2]  # strided view
    for needed in (StatsNeeded(True, True, True, False), StatsNeeded(False, True, False, False),
                   StatsNeeded(True, False, False, False)):
        assert torch.equal(image_stats(images, needed), image_stats_reference(images, needed)), needed


def test_kernel_launcher_rejects_bad_inputs() -> None:
    images = torch.zeros(2, 3, 5, 6, dtype=torch.uint8)
    with pytest.raises(ValueError, match="alias"):
        fused_augment_slot(images, make_slot([("invert", ())] * 2), out=images)
    with pytest.raises(ValueError, match="SLOT_WIDTH"):
        fused_augment_slot(images, torch.zeros(3, layout.SLOT_WIDTH))


# --------------------------------------------------------------------------- #
# (c) finish and erase
# --------------------------------------------------------------------------- #

_SCALE = [1 / (0.229 * 255), 1 / (0.224 * 255), 1 / (0.225 * 255)]
_BIAS = [-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225]


def _erase_params(B: int, boxes: list[tuple[int, int, int, int, int]]) -> torch.Tensor:
    p = torch.zeros(B, NUM_PARAMS)
    for b, (y0, y1, x0, x1, seed) in enumerate(boxes):
        p[b, [layout.ERASE_Y0, layout.ERASE_Y1, layout.ERASE_X0, layout.ERASE_X1, layout.ERASE_SEED]] = \
            torch.tensor([y0, y1, x0, x1, seed], dtype=torch.float32)
    return p


def _plain_finish(images: torch.Tensor, params: torch.Tensor, value: list[float] | None, dtype: torch.dtype):
    """Independent: normalise with broadcasting, erase by slicing, cast."""
    o = images.float() * torch.tensor(_SCALE).view(1, 3, 1, 1) + torch.tensor(_BIAS).view(1, 3, 1, 1)
    if value is not None:
        for b in range(images.shape[0]):
            y0, y1, x0, x1 = (int(v) for v in params[b, layout.ERASE_Y0:layout.ERASE_X1 + 1])
            if y1 > y0 and x1 > x0:
                o[b, :, y0:y1, x0:x1] = torch.tensor(value).view(3, 1, 1)
    if dtype == torch.uint8:
        return torch.floor(o.clamp(0, 255) + 0.5).to(torch.uint8)
    return o.to(dtype)


_FINISH_TOL = {torch.uint8: 1.0, torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 3e-2}


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_finish_reference_matches_plain_torch(dtype: torch.dtype, channels_last: bool) -> None:
    images = _batch(3, 9, 13, seed=1, device="cpu")
    params = _erase_params(3, [(2, 5, 3, 11, 0), (4, 4, 0, 13, 0), (0, 9, 12, 20, 0)])
    value = [0.5, -1.0, 2.0] if dtype != torch.uint8 else [9.0, 200.0, 300.0]
    got = finish_reference(images, params, _SCALE, _BIAS, out_dtype=dtype, channels_last=channels_last,
                           erase_value=value)
    expected = _plain_finish(images, params, value, dtype)
    assert got.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=_FINISH_TOL[dtype])


@needs_kernel_cpu
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.bfloat16])
def test_finish_kernel_matches_reference(dtype: torch.dtype) -> None:
    images = _batch(3, 9, 13, seed=2, device="cpu")[:, :, :, 1:]  # strided input
    params = _erase_params(3, [(2, 5, 3, 11, 5), (4, 4, 0, 13, 6), (0, 9, 10, 20, 7)])
    for kwargs in ({}, {"erase_value": [0.25, 0.5, 0.75]}, {"erase_random": True}):
        for cl in (False, True):
            got = fused_finish(images, params, _SCALE, _BIAS, out_dtype=dtype, channels_last=cl, **kwargs)
            expected = finish_reference(images, params, _SCALE, _BIAS, out_dtype=dtype, channels_last=cl, **kwargs)
            # bfloat16: one ulp (2**-6 at |x| in [2, 4)) for a float32 value on a rounding boundary
            tol = 0 if dtype == torch.uint8 else 1e-5 if dtype == torch.float32 else 2 ** -6
            torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=tol)
    assert fused_finish(images[:0], params[:0], _SCALE, _BIAS, out_dtype=dtype).shape == (0, 3, 9, 12)


def test_erase_noise_is_standard_normal_and_keyed() -> None:
    n = reference.philox_normal(1234, torch.arange(200_000))
    assert abs(n.mean().item()) < 0.01 and abs(n.std().item() - 1.0) < 0.01
    # normal tails: about 4.55% beyond 2 sigma
    assert abs((n.abs() > 2).double().mean().item() - 0.0455) < 0.003
    m = reference.philox_normal(1235, torch.arange(200_000))
    assert abs(torch.corrcoef(torch.stack([n, m]))[0, 1].item()) < 0.01
    assert torch.equal(n[:100], reference.philox_normal(1234, torch.arange(100)))


@needs_kernel_cpu
def test_erase_noise_equals_triton_randn() -> None:
    """Our Philox stage draws exactly what Triton's own tl.randn draws."""
    import triton
    import triton.language as tl

    @triton.jit
    def randn_kernel(out_ptr, seed, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(out_ptr + offs, tl.randn(seed, offs))

    out = torch.empty(256)
    randn_kernel[(1,)](out, 77, N=256)
    torch.testing.assert_close(reference.philox_normal(77, torch.arange(256)), out, rtol=0, atol=1e-5)


def _crop_inputs(device: str):
    g = torch.Generator().manual_seed(8)
    imgs = [torch.randint(0, 256, (12, 15, 3), generator=g, dtype=torch.uint8),
            torch.randint(0, 256, (9, 11, 3), generator=g, dtype=torch.uint8)]
    data = torch.cat([i.reshape(-1) for i in imgs])
    offsets = torch.tensor([0, imgs[0].numel()])
    shapes = torch.tensor([list(i.shape) for i in imgs])
    params = _erase_params(2, [(1, 4, 2, 6, 3), (0, 7, 5, 7, 4)])
    for b, (H, W, _) in enumerate(shapes.tolist()):
        geo = [0.0, 0.0, H / 7, W / 8, 0, H, 0, W, 0, 7, 0, 8]
        params[b, :12] = torch.tensor(geo)
    return data.to(device), offsets.to(device), shapes.to(device), params.to(device)


def test_resized_crop_reference_erase() -> None:
    data, offsets, shapes, params = _crop_inputs("cpu")
    plain = resized_crop_reference(data, offsets, shapes, params, (7, 8), _SCALE, _BIAS)
    got = resized_crop_reference(data, offsets, shapes, params, (7, 8), _SCALE, _BIAS, erase_value=[1.0, 2.0, 3.0])
    expected = plain.clone()
    expected[0, :, 1:4, 2:6] = torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1)
    expected[1, :, 0:7, 5:7] = torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    noisy = resized_crop_reference(data, offsets, shapes, params, (7, 8), _SCALE, _BIAS, erase_random=True)
    c = torch.arange(3).view(3, 1, 1)
    idx = (c * 7 + torch.arange(1, 4).view(1, 3, 1)) * 8 + torch.arange(2, 6).view(1, 1, 4)
    torch.testing.assert_close(noisy[0, :, 1:4, 2:6], reference.philox_normal(3, idx), rtol=0, atol=0)
    torch.testing.assert_close(noisy[0, :, 4:], plain[0, :, 4:], rtol=0, atol=0)


@needs_kernel_cpu
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_resized_crop_kernel_erase(dtype: torch.dtype) -> None:
    data, offsets, shapes, params = _crop_inputs("cpu")
    for kwargs in ({"erase_value": [-1.0, 0.0, 300.0]}, {"erase_random": True}):
        got = fused_resized_crop(data, offsets, shapes, params, (7, 8), _SCALE, _BIAS, out_dtype=dtype, **kwargs)
        expected = resized_crop_reference(data, offsets, shapes, params, (7, 8), _SCALE, _BIAS, out_dtype=dtype,
                                          **kwargs)
        torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=1.0 if dtype == torch.uint8 else 1e-5)
    with pytest.raises(ValueError, match="not both"):
        resized_crop_reference(data, offsets, shapes, params, (7, 8), _SCALE, _BIAS, erase_value=[0, 0, 0],
                               erase_random=True)


# --------------------------------------------------------------------------- #
# (d) natively on a GPU, larger images
# --------------------------------------------------------------------------- #


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_TRITON, reason="needs triton")
def test_cuda_reference_matches_torchvision() -> None:
    img = smooth_image(227, 301).cuda()
    rnd = torch.randint(0, 256, (3, 227, 301), dtype=torch.uint8, device="cuda")
    for x in (img, rnd):
        for group in _GROUPS:
            cases = [c for c in _CASES if c[0] == group]
            if group == "solarize_add":
                continue  # timm's PIL version runs on the CPU; covered by the CPU test
            got = augment_slot_reference(x.expand(len(cases), -1, -1, -1), make_slot([c[1] for c in cases]).cuda())
            for i, (_, row, fn) in enumerate(cases):
                _check_tv(group, got[i], fn(x), _ties(row, *x.shape[1:]))


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_TRITON, reason="needs triton")
def test_cuda_kernel_matches_reference() -> None:
    for k, rows in enumerate(_SLOTS):
        images = _batch(len(rows), 224, 227, seed=k, device="cuda")
        slot = make_slot(rows).cuda()
        _check_kernel(images, slot)
        _check_kernel(images, slot, ops_host=slot[:, 0].cpu().numpy())
    images = _batch(8, 224, 224, seed=11, device="cuda")
    params = _erase_params(8, [(10 * b, 10 * b + 50, 3 * b, 90, b) for b in range(8)]).cuda()
    for dtype in (torch.uint8, torch.float32, torch.bfloat16):
        for kwargs in ({"erase_value": [0.0, 0.5, 1.0]}, {"erase_random": True}):
            got = fused_finish(images, params, _SCALE, _BIAS, out_dtype=dtype, channels_last=True, **kwargs)
            expected = finish_reference(images, params, _SCALE, _BIAS, out_dtype=dtype, channels_last=True, **kwargs)
            tol = 1.0 if dtype == torch.uint8 else 1e-4 if dtype == torch.float32 else 3e-2
            torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=tol)
