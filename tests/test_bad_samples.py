"""One on_error policy for every way a sample fails (CPU path; the GPU path shares the worker).

Each case is a dataset with one bad sample, built twice: bad, and clean (the same files and
annotations with that sample made good). A sample fails while the dataset reads it (a listed
file missing, an unreadable or ill-fitting mask), while its target is built (an RLE of another
size, an annotation whose image size is huge), or while the batch's parameters are drawn (a
resize to no pixels, a reflected pad larger than the image). Under "raise" the loader raises a
SampleError naming the dataset index and path; under "skip" it counts the sample in
``stats()`` and the batch's other samples are bit for bit those of the clean run.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
import torch

import torchdali as td
from torchdali import transforms as T
from torchdali.errors import SampleDrawError, SampleError

from ._helpers import jpeg_bytes, make_folder
from .test_coco import _coco_set, _voc_set

SEED = 7
BATCH = 2
COCO_TF = T.Compose([T.Resize((48, 64))])
FOLDER_TF = T.Compose([T.Resize(16, max_size=64), T.CenterCrop(16)])


#: masks larger than this are a test failure: the guards must refuse a canvas before its masks are drawn, and
#: without them a 50000 x 50000 canvas takes tens of GB
MOST_MASK_PIXELS = 10_000_000


@pytest.fixture(autouse=True)
def _no_giant_masks(monkeypatch):
    from torchdali import datasets

    draw = datasets.segmentation_to_mask

    def guarded(segmentation, height, width):
        if height * width > MOST_MASK_PIXELS:
            pytest.fail(f"a {height}x{width} mask was about to be drawn")
        return draw(segmentation, height, width)

    monkeypatch.setattr(datasets, "segmentation_to_mask", guarded)


def _pairs(batch: list) -> tuple:
    return tuple(zip(*batch))


@dataclass
class Case:
    bad: Any  # the dataset with one bad sample
    clean: Any  # the same dataset with that sample good
    index: int  # the bad sample's dataset index
    path: str  # ... and path
    transforms: Any
    match: str  # what the error says


def _coco_pair(tmp_path, target_keys=("boxes", "labels", "masks"), edit: Callable | None = None,
               **kw) -> tuple[Any, Any, str, str]:
    """Two copies of ``test_coco._coco_set`` (images ids 3, 5, 7, 11: indices 0-3); ``edit(data, root)``
    changes the second one's annotations or files."""
    out = []
    for name in ("clean", "bad"):
        (tmp_path / name).mkdir()
        root, ann_file = _coco_set(tmp_path / name)
        if name == "bad" and edit is not None:
            with open(ann_file) as f:
                data = json.load(f)
            edit(data, root)
            with open(ann_file, "w") as f:
                json.dump(data, f)
        out.append(td.datasets.CocoDetection(root, ann_file, target_keys=target_keys, **kw))
    return out[0], out[1], out[1].root, out[1].annFile


def coco_missing_file(tmp_path) -> Case:
    clean, bad, root, _ = _coco_pair(tmp_path, edit=lambda data, root: os.remove(os.path.join(root, "c.jpg")))
    return Case(bad, clean, 3, os.path.join(root, "c.jpg"), COCO_TF, "cannot read file")


def coco_rle_of_another_size(tmp_path) -> Case:
    def edit(data, root):  # image 5 (index 1) is 20x28
        data["annotations"].append({"id": 51, "image_id": 5, "category_id": 1, "bbox": [1, 2, 3, 4],
                                    "segmentation": {"size": [10, 10], "counts": [100]}})

    clean, bad, root, _ = _coco_pair(tmp_path, edit=edit)
    return Case(bad, clean, 1, os.path.join(root, "d.jpg"), COCO_TF, r"RLE is 10x10 but its image is 20x28")


def coco_giant_annotation(tmp_path) -> Case:
    def edit(data, root):  # image 7 (index 2, a.jpg, 24x32) claims 50000 x 50000: 2.5 GB a mask
        img = next(i for i in data["images"] if i["id"] == 7)
        img["height"] = img["width"] = 50000

    clean, bad, root, _ = _coco_pair(tmp_path, edit=edit)
    return Case(bad, clean, 2, os.path.join(root, "a.jpg"), COCO_TF,
                r"refused before drawing its masks: .*50000x50000 .*more than max_image_pixels=")


def coco_annotation_size_not_the_files(tmp_path) -> Case:
    def edit(data, root):  # image 7 (index 2, a.jpg) is 24x32, not 25x32
        next(i for i in data["images"] if i["id"] == 7)["height"] = 25

    clean, bad, root, _ = _coco_pair(tmp_path, edit=edit, max_image_pixels=None)
    return Case(bad, clean, 2, os.path.join(root, "a.jpg"), COCO_TF,
                r"the annotation's image size is not the file's: the annotation file gives 25x32 \(HxW\), the image's "
                r"header 24x32")


def _voc_pair(tmp_path, edit: Callable) -> tuple[Any, Any]:
    """Two copies of ``test_coco._voc_set`` with 6 training images; ``edit(dataset)`` spoils the second."""
    out = []
    for name in ("clean", "bad"):
        (tmp_path / name).mkdir()
        ds = td.datasets.VOCSegmentation(_voc_set(tmp_path / name, extra=4), "2012", "train")
        if name == "bad":
            edit(ds)
        out.append(ds)
    return out[0], out[1]


def voc_image_missing(tmp_path) -> Case:
    clean, bad = _voc_pair(tmp_path, lambda ds: os.remove(ds.images[3]))
    return Case(bad, clean, 3, bad.images[3], COCO_TF, "cannot read file")


def voc_mask_of_another_size(tmp_path) -> Case:
    from PIL import Image

    clean, bad = _voc_pair(tmp_path, lambda ds: Image.fromarray(np.zeros((5, 5), np.uint8)).save(ds.masks[4]))
    return Case(bad, clean, 4, bad.images[4], COCO_TF, r"mask does not fit its image: .*5x5 \(HxW\)")


def voc_corrupt_mask(tmp_path) -> Case:
    def edit(ds):
        with open(ds.masks[1], "r+b") as f:
            f.seek(40)
            f.write(b"\x00" * 64)  # into the pixel data: the header still reads

    clean, bad = _voc_pair(tmp_path, edit)
    return Case(bad, clean, 1, bad.images[1], COCO_TF, r"cannot read mask .*2007_000039\.png")


def _folder_pair(tmp_path, index: int, h: int, w: int) -> tuple[Any, Any]:
    """Two copies of one ``make_folder`` of 8 JPEGs; in the second, image ``index`` is ``h x w``."""
    out = []
    for name in ("clean", "bad"):
        ds = td.datasets.ImageFolder(make_folder(tmp_path / name, n=8, classes=1))
        if name == "bad":
            with open(ds.samples[index][0], "wb") as f:
                f.write(jpeg_bytes(np.full((h, w, 3), 128, np.uint8)))
        out.append(ds)
    return out[0], out[1]


def folder_file_missing(tmp_path) -> Case:
    """A torchvision-style folder dataset whose file is gone: its loader raises FileNotFoundError."""
    clean, bad = _folder_pair(tmp_path, 2, 30, 40)
    os.remove(bad.samples[2][0])
    return Case(bad, clean, 2, bad.samples[2][0], FOLDER_TF, "cannot read sample: FileNotFoundError")


def resize_to_no_pixels(tmp_path) -> Case:
    # 1x4000 under Resize(16, max_size=64): the shorter side becomes floor(64 * 16 / 64000) = 0
    clean, bad = _folder_pair(tmp_path, 5, 1, 4000)
    return Case(bad, clean, 5, bad.samples[5][0], FOLDER_TF,
                r"cannot transform: Resize\(size=\[16\].*max_size=64.*\) gives a 1x4000 image a size of 0x64")


def reflect_pad_too_large(tmp_path) -> Case:
    clean, bad = _folder_pair(tmp_path, 6, 1, 40)
    tf = T.Compose([T.Pad(2, padding_mode="reflect"), T.Resize((20, 24))])
    return Case(bad, clean, 6, bad.samples[6][0], tf,
                r"cannot transform: padding_mode='reflect' needs padding smaller than the image's height 1, got 2 "
                r"and 2")


CASES = [coco_missing_file, coco_rle_of_another_size, coco_giant_annotation, coco_annotation_size_not_the_files,
         voc_image_missing, voc_mask_of_another_size, voc_corrupt_mask, folder_file_missing, resize_to_no_pixels,
         reflect_pad_too_large]


def _loader(ds, case: Case, on_error: Any, device: str = "cpu") -> td.DataLoader:
    return td.DataLoader(ds, batch_size=BATCH, device=device, on_error=on_error, transforms=case.transforms,
                         seed=SEED, collate_fn=_pairs)


def _samples(loader) -> list[tuple[torch.Tensor, Any]]:
    return [(image.cpu(), target) for images, targets in loader for image, target in zip(images, targets)]


def _same_target(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_target(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return type(a) is type(b) and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())
    return a == b


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__)
def test_raise_names_the_dataset_index_and_path(tmp_path, make):
    case = make(tmp_path)
    with pytest.raises(SampleError, match=case.match) as err:
        list(_loader(case.bad, case, "raise"))
    assert (err.value.index, err.value.path) == (case.index, case.path)
    assert str(err.value).startswith(f"sample {case.index} ({case.path}): ")


def _check_skip(case: Case, device: str) -> None:
    loader = _loader(case.bad, case, "skip", device)
    got = _samples(loader)
    want = _samples(_loader(case.clean, case, "skip", device))
    assert len(got) == len(want) == len(case.clean)
    assert loader.stats().last.skipped == 1
    for position, ((image, target), (image_want, target_want)) in enumerate(zip(got, want)):
        if position == case.index:  # (no shuffle: the position is the index) a spare took its place
            assert not (image.shape == image_want.shape and torch.equal(image, image_want))
        else:
            assert torch.equal(image, image_want), position
            assert _same_target(target, target_want), position


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__)
def test_skip_counts_it_and_keeps_the_other_samples_bit_for_bit(tmp_path, make):
    _check_skip(make(tmp_path), "cpu")


@pytest.mark.cuda
@pytest.mark.parametrize("make", [coco_missing_file, coco_giant_annotation, voc_corrupt_mask, resize_to_no_pixels],
                         ids=lambda f: f.__name__)
def test_skip_on_the_gpu_path(tmp_path, make):
    """The GPU path's workers read the targets with the files deferred (``file_item``) and draw in the same place."""
    _check_skip(make(tmp_path), "cuda")


def test_a_callable_policy_gets_every_kind_of_failure(tmp_path):
    calls = []

    def policy(index, path, exc):
        calls.append((index, path, type(exc)))
        return np.full((30, 40, 3), 9, np.uint8), -1

    for make in (folder_file_missing, resize_to_no_pixels):
        (tmp_path / make.__name__).mkdir()
        case = make(tmp_path / make.__name__)
        got = _samples(_loader(case.bad, case, policy))
        assert calls == [(case.index, case.path, SampleError)]
        calls.clear()
        image, target = got[case.index]
        assert target == -1 and image.shape == (3, 16, 16) and (image == 9).all()


def test_a_spare_that_cannot_be_transformed_is_passed_over(tmp_path, monkeypatch):
    """Two images of 1 x 4000 in a batch of 8, whose 4 spares are drawn from the same 8: with a seed that
    draws one of them as a spare, the spare is drawn (``draw_params``) and passed over."""
    from torchdali._executor import _worker

    clean, bad = _folder_pair(tmp_path, 1, 1, 4000)
    with open(bad.samples[6][0], "wb") as f:
        f.write(jpeg_bytes(np.full((1, 4000, 3), 128, np.uint8)))
    tried = []  # (position, height, width) of each single sample drawn: the replacements tried

    def spy(plan, shapes, seed, epoch, positions, *args, **kw):
        if len(positions) == 1:
            tried.append((int(positions[0]), int(shapes[0, 0]), int(shapes[0, 1])))
        return draw_params(plan, shapes, seed, epoch, positions, *args, **kw)

    draw_params = _worker.draw_params
    monkeypatch.setattr(_worker, "draw_params", spy)
    for seed in range(20):
        tried.clear()
        loader = td.DataLoader(bad, batch_size=8, device="cpu", on_error="skip", seed=seed, transforms=FOLDER_TF)
        (images, labels), = list(loader)
        assert images.shape == (8, 3, 16, 16) and loader.stats().last.skipped == 2
        if (1, 4000) in [(h, w) for _, h, w in tried]:
            break
    else:
        pytest.fail("no seed of 20 drew a bad sample as a spare")
    assert all(position >= 8 for position, *_ in tried)  # spares: positions past the epoch's


def test_the_errors_name_the_sample_outside_the_loader(tmp_path):
    """``ds[i]`` raises the same SampleError; a transform applied to a batch names the sample's position."""
    case = coco_giant_annotation(tmp_path)
    with pytest.raises(SampleError, match=case.match):
        case.bad[case.index]
    from torchdali.transforms._plan import apply_to_images

    images = [torch.zeros(3, 5, 5, dtype=torch.uint8), torch.zeros(3, 1, 4000, dtype=torch.uint8)]
    with pytest.raises(SampleDrawError, match=r"a size of 0x64, without pixels \(sample 1 of the batch\)") as e:
        apply_to_images(T.Compose([T.Resize(16, max_size=64)]), images)
    assert e.value.sample == 1 and isinstance(e.value, ValueError)


def test_a_giant_annotation_with_masks_is_refused_without_allocating(tmp_path):
    """50000 x 50000 with the limit off: the file's header (24 x 32) still refuses it; with masks not asked
    for, nothing is drawn and the loader's own check (the boxes' canvas against the image) refuses it."""
    clean, bad, root, ann_file = _coco_pair(tmp_path, max_image_pixels=None, edit=lambda data, root: next(
        i for i in data["images"] if i["id"] == 7).update(height=50000, width=50000))
    with pytest.raises(SampleError, match=r"the annotation file gives 50000x50000 \(HxW\), the image's header 24x32"):
        bad[2]
    boxes_only = td.datasets.CocoDetection(root, ann_file, target_keys=["boxes"])
    assert tuple(boxes_only[2][1]["boxes"].canvas_size) == (50000, 50000)
    with pytest.raises(SampleError, match=r"sample 2 .*canvas_size \(50000, 50000\) is not the image's size"):
        list(td.DataLoader(boxes_only, batch_size=4, device="cpu", transforms=COCO_TF, collate_fn=_pairs))
    with pytest.raises(ValueError, match="max_image_pixels must be a positive int or None"):
        td.datasets.CocoDetection(root, ann_file, max_image_pixels=0)


@pytest.mark.parametrize("text,where", [
    ('{"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [{"id": 1, ',  # cut short
     "line 1 column 73: Expecting property name"),
    ('{"images": [],\n "annotations": [{id: 1}]}', "line 2 column 19: Expecting property name enclosed in double "
                                                  "quotes"),
])
def test_an_annotation_file_that_is_not_json_names_the_file_and_where(tmp_path, text, where):
    ann_file = tmp_path / "instances.json"
    ann_file.write_text(text)
    with pytest.raises(ValueError, match=rf"annotation file {ann_file} is not valid JSON: {where}"):
        td.datasets.CocoDetection(str(tmp_path), str(ann_file))
    ann_file.write_bytes(b'{"images": "\xff"}')
    with pytest.raises(ValueError, match=rf"annotation file {ann_file} is not UTF-8 text"):
        td.datasets.CocoDetection(str(tmp_path), str(ann_file))


@pytest.mark.parametrize("make", [coco_missing_file, resize_to_no_pixels], ids=lambda f: f.__name__)
def test_raise_from_a_worker_keeps_the_index_and_path(tmp_path, make):
    """torch re-raises a worker's error from its formatted traceback alone; the error still says which sample."""
    case = make(tmp_path)
    loader = td.DataLoader(case.bad, batch_size=BATCH, device="cpu", on_error="raise", transforms=case.transforms,
                           seed=SEED, collate_fn=_pairs, num_workers=1)
    with pytest.raises(SampleError, match=case.match) as err:
        list(loader)
    assert (err.value.index, err.value.path) == (case.index, case.path)
