"""torchdali.lightning.ImageFolderDataModule with a Lightning Trainer on the CPU."""
from __future__ import annotations

import pytest
import torch

from ._helpers import make_folder

pl = pytest.importorskip("lightning.pytorch")


def test_image_folder_datamodule_trains_and_validates(tmp_path):
    from torchdali import DataLoader
    from torchdali import transforms as T
    from torchdali.lightning import ImageFolderDataModule

    train = make_folder(tmp_path / "train", n=12, classes=3)
    val = make_folder(tmp_path / "val", n=6, classes=3, seed=1)
    dm = ImageFolderDataModule(
        train, val, batch_size=4, num_workers=0, seed=3,
        train_transforms=T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(),
                                    T.ToDtype(torch.float32, scale=True)]),
        val_transforms=T.Compose([T.Resize(36), T.CenterCrop(32), T.ToDtype(torch.float32, scale=True)]),
    )
    shapes = []

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 3))

        def training_step(self, batch, _):
            x, y = batch
            shapes.append(tuple(x.shape))
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def validation_step(self, batch, _):
            x, y = batch
            shapes.append(tuple(x.shape))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = pl.Trainer(max_steps=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=1)
    trainer.fit(Tiny(), dm)
    assert trainer.global_step == 3
    assert shapes and all(s[1:] == (3, 32, 32) for s in shapes)
    loader = dm.train_dataloader()
    assert isinstance(loader, DataLoader) and loader.device.type == "cpu" and loader.seed == 3
    assert dm.train_set.classes == ["c0", "c1", "c2"]


def test_a_loader_lightning_reinstantiates_gets_the_arguments_and_none_of_the_state(tmp_path):
    """Lightning rebuilds a loader from its ``__init__`` arguments (to put a sampler in) and sets
    again each attribute set outside ``__init__`` while its dataloader hook ran; the loader's
    own state lives in its runtime object, not in its attributes, so the new loader starts fresh."""
    import torch.utils.data as tud
    from lightning.fabric.utilities.data import _replace_dunder_methods, _update_dataloader

    from torchdali import DataLoader
    from torchdali import transforms as T
    from torchdali.datasets import ImageFolder

    ds = ImageFolder(make_folder(tmp_path, n=6))
    with _replace_dunder_methods(tud.DataLoader, "dataset"):  # what Lightning does around the hook
        loader = DataLoader(ds, batch_size=2, transforms=T.Compose([T.Resize((16, 16))]), device="cpu", seed=3)
        next(iter(loader))
    assert loader._runtime.inner is not None and loader._runtime.epochs_started == 1
    new = _update_dataloader(loader, tud.SequentialSampler(ds))
    assert type(new) is DataLoader and new.seed == 3 and new.transforms is loader.transforms
    assert new._runtime is not loader._runtime
    assert new._runtime.inner is None and new._runtime.epochs_started == 0 and new.stats() is not loader.stats()
    assert [x.shape for x, _ in new] == [(2, 3, 16, 16)] * 3
