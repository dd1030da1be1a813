"""Lightning: a user's own LightningDataModule returning torchdali.DataLoader.

    python examples/lightning_train.py --steps 5                       # one device
    python examples/lightning_train.py --devices 2 --strategy ddp      # DDP; Lightning injects the DistributedSampler

Without a data path it trains on a small synthetic ImageFolder it makes itself.
"""
from __future__ import annotations

import argparse
import os

import torch
import torchvision

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl

import torchdali as td
from torchdali import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class ImageNetData(pl.LightningDataModule):
    def __init__(self, root: str, batch_size: int, workers: int, image_size: int) -> None:
        super().__init__()
        self.root, self.batch_size, self.workers, self.image_size = root, batch_size, workers, image_size

    def train_dataloader(self):
        # an ordinary torch-style loader; Lightning swaps in a DistributedSampler under DDP
        return td.DataLoader(
            td.datasets.ImageFolder(self.root), batch_size=self.batch_size, shuffle=True,
            num_workers=self.workers, drop_last=True, seed=0,
            transforms=T.Compose([T.RandomResizedCrop(self.image_size), T.RandomHorizontalFlip(),
                                  T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)]),
            device="cuda" if torch.cuda.is_available() and self.trainer.strategy.root_device.type == "cuda" else "cpu",
        )


class Classifier(pl.LightningModule):
    def __init__(self, arch: str) -> None:
        super().__init__()
        self.model = getattr(torchvision.models, arch)(num_classes=10)

    def training_step(self, batch, batch_idx):
        images, targets = batch
        loss = torch.nn.functional.cross_entropy(self.model(images), targets)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def main() -> None:
    td.set_cuda_work_queues()  # before CUDA starts: nvJPEG's copies get queues of their own (README)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", nargs="?", default=None)
    p.add_argument("--arch", default="resnet18")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--strategy", default="auto")
    p.add_argument("--accelerator", default="auto")
    p.add_argument("--num-images", type=int, default=512, help="size of the synthetic dataset")
    args = p.parse_args()
    if args.data is None:
        from torchdali._synthetic import make_image_folder

        args.data = make_image_folder(os.path.join(".torchdali_data", f"synthetic-{args.num_images}"),
                                      args.num_images)
    trainer = pl.Trainer(max_steps=args.steps, devices=args.devices, strategy=args.strategy,
                         accelerator=args.accelerator, logger=False, enable_checkpointing=False,
                         enable_model_summary=False, limit_val_batches=0)
    trainer.fit(Classifier(args.arch), ImageNetData(args.data, args.batch_size, args.workers, args.image_size))
    print(f"trained {trainer.global_step} steps")


if __name__ == "__main__":
    main()
