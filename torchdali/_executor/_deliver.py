"""The last step before the training loop gets a batch: our batch transforms and the
user's ``collate_fn`` (or a batch transform of theirs that is not ours), run by
``Delivery.deliver`` at each stage a batch passes, as ``placement`` decides.

What the loop gets: by default ``(images, default_collate(targets))``; with
``batch_transforms=t``, ``t(images, default_collate(targets))``; with ``collate_fn=f``,
``f([(images[0], target_0), ...])``, as torch calls it on the dataset's items
(``images[i]`` a view of the batch, alone when the dataset has no targets), the targets
uncollated.

Targets. A pipeline without a fixed output size lays each batch out once its sizes are
drawn (``transforms/_ragged.py``): a batch whose images share one size is stacked and its
targets collated, otherwise the loop gets a list of images (or an ``ImageList``) and the
list of targets, as torchvision's detection references do. So such targets leave the
worker uncollated (``collate_targets``) and are collated where the layout is known
(``settle_targets``). Targets holding boxes or masks are never collated (``TargetList``).

Randomness. A batch's draws are keyed by ``(seed, epoch, batch)``, ``batch`` being the
epoch position of its first sample as the sampler placed it, so the same seed gives the
same batches for any ``num_workers`` and after a mid-epoch resume. Ours draw from a
``_rng.Stream`` of the key and touch no global state; the user's callables (torchvision's
MixUp draws from torch's global generator, timm's from numpy's) run with the global
generators seeded from the key and restored afterwards (``seeded``).

Where each part runs (``placement``). CPU path: in the worker, as torch runs a
``collate_fn``: the workers are where the CPU path's work scales, each worker process owns
its generators, and the result travels back as a ``collate_fn``'s does. A batch with
nothing to run there crosses as it is and the loop finishes it: a ragged batch crosses as
one buffer and its targets inline (``_wire.py``), its list of image views would not. GPU
path: ours on the executor thread, on its stream, right after the kernels; the user's in
the loop's thread, on its stream once it has waited for the batch: the generators
``seeded`` swaps are process-wide, and swapping them on the executor thread would hand the
loop's own draws (dropout, its sampler) our stream half-way through a step and rewind them
afterwards. The executor never finishes a batch: the loop waits for its ready event and
records its tensors on the loop's stream first.
"""
from __future__ import annotations

import contextlib
import enum
import random
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np
import torch
from torch.utils.data import default_collate

from .. import _rng
from ..transforms import _ragged
from ..transforms._batch import BatchTransform, to_batch_transform
from ..transforms._target_plan import TargetList
from ._wire import PackedBatch


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


class Stage(enum.Enum):
    """Where ``Delivery.deliver`` is called, in the order a batch passes them."""

    WORKER = "worker"  # CPU path: the DataLoader worker, after the reference kernel
    EXECUTOR = "executor"  # GPU path: the executor thread, on its stream, after the kernels
    LOOP = "loop"  # the training loop's thread, in the iterator's ``__next__``


class Placement(NamedTuple):
    """The stage at which each part of delivery runs (``placement``)."""

    #: the targets laid out as the images are (``settle_targets``), a tensor on the batch's device
    targets: Stage
    #: our batch transform
    ours: Stage
    #: the loop's form of the batch (a ragged batch's list of images), the user's callable
    #: included: a collate_fn returns that form
    finish: Stage


def placement(path: str, runs: bool) -> Placement:
    """Where each part of delivery runs on ``path`` (``"cpu"``, ``"gpu"``) for a loader that
    has (``runs``) or has not a batch transform or collate_fn: the one policy (why: the module
    docstring)."""
    if path == "gpu":
        return Placement(targets=Stage.EXECUTOR, ours=Stage.EXECUTOR, finish=Stage.LOOP)
    if runs:
        return Placement(targets=Stage.WORKER, ours=Stage.WORKER, finish=Stage.WORKER)
    return Placement(targets=Stage.LOOP, ours=Stage.LOOP, finish=Stage.LOOP)


class Pending(NamedTuple):
    """A batch that a later stage finishes (``Delivery.deliver``)."""

    images: Any
    targets: Any


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
        runs = collate_fn is not None or batch_transforms is not None
        self.places = {path: placement(path, runs) for path in ("cpu", "gpu")}

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

    def deliver(self, batch: PackedBatch, images: Any, targets: Any, stage: Stage,
                device: torch.device | None = None) -> Any:
        """The parts of delivery that ``placement`` puts at ``stage``, on ``batch``'s ``images``
        and ``targets``: what the loop gets where the batch is finished, else ``Pending``.
        ``device``: the batch's (a CUDA device: the GPU path)."""
        at = self.places["gpu" if device is not None and device.type == "cuda" else "cpu"]
        if at.targets is stage:
            targets = self.settle_targets(images, targets)
            if device is not None and isinstance(targets, torch.Tensor) and targets.device != device:
                targets = targets.to(device, non_blocking=True)
        if at.ours is stage and self.native is not None:
            images, targets = self._run_ours(images, targets, batch)
        if at.finish is not stage:
            return Pending(images, targets)
        if self.collate_fn is not None:
            views = _ragged.unbind(images)
            samples = list(zip(views, targets)) if batch.has_target else list(views)
            with seeded(_key(batch), device):
                return self.collate_fn(samples)
        images = _ragged.for_loop(images)
        if self.foreign_transform is not None:
            with seeded(_key(batch), device):
                return self.foreign_transform(images, targets) if batch.has_target \
                    else self.foreign_transform(images)
        return (images, targets) if batch.has_target else images

    def _run_ours(self, images: Any, targets: Any, batch: PackedBatch) -> tuple[Any, Any]:
        if not isinstance(images, torch.Tensor):
            sizes = sorted({tuple(im.shape[1:]) for im in _ragged.unbind(images)})
            raise ValueError(
                f"{self.native!r} mixes the images of a batch, so they must share one size, but this batch's "
                f"images are {'padded from ' if isinstance(images, _ragged.ImageList) else ''}sizes {sizes[:4]}"
                f"{' ...' if len(sizes) > 4 else ''}: end the pipeline with a fixed-size step (CenterCrop, "
                f"RandomResizedCrop, Resize((h, w))) to use it")
        rng = _rng.Stream(_key(batch))
        if not batch.has_target:
            return self.native.forward(images, rng), None
        return self.native.forward((images, targets), rng)


def _key(batch: PackedBatch) -> int:
    return _rng.batch_key(batch.seed, batch.epoch, batch.first_position)
