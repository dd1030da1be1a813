"""Zero-rewrite conversion: whole-pipeline refusals, weights' and timm's transforms, and
lifting a torchvision dataset's own transform onto the loader."""
from __future__ import annotations

import re
import warnings

import pytest
import torch
import torchvision
import torchvision.transforms as v1
import torchvision.transforms.v2 as v2
from torchvision.transforms import InterpolationMode

import torchdali as td
from tests._helpers import make_folder, photo_image
from torchdali import transforms as T
from torchdali.transforms._plan import apply_to_images

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _has_filter(mode) -> bool:
    try:
        T.Resize(8, interpolation=mode)
    except ValueError:
        return False
    return True


def _within_one(ours: torch.Tensor, expected: torch.Tensor, std=STD) -> None:
    """Normalized float images agree within 1 uint8 step on >= 99.9% of values (2 at most)."""
    assert ours.shape == expected.shape, (ours.shape, expected.shape)
    diff = ((ours - expected) * torch.tensor(std).view(3, 1, 1) * 255).abs()
    assert diff.max().item() <= 2 + 1e-3
    assert (diff <= 1 + 1e-3).double().mean().item() >= 0.999


def _refusal_lines(err: Exception) -> list[str]:
    return [line.strip() for line in str(err).splitlines() if line.strip().startswith("pipeline")]


# -- one error listing every refusal -----------------------------------------------------------

def _bad_pipeline():
    return v2.Compose([
        v2.RandomResizedCrop(32, interpolation=InterpolationMode.LANCZOS),  # [0]
        v2.ElasticTransform(),  # [1]
        v2.RandomHorizontalFlip(),  # [2] fine
        v2.Compose([v2.Lambda(lambda x: x), v2.CenterCrop(32)]),  # [3][0]
        v2.RandomCrop(32, padding=4, fill=(1, 2)),  # [4] a fill of two values
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ])


def test_every_unsupported_step_is_listed_once_with_position_and_alternative():
    with pytest.raises(ValueError) as info:
        T.compile_transforms(_bad_pipeline())
    lines = _refusal_lines(info.value)
    assert [line.split(":")[0] for line in lines] == [
        "pipeline[0] RandomResizedCrop", "pipeline[1] ElasticTransform", "pipeline[3][0] Lambda",
        "pipeline[4] RandomCrop"]
    assert str(info.value).startswith("4 steps of the pipeline")
    text = str(info.value)
    assert text.count("instead:") == 4
    assert "CPU" in text.split("pipeline[1] ElasticTransform")[1].split("pipeline[3]")[0]
    assert "arbitrary Python function" in text


def test_the_interpolation_alternative_is_one_that_converts():
    rrc = v2.RandomResizedCrop(32, interpolation=InterpolationMode.LANCZOS)
    with pytest.raises(ValueError) as info:
        T.compile_transforms(v2.Compose([rrc]))
    suggested = re.search(r"interpolation=InterpolationMode\.(\w+)", str(info.value)).group(1)
    assert suggested == ("BICUBIC" if _has_filter(InterpolationMode.BICUBIC) else "BILINEAR")
    T.compile_transforms(v2.Compose([v2.RandomResizedCrop(32, interpolation=getattr(InterpolationMode, suggested))]))


def test_a_torchdali_compose_of_torchvision_steps_lists_them_all():
    with pytest.raises(ValueError) as info:
        T.Compose([v2.CenterCrop(8), v2.ElasticTransform(), v2.Lambda(lambda x: x), v2.JPEG(50)])
    assert [line.split(":")[0] for line in _refusal_lines(info.value)] == [
        "pipeline[1] ElasticTransform", "pipeline[2] Lambda", "pipeline[3] JPEG"]


def test_random_containers_list_their_contents_or_themselves():
    pipe = v2.Compose([v2.RandomApply([v2.ElasticTransform(), v2.Lambda(lambda x: x)], p=0.5),  # contents refused
                       v2.RandomChoice([v2.CenterCrop(8), v2.CenterCrop(9)]),  # itself: sizes differ per sample
                       v2.RandomOrder([v2.RandomHorizontalFlip(), v2.RandomVerticalFlip()]),  # fine
                       v2.CenterCrop(8)])
    with pytest.raises(ValueError) as info:
        T.compile_transforms(pipe)
    assert [line.split(":")[0] for line in _refusal_lines(info.value)] == [
        "pipeline[0][0] ElasticTransform", "pipeline[0][1] Lambda", "pipeline[1] RandomChoice"]


def test_dataloader_construction_raises_the_same_list(tmp_path):
    ds = td.datasets.ImageFolder(make_folder(tmp_path, n=3))
    with pytest.raises(ValueError, match="4 steps") as info:
        td.DataLoader(ds, batch_size=2, device="cpu", transforms=_bad_pipeline())
    assert len(_refusal_lines(info.value)) == 4


# -- torchvision.models weights' transforms() --------------------------------------------------

WEIGHTS = ["ResNet50_Weights.IMAGENET1K_V1", "ResNet50_Weights.IMAGENET1K_V2",
           "EfficientNet_B0_Weights.IMAGENET1K_V1", "ViT_B_16_Weights.IMAGENET1K_V1",
           "ViT_B_16_Weights.IMAGENET1K_SWAG_E2E_V1"]


@pytest.mark.parametrize("name", WEIGHTS)
def test_weights_transforms_match_their_own_output(name):
    enum, member = name.split(".")
    preset = getattr(getattr(torchvision.models, enum), member).transforms()
    if not _has_filter(preset.interpolation):
        with pytest.raises(ValueError, match="interpolation"):
            T.compile_transforms(preset)
        pytest.skip(f"{name} resizes with {preset.interpolation.value}: needs the interp branch")
    plan = T.compile_transforms(preset)
    assert plan.out_size == (preset.crop_size[0],) * 2 and plan.out_dtype == torch.float32
    images = [photo_image(300, 400, 1), photo_image(411, 333, 2), photo_image(preset.resize_size[0], 500, 3)]
    for img, ours in zip(images, apply_to_images(preset, images)):
        _within_one(ours, preset(img), std=preset.std)


# -- timm's simple classes ---------------------------------------------------------------------

def _pil(img: torch.Tensor):
    from PIL import Image

    return Image.fromarray(img.permute(1, 2, 0).numpy())


@pytest.mark.parametrize("kwargs", [dict(img_size=64), dict(img_size=(64, 48)), dict(img_size=56, crop_mode="squash"),
                                    dict(img_size=64, crop_pct=1.0)], ids=["square", "non-square", "squash", "pct1"])
def test_timm_eval_transform_matches_timm(kwargs):
    factory = pytest.importorskip("timm.data.transforms_factory")
    tf = factory.transforms_imagenet_eval(interpolation="bilinear", **kwargs)
    images = [photo_image(90, 120, 1), photo_image(131, 77, 2), photo_image(70, 70, 3)]
    for img, ours in zip(images, apply_to_images(tf, images)):
        _within_one(ours, tf(_pil(img)))


def test_timm_simple_classes_convert():
    tt = pytest.importorskip("timm.data.transforms")
    rrc = T.to_torchdali(tt.RandomResizedCropAndInterpolation(40, scale=(0.3, 0.9), ratio=(0.5, 2.0)))
    assert isinstance(rrc, T.RandomResizedCrop)
    assert rrc.size == [40, 40] and rrc.scale == (0.3, 0.9) and rrc.ratio == (0.5, 2.0)
    plan = T.compile_transforms(v1.Compose([tt.ResizeKeepRatio(32), v1.CenterCrop(32), tt.MaybePILToTensor(),
                                            tt.ToTensor()]))
    assert plan.out_dtype == torch.float32 and plan.scale == (1.0, 1.0, 1.0)  # timm's ToTensor does not scale
    assert T.compile_transforms(v1.Compose([v1.CenterCrop(8), tt.MaybeToTensor()])).scale[0] == pytest.approx(1 / 255)
    with pytest.raises(ValueError, match="random_scale_prob"):
        T.compile_transforms(v1.Compose([tt.ResizeKeepRatio(32, random_scale_prob=0.5), v1.CenterCrop(8)]))


def test_timm_random_interpolation_is_a_per_sample_choice_or_refused():
    tt = pytest.importorskip("timm.data.transforms")
    rrc = tt.RandomResizedCropAndInterpolation(32, interpolation="random")
    try:
        T.RandomResizedCrop(8, interpolation=[InterpolationMode.BILINEAR, InterpolationMode.BICUBIC])
    except ValueError:
        with pytest.raises(ValueError, match=r"pipeline\[0\] RandomResizedCropAndInterpolation"):
            T.compile_transforms(v1.Compose([rrc]))
        pytest.skip("a per-sample choice of filter needs the interp branch")
    assert T.compile_transforms(v1.Compose([rrc])).out_size == (32, 32)


def test_timm_train_transform_compiles_or_names_what_is_missing():
    timm_data = pytest.importorskip("timm.data")
    tf = timm_data.create_transform(48, is_training=True)  # RRC, flip, ColorJitter(0.4), MaybeToTensor, Normalize
    if "ColorJitter" not in T.SUPPORTED:
        with pytest.raises(ValueError) as info:
            T.compile_transforms(tf)
        assert [line.split(":")[0].split()[1] for line in _refusal_lines(info.value)] == ["ColorJitter"]
        pytest.skip("timm's default train transform has ColorJitter: needs the ops branch")
    assert T.compile_transforms(tf).out_size == (48, 48)


def test_resize_keep_ratio_matches_timm_sizes():
    tt = pytest.importorskip("timm.data.transforms")
    import numpy as np

    from torchdali.transforms import _geometry as G

    for longest in (0.0, 0.4, 1.0):
        theirs = tt.ResizeKeepRatio((50, 37), longest=longest)
        ours = T.to_torchdali(theirs)
        sizes = np.array([[100, 120], [37, 300], [81, 81], [1000, 7]])
        got = ours.make_params(G.BatchGeometry.identity(sizes), None)
        for (h, w), gh, gw in zip(sizes, got["height"], got["width"]):
            assert [gh, gw] == theirs.get_params(torch.zeros(3, h, w), theirs.size, longest)


# -- lifting a torchvision dataset's transform -------------------------------------------------

def _loader_pairs(ours, theirs):
    pairs = list(zip(ours, theirs))
    assert len(pairs) == len(theirs) > 0
    return pairs


@pytest.mark.parametrize("make", [
    lambda: v2.Compose([v2.Resize(40), v2.CenterCrop(32), v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
                        v2.Normalize(MEAN, STD)]),
    lambda: v1.Compose([v1.Resize(36), v1.CenterCrop(32), v1.ToTensor(), v1.Normalize(MEAN, STD)]),
    lambda: torchvision.models.ResNet50_Weights.IMAGENET1K_V2.transforms(),
], ids=["v2", "v1", "weights"])
def test_image_folder_transform_is_lifted_and_matches_torchvision(tmp_path, make):
    root = make_folder(tmp_path, n=10, lo=40, hi=90)
    ds = torchvision.datasets.ImageFolder(root, transform=make(), target_transform=lambda t: t + 100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = td.DataLoader(ds, batch_size=4, device="cpu")
    assert isinstance(loader.dataset, td.datasets.FileBytes) and loader.dataset.dataset is ds
    assert loader.transforms is ds.transform
    ref = torch.utils.data.DataLoader(ds, batch_size=4)
    for (images, targets), (expected, expected_targets) in _loader_pairs(loader, ref):
        assert torch.equal(targets, expected_targets) and targets.min() >= 100
        for a, b in zip(images, expected):
            _within_one(a, b)


def test_unliftable_transform_warns_listing_why_and_runs_as_torch(tmp_path):
    root = make_folder(tmp_path, n=6)
    tf = v2.Compose([v2.PILToTensor(), v2.Resize((24, 24)), v2.Lambda(lambda x: 255 - x), v2.ElasticTransform(),
                     v2.ToDtype(torch.float32, scale=True)])
    ds = torchvision.datasets.ImageFolder(root, transform=tf)
    with pytest.warns(UserWarning, match="as under torch") as record:
        loader = td.DataLoader(ds, batch_size=3, device="cpu")
    text = str(record[0].message)
    assert "pipeline[2] Lambda" in text and "pipeline[3] ElasticTransform" in text
    assert loader.dataset is ds
    torch.manual_seed(0)
    ours = list(loader)
    torch.manual_seed(0)
    theirs = list(torch.utils.data.DataLoader(ds, batch_size=3))
    for (a, ta), (b, tb) in _loader_pairs(ours, theirs):
        assert torch.equal(a, b) and torch.equal(ta, tb)


def test_custom_loader_is_not_lifted(tmp_path):
    from torchvision.datasets.folder import pil_loader

    root = make_folder(tmp_path, n=4)
    ds = torchvision.datasets.ImageFolder(root, loader=lambda p: pil_loader(p).rotate(90),
                                          transform=v2.Compose([v2.PILToTensor(), v2.CenterCrop(16)]))
    with pytest.warns(UserWarning, match="loader"):
        loader = td.DataLoader(ds, batch_size=2, device="cpu")
    images, _ = next(iter(loader))
    assert images.shape == (2, 3, 16, 16) and images.dtype == torch.uint8


def test_torchdali_image_folder_without_transforms_still_raises(tmp_path):
    ds = td.datasets.ImageFolder(make_folder(tmp_path, n=2))
    with pytest.raises(ValueError, match="transforms"):
        td.DataLoader(ds, batch_size=2, device="cpu")


@pytest.mark.cuda
def test_lifted_image_folder_on_the_gpu_matches_torchvision(tmp_path):
    root = make_folder(tmp_path, n=16, lo=60, hi=140)
    preset = torchvision.models.ResNet50_Weights.IMAGENET1K_V2.transforms()
    preset.resize_size, preset.crop_size = [40], [32]
    ds = torchvision.datasets.ImageFolder(root, transform=preset)
    loader = td.DataLoader(ds, batch_size=8, device="cuda", num_workers=2)
    ref = torch.utils.data.DataLoader(ds, batch_size=8)
    std = torch.tensor(preset.std).view(1, 3, 1, 1)
    for (images, targets), (expected, expected_targets) in _loader_pairs(loader, ref):
        assert images.is_cuda and images.dtype == torch.float32
        assert torch.equal(targets.cpu(), expected_targets)
        # nvJPEG and libjpeg-turbo differ by about a level
        diff = ((images.cpu() - expected) * std * 255).abs()
        assert diff.mean(dim=(1, 2, 3)).max().item() < 2.5
