"""Batched box ops (torchdali/transforms/_box_ops.py) against torchvision.transforms.v2 applied sample by sample.

Every comparison is exact: the batched ops use torchvision's arithmetic in the boxes'
dtype. The boxes include degenerate ones (zero or negative size), boxes partly or
wholly outside their canvas, boxes exactly on its edge, NaN boxes, empty samples and
batches of 0 and 1.
"""
from __future__ import annotations

import itertools

import pytest
import torch
import torchvision.transforms.v2 as V2
import torchvision.transforms.v2.functional as TF
from torchvision import tv_tensors

from torchdali.transforms._box_ops import (
    BoxBatch, ClampBoundingBoxes, ConvertBoundingBoxFormat, SanitizeBoundingBoxes, clamp_boxes, convert_boxes,
    kept_counts, sanitize_boxes,
)

FORMATS = ("XYXY", "XYWH", "CXCYWH")
DTYPES = (torch.float32, torch.float64, torch.int64)


def _xyxy_boxes(g: torch.Generator, n: int, h: int, w: int) -> torch.Tensor:
    """``n`` XYXY float64 boxes around an ``h x w`` canvas, with every kind of trouble mixed in."""
    x = torch.rand(n, 2, generator=g, dtype=torch.float64) * (w * 1.4) - 0.2 * w
    y = torch.rand(n, 2, generator=g, dtype=torch.float64) * (h * 1.4) - 0.2 * h
    boxes = torch.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], dim=-1)  # about half have x1 < x0 or y1 < y0
    kind = torch.randint(0, 8, (n,), generator=g)
    boxes[kind == 1] = torch.tensor([1.0, 1.0, 1.0, 5.0], dtype=torch.float64)  # zero width
    boxes[kind == 2] = torch.tensor([0.0, 0.0, float(w), float(h)], dtype=torch.float64)  # the whole canvas
    boxes[kind == 3] = torch.tensor([2.0, 2.0, 2.5, 2.5], dtype=torch.float64)  # smaller than 1
    boxes[kind == 4] = torch.tensor([float(w), 0.0, w + 3.0, 3.0], dtype=torch.float64)  # outside, right
    boxes[kind == 5] = torch.tensor([0.5, 0.5, 1.5, 1.5], dtype=torch.float64)  # exactly 1 x 1
    boxes[(kind == 6) & (torch.arange(n) % 3 == 0)] = float("nan")
    sorted_ = kind == 7  # well-formed ones
    boxes[sorted_] = torch.stack([boxes[sorted_][:, [0, 2]].min(1).values, boxes[sorted_][:, [1, 3]].min(1).values,
                                  boxes[sorted_][:, [0, 2]].max(1).values, boxes[sorted_][:, [1, 3]].max(1).values],
                                 dim=-1)
    return boxes


def _samples(seed: int, counts: list[int], fmt: str, dtype: torch.dtype, masks: bool = False) -> list[dict]:
    """Per-sample detection targets as torchvision's datasets give them (canvas sizes differ per sample)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, n in enumerate(counts):
        h, w = 7 + 5 * i, 9 + 3 * (i % 4)
        xyxy = _xyxy_boxes(g, n, h, w)
        if not dtype.is_floating_point:
            xyxy = xyxy.nan_to_num(0.0).round()
        data = TF.convert_bounding_box_format(xyxy, old_format="XYXY", new_format=fmt).to(dtype)
        target = {
            "boxes": tv_tensors.BoundingBoxes(data, format=fmt, canvas_size=(h, w)),
            "labels": torch.randint(1, 91, (n,), generator=g),
            "image_id": i,
        }
        if masks:
            target["masks"] = tv_tensors.Mask(torch.randint(0, 2, (n, h, w), generator=g, dtype=torch.uint8))
        out.append(target)
    return out


def _assert_same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor), rtol=0, atol=0,
                               equal_nan=True)


def _assert_targets(got: list[dict], want: list[dict], keys: tuple[str, ...]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for k in keys:
            assert type(g[k]) is type(w[k]), k
            _assert_same(g[k], w[k])
        assert g["boxes"].format == w["boxes"].format
        assert tuple(g["boxes"].canvas_size) == tuple(w["boxes"].canvas_size)


COUNT_CASES = [[], [0], [5], [0, 0], [12, 0, 7, 30, 1], [40, 25, 0]]


def _check_against_torchvision(samples: list[dict], op, tv_op, keys: tuple[str, ...]):
    """``op`` on the batch of ``samples`` gives what ``tv_op`` gives sample by sample, and leaves its input alone."""
    batch = BoxBatch.from_samples(samples)
    before = batch.boxes.clone()
    out = op(batch)
    want = [tv_op(dict(s)) for s in samples]
    _assert_targets(out.to_samples(), want, keys)
    assert out.counts.tolist() == [len(w["boxes"]) for w in want]
    _assert_same(batch.boxes, before)
    return out


@pytest.mark.parametrize("counts", COUNT_CASES)
@pytest.mark.parametrize("fmt,dtype", list(itertools.product(FORMATS, DTYPES)))
def test_sanitize_matches_torchvision(counts, fmt, dtype):
    samples = _samples(len(counts) * 7 + 1, counts, fmt, dtype)
    for min_size, min_area in [(1.0, 1.0), (2.0, 1.0), (1.0, 6.5)]:
        _check_against_torchvision(samples, SanitizeBoundingBoxes(min_size, min_area),
                                   V2.SanitizeBoundingBoxes(min_size, min_area), ("boxes", "labels"))


@pytest.mark.parametrize("counts", COUNT_CASES)
@pytest.mark.parametrize("fmt,dtype", list(itertools.product(FORMATS, DTYPES)))
def test_clamp_matches_torchvision(counts, fmt, dtype):
    samples = _samples(len(counts) * 11 + 2, counts, fmt, dtype)
    for mode in ("auto", "soft", "hard", None):
        _check_against_torchvision(samples, ClampBoundingBoxes(mode), V2.ClampBoundingBoxes(mode), ("boxes", "labels"))


@pytest.mark.parametrize("counts", COUNT_CASES)
@pytest.mark.parametrize("old,new,dtype", list(itertools.product(FORMATS, FORMATS, DTYPES)))
def test_convert_matches_torchvision(counts, old, new, dtype):
    samples = _samples(len(counts) * 13 + 3, counts, old, dtype)
    out = _check_against_torchvision(samples, ConvertBoundingBoxFormat(new), V2.ConvertBoundingBoxFormat(new),
                                     ("boxes",))
    assert out.format == new


def test_sanitize_filters_masks_and_labels_as_torchvision():
    """Instance masks lined up in one tensor, or one per sample where sizes differ; a semantic
    mask that the keep mask cannot index passes through; labels_getter None and a callable."""
    counts = [4, 0, 9, 3]
    samples = _samples(5, counts, "XYXY", torch.float32, masks=True)
    for s in samples:
        s["semantic"] = tv_tensors.Mask(torch.zeros(2, *s["boxes"].canvas_size, dtype=torch.uint8))
        s["iscrowd"] = torch.zeros(len(s["boxes"]), dtype=torch.int64)
    batch = BoxBatch.from_samples(samples)
    assert isinstance(batch.per_box["masks"], list)  # canvas sizes differ
    assert isinstance(batch.per_box["labels"], torch.Tensor) and isinstance(batch.per_box["semantic"], list)
    keys = ("boxes", "labels", "masks", "semantic", "iscrowd")
    for getter, tv_getter in [
        ("default", "default"),
        (None, None),
        (lambda d: (d["labels"], d["iscrowd"]), lambda s: (s["labels"], s["iscrowd"])),
    ]:
        out = SanitizeBoundingBoxes(labels_getter=getter)(batch).to_samples()
        want = [V2.SanitizeBoundingBoxes(labels_getter=tv_getter)(dict(s)) for s in samples]
        _assert_targets(out, want, keys)

    # one image size for the whole batch: the instance masks are one [N, H, W] Mask
    same = [dict(s) for s in _samples(6, [3, 5], "XYWH", torch.float32)]
    for s in same:
        s["boxes"] = tv_tensors.wrap(s["boxes"], like=s["boxes"], canvas_size=(8, 8))
        s["masks"] = tv_tensors.Mask(torch.randint(0, 2, (len(s["boxes"]), 8, 8), dtype=torch.uint8))
    batch = BoxBatch.from_samples(same)
    assert isinstance(batch.per_box["masks"], tv_tensors.Mask) and batch.per_box["masks"].shape == (8, 8, 8)
    out = SanitizeBoundingBoxes()(batch)
    assert isinstance(out.per_box["masks"], tv_tensors.Mask)
    _assert_targets(out.to_samples(), [V2.SanitizeBoundingBoxes()(dict(s)) for s in same], ("boxes", "labels", "masks"))


def test_sanitize_errors_as_torchvision():
    samples = _samples(1, [3, 2], "XYXY", torch.float32)
    for s in samples:
        s["klass"] = s.pop("labels")
    with pytest.raises(ValueError, match="Could not infer where the labels are"):
        SanitizeBoundingBoxes()(BoxBatch.from_samples(samples))
    with pytest.raises(ValueError, match="Could not infer where the labels are"):
        V2.SanitizeBoundingBoxes()(dict(samples[0]))
    with pytest.raises(ValueError, match="min_size must be >= 1"):
        SanitizeBoundingBoxes(min_size=0.5)
    with pytest.raises(ValueError, match="min_area must be >= 1"):
        SanitizeBoundingBoxes(min_area=0)
    with pytest.raises(ValueError, match="labels_getter"):
        SanitizeBoundingBoxes(labels_getter="labels")
    with pytest.raises(TypeError, match="BoxBatch"):
        SanitizeBoundingBoxes()(samples)
    with pytest.raises(ValueError, match="clamping_mode"):
        ClampBoundingBoxes("firm")
    with pytest.raises(ValueError, match="box format"):
        ConvertBoundingBoxFormat("XYXYXYXY")


def test_functionals_on_plain_tensors():
    """The functional tier: ``[N, 4]`` + counts + ``[B, 2]`` canvases, or one canvas for all."""
    samples = _samples(9, [6, 0, 4], "CXCYWH", torch.float32)
    boxes = torch.cat([s["boxes"].as_subclass(torch.Tensor) for s in samples])
    counts = torch.tensor([6, 0, 4])
    canvas = torch.tensor([tuple(s["boxes"].canvas_size) for s in samples])
    keep = sanitize_boxes(boxes, counts, canvas, 1.0, 1.0, format="CXCYWH")
    want = torch.cat([TF.sanitize_bounding_boxes(s["boxes"])[1] for s in samples])
    assert torch.equal(keep, want)
    assert kept_counts(keep, counts).tolist() == [int(k.sum()) for k in want.split([6, 0, 4])]
    clamped = clamp_boxes(boxes, counts, canvas, format="CXCYWH")
    _assert_same(clamped, torch.cat([TF.clamp_bounding_boxes(s["boxes"]).as_subclass(torch.Tensor) for s in samples]))
    # one canvas for every sample
    one = clamp_boxes(boxes, counts, (10, 12), format="CXCYWH")
    _assert_same(one, TF.clamp_bounding_boxes(boxes, format="CXCYWH", canvas_size=(10, 12), clamping_mode="soft"))
    _assert_same(convert_boxes(boxes, "CXCYWH", "XYWH"),
                 TF.convert_bounding_box_format(boxes, old_format="CXCYWH", new_format="XYWH"))
    with pytest.raises(ValueError, match="counts sum to 9"):
        sanitize_boxes(boxes, [6, 0, 3], canvas, format="CXCYWH")
    with pytest.raises(ValueError, match=r"\[3, 2\]"):
        clamp_boxes(boxes, counts, canvas[:2])
    with pytest.raises(ValueError, match=r"\[N, 4\]"):
        clamp_boxes(boxes[:, :3], counts, canvas)


@pytest.mark.cuda
def test_ops_on_the_gpu_match_the_cpu():
    samples = _samples(4, [30, 0, 17, 5], "XYWH", torch.float32, masks=True)
    batch = BoxBatch.from_samples(samples)
    gpu = batch._replace(boxes=batch.boxes.cuda(), counts=batch.counts.cuda(),
                         per_box={"labels": batch.per_box["labels"].cuda()})
    for op in (SanitizeBoundingBoxes(), ClampBoundingBoxes(), ConvertBoundingBoxFormat("CXCYWH")):
        want, got = op(batch._replace(per_box={"labels": batch.per_box["labels"]})), op(gpu)
        assert got.boxes.is_cuda and got.counts.is_cuda
        _assert_same(got.boxes.cpu(), want.boxes)
        assert torch.equal(got.counts.cpu(), want.counts)
        assert torch.equal(got.per_box["labels"].cpu(), want.per_box["labels"])
