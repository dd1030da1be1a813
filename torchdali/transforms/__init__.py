"""torchvision.transforms.v2-named transforms, executed as one fused kernel per batch.

Layers, bottom up (each imports only those before it): ``_geometry`` (per-sample
geometry algebra), ``_state`` (static pipeline state), ``_args`` (argument checks),
``_reference`` (CPU reference execution), ``_ragged`` (how a batch whose images differ
in size is laid out and delivered, ``ImageList``), ``_execute`` (a compiled plan run on
one batch, kernel or reference backend), ``_registry`` (the list of supported
transforms), ``_convert`` (converting a whole pipeline, listing every refusal),
``_plan`` (the Transform protocol, the augment-program protocol and the
compilation), ``_transforms`` (the geometry and epilogue classes), ``_random``
(RandomApply/RandomChoice/RandomOrder, decided per sample), ``_presets``
(weights' presets, reference-script presets, timm's simple classes), ``_program``
(helpers of the program transforms), ``_reference_geometry`` (the size, zoom-out
and fixed-size-crop steps of torchvision's detection and segmentation references),
``_colour``/``_warp``/``_erase``
(photometric, warp and erasing classes), ``_auto_augment`` (torchvision's
auto-augment policies), ``_timm`` (timm's augmentation classes: RandAugment,
AutoAugment, RandomErasing), ``_targets`` (boxes and masks through a batch's per-sample
geometry), ``_box_ops`` (SanitizeBoundingBoxes, ClampBoundingBoxes, ConvertBoundingBoxFormat
on a batch's boxes), ``_target_plan`` (a pipeline run on a batch's targets), ``_batch``
(MixUp, CutMix: batch transforms, run on a finished batch rather than per sample),
``functional`` (single-image functionals).
"""
from . import _presets, _registry, functional
from ._random import RandomApply, RandomChoice, RandomOrder
from ._plan import BatchParams, Plan, compile_transforms, to_torchdali
from ._transforms import (
    BatchImages,
    CenterCrop,
    Compose,
    ConvertImageDtype,
    Identity,
    Normalize,
    PILToTensor,
    Pad,
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
from ._reference_geometry import (
    FixedSizeCrop, PadIfSmaller, RandomResize, RandomShortestSize, RandomZoomOut, ScaleJitter,
)
from ._iou_crop import RandomIoUCrop
from ._colour import (
    ColorJitter,
    GaussianBlur,
    Grayscale,
    RandomAdjustSharpness,
    RandomAutocontrast,
    RandomEqualize,
    RandomGrayscale,
    RandomInvert,
    RandomPhotometricDistort,
    RandomPosterize,
    RandomSolarize,
)
from ._warp import RandomAffine, RandomPerspective, RandomRotation
from ._auto_augment import AugMix, AutoAugment, AutoAugmentPolicy, RandAugment, TrivialAugmentWide
from ._erase import RandomErasing
from ._timm import TimmAutoAugment, TimmRandAugment, TimmRandomErasing
from ._box_ops import ClampBoundingBoxes, ConvertBoundingBoxFormat, SanitizeBoundingBoxes
# after _transforms: registration order is the order of the README table's rows
from ._batch import BatchRandomChoice, BatchTransform, CutMix, MixUp, to_batch_transform
from ._ragged import ImageList

#: torchvision transform names torchdali converts (every class in ``_transforms`` and ``_batch`` has registered by now)
SUPPORTED = _registry.supported()
supported_table = _registry.supported_table

__all__ = [
    "AugMix", "AutoAugment", "AutoAugmentPolicy", "BatchImages", "BatchParams", "BatchRandomChoice",
    "BatchTransform",
    "CenterCrop", "ClampBoundingBoxes", "ColorJitter", "Compose", "ConvertBoundingBoxFormat", "ConvertImageDtype",
    "CutMix", "GaussianBlur", "Grayscale",
    "Identity", "ImageList", "MixUp", "Normalize", "PILToTensor", "Pad", "Plan", "RandAugment", "RandomAdjustSharpness",
    "RandomAffine", "RandomApply", "RandomAutocontrast", "RandomChoice", "RandomCrop", "RandomEqualize",
    "RandomErasing", "RandomGrayscale", "RandomHorizontalFlip", "RandomInvert", "RandomOrder",
    "RandomPerspective", "RandomPosterize", "RandomResizedCrop", "RandomRotation", "RandomSolarize",
    "RandomVerticalFlip", "Resize", "SUPPORTED", "SanitizeBoundingBoxes", "TimmAutoAugment", "TimmRandAugment",
    "TimmRandomErasing",
    "ToDtype", "ToImage", "ToPureTensor", "ToTensor", "Transform", "TrivialAugmentWide", "compile_transforms",
    "functional", "supported_table", "to_batch_transform", "to_torchdali",
    # the detection and segmentation references' steps
    "FixedSizeCrop", "PadIfSmaller", "RandomIoUCrop", "RandomPhotometricDistort", "RandomResize",
    "RandomShortestSize", "RandomZoomOut", "ScaleJitter",
]
