"""torchvision.transforms.v2-named transforms, executed as one fused kernel per batch."""
from . import functional
from ._convert import SUPPORTED, to_torchdali
from ._plan import Plan, compile_transforms
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

__all__ = [
    "CenterCrop", "Compose", "ConvertImageDtype", "Identity", "Normalize", "PILToTensor", "Plan",
    "RandomCrop", "RandomHorizontalFlip", "RandomResizedCrop", "RandomVerticalFlip", "Resize",
    "SUPPORTED", "ToDtype", "ToImage", "ToPureTensor", "ToTensor", "Transform", "compile_transforms",
    "functional", "to_torchdali",
]
