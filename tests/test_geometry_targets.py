"""Boxes and masks through ``td.DataLoader``, on both paths, against torchvision.transforms.v2.

Datasets return ``(image, target)`` with the target a dict of ``BoundingBoxes``, ``Mask``,
labels and an image id (torchvision's detection style), a bare Mask (segmentation), or
a tiny COCO set read by ``td.datasets.CocoDetection``. Each batch's targets are compared,
sample by sample, with torchvision v2 applied to the same sample with the parameters
torchdali drew for it (the plan's draw replayed leaf by leaf, as ``test_targets.py`` and
``test_padding.py`` do): boxes within 1e-4 with the same format, dtype and canvas_size,
masks exactly, every other entry unchanged. The target-only steps (SanitizeBoundingBoxes,
ClampBoundingBoxes, ConvertBoundingBoxFormat) run where they stand. Bad targets raise
SampleError naming index and path (on_error replaces them); what cannot be mapped yet is
refused. The GPU path runs the same checks in ``cuda``-marked twins.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torchvision.transforms.v2 as v2  # noqa: E402
import torchvision.transforms.v2.functional as TF  # noqa: E402
from torch.utils._pytree import tree_flatten, tree_unflatten  # noqa: E402
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402

import torchdali as td  # noqa: E402
from csrc_triton import layout  # noqa: E402
from torchdali import _rng  # noqa: E402
from torchdali import transforms as T  # noqa: E402
from torchdali.errors import SampleError  # noqa: E402
from torchdali.transforms import _geometry as G  # noqa: E402
from torchdali.transforms import _ragged  # noqa: E402
from torchdali.transforms._box_ops import (  # noqa: E402
    ClampBoundingBoxes, ConvertBoundingBoxFormat, SanitizeBoundingBoxes,
)
from torchdali.transforms._plan import Plan, compile_transforms  # noqa: E402
from torchdali.transforms._target_plan import TargetPlan  # noqa: E402
from torchdali.transforms._targets import BoxTrack  # noqa: E402

from ._helpers import jpeg_bytes  # noqa: E402

BOX_ATOL = 1e-4
SEED = 5
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
MIXED = [(37, 53), (64, 64), (41, 30), (50, 61), (33, 47)]  # odd and even, portrait and landscape


# --------------------------------------------------------------------------- #
# Datasets
# --------------------------------------------------------------------------- #

def _boxes(rng: np.random.Generator, h: int, w: int, n: int, outside: bool) -> np.ndarray:
    """``n`` XYXY boxes with fractional corners; the first ones touch the image's edges, and with
    ``outside`` one reaches past it and one is tiny (SanitizeBoundingBoxes drops it)."""
    x = np.sort(rng.uniform(0, w, size=(n, 2)), axis=1)
    y = np.sort(rng.uniform(0, h, size=(n, 2)), axis=1)
    boxes = np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], axis=1)
    special = [[0, 0, w, h], [1.5, h - 2.5, w, h]]
    if outside:
        special += [[-3.5, 2.0, 6.25, 9.0], [4.0, 4.0, 4.5, 4.75]]
    k = min(n, len(special))
    if k:
        boxes[:k] = np.array(special[:k], dtype=np.float64)
    return boxes


class Detection(torch.utils.data.Dataset):
    """Decoded HWC uint8 images with torchvision-style detection targets: ``boxes``
    (BoundingBoxes of ``fmt``), ``masks`` (one [H, W] uint8 mask per box), ``labels``, ``image_id``.
    Sample 1 has no boxes. ``jpeg``: the images as JPEG bytes (what the GPU path decodes)."""

    def __init__(self, sizes=MIXED, fmt: str = "XYXY", dtype: torch.dtype = torch.float32, outside: bool = False,
                 jpeg: bool = False, masks: bool = True) -> None:
        self.sizes, self.fmt, self.dtype, self.outside, self.jpeg, self.masks = (
            list(sizes), fmt, dtype, outside, jpeg, masks)

    def __len__(self) -> int:
        return len(self.sizes)

    def image(self, i: int) -> np.ndarray:
        h, w = self.sizes[i]
        yy, xx = np.mgrid[0:h, 0:w]
        img = np.stack([(xx * 255 // max(w - 1, 1)), (yy * 255 // max(h - 1, 1)), (xx + yy) % 256], -1)
        return img.astype(np.uint8)

    def target(self, i: int) -> dict:
        h, w = self.sizes[i]
        rng = np.random.default_rng(100 + i)
        n = 0 if i == 1 else 2 + i % 4
        xyxy = torch.from_numpy(_boxes(rng, h, w, n, self.outside)).to(self.dtype).reshape(n, 4)
        data = TF.convert_bounding_box_format(xyxy, old_format="XYXY", new_format=self.fmt)
        target = {"boxes": tv_tensors.BoundingBoxes(data, format=self.fmt, canvas_size=(h, w)),
                  "labels": torch.arange(1, n + 1, dtype=torch.int64), "image_id": 1000 + i}
        if self.masks:
            target["masks"] = tv_tensors.Mask(torch.from_numpy(rng.integers(0, 2, size=(n, h, w), dtype=np.uint8)))
        return target

    def __getitem__(self, i: int):
        img = self.image(i)
        data = np.frombuffer(jpeg_bytes(img, quality=95), dtype=np.uint8) if self.jpeg else img
        return data, self.target(i)


class Segmentation(Detection):
    """Images with a bare ``Mask`` [1, H, W] of labels 0..20 and 255 as the target (VOC's)."""

    def target(self, i: int) -> Any:
        h, w = self.sizes[i]
        rng = np.random.default_rng(200 + i)
        m = rng.integers(0, 21, size=(1, h, w), dtype=np.uint8)
        m[:, : h // 5] = 255
        return tv_tensors.Mask(torch.from_numpy(m))


# --------------------------------------------------------------------------- #
# torchvision with torchdali's draw
# --------------------------------------------------------------------------- #

def _mode(code: int) -> InterpolationMode:
    return InterpolationMode(layout.filter_name(code))


def _on_leaves(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A functional applied to every tv_tensor of a sample (plain tensors such as labels pass)."""
    def apply(sample: Any) -> Any:
        leaves, spec = tree_flatten(sample)
        return tree_unflatten([fn(x) if isinstance(x, tv_tensors.TVTensor) else x for x in leaves], spec)
    return apply


def _whole(t: Any) -> Callable[[Any], Any]:
    return lambda sample: t(*sample)


def _pad(pads: list[int], fill: Any) -> Callable[[Any], Any] | None:
    """torchvision's ``pad`` of every tv_tensor by ``pads`` (left, top, right, bottom), each with its fill."""
    return _on_leaves(lambda x: TF.pad(x, pads, fill=_fill(fill, x))) if any(pads) else None


def _fill(fill: Any, x: Any) -> Any:
    """The fill torchvision's transforms pad ``x`` with (``_get_fill`` of ``_setup_fill_arg``: per type)."""
    fill = v2._utils._setup_fill_arg(dict(fill) if isinstance(fill, dict) else fill)
    return v2._utils._convert_fill_arg(v2._utils._get_fill(fill, type(x)))


def torchvision_ops(plan: Plan, sizes: list[tuple[int, int]], keys: np.ndarray,
                    boxes: list[np.ndarray] | None = None) -> list[list[Callable]]:
    """Each sample's steps as torchvision v2 callables on ``(image, target)``, with torchdali's draw
    (``Plan._draw`` watched leaf by leaf; ``boxes``: each sample's XYXY boxes, for RandomIoUCrop)."""
    ops: list[list[Callable]] = [[] for _ in sizes]
    starts = np.cumsum([0] + [len(b) for b in boxes or []])

    def watch(t: Any, g: G.BatchGeometry, p: dict, run: Callable) -> None:
        hw = np.stack([g.height, g.width], -1).round().astype(int)
        for b in range(len(sizes)):
            if isinstance(t, T.RandomResizedCrop):
                box = [int(p[k][b]) for k in ("top", "left", "height", "width")]
                op = _on_leaves(lambda x, box=box, t=t: TF.resized_crop(x, *box, size=list(t.size),
                                                                        interpolation=_mode(t.filter)))
            elif isinstance(t, T.Resize):
                op = _whole(v2.Resize(t.size, interpolation=_mode(t.filter), max_size=t.max_size))
            elif isinstance(t, T.CenterCrop):
                op = _whole(v2.CenterCrop(t.size))
            elif isinstance(t, T.RandomCrop):
                op = _random_crop(t, tuple(hw[b]), int(p["top"][b]), int(p["left"][b]))
            elif isinstance(t, T.RandomVerticalFlip):  # before its base class
                op = _on_leaves(TF.vertical_flip) if p["flip"][b] else None
            elif isinstance(t, T.RandomHorizontalFlip):
                op = _on_leaves(TF.horizontal_flip) if p["flip"][b] else None
            elif isinstance(t, T.RandomZoomOut):
                pads = [int(p[k][b]) for k in ("left", "top", "right", "bottom")]
                op = _pad(pads, t.fill)
            elif isinstance(t, T.Pad):
                op = _on_leaves(lambda x, t=t: TF.pad(x, list(t.pads), fill=_fill(t.fill, x),
                                                      padding_mode=t.padding_mode))
            elif isinstance(t, T.PadIfSmaller):  # the segmentation reference's: F.pad with each type's fill
                pads = [0, 0, max(t.size - int(hw[b][1]), 0), max(t.size - int(hw[b][0]), 0)]
                op = _pad(pads, t.fill)
            elif isinstance(t, T.ToDtype) and t.mask_dtype is not None:  # a dtype dict's Mask entry
                op = _whole(v2.ToDtype({tv_tensors.Mask: t.mask_dtype, "others": None}))
            elif isinstance(t, (T.RandomShortestSize, T.RandomResize, T.ScaleJitter)):
                new = [int(p["height"][b]), int(p["width"][b])]
                op = _on_leaves(lambda x, new=new, t=t: TF.resize(x, new, interpolation=_mode(t.filter)))
            elif isinstance(t, T.FixedSizeCrop):
                op = _fixed_size_crop(t, tuple(hw[b]), int(p["top"][b]), int(p["left"][b]))
            elif isinstance(t, T.RandomIoUCrop):
                box = [int(p[k][b]) for k in ("top", "left", "height", "width")]
                left_alone = box == [0, 0, *hw[b]] and p["keep"][starts[b]: starts[b + 1]].all()
                op = None if left_alone else _iou_crop(*box)
            elif isinstance(t, SanitizeBoundingBoxes):
                op = _whole(v2.SanitizeBoundingBoxes(t.min_size, t.min_area, t.labels_getter))
            elif isinstance(t, ClampBoundingBoxes):
                op = _whole(v2.ClampBoundingBoxes(t.clamping_mode))
            elif isinstance(t, ConvertBoundingBoxFormat):
                op = _whole(v2.ConvertBoundingBoxFormat(t.format))
            else:
                assert t.stage in ("epilogue", "meta", "program"), t
                op = None
            if op is not None:
                ops[b].append(op)
        run()

    track = BoxTrack(boxes) if boxes is not None and plan.draws_from_boxes else None
    slots = np.zeros((len(keys), plan.n_slots, layout.SLOT_WIDTH), dtype=np.float32)
    plan._draw(np.array(sizes, dtype=np.float64).reshape(-1, 2), keys, slots, watch, track)
    return ops


def _iou_crop(top: int, left: int, height: int, width: int) -> Callable[[Any], Any]:
    """torchvision's own RandomIoUCrop.transform with our crop; which boxes it zeroes (their centre
    outside the crop) is worked out here, from the boxes torchvision's steps have moved so far."""
    tv = v2.RandomIoUCrop()

    def apply(sample: Any) -> Any:
        boxes = sample[1]["boxes"]
        xyxy = TF.convert_bounding_box_format(boxes.as_subclass(torch.Tensor), old_format=boxes.format,
                                              new_format="XYXY")
        cx, cy = 0.5 * (xyxy[:, 0] + xyxy[:, 2]), 0.5 * (xyxy[:, 1] + xyxy[:, 3])
        inside = (left < cx) & (cx < left + width) & (top < cy) & (cy < top + height)
        params = dict(top=top, left=left, height=height, width=width, is_within_crop_area=inside)
        return _on_leaves(lambda x: tv.transform(x, params))(sample)

    return apply


def _random_crop(t: T.RandomCrop, hw: tuple[int, int], top: int, left: int) -> Callable[[Any], Any]:
    """torchvision's own RandomCrop.transform with the padding its make_params finds and our
    top/left (shifted into its padded image's coordinates)."""
    tv = v2.RandomCrop(t.size, padding=list(t.pads) if t.padding is not None else None,
                       pad_if_needed=t.pad_if_needed, fill=t.fill, padding_mode=t.padding_mode)

    def apply(sample: Any) -> Any:
        params = tv.make_params([tv_tensors.Image(torch.zeros(3, *hw, dtype=torch.uint8))])
        params.update(top=top + params["padding"][1], left=left + params["padding"][0], needs_crop=True)
        return _on_leaves(lambda x: tv.transform(x, params))(sample)

    return apply


def _fixed_size_crop(t: Any, hw: tuple[int, int], top: int, left: int) -> Callable[[Any], Any]:
    """The detection reference's FixedSizeCrop with our offset: crop (when the image is larger), drop
    the boxes left empty (``x0 < x1 and y0 < y1`` stay) with their labels and masks, pad below and right
    (the image with the fill, masks with zeros)."""
    (h, w), (ch, cw) = hw, t.size
    nh, nw = min(h, ch), min(w, cw)
    fill = t.fill.get(tv_tensors.Image, t.fill.get("others", 0)) if isinstance(t.fill, dict) else t.fill
    fill = list(fill) if isinstance(fill, (list, tuple)) else fill

    def pad(x: Any) -> Any:
        return TF.pad(x, [0, 0, cw - nw, ch - nh], fill=0 if isinstance(x, tv_tensors.Mask) else fill)

    def apply(sample: Any) -> Any:
        if (nh, nw) != (h, w):
            sample = _on_leaves(lambda x: TF.crop(x, top, left, nh, nw))(sample)
            image, target = sample
            b = target["boxes"]
            valid = (b[:, 0] < b[:, 2]) & (b[:, 1] < b[:, 3])
            target = {**target, "boxes": tv_tensors.wrap(b[valid], like=b), "labels": target["labels"][valid],
                      "masks": tv_tensors.Mask(target["masks"][valid])}
            sample = (image, target)
        return _on_leaves(pad)(sample)

    return apply


def expected(ds: Detection, transforms: Any, seed: int = SEED, positions: Any = None) -> list[tuple]:
    """torchvision's ``(image, target)`` for every sample of ``ds``, with the loader's draw of epoch 0."""
    plan = compile_transforms(transforms)
    positions = np.arange(len(ds)) if positions is None else np.asarray(positions)
    keys = _rng.sample_keys(seed, 0, positions)
    sizes = [tuple(ds.sizes[i]) for i in positions]
    boxes = TargetPlan.of(plan).draw_boxes([ds.target(int(i)) for i in positions])
    out = []
    for b, ops in enumerate(torchvision_ops(plan, sizes, keys, boxes)):
        i = int(positions[b])
        sample = (tv_tensors.Image(torch.from_numpy(ds.image(i)).permute(2, 0, 1).contiguous()), ds.target(i))
        for op in ops:
            sample = op(sample)
        out.append(sample)
    return out


def assert_target(got: Any, want: Any, where: str, device: str = "cpu") -> None:
    """One sample's target against torchvision's: same structure, boxes within BOX_ATOL, the rest exact."""
    g_leaves, g_spec = tree_flatten(got)
    w_leaves, w_spec = tree_flatten(want)
    assert g_spec == w_spec, f"{where}: {g_spec} != {w_spec}"
    for k, (g, w) in enumerate(zip(g_leaves, w_leaves)):
        at = f"{where}, leaf {k}"
        if not isinstance(w, torch.Tensor):
            assert g == w, at
            continue
        assert type(g) is type(w), (at, type(g), type(w))
        assert g.device.type == device, (at, g.device)
        assert g.dtype == w.dtype and g.shape == w.shape, (at, g.dtype, w.dtype, g.shape, w.shape)
        g_plain, w_plain = g.as_subclass(torch.Tensor).cpu(), w.as_subclass(torch.Tensor)
        if isinstance(w, tv_tensors.BoundingBoxes):
            assert g.format == w.format and tuple(g.canvas_size) == tuple(w.canvas_size), (at, g, w)
            assert getattr(g, "clamping_mode", None) == getattr(w, "clamping_mode", None), at
            torch.testing.assert_close(g_plain, w_plain, atol=BOX_ATOL, rtol=0, msg=lambda m: f"{at}: {m}")
        else:
            bad = (g_plain != w_plain).nonzero()
            assert len(bad) == 0, f"{at}: {len(bad)} values differ, first at {bad[0].tolist()}"


def run_loader(ds: Any, transforms: Any, device: str, batch_size: int = 3, **kw) -> list[tuple]:
    """Every sample's ``(image, target)`` as the loop gets them (checking the batch's form)."""
    loader = td.DataLoader(ds, batch_size=batch_size, transforms=transforms, device=device, seed=SEED, **kw)
    out = []
    for images, targets in loader:
        assert type(targets) is not dict and isinstance(targets, list) and len(targets) == len(images)
        if isinstance(images, list):
            assert len({tuple(im.shape) for im in images}) > 1  # stacked whenever the sizes agree
        out.extend(zip(_ragged.unbind(images), targets))
    return out


def check_against_torchvision(ds: Any, transforms: Any, device: str, **kw) -> None:
    got = run_loader(ds, transforms, device, **kw)
    want = expected(ds, transforms)
    assert len(got) == len(want) == len(ds)
    for i, ((image, target), (w_image, w_target)) in enumerate(zip(got, want)):
        assert image.device.type == device and tuple(image.shape[-2:]) == tuple(w_image.shape[-2:]), (i, image.shape)
        assert_target(target, w_target, f"sample {i}", device)


# --------------------------------------------------------------------------- #
# Parity, through the loader
# --------------------------------------------------------------------------- #

PIPELINES: dict[str, Callable[[], list]] = {
    "hflip": lambda: [T.RandomHorizontalFlip()],
    "vflip": lambda: [T.RandomVerticalFlip()],
    "resize_hw": lambda: [T.Resize((40, 29))],
    "resize_shorter_side": lambda: [T.Resize(23)],
    "random_resized_crop": lambda: [T.RandomResizedCrop((33, 26), scale=(0.2, 1.0))],
    "center_crop": lambda: [T.CenterCrop((25, 21))],
    "center_crop_larger": lambda: [T.CenterCrop((70, 101))],
    "random_crop_padding": lambda: [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip()],
    "random_crop_pad_if_needed": lambda: [T.RandomCrop((44, 60), padding=(1, 2), pad_if_needed=True)],
    "resize_center_crop_flip": lambda: [T.Resize(40), T.CenterCrop(35), T.RandomHorizontalFlip(),
                                        T.ToDtype(torch.float32, scale=True)],
    # the detection references' steps (SSD's zoom out, multiscale's shortest side)
    "zoom_out_flip_resize": lambda: [T.RandomZoomOut(fill=0, side_range=(1.0, 2.0), p=0.7),
                                     T.RandomHorizontalFlip(), T.Resize((40, 40))],
    "shortest_size": lambda: [T.RandomShortestSize([20, 24, 28], max_size=40), T.RandomHorizontalFlip()],
    # the detection reference's crop drops the boxes it empties, with their labels and masks
    "fixed_size_crop": lambda: [T.FixedSizeCrop((30, 40)), T.RandomHorizontalFlip()],
    "resize_fixed_size_crop": lambda: [T.Resize((70, 80)), T.FixedSizeCrop((36, 36), fill=0),
                                       SanitizeBoundingBoxes()],
    # SSD: the IoU crop draws from the boxes the zoom out moved, and zeroes the boxes it leaves out
    "ssd": lambda: [T.RandomZoomOut(fill=0, side_range=(1.0, 2.0)), T.RandomIoUCrop(), T.RandomHorizontalFlip(),
                    T.Resize((40, 40)), SanitizeBoundingBoxes()],
    "ssdlite_unsanitized": lambda: [T.RandomIoUCrop(sampler_options=[0.0, 0.3, 0.7, 1.0]), T.RandomHorizontalFlip()],
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(PIPELINES))
def test_detection_targets_match_torchvision(name, device):
    check_against_torchvision(Detection(jpeg=device == "cuda"), T.Compose(PIPELINES[name]()), device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt,dtype", [("XYWH", torch.float32), ("CXCYWH", torch.float64)])
def test_formats_and_dtypes_are_kept(fmt, dtype, device):
    tf = T.Compose([T.RandomResizedCrop(30, scale=(0.3, 1.0)), T.RandomHorizontalFlip(), T.RandomVerticalFlip()])
    check_against_torchvision(Detection(fmt=fmt, dtype=dtype, outside=True, jpeg=device == "cuda"), tf, device)


@pytest.mark.parametrize("device", DEVICES)
def test_held_out_detection_preset(device):
    """The detection reference's shape of pipeline, as torchvision objects, unchanged."""
    tf = v2.Compose([v2.RandomHorizontalFlip(p=1), v2.Resize((64, 64)), v2.ToDtype(torch.float32, scale=True),
                     v2.SanitizeBoundingBoxes()])
    ds = Detection(outside=True, jpeg=device == "cuda")
    got = run_loader(ds, tf, device, batch_size=5)
    want = expected(ds, tf)
    dropped = 0
    for i, ((image, target), (w_image, w_target)) in enumerate(zip(got, want)):
        assert image.shape == (3, 64, 64) and image.dtype == torch.float32
        assert_target(target, w_target, f"sample {i}", device)
        dropped += len(ds.target(i)["boxes"]) - len(target["boxes"])
    assert dropped > 0  # the sanitize step dropped boxes (and their labels and masks)


@pytest.mark.parametrize("device", DEVICES)
def test_held_out_segmentation_preset(device):
    """The segmentation reference's shape of pipeline on a bare Mask target (VOC's [1, H, W] with 255)."""
    tf = v2.Compose([v2.RandomResizedCrop(48), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                     v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    ds = Segmentation(jpeg=device == "cuda")
    got = run_loader(ds, tf, device, batch_size=5)
    want = expected(ds, tf)
    for i, ((image, target), (_, w_target)) in enumerate(zip(got, want)):
        assert image.shape == (3, 48, 48)
        assert type(target) is tv_tensors.Mask and target.shape == (1, 48, 48)
        assert_target(target, w_target, f"sample {i}", device)
    assert any((t == 255).any() for _, t in got)


class PadIfSmaller(v2.Transform):
    """torchvision's references/segmentation/v2_extras.py PadIfSmaller, as the reference script has it."""

    def __init__(self, size: int, fill: Any = 0) -> None:
        super().__init__()
        self.size = size
        self.fill = v2._utils._setup_fill_arg(fill)

    def make_params(self, sample: Any) -> dict:
        _, height, width = v2._utils.query_chw(sample)
        padding = [0, 0, max(self.size - width, 0), max(self.size - height, 0)]
        return dict(padding=padding, needs_padding=any(padding))

    def transform(self, inpt: Any, params: dict) -> Any:
        if not params["needs_padding"]:
            return inpt
        fill = v2._utils._convert_fill_arg(v2._utils._get_fill(self.fill, type(inpt)))
        return TF.pad(inpt, padding=params["padding"], fill=fill)


class _Labels(Segmentation):
    """Segmentation masks of labels 0..20 only: a 255 in the output comes from padding."""

    def target(self, i: int) -> Any:
        return tv_tensors.Mask(super().target(i).as_subclass(torch.Tensor) % 21)


def _segmentation_presets(base_size: int, crop_size: int) -> tuple[Any, Any]:
    """SegmentationPresetTrain/Eval(backend="tensor", use_v2=True) of torchvision's segmentation reference."""
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    train = v2.Compose([
        v2.PILToTensor(), v2.RandomResize(min_size=int(0.5 * base_size), max_size=int(2.0 * base_size)),
        v2.RandomHorizontalFlip(0.5), PadIfSmaller(crop_size, fill={tv_tensors.Mask: 255, "others": 0}),
        v2.RandomCrop(crop_size),
        v2.ToDtype(dtype={torch.Tensor: torch.float32, tv_tensors.Mask: torch.int64, "others": None}, scale=True),
        v2.Normalize(mean=mean, std=std), v2.ToPureTensor()])
    evaluation = v2.Compose([v2.PILToTensor(), v2.Resize(base_size), v2.ToDtype(torch.float, scale=True),
                             v2.Normalize(mean=mean, std=std), v2.ToPureTensor()])
    return train, evaluation


@pytest.mark.parametrize("device", DEVICES)
def test_segmentation_presets_run_unchanged(device):
    """The segmentation reference's presets, unchanged: PadIfSmaller pads the images with 0 and the masks
    with 255, the masks come out int64 (ToDtype's dict), each as torchvision gives them."""
    train, evaluation = _segmentation_presets(base_size=40, crop_size=48)
    ds = _Labels(jpeg=device == "cuda")
    for tf, mask_dtype in ((train, torch.int64), (evaluation, torch.uint8)):
        got = run_loader(ds, tf, device, batch_size=5)
        want = expected(ds, tf)
        for i, ((image, target), (w_image, w_target)) in enumerate(zip(got, want)):
            assert tuple(image.shape) == tuple(w_image.shape) and image.dtype == torch.float32, (i, image.shape)
            assert type(target) is tv_tensors.Mask and target.dtype == mask_dtype
            assert_target(target, w_target, f"sample {i}", device)
        if tf is train:
            assert all(image.shape == (3, 48, 48) for image, _ in got)
            assert sum(int((t == 255).sum()) for _, t in got) > 0  # the padding's fill
    plan = compile_transforms(train)
    pad = next(t for t in plan.transforms if isinstance(t, T.PadIfSmaller))
    assert pad.size == 48 and "PadIfSmaller" in T.SUPPORTED


class _BoolMasks(Segmentation):
    def target(self, i: int) -> Any:
        return tv_tensors.Mask(super().target(i).as_subclass(torch.Tensor) % 2 == 1)


@pytest.mark.parametrize("device", DEVICES)
def test_a_mask_fill_pads_the_masks_as_torchvision(device):
    """A non-zero Mask fill: each padded pixel takes the fill of the step that padded it (the later of
    two, a Resize between them), cast to the mask's dtype (255 is True in a bool mask)."""
    two = T.Compose([T.Pad([3, 0, 1, 5], fill={tv_tensors.Mask: 7, "others": 0}), T.Resize((41, 37)),
                     T.RandomCrop(40, padding=3, fill={tv_tensors.Mask: 9, "others": 0}),
                     T.RandomHorizontalFlip()])
    check_against_torchvision(Segmentation(jpeg=device == "cuda"), two, device)
    plain = v2.Compose([v2.RandomCrop(60, pad_if_needed=True, fill=5), v2.RandomVerticalFlip()])
    check_against_torchvision(Segmentation(jpeg=device == "cuda"), plain, device)
    bools = T.Compose([PadIfSmaller(58, fill={tv_tensors.Mask: 255, "others": 0}),
                       T.ToDtype({torch.Tensor: torch.float32, tv_tensors.Mask: torch.uint8}, scale=True)])
    check_against_torchvision(_BoolMasks(jpeg=device == "cuda"), bools, device)
    got = run_loader(_BoolMasks(), bools, "cpu", batch_size=5)
    assert all(t.dtype == torch.uint8 and int(t.max()) == 1 for _, t in got)  # True, then 1


def test_a_mask_fill_with_a_padding_mode_or_a_sequence_is_refused():
    """Masks follow constant padding only (a padding mode is refused for them, whatever the fill), and
    torchvision refuses a sequence as a Mask's fill."""
    for tf, message in [
        (T.Compose([T.Pad(2, fill={tv_tensors.Mask: 255, "others": 0}, padding_mode="reflect")]),
         "pads with a padding mode"),
        (T.Compose([T.RandomCrop(30, padding=2, fill=(10, 20, 30))]), "a sequence"),
    ]:
        with pytest.raises(ValueError, match=message):
            next(iter(td.DataLoader(Segmentation(), batch_size=2, transforms=tf, device="cpu")))


@pytest.mark.parametrize("device", DEVICES)
def test_target_only_steps_run_where_they_stand(device):
    """Convert, clamp and sanitize between geometry steps (a later crop sees the sanitized boxes)."""
    tf = T.Compose([T.Resize((50, 40)), ConvertBoundingBoxFormat("CXCYWH"), ClampBoundingBoxes(),
                    SanitizeBoundingBoxes(min_size=3), T.RandomHorizontalFlip(), T.RandomCrop(30, padding=6),
                    ConvertBoundingBoxFormat("XYWH"), SanitizeBoundingBoxes(labels_getter=None)])
    check_against_torchvision(Detection(outside=True, jpeg=device == "cuda"), tf, device)


def test_every_kept_box_keeps_its_label_and_mask():
    tf = T.Compose([T.Resize((20, 20)), SanitizeBoundingBoxes(min_size=2, min_area=6)])
    ds = Detection(outside=True)
    for i, (_, target) in enumerate(run_loader(ds, tf, "cpu", batch_size=5)):
        assert len(target["boxes"]) == len(target["labels"]) == len(target["masks"]), i


@pytest.mark.parametrize("keys", [("boxes", "labels"), ("image_id", "boxes", "Labels", "class_label"),
                                  ("boxes", "class_label", "masks"), ("boxes", "masks")])
def test_the_default_labels_getter_names_torchvisions_key(keys):
    """The positions the default labels_getter names in a flat target dict (found once per key set)
    are those of the tensor torchvision's heuristic picks; without a label key, its error."""
    from torchvision.transforms.v2._utils import _find_labels_default_heuristic

    from torchdali.transforms._target_plan import _labels

    op = SanitizeBoundingBoxes()
    for rows in (3, 4):  # the second target of the key set: through the cache
        target = {k: torch.arange(rows) for k in keys}
        leaves = list(target.values())
        try:
            want = _find_labels_default_heuristic((None, target))
        except ValueError:
            with pytest.raises(ValueError, match="labels"):
                _labels(op, target, leaves)
            continue
        at = _labels(op, target, leaves)
        assert len(at) == 1 and leaves[at[0]] is want


def test_a_callable_labels_getter_gets_the_sample():
    seen = []

    def getter(inputs):
        seen.append(type(inputs[1]))
        return inputs[1]["labels"], inputs[1]["masks"]

    tf = T.Compose([T.Resize((20, 20)), SanitizeBoundingBoxes(min_size=2, labels_getter=getter)])
    check_against_torchvision(Detection(outside=True), tf, "cpu", batch_size=5)
    assert set(seen) == {dict}


def test_workers_and_collate_fn_give_per_sample_pairs():
    """torchvision's detection references: ``collate_fn=lambda b: tuple(zip(*b))``, with workers."""
    tf = T.Compose([T.RandomResizedCrop(30), T.RandomHorizontalFlip()])
    ds = Detection()
    want = expected(ds, tf)
    loader = td.DataLoader(ds, batch_size=2, num_workers=2, transforms=tf, device="cpu", seed=SEED,
                           collate_fn=lambda b: tuple(zip(*b)))
    got = [pair for images, targets in loader for pair in zip(images, targets)]
    assert len(got) == len(ds)
    for i, ((image, target), (_, w_target)) in enumerate(zip(got, want)):
        assert image.shape == (3, 30, 30)
        assert_target(target, w_target, f"sample {i}")


def test_workers_without_collate_fn_pack_the_targets():
    tf = T.Compose([T.Resize(21), T.RandomVerticalFlip()])
    check_against_torchvision(Detection(), tf, "cpu", num_workers=2)


def test_equal_sizes_stack_the_images_and_keep_the_targets_a_list():
    tf = T.Compose([T.RandomHorizontalFlip()])
    ds = Detection(sizes=[(30, 40)] * 4)
    images, targets = next(iter(td.DataLoader(ds, batch_size=4, transforms=tf, device="cpu", seed=SEED)))
    assert isinstance(images, torch.Tensor) and images.shape == (4, 3, 30, 40)
    assert isinstance(targets, list) and [t["image_id"] for t in targets] == [1000, 1001, 1002, 1003]


# --------------------------------------------------------------------------- #
# A tiny COCO set, against torchvision's own dataset
# --------------------------------------------------------------------------- #

def _coco(tmp_path) -> tuple[str, str, list[tuple[int, int]]]:
    from PIL import Image

    root = tmp_path / "images"
    root.mkdir()
    sizes = [(48, 64), (40, 30), (36, 36), (52, 44)]
    images, anns = [], []
    rng = np.random.default_rng(0)
    for k, (h, w) in enumerate(sizes):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / f"{k}.jpg", quality=90)
        images.append({"id": 10 + k, "file_name": f"{k}.jpg", "height": h, "width": w})
        for a in range(0 if k == 2 else 1 + k):  # image 12 has no annotations
            x, y = float(rng.uniform(0, w / 2)), float(rng.uniform(0, h / 2))
            bw, bh = float(rng.uniform(2, w / 2)), float(rng.uniform(2, h / 2))
            anns.append({"id": len(anns) + 1, "image_id": 10 + k, "category_id": 1 + a, "iscrowd": 0,
                         "bbox": [x, y, bw, bh], "area": bw * bh,
                         "segmentation": [[x, y, x + bw, y, x + bw / 2, y + bh]]})
    ann_file = tmp_path / "instances.json"
    ann_file.write_text(json.dumps({"images": images, "annotations": anns,
                                    "categories": [{"id": i, "name": str(i)} for i in range(1, 5)]}))
    return str(root), str(ann_file), sizes


@pytest.mark.parametrize("device", DEVICES)
def test_coco_detection_through_the_loader_matches_torchvision_coco(tmp_path, device):
    pytest.importorskip("pycocotools")
    import torchvision.datasets as tvd

    root, ann_file, _ = _coco(tmp_path)
    keys = ("boxes", "masks", "labels", "image_id")
    ds = td.datasets.CocoDetection(root, ann_file, target_keys=keys)
    theirs = tvd.wrap_dataset_for_transforms_v2(tvd.CocoDetection(root, ann_file), target_keys=keys)
    tf = v2.Compose([v2.RandomHorizontalFlip(), v2.Resize((40, 40)), v2.ToDtype(torch.float32, scale=True),
                     v2.SanitizeBoundingBoxes()])
    got = run_loader(ds, tf, device, batch_size=4)
    plan = compile_transforms(tf)
    sizes = [tuple(ds.canvas_size(i)) for i in range(len(ds))]
    ops = torchvision_ops(plan, sizes, _rng.sample_keys(SEED, 0, np.arange(len(ds))))
    for i, (image, target) in enumerate(got):
        pil, t_target = theirs[i]
        if set(t_target) == {"image_id"}:  # no annotations: torchvision's wrapper gives the id alone
            assert len(target["boxes"]) == 0 and target["image_id"] == t_target["image_id"]
            continue
        sample = (tv_tensors.Image(TF.pil_to_tensor(pil)), t_target)
        for op in ops[i]:
            sample = op(sample)
        assert image.shape == (3, 40, 40)
        assert_target(target, sample[1], f"coco sample {i}", device)


# --------------------------------------------------------------------------- #
# Bad input and what is not mapped yet
# --------------------------------------------------------------------------- #

class _Broken(Detection):
    """Sample 2's target is spoiled by ``spoil(target)``."""

    def __init__(self, spoil: Callable[[dict], dict], **kw) -> None:
        super().__init__(**kw)
        self.spoil = spoil

    def path_of(self, i: int) -> str:
        return f"/data/img{i}.jpg"

    def target(self, i: int) -> dict:
        t = super().target(i)
        return self.spoil(t) if i == 2 else t


def _wrong_mask(t: dict) -> dict:
    return {**t, "masks": tv_tensors.Mask(t["masks"][:, :-1])}


def _five_wide(t: dict) -> dict:
    b = t["boxes"]
    return {**t, "boxes": tv_tensors.BoundingBoxes(torch.zeros(len(b), 5), format="XYXY", canvas_size=b.canvas_size)}


def _wrong_canvas(t: dict) -> dict:
    b = t["boxes"]
    return {**t, "boxes": tv_tensors.wrap(b, like=b, canvas_size=(5, 5))}


def _short_labels(t: dict) -> dict:
    return {**t, "labels": t["labels"][:-1]}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spoil,message", [
    (_wrong_mask, r"sample 2 \(/data/img2\.jpg\): bad target: a mask of shape \(4, 40, 30\) does not cover"),
    (_five_wide, r"sample 2 \(/data/img2\.jpg\): bad target: boxes must be an \[N, 4\]"),
    (_wrong_canvas, r"sample 2 \(/data/img2\.jpg\): bad target: the boxes' canvas_size \(5, 5\)"),
    (_short_labels, r"sample 2 \(/data/img2\.jpg\): bad target: 4 boxes but labels of shape \(3,\)"),
], ids=["mask_size", "boxes_5_wide", "canvas_size", "labels"])
def test_bad_targets_are_sample_errors_that_on_error_handles(spoil, message, device):
    tf = T.Compose([T.Resize((24, 24)), SanitizeBoundingBoxes()])
    ds = _Broken(spoil, jpeg=device == "cuda")
    with pytest.raises(SampleError, match=message) as err:
        list(td.DataLoader(ds, batch_size=5, transforms=tf, device=device, seed=SEED))
    assert err.value.index == 2 and err.value.path == "/data/img2.jpg"
    loader = td.DataLoader(ds, batch_size=5, transforms=tf, device=device, seed=SEED, on_error="skip")
    (images, targets), = list(loader)
    assert len(targets) == 5 and 1002 not in [t["image_id"] for t in targets]
    assert loader.stats().last.skipped == 1


@pytest.mark.parametrize("spoil,error,message", [
    (lambda t: {**t, "boxes": tv_tensors.wrap(t["boxes"].long(), like=t["boxes"])}, TypeError,
     r"sample 2 \(/data/img2\.jpg\): BoundingBoxes are torch\.int64"),
    (lambda t: {**t, "masks": tv_tensors.Mask(t["masks"].float())}, TypeError, r"sample 2 .*label maps"),
    (lambda t: {**t, "more": tv_tensors.BoundingBoxes(torch.zeros(1, 4), format="XYXY", canvas_size=(41, 30))},
     ValueError, r"sample 2 .*needs one BoundingBoxes in the target, found 2"),
], ids=["integer_boxes", "float_mask", "two_box_sets"])
def test_what_is_not_mapped_yet_is_refused_naming_the_sample(spoil, error, message):
    tf = T.Compose([T.Resize((24, 24)), SanitizeBoundingBoxes()])
    with pytest.raises(error, match=message):
        list(td.DataLoader(_Broken(spoil), batch_size=5, transforms=tf, device="cpu", seed=SEED, on_error="skip"))


@pytest.mark.parametrize("warp", [T.RandomRotation(10), T.RandomApply([T.RandomAffine(5)], p=0.01),
                                  T.TrivialAugmentWide()])
def test_warps_are_refused_at_the_first_batch_with_boxes(warp):
    tf = T.Compose([T.Resize((24, 24)), warp])
    td.DataLoader(Detection(), batch_size=2, transforms=tf, device="cpu")  # built: targets are not known yet
    with pytest.raises(ValueError, match="boxes and masks do not follow yet"):
        next(iter(td.DataLoader(Detection(), batch_size=2, transforms=tf, device="cpu")))
    # images with class labels only: the same pipeline runs
    next(iter(td.DataLoader(_ImagesOnly(), batch_size=2, transforms=tf, device="cpu")))


class _ImagesOnly(Detection):
    def __getitem__(self, i: int):
        return self.image(i), i


def test_target_steps_convert_from_torchvision_and_are_listed():
    plan = compile_transforms(v2.Compose([v2.ConvertBoundingBoxFormat("CXCYWH"), v2.ClampBoundingBoxes(),
                                          v2.SanitizeBoundingBoxes(min_size=2, labels_getter=None)]))
    kinds = [type(t) for t in plan.transforms]
    assert kinds == [ConvertBoundingBoxFormat, ClampBoundingBoxes, SanitizeBoundingBoxes]
    assert plan.transforms[2].min_size == 2 and plan.transforms[2].labels_getter is None
    for name in ("SanitizeBoundingBoxes", "ClampBoundingBoxes", "ConvertBoundingBoxFormat"):
        assert name in T.SUPPORTED and getattr(T, name) is not None


class _PadsWithEdges(T.Transform):
    """Test-only: a geometry step that pads with a padding mode (as the kernel's source stage may)."""

    stage = "geometry"
    padding_mode = "reflect"
    fill = 0


class _PadsMasksWithFill(_PadsWithEdges):
    padding_mode = "constant"
    fill = {tv_tensors.Mask: 3, "others": 0}


class _PadsMasksWithList(_PadsWithEdges):
    padding_mode = "constant"
    fill = {tv_tensors.Mask: [3, 4, 5], "others": 0}


def test_padding_that_targets_cannot_follow_is_refused_for_them():
    from torchdali.transforms._target_plan import TargetPlan

    edges = TargetPlan.of(compile_transforms(T.Compose([T.Resize((20, 20)), _PadsWithEdges()])))
    with pytest.raises(ValueError, match="pads with a padding mode"):
        edges.refuse(boxes=True, masks=False)
    with pytest.raises(ValueError, match="pads with a padding mode"):
        edges.refuse(boxes=False, masks=True)
    fill = TargetPlan.of(compile_transforms(T.Compose([T.Resize((20, 20)), _PadsMasksWithFill()])))
    fill.refuse()  # boxes do not see a fill; masks take it (test_a_mask_fill_pads_the_masks_as_torchvision)
    listed = TargetPlan.of(compile_transforms(T.Compose([T.Resize((20, 20)), _PadsMasksWithList()])))
    listed.refuse(boxes=True, masks=False)
    with pytest.raises(ValueError, match="a sequence"):
        listed.refuse(boxes=False, masks=True)
    TargetPlan.of(compile_transforms(T.Compose([T.RandomCrop(20, padding=2)]))).refuse()


# --------------------------------------------------------------------------- #
# How targets cross processes (PackedTargets) and follow on_error on the GPU path
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("as_tensor", [False, True])
def test_packed_targets_of_a_batch_with_no_box_unpack_empty(as_tensor):
    """Every leaf empty (a batch whose samples hold no box): the packed buffer is empty, and a 0-byte
    tensor may have stride 0, which a dtype view refuses; the leaves come back empty, of their dtypes."""
    from torchdali._executor._wire import PackedTargets

    one = {"boxes": tv_tensors.BoundingBoxes(torch.zeros(0, 4), format="XYXY", canvas_size=(10, 12)),
           "labels": torch.zeros(0, dtype=torch.int64)}
    packed = PackedTargets.pack([one, one])
    if as_tensor:
        packed.data = torch.from_numpy(np.asarray(packed.data))
    columns = packed.columnar().columns  # what the executor maps
    assert columns["boxes"].shape == (0, 4) and columns["boxes"].dtype == torch.float32
    assert columns["labels"].shape == (0,) and columns["labels"].dtype == torch.int64
    for got in packed.unpack():
        assert got["boxes"].shape == (0, 4) and got["boxes"].dtype == torch.float32
        assert got["boxes"].canvas_size == (10, 12)
        assert got["labels"].shape == (0,) and got["labels"].dtype == torch.int64


def test_packed_targets_round_trip_and_replace_one_sample():
    import pickle

    from torchdali._executor._decode import merge_sub_batch, sub_batch
    from torchdali._executor._wire import PackedBatch, PackedTargets

    ds = Detection(fmt="CXCYWH", dtype=torch.float64)
    targets = [ds.target(i) for i in range(len(ds))]
    packed = pickle.loads(pickle.dumps(PackedTargets.pack(targets)))
    assert isinstance(packed.data, np.ndarray)  # small: pickled inline, no shared-memory segment
    for got, want in zip(packed.unpack(), targets):
        assert_target(got, want, "round trip")
    views = packed.unpack()
    assert len({t["boxes"].untyped_storage().data_ptr() for t in views if len(t["boxes"])}) == 1  # one buffer
    # boxes and labels lie back to back (one split makes their views); masks differ in size, image_id is no tensor
    assert [c.key for c in packed.columns] == ["boxes", "labels"]
    assert [t["boxes"].canvas_size for t in views] == [t["boxes"].canvas_size for t in targets]
    from torchdali.transforms._target_plan import TargetList, target_tensors
    assert len(target_tensors(TargetList(views))) == 1  # every leaf a view of the one buffer
    # targets whose keys differ from sample to sample keep one place per leaf
    mixed = [dict(targets[0]), {k: v for k, v in targets[2].items() if k != "labels"}, {"boxes": targets[3]["boxes"]}]
    loose = pickle.loads(pickle.dumps(PackedTargets.pack(mixed)))
    assert loose.columns == ()
    for got, want in zip(loose.unpack(), mixed):
        assert_target(got, want, "mixed keys")
    big = PackedTargets.pack([{"masks": tv_tensors.Mask(torch.ones(4, 600, 600, dtype=torch.uint8))}])
    assert isinstance(big.data, torch.Tensor)  # large: one tensor (one segment) for the whole batch

    # on_error on the GPU path: a sample replaced in a group of a grouped decode
    n = len(targets)
    batch = PackedBatch(seed=0, epoch=0, indices=np.arange(n), positions=np.arange(n), paths=[None] * n,
                        params=torch.zeros(n, layout.NUM_PARAMS), targets=packed, has_target=True,
                        kinds=np.zeros(n, np.int8), offsets=np.zeros(n, np.int64), lengths=np.zeros(n, np.int64),
                        shapes=np.zeros((n, 3), np.int64), trace="the worker's trace")
    sub = sub_batch(batch, 2, 4)
    assert [t["image_id"] for t in sub.targets] == [1002, 1003] and sub.trace is None
    sub.targets[1] = targets[0]  # what _decode's on_error replacement does
    sub.skipped.append(None)
    merge_sub_batch(batch, sub, 2, 4)
    assert isinstance(batch.targets, PackedTargets)
    assert [t["image_id"] for t in batch.targets] == [1000, 1001, 1002, 1000, 1004]
    assert_target(batch.targets[3], targets[0], "replaced")
    assert batch.trace is None  # traced again, with the replacement, where the targets are mapped


def test_parts_of_a_batch_put_together_keep_their_targets_packed():
    """The GPU path's first batches of an epoch come in parts (``_tags.EpochStart``): each part packs
    its targets, and ``merge_parts`` packs the whole batch's, in order."""
    from torchdali._executor._deliver import Delivery
    from torchdali._executor._wire import PackedBatch, PackedTargets
    from torchdali._executor._worker import merge_parts

    ds = Detection()
    targets = [ds.target(i) for i in range(len(ds))]

    def part(lo: int, hi: int) -> PackedBatch:
        n = hi - lo
        return PackedBatch(seed=0, epoch=0, indices=np.arange(lo, hi), positions=np.arange(lo, hi),
                           paths=[None] * n, params=torch.zeros(n, layout.NUM_PARAMS),
                           targets=PackedTargets.pack(targets[lo:hi]), has_target=True,
                           blob=torch.zeros(0, dtype=torch.uint8),
                           kinds=np.zeros(n, np.int8), offsets=np.zeros(n, np.int64), lengths=np.zeros(n, np.int64),
                           shapes=np.zeros((n, 3), np.int64), hints=np.zeros(n, np.int64),
                           scan_starts=np.zeros(n, np.int64), seq=7, parts=2, first_position=lo)

    merged = merge_parts([part(0, 2), part(2, 5)], Delivery())
    assert isinstance(merged.targets, PackedTargets) and len(merged.targets) == 5
    for got, want in zip(merged.targets, targets):
        assert_target(got, want, "merged")
