"""Synthetic ImageNet-shaped JPEG folders for the embedded demo, tests and benchmarks."""
from __future__ import annotations

import io
import os
from typing import Sequence

import numpy as np


def synthetic_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A natural-looking RGB image: smooth colour fields, edges and fine texture.

    Pure noise compresses badly and flat colour too well; the mix lands near
    ImageNet's ~100 KiB per 0.19 MP at JPEG quality 85-96.
    """
    gh, gw = max(2, height // 48), max(2, width // 48)
    coarse = rng.uniform(0, 255, size=(gh, gw, 3)).astype(np.float32)
    yy = np.linspace(0, gh - 1, height, dtype=np.float32)
    xx = np.linspace(0, gw - 1, width, dtype=np.float32)
    y0, x0 = np.floor(yy).astype(int), np.floor(xx).astype(int)
    y1, x1 = np.minimum(y0 + 1, gh - 1), np.minimum(x0 + 1, gw - 1)
    fy, fx = (yy - y0)[:, None, None], (xx - x0)[None, :, None]
    img = (coarse[y0][:, x0] * (1 - fy) * (1 - fx) + coarse[y0][:, x1] * (1 - fy) * fx
           + coarse[y1][:, x0] * fy * (1 - fx) + coarse[y1][:, x1] * fy * fx)
    # a few hard-edged shapes
    for _ in range(int(rng.integers(2, 6))):
        cy, cx = rng.integers(0, height), rng.integers(0, width)
        r = int(rng.integers(max(2, min(height, width) // 10), max(3, min(height, width) // 3)))
        ys, xs = np.ogrid[:height, :width]
        mask = (ys - cy) ** 2 + (xs - cx) ** 2 < r * r
        img[mask] = rng.uniform(0, 255, size=3)
    img += rng.normal(0, rng.uniform(10, 22), size=img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def _write_one(args: tuple) -> int:
    from PIL import Image

    root, i, num_classes, seed, size_range, quality = args
    rng = np.random.default_rng([seed, i])
    h, w = (int(v) for v in rng.integers(size_range[0], size_range[1], size=2))
    buf = io.BytesIO()
    Image.fromarray(synthetic_image(rng, h, w)).save(
        buf, format="JPEG", quality=int(rng.integers(quality[0], quality[1] + 1)), subsampling="4:2:0")
    path = os.path.join(root, f"class_{i % num_classes:03d}", f"img_{i:07d}.jpg")
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return len(buf.getvalue())


def make_image_folder(root: str | os.PathLike, num_images: int, num_classes: int = 10, seed: int = 0,
                      size_range: Sequence[int] = (300, 560), quality: Sequence[int] = (85, 96),
                      progress: bool = True, processes: int | None = None) -> str:
    """Write ``num_images`` JPEGs (4:2:0) into ``root/class_k/`` unless already there.

    Image ``i`` depends only on ``(seed, i)``, so the folder is the same whatever
    the number of processes. Returns ``root``. A marker file records the
    parameters so a folder made with other settings is rebuilt, not reused.
    """
    root = os.fspath(root)
    marker = os.path.join(root, ".torchdali-synthetic")
    spec = f"{num_images} {num_classes} {seed} {tuple(size_range)} {tuple(quality)}"
    if os.path.exists(marker) and open(marker).read() == spec:
        return root
    for c in range(num_classes):
        os.makedirs(os.path.join(root, f"class_{c:03d}"), exist_ok=True)
    jobs = [(root, i, num_classes, seed, tuple(size_range), tuple(quality)) for i in range(num_images)]
    processes = processes or min(os.cpu_count() or 1, 16)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=num_images, desc=f"making {num_images} JPEGs in {root}", unit="img")
    if processes > 1 and num_images >= 64:
        import multiprocessing as mp

        with mp.get_context("spawn" if mp.get_start_method(allow_none=True) == "spawn" else "fork").Pool(
                processes) as pool:
            for _ in pool.imap_unordered(_write_one, jobs, chunksize=16):
                if bar is not None:
                    bar.update(1)
    else:
        for job in jobs:
            _write_one(job)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    with open(marker, "w") as f:
        f.write(spec)
    return root
