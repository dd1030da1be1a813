"""Video clip loaders side by side: torchdali (NVDEC), NVIDIA DALI's video reader, and PyAV on the CPU.

    python benchmarks/video_speed.py [DATA_DIR] [--systems torchdali,cpu,dali] [--crop 112]
                                     [--batch-size 8] [--frames 16] [--workers N] [--epochs 2]
                                     [--train-steps 20] [--num-videos 64] [--seconds 10] [--out DIR]
                                     [--video-set 720p|kinetics256|kinetics256-250|kinetics320|...|mixed]
                                     [--raw [--sessions 1,2,4,8] [--raw-budget 15]]

DATA_DIR is a folder of videos in class subfolders; without it, ``video_set`` of
``benchmarks/photo_folder.py`` makes ``--num-videos`` videos of ``--seconds`` of the named
``--video-set`` under ``.torchdali_data`` (``720p``, the default: H.264, a window panning across a
photograph, 30 fps, a keyframe every second, 2 B-frames; ``kinetics*`` and ``mixed``: shaped like
Kinetics as it is stored, see photo_folder.py); a folder made with the same arguments is reused.

``--raw`` first measures the decoders' own rate on the set, the ceiling of any clip loader on it:
every frame of every video decoded in order (the packets read into memory beforehand) by the
decoder ``ClipDecoder`` uses (NVDEC through the sessions of its decode threads, ``_cuvid``, each
picture mapped as any consumer of NVDEC's frames maps it and copied into one scratch frame; without a
GPU, FFmpeg's software decoder, as ``decode_clip_nv12`` makes it), with ``--sessions`` decoders in as
many threads, each taking whole videos from one list; no clip logic, no copies into a batch. It reports frames/s, the
clips/s that makes at ``--frames`` frames per clip, and the CPU time of the process per 1000 frames,
for each session count (``--raw-budget`` seconds at most per count: sessions stop taking videos after
that). Without a GPU only ``--raw`` runs.

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
the GPU). torchdali's row adds the frames its decoder decoded per frame delivered (clips are decoded
from the keyframe before their first frame: ``EpochStats.decoded_per_delivered_frame``), and with
``--raw`` the share of the best raw rate its decoded frames reach. Results go to
``OUT/video_speed.json``. Needs a CUDA GPU (except ``--raw``) and PyAV.
"""
from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
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


def video_files(root: str) -> list[str]:
    """The videos of ``root``'s class folders (``VideoFolder``'s files), sorted."""
    from torchdali.video import VIDEO_EXTENSIONS

    return sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files
                  if f.lower().endswith(VIDEO_EXTENSIONS))


def whole_videos(paths: list[str]) -> list[Any]:
    """Each video's every packet, read into memory as one ``EncodedClip`` of all its frames."""
    import numpy as np

    from torchdali.video import probe_videos, read_clip

    return [read_clip(p, np.arange(info.num_frames), info) for p, info in zip(paths, probe_videos(paths))]


def _software_decoder(clip: Any) -> Any:
    """FFmpeg's software decoder for ``clip``, made as ``decode_clip_nv12`` makes it (one per clip)."""
    import av

    from torchdali.video._container import _decoder

    ctx = av.CodecContext.create(_decoder(clip.codec), "r")
    if clip.extradata:
        ctx.extradata = clip.extradata
    ctx.width, ctx.height = clip.width, clip.height
    return ctx


def _decode_packets(ctx: Any, clip: Any, stop: int | None = None) -> int:
    """Feed ``clip``'s packets (the first ``stop``) to FFmpeg's decoder ``ctx``, then flush; the frames
    that came out, dropped at once. Returns their count."""
    import av

    from torchdali.video import VideoInfo

    frames = 0
    for j in range(clip.num_packets if stop is None else min(stop, clip.num_packets)):
        packet = av.Packet(bytes(clip.packet(j)))
        packet.pts = int(clip.pts[j])
        packet.dts = None if clip.dts[j] == VideoInfo.NO_TIMESTAMP else int(clip.dts[j])
        packet.is_keyframe = bool(clip.key[j])
        frames += len(ctx.decode(packet))
    return frames + len(ctx.decode(None))


class _NvdecSession:
    """One thread's NVDEC session as ``ClipDecoder``'s decode threads hold one (``_cuvid.Session``, its
    decoders reused from video to video), decoding every packet and mapping every picture (NVDEC's own
    post-processing, which any consumer of its frames does), each copied into one scratch frame (a session
    maps only the pictures it copies somewhere)."""

    def __init__(self, device: torch.device) -> None:
        from torchdali.video._cuvid import Session

        torch.cuda.set_device(device)
        self.stream = torch.cuda.Stream(device)
        self.done = torch.cuda.Event(blocking=True)
        self.done.record(self.stream)  # the device's context current on this thread, the event made
        self.session = Session(self.stream.cuda_stream, self.done.cuda_event)
        self.scratch: torch.Tensor | None = None

    def decode(self, clip: Any, stop: int | None = None) -> int:
        import numpy as np

        from torchdali.video._cuvid import Outputs
        from torchdali.video._nvdec import _packets

        n = clip.num_packets if stop is None else min(stop, clip.num_packets)
        packets = _packets(clip)
        packets = packets._replace(offsets=packets.offsets[: n + 1], pts=packets.pts[:n])
        frame = clip.height * clip.width * 3 // 2
        if self.scratch is None or self.scratch.numel() < frame:
            with torch.cuda.stream(self.stream):
                self.scratch = torch.empty(frame, dtype=torch.uint8, device=self.stream.device)
        return self.session.decode(clip.codec, packets, clip.width, clip.height,
                                   Outputs(np.arange(n + 1, dtype=np.int64), np.zeros(n, dtype=np.int64)),
                                   self.scratch.data_ptr())

    def close(self) -> None:
        self.session.close()


class _SoftwareSession:
    """FFmpeg's software decoder, one per video as ``decode_clip_nv12`` makes it."""

    def decode(self, clip: Any, stop: int | None = None) -> int:
        return _decode_packets(_software_decoder(clip), clip, stop)

    def close(self) -> None:
        pass


def raw_rate(clips: list[Any], sessions: int, device: torch.device | None, budget_s: float) -> dict:
    """Every frame of ``clips`` (``whole_videos``) decoded in order by ``sessions`` decoders in as many
    threads, each taking the next whole video until none is left or ``budget_s`` has passed: NVDEC on
    ``device`` through the sessions ``ClipDecoder`` uses (``_NvdecSession``), FFmpeg's software decoder
    where ``device`` is None. Each thread first decodes a few packets of a video untimed (the session's
    start)."""
    lock = threading.Lock()
    queue = iter(range(len(clips)))
    start = threading.Barrier(sessions + 1)
    deadline = [float("inf")]

    def session(k: int) -> tuple[int, int]:
        try:
            decoder = _NvdecSession(device) if device is not None else _SoftwareSession()
            decoder.decode(clips[k % len(clips)], stop=8)
        except BaseException:
            start.abort()  # the others and the main thread stop waiting; this error is raised below
            raise
        start.wait()
        frames = videos = 0
        try:
            while time.perf_counter() < deadline[0]:
                with lock:
                    i = next(queue, None)
                if i is None:
                    break
                frames += decoder.decode(clips[i])
                videos += 1
        finally:
            decoder.close()
        return frames, videos

    with ThreadPoolExecutor(sessions, thread_name_prefix="raw-decode") as pool:
        futures = [pool.submit(session, k) for k in range(sessions)]
        try:
            start.wait()
        except threading.BrokenBarrierError:
            pass  # a session failed to start: its error comes with its result
        t0, cpu0 = time.perf_counter(), time.process_time()
        deadline[0] = t0 + budget_s
        done = [f.result() for f in futures]
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    frames, videos = sum(d[0] for d in done), sum(d[1] for d in done)
    return {"sessions": sessions, "videos": videos, "frames": frames, "wall_s": wall,
            "frames_per_s": frames / wall if wall > 0 else 0.0,
            "cpu_s_per_1000_frames": 1000.0 * cpu / frames if frames else 0.0}


def raw_sweep(root: str, args: argparse.Namespace, device: torch.device | None) -> dict:
    """``raw_rate`` for each of ``--sessions``, printed as a table; the best rate and all rows."""
    paths = video_files(root)
    t0 = time.perf_counter()
    clips = whole_videos(paths)
    read_s = time.perf_counter() - t0
    frames = sum(c.num_packets for c in clips)
    backend = "NVDEC (libnvcuvid, every picture mapped)" if device is not None else "FFmpeg's software decoder"
    codecs = sorted({c.codec for c in clips})
    print(f"\nraw decode, {backend}: {len(clips)} videos ({', '.join(codecs)}), {frames} frames "
          f"(packets read in {read_s:.1f} s)")
    print(f"{'sessions':>8} {'frames/s':>9} {f'clips/s@{args.frames}':>11} {'CPU-s/1k frames':>16} {'videos':>7} "
          f"{'wall s':>7}")
    rows = []
    for n in [int(x) for x in args.sessions.split(",") if x]:
        r = raw_rate(clips, n, device, args.raw_budget)
        r["clips_per_s"] = r["frames_per_s"] / args.frames
        rows.append(r)
        print(f"{n:>8} {r['frames_per_s']:>9.0f} {r['clips_per_s']:>11.1f} {r['cpu_s_per_1000_frames']:>16.2f} "
              f"{r['videos']:>7} {r['wall_s']:>7.1f}", flush=True)
    best = max(rows, key=lambda r: r["frames_per_s"]) if rows else None
    return {"backend": backend, "videos": len(clips), "frames": frames, "codecs": codecs, "rows": rows, "best": best}


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
    p.add_argument("--video-set", default="720p", help="the set photo_folder.video_set makes without DATA_DIR: "
                   "720p, kinetics256, kinetics256-250, kinetics320, kinetics320-250 or mixed")
    p.add_argument("--raw", action="store_true", help="first measure the decoders' own rate on the set")
    p.add_argument("--sessions", default="1,2,4,8", help="--raw: decode sessions (threads) to measure")
    p.add_argument("--raw-budget", type=float, default=15.0, help="--raw: seconds at most per session count")
    args = p.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in LOADERS]
    if unknown:
        p.error(f"unknown systems {unknown}; choose from {list(LOADERS)}")
    cuda = torch.cuda.is_available()
    if not cuda and not args.raw:
        print("video_speed.py needs a CUDA GPU (torch.cuda.is_available() is False here); "
              "--raw measures FFmpeg's software decoder without one.", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    torch.backends.cudnn.benchmark = True
    root = args.data
    if root is None:
        from photo_folder import VIDEO_SETS, video_set

        if args.video_set not in VIDEO_SETS:
            p.error(f"unknown --video-set {args.video_set!r}; choose from {list(VIDEO_SETS)}")
        name = "videos" if args.video_set == "720p" else args.video_set  # 720p: the folder made before sets had names
        root = os.path.join(".torchdali_data", f"{name}-{args.num_videos}-{args.seconds:g}s")
        video_set(root, args.video_set, args.num_videos, args.seconds, classes=min(10, args.num_videos))
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
    env["data"] = root
    out: dict[str, Any] = {"environment": env, "args": vars(args)}
    raw = raw_sweep(root, args, device if cuda else None) if args.raw else None
    out["raw"] = raw
    if cuda and systems:
        out.update(run_systems(root, args, device, classes, systems, raw))
    elif systems:
        print(f"\nsystems {','.join(systems)} skipped: they need a CUDA GPU")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "video_speed.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {path}")
    return 0


def run_systems(root: str, args: argparse.Namespace, device: torch.device, classes: int, systems: list[str],
                raw: dict | None) -> dict:
    """Each system's loader and training rates, printed as a table; ``{"limit_clips_per_s", "results"}``."""
    step = trainer(classes, device)
    x = torch.randn(args.batch_size, 3, args.frames, args.crop, args.crop, device=device)
    y = torch.randint(classes, (args.batch_size,), device=device)
    limit = train_rate(step, itertools.repeat((x, y)), args.train_steps, args.batch_size)
    results = {name: run_system(name, root, args, device, step, limit) for name in systems}
    best = raw["best"]["frames_per_s"] if raw and raw.get("best") else None
    print(f"\n{'system':<10} {'clips/s':>8} {'CPU-s/1k':>9} {'GPU MiB':>8} {'train clips/s':>14} {'% of limit':>11} "
          f"{'dec/dlv':>8} {'% raw':>6}")
    print(f"{'limit':<10} {'':>8} {'':>9} {'':>8} {limit:>14.1f} {100.0:>10.1f}%")
    for name, r in results.items():
        lo, tr = r.get("loader"), r.get("train")
        row = f"{lo['clips_per_s']:>8.1f} {lo['cpu_s_per_1000_clips']:>9.1f} {r['gpu_memory_MiB']:>8.0f}" if lo else ""
        row += f" {tr['clips_per_s']:>14.1f} {tr['percent_of_limit']:>10.1f}%" if tr else ""
        ratio = r.get("last_epoch_stats", {}).get("decoded_per_delivered_frame")
        if lo and ratio:
            # the frames the loader's decoder decoded per second, as a share of the decoders' own best rate
            r["decoded_frames_per_s"] = lo["clips_per_s"] * args.frames * ratio
            r["percent_of_raw"] = 100.0 * r["decoded_frames_per_s"] / best if best else None
            row += f" {ratio:>8.2f}" + (f" {r['percent_of_raw']:>5.1f}%" if best else "")
        print(f"{name:<10} {row}" + (f"  ERROR {r['error'][:300]}" if "error" in r else ""))
    return {"limit_clips_per_s": limit, "results": results}


if __name__ == "__main__":
    raise SystemExit(main())
