"""Do two source trees of torchdali produce bitwise the same batches? One run, one machine.

    python benchmarks/same_output.py DATA_ROOT OLD_TREE NEW_TREE [--batches 8] [--device cuda]

Each tree is imported in a subprocess of its own (``PYTHONPATH=TREE``) and runs
the same recipes with the same seed on the same ImageFolder; the sha256 of every
batch is compared. Only the public API is used, so any release can be compared
with any other.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
RECIPES = ("train_fp32", "val_uint8", "train_bf16_channels_last")


def _emit(root: str, batches: int, device: str) -> dict:
    import hashlib

    import torch

    import torchdali as td
    from torchdali import transforms as T

    def recipe(name: str):
        if name == "val_uint8":
            return [T.Resize(256), T.CenterCrop(224)], torch.contiguous_format
        dtype = torch.bfloat16 if "bf16" in name else torch.float32
        fmt = torch.channels_last if "channels_last" in name else torch.contiguous_format
        return [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToDtype(dtype, scale=True),
                T.Normalize(MEAN, STD)], fmt

    out = {"torchdali": os.path.dirname(td.__file__)}
    ds = td.datasets.ImageFolder(root)
    for name in RECIPES:
        tf, fmt = recipe(name)
        loader = td.DataLoader(ds, batch_size=256, shuffle=True, num_workers=8, seed=2026, device=device,
                               transforms=tf, memory_format=fmt, generator=torch.Generator().manual_seed(3))
        digests = []
        for k, (images, targets) in enumerate(loader):
            if k == batches:
                break
            raw = images.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            digests.append(hashlib.sha256(raw).hexdigest()[:16])
        loader.close()
        out[name] = digests
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("trees", nargs="*")
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--device", default="cuda")
    p.add_argument("--emit", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.emit:
        print(json.dumps(_emit(a.data, a.batches, a.device)))
        return
    if len(a.trees) != 2:
        p.error("give two source trees")
    runs = []
    for tree in a.trees:
        env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
        r = subprocess.run([sys.executable, os.path.abspath(__file__), a.data, "--emit", "--batches", str(a.batches),
                            "--device", a.device], env=env, cwd=os.path.abspath(tree), capture_output=True,
                           text=True, check=False)
        if r.returncode != 0:
            sys.exit(f"{tree}: failed\n{r.stderr[-3000:]}")
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    same = True
    for name in RECIPES:
        a_d, b_d = runs[0][name], runs[1][name]
        diff = [k for k, (x, y) in enumerate(zip(a_d, b_d)) if x != y]
        ok = not diff and len(a_d) == len(b_d)
        same &= ok
        print(f"{name:<26} {len(a_d)} batches: {'identical' if ok else f'DIFFERENT at batches {diff}'}")
    print(f"{runs[0]['torchdali']} vs {runs[1]['torchdali']}: {'bitwise identical' if same else 'DIFFERENT'}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
