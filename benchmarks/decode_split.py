"""Does a share of each batch decoded beside the hardware engines make the batch faster?

    python benchmarks/decode_split.py DATA_DIR [--batches 12] [--batch 256] [--reps 5]

Decodes the same batches of DATA_DIR (files drawn at random, packed once into pinned
memory) to planar Y/Cb/Cr with header codes, as the loader does. The hardware engines
take every image (``hw only``), or all but a share, which side threads decode at the
same time through nvJPEG's other backends, each thread with its own decoder and CUDA
stream:

- ``gpu_hybrid``: ``NVJPEG_BACKEND_GPU_HYBRID`` (Huffman decoding on the GPU for
  batches of more than 50 baseline images, on the calling CPU thread below that);
- ``default``: ``NVJPEG_BACKEND_DEFAULT`` (nvJPEG picks; the CPU's Huffman decoding for
  batched calls of this size).

For every variant: images/s (median of the reps, and the range), the process's CPU
seconds per 1000 images (every thread, nvJPEG's own included), and the wall time of the
hardware call and of the slowest side thread per batch. Before anything is timed, the
side backends' planes of the first batch are compared with the engines' planes of the
same images, byte for byte (how many bytes differ, and by how much at most).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from torchdali.decode import NvjpegDecoder  # noqa: E402
from decode_order import Batch, add_batch_args, drawn_batches, print_rates  # noqa: E402


class Side:
    """``threads`` decoders of one backend, each on its own stream and thread."""

    def __init__(self, backend: str, threads: int) -> None:
        self.decoders = [NvjpegDecoder(0, backend=backend, pipeline_depth=2) for _ in range(threads)]
        self.streams = [torch.cuda.Stream() for _ in range(threads)]
        self.pool = ThreadPoolExecutor(threads)
        self.label = f"{backend}, {threads} thread{'s' if threads > 1 else ''}"

    def submit(self, bt: Batch, idx: np.ndarray, out: torch.Tensor):
        parts = np.array_split(idx, len(self.decoders))
        return [self.pool.submit(self._run, j, bt, part, out) for j, part in enumerate(parts) if len(part)]

    def _run(self, j: int, bt: Batch, idx: np.ndarray, out: torch.Tensor) -> float:
        t0 = time.perf_counter()
        decode(self.decoders[j], bt, idx, out, self.streams[j])
        return time.perf_counter() - t0

    def close(self) -> None:
        self.pool.shutdown()
        for d in self.decoders:
            d.close()


def decode(dec: NvjpegDecoder, bt: Batch, idx: np.ndarray, out: torch.Tensor, stream) -> None:
    status = dec.decode_batch(bt.pinned, bt.offsets[idx], bt.lengths[idx], bt.sizes[idx], out,
                              bt.out_offsets[idx], stream, hints=bt.hints[idx], chroma=bt.chroma[idx])
    if any(status):
        raise SystemExit(f"decode failed: {dec.last_errors}")


def one_batch(hw: NvjpegDecoder, side, bt: Batch, share: float, out: torch.Tensor, stream):
    """Decode ``bt``: the engines all but ``share`` of it, ``side`` the rest alongside.
    Returns (hardware call's wall s, slowest side thread's wall s)."""
    n = len(bt.lengths)
    k = int(round(share * n)) if side is not None else 0
    side_idx, hw_idx = np.arange(k), np.arange(k, n)
    futures = side.submit(bt, side_idx, out) if k else []
    t0 = time.perf_counter()
    if len(hw_idx):
        decode(hw, bt, hw_idx, out, stream)
    t_hw = time.perf_counter() - t0
    t_side = max((f.result() for f in futures), default=0.0)
    if side is not None:
        for s in side.streams:
            stream.wait_stream(s)
    return t_hw, t_side


def compare(hw: NvjpegDecoder, side: Side, bt: Batch, stream, biggest: int) -> str:
    a = torch.zeros(biggest, dtype=torch.uint8, device="cuda")
    b = torch.zeros(biggest, dtype=torch.uint8, device="cuda")
    idx = np.arange(len(bt.lengths))
    decode(hw, bt, idx, a, stream)
    decode(side.decoders[0], bt, idx, b, side.streams[0])
    torch.cuda.synchronize()
    diff = (a[: bt.out_bytes].int() - b[: bt.out_bytes].int()).abs()
    n_diff = int((diff > 0).sum())
    return (f"{side.label}: {n_diff:,} of {bt.out_bytes:,} plane bytes differ from the engines' "
            f"({100.0 * n_diff / bt.out_bytes:.4f}%), at most by {int(diff.max())}")


def main() -> None:
    p = argparse.ArgumentParser()
    add_batch_args(p, batches=12)
    p.add_argument("--shares", default="0.05,0.1,0.2")
    p.add_argument("--threads", default="1,2,4")
    p.add_argument("--backends", default="gpu_hybrid,default")
    args = p.parse_args()
    n = args.batches * args.batch
    batches = drawn_batches(args.data, args.batches, args.batch)
    print(f"{torch.cuda.get_device_name(0)}, {os.cpu_count()} CPUs, torch {torch.__version__}; "
          f"{n} files, batch {args.batch}")
    stream = torch.cuda.Stream()
    biggest = max(bt.out_bytes for bt in batches)
    hw = NvjpegDecoder(0, pipeline_depth=2)
    names = {"gpu_hybrid": "hybrid", "default": "default"}
    sides = {}
    for b in args.backends.split(","):
        for t in (int(x) for x in args.threads.split(",")):
            sides[(b, t)] = Side(names[b], t)
    for (b, t), s in sides.items():
        if t == 1:
            print(compare(hw, s, batches[0], stream, biggest))

    variants = [("hw only", None, 0.0)]
    for (b, t), s in sides.items():
        for share in (float(x) for x in args.shares.split(",")):
            variants.append((f"{b}, {t} thread{'s' if t > 1 else ''}, share {share:g}", s, share))
        variants.append((f"{b}, {t} thread{'s' if t > 1 else ''}, everything", s, 1.0))
    outs = [torch.empty(biggest, dtype=torch.uint8, device="cuda") for _ in range(2)]
    rates = {v[0]: [] for v in variants}
    cpu = {v[0]: [] for v in variants}
    t_hw = {v[0]: [] for v in variants}
    t_side = {v[0]: [] for v in variants}
    for rep in range(args.reps + 1):  # the first pass warms every variant up
        for name, side, share in variants:
            torch.cuda.synchronize()
            c0, t0 = time.process_time(), time.perf_counter()
            for k, bt in enumerate(batches):
                a, b = one_batch(hw, side, bt, share, outs[k % 2], stream)
                if rep:
                    t_hw[name].append(1e3 * a)
                    t_side[name].append(1e3 * b)
            torch.cuda.synchronize()
            if rep:
                wall, used = time.perf_counter() - t0, time.process_time() - c0
                rates[name].append(n / wall)
                cpu[name].append(1e3 * used / n)
    print_rates("variant", rates, "hw only", args.reps,
                (("CPU-s per 1k images", cpu, ".3f"), ("hardware call ms per batch", t_hw, ".2f"),
                 ("side ms per batch", t_side, ".2f")))
    for s in sides.values():
        s.close()
    hw.close()


if __name__ == "__main__":
    main()
