"""Boxes and masks through the per-sample geometry (torchdali/transforms/_targets.py), against
torchvision.transforms.v2 applied to (image, BoundingBoxes, Mask) with the parameters torchdali drew.

Each pipeline is compiled, its per-sample parameters drawn as the loader draws them, and
replayed sample by sample through torchvision: the deterministic steps as v2 classes, the
random ones (RandomResizedCrop's box, the flips' coins, a given crop box) through v2's
functionals with the drawn values. Boxes must agree within float32 rounding, masks exactly.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as V2
import torchvision.transforms.v2.functional as TF
from torchvision import tv_tensors
from csrc_triton import layout
from torchvision.transforms import InterpolationMode

from torchdali import _rng
from torchdali import transforms as T
from torchdali.transforms import _geometry as G
from torchdali.transforms._plan import Plan, Transform, _KeepSize, compile_transforms
from torchdali.transforms._state import StaticState
from torchdali.transforms._targets import (
    BOX_FORMATS, MappedBoxes, TargetGeometry, map_boxes, map_masks, target_geometry, trace_plan,
)

#: boxes agree up to float32 rounding (torchvision computes in float32, _targets in float64)
BOX_ATOL = 1e-4
SEED = 3


class _Crop(Transform):
    """Test-only: crop each sample at its own given ``(top, left)`` to one ``(height, width)``."""

    stage = "geometry"

    def __init__(self, tops_lefts: np.ndarray, height: int, width: int) -> None:
        self.tops_lefts = np.asarray(tops_lefts, dtype=np.float64).reshape(-1, 2)
        self.size = (height, width)

    def update_state(self, state: StaticState) -> StaticState:
        return dataclasses.replace(state, size=self.size)

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        return {"top": self.tops_lefts[:, 0].copy(), "left": self.tops_lefts[:, 1].copy()}

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        G.crop(geometry, params["top"], params["left"], *self.size)


# --------------------------------------------------------------------------- #
# Pipelines: a name -> (image sizes, torchdali transforms for them)
# --------------------------------------------------------------------------- #

MIXED = [(37, 53), (64, 64), (97, 61), (45, 30)]  # odd and even, portrait and landscape
SAME = [(41, 57)] * 4  # for pipelines without a fixed output size of their own


def _resize_int_then_keep(sizes: list[tuple[int, int]], short: int) -> list[Transform]:
    h, w = G.resized_output_size(np.array([sizes[0][0]], float), np.array([sizes[0][1]], float), [short], None)
    return [T.Resize(short), _KeepSize(int(h[0]), int(w[0]))]


PIPELINES: dict[str, tuple[list[tuple[int, int]], Callable[[list[tuple[int, int]]], list[Transform]]]] = {
    "hflip": (SAME, lambda s: [_KeepSize(*s[0]), T.RandomHorizontalFlip(0.5)]),
    "vflip": (SAME, lambda s: [_KeepSize(*s[0]), T.RandomVerticalFlip(0.5)]),
    "hflip+vflip": (SAME, lambda s: [_KeepSize(*s[0]), T.RandomHorizontalFlip(1.0), T.RandomVerticalFlip(1.0)]),
    "resize_hw": (MIXED, lambda s: [T.Resize((40, 29))]),
    "resize_int": (SAME, lambda s: _resize_int_then_keep(s, 23)),
    "resize_up": (MIXED, lambda s: [T.Resize((131, 77))]),
    "center_crop_smaller": (MIXED, lambda s: [T.CenterCrop((25, 21))]),
    "center_crop_larger": (MIXED, lambda s: [T.CenterCrop((70, 101))]),
    # partly outside (negative top/left, past the bottom), and one wholly outside its image
    "crop_box": (MIXED, lambda s: [_Crop([[5, 7], [-6, 30], [80, -9], [50, 40]], 30, 33)]),
    "random_resized_crop": (MIXED, lambda s: [T.RandomResizedCrop((33, 26), scale=(0.08, 1.0))]),
    "random_resized_crop+flips": (MIXED, lambda s: [T.RandomResizedCrop(32, scale=(0.2, 0.9)),
                                                    T.RandomHorizontalFlip(), T.RandomVerticalFlip()]),
    "resize+center_crop+flip": (MIXED, lambda s: [T.Resize(40), T.CenterCrop(35), T.RandomHorizontalFlip()]),
    "resize_nearest_exact+flip": (MIXED, lambda s: [T.Resize((33, 47), interpolation=InterpolationMode.NEAREST_EXACT),
                                                    T.RandomHorizontalFlip()]),
    # from here on the folded map cannot give torchvision's masks (see _targets' docstring)
    "rrc_nearest_exact": (MIXED, lambda s: [T.RandomResizedCrop(
        (30, 30), interpolation=InterpolationMode.NEAREST_EXACT)]),
    "flip_then_resize": (SAME, lambda s: [T.RandomHorizontalFlip(1.0), T.RandomVerticalFlip(1.0),
                                          T.Resize((29, 43))]),
    "resize+rrc": (MIXED, lambda s: [T.Resize(50), T.RandomResizedCrop(24), T.RandomHorizontalFlip()]),
    "crop+resize+center_crop": (MIXED, lambda s: [_Crop([[3, 2], [10, 11], [0, 5], [7, 1]], 29, 27),
                                                  T.Resize((61, 47)), T.CenterCrop((50, 40))]),
    "crop+center_crop_larger": (MIXED, lambda s: [_Crop([[3, 2], [10, 11], [0, 5], [7, 1]], 25, 23),
                                                  T.CenterCrop((31, 42)), T.RandomVerticalFlip()]),
    # zero padding resized: the valid window is rounded to whole pixels (boxes: trace only)
    "center_crop_larger+resize": (MIXED, lambda s: [T.CenterCrop((101, 77)), T.Resize((44, 35))]),
    "realistic_resize256_crop224_flip": ([(300, 417), (375, 500), (333, 251)],
                                         lambda s: [T.Resize(256), T.CenterCrop(224), T.RandomHorizontalFlip()]),
}

#: pipelines whose masks the folded map (kernel parameter rows) gives exactly
FOLDED_MASKS_EXACT = {
    "hflip", "vflip", "hflip+vflip", "resize_hw", "resize_int", "resize_up", "center_crop_smaller",
    "center_crop_larger", "crop_box", "random_resized_crop", "random_resized_crop+flips",
    "resize+center_crop+flip", "resize_nearest_exact+flip", "crop+center_crop_larger",
    "realistic_resize256_crop224_flip",
}
#: pipelines whose boxes the folded map gives as torchvision does: not where a CenterCrop is
#: larger than the image (torchvision's boxes take another anchor than its image, which the
#: folded map follows), nor zero padding resized (the valid window is rounded to whole pixels)
FOLDED_BOXES_EXACT = set(PIPELINES) - {"center_crop_larger", "crop+center_crop_larger", "center_crop_larger+resize"}


def _mode(code: int) -> InterpolationMode:
    """torchvision's mode of a ``layout.FILTER_*`` code (older torchvision takes no strings)."""
    return InterpolationMode(layout.filter_name(code))


class Drawn:
    """A pipeline compiled and drawn for a batch: the plan, the keys and each leaf's parameters."""

    def __init__(self, name: str, batch: int | None = None) -> None:
        sizes, build = PIPELINES[name]
        self.sizes = sizes if batch is None else (sizes * 4)[:batch]
        self.plan: Plan = compile_transforms(T.Compose(build(self.sizes)))
        self.keys = _rng.sample_keys(SEED, 0, np.arange(len(self.sizes)))
        self.hw = np.array(self.sizes, dtype=np.float64).reshape(-1, 2)
        # the draw, leaf by leaf, as Plan._draw makes it
        g = G.BatchGeometry.identity(self.hw)
        self.leaf_params: list[tuple[Transform, dict[str, np.ndarray]]] = []
        for stream, t in enumerate(self.plan.transforms):
            u = _rng.uniform(self.keys, stream, t.n_uniforms) if t.n_uniforms else None
            p = t.make_params(g, u)
            t.transform(g, p)
            self.leaf_params.append((t, p))
        ref = self.plan.geometry(self.hw, self.keys)
        assert np.array_equal(g.origin_x, ref.origin_x) and np.array_equal(g.step_y, ref.step_y)
        self.geometry = ref

    def torchvision_ops(self, b: int) -> list[Callable[[Any], Any]]:
        """Sample ``b``'s steps as torchvision v2 callables on one tv_tensor (or a tuple)."""
        ops: list[Callable[[Any], Any]] = []
        for t, p in self.leaf_params:
            if isinstance(t, T.RandomResizedCrop):
                box = [int(p[k][b]) for k in ("top", "left", "height", "width")]
                ops.append(lambda x, box=box, t=t: TF.resized_crop(x, *box, size=list(t.size),
                                                                   interpolation=_mode(t.filter)))
            elif isinstance(t, T.Resize):
                ops.append(V2.Resize(t.size, interpolation=_mode(t.filter), max_size=t.max_size))
            elif isinstance(t, T.CenterCrop):
                ops.append(V2.CenterCrop(t.size))
            elif isinstance(t, _Crop):
                ops.append(lambda x, tl=t.tops_lefts[b], t=t: TF.crop(x, int(tl[0]), int(tl[1]), *t.size))
            elif isinstance(t, T.RandomVerticalFlip):  # before its base class, RandomHorizontalFlip
                if p["flip"][b]:
                    ops.append(V2.RandomVerticalFlip(p=1.0))
            elif isinstance(t, T.RandomHorizontalFlip):
                if p["flip"][b]:
                    ops.append(V2.RandomHorizontalFlip(p=1.0))
            else:
                assert isinstance(t, _KeepSize), t
        return ops


def _boxes_for(rng: np.random.Generator, h: int, w: int, n: int) -> torch.Tensor:
    """``n`` XYXY float32 boxes inside an ``h x w`` image, fractional corners; the first ones
    touch the image's edges (the whole image, a strip along the left and the bottom edge)."""
    x = np.sort(rng.uniform(0, w, size=(n, 2)), axis=1)
    y = np.sort(rng.uniform(0, h, size=(n, 2)), axis=1)
    boxes = np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], axis=1)
    edges = np.array([[0, 0, w, h], [0, 0.5, 3.25, h], [1.5, h - 2.5, w, h]], dtype=np.float64)
    k = min(n, len(edges))
    boxes[:k] = edges[:k]
    return torch.from_numpy(boxes).float()


def _targets(sizes: list[tuple[int, int]], seed: int = 0, labels: int = 4):
    """Per-sample XYXY boxes (one sample has none), their counts and [K, H, W] uint8 masks."""
    rng = np.random.default_rng(seed)
    counts = [int(rng.integers(1, 7)) for _ in sizes]
    counts[min(1, len(counts) - 1)] = 0
    boxes = [_boxes_for(rng, h, w, n) for (h, w), n in zip(sizes, counts)]
    masks = [torch.from_numpy(rng.integers(0, labels, size=(n, h, w), dtype=np.uint8)) for (h, w), n in
             zip(sizes, [max(c, 1) for c in counts])]
    return boxes, counts, masks


def _torchvision(drawn: Drawn, boxes: list[torch.Tensor], fmt: str, masks: list[torch.Tensor]):
    """torchvision v2 on (image, BoundingBoxes, Mask) of every sample: boxes, canvas sizes, masks."""
    out_boxes, canvases, out_masks = [], [], []
    for b, ((h, w), bx, m) in enumerate(zip(drawn.sizes, boxes, masks)):
        image = tv_tensors.Image(torch.zeros(3, h, w, dtype=torch.uint8))
        bb = tv_tensors.BoundingBoxes(_in_format([bx], fmt), format=fmt, canvas_size=(h, w))
        sample = (image, bb, tv_tensors.Mask(m))
        for op in drawn.torchvision_ops(b):
            sample = tuple(op(x) for x in sample)
        image, bb, mask = sample
        assert tuple(bb.canvas_size) == tuple(image.shape[-2:])
        out_boxes.append(bb.as_subclass(torch.Tensor))
        canvases.append(tuple(bb.canvas_size))
        out_masks.append(mask.as_subclass(torch.Tensor))
    return torch.cat(out_boxes) if out_boxes else torch.zeros(0, 4), canvases, out_masks


def _in_format(boxes: list[torch.Tensor], fmt: str) -> torch.Tensor:
    xyxy = torch.cat(boxes) if boxes else torch.zeros(0, 4)
    return TF.convert_bounding_box_format(xyxy, old_format=tv_tensors.BoundingBoxFormat.XYXY,
                                          new_format=getattr(tv_tensors.BoundingBoxFormat, fmt))


def _geometries(drawn: Drawn, kinds: set[str]) -> dict[str, Any]:
    """The same batch's geometry in each form ``map_boxes``/``map_masks`` take."""
    out: dict[str, Any] = {}
    if "trace" in kinds:
        out["trace"] = trace_plan(drawn.plan, drawn.hw, drawn.keys)
    if "geometry" in kinds:
        out["geometry"] = drawn.geometry
    if "params" in kinds:
        out["params"] = drawn.plan.params(drawn.hw, drawn.keys)
    return out


def _assert_boxes(mapped: MappedBoxes, expected: torch.Tensor, canvases: list[tuple[int, int]], where: str) -> None:
    assert mapped.boxes.dtype == expected.dtype, where
    torch.testing.assert_close(mapped.boxes, expected, atol=BOX_ATOL, rtol=0, msg=lambda m: f"{where}: {m}")
    assert [tuple(int(v) for v in hw) for hw in mapped.canvas_size] == canvases, where


def _assert_masks(ours: list[torch.Tensor], expected: list[torch.Tensor], where: str) -> None:
    assert len(ours) == len(expected), where
    for b, (o, e) in enumerate(zip(ours, expected)):
        assert o.shape == e.shape and o.dtype == e.dtype, (where, b, o.shape, e.shape)
        bad = (o != e).nonzero()
        assert len(bad) == 0, f"{where}: sample {b}: {len(bad)} mask pixels differ, first at {bad[0].tolist()}"


# --------------------------------------------------------------------------- #
# Parity with torchvision
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("fmt", BOX_FORMATS)
@pytest.mark.parametrize("name", list(PIPELINES))
def test_boxes_match_torchvision(name, fmt):
    drawn = Drawn(name)
    boxes, counts, masks = _targets(drawn.sizes, seed=len(name))
    expected, canvases, _ = _torchvision(drawn, boxes, fmt, masks)
    kinds = {"trace", "geometry", "params"} if name in FOLDED_BOXES_EXACT else {"trace"}
    for kind, geometry in _geometries(drawn, kinds).items():
        mapped = map_boxes(_in_format(boxes, fmt), counts, geometry, format=fmt, size=drawn.plan.out_size)
        _assert_boxes(mapped, expected, canvases, f"{name}/{fmt}/{kind}")


@pytest.mark.parametrize("name", list(PIPELINES))
def test_masks_match_torchvision(name):
    drawn = Drawn(name)
    boxes, counts, masks = _targets(drawn.sizes, seed=len(name))
    _, _, expected = _torchvision(drawn, boxes, "XYXY", masks)
    kinds = {"trace", "params", "geometry"} if name in FOLDED_MASKS_EXACT else {"trace"}
    for kind, geometry in _geometries(drawn, kinds).items():
        _assert_masks(map_masks(masks, geometry, size=drawn.plan.out_size), expected, f"{name}/{kind}")


def test_folded_masks_differ_where_documented():
    """The folded map cannot know that a flip came before a resize; the trace does."""
    drawn = Drawn("flip_then_resize")
    _, _, masks = _targets(drawn.sizes, seed=5)
    _, _, expected = _torchvision(drawn, [torch.zeros(0, 4)] * len(masks), "XYXY", masks)
    folded = map_masks(masks, drawn.plan.params(drawn.hw, drawn.keys), size=drawn.plan.out_size)
    assert any(not torch.equal(o, e) for o, e in zip(folded, expected))
    _assert_masks(map_masks(masks, trace_plan(drawn.plan, drawn.hw, drawn.keys)), expected, "trace")


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.uint8])
def test_masks_dtypes_and_2d(dtype):
    drawn = Drawn("random_resized_crop+flips")
    rng = np.random.default_rng(1)
    masks = [torch.from_numpy(rng.integers(0, 2 if dtype == torch.bool else 200, size=(h, w))).to(dtype)
             for h, w in drawn.sizes]
    _, _, expected = _torchvision(drawn, [torch.zeros(0, 4)] * len(masks), "XYXY", masks)
    ours = map_masks(masks, trace_plan(drawn.plan, drawn.hw, drawn.keys))
    _assert_masks(ours, expected, str(dtype))
    assert all(o.ndim == 2 for o in ours)


def test_mask_leading_dims_and_empty_k():
    drawn = Drawn("resize+center_crop+flip")
    rng = np.random.default_rng(2)
    shapes = [(1, 2), (0,), (3,), (2, 1)]
    masks = [torch.from_numpy(rng.integers(0, 9, size=(*lead, h, w), dtype=np.uint8))
             for lead, (h, w) in zip(shapes, drawn.sizes)]
    _, _, expected = _torchvision(drawn, [torch.zeros(0, 4)] * len(masks), "XYXY", masks)
    _assert_masks(map_masks(masks, trace_plan(drawn.plan, drawn.hw, drawn.keys)), expected, "leading dims")


def test_tv_tensor_inputs_keep_their_format():
    drawn = Drawn("random_resized_crop+flips")
    boxes, counts, masks = _targets(drawn.sizes, seed=4)
    expected, canvases, _ = _torchvision(drawn, boxes, "CXCYWH", masks)
    bb = tv_tensors.BoundingBoxes(_in_format(boxes, "CXCYWH"), format="CXCYWH", canvas_size=(1, 1))
    mapped = map_boxes(bb, counts, trace_plan(drawn.plan, drawn.hw, drawn.keys))
    assert type(mapped.boxes) is torch.Tensor
    _assert_boxes(mapped, expected, canvases, "BoundingBoxes input")
    ours = map_masks([tv_tensors.Mask(m) for m in masks], trace_plan(drawn.plan, drawn.hw, drawn.keys))
    _, _, expected_masks = _torchvision(drawn, boxes, "CXCYWH", masks)
    _assert_masks(ours, expected_masks, "Mask input")


def test_boxes_outside_after_a_crop_are_clamped_and_kept():
    """torchvision clamps to the crop and keeps the degenerate boxes (SanitizeBoundingBoxes is separate)."""
    drawn = Drawn("crop_box")
    boxes = [torch.tensor([[0.0, 0.0, 4.0, 4.0], [10.0, 10.0, 20.0, 20.0]])] * len(drawn.sizes)
    counts = [2] * len(drawn.sizes)
    expected, canvases, _ = _torchvision(drawn, boxes, "XYXY", [torch.zeros(1, h, w, dtype=torch.uint8)
                                                                 for h, w in drawn.sizes])
    mapped = map_boxes(torch.cat(boxes), counts, trace_plan(drawn.plan, drawn.hw, drawn.keys))
    _assert_boxes(mapped, expected, canvases, "clamped")
    xyxy = mapped.boxes
    degenerate = (xyxy[:, 2] <= xyxy[:, 0]) | (xyxy[:, 3] <= xyxy[:, 1])
    assert degenerate.any() and len(xyxy) == sum(counts)


# --------------------------------------------------------------------------- #
# Batch sizes, inputs, errors
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("batch", [0, 1])
def test_batch_of_zero_and_one(batch):
    drawn = Drawn("random_resized_crop+flips", batch=batch)
    boxes, counts, masks = _targets(drawn.sizes, seed=7) if batch else ([], [], [])
    if batch:
        counts = [3]
        boxes = [_boxes_for(np.random.default_rng(0), *drawn.sizes[0], 3)]
    expected, canvases, expected_masks = _torchvision(drawn, boxes, "XYWH", masks)
    for kind, geometry in _geometries(drawn, {"trace", "params"}).items():
        mapped = map_boxes(_in_format(boxes, "XYWH"), torch.tensor(counts, dtype=torch.int64), geometry,
                           format="XYWH", size=drawn.plan.out_size)
        assert mapped.boxes.shape == (sum(counts), 4) and mapped.canvas_size.shape == (batch, 2)
        _assert_boxes(mapped, expected, canvases, kind)
        _assert_masks(map_masks(masks, geometry, size=drawn.plan.out_size), expected_masks, kind)


def test_no_boxes_at_all():
    drawn = Drawn("resize+center_crop+flip")
    mapped = map_boxes(torch.zeros(0, 4), [0] * len(drawn.sizes), trace_plan(drawn.plan, drawn.hw, drawn.keys))
    assert mapped.boxes.shape == (0, 4)
    assert mapped.canvas_size.tolist() == [list(drawn.plan.out_size)] * len(drawn.sizes)


def test_clamp_false_is_clamping_mode_none():
    drawn = Drawn("crop_box")
    boxes, counts, masks = _targets(drawn.sizes, seed=9)
    ours = map_boxes(torch.cat(boxes), counts, trace_plan(drawn.plan, drawn.hw, drawn.keys), clamp=False)
    expected = []
    for b, ((h, w), bx) in enumerate(zip(drawn.sizes, boxes)):
        bb = tv_tensors.BoundingBoxes(bx, format="XYXY", canvas_size=(h, w), clamping_mode=None)
        for op in drawn.torchvision_ops(b):
            bb = op(bb)
        expected.append(bb.as_subclass(torch.Tensor))
    torch.testing.assert_close(ours.boxes, torch.cat(expected), atol=BOX_ATOL, rtol=0)


def test_trace_composes_to_the_plans_geometry():
    """trace_plan replays Plan._draw: its steps compose to the folded map the kernel gets."""
    for name in PIPELINES:
        drawn = Drawn(name)
        trace = trace_plan(drawn.plan, drawn.hw, drawn.keys)
        g = drawn.geometry
        for a in ("y", "x"):
            origin = np.zeros(len(drawn.sizes))
            step = np.ones(len(drawn.sizes))
            for s in trace.steps:
                ax = getattr(s, a)
                flip = ax.flip.numpy()
                start = ax.offset.numpy() + np.where(flip, ax.scale.numpy() * ax.size.numpy(), 0.0)
                origin = origin + step * start
                step = step * ax.scale.numpy() * np.where(flip, -1.0, 1.0)
            np.testing.assert_allclose(origin, getattr(g, f"origin_{a}"), atol=1e-9, err_msg=name)
            np.testing.assert_allclose(step, getattr(g, f"step_{a}"), rtol=1e-12, err_msg=name)
        assert np.array_equal(trace.size, np.stack([g.height, g.width], axis=-1).astype(np.int64))


def test_target_geometry_forms_agree():
    drawn = Drawn("resize+center_crop+flip")
    params = drawn.plan.params(drawn.hw, drawn.keys)
    a = target_geometry(params, size=drawn.plan.out_size)
    b = target_geometry(params.params, size=torch.tensor([drawn.plan.out_size] * len(drawn.sizes)))
    c = target_geometry(drawn.geometry)
    assert isinstance(a, TargetGeometry) and a.batch == len(drawn.sizes)
    for x in (b, c):
        assert np.array_equal(a.size, x.size)
        for f in ("offset", "scale", "lo", "hi"):
            torch.testing.assert_close(getattr(a.steps[0].x, f), getattr(x.steps[0].x, f), atol=1e-4, rtol=1e-6)


def test_errors_name_what_to_do():
    drawn = Drawn("random_resized_crop")
    trace = trace_plan(drawn.plan, drawn.hw, drawn.keys)
    params = drawn.plan.params(drawn.hw, drawn.keys)
    with pytest.raises(TypeError, match="floating point"):
        map_boxes(torch.zeros(4, 4, dtype=torch.int64), [1, 1, 1, 1], trace)
    with pytest.raises(ValueError, match="counts sum to 3"):
        map_boxes(torch.zeros(4, 4), [1, 1, 1, 0], trace)
    with pytest.raises(ValueError, match="one count per sample"):
        map_boxes(torch.zeros(4, 4), [2, 2], trace)
    with pytest.raises(ValueError, match="rotated"):
        map_boxes(torch.zeros(4, 4), [1, 1, 1, 1], trace, format="XYWHR")
    with pytest.raises(ValueError, match="size=plan.out_size"):
        map_boxes(torch.zeros(4, 4), [1, 1, 1, 1], params)
    masks = [torch.zeros(h, w, dtype=torch.uint8) for h, w in drawn.sizes]
    masks[2] = torch.zeros(5, 5, dtype=torch.uint8)
    with pytest.raises(ValueError, match="mask of sample 2 is"):
        map_masks(masks, trace)
    with pytest.raises(TypeError, match="label maps"):
        map_masks([torch.zeros(h, w) for h, w in drawn.sizes], trace)
    warp = compile_transforms(T.Compose([T.Resize((32, 32)), T.RandomRotation(30)]))
    with pytest.raises(NotImplementedError, match="warps sample"):
        trace_plan(warp, drawn.hw, drawn.keys)


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["random_resized_crop+flips", "resize+center_crop+flip", "crop+resize+center_crop",
                                  "center_crop_larger"])
def test_on_the_gpu_from_device_params(name):
    """On the GPU path the kernel's parameter rows are on the device; boxes and masks stay there."""
    drawn = Drawn(name)
    boxes, counts, masks = _targets(drawn.sizes, seed=11)
    expected, canvases, expected_masks = _torchvision(drawn, boxes, "XYXY", masks)
    params = drawn.plan.params(drawn.hw, drawn.keys).params.cuda()
    trace = trace_plan(drawn.plan, drawn.hw, drawn.keys)
    geometry = params if name in FOLDED_BOXES_EXACT else trace
    mapped = map_boxes(torch.cat(boxes).cuda(), torch.tensor(counts).cuda(), geometry, size=drawn.plan.out_size)
    assert mapped.boxes.is_cuda
    _assert_boxes(MappedBoxes(mapped.boxes.cpu(), mapped.canvas_size), expected, canvases, name)
    ours = map_masks([m.cuda() for m in masks], trace)
    assert all(o.is_cuda for o in ours)
    _assert_masks([o.cpu() for o in ours], expected_masks, name)
    if name in FOLDED_MASKS_EXACT:
        _assert_masks([o.cpu() for o in map_masks([m.cuda() for m in masks], params, size=drawn.plan.out_size)],
                      expected_masks, f"{name}/params")


def test_center_crop_larger_boxes_follow_torchvision_not_its_image():
    """torchvision 0.29 pads the image of a larger CenterCrop by ``(crop - size) // 2`` but moves its
    boxes by ``-round((size - crop) / 2)``, half to even: one pixel apart for a difference of
    ``2k + 1``, ``k`` odd. The trace follows torchvision's boxes; the folded map follows the image."""
    drawn = Drawn("center_crop_larger")  # sample 3 is 30 wide, crop 101: difference 71 = 2 * 35 + 1
    box = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    counts = [0, 0, 0, 1]
    traced = map_boxes(box, counts, trace_plan(drawn.plan, drawn.hw, drawn.keys)).boxes
    folded = map_boxes(box, counts, drawn.geometry).boxes
    expected, _, _ = _torchvision(drawn, [torch.zeros(0, 4)] * 3 + [box], "XYXY",
                                  [torch.zeros(1, h, w, dtype=torch.uint8) for h, w in drawn.sizes])
    left_pad = (101 - 30) // 2  # where the image's column 0 lands
    assert float(folded[0, 0]) == left_pad
    assert float(expected[0, 0]) == left_pad + 1
    torch.testing.assert_close(traced, expected, atol=BOX_ATOL, rtol=0)


def test_traces_of_parts_put_together_are_the_whole_batchs():
    """A trace holds a step only where one of its samples moved: a part of a batch none of whose
    samples flips has no flip step. Put together (``TargetGeometry.cat``: a batch built in parts),
    each part takes the steps another has as the identity for its samples, which is the whole
    batch's trace: the same steps, and the same boxes and masks."""
    plan = compile_transforms([T.RandomZoomOut(fill={tv_tensors.Mask: 3}, side_range=(1.0, 2.0), p=0.5),
                               T.RandomHorizontalFlip(), T.RandomVerticalFlip(), T.Resize((24, 20))])
    sizes = np.array([(37, 53), (64, 64), (45, 30)], dtype=np.float64)
    # one sample per part, at positions whose draws differ in which steps move
    one = {}
    for position in range(64):
        keys = _rng.sample_keys(SEED, 0, np.array([position]))
        one.setdefault(len(trace_plan(plan, sizes[:1], keys).steps), position)
    assert sorted(one) == [1, 2, 3, 4]  # from the resize alone to every step
    positions = np.array([one[1], one[4], one[2]])
    keys = _rng.sample_keys(SEED, 0, positions)
    parts = [trace_plan(plan, sizes[b: b + 1], keys[b: b + 1]) for b in range(3)]
    whole = trace_plan(plan, sizes, keys)
    got = TargetGeometry.cat(parts)
    assert got.leaf_steps == whole.leaf_steps and len(got.steps) == len(whole.steps) == 4
    for k, (g, w) in enumerate(zip(got.steps, whole.steps)):
        assert g.mask_fill == w.mask_fill, k
        for a, b in zip((*g.y, *g.x, g.nearest_exact), (*w.y, *w.x, w.nearest_exact)):
            assert a.dtype == b.dtype and torch.equal(a, b), k
    boxes = torch.tensor([[1.5, 2.0, 20.25, 30.0], [0.0, 0.0, 64.0, 64.0], [3.0, 4.5, 29.0, 44.0]])
    assert torch.equal(map_boxes(boxes, [1, 1, 1], got).boxes, map_boxes(boxes, [1, 1, 1], whole).boxes)
    g = torch.Generator().manual_seed(0)
    masks = [torch.randint(0, 5, (2, int(h), int(w)), dtype=torch.uint8, generator=g) for h, w in sizes]
    for a, b in zip(map_masks(masks, got), map_masks(masks, whole)):
        assert torch.equal(a, b)


def test_a_replacements_trace_put_in_its_batchs_is_the_batchs_traced_with_it():
    """on_error's replacement found on the GPU is drawn on its own (``_decode``): its trace put in
    the batch's (``TargetGeometry.put``) is the trace of the batch drawn with it, the steps one
    sample has and another not, and the boxes RandomIoUCrop zeroes, included."""
    from torchdali.transforms._targets import draw_and_trace

    plan = compile_transforms([T.RandomZoomOut(fill=0, side_range=(1.0, 2.0)), T.RandomIoUCrop(),
                               T.RandomHorizontalFlip(), T.Resize((24, 20))])
    rng = np.random.default_rng(0)

    def boxes(h: int, w: int, n: int) -> np.ndarray:
        x, y = np.sort(rng.uniform(0, w, (n, 2)), axis=1), np.sort(rng.uniform(0, h, (n, 2)), axis=1)
        return np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], axis=1)

    sizes = np.array([(37, 53), (64, 64), (45, 30), (50, 41)], dtype=np.float64)
    given = [boxes(37, 53, 3), boxes(64, 64, 5), boxes(45, 30, 2), boxes(50, 41, 4)]
    keys = _rng.sample_keys(SEED, 0, np.arange(4))
    batch = trace_plan(plan, sizes, keys, given)
    for i in range(4):
        size, key, spare = np.array([(29, 70)], dtype=np.float64), _rng.sample_keys(SEED, 0, np.array([40 + i])), \
            [boxes(29, 70, 6)]
        _, one = draw_and_trace(plan, size, key, spare)
        got = batch.put(i, one, [len(b) for b in given])
        sizes_i, keys_i, boxes_i = sizes.copy(), keys.copy(), list(given)
        sizes_i[i], keys_i[i], boxes_i[i] = size[0], key[0], spare[0]
        want = trace_plan(plan, sizes_i, keys_i, boxes_i)
        assert got.leaf_steps == want.leaf_steps and len(got.steps) == len(want.steps), i
        assert np.array_equal(got.size, want.size) and np.array_equal(got.source_size, want.source_size), i
        assert [p for p, _ in got.zeroed] == [p for p, _ in want.zeroed], i
        assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(got.zeroed, want.zeroed)), i
        for k, (g, w) in enumerate(zip(got.steps, want.steps)):
            assert g.mask_fill == w.mask_fill, (i, k)
            for a, b in zip((*g.y, *g.x, g.nearest_exact), (*w.y, *w.x, w.nearest_exact)):
                assert a.dtype == b.dtype and torch.equal(a, b), (i, k)
    with pytest.raises(ValueError, match="box count"):
        batch.put(0, one)
