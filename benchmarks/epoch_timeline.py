"""Where the start of an epoch goes on the GPU path, and how busy the executor stays after it.

    python benchmarks/epoch_timeline.py DATA [--configs 4,0,4,0] [--epochs 9] [--recipe plain]
                                             [--show 2] [--out timeline.txt]

Each config is ``B[:nice[:nogc]]``: the loader starts every epoch with ``B`` batches in parts
(``_tags.START_BATCHES``; 0: every batch whole), its workers at ``os.nice(nice)``, and with
``nogc`` Python's garbage collector off. Per config a loader as ``benchmarks/recipes.py`` builds
it (16 workers, batch 256, persistent workers, the ResNet-50 sizes) runs one warm-up epoch and
``--epochs - 1`` timed ones. For every timed epoch it prints the epoch's time, when the first
batch reached the loop, the executor thread's busy time (``BatchExecutor.process``) and its idle
gaps after the first batch (the pipeline starving), and the garbage collector's pauses. For the
first ``--show`` timed epochs the timeline of their first 250 ms goes to ``--out``: the workers'
reset, every worker batch (when the worker read and packed it, when the staging thread got it),
the parts put together, staging, the scan check's start, the executor and the loop.

The timestamps are ``time.perf_counter`` (CLOCK_MONOTONIC, shared by the processes); the
functions are wrapped in this process, and in the workers through fork.
"""
from __future__ import annotations

import argparse
import collections
import gc
import os
import statistics
import sys
import time
from typing import Any, Callable

import torch
import torch.utils.data.dataloader as tdl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torchdali as td  # noqa: E402
from torchdali._executor import _executor, _iterators, _staging, _tags, _worker  # noqa: E402

now = time.perf_counter
EVENTS: list[tuple[float, str, dict]] = []
GC = {"s": 0.0, "count": [0, 0, 0], "longest": 0.0, "start": 0.0}


def _timed(cls: Any, name: str, label: str, note: Callable[[Any], dict] | None = None) -> None:
    """Record ``label>`` and ``label<`` around every call of ``cls.name``."""
    f = getattr(cls, name)

    def g(*args: Any, **kwargs: Any) -> Any:
        t0 = now()
        r = f(*args, **kwargs)
        EVENTS.append((t0, label + ">", {}))
        EVENTS.append((now(), label + "<", note(r) if note else {}))
        return r

    setattr(cls, name, g)


def _instrument() -> None:
    read = _tags.TaggedDataset._read
    pack = _worker.PrepareBatch.__call__
    last_read: dict = {}

    def timed_read(self: Any, tags: Any) -> Any:  # in the workers
        t0 = now()
        r = read(self, tags)
        last_read["t"] = (t0, now())
        return r

    def timed_pack(self: Any, samples: Any) -> Any:  # in the workers: travels with the batch
        t0 = now()
        b = pack(self, samples)
        b.timeline = (last_read.get("t", (0.0, 0.0)), (t0, now()), os.getpid())
        return b

    _tags.TaggedDataset._read = timed_read
    _worker.PrepareBatch.__call__ = timed_pack
    merge = _iterators.merge_parts

    def timed_merge(*args: Any) -> Any:
        t0 = now()
        r = merge(*args)
        EVENTS.extend([(t0, "merge>", {}), (now(), "merge<", {})])
        return r

    _iterators.merge_parts = timed_merge
    _timed(tdl._MultiProcessingDataLoaderIter, "_reset", "reset")
    _timed(_iterators.GpuIterator, "_next_inner", "received",
           lambda b: {"batch": b, "worker": getattr(b, "timeline", None)})
    _timed(_staging.Staging, "stage", "stage")
    _timed(_executor.BatchExecutor, "prepare", "prepare")
    _timed(_executor.BatchExecutor, "process", "process")
    _timed(_iterators.GpuIterator, "__next__", "loop")

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            GC["start"] = now()
        else:
            d = now() - GC["start"]
            GC["s"] += d
            GC["count"][info["generation"]] += 1
            GC["longest"] = max(GC["longest"], d)

    gc.callbacks.append(on_gc)


def _timeline(t0: float, out: Any, per_kind: int = 8) -> None:
    shown: collections.Counter = collections.Counter()
    for t, name, kw in sorted(EVENTS, key=lambda e: e[0]):
        if t - t0 > 0.25:
            break
        if name == "received>" or (name.rstrip("<>") in ("loop", "process", "prepare", "stage")
                                   and shown[name] >= per_kind):
            continue
        shown[name] += 1
        line = f"  {1e3 * (t - t0):8.1f} ms  {name}"
        if kw.get("worker"):
            (r0, r1), (p0, p1), pid = kw["worker"]
            b = kw["batch"]
            line += (f" positions {b.first_position}+{len(b.indices)} (part of {b.parts}) from worker {pid}: "
                     f"read {1e3 * (r0 - t0):.1f}-{1e3 * (r1 - t0):.1f}, packed {1e3 * (p0 - t0):.1f}-{1e3 * (p1 - t0):.1f}")
        print(line, file=out)


def _epoch_summary(t0: float, t_end: float) -> str:
    marks = sorted((t, n) for t, n, _ in EVENTS if n in ("process>", "process<"))
    busy = [b[0] - a[0] for a, b in zip(marks, marks[1:]) if a[1] == "process>" and b[1] == "process<"]
    idle = [b[0] - a[0] for a, b in zip(marks, marks[1:]) if a[1] == "process<" and b[1] == "process>"]
    return (f"{1e3 * (t_end - t0):.0f} ms; executor busy {1e3 * sum(busy):.0f} ms, idle after the first batch "
            f"{1e3 * sum(idle):.0f} ms ({sum(g > 0.005 for g in idle)} gaps over 5 ms, longest "
            f"{1e3 * max(idle or [0.0]):.1f}); gc {1e3 * GC['s']:.1f} ms in {GC['count']} collections, longest "
            f"{1e3 * GC['longest']:.1f} ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("--configs", default="4,0,4,0", help="comma-separated B[:nice[:nogc]]")
    p.add_argument("--epochs", type=int, default=9, help="epochs per config, the first one a warm-up")
    p.add_argument("--recipe", default="plain", choices=["plain", "val"])
    p.add_argument("--show", type=int, default=2, help="timed epochs per config whose timeline goes to --out")
    p.add_argument("--out", default="epoch_timeline.txt")
    args = p.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from recipes import _tv_preset

    _instrument()
    ds = td.datasets.ImageFolder(args.data)
    with open(args.out, "w") as out:
        for config in args.configs.split(","):
            fields = [int(x) for x in config.split(":")]
            batches, nice, nogc = fields[0], (fields + [0])[1], bool((fields + [0, 0])[2])
            gc.enable()
            if nogc:
                gc.collect()
                gc.disable()
            _tags.START_BATCHES = batches
            init = (lambda _, k=nice: os.nice(k)) if nice else None
            loader = td.DataLoader(ds, batch_size=256, shuffle=True, num_workers=16, drop_last=True,
                                   persistent_workers=True, prefetch_factor=2, device="cuda", seed=0,
                                   transforms=_tv_preset(args.recipe, 224, 224, 256, "tensor"), worker_init_fn=init)
            head = (f"== {config}: {loader._inner_loader().batch_sampler.start}, workers at nice {nice}, "
                    f"gc {'off' if nogc else 'on'}")
            print(head)
            print(head, file=out)
            times = []
            for epoch in range(args.epochs):
                EVENTS.clear()
                GC.update(s=0.0, count=[0, 0, 0], longest=0.0)
                t0 = now()
                for _ in loader:
                    pass
                torch.cuda.synchronize()
                t_end = now()
                if epoch == 0:
                    continue
                times.append(t_end - t0)
                first = loader.stats().last.first_batch_s
                print(f"   epoch {epoch}: first batch {1e3 * first:.1f} ms, {_epoch_summary(t0, t_end)}")
                if epoch <= args.show:
                    print(f"-- epoch {epoch}", file=out)
                    _timeline(t0, out)
            firsts = [e.first_batch_s for e in loader.stats().epochs[1:]]
            print(f"   median epoch {1e3 * statistics.median(times):.0f} ms over {len(times)}, first batch "
                  f"{1e3 * statistics.median(firsts):.1f} ms")
            loader.close()
    gc.enable()


if __name__ == "__main__":
    main()
