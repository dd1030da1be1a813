"""The transform protocol, and a pipeline compiled into what the fused kernel needs.

A transform takes part in three steps, each a method of ``Transform``:

1. ``update_state(state) -> state``, once when the pipeline is compiled: how it
   changes what is known before any data is seen (dtype, output size, the
   epilogue's scale and bias). Invalid pipelines fail here.
2. ``make_params(geometry, u) -> dict``, once per batch: draw this transform's
   per-sample parameters (boxes, sizes, flip masks) for the whole batch from
   ``n_uniforms`` uniforms per sample. Randomness lives only here.
3. ``transform(geometry, params)``, once per batch: apply those parameters to
   the batch geometry (see ``_geometry.py``), deterministically, so the same
   parameters replay the same output.

``Plan`` runs step 1 at compile time and steps 2-3 per batch, leaf by leaf; the
pixels are touched once, by the kernel, after every transform has had its say.
The protocol and the plan share this module because ``Transform.__call__`` runs
a plan on the CPU reference path.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Iterator, Sequence

import numpy as np
import torch

from .. import _rng
from . import _geometry as G
from . import _registry
from ._reference import pack_images, resample, to_hwc
from ._state import StaticState

__all__ = [
    "STAGES", "Compose", "Plan", "Transform", "apply_to_images", "compile_transforms", "pack_images",
    "run_reference", "to_hwc", "to_torchdali",
]

#: Kernel stages a transform can belong to, in the order the kernel runs them
#: (named like the parameter blocks of ``csrc_triton.layout``), plus ``meta``
#: for transforms that change nothing (ToImage) or only hold others (Compose).
STAGES = ("source", "geometry", "colour", "epilogue", "meta")


class Transform:
    """Base class: a step of a batched, fused pipeline (see the module docstring).

    A subclass sets ``stage`` and, if it is random, ``n_uniforms``, and overrides
    the steps it takes part in; the defaults change nothing.
    """

    #: the kernel stage that carries out this transform (one of ``STAGES``)
    stage: ClassVar[str] = "meta"
    #: uniforms this transform draws per sample. Part of the random stream: changing
    #: it changes every batch of every pipeline using the transform.
    n_uniforms: ClassVar[int] = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.stage not in STAGES:
            raise TypeError(f"{cls.__name__}.stage is {cls.stage!r}; use one of {STAGES}")

    def update_state(self, state: StaticState) -> StaticState:
        """The static state after this transform (a new object; raise ValueError if invalid)."""
        return state

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        """Per-sample parameters for the batch, as named arrays of length ``len(geometry)``.

        ``geometry`` is the batch as the earlier transforms left it (read its sizes,
        do not change it); ``u`` is ``[B, n_uniforms]`` uniforms in [0, 1), or None
        when ``n_uniforms`` is 0.
        """
        return {}

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        """Apply ``params`` (from ``make_params``) to ``geometry``, in place."""

    def leaves(self) -> Iterator[Transform]:
        """The transforms a pipeline runs for this one (itself, or a container's contents)."""
        yield self

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.extra_repr()})"

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        """Apply to one image (CHW or HWC uint8 tensor) on the CPU reference path; returns CHW."""
        return apply_to_images(Compose([self]), [image])[0]


def to_torchdali(t: Any) -> Transform:
    """Return ``t`` as a torchdali transform, converting torchvision (v1 or v2) objects.

    Raises ValueError naming the transform when it has no fused equivalent.
    """
    if isinstance(t, Transform):
        return t
    # imported here so the batch transforms register after the per-sample ones (the README table's order)
    from ._batch import BatchTransform, misplaced_error

    if isinstance(t, BatchTransform):
        raise misplaced_error(t)
    return _registry.from_torchvision(t)


@_registry.register("Compose", semantics="yes", notes="accepts torchvision objects")
class Compose(Transform):
    """Chain transforms, as ``torchvision.transforms.v2.Compose``."""

    def __init__(self, transforms: Sequence[Any]) -> None:
        if not isinstance(transforms, Sequence):
            raise TypeError("Compose: argument must be a sequence of transforms")
        self.transforms = [to_torchdali(t) for t in transforms]

    @classmethod
    def from_torchvision(cls, t: Any) -> Compose:
        return cls(list(t.transforms))

    def update_state(self, state: StaticState) -> StaticState:
        for t in self.transforms:
            state = t.update_state(state)
        return state

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        # Each leaf draws from its own random stream, which a Compose cannot hand out.
        raise TypeError("Compose has no parameters of its own; compile_transforms runs its leaves()")

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        raise TypeError("Compose has no parameters of its own; compile_transforms runs its leaves()")

    def leaves(self) -> Iterator[Transform]:
        for t in self.transforms:
            yield from t.leaves()

    def extra_repr(self) -> str:
        return ", ".join(repr(t) for t in self.transforms)


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
        # The random stream of a transform is its position among the leaves, so a
        # sample's draws depend only on its key and the pipeline, never on the batch.
        for stream, t in enumerate(self.transforms):
            u = _rng.uniform(keys, stream, t.n_uniforms) if t.n_uniforms else None
            t.transform(g, t.make_params(g, u))
        return g

    def params(self, sizes: np.ndarray, keys: np.ndarray) -> torch.Tensor:
        """``[B, layout.NUM_PARAMS]`` float32 kernel parameters."""
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
    leaves = tuple(root.leaves())
    state = StaticState()
    for t in leaves:
        state = t.update_state(state)
    if state.size is None:
        raise ValueError(
            "the transforms do not produce a fixed output size, so a batch cannot be stacked; "
            f"end the pipeline with a fixed-size transform such as CenterCrop or Resize((h, w)): {root!r}"
        )
    return Plan(
        transforms=leaves,
        out_size=state.size,
        # the kernel writes float64 as float32 (no float64 output path)
        out_dtype=state.dtype if state.dtype != torch.float64 else torch.float32,
        scale=state.scale,
        bias=state.bias,
        quantize=state.quantize,
        antialias=state.antialias,
    )


def run_reference(plan: Plan, images: Sequence[torch.Tensor], params: torch.Tensor,
                  channels_last: bool = False) -> torch.Tensor:
    """Run ``plan`` with ``params`` on HWC uint8 CPU images with the plain-torch reference kernel."""
    return resample(images, params, plan.out_size, plan.scale, plan.bias, out_dtype=plan.out_dtype,
                    channels_last=channels_last, antialias=plan.antialias, quantize=plan.quantize)


def apply_to_images(transforms: Any, images: Sequence[torch.Tensor], seed: int = 0) -> list[torch.Tensor]:
    """Apply a pipeline to single images (CHW or HWC uint8), returning CHW outputs."""
    plan = compile_transforms(transforms)
    hwc = [to_hwc(im) for im in images]
    keys = _rng.sample_keys(seed, 0, np.arange(len(hwc)))
    params = plan.params(np.array([im.shape[:2] for im in hwc]).reshape(-1, 2), keys)
    return list(run_reference(plan, hwc, params).unbind(0))
