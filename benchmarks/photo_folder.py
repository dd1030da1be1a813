"""An ImageFolder of JPEGs re-encoded from real photographs, at ImageNet's statistics.

    python benchmarks/photo_folder.py OUT_DIR [--num-images 16384] [--classes 100] [--seed 0]
    python benchmarks/photo_folder.py OUT_DIR --coco [--num-images 4096] [--seed 0]
    python benchmarks/photo_folder.py OUT_DIR --videos 1000 [--seconds 10] [--height 720 --width 1280]

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

``--coco`` (``coco_folder``) makes a COCO-shaped detection set from the same sources
and encoder instead: longer side 640, aspect 3:5 to 5:3 (0.32 MP), quality 90-98 (mean
about 160 KiB, COCO's), and ``annotations/instances_train2017.json`` with 1-20 objects
per image (mean 7), each a box, a polygon inside it, its area and one of COCO's 80
category ids.

``--videos N`` (``video_folder``) makes N H.264 videos instead (720p, 30 fps, 10 s by default):
a window panning across a photograph, with sensor noise, a keyframe every second
and 2 B-frames, in ``class*/`` folders (PyAV's libx264).
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


def encode_photo(rng: np.random.Generator, side: tuple[int, int], *, longer: bool = False,
                 aspect: tuple[float, float] = (3 / 4, 4 / 3),
                 quality: tuple[int, int] = (85, 97)) -> tuple[bytes, int, int]:
    """One JPEG from a photograph, drawn from ``rng``: a random crop of a source (area 60-100%,
    aspect log-uniform in ``aspect``), its shorter side (``longer``: its longer side) resized to
    a size drawn from ``[side[0], side[1])``, mirrored at random, with noise, encoded at a quality
    drawn from ``[quality[0], quality[1])``. Returns ``(jpeg bytes, height, width)``."""
    from PIL import Image

    kind = rng.uniform()
    gray = kind < 0.03
    src = _source(GRAY[rng.integers(len(GRAY))] if gray else COLOUR[rng.integers(len(COLOUR))])
    H, W = src.shape[:2]
    for _ in range(20):
        area = H * W * rng.uniform(0.6, 1.0)
        ratio = np.exp(rng.uniform(np.log(aspect[0]), np.log(aspect[1])))
        h, w = int(round(np.sqrt(area / ratio))), int(round(np.sqrt(area * ratio)))
        if 0 < h <= H and 0 < w <= W:
            break
    else:
        h, w = H, W
    top, left = rng.integers(0, H - h + 1), rng.integers(0, W - w + 1)
    crop = Image.fromarray(src[top: top + h, left: left + w])
    size = rng.integers(side[0], side[1])
    scale = size / (max(h, w) if longer else min(h, w))
    crop = crop.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.LANCZOS)
    pixels = np.asarray(crop).astype(np.float32)
    if rng.uniform() < 0.5:
        pixels = pixels[:, ::-1]
    pixels += rng.normal(0, rng.uniform(4.0, 8.0), size=pixels.shape).astype(np.float32)
    out = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    buf = io.BytesIO()
    subsampling = 2 if kind >= 0.10 else 0  # 4:2:0, else 4:4:4 (grayscale has none)
    out.save(buf, format="JPEG", quality=int(rng.integers(quality[0], quality[1])), subsampling=subsampling)
    return buf.getvalue(), out.height, out.width


def make_one(args: tuple[str, int, int, int]) -> int:
    """Write image ``i`` of the folder; returns its size in bytes."""
    root, i, classes, seed = args
    data, _, _ = encode_photo(np.random.default_rng([seed, i]), (333, 501))
    folder = os.path.join(root, f"n{i % classes:05d}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{i:06d}.jpg"), "wb") as f:
        f.write(data)
    return len(data)


def _pool_map(fn, jobs: list, desc: str, progress: bool, chunksize: int = 64, unit: str = "img") -> list:
    with ProcessPoolExecutor(os.cpu_count()) as pool:
        it = pool.map(fn, jobs, chunksize=chunksize)
        if progress:
            from tqdm import tqdm

            it = tqdm(it, total=len(jobs), desc=desc, unit=unit)
        return list(it)


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
    sizes = np.array(_pool_map(make_one, jobs, "photographs", progress), dtype=np.int64)
    stats = {"num_images": num_images, "seed": seed, "classes": classes,
             "mean_KiB": float(sizes.mean() / 1024), "median_KiB": float(np.median(sizes) / 1024),
             "sources": {"colour": COLOUR, "gray": GRAY}}
    with open(stats_path, "w") as f:
        json.dump(stats, f, indent=1)
    return stats


# COCO's 80 category ids (1..90 with ten unused)
COCO_CATEGORIES = tuple(c for c in range(1, 91) if c not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83))


def _coco_objects(rng: np.random.Generator, image_id: int, height: int, width: int) -> list[dict]:
    """1-20 annotations (mean 7): a box of 0.2-40% of the image (log-uniform; aspect 1:3 to 3:1)
    at a uniform place, holding a star-shaped polygon of 6-16 vertices whose tight box is ``bbox``."""
    anns = []
    for k in range(int(np.clip(rng.poisson(6.0) + 1, 1, 20))):
        area = height * width * np.exp(rng.uniform(np.log(0.002), np.log(0.4)))
        ratio = np.exp(rng.uniform(np.log(1 / 3), np.log(3)))
        bw, bh = min(np.sqrt(area * ratio), width - 1.0), min(np.sqrt(area / ratio), height - 1.0)
        x0, y0 = rng.uniform(0, width - bw), rng.uniform(0, height - bh)
        n = int(rng.integers(6, 17))
        angle, radius = np.sort(rng.uniform(0, 2 * np.pi, n)), rng.uniform(0.6, 1.0, n)
        xs = np.round(x0 + bw / 2 * (1 + radius * np.cos(angle)), 2)
        ys = np.round(y0 + bh / 2 * (1 + radius * np.sin(angle)), 2)
        left, top = float(xs.min()), float(ys.min())
        anns.append({
            "id": image_id * 100 + k, "image_id": image_id, "iscrowd": 0,
            "category_id": COCO_CATEGORIES[int(rng.integers(len(COCO_CATEGORIES)))],
            "bbox": [left, top, round(float(xs.max()) - left, 2), round(float(ys.max()) - top, 2)],
            "segmentation": [[float(v) for xy in zip(xs, ys) for v in xy]],
            "area": round(float(0.5 * abs(np.dot(xs, np.roll(ys, 1)) - np.dot(ys, np.roll(xs, 1)))), 2)})
    return anns


def make_coco_one(args: tuple[str, int, int]) -> tuple[dict, list[dict], int]:
    """Write image ``i`` of the COCO-shaped set; returns its image entry, annotations and size in bytes."""
    root, i, seed = args
    # COCO's shape: longer side 640, aspect 3:5 to 5:3 (0.32 MP on average); quality 90-98 gives COCO's ~160 KiB
    data, height, width = encode_photo(np.random.default_rng([seed, i]), (640, 641), longer=True,
                                       aspect=(3 / 5, 5 / 3), quality=(90, 99))
    image_id = i + 1
    name = f"{image_id:012d}.jpg"
    with open(os.path.join(root, "train2017", name), "wb") as f:
        f.write(data)
    anns = _coco_objects(np.random.default_rng([seed, i, 1]), image_id, height, width)
    return {"id": image_id, "file_name": name, "height": height, "width": width}, anns, len(data)


def coco_folder(root: str, num_images: int = 4096, seed: int = 0, progress: bool = True) -> dict:
    """Create (or reuse) a COCO-shaped set at ``root``: ``train2017/*.jpg`` and
    ``annotations/instances_train2017.json`` (boxes, polygons, areas, 80 categories).
    Returns its statistics, with ``images`` and ``annotations`` (the two paths)."""
    stats_path = os.path.join(root, "stats.json")
    paths = {"images": os.path.join(root, "train2017"),
             "annotations": os.path.join(root, "annotations", "instances_train2017.json")}
    if os.path.exists(stats_path):
        with open(stats_path) as f:
            stats = json.load(f)
        if stats.get("kind") == "coco" and stats.get("num_images") == num_images and stats.get("seed") == seed:
            return dict(stats, **paths)
    os.makedirs(os.path.join(root, "train2017"), exist_ok=True)
    os.makedirs(os.path.join(root, "annotations"), exist_ok=True)
    made = _pool_map(make_coco_one, [(root, i, seed) for i in range(num_images)], "photographs (COCO)", progress)
    images = [m[0] for m in made]
    anns = [a for m in made for a in m[1]]
    with open(paths["annotations"], "w") as f:
        json.dump({"info": {"description": "photographs re-encoded at COCO's statistics (benchmarks/photo_folder.py)"},
                   "licenses": [], "images": images, "annotations": anns,
                   "categories": [{"id": c, "name": f"category{c}", "supercategory": "none"} for c in COCO_CATEGORIES]},
                  f)
    sizes = np.array([m[2] for m in made], dtype=np.float64)
    stats = {"kind": "coco", "num_images": num_images, "seed": seed,
             "mean_KiB": float(sizes.mean() / 1024), "median_KiB": float(np.median(sizes) / 1024),
             "mean_MP": float(np.mean([im["height"] * im["width"] for im in images]) / 1e6),
             "boxes_per_image": len(anns) / max(num_images, 1)}
    with open(stats_path, "w") as f:
        json.dump(stats, f, indent=1)
    return dict(stats, **paths)


def make_video_one(args: tuple[str, int, int, int, float, int, tuple[int, int], int]) -> int:
    """One H.264 video panning across a photograph; returns its size in bytes."""
    import av

    root, i, classes, seed, seconds, fps, (height, width), gop = args
    rng = np.random.default_rng([seed, i, 7])
    src = _source(COLOUR[int(rng.integers(len(COLOUR)))])
    # the photograph at 1.6 times the frame's cover size, so the window can travel
    from PIL import Image

    scale = 1.6 * max(height / src.shape[0], width / src.shape[1])
    big = np.asarray(Image.fromarray(src).resize((int(src.shape[1] * scale) + 1, int(src.shape[0] * scale) + 1),
                                                 Image.LANCZOS))
    if rng.random() < 0.5:
        big = big[:, ::-1]
    noise = rng.normal(0, 3.0, size=(4, height, width, 3)).round().astype(np.int16)  # sensor noise, cycled
    frames = int(round(seconds * fps))
    (y0, x0), (y1, x1) = (rng.uniform(0, 1, 2) for _ in range(2))
    path = os.path.join(root, f"class{i % classes:03d}", f"{i:06d}.mp4")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with av.open(path, "w") as out:
        stream = out.add_stream("libx264", rate=fps, options={
            "preset": "veryfast", "crf": "23", "g": str(gop), "bf": "2",
            "x264-params": f"keyint={gop}:min-keyint={gop}:log-level=error"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for f in range(frames):
            t = f / max(frames - 1, 1)  # the frame-sized window travels across the photograph
            top = int((y0 + (y1 - y0) * t) * (big.shape[0] - height))
            left = int((x0 + (x1 - x0) * t) * (big.shape[1] - width))
            rgb = big[top:top + height, left:left + width].astype(np.int16) + noise[f % 4]
            frame = av.VideoFrame.from_ndarray(np.clip(rgb, 0, 255).astype(np.uint8), format="rgb24")
            frame.pts = f
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return os.path.getsize(path)


def video_folder(root: str, num_videos: int = 1000, seconds: float = 10.0, fps: int = 30,
                 size: tuple[int, int] = (720, 1280), classes: int = 10, seed: int = 0,
                 progress: bool = True) -> dict:
    """A folder of ``num_videos`` H.264 videos (``class*/NNNNNN.mp4``, yuv420p, 2 B-frames, a keyframe
    every second) of a window panning across a photograph, with sensor noise; made once
    (reused when ``stats.json`` matches), in parallel. Needs PyAV."""
    stats_path = os.path.join(root, "stats.json")
    want = {"num_videos": num_videos, "seconds": seconds, "fps": fps, "size": list(size), "seed": seed,
            "classes": classes}
    if os.path.exists(stats_path):
        with open(stats_path) as f:
            stats = json.load(f)
        if all(stats.get(k) == v for k, v in want.items()):
            return stats
    os.makedirs(root, exist_ok=True)
    jobs = [(root, i, classes, seed, seconds, fps, tuple(size), fps) for i in range(num_videos)]
    sizes = np.array(_pool_map(make_video_one, jobs, "videos", progress, chunksize=1, unit="video"), dtype=np.int64)
    stats = dict(want, mean_MiB=float(sizes.mean() / 2 ** 20), codec="h264")
    with open(stats_path, "w") as f:
        json.dump(stats, f, indent=1)
    return stats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--num-images", type=int, default=None, help="default 16384 (ImageFolder), 4096 (--coco)")
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--coco", action="store_true", help="a COCO-shaped detection set instead (coco_folder)")
    p.add_argument("--videos", type=int, default=0, help="N H.264 videos instead (video_folder)")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--height", type=int, default=720)
    p.add_argument("--width", type=int, default=1280)
    a = p.parse_args()
    if a.videos:
        stats = video_folder(a.out, a.videos, a.seconds, size=(a.height, a.width), classes=min(a.classes, a.videos),
                             seed=a.seed, progress=not a.quiet)
        print(f"{a.out}: {stats['num_videos']} videos, mean {stats['mean_MiB']:.2f} MiB")
        return
    if a.coco:
        stats = coco_folder(a.out, a.num_images or 4096, a.seed, progress=not a.quiet)
        print(f"{a.out}: {stats['num_images']} JPEGs, mean {stats['mean_KiB']:.1f} KiB, {stats['mean_MP']:.2f} MP, "
              f"{stats['boxes_per_image']:.1f} boxes per image")
        return
    stats = make_photo_folder(a.out, a.num_images or 16384, a.classes, a.seed, progress=not a.quiet)
    print(f"{a.out}: {stats['num_images']} JPEGs, mean {stats['mean_KiB']:.1f} KiB, median {stats['median_KiB']:.1f} KiB")


if __name__ == "__main__":
    main()
