"""torchrun helpers."""
from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data.distributed import DistributedSampler


def world() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torch.distributed or the torchrun environment."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        rank, size = torch.distributed.get_rank(), torch.distributed.get_world_size()
    else:
        rank, size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    return rank, size, int(os.environ.get("LOCAL_RANK", rank))


def distributed_sampler(dataset: Any, shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> DistributedSampler:
    """A ``DistributedSampler`` for this process's rank, built from the torchrun environment."""
    rank, size, _ = world()
    return DistributedSampler(dataset, num_replicas=size, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
