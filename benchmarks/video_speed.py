"""Video clip loaders side by side: torchdali (NVDEC), NVIDIA DALI's video reader, and PyAV on the CPU.

    python benchmarks/video_speed.py [DATA_DIR] [--systems torchdali,cpu,dali] [--crop 112]
                                     [--batch-size 8] [--frames 16] [--workers N] [--epochs 2]
                                     [--train-steps 20] [--num-videos 64] [--seconds 10] [--out DIR]

DATA_DIR is a folder of videos in class subfolders; without it, ``video_folder`` of
``benchmarks/photo_folder.py`` makes ``--num-videos`` 720p H.264 videos of ``--seconds`` (a window
panning across a photograph, 30 fps, a keyframe every second, 2 B-frames) under
``.torchdali_data``; a folder made with the same arguments is reused.

A sample is a clip of ``--frames`` consecutive frames at a random place in its video, one clip
per video and epoch; every system gets ``--workers`` CPU workers (DALI: threads) and hands the
loop ``(clips [B, 3, F, crop, crop] float on the GPU, labels)``, with the augmentation of
torchvision's video-classification reference: resize to (128, 171) (``--crop 224``: (256, 342)),
random crop, horizontal flip, normalize with the reference's mean and std, the same
parameters for every frame of a clip:

* ``torchdali``: ``td.DataLoader(torchdali.video.VideoFolder(...), transforms=...,
  video_layout="BCFHW")``: the workers read each clip's packets, NVDEC decodes them, the fused
  kernel reads the NV12 frames;
* ``cpu``: torch's DataLoader over the same ``VideoFolder`` (its ``__getitem__`` decodes the clip
  with FFmpeg's software decoder in the worker) with the same steps as torchvision v2 objects
  on the ``[F, 3, H, W]`` clip, pinned, copied to the GPU: what a user has without a GPU loader;
* ``dali``: ``fn.readers.video`` (device "gpu", ``sequence_length``, ``random_shuffle``,
  ``file_list`` with labels), ``fn.resize``, ``fn.crop_mirror_normalize`` (random crop,
  mirror, FCHW), transposed to CFHW. Its reader's epoch is every sequence of every video
  (``step`` = ``sequence_length``); "an epoch" here is as many of its batches as the others'
  epochs have, taken from its reader's epochs one after the other.

Per system: clips/s (median of ``--epochs`` epochs after a warm-up one), CPU core-seconds per
1000 clips of the process tree, the GPU memory the loader holds (device memory in use once its
epochs ran, less before it was built: NVDEC's and DALI's own allocations included), then
``torchvision.models.video.r2plus1d_18`` (random weights, SGD, bf16 autocast) trained
``--train-steps`` steps after 5 warm-up steps on its batches, as a % of ``limit`` (one batch kept on
the GPU). Results go to ``OUT/video_speed.json``. Needs a CUDA GPU and PyAV.
"""
from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import sys
import time
import traceback
from typing import Any, Callable, Iterator

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from torchdali.bench import OnDevice, _epochs, environment, forever  # noqa: E402

MEAN = (0.43216, 0.394666, 0.37645)  # torchvision's video-classification reference
STD = (0.22803, 0.22145, 0.216989)
TRAIN_WARMUP = 5


def resize_for(crop: int) -> tuple[int, int]:
    return (128, 171) if crop <= 112 else (256, 342)


def torchdali_loader(root: str, args: argparse.Namespace, device: torch.device):
    import torchdali as td
    from torchdali import transforms as T
    from torchdali.video import VideoFolder

    ds = VideoFolder(root, num_frames=args.frames, clips="random")
    steps = [T.Resize(resize_for(args.crop), antialias=False), T.RandomHorizontalFlip(), T.RandomCrop(args.crop),
             T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)]
    loader = td.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, drop_last=True,
                           persistent_workers=args.workers > 0, transforms=T.Compose(steps), device=device, seed=0,
                           video_layout="BCFHW")
    return (lambda: iter(loader)), loader.close, loader.stats


def _cfhw(clip: torch.Tensor) -> torch.Tensor:
    """``[F, 3, H, W]`` -> ``[3, F, H, W]``, the layout r2plus1d_18 takes."""
    return clip.transpose(0, 1)


def cpu_loader(root: str, args: argparse.Namespace, device: torch.device):
    from torchvision.transforms import v2

    from torchdali.video import VideoFolder

    tf = v2.Compose([v2.Resize(resize_for(args.crop), antialias=False), v2.RandomHorizontalFlip(),
                     v2.RandomCrop(args.crop), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD),
                     v2.Lambda(_cfhw)])
    ds = VideoFolder(root, num_frames=args.frames, clips="random", transform=tf)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                         drop_last=True, pin_memory=True, persistent_workers=args.workers > 0)
    return (lambda: OnDevice(loader, device)), (lambda: None), None


def dali_loader(root: str, args: argparse.Namespace, device: torch.device):
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    files, labels = [], []
    for k, c in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, c))):
            files.append(os.path.join(root, c, name))
            labels.append(k)
    h, w = resize_for(args.crop)

    @pipeline_def(batch_size=args.batch_size, num_threads=max(1, args.workers), device_id=device.index or 0, seed=0)
    def pipe():
        video, label = fn.readers.video(device="gpu", filenames=files, labels=labels, sequence_length=args.frames,
                                        random_shuffle=True, initial_fill=len(files), name="reader",
                                        pad_last_batch=True)
        video = fn.resize(video, resize_x=w, resize_y=h)
        video = fn.crop_mirror_normalize(video, crop=(args.crop, args.crop),
                                         crop_pos_x=fn.random.uniform(range=(0.0, 1.0)),
                                         crop_pos_y=fn.random.uniform(range=(0.0, 1.0)),
                                         mirror=fn.random.coin_flip(), dtype=types.FLOAT, output_layout="FCHW",
                                         mean=[255 * m for m in MEAN], std=[255 * s for s in STD])
        return video, label

    p = pipe()
    p.build()
    it = DALIGenericIterator([p], ["clips", "labels"], reader_name="reader",
                             last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)

    def stream():
        while True:  # the reader's epochs one after the other (auto_reset)
            for out in it:
                yield out[0]["clips"].transpose(1, 2), out[0]["labels"].reshape(-1)

    source = stream()

    def epoch():
        # one clip per video, as the other systems' epochs: the reader's own epoch is every sequence
        # of every video (300 frames / 16: 18 per video here)
        return itertools.islice(source, len(files) // args.batch_size)

    class Epoch:
        def __len__(self):
            return len(files) // args.batch_size

        def __iter__(self):
            return epoch()

    return Epoch, (lambda: None), None


LOADERS: dict[str, Callable] = {"torchdali": torchdali_loader, "cpu": cpu_loader, "dali": dali_loader}


def device_memory_used(device: torch.device) -> int:
    free, total = torch.cuda.mem_get_info(device)
    return total - free


def trainer(classes: int, device: torch.device):
    from torchvision.models.video import r2plus1d_18

    model = r2plus1d_18(num_classes=classes).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y.to(device).long())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def train_rate(step: Callable, batches: Iterator, steps: int, batch_size: int) -> float:
    for i in range(TRAIN_WARMUP + steps):
        if i == TRAIN_WARMUP:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        step(*next(batches))
    torch.cuda.synchronize()
    return steps * batch_size / (time.perf_counter() - t0)


def run_system(name: str, root: str, args: argparse.Namespace, device: torch.device, step: Callable,
               limit: float) -> dict:
    result: dict[str, Any] = {}
    close: Callable = lambda: None
    gc.collect()
    torch.cuda.empty_cache()
    before = device_memory_used(device)
    try:
        make_epoch, close, stats = LOADERS[name](root, args, device)
        loader = _epochs(make_epoch, args.epochs, 1, device, name, False)
        result["loader"] = {"clips_per_s": loader["images_per_s"], "spread": loader["spread"],
                            "cpu_s_per_1000_clips": loader["cpu_s_per_1000"], "epochs": loader["images_per_s_all"]}
        result["gpu_memory_MiB"] = (device_memory_used(device) - before) / 2 ** 20
        if stats is not None and stats().last is not None:
            result["last_epoch_stats"] = stats().last.as_dict()
        batches = forever(make_epoch)
        try:
            rate = train_rate(step, batches, args.train_steps, args.batch_size)
        finally:
            batches.close()
        result["train"] = {"clips_per_s": rate, "percent_of_limit": 100.0 * rate / limit}
    except Exception as e:  # one failing system must not lose the others' figures
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()
    finally:
        try:
            close()
        except Exception as e:
            result.setdefault("close_error", f"{type(e).__name__}: {e}")
        gc.collect()
        torch.cuda.empty_cache()
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", nargs="?", help="videos in class subfolders (default: made by photo_folder.video_folder)")
    p.add_argument("--systems", default="torchdali,cpu,dali")
    p.add_argument("--crop", type=int, default=112, help="output side (112 or 224)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--frames", type=int, default=16)
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-steps", type=int, default=20)
    p.add_argument("--num-videos", type=int, default=64)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--out", default="bench_out")
    args = p.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in LOADERS]
    if unknown:
        p.error(f"unknown systems {unknown}; choose from {list(LOADERS)}")
    if not torch.cuda.is_available():
        print("video_speed.py needs a CUDA GPU (torch.cuda.is_available() is False here).", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device())
    torch.backends.cudnn.benchmark = True
    root = args.data
    if root is None:
        from photo_folder import video_folder

        root = os.path.join(".torchdali_data", f"videos-{args.num_videos}-{args.seconds:g}s")
        video_folder(root, args.num_videos, args.seconds, classes=min(10, args.num_videos))
    classes = len([d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))])
    env = environment(device, sys.argv[1:])
    env["command"] = "python benchmarks/video_speed.py " + " ".join(sys.argv[1:])
    env["cpus"] = len(os.sched_getaffinity(0))
    try:
        import nvidia.dali

        env["dali"] = nvidia.dali.__version__
    except ImportError:
        env["dali"] = None
    import av

    env["av"] = av.__version__
    step = trainer(classes, device)
    x = torch.randn(args.batch_size, 3, args.frames, args.crop, args.crop, device=device)
    y = torch.randint(classes, (args.batch_size,), device=device)
    limit = train_rate(step, itertools.repeat((x, y)), args.train_steps, args.batch_size)
    results = {name: run_system(name, root, args, device, step, limit) for name in systems}
    print(f"\n{'system':<10} {'clips/s':>8} {'CPU-s/1k':>9} {'GPU MiB':>8} {'train clips/s':>14} {'% of limit':>11}")
    print(f"{'limit':<10} {'':>8} {'':>9} {'':>8} {limit:>14.1f} {100.0:>10.1f}%")
    for name, r in results.items():
        lo, tr = r.get("loader"), r.get("train")
        row = f"{lo['clips_per_s']:>8.1f} {lo['cpu_s_per_1000_clips']:>9.1f} {r['gpu_memory_MiB']:>8.0f}" if lo else ""
        row += f" {tr['clips_per_s']:>14.1f} {tr['percent_of_limit']:>10.1f}%" if tr else ""
        print(f"{name:<10} {row}" + (f"  ERROR {r['error'][:300]}" if "error" in r else ""))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "video_speed.json")
    with open(path, "w") as f:
        json.dump({"environment": env, "args": vars(args), "limit_clips_per_s": limit, "results": results}, f, indent=2)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
