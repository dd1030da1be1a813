"""Converting a whole pipeline, and refusing it all at once.

``_registry.from_torchvision`` converts one object and raises for one object. A
pipeline, though, is a tree (Compose, RandomApply, RandomChoice, RandomOrder,
presets holding a Compose), and a user fixing it wants every step that cannot run
fused in one message, each with where it is and what to use instead. ``convert``
walks the tree, tries every leaf, and raises one ValueError listing each refusal
(``Refusal``) with its position and the nearest supported alternative.

Alternatives come from two places: an interpolation the kernel lacks is answered
by trying the nearest filters on a copy of the object (so a suggestion is always
one that converts in this build), and ``ALTERNATIVES`` maps the transforms that
have no fused equivalent to what to do instead.

This module sits right above ``_registry`` and below ``_plan``: it knows
torchdali's own transforms only as the ``native`` class the caller passes.
"""
from __future__ import annotations

import copy
from typing import Any, Iterator, NamedTuple

from . import _registry

__all__ = ["ALTERNATIVES", "Refusal", "convert", "convert_all", "refusals"]

# RandomCrop and Pad run fused with any fill and padding mode; what is refused is a malformed fill.
_PADDING_ADVICE = ("a fill of one number or three (0..255 on a uint8 image), or a dict of them keyed by type, with "
                   "padding_mode constant, edge, reflect or symmetric (one padding mode and fill per pipeline)")

#: What to use instead of a transform torchdali cannot run fused, by class name.
ALTERNATIVES: dict[str, str] = {
    "ElasticTransform": "none fused (a per-pixel displacement field): run it on the CPU yourself, in the "
                        "dataset's own transform with no transforms= (see the DataLoader docstring)",
    "Lambda": "none: an arbitrary Python function cannot run inside the batched kernels; write it as a "
              "torchdali.transforms.Transform subclass, or apply it to the batch the loader returns",
    "ToPILImage": "remove it: images reach the kernels decoded, as uint8 tensors",
    "ToNumpy": "remove it (or use MaybePILToTensor): images reach the kernels decoded, as uint8 tensors",
    "FiveCrop": "none: it makes several crops per image; use CenterCrop, or crop the returned batch",
    "TenCrop": "none: it makes several crops per image; use CenterCrop, or crop the returned batch",
    "LinearTransformation": "none: multiply the returned batch by the whitening matrix",
    "GaussianNoise": "none: add the noise to the returned batch (images + sigma * torch.randn_like(images))",
    "JPEG": "none: re-encoding has no fused equivalent",
    "UniformTemporalSubsample": "none: video transforms are not supported",
    "MixUp": "pass it as DataLoader(batch_transforms=...) (or call it in collate_fn): it mixes the samples "
             "of a finished batch",
    "CutMix": "pass it as DataLoader(batch_transforms=...) (or call it in collate_fn): it mixes the samples "
              "of a finished batch",
    "CenterCropOrPad": "CenterCrop (pads with zeros rather than fill)",
    "RandomCropOrPad": "RandomResizedCrop, or RandomCrop on an image made large enough by Resize",
    "RandomPad": "none: pad in the dataset's own transform",
    "TrimBorder": "none fused; CenterCrop(size) after Resize keeps the centre",
    "ResizeToSequence": "none: the output size depends on the image (NaFlex)",
    "Patchify": "none: patchify the returned batch (images.unfold)",
    "RandomApply": "per sample only for flips or colour/warp transforms: apply the contents to every sample, "
                   "use a transform's own probability where it has one (RandomHorizontalFlip(p), "
                   "RandomGrayscale(p), RandomErasing(p)), or keep the pipeline in the dataset's own transform",
    "RandomChoice": "per sample only for flips or colour/warp transforms: pick one of them, or keep the pipeline "
                    "in the dataset's own transform",
    "RandomOrder": "per sample only for flips or colour/warp transforms: fix the order, or keep the pipeline in "
                   "the dataset's own transform",
}

#: Filters to try, nearest first, when a transform's interpolation is refused.
_NEAREST_FILTERS: dict[str, tuple[str, ...]] = {
    "nearest": ("NEAREST_EXACT", "BILINEAR"),
    "nearest-exact": ("NEAREST", "BILINEAR"),
    "box": ("BILINEAR",),
    "bilinear": (),
    "hamming": ("BICUBIC", "BILINEAR"),
    "bicubic": ("BILINEAR",),
    "lanczos": ("BICUBIC", "BILINEAR"),
}

# PIL's integer filter codes, which torchvision v1 accepts for interpolation.
_PIL_FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}

# Containers whose contents the walk visits: class name -> attribute holding them.
_CONTAINERS = {"Compose": "transforms", "RandomApply": "transforms", "RandomChoice": "transforms",
               "RandomOrder": "transforms", "ClassificationPresetTrain": "transforms",
               "ClassificationPresetEval": "transforms"}

_FALLBACK = ("no fused equivalent in this build: keep the pipeline in the dataset's own transform and build "
             "the loader without transforms= (the dataset then runs as under torch, on the CPU)")


class Refusal(NamedTuple):
    """A step of a pipeline that cannot run fused."""

    position: str  # where it is, e.g. "[3][0]" (index into the root Compose, then into a nested one)
    name: str  # its class name
    reason: str  # the per-object refusal
    alternative: str  # what to use instead

    def __str__(self) -> str:
        return f"  pipeline{self.position or ''} {self.name}: {self.reason}\n      instead: {self.alternative}"


def _children(obj: Any) -> Iterator[tuple[str, Any]] | None:
    """(position suffix, child) of a container the walk descends into, or None for a leaf."""
    attr = _CONTAINERS.get(type(obj).__name__)
    if attr is None or not hasattr(obj, attr):
        return None
    inner = getattr(obj, attr)
    if isinstance(inner, (list, tuple)):
        return ((f"[{i}]", t) for i, t in enumerate(inner))
    if type(inner).__name__ != "Compose":
        return None  # a preset must hold a Compose; its own conversion says so
    return iter([(f".{attr}", inner)])


def _mode_name(mode: Any) -> str | None:
    if isinstance(mode, (list, tuple)):
        return None
    value = getattr(mode, "value", mode)
    if isinstance(value, int):
        return _PIL_FILTERS.get(value)
    return value if isinstance(value, str) else None


def _interpolation_alternative(obj: Any) -> str | None:
    """The nearest interpolation with which a copy of ``obj`` converts, as text, or None."""
    if not hasattr(obj, "interpolation"):
        return None
    from torchvision.transforms import InterpolationMode

    name = _mode_name(obj.interpolation)
    candidates = _NEAREST_FILTERS.get(name, ("BICUBIC", "BILINEAR")) if name is not None else ("BICUBIC", "BILINEAR")
    for candidate in candidates:
        trial = copy.copy(obj)
        try:
            trial.interpolation = getattr(InterpolationMode, candidate)
            _registry.from_torchvision(trial)
        except (ValueError, TypeError, AttributeError):
            continue
        return f"interpolation=InterpolationMode.{candidate} (the nearest filter the kernels have)"
    return None


def alternative(obj: Any, reason: str) -> str:
    """The nearest supported alternative to ``obj``, which was refused for ``reason``."""
    name = type(obj).__name__
    if "interpolation" in reason:
        found = _interpolation_alternative(obj)
        if found is not None:
            return found
    if name in ("RandomCrop", "Pad", "RandomZoomOut", "FixedSizeCrop", "PadIfSmaller") and (
            "padding_mode" in reason or "fill" in reason):
        return _PADDING_ADVICE
    if name == "Resize" and "size=None" in reason:
        return "Resize(shorter_side, max_size=...)"
    return ALTERNATIVES.get(name, _FALLBACK)


def refusals(obj: Any, native: type, position: str = "") -> list[Refusal]:
    """Every step of the pipeline ``obj`` that cannot be converted, in pipeline order.

    Instances of ``native`` (torchdali's Transform) are taken as they are. A
    container's contents are walked; the container itself is refused only when
    its class has no equivalent at all, or when its contents convert but it does not.
    """
    if isinstance(obj, native):
        return []
    out: list[Refusal] = []
    kids = _children(obj)
    if kids is not None:
        for suffix, kid in kids:
            out.extend(refusals(kid, native, position + suffix))
        if out and _registry.registry_name(obj) is not None:
            return out  # the container is fine once its contents are
    try:
        _registry.from_torchvision(obj)
    except (ValueError, TypeError) as e:
        reason = str(e).split(": torchdali supports ")[0]  # the supported list is given once, at the end
        out.append(Refusal(position, type(obj).__name__, reason, alternative(obj, reason)))
    return out


def _message(found: list[Refusal]) -> str:
    steps = "1 step" if len(found) == 1 else f"{len(found)} steps"
    return (f"{steps} of the pipeline cannot run in torchdali's batched GPU kernels "
            f"(unsupported transform; positions index into the Compose):\n" + "\n".join(map(str, found))
            + f"\ntorchdali converts: {', '.join(_registry.supported())}")


def convert(obj: Any, native: type) -> Any:
    """``obj`` (a torchvision/timm pipeline or a preset holding one) as a torchdali transform.

    Raises one ValueError listing every step that cannot be converted.
    """
    found = refusals(obj, native)
    if found:
        raise ValueError(_message(found))
    return _registry.from_torchvision(obj)


def convert_all(items: list[Any], native: type) -> list[Any]:
    """Each of ``items`` converted (natives kept); one ValueError lists every refusal among them."""
    found = [r for i, t in enumerate(items) for r in refusals(t, native, f"[{i}]")]
    if found:
        raise ValueError(_message(found))
    return [t if isinstance(t, native) else _registry.from_torchvision(t) for t in items]
