"""Run by test_lightning.py: a user DataModule returning td.DataLoader under Trainer(strategy="ddp")."""
import json
import os
import sys

import numpy as np
import torch

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl

import torchdali as td
from torchdali import transforms as T


class Indexed(torch.utils.data.Dataset):
    def __len__(self):
        return 26

    def __getitem__(self, i):
        return np.full((10, 12, 3), i, dtype=np.uint8), i


class Data(pl.LightningDataModule):
    def train_dataloader(self):
        return td.DataLoader(Indexed(), batch_size=3, shuffle=True, num_workers=1, seed=1,
                             transforms=T.Compose([T.Resize((6, 6)), T.ToDtype(torch.float32)]), device="cpu",
                             memory_format=torch.channels_last)


class Model(pl.LightningModule):
    def __init__(self, out_dir):
        super().__init__()
        self.out_dir = out_dir
        self.layer = torch.nn.Linear(3 * 6 * 6, 1)
        self.seen = []
        self.loader_info = None

    def training_step(self, batch, batch_idx):
        images, targets = batch
        assert images.shape[1:] == (3, 6, 6) and images.is_contiguous(memory_format=torch.channels_last)
        assert torch.allclose(images[:, 0, 0, 0], targets.float())
        self.seen += targets.tolist()
        return self.layer(images.flatten(1)).mean()

    def on_train_epoch_start(self):
        loader = self.trainer.train_dataloader
        self.loader_info = {"type": type(loader).__name__, "sampler": type(loader.sampler).__name__,
                            "seed": loader.seed, "memory_format": str(loader.memory_format),
                            "device": str(loader.device)}

    def on_train_end(self):
        with open(os.path.join(self.out_dir, f"rank{self.global_rank}.json"), "w") as f:
            json.dump({"seen": self.seen, "loader": self.loader_info}, f)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    out = sys.argv[1]
    trainer = pl.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_epochs=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Model(out), Data())
