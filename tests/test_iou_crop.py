"""RandomIoUCrop (``torchdali/transforms/_iou_crop.py``) and the detection references' presets.

* The draw against torchvision's own ``RandomIoUCrop.make_params`` on the same image size
  and boxes: the distributions of the chosen minimum (left alone or not), the crop's
  size and position (Kolmogorov-Smirnov, chi-square), and every drawn crop obeys
  torchvision's acceptance rules (aspect ratio, a centre inside, the IoU minimum).
* Through the loader, boxes and masks against torchvision with the draw replayed:
  ``test_geometry_targets.py``'s ``ssd`` and ``ssdlite_unsanitized`` pipelines.
* torchvision's ``references/detection/presets.py`` (``DetectionPresetTrain`` for every
  ``data_augmentation``, ``DetectionPresetEval``), written out as the v2 objects they
  build with ``use_v2=True``, passed unchanged, on both paths (the GPU one in the
  ``cuda`` twin), targets against torchvision.
* What cannot be drawn: no boxes in the items, boxes dropped before the crop, a sample
  no crop can take.
"""
from __future__ import annotations

import os
from collections import Counter, defaultdict

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torchvision.transforms.v2 as v2  # noqa: E402
from torchvision import tv_tensors  # noqa: E402

import torchdali as td  # noqa: E402
from torchdali import _rng  # noqa: E402
from torchdali import transforms as T  # noqa: E402
from torchdali.errors import SampleError  # noqa: E402
from torchdali.transforms import _geometry as G  # noqa: E402
from torchdali.transforms._targets import BoxTrack  # noqa: E402

from .test_auto_augment import _ks, _ks_critical, chi_square_p  # noqa: E402
from .test_geometry_targets import Detection, assert_target, expected, run_loader  # noqa: E402

N = 1500
SIZE = (48, 64)
BOXES = np.array([[4.5, 6.0, 20.0, 30.0], [30.0, 10.0, 60.0, 44.0], [10.0, 36.0, 14.0, 41.0]])
MEAN = (123.0, 117.0, 104.0)


def _ours(t: T.RandomIoUCrop, n: int, seed: int = 0) -> list[dict]:
    """``n`` draws of ``t`` for one image of SIZE with BOXES, each its own sample key."""
    plan = T.compile_transforms([t])
    keys = _rng.sample_keys(seed, 0, np.arange(n))
    track = BoxTrack([BOXES] * n)
    g = G.BatchGeometry.identity(np.array([SIZE] * n, dtype=np.float64))
    g.boxes = track
    p = t.make_params(g, _rng.uniform(keys, 0, 1))
    assert plan.draws_from_boxes
    out = []
    for b in range(n):
        keep = p["keep"][3 * b: 3 * b + 3]
        box = (int(p["top"][b]), int(p["left"][b]), int(p["height"][b]), int(p["width"][b]))
        out.append({} if box == (0, 0, *SIZE) and keep.all() else
                   dict(top=box[0], left=box[1], height=box[2], width=box[3], inside=keep))
    return out


def _theirs(tv: v2.RandomIoUCrop, n: int) -> list[dict]:
    torch.manual_seed(0)
    image = tv_tensors.Image(torch.zeros(3, *SIZE, dtype=torch.uint8))
    boxes = tv_tensors.BoundingBoxes(torch.tensor(BOXES, dtype=torch.float32), format="XYXY", canvas_size=SIZE)
    out = []
    for _ in range(n):
        p = tv.make_params([image, boxes])
        if p:
            p["inside"] = p.pop("is_within_crop_area").numpy()
        out.append(p)
    return out


@pytest.mark.parametrize("kwargs", [{}, dict(min_scale=0.5, sampler_options=[0.3, 0.5, 1.0], trials=5)],
                         ids=["default", "narrow"])
def test_draw_distribution_matches_torchvision(kwargs):
    ours, theirs = _ours(T.RandomIoUCrop(**kwargs), N, seed=1), _theirs(v2.RandomIoUCrop(**kwargs), N)
    left_alone = Counter(bool(d) for d in ours), Counter(bool(d) for d in theirs)
    assert chi_square_p(*left_alone)[1] > 1e-3, left_alone
    cropped = [d for d in ours if d], [d for d in theirs if d]
    for key in ("top", "left", "height", "width"):
        a, b = (np.array([d[key] for d in ds], dtype=np.float64) for ds in cropped)
        assert _ks(a, b) < _ks_critical(len(a), len(b)), key
    inside = Counter(tuple(d["inside"].tolist()) for d in cropped[0]), \
        Counter(tuple(d["inside"].tolist()) for d in cropped[1])
    assert chi_square_p(*inside)[1] > 1e-3, inside


def test_every_crop_obeys_torchvision_rules():
    t = T.RandomIoUCrop()
    for d in _ours(t, 400, seed=2):
        if not d:
            continue
        top, left, h, w = d["top"], d["left"], d["height"], d["width"]
        assert 0.5 <= w / h <= 2.0 and h >= int(SIZE[0] * 0.3) and w >= int(SIZE[1] * 0.3)
        assert 0 <= top <= SIZE[0] - h and 0 <= left <= SIZE[1] - w
        cx, cy = BOXES[:, [0, 2]].mean(1), BOXES[:, [1, 3]].mean(1)
        inside = (left < cx) & (cx < left + w) & (top < cy) & (cy < top + h)
        assert np.array_equal(inside, d["inside"]) and inside.any()


def test_draws_are_per_sample_and_reproducible():
    a, b = _ours(T.RandomIoUCrop(), 50, seed=3), _ours(T.RandomIoUCrop(), 50, seed=3)
    assert all(x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b))
    assert len({(d.get("top"), d.get("left"), d.get("height")) for d in a}) > 10


# -- torchvision's detection presets, unchanged ------------------------------------------------

def detection_preset_train(data_augmentation: str, hflip_prob: float = 0.5, mean=MEAN) -> v2.Compose:
    """``DetectionPresetTrain(data_augmentation=..., backend="tensor", use_v2=True).transforms`` as torchvision's
    references/detection/presets.py builds it (lsj's FixedSizeCrop is the reference script's)."""
    steps: list = [v2.PILToTensor()]
    if data_augmentation == "hflip":
        steps += [v2.RandomHorizontalFlip(p=hflip_prob)]
    elif data_augmentation == "lsj":
        steps += [v2.ScaleJitter(target_size=(64, 64), antialias=True), FixedSizeCrop(size=(64, 64), fill=mean),
                  v2.RandomHorizontalFlip(p=hflip_prob)]
    elif data_augmentation == "multiscale":
        steps += [v2.RandomShortestSize(min_size=(32, 40, 48), max_size=80), v2.RandomHorizontalFlip(p=hflip_prob)]
    elif data_augmentation == "ssd":
        steps += [v2.RandomPhotometricDistort(), v2.RandomZoomOut(fill=defaultdict(lambda: mean, {tv_tensors.Mask: 0})),
                  v2.RandomIoUCrop(), v2.RandomHorizontalFlip(p=hflip_prob)]
    elif data_augmentation == "ssdlite":
        steps += [v2.RandomIoUCrop(), v2.RandomHorizontalFlip(p=hflip_prob)]
    steps += [v2.ToDtype(torch.float, scale=True), v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
              v2.SanitizeBoundingBoxes(), v2.ToPureTensor()]
    return v2.Compose(steps)


class FixedSizeCrop(torch.nn.Module):
    """The reference script's class (references/detection/transforms.py), by name and arguments: the
    loader matches it by class name."""

    def __init__(self, size, fill=0, padding_mode="constant"):
        super().__init__()
        self.crop_height, self.crop_width = size
        self.fill, self.padding_mode = fill, padding_mode


PRESETS = ["hflip", "lsj", "multiscale", "ssd", "ssdlite", "eval"]


def _preset(name: str) -> v2.Compose:
    if name == "eval":  # DetectionPresetEval(backend="tensor", use_v2=True)
        return v2.Compose([v2.PILToTensor(), v2.ToDtype(torch.float, scale=True), v2.ToPureTensor()])
    return detection_preset_train(name)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("name", PRESETS)
def test_detection_presets_run_unchanged(name, device):
    ds = Detection(jpeg=device == "cuda")
    tf = _preset(name)
    got = run_loader(ds, tf, device, batch_size=5)
    want = expected(ds, tf)
    for i, ((image, target), (w_image, w_target)) in enumerate(zip(got, want)):
        assert image.dtype == torch.float32 and tuple(image.shape) == tuple(w_image.shape), (i, image.shape)
        assert_target(target, w_target, f"{name}: sample {i}", device)


# -- what cannot be drawn ----------------------------------------------------------------------

class _ImagesOnly(Detection):
    def __getitem__(self, i: int):
        return super().__getitem__(i)[0]


class _NoBoxesFor(Detection):
    """Sample 2's target has no BoundingBoxes."""

    def target(self, i: int) -> dict:
        t = super().target(i)
        if i == 2:
            del t["boxes"]
        return t


def test_refusals_name_what_to_do():
    tf = [T.RandomIoUCrop(), T.Resize((32, 32))]
    with pytest.raises(ValueError, match="no targets"):
        next(iter(td.DataLoader(_ImagesOnly(), batch_size=2, transforms=tf, device="cpu")))
    with pytest.raises(SampleError, match=r"sample 2\b.*one\s+tv_tensors.BoundingBoxes"):
        list(td.DataLoader(_NoBoxesFor(), batch_size=5, transforms=tf, device="cpu"))
    with pytest.raises(ValueError, match="drops boxes before"):
        list(td.DataLoader(Detection(), batch_size=2, device="cpu",
                           transforms=[v2.SanitizeBoundingBoxes(), v2.RandomIoUCrop()]))
    with pytest.raises(ValueError, match="draws its parameters from each sample's BoundingBoxes"):
        T.compile_transforms(tf).params(np.array([SIZE]), _rng.sample_keys(0, 0, np.arange(1)))


def test_a_sample_no_crop_can_take_is_named():
    """Sample 1 has no boxes: without a 1.0 option torchvision would loop forever."""
    tf = [T.RandomIoUCrop(sampler_options=[0.0, 0.5])]
    with pytest.raises(SampleError, match=r"sample 1\b.*no crop found"):
        list(td.DataLoader(Detection(), batch_size=5, transforms=tf, device="cpu"))


def test_the_workers_trace_maps_as_a_fresh_one():
    """The worker draws the parameters and the targets' steps once (``draw_and_trace``); the trace
    crosses to the main process pickled, and maps the targets as tracing there again would."""
    import pickle

    from torchdali.transforms._target_plan import TargetPlan
    from torchdali.transforms._targets import draw_and_trace, trace_plan

    ds = Detection()
    plan = T.compile_transforms(detection_preset_train("ssd"))
    tp = TargetPlan.of(plan)
    targets = [ds.target(i) for i in range(len(ds))]
    sizes, keys = np.array(ds.sizes), _rng.sample_keys(4, 0, np.arange(len(ds)))
    boxes = tp.draw_boxes(targets)
    params, trace = draw_and_trace(plan, sizes, keys, boxes)
    assert torch.equal(params.params, plan.params(sizes, keys, BoxTrack(boxes)).params)
    fresh = trace_plan(plan, sizes, keys, boxes)
    moved = pickle.loads(pickle.dumps(trace))
    assert moved.leaf_steps == fresh.leaf_steps and np.array_equal(moved.size, fresh.size)
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(moved.zeroed, fresh.zeroed))
    for got, want in zip(tp.map(targets, sizes, keys, "cpu", trace=moved), tp.map(targets, sizes, keys, "cpu")):
        assert_target(got, want, "trace")


def _traced(ds, tf):
    """The plan of ``tf``, its TargetPlan, ``ds``'s targets, sizes and sample keys, and the trace of the
    worker's draw (``draw_and_trace``), as the GPU path's worker ships them."""
    from torchdali.transforms._target_plan import TargetPlan
    from torchdali.transforms._targets import draw_and_trace

    from .test_geometry_targets import SEED

    plan = T.compile_transforms(tf)
    tp = TargetPlan.of(plan)
    n = len(ds)
    targets = [ds.target(i) for i in range(n)]
    sizes, keys = np.array(ds.sizes), _rng.sample_keys(SEED, 0, np.arange(n))
    _, trace = draw_and_trace(plan, sizes, keys, tp.draw_boxes(targets))
    return tp, targets, sizes, keys, trace


@pytest.mark.parametrize("name", ["ssd", "lsj", "multiscale", "masks_as_labels", "ssd_boxes_only"])
def test_the_executor_maps_the_workers_targets_as_torchvision(name):
    """The GPU path's worker ships the targets unmapped, packed, with the trace of its draw
    (``draw_and_trace``); the executor maps them whole in one ``TargetPlan.map``
    (``_executor.map_targets``): a detection batch's boxes and labels a key at a time (its
    ``TargetColumns``), a labels_getter that reads each target sample by sample. Both give
    torchvision's targets, including a Mask that SanitizeBoundingBoxes takes for labels."""
    import pickle
    from types import SimpleNamespace

    from torchdali._executor._executor import map_targets
    from torchdali._executor._wire import PackedTargets

    from .test_geometry_targets import SEED

    ds = Detection(masks=not name.endswith("_boxes_only"))
    if name == "masks_as_labels":
        tf = [T.RandomZoomOut(fill={tv_tensors.Mask: 7}, p=1.0), T.RandomIoUCrop(),
              v2.SanitizeBoundingBoxes(labels_getter=lambda inputs: inputs[1]["masks"]), T.Resize((40, 40))]
    else:
        tf = detection_preset_train(name.replace("_boxes_only", ""))
    tp, targets, sizes, _, trace = _traced(ds, tf)
    n = len(ds)
    packed = pickle.loads(pickle.dumps(PackedTargets.pack(targets)))
    columns = packed.columnar()
    assert set(columns.columns) == {"boxes", "labels"} and not columns.masks  # (masks of mixed sizes)
    assert tp._by_columns(columns) == (name != "masks_as_labels")
    batch = SimpleNamespace(seed=SEED, epoch=0, positions=np.arange(n), trace=pickle.loads(pickle.dumps(trace)))
    got = map_targets(tp, packed, batch, sizes, torch.device("cpu"))
    want = expected(ds, tf)
    assert len(got) == len(want) == n
    for i, (g, (_, w)) in enumerate(zip(got, want)):
        assert_target(g, w, f"{name}: sample {i}")
        assert list(g) == list(w)
    # a batch with a replacement found on the GPU has no trace: traced again, the same targets
    again = map_targets(tp, packed, SimpleNamespace(seed=SEED, epoch=0, positions=np.arange(n), trace=None), sizes,
                        torch.device("cpu"))
    for i, (g, (_, w)) in enumerate(zip(again, want)):
        assert_target(g, w, f"{name}, traced again: sample {i}")


@pytest.mark.parametrize("name", ["ssd", "lsj", "masks_as_labels"])
def test_the_targets_go_to_the_device_in_one_copy(name, monkeypatch):
    """Off the host, ``TargetPlan.map`` puts the batch's tensors on the device with one ``upload``
    (the labels of every sample in one block, split there) and knows the storages that hold them
    (``TargetList.tensors``). A stand-in device: an upload that copies on the host."""
    from torchdali._executor._wire import PackedTargets
    from torchdali.transforms import _target_plan

    calls = []

    def upload(parts, device):
        calls.append(len(parts))
        return [torch.from_numpy(np.array(p)) if isinstance(p, np.ndarray) else p.as_subclass(torch.Tensor).clone()
                for p in parts]

    monkeypatch.setattr(_target_plan, "upload", upload)
    ds = Detection()
    if name == "masks_as_labels":
        tf = [T.RandomIoUCrop(), v2.SanitizeBoundingBoxes(labels_getter=lambda inputs: inputs[1]["masks"])]
    else:
        tf = detection_preset_train(name)
    tp, targets, sizes, keys, trace = _traced(ds, tf)
    want = expected(ds, tf)
    for given in (targets, PackedTargets.pack(targets).columnar()):  # one by one, and a key at a time
        calls.clear()
        got = tp.map(given, sizes, keys, torch.device("meta"), trace=trace)
        assert len(calls) == 1
        assert len({g["labels"].untyped_storage().data_ptr() for g in got if g["labels"].numel()}) == 1
        held = {t.untyped_storage().data_ptr() for t in got.tensors}
        for i, (g, (_, w)) in enumerate(zip(got, want)):
            assert_target(g, w, f"{name}: sample {i}")
            for leaf in g.values():
                if isinstance(leaf, torch.Tensor) and leaf.numel():
                    assert leaf.untyped_storage().data_ptr() in held, (i, leaf.shape)
