"""Does nvJPEG's hardware call decode an image faster when a call takes more images?

    python benchmarks/call_size.py DATA_DIR [--batches 16] [--batch 256] [--reps 5] [--sizes 64,128,256,512,1024]

The same ``batches * batch`` files of DATA_DIR (drawn at random, packed into pinned memory
once per call size) are decoded to planar Y/Cb/Cr with header codes, as the loader does, in
calls of each size. The sizes alternate within each rep, so the machine's drift hits all of
them alike. Before the timing, the planes of the first 2 * max(sizes) images are compared
across sizes byte for byte. Prints images/s (median of the reps, and the range), the host
milliseconds of one call and the host microseconds per image.

A loader that decoded two of its batches in one call would gain what the 512 row gains
over the 256 row.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from decode_order import Batch, add_batch_args, decode, drawn_files, print_rates  # noqa: E402
from torchdali.decode import NvjpegDecoder  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    add_batch_args(p)
    p.add_argument("--sizes", default="64,128,256,512,1024")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    n = args.batches * args.batch
    n -= n % max(sizes)
    if n == 0:
        raise SystemExit(f"--batches * --batch must hold at least {max(sizes)} images")
    _, files = drawn_files(args.data, n)
    calls = {s: [Batch(files[k:k + s]) for k in range(0, n, s)] for s in sizes}
    print(f"{n} files in calls of {', '.join(map(str, sizes))}; {torch.cuda.get_device_name(0)}, "
          f"{os.cpu_count()} CPUs, torch {torch.__version__}")

    stream = torch.cuda.Stream()
    biggest = max(bt.out_bytes for s in sizes for bt in calls[s])
    decoders = {s: NvjpegDecoder(0, pipeline_depth=2, max_batch=s) for s in sizes}
    outs = [torch.empty(biggest, dtype=torch.uint8, device="cuda") for _ in range(2)]

    # the same planes, whatever the size of the calls
    span = min(2 * max(sizes), n)
    ref = None
    for s in sizes:
        got = []
        for bt in calls[s][: span // s]:
            out = torch.zeros(bt.out_bytes, dtype=torch.uint8, device="cuda")
            decode(decoders[s], bt, bt.calls("as drawn"), out, stream)
            stream.synchronize()
            got.append(out.cpu())
        got = torch.cat(got)
        if ref is None:
            ref = got
        elif not torch.equal(got, ref):
            raise SystemExit(f"calls of {s}: planes differ from calls of {sizes[0]}")
    print(f"planes equal byte for byte over the first {span} images")

    rates: dict[str, list[float]] = {f"{s} per call": [] for s in sizes}
    host: dict[str, list[float]] = {k: [] for k in rates}
    per_image: dict[str, list[float]] = {k: [] for k in rates}
    for rep in range(args.reps + 1):  # the first pass warms every size up
        for s in (sizes if rep % 2 else sizes[::-1]):
            key = f"{s} per call"
            stream.synchronize()
            t0 = time.perf_counter()
            for k, bt in enumerate(calls[s]):
                h = time.perf_counter()
                decode(decoders[s], bt, bt.calls("as drawn"), outs[k % 2], stream)
                if rep:
                    host[key].append(1e3 * (time.perf_counter() - h))
                    per_image[key].append(1e6 * (time.perf_counter() - h) / s)
            stream.synchronize()
            if rep:
                rates[key].append(n / (time.perf_counter() - t0))
    base = f"{args.batch} per call" if f"{args.batch} per call" in rates else next(iter(rates))
    print_rates("images per nvJPEG call", rates, base, args.reps,
                (("host ms per call", host, ".2f"), ("host µs per image", per_image, ".1f")))
    for dec in decoders.values():
        dec.close()


if __name__ == "__main__":
    main()
