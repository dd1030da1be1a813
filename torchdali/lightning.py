"""Lightning integration: ``ImageFolderDataModule`` built on ``torchdali.DataLoader``.

Lightning is imported only when this module is imported. A user's own
``LightningDataModule`` whose ``train_dataloader()`` returns ``td.DataLoader``
works too: Lightning re-creates DataLoader subclasses from their ``__init__``
arguments to inject a ``DistributedSampler``, and every torchdali argument is an
``__init__`` argument; GPU state is created lazily on first iteration, on the
process's own device.
"""
from __future__ import annotations

from typing import Any

import torch

try:
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover - the older package name
    import pytorch_lightning as pl  # type: ignore[no-redef]

from . import transforms as T
from .dataloader import DataLoader
from .datasets import ImageFolder

__all__ = ["ImageFolderDataModule"]

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def default_train_transforms(size: int = 224) -> T.Compose:
    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(),
                      T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])


def default_val_transforms(size: int = 224, resize: int = 256) -> T.Compose:
    return T.Compose([T.Resize(resize), T.CenterCrop(size), T.ToDtype(torch.float32, scale=True),
                      T.Normalize(MEAN, STD)])


class ImageFolderDataModule(pl.LightningDataModule):
    """Train/val ImageFolders decoded and augmented by torchdali on the trainer's device.

    Args:
        train_root, val_root: ImageFolder roots (``val_root`` optional).
        batch_size, num_workers: as in ``DataLoader``.
        train_transforms, val_transforms: torchdali (or torchvision v2) Compose;
            default: the ResNet-50 recipes.
        seed: per-sample augmentation seed.
        device: ``"cpu"``/``"cuda"``; default: the trainer's root device.
        loader_kwargs: passed to both DataLoaders.
    """

    def __init__(self, train_root: str, val_root: str | None = None, batch_size: int = 256,
                 num_workers: int = 8, train_transforms: Any = None, val_transforms: Any = None,
                 seed: int = 0, device: str | torch.device | None = None, **loader_kwargs: Any) -> None:
        super().__init__()
        self.train_root, self.val_root = train_root, val_root
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.train_transforms = train_transforms or default_train_transforms()
        self.val_transforms = val_transforms or default_val_transforms()
        self.device = device
        self.loader_kwargs = loader_kwargs
        self.train_set: ImageFolder | None = None
        self.val_set: ImageFolder | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is None:
            self.train_set = ImageFolder(self.train_root)
        if self.val_root is not None and self.val_set is None:
            self.val_set = ImageFolder(self.val_root)

    def _device(self) -> torch.device:
        if self.device is not None:
            return torch.device(self.device)
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            root = trainer.strategy.root_device
            return root if root.type in ("cuda", "cpu") else torch.device("cpu")
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def train_dataloader(self) -> DataLoader:
        self.setup("fit")
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers,
                          drop_last=True, transforms=self.train_transforms, device=self._device(), seed=self.seed,
                          **self.loader_kwargs)

    def val_dataloader(self) -> DataLoader:
        self.setup("validate")
        if self.val_set is None:
            raise ValueError("ImageFolderDataModule: no val_root was given")
        return DataLoader(self.val_set, batch_size=self.batch_size, shuffle=False, num_workers=self.num_workers,
                          transforms=self.val_transforms, device=self._device(), seed=self.seed,
                          **self.loader_kwargs)
