"""Detection loaders with SSD's augmentation, side by side: torchdali, torchvision's DataLoader, NVIDIA DALI.

    python benchmarks/detection_speed.py [DATA_DIR] [--systems torchdali,torchvision,dali] [--batch-size 64]
                                         [--workers N] [--epochs 3] [--train-steps 40] [--num-images 4096]
                                         [--precision bf16] [--out DIR]
    taskset -c 0-2 python benchmarks/detection_speed.py ... --workers 3    # a machine with 3 cores per GPU

DATA_DIR is a COCO-shaped folder: ``train2017/`` and ``annotations/instances_train2017.json``.
Without it, ``coco_folder`` of ``benchmarks/photo_folder.py`` makes one of ``--num-images``
photographs (mean about 160 KiB, 0.32 MP, 7 boxes and polygons per image) in
``.torchdali_data/coco-N``; a folder made with the same arguments is reused.

Every system gets ``--workers`` CPU workers (DALI: threads), default the CPUs this process may
use, and hands the loop ``(images [B, 3, 320, 320] float 0..1 on the GPU, list of per-image
{"boxes" XYXY pixels, "labels"})``:

* ``torchdali``: ``td.DataLoader(td.datasets.CocoDetection(...), transforms=preset)``, where
  the preset is torchvision's detection reference ``DetectionPresetTrain(data_augmentation="ssd",
  backend="tv_tensor", use_v2=True)`` written out as v2 objects (ToImage, RandomPhotometricDistort,
  RandomZoomOut with the mean fill, RandomIoUCrop, RandomHorizontalFlip, ToDtype, XYXY,
  SanitizeBoundingBoxes, ToPureTensor) with ``Resize((320, 320))`` after the flip, as
  ssdlite320's transform would resize to 320 anyway;
* ``torchvision``: the same v2 objects in ``wrap_dataset_for_transforms_v2(CocoDetection(...))``,
  torch's DataLoader (pin_memory), batches copied to the GPU;
* ``dali``: the SSD pipeline of DALI's example (docs/examples/use_cases/pytorch/
  single_stage_detector): ``fn.readers.coco`` (ratio, ltrb, random_shuffle),
  ``fn.random_bbox_crop`` (SSD's IoU thresholds, scaling 0.3-1, aspect 0.5-2, 50 attempts),
  ``fn.decoders.image_slice`` (mixed, ``hw_decoder_load=0.9``), ``fn.resize`` to 320x320,
  ``fn.hsv`` + ``fn.brightness_contrast``, ``fn.bb_flip`` and ``fn.crop_mirror_normalize``
  (mirror, CHW float); boxes and labels padded per batch with their counts. As in DALI's
  example, and unlike the preset: no zoom out (no ``fn.paste``), the colour ops run on every
  image at 320x320 after the resize (the preset: each with p=0.5, before the geometry, at the
  decoded size), hue within +-0.5 degrees (the preset: +-18), and no SanitizeBoundingBoxes.
  The example's box encoder is left out (the model matches anchors itself), and the output is
  scaled to 0..1 instead of normalized (the model normalizes, as for the others).

Each loader: ``--epochs`` timed epochs after one warm-up epoch; images/s (median, spread) and CPU
core-seconds per 1000 images of the process tree (``torchdali.bench._epochs``, as
``benchmarks/recipes.py``). Then training: ``torchvision.models.detection.
ssdlite320_mobilenet_v3_large`` (random weights, 91 classes, SGD, ``--precision`` autocast),
``--train-steps`` steps after 10 warm-up steps on each loader's batches, and on ``limit``: one
batch kept on the GPU and reused (the model's own speed); each loader as a % of the limit.
A system that fails (to build, or on its first batch) is reported and the others go on.
Environment and figures go to ``OUT/detection_speed.json``.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import itertools
import json
import os
import subprocess
import sys
import time
import traceback
from collections import defaultdict
from typing import Any, Callable, Iterator

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from torchdali.bench import _epochs, environment, forever  # noqa: E402

SIZE = 320  # ssdlite320's input
MEAN = (123.0, 117.0, 104.0)  # the detection reference's fill
TRAIN_WARMUP = 10
TARGET_KEYS = ["boxes", "labels", "image_id"]


def ssd_preset():
    """torchvision's detection reference ``DetectionPresetTrain(data_augmentation="ssd",
    backend="tv_tensor", use_v2=True)``, with ``Resize((320, 320))`` after the flip."""
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    fill = defaultdict(lambda: MEAN, {tv_tensors.Mask: 0})
    return v2.Compose([
        v2.ToImage(),
        v2.RandomPhotometricDistort(),
        v2.RandomZoomOut(fill=fill),
        v2.RandomIoUCrop(),
        v2.RandomHorizontalFlip(p=0.5),
        v2.Resize((SIZE, SIZE)),
        v2.ToDtype(torch.float, scale=True),
        v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
        v2.SanitizeBoundingBoxes(),
        v2.ToPureTensor(),
    ])


def data_set(args: argparse.Namespace) -> dict:
    """The images folder and annotation file: DATA_DIR as it is when it holds an annotation file
    that ``coco_folder`` did not write (a real COCO), otherwise made or reused by ``coco_folder``."""
    root = args.data or os.path.join(".torchdali_data", f"coco-{args.num_images}")
    ann = os.path.join(root, "annotations", "instances_train2017.json")
    if args.data and os.path.exists(ann) and not os.path.exists(os.path.join(root, "stats.json")):
        return {"kind": "given", "images": os.path.join(root, "train2017"), "annotations": ann}
    sys.path.insert(0, HERE)
    from photo_folder import coco_folder

    return coco_folder(root, args.num_images, progress=True)


# -- the three loaders ---------------------------------------------------------------------------------

@dataclasses.dataclass
class Loader:
    epoch: Callable[[], Any]  # one epoch's iterable of (images, targets)
    close: Callable[[], None] = lambda: None
    stats: Callable[[], Any] | None = None  # torchdali's loader.stats()


def _tv_collate(batch: list) -> tuple[torch.Tensor, list[dict]]:
    images, targets = zip(*batch)
    return torch.stack(images), [{"boxes": t["boxes"], "labels": t["labels"]} for t in targets]


class _OnGpu:
    """torch DataLoader batches copied to the GPU, as a training loop does."""

    def __init__(self, loader: Any, device: torch.device) -> None:
        self.loader, self.device = loader, device

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for images, targets in self.loader:
            yield (images.to(self.device, non_blocking=True),
                   [{k: v.to(self.device, non_blocking=True) for k, v in t.items()} for t in targets])


def torchvision_loader(data: dict, args: argparse.Namespace, device: torch.device):
    from torchvision.datasets import CocoDetection, wrap_dataset_for_transforms_v2

    ds = wrap_dataset_for_transforms_v2(CocoDetection(data["images"], data["annotations"], transforms=ssd_preset()),
                                        target_keys=TARGET_KEYS)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                         drop_last=True, pin_memory=True, persistent_workers=True,
                                         collate_fn=_tv_collate)
    return Loader(lambda: _OnGpu(loader, device))


def torchdali_loader(data: dict, args: argparse.Namespace, device: torch.device):
    import torchdali as td

    # Resize((320, 320)) fixes the size: images come as one [B, 3, 320, 320] tensor, targets as a list
    ds = td.datasets.CocoDetection(data["images"], data["annotations"], target_keys=TARGET_KEYS)
    loader = td.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, drop_last=True,
                           persistent_workers=True, transforms=ssd_preset(), device=device, seed=0)
    return Loader(lambda: iter(loader), loader.close, loader.stats)


def dali_loader(data: dict, args: argparse.Namespace, device: torch.device):
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    def uniform(lo: float, hi: float):
        return fn.random.uniform(range=[lo, hi])

    @pipeline_def
    def ssd_pipeline():
        jpegs, boxes, labels = fn.readers.coco(file_root=data["images"], annotations_file=data["annotations"],
                                               skip_empty=True, ratio=True, ltrb=True, random_shuffle=True,
                                               name="Reader")
        begin, size, boxes, labels = fn.random_bbox_crop(
            boxes, labels, aspect_ratio=[0.5, 2.0], thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9], scaling=[0.3, 1.0],
            bbox_layout="xyXY", allow_no_crop=True, num_attempts=50)
        images = fn.decoders.image_slice(jpegs, begin, size, device="mixed", output_type=types.RGB,
                                         hw_decoder_load=0.9)
        images = fn.resize(images, resize_x=SIZE, resize_y=SIZE, min_filter=types.DALIInterpType.INTERP_TRIANGULAR)
        # float in between, as DALI's example: no clipping or rounding after the hue/saturation step
        images = fn.hsv(images, dtype=types.FLOAT, hue=uniform(-0.5, 0.5), saturation=uniform(0.5, 1.5))
        images = fn.brightness_contrast(images, contrast_center=128, dtype=types.UINT8,
                                        brightness=uniform(0.875, 1.125), contrast=uniform(0.5, 1.5))
        flip = fn.random.coin_flip(probability=0.5)
        boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
        images = fn.crop_mirror_normalize(images, mirror=flip, mean=[0.0] * 3, std=[255.0] * 3, dtype=types.FLOAT,
                                          output_layout="CHW")
        # ragged boxes and labels padded to the batch's longest, with each sample's count (CPU)
        return images, fn.pad(boxes).gpu(), fn.pad(labels).gpu(), labels.shape()

    pipe = ssd_pipeline(batch_size=args.batch_size, num_threads=args.workers, device_id=device.index or 0,
                        prefetch_queue_depth=2, seed=0)
    pipe.build()
    it = DALIGenericIterator([pipe], ["images", "boxes", "labels", "counts"], reader_name="Reader",
                             last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)

    class Epoch:
        def __len__(self) -> int:
            return len(it)

        def __iter__(self):
            for (out,) in it:
                boxes = out["boxes"] * SIZE  # relative XYXY in the 320x320 output -> pixels
                labels = out["labels"].flatten(1).long()
                counts = out["counts"][:, 0].tolist()
                yield out["images"], [{"boxes": boxes[i, :n], "labels": labels[i, :n]} for i, n in enumerate(counts)]

    return Loader(Epoch)


LOADERS: dict[str, Callable] = {"torchdali": torchdali_loader, "torchvision": torchvision_loader, "dali": dali_loader}


# -- training ------------------------------------------------------------------------------------------

def make_model(device: torch.device):
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    model = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=91).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.002, momentum=0.9, weight_decay=4e-5)
    return model, opt


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_rate(model: Any, opt: Any, batches: Iterator, steps: int, device: torch.device, precision: str) -> float:
    """Images per second of ``steps`` SGD steps after ``TRAIN_WARMUP``, ``next(batches)`` included."""
    n, t0 = 0, 0.0
    for step in range(TRAIN_WARMUP + steps):
        if step == TRAIN_WARMUP:
            _sync(device)
            n, t0 = 0, time.perf_counter()
        images, targets = next(batches)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            losses = model(list(images), list(targets))
        loss = sum(losses.values())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        n += len(images)
    _sync(device)
    return n / (time.perf_counter() - t0)


def limit_batch(data: dict, batch_size: int, device: torch.device) -> tuple[torch.Tensor, list[dict]]:
    """Random pixels on the GPU with the first images' annotations, scaled to 320x320."""
    with open(data["annotations"]) as f:
        coco = json.load(f)
    images = sorted(coco["images"], key=lambda im: im["id"])[:batch_size]
    anns = defaultdict(list)
    for a in coco["annotations"]:
        anns[a["image_id"]].append(a)
    targets = []
    for im in images:
        sx, sy = SIZE / im["width"], SIZE / im["height"]
        boxes = [[x * sx, y * sy, (x + w) * sx, (y + h) * sy] for x, y, w, h in (a["bbox"] for a in anns[im["id"]])]
        targets.append({"boxes": torch.tensor(boxes, dtype=torch.float32, device=device).reshape(-1, 4),
                        "labels": torch.tensor([a["category_id"] for a in anns[im["id"]]], dtype=torch.int64,
                                               device=device)})
    return torch.rand(len(images), 3, SIZE, SIZE, device=device), targets


# -- the run -------------------------------------------------------------------------------------------

def run_system(name: str, data: dict, args: argparse.Namespace, device: torch.device, model: Any, opt: Any,
               limit: float) -> dict:
    result: dict[str, Any] = {}
    loader = Loader(lambda: ())
    try:
        loader = LOADERS[name](data, args, device)
        result["loader"] = _epochs(loader.epoch, args.epochs, 1, device, name, False)
        if loader.stats is not None and loader.stats().last is not None:
            result["last_epoch_stats"] = loader.stats().last.as_dict()
        batches = forever(loader.epoch)
        try:
            rate = train_rate(model, opt, batches, args.train_steps, device, args.precision)
        finally:
            batches.close()
        result["train"] = {"images_per_s": rate, "percent_of_limit": 100.0 * rate / limit}
    except Exception as e:  # one failing system must not lose the others' figures
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()
    finally:
        try:
            loader.close()
        except Exception as e:
            result.setdefault("close_error", f"{type(e).__name__}: {e}")
        loader = None  # DALI's pipeline sits in a reference cycle (its Epoch class): free it before the next system
        gc.collect()
        torch.cuda.empty_cache()
    return result


RATIOS = {  # (numerator, denominator, figure): target
    ("torchdali", "torchvision", "images_per_s"): ">= 5",
    ("torchdali", "torchvision", "cpu_s_per_1000"): "<= 0.10",
    ("torchdali", "dali", "images_per_s"): ">= 1.0 at 16 cores, >= 1.5 at 3 cores",
    ("torchdali", "dali", "cpu_s_per_1000"): "",
}


def report(results: dict, limit: float) -> dict:
    """Print the table and the ratios between the systems; returns the ratios."""
    print(f"\n{'system':<12} {'images/s':>9} {'spread':>7} {'CPU-s/1k':>9} {'train img/s':>12} {'% of limit':>11}")
    print(f"{'limit':<12} {'':>9} {'':>7} {'':>9} {limit:>12.0f} {100.0:>10.1f}%")
    for name, r in results.items():
        lo, tr = r.get("loader"), r.get("train")
        row = (f"{lo['images_per_s']:>9.0f} {100 * lo['spread']:>6.1f}% {lo['cpu_s_per_1000']:>9.2f}" if lo else "")
        row += f" {tr['images_per_s']:>12.0f} {tr['percent_of_limit']:>10.1f}%" if tr else ""
        print(f"{name:<12} {row}" + (f"  ERROR {r['error'][:300]}" if "error" in r else ""))
    ratios = {}
    for (a, b, figure), target in RATIOS.items():
        try:
            value = results[a]["loader"][figure] / results[b]["loader"][figure]
        except (KeyError, ZeroDivisionError):
            continue
        ratios[f"{a}/{b} {figure}"] = value
        print(f"{a}/{b} {figure:<15} {value:6.2f}   {f'target {target}' if target else ''}")
    return ratios


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", nargs="?", help="COCO-shaped folder (train2017/, annotations/instances_train2017.json); "
                   "default: made by photo_folder.coco_folder in .torchdali_data/coco-N")
    p.add_argument("--systems", default="torchdali,torchvision,dali")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                   help="CPU workers of each DataLoader and DALI's threads (default: the CPUs this process may use)")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs after one warm-up epoch (median reported)")
    p.add_argument("--train-steps", type=int, default=40,
                   help=f"timed training steps after {TRAIN_WARMUP} warm-up steps")
    p.add_argument("--num-images", type=int, default=4096, help="size of the generated set (without DATA_DIR)")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16", help="training autocast")
    p.add_argument("--out", default="bench_out")
    args = p.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in LOADERS]
    if unknown:
        p.error(f"unknown systems {unknown}; choose from {list(LOADERS)}")
    if not torch.cuda.is_available():
        print("detection_speed.py needs a CUDA GPU: torch.cuda.is_available() is False here. The loaders "
              "deliver batches to the GPU and the model trains on it; run it on a GPU machine.", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device())
    torch.backends.cudnn.benchmark = True  # one input size

    data = data_set(args)
    env = environment(device, sys.argv[1:])
    env["command"] = "python benchmarks/detection_speed.py " + " ".join(sys.argv[1:])
    env["cpus"], env["cpus_machine"] = len(os.sched_getaffinity(0)), os.cpu_count()
    try:
        import nvidia.dali

        env["dali"] = nvidia.dali.__version__
    except ImportError:
        env["dali"] = None
    try:
        env["torchdali_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True,
                                                 capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        env["torchdali_commit"] = None
    print(json.dumps(env), flush=True)
    print(f"data: {json.dumps(data)}", flush=True)

    model, opt = make_model(device)
    fixed = limit_batch(data, args.batch_size, device)
    limit = train_rate(model, opt, itertools.repeat(fixed), args.train_steps, device, args.precision)
    print(f"{'limit':<12} training {limit:.0f} img/s (one batch kept on the GPU)", flush=True)

    results: dict[str, dict] = {}
    for name in systems:
        if name == "dali" and env["dali"] is None:
            results[name] = {"error": "skipped: nvidia.dali is not installed"}
            print(f"{name:<12} skipped: nvidia.dali is not installed", flush=True)
            continue
        t0 = time.perf_counter()
        results[name] = r = run_system(name, data, args, device, model, opt, limit)
        lo, tr = r.get("loader", {}), r.get("train", {})
        print(f"{name:<12} {lo.get('images_per_s', 0):.0f} img/s, {lo.get('cpu_s_per_1000', 0):.2f} CPU-s/1k, "
              f"training {tr.get('percent_of_limit', 0):.1f}% of limit ({time.perf_counter() - t0:.0f} s)"
              + (f"  ERROR {r['error'][:500]}" if "error" in r else ""), flush=True)
    ratios = report(results, limit)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "detection_speed.json")
    with open(path, "w") as f:
        json.dump({"environment": env, "args": vars(args), "data": data,
                   "limit": {"images_per_s": limit, "steps": args.train_steps}, "results": results,
                   "ratios": ratios}, f, indent=2)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
