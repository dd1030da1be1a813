"""An ImageFolder of JPEGs re-encoded from real photographs, at ImageNet's statistics.

    python benchmarks/photo_folder.py OUT_DIR [--num-images 16384] [--classes 100] [--seed 0]
    python benchmarks/photo_folder.py OUT_DIR --coco [--num-images 4096] [--seed 0]
    python benchmarks/photo_folder.py OUT_DIR --videos 1000 [--seconds 10] [--height 720 --width 1280]
    python benchmarks/photo_folder.py OUT_DIR --video-set kinetics256|kinetics256-250|kinetics320|... [--videos 64]

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

``--video-set NAME [--videos 64]`` (``video_set``) makes a named video test set (``VIDEO_SETS``):
``720p`` is ``--videos``' set; ``kinetics256``, ``kinetics320`` (a keyframe every 2 s) and
``kinetics256-250``, ``kinetics320-250`` (every 250 frames, x264's default) are shaped like
Kinetics as it is usually stored: short side 256 or 320, 16:9 or 4:3, 25, 29.97 or 30 fps, 10 s,
x264's CRF 23 and 3 B-frames, a handheld camera swaying and zooming across a photograph;
``mixed`` draws the short side and the keyframe interval per video, and one video in 8 is HEVC
(libx265, mp4) and one in 8 VP9 (libvpx-vp9 with alt-ref frames, webm).
"""
from __future__ import annotations

import argparse
import collections
import io
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from fractions import Fraction
from typing import NamedTuple

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


class VideoSpec(NamedTuple):
    """How one test video is made: codec (FFmpeg's name: "h264", "hevc", "vp9"), frame size, frame rate,
    keyframe interval in frames, B-frames (H.264, HEVC), and the camera's ``motion``: ``"pan"`` (a
    window travelling once across the photograph, ``video_folder``'s 720p videos) or ``"handheld"``
    (the window sways back and forth and zooms in and out by up to 15%: more bits per pixel, closer
    to what the Kinetics re-encodings hold)."""

    codec: str
    height: int
    width: int
    fps: Fraction
    gop: int
    bframes: int
    motion: str = "pan"
    exact_gop: bool = False  # keyframes exactly every ``gop`` frames (the encoder's scene cuts off)


class VideoJob(NamedTuple):
    root: str
    index: int
    classes: int
    seed: int
    seconds: float
    spec: VideoSpec


#: the file extension of each codec's container
VIDEO_EXT = {"h264": ".mp4", "hevc": ".mp4", "vp9": ".webm"}


def _encoder(spec: VideoSpec) -> tuple[str, dict[str, str]]:
    """(PyAV's encoder, its options) for ``spec``: FFmpeg's defaults where Kinetics-style re-encodings
    keep them (CRF 23 for x264, 28 for x265), fast presets so that a set is made in seconds."""
    gop = str(spec.gop)
    if spec.codec == "h264":
        params = f"keyint={gop}:min-keyint={gop}" + (":scenecut=0" if spec.exact_gop else "") + ":log-level=error"
        return "libx264", {"preset": "veryfast", "crf": "23", "g": gop, "bf": str(spec.bframes), "x264-params": params}
    if spec.codec == "hevc":
        return "libx265", {"preset": "superfast", "crf": "28", "x265-params":
                           f"keyint={gop}:min-keyint={gop}:bframes={spec.bframes}"
                           + (":scenecut=0" if spec.exact_gop else "") + ":log-level=error"}
    if spec.codec == "vp9":
        # "good" quality with alt-ref frames (VP9's hidden frames, in superframes), as YouTube's VP9 has
        return "libvpx-vp9", {"deadline": "good", "cpu-used": "5", "row-mt": "1", "crf": "32", "b": "0",
                              "g": gop, "keyint_min": gop}
    raise ValueError(f"no encoder for codec {spec.codec!r}; choose from {sorted(VIDEO_EXT)}")


def make_video_one(job: VideoJob) -> int:
    """Write video ``job.index`` (a window moving across a photograph, with sensor noise, encoded as
    ``job.spec`` says); returns its size in bytes."""
    import av
    from PIL import Image

    root, i, classes, seed, seconds, spec = job
    height, width = spec.height, spec.width
    rng = np.random.default_rng([seed, i, 7])
    src = _source(COLOUR[int(rng.integers(len(COLOUR)))])
    # the photograph at 1.6 times the frame's cover size, so the window can travel
    scale = 1.6 * max(height / src.shape[0], width / src.shape[1])
    photo = Image.fromarray(src).resize((int(src.shape[1] * scale) + 1, int(src.shape[0] * scale) + 1), Image.LANCZOS)
    big = np.asarray(photo)
    if rng.random() < 0.5:
        big = big[:, ::-1]
        photo = photo.transpose(Image.FLIP_LEFT_RIGHT)
    noise = rng.normal(0, 3.0, size=(4, height, width, 3)).round().astype(np.int16)  # sensor noise, cycled
    frames = int(round(seconds * spec.fps))
    (y0, x0), (y1, x1) = (rng.uniform(0, 1, 2) for _ in range(2))
    phase = rng.uniform(0, 2 * np.pi, 3)
    path = os.path.join(root, f"class{i % classes:03d}", f"{i:06d}{VIDEO_EXT[spec.codec]}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    name, options = _encoder(spec)
    with av.open(path, "w") as out:
        stream = out.add_stream(name, rate=spec.fps, options=options)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for f in range(frames):
            if spec.motion == "pan":  # the frame-sized window travels once across the photograph
                t = f / max(frames - 1, 1)
                top = int((y0 + (y1 - y0) * t) * (big.shape[0] - height))
                left = int((x0 + (x1 - x0) * t) * (big.shape[1] - width))
                window = big[top:top + height, left:left + width]
            else:  # handheld: sways across the photograph (periods 3.3 s and 2.3 s), zooms (period 4 s)
                t = f / float(spec.fps)
                zoom = 1.0 + 0.15 * (0.5 + 0.5 * np.sin(2 * np.pi * t / 4 + phase[2]))
                h, w = height * zoom, width * zoom
                top = (0.5 + 0.5 * np.sin(2 * np.pi * 0.3 * t + phase[0])) * (photo.height - h)
                left = (0.5 + 0.5 * np.sin(2 * np.pi * 0.43 * t + phase[1])) * (photo.width - w)
                window = np.asarray(photo.resize((width, height), Image.BILINEAR, box=(left, top, left + w, top + h)))
            rgb = window.astype(np.int16) + noise[f % 4]
            frame = av.VideoFrame.from_ndarray(np.clip(rgb, 0, 255).astype(np.uint8), format="rgb24")
            frame.pts = f
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return os.path.getsize(path)


def _make_videos(root: str, want: dict, specs: list[VideoSpec], seconds: float, classes: int, seed: int,
                 progress: bool, extra: dict | None = None) -> dict:
    """Make (or reuse, when ``stats.json`` holds ``want``) one video per spec; returns the statistics
    (``want``, sizes, bitrate, the seconds it took to make, and ``extra``)."""
    stats_path = os.path.join(root, "stats.json")
    if os.path.exists(stats_path):
        with open(stats_path) as f:
            stats = json.load(f)
        if all(stats.get(k) == v for k, v in want.items()):
            return stats
    os.makedirs(root, exist_ok=True)
    jobs = [VideoJob(root, i, classes, seed, seconds, spec) for i, spec in enumerate(specs)]
    t0 = time.perf_counter()
    sizes = np.array(_pool_map(make_video_one, jobs, "videos", progress, chunksize=1, unit="video"), dtype=np.int64)
    codecs = sorted({s.codec for s in specs})
    stats = dict(want, mean_MiB=float(sizes.mean() / 2 ** 20), codec=codecs[0] if len(codecs) == 1 else codecs,
                 mean_kbps=float(np.mean(sizes) * 8 / 1e3 / seconds), made_in_s=time.perf_counter() - t0,
                 made_on_cpus=os.cpu_count(), **(extra or {}))
    with open(stats_path, "w") as f:
        json.dump(stats, f, indent=1)
    return stats


def video_folder(root: str, num_videos: int = 1000, seconds: float = 10.0, fps: int = 30,
                 size: tuple[int, int] = (720, 1280), classes: int = 10, seed: int = 0,
                 progress: bool = True) -> dict:
    """A folder of ``num_videos`` H.264 videos (``class*/NNNNNN.mp4``, yuv420p, 2 B-frames, a keyframe
    every second) of a window panning across a photograph, with sensor noise; made once
    (reused when ``stats.json`` matches), in parallel. Needs PyAV."""
    want = {"num_videos": num_videos, "seconds": seconds, "fps": fps, "size": list(size), "seed": seed,
            "classes": classes}
    spec = VideoSpec("h264", size[0], size[1], Fraction(fps), fps, 2)
    return _make_videos(root, want, [spec] * num_videos, seconds, classes, seed, progress)


#: the named test sets of ``video_set``: (short side or sides, keyframe interval: seconds as a float or
#: frames as an int, or both to draw from, share of HEVC and of VP9 videos)
VIDEO_SETS: dict[str, dict] = {
    "720p": {},  # video_folder's
    "kinetics256": dict(short=(256,), gop=(2.0,)),
    "kinetics256-250": dict(short=(256,), gop=(250,)),
    "kinetics320": dict(short=(320,), gop=(2.0,)),
    "kinetics320-250": dict(short=(320,), gop=(250,)),
    "mixed": dict(short=(256, 320), gop=(2.0, 250), other_codecs=True),
}
#: the frame rates of the Kinetics-shaped sets (25, 29.97 and 30 fps), with their shares
KINETICS_FPS = ((Fraction(25), 0.3), (Fraction(30000, 1001), 0.4), (Fraction(30), 0.3))


def kinetics_spec(name: str, i: int, seed: int) -> VideoSpec:
    """Video ``i`` of the Kinetics-shaped set ``name`` (``VIDEO_SETS``): its short side, 16:9 (4 in 5)
    or 4:3, a frame rate of ``KINETICS_FPS``, a keyframe every 2 s or every 250 frames (x264's default,
    FFmpeg's usual re-encoding), 3 B-frames (x264's default); in ``"mixed"``, one video in 8 is HEVC and
    one in 8 VP9 (by index, so any 8 consecutive videos hold one of each)."""
    kind = VIDEO_SETS[name]
    rng = np.random.default_rng([seed, i, 11])
    short = int(kind["short"][int(rng.integers(len(kind["short"])))])
    aspect = 16 / 9 if rng.uniform() < 0.8 else 4 / 3
    long = 2 * int(round(short * aspect / 2))
    fps = KINETICS_FPS[int(rng.choice(len(KINETICS_FPS), p=[p for _, p in KINETICS_FPS]))][0]
    gop = kind["gop"][int(rng.integers(len(kind["gop"])))]
    gop = int(round(gop * fps)) if isinstance(gop, float) else gop
    codec = "h264"
    if kind.get("other_codecs"):
        codec = {3: "hevc", 6: "vp9"}.get(i % 8, "h264")
    return VideoSpec(codec, short, long, fps, gop, 0 if codec == "vp9" else 3, motion="handheld", exact_gop=True)


def video_set(root: str, name: str, num_videos: int = 64, seconds: float = 10.0, classes: int = 10, seed: int = 0,
              progress: bool = True) -> dict:
    """The named test set ``name`` (``VIDEO_SETS``) of ``num_videos`` videos of ``seconds`` at ``root``,
    made once (reused when ``stats.json`` matches): ``"720p"`` is ``video_folder``'s; the others are
    shaped like Kinetics as it is usually stored (short side 256 or 320, ~10 s, 25-30 fps, a keyframe
    every 2 s or every 250 frames, H.264; ``"mixed"`` holds HEVC and VP9 among them), filmed by a
    handheld camera (``VideoSpec.motion``). Needs PyAV."""
    if name not in VIDEO_SETS:
        raise ValueError(f"unknown video set {name!r}; choose from {list(VIDEO_SETS)}")
    if name == "720p":
        return video_folder(root, num_videos, seconds, classes=classes, seed=seed, progress=progress)
    specs = [kinetics_spec(name, i, seed) for i in range(num_videos)]
    want = {"set": name, "num_videos": num_videos, "seconds": seconds, "seed": seed, "classes": classes}
    counts = {k: dict(collections.Counter(str(v) for v in values)) for k, values in (
        ("codec", [s.codec for s in specs]), ("size", [f"{s.width}x{s.height}" for s in specs]),
        ("fps", [f"{float(s.fps):.2f}" for s in specs]), ("gop", [s.gop for s in specs]))}
    return _make_videos(root, want, specs, seconds, classes, seed, progress, extra={"videos": counts})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--num-images", type=int, default=None, help="default 16384 (ImageFolder), 4096 (--coco)")
    p.add_argument("--classes", type=int, default=None, help="default 100 (images, --videos), 10 (--video-set)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--coco", action="store_true", help="a COCO-shaped detection set instead (coco_folder)")
    p.add_argument("--videos", type=int, default=0, help="N H.264 videos instead (video_folder; with "
                   "--video-set, that set's size, default 64)")
    p.add_argument("--video-set", choices=list(VIDEO_SETS), default=None,
                   help="a named video test set instead (video_set): 720p is --videos' default; kinetics* are "
                        "Kinetics-shaped (short side 256/320, a keyframe every 2 s or, -250, every 250 frames); "
                        "mixed holds HEVC and VP9 among them")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--height", type=int, default=720)
    p.add_argument("--width", type=int, default=1280)
    a = p.parse_args()
    if a.video_set:
        n = a.videos or 64
        # 10 classes, as video_speed.py makes its sets, so that either script reuses the other's
        stats = video_set(a.out, a.video_set, n, a.seconds, classes=min(a.classes or 10, n), seed=a.seed,
                          progress=not a.quiet)
        print(f"{a.out}: {a.video_set}, {stats['num_videos']} videos of {a.seconds:g} s, mean {stats['mean_MiB']:.2f} "
              f"MiB ({stats['mean_kbps']:.0f} kbit/s), made in {stats['made_in_s']:.1f} s on {stats['made_on_cpus']} "
              f"CPUs" + (f"; {stats['videos']}" if "videos" in stats else ""))
        return
    if a.videos:
        stats = video_folder(a.out, a.videos, a.seconds, size=(a.height, a.width),
                             classes=min(a.classes or 100, a.videos), seed=a.seed, progress=not a.quiet)
        print(f"{a.out}: {stats['num_videos']} videos, mean {stats['mean_MiB']:.2f} MiB")
        return
    if a.coco:
        stats = coco_folder(a.out, a.num_images or 4096, a.seed, progress=not a.quiet)
        print(f"{a.out}: {stats['num_images']} JPEGs, mean {stats['mean_KiB']:.1f} KiB, {stats['mean_MP']:.2f} MP, "
              f"{stats['boxes_per_image']:.1f} boxes per image")
        return
    stats = make_photo_folder(a.out, a.num_images or 16384, a.classes or 100, a.seed, progress=not a.quiet)
    print(f"{a.out}: {stats['num_images']} JPEGs, mean {stats['mean_KiB']:.1f} KiB, median {stats['median_KiB']:.1f} KiB")


if __name__ == "__main__":
    main()
