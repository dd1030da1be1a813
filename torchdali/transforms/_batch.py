"""Batch transforms: MixUp and CutMix, which mix the samples of a finished batch.

The per-sample transforms (``_plan.py``) shape each image before it is part of a
batch; these run after the kernels, on the output batch ``[B, C, H, W]`` and its
collated labels, once per batch (``DataLoader(batch_transforms=...)``). They follow
torchvision.transforms.v2 (``MixUp``, ``CutMix``, ``RandomChoice`` of them): one
lambda per batch from Beta(alpha, alpha), each sample mixed with the batch rolled
by one, one-hot labels mixed with the same weight.

Randomness lives apart from execution, as for the per-sample transforms:
``make_params(inputs, rng)`` draws the batch's parameters from a ``_rng.Stream``
(the loader keys it by seed, epoch and batch, so runs replay and resume exactly);
``transform(inputs, params)`` applies them deterministically. Called directly
(``MixUp(...)(images, labels)``), a transform keys its stream from torch's global
generator, so ``torch.manual_seed`` governs it as it governs torchvision's.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable, Sequence

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from .. import _rng
from ._registry import from_torchvision, register

__all__ = [
    "BatchRandomChoice", "BatchTransform", "CutMix", "MixUp", "misplaced_error", "sample_beta", "to_batch_transform",
]


def _log_gamma(a: float, rng: _rng.Stream) -> float:
    """log of a Gamma(a, 1) variate (Marsaglia and Tsang's method; for a < 1, a
    Gamma(a + 1) variate times U**(1/a), kept in log space so tiny a cannot underflow)."""
    boost = 0.0
    if a < 1.0:
        boost = math.log(1.0 - rng.uniform(1)[0]) / a
        a += 1.0
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    while True:
        u1, u2, u3 = rng.uniform(3)
        x = math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)  # Box-Muller normal
        v = 1.0 + c * x
        if v <= 0.0:
            continue
        v = v * v * v
        if math.log(1.0 - u3) < 0.5 * x * x + d - d * v + d * math.log(v):
            return math.log(d * v) + boost


def sample_beta(alpha: float, beta: float, rng: _rng.Stream) -> float:
    """One Beta(alpha, beta) variate drawn from ``rng``: X / (X + Y) of two Gamma variates."""
    lx, ly = _log_gamma(alpha, rng), _log_gamma(beta, rng)
    return 1.0 / (1.0 + math.exp(min(ly - lx, 700.0)))


def _default_labels(inputs: Any) -> Any:
    """torchvision's default ``labels_getter``: the second item of a tuple/list when it is
    a tensor; else, in a dict (the second item, or the input itself), the value under a
    key equal to "labels" or, failing that, containing "label" (case-insensitive)."""
    if isinstance(inputs, (tuple, list)):
        inputs = inputs[1]
    if isinstance(inputs, torch.Tensor):
        return inputs
    if not isinstance(inputs, Mapping):
        raise ValueError("with the default labels_getter, the input must be a dict or a two-tuple whose second "
                         f"item is a dict or a tensor, got {type(inputs).__name__}")
    keys = [k for k in inputs if isinstance(k, str)]
    key = next((k for k in keys if k.lower() == "labels"), None)
    if key is None:
        key = next((k for k in keys if "label" in k.lower()), None)
    if key is None:
        raise ValueError("could not find the labels in the input; pass labels_getter=callable")
    return inputs[key]


def _parse_labels_getter(labels_getter: str | Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    if labels_getter == "default":
        return _default_labels
    if callable(labels_getter):
        return labels_getter
    if labels_getter is None:
        return lambda _: None
    raise ValueError(f"labels_getter must be 'default', a callable or None, got {labels_getter!r}")


def misplaced_error(t: Any) -> ValueError:
    """The error for a batch transform found in a per-sample pipeline."""
    return ValueError(f"{type(t).__name__} mixes the samples of a batch, so it runs on the finished batch: pass it "
                      f"as DataLoader(batch_transforms=...) (or call it in collate_fn), not in transforms=")


class BatchTransform:
    """Base class of the transforms that run on a whole output batch (see the module docstring)."""

    def make_params(self, inputs: Any, rng: _rng.Stream) -> dict[str, Any]:
        """The batch's random parameters, drawn from ``rng``; ``inputs`` as ``__call__`` takes them."""
        return {}

    def transform(self, inputs: Any, params: dict[str, Any]) -> Any:
        """Apply ``params`` to ``inputs`` (deterministic); returns outputs of the same structure."""
        return inputs

    def check_dtype(self, dtype: torch.dtype) -> None:
        """Raise ValueError if this transform cannot run on image batches of ``dtype``."""

    def forward(self, inputs: Any, rng: _rng.Stream) -> Any:
        """Draw the parameters from ``rng`` and apply them."""
        return self.transform(inputs, self.make_params(inputs, rng))

    def __call__(self, *inputs: Any) -> Any:
        """``t(images, labels)`` (or any structure the labels getter understands), as torchvision's."""
        inputs = inputs if len(inputs) > 1 else inputs[0]
        key = int(torch.randint(0, 2**62, (), dtype=torch.int64))  # torch.manual_seed governs direct calls
        return self.forward(inputs, _rng.Stream(key))

    def leaves(self) -> Any:
        # reached when a batch transform sits in a per-sample pipeline (compile_transforms walks leaves)
        raise misplaced_error(self)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.extra_repr()})"


class _MixBase(BatchTransform):
    """What MixUp and CutMix share: labels, checks, and the mixing of labels."""

    def __init__(self, *, alpha: float = 1.0, num_classes: int | None = None,
                 labels_getter: str | Callable[[Any], Any] | None = "default") -> None:
        alpha = float(alpha)
        if not alpha > 0.0 or math.isinf(alpha):
            raise ValueError(f"{type(self).__name__}: alpha must be a positive number, got {alpha}")
        if num_classes is not None and int(num_classes) < 1:
            raise ValueError(f"{type(self).__name__}: num_classes must be >= 1 or None, got {num_classes}")
        self.alpha = alpha
        self.num_classes = None if num_classes is None else int(num_classes)
        self.labels_getter = labels_getter
        self._labels_getter = _parse_labels_getter(labels_getter)

    @classmethod
    def from_torchvision(cls, t: Any) -> _MixBase:
        getter = getattr(t, "_labels_getter", None)
        if getter is None or getattr(getter, "__name__", "") == "_find_labels_default_heuristic":
            getter = "default"
        return cls(alpha=t.alpha, num_classes=t.num_classes, labels_getter=getter)

    def _find(self, inputs: Any) -> tuple[list, Any, int, torch.Tensor, int]:
        """(flat inputs, their spec, index of the images, labels, index of the labels).

        The labels come from the labels getter; the images are the first other tensor.
        """
        flat, spec = tree_flatten(inputs)
        labels = self._labels_getter(inputs)
        name = type(self).__name__
        if not isinstance(labels, torch.Tensor):
            raise ValueError(f"{name}: the labels must be a tensor, got {type(labels).__name__}")
        if labels.ndim not in (1, 2):
            raise ValueError(f"{name}: labels must be class indices of shape (batch_size,) or probabilities of "
                             f"shape (batch_size, num_classes), got shape {tuple(labels.shape)}")
        if labels.ndim == 2 and self.num_classes is not None and labels.shape[-1] != self.num_classes:
            raise ValueError(f"{name}: 2-D labels have {labels.shape[-1]} classes but num_classes is "
                             f"{self.num_classes}; leave num_classes=None")
        if labels.ndim == 1 and self.num_classes is None:
            raise ValueError(f"{name}: num_classes must be given when the labels are class indices (1-D)")
        i_labels = next(i for i, x in enumerate(flat) if x is labels)
        i_images = next((i for i, x in enumerate(flat) if isinstance(x, torch.Tensor) and i != i_labels), None)
        if i_images is None:
            raise ValueError(f"{name}: no image batch in the input")
        images = flat[i_images]
        if images.ndim < 4:
            raise ValueError(f"{name}: expected a batch of images [B, C, H, W], got shape {tuple(images.shape)}")
        if images.shape[0] != labels.shape[0]:
            raise ValueError(f"{name}: the image batch has {images.shape[0]} samples but the labels have "
                             f"{labels.shape[0]}")
        return flat, spec, i_images, labels, i_labels

    def _mix_labels(self, labels: torch.Tensor, lam: float) -> torch.Tensor:
        if labels.ndim == 1:
            labels = torch.nn.functional.one_hot(labels, num_classes=self.num_classes)
        if not labels.dtype.is_floating_point:
            labels = labels.float()
        return labels.roll(1, 0).mul_(1.0 - lam).add_(labels.mul(lam))

    def _apply(self, inputs: Any, mix_images: Callable[[torch.Tensor], torch.Tensor], lam: float) -> Any:
        flat, spec, i_images, labels, i_labels = self._find(inputs)
        images = flat[i_images]
        out = mix_images(images)
        if type(images) is not torch.Tensor:  # keep a tensor subclass (tv_tensors.Image) as torchvision does
            out = out.as_subclass(type(images))
        flat = list(flat)
        flat[i_images], flat[i_labels] = out, self._mix_labels(labels, lam)
        return tree_unflatten(flat, spec)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, num_classes={self.num_classes}"


@register("MixUp", usage="MixUp(alpha=1.0, num_classes=None, labels_getter='default')",
          semantics="yes: one Beta(alpha, alpha) lambda per batch, pairs by rolling the batch by one",
          notes="batch transform: `DataLoader(batch_transforms=...)`; needs float images")
class MixUp(_MixBase):
    """MixUp on a batch, as ``torchvision.transforms.v2.MixUp``: ``lam ~ Beta(alpha, alpha)``
    once per batch; ``images = lam * images + (1 - lam) * images.roll(1, 0)``; class-index
    labels become one-hot (``num_classes``) and are mixed with the same ``lam``."""

    def check_dtype(self, dtype: torch.dtype) -> None:
        if not dtype.is_floating_point:
            raise ValueError(f"MixUp needs a floating-point image batch, but the transforms produce {dtype}: end "
                             f"them with ToDtype(torch.float32, scale=True)")

    def make_params(self, inputs: Any, rng: _rng.Stream) -> dict[str, Any]:
        return {"lam": sample_beta(self.alpha, self.alpha, rng)}

    def transform(self, inputs: Any, params: dict[str, Any]) -> Any:
        lam = params["lam"]

        def mix(images: torch.Tensor) -> torch.Tensor:
            if not images.dtype.is_floating_point:
                raise TypeError(f"MixUp needs a floating-point image batch, got {images.dtype}: end the per-sample "
                                f"transforms with ToDtype(torch.float32, scale=True)")
            images = images.as_subclass(torch.Tensor)
            return images.roll(1, 0).mul_(1.0 - lam).add_(images.mul(lam))

        return self._apply(inputs, mix, lam)


@register("CutMix", usage="CutMix(alpha=1.0, num_classes=None, labels_getter='default')",
          semantics="yes: torchvision's box sampling, lambda corrected by the box area",
          notes="batch transform: `DataLoader(batch_transforms=...)`; a `v2.RandomChoice` of MixUp/CutMix "
                "becomes `BatchRandomChoice`")
class CutMix(_MixBase):
    """CutMix on a batch, as ``torchvision.transforms.v2.CutMix``: ``lam ~ Beta(alpha, alpha)``
    once per batch; a box centred at a uniform pixel with sides ``sqrt(1 - lam)`` of the
    image's (clipped to it) is pasted from ``images.roll(1, 0)``; labels are mixed with
    ``1 - box area / image area``."""

    def make_params(self, inputs: Any, rng: _rng.Stream) -> dict[str, Any]:
        flat, _, i_images, _, _ = self._find(inputs)
        height, width = flat[i_images].shape[-2:]
        lam = sample_beta(self.alpha, self.alpha, rng)
        u_x, u_y = rng.uniform(2)
        r_x, r_y = min(int(u_x * width), width - 1), min(int(u_y * height), height - 1)
        r = 0.5 * math.sqrt(1.0 - lam)
        r_w_half, r_h_half = int(r * width), int(r * height)
        x1, y1 = max(r_x - r_w_half, 0), max(r_y - r_h_half, 0)
        x2, y2 = min(r_x + r_w_half, width), min(r_y + r_h_half, height)
        lam_adjusted = float(1.0 - (x2 - x1) * (y2 - y1) / (width * height))
        return {"box": (x1, y1, x2, y2), "lam_adjusted": lam_adjusted}

    def transform(self, inputs: Any, params: dict[str, Any]) -> Any:
        x1, y1, x2, y2 = params["box"]

        def paste(images: torch.Tensor) -> torch.Tensor:
            out = images.as_subclass(torch.Tensor).clone()
            out[..., y1:y2, x1:x2] = out[..., y1:y2, x1:x2].roll(1, 0)
            return out

        return self._apply(inputs, paste, params["lam_adjusted"])


class BatchRandomChoice(BatchTransform):
    """One of ``transforms`` per batch, picked with probabilities ``p`` (normalised; default:
    equal), as ``torchvision.transforms.v2.RandomChoice``; what torchvision's reference
    recipe's ``RandomChoice([MixUp(...), CutMix(...)])`` converts to."""

    def __init__(self, transforms: Sequence[Any], p: Sequence[float] | None = None) -> None:
        if not isinstance(transforms, Sequence) or not transforms:
            raise ValueError("BatchRandomChoice: pass a non-empty sequence of batch transforms")
        converted = [to_batch_transform(t) for t in transforms]
        bad = [t for t, c in zip(transforms, converted) if c is None]
        if bad:
            raise ValueError(f"BatchRandomChoice: {bad[0]!r} is not a batch transform (MixUp, CutMix, ...)")
        p = [1.0] * len(converted) if p is None else [float(x) for x in p]
        if len(p) != len(converted):
            raise ValueError(f"BatchRandomChoice: {len(p)} probabilities for {len(converted)} transforms")
        if any(x < 0 for x in p) or sum(p) <= 0:
            raise ValueError(f"BatchRandomChoice: p must be non-negative with a positive sum, got {p}")
        total = sum(p)
        self.transforms = converted
        self.p = [x / total for x in p]

    def check_dtype(self, dtype: torch.dtype) -> None:
        for t, p in zip(self.transforms, self.p):
            if p > 0:
                t.check_dtype(dtype)

    def make_params(self, inputs: Any, rng: _rng.Stream) -> dict[str, Any]:
        u = rng.uniform(1)[0]
        index, acc = max(i for i, x in enumerate(self.p) if x > 0), 0.0  # the last, if rounding leaves u past the sum
        for i, x in enumerate(self.p):
            acc += x
            if u < acc and x > 0:
                index = i
                break
        return {"index": index, "params": self.transforms[index].make_params(inputs, rng)}

    def transform(self, inputs: Any, params: dict[str, Any]) -> Any:
        return self.transforms[params["index"]].transform(inputs, params["params"])

    def extra_repr(self) -> str:
        return f"{self.transforms!r}, p={self.p}"


def to_batch_transform(obj: Any) -> BatchTransform | None:
    """``obj`` as one of our batch transforms, or None when it has no equivalent (then it
    is a plain callable the loader runs as it is).

    Converts torchvision's MixUp and CutMix (through the registry) and a torchvision
    RandomChoice whose members all convert.
    """
    if isinstance(obj, BatchTransform):
        return obj
    module, name = type(obj).__module__ or "", type(obj).__name__
    if not module.startswith("torchvision"):
        return None
    if name == "RandomChoice":
        members = [to_batch_transform(t) for t in getattr(obj, "transforms", ())]
        if members and all(m is not None for m in members):
            return BatchRandomChoice(members, p=list(obj.p) if getattr(obj, "p", None) is not None else None)
        return None
    if name in ("MixUp", "CutMix"):
        return from_torchvision(obj)
    return None
