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
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
