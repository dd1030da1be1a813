"""A Compose compiled into what the fused kernel needs for one batch."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from .. import _rng
from . import _geometry as G
from ._convert import to_torchdali
from ._transforms import Compose, Transform, _iter_leaves, _StaticState


@dataclass(frozen=True)
class Plan:
    """Static description of a pipeline plus per-batch parameter sampling."""

    transforms: tuple[Transform, ...]
    out_size: tuple[int, int]
    out_dtype: torch.dtype
    scale: tuple[float, float, float]
    bias: tuple[float, float, float]
    quantize: bool
    antialias: bool

    def geometry(self, sizes: np.ndarray, keys: np.ndarray) -> G.BatchGeometry:
        """Per-sample geometry for images of ``sizes`` ([B, 2] H, W) with sample ``keys``."""
        g = G.BatchGeometry.identity(sizes)
        for stream, t in enumerate(self.transforms):
            u = _rng.uniform(keys, stream, t.n_uniforms) if t.n_uniforms else None
            t._apply(g, u)
        return g

    def params(self, sizes: np.ndarray, keys: np.ndarray) -> torch.Tensor:
        """``[B, 12]`` float32 kernel parameters."""
        return self.geometry(sizes, keys).to_params()


def compile_transforms(transforms: Any) -> Plan:
    """Validate a (torchdali or torchvision) Compose and compile it.

    Raises ValueError when a transform is unsupported or the output size depends on
    the input image (the batch could not be stacked).
    """
    if transforms is None:
        raise ValueError("transforms is None")
    if isinstance(transforms, Sequence) and not isinstance(transforms, (str, bytes)):
        transforms = Compose(list(transforms))
    root = to_torchdali(transforms)
    leaves = tuple(_iter_leaves(root))
    s = _StaticState()
    for t in leaves:
        t._static(s)
    if s.size is None:
        raise ValueError(
            "the transforms do not produce a fixed output size, so a batch cannot be stacked; "
            f"end the pipeline with a fixed-size transform such as CenterCrop or Resize((h, w)): {root!r}"
        )
    return Plan(
        transforms=leaves,
        out_size=s.size,
        out_dtype=s.dtype if s.dtype != torch.float64 else torch.float32,
        scale=tuple(s.scale),
        bias=tuple(s.bias),
        quantize=s.quantize,
        antialias=s.antialias,
    )


def pack_images(images: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pack HWC uint8 images back to back: (data, offsets[B], shapes[B, 3])."""
    shapes = torch.tensor([list(im.shape) for im in images], dtype=torch.int64).reshape(-1, 3)
    numel = shapes.prod(dim=1)
    offsets = torch.zeros(len(images), dtype=torch.int64)
    if len(images) > 1:
        offsets[1:] = torch.cumsum(numel, 0)[:-1]
    data = torch.cat([im.reshape(-1) for im in images]) if images else torch.empty(0, dtype=torch.uint8)
    return data, offsets, shapes


def run_reference(plan: Plan, images: Sequence[torch.Tensor], params: torch.Tensor,
                  channels_last: bool = False) -> torch.Tensor:
    """Run ``plan`` with ``params`` on HWC uint8 CPU images with the plain-torch reference kernel."""
    from csrc_triton import resized_crop_reference

    data, offsets, shapes = pack_images(images)
    return resized_crop_reference(
        data, offsets, shapes, params, plan.out_size, plan.scale, plan.bias,
        out_dtype=plan.out_dtype, channels_last=channels_last, antialias=plan.antialias,
        quantize=plan.quantize,
    )


def apply_to_images(transforms: Any, images: Sequence[torch.Tensor], seed: int = 0) -> list[torch.Tensor]:
    """Apply a pipeline to single images (CHW or HWC uint8), returning CHW outputs."""
    plan = compile_transforms(transforms)
    hwc = [to_hwc(im) for im in images]
    keys = _rng.sample_keys(seed, 0, np.arange(len(hwc)))
    params = plan.params(np.array([im.shape[:2] for im in hwc]).reshape(-1, 2), keys)
    return list(run_reference(plan, hwc, params).unbind(0))


def to_hwc(image: Any) -> torch.Tensor:
    """A decoded image as a contiguous HWC uint8 tensor with 1 or 3 channels.

    numpy arrays are taken as HWC (or HW); torch tensors as CHW when the first
    dimension is 1, 3 or 4 and the last is not, else HWC. An alpha channel is dropped.
    """
    if isinstance(image, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(image))
        if t.ndim == 2:
            t = t[:, :, None]
    elif isinstance(image, torch.Tensor):
        t = image
        if t.ndim == 2:
            t = t[:, :, None]
        elif t.ndim == 3 and t.shape[0] in (1, 3, 4) and t.shape[2] not in (1, 3, 4):
            t = t.permute(1, 2, 0)
    else:
        t = torch.from_numpy(np.asarray(image))  # PIL images and array-likes
        if t.ndim == 2:
            t = t[:, :, None]
    if t.dtype != torch.uint8:
        raise TypeError(f"decoded images must be uint8, got {t.dtype}")
    if t.ndim != 3 or t.shape[2] not in (1, 2, 3, 4):
        raise ValueError(f"decoded image has unsupported shape {tuple(image.shape)}")
    if t.shape[2] == 2:  # gray + alpha
        t = t[:, :, :1]
    elif t.shape[2] == 4:  # RGBA
        t = t[:, :, :3]
    return t.contiguous()
