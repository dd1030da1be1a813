"""Mutated JPEGs through nvJPEG on each backend, each chunk in a child process.

    python benchmarks/fuzz_nvjpeg.py [--count 2048] [--chunk 256] [--out DIR] [--backends hybrid,hardware]
                                     [--modes gated,raw] [--indices FIRST-LAST] [--timeout 60]

The corpus is the fuzz tests' (``tests/_fuzz.py``: bit flips and truncations in the
entropy-coded data, edited SOF/DHT/DQT/SOS fields, wrong component counts, removed
tables; fixed seed). Each backend ("hybrid", and "hardware" where the GPU has the
engines) decodes the corpus twice:

* ``gated``: only the files the loader's workers hand to nvJPEG (the header guard and
  ``_gpu_decodable_shape``: a parsable header nvJPEG supports, ending in EOI);
* ``raw``: every file whose header gives a size, as a direct caller of the decoder would.

Chunks run in a child process, so a file that poisons the CUDA context (an illegal
memory access inside nvJPEG) or crashes the process costs that child only; the parent
starts another and halves the chunk until it has the files that do it, and names them with their
mutation and whether it crashed or hung (``--timeout`` seconds per chunk). Per backend and mode: decoded,
reported (a status naming the failure), and crashing files, and the rate. Everything goes to ``OUT/fuzz_nvjpeg.json``.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def header_hw(blob: bytes) -> tuple[int, int] | None:
    import numpy as np

    from torchdali.decode._jpeg_header import jpeg_info

    try:
        info = jpeg_info(np.frombuffer(blob, np.uint8))
    except Exception:
        return None
    if info.height <= 0 or info.width <= 0 or info.height * info.width > (4 << 20):
        return None
    return info.height, info.width


def _server(backend: str, requests, replies) -> None:
    """Decode chunks from ``requests`` until told to stop; a chunk that poisons the
    context makes the check after it fail and ends the process."""
    import numpy as np
    import torch

    from torchdali.decode import NvjpegDecoder

    dec = NvjpegDecoder(backend="hybrid" if backend == "hybrid" else "auto")
    stream = torch.cuda.Stream(dec.device)
    replies.put("ready")
    while True:
        job = requests.get()
        if job is None:
            return
        blobs, sizes = job
        lengths = np.array([len(b) for b in blobs], dtype=np.int64)
        offsets = np.zeros(len(blobs), dtype=np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        data = torch.frombuffer(bytearray(b"".join(blobs)), dtype=torch.uint8).pin_memory()
        hw = np.array(sizes, dtype=np.int64).reshape(-1, 2)
        nbytes = hw[:, 0] * hw[:, 1] * 3
        out_off = np.zeros(len(blobs), dtype=np.int64)
        np.cumsum(nbytes[:-1], out=out_off[1:])
        out = torch.empty(max(int(nbytes.sum()), 1), dtype=torch.uint8, device=dec.device)
        status = dec.decode_batch(data, offsets, lengths, hw, out, out_off, stream)
        stream.synchronize()
        torch.ones(16, device=dec.device).sum().item()  # the context still works
        replies.put([int(s) for s in status])


class Server:
    """A child process that decodes chunks with one backend; restarted after it dies."""

    def __init__(self, backend: str, timeout: float = 60.0) -> None:
        self.backend, self.proc, self.timeout = backend, None, timeout
        self.ctx = mp.get_context("spawn")
        self.starts = 0
        self.failure = ""

    def _start(self) -> None:
        self.requests, self.replies = self.ctx.Queue(), self.ctx.Queue()
        self.proc = self.ctx.Process(target=_server, args=(self.backend, self.requests, self.replies), daemon=True)
        self.proc.start()
        self.starts += 1
        try:
            ready = self.replies.get(timeout=120)
        except Exception:
            ready = None
        if ready != "ready":
            raise RuntimeError(f"the {self.backend} decoder did not start (exit code {self.proc.exitcode})")

    def decode(self, blobs: list[bytes], sizes: list) -> list[int] | None:
        """Statuses of a chunk, or None when the child died on it or hung past ``timeout``
        seconds (then it is killed); ``failure`` says which."""
        import queue

        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.requests.put((blobs, sizes))
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return self.replies.get(timeout=1.0)
            except queue.Empty:
                if not self.proc.is_alive():
                    self.failure, self.proc = "crash", None
                    return None
                if time.monotonic() > deadline:
                    self.proc.kill()
                    self.proc.join()
                    self.failure, self.proc = "hang", None
                    return None

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.requests.put(None)
            self.proc.join(timeout=10)


def crashers(server: Server, items: list) -> list[tuple[int, str, str]]:
    """(index, mutation, "crash" or "hang") of the files of ``items`` whose decode kills or
    hangs the child, found by halving the set."""
    if server.decode([b for _, _, b, _ in items], [s for *_, s in items]) is not None:
        return []
    if len(items) == 1:
        return [(items[0][0], items[0][1], server.failure)]
    half = len(items) // 2
    return crashers(server, items[:half]) + crashers(server, items[half:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=2048)
    p.add_argument("--chunk", type=int, default=256)
    p.add_argument("--out", default=".")
    p.add_argument("--backends", default="hybrid,hardware", help="hybrid, hardware (where the GPU has the engines)")
    p.add_argument("--modes", default="gated,raw")
    p.add_argument("--indices", default="", help="only these corpus indices, e.g. 712-786")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a chunk may take before it counts as a hang")
    a = p.parse_args()
    import torch

    from tests._fuzz import FUZZ_SEED, fuzz_corpus, loader_gate
    from torchdali.decode import NvjpegDecoder, STATUS_OK

    corpus = fuzz_corpus(a.count, FUZZ_SEED)
    has_hw = NvjpegDecoder(backend="auto").has_hardware
    backends = [b for b in a.backends.split(",") if b == "hybrid" or b == "hardware" and has_hw]
    first, last = (int(v) for v in a.indices.split("-")) if a.indices else (0, len(corpus) - 1)
    result = {"device": torch.cuda.get_device_name(), "count": len(corpus), "seed": FUZZ_SEED,
              "command": " ".join(sys.argv), "runs": []}
    for backend in backends:
        server = Server(backend, a.timeout)
        for mode, size_of in (("gated", loader_gate), ("raw", header_hw)):
            if mode not in a.modes.split(","):
                continue
            items = [(i, what, b, size_of(b)) for i, (what, b) in enumerate(corpus) if first <= i <= last]
            sent = [it for it in items if it[3] is not None]
            ok = reported = 0
            crashed: list[tuple[int, str, str]] = []
            t0 = time.perf_counter()
            for start in range(0, len(sent), a.chunk):
                chunk = sent[start:start + a.chunk]
                status = server.decode([b for _, _, b, _ in chunk], [s for *_, s in chunk])
                if status is None:
                    bad = crashers(server, chunk)
                    crashed += bad
                    bad_ids = {i for i, _, _ in bad}
                    rest = [it for it in chunk if it[0] not in bad_ids]
                    status = server.decode([b for _, _, b, _ in rest], [s for *_, s in rest]) or []
                ok += sum(s == STATUS_OK for s in status)
                reported += sum(s != STATUS_OK for s in status)
            seconds = time.perf_counter() - t0
            row = {"backend": backend, "mode": mode, "sent": len(sent), "not_sent": len(items) - len(sent),
                   "decoded": ok, "reported": reported, "crashed": len(crashed),
                   "crashing_files": [{"index": i, "mutation": w, "failure": f} for i, w, f in crashed],
                   "seconds": seconds}
            result["runs"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "crashing_files"}),
                  "crashing:", row["crashing_files"][:20], flush=True)
        server.close()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "fuzz_nvjpeg.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
