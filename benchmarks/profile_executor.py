"""Where the GPU executor's time goes, per batch: wall and thread-CPU time of its parts.

    python benchmarks/profile_executor.py DATA_DIR [--recipe plain|val] [--epochs 4] [--workers 16] [--cpu-share 0.1]

Runs one recipe through ``torchdali.DataLoader`` (ResNet-50 sizes, as ``recipes.py``) with the
executor's and the staging thread's steps wrapped in timers (``perf_counter`` and
``thread_time``, about a microsecond each), and prints, for the epochs after the first, each
step's wall and CPU microseconds per batch and its calls per batch. Nested steps count in their
callers too (``NvjpegDecoder._batched`` is nvJPEG's call and a few lines around it, inside
``decode_batch``, inside ``GpuDecoder.decode``, inside ``BatchExecutor.process``). The scan check
and ``decoded_sizes`` run on the staging thread (``BatchExecutor.prepare``), beside the
executor. Wall above CPU is time off the CPU: waiting for the GPU, for the interpreter lock, or
for a core. The loader's own per-batch counters (``loader.stats()``) come last.
"""
from __future__ import annotations

import argparse
import collections
import functools
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_TIMES: dict = collections.defaultdict(lambda: [0, 0.0, 0.0])  # label -> [calls, wall s, cpu s]


def _timed(owner, name: str, label: str) -> None:
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t, c = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            entry = _TIMES[label]
            entry[0] += 1
            entry[1] += time.perf_counter() - t
            entry[2] += time.thread_time() - c

    setattr(owner, name, wrapper)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("data")
    p.add_argument("--recipe", default="plain", choices=("plain", "val"))
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--cpu-share", type=float, default=0.0, help="the loader's cpu_decode_share")
    args = p.parse_args()

    import torchdali as td
    from recipes import _tv_preset
    from torchdali._executor import _decode, _executor, _launch, _staging
    from torchdali.decode import _nvjpeg

    for cls, names in ((_nvjpeg.NvjpegDecoder, ("decode_batch", "_batched", "_classify", "_image_rows")),
                       (_decode.GpuDecoder, ("decode", "_decode_encoded", "_check_scans", "next_buffer")),
                       (_launch.KernelLauncher, ("launch",)),
                       (_executor.BatchExecutor, ("process", "prepare")),
                       (_staging.Staging, ("release_ready", "give_back", "hold"))):
        for name in names:
            _timed(cls, name, f"{cls.__name__}.{name}")
    _timed(_launch, "upload", "upload (kernel metadata)")
    _timed(_launch, "execute", "execute (kernel launches)")
    _timed(_decode, "bad_scan_markers", "bad_scan_markers")

    ds = td.datasets.ImageFolder(args.data)
    loader = td.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, drop_last=True,
                           transforms=_tv_preset(args.recipe, 224, 224, 256, "tensor"), device="cuda", seed=0,
                           persistent_workers=args.workers > 0, cpu_decode_share=args.cpu_share)
    for epoch in range(args.epochs):
        if epoch == 1:
            _TIMES.clear()  # the first epoch compiles the kernels
        t0, n = time.perf_counter(), 0
        for _ in loader:
            n += 1
        torch.cuda.synchronize()
        print(f"epoch {epoch}: {n * args.batch_size / (time.perf_counter() - t0):.0f} images/s", flush=True)
    batches = _TIMES["BatchExecutor.process"][0] or 1
    print(f"{torch.cuda.get_device_name()}, {os.cpu_count()} CPUs, {args.recipe}, CPU share {args.cpu_share:g}, "
          f"{batches} batches after the first epoch")
    print(f"{'step':<36} {'wall us':>9} {'cpu us':>9} {'calls':>6}   (per batch)")
    for label, (calls, wall, cpu) in sorted(_TIMES.items(), key=lambda kv: -kv[1][1]):
        print(f"{label:<36} {1e6 * wall / batches:9.0f} {1e6 * cpu / batches:9.0f} {calls / batches:6.2f}")
    last = loader.stats().last
    print("loader.stats(), last epoch, ms per batch:",
          {k: round(1e3 * v / last.batches, 3) for k, v in last.as_dict().items() if k.endswith("_s")})
    loader.close()


if __name__ == "__main__":
    main()
