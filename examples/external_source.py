"""External source: feed already-decoded arrays from any iterable into the GPU transforms.

Like DALI's external-source pattern: the data comes from your own reader (here a
generator of HWC numpy arrays of varied sizes, standing in for a Squirrel/WebDataset
stream), and torchdali does center crop + resize + normalize on the device.

    python examples/external_source.py --batches 5
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

import torchdali as td
from torchdali import transforms as T


class DecodedStream(torch.utils.data.IterableDataset):
    """Yields (HWC uint8 array, label) pairs of varying sizes, as a decoded stream would."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n, self.seed = n, seed

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        for i in range(wid, self.n, nw):  # shard across workers so each item appears once
            rng = np.random.default_rng([self.seed, i])
            h, w = int(rng.integers(180, 400)), int(rng.integers(180, 400))
            yield rng.integers(0, 256, (h, w, 3), dtype=np.uint8), i % 10


def main() -> None:
    td.set_cuda_work_queues()  # before CUDA starts: nvJPEG's copies get queues of their own (README)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--device", default=None)
    args = p.parse_args()

    loader = td.DataLoader(
        DecodedStream(args.batches * args.batch_size), batch_size=args.batch_size, num_workers=args.workers,
        transforms=T.Compose([T.CenterCrop(160), T.Resize((128, 128)), T.ToDtype(torch.float32, scale=True),
                              T.Normalize([0.5] * 3, [0.25] * 3)]),
        device=args.device,
    )
    for k, (images, labels) in enumerate(loader):
        print(f"batch {k}: images {tuple(images.shape)} {images.dtype} on {images.device}, "
              f"mean {images.float().mean().item():+.3f}, labels {labels.tolist()[:8]}...")
    print(loader.stats().summary())


if __name__ == "__main__":
    main()
