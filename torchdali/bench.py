"""Main job: torchdali vs the torchvision DataLoader, side by side, in one run.

``python -m torchdali.bench`` (or ``torchdali-bench``) with no path makes a small
ImageNet-shaped JPEG folder itself, then runs the same recipe through
torchvision's DataLoader (PIL decode + transforms.v2 in the workers) and through
torchdali, and prints images/s and CPU core-seconds per 1000 images for each.
The GPU path is used when a GPU is present, the CPU path otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from typing import Any, Callable, Iterable, Iterator

import torch

STEADY_AFTER = 8  # the steady rate counts an epoch's batches after this many
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def _live_children_seconds() -> float:
    """CPU time of this process's live children (persistent workers are never reaped)."""
    me, total = os.getpid(), 0.0
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0.0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:  # ppid; then utime, stime at 11, 12
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _main_seconds() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    return s.ru_utime + s.ru_stime


def _cpu_seconds() -> float:
    """CPU time of this process, of its live children, and of every child that has been reaped."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime + _live_children_seconds()


def recipe(module: Any, name: str, size: int = 224) -> list:
    """A recipe built from ``module`` (torchvision v2 or torchdali.transforms): ``train`` (the
    ResNet-50 recipe), ``val``, or ``reference`` (torchvision's classification reference:
    RandomResizedCrop(176), flip, TrivialAugmentWide, normalize, RandomErasing(0.1))."""
    tail = [module.ToDtype(torch.float32, scale=True), module.Normalize(MEAN, STD)]
    if name == "train":
        return [module.RandomResizedCrop(size), module.RandomHorizontalFlip()] + tail
    if name == "reference":
        modes = getattr(module, "InterpolationMode", None)  # torchdali takes torchvision's or its name
        bilinear = modes.BILINEAR if modes is not None else "bilinear"
        return [module.RandomResizedCrop(176), module.RandomHorizontalFlip(),
                module.TrivialAugmentWide(interpolation=bilinear)] + tail + [module.RandomErasing(p=0.1)]
    if name == "val":
        return [module.Resize(256), module.CenterCrop(size)] + tail
    raise ValueError(f"unknown recipe {name!r}")


class OnDevice:
    """A torch DataLoader's batches moved to ``device`` (what a training loop does with them)."""

    def __init__(self, loader: Any, device: torch.device) -> None:
        self.loader, self.device = loader, device

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for x, y in self.loader:
            yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)


def forever(make_epoch: Callable[[], Iterable]) -> Iterator:
    """Batches without end: a new epoch's iterator each time one runs out (a training run longer
    than an epoch)."""
    while True:
        yield from make_epoch()


def _epochs(make_iter, n_epochs: int, warmup: int, device: torch.device, label: str, progress: bool) -> dict:
    from tqdm import tqdm

    rates, steady, cpu_per_k, main_per_k, first_batch = [], [], [], [], None
    for epoch in range(warmup + n_epochs):
        cpu0, main0, t0 = _cpu_seconds(), _main_seconds(), time.perf_counter()
        it = make_iter()
        n, k, t_steady, n_steady = 0, 0, None, 0
        bar = tqdm(total=len(it) if hasattr(it, "__len__") else None, desc=f"{label} epoch {epoch}"
                   + (" (warm-up)" if epoch < warmup else ""), unit="batch", disable=not progress, leave=False)
        for images, _targets in it:
            if first_batch is None:
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                first_batch = time.perf_counter() - t0
            n += images.shape[0]
            k += 1
            if k == STEADY_AFTER:
                t_steady, n_steady = time.perf_counter(), n
            bar.update(1)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t_end = time.perf_counter()
        dt = t_end - t0
        del it
        bar.close()
        cpu, main_cpu = _cpu_seconds() - cpu0, _main_seconds() - main0
        if epoch >= warmup:
            rates.append(n / dt)
            if t_steady is not None and n > n_steady:
                steady.append((n - n_steady) / (t_end - t_steady))
            cpu_per_k.append(1000.0 * cpu / max(n, 1))
            main_per_k.append(1000.0 * main_cpu / max(n, 1))
    return {
        "images_per_s": statistics.median(rates),
        "images_per_s_all": rates,
        "spread": (max(rates) - min(rates)) / statistics.median(rates) if len(rates) > 1 else 0.0,
        # past each epoch's first STEADY_AFTER batches: the rate of a long epoch, without
        # the pipeline filling up at the start (an ImageNet epoch is 5,005 batches of 256)
        "steady_images_per_s": statistics.median(steady) if steady else None,
        "cpu_s_per_1000": statistics.median(cpu_per_k),
        "main_process_cpu_s_per_1000": statistics.median(main_per_k),
        "time_to_first_batch_s": first_batch,
    }


def run_torchvision(root: str, args: argparse.Namespace, device: torch.device) -> dict:
    import torchvision
    from torchvision.transforms import v2

    steps = recipe(v2, args.recipe)
    # geometry (and auto-augment) on the PIL image, as users write it
    k = 3 if args.recipe == "reference" else 2
    tf = v2.Compose(steps[:k] + [v2.ToImage()] + steps[k:])
    ds = torchvision.datasets.ImageFolder(root, transform=tf)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                         drop_last=True, pin_memory=device.type == "cuda",
                                         prefetch_factor=args.prefetch_factor if args.workers else None,
                                         persistent_workers=args.persistent_workers and args.workers > 0)

    def make_iter():
        return OnDevice(loader, device)

    return _epochs(make_iter, args.epochs, args.warmup, device, "torchvision", not args.quiet)


def run_torchdali(root: str, args: argparse.Namespace, device: torch.device) -> dict:
    import torchdali as td
    from torchdali import transforms as T

    ds = td.datasets.ImageFolder(root)
    workers = args.workers if args.td_workers is None else args.td_workers
    loader = td.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=workers,
                           drop_last=True, transforms=T.Compose(recipe(T, args.recipe)), device=device,
                           seed=0, prefetch_factor=args.prefetch_factor if workers else None,
                           persistent_workers=args.persistent_workers and workers > 0)
    result = _epochs(lambda: iter(loader), args.epochs, args.warmup, device, "torchdali", not args.quiet)
    last = loader.stats().last
    if last is not None:
        result["last_epoch_stats"] = last.as_dict()
        print("torchdali " + loader.stats().summary(), flush=True)
    return result


def environment(device: torch.device, argv: list[str]) -> dict:
    import torchvision

    env = {
        "date": time.strftime("%Y-%m-%d"),
        "command": "python -m torchdali.bench " + " ".join(argv),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),  # what ``taskset`` left this process
        # CUDA's hardware work queues (main asks for 32 before CUDA starts; torchdali/_cuda_env.py)
        "cuda_device_max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:
        env["triton"] = None
    return env


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, key, title in ((axes[0], "images_per_s", "images/s (higher is better)"),
                           (axes[1], "cpu_s_per_1000", "CPU core-s per 1000 images (lower is better)")):
        vals = [results[n][key] for n in names]
        bars = ax.bar(names, vals, color=["#888888", "#76b900"][: len(names)])
        ax.bar_label(bars, fmt="%.0f" if key == "images_per_s" else "%.2f")
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from ._cuda_env import set_cuda_work_queues

    set_cuda_work_queues()  # before CUDA starts (_cuda_env.py)
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m torchdali.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("data", nargs="?", help="ImageFolder root (default: make a synthetic one)")
    p.add_argument("--num-images", type=int, default=1024, help="size of the synthetic dataset")
    p.add_argument("--data-dir", default=os.path.join(".torchdali_data"),
                   help="where the synthetic dataset is written")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="DataLoader workers (both systems)")
    p.add_argument("--td-workers", type=int, default=None,
                   help="workers for torchdali only (default: --workers)")
    p.add_argument("--prefetch-factor", type=int, default=2)
    p.add_argument("--persistent-workers", action=argparse.BooleanOptionalAction, default=True,
                   help="keep workers across epochs (both systems), as long training runs do")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs (median reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up epochs")
    p.add_argument("--recipe", choices=["train", "val", "reference"], default="train",
                   help="train: RandomResizedCrop 224 + flip; val: Resize 256 + CenterCrop 224; reference: "
                        "torchvision's classification reference (RRC 176, flip, TrivialAugmentWide, RandomErasing 0.1)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument("--only", choices=["torchvision", "torchdali"], default=None)
    p.add_argument("--out", default="bench_out", help="folder for results.json and the chart")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    root = args.data
    if root is None:
        from ._synthetic import make_image_folder

        root = make_image_folder(os.path.join(args.data_dir, f"synthetic-{args.num_images}"), args.num_images,
                                 progress=not args.quiet)
    env = environment(device, argv)
    print(f"torchdali bench: {env['device']}, {env['cpus']} CPUs, torch {env['torch']}, "
          f"torchvision {env['torchvision']}, recipe={args.recipe}, batch={args.batch_size}, "
          f"workers={args.workers}, data={root}", flush=True)
    results: dict[str, dict] = {}
    if args.only in (None, "torchvision"):
        results["torchvision"] = run_torchvision(root, args, device)
    if args.only in (None, "torchdali"):
        results["torchdali"] = run_torchdali(root, args, device)

    print(f"\n{'system':<12} {'images/s':>10} {'spread':>7} {'CPU-s/1000':>11} {'(main proc)':>11} {'1st batch s':>12}")
    for name, r in results.items():
        print(f"{name:<12} {r['images_per_s']:>10.1f} {100 * r['spread']:>6.1f}% {r['cpu_s_per_1000']:>11.2f} "
              f"{r['main_process_cpu_s_per_1000']:>11.2f} {r['time_to_first_batch_s']:>12.2f}")
    if len(results) == 2:
        ratio = results["torchdali"]["images_per_s"] / results["torchvision"]["images_per_s"]
        print(f"torchdali / torchvision images/s: {ratio:.2f}x")
        env["ratio"] = ratio
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"environment": env, "args": vars(args), "results": results}, f, indent=2)
    try:
        plot(results, os.path.join(args.out, "bench.png"))
        print(f"wrote {os.path.join(args.out, 'results.json')} and {os.path.join(args.out, 'bench.png')}")
    except ImportError:
        print(f"wrote {os.path.join(args.out, 'results.json')} (install matplotlib for the chart)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
