"""RandomApply / RandomChoice / RandomOrder decided per sample: every output is exactly one of
the outcomes torchvision can produce, in torchvision's proportions."""
from __future__ import annotations

import pytest
import torch
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
import torchvision.transforms.v2.functional as TF

from tests._helpers import photo_image
from torchdali import transforms as T
from torchdali.transforms._plan import apply_to_images

N = 400


def _outcomes(pipeline, candidates: dict[str, torch.Tensor], seed: int = 1, atol: int = 0) -> dict[str, int]:
    """How many of N outputs equal each candidate (every output must equal one)."""
    img = photo_image(20, 24, 1)
    counts = dict.fromkeys(candidates, 0)
    for out in apply_to_images(pipeline, [img] * N, seed=seed):
        hits = [k for k, c in candidates.items() if (out.int() - c.int()).abs().max().item() <= atol]
        assert hits, "an output is none of the possible outcomes"
        counts[hits[0]] += 1
    return counts


def _assert_fraction(count: int, p: float) -> None:
    sd = (N * p * (1 - p)) ** 0.5
    assert abs(count - N * p) <= 5 * sd + 1, (count, N * p)


def _crop() -> torch.Tensor:
    return TF.center_crop(photo_image(20, 24, 1), [16, 16])


@pytest.mark.parametrize("module", [v1, v2], ids=["v1", "v2"])
def test_random_apply_of_flips_per_sample(module):
    c = _crop()
    pipe = module.Compose([module.CenterCrop(16), module.RandomApply([module.RandomHorizontalFlip(1.0),
                                                                       module.RandomVerticalFlip(1.0)], p=0.3)])
    counts = _outcomes(pipe, {"none": c, "both": TF.vertical_flip(TF.horizontal_flip(c))})
    _assert_fraction(counts["both"], 0.3)


def test_random_choice_of_flips_follows_p():
    c = _crop()
    pipe = v2.Compose([v2.CenterCrop(16), v2.RandomChoice([v2.RandomHorizontalFlip(1.0),
                                                          v2.RandomVerticalFlip(1.0)], p=[1, 3])])
    counts = _outcomes(pipe, {"h": TF.horizontal_flip(c), "v": TF.vertical_flip(c)})
    _assert_fraction(counts["h"], 0.25)


def test_random_order_applies_everything():
    c = _crop()
    pipe = v2.Compose([v2.CenterCrop(16), v2.RandomOrder([v2.RandomHorizontalFlip(1.0), v2.RandomVerticalFlip(0.5)])])
    counts = _outcomes(pipe, {"h": TF.horizontal_flip(c), "hv": TF.vertical_flip(TF.horizontal_flip(c))})
    _assert_fraction(counts["hv"], 0.5)


def test_decisions_replay_and_differ_between_samples():
    pipe = T.Compose([T.CenterCrop(16), T.RandomApply([T.RandomHorizontalFlip(1.0)], p=0.5)])
    img = photo_image(20, 24, 1)
    a, b = apply_to_images(pipe, [img] * 32, seed=5), apply_to_images(pipe, [img] * 32, seed=5)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert len({x.flatten()[:8].tolist().__repr__() for x in a}) == 2


@pytest.mark.parametrize("bad,match", [
    (lambda: v2.RandomApply([v2.RandomResizedCrop(8)]), "changes the batch's size"),
    (lambda: v2.RandomChoice([v2.CenterCrop(8), v2.CenterCrop(9)]), "changes the batch's size"),
    (lambda: v2.RandomApply([v2.ToDtype(torch.float32, scale=True)]), "all flips or all colour/warp"),
])
def test_contents_that_cannot_be_decided_per_sample_are_refused(bad, match):
    with pytest.raises(ValueError, match=match) as info:
        T.compile_transforms(v2.Compose([bad(), v2.CenterCrop(8)]))
    assert "pipeline[0] Random" in str(info.value) and "instead:" in str(info.value)


def test_empty_batch():
    plan = T.compile_transforms(T.Compose([T.CenterCrop(8), T.RandomOrder([T.RandomHorizontalFlip(),
                                                                          T.RandomVerticalFlip()])]))
    import numpy as np

    from torchdali import _rng

    plan.params(np.zeros((0, 2)), _rng.sample_keys(0, 0, np.arange(0)))


# -- colour/warp contents: the augment program ------------------------------------------------

def _needs(*names: str) -> None:
    missing = [n for n in names if n not in T.SUPPORTED]
    if missing:
        pytest.skip(f"needs the ops branch: {', '.join(missing)}")


def test_random_apply_of_colour_ops_gates_their_slots():
    _needs("ColorJitter", "RandomInvert")
    c = _crop()
    pipe = v2.Compose([v2.CenterCrop(16), v2.RandomApply([v2.ColorJitter(brightness=(1.5, 1.5)),
                                                          v2.RandomInvert(1.0)], p=0.4)])
    counts = _outcomes(pipe, {"none": c, "both": TF.invert(TF.adjust_brightness(c, 1.5))}, atol=1)
    _assert_fraction(counts["both"], 0.4)


def test_random_choice_and_order_of_colour_ops():
    _needs("RandomInvert", "RandomPosterize")
    c = _crop()
    choice = v2.Compose([v2.CenterCrop(16), v2.RandomChoice([v2.RandomInvert(1.0), v2.RandomPosterize(2, p=1.0)],
                                                            p=[0.7, 0.3])])
    counts = _outcomes(choice, {"invert": TF.invert(c), "posterize": TF.posterize(c, 2)})
    _assert_fraction(counts["invert"], 0.7)
    order = v2.Compose([v2.CenterCrop(16), v2.RandomOrder([v2.RandomInvert(1.0), v2.RandomPosterize(2, p=1.0)])])
    counts = _outcomes(order, {"invert-first": TF.posterize(TF.invert(c), 2),
                               "posterize-first": TF.invert(TF.posterize(c, 2))})
    _assert_fraction(counts["invert-first"], 0.5)


def test_augmix_cannot_be_chosen_per_sample():
    _needs("AugMix")
    with pytest.raises(ValueError, match="runs its own program"):
        T.compile_transforms(v2.Compose([v2.CenterCrop(16), v2.RandomApply([v2.AugMix()], p=0.5)]))
