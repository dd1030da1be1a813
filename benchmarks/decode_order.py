"""Does the order of a batch's images change the nvJPEG hardware engines' rate?

    python benchmarks/decode_order.py DATA_DIR [--batches 16] [--batch 256] [--reps 5]

Decodes the same batches of DATA_DIR (files drawn at random, packed once into pinned
memory) to planar Y/Cb/Cr with header codes, as the loader does, handing nvJPEG the
images in different orders. The bytes stay where they were packed and every image is
written to the same place in the output; only the order of the pointers in nvJPEG's
call changes:

- ``as drawn``: the order the files were drawn in (subsamplings mixed), which the engines got
  before the decoder ordered its calls itself;
- ``by subsampling``: sorted by chroma subsampling within each batch (a stable sort);
- ``by subsampling, then size``: and by height and width within a subsampling;
- ``one call per subsampling``: a ``decode_batch`` call per subsampling of each batch;
- ``only <most common>``: batches made of that subsampling alone (a ceiling; other files).

The variants alternate within each rep, so the machine's drift hits all of them alike.
Each variant's output of the first batches is compared with the ``as drawn`` output,
byte for byte, before anything is timed. Prints images/s (median of the reps, and the
range) and the host milliseconds of a batch's calls.
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from profile_decode import pack  # noqa: E402
from torchdali.decode import NvjpegDecoder, _nvjpeg, jpeg_info  # noqa: E402
from torchdali.decode._jpeg_header import planar_chroma  # noqa: E402


_KIND_ORDER = {"420": 0, "422": 1, "440": 2, "444": 3, "gray": 4}


class Batch:
    """One batch packed in pinned memory, with what ``decode_batch`` takes per image."""

    def __init__(self, files: list[str]) -> None:
        blobs, host, self.offsets, self.lengths, self.sizes, self.hints = pack(files)
        self.pinned = host.pin_memory()
        planar = [planar_chroma(jpeg_info(b)) for b in blobs]
        if any(p is None for p in planar):
            raise SystemExit("every file must be 4:2:0/4:2:2/4:4:0/4:4:4 or grayscale")
        self.chroma = np.array([p[1:] for p in planar], dtype=np.int64)
        self.kind = np.array([_KIND_ORDER[p[0]] for p in planar], dtype=np.int64)
        numel = self.sizes[:, 0] * self.sizes[:, 1] + 2 * self.chroma[:, 0] * self.chroma[:, 1]
        self.out_offsets = np.zeros(len(blobs), dtype=np.int64)
        self.out_offsets[1:] = np.cumsum(numel)[:-1]
        self.out_bytes = int(numel.sum())

    def calls(self, variant: str) -> list[np.ndarray]:
        """The index arrays of the ``decode_batch`` calls that decode this batch."""
        n = len(self.lengths)
        if variant == "by subsampling":
            return [np.argsort(self.kind, kind="stable")]
        if variant == "by subsampling, then size":
            return [np.lexsort((self.sizes[:, 1], self.sizes[:, 0], self.kind))]
        if variant == "one call per subsampling":
            return [np.flatnonzero(self.kind == k) for k in np.unique(self.kind)]
        return [np.arange(n)]


def add_batch_args(p: argparse.ArgumentParser, batches: int = 16) -> None:
    """The arguments the decoder-alone benchmarks here share: DATA_DIR, --batches, --batch, --reps."""
    p.add_argument("data")
    p.add_argument("--batches", type=int, default=batches)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--reps", type=int, default=5)


def drawn_files(data: str, n: int) -> tuple[list[str], list[str]]:
    """(every JPEG of the folder ``data``, all of them in an order drawn with seed 0); at least ``n``."""
    every = sorted(glob.glob(os.path.join(data, "*", "*.jpg")))
    if len(every) < n:
        raise SystemExit(f"{data} has {len(every)} JPEGs, {n} needed")
    pick = np.random.default_rng(0).permutation(len(every))
    return every, [every[i] for i in pick]


def drawn_batches(data: str, batches: int, batch: int) -> list[Batch]:
    """``batches`` batches of ``batch`` files drawn from ``data`` (``drawn_files``), packed."""
    _, files = drawn_files(data, batches * batch)
    return [Batch(files[k:k + batch]) for k in range(0, batches * batch, batch)]


def print_rates(first: str, rates: dict, base: str, reps: int, columns: tuple = ()) -> None:
    """A markdown table, a row per key of ``rates`` (images/s, one per rep): the median and the
    range, then each of ``columns`` ((header, {key: values}, format) as the values' median),
    then the median against ``base``'s."""
    ref = statistics.median(rates[base])
    print(f"\n| {first} | images/s (median of {reps}) | range | "
          + "".join(f"{h} | " for h, _, _ in columns) + f"vs {base} |")
    print("|---" * (4 + len(columns)) + "|")
    for name, r in rates.items():
        m = statistics.median(r)
        cells = "".join(f"{format(statistics.median(v[name]), f)} | " for _, v, f in columns)
        print(f"| {name} | {m:,.0f} | {min(r):,.0f}-{max(r):,.0f} | {cells}{m / ref:.3f}x |")


def decode(dec: NvjpegDecoder, bt: Batch, idx_list: list[np.ndarray], out: torch.Tensor,
           stream: torch.cuda.Stream) -> None:
    for idx in idx_list:
        status = dec.decode_batch(bt.pinned, bt.offsets[idx], bt.lengths[idx], bt.sizes[idx], out,
                                  bt.out_offsets[idx], stream, hints=bt.hints[idx], chroma=bt.chroma[idx])
        if any(status):
            raise SystemExit(f"decode failed: {dec.last_errors}")


def main() -> None:
    # The decoder puts a call's images in its own order (``_nvjpeg.engine_order``); turned off
    # here, the engines get them in the order each variant gives. "by subsampling, then size"
    # is the decoder's grouping.
    _nvjpeg.engine_order = lambda kinds, heights, widths: np.arange(len(kinds))
    p = argparse.ArgumentParser()
    add_batch_args(p)
    args = p.parse_args()
    n = args.batches * args.batch
    every, files = drawn_files(args.data, n)
    mixed = [Batch(files[k:k + args.batch]) for k in range(0, n, args.batch)]
    kinds = {}
    for f in files:
        with open(f, "rb") as fh:
            kinds.setdefault(jpeg_info(np.frombuffer(fh.read(), np.uint8)).subsampling, []).append(f)
    main_kind = max(kinds, key=lambda k: len(kinds[k]))
    one_kind = kinds[main_kind][:n]
    alone = [Batch(one_kind[k:k + args.batch]) for k in range(0, len(one_kind) - args.batch + 1, args.batch)]
    print(f"{len(every)} files; subsamplings: " + ", ".join(f"{k}: {len(v)}" for k, v in sorted(kinds.items())))
    print(f"{torch.cuda.get_device_name(0)}, {os.cpu_count()} CPUs, torch {torch.__version__}")

    variants = {"as drawn": mixed, "by subsampling": mixed, "by subsampling, then size": mixed,
                "one call per subsampling": mixed, f"only {main_kind}": alone}
    stream = torch.cuda.Stream()
    biggest = max(bt.out_bytes for bt in mixed + alone)
    # the loader's depth of 2, and for the per-subsampling calls enough state sets that the
    # calls of one batch do not wait for each other's
    decoders = {v: NvjpegDecoder(0, pipeline_depth=8 if v == "one call per subsampling" else 2)
                for v in variants}

    # the same bytes, whatever the order
    check = [mixed[k] for k in range(min(2, len(mixed)))]
    for bt in check:
        outs = {}
        for v in list(variants)[:4]:
            out = torch.zeros(biggest, dtype=torch.uint8, device="cuda")
            decode(decoders[v], bt, bt.calls(v), out, stream)
            stream.synchronize()
            outs[v] = out[: bt.out_bytes].cpu()
        for v, o in outs.items():
            if not torch.equal(o, outs["as drawn"]):
                raise SystemExit(f"{v}: output differs from the order drawn")
    print(f"outputs equal byte for byte in every order ({len(check)} batches)")

    outs = [torch.empty(biggest, dtype=torch.uint8, device="cuda") for _ in range(2)]
    rates: dict[str, list[float]] = {v: [] for v in variants}
    host: dict[str, list[float]] = {v: [] for v in variants}
    for rep in range(args.reps + 1):  # the first pass warms every variant up
        for v, batches in variants.items():
            dec = decoders[v]
            plans = [bt.calls(v) for bt in batches]
            stream.synchronize()
            t0 = time.perf_counter()
            for k, bt in enumerate(batches):
                h = time.perf_counter()
                decode(dec, bt, plans[k], outs[k % 2], stream)
                if rep:
                    host[v].append(1e3 * (time.perf_counter() - h))
            stream.synchronize()
            if rep:
                rates[v].append(sum(len(bt.lengths) for bt in batches) / (time.perf_counter() - t0))
    print_rates("order of the images in nvJPEG's call", rates, "as drawn", args.reps,
                (("host ms per batch", host, ".2f"),))
    for dec in decoders.values():
        dec.close()


if __name__ == "__main__":
    main()
