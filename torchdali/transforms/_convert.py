"""Accept torchvision transform objects where torchdali ones are expected."""
from __future__ import annotations

from typing import Any

from . import _transforms as T


def _attr(obj: Any, *names: str, default: Any = None) -> Any:
    for n in names:
        if hasattr(obj, n):
            return getattr(obj, n)
    return default


def to_torchdali(t: Any) -> T.Transform:
    """Return ``t`` as a torchdali transform, converting torchvision (v1 or v2) objects.

    Raises ValueError naming the transform when it has no fused equivalent.
    """
    if isinstance(t, T.Transform):
        return t
    name = type(t).__name__
    mod = type(t).__module__ or ""
    if not mod.startswith("torchvision"):
        raise ValueError(
            f"unsupported transform {t!r}: torchdali runs the pipeline as one fused GPU kernel and "
            f"supports {', '.join(SUPPORTED)}"
        )
    if name == "Compose":
        return T.Compose(list(t.transforms))
    if name == "RandomResizedCrop":
        return T.RandomResizedCrop(list(t.size), scale=tuple(t.scale), ratio=tuple(t.ratio),
                                   interpolation=t.interpolation, antialias=_attr(t, "antialias", default=True))
    if name == "Resize":
        size = t.size if t.size is not None else None
        if size is None:
            raise ValueError("Resize(size=None, max_size=...) is not supported")
        return T.Resize(size, interpolation=t.interpolation, max_size=t.max_size,
                        antialias=_attr(t, "antialias", default=True))
    if name == "CenterCrop":
        return T.CenterCrop(list(t.size))
    if name == "RandomCrop":
        return T.RandomCrop(list(t.size), padding=t.padding, pad_if_needed=t.pad_if_needed)
    if name in ("RandomHorizontalFlip", "RandomVerticalFlip"):
        return getattr(T, name)(p=t.p)
    if name == "ToDtype":
        return T.ToDtype(t.dtype, scale=t.scale)
    if name == "ConvertImageDtype":
        return T.ConvertImageDtype(t.dtype)
    if name == "Normalize":
        return T.Normalize(t.mean, t.std)
    if name in ("ToImage", "PILToTensor", "ToPureTensor", "Identity"):
        return T.Identity()
    if name == "ToTensor":
        return T.ToTensor()
    raise ValueError(
        f"unsupported torchvision transform {name}: torchdali supports {', '.join(SUPPORTED)}"
    )


SUPPORTED = (
    "Compose", "Resize", "CenterCrop", "RandomCrop", "RandomResizedCrop", "RandomHorizontalFlip",
    "RandomVerticalFlip", "ToDtype", "ConvertImageDtype", "Normalize", "ToImage", "ToTensor",
    "PILToTensor", "ToPureTensor",
)
