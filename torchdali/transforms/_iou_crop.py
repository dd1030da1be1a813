"""SSD's IoU crop, drawn per sample from the image size and the boxes alone.

``RandomIoUCrop`` is torchvision's: pick a minimum IoU from ``sampler_options``
(1.0 or more: leave the sample as it is), then try up to ``trials`` crops of
``min_scale..max_scale`` of each side with an aspect ratio in range; keep the first
that has a box centre strictly inside it and, among the boxes with their centre
inside, one whose IoU with the crop reaches the minimum; after ``trials`` failures,
pick a minimum again. Boxes whose centre is outside the crop become ``[0, 0, 0, 0]``
(a later SanitizeBoundingBoxes drops them).

The draw needs the boxes where the pipeline stands (after RandomZoomOut in SSD's
preset), not the pixels: the loader draws a batch in the worker from the JPEG
headers' sizes and the targets' boxes (``Plan._draw(..., boxes=)``, the boxes moved
by ``_targets.BoxTrack``), before anything is decoded. Each sample's draw is a
rejection loop over its own random stream (``_rng.Stream`` keyed by its one
uniform), the trials of one minimum evaluated together; the formulas keep
torchvision's float32 draws (``rand32``) and ``int()`` truncations, so the
distribution of crops is torchvision's (``tests/test_iou_crop.py`` checks it).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from .. import _rng
from . import _geometry as G
from ._plan import Transform
from ._reference_geometry import rand32
from ._registry import register
from ._state import SizeBound, StaticState

__all__ = ["NoCropFound", "RandomIoUCrop"]

#: minimums drawn for one sample before giving up (a sample whose boxes no crop can take, e.g. centres
#: on the image's border, with no leave-as-is option; torchvision would loop forever)
_MAX_ROUNDS = 1000


class NoCropFound(ValueError):
    """No crop could take a sample's boxes (``sample``: its position in the batch)."""

    def __init__(self, message: str, sample: int) -> None:
        super().__init__(message)
        self.sample = sample


@register("RandomIoUCrop", usage="RandomIoUCrop(min_scale=0.3, max_scale=1.0, min_aspect_ratio=0.5, "
                                 "max_aspect_ratio=2.0, sampler_options=None, trials=40)",
          semantics="same rejection sampling over the boxes; boxes with their centre outside become zeros",
          notes="drawn per sample in the worker from the header size and the boxes, before decoding")
class RandomIoUCrop(Transform):
    """Crop to a window that overlaps the boxes enough (SSD), as torchvision's ``RandomIoUCrop``."""

    stage = "geometry"
    n_uniforms = 1  # the key of the sample's own stream
    draws_from_boxes = True

    def __init__(self, min_scale: float = 0.3, max_scale: float = 1.0, min_aspect_ratio: float = 0.5,
                 max_aspect_ratio: float = 2.0, sampler_options: Sequence[float] | None = None,
                 trials: int = 40) -> None:
        if not 0.0 < min_scale <= max_scale:
            raise ValueError(f"RandomIoUCrop: need 0 < min_scale <= max_scale, got {min_scale}, {max_scale}")
        if not 0.0 < min_aspect_ratio <= max_aspect_ratio:
            raise ValueError(f"RandomIoUCrop: need 0 < min_aspect_ratio <= max_aspect_ratio, got "
                             f"{min_aspect_ratio}, {max_aspect_ratio}")
        if int(trials) < 1:
            raise ValueError(f"RandomIoUCrop: trials must be at least 1, got {trials}")
        options = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0] if sampler_options is None else list(sampler_options)
        if not options:
            raise ValueError("RandomIoUCrop: sampler_options must not be empty")
        self.min_scale, self.max_scale = float(min_scale), float(max_scale)
        self.min_aspect_ratio, self.max_aspect_ratio = float(min_aspect_ratio), float(max_aspect_ratio)
        self.options = [float(v) for v in options]
        self.trials = int(trials)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomIoUCrop:
        return cls(t.min_scale, t.max_scale, t.min_aspect_ratio, t.max_aspect_ratio, t.options, t.trials)

    def update_state(self, state: StaticState) -> StaticState:
        return dataclasses.replace(state, size=None)

    def bound_size(self, bound: SizeBound) -> SizeBound:
        return bound  # a crop is never larger than its image

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        h, w = geometry.height.copy(), geometry.width.copy()
        top, left = np.zeros_like(h), np.zeros_like(w)
        keep = []
        for b, boxes in enumerate(geometry.boxes.per_sample()):
            rng = _rng.Stream(int(u[b, 0] * 9007199254740992.0))
            try:
                crop = self.draw_one(int(round(h[b])), int(round(w[b])), boxes, rng)
            except NoCropFound as e:
                raise NoCropFound(str(e), b) from None
            if crop is None:
                keep.append(np.ones(len(boxes), dtype=bool))
                continue
            top[b], left[b], h[b], w[b], inside = crop
            keep.append(inside)
        return {"top": top, "left": left, "height": h, "width": w,
                "keep": np.concatenate(keep) if keep else np.zeros(0, dtype=bool)}

    def draw_one(self, height: int, width: int, boxes: np.ndarray,
                 rng: _rng.Stream) -> tuple[int, int, int, int, np.ndarray] | None:
        """One sample's crop ``(top, left, height, width, inside)`` for its XYXY ``boxes`` (``inside``:
        which centres it holds), or None to leave the sample as it is."""
        cx = 0.5 * (boxes[:, 0] + boxes[:, 2])
        cy = 0.5 * (boxes[:, 1] + boxes[:, 3])
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        span = np.float32(self.max_scale - self.min_scale)
        for _ in range(_MAX_ROUNDS):
            minimum = self.options[min(int(rng.uniform(1)[0] * len(self.options)), len(self.options) - 1)]
            if minimum >= 1.0:
                return None
            if not len(boxes):  # no crop can hold a centre: only leaving the sample as it is ends the loop
                continue
            v = rand32(rng.uniform(4 * self.trials).reshape(self.trials, 4))
            new_w = np.trunc(np.float32(width) * (np.float32(self.min_scale) + span * v[:, 0]))
            new_h = np.trunc(np.float32(height) * (np.float32(self.min_scale) + span * v[:, 1]))
            with np.errstate(divide="ignore", invalid="ignore"):
                aspect = new_w.astype(np.float64) / new_h
            left = np.trunc(np.float32(width - new_w) * v[:, 2]).astype(np.float64)
            top = np.trunc(np.float32(height - new_h) * v[:, 3]).astype(np.float64)
            right, bottom = left + new_w, top + new_h
            inside = ((left[:, None] < cx) & (cx < right[:, None]) & (top[:, None] < cy) & (cy < bottom[:, None]))
            iw = np.clip(np.minimum(boxes[:, 2], right[:, None]) - np.maximum(boxes[:, 0], left[:, None]), 0, None)
            ih = np.clip(np.minimum(boxes[:, 3], bottom[:, None]) - np.maximum(boxes[:, 1], top[:, None]), 0, None)
            inter = iw * ih
            iou = np.where(inside, inter / (area + (new_w * new_h)[:, None] - inter), -np.inf)
            ok = ((self.min_aspect_ratio <= aspect) & (aspect <= self.max_aspect_ratio) & (new_w > 0) & (new_h > 0)
                  & inside.any(axis=1) & (iou.max(axis=1) >= minimum))
            if ok.any():
                k = int(np.argmax(ok))
                return int(top[k]), int(left[k]), int(new_h[k]), int(new_w[k]), inside[k]
        raise NoCropFound(f"{self!r}: no crop found for an image of {height}x{width} with {len(boxes)} boxes after "
                         f"{_MAX_ROUNDS} draws of the minimum IoU (no box centre lies strictly inside the image, and "
                         f"sampler_options has no 1.0 to leave it as it is)", -1)

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        G.crop(geometry, params["top"], params["left"], params["height"], params["width"])
        if geometry.boxes is not None:
            geometry.boxes.zero(params["keep"])

    def extra_repr(self) -> str:
        return (f"min_scale={self.min_scale}, max_scale={self.max_scale}, min_aspect_ratio={self.min_aspect_ratio}, "
                f"max_aspect_ratio={self.max_aspect_ratio}, sampler_options={self.options}, trials={self.trials}")
