"""An ImageFolder of JPEGs re-encoded from real photographs, at ImageNet's statistics.

    python benchmarks/photo_folder.py OUT_DIR [--num-images 16384] [--classes 100] [--seed 0]

Generated patterns decode about 25% faster than photographs and hide gaps, so the
throughput benchmarks run on this instead. Sources are the photographs that ship
inside scikit-image (``skimage/data``: astronaut, chelsea, coffee, rocket,
motorcycles, retina, Hubble deep field, IHC; camera, coins, moon, textures for
grayscale). Each file is a random crop (area 60-100%, aspect 3:4 to 4:3),
resized with Lanczos so its short side is 333-500 pixels (ImageNet's 0.19 MP),
mirrored at random, with sensor-like noise, and encoded at quality 85-96: 90%
4:2:0, 7% 4:4:4, 3% grayscale. Files average about 80 KiB, below ImageNet's
~110 KiB: most sources are smaller than the output and get upscaled, which
smooths them. The folder's statistics are printed and written to ``stats.json``;
an existing folder made with the same arguments is reused.
"""
from __future__ import annotations

import argparse
import io
import json
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np

COLOUR = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png",
          "motorcycle_right.png", "retina.jpg", "hubble_deep_field.jpg", "ihc.png")
GRAY = ("camera.png", "coins.png", "moon.png", "grass.png", "gravel.png", "brick.png")

_SOURCES: dict[str, np.ndarray] = {}


def _source(name: str) -> np.ndarray:
    if name not in _SOURCES:
        import skimage
        from PIL import Image

        path = os.path.join(os.path.dirname(skimage.__file__), "data", name)
        img = Image.open(path)
        _SOURCES[name] = np.asarray(img.convert("L" if name in GRAY else "RGB"))
    return _SOURCES[name]


def make_one(args: tuple[str, int, int, int]) -> int:
    """Write image ``i`` of the folder; returns its size in bytes."""
    from PIL import Image

    root, i, classes, seed = args
    rng = np.random.default_rng([seed, i])
    kind = rng.uniform()
    gray = kind < 0.03
    src = _source(GRAY[rng.integers(len(GRAY))] if gray else COLOUR[rng.integers(len(COLOUR))])
    H, W = src.shape[:2]
    for _ in range(20):
        area = H * W * rng.uniform(0.6, 1.0)
        aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        h, w = int(round(np.sqrt(area / aspect))), int(round(np.sqrt(area * aspect)))
        if 0 < h <= H and 0 < w <= W:
            break
    else:
        h, w = H, W
    top, left = rng.integers(0, H - h + 1), rng.integers(0, W - w + 1)
    crop = Image.fromarray(src[top: top + h, left: left + w])
    short = rng.integers(333, 501)
    scale = short / min(h, w)
    crop = crop.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.LANCZOS)
    pixels = np.asarray(crop).astype(np.float32)
    if rng.uniform() < 0.5:
        pixels = pixels[:, ::-1]
    pixels += rng.normal(0, rng.uniform(4.0, 8.0), size=pixels.shape).astype(np.float32)
    out = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    buf = io.BytesIO()
    subsampling = 2 if kind >= 0.10 else 0  # 4:2:0, else 4:4:4 (grayscale has none)
    out.save(buf, format="JPEG", quality=int(rng.integers(85, 97)), subsampling=subsampling)
    folder = os.path.join(root, f"n{i % classes:05d}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{i:06d}.jpg"), "wb") as f:
        f.write(buf.getvalue())
    return len(buf.getvalue())


def make_photo_folder(root: str, num_images: int, classes: int = 100, seed: int = 0, progress: bool = True) -> dict:
    """Create (or reuse) the folder; returns its statistics."""
    stats_path = os.path.join(root, "stats.json")
    if os.path.exists(stats_path):
        with open(stats_path) as f:
            stats = json.load(f)
        if stats.get("num_images") == num_images and stats.get("seed") == seed:
            return stats
    os.makedirs(root, exist_ok=True)
    jobs = [(root, i, classes, seed) for i in range(num_images)]
    with ProcessPoolExecutor(os.cpu_count()) as pool:
        it = pool.map(make_one, jobs, chunksize=64)
        if progress:
            from tqdm import tqdm

            it = tqdm(it, total=num_images, desc="photographs", unit="img")
        sizes = np.fromiter(it, dtype=np.int64, count=num_images)
    stats = {"num_images": num_images, "seed": seed, "classes": classes,
             "mean_KiB": float(sizes.mean() / 1024), "median_KiB": float(np.median(sizes) / 1024),
             "sources": {"colour": COLOUR, "gray": GRAY}}
    with open(stats_path, "w") as f:
        json.dump(stats, f, indent=1)
    return stats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--num-images", type=int, default=16384)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args()
    stats = make_photo_folder(a.out, a.num_images, a.classes, a.seed, progress=not a.quiet)
    print(f"{a.out}: {stats['num_images']} JPEGs, mean {stats['mean_KiB']:.1f} KiB, median {stats['median_KiB']:.1f} KiB")


if __name__ == "__main__":
    main()
