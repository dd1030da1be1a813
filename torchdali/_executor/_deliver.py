"""The last step before the training loop gets a batch: batch transforms and the
user's ``collate_fn``.

A finished batch is ``images`` ``[B, C, H, W]`` plus its samples' targets. What the
loop receives (``Delivery``):

- by default (torch's ``default_collate``, no ``batch_transforms``):
  ``(images, default_collate(targets))``, the targets collated in the workers;
- ``batch_transforms=t``: ``t(images, default_collate(targets))``, which returns
  ``(images, targets)`` (MixUp, CutMix, a ``RandomChoice`` of them, any callable);
- ``collate_fn=f``: ``f([(images[0], target_0), (images[1], target_1), ...])``, as
  torch calls it on the dataset's items with each image decoded and transformed
  (``images[i]`` is a view of the batch; a sample is ``images[i]`` alone when the
  dataset has no targets). The targets travel to it uncollated.

A pipeline without a fixed output size (``transforms/_ragged.py``) lays each batch
out once its samples' sizes are drawn. A batch whose images share one size is the
``[B, C, H, W]`` tensor above, its targets collated by ``default_collate``; otherwise
``images`` is the list of the images (``[C, h_i, w_i]`` views of one buffer) and
``targets`` the list of the samples' targets, uncollated: what torchvision's
detection references get from ``collate_fn=lambda b: tuple(zip(*b))``. With
``BatchImages`` ``images`` is an ``ImageList`` and the targets a list. So the targets
leave the worker uncollated (``collate_targets``) and are collated where the batch's
layout is known (``settle_targets``). Targets holding boxes or masks are never
collated, whatever the layout: the loop gets the list of the samples' mapped targets
(a ``TargetList``, ``transforms/_target_plan.py``), the images stacked or not.
``collate_fn`` gets the samples with each sample's own image, as above; our batch
transforms (MixUp, CutMix) need a stacked batch and raise ValueError on another.

Randomness. A batch's draws are keyed by ``(seed, epoch, batch)`` (``batch_key``),
so the same seed gives the same batches for any ``num_workers`` and after a
mid-epoch resume. ``batch`` (``PackedBatch.first_position``) is the epoch position of the batch's first sample, as
the sampler placed it (one-to-one with the batch number for a given sampler, and
defined for iterable datasets too). Our ``BatchTransform``s draw from a
``_rng.Stream`` of the key and touch no global state. A foreign callable
(torchvision's MixUp draws from torch's global generator, timm's from numpy's) runs
with the global generators - torch's CPU generator, the device's CUDA generator,
numpy's and Python's - seeded from the key and restored afterwards (``seeded``).

Where it runs. CPU path: in the worker, after the reference kernel, as torch runs a
``collate_fn``: the workers are where the CPU path's work scales, each worker
process owns its generators, and the result travels back the way a torch
``collate_fn``'s does. GPU path: our transforms run on the executor thread, on its
stream, right after the kernels. Foreign callables run in the training loop's own
thread (``GpuIterator.__next__``), on its current stream once it has waited for the
batch: the generators ``seeded`` swaps are process-wide, and swapping them on the
executor thread would hand the training loop's own draws (dropout, its sampler)
our stream half-way through a step and rewind them afterwards.
"""
from __future__ import annotations

import contextlib
import random
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch.utils.data import default_collate

from .. import _rng
from ..transforms import _ragged
from ..transforms._batch import BatchTransform, to_batch_transform
from ..transforms._target_plan import TargetList


@contextlib.contextmanager
def seeded(key: int, device: torch.device | None = None) -> Iterator[None]:
    """Run the body with torch's CPU generator (and ``device``'s CUDA generator), numpy's and
    Python's global generators seeded from ``key``; their states are restored afterwards."""
    seed = key & 0x7FFFFFFFFFFFFFFF
    devices = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device is not None and device.type == "cuda" else []
    py_state, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=devices):
        torch.default_generator.manual_seed(seed)
        for d in devices:
            with torch.cuda.device(d):
                torch.cuda.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed & 0xFFFFFFFF)
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


def _is_default_collate(fn: Any) -> bool:
    return fn is None or fn is default_collate


class Delivery:
    """What turns a finished batch into what the loop gets (see the module docstring).

    ``collate_fn``: the user's (torch's ``default_collate`` counts as none: it gives the
    same batch as the fast path). ``batch_transforms``: converted to ours when it can be
    (``to_batch_transform``), else run as it is. Passing both raises ValueError.
    ``plan``: the loader's compiled pipeline (whether its output size varies).
    """

    def __init__(self, collate_fn: Callable | None = None, batch_transforms: Callable | None = None,
                 plan: Any = None) -> None:
        collate_fn = None if _is_default_collate(collate_fn) else collate_fn
        if collate_fn is not None and batch_transforms is not None:
            raise ValueError(
                "pass either collate_fn or batch_transforms, not both: collate_fn receives the samples "
                "[(image, target), ...] and returns the batch, so call the batch transform inside it, as "
                "torchvision's reference does: collate_fn=lambda b: mixup_cutmix(*default_collate(b))")
        if batch_transforms is not None and not callable(batch_transforms):
            raise TypeError(f"batch_transforms must be callable (images, targets) -> (images, targets), "
                            f"got {type(batch_transforms).__name__}")
        self.collate_fn = collate_fn
        self.native: BatchTransform | None = to_batch_transform(batch_transforms) \
            if batch_transforms is not None else None
        self.foreign_transform = batch_transforms if batch_transforms is not None and self.native is None else None
        #: the batches are laid out per batch (``_ragged.py``), so the targets are collated late
        self.varies = bool(plan is not None and plan.varies)

    @property
    def has_foreign(self) -> bool:
        """Whether a callable of the user's runs (under ``seeded`` global generators)."""
        return self.collate_fn is not None or self.foreign_transform is not None

    def collate_targets(self, targets: list) -> Any:
        """The targets as they leave the worker: collated, or the list itself for the user's
        collate_fn or a pipeline without a fixed output size (``settle_targets`` collates them)."""
        return list(targets) if self.collate_fn is not None or self.varies else default_collate(targets)

    def settle_targets(self, images: Any, targets: Any) -> Any:
        """The targets once the batch's images are laid out: collated for a stacked batch of a
        pipeline without a fixed output size, as they are otherwise. Idempotent."""
        if self.varies and self.collate_fn is None and isinstance(targets, list) \
                and not isinstance(targets, TargetList) and isinstance(images, torch.Tensor):
            return default_collate(targets)
        return targets

    def run_native(self, images: Any, targets: Any, has_target: bool, key: int) -> tuple[Any, Any]:
        """Our batch transform, if any, on ``(images, targets)``; thread-safe (no global state)."""
        targets = self.settle_targets(images, targets)
        if self.native is None:
            return images, targets
        if not isinstance(images, torch.Tensor):
            sizes = sorted({tuple(im.shape[1:]) for im in _ragged.unbind(images)})
            raise ValueError(
                f"{self.native!r} mixes the images of a batch, so they must share one size, but this batch's "
                f"images are {'padded from ' if isinstance(images, _ragged.ImageList) else ''}sizes {sizes[:4]}"
                f"{' ...' if len(sizes) > 4 else ''}: end the pipeline with a fixed-size step (CenterCrop, "
                f"RandomResizedCrop, Resize((h, w))) to use it")
        rng = _rng.Stream(key)
        if not has_target:
            return self.native.forward(images, rng), None
        images, targets = self.native.forward((images, targets), rng)
        return images, targets

    def run_foreign(self, images: Any, targets: Any, has_target: bool, key: int,
                    device: torch.device | None = None) -> Any:
        """What the loop gets, after the user's collate_fn or foreign batch transform (if any)."""
        if self.collate_fn is not None:
            views = _ragged.unbind(images)
            samples = list(zip(views, targets)) if has_target else list(views)
            with seeded(key, device):
                return self.collate_fn(samples)
        targets = self.settle_targets(images, targets)
        images = _ragged.for_loop(images)
        if self.foreign_transform is not None:
            with seeded(key, device):
                return self.foreign_transform(images, targets) if has_target else self.foreign_transform(images)
        return (images, targets) if has_target else images

    def finish(self, images: Any, targets: Any, has_target: bool, key: int,
               device: torch.device | None = None) -> Any:
        """What the loop gets, all steps in one place (CPU path, in the worker)."""
        images, targets = self.run_native(images, targets, has_target, key)
        return self.run_foreign(images, targets, has_target, key, device)
