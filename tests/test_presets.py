"""torchvision's reference-script presets (references/classification/presets.py) pass unchanged.

The stand-in classes below build their ``Compose`` the way the reference script's
``ClassificationPresetTrain``/``ClassificationPresetEval`` do (same steps, same
order, for every ``backend``/``use_v2``), and carry the same class names, which is
all torchdali looks at. Every train combination must compile; one that needs a
transform this build lacks must be refused for exactly the steps that need it
(and is then reported as a skip naming the missing transforms). Eval presets must
match torchvision's output within 1 (uint8 units).
"""
from __future__ import annotations

import itertools

import pytest
import torch
from torchvision.transforms import InterpolationMode

from tests._helpers import photo_image
from torchdali import transforms as T
from torchdali.transforms._plan import apply_to_images

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CROP, RESIZE = 48, 56


def _module(use_v2: bool):
    if use_v2:
        import torchvision.transforms.v2 as module
    else:
        import torchvision.transforms as module
    return module


def _train_steps(*, crop_size, interpolation, auto_augment_policy, random_erase_prob, backend, use_v2,
                 hflip_prob=0.5, ra_magnitude=9, augmix_severity=3) -> list:
    M = _module(use_v2)
    steps = [M.PILToTensor()] if backend == "tensor" else []
    steps.append(M.RandomResizedCrop(crop_size, interpolation=interpolation, antialias=True))
    if hflip_prob > 0:
        steps.append(M.RandomHorizontalFlip(hflip_prob))
    policy = {
        None: None,
        "ra": lambda: M.RandAugment(interpolation=interpolation, magnitude=ra_magnitude),
        "ta_wide": lambda: M.TrivialAugmentWide(interpolation=interpolation),
        "augmix": lambda: M.AugMix(interpolation=interpolation, severity=augmix_severity),
    }.get(auto_augment_policy, lambda: M.AutoAugment(policy=M.AutoAugmentPolicy(auto_augment_policy),
                                                     interpolation=interpolation))
    if policy is not None:
        steps.append(policy())
    if backend == "pil":
        steps.append(M.PILToTensor())
    steps.append(M.ToDtype(torch.float, scale=True) if use_v2 else M.ConvertImageDtype(torch.float))
    steps.append(M.Normalize(mean=MEAN, std=STD))
    if random_erase_prob > 0:
        steps.append(M.RandomErasing(p=random_erase_prob))
    if use_v2:
        steps.append(M.ToPureTensor())
    return steps


def _eval_steps(*, crop_size, resize_size, interpolation, backend, use_v2) -> list:
    M = _module(use_v2)
    steps = [M.PILToTensor()] if backend == "tensor" else []
    steps += [M.Resize(resize_size, interpolation=interpolation, antialias=True), M.CenterCrop(crop_size)]
    if backend == "pil":
        steps.append(M.PILToTensor())
    steps.append(M.ToDtype(torch.float, scale=True) if use_v2 else M.ConvertImageDtype(torch.float))
    steps.append(M.Normalize(mean=MEAN, std=STD))
    if use_v2:
        steps.append(M.ToPureTensor())
    return steps


class ClassificationPresetTrain:
    """Stand-in with the reference script's class name, ``.transforms`` and ``__call__``."""

    def __init__(self, *, use_v2: bool, **kwargs) -> None:
        self.transforms = _module(use_v2).Compose(_train_steps(use_v2=use_v2, **kwargs))

    def __call__(self, img):
        return self.transforms(img)


class ClassificationPresetEval:
    def __init__(self, *, use_v2: bool, **kwargs) -> None:
        self.transforms = _module(use_v2).Compose(_eval_steps(use_v2=use_v2, **kwargs))

    def __call__(self, img):
        return self.transforms(img)


POLICY_CLASS = {None: None, "ra": "RandAugment", "ta_wide": "TrivialAugmentWide", "augmix": "AugMix",
                "imagenet": "AutoAugment"}
INTERPOLATIONS = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC}


def _has_filter(mode: InterpolationMode) -> bool:
    try:
        T.Resize(8, interpolation=mode)
    except ValueError:
        return False
    return True


def _missing(policy, erase, interp) -> tuple[set[str], set[str], list[str]]:
    """(steps that must be refused in this build, steps that may be, branches they come from)."""
    must, may, branches = set(), set(), []
    if policy is not None and POLICY_CLASS[policy] not in T.SUPPORTED:
        must.add(POLICY_CLASS[policy])
        branches.append("policies")
    if erase and "RandomErasing" not in T.SUPPORTED:
        must.add("RandomErasing")
        branches.append("ops")
    if not _has_filter(INTERPOLATIONS[interp]):
        must.add("RandomResizedCrop")
        branches.append("interp")
        if policy is not None:
            may.add(POLICY_CLASS[policy])  # a policy's own warps may refuse the filter too
    return must, must | may, branches


def _refused_names(err: ValueError) -> set[str]:
    names = set()
    for line in str(err).splitlines():
        line = line.strip()
        if line.startswith("pipeline"):
            names.add(line.split()[1].rstrip(":"))
    return names


TRAIN = list(itertools.product(POLICY_CLASS, (0.0, 0.1), INTERPOLATIONS, ("tensor", "pil"), (True, False)))
EVAL = list(itertools.product(INTERPOLATIONS, ("tensor", "pil"), (True, False)))


def _images() -> list[torch.Tensor]:
    return [photo_image(70, 90, 1), photo_image(97, 61, 2), photo_image(64, 64, 3)]


def test_there_are_80_train_and_8_eval_combinations():
    assert len(TRAIN) == 80 and len(EVAL) == 8


@pytest.mark.parametrize("policy,erase,interp,backend,use_v2", TRAIN,
                         ids=[f"{p}-erase{e}-{i}-{b}-{'v2' if v else 'v1'}" for p, e, i, b, v in TRAIN])
def test_train_preset_compiles_unchanged(policy, erase, interp, backend, use_v2):
    preset = ClassificationPresetTrain(crop_size=CROP, interpolation=INTERPOLATIONS[interp],
                                       auto_augment_policy=policy, random_erase_prob=erase,
                                       backend=backend, use_v2=use_v2)
    must, may, branches = _missing(policy, erase, interp)
    if must:
        with pytest.raises(ValueError) as info:
            T.compile_transforms(preset)
        refused = _refused_names(info.value)
        assert must <= refused <= may, (refused, must, may)
        pytest.skip(f"needs the {'+'.join(branches)} branch(es): refused exactly {sorted(refused)}")
    plan = T.compile_transforms(preset)
    assert plan.out_size == (CROP, CROP) and plan.out_dtype == torch.float32
    out = apply_to_images(preset, _images(), seed=3)
    assert all(o.shape == (3, CROP, CROP) and o.dtype == torch.float32 and torch.isfinite(o).all() for o in out)


@pytest.mark.parametrize("interp,backend,use_v2", EVAL,
                         ids=[f"{i}-{b}-{'v2' if v else 'v1'}" for i, b, v in EVAL])
def test_eval_preset_matches_torchvision(interp, backend, use_v2):
    from PIL import Image

    if not _has_filter(INTERPOLATIONS[interp]):
        with pytest.raises(ValueError, match="Resize"):
            T.compile_transforms(ClassificationPresetEval(crop_size=CROP, resize_size=RESIZE,
                                                          interpolation=INTERPOLATIONS[interp],
                                                          backend=backend, use_v2=use_v2))
        pytest.skip(f"needs the interp branch: {interp} Resize refused")
    preset = ClassificationPresetEval(crop_size=CROP, resize_size=RESIZE, interpolation=INTERPOLATIONS[interp],
                                      backend=backend, use_v2=use_v2)
    images = _images()
    ours = apply_to_images(preset, images)
    std = torch.tensor(STD).view(3, 1, 1)
    for img, got in zip(images, ours):
        # the reference script's presets take PIL images, whichever the backend
        expected = preset(Image.fromarray(img.permute(1, 2, 0).numpy()))
        assert got.shape == expected.shape == (3, CROP, CROP)
        diff = ((got - expected) * std * 255).abs()
        assert diff.max().item() <= 2 + 1e-3
        assert (diff <= 1 + 1e-3).double().mean().item() >= 0.999


def test_preset_is_matched_by_name_and_needs_a_compose():
    class Other:
        def __init__(self):
            self.transforms = ClassificationPresetEval(crop_size=8, resize_size=8,
                                                       interpolation=InterpolationMode.BILINEAR,
                                                       backend="tensor", use_v2=True).transforms

    with pytest.raises(ValueError, match="Other"):
        T.compile_transforms(Other())

    import torchvision.transforms.v2 as v2

    bad = ClassificationPresetEval.__new__(ClassificationPresetEval)
    bad.transforms = [v2.Resize((8, 8))]
    with pytest.raises(ValueError, match="expected a torchvision Compose"):
        T.compile_transforms(bad)
