"""The hardware engines fed from host memory or from a copy of the batch already on the GPU.

    python benchmarks/device_input.py DATA_DIR [--batches 12] [--batch 256] [--reps 5]

nvJPEG's ``NVJPEG_BACKEND_HARDWARE`` reads the JPEGs from host memory;
``NVJPEG_BACKEND_HARDWARE_DEVICE`` reads them from device memory (batched calls only).
This decodes the same batches of DATA_DIR (planar Y/Cb/Cr, in the decoder's engine order,
as the loader does) three ways, alternating within each rep:

- ``host input``: ``NvjpegDecoder.decode_batch`` from pinned memory (the loader today);
- ``device input``: one ``nvjpegDecodeBatched`` call on a HARDWARE_DEVICE handle, every
  batch's bytes copied to the GPU before the timed pass;
- ``device input + copy``: the same, each batch's bytes copied to the GPU on a copy stream
  one batch ahead of its decode, whose call waits on the host for its copy (the engines
  read their input during the call, whatever the stream still has queued).

Prints images/s, the call's wall and thread-CPU milliseconds per batch, and checks that the
device-input planes equal the host-input planes byte for byte.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from torchdali.decode import NvjpegDecoder, _nvjpeg  # noqa: E402
from torchdali.decode._nvjpeg_lib import NVJPEG_OUTPUT_YUV, load_nvjpeg, status_name  # noqa: E402

from decode_order import Batch, add_batch_args, drawn_batches, print_rates  # noqa: E402
NVJPEG_BACKEND_HARDWARE_DEVICE = 5


class DeviceInput:
    """A HARDWARE_DEVICE handle and two states, used in turn."""

    def __init__(self, flags: int) -> None:
        self.lib = lib = load_nvjpeg()
        h = ctypes.c_void_p()
        st = lib.nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE_DEVICE, None, None, flags, ctypes.byref(h))
        if st:
            raise SystemExit(f"nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE_DEVICE) returned {status_name(st)}")
        self.handle = h.value
        self.states = []
        for _ in range(2):
            s = ctypes.c_void_p()
            st = lib.nvjpegJpegStateCreate(self.handle, ctypes.byref(s))
            if st:
                raise SystemExit(f"nvjpegJpegStateCreate: {status_name(st)}")
            self.states.append(s.value)
        self.sizes = [0, 0]
        self.events = [torch.cuda.Event(), torch.cuda.Event()]
        self.k = 0

    def decode(self, ptrs: np.ndarray, lens: np.ndarray, rows: np.ndarray, stream) -> None:
        k = self.k
        self.k ^= 1
        self.events[k].synchronize()
        n = len(ptrs)
        if self.sizes[k] != n:
            st = self.lib.nvjpegDecodeBatchedInitialize(self.handle, self.states[k], n, 1, NVJPEG_OUTPUT_YUV)
            if st:
                raise SystemExit(f"nvjpegDecodeBatchedInitialize: {status_name(st)}")
            self.sizes[k] = n
        ptrs = np.ascontiguousarray(ptrs, dtype=np.uint64)
        lens = np.ascontiguousarray(lens, dtype=np.uint64)
        rows = np.ascontiguousarray(rows, dtype=np.uint64)
        st = self.lib.nvjpegDecodeBatched(self.handle, self.states[k], ptrs.ctypes.data, lens.ctypes.data,
                                          rows.ctypes.data, stream.cuda_stream)
        if st:
            raise SystemExit(f"nvjpegDecodeBatched (device input): {status_name(st)}")
        self.events[k].record(stream)


def main() -> None:
    p = argparse.ArgumentParser()
    add_batch_args(p, batches=12)
    args = p.parse_args()
    n = args.batches * args.batch
    batches = drawn_batches(args.data, args.batches, args.batch)
    print(f"{torch.cuda.get_device_name(0)}, {os.cpu_count()} CPUs, torch {torch.__version__}; {n} files, "
          f"batch {args.batch}", flush=True)
    stream, copy_stream = torch.cuda.Stream(), torch.cuda.Stream()
    biggest = max(bt.out_bytes for bt in batches)
    outs = [torch.empty(biggest, dtype=torch.uint8, device="cuda") for _ in range(2)]
    dec = NvjpegDecoder(0, pipeline_depth=2)
    dev = DeviceInput(dec.handle_flags.get("hardware", 0))
    resident = [bt.pinned.cuda() for bt in batches]
    staged = [torch.empty(max(bt.pinned.numel() for bt in batches), dtype=torch.uint8, device="cuda")
              for _ in range(2)]
    copied = [torch.cuda.Event() for _ in range(2)]
    read = [torch.cuda.Event() for _ in range(2)]  # the last decode that read each staged buffer
    orders = [_nvjpeg.engine_order(bt.hints, bt.sizes[:, 0], bt.sizes[:, 1]) for bt in batches]
    scratch: list = []  # where grayscale images' unused chroma planes go

    def host_input(k: int, bt: Batch, out: torch.Tensor) -> None:
        status = dec.decode_batch(bt.pinned, bt.offsets, bt.lengths, bt.sizes, out, bt.out_offsets, stream,
                                  hints=bt.hints, chroma=bt.chroma)
        if any(status):
            raise SystemExit(f"decode failed: {dec.last_errors}")

    def device_rows(k: int, out: torch.Tensor) -> np.ndarray:
        """nvjpegImage_t rows of batch ``k``'s images in ``out``, in engine order."""
        bt = batches[k]
        dst = (bt.out_offsets + out.data_ptr()).astype(np.uint64)
        rows = dec._image_rows(bt.sizes[:, 0], bt.sizes[:, 1], None, dst, bt.chroma, stream, scratch)
        del scratch[:-1]
        return rows[orders[k]]

    def device_input(k: int, bt: Batch, out: torch.Tensor) -> None:
        order = orders[k]
        ptrs = resident[k].data_ptr() + bt.offsets[order]
        dev.decode(ptrs.astype(np.uint64), bt.lengths[order], device_rows(k, out), stream)

    def device_input_copy(k: int, bt: Batch, out: torch.Tensor) -> None:
        if k == 0:  # the first batch's copy; the rest are queued one batch ahead
            with torch.cuda.stream(copy_stream):
                copy_stream.wait_event(read[0])
                staged[0][: bt.pinned.numel()].copy_(bt.pinned, non_blocking=True)
                copied[0].record(copy_stream)
        if k + 1 < len(batches):
            nxt = batches[k + 1]
            with torch.cuda.stream(copy_stream):
                copy_stream.wait_event(read[(k + 1) % 2])  # the buffer's last reader is done
                staged[(k + 1) % 2][: nxt.pinned.numel()].copy_(nxt.pinned, non_blocking=True)
                copied[(k + 1) % 2].record(copy_stream)
        # the engines read their input during the call, not in the stream's order (as they
        # write their output): the host waits for the copy, queued a batch ago
        copied[k % 2].synchronize()
        order = orders[k]
        ptrs = staged[k % 2].data_ptr() + bt.offsets[order]
        dev.decode(ptrs.astype(np.uint64), bt.lengths[order], device_rows(k, out), stream)
        read[k % 2].record(stream)

    variants = {"host input": host_input, "device input": device_input, "device input + copy": device_input_copy}
    # the same planes from host and device input (the grayscale images' rows point at
    # scratch memory, never into the output, in both)
    for k in range(min(2, len(batches))):
        a = torch.zeros(biggest, dtype=torch.uint8, device="cuda")
        b = torch.zeros(biggest, dtype=torch.uint8, device="cuda")
        host_input(k, batches[k], a)
        device_input(k, batches[k], b)
        torch.cuda.synchronize()
        diff = int((a[: batches[k].out_bytes] != b[: batches[k].out_bytes]).sum())
        print(f"batch {k}: {diff} of {batches[k].out_bytes:,} plane bytes differ between host and device input")
    rates = {v: [] for v in variants}
    wall = {v: [] for v in variants}
    cpu = {v: [] for v in variants}
    for rep in range(args.reps + 1):
        for name, fn in variants.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for k, bt in enumerate(batches):
                t, c = time.perf_counter(), time.thread_time()
                fn(k, bt, outs[k % 2])
                if rep:
                    wall[name].append(1e3 * (time.perf_counter() - t))
                    cpu[name].append(1e3 * (time.thread_time() - c))
            torch.cuda.synchronize()
            if rep:
                rates[name].append(n / (time.perf_counter() - t0))
    print_rates("input", rates, "host input", args.reps,
                (("call ms per batch (wall)", wall, ".2f"), ("its CPU ms", cpu, ".2f")))


if __name__ == "__main__":
    main()
