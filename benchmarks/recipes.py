"""Training recipes through three loaders in one run: torchdali, NVIDIA DALI, torchvision's DataLoader.

    python benchmarks/recipes.py DATA_DIR [--recipes plain,reference,val] [--systems torchdali,dali,torchvision]
                                 [--variants hw1,w8] [--batch-size 256] [--workers 16] [--dali-threads 8]
                                 [--epochs 4] [--out DIR] [--interleave ROUNDS]

Recipes (defaults: torchvision's classification-reference sizes; ``--size 224 --val-resize 256``
gives the ResNet-50 recipe):

* ``plain``: RandomResizedCrop(176) + flip + normalize, float32 NCHW;
* ``reference``: torchvision's reference recipe (``ClassificationPresetTrain`` with
  ``auto_augment_policy="ta_wide"``, ``random_erase_prob=0.1``, bilinear) and its
  MixUp(0.2)/CutMix(1.0) batch choice. DALI runs ``trivial_augment_wide`` and
  ``fn.erase`` (no MixUp/CutMix: DALI has none); torchdali is timed with and without
  the batch MixUp/CutMix;
* ``val``: Resize(232) + CenterCrop(224) + normalize.

DALI decodes with the hardware decoder (``hw_decoder_load=0.9``): train through
``fn.decoders.image_random_crop`` (ROI decode), val through ``fn.decoders.image``;
``--variants hw1`` also runs DALI with ``hw_decoder_load=1`` (every image on the engines).

torchdali and torchvision get the recipe as torchvision v2 objects (torchdali converts
them); DALI gets the nearest pipeline of its own operators (named in the output).
torchdali runs as a user would run it: public API, default settings.
Every system reads the same files; each figure is the median of ``--epochs`` epochs
after one warm-up epoch, with CPU core-seconds per 1000 images (process tree).
The environment and every figure go to ``OUT/recipes.json``.

``--interleave ROUNDS`` compares torchdali with DALI more finely: both are built in one
process and their epochs alternate (a round is one epoch of each, the order swapped from
round to round; with ``--variants wN`` also a torchdali loader with N workers), so both
meet the machine's drift within a second of each other. It prints the median of the
rounds' ratios against DALI, over whole epochs and past each epoch's first batches
(``steady``), and how many rounds torchdali led. Throughput only: the two systems' CPU
time is not told apart. With persistent workers torchdali prepares its next epoch while
DALI runs; ``TORCHDALI_RUN_AHEAD=0`` on the command line turns that off for a stricter
comparison (RESULTS.md says which runs used it).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import os
import sys
import time
from typing import Any, Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from torchdali.bench import MEAN, STD, OnDevice, _epochs, environment  # noqa: E402


def _tv_preset(recipe: str, size: int, crop: int, resize: int, backend: str):
    """The torchvision v2 Compose that the classification reference's presets build."""
    from torchvision.transforms import v2

    bilinear = v2.InterpolationMode.BILINEAR
    head = [v2.PILToTensor()] if backend == "tensor" else []
    tail = [v2.PILToTensor()] if backend == "pil" else []
    tail += [v2.ToDtype(torch.float, scale=True), v2.Normalize(mean=MEAN, std=STD)]
    if recipe == "val":
        return v2.Compose(head + [v2.Resize(resize, interpolation=bilinear, antialias=True),
                                  v2.CenterCrop(crop)] + tail + [v2.ToPureTensor()])
    geo = [v2.RandomResizedCrop(size, interpolation=bilinear, antialias=True), v2.RandomHorizontalFlip(0.5)]
    if recipe == "plain":
        return v2.Compose(head + geo + tail + [v2.ToPureTensor()])
    return v2.Compose(head + geo + [v2.TrivialAugmentWide(interpolation=bilinear)] + tail
                      + [v2.RandomErasing(p=0.1), v2.ToPureTensor()])


def _mixup_cutmix(num_classes: int):
    from torchvision.transforms import v2

    return v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=num_classes),
                            v2.CutMix(alpha=1.0, num_classes=num_classes)])


def run_torchvision(root: str, recipe: str, args: argparse.Namespace, device: torch.device,
                    mix: bool) -> dict:
    import torchvision
    from torch.utils.data import default_collate

    preset = _tv_preset(recipe, args.size, args.val_crop, args.val_resize, "pil")
    ds = torchvision.datasets.ImageFolder(root, transform=preset)
    collate = None
    if mix:
        mixer = _mixup_cutmix(len(ds.classes))

        def mix_collate(batch):
            return mixer(*default_collate(batch))

        collate = mix_collate

    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                         drop_last=True, pin_memory=device.type == "cuda", collate_fn=collate,
                                         persistent_workers=True, prefetch_factor=2)
    return _epochs(lambda: OnDevice(loader, device), args.epochs, 1, device, "torchvision", False)


def torchdali_loader(root: str, recipe: str, args: argparse.Namespace, device: torch.device, mix: bool,
                     workers: int | None = None):
    """The recipe's ``torchdali.DataLoader``, as a user builds it (persistent workers, seed 0)."""
    import torchdali as td

    ds = td.datasets.ImageFolder(root)
    extra: dict[str, Any] = {}
    if mix:
        extra["batch_transforms"] = _mixup_cutmix(len(ds.classes))
    return td.DataLoader(ds, batch_size=args.batch_size, shuffle=True, drop_last=True,
                         num_workers=args.workers if workers is None else workers,
                         transforms=_tv_preset(recipe, args.size, args.val_crop, args.val_resize, "tensor"),
                         device=device, seed=0, persistent_workers=True, prefetch_factor=2, **extra)


def run_torchdali(root: str, recipe: str, args: argparse.Namespace, device: torch.device, mix: bool) -> dict:
    loader = torchdali_loader(root, recipe, args, device, mix)
    try:
        r = _epochs(lambda: iter(loader), args.epochs, 1, device, "torchdali", False)
        last = loader.stats().last
        if last is not None:
            r["last_epoch_stats"] = last.as_dict()
    finally:
        loader.close()
    return r


def _dali_erase(images, size: int, p: float):
    """torchvision's RandomErasing box (scale 0.02-0.33, log-ratio 0.3-3.3), drawn once per sample,
    applied with probability ``p`` (a zero-size box otherwise)."""
    from nvidia.dali import fn, types
    from nvidia.dali import math as dmath

    area = fn.random.uniform(range=[0.02, 0.33]) * float(size * size)
    ratio = dmath.exp(fn.random.uniform(range=[math.log(0.3), math.log(3.3)]))
    h = dmath.min(dmath.sqrt(area * ratio), float(size - 1))
    w = dmath.min(dmath.sqrt(area / ratio), float(size - 1))
    keep = fn.cast(fn.random.coin_flip(probability=p), dtype=types.FLOAT)
    top = fn.random.uniform(range=[0.0, 1.0]) * (float(size) - h)
    left = fn.random.uniform(range=[0.0, 1.0]) * (float(size) - w)
    anchor = fn.cat(fn.reshape(top, shape=[1]), fn.reshape(left, shape=[1]))
    shape = fn.cat(fn.reshape(h * keep, shape=[1]), fn.reshape(w * keep, shape=[1]))
    return fn.erase(images, anchor=anchor, shape=shape, axis_names="HW", fill_value=0.0)


def dali_epochs(root: str, recipe: str, args: argparse.Namespace, device: torch.device, erase: bool = True,
                hw_load: float = 0.9, half: bool = False, channels_last: bool = False) -> Callable[[], Any]:
    """The recipe's DALI pipeline, built and started; calling the result gives one epoch's iterable of
    ``(images, labels)``. ``half``: float16 output; ``channels_last``: HWC output, given as a
    channels-last NCHW view (what a bf16 channels-last model takes, without a copy)."""
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.auto_aug import trivial_augment
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    mean = [m * 255 for m in MEAN]
    std = [s * 255 for s in STD]
    out = dict(dtype=types.FLOAT16 if half else types.FLOAT, output_layout="HWC" if channels_last else "CHW")

    @pipeline_def(enable_conditionals=True)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
        if recipe == "val":
            images = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB, hw_decoder_load=hw_load)
            images = fn.resize(images, resize_shorter=args.val_resize, antialias=True)
            images = fn.crop_mirror_normalize(images, crop=(args.val_crop, args.val_crop), mean=mean, std=std,
                                              **out)
            return images, labels
        images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB, hw_decoder_load=hw_load,
                                               random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
        images = fn.resize(images, resize_x=args.size, resize_y=args.size, antialias=True)
        mirror = fn.random.coin_flip(probability=0.5)
        if recipe == "reference":
            images = fn.flip(images, horizontal=mirror)
            images = trivial_augment.trivial_augment_wide(images)
            images = fn.crop_mirror_normalize(images, mean=mean, std=std, **out)
            if erase:
                images = _dali_erase(images, args.size, 0.1)
        else:
            images = fn.crop_mirror_normalize(images, mean=mean, std=std, mirror=mirror, **out)
        return images, labels

    p = pipe(batch_size=args.batch_size, num_threads=args.dali_threads, device_id=device.index or 0,
             prefetch_queue_depth=2, seed=0)
    p.build()
    it = DALIGenericIterator([p], ["images", "labels"], reader_name="reader",
                             last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)

    class _Epoch:
        def __len__(self):
            return len(it)

        def __iter__(self):
            for batch in it:
                images = batch[0]["images"]
                yield (images.permute(0, 3, 1, 2) if channels_last else images), batch[0]["labels"]

    return _Epoch


def run_dali(root: str, recipe: str, args: argparse.Namespace, device: torch.device, erase: bool = True,
             hw_load: float = 0.9) -> Any:
    epochs = dali_epochs(root, recipe, args, device, erase, hw_load)
    if args.interleave:
        return epochs
    return _epochs(epochs, args.epochs, 1, device, "dali", False)


def run_interleaved(root: str, recipe: str, args: argparse.Namespace, device: torch.device) -> dict:
    """torchdali and DALI built side by side in this process, their epochs alternating
    (torchdali first in odd rounds, DALI first in even ones), so both meet the machine's
    drift within about a second of each other; each round gives a ratio of the two
    epochs' rates. Throughput only: the process tree's CPU time mixes the two systems."""
    loaders = {"torchdali": torchdali_loader(root, recipe, args, device, False)}
    for v in args.variants.split(","):  # wN: with N workers instead of --workers
        if v[:1] == "w" and v[1:].isdigit():
            loaders[f"torchdali-{v}"] = torchdali_loader(root, recipe, args, device, False, workers=int(v[1:]))
    systems: dict[str, Callable[[], Any]] = {name: (lambda lo=lo: iter(lo)) for name, lo in loaders.items()}
    systems["dali"] = run_dali(root, recipe, args, device)
    rates: dict[str, list] = {s: [] for s in systems}
    steady: dict[str, list] = {s: [] for s in systems}
    try:
        for rnd in range(args.interleave + 1):  # round 0 warms them up
            for name in (list(systems) if rnd % 2 else list(systems)[::-1]):
                r = _epochs(systems[name], 1, 0, device, name, False)
                if rnd:
                    rates[name].append(r["images_per_s"])
                    steady[name].append(r["steady_images_per_s"] or 0.0)
    finally:
        for lo in loaders.values():
            lo.close()
    out = {"rounds": args.interleave, "images_per_s": {s: statistics.median(v) for s, v in rates.items()},
           "images_per_s_all": rates, "steady_images_per_s_all": steady, "against_dali": {}}
    for name in loaders:
        ratio = [a / b for a, b in zip(rates[name], rates["dali"])]
        steady_ratio = [a / b for a, b in zip(steady[name], steady["dali"]) if b > 0]
        out["against_dali"][name] = {
            "ratio_median": statistics.median(ratio), "ratio_all": ratio,
            "steady_ratio_median": statistics.median(steady_ratio) if steady_ratio else None,
            "rounds_ahead": sum(x > 1.0 for x in ratio)}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data")
    p.add_argument("--recipes", default="plain,reference,val")
    p.add_argument("--systems", default="torchdali,dali,torchvision")
    p.add_argument("--variants", default="",
                   help="also DALI with hw_decoder_load=1 (hw1); with --interleave, also torchdali with N "
                   "workers (wN, e.g. w8,w4); comma-separated, empty: none")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--dali-threads", type=int, default=8)
    p.add_argument("--size", type=int, default=176, help="RandomResizedCrop size of the train recipes "
                   "(176: torchvision's reference recipe; 224: the ResNet-50 recipe)")
    p.add_argument("--val-resize", type=int, default=232, help="val: Resize (shorter side), 232 or 256")
    p.add_argument("--val-crop", type=int, default=224, help="val: CenterCrop")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--interleave", type=int, default=0, metavar="ROUNDS",
                   help="instead of the runs above: torchdali (and each wN variant) and DALI in one "
                   "process, their epochs alternating for ROUNDS rounds after one warm-up round, a ratio "
                   "against DALI per round")
    p.add_argument("--out", default="bench_out")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   help="cpu runs torchdali's CPU path (for a dry run; DALI needs a GPU)")
    args = p.parse_args()
    device = torch.device(args.device)
    env = environment(device, sys.argv[1:])
    env["command"] = "python benchmarks/recipes.py " + " ".join(sys.argv[1:])
    try:
        import nvidia.dali

        env["dali"] = nvidia.dali.__version__
    except ImportError:
        env["dali"] = None
    print(json.dumps(env), flush=True)
    results: dict[str, dict] = {}
    runs: list[tuple[str, str, Callable[[], dict]]] = []
    variants = set(v for v in args.variants.split(",") if v)
    for recipe in args.recipes.split(","):
        if args.interleave:
            runs.append((recipe, "interleaved", lambda r=recipe: run_interleaved(args.data, r, args, device)))
            continue
        for system in args.systems.split(","):
            if system == "torchdali":
                runs.append((recipe, "torchdali", lambda r=recipe: run_torchdali(args.data, r, args, device, False)))
                if recipe == "reference":
                    runs.append((recipe, "torchdali+mixup",
                                 lambda r=recipe: run_torchdali(args.data, r, args, device, True)))
            elif system == "dali":
                runs.append((recipe, "dali", lambda r=recipe: run_dali(args.data, r, args, device)))
                if "hw1" in variants:  # DALI with the hardware decoder taking every image
                    runs.append((recipe, "dali-hw1",
                                 lambda r=recipe: run_dali(args.data, r, args, device, hw_load=1.0)))
                if recipe == "reference":  # TrivialAugment alone, and a fallback should fn.erase fail
                    runs.append((recipe, "dali-no-erase",
                                 lambda r=recipe: run_dali(args.data, r, args, device, erase=False)))
            elif system == "torchvision":
                runs.append((recipe, "torchvision", lambda r=recipe: run_torchvision(
                    args.data, r, args, device, r == "reference")))
    for recipe, system, fn_ in runs:
        key = f"{recipe}/{system}"
        t0 = time.perf_counter()
        try:
            results[key] = fn_()
        except Exception as e:  # one failing system must not lose the others' figures
            results[key] = {"error": f"{type(e).__name__}: {e}"}
        r = results[key]
        if "error" in r:
            print(f"{key:<28} ERROR {r['error'][:300]}", flush=True)
        elif "against_dali" in r:
            for name, a in r["against_dali"].items():
                per = " ".join(f"{x:.2f}" for x in a["ratio_all"])
                print(f"{key:<28} {name} {r['images_per_s'][name]:>7.0f} img/s  dali {r['images_per_s']['dali']:>7.0f}"
                      f"  ratio {a['ratio_median']:.3f} (steady {a['steady_ratio_median'] or 0:.3f}; "
                      f"{a['rounds_ahead']} of {r['rounds']} rounds ahead; per round {per})", flush=True)
            print(f"{key:<28} ({time.perf_counter() - t0:.0f} s)", flush=True)
        else:
            steady = r.get("steady_images_per_s")
            print(f"{key:<28} {r['images_per_s']:>9.0f} img/s  steady {steady or 0:>6.0f}  spread {100 * r['spread']:4.1f}%  "
                  f"{r['cpu_s_per_1000']:.2f} CPU-s/1k  ({time.perf_counter() - t0:.0f} s)", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "recipes.json"), "w") as f:
        json.dump({"environment": env, "args": vars(args), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
