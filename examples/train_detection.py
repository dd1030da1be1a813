"""SSDlite320 detection training on a COCO-style set with torchdali and torchvision's SSD preset.

GPU:   python examples/train_detection.py --steps 20
CPU:   python examples/train_detection.py --device cpu --steps 2 --batch-size 4 --workers 0
Data:  python examples/train_detection.py --data DIR --ann DIR/annotations/instances_train2017.json

Without --data it trains on a small synthetic COCO-style set it makes itself.
Prints the loss of each step and images/s.
"""
from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import time
from collections import defaultdict

import numpy as np
import torch
from torchvision import tv_tensors
from torchvision.models.detection import ssdlite320_mobilenet_v3_large
from torchvision.transforms import v2

import torchdali as td

MEAN = (123.0, 117.0, 104.0)  # the detection reference's fill


def ssd_preset() -> v2.Compose:
    """``DetectionPresetTrain(data_augmentation="ssd", use_v2=True)`` of torchvision's detection reference,
    with ``Resize((320, 320))`` after the flip so the images of a batch stack."""
    return v2.Compose([v2.ToImage(), v2.RandomPhotometricDistort(),
                       v2.RandomZoomOut(fill=defaultdict(lambda: MEAN, {tv_tensors.Mask: 0})),
                       v2.RandomIoUCrop(), v2.RandomHorizontalFlip(p=0.5), v2.Resize((320, 320)),
                       v2.ToDtype(torch.float, scale=True),
                       v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
                       v2.SanitizeBoundingBoxes(), v2.ToPureTensor()])


def make_coco(root: str, num_images: int, seed: int = 0) -> str:
    """Write ``num_images`` 320x240 JPEGs with 1-6 random boxes each and their COCO json (unless there)."""
    from PIL import Image

    from torchdali._synthetic import synthetic_image

    ann_file = os.path.join(root, "instances.json")
    if os.path.exists(ann_file):
        return ann_file
    os.makedirs(root, exist_ok=True)
    rng, images, anns = np.random.default_rng(seed), [], []
    h, w = 240, 320
    for i in range(num_images):
        buf = io.BytesIO()
        Image.fromarray(synthetic_image(rng, h, w)).save(buf, format="JPEG", quality=90)
        with open(os.path.join(root, f"{i:06d}.jpg"), "wb") as f:
            f.write(buf.getvalue())
        images.append({"id": i, "file_name": f"{i:06d}.jpg", "height": h, "width": w})
        for _ in range(int(rng.integers(1, 7))):
            bw, bh = float(rng.uniform(16, w / 2)), float(rng.uniform(16, h / 2))
            x, y = float(rng.uniform(0, w - bw)), float(rng.uniform(0, h - bh))
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": int(rng.integers(1, 91)),
                         "bbox": [x, y, bw, bh], "area": bw * bh, "iscrowd": 0})
    cats = [{"id": c, "name": f"category{c}", "supercategory": "none"} for c in range(1, 91)]
    with open(ann_file, "w") as f:  # last, so a set stopped half way is made again
        json.dump({"images": images, "annotations": anns, "categories": cats}, f)
    return ann_file


def main(argv: list[str] | None = None) -> None:
    td.set_cuda_work_queues()  # before CUDA starts: nvJPEG's copies get queues of their own (README)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="images folder (default: a synthetic set it makes)")
    p.add_argument("--ann", default=None, help="COCO annotation file of --data")
    p.add_argument("--num-images", type=int, default=64, help="size of the synthetic set")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=20, help="training steps (the loader cycles epochs)")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if args.data is None:
        args.data = os.path.join(".torchdali_data", f"coco-synthetic-{args.num_images}")
        args.ann = make_coco(args.data, args.num_images)
    elif args.ann is None:
        p.error("--data needs --ann, its COCO annotation file")

    ds = td.datasets.CocoDetection(args.data, args.ann, target_keys=["boxes", "labels", "image_id"])
    loader = td.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                           drop_last=True, transforms=ssd_preset(), device=device, seed=0)
    torch.manual_seed(0)
    model = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=91).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    batches = (batch for _ in itertools.count() for batch in loader)  # epochs after epochs
    seen, t0 = 0, time.perf_counter()
    for step in range(1, args.steps + 1):
        images, targets = next(batches)  # images: [B, 3, 320, 320] float; targets: a list of dicts
        targets = [{"boxes": t["boxes"].to(device), "labels": t["labels"].to(device)} for t in targets]
        loss_dict = model(list(images), list(targets))
        loss = sum(loss_dict.values())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        seen += len(images)
        print(f"step {step}: loss {loss.item():.4f}", {k: round(v.item(), 3) for k, v in loss_dict.items()}, flush=True)
    batches.close()  # the epoch's iterator first, then the loader's workers and GPU state
    loader.close()
    print(f"{seen} images in {args.steps} steps: {seen / (time.perf_counter() - t0):.1f} images/s on {device}")


if __name__ == "__main__":
    main()
