"""Does the kind of host memory the encoded bytes lie in change nvJPEG's hardware call?

    python benchmarks/source_memory.py DATA_DIR [--batches 12] [--reps 5] [--slots 38]

The hardware engines read each JPEG's bytes from pinned host memory during the call. The
loader's bytes lie in its staging ring (a ``memfd`` registered with ``cudaHostRegister``,
4 KiB pages, ``--slots`` slots of a batch each, written long before the call: cold in the
CPU's caches); the decoder-alone benchmarks' bytes lie in one ``pin_memory`` buffer per batch
(``cudaHostAlloc``). The same batches are decoded, planar with header codes as the loader
does, from:

- ``pin_memory per batch``: one ``cudaHostAlloc`` buffer per batch (decode_order.py's way);
- ``pin_memory, one block``: every slot in one ``cudaHostAlloc`` block of the ring's size;
- ``ring``: torchdali's ``HostRing`` with ``--slots`` slots, registered;
- ``ring, 12 slots``: the same with 12 slots (the 3-worker loader's size);
- ``ring, MADV_HUGEPAGE``: the ring's mapping advised to use huge pages before it is touched
  (takes effect only where ``/sys/kernel/mm/transparent_hugepage/shmem_enabled`` allows);
- ``private, MADV_HUGEPAGE``: a private anonymous mapping so advised, registered (what a
  process-local buffer could have; workers could not write into it);
- ``ring, copied to pin_memory``: each batch copied from the ring into a ``cudaHostAlloc``
  buffer before its call (the copy's time is reported apart, not in the call).

Each source holds the batches cycled over all its slots, filled before the timing, and the
calls walk the slots in order, so every call reads bytes written long before, as in the
loader. The sources alternate within each rep. Prints images/s of the calls alone, the
call's wall and CPU milliseconds per batch, the machine's huge-page settings and counters,
and the GPU's clocks before and after.
"""
from __future__ import annotations

import argparse
import mmap
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from decode_order import add_batch_args, drawn_batches, print_rates  # noqa: E402
from torchdali._executor._ring import HostRing  # noqa: E402
from torchdali.decode import NvjpegDecoder  # noqa: E402


def _sys(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as e:
        return f"({e.strerror})"


def _meminfo() -> str:
    keys = ("AnonHugePages", "ShmemHugePages", "ShmemPmdMapped", "HugePages_Total", "Hugepagesize")
    with open("/proc/meminfo") as f:
        return ", ".join(" ".join(line.split()[:2]) for line in f if line.split(":")[0] in keys)


def _clocks() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "-q", "-d", "CLOCK,PERFORMANCE"], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi: {e}"
    return " | ".join(" ".join(line.split()) for line in out.splitlines()
                      if any(k in line for k in ("Video", "SM ", "Graphics", "Memory ", "Active", "Throttle")))


class Source:
    """``slots`` slots of ``slot_bytes`` in one kind of host memory, each holding a batch."""

    def __init__(self, name: str, slots: int, slot_bytes: int, batches: list) -> None:
        self.name, self.slot_bytes, self.keep = name, slot_bytes, None
        size = slots * slot_bytes
        if name.startswith("pin_memory per batch"):
            self.views = [bt.pinned for bt in batches]
        else:
            if name.startswith("pin_memory"):
                mem = torch.empty(size, dtype=torch.uint8).pin_memory()
            elif name.startswith("ring"):
                ring = HostRing(slots, slot_bytes)
                if "HUGEPAGE" in name:
                    ring._map.madvise(mmap.MADV_HUGEPAGE)
                ring.register()
                mem, self.keep = ring._mem, ring
            else:  # private anonymous mapping
                m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
                m.madvise(mmap.MADV_HUGEPAGE)
                mem = torch.frombuffer(m, dtype=torch.uint8)
                err = torch.cuda.cudart().cudaHostRegister(mem.data_ptr(), mem.numel(), 0)
                if int(err) != 0:
                    raise SystemExit(f"cudaHostRegister: {err}")
                self.keep = m
            self.views = []
            for s in range(slots):
                bt = batches[s % len(batches)]
                view = mem[s * slot_bytes: s * slot_bytes + bt.pinned.numel()]
                view.copy_(bt.pinned)
                self.views.append(view)
        self.batches = [batches[s % len(batches)] for s in range(len(self.views))]
        self.copy_to = torch.empty(slot_bytes, dtype=torch.uint8).pin_memory() if "copied" in name else None


def main() -> None:
    p = argparse.ArgumentParser()
    add_batch_args(p, batches=12)
    p.add_argument("--slots", type=int, default=38)
    p.add_argument("--calls", type=int, default=38, help="calls per source per rep")
    args = p.parse_args()

    print(f"{torch.cuda.get_device_name(0)}, {os.cpu_count()} CPUs, torch {torch.__version__}; "
          f"{args.batches} batches of {args.batch}, {args.slots} slots", flush=True)
    print("THP enabled:", _sys("/sys/kernel/mm/transparent_hugepage/enabled"),
          "| shmem_enabled:", _sys("/sys/kernel/mm/transparent_hugepage/shmem_enabled"))
    print("meminfo before:", _meminfo())
    print("clocks before:", _clocks(), flush=True)
    batches = drawn_batches(args.data, args.batches, args.batch)
    slot_bytes = -(-int(max(bt.pinned.numel() for bt in batches) * 1.1) // (2 << 20)) * (2 << 20)
    names = ["pin_memory per batch", "pin_memory, one block", "ring", "ring, 12 slots",
             "ring, MADV_HUGEPAGE", "private, MADV_HUGEPAGE", "ring, copied to pin_memory"]
    sources = {}
    for name in names:
        sources[name] = Source(name, 12 if "12 slots" in name else args.slots, slot_bytes, batches)
        print(f"  {name}: meminfo {_meminfo()}", flush=True)

    stream = torch.cuda.Stream()
    biggest = max(bt.out_bytes for bt in batches)
    outs = [torch.empty(biggest, dtype=torch.uint8, device="cuda") for _ in range(2)]
    dec = NvjpegDecoder(0, pipeline_depth=2)
    rates = {k: [] for k in names}
    wall = {k: [] for k in names}
    cpu = {k: [] for k in names}
    copy_ms = {k: [0.0] for k in names}
    pos = {k: 0 for k in names}
    for rep in range(args.reps + 1):  # the first pass warms up
        for name in names:
            src = sources[name]
            torch.cuda.synchronize()
            spent = 0.0
            for k in range(args.calls):
                s = pos[name] % len(src.views)
                pos[name] += 1
                view, bt = src.views[s], src.batches[s]
                if src.copy_to is not None:
                    t = time.perf_counter()
                    src.copy_to[:view.numel()].copy_(view)
                    if rep:
                        copy_ms[name].append(1e3 * (time.perf_counter() - t))
                    view = src.copy_to[:view.numel()]
                t, c = time.perf_counter(), time.thread_time()
                status = dec.decode_batch(view, bt.offsets, bt.lengths, bt.sizes, outs[k % 2],
                                          bt.out_offsets, stream, hints=bt.hints, chroma=bt.chroma)
                w = time.perf_counter() - t
                spent += w
                if any(status):
                    raise SystemExit(f"{name}: decode failed: {dec.last_errors}")
                if rep:
                    wall[name].append(1e3 * w)
                    cpu[name].append(1e3 * (time.thread_time() - c))
            stream.synchronize()
            if rep:
                rates[name].append(args.calls * args.batch / spent)
    print_rates("bytes in", rates, "ring", args.reps,
                (("call ms (wall)", wall, ".2f"), ("its CPU ms", cpu, ".2f"), ("copy ms", copy_ms, ".2f")))
    print("meminfo after:", _meminfo())
    print("clocks after:", _clocks(), flush=True)
    dec.close()


if __name__ == "__main__":
    main()
