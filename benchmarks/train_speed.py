"""Training speed by loader: how close does each loader bring a model to its speed on a batch already on the GPU?

    python benchmarks/train_speed.py [DATA_DIR] [--models resnet18,resnet50]
                                     [--systems limit,torchdali,dali,torchvision] [--batch-size 256]
                                     [--workers N] [--dali-threads 8] [--steps 50] [--tv-steps 20]
                                     [--warmup 15] [--rounds 3] [--profile-batches 64] [--timeline 0]
                                     [--train-stream default|high] [--work-queues set|default]
                                     [--out DIR]

DATA_DIR is an ImageFolder of JPEGs; without it, ``benchmarks/photo_folder.py``'s photographs
(``--num-images``, ``--classes``) are made once under ``--data-dir``. Each model is a
``torchvision.models.<name>(num_classes=...)``, trained with SGD (lr 0.1, momentum 0.9,
weight decay 1e-4), bf16 autocast, channels_last weights, cross-entropy; every system's batch
goes through ``x.contiguous(memory_format=torch.channels_last)`` before the model. The recipe
is RandomResizedCrop(224) + RandomHorizontalFlip + ToDtype(float32, scale=True) + Normalize.

A ``--systems`` name runs its family (or name one configuration, e.g. ``torchdali-bf16cl``):

* ``limit``: one random batch resident on the GPU, reused every step (the model's own speed):
  ``limit`` float32 NCHW (what "% of limit" divides by), ``limit-bf16cl`` bfloat16 channels-last;
* ``torchdali``: ``td.DataLoader`` over ``td.datasets.ImageFolder``: ``torchdali`` float32 NCHW,
  and ``torchdali-bf16cl``, the model's input as it is (``ToDtype(torch.bfloat16)`` and
  ``memory_format=torch.channels_last``: the fused kernel writes it, no cast or copy after);
* ``dali``: NVIDIA DALI's train pipeline of ``benchmarks/recipes.py`` (ROI decode,
  ``hw_decoder_load=0.9``, ``--dali-threads``): ``dali`` float32 CHW, and ``dali-fp16cl``,
  float16 HWC given as a channels-last view (DALI has no bfloat16 output; autocast casts);
  skipped, with the reason, where ``nvidia.dali`` does not import;
* ``torchvision``: torch's DataLoader over torchvision's ImageFolder, PIL + transforms.v2 in the
  workers, pinned memory, non_blocking copy (slow: ``--tv-steps`` steps).

Method: loaders are built once per model and kept, their epochs cycled. Each round runs every
configuration in an order rotated from round to round: ``--warmup`` steps (for torchvision at
least ``2 * workers``, the batches its workers hold ready), then ``--steps`` timed steps between
two ``torch.cuda.synchronize()``; after torchvision's turn the run waits until its workers have
refilled, so that their CPU work does not fall into the next system's time. Reported: the median
over ``--rounds`` rounds and its % of ``limit``. ``--profile-batches N`` (first model only): each
loader alone, no model, under ``torch.profiler`` (CUDA activity) for N batches; device time and
count per batch by kind (kernels, top 6 by name; memcpy HtoD/DtoD/DtoH; memset). ``--timeline N``
(first model): N training steps of each system under ``torch.profiler`` with every stream, to see
where the model's steps stretch: per step, the training stream's span, its kernel and busy
time, its idle time inside the step, the loader's busy time and how much of the training stream's
busy time the loader overlapped. ``--train-stream high`` trains on a high-priority stream, so
that the GPU schedules the model's kernels before the loader's (whose streams have priority 0).

``--workers`` defaults to the cores this process may run on (``taskset -c 0-2`` gives the
3-core figure), ``--dali-threads`` to as many, at most 8. Everything, with the environment and
the command line, goes to ``OUT/train_speed.json``; progress goes to stderr. Needs a CUDA GPU
(``--help`` works without one; without a GPU the script says so and exits 2).
"""
from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import shlex
import statistics
import sys
import time
from collections import defaultdict
from typing import Any, Callable, Iterator

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from photo_folder import make_photo_folder  # noqa: E402
from recipes import dali_epochs  # noqa: E402
from torchdali.bench import OnDevice, environment, forever, recipe  # noqa: E402

FAMILIES = {"limit": ["limit", "limit-bf16cl"], "torchdali": ["torchdali", "torchdali-bf16cl"],
            "dali": ["dali", "dali-fp16cl"], "torchvision": ["torchvision"]}
DESCRIBE = {
    "limit": "one float32 NCHW batch resident on the GPU, reused",
    "limit-bf16cl": "one bfloat16 channels-last batch resident on the GPU, reused",
    "torchdali": "td.DataLoader, float32 NCHW",
    "torchdali-bf16cl": "td.DataLoader, ToDtype(bfloat16) + memory_format=channels_last (the model's input)",
    "dali": "DALI, hw_decoder_load=0.9, float32 CHW",
    "dali-fp16cl": "DALI, hw_decoder_load=0.9, float16 HWC as a channels-last view (no bf16 in DALI)",
    "torchvision": "torch DataLoader, PIL + transforms.v2 in the workers, pinned, non_blocking copy",
}
KINDS = ("kernel", "memcpy HtoD", "memcpy DtoD", "memcpy DtoH", "memset")
STATS: dict[str, Callable[[], Any]] = {}  # torchdali configurations: their loader's stats()


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build(name: str, args: argparse.Namespace, root: str, classes: int,
          device: torch.device) -> tuple[Iterator, Callable[[], None]]:
    """One configuration's endless stream of ``(images, targets)`` and how to close it."""
    B, S = args.batch_size, args.size
    persistent = dict(num_workers=args.workers, persistent_workers=args.workers > 0)
    if name.startswith("limit"):
        x = torch.randn(B, 3, S, S, device=device)
        if name == "limit-bf16cl":
            x = x.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
        return itertools.repeat((x, torch.randint(classes, (B,), device=device))), lambda: None
    if name.startswith("torchdali"):
        import torchdali as td
        from torchdali import transforms as T

        steps, fmt = recipe(T, "train", S), torch.contiguous_format
        if name == "torchdali-bf16cl":
            steps = [T.ToDtype(torch.bfloat16, scale=True) if isinstance(t, T.ToDtype) else t for t in steps]
            fmt = torch.channels_last
        loader = td.DataLoader(td.datasets.ImageFolder(root), batch_size=B, shuffle=True, drop_last=True,
                               transforms=T.Compose(steps), device=device, seed=0, memory_format=fmt, **persistent)
        STATS[name] = loader.stats
        return forever(lambda: iter(loader)), loader.close
    if name.startswith("dali"):
        half = name == "dali-fp16cl"
        return forever(dali_epochs(root, "plain", args, device, hw_load=0.9, half=half, channels_last=half)), \
            lambda: None
    import torchvision
    from torchvision.transforms import v2

    steps = recipe(v2, "train", S)  # geometry on the PIL image, as users write it
    tf = v2.Compose(steps[:2] + [v2.ToImage()] + steps[2:])
    tv_loader = torch.utils.data.DataLoader(torchvision.datasets.ImageFolder(root, transform=tf), batch_size=B,
                                            shuffle=True, drop_last=True, pin_memory=True, **persistent)
    return forever(lambda: OnDevice(tv_loader, device)), lambda: None


def trainer(name: str, classes: int, device: torch.device) -> Callable[[torch.Tensor, torch.Tensor], None]:
    import torchvision

    model = getattr(torchvision.models, name)(num_classes=classes).to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        x = x.contiguous(memory_format=torch.channels_last)
        y = y.to(device, non_blocking=True).reshape(-1).long()  # DALI's labels: [B, 1] int32 on the CPU
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def timed(step: Callable, stream: Iterator, warmup: int, steps: int, batch: int) -> float:
    for _ in range(warmup):
        step(*next(stream))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step(*next(stream))
    torch.cuda.synchronize()
    return steps * batch / (time.perf_counter() - t0)


def profile_loader(stream: Iterator, n: int) -> dict:
    """Device time and count per batch by kind, the loader alone, over ``n`` batches."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    for _ in range(8):  # kernels compiled, the pipeline full
        next(stream)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            next(stream)
        torch.cuda.synchronize()
    ms: dict[str, float] = defaultdict(float)  # by kind ("total" too), and by kernel as "kernel NAME"
    count: dict[str, int] = defaultdict(int)
    by_name: set[str] = set()
    for e in prof.events():
        activity = getattr(e, "activity_type", None) or "kernel"
        if e.device_type != DeviceType.CUDA or activity not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue  # work on the device only, not annotations or synchronisations
        # "Memcpy HtoD (Pinned -> Device)", "Memcpy DtoD (Device -> Device)", "Memset (Device)"
        words = e.name.split() or [""]
        kind = f"memcpy {words[1]}" if words[0] == "Memcpy" and len(words) > 1 else \
            "memset" if words[0] == "Memset" else "kernel"
        keys = ["total", kind] + ([f"kernel {e.name}"] if kind == "kernel" else [])
        by_name.update(keys[2:])
        for key in keys:
            ms[key] += e.time_range.elapsed_us() / 1000.0
            count[key] += 1
    top = sorted(by_name, key=lambda k: -ms[k])[:6]
    return {"batches": n,
            "per_batch": {k: {"ms": ms[k] / n, "count": count[k] / n} for k in ms if k not in by_name},
            "top_kernels": [{"name": k[len("kernel "):], "ms": ms[k] / n, "count": count[k] / n} for k in top]}


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _length(spans: list[tuple[int, int]]) -> int:
    return sum(b - a for a, b in spans)


def _overlap(xs: list[tuple[int, int]], ys: list[tuple[int, int]]) -> int:
    """Total length of the intersection of two merged, sorted span lists."""
    i = j = total = 0
    while i < len(xs) and j < len(ys):
        lo, hi = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        total += max(0, hi - lo)
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return total


def timeline(step: Callable, stream: Iterator, n: int) -> dict:
    """``n`` training steps under ``torch.profiler`` with every CUDA stream: where the steps stretch.

    The training stream is the one the step's kernels run on (the current stream's, the one with
    the most kernel time); every other stream with activity is the loader's. Per step, in ms: the
    span from the training stream's first activity to its last; its kernel time (summed durations) and busy time (their union);
    the loader's busy time; the training kernels' time during which the loader was active; and the
    training stream's idle time (the wall time it ran nothing: a step waiting for its batch or for
    the host to launch)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        step(*next(stream))
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step(*next(stream))
        torch.cuda.synchronize()
    by_stream: dict[int, list[tuple[int, int]]] = defaultdict(list)
    kernel_ns: dict[int, int] = defaultdict(int)
    for e in prof.profiler.kineto_results.events():
        if e.device_type() != torch.autograd.DeviceType.CUDA:
            continue
        name = e.name()
        if e.duration_ns() <= 0:
            continue
        start = e.start_ns()
        by_stream[e.device_resource_id()].append((start, start + e.duration_ns()))
        if not name.startswith(("Memcpy", "Memset")):
            kernel_ns[e.device_resource_id()] += e.duration_ns()
    if not kernel_ns:
        return {}
    train = max(kernel_ns, key=kernel_ns.get)
    spans = {k: _merged(v) for k, v in by_stream.items()}
    mine = spans.pop(train)
    loader = _merged([x for v in spans.values() for x in v])
    first, last = mine[0][0], mine[-1][1]
    return {"steps": n, "span_ms": (last - first) / 1e6 / n, "train_kernel_ms": kernel_ns[train] / 1e6 / n,
            "train_busy_ms": _length(mine) / 1e6 / n,
            "train_idle_ms": ((last - first) - _length(mine)) / 1e6 / n,
            "loader_busy_ms": _length(loader) / 1e6 / n,
            "train_busy_with_loader_ms": _overlap(mine, loader) / 1e6 / n,
            "loader_streams": len(spans)}


def dali_version() -> tuple[str | None, str]:
    """DALI's version, or None and why it does not import."""
    try:
        import nvidia.dali

        return nvidia.dali.__version__, ""
    except ImportError as e:
        return None, f"nvidia.dali does not import ({e})"


def configurations(names: list[str], skipped: dict[str, str]) -> list[str]:
    """The configurations that can run here; DALI's are skipped, with the reason, where it does not import."""
    version, why = dali_version()
    for n in names:
        if n.startswith("dali") and version is None:
            skipped[n] = why
            log(f"skipping {n}: {why}")
    return [n for n in names if n not in skipped]


def run_model(model: str, names: list[str], args: argparse.Namespace, root: str, classes: int,
              device: torch.device, profiles: dict | None, skipped: dict[str, str],
              timelines: dict | None = None) -> dict:
    step = trainer(model, classes, device)
    streams, closers, rates = {}, [], defaultdict(list)
    for name in names:
        log(f"[{model}] building {name}")
        try:
            streams[name], close = build(name, args, root, classes, device)
            closers.append(close)
        except Exception as e:  # one system that cannot run must not lose the others' figures
            skipped[name] = f"{type(e).__name__}: {e}"
            log(f"[{model}] skipping {name}: {skipped[name]}")
    names = [n for n in names if n in streams]
    if not names:
        return {}
    try:
        if profiles is not None:
            for name in names:
                if not name.startswith(("limit", "torchvision")):
                    profiles[name] = profile_loader(streams[name], args.profile_batches)
                    total = profiles[name]["per_batch"].get("total", {"ms": 0.0})["ms"]
                    log(f"[profile] {name}: {total:.2f} ms of GPU time per batch")
        # the model's own stream: the default one, or one the GPU schedules before the loader's
        train_stream = torch.cuda.Stream(device, priority=-1) if args.train_stream == "high" else \
            torch.cuda.current_stream(device)
        with torch.cuda.stream(train_stream):
            for r in range(args.rounds):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    tv = name == "torchvision"
                    warmup = max(args.warmup, 2 * args.workers) if tv else args.warmup
                    rate = timed(step, streams[name], warmup, args.tv_steps if tv else args.steps, args.batch_size)
                    rates[name].append(rate)
                    log(f"[{model} round {r + 1}/{args.rounds}] {name:<17} {rate:>8.0f} img/s")
                    if tv:  # its workers refill 2 batches each: let that CPU work end before the next system
                        time.sleep(min(60.0, 2 * args.workers * args.batch_size / rate))
            if timelines is not None:
                for name in names:
                    if name != "torchvision":
                        timelines[name] = timeline(step, streams[name], args.timeline)
                        log(f"[timeline] {name}: {json.dumps(timelines[name])}")
    finally:
        # the last epoch each torchdali loader ran while the model trained: where its threads' time went
        loader_stats = {n: STATS[n]().last.as_dict() for n in names if n in STATS and STATS[n]().last is not None}
        for close in closers:
            close()
        streams.clear()
        gc.collect()
    limit = statistics.median(rates["limit"]) if rates.get("limit") else None
    return {name: {"images_per_s": statistics.median(v), "images_per_s_all": v,
                   "of_limit": 100.0 * statistics.median(v) / limit if limit else None,
                   "steps": args.tv_steps if name == "torchvision" else args.steps,
                   "loader_stats": loader_stats.get(name)} for name, v in rates.items()}


def report(results: dict, profiles: dict, timelines: dict | None = None) -> None:
    print(f"\n{'model':<12} {'system':<17} {'img/s':>8} {'% limit':>8}  rounds")
    for model, per in results.items():
        for name, r in per.items():
            pct = f"{r['of_limit']:.1f}%" if r["of_limit"] is not None else "-"
            print(f"{model:<12} {name:<17} {r['images_per_s']:>8.0f} {pct:>8}  "
                  + " ".join(f"{x:.0f}" for x in r["images_per_s_all"]))
    if timelines:
        cols = ("span_ms", "train_kernel_ms", "train_busy_ms", "train_idle_ms", "loader_busy_ms",
                "train_busy_with_loader_ms")
        print(f"\nTraining timeline (first model), ms per step: {', '.join(cols)}")
        for name, t in timelines.items():
            print(f"{name:<17}" + "".join(f" {t.get(c, float('nan')):>9.2f}" for c in cols))
    if not profiles:
        return
    n = next(iter(profiles.values()))["batches"]
    print(f"\nGPU time per loader batch, the loader alone ({n} batches): ms (count)")
    print(f"{'kind':<12}" + "".join(f"{name:>20}" for name in profiles))
    for kind in ("total",) + KINDS:
        cells = [p["per_batch"].get(kind, {"ms": 0.0, "count": 0.0}) for p in profiles.values()]
        print(f"{kind:<12}" + "".join(f" {c['ms']:>11.3f} ({c['count']:>5.0f})" for c in cells))
    for name, p in profiles.items():
        print(f"{name}, largest kernels:")
        for k in p["top_kernels"]:
            print(f"  {k['ms']:7.3f} ms ({k['count']:4.0f})  {k['name'][:90]}")


def main() -> int:
    cores = len(os.sched_getaffinity(0))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", nargs="?", help="ImageFolder root (default: photographs made once under --data-dir)")
    p.add_argument("--data-dir", default=".torchdali_data", help="where the default photographs are made")
    p.add_argument("--num-images", type=int, default=16384, help="images of the default folder (16384)")
    p.add_argument("--classes", type=int, default=64, help="classes of the default folder (64)")
    p.add_argument("--models", default="resnet18,resnet50", help="torchvision.models names (resnet18,resnet50)")
    p.add_argument("--systems", default="limit,torchdali,dali,torchvision",
                   help=f"families ({', '.join(FAMILIES)}: all four by default) or single configurations "
                   f"({', '.join(DESCRIBE)})")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--size", type=int, default=224, help="RandomResizedCrop size")
    p.add_argument("--workers", type=int, default=cores,
                   help=f"loader workers (the cores this process may use: {cores})")
    p.add_argument("--dali-threads", type=int, default=min(8, cores), help=f"DALI threads ({min(8, cores)})")
    p.add_argument("--steps", type=int, default=50, help="timed steps per system and round (50)")
    p.add_argument("--tv-steps", type=int, default=20, help="timed steps for torchvision (20)")
    p.add_argument("--warmup", type=int, default=15, help="untimed steps before each timed run (15)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; the median is reported (3)")
    p.add_argument("--profile-batches", type=int, default=64, help="batches profiled per loader (64; 0: none)")
    p.add_argument("--timeline", type=int, default=0,
                   help="steps of each system's training profiled with every stream (first model; 0: none)")
    p.add_argument("--train-stream", choices=("default", "high"), default="default",
                   help="the model's CUDA stream: the default stream, or a high-priority one (the loader's "
                   "streams have the lowest priority, so the GPU schedules the model's kernels first)")
    p.add_argument("--work-queues", choices=("set", "default"), default="set",
                   help="set: td.set_cuda_work_queues() before CUDA starts, as the README says (32 queues); "
                   "default: not called, CUDA's 8 unless CUDA_DEVICE_MAX_CONNECTIONS is in the environment")
    p.add_argument("--out", default="bench_out", help="folder for train_speed.json (bench_out)")
    args = p.parse_args()
    if args.work_queues == "set":
        import torchdali as td

        td.set_cuda_work_queues()
    wanted = [c for s in args.systems.split(",") if s for c in FAMILIES.get(s, [s])]
    if any(n not in DESCRIBE for n in wanted):
        p.error(f"--systems: unknown {', '.join(n for n in wanted if n not in DESCRIBE)}")
    if not torch.cuda.is_available():
        print("train_speed.py: no CUDA GPU here (torch.cuda.is_available() is False); this benchmark "
              "trains models on a GPU. Run it on a machine with one.", file=sys.stderr)
        return 2
    import torchvision
    from torchvision.datasets.folder import find_classes

    unknown = [m for m in args.models.split(",") if m not in torchvision.models.list_models()]
    if unknown:
        print(f"train_speed.py: not in torchvision.models: {', '.join(unknown)}", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    root = args.data or os.path.join(args.data_dir, f"photos-{args.num_images}-{args.classes}")
    if args.data is None:
        make_photo_folder(root, args.num_images, args.classes, progress=True)
    classes = len(find_classes(root)[0])
    env = environment(device, sys.argv[1:])
    env.update(command=shlex.join(["python"] + sys.argv), cpus=cores, cpu_count=os.cpu_count(),
               affinity=sorted(os.sched_getaffinity(0)), data=os.path.abspath(root), classes=classes)
    env["dali"] = dali_version()[0]
    log(json.dumps({k: v for k, v in env.items() if k != "affinity"}))
    skipped: dict[str, str] = {}
    names = configurations(wanted, skipped)
    results: dict[str, dict] = {}
    profiles: dict[str, dict] = {}
    timelines: dict[str, dict] = {}
    for i, model in enumerate(args.models.split(",")):
        results[model] = run_model(model, names, args, root, classes, device,
                                   profiles if i == 0 and args.profile_batches > 0 else None, skipped,
                                   timelines if i == 0 and args.timeline > 0 else None)
        torch.cuda.empty_cache()
    print("systems: " + "; ".join(f"{n}: {DESCRIBE[n]}" for n in names))
    for n, why in skipped.items():
        print(f"skipped {n}: {why}")
    report(results, profiles, timelines)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "train_speed.json")
    with open(path, "w") as f:
        json.dump({"environment": env, "args": vars(args), "configurations": {n: DESCRIBE[n] for n in names},
                   "skipped": skipped, "results": results, "gpu_time_per_batch": profiles,
                   "training_timeline": timelines}, f, indent=2)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
