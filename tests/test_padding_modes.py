"""Padding with a fill or a padding mode (edge, reflect, symmetric): the kernel's fold box.

A pipeline that pads with more than zeros compiles kernel 1 with a ``PAD_MODE``: the
clamp region reaches past the image to the padded extent and every tap outside the
fold box (the image being padded) is folded back into it, or reads the fill
(``csrc_triton/layout.py``). Tested here:

* ``functional.pad``, ``Pad`` and ``RandomCrop`` against torchvision.transforms.v2 for
  the same drawn positions: exact without a resize, within 1 after one (torchvision
  resamples the padded image, and so does the kernel now);
* the kernel (interpreted on the CPU, natively in the ``cuda`` twins) against its
  reference: exact without a resize, the kernel tests' tolerance with one; planar
  YCbCr samples through the same fold;
* what one fold box per axis and one mode per pipeline cannot say, refused by name;
* zero padding still takes the path it took before (``PAD_NONE``, no new kernel variant).
"""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torchvision.transforms.v2 as v2  # noqa: E402
import torchvision.transforms.v2.functional as TF  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

import torchdali as td  # noqa: E402
from csrc_triton import fused_resized_crop, layout, reference, resized_crop_reference  # noqa: E402
from torchdali import _rng  # noqa: E402
from torchdali import transforms as T  # noqa: E402
from torchdali.transforms import _execute  # noqa: E402
from torchdali.transforms import _geometry as G  # noqa: E402
from torchdali.transforms import functional as F  # noqa: E402
from torchdali.transforms._plan import apply_to_images, pack_images  # noqa: E402

from ._helpers import assert_close_uint8, drawn_params, kernel_devices, run_plan, smooth_image  # noqa: E402
from .test_padding import _fits  # noqa: E402
from ._ycbcr import pack_planar, random_planes  # noqa: E402

DEVICES = kernel_devices()
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
#: (padding_mode, fill) of every mode, constant with a per-channel and a scalar fill
MODES = [("constant", (10, 200, 30)), ("constant", 7), ("edge", 0), ("reflect", 0), ("symmetric", 0)]
MODE_IDS = ["constant3", "constant1", "edge", "reflect", "symmetric"]


def _close(got: torch.Tensor, exp: torch.Tensor) -> None:
    """Kernel vs reference after a resize: float32 sums in another order may round a .5 tie
    the other way (the kernel tests' tolerance: 1, on at most 1% of the values)."""
    assert got.shape == exp.shape and got.dtype == exp.dtype
    diff = (got.double() - exp.double()).abs()
    assert diff.max().item() <= 1, diff.max().item()
    assert (diff != 0).double().mean().item() <= 0.01


# -- torchvision parity, one image at a time ------------------------------------------------------

@pytest.mark.parametrize("mode,fill", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("padding", [3, [1, 2], [1, 2, 3, 4], [0, 5, 0, 0], [-2, 3, 1, -1]])
def test_functional_pad_matches_torchvision(mode, fill, padding):
    img = smooth_image(9, 11)
    assert torch.equal(F.pad(img, padding, fill=fill, padding_mode=mode),
                       TF.pad(img, padding, fill=fill, padding_mode=mode))
    gray = img[:1]
    assert torch.equal(F.pad(gray, padding, fill=fill, padding_mode=mode)[0],
                       TF.pad(gray, padding, fill=fill if isinstance(fill, int) else fill[0], padding_mode=mode)[0])


@pytest.mark.parametrize("mode,fill", MODES, ids=MODE_IDS)
def test_pad_class_and_flips_match_torchvision(mode, fill):
    imgs = [smooth_image(h, w, seed=h) for h, w in [(9, 11), (13, 7), (6, 6)]]
    pipe = [T.Pad([3, 1, 5, 2], fill=fill, padding_mode=mode), T.RandomHorizontalFlip(p=1.0),
            T.RandomVerticalFlip(p=1.0)]
    tv = v2.Compose([v2.Pad([3, 1, 5, 2], fill=fill, padding_mode=mode), v2.RandomHorizontalFlip(p=1.0),
                     v2.RandomVerticalFlip(p=1.0)])
    for ours, img in zip(apply_to_images(T.Compose(pipe), imgs), imgs):
        assert torch.equal(ours, tv(img))
    # a flip before the padding: the fold box is in source coordinates, the mirror still right
    pipe = [T.RandomHorizontalFlip(p=1.0), T.Pad([4, 0, 1, 2], fill=fill, padding_mode=mode)]
    tv = v2.Compose([v2.RandomHorizontalFlip(p=1.0), v2.Pad([4, 0, 1, 2], fill=fill, padding_mode=mode)])
    for ours, img in zip(apply_to_images(T.Compose(pipe), imgs), imgs):
        assert torch.equal(ours, tv(img))


@pytest.mark.parametrize("mode,fill", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "nearest"])
def test_resize_after_padding_resamples_the_padded_image(mode, fill, interpolation):
    """torchvision resizes the padded image, blending the padding into the border pixels;
    the clamp region now spans the padded extent, so the kernel does the same."""
    imgs = [smooth_image(h, w, seed=h) for h, w in [(20, 30), (33, 21)]]
    mode_v2 = getattr(v2.InterpolationMode, interpolation.upper())
    pipe = [T.Pad([3, 1, 5, 2], fill=fill, padding_mode=mode), T.Resize((24, 28), interpolation=mode_v2)]
    tv = v2.Compose([v2.Pad([3, 1, 5, 2], fill=fill, padding_mode=mode), v2.Resize((24, 28), interpolation=mode_v2)])
    for ours, img in zip(apply_to_images(T.Compose(pipe), imgs), imgs):
        assert_close_uint8(ours, tv(img), max_off=1, frac_within_1=1.0)
    # and a crop of the padded image (CenterCrop reaching into the padding) before the resize
    pipe = [T.Pad(4, fill=fill, padding_mode=mode), T.CenterCrop((20, 26)), T.Resize((15, 17))]
    tv = v2.Compose([v2.Pad(4, fill=fill, padding_mode=mode), v2.CenterCrop((20, 26)), v2.Resize((15, 17))])
    for ours, img in zip(apply_to_images(T.Compose(pipe), imgs[:1]), imgs[:1]):
        assert_close_uint8(ours, tv(img), max_off=1, frac_within_1=1.0)


@pytest.mark.parametrize("mode,fill", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("kwargs,size", [
    (dict(padding=4), (32, 32)),
    (dict(padding=(1, 2, 3, 4)), (30, 36)),
    (dict(pad_if_needed=True), (40, 36)),
    (dict(padding=[-2, 3, 1, -1]), (30, 30)),
])
def test_random_crop_with_fill_and_modes_matches_torchvision(mode, fill, kwargs, size):
    tv_crop = v2.RandomCrop(size, fill=fill, padding_mode=mode, **kwargs)
    sizes = [s for s in [(32, 32), (28, 33), (37, 30), (34, 38), (29, 29)] if _fits(tv_crop, s)]
    assert len(sizes) >= 2
    imgs = [smooth_image(h, w, seed=i) for i, (h, w) in enumerate(sizes)]
    pipe = T.Compose([T.RandomCrop(size, fill=fill, padding_mode=mode, **kwargs), T.RandomHorizontalFlip()])
    plan = T.compile_transforms(pipe)
    assert plan.pad_mode == mode
    outs = apply_to_images(pipe, imgs, seed=4)
    drawn = drawn_params(plan, np.array(sizes), _rng.sample_keys(4, 0, np.arange(len(imgs))))
    for i, img in enumerate(imgs):
        params = tv_crop.make_params([img])
        pad_left, pad_top = params["padding"][0], params["padding"][1]  # (left, top, right, bottom)
        params.update(top=int(drawn[0]["top"][i]) + pad_top, left=int(drawn[0]["left"][i]) + pad_left,
                      needs_crop=True)
        ref = tv_crop.transform(img, params)
        if drawn[1]["flip"][i]:
            ref = TF.horizontal_flip(ref)
        assert torch.equal(outs[i], ref), i


def test_cifar_recipe_with_reflect_padding_through_the_cpu_loader():
    """The one-line swap with the reflect-padded CIFAR recipe: torchvision's objects, unchanged."""
    g = torch.Generator().manual_seed(7)
    images = [torch.randint(0, 256, (32, 32, 3), dtype=torch.uint8, generator=g).numpy() for _ in range(10)]
    ds = [(im, i) for i, im in enumerate(images)]
    tv = v2.Compose([v2.RandomCrop(32, padding=4, padding_mode="reflect"), v2.RandomHorizontalFlip(),
                     v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    loader = td.DataLoader(ds, batch_size=4, transforms=tv, device="cpu", seed=3)
    out = torch.cat([b for b, _ in loader])
    plan = loader.plan
    drawn = drawn_params(plan, np.array([[32, 32]] * 10), _rng.sample_keys(loader._effective_seed(), 0, np.arange(10)))
    for i, im in enumerate(images):
        ref = TF.pad(torch.from_numpy(im).permute(2, 0, 1), [4], padding_mode="reflect")
        ref = TF.crop(ref, int(drawn[0]["top"][i]) + 4, int(drawn[0]["left"][i]) + 4, 32, 32)
        if drawn[1]["flip"][i]:
            ref = TF.horizontal_flip(ref)
        ref = TF.normalize(TF.to_dtype(ref, torch.float32, scale=True), MEAN, STD)
        torch.testing.assert_close(out[i], ref, rtol=0, atol=2e-6)


def test_a_fill_given_on_a_float_image_is_a_value_of_that_image():
    img = smooth_image(8, 10)
    pipe = [T.ToDtype(torch.float32, scale=True), T.Pad(2, fill=0.25), T.Normalize(MEAN, STD)]
    tv = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Pad(2, fill=0.25), v2.Normalize(MEAN, STD)])
    torch.testing.assert_close(apply_to_images(T.Compose(pipe), [img])[0], tv(img), rtol=0, atol=2e-6)


def test_fills_are_read_as_torchvision_reads_them():
    img = smooth_image(6, 7)
    # a dict: the image's entry, else "others"; a defaultdict's default is never looked at
    from collections import defaultdict

    for fill, expected in (({tv_tensors.Image: (1, 2, 3), "others": 9}, (1, 2, 3)), ({"others": 9}, (9, 9, 9)),
                           (defaultdict(lambda: (5, 5, 5), {tv_tensors.Mask: 0}), (0, 0, 0)), (None, (0, 0, 0)),
                           (12.7, (12, 12, 12)), ([250.9], (250, 250, 250))):
        out = T.Pad(1, fill=fill)(img)
        assert out[:, 0, 0].tolist() == list(expected), fill
        assert torch.equal(out, v2.Pad(1, fill=fill)(tv_tensors.Image(img)).as_subclass(torch.Tensor))


def test_compositions_one_fold_box_can_say():
    imgs = [smooth_image(h, w, seed=h) for h, w in [(12, 15), (9, 14)]]
    cases = [
        ([T.Pad(2, padding_mode="edge"), T.Pad([1, 3], padding_mode="edge")],
         v2.Compose([v2.Pad(2, padding_mode="edge"), v2.Pad([1, 3], padding_mode="edge")])),
        ([T.Pad(2, fill=50), T.CenterCrop((10, 12)), T.Pad(3, fill=50)],
         v2.Compose([v2.Pad(2, fill=50), v2.CenterCrop((10, 12)), v2.Pad(3, fill=50)])),
        # the second reflect pad mirrors a crop that lies inside the image: a fold box of its own
        ([T.Pad(3, padding_mode="reflect"), T.CenterCrop(6), T.Pad(2, padding_mode="reflect")],
         v2.Compose([v2.Pad(3, padding_mode="reflect"), v2.CenterCrop(6), v2.Pad(2, padding_mode="reflect")])),
        # edge padding after a crop that cut the image on one side and reached the padding on the other
        ([T.Pad([4, 0, 0, 0], padding_mode="edge"), T.Pad([-6, 0, 0, 0], padding_mode="edge"),
          T.Pad(3, padding_mode="edge")],
         v2.Compose([v2.Pad([4, 0, 0, 0], padding_mode="edge"), v2.Pad([-6, 0, 0, 0], padding_mode="edge"),
                     v2.Pad(3, padding_mode="edge")])),
        # zero padding after a mode: the valid window, as before
        ([T.Pad(2, padding_mode="symmetric"), T.CenterCrop(20)],
         v2.Compose([v2.Pad(2, padding_mode="symmetric"), v2.CenterCrop(20)])),
    ]
    for pipe, tv in cases:
        for ours, img in zip(apply_to_images(T.Compose(pipe), imgs), imgs):
            assert torch.equal(ours, tv(img)), pipe


# -- the kernel against its reference ------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode,fill", MODES, ids=MODE_IDS)
def test_kernel_matches_reference_without_a_resize(device, mode, fill):
    imgs = [smooth_image(h, w, seed=h) for h, w in [(7, 9), (5, 11), (9, 6)]]
    imgs[1] = imgs[1][:1]  # a grayscale sample
    pipe = [T.Pad([3, 1, 5, 2], fill=fill, padding_mode=mode), T.RandomHorizontalFlip(), T.CenterCrop((8, 12)),
            T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)]
    plan = T.compile_transforms(pipe)
    got = run_plan(plan, imgs, device, _execute.KERNEL, seed=2)
    exp = run_plan(plan, imgs, "cpu", _execute.REFERENCE, seed=2)
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode,fill", MODES, ids=MODE_IDS)
def test_kernel_matches_reference_with_a_resize_and_variable_sizes(device, mode, fill):
    imgs = [smooth_image(h, w, seed=h) for h, w in [(11, 9), (7, 12), (10, 10)]]
    pipe = [T.RandomCrop(9, padding=3, fill=fill, padding_mode=mode), T.Resize(7, interpolation="bicubic",
                                                                              max_size=9)]
    plan = T.compile_transforms(pipe)
    assert plan.out_size is None  # each sample at its own size: the placement path
    got = run_plan(plan, imgs, device, _execute.KERNEL, seed=1)
    exp = run_plan(plan, imgs, "cpu", _execute.REFERENCE, seed=1)
    for a, b in zip(got, exp):
        _close(a, b)
    pipe = [T.Pad([2, 3], fill=fill, padding_mode=mode), T.Resize((6, 13)), T.RandomVerticalFlip(p=1.0)]
    plan = T.compile_transforms(pipe)
    got = run_plan(plan, imgs, device, _execute.KERNEL)
    exp = run_plan(plan, imgs, "cpu", _execute.REFERENCE)
    for a, b in zip(got, exp):
        _close(a, b)


def _fold_params(sizes, pads) -> torch.Tensor:
    """Parameter rows of padding ``pads`` (left, top, right, bottom) around images of ``sizes``."""
    g = G.BatchGeometry.identity(np.asarray(sizes))
    G.pad(g, *pads, mode="reflect")
    return g.to_params()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
def test_kernel_folds_planar_ycbcr_samples_like_their_rgb(device, mode):
    """The fold is applied to the tap index before either loader: a planar sample padded
    equals its libjpeg RGB image padded."""
    g = torch.Generator().manual_seed(5)
    specs = [(7, 9, layout.S_420), (6, 5, layout.S_444), (5, 8, layout.S_GRAY), (8, 7, layout.S_422)]
    samples = [(random_planes(H, W, S, g), H, W, S) for H, W, S in specs]
    data, offsets, shapes = pack_planar(samples)
    params = _fold_params([(H, W) for H, W, _ in specs], (2, 3, 4, 1))
    kw = dict(out_dtype=torch.uint8, pad_mode=mode, fill=[3, 100, 250] if mode == "constant" else None)
    got = fused_resized_crop(data.to(device), offsets.to(device), shapes.to(device), params.to(device), (12, 15),
                             [1.0] * 3, [0.0] * 3, source="ycbcr", **kw).cpu()
    rgb = [reference.ycbcr_planes_to_rgb(data, int(o), H, W, S) for o, (H, W, S) in zip(offsets.tolist(), specs)]
    d2, o2, s2 = pack_images(rgb)
    # each sample is padded within the (12, 15) grid's top left corner; compare that part
    exp = resized_crop_reference(d2, o2, s2, params, (12, 15), [1.0] * 3, [0.0] * 3, **kw)
    assert torch.equal(got, exp)
    for b, (H, W, _) in enumerate(specs):
        tv = TF.pad(rgb[b].permute(2, 0, 1), [2, 3, 4, 1], fill=[3, 100, 250] if mode == "constant" else 0,
                    padding_mode=mode)
        assert torch.equal(exp[b, :, :H + 4, :W + 6], tv)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_keeps_every_read_inside_the_image(device):
    """Garbage fold boxes and regions (NaN, huge, inverted) give some pixels, never a read outside."""
    img = smooth_image(5, 6).permute(1, 2, 0).contiguous()
    data, offsets, shapes = pack_images([img] * 4)
    params = _fold_params([(5, 6)] * 4, (2, 2, 2, 2))
    params[0, layout.FOLD_Y0], params[0, layout.FOLD_Y1] = -50.0, 1e9
    params[1, layout.FOLD_X0], params[1, layout.FOLD_X1] = 4.0, 2.0  # empty
    params[2, layout.LO_X], params[2, layout.HI_X] = -1e12, 1e12
    params[3, layout.FOLD_Y0] = 99.0
    for mode in ("constant", "edge", "reflect", "symmetric"):
        out = fused_resized_crop(data.to(device), offsets.to(device), shapes.to(device), params.to(device), (9, 10),
                                 [1.0] * 3, [0.0] * 3, out_dtype=torch.uint8, pad_mode=mode)
        assert out.shape == (4, 3, 9, 10)
    params[0, layout.FOLD_Y0] = float("nan")
    if device == "cpu":
        with pytest.raises(ValueError, match="non-finite"):
            fused_resized_crop(data, offsets, shapes, params, (9, 10), [1.0] * 3, [0.0] * 3, pad_mode="edge")
    params[0, layout.FOLD_Y0] = 0.5
    with pytest.raises(ValueError, match="fold box"):
        resized_crop_reference(data, offsets, shapes, params, (9, 10), [1.0] * 3, [0.0] * 3, pad_mode="edge")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_kernel_batches_of_zero_and_one_leave_the_input_alone(device, mode):
    fill = [9, 8, 7] if mode == "constant" else None
    empty = fused_resized_crop(torch.zeros(0, dtype=torch.uint8, device=device),
                               torch.zeros(0, dtype=torch.int64, device=device),
                               torch.zeros(0, 3, dtype=torch.int64, device=device),
                               torch.zeros(0, layout.NUM_PARAMS, device=device), (4, 4), [1.0] * 3, [0.0] * 3,
                               pad_mode=mode, fill=fill)
    assert empty.shape == (0, 3, 4, 4)
    img = smooth_image(5, 7).permute(1, 2, 0).contiguous()
    data, offsets, shapes = pack_images([img])
    params = _fold_params([(5, 7)], (3, 1, 2, 4))
    before = data.clone()
    kw = dict(out_dtype=torch.uint8, pad_mode=mode, fill=fill)
    got = fused_resized_crop(data.to(device), offsets.to(device), shapes.to(device), params.to(device), (10, 12),
                             [1.0] * 3, [0.0] * 3, **kw).cpu()
    assert torch.equal(got, resized_crop_reference(data, offsets, shapes, params, (10, 12), [1.0] * 3, [0.0] * 3,
                                                   **kw))
    assert torch.equal(got[0], TF.pad(img.permute(2, 0, 1), [3, 1, 2, 4], fill=fill or 0, padding_mode=mode))
    assert torch.equal(data, before)


def test_launcher_arguments():
    data, offsets, shapes = pack_images([smooth_image(4, 4).permute(1, 2, 0).contiguous()])
    params = _fold_params([(4, 4)], (1, 1, 1, 1))
    with pytest.raises(ValueError, match="fill is read with pad_mode='constant' only"):
        resized_crop_reference(data, offsets, shapes, params, (6, 6), [1.0] * 3, [0.0] * 3, pad_mode="edge",
                               fill=[1, 2, 3])
    with pytest.raises(ValueError, match="pad_mode must be one of"):
        resized_crop_reference(data, offsets, shapes, params, (6, 6), [1.0] * 3, [0.0] * 3, pad_mode="wrap")
    # constant without a fill pads with zeros
    out = resized_crop_reference(data, offsets, shapes, params, (6, 6), [1.0] * 3, [0.0] * 3,
                                 out_dtype=torch.uint8, pad_mode="constant")
    assert out[0, :, 0].eq(0).all() and torch.equal(out[0, :, 1:5, 1:5], data.view(4, 4, 3).permute(2, 0, 1))


# -- one way per pipeline; what a fold box cannot say ------------------------------------------------

@pytest.mark.parametrize("pipe,match", [
    ([T.Resize(20), T.Pad(2, padding_mode="reflect")], "after a resize"),
    ([T.RandomResizedCrop(20), T.RandomCrop(20, padding=2, padding_mode="edge")], "after a resize"),
    ([T.Pad(2, fill=3), T.Pad(2, fill=4)], "one way"),
    ([T.Pad(2, padding_mode="edge"), T.Pad(2, padding_mode="reflect")], "one way"),
    ([T.Resize((30, 30)), T.CenterCrop(40), T.Pad(2, fill=(1, 2, 3))], "pads with zeros"),
    ([T.Pad(2, fill=(1, 2, 3)), T.RandomCrop(20, padding=3)], "pads with zeros"),
    ([T.Pad(2, fill=300)], "does not fit a uint8 image"),
])
def test_pipelines_padding_two_ways_are_refused_at_compile_time(pipe, match):
    with pytest.raises(ValueError, match=match):
        T.compile_transforms(pipe)


@pytest.mark.parametrize("pipe,match", [
    ([T.Pad(12, padding_mode="reflect"), T.CenterCrop(10)], "smaller than the image"),
    ([T.Pad(13, padding_mode="symmetric"), T.CenterCrop(10)], "at most the image"),
    ([T.Pad(3, padding_mode="reflect"), T.Pad(2, padding_mode="reflect")], "already holds padding"),
    ([T.CenterCrop(16), T.Pad(2, padding_mode="edge")], "padded with zeros before"),
    ([T.Pad(1, fill=9), T.CenterCrop(15)], r"CenterCrop\(size=\[15, 15\]\) pads sample 0 \(14x14\) with zeros"),
])
def test_what_one_fold_box_cannot_say_is_refused_per_batch(pipe, match):
    with pytest.raises(ValueError, match=match):
        apply_to_images(T.Compose(pipe), [smooth_image(12, 12)])


def test_invalid_arguments_are_refused_at_construction():
    with pytest.raises(ValueError, match="padding_mode='wrap'"):
        T.Pad(2, padding_mode="wrap")
    with pytest.raises(TypeError, match="fill must be"):
        T.RandomCrop(32, padding=4, fill=(1, 2))
    with pytest.raises(ValueError, match="padding must be"):
        T.Pad(2.5)


# -- zero padding is untouched -------------------------------------------------------------------

def test_zero_padding_keeps_the_kernel_it_had():
    for pipe in ([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip()], [T.Pad(2), T.CenterCrop(30)],
                 [T.RandomCrop(32, padding=4, fill={tv_tensors.Image: 0, tv_tensors.Mask: 255}),
                  T.CenterCrop(40)]):
        plan = T.compile_transforms(pipe)
        assert plan.pad_mode == "none" and plan.fill is None
        assert _execute._pad_kwargs(plan) == {}
    # nothing to pad: the mode is never used (torchvision), the plan does not switch
    assert T.compile_transforms([T.RandomCrop(32, padding_mode="reflect")]).pad_mode == "none"
    assert T.compile_transforms([T.Pad([-1, -2], padding_mode="edge"), T.CenterCrop(3)]).pad_mode == "none"


def test_parameter_layout_names_the_fold_box():
    assert layout.block("source").columns == ("fold_y0", "fold_y1", "fold_x0", "fold_x1")
    g = G.BatchGeometry.identity(np.array([[5, 7]]))
    row = g.to_params()[0]
    assert [float(row[c]) for c in (layout.FOLD_Y0, layout.FOLD_Y1, layout.FOLD_X0, layout.FOLD_X1)] == [0, 5, 0, 7]
    G.pad(g, 1, 2, 3, 4, mode="edge")
    row = g.to_params()[0]
    assert [float(row[c]) for c in (layout.LO_Y, layout.HI_Y, layout.LO_X, layout.HI_X)] == [-2, 9, -1, 10]
    assert [float(row[c]) for c in (layout.VALID_Y0, layout.VALID_Y1, layout.VALID_X0, layout.VALID_X1)] == \
        [0, 11, 0, 11]
