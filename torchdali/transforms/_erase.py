"""RandomErasing, named after ``torchvision.transforms.v2``: a box per sample, erased in
the epilogue (kernel 1's without a program, ``fused_finish``'s after one)."""
from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Sequence

import numpy as np

from . import _geometry as G
from ._plan import Transform
from ._program import check_p
from ._registry import register
from ._state import EraseSpec, StaticState

__all__ = ["RandomErasing", "erase_box"]

#: ``value="random"`` noise is keyed per sample by an integer below this (exact in float32)
SEED_RANGE = 1 << 24


def erase_box(height: np.ndarray, width: np.ndarray, scale: tuple[float, float], ratio: tuple[float, float],
              u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """torchvision's RandomErasing box for images of ``height x width``, vectorised.

    ``u`` holds 40 uniforms per sample: ten attempts of (area, log-ratio, top, left);
    the first attempt whose box fits strictly inside the image wins. Returns
    ``(found, top, left, h, w)``; where nothing fits, torchvision erases nothing.
    """
    n = len(height)
    u = u.reshape(n, 10, 4)
    area = (height * width)[:, None]
    # torchvision draws in float32 (torch.empty(1).uniform_, torch.log of a float32 tensor)
    s0, s1 = np.float32(scale[0]), np.float32(scale[1])
    log_r = np.log(np.array(ratio, dtype=np.float32))
    erase_area = area * (s0 + (s1 - s0) * u[..., 0].astype(np.float32)).astype(np.float64)
    aspect = np.exp(log_r[0] + (log_r[1] - log_r[0]) * u[..., 1].astype(np.float32)).astype(np.float64)
    h = np.round(np.sqrt(erase_area * aspect))  # Python's round: half to even, as np.round
    w = np.round(np.sqrt(erase_area / aspect))
    ok = (h < height[:, None]) & (w < width[:, None])
    first = np.argmax(ok, axis=1)
    rows = np.arange(n)
    found = ok[rows, first]
    hs, ws = h[rows, first], w[rows, first]
    top = np.floor(u[rows, first, 2] * (height - hs + 1))
    left = np.floor(u[rows, first, 3] * (width - ws + 1))
    return found, top, left, hs, ws


@register("RandomErasing", usage="RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0)",
          semantics="same box sampling (10 attempts), value 0 / tuple / 'random'",
          notes="last image transform (ToDtype/Normalize may follow); drawn per sample; fused into the epilogue")
class RandomErasing(Transform):
    """Erase a random box of each sample with probability ``p``.

    It must be the last image transform: only ``ToDtype``/``Normalize`` may follow,
    and a constant ``value`` is given where RandomErasing stands (after Normalize:
    in normalized units; before: in the image's units, mapped through the rest).
    ``value="random"`` writes standard normal noise and needs a float image with
    nothing after it that changes values. ``inplace`` is accepted and ignored.
    """

    stage = "epilogue"
    n_uniforms = 42  # apply, ten attempts of (area, log-ratio, top, left), noise key

    def __init__(self, p: float = 0.5, scale: Sequence[float] = (0.02, 0.33), ratio: Sequence[float] = (0.3, 3.3),
                 value: Any = 0.0, inplace: bool = False) -> None:
        self.p = check_p(p, "RandomErasing")
        if not isinstance(scale, Sequence) or not isinstance(ratio, Sequence) or len(scale) != 2 or len(ratio) != 2:
            raise TypeError("RandomErasing: scale and ratio should be sequences of two floats")
        if scale[0] < 0 or scale[1] > 1:
            raise ValueError("RandomErasing: scale should be between 0 and 1")
        if ratio[0] <= 0:
            raise ValueError("RandomErasing: ratio should be positive")
        if isinstance(value, str):
            if value != "random":
                raise ValueError("RandomErasing: if value is a str, it should be 'random'")
            values: tuple[float, ...] = ()
        elif isinstance(value, numbers.Number):
            values = (float(value),)
        elif isinstance(value, (tuple, list)) and len(value) in (1, 3):
            values = tuple(float(v) for v in value)
        else:
            raise ValueError(f"RandomErasing: value must be a number, a sequence of 1 or 3 numbers or 'random', "
                             f"got {value!r}")
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.value = "random" if isinstance(value, str) else values
        self.inplace = inplace

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomErasing:
        # v2 keeps value=None for "random" and a list otherwise; v1 keeps what it was given
        value = t.value
        if value is None or value == "random":
            value = "random"
        elif isinstance(value, (int, float)):
            value = [float(value)]
        return cls(t.p, tuple(t.scale), tuple(t.ratio), value=value)

    def update_state(self, state: StaticState) -> StaticState:
        if state.erase is not None:
            raise ValueError("only one RandomErasing per pipeline is supported (one erase box per sample)")
        spec = EraseSpec(value=() if self.value == "random" else tuple(self.value), random=self.value == "random",
                         dtype=state.dtype, scale=state.scale, bias=state.bias)
        return dataclasses.replace(state, erase=spec)

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        found, top, left, h, w = erase_box(geometry.height, geometry.width, self.scale, self.ratio, u[:, 1:41])
        erase = (u[:, 0] < self.p) & found
        return {"erase": erase, "top": top, "left": left, "height": h, "width": w,
                "seed": np.floor(u[:, 41] * SEED_RANGE)}

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        G.erase(geometry, params["erase"], params["top"], params["left"], params["height"], params["width"],
                params["seed"])

    def extra_repr(self) -> str:
        return f"p={self.p}, scale={self.scale}, ratio={self.ratio}, value={self.value}"

