"""torchvision.transforms.v2-named transforms, executed as one fused kernel per batch.

Layers, bottom up (each imports only those before it): ``_geometry`` (per-sample
geometry algebra), ``_state`` (static pipeline state), ``_args`` (argument checks),
``_reference`` (CPU reference execution), ``_registry`` (the list of supported
transforms), ``_plan`` (the Transform protocol and its compilation), ``_transforms``
(the classes), ``functional`` (single-image functionals); ``_batch`` holds the batch
transforms (MixUp, CutMix), which run on a finished batch rather than per sample.
"""
from . import _registry, functional
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
# after _transforms: registration order is the order of the README table's rows
from ._batch import BatchRandomChoice, BatchTransform, CutMix, MixUp, to_batch_transform

#: torchvision transform names torchdali converts (every class in ``_transforms`` and ``_batch`` has registered by now)
SUPPORTED = _registry.supported()
supported_table = _registry.supported_table

__all__ = [
    "BatchRandomChoice", "BatchTransform", "CenterCrop", "Compose", "ConvertImageDtype", "CutMix", "Identity",
    "MixUp", "Normalize", "PILToTensor", "Plan", "RandomCrop", "RandomHorizontalFlip", "RandomResizedCrop",
    "RandomVerticalFlip", "Resize", "SUPPORTED", "ToDtype", "ToImage", "ToPureTensor", "ToTensor", "Transform",
    "compile_transforms", "functional", "supported_table", "to_batch_transform", "to_torchdali",
]
