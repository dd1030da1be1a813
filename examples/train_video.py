"""R(2+1)D-18 video classification training with torchdali: clips decoded on the GPU (NVDEC).

GPU:   python examples/train_video.py --steps 20
CPU:   python examples/train_video.py --device cpu --steps 2 --batch-size 2 --workers 0
Data:  python examples/train_video.py --data DIR      (videos in class subfolders)

Without --data it trains on a small set of H.264 videos it makes itself (needs PyAV:
``pip install av``). Each sample is a clip of 16 consecutive frames at a random
place in its video, augmented as torchvision's video-classification reference does (resize to
128x171, random crop 112, horizontal flip, normalize), every frame of a clip with the same
parameters. Prints the loss of each step and clips/s.
"""
from __future__ import annotations

import argparse
import itertools
import os
import time

import numpy as np
import torch
from torchvision.models.video import r2plus1d_18

import torchdali as td
from torchdali import transforms as T

MEAN = (0.43216, 0.394666, 0.37645)  # the reference's
STD = (0.22803, 0.22145, 0.216989)


def make_videos(root: str, num_videos: int, classes: int = 4, frames: int = 32, seed: int = 0) -> str:
    """Write ``num_videos`` H.264 videos (176x320, 25 fps) of a window panning across a synthetic
    picture, into ``root/class*/`` (unless there)."""
    import av

    from torchdali._synthetic import synthetic_image

    done = os.path.join(root, "done")
    if os.path.exists(done):
        return root
    rng = np.random.default_rng(seed)
    height, width = 176, 320
    for i in range(num_videos):
        big = synthetic_image(rng, 2 * height, 2 * width)
        path = os.path.join(root, f"class{i % classes}", f"{i:04d}.mp4")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with av.open(path, "w") as out:
            stream = out.add_stream("libx264", rate=25, options={"g": "25", "bf": "2", "preset": "veryfast"})
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            for f in range(frames):
                top, left = f * height // frames, f * width // frames
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(big[top:top + height, left:left + width]),
                                                   format="rgb24")
                frame.pts = f
                for packet in stream.encode(frame):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
    open(done, "w").close()  # last, so a set stopped half way is made again
    return root


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="videos in class subfolders (default: a synthetic set it makes)")
    p.add_argument("--num-videos", type=int, default=32, help="size of the synthetic set")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--frames", type=int, default=16)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=20, help="training steps (the loader cycles epochs)")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if args.data is None:
        args.data = make_videos(os.path.join(".torchdali_data", f"videos-synthetic-{args.num_videos}"),
                                args.num_videos)

    ds = td.video.VideoFolder(args.data, num_frames=args.frames, clips="random")
    augment = T.Compose([T.Resize((128, 171), antialias=False), T.RandomHorizontalFlip(), T.RandomCrop(112),
                         T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])
    loader = td.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, drop_last=True,
                           transforms=augment, device=device, seed=0, video_layout="BCFHW")
    torch.manual_seed(0)
    model = r2plus1d_18(num_classes=len(ds.classes)).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

    batches = (batch for _ in itertools.count() for batch in loader)  # epochs after epochs
    seen, t0 = 0, time.perf_counter()
    for step in range(1, args.steps + 1):
        clips, labels = next(batches)  # clips: [B, 3, F, 112, 112] float on the device
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = torch.nn.functional.cross_entropy(model(clips), labels.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        seen += len(clips)
        print(f"step {step}: loss {loss.item():.4f}", flush=True)
    batches.close()  # the epoch's iterator first, then the loader's workers and GPU state
    loader.close()
    print(f"{seen} clips in {args.steps} steps: {seen / (time.perf_counter() - t0):.1f} clips/s on {device}")


if __name__ == "__main__":
    main()
