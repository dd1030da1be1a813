"""What slows nvJPEG's hardware call down in the loader, where it takes longer than alone?

    python benchmarks/call_contention.py DATA_DIR [--batches 12] [--reps 5] [--kinds alone,...]

Decodes the same batches of DATA_DIR (planar, with header codes, as the loader does) with
the hardware decoder alone, while one kind of load runs beside it:

- ``alone``: nothing;
- ``gil hog``: a Python thread of this process computing without pause (it holds the
  interpreter lock whenever the decoding thread does not);
- ``gil 20%``: a Python thread computing 0.2 ms of every 1 ms (about what the staging and
  main threads do in the loader);
- ``N cores busy``: N processes computing without pause (N = 4, 15, 16);
- ``16 readers``: 16 processes reading the data's files and their headers without pause
  (the workers' kind of work, more of it than the loader asks);
- ``16 paced readers``: 16 processes reading the data's files into a buffer each, 25,600
  files per second in all (the loader's rate);
- ``gpu kernel``: a thread resizing and normalising a batch of 256 decoded images on its own
  stream every 10 ms (the fused kernel's kind and size of work beside the engines);
- ``paced readers and gpu kernel``: both;
- ``h2d``: a thread copying 20 MB from pinned memory to the GPU without pause;
- ``gpu copies``: a thread copying 256 MB within the GPU without pause;
- ``scan check``: a thread running the loader's scan-marker check of another batch every
  9 ms, as the staging thread does (a copy of its bytes to the GPU, then the kernel);
- ``scan check, 1 MiB copies``: the same with the bytes copied in pieces;
- ``... pinned``: the same, with the decoding thread on the last CPU and the load kept off it.

The kinds alternate within each rep, so the machine's drift hits all of them alike. Prints
images/s and the decoding call's wall and CPU milliseconds per batch. ``--kinds`` runs only
the kinds named (comma-separated).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import threading
import time


PACED_FILES_S = 25_600  # the paced readers' files per second, all 16 together


def _load(j: int, mode, active, files: list, cpus: list) -> None:
    """A load process: ``mode`` 1 computes, 2 reads files, 3 reads files at its share of
    ``PACED_FILES_S``; only while ``j < active``."""
    from torchdali.decode import jpeg_info

    k = j
    buf = bytearray(8 << 20)
    next_at = time.perf_counter()
    while mode.value >= 0:
        m = mode.value
        os.sched_setaffinity(0, cpus[m >= 10])
        if j >= active.value or m % 10 == 0:
            time.sleep(0.001)
            next_at = time.perf_counter()
        elif m % 10 == 1:
            x = 0
            for i in range(20000):
                x += i * i
        elif m % 10 == 2:
            with open(files[k % len(files)], "rb") as fh:
                jpeg_info(fh.read())
            k += 16
        else:
            with open(files[k % len(files)], "rb", buffering=0) as fh:
                fh.readinto(buf)
            k += 16
            next_at += 16 / PACED_FILES_S
            wait = next_at - time.perf_counter()
            if wait > 0:
                time.sleep(wait)


def main() -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from decode_order import add_batch_args, drawn_batches, drawn_files, print_rates
    from torchdali.decode import NvjpegDecoder

    p = argparse.ArgumentParser()
    add_batch_args(p, batches=12)
    p.add_argument("--kinds", default="", help="only these kinds (comma-separated names)")
    args = p.parse_args()

    import numpy as np
    import torch

    n = args.batches * args.batch
    every, _ = drawn_files(args.data, n)
    batches = drawn_batches(args.data, args.batches, args.batch)
    ncpu = os.cpu_count() or 1
    last = ncpu - 1
    everywhere, others = list(range(ncpu)), [c for c in range(ncpu) if c != last]
    print(f"{torch.cuda.get_device_name(0)}, {ncpu} CPUs, torch {torch.__version__}; {n} files, "
          f"batch {args.batch}", flush=True)

    ctx = mp.get_context("spawn")
    mode, active = ctx.Value("i", 0, lock=False), ctx.Value("i", 0, lock=False)
    procs = [ctx.Process(target=_load, args=(j, mode, active, every, [everywhere, others]), daemon=True)
             for j in range(16)]
    for pr in procs:
        pr.start()

    stream = torch.cuda.Stream()
    biggest = max(bt.out_bytes for bt in batches)
    outs = [torch.empty(biggest, dtype=torch.uint8, device="cuda") for _ in range(2)]
    dec = NvjpegDecoder(0, pipeline_depth=2)
    pinned = torch.empty(20 << 20, dtype=torch.uint8).pin_memory()
    dev_a = torch.empty(20 << 20, dtype=torch.uint8, device="cuda")
    big_a = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    big_b = torch.empty_like(big_a)
    stop = threading.Event()
    from csrc_triton.scan_check import bad_scan_markers

    other = batches[-1]
    scan_gpu = torch.empty(other.pinned.numel(), dtype=torch.uint8, device="cuda")

    def scan(read: str) -> None:
        s = torch.cuda.Stream()
        host = other.pinned
        starts = np.zeros(len(other.lengths), dtype=np.int64)
        with torch.cuda.stream(s):
            while not stop.is_set():
                t = time.perf_counter()
                step = 1 << 20 if read == "pieces" else host.numel()
                for a in range(0, host.numel(), step):
                    scan_gpu[a:a + step].copy_(host[a:a + step], non_blocking=True)
                bad_scan_markers(scan_gpu, other.offsets, other.lengths, starts)
                s.synchronize()
                time.sleep(max(0.009 - (time.perf_counter() - t), 0.0))

    def gil(duty: float) -> None:
        while not stop.is_set():
            t = time.perf_counter()
            while time.perf_counter() - t < duty * 1e-3:
                sum(range(200))
            if duty < 1.0:
                time.sleep((1.0 - duty) * 1e-3)

    decoded = torch.rand(256, 3, 375, 500, device="cuda").half()  # a batch as the kernel reads it, in kind

    def kernel_work() -> None:
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            while not stop.is_set():
                t = time.perf_counter()
                out = torch.nn.functional.interpolate(decoded, size=(224, 224), mode="bilinear", antialias=True)
                out.float().sub_(0.45).div_(0.225)
                s.synchronize()
                time.sleep(max(0.010 - (time.perf_counter() - t), 0.0))

    first, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):  # the last of three
        first.record()
        torch.nn.functional.interpolate(decoded, size=(224, 224), mode="bilinear", antialias=True) \
            .float().sub_(0.45).div_(0.225)
        end.record()
    end.synchronize()
    print(f"gpu kernel: {first.elapsed_time(end):.2f} ms of GPU time per batch, alone", flush=True)

    def copier(src, dst) -> None:
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            while not stop.is_set():
                dst.copy_(src, non_blocking=True)
                s.synchronize()

    kinds = {  # name: (thread target or None, load mode for the processes, how many active)
        "alone": (None, 0, 0),
        "gil hog": (lambda: gil(1.0), 0, 0),
        "gil 20%": (lambda: gil(0.2), 0, 0),
        "4 cores busy": (None, 1, 4),
        "15 cores busy": (None, 1, 15),
        "16 cores busy": (None, 1, 16),
        "16 readers": (None, 2, 16),
        "16 paced readers": (None, 3, 16),
        "gpu kernel": (kernel_work, 0, 0),
        "paced readers and gpu kernel": (kernel_work, 3, 16),
        "h2d": (lambda: copier(pinned, dev_a), 0, 0),
        "gpu copies": (lambda: copier(big_a, big_b), 0, 0),
        "scan check": (lambda: scan("copy"), 0, 0),
        "scan check, 1 MiB copies": (lambda: scan("pieces"), 0, 0),
        "alone, pinned": (None, 10, 0),
        "16 cores busy, pinned": (None, 11, 16),
        "16 readers, pinned": (None, 12, 16),
    }
    if args.kinds:
        kinds = {k: kinds[k] for k in args.kinds.split(",")}
    rates = {k: [] for k in kinds}
    wall = {k: [] for k in kinds}
    cpu = {k: [] for k in kinds}
    for rep in range(args.reps + 1):  # the first pass warms up
        for name, (target, m, a) in kinds.items():
            os.sched_setaffinity(0, [last] if m >= 10 else everywhere)
            mode.value, active.value = m, a
            stop.clear()
            th = threading.Thread(target=target, daemon=True) if target else None
            if th:
                th.start()
            time.sleep(0.3)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for k, bt in enumerate(batches):
                t, c = time.perf_counter(), time.thread_time()
                status = dec.decode_batch(bt.pinned, bt.offsets, bt.lengths, bt.sizes, outs[k % 2],
                                          bt.out_offsets, stream, hints=bt.hints, chroma=bt.chroma)
                if any(status):
                    raise SystemExit(f"decode failed: {dec.last_errors}")
                if rep:
                    wall[name].append(1e3 * (time.perf_counter() - t))
                    cpu[name].append(1e3 * (time.thread_time() - c))
            stream.synchronize()
            if rep:
                rates[name].append(n / (time.perf_counter() - t0))
            stop.set()
            if th:
                th.join()
            mode.value, active.value = 0, 0
            os.sched_setaffinity(0, everywhere)
    mode.value = -1
    for pr in procs:
        pr.join(5)
    print_rates("beside the decoding thread", rates, "alone", args.reps,
                (("call ms per batch (wall)", wall, ".2f"), ("its CPU ms", cpu, ".2f")))
    dec.close()


if __name__ == "__main__":
    main()
