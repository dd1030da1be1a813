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
rejection loop over its own random stream (keyed by its one uniform), the rounds
of the whole batch evaluated together, ``_ROUNDS`` at a time; the formulas keep
torchvision's float32 draws (``rand32``) and ``int()`` truncations, so the
distribution of crops is torchvision's (``tests/test_iou_crop.py`` checks it).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from .. import _rng
from ..errors import SampleDrawError
from . import _geometry as G
from ._plan import Transform
from ._reference_geometry import rand32
from ._registry import register
from ._state import SizeBound, StaticState

__all__ = ["NoCropFound", "RandomIoUCrop"]

#: minimums drawn for one sample before giving up (a sample whose boxes no crop can take, e.g. centres
#: on the image's border, with no leave-as-is option; torchvision would loop forever)
_MAX_ROUNDS = 1000
#: rounds (minimums) drawn together (``_rounds``): most samples end within a few
_ROUNDS = 4


class NoCropFound(SampleDrawError):
    """No crop could take a sample's boxes (``sample``: its position in the batch)."""


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
        per_sample = geometry.boxes.per_sample()
        n = len(h)
        most = max((len(b) for b in per_sample), default=0)
        boxes = np.full((n, max(most, 1), 4), np.nan)  # padding: a NaN centre is never inside a crop
        for b, xyxy in enumerate(per_sample):
            boxes[b, :len(xyxy)] = xyxy
        keys = (u[:, 0] * 9007199254740992.0).astype(np.uint64)  # each sample's own stream
        crop = np.zeros((n, 4))  # top, left, height, width
        left_alone = np.zeros(n, dtype=bool)
        inside = np.zeros((n, boxes.shape[1]), dtype=bool)
        todo = np.arange(n)
        for block in range(-(-_MAX_ROUNDS // _ROUNDS)):
            if not len(todo):
                break
            done, leave, found, got_inside = self._rounds(h[todo], w[todo], boxes[todo], keys[todo], block)
            crop[todo[done]] = found[done]
            left_alone[todo[done]] = leave[done]
            inside[todo[done]] = got_inside[done]
            todo = todo[~done]
        if len(todo):
            b = int(todo[0])
            raise NoCropFound(f"{self!r}: no crop found for an image of {int(h[b])}x{int(w[b])} with "
                              f"{len(per_sample[b])} boxes after {_MAX_ROUNDS} draws of the minimum IoU (no box centre "
                              f"lies strictly inside the image, and sampler_options has no 1.0 to leave it as it is)",
                              b)
        cropped = ~left_alone
        keep = [np.ones(len(xyxy), dtype=bool) if left_alone[b] else inside[b, :len(xyxy)]
                for b, xyxy in enumerate(per_sample)]
        return {"top": np.where(cropped, crop[:, 0], 0.0), "left": np.where(cropped, crop[:, 1], 0.0),
                "height": np.where(cropped, crop[:, 2], h), "width": np.where(cropped, crop[:, 3], w),
                "keep": np.concatenate(keep) if keep else np.zeros(0, dtype=bool)}

    def _rounds(self, height: np.ndarray, width: np.ndarray, boxes: np.ndarray, keys: np.ndarray,
                block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Rounds ``block * _ROUNDS ...`` of the loop for every sample at once (``[S]`` sizes, ``[S, N, 4]``
        XYXY boxes padded with NaN, the samples' stream keys): per sample whether a round ended the loop,
        whether by leaving it alone, and the crop ``[S, 4]`` and centres ``[S, N]`` of the first such round.

        A round draws a minimum IoU, then ``trials`` crops; the first crop that passes ends it. The
        block's numbers are drawn at once; its rounds are then evaluated in turn, each on the samples
        no earlier round ended (most end in their first): the same as drawing them one after the other."""
        s, t = len(height), self.trials
        u = _rng.uniform(keys, block, _ROUNDS * (1 + 4 * t)).reshape(s, _ROUNDS, 1 + 4 * t)
        options = np.asarray(self.options)
        minimum = options[np.minimum((u[..., 0] * len(options)).astype(np.int64), len(options) - 1)]  # [S, R]
        v = rand32(u[..., 1:].reshape(s, _ROUNDS, t, 4))
        done, leave = np.zeros(s, dtype=bool), np.zeros(s, dtype=bool)
        crop, inside = np.zeros((s, 4)), np.zeros((s, boxes.shape[1]), dtype=bool)
        active = np.arange(s)
        for r in range(_ROUNDS):
            if not len(active):
                break
            least = minimum[active, r]
            ok, found, centres = self._trials(height[active], width[active], boxes[active], v[active, r], least)
            ends = (least >= 1.0) | ok.any(axis=-1)
            rows = np.flatnonzero(ends)
            k = np.argmax(ok[rows], axis=-1)  # the round's first passing trial
            ended = active[rows]
            done[ended], leave[ended] = True, least[rows] >= 1.0
            crop[ended], inside[ended] = found[rows, k], centres[rows, k]
            active = active[~ends]
        return done, leave, crop, inside

    def _trials(self, height: np.ndarray, width: np.ndarray, boxes: np.ndarray, v: np.ndarray,
                minimum: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One round's ``T`` trial crops for ``[A]`` samples (``v``: their ``[A, T, 4]`` numbers, ``minimum``:
        each one's IoU threshold): whether each passes ``[A, T]``, the crops ``[A, T, 4]`` (top, left,
        height, width) and which box centres each holds ``[A, T, N]``."""
        span = np.float32(self.max_scale - self.min_scale)
        hh, ww = height.astype(np.float32)[:, None], width.astype(np.float32)[:, None]
        new_w = np.trunc(ww * (np.float32(self.min_scale) + span * v[..., 0]))  # [A, T], float32 as torchvision
        new_h = np.trunc(hh * (np.float32(self.min_scale) + span * v[..., 1]))
        with np.errstate(divide="ignore", invalid="ignore"):
            aspect = new_w.astype(np.float64) / new_h
        left = np.trunc((ww - new_w) * v[..., 2]).astype(np.float64)
        top = np.trunc((hh - new_h) * v[..., 3]).astype(np.float64)
        right, bottom = left + new_w, top + new_h
        b = boxes[:, None]  # [A, 1, N, 4]
        cx, cy = 0.5 * (b[..., 0] + b[..., 2]), 0.5 * (b[..., 1] + b[..., 3])
        l_, t_, r_, b_ = (a[..., None] for a in (left, top, right, bottom))  # [A, T, 1]
        inside = (l_ < cx) & (cx < r_) & (t_ < cy) & (cy < b_)  # [A, T, N]
        inter = (np.clip(np.minimum(b[..., 2], r_) - np.maximum(b[..., 0], l_), 0, None)
                 * np.clip(np.minimum(b[..., 3], b_) - np.maximum(b[..., 1], t_), 0, None))
        area = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
        with np.errstate(divide="ignore", invalid="ignore"):
            iou = np.where(inside, inter / (area + (new_w * new_h)[..., None] - inter), -np.inf)
        ok = ((self.min_aspect_ratio <= aspect) & (aspect <= self.max_aspect_ratio) & (new_w > 0) & (new_h > 0)
              & inside.any(axis=-1) & (iou.max(axis=-1) >= minimum[:, None]))  # [A, T]
        return ok, np.stack([top, left, new_h, new_w], axis=-1), inside

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        G.crop(geometry, params["top"], params["left"], params["height"], params["width"])
        if geometry.boxes is not None:
            geometry.boxes.zero(params["keep"])

    def extra_repr(self) -> str:
        return (f"min_scale={self.min_scale}, max_scale={self.max_scale}, min_aspect_ratio={self.min_aspect_ratio}, "
                f"max_aspect_ratio={self.max_aspect_ratio}, sampler_options={self.options}, trials={self.trials}")
