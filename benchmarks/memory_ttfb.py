"""GPU memory taken by the loader and time to first batch (cold and warm Triton cache).

    python benchmarks/memory_ttfb.py DATA [--batch-size 256] [--prefetch-depth 2]

Time to first batch is measured in fresh processes: the first with an empty
TRITON_CACHE_DIR (kernel compiled), the second reusing it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def make_loader(data: str, batch: int, depth: int, workers: int):
    import torchdali as td
    from torchdali import transforms as T

    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True),
                    T.Normalize(MEAN, STD)])
    return td.DataLoader(td.datasets.ImageFolder(data), batch_size=batch, shuffle=True, num_workers=workers,
                         drop_last=True, transforms=tf, device="cuda", prefetch_depth=depth, seed=0)


def first_batch(args) -> None:
    t0 = time.perf_counter()
    loader = make_loader(args.data, args.batch_size, args.prefetch_depth, args.workers)
    images, _ = next(iter(loader))
    torch.cuda.synchronize()
    print(json.dumps({"ttfb_s": time.perf_counter() - t0}))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("data")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--prefetch-depth", type=int, default=2)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--first-batch", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.first_batch:
        first_batch(args)
        return

    res = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TRITON_CACHE_DIR=cache, PYTHONPATH=ROOT)
        for name in ("cold", "warm"):
            out = subprocess.run([sys.executable, __file__, args.data, "--first-batch", "--batch-size",
                                  str(args.batch_size), "--workers", str(args.workers)],
                                 env=env, capture_output=True, text=True, check=True).stdout
            res[f"ttfb_{name}_triton_cache_s"] = json.loads(out.strip().splitlines()[-1])["ttfb_s"]

    torch.cuda.init()
    torch.cuda.synchronize()
    base_alloc, base_res = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    loader = make_loader(args.data, args.batch_size, args.prefetch_depth, args.workers)
    for epoch in range(2):
        for images, _ in loader:
            pass
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    res.update({
        "batch_size": args.batch_size, "prefetch_depth": args.prefetch_depth,
        "peak_allocated_GiB": (torch.cuda.max_memory_allocated() - base_alloc) / 2**30,
        "peak_reserved_GiB": (torch.cuda.max_memory_reserved() - base_res) / 2**30,
        "one_output_batch_GiB": images.numel() * images.element_size() / 2**30,
        "device_used_by_process_GiB": (total - free) / 2**30,
    })
    loader.close()
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
