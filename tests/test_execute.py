"""``_execute.execute``: the one runner of a plan on a batch, with the kernel and reference backends.

The kernel backend runs the Triton launchers (under ``TRITON_INTERPRET=1`` on the
CPU, natively on a GPU); both backends must give the same batch for the same
drawn parameters, and the runner must skip the work a batch does not need.
"""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from torchdali import _rng  # noqa: E402
from torchdali import transforms as T  # noqa: E402
from torchdali.transforms import _execute  # noqa: E402
from torchdali.transforms._plan import pack_images, to_hwc  # noqa: E402

from ._helpers import kernel_devices, smooth_image  # noqa: E402

DEVICES = kernel_devices()
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]

PIPELINES = {
    "no_program": [T.RandomResizedCrop((9, 11)), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True),
                   T.Normalize(MEAN, STD)],
    "erase_no_program": [T.RandomResizedCrop((9, 11)), T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD),
                         T.RandomErasing(p=0.9, value=(0.1, 0.2, 0.3))],
    "program_u8": [T.Resize((10, 12)), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomEqualize(),
                   T.RandomRotation(20, interpolation="bilinear")],
    "program_finish_erase": [T.RandomResizedCrop((9, 11)), T.RandomAutocontrast(), T.GaussianBlur(3),
                             T.RandomPerspective(p=0.8), T.ToDtype(torch.float32, scale=True),
                             T.Normalize(MEAN, STD), T.RandomErasing(p=0.9, value="random")],
}


def _batch(plan, n: int = 5):
    images = [to_hwc(smooth_image(17 + 3 * i, 23 - i, seed=i)) for i in range(n)]
    data, offsets, shapes = pack_images(images)
    keys = _rng.sample_keys(1, 0, np.arange(n))
    return data, offsets, shapes, plan.params(shapes[:, :2].numpy(), keys)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(PIPELINES))
@pytest.mark.parametrize("channels_last", [False, True])
def test_kernel_backend_matches_reference_backend(device, name, channels_last):
    plan = T.compile_transforms(PIPELINES[name])
    data, offsets, shapes, bp = _batch(plan)
    ref = _execute.execute(plan, data, offsets, shapes, bp, _execute.REFERENCE, channels_last=channels_last)
    got = _execute.execute(plan, data.to(device), offsets.to(device), shapes.to(device), bp, _execute.KERNEL,
                           channels_last=channels_last)
    assert got.shape == ref.shape and got.dtype == ref.dtype == plan.out_dtype
    assert got.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    # kernel 1's uint8 resize may round a value the other way (test_kernel.py's atol=1): compare in levels
    levels = (got.cpu().double() - ref.double()).abs()
    if plan.out_dtype != torch.uint8:
        levels = levels * torch.tensor(STD, dtype=torch.float64).view(1, 3, 1, 1) * 255
    assert levels.max().item() <= 1 + 1e-3
    assert (levels > 1e-3).double().mean().item() < 0.02


def test_identity_slots_and_a_trivial_finish_are_skipped(monkeypatch):
    calls = {"augment_slot": 0, "finish": 0}
    real = _execute.Backend.fn

    def counting(self, step):
        fn = real(self, step)
        if step not in calls:
            return fn

        def wrapped(*args, **kwargs):
            calls[step] += 1
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(_execute.Backend, "fn", counting)
    # p=0: every slot is the identity for every sample; uint8 output: nothing to finish
    plan = T.compile_transforms([T.CenterCrop(8), T.RandomInvert(p=0.0), T.RandomEqualize(p=1.0)])
    data, offsets, shapes, bp = _batch(plan)
    out = _execute.execute(plan, data, offsets, shapes, bp, _execute.REFERENCE)
    assert calls == {"augment_slot": 1, "finish": 0} and out.dtype == torch.uint8
    plan = T.compile_transforms([T.CenterCrop(8), T.RandomInvert(p=0.0), T.ToDtype(torch.float32, scale=True)])
    data, offsets, shapes, bp = _batch(plan)
    _execute.execute(plan, data, offsets, shapes, bp, _execute.REFERENCE)
    assert calls == {"augment_slot": 1, "finish": 1}


def test_run_reference_accepts_bare_kernel_params_for_plans_without_program():
    plan = T.compile_transforms(PIPELINES["no_program"])
    data, offsets, shapes, bp = _batch(plan)
    images = [to_hwc(smooth_image(17 + 3 * i, 23 - i, seed=i)) for i in range(5)]
    a = T._plan.run_reference(plan, images, bp)
    b = T._plan.run_reference(plan, images, bp.params)
    assert torch.equal(a, b)
