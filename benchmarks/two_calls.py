"""Do two nvJPEG hardware calls at once decode more images per second than one at a time?

    python benchmarks/two_calls.py DATA_DIR [--batches 16] [--batch 256] [--reps 5]

The same batches of DATA_DIR (drawn at random, packed into pinned memory) are decoded to
planar Y/Cb/Cr with header codes, as the loader does:

- ``one thread``: one decoder, every batch in turn (the loader's executor thread);
- ``two threads, one handle``: two threads take alternate batches at the same time, each
  with its own nvJPEG states and stream on one hardware handle;
- ``two threads, two handles``: the same with a decoder (handle) per thread;
- ``loader's work after each call``: one thread, and after every call the work the loader's
  executor thread does per batch besides nvJPEG's call (``--work-ms`` of Python, a few
  kernel launches and a small copy to the GPU), with the engines idle meanwhile;
- ``loader's work beside the next call``: the same work, done on this thread for one batch
  while a second thread is in nvJPEG's call for the next one;
- ``..., once that call has started``: and this thread waits until the second thread is in
  nvJPEG's call before it starts the work. Without that wait, the second thread needs the
  interpreter lock to reach the call while this thread's Python holds it (up to
  ``sys.getswitchinterval()``, 5 ms), and the two run one after the other.

The variants alternate within each rep. The planes of the first batches are compared with
the one-thread planes byte for byte first. Prints images/s (median of the reps, and the
range) and the host milliseconds of one call.
"""
from __future__ import annotations

import argparse
import copy
import ctypes
import os
import queue
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from decode_order import add_batch_args, decode, drawn_batches, print_rates  # noqa: E402
from torchdali.decode import NvjpegDecoder, _nvjpeg  # noqa: E402


def on_same_handle(dec: NvjpegDecoder) -> NvjpegDecoder:
    """A decoder that shares ``dec``'s nvJPEG handles but has states, a lock and scratch
    cells of its own, so its calls may run beside ``dec``'s."""
    twin = copy.copy(dec)
    lib = dec._lib
    twin._lock = threading.Lock()
    twin._next_set = 0
    twin._routes, twin._routes_ex = dict(dec._routes), dict(dec._routes_ex)
    twin._sets = []
    for _ in range(len(dec._sets)):
        ss = _nvjpeg._StateSet()
        ss.hy = dec._new(lib.nvjpegJpegStateCreate, dec._hy, "nvjpegJpegStateCreate")
        ss.single = dec._new(lib.nvjpegJpegStateCreate, dec._hy, "nvjpegJpegStateCreate")
        ss.hw = dec._new(lib.nvjpegJpegStateCreate, dec._hw, "nvjpegJpegStateCreate")
        ss.event = torch.cuda.Event()
        twin._sets.append(ss)
    twin._jstream = dec._new(lib.nvjpegJpegStreamCreate, dec._hw, "nvjpegJpegStreamCreate")
    twin._c_ncomp, twin._c_css, twin._c_enc, twin._c_sup = (ctypes.c_int() for _ in range(4))
    twin._c_w, twin._c_h, twin._c_prec = (ctypes.c_int * 4)(), (ctypes.c_int * 4)(), ctypes.c_uint()
    return twin


def loader_work(ms: float, small: torch.Tensor, pinned: torch.Tensor, stream: torch.cuda.Stream) -> None:
    """What the loader's executor thread does per batch besides nvJPEG's call, in kind:
    ``ms`` of Python, 4 kernel launches and a copy of ``pinned`` to the GPU on ``stream``."""
    end = time.perf_counter() + ms / 1e3
    x = 0
    while time.perf_counter() < end:
        for i in range(50):
            x += i * i
    with torch.cuda.stream(stream):
        for _ in range(4):
            small.mul_(1.0001)
        small[: pinned.numel()].copy_(pinned, non_blocking=True)


class _Entered:
    """``lib`` (nvJPEG's ctypes library), with ``event`` set just before each batched call."""

    def __init__(self, lib) -> None:
        self._lib = lib
        self.event = threading.Event()

    def __getattr__(self, name: str):
        return getattr(self._lib, name)

    def nvjpegDecodeBatched(self, *args):
        self.event.set()
        return self._lib.nvjpegDecodeBatched(*args)


def run_with_work(dec, batches, outs, stream, host: list, work, beside: str) -> None:
    """Every batch through ``dec`` on ``stream``, and ``work()`` once per batch: after its
    call (``beside`` ""), or while an engine thread is in the next batch's call ("any":
    as soon as that call is handed over; "entered": once the thread is in nvJPEG's call)."""
    if not beside:
        for k, bt in enumerate(batches):
            h = time.perf_counter()
            decode(dec, bt, bt.calls("as drawn"), outs[0][k % 2], stream)
            host.append(1e3 * (time.perf_counter() - h))
            work()
        stream.synchronize()
        return
    todo: queue.Queue = queue.Queue()
    done: queue.Queue = queue.Queue()

    def engine() -> None:
        while (k := todo.get()) is not None:
            try:
                h = time.perf_counter()
                decode(dec, batches[k], batches[k].calls("as drawn"), outs[0][k % 2], stream)
                host.append(1e3 * (time.perf_counter() - h))
                done.put(None)
            except BaseException as e:
                done.put(e)
                return

    lib = dec._lib
    entered = _Entered(lib) if beside == "entered" else None
    if entered is not None:
        dec._lib = entered
    t = threading.Thread(target=engine)
    t.start()
    try:
        todo.put(0)
        for k in range(len(batches)):
            failed = done.get()  # batch k decoded
            if failed is not None:
                raise failed
            if k + 1 < len(batches):
                if entered is not None:
                    entered.event.clear()
                todo.put(k + 1)
                if entered is not None:
                    entered.event.wait(timeout=1.0)  # a failure before the call is raised by done.get()
            work()  # batch k's kernel etc., beside batch k + 1's call
    finally:
        todo.put(None)
        t.join()
        dec._lib = lib
    stream.synchronize()


def run(decs, batches, outs, streams, host: list) -> None:
    """Decode ``batches``, batch ``k`` by ``decs[k % len(decs)]`` on its own thread when
    there are two decoders; waits for the GPU."""
    def one(j: int) -> None:
        for k in range(j, len(batches), len(decs)):
            bt = batches[k]
            h = time.perf_counter()
            decode(decs[j], bt, bt.calls("as drawn"), outs[j][(k // len(decs)) % 2], streams[j])
            host.append(1e3 * (time.perf_counter() - h))
        streams[j].synchronize()

    in_threads(one, len(decs))


def in_threads(fn, count: int) -> None:
    """``fn(j)`` for j < count, each on a thread of its own when count > 1; a failure in
    any of them is raised here."""
    if count == 1:
        fn(0)
        return
    failed: list = []

    def guarded(j: int) -> None:
        try:
            fn(j)
        except BaseException as e:  # SystemExit from decode() too
            failed.append(e)

    threads = [threading.Thread(target=guarded, args=(j,)) for j in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise failed[0]


def main() -> None:
    p = argparse.ArgumentParser()
    add_batch_args(p)
    p.add_argument("--work-ms", type=float, default=1.5, help="Python per batch of the loader's-work variants")
    args = p.parse_args()
    batches = drawn_batches(args.data, args.batches, args.batch)
    print(f"{len(batches)} batches of {args.batch}; {torch.cuda.get_device_name(0)}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__}")
    a = NvjpegDecoder(0, pipeline_depth=2)
    if not a.has_hardware:
        raise SystemExit(f"no hardware engines: {a.hardware_unavailable_reason}")
    twin = on_same_handle(a)
    b = NvjpegDecoder(0, pipeline_depth=2)
    variants = {"one thread": [a], "two threads, one handle": [a, twin], "two threads, two handles": [a, b]}
    biggest = max(bt.out_bytes for bt in batches)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = [[torch.empty(biggest, dtype=torch.uint8, device="cuda") for _ in range(2)] for _ in range(2)]

    check = batches[: min(4, len(batches))]
    ref = {}
    for v, decs in variants.items():
        got = [torch.zeros(bt.out_bytes, dtype=torch.uint8, device="cuda") for bt in check]

        def one(j: int, decs=decs, got=got) -> None:
            for k in range(j, len(check), len(decs)):
                decode(decs[j], check[k], check[k].calls("as drawn"), got[k], streams[j])
            streams[j].synchronize()

        in_threads(one, len(decs))
        for k, g in enumerate(got):
            g = g.cpu()
            if k in ref and not torch.equal(g, ref[k]):
                raise SystemExit(f"{v}: batch {k} differs from one thread's planes")
            ref.setdefault(k, g)
    print(f"planes equal byte for byte ({len(check)} batches)")

    small = torch.ones(1 << 20, device="cuda")
    pinned = torch.ones(1 << 15, dtype=torch.float32).pin_memory()
    work = lambda: loader_work(args.work_ms, small, pinned, streams[0])  # noqa: E731
    with_work = {"loader's work after each call": "", "loader's work beside the next call": "any",
                 "..., once that call has started": "entered"}
    rates: dict[str, list[float]] = {v: [] for v in list(variants) + list(with_work)}
    host: dict[str, list[float]] = {v: [] for v in rates}
    n = sum(len(bt.lengths) for bt in batches)
    for rep in range(args.reps + 1):  # the first pass warms every variant up
        for v in (list(rates) if rep % 2 else list(rates)[::-1]):
            torch.cuda.synchronize()
            calls: list[float] = []
            t0 = time.perf_counter()
            if v in with_work:
                run_with_work(a, batches, outs, streams[0], calls, work, with_work[v])
            else:
                run(variants[v], batches, outs, streams, calls)
            if rep:
                rates[v].append(n / (time.perf_counter() - t0))
                host[v].extend(calls)
    print_rates("nvJPEG's hardware calls", rates, "one thread", args.reps,
                (("host ms per call", host, ".2f"),))
    # the twin's states go with it; its handles are a's
    lib = a._lib
    for ss in twin._sets:
        for s in (ss.hw, ss.hy, ss.single):
            lib.nvjpegJpegStateDestroy(s)
    lib.nvjpegJpegStreamDestroy(twin._jstream)
    b.close()
    a.close()


if __name__ == "__main__":
    main()
