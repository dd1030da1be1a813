"""Run under torchrun by test_distributed.py: records the indices each rank sees."""
import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import torchdali as td
from torchdali import transforms as T


class Indexed(torch.utils.data.Dataset):
    def __len__(self):
        return 29

    def __getitem__(self, i):
        return np.full((8, 9, 3), i, dtype=np.uint8), i


def main() -> None:
    out_dir = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loader = td.DataLoader(Indexed(), batch_size=4, shuffle=True, num_workers=1, distributed=True, seed=5,
                           transforms=T.Compose([T.CenterCrop(4)]), device="cpu")
    assert isinstance(loader.sampler, torch.utils.data.distributed.DistributedSampler)
    record = {"len": len(loader), "epochs": []}
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        seen = []
        for images, targets in loader:
            assert torch.equal(images[:, 0, 0, 0].long(), targets)
            seen += targets.tolist()
        record["epochs"].append(seen)
    # exact resume per rank: interrupt epoch 2 after 2 batches, resume in a new loader
    for nw in (0, 2):
        def make():
            return td.DataLoader(Indexed(), batch_size=3, shuffle=True, num_workers=nw, distributed=True, seed=5,
                                 transforms=T.Compose([T.RandomResizedCrop(4), T.RandomHorizontalFlip()]),
                                 device="cpu")

        full = make()
        full.set_epoch(2)
        expected = [(x, y) for x, y in full]
        first = make()
        first.set_epoch(2)
        it = iter(first)
        got = [next(it) for _ in range(2)]
        state = first.state_dict()
        del it
        resumed = make()
        resumed.load_state_dict(state)
        got += [(x, y) for x, y in resumed]
        assert len(got) == len(expected)
        for (xa, ya), (xb, yb) in zip(got, expected):
            assert torch.equal(xa, xb) and torch.equal(ya, yb), (rank, nw)
        record[f"resume_ok_w{nw}"] = True
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
