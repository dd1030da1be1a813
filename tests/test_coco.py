"""Detection and segmentation datasets (torchdali/datasets.py, torchdali/_coco_masks.py) against torchvision's.

``CocoDetection`` is compared with ``wrap_dataset_for_transforms_v2(torchvision.datasets.CocoDetection)``
(which needs pycocotools: those tests are skipped without it) on a COCO file written here, with
polygons, compressed and uncompressed RLE, integer and float boxes, crowd annotations and
an image without annotations. The mask rasteriser is also checked against pycocotools on
random polygons, and, without pycocotools, against masks pycocotools made (recorded below)
and masks drawn with numpy slicing. ``VOCSegmentation`` is compared with torchvision's on a
VOC folder written here.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import datasets as tvd
from torchvision import tv_tensors

import torchdali as td
from torchdali._coco_masks import polygons_to_mask, rle_to_mask, segmentation_to_mask
from torchdali.errors import SampleError

try:
    from pycocotools import mask as coco_mask
except ImportError:  # the comparisons with torchvision's CocoDetection need it
    coco_mask = None

#: pycocotools 2.0.11's decode under numpy 2
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy:DeprecationWarning")

needs_pycocotools = pytest.mark.skipif(coco_mask is None, reason="torchvision's CocoDetection needs pycocotools")

#: (H, W), polygons, and the mask pycocotools 2.0.11 made of them as column-major runs
#: (background first): a triangle, two overlapping squares partly outside the image (union),
#: a repeated vertex at half-pixel coordinates, a self-intersecting pentagon
POLYGON_MASKS = [
    ((9, 11), [[1.0, 1.0, 9.5, 2.0, 6.0, 7.5]],
     [10, 1, 8, 2, 7, 3, 6, 5, 5, 5, 4, 5, 4, 3, 6, 2, 23]),
    ((8, 8), [[-2.0, -1.0, 5.0, -1.0, 5.0, 4.0, -2.0, 4.0], [3.0, 3.0, 7.9, 3.0, 7.9, 7.9, 3.0, 7.9]],
     [0, 4, 4, 4, 4, 4, 4, 16, 3, 5, 3, 5, 3, 5]),
    ((7, 10), [[0.5, 0.5, 0.5, 0.5, 8.5, 0.5, 8.5, 6.5, 4.25, 3.3]],
     [15, 1, 6, 2, 5, 3, 4, 3, 4, 4, 3, 5, 2, 5, 8]),
    ((12, 6), [[2.2, 0.1, 5.9, 11.7, 0.0, 6.0, 5.0, 2.0, 1.0, 11.0]],
     [17, 1, 1, 3, 3, 3, 11, 1, 1, 4, 5, 1, 4, 3, 12, 1, 1]),
]


def _from_runs(runs: list[int], h: int, w: int) -> np.ndarray:
    values = np.arange(len(runs)) % 2
    return np.repeat(values, runs).astype(np.uint8).reshape(w, h).T


@pytest.mark.parametrize("case", range(len(POLYGON_MASKS)))
def test_polygons_match_recorded_pycocotools_masks(case):
    (h, w), polygons, runs = POLYGON_MASKS[case]
    assert np.array_equal(polygons_to_mask(polygons, h, w), _from_runs(runs, h, w))


def test_rle_strings_decode_to_the_drawn_masks():
    """Compressed RLE strings pycocotools wrote (multi-character numbers, negative differences)."""
    want = np.zeros((100, 6), np.uint8)
    want[10:90, 1:5] = 1
    want[0:3, 5] = 1
    want[95:, 5] = 1
    assert np.array_equal(rle_to_mask({"size": [100, 6], "counts": "^3`2d000000FcMb22"}), want)
    assert np.array_equal(rle_to_mask({"size": [100, 6], "counts": b"^3`2d000000FcMb22"}), want)
    tall = np.zeros((70000, 1), np.uint8)
    tall[5:65000] = 1
    assert np.array_equal(rle_to_mask({"size": [70000, 1], "counts": "5S_o1Xl4"}), tall)
    # uncompressed, as COCO's crowd annotations are stored
    assert np.array_equal(rle_to_mask({"size": [2, 3], "counts": [1, 2, 3]}), [[0, 1, 0], [1, 0, 0]])
    # runs that stop short (pycocotools leaves the rest uninitialised) or go past the end (it raises)
    with pytest.raises(ValueError, match="cover 3 pixels, not the 6 of its 2x3"):
        rle_to_mask({"size": [2, 3], "counts": [1, 2]})
    with pytest.raises(ValueError, match="cover 7 pixels, not the 6 of its 2x3"):
        rle_to_mask({"size": [2, 3], "counts": [4, 3]})
    with pytest.raises(ValueError, match="negative"):
        rle_to_mask({"size": [2, 3], "counts": [4, -1]})
    with pytest.raises(ValueError, match="but its image is 3x3"):
        segmentation_to_mask({"size": [2, 3], "counts": [6]}, 3, 3)
    with pytest.raises(ValueError, match="non-finite"):
        polygons_to_mask([[0, 0, float("nan"), 1, 2, 2]], 4, 4)
    assert polygons_to_mask([], 3, 4).shape == (3, 4)


@pytest.mark.parametrize("segmentation,match", [
    ({"size": [3000, 3000], "counts": [9_000_000]}, "RLE is 3000x3000 but its image is 4x5"),
    ({"size": [4, 5], "counts": [3, 4]}, "cover 7 pixels, not the 20 of its 4x5"),
    ({"size": [4, 5], "counts": "Q1"}, "cover 33 pixels, not the 20"),  # a compressed string, one run of 33
    ([[0, 0, 4, 0, 4, 3, 1]], "polygon 0 has an odd number of coordinates"),  # pycocotools drops the last
    ([[0, 0, 4, 0, 4, 3], [1, 1, 3, 1]], "polygon 1 has 2 points; a polygon needs 3"),
    ([[0, 0, 4, 0, 4, float("inf")]], "polygon 0 has a non-finite coordinate"),
    ([[0, 0, 1e9, 0, 4, 3]], r"polygon 0 has the point \(1e\+09, 0\), far outside its 4x5 image"),
    ([[-6, 0, 4, 0, 4, 3]], r"point \(-6, 0\), far outside"),
])
def test_a_segmentation_that_does_not_fit_its_image_is_refused_before_drawing(segmentation, match):
    with pytest.raises(ValueError, match=match):
        segmentation_to_mask(segmentation, 4, 5)


def test_segmentations_within_reach_of_their_image_are_drawn():
    """A polygon reaching outside its image by less than the image's size is cut at its border, as pycocotools
    does; so is the recorded two-squares case (``POLYGON_MASKS``)."""
    (h, w), polygons, runs = POLYGON_MASKS[1]
    assert np.array_equal(segmentation_to_mask(polygons, h, w), _from_runs(runs, h, w))
    around = segmentation_to_mask([[-4.5, -3.5, 9.5, -3.5, 9.5, 7.5, -4.5, 7.5]], 4, 5)
    assert np.array_equal(around, np.ones((4, 5), np.uint8))
    assert np.array_equal(segmentation_to_mask({"size": [4, 5], "counts": [20]}, 4, 5), np.zeros((4, 5), np.uint8))


@pytest.mark.skipif(coco_mask is None, reason="needs pycocotools")
def test_polygons_and_rle_match_pycocotools_on_random_shapes():
    rng = np.random.default_rng(0)
    for _ in range(400):
        h, w = (int(v) for v in rng.integers(1, 40, 2))
        polygons = []
        for _ in range(int(rng.integers(1, 4))):
            k, kind, span = int(rng.integers(3, 9)), int(rng.integers(0, 4)), max(h, w)
            if kind == 0:
                pts = rng.uniform(-5, span + 5, 2 * k)  # partly outside
            elif kind == 1:
                pts = rng.integers(-2, span + 2, 2 * k).astype(float)  # whole pixels
            elif kind == 2:
                pts = np.round(rng.uniform(0, span, 2 * k) * 2) / 2  # half pixels
            else:
                pts = rng.uniform(0, span, 2 * k)
                pts[2:4] = pts[0:2]  # a repeated vertex: a zero-length edge
            polygons.append(pts.tolist())
        want = coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(polygons, h, w)))
        assert np.array_equal(polygons_to_mask(polygons, h, w), want), (h, w, polygons)
        rle = coco_mask.encode(np.asfortranarray(want))
        assert np.array_equal(rle_to_mask({"size": rle["size"], "counts": rle["counts"].decode()}), want)
    big = [rng.uniform(0, 600, 60).tolist(), rng.uniform(100, 400, 20).tolist()]
    assert np.array_equal(polygons_to_mask(big, 480, 640),
                          coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(big, 480, 640))))


# --------------------------------------------------------------------------- #
# CocoDetection
# --------------------------------------------------------------------------- #

def _jpeg(path: str, h: int, w: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path, quality=90)


def _crowd_rle(h: int, w: int) -> dict:
    m = np.zeros((h, w), np.uint8)
    m[h // 4: h // 2, w // 3: w - 2] = 1
    flat, runs, cur, c = m.T.reshape(-1), [], 0, 0
    for v in flat:
        if v != cur:
            runs.append(c)
            c, cur = 0, v
        c += 1
    return {"size": [h, w], "counts": runs + [c]}


def _coco_set(tmp_path) -> tuple[str, str]:
    """A COCO folder: 4 images (ids out of order, one without annotations, one referenced twice)."""
    root = tmp_path / "images"
    root.mkdir()
    images = [
        {"id": 7, "file_name": "a.jpg", "height": 24, "width": 32},
        {"id": 3, "file_name": "sub/b.jpg", "height": 40, "width": 30},
        {"id": 11, "file_name": "c.jpg", "height": 16, "width": 16},  # no annotations
        {"id": 5, "file_name": "d.jpg", "height": 20, "width": 28},
    ]
    (root / "sub").mkdir()
    for i, img in enumerate(images):
        _jpeg(os.path.join(root, img["file_name"]), img["height"], img["width"], i)
    anns = [
        {"id": 1, "image_id": 7, "category_id": 18, "bbox": [1.5, 2.0, 10.25, 8.0], "area": 82.0, "iscrowd": 0,
         "segmentation": [[1.5, 2.0, 11.75, 2.0, 11.75, 10.0, 1.5, 10.0]]},
        {"id": 2, "image_id": 3, "category_id": 1, "bbox": [0, 0, 30, 40], "area": 1200, "iscrowd": 0,
         "segmentation": [[0, 0, 29, 0, 15, 39], [20, 20, 25, 20, 25, 25, 20, 25, 18, 22]]},
        {"id": 3, "image_id": 7, "category_id": 3, "bbox": [20.0, 5.0, 0.0, 4.0], "area": 0.0, "iscrowd": 0,
         "segmentation": [[20.0, 5.0, 20.0, 9.0, 20.5, 7.0]]},  # degenerate box
        {"id": 4, "image_id": 7, "category_id": 44, "bbox": [5.0, 12.0, 20.0, 10.0], "area": 90.0, "iscrowd": 1,
         "segmentation": _crowd_rle(24, 32)},
        {"id": 5, "image_id": 3, "category_id": 2, "bbox": [-3.0, 30.0, 40.0, 20.0], "area": 10.0, "iscrowd": 0,
         "segmentation": [[0.0, 30.0, 29.0, 30.0, 29.0, 39.0]]},  # a box reaching outside the image
        {"id": 6, "image_id": 5, "category_id": 9, "bbox": [2, 3, 4, 5], "area": 20, "iscrowd": 0,  # int box
         "segmentation": [[2, 3, 6, 3, 6, 8, 2, 8]]},
        {"id": 8, "image_id": 99, "category_id": 9, "bbox": [2, 3, 4, 5], "area": 20, "iscrowd": 0,  # no image
         "segmentation": [[2, 3, 6, 3, 6, 8, 2, 8]]},
    ]
    if coco_mask is not None:  # a compressed RLE, as pycocotools writes it
        m = np.zeros((20, 28), np.uint8)
        m[4:15, 6:20] = 1
        rle = coco_mask.encode(np.asfortranarray(m))
        anns.append({"id": 9, "image_id": 5, "category_id": 9, "bbox": [6.0, 4.0, 14.0, 11.0], "area": 154,
                     "iscrowd": 1, "segmentation": {"size": rle["size"], "counts": rle["counts"].decode()}})
    data = {"images": images, "annotations": anns, "categories": [{"id": i, "name": f"c{i}"} for i in (1, 2, 3, 9, 18, 44)]}
    ann_file = tmp_path / "instances.json"
    ann_file.write_text(json.dumps(data))
    return str(root), str(ann_file)


def _torchvision_coco(root: str, ann_file: str, target_keys):
    from torchvision.datasets import wrap_dataset_for_transforms_v2

    return wrap_dataset_for_transforms_v2(tvd.CocoDetection(root, ann_file), target_keys=target_keys)


def _assert_same_value(got, want, key):
    if isinstance(want, torch.Tensor):
        assert type(got) is type(want), key
        if isinstance(want, tv_tensors.BoundingBoxes):  # ours always float32; torchvision's int64 for integer JSON
            assert got.dtype == torch.float32, key
            want = want.to(torch.float32)
        assert got.dtype == want.dtype and got.shape == want.shape, key
        assert torch.equal(got.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor)), key
        if isinstance(want, tv_tensors.BoundingBoxes):
            assert got.format == want.format and tuple(got.canvas_size) == tuple(want.canvas_size)
            assert getattr(got, "clamping_mode", None) == getattr(want, "clamping_mode", None)
    else:
        assert got == want, key


@needs_pycocotools
@pytest.mark.parametrize("target_keys", [None, "all", ("boxes", "masks", "labels", "image_id")])
def test_coco_matches_torchvision_wrapper(tmp_path, target_keys):
    root, ann_file = _coco_set(tmp_path)
    ours = td.datasets.CocoDetection(root, ann_file, target_keys=target_keys)
    theirs = _torchvision_coco(root, ann_file, target_keys)
    assert len(ours) == len(theirs) == 4
    assert ours.ids == theirs.ids == [3, 5, 7, 11]
    for i in range(len(ours)):
        data, target = ours[i]
        image, want = theirs[i]
        with open(ours.path_of(i), "rb") as f:
            assert data.dtype == torch.uint8 and bytes(data.numpy()) == f.read()
        if ours.ids[i] == 11:  # no annotations: torchvision gives the image id alone
            assert set(want) == {"image_id"} and target.get("image_id", 11) == 11
            continue
        assert set(target) == set(want)
        for key in want:
            _assert_same_value(target[key], want[key], key)
        assert tuple(target["boxes"].canvas_size) == (image.height, image.width)  # torchvision's: decoded


@needs_pycocotools
def test_coco_raw_annotations_match_torchvision(tmp_path):
    root, ann_file = _coco_set(tmp_path)
    ours, theirs = td.datasets.CocoDetection(root, ann_file), tvd.CocoDetection(root, ann_file)
    for i in range(len(ours)):
        assert ours.annotations(i) == theirs[i][1]


def test_coco_targets_without_pycocotools(tmp_path):
    """The same targets checked by hand: XYWH to XYXY, labels, masks drawn with numpy, empty images."""
    root, ann_file = _coco_set(tmp_path)
    ds = td.datasets.CocoDetection(root, ann_file, target_keys="all")
    by_id = {image_id: ds[i][1] for i, image_id in enumerate(ds.ids)}
    t7 = by_id[7]
    assert isinstance(t7["boxes"], tv_tensors.BoundingBoxes) and t7["boxes"].format.name == "XYXY"
    assert tuple(t7["boxes"].canvas_size) == (24, 32) and t7["boxes"].dtype == torch.float32
    assert t7["boxes"].tolist() == [[1.5, 2.0, 11.75, 10.0], [20.0, 5.0, 20.0, 9.0], [5.0, 12.0, 25.0, 22.0]]
    assert t7["labels"].tolist() == [18, 3, 44] and t7["labels"].dtype == torch.int64
    assert t7["iscrowd"] == [0, 0, 1] and t7["area"] == [82.0, 0.0, 90.0] and t7["category_id"] == [18, 3, 44]
    assert isinstance(t7["masks"], tv_tensors.Mask) and t7["masks"].shape == (3, 24, 32)
    assert t7["masks"].dtype == torch.uint8
    crowd = np.zeros((24, 32), np.uint8)
    crowd[6:12, 10:30] = 1
    assert np.array_equal(t7["masks"][2].numpy(), crowd)
    # the rectangle polygon [1.5, 11.75] x [2, 10]: pycocotools fills pixel columns 2..11, rows 2..9
    rect = np.zeros((24, 32), np.uint8)
    rect[2:10, 2:12] = 1
    assert np.array_equal(t7["masks"][0].numpy(), rect)
    t5 = by_id[5]
    assert t5["boxes"].dtype == torch.float32  # torchvision's wrapper: int64, as torch.tensor infers from the JSON
    assert t5["boxes"][0].tolist() == [2, 3, 6, 8]
    empty = by_id[11]
    assert empty["image_id"] == 11 and empty["boxes"].shape == (0, 4) and empty["labels"].shape == (0,)
    assert tuple(empty["boxes"].canvas_size) == (16, 16) and empty["masks"].shape == (0, 16, 16)
    assert empty["iscrowd"] == [] and empty["segmentation"] == []
    # the default keys
    assert set(td.datasets.CocoDetection(root, ann_file)[0][1]) == {"image_id", "boxes", "labels"}
    with pytest.raises(ValueError, match="not available"):
        td.datasets.CocoDetection(root, ann_file, target_keys=["boxes", "keypoints"])


def test_coco_file_item_and_transforms(tmp_path):
    root, ann_file = _coco_set(tmp_path)
    ds = td.datasets.CocoDetection(root, ann_file, target_keys=["boxes", "masks", "labels"],
                                   target_transform=lambda t: {**t, "n": len(t["labels"])})
    path, target = ds.file_item(0)  # image id 3, the smallest
    assert path == os.path.join(root, "sub", "b.jpg") == ds.path_of(0)
    _, again = ds[0]
    assert target["n"] == again["n"] == 2 and torch.equal(target["masks"], again["masks"])
    assert td.datasets.CocoDetection(root, ann_file, transform=lambda b: b).file_item(0) is None

    class Own(td.datasets.CocoDetection):
        def __getitem__(self, index):
            return super().__getitem__(index)

    assert Own(root, ann_file).file_item(0) is None


def test_coco_bad_samples_name_index_and_path(tmp_path):
    root, ann_file = _coco_set(tmp_path)
    os.remove(os.path.join(root, "c.jpg"))
    data = json.loads(open(ann_file).read())
    data["annotations"].append({"id": 50, "image_id": 3, "category_id": 1, "bbox": [1, 2, 3],
                                "segmentation": [[0, 0, 4, 0, 4, 4]]})
    data["annotations"].append({"id": 51, "image_id": 5, "category_id": 1, "bbox": [1, 2, 3, 4],
                                "segmentation": {"size": [10, 10], "counts": [100]}})
    bad_file = tmp_path / "bad.json"
    bad_file.write_text(json.dumps(data))
    ds = td.datasets.CocoDetection(root, str(bad_file), target_keys=["boxes", "masks"])
    with pytest.raises(SampleError, match=r"sample 3 \(.*c\.jpg\): cannot read file") as err:
        ds[3]
    assert err.value.index == 3 and err.value.path.endswith("c.jpg")
    with pytest.raises(SampleError, match=r"sample 0 \(.*b\.jpg\): bad COCO annotation: .*bbox must be"):
        ds[0]
    with pytest.raises(SampleError, match=r"sample 1 \(.*d\.jpg\): bad COCO annotation: .*RLE is 10x10 but its "
                                          r"image is 20x28"):
        ds.file_item(1)


def test_coco_size_from_the_header_when_the_file_has_none(tmp_path):
    root, ann_file = _coco_set(tmp_path)
    data = json.loads(open(ann_file).read())
    for img in data["images"]:
        del img["height"], img["width"]
    ann_file2 = tmp_path / "nosize.json"
    ann_file2.write_text(json.dumps(data))
    ds = td.datasets.CocoDetection(root, str(ann_file2))
    assert [tuple(ds[i][1]["boxes"].canvas_size) for i in range(4)] == [(40, 30), (20, 28), (24, 32), (16, 16)]


# --------------------------------------------------------------------------- #
# VOC-style segmentation
# --------------------------------------------------------------------------- #

def _voc_set(tmp_path, year: str = "2012", extra: int = 0) -> str:
    """A VOC folder: 2 training images and 1 validation image, and ``extra`` more training images."""
    from torchvision.datasets.voc import DATASET_YEAR_DICT

    voc = tmp_path / DATASET_YEAR_DICT[year]["base_dir"]
    for sub in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (voc / sub).mkdir(parents=True)
    names = ["2007_000032", "2007_000039", "2008_000123"] + [f"2009_{k:06d}" for k in range(extra)]
    palette = list(np.random.default_rng(1).integers(0, 256, 768, dtype=np.uint8))
    for i, name in enumerate(names):
        h, w = 20 + 3 * i, 25 + 2 * i
        _jpeg(str(voc / "JPEGImages" / f"{name}.jpg"), h, w, i)
        classes = np.random.default_rng(i).integers(0, 21, (h, w), dtype=np.uint8)
        classes[0, :] = classes[:, 0] = 255  # VOC's void border
        mask = Image.fromarray(classes, mode="P")
        mask.putpalette(palette)
        mask.save(voc / "SegmentationClass" / f"{name}.png")
    (voc / "ImageSets/Segmentation/train.txt").write_text("\n".join(names[:2] + names[3:]) + "\n")
    (voc / "ImageSets/Segmentation/val.txt").write_text(names[2] + "\n")
    return str(tmp_path)


@pytest.mark.parametrize("image_set", ["train", "val"])
def test_voc_segmentation_matches_torchvision_wrapper(tmp_path, image_set):
    from torchvision.datasets import wrap_dataset_for_transforms_v2

    root = _voc_set(tmp_path)
    ours = td.datasets.VOCSegmentation(root, "2012", image_set)
    theirs = wrap_dataset_for_transforms_v2(tvd.VOCSegmentation(root, "2012", image_set))
    assert len(ours) == len(theirs) == (2 if image_set == "train" else 1)
    for i in range(len(ours)):
        data, mask = ours[i]
        image, want = theirs[i]
        assert bytes(data.numpy()) == open(theirs.images[i], "rb").read()
        assert type(mask) is tv_tensors.Mask and mask.dtype == torch.uint8 and mask.shape == want.shape
        assert mask.shape == (1, image.height, image.width)
        assert torch.equal(mask, want) and int(mask.max()) == 255
        path, again = ours.file_item(i)
        assert path == theirs.images[i] and torch.equal(again, mask)


def test_voc_arguments_and_bad_samples(tmp_path):
    root = _voc_set(tmp_path)
    with pytest.raises(ValueError, match="image_set"):
        td.datasets.VOCSegmentation(root, "2012", "test")
    with pytest.raises(RuntimeError, match="VOC dataset not found"):
        td.datasets.VOCSegmentation(root, "2011")
    ds = td.datasets.VOCSegmentation(root, "2012", "train")
    Image.fromarray(np.zeros((5, 5), np.uint8)).save(ds.masks[1])
    with pytest.raises(SampleError, match=r"sample 1 \(.*2007_000039\.jpg\): mask does not fit its image: .*5x5"):
        ds[1]
    os.remove(ds.masks[0])
    with pytest.raises(SampleError, match=r"sample 0 \(.*2007_000032\.jpg\): cannot read mask"):
        ds.file_item(0)


def test_segmentation_folder(tmp_path):
    root = _voc_set(tmp_path)
    voc = td.datasets.VOCSegmentation(root, "2012", "train")
    folder = td.datasets.SegmentationFolder(os.path.dirname(voc.images[0]), os.path.dirname(voc.masks[0]))
    assert len(folder) == 3 and folder.images[:2] == voc.images
    for i in range(2):
        assert torch.equal(folder[i][1], voc[i][1])
    os.remove(voc.masks[1])
    with pytest.raises(FileNotFoundError, match="1 of 3 images .* have no mask"):
        td.datasets.SegmentationFolder(os.path.dirname(voc.images[0]), os.path.dirname(voc.masks[0]))


def test_coco_file_errors_name_the_entry(tmp_path):
    root, ann_file = _coco_set(tmp_path)
    data = json.loads(open(ann_file).read())
    del data["annotations"][2]["image_id"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"bad\.json: annotations\[2\] must be an object with id and image_id"):
        td.datasets.CocoDetection(root, str(bad))
    bad.write_text(json.dumps({"annotations": []}))
    with pytest.raises(ValueError, match="'images' list"):
        td.datasets.CocoDetection(root, str(bad))

