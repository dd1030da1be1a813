"""A run of pointwise program slots in one pass (``csrc_triton/pointwise.py``).

* the launcher (interpreted on the CPU, natively with ``-m cuda``) against torchvision's
  functionals applied op after op per sample, and against its plain-torch twin;
* in place, strided, empty batches, and the ops it refuses;
* contrast's count (``m1``): only the image's own pixels of a longer row are summed;
* through a pipeline: a leading program that turns the padding of the padded rows non-zero
  (RandomInvert) before a contrast, on images of several sizes, against torchvision.
"""
from __future__ import annotations

import os

import numpy as np
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torchvision.transforms.v2 as v2  # noqa: E402
import torchvision.transforms.v2.functional as TF  # noqa: E402

from csrc_triton import layout  # noqa: E402
from csrc_triton.pointwise import fused_pointwise_program, pointwise_program_reference  # noqa: E402
from torchdali import transforms as T  # noqa: E402
from torchdali.transforms import _execute  # noqa: E402

from ._helpers import assert_close_uint8, kernel_devices, photo_image, run_plan, smooth_image  # noqa: E402

DEVICES = kernel_devices()

# (op, args, torchvision's function of (image, *args))
_OPS = {
    "brightness": ((1.3,), TF.adjust_brightness),
    "contrast": ((0.6,), TF.adjust_contrast),
    "saturation": ((1.7,), TF.adjust_saturation),
    "hue": ((-0.12,), TF.adjust_hue),
    "grayscale": ((), lambda im: TF.rgb_to_grayscale(im, num_output_channels=3)),
    "invert": ((), TF.invert),
    "posterize": ((3,), TF.posterize),
    "solarize": ((140,), TF.solarize),
    "permute_channels": ((2, 0, 1), lambda im, *p: TF.permute_channels(im, [int(c) for c in p])),
    "identity": ((), lambda im: im),
}
_PROGRAMS = [  # one program per sample, the same number of slots each
    ["brightness", "contrast", "saturation", "hue", "identity", "permute_channels"],
    ["identity", "identity", "saturation", "hue", "contrast", "permute_channels"],
    ["invert", "contrast", "posterize", "grayscale", "contrast", "solarize"],
    ["contrast", "hue", "brightness", "identity", "invert", "contrast"],
]


def _slots(programs: list[list[str]]) -> torch.Tensor:
    s = torch.zeros(len(programs), len(programs[0]), layout.SLOT_WIDTH, dtype=torch.float32)
    for b, program in enumerate(programs):
        for k, name in enumerate(program):
            s[b, k, layout.SLOT_OP] = layout.op_code(name)
            for i, v in enumerate(_OPS[name][0]):
                s[b, k, layout.SLOT_M0 + i] = float(np.float32(v))
    return s


def _torchvision(img: torch.Tensor, program: list[str]) -> torch.Tensor:
    for name in program:
        args, fn = _OPS[name]
        img = fn(img, *[float(np.float32(a)) for a in args]) if name not in ("posterize", "permute_channels") \
            else fn(img, *[int(a) for a in args])
    return img


def _batch(h: int, w: int) -> torch.Tensor:
    return torch.stack([photo_image(h, w, seed=1), smooth_image(h, w, seed=2), photo_image(h, w, seed=3),
                        smooth_image(h, w, seed=4)])


@pytest.mark.parametrize("device", DEVICES)
def test_one_pass_matches_torchvision_op_after_op(device):
    images = _batch(19, 70)
    slots = _slots(_PROGRAMS)
    got = fused_pointwise_program(images.to(device), slots.to(device), ops_host=slots[..., layout.SLOT_OP]).cpu()
    ref = pointwise_program_reference(images, slots)
    for b, program in enumerate(_PROGRAMS):
        # the blends and hue land within 1 of torchvision (its vectorised loops fuse some products)
        assert_close_uint8(got[b], _torchvision(images[b], program), max_off=2, frac_within_1=0.999)
        assert_close_uint8(ref[b], _torchvision(images[b], program), max_off=2, frac_within_1=0.999)
    exact = 1.0 if device == "cpu" else 0.99  # interpreted: the reference's float32 operations
    assert ((got.int() - ref.int()).abs() == 0).double().mean().item() >= exact
    assert ((got.int() - ref.int()).abs() <= 1).all()


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_strided_and_empty(device):
    images = _batch(13, 21).to(device)
    slots = _slots(_PROGRAMS)
    ops = slots[..., layout.SLOT_OP]
    expected = fused_pointwise_program(images, slots.to(device), ops_host=ops)
    work = images.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)  # channels-last strides
    before = work.clone()
    out = fused_pointwise_program(work, slots.to(device), ops_host=ops, out=work)
    assert out.data_ptr() == work.data_ptr() and torch.equal(work, expected) and not torch.equal(before, work)
    empty = images[:0]
    assert fused_pointwise_program(empty, slots[:0].to(device), ops_host=ops[:0]).shape == (0, 3, 13, 21)


def test_refuses_what_is_not_pointwise():
    images = _batch(5, 6)
    slots = _slots(_PROGRAMS)
    slots[2, 3, layout.SLOT_OP] = layout.OP_SHARPNESS
    with pytest.raises(ValueError, match="sample 2, slot 3: op code .* is not a pointwise op"):
        pointwise_program_reference(images, slots)
    with pytest.raises(ValueError, match="slots must have shape"):
        pointwise_program_reference(images, slots[:, 0])
    square = _batch(6, 6)
    with pytest.raises(ValueError, match="not another view"):
        pointwise_program_reference(square, _slots(_PROGRAMS), out=square.transpose(2, 3))


@pytest.mark.parametrize("device", DEVICES)
def test_contrast_counts_only_the_images_own_pixels(device):
    """An 11 x 7 image as the first 77 pixels of a 4 x 32 row whose other pixels are white: the
    contrast's mean is that of the image alone."""
    img = photo_image(11, 7, seed=5)
    row = torch.full((1, 3, 4, 32), 255, dtype=torch.uint8)
    row.view(1, 3, -1)[..., :77] = img.reshape(1, 3, -1)
    slots = _slots([["contrast"]])
    slots[0, 0, layout.SLOT_M1] = 77
    for fn in (fused_pointwise_program, pointwise_program_reference):
        dev = "cpu" if fn is pointwise_program_reference else device
        got = fn(row.to(dev), slots.to(dev), ops_host=slots[..., layout.SLOT_OP]).cpu()
        assert_close_uint8(got.view(1, 3, -1)[0, :, :77].reshape(3, 11, 7), TF.adjust_contrast(img, 0.6),
                           max_off=1, frac_within_1=1.0)


@pytest.mark.parametrize("device", DEVICES)
def test_leading_invert_then_contrast_on_images_of_several_sizes(device):
    """The leading program runs on the images as rows of one padded batch: invert turns the
    padding white, and contrast after it must still see each image alone."""
    sizes = [(20, 30), (9, 17), (33, 21), (20, 30)]
    imgs = [photo_image(h, w, seed=i) for i, (h, w) in enumerate(sizes)]
    pipe = v2.Compose([v2.RandomInvert(p=1.0), v2.ColorJitter(contrast=(0.5, 0.5)), v2.Resize((12, 12))])
    plan = T.compile_transforms(pipe)
    assert plan.leading == 2
    got = run_plan(plan, imgs, device, _execute.KERNEL, seed=0)
    ref = run_plan(plan, imgs, "cpu", _execute.REFERENCE, seed=0)
    for i, img in enumerate(imgs):
        expected = TF.resize(TF.adjust_contrast(TF.invert(img), 0.5), [12, 12])
        assert_close_uint8(ref[i], expected, max_off=1, frac_within_1=0.99)
        assert_close_uint8(got[i], expected, max_off=1, frac_within_1=0.99)
