"""ResNet training on an ImageFolder with torchdali (or torchvision's DataLoader to compare).

Single process:   python examples/train_imagenet.py --steps 50
torchrun:         torchrun --nproc_per_node=2 examples/train_imagenet.py --steps 50
Compare:          python examples/train_imagenet.py --loader torchvision

Without a data path it trains on a small synthetic ImageFolder it makes itself.
Prints images/s and the fraction of step time spent waiting for data.
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torchvision

import torchdali as td
from torchdali import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def build_loader(args, device: torch.device, distributed: bool):
    if args.loader == "torchdali":
        ds = td.datasets.ImageFolder(args.data)
        tf = T.Compose([T.RandomResizedCrop(args.image_size), T.RandomHorizontalFlip(),
                        T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])
        return td.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                             drop_last=True, transforms=tf, device=device, seed=args.seed,
                             distributed=distributed, memory_format=torch.channels_last)
    from torchvision.transforms import v2

    tf = v2.Compose([v2.RandomResizedCrop(args.image_size), v2.RandomHorizontalFlip(), v2.ToImage(),
                     v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    ds = torchvision.datasets.ImageFolder(args.data, transform=tf)
    sampler = torch.utils.data.distributed.DistributedSampler(ds, seed=args.seed) if distributed else None
    return torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler,
                                       num_workers=args.workers, drop_last=True,
                                       pin_memory=device.type == "cuda")


def main() -> None:
    td.set_cuda_work_queues()  # before CUDA starts: nvJPEG's copies get queues of their own (README)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", nargs="?", default=None)
    p.add_argument("--loader", choices=["torchdali", "torchvision"], default="torchdali")
    p.add_argument("--arch", default="resnet50")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    p.add_argument("--steps", type=int, default=100, help="training steps (the loader cycles epochs)")
    p.add_argument("--warmup-steps", type=int, default=5, help="steps left out of the timing")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-images", type=int, default=512, help="size of the synthetic dataset")
    args = p.parse_args()

    distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if distributed:
        # NCCL needs one GPU per process; ranks sharing a GPU fall back to gloo
        shared = device.type == "cuda" and torch.cuda.device_count() < int(os.environ["WORLD_SIZE"])
        dist.init_process_group("nccl" if device.type == "cuda" and not shared else "gloo")
    rank = dist.get_rank() if distributed else 0

    if args.data is None:
        from torchdali._synthetic import make_image_folder

        path = os.path.join(".torchdali_data", f"synthetic-{args.num_images}")
        if rank == 0:
            make_image_folder(path, args.num_images, progress=True)
        if distributed:
            dist.barrier()
        args.data = path

    torch.manual_seed(args.seed)
    model = getattr(torchvision.models, args.arch)(num_classes=1000).to(device, memory_format=torch.channels_last)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    amp_dtype = torch.bfloat16
    loader = build_loader(args, device, distributed)

    step, images_seen, wait_s, t_start = 0, 0, 0.0, None
    epoch = 0
    while step < args.steps:
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        it = iter(loader)
        while step < args.steps:
            t0 = time.perf_counter()
            try:
                images, targets = next(it)
            except StopIteration:
                break
            images = images.to(device, non_blocking=True, memory_format=torch.channels_last)
            targets = targets.to(device, non_blocking=True)
            t1 = time.perf_counter()
            with torch.autocast(device.type, dtype=amp_dtype):
                loss = torch.nn.functional.cross_entropy(model(images), targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # per-step timing: make the step's GPU work part of the step
            step += 1
            if step == args.warmup_steps:
                t_start, images_seen, wait_s = time.perf_counter(), 0, 0.0
            elif step > args.warmup_steps:
                images_seen += images.shape[0]
                wait_s += t1 - t0
        del it
        epoch += 1

    if t_start is not None and images_seen:
        elapsed = time.perf_counter() - t_start
        world = dist.get_world_size() if distributed else 1
        line = (f"[rank {rank}] {args.loader}: {images_seen / elapsed:.1f} images/s per process "
                f"({images_seen * world / elapsed:.1f} total), data wait {100 * wait_s / elapsed:.1f}% of step time, "
                f"last loss {loss.item():.3f}")
        print(line, flush=True)
    else:
        print(f"[rank {rank}] ran {step} steps (too few to time after {args.warmup_steps} warm-up steps)")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
