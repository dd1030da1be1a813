"""Where a GPU batch's host and device time goes: staging copy, nvJPEG, header checks.

    python benchmarks/profile_decode.py DATA_DIR [--batches 8] [--batch 256]

Decodes the same packed batches (files drawn at random from the whole of DATA_DIR)
with torchdali's NvjpegDecoder (hardware + hybrid, and hybrid only) and with
torchvision's batched decode_jpeg on the GPU, in one run. The first row after the
CPU-side ones is the decoder's ceiling on exactly the loader benchmark's data:
every file of DATA_DIR once, in batches, nothing else running. Then the hardware
path on batches of one chroma subsampling against the mixed batches of DATA (as they
come, and sorted by subsampling and size within each batch), each with nvJPEG's
default buffers and with buffers preallocated for 256 images of 512 x 512; and the
planar output (Y, Cb, Cr, no upsampling or colour conversion) the fused kernel reads.
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

from torchdali.decode import NvjpegDecoder, jpeg_info  # noqa: E402
from torchdali.decode._jpeg_header import entropy_data_ok, header_code  # noqa: E402


def pack(files):
    blobs = [open(f, "rb").read() for f in files]
    lengths = np.array([len(b) for b in blobs], dtype=np.int64)
    offsets = np.zeros(len(blobs), dtype=np.int64)
    offsets[1:] = np.cumsum(lengths)[:-1]
    host = torch.frombuffer(bytearray(b"".join(blobs)), dtype=torch.uint8)
    sizes = np.array([[jpeg_info(b).height, jpeg_info(b).width] for b in blobs], dtype=np.int64)
    hints = np.array([header_code(jpeg_info(b)) for b in blobs], dtype=np.int64)
    return blobs, host, offsets, lengths, sizes, hints


def run_decoder(dec, batches, stream, reps=3, use_hints=False, alongside=None, chroma=None):
    """images/s, median host ms per batch, decoder stats. ``alongside(k)`` is called
    before batch ``k`` is decoded (work the loader queues next to the decoder); with
    ``chroma`` (per batch, as ``decode_batch`` takes it) the output is planar."""
    host_ms, walls = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        n = 0
        for k, (blobs, pinned, offsets, lengths, sizes, hints) in enumerate(batches):
            if alongside is not None:
                alongside(k)
            ch = None if chroma is None else chroma[k]
            numel = sizes[:, 0] * sizes[:, 1] * 3 if ch is None else \
                sizes[:, 0] * sizes[:, 1] + 2 * ch[:, 0] * ch[:, 1]
            out_off = np.zeros(len(numel), dtype=np.int64)
            out_off[1:] = np.cumsum(numel)[:-1]
            with torch.cuda.stream(stream):
                out = torch.empty(int(numel.sum()), dtype=torch.uint8, device="cuda")
            h0 = time.perf_counter()
            status = dec.decode_batch(pinned, offsets, lengths, sizes, out, out_off, stream,
                                      hints=hints if use_hints else None, chroma=ch)
            host_ms.append(1e3 * (time.perf_counter() - h0))
            assert all(s == 0 for s in status), dec.last_errors
            n += len(sizes)
        stream.synchronize()
        walls.append(n / (time.perf_counter() - t0))
    return statistics.median(walls), statistics.median(host_ms), dict(dec.last_stats)


def planar_chroma_of(batches):
    """Per batch, the chroma plane sizes ``decode_batch(chroma=...)`` takes."""
    from torchdali.decode._jpeg_header import planar_chroma

    chroma = []
    for bt in batches:
        rows = []
        for b in bt[0]:
            pc = planar_chroma(jpeg_info(np.frombuffer(b, np.uint8)))
            if pc is None:
                raise SystemExit("planar rows need 4:2:0/4:2:2/4:4:0/4:4:4/grayscale JPEGs only")
            rows.append(pc[1:])
        chroma.append(np.array(rows, dtype=np.int64))
    return chroma


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data")
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--batch", type=int, default=256)
    args = p.parse_args()
    every = sorted(glob.glob(os.path.join(args.data, "*", "*.jpg")))
    # classes may differ in image size: draw across all of them
    pick = np.random.default_rng(0).permutation(len(every))
    files = [every[i] for i in pick[: args.batches * args.batch]]
    batches = []
    for k in range(0, len(files), args.batch):
        blobs, host, offsets, lengths, sizes, hints = pack(files[k:k + args.batch])
        batches.append((blobs, host.pin_memory(), offsets, lengths, sizes, hints))
    nbytes = batches[0][1].numel()
    stream = torch.cuda.Stream()
    rows = []

    # ceiling: every file once, in shuffled batches (what one loader epoch decodes)
    shuffled = [every[i] for i in pick]
    whole = []
    for k in range(0, len(shuffled), args.batch):
        blobs, host, offsets, lengths, sizes, hints = pack(shuffled[k:k + args.batch])
        whole.append((None, host.pin_memory(), offsets, lengths, sizes, hints))
    with NvjpegDecoder(0) as dec:
        run_decoder(dec, whole[:2], stream, reps=1, use_hints=True)
        ips, host_ms, _ = run_decoder(dec, whole, stream, use_hints=True)
    mean_kib = sum(w[1].numel() for w in whole) / len(shuffled) / 1024
    rows.append((f"nvJPEG hw, header codes, all {len(shuffled)} files", f"{ips:.0f} images/s",
                 f"host {host_ms:.2f} ms/batch, mean {mean_kib:.0f} KiB (the loader's ceiling)"))
    del whole

    # Does the mix of chroma subsamplings and sizes in a batch slow the hardware path?
    # nvJPEG documents that batches of varying sizes and subsamplings make it free and
    # reallocate device memory; the photographic set mixes 4:2:0, 4:4:4 and grayscale.
    kinds = {}
    for f in shuffled:
        with open(f, "rb") as fh:
            kinds.setdefault(jpeg_info(np.frombuffer(fh.read(), np.uint8)).subsampling, []).append(f)
    rows.append(("subsamplings in DATA", "", ", ".join(f"{k}: {len(v)}" for k, v in sorted(kinds.items()))))
    n_comp = args.batches * args.batch
    main_kind = max(kinds, key=lambda k: len(kinds[k]))
    variants = {
        f"only {main_kind}": kinds[main_kind][:n_comp],
        "mixed (as in DATA)": shuffled[:n_comp],
        "mixed, each batch sorted by subsampling and size": None,
    }
    for label, chosen in variants.items():
        if chosen is None:  # the mixed batches, each reordered
            chosen = []
            for k in range(0, n_comp, args.batch):
                part = shuffled[k:k + args.batch]
                infos = {f: jpeg_info(np.frombuffer(open(f, "rb").read(), np.uint8)) for f in part}
                chosen += sorted(part, key=lambda f: (infos[f].subsampling, infos[f].height, infos[f].width))
        packed = []
        for k in range(0, len(chosen), args.batch):
            blobs, host, offsets, lengths, sizes, hints = pack(chosen[k:k + args.batch])
            packed.append((None, host.pin_memory(), offsets, lengths, sizes, hints))
        for pre_label, pre in (("", (1, 1, 1)), (", preallocated 256 x 512 x 512", (args.batch, 512, 512))):
            with NvjpegDecoder(0, preallocate=pre) as dec:
                run_decoder(dec, packed[:2], stream, reps=1, use_hints=True)
                ips, host_ms, stats = run_decoder(dec, packed, stream, use_hints=True)
            rows.append((f"nvJPEG hw, {label}{pre_label}", f"{ips:.0f} images/s", f"host {host_ms:.2f} ms/batch {stats}"))

    # staging copy: shared-memory tensor -> pinned buffer
    src = batches[0][1].clone()
    dst = torch.empty_like(src).pin_memory()
    t = []
    for _ in range(20):
        t0 = time.perf_counter()
        dst.copy_(src)
        t.append(time.perf_counter() - t0)
    rows.append(("pinned staging copy", f"{nbytes / 2**20:.1f} MiB/batch", f"{1e3 * statistics.median(t):.2f} ms/batch"))

    # per-sample header work done in the workers
    b0 = batches[0][0]
    t0 = time.perf_counter()
    for b in b0:
        a = np.frombuffer(b, np.uint8)
        jpeg_info(a)
        entropy_data_ok(a)
    rows.append(("jpeg_info + entropy check (worker)", "", f"{1e6 * (time.perf_counter() - t0) / len(b0):.1f} us/image"))

    for name, kw, use_hints in (
            ("nvJPEG hw, per-image header checks", {}, False),
            ("nvJPEG hw, header codes (loader)", {}, True),
            ("nvJPEG hw, header codes, no fancy upsampling", {"fancy_upsampling": False}, True),
            ("nvJPEG hybrid only, header codes", {"backend": "hybrid"}, True)):
        with NvjpegDecoder(0, **kw) as dec:
            run_decoder(dec, batches[:2], stream, reps=1, use_hints=use_hints)  # warm-up
            ips, host_ms, stats = run_decoder(dec, batches, stream, use_hints=use_hints)
        rows.append((name, f"{ips:.0f} images/s", f"host {host_ms:.2f} ms/batch {stats}"))

    # Planar output: what the fused kernel's YCbCr source reads (TORCHDALI_PLANAR_DECODE=1).
    for name, kw in (("nvJPEG hw, planar Y/Cb/Cr, header codes", {}),
                     ("nvJPEG hybrid only, planar Y/Cb/Cr", {"backend": "hybrid"})):
        chroma = planar_chroma_of(batches)
        with NvjpegDecoder(0, **kw) as dec:
            run_decoder(dec, batches[:2], stream, reps=1, use_hints=True, chroma=chroma)
            ips, host_ms, stats = run_decoder(dec, batches, stream, use_hints=True, chroma=chroma)
        rows.append((name, f"{ips:.0f} images/s", f"host {host_ms:.2f} ms/batch {stats}"))

    # Does the decoder's speed depend on where the bytes live, on busy CPUs, or on the
    # scan-marker check the loader runs beside it (a copy of the batch to the GPU and
    # one kernel, on a side stream)?
    import subprocess

    from csrc_triton.scan_check import bad_scan_markers
    from torchdali._executor._ring import HostRing, ring_supported
    from torchdali.decode._jpeg_header import scan_offset

    variants = {"pinned (cudaHostAlloc)": batches,
                "pageable": [(bt[0], torch.empty_like(bt[1]).copy_(bt[1])) + bt[2:] for bt in batches]}
    ring = None
    if ring_supported():
        ring = HostRing(len(batches), max(bt[1].numel() for bt in batches) + 4096)
        ring.register()
        variants["staging ring (memfd, cudaHostRegister)"] = [
            (bt[0], ring.slot(k)[: bt[1].numel()].copy_(bt[1])) + bt[2:] for k, bt in enumerate(batches)]
    starts = [np.array([scan_offset(np.frombuffer(b, np.uint8)) for b in bt[0]]) for bt in batches]
    check_stream = torch.cuda.Stream()

    def scan_check(k, src):
        bt = src[k]
        with torch.cuda.stream(check_stream):
            bad_scan_markers(bt[1].to("cuda", non_blocking=True), bt[2], bt[3], starts[k])

    with NvjpegDecoder(0) as dec:
        for label, src in variants.items():
            run_decoder(dec, src[:2], stream, reps=1, use_hints=True)
            ips, host_ms, _ = run_decoder(dec, src, stream, use_hints=True)
            rows.append((f"nvJPEG hw, source {label}", f"{ips:.0f} images/s", f"host {host_ms:.2f} ms/batch"))
            if label.startswith("staging"):
                ips, host_ms, _ = run_decoder(dec, src, stream, use_hints=True,
                                              alongside=lambda k, src=src: scan_check(k, src))
                rows.append(("nvJPEG hw, ring source, scan check alongside", f"{ips:.0f} images/s",
                             f"host {host_ms:.2f} ms/batch"))
        n_busy = os.cpu_count() or 1
        for label, code in (("spinning", "while True: pass"),
                            ("copying memory", "import numpy as np\na = np.ones(1 << 26, np.uint8)\n"
                                               "b = np.empty_like(a)\nwhile True: np.copyto(b, a)")):
            procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n_busy)]
            try:
                time.sleep(1.0)
                ips, host_ms, _ = run_decoder(dec, batches, stream, use_hints=True)
            finally:
                for pr in procs:
                    pr.kill()
                for pr in procs:
                    pr.wait()
            rows.append((f"nvJPEG hw, {n_busy} processes {label}", f"{ips:.0f} images/s",
                         f"host {host_ms:.2f} ms/batch"))
    if ring is not None:
        ring.close()

    # two decoders in two threads on alternate batches: does the hardware path overlap?
    import threading

    with NvjpegDecoder(0) as d1, NvjpegDecoder(0) as d2:
        s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
        run_decoder(d1, batches[:1], s1, reps=1, use_hints=True)
        run_decoder(d2, batches[:1], s2, reps=1, use_hints=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        th = [threading.Thread(target=run_decoder, args=(d, batches[k::2], st, 3, True))
              for k, (d, st) in enumerate(((d1, s1), (d2, s2)))]
        for t in th:
            t.start()
        for t in th:
            t.join()
        torch.cuda.synchronize()
        rows.append(("nvJPEG hw, 2 decoders in 2 threads", f"{3 * len(files) / (time.perf_counter() - t0):.0f} images/s", ""))

    # ROI decode: only the RandomResizedCrop box of each image
    from torchdali import _rng
    from torchdali import transforms as T

    plan = T.compile_transforms(T.Compose([T.RandomResizedCrop(224)]))
    with NvjpegDecoder(0) as dec:
        roi_batches = []
        for k, bt in enumerate(batches):
            g = plan.geometry(bt[4], _rng.sample_keys(0, 0, np.arange(len(bt[4])) + k * args.batch))
            x0, y0 = np.floor(g.lo_x), np.floor(g.lo_y)
            rois = np.stack([x0, y0, np.ceil(g.hi_x) - x0, np.ceil(g.hi_y) - y0], 1).astype(np.int64)
            roi_batches.append(rois)
        for label, use in (("full frame", False), ("RRC box only (ROI)", True), ("RRC box, no header codes", None)):
            times, n = [], 0
            for rep in range(3):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for bt, rois in zip(batches, roi_batches):
                    blobs, pinned, offsets, lengths, sizes, hints = bt
                    hw_ = rois[:, 2:][:, ::-1] if use is not False else sizes
                    numel = hw_[:, 0] * hw_[:, 1] * 3
                    out_off = np.zeros(len(numel), dtype=np.int64)
                    out_off[1:] = np.cumsum(numel)[:-1]
                    out = torch.empty(int(numel.sum()), dtype=torch.uint8, device="cuda")
                    st = dec.decode_batch(pinned, offsets, lengths, sizes, out, out_off, stream,
                                          rois=rois if use is not False else None,
                                          hints=hints if use is not None else None)
                    assert all(v == 0 for v in st), dec.last_errors
                stream.synchronize()
                times.append(time.perf_counter() - t0)
            rows.append((f"nvJPEG hw, {label}", f"{len(files) / statistics.median(times):.0f} images/s",
                         str(dec.last_stats)))

    import torchvision
    from torchvision.io import decode_jpeg

    datas = [[torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in bl[0]] for bl in batches]
    decode_jpeg(datas[0][:8], device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    for d in datas:
        decode_jpeg(d, device="cuda")
        n += len(d)
    torch.cuda.synchronize()
    rows.append((f"torchvision {torchvision.__version__} decode_jpeg(list, cuda)", f"{n / (time.perf_counter() - t0):.0f} images/s", ""))

    print(f"{torch.cuda.get_device_name()}, batch {args.batch}, {len(files)} files, "
          f"mean {np.mean([len(b) for bl in batches for b in bl[0]]) / 1024:.0f} KiB")
    for r in rows:
        print(f"{r[0]:<42} {r[1]:>22}  {r[2]}")


if __name__ == "__main__":
    main()
