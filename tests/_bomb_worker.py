"""Run by tests/test_hostile.py in a subprocess under an address-space limit, so a
decompression bomb that gets past the header check fails there instead of
taking the machine down.

usage: python tests/_bomb_worker.py ROOT LIMIT_GIB ON_ERROR:MAX_PIXELS...
ON_ERROR: raise | skip | callable; MAX_PIXELS: an int, "default" or "none".
Prints one JSON line per run, saying what happened.
"""
from __future__ import annotations

import json
import os
import resource
import sys


def run(root: str, on_error: str, max_pixels: str, calls_file: str) -> dict:
    import torchdali as td
    from torchdali import transforms as T

    def policy(index, path, exc):  # runs in the workers: report through a file
        with open(calls_file, "a") as f:
            f.write(json.dumps({"index": index, "path": path, "type": type(exc).__name__, "message": str(exc)}) + "\n")
        return None  # skip: a spare sample takes its place

    kw = {}
    if max_pixels != "default":
        kw["max_image_pixels"] = None if max_pixels == "none" else int(max_pixels)
    loader = td.DataLoader(td.datasets.ImageFolder(root), batch_size=4, num_workers=2, device="cpu", seed=0,
                           transforms=T.Compose([T.Resize((16, 16))]),
                           on_error=policy if on_error == "callable" else on_error, **kw)
    out = {"batches": [], "error": None, "calls": []}
    try:
        for images, _ in loader:
            out["batches"].append(list(images.shape))
    except Exception as e:
        out["error"] = {"type": type(e).__name__, "message": str(e)}
    if os.path.exists(calls_file):
        with open(calls_file) as f:
            out["calls"] = [json.loads(line) for line in f]
    out["skipped"] = loader.stats().last.skipped if loader.stats().epochs else None
    loader.close()
    return out


def main() -> None:
    root, limit_gib, runs = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    limit = int(limit_gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # inherited by the DataLoader workers
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for k, spec in enumerate(runs):
        on_error, max_pixels = spec.split(":")
        calls_file = os.path.join(os.path.dirname(os.path.abspath(root)), f"policy_calls_{k}.jsonl")
        print(json.dumps({"run": spec, **run(root, on_error, max_pixels, calls_file)}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
