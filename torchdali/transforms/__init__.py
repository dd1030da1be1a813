"""torchvision.transforms.v2-named transforms, executed as one fused kernel per batch.

Layers, bottom up (each imports only those before it): ``_geometry`` (per-sample
geometry algebra), ``_state`` (static pipeline state), ``_args`` (argument checks),
``_reference`` (CPU reference execution), ``_registry`` (the list of supported
transforms), ``_convert`` (converting a whole pipeline, listing every refusal),
``_plan`` (the Transform protocol and its compilation), ``_transforms`` (the
classes), ``_random`` (RandomApply/RandomChoice/RandomOrder, decided per sample),
``_presets`` (weights' presets, reference-script presets, timm's simple
classes), ``functional`` (single-image functionals).
"""
from . import _presets, _registry, functional
from ._random import RandomApply, RandomChoice, RandomOrder
from ._plan import Plan, compile_transforms, to_torchdali
from ._transforms import (
    CenterCrop,
    Compose,
    ConvertImageDtype,
    Identity,
    Normalize,
    PILToTensor,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomVerticalFlip,
    Resize,
    ToDtype,
    ToImage,
    ToPureTensor,
    ToTensor,
    Transform,
)

#: torchvision transform names torchdali converts (every class in ``_transforms`` has registered by now)
SUPPORTED = _registry.supported()
supported_table = _registry.supported_table

__all__ = [
    "CenterCrop", "Compose", "ConvertImageDtype", "Identity", "Normalize", "PILToTensor", "Plan",
    "RandomApply", "RandomChoice", "RandomCrop", "RandomHorizontalFlip", "RandomOrder", "RandomResizedCrop",
    "RandomVerticalFlip", "Resize", "SUPPORTED", "ToDtype", "ToImage", "ToPureTensor", "ToTensor", "Transform", "compile_transforms",
    "functional", "supported_table", "to_torchdali",
]
