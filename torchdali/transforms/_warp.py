"""Warps after the last resize, named after ``torchvision.transforms.v2``; augment-program ops.

RandomRotation, RandomAffine and RandomPerspective run on the uint8 output-size
image (after the fused kernel rounded it to uint8, as torchvision's resize
does), as ``affine``/``perspective`` program ops: exactly torchvision's
``grid_sample``-based warp of a uint8 tensor (nearest or bilinear, with its fill
mask). The matrices are computed here, per sample, the way torchvision computes
them; ``inverse_affine_matrix`` and ``perspective_coefficients`` are shared with
the auto-augment policies.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

import numpy as np
from csrc_triton import layout

from ._colour import _uniform
from ._program import ProgramTransform, check_p, fill_values, put_op, warp_filter
from ._registry import register

__all__ = ["RandomAffine", "RandomPerspective", "RandomRotation", "inverse_affine_matrix",
           "perspective_coefficients"]


def inverse_affine_matrix(center: tuple[float, float], angle: float, translate: tuple[float, float],
                          scale: float, shear: tuple[float, float]) -> list[float]:
    """torchvision's ``_get_inverse_affine_matrix`` (output pixel -> input pixel, both relative
    to the image centre offset by ``center``): the six values of the ``affine`` op.

    Scalar Python math, as torchvision's: the matrix is rounded to float32 for the
    sampling grid, and a last-bit difference here could move a nearest-neighbour tap.
    """
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    cos_sy, tan_sx = math.cos(sy), math.tan(sx)
    a = math.cos(rot - sy) / cos_sy
    b = -(a * tan_sx + math.sin(rot))
    c = math.sin(rot - sy) / cos_sy
    d = math.cos(rot) - c * tan_sx
    m = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0]
    m[2] += cx - m[0] * (cx + tx) - m[1] * (cy + ty)
    m[5] += cy - m[3] * (cx + tx) - m[4] * (cy + ty)
    return m


def perspective_coefficients(startpoints: np.ndarray, endpoints: np.ndarray) -> np.ndarray:
    """torchvision's ``_get_perspective_coeffs`` for a batch: ``[B, 4, 2]`` corner points
    (x, y) of the input and where they go, to ``[B, 8]`` coefficients (float64 solve,
    rounded to float32 as torchvision does) of the ``perspective`` op."""
    sp, ep = np.asarray(startpoints, np.float64), np.asarray(endpoints, np.float64)
    n = sp.shape[0]
    a = np.zeros((n, 8, 8))
    for i in range(4):
        ex, ey, sx, sy = ep[:, i, 0], ep[:, i, 1], sp[:, i, 0], sp[:, i, 1]
        one, zero = np.ones(n), np.zeros(n)
        a[:, 2 * i] = np.stack([ex, ey, one, zero, zero, zero, -sx * ex, -sx * ey], axis=1)
        a[:, 2 * i + 1] = np.stack([zero, zero, zero, ex, ey, one, -sy * ex, -sy * ey], axis=1)
    b = sp.reshape(n, 8)
    return np.linalg.solve(a, b[..., None])[..., 0].astype(np.float32).astype(np.float64)


def _angle_range(value: Any, name: str, sizes: tuple[int, ...] = (2,)) -> tuple[float, ...]:
    """torchvision's ``_setup_angle``: a number ``d`` is ``(-d, d)``."""
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"If {name} is a single number, it must be positive, got {value}")
        return (-float(value), float(value))
    if not isinstance(value, Sequence) or len(value) not in sizes:
        raise ValueError(f"{name} should be a number or a sequence of length {' or '.join(map(str, sizes))}")
    return tuple(float(v) for v in value)


def _center(center: Any, name: str) -> tuple[float, float] | None:
    if center is None:
        return None
    if not isinstance(center, Sequence) or len(center) != 2:
        raise ValueError(f"{name}: center should be a sequence of length 2 (x, y)")
    return (float(center[0]), float(center[1]))


def _center_offset(center: tuple[float, float] | None, height: float, width: float) -> tuple[float, float]:
    # torchvision: the centre in pixels, relative to the image centre
    if center is None:
        return (0.0, 0.0)
    return (center[0] - width * 0.5, center[1] - height * 0.5)


class _Warp(ProgramTransform):
    interpolation: Any
    fill: Any
    _filter: int
    _fill: tuple[float, float, float]

    def _setup_warp(self, interpolation: Any, fill: Any) -> None:
        name = type(self).__name__
        self._filter = warp_filter(interpolation, name, bicubic_as_bilinear=True)
        self.interpolation = "nearest" if self._filter == layout.FILTER_NEAREST else "bilinear"
        self.fill = fill
        self._fill = fill_values(fill, name)

    def _put(self, slots: np.ndarray, where: np.ndarray | None, matrices: np.ndarray, op: str = "affine") -> None:
        names = ("a", "b", "c", "d", "e", "f", "g", "h")[: matrices.shape[1]]
        put_op(slots[:, 0], op, where, interp=self._filter, fill=self._fill,
               **{n: matrices[:, i] for i, n in enumerate(names)})


@register("RandomRotation",
          usage="RandomRotation(degrees, interpolation='nearest', expand=False, center=None, fill=0)",
          semantics="same angle sampling and warp", notes="expand=False only; nearest or bilinear; drawn per sample")
class RandomRotation(_Warp):
    """Rotate by an angle uniform in ``degrees`` (anticlockwise), per sample, keeping the size.

    ``expand=True`` is refused: it makes the output size depend on the angle, so a
    batch could not be stacked.
    """

    n_uniforms = 1

    def __init__(self, degrees: Any, interpolation: Any = "nearest", expand: bool = False, center: Any = None,
                 fill: Any = 0) -> None:
        self.degrees = _angle_range(degrees, "degrees")
        if expand:
            raise ValueError("RandomRotation: expand=True is not supported: the output size would depend on the "
                             "angle drawn for each sample, so the batch could not be stacked; use expand=False "
                             "(followed by a Resize/CenterCrop before it if you need the margin)")
        self.expand = False
        self.center = _center(center, "RandomRotation")
        self._setup_warp(interpolation, fill)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomRotation:
        return cls(list(t.degrees), interpolation=t.interpolation, expand=t.expand, center=t.center, fill=t.fill)

    def make_params(self, geometry: Any, u: np.ndarray | None) -> dict[str, np.ndarray]:
        return {"angle": _uniform(self.degrees[0], self.degrees[1], u[:, 0])}

    def write_slots(self, geometry: Any, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        angles = np.mod(params["angle"], 360.0)  # torchvision's rotate works on angle % 360
        m = np.array([inverse_affine_matrix(_center_offset(self.center, h, w), -a, (0.0, 0.0), 1.0, (0.0, 0.0))
                      for a, h, w in zip(angles.tolist(), geometry.height.tolist(), geometry.width.tolist())],
                     dtype=np.float64).reshape(-1, 6)
        # torchvision returns the image itself for a zero angle about the centre
        where = angles != 0.0 if self.center is None else None
        self._put(slots, where, m)

    def extra_repr(self) -> str:
        return f"degrees={self.degrees}, interpolation={self.interpolation}, center={self.center}, fill={self.fill}"


@register("RandomAffine",
          usage="RandomAffine(degrees, translate=None, scale=None, shear=None, interpolation='nearest', fill=0, "
                "center=None)",
          semantics="same sampling (rounded translation) and warp", notes="nearest or bilinear; drawn per sample")
class RandomAffine(_Warp):
    """Random rotation, translation, scale and shear, per sample, keeping the size."""

    n_uniforms = 6  # angle, translate x, translate y, scale, shear x, shear y

    def __init__(self, degrees: Any, translate: Sequence[float] | None = None, scale: Sequence[float] | None = None,
                 shear: Any = None, interpolation: Any = "nearest", fill: Any = 0, center: Any = None) -> None:
        self.degrees = _angle_range(degrees, "degrees")
        if translate is not None:
            if not isinstance(translate, Sequence) or len(translate) != 2:
                raise ValueError("RandomAffine: translate should be a sequence of length 2")
            if not all(0.0 <= t <= 1.0 for t in translate):
                raise ValueError("RandomAffine: translation values should be between 0 and 1")
            translate = (float(translate[0]), float(translate[1]))
        if scale is not None:
            if not isinstance(scale, Sequence) or len(scale) != 2:
                raise ValueError("RandomAffine: scale should be a sequence of length 2")
            if any(s <= 0 for s in scale):
                raise ValueError("RandomAffine: scale values should be positive")
            scale = (float(scale[0]), float(scale[1]))
        self.translate, self.scale = translate, scale
        self.shear = None if shear is None else _angle_range(shear, "shear", (2, 4))
        self.center = _center(center, "RandomAffine")
        self._setup_warp(interpolation, fill)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomAffine:
        return cls(list(t.degrees), translate=t.translate, scale=t.scale, shear=t.shear,
                   interpolation=t.interpolation, fill=t.fill, center=t.center)

    def make_params(self, geometry: Any, u: np.ndarray | None) -> dict[str, np.ndarray]:
        n = len(u)
        angle = _uniform(self.degrees[0], self.degrees[1], u[:, 0])
        tx = ty = np.zeros(n)
        if self.translate is not None:
            max_dx, max_dy = self.translate[0] * geometry.width, self.translate[1] * geometry.height
            # torchvision: int(round(uniform(-max_d, max_d))), round half to even like np.round
            tx = np.round(np.float32(-max_dx) + np.float32(2 * max_dx) * u[:, 1].astype(np.float32)).astype(np.float64)
            ty = np.round(np.float32(-max_dy) + np.float32(2 * max_dy) * u[:, 2].astype(np.float32)).astype(np.float64)
        scale = np.ones(n) if self.scale is None else _uniform(self.scale[0], self.scale[1], u[:, 3])
        shear_x = shear_y = np.zeros(n)
        if self.shear is not None:
            shear_x = _uniform(self.shear[0], self.shear[1], u[:, 4])
            if len(self.shear) == 4:
                shear_y = _uniform(self.shear[2], self.shear[3], u[:, 5])
        return {"angle": angle, "translate_x": tx, "translate_y": ty, "scale": scale,
                "shear_x": shear_x, "shear_y": shear_y}

    def write_slots(self, geometry: Any, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        cols = [params[k].tolist() for k in ("angle", "translate_x", "translate_y", "scale", "shear_x", "shear_y")]
        m = np.array([inverse_affine_matrix(_center_offset(self.center, h, w), a, (tx, ty), s, (sx, sy))
                      for h, w, a, tx, ty, s, sx, sy in zip(geometry.height.tolist(), geometry.width.tolist(), *cols)],
                     dtype=np.float64).reshape(-1, 6)
        self._put(slots, None, m)

    def extra_repr(self) -> str:
        return (f"degrees={self.degrees}, translate={self.translate}, scale={self.scale}, shear={self.shear}, "
                f"interpolation={self.interpolation}, fill={self.fill}, center={self.center}")


@register("RandomPerspective",
          usage="RandomPerspective(distortion_scale=0.5, p=0.5, interpolation='bilinear', fill=0)",
          semantics="same corner sampling and warp", notes="nearest or bilinear; drawn per sample")
class RandomPerspective(_Warp):
    """Move each corner inwards by a random amount (up to ``distortion_scale`` of half the
    side) with probability ``p``, per sample, and warp the image accordingly."""

    n_uniforms = 9  # apply, then the corners' (x, y) in torchvision's order

    def __init__(self, distortion_scale: float = 0.5, p: float = 0.5, interpolation: Any = "bilinear",
                 fill: Any = 0) -> None:
        if not 0 <= distortion_scale <= 1:
            raise ValueError("RandomPerspective: distortion_scale should be between 0 and 1")
        self.distortion_scale = float(distortion_scale)
        self.p = check_p(p, "RandomPerspective")
        self._setup_warp(interpolation, fill)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomPerspective:
        return cls(t.distortion_scale, t.p, interpolation=t.interpolation, fill=t.fill)

    def make_params(self, geometry: Any, u: np.ndarray | None) -> dict[str, np.ndarray]:
        h, w = geometry.height, geometry.width
        bh = np.floor(self.distortion_scale * np.floor(h / 2)) + 1
        bw = np.floor(self.distortion_scale * np.floor(w / 2)) + 1

        def randint(lo, hi, v):  # torch.randint(lo, hi): uniform over the integers [lo, hi)
            return lo + np.floor(v * (hi - lo))

        end = np.stack([
            np.stack([randint(0, bw, u[:, 1]), randint(0, bh, u[:, 2])], axis=1),  # top-left
            np.stack([randint(w - bw, w, u[:, 3]), randint(0, bh, u[:, 4])], axis=1),  # top-right
            np.stack([randint(w - bw, w, u[:, 5]), randint(h - bh, h, u[:, 6])], axis=1),  # bottom-right
            np.stack([randint(0, bw, u[:, 7]), randint(h - bh, h, u[:, 8])], axis=1),  # bottom-left
        ], axis=1)
        start = np.stack([np.stack([np.zeros_like(w), np.zeros_like(h)], 1), np.stack([w - 1, np.zeros_like(h)], 1),
                          np.stack([w - 1, h - 1], 1), np.stack([np.zeros_like(w), h - 1], 1)], axis=1)
        return {"apply": u[:, 0] < self.p, "startpoints": start, "endpoints": end,
                "coefficients": perspective_coefficients(start, end)}

    def write_slots(self, geometry: Any, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        self._put(slots, params["apply"], params["coefficients"], op="perspective")

    def extra_repr(self) -> str:
        return (f"distortion_scale={self.distortion_scale}, p={self.p}, interpolation={self.interpolation}, "
                f"fill={self.fill}")
