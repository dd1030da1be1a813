"""Functional forms: apply one geometric step to a batch geometry, or a whole
resized crop to a single image with the reference kernel."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ._geometry import (  # noqa: F401  (re-exported)
    BatchGeometry,
    center_crop_box,
    crop,
    horizontal_flip,
    random_resized_crop_box,
    resize,
    resized_output_size,
    vertical_flip,
)
from ._plan import to_hwc


def resized_crop(image: torch.Tensor, top: int, left: int, height: int, width: int,
                 size: Sequence[int], antialias: bool = True, flip: bool = False) -> torch.Tensor:
    """Crop ``image`` (uint8, CHW or HWC) to the box and resize it to ``size``; returns CHW uint8.

    Same semantics as ``torchvision.transforms.v2.functional.resized_crop`` (bilinear),
    computed by torchdali's reference kernel.
    """
    from csrc_triton import resized_crop_reference
    from ._plan import pack_images

    hwc = to_hwc(image)
    g = BatchGeometry.identity(np.array([[hwc.shape[0], hwc.shape[1]]]))
    crop(g, top, left, height, width)
    resize(g, size[0], size[1])
    if flip:
        horizontal_flip(g, True)
    data, offsets, shapes = pack_images([hwc])
    out = resized_crop_reference(data, offsets, shapes, g.to_params(), (int(size[0]), int(size[1])),
                                 (1.0, 1.0, 1.0), (0.0, 0.0, 0.0), out_dtype=torch.uint8,
                                 antialias=antialias, quantize=True)
    return out[0]
