"""Readers that return encoded bytes and a target, never decoded pixels.

Decoding happens batched, on the GPU (or in the CPU path's workers), so a reader's
only job is to hand over the file's bytes as a 1-D uint8 tensor. Targets are read
here: class indices (``ImageFolder``, ``FileList``), detection targets from COCO
annotations (``CocoDetection``: boxes, labels, masks rasterised from polygons/RLE
by ``_coco_masks``), segmentation masks decoded from PNG on the CPU
(``VOCSegmentation``, ``SegmentationFolder``), in the form torchvision's datasets
give them after ``wrap_dataset_for_transforms_v2``.
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from torchvision.datasets import DatasetFolder
from torchvision.datasets.folder import IMG_EXTENSIONS

from ._coco_masks import segmentation_to_mask
from ._file_list import read_file_list
from .errors import SampleError
from .transforms._box_ops import _bounding_boxes
from .video import VideoFileList, VideoFolder  # as torchvision keeps its video datasets in datasets

__all__ = [
    "ImageFolder", "FileList", "FileBytes", "CocoDetection", "VOCSegmentation", "SegmentationFolder",
    "lift_blocker", "read_file", "IMG_EXTENSIONS", "VideoFolder", "VideoFileList",
]


def read_file(path: str | os.PathLike) -> torch.Tensor:
    """The file's bytes as a 1-D uint8 tensor."""
    with open(path, "rb", buffering=0) as f:
        # read straight into the tensor's buffer: one copy out of the page cache
        buf = bytearray(os.fstat(f.fileno()).st_size)
        n = f.readinto(buf) if buf else 0
        if n < len(buf):  # the file shrank while we read it
            del buf[n:]
        rest = f.read()  # or grew
        if rest:
            buf += rest
    if not buf:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(buf, dtype=torch.uint8)


def _path_and_target(dataset: Any, index: int) -> tuple[str, Any]:
    """``(path, target_transform(target))`` of ``dataset.samples[index]``."""
    path, target = dataset.samples[index]
    if dataset.target_transform is not None:
        target = dataset.target_transform(target)
    return os.fspath(path), target


class ImageFolder(DatasetFolder):
    """``torchvision.datasets.ImageFolder`` that returns ``(encoded bytes, target)``.

    ``classes``, ``class_to_idx``, ``samples``, ``targets``, ``extensions``,
    ``is_valid_file`` and ``allow_empty`` behave exactly as torchvision's (this
    class is a ``DatasetFolder``); only the loader differs. ``transform`` runs on
    the bytes tensor if given; image transforms belong to the DataLoader.
    """

    def __init__(self, root: str | os.PathLike, transform: Callable | None = None,
                 target_transform: Callable | None = None, loader: Callable = read_file,
                 is_valid_file: Callable[[str], bool] | None = None, allow_empty: bool = False) -> None:
        super().__init__(
            root, loader, IMG_EXTENSIONS if is_valid_file is None else None,
            transform=transform, target_transform=target_transform,
            is_valid_file=is_valid_file, allow_empty=allow_empty,
        )
        self.imgs = self.samples

    def path_of(self, index: int) -> str:
        return self.samples[index][0]

    def file_item(self, index: int) -> tuple[str, Any] | None:
        """``(path, target)`` when item ``index`` is ``(read_file(path), target)``: the
        DataLoader's GPU path then reads the file into its staging memory itself. None
        with a ``transform``, another ``loader`` or a subclass's own ``__getitem__``."""
        if self.transform is not None or self.loader is not read_file \
                or type(self).__getitem__ is not DatasetFolder.__getitem__:
            return None
        return _path_and_target(self, index)


class _FileSamples(torch.utils.data.Dataset):
    """Items ``(file bytes, target_transform(target))`` of ``self.samples`` (``(path, target)`` pairs)."""

    samples: list
    target_transform: Callable | None

    def __getitem__(self, index: int) -> tuple[torch.Tensor, Any]:
        path, target = self.samples[index]
        if self.target_transform is not None:
            target = self.target_transform(target)
        return read_file(path), target

    def path_of(self, index: int) -> str:
        return os.fspath(self.samples[index][0])

    def file_item(self, index: int) -> tuple[str, Any] | None:
        """``(path, target)`` when item ``index`` is ``(read_file(path), target)``: the
        DataLoader's GPU path then reads the file into its staging memory itself. None
        for a subclass with its own ``__getitem__``."""
        if type(self).__getitem__ is not _FileSamples.__getitem__:
            return None
        return _path_and_target(self, index)


class FileList(_FileSamples):
    """Files with targets, given as a list or a text file of ``path [label]`` lines.

    Relative paths are taken from ``root``. Lines starting with ``#`` are skipped.
    Without labels the target is -1.
    """

    def __init__(self, files: str | os.PathLike | Sequence[str | tuple[str, int]],
                 root: str | os.PathLike | None = None,
                 target_transform: Callable | None = None) -> None:
        entries = read_file_list(files, root)
        self.samples = entries
        self.targets = [t for _, t in entries]
        self.target_transform = target_transform

    def __len__(self) -> int:
        return len(self.samples)



def _decoding_loaders() -> tuple[Callable, ...]:
    """torchvision's loaders that only decode the file (what the loader's decoder does too)."""
    import torchvision.io as tio
    from torchvision.datasets import folder

    found = [folder.default_loader, folder.pil_loader, folder.accimage_loader]
    # torchvision.io's image decoding is deprecated since 0.29, to be removed: recognised while it exists
    found += [getattr(tio, name) for name in ("decode_image", "read_image") if hasattr(tio, name)]
    return tuple(found)


def lift_blocker(dataset: Any) -> str | None:
    """Why the images of ``dataset`` cannot be read as file bytes instead, or None when they can.

    Liftable: a folder dataset in torchvision's style (``samples`` of ``(path, target)``
    and a ``loader`` that only decodes: ``default_loader``, ``pil_loader``,
    ``decode_image``), whose items are ``(transform(loader(path)), target_transform(target))``.
    """
    samples = getattr(dataset, "samples", None)
    loader = getattr(dataset, "loader", None)
    if not isinstance(samples, Sequence) or loader is None:
        return f"{type(dataset).__name__} has no samples list and loader (a torchvision DatasetFolder has both)"
    if samples and not (isinstance(samples[0], (tuple, list)) and len(samples[0]) == 2
                        and isinstance(samples[0][0], (str, os.PathLike))):
        return f"{type(dataset).__name__}.samples does not hold (path, target) pairs"
    if not any(loader is known for known in _decoding_loaders()):
        name = getattr(loader, "__qualname__", type(loader).__name__)
        return (f"its loader {name} is not one of torchvision's decoding loaders (default_loader, pil_loader, "
                f"decode_image), so reading the file's bytes instead could change what the transform sees")
    return None


class FileBytes(_FileSamples):
    """A torchvision folder dataset whose items are ``(file bytes, target)`` instead of images.

    ``samples``, ``targets``, ``classes`` and ``class_to_idx`` are the dataset's;
    ``target_transform`` still applies. The DataLoader uses this when it runs the
    dataset's image ``transform`` itself (see ``torchdali.DataLoader``); the
    original dataset is ``.dataset``.
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.samples = dataset.samples
        self.target_transform = getattr(dataset, "target_transform", None)
        for name in ("targets", "classes", "class_to_idx", "root"):
            if hasattr(dataset, name):
                setattr(self, name, getattr(dataset, name))

    def __len__(self) -> int:
        return len(self.dataset)

    def __repr__(self) -> str:
        return f"FileBytes({self.dataset!r})"


# --------------------------------------------------------------------------- #
# Detection and segmentation
# --------------------------------------------------------------------------- #

def _read_sample_file(path: str, index: int) -> torch.Tensor:
    try:
        return read_file(path)
    except OSError as e:
        raise SampleError.for_sample(index, path, "cannot read file", e) from None


def _header_size(path: str) -> tuple[int, int] | None:
    """``(H, W)`` from the image file's header (PIL reads no pixels), None when PIL cannot tell.

    No EXIF rotation, as torchvision's datasets open images (``Image.open(...).convert("RGB")``).
    """
    from PIL import Image

    try:
        with Image.open(path) as im:
            return im.height, im.width
    except Exception:  # an unreadable image is the decoder's to report, with its own reason
        return None


class _TargetFiles(torch.utils.data.Dataset):
    """Items ``(file bytes, target)`` where the target is built from annotations (``_target``), not from the
    image: ``file_item`` hands ``(path, target)`` to the loader, which then reads the file itself."""

    transform: Callable | None
    target_transform: Callable | None

    def path_of(self, index: int) -> str:
        raise NotImplementedError

    def _target(self, index: int) -> Any:
        raise NotImplementedError

    def _final_target(self, index: int) -> Any:
        target = self._target(index)
        return self.target_transform(target) if self.target_transform is not None else target

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        data: Any = _read_sample_file(self.path_of(index), index)
        target = self._final_target(index)
        if self.transform is not None:
            data = self.transform(data)
        return data, target

    def file_item(self, index: int) -> tuple[str, Any] | None:
        """``(path, target)`` when item ``index`` is ``(read_file(path), target)``: the
        DataLoader's GPU path then reads the file into its staging memory itself. None
        with a ``transform`` or a subclass's own ``__getitem__``."""
        if self.transform is not None or type(self).__getitem__ is not _TargetFiles.__getitem__:
            return None
        return self.path_of(index), self._final_target(index)


#: the target keys of ``CocoDetection``: COCO's own and those torchvision's v2 wrapper adds
COCO_TARGET_KEYS = frozenset({"segmentation", "area", "iscrowd", "image_id", "bbox", "category_id",
                              "boxes", "masks", "labels"})
#: the keys ``CocoDetection`` returns by default (``target_keys=None``), as torchvision's wrapper
COCO_DEFAULT_KEYS = frozenset({"image_id", "boxes", "labels"})


_PIL_LIMIT = object()  # max_image_pixels default: Pillow's Image.MAX_IMAGE_PIXELS, as the DataLoader's


def _pixel_limit(max_image_pixels: int | None | object) -> int | None:
    if max_image_pixels is _PIL_LIMIT:
        from .decode._limits import default_max_image_pixels

        max_image_pixels = default_max_image_pixels()
    if max_image_pixels is None:
        return None
    if isinstance(max_image_pixels, bool) or int(max_image_pixels) < 1:  # type: ignore[call-overload]
        raise ValueError(f"max_image_pixels must be a positive int or None, got {max_image_pixels!r}")
    return int(max_image_pixels)  # type: ignore[call-overload]


def _load_json(path: str) -> Any:
    """The JSON value in file ``path``; a file that is not JSON raises ValueError naming it and where it breaks."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        return json.loads(raw.decode("utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"annotation file {path} is not valid JSON: line {e.lineno} column {e.colno}: {e.msg} "
                         f"(a truncated or hand-edited file?)") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"annotation file {path} is not UTF-8 text (JSON): byte {e.start}: {e.reason}") from None


def _coco_target_keys(target_keys: Iterable[str] | str | None) -> frozenset[str]:
    if target_keys is None:
        return COCO_DEFAULT_KEYS
    if target_keys == "all":
        return COCO_TARGET_KEYS
    keys = frozenset([target_keys] if isinstance(target_keys, str) else target_keys)
    extra = keys - COCO_TARGET_KEYS
    if extra:
        raise ValueError(f"Target keys {sorted(extra)} are not available")
    return keys


class CocoDetection(_TargetFiles):
    """COCO detection: ``(encoded bytes, target)``, the target as torchvision gives it from
    ``wrap_dataset_for_transforms_v2(torchvision.datasets.CocoDetection(root, annFile), target_keys)``.

    The target is a dict of the ``target_keys`` (default ``image_id``, ``boxes``,
    ``labels``; ``"all"`` or any subset of ``COCO_TARGET_KEYS``): ``image_id`` (int),
    ``boxes`` (``tv_tensors.BoundingBoxes``, XYXY, converted from COCO's XYWH ``bbox``,
    ``canvas_size`` the image's ``(height, width)``), ``labels`` (int64 category ids),
    ``masks`` (``tv_tensors.Mask`` ``[K, H, W]`` uint8, one per annotation, rasterised from
    its polygons or RLE only when asked for, in the worker that reads the item), and
    COCO's own keys as lists with one value per annotation. Images are ``ids`` (sorted
    image ids) and their annotations are in the annotation file's order, as pycocotools
    lists them. pycocotools is not needed.

    Differences from torchvision, each where torchvision fails, must decode or loses precision:

    * ``boxes`` are always float32. torchvision's wrapper infers the dtype from the JSON,
      so an image whose coordinates are all integers gets int64 boxes, which its
      transforms then truncate after every step (and which the loader refuses).

    * ``canvas_size`` is the annotation file's ``height``/``width`` of the image (from
      the image's header only where the file lacks them), where torchvision decodes
      the image and takes its size. The two agree for any well-formed COCO file.
    * An image without annotations gets every requested key, empty (``boxes`` ``[0, 4]``,
      ``labels`` ``[0]``, ``masks`` ``[0, H, W]``, the lists ``[]``); torchvision's wrapper
      gives ``{"image_id": id}`` alone, which its SanitizeBoundingBoxes and detection
      models then refuse.
    * A segmentation whose mask cannot be made (an RLE whose size is not the image's or
      whose runs do not cover it exactly; a polygon with an odd number of coordinates,
      fewer than 3 points, a non-finite coordinate or a point further than the image's
      size outside it), a ``bbox`` that is not four numbers and a missing file raise
      ``SampleError`` naming the sample's index and path; so does, with ``masks``
      requested, an image whose size in the annotation file is not the one its header
      gives or is over ``max_image_pixels`` (default: Pillow's ``Image.MAX_IMAGE_PIXELS``,
      as the DataLoader's; None: no limit), before any mask is drawn. The DataLoader's
      ``on_error`` applies to all of them. An empty polygon list gives an empty mask
      (pycocotools raises IndexError). An annotation file that is not JSON raises
      ValueError naming the file, line and column.

    ``transform`` runs on the bytes tensor if given, ``target_transform`` on the target
    dict; image transforms belong to the DataLoader.
    """

    def __init__(self, root: str | os.PathLike, annFile: str | os.PathLike, transform: Callable | None = None,
                 target_transform: Callable | None = None,
                 target_keys: Iterable[str] | str | None = None,
                 max_image_pixels: int | None | object = _PIL_LIMIT) -> None:
        self.root = os.fspath(root)
        self.annFile = os.fspath(annFile)
        self.transform = transform
        self.target_transform = target_transform
        self.target_keys = _coco_target_keys(target_keys)
        self.max_image_pixels = _pixel_limit(max_image_pixels)
        data = _load_json(self.annFile)
        if not isinstance(data, dict) or not isinstance(data.get("images"), list):
            raise ValueError(f"{self.annFile}: a COCO annotation file is a JSON object with an 'images' list")
        anns = data.get("annotations", [])
        for what, entries, needed in (("images", data["images"], ("id", "file_name")),
                                      ("annotations", anns, ("id", "image_id"))):
            bad = next((i for i, e in enumerate(entries) if not isinstance(e, dict) or any(k not in e for k in needed)),
                       None)
            if bad is not None:
                raise ValueError(f"{self.annFile}: {what}[{bad}] must be an object with {' and '.join(needed)}, "
                                 f"got {entries[bad]!r:.200}")
        # the indexes pycocotools' COCO builds: a later image or annotation with the same id wins
        self.imgs: dict[Any, dict] = {img["id"]: img for img in data["images"]}
        self.anns: dict[Any, dict] = {}
        self._img_to_anns: dict[Any, list[dict]] = defaultdict(list)
        for ann in anns:
            self._img_to_anns[ann["image_id"]].append(ann)
            self.anns[ann["id"]] = ann
        self.cats: dict[Any, dict] = {cat["id"]: cat for cat in data.get("categories", [])}
        self.ids = sorted(self.imgs)

    def __len__(self) -> int:
        return len(self.ids)

    def path_of(self, index: int) -> str:
        return os.path.join(self.root, self.imgs[self.ids[index]]["file_name"])

    def annotations(self, index: int) -> list[dict]:
        """Image ``index``'s raw COCO annotations, as torchvision's unwrapped CocoDetection returns them."""
        # by id, as pycocotools' loadAnns(getAnnIds(image_id)) looks them up
        return [self.anns[ann["id"]] for ann in self._img_to_anns.get(self.ids[index], [])]

    def canvas_size(self, index: int) -> tuple[int, int]:
        """``(H, W)`` of image ``index``: the annotation file's, else its header's."""
        img = self.imgs[self.ids[index]]
        if "height" in img and "width" in img:
            return int(img["height"]), int(img["width"])
        size = _header_size(self.path_of(index))
        if size is None:
            raise SampleError.for_sample(index, self.path_of(index), "no image size",
                                         "the annotation file gives no height/width and the header is unreadable")
        return size

    def _check_canvas(self, index: int, height: int, width: int) -> None:
        """Raise SampleError when image ``index``'s size in the annotation file is over ``max_image_pixels`` or not
        the size its file's header gives: its masks would take ``height * width`` bytes each."""
        path = self.path_of(index)
        limit = self.max_image_pixels
        if limit is not None and height * width > limit:
            raise SampleError.for_sample(index, path, "refused before drawing its masks",
                                         f"the annotation file gives the image {height}x{width} pixels "
                                         f"({height * width:,}), more than max_image_pixels={limit:,}; pass a larger "
                                         f"max_image_pixels (or None) to CocoDetection if such images are expected")
        size = _header_size(path)
        if size is not None and size != (height, width):
            raise SampleError.for_sample(index, path, "the annotation's image size is not the file's",
                                         f"the annotation file gives {height}x{width} (HxW), the image's header "
                                         f"{size[0]}x{size[1]}")

    def _target(self, index: int) -> dict[str, Any]:
        try:
            return self._coco_target(index)
        except SampleError:
            raise
        except (ValueError, TypeError, KeyError, IndexError) as e:
            raise SampleError.for_sample(index, self.path_of(index), "bad COCO annotation",
                                         f"{type(e).__name__}: {e}") from None

    def _coco_target(self, index: int) -> dict[str, Any]:
        from torchvision import tv_tensors

        keys = self.target_keys
        image_id = self.ids[index]
        anns = self.annotations(index)
        height, width = self.canvas_size(index)
        target: dict[str, Any] = {}
        if "image_id" in keys:
            target["image_id"] = image_id
        if "boxes" in keys:
            bboxes = [ann["bbox"] for ann in anns]
            bad = [i for i, b in enumerate(bboxes) if not (isinstance(b, (list, tuple)) and len(b) == 4)]
            if bad:
                raise ValueError(f"annotation {anns[bad[0]].get('id')}: bbox must be [x, y, width, height], "
                                 f"got {bboxes[bad[0]]!r}")
            numbers = np.array(bboxes) if anns else np.zeros((0, 4), dtype=np.float32)
            if numbers.dtype.kind in "iuf":  # (torch.tensor's float32 of the same numbers, without its list walk)
                xyxy = torch.from_numpy(numbers.astype(np.float32))
            else:
                xyxy = torch.tensor(bboxes, dtype=torch.float32)  # what it makes of the rest, or its error
            xyxy[:, 2:] += xyxy[:, :2]  # XYWH -> XYXY as convert_bounding_box_format computes it, in place
            # BoundingBoxes(xyxy, format="XYXY", canvas_size=...) without its checks (an [N, 4] float tensor)
            target["boxes"] = _bounding_boxes(xyxy, "XYXY", (height, width), "soft")  # (the constructor's default)
        if "masks" in keys:
            if anns:  # [K, H, W] bytes: the size is checked before any of them is drawn
                self._check_canvas(index, height, width)
            masks = [segmentation_to_mask(ann["segmentation"], height, width) for ann in anns]
            stacked = np.stack(masks) if masks else np.zeros((0, height, width), dtype=np.uint8)
            target["masks"] = tv_tensors.Mask(torch.from_numpy(stacked))
        if "labels" in keys:
            labels = [ann["category_id"] for ann in anns]
            if labels and all(type(v) is int for v in labels):
                target["labels"] = torch.from_numpy(np.array(labels, dtype=np.int64))
            else:
                target["labels"] = torch.tensor(labels) if labels else torch.zeros(0, dtype=torch.int64)
        for key in sorted(keys - {"image_id", "boxes", "masks", "labels"}):
            target[key] = [ann[key] for ann in anns]
        return target


class _SegmentationPairs(_TargetFiles):
    """Items ``(image bytes, tv_tensors.Mask)`` of ``self.images`` and ``self.masks`` (paths, paired by position)."""

    images: list[str]
    masks: list[str]

    def __len__(self) -> int:
        return len(self.images)

    def path_of(self, index: int) -> str:
        return self.images[index]

    def _target(self, index: int) -> Any:
        from PIL import Image
        from torchvision import tv_tensors

        path, mask_path = self.images[index], self.masks[index]
        size = _header_size(path)
        mask, mask_size = None, None
        try:
            with Image.open(mask_path) as im:
                mask_size = im.height, im.width
                if size is None or mask_size == size:  # (a mask of another size is refused before it is decoded)
                    im.load()
                    # as torchvision's wrapper: Mask(PIL image) is pil_to_tensor, [C, H, W] ([1, H, W] for palettes)
                    mask = tv_tensors.Mask(im)
        except Exception as e:  # PIL raises many types on a bad file
            raise SampleError.for_sample(index, path, f"cannot read mask {mask_path}",
                                         f"{type(e).__name__}: {e}") from None
        if mask is None:
            raise SampleError.for_sample(index, path, "mask does not fit its image",
                                         f"mask {mask_path} is {mask_size[0]}x{mask_size[1]} (HxW), the image "
                                         f"{size[0]}x{size[1]}")
        return mask


class VOCSegmentation(_SegmentationPairs):
    """Pascal VOC segmentation: ``(encoded JPEG bytes, tv_tensors.Mask)``, as torchvision gives it from
    ``wrap_dataset_for_transforms_v2(torchvision.datasets.VOCSegmentation(root, year, image_set))``.

    The same folder layout (``root/VOCdevkit/VOC2012/ImageSets/Segmentation/<image_set>.txt``,
    ``JPEGImages/<name>.jpg``, ``SegmentationClass/<name>.png``; torchvision's ``base_dir``
    per year), years and image sets; no download. The mask is the PNG decoded on the CPU
    by PIL, ``[1, H, W]`` uint8 palette indices (255, VOC's void border, kept), exactly
    torchvision's ``Mask(Image.open(path))``. Differences: a mask whose size is not its
    image's (read from the image's header) or an unreadable mask or image file raise
    ``SampleError`` naming the sample's index and path, where torchvision returns the
    pair as it is or raises the reader's own error.
    """

    def __init__(self, root: str | os.PathLike, year: str = "2012", image_set: str = "train",
                 transform: Callable | None = None, target_transform: Callable | None = None) -> None:
        from torchvision.datasets.utils import verify_str_arg
        from torchvision.datasets.voc import DATASET_YEAR_DICT

        self.root = os.fspath(root)
        self.year = verify_str_arg(year, "year", valid_values=[str(yr) for yr in range(2007, 2013)])
        valid_sets = ["train", "trainval", "val"] + (["test"] if year == "2007" else [])
        self.image_set = verify_str_arg(image_set, "image_set", valid_sets)
        key = "2007-test" if year == "2007" and image_set == "test" else year
        voc_root = os.path.join(self.root, DATASET_YEAR_DICT[key]["base_dir"])
        if not os.path.isdir(voc_root):
            raise RuntimeError(f"VOC dataset not found: {voc_root} is not a folder (torchdali does not download it; "
                               f"torchvision.datasets.VOCSegmentation(root, year, download=True) does)")
        split_f = os.path.join(voc_root, "ImageSets", "Segmentation", image_set.rstrip("\n") + ".txt")
        with open(split_f) as f:
            names = [x.strip() for x in f.readlines()]
        self.images = [os.path.join(voc_root, "JPEGImages", x + ".jpg") for x in names]
        self.masks = [os.path.join(voc_root, "SegmentationClass", x + ".png") for x in names]
        self.targets = self.masks  # torchvision's name for the mask paths
        self.transform = transform
        self.target_transform = target_transform


class SegmentationFolder(_SegmentationPairs):
    """Images and their segmentation masks in two folders, paired by file name without extension.

    ``images_dir/<name>.<image ext>`` pairs with ``masks_dir/<name><mask_ext>`` (default
    ``.png``); images are files with an ``IMG_EXTENSIONS`` extension, sorted by name.
    Items are ``(encoded bytes, tv_tensors.Mask)`` as ``VOCSegmentation`` returns them.
    An image without a mask raises ``FileNotFoundError`` here, naming it.
    """

    def __init__(self, images_dir: str | os.PathLike, masks_dir: str | os.PathLike, mask_ext: str = ".png",
                 transform: Callable | None = None, target_transform: Callable | None = None) -> None:
        self.images_dir, self.masks_dir = os.fspath(images_dir), os.fspath(masks_dir)
        names = sorted(n for n in os.listdir(self.images_dir) if n.lower().endswith(IMG_EXTENSIONS))
        self.images = [os.path.join(self.images_dir, n) for n in names]
        self.masks = [os.path.join(self.masks_dir, os.path.splitext(n)[0] + mask_ext) for n in names]
        missing = [m for m in self.masks if not os.path.isfile(m)]
        if missing:
            raise FileNotFoundError(f"{len(missing)} of {len(names)} images in {self.images_dir} have no mask in "
                                    f"{self.masks_dir}, e.g. {missing[0]}")
        self.transform = transform
        self.target_transform = target_transform
