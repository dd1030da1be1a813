"""Soak: many epochs at full speed with bad files mixed in; resources must stay flat.

    python benchmarks/soak.py PHOTO_DIR [--images 8192] [--bad-fraction 0.01] [--epochs 50]
                              [--batch-size 256] [--workers 16] [--out DIR] [--device cuda]

``PHOTO_DIR`` is a folder made by ``benchmarks/photo_folder.py``. The soak folder holds
hard links to ``--images`` of its files plus ``--bad-fraction`` bad files of five kinds
(truncated JPEG, corrupted entropy data, zero bytes, random bytes, and a header claiming
65500 x 65500 pixels). The training recipe (RandomResizedCrop 224, flip, normalize) runs with
``on_error="skip"``. After every epoch it records the host RSS and PSS of the process tree and the
PSS and USS of each of its processes (so that a growth is pinned to the main process or one worker), GPU
memory (torch's reserved bytes and the device's used bytes), open file descriptors of the
process tree and /dev/shm usage; the verdict compares the last ten epochs with epochs 3-12.

Then the interrupt check: a child process iterates the loader; after a few batches SIGINT
goes to its whole process group (what a terminal's Ctrl-C does). It must exit within 5 s and
leave no process of its group behind.

Everything goes to ``OUT/soak.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BAD_KINDS = ("truncated", "corrupt_scan", "empty", "random", "header_bomb")


def _bad_bytes(kind: str, good: bytes, rng: random.Random) -> bytes:
    if kind == "truncated":
        return good[: len(good) // 3]
    if kind == "corrupt_scan":
        b = bytearray(good)
        start = len(b) // 4
        for _ in range(64):
            b[rng.randrange(start, len(b) - 2)] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == "empty":
        return b""
    if kind == "random":
        return rng.randbytes(rng.randrange(100, 50_000))
    # header_bomb: the frame header (SOF) claims 65500 x 65500 pixels
    b = bytearray(good)
    sof = _sof_offset(good)
    b[sof + 5: sof + 9] = (65500).to_bytes(2, "big") * 2
    return bytes(b)


def _sof_offset(data: bytes) -> int:
    """Offset of the SOFn marker (0xFFC0-0xFFCF except C4, C8, CC)."""
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            raise ValueError("no frame header")
        marker = data[i + 1]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return i
        i += 2 + int.from_bytes(data[i + 2: i + 4], "big")
    raise ValueError("no frame header")


def make_soak_folder(src: str, dst: str, images: int, bad_fraction: float, seed: int = 0) -> dict:
    """Hard links to ``images`` files of ``src`` plus bad files; returns counts per kind."""
    rng = random.Random(seed)
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(src) for f in fs if f.endswith(".jpg"))[:images]
    if len(files) < images:
        raise SystemExit(f"{src} has {len(files)} JPEGs, fewer than --images {images}")
    counts = {k: 0 for k in BAD_KINDS}
    for k, path in enumerate(files):
        cls = os.path.basename(os.path.dirname(path))
        os.makedirs(os.path.join(dst, cls), exist_ok=True)
        target = os.path.join(dst, cls, os.path.basename(path))
        if not os.path.exists(target):
            try:
                os.link(path, target)
            except OSError:
                with open(path, "rb") as f, open(target, "wb") as g:
                    g.write(f.read())
    n_bad = max(1, round(images * bad_fraction))
    for k in range(n_bad):
        kind = BAD_KINDS[k % len(BAD_KINDS)]
        good_path = files[rng.randrange(len(files))]
        with open(good_path, "rb") as f:
            data = _bad_bytes(kind, f.read(), rng)
        cls = os.path.basename(os.path.dirname(good_path))
        with open(os.path.join(dst, cls, f"bad_{k:05d}_{kind}.jpg"), "wb") as f:
            f.write(data)
        counts[kind] += 1
    return {"good": len(files), "bad": n_bad, "bad_kinds": counts}


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def _memory(pid: int) -> tuple[int, int]:
    """``(PSS, USS)`` in bytes. PSS (proportional set size) counts each shared page once across the
    processes that map it; USS only the pages this process alone maps (private clean + dirty).

    The workers write into the loader's shared pinned ring, so each worker's RSS grows
    until it has touched every slot, and summed RSS counts the ring once per worker."""
    pss = uss = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
            elif line.startswith(("Private_Clean:", "Private_Dirty:")):
                uss += int(line.split()[1]) * 1024
    return pss, uss


def _name(pid: int, root: int) -> str:
    """A stable name for a process of the tree: ``main``, else its command name and pid (a persistent
    worker keeps its pid for the whole soak, so its rows line up from epoch to epoch)."""
    if pid == root:
        return "main"
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f"{f.read().strip()}-{pid}"
    except OSError:
        return f"pid-{pid}"


def resources(pid: int) -> dict:
    """Host RSS (MiB) and open fds of the process tree, /dev/shm use, GPU memory (MiB)."""
    import torch

    rss = pss = fds = 0
    procs = _tree(pid)
    per_process = {}
    for p in procs:
        try:
            with open(f"/proc/{p}/statm") as f:
                rss += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            p_pss, p_uss = _memory(p)
            pss += p_pss
            fds += len(os.listdir(f"/proc/{p}/fd"))
            per_process[_name(p, pid)] = {"pss_mib": p_pss / 2**20, "uss_mib": p_uss / 2**20}
        except OSError:
            pass
    shm_files = shm_bytes = 0
    for f in os.scandir("/dev/shm"):
        try:
            shm_files += 1
            shm_bytes += f.stat().st_blocks * 512
        except OSError:
            pass
    free, total = torch.cuda.mem_get_info() if torch.cuda.is_available() else (0, 0)
    return {"processes": len(procs), "rss_mib": rss / 2**20, "pss_mib": pss / 2**20, "fds": fds,
            "shm_files": shm_files,
            "shm_mib": shm_bytes / 2**20, "torch_reserved_mib": torch.cuda.memory_reserved() / 2**20,
            "torch_allocated_mib": torch.cuda.memory_allocated() / 2**20,
            "segments": torch.cuda.memory_stats().get("segment.all.current", 0) if torch.cuda.is_available() else 0,
            "device_used_mib": (total - free) / 2**20, "per_process": per_process}


def _loader(root: str, batch_size: int, workers: int, device: str, seed: int = 0):
    import torch

    import torchdali as td
    from torchdali import transforms as T
    from torchdali.bench import MEAN, STD

    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True),
                     T.Normalize(MEAN, STD)])
    ds = td.datasets.ImageFolder(root)
    return td.DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers, transforms=tf,
                         device=device, seed=seed, on_error="skip", drop_last=True, persistent_workers=True)


def soak(root: str, epochs: int, batch_size: int, workers: int, device: str) -> dict:
    import logging

    import torch

    logging.getLogger("torchdali").setLevel(logging.ERROR)  # one line per skipped file is noise here
    loader = _loader(root, batch_size, workers, device)
    rows = []
    for epoch in range(epochs):
        t0 = time.perf_counter()
        n = 0
        for images, _ in loader:
            n += images.shape[0]
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        row = {"epoch": epoch, "images": n, "images_per_s": n / wall,
               "skipped": loader.stats().last.skipped, **resources(os.getpid())}
        rows.append(row)
        print(" ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
                       if k != "per_process"), flush=True)
    blocks = torch_blocks() if torch.cuda.is_available() else None
    loader.close()
    return {"epochs": rows, "verdict": verdict(rows), "torch_blocks": blocks}


def _where(frames: list[dict]) -> str:
    """The innermost frames of an allocation's Python stack that are torchdali's or the benchmark's."""
    ours = [f"{os.path.basename(f['filename'])}:{f['line']} {f['name']}" for f in frames
            if "torchdali" in f["filename"] or "benchmarks" in f["filename"]]
    return " < ".join(ours[:3]) or "elsewhere"


def torch_blocks() -> dict:
    """What torch's caching allocator holds at the end: per stream, how many blocks of
    each size (MiB) are in use and how many are cached, and the segments' sizes. With the
    allocator's history on (``--history``), also where each block of 64 MiB or more that is
    still in use was allocated, and where every segment of the run was allocated."""
    import torch

    snapshot = torch.cuda.memory._snapshot()
    out: dict[str, dict] = {}
    for seg in snapshot["segments"]:
        entry = out.setdefault(str(seg.get("stream", 0)), {"segments_mib": [], "active": {}, "cached": {}})
        entry["segments_mib"].append(round(seg["total_size"] / 2**20, 1))
        for b in seg["blocks"]:
            kind = "active" if b["state"].startswith("active") else "cached"
            size = f"{b['size'] / 2**20:.1f}"
            entry[kind][size] = entry[kind].get(size, 0) + 1
            if kind == "active" and b["size"] >= 64 << 20 and b.get("frames"):
                big = entry.setdefault("large_active", {})
                key = f"{size} {b['state']} {_where(b['frames'])}"
                big[key] = big.get(key, 0) + 1
    traces = [e for dev in snapshot.get("device_traces", []) for e in dev]
    if traces:
        segments: dict[str, int] = {}
        for e in traces:
            if e["action"] == "segment_alloc":
                key = f"{e['size'] / 2**20:.1f} MiB stream {e['stream']} {_where(e.get('frames', []))}"
                segments[key] = segments.get(key, 0) + 1
        out["segment_allocs"] = segments
        out["segment_alloc_order"] = [round(e["size"] / 2**20, 1) for e in traces if e["action"] == "segment_alloc"]
    return out


def verdict(rows: list[dict]) -> dict:
    """Growth of each resource: mean of the last ten epochs minus mean of epochs 3-12."""
    if len(rows) < 15:
        return {"note": "fewer than 15 epochs: no verdict"}
    early, late = rows[2:12], rows[-10:]
    limits = {"pss_mib": 256.0, "fds": 4, "shm_files": 2, "shm_mib": 64.0, "torch_reserved_mib": 64.0,
              "device_used_mib": 128.0, "processes": 0}
    out = {}
    for key, limit in limits.items():
        growth = sum(r[key] for r in late) / 10 - sum(r[key] for r in early) / 10
        out[key] = {"early": sum(r[key] for r in early) / 10, "late": sum(r[key] for r in late) / 10,
                    "growth": growth, "limit": limit, "flat": growth <= limit}
    out["per_process"] = per_process_verdict(rows)
    out["flat"] = all(v["flat"] for v in out.values() if isinstance(v, dict) and "flat" in v) \
        and all(v["flat"] for v in out["per_process"].values())
    return out


#: Growth of one process's PSS or USS (MiB, mean of the last ten epochs minus epochs 3-12) still called flat.
PROCESS_LIMIT_MIB = 32.0


def _slope(values: list[float]) -> float:
    """Least-squares MiB per epoch."""
    n = len(values)
    mx, my = (n - 1) / 2, sum(values) / n
    den = sum((i - mx) ** 2 for i in range(n))
    return sum((i - mx) * (v - my) for i, v in enumerate(values)) / den if den else 0.0


def per_process_verdict(rows: list[dict]) -> dict:
    """Each process that lived through the whole soak (the main process and the persistent workers):
    PSS and USS growth and slope per epoch after the first two epochs, so growth of the tree is pinned to
    a process. A process missing from some epochs (a worker restarted) is reported, and not flat."""
    names = set().union(*(r["per_process"] for r in rows))
    out = {}
    for name in sorted(names):
        series = [r["per_process"].get(name) for r in rows]
        if any(v is None for v in series):
            out[name] = {"epochs_seen": sum(v is not None for v in series), "flat": False}
            continue
        entry = {}
        for key in ("pss_mib", "uss_mib"):
            values = [v[key] for v in series[2:]]
            growth = sum(v[key] for v in series[-10:]) / 10 - sum(v[key] for v in series[2:12]) / 10
            entry[key] = {"first": series[2][key], "last": series[-1][key], "growth": growth,
                          "per_epoch": _slope(values)}
        entry["flat"] = all(entry[k]["growth"] <= PROCESS_LIMIT_MIB for k in ("pss_mib", "uss_mib"))
        out[name] = entry
    return out


def _interrupt_child(root: str, batch_size: int, workers: int, device: str) -> None:
    loader = _loader(root, batch_size, workers, device, seed=1)
    batches = 0
    for _ in range(1000):
        for _ in loader:
            batches += 1
            if batches == 5:
                print("RUNNING", flush=True)


def interrupt(root: str, batch_size: int, workers: int, device: str) -> dict:
    """SIGINT to the process group of a loader mid-epoch: exit time and processes left."""
    child = subprocess.Popen([sys.executable, __file__, root, "--interrupt-child", "--batch-size", str(batch_size),
                              "--workers", str(workers), "--device", device],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, text=True)
    pgid = child.pid
    line = child.stdout.readline()
    if "RUNNING" not in line:
        child.kill()
        return {"ok": False, "error": f"child did not start: {line!r} {child.stderr.read()[-2000:]}"}
    workers_seen = len(_tree(child.pid)) - 1
    t0 = time.perf_counter()
    os.killpg(pgid, signal.SIGINT)
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
    exit_s = time.perf_counter() - t0
    time.sleep(0.5)
    try:
        os.killpg(pgid, 0)
        left = sum(1 for e in os.listdir("/proc") if e.isdigit() and _pgid(int(e)) == pgid)
    except ProcessLookupError:
        left = 0
    tail = child.stderr.read()[-600:]
    return {"ok": exit_s < 5 and left == 0, "exit_s": exit_s, "returncode": child.returncode,
            "processes_before": workers_seen + 1, "processes_left": left, "stderr_tail": tail}


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("photos")
    p.add_argument("--images", type=int, default=8192)
    p.add_argument("--bad-fraction", type=float, default=0.01)
    p.add_argument("--epochs", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--out", default=".")
    p.add_argument("--device", default="cuda", help="cpu: a dry run of the script on the CPU path")
    p.add_argument("--history", type=int, default=0, metavar="N",
                   help="record torch's allocator history (the last N events, with Python stacks) and "
                        "report where segments and the large blocks still in use were allocated")
    p.add_argument("--interrupt-child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.interrupt_child:
        _interrupt_child(a.photos, a.batch_size, a.workers, a.device)
        return
    import torch

    from torchdali.bench import environment

    root = os.path.join("/tmp", f"torchdali_soak-{a.images}-{a.bad_fraction}")
    folder = make_soak_folder(a.photos, root, a.images, a.bad_fraction)
    print(f"soak folder {root}: {folder}", flush=True)
    result = {"environment": environment(torch.device(a.device), sys.argv), "command": " ".join(sys.argv), "folder": folder,
              "batch_size": a.batch_size, "workers": a.workers}
    if torch.cuda.is_available():
        torch.cuda.init()
        if a.history:
            torch.cuda.memory._record_memory_history(max_entries=a.history, stacks="python")
    result.update(soak(root, a.epochs, a.batch_size, a.workers, a.device))
    print("verdict:", json.dumps(result["verdict"]), flush=True)
    print("torch blocks:", json.dumps(result.get("torch_blocks")), flush=True)
    result["interrupt"] = interrupt(root, a.batch_size, a.workers, a.device)
    print("interrupt:", json.dumps(result["interrupt"]), flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "soak.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
