"""torchvision's automatic augmentation policies as augment programs.

``AutoAugment``, ``RandAugment``, ``TrivialAugmentWide`` and ``AugMix`` keep
torchvision.transforms.v2's arguments, defaults, op tables (the augmentation
spaces), magnitude bins, sign flips and probabilities; what changes is *when*
they draw: torchvision draws once per call, i.e. per image of a per-image
pipeline, and so do we, per sample, from the sample's own uniforms
(``make_params``), so a batch is as random as torchvision's per-image loop.

A drawn op is kept in torchvision's own terms (op name and signed magnitude, in
``params["op"]``/``params["magnitude"]``) and turned into a slot of the augment
program (``csrc_triton.layout``, ``OP_ARGS``) by ``write_slots``:

* ShearX/ShearY/TranslateX/TranslateY/Rotate: ``affine`` with the inverse matrix
  torchvision's ``affine``/``rotate`` build for that op (shear about the pixel
  origin ``center=[0, 0]``, translation truncated to whole pixels as
  ``translate=[int(magnitude), 0]``, rotation by ``-(angle % 360)`` about the
  centre), with the policy's interpolation (nearest or bilinear) and fill;
* Brightness/Color/Contrast/Sharpness: ``brightness``/``saturation``/``contrast``/
  ``sharpness`` with factor ``1 + magnitude``;
* Posterize: ``posterize`` with ``int(magnitude)`` bits; Solarize: ``solarize``
  with threshold ``255 * magnitude`` (torchvision scales by the uint8 bound);
* AutoContrast, Equalize, Invert, Identity: the op of that name.

An op that leaves every uint8 image unchanged in torchvision (factor 1, shear or
rotation 0, translation by 0 pixels, posterize to 8 bits) is written as
``identity``, which skips its launch work and the image statistics it needs.
"""
from __future__ import annotations

import math
from enum import Enum
from functools import lru_cache
from typing import Any, Callable, Optional

import numpy as np
import torch

from csrc_triton import layout

from . import _geometry as G
from ._plan import RunSlot
from ._program import ProgramTransform, fill_values, put_op, warp_filter
from ._registry import register
from ._warp import inverse_affine_matrix

__all__ = ["AugMix", "AutoAugment", "AutoAugmentPolicy", "RandAugment", "TrivialAugmentWide"]


class AutoAugmentPolicy(Enum):
    """The AutoAugment policies (same values as ``torchvision.transforms.AutoAugmentPolicy``)."""

    IMAGENET = "imagenet"
    CIFAR10 = "cifar10"
    SVHN = "svhn"


# --------------------------------------------------------------------------- #
# Augmentation spaces: op name -> (magnitude bins or None, signed)
# --------------------------------------------------------------------------- #

#: every op name a policy can draw; ``params["op"]`` holds indices into it (-1: no op)
OP_NAMES: tuple[str, ...] = (
    "Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
    "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert",
)
_OP_INDEX = {name: i for i, name in enumerate(OP_NAMES)}

#: ``bins(num_bins, height, width)`` -> the magnitude of each bin, or None for an op without one
Bins = Callable[[int, int, int], Optional[torch.Tensor]]


def _linear(start: float, stop: float) -> Bins:
    # float32 like torchvision's tables, so a bin's value is bit-identical to the one it passes on
    return lambda n, h, w: torch.linspace(start, stop, n)


def _linear_w(frac: float) -> Bins:
    return lambda n, h, w: torch.linspace(0.0, frac * w, n)


def _linear_h(frac: float) -> Bins:
    return lambda n, h, w: torch.linspace(0.0, frac * h, n)


def _posterize(top: int, span: int) -> Bins:
    # bits fall from ``top`` to ``top - span`` over the bins, rounded half to even
    return lambda n, h, w: (top - torch.arange(n) / ((n - 1) / span)).round().int()


def _none(n: int, h: int, w: int) -> None:
    return None


Space = dict[str, tuple[Bins, bool]]

_COLOUR_09: Space = {name: (_linear(0.0, 0.9), True) for name in ("Brightness", "Color", "Contrast", "Sharpness")}

#: AutoAugment's ops (its policies index them with 10 bins)
AUTOAUGMENT_SPACE: Space = {
    "ShearX": (_linear(0.0, 0.3), True),
    "ShearY": (_linear(0.0, 0.3), True),
    "TranslateX": (_linear_w(150.0 / 331.0), True),
    "TranslateY": (_linear_h(150.0 / 331.0), True),
    "Rotate": (_linear(0.0, 30.0), True),
    **_COLOUR_09,
    "Posterize": (_posterize(8, 4), False),
    "Solarize": (_linear(1.0, 0.0), False),
    "AutoContrast": (_none, False),
    "Equalize": (_none, False),
    "Invert": (_none, False),
}

#: RandAugment's ops, in the order it draws them
RANDAUGMENT_SPACE: Space = {"Identity": (_none, False),
                            **{k: v for k, v in AUTOAUGMENT_SPACE.items() if k != "Invert"}}

#: TrivialAugmentWide's ops (wider ranges)
TRIVIALAUGMENT_SPACE: Space = {
    "Identity": (_none, False),
    "ShearX": (_linear(0.0, 0.99), True),
    "ShearY": (_linear(0.0, 0.99), True),
    "TranslateX": (_linear(0.0, 32.0), True),
    "TranslateY": (_linear(0.0, 32.0), True),
    "Rotate": (_linear(0.0, 135.0), True),
    **{name: (_linear(0.0, 0.99), True) for name in ("Brightness", "Color", "Contrast", "Sharpness")},
    "Posterize": (_posterize(8, 6), False),
    "Solarize": (_linear(1.0, 0.0), False),
    "AutoContrast": (_none, False),
    "Equalize": (_none, False),
}

#: AugMix's ops without the colour ops (``all_ops=False``)
AUGMIX_PARTIAL_SPACE: Space = {
    "ShearX": (_linear(0.0, 0.3), True),
    "ShearY": (_linear(0.0, 0.3), True),
    "TranslateX": (_linear_w(1.0 / 3.0), True),
    "TranslateY": (_linear_h(1.0 / 3.0), True),
    "Rotate": (_linear(0.0, 30.0), True),
    "Posterize": (_posterize(4, 4), False),
    "Solarize": (_linear(1.0, 0.0), False),
    "AutoContrast": (_none, False),
    "Equalize": (_none, False),
}

#: AugMix's ops with ``all_ops=True``
AUGMIX_SPACE: Space = {**AUGMIX_PARTIAL_SPACE, **_COLOUR_09}

# (op, probability, magnitude bin or None), two per sub-policy
_SubPolicy = tuple[tuple[str, float, Optional[int]], tuple[str, float, Optional[int]]]

POLICIES: dict[AutoAugmentPolicy, tuple[_SubPolicy, ...]] = {
    AutoAugmentPolicy.IMAGENET: (
        (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
        (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
        (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
        (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
        (("Solarize", 0.6, 3), ("Equalize", 0.6, None)),
        (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
        (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
        (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
        (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
        (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
        (("Equalize", 0.0, None), ("Equalize", 0.8, None)),
        (("Invert", 0.6, None), ("Equalize", 1.0, None)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
        (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
        (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
        (("ShearX", 0.6, 5), ("Equalize", 1.0, None)),
        (("Color", 0.4, 0), ("Equalize", 0.6, None)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
        (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Invert", 0.6, None), ("Equalize", 1.0, None)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    ),
    AutoAugmentPolicy.CIFAR10: (
        (("Invert", 0.1, None), ("Contrast", 0.2, 6)),
        (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
        (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)),
        (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)),
        (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
        (("Color", 0.4, 3), ("Brightness", 0.6, 7)),
        (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
        (("Equalize", 0.6, None), ("Equalize", 0.5, None)),
        (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
        (("Color", 0.7, 7), ("TranslateX", 0.5, 8)),
        (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
        (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)),
        (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
        (("Solarize", 0.5, 2), ("Invert", 0.0, None)),
        (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.2, None), ("Equalize", 0.6, None)),
        (("Color", 0.9, 9), ("Equalize", 0.6, None)),
        (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)),
        (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
        (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)),
        (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)),
        (("Equalize", 0.8, None), ("Invert", 0.1, None)),
        (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
    ),
    AutoAugmentPolicy.SVHN: (
        (("ShearX", 0.9, 4), ("Invert", 0.2, None)),
        (("ShearY", 0.9, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.6, None), ("Solarize", 0.6, 6)),
        (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
        (("ShearX", 0.9, 4), ("AutoContrast", 0.8, None)),
        (("ShearY", 0.9, 8), ("Invert", 0.4, None)),
        (("ShearY", 0.9, 5), ("Solarize", 0.2, 6)),
        (("Invert", 0.9, None), ("AutoContrast", 0.8, None)),
        (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
        (("ShearX", 0.9, 4), ("Solarize", 0.3, 3)),
        (("ShearY", 0.8, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.9, None), ("TranslateY", 0.6, 6)),
        (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Contrast", 0.3, 3), ("Rotate", 0.8, 4)),
        (("Invert", 0.8, None), ("TranslateY", 0.0, 2)),
        (("ShearY", 0.7, 6), ("Solarize", 0.4, 8)),
        (("Invert", 0.6, None), ("Rotate", 0.8, 4)),
        (("ShearY", 0.3, 7), ("TranslateX", 0.9, 3)),
        (("ShearX", 0.1, 6), ("Invert", 0.6, None)),
        (("Solarize", 0.7, 2), ("TranslateY", 0.6, 7)),
        (("ShearY", 0.8, 4), ("Invert", 0.8, None)),
        (("ShearX", 0.7, 9), ("TranslateY", 0.8, 3)),
        (("ShearY", 0.8, 5), ("AutoContrast", 0.7, None)),
        (("ShearX", 0.7, 2), ("Invert", 0.1, None)),
    ),
}

#: AutoAugment and AugMix index a table of this many bins
_AUTOAUGMENT_BINS = 10
_AUGMIX_PARAMETER_MAX = 10


# --------------------------------------------------------------------------- #
# Drawing: uniforms -> (op index, signed magnitude) per sample
# --------------------------------------------------------------------------- #

def _pick(u: np.ndarray, n: int) -> np.ndarray:
    """A uniform integer in ``[0, n)`` from a uniform in ``[0, 1)`` (torch.randint's distribution)."""
    return np.minimum((u * n).astype(np.int64), n - 1)


def _sizes(geometry: G.BatchGeometry) -> tuple[np.ndarray, np.ndarray]:
    return geometry.height.astype(np.int64), geometry.width.astype(np.int64)


#: the spaces by name (the cache key of their tables)
SPACES: dict[str, Space] = {"AutoAugment": AUTOAUGMENT_SPACE, "RandAugment": RANDAUGMENT_SPACE,
                            "TrivialAugmentWide": TRIVIALAUGMENT_SPACE, "AugMix": AUGMIX_SPACE,
                            "AugMix-partial": AUGMIX_PARTIAL_SPACE}


@lru_cache(maxsize=256)
def _table(space: str, num_bins: int, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """``[len(OP_NAMES), num_bins]`` magnitudes (0 for ops without) and ``[len(OP_NAMES)]`` signed flags."""
    values = np.zeros((len(OP_NAMES), num_bins), dtype=np.float64)
    signed = np.zeros(len(OP_NAMES), dtype=bool)
    for name, (bins, is_signed) in SPACES[space].items():
        table = bins(num_bins, height, width)
        if table is not None:
            values[_OP_INDEX[name]] = table.double().numpy()
        signed[_OP_INDEX[name]] = is_signed
    return values, signed


def magnitudes(space: str, op: np.ndarray, bin_index: np.ndarray, u_sign: np.ndarray, num_bins: int,
               height: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Signed magnitudes of the ops ``op`` (indices into ``OP_NAMES``; -1 = none) at ``bin_index``.

    As torchvision: the bin's value of the op's table in ``SPACES[space]``
    (computed for the image size), negated when the op is signed and its sign
    uniform is ``<= 0.5``; 0 for ops without a magnitude.
    """
    out = np.zeros(op.shape, dtype=np.float64)
    valid = op >= 0
    for h, w in set(zip(height.tolist(), width.tolist())):
        values, signed = _table(space, num_bins, int(h), int(w))
        sel = valid & (height == h) & (width == w)
        o, b = op[sel], bin_index[sel]
        out[sel] = np.where(signed[o] & (u_sign[sel] <= 0.5), -values[o, b], values[o, b])
    return out


def _space_ops(space: Space) -> np.ndarray:
    return np.array([_OP_INDEX[name] for name in space], dtype=np.int64)


def sample_gamma(alpha: float, u: np.ndarray) -> np.ndarray:
    """Log of Gamma(``alpha``, 1) variates, one per row of ``u`` (``[N, GAMMA_UNIFORMS]`` uniforms).

    Marsaglia and Tsang's method (ACM TOMS 26(3), 2000) with a fixed budget of
    ``_GAMMA_ATTEMPTS`` proposals, each a Box-Muller normal and an acceptance
    uniform, so the uniforms a sample uses do not depend on its draws. Its
    acceptance rate is at least 0.95, so every proposal is rejected with
    probability below 1e-7; the last proposal is then kept. ``alpha < 1`` uses
    Gamma(alpha) = Gamma(alpha + 1) * U ** (1 / alpha) (the last uniform). Logs
    keep tiny ``alpha`` from underflowing to zero.
    """
    a = alpha + 1.0 if alpha < 1.0 else alpha
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    n = u.shape[0]
    result = np.full(n, np.nan)
    for k in range(_GAMMA_ATTEMPTS):
        u1, u2, u3 = u[:, 3 * k], u[:, 3 * k + 1], u[:, 3 * k + 2]
        x = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * math.pi * u2)
        v = (1.0 + c * x) ** 3
        ok = v > 0
        logv = np.log(np.where(ok, v, 1.0))
        accept = ok & (np.log1p(-u3) < 0.5 * x * x + d - d * v + d * logv)
        take = np.isnan(result) & (accept | (k == _GAMMA_ATTEMPTS - 1))
        result[take] = math.log(d) + np.where(ok, logv, 0.0)[take]
    if alpha < 1.0:
        result += np.log1p(-u[:, -1]) / alpha
    return result


_GAMMA_ATTEMPTS = 6
#: uniforms one Gamma variate takes (``sample_gamma``)
GAMMA_UNIFORMS = 3 * _GAMMA_ATTEMPTS + 1


def sample_dirichlet(alpha: float, k: int, u: np.ndarray) -> np.ndarray:
    """``[N, k]`` Dirichlet(``alpha`` * ones(k)) draws from ``[N, k * GAMMA_UNIFORMS]`` uniforms.

    Normalized Gamma variates, as ``torch._sample_dirichlet``; returns float32.
    """
    n = u.shape[0]
    logs = sample_gamma(alpha, u[:, :k * GAMMA_UNIFORMS].reshape(n * k, GAMMA_UNIFORMS)).reshape(n, k)
    logs -= logs.max(axis=1, keepdims=True)
    g = np.exp(logs)
    return (g / g.sum(axis=1, keepdims=True)).astype(np.float32)


# --------------------------------------------------------------------------- #
# Writing: (op, magnitude) -> a slot of the augment program
# --------------------------------------------------------------------------- #

@lru_cache(maxsize=4096)
def op_slot(name: str, magnitude: float, height: int, width: int) -> tuple[str, tuple[tuple[str, float], ...]]:
    """(augment op, its named arguments) that applies torchvision's op ``name`` with ``magnitude``.

    ``height``/``width`` are the image size (the shears' pixel-origin centre
    depends on it). Warp matrices are torchvision's, computed as it does.
    """
    m = float(magnitude)
    if name in ("ShearX", "ShearY"):
        if m == 0.0:
            return "identity", ()
        shear_deg = math.degrees(math.atan(m))
        shear = (shear_deg, 0.0) if name == "ShearX" else (0.0, shear_deg)
        # torchvision shears about the pixel origin: center=[0, 0], i.e. (-w/2, -h/2) from the centre
        return _affine(inverse_affine_matrix((-width * 0.5, -height * 0.5), 0.0, (0.0, 0.0), 1.0, shear))
    if name in ("TranslateX", "TranslateY"):
        pixels = float(int(m))  # torchvision passes translate=[int(magnitude), 0]
        if pixels == 0.0:
            return "identity", ()
        translate = (pixels, 0.0) if name == "TranslateX" else (0.0, pixels)
        return _affine(inverse_affine_matrix((0.0, 0.0), 0.0, translate, 1.0, (0.0, 0.0)))
    if name == "Rotate":
        angle = m % 360.0
        if angle == 0.0:
            return "identity", ()  # torchvision returns a copy
        # rotate() turns anticlockwise: affine's matrix with -angle
        return _affine(inverse_affine_matrix((0.0, 0.0), -angle, (0.0, 0.0), 1.0, (0.0, 0.0)))
    if name in _FACTOR_OPS:
        if m == 0.0:
            return "identity", ()
        return _FACTOR_OPS[name], (("factor", 1.0 + m),)
    if name == "Posterize":
        bits = int(m)
        if bits >= 8:
            return "identity", ()
        return "posterize", (("bits", float(bits)),)
    if name == "Solarize":
        return "solarize", (("threshold", 255.0 * m),)  # torchvision scales by the dtype's bound
    if name in _PLAIN_OPS:
        return _PLAIN_OPS[name], ()
    raise ValueError(f"no augment op for {name!r}")


def _affine(matrix: list[float]) -> tuple[str, tuple[tuple[str, float], ...]]:
    return "affine", tuple(zip(("a", "b", "c", "d", "e", "f"), matrix))


_FACTOR_OPS = {"Brightness": "brightness", "Color": "saturation", "Contrast": "contrast", "Sharpness": "sharpness"}
_PLAIN_OPS = {"Identity": "identity", "AutoContrast": "autocontrast", "Equalize": "equalize", "Invert": "invert"}


@lru_cache(maxsize=16384)
def _slot_row(op: int, magnitude: float, height: int, width: int, interp: int,
              fill: tuple[float, float, float]) -> np.ndarray:
    """The slot row (``[SLOT_WIDTH]`` float32, read-only) of ``OP_NAMES[op]`` at ``magnitude``; -1: identity."""
    row = np.zeros((1, layout.SLOT_WIDTH), dtype=np.float32)
    if op >= 0:
        name, args = op_slot(OP_NAMES[op], magnitude, height, width)
        put_op(row, name, interp=interp, fill=fill, **dict(args))
    row.flags.writeable = False
    return row[0]


def write_ops(slots: np.ndarray, op: np.ndarray, magnitude: np.ndarray, height: np.ndarray, width: np.ndarray,
              interp: int, fill: tuple[float, float, float]) -> None:
    """Write ``op``/``magnitude`` (``[B, K]``, op -1: none) into ``slots`` (``[B, K, SLOT_WIDTH]`` float32).

    A policy has few distinct (op, magnitude, size) per slot, however large the
    batch: their rows are built once (and cached across batches), then gathered.
    """
    B, K = op.shape
    if B == 0:
        return
    for k in range(K):
        keys = np.stack([op[:, k].astype(np.float64), magnitude[:, k], height, width], axis=1)
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)
        rows = np.stack([_slot_row(int(o), m, int(h), int(w), interp, tuple(fill))
                         for o, m, h, w in unique.tolist()])
        slots[:, k] = rows[inverse.reshape(-1)]


# --------------------------------------------------------------------------- #
# Arguments
# --------------------------------------------------------------------------- #

def _check_int(value: Any, name: str, what: str, lo: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or (lo is not None and value < lo):
        raise ValueError(f"{name}: {what} must be an integer{'' if lo is None else f' >= {lo}'}, got {value!r}")
    return value


# --------------------------------------------------------------------------- #
# The policies
# --------------------------------------------------------------------------- #

_NOTES = ("ops and magnitudes drawn per sample (torchvision: per call); runs on the uint8 batch after the "
          "last resize; nearest or bilinear")


class _AutoAugmentBase(ProgramTransform):
    """A program transform whose slots apply torchvision auto-augment ops (see the module docstring)."""

    def __init__(self, interpolation: Any, fill: Any) -> None:
        name = type(self).__name__
        self.interpolation, self.fill = interpolation, fill
        self._filter = warp_filter(interpolation, name, bicubic_as_bilinear=True)
        self._fill = fill_values(fill, name)

    def write_slots(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        h, w = _sizes(geometry)
        write_ops(slots, params["op"], params["magnitude"], h, w, self._filter, self._fill)

    def _base_repr(self) -> str:
        return f"interpolation={self.interpolation!r}, fill={self.fill!r}"


def _policy(policy: Any) -> AutoAugmentPolicy:
    value = getattr(policy, "value", policy)
    try:
        return AutoAugmentPolicy(value)
    except ValueError:
        raise ValueError(f"AutoAugment: unknown policy {policy!r}; use one of "
                         f"{[p.name for p in AutoAugmentPolicy]}") from None


@register("AutoAugment",
          usage="AutoAugment(policy=AutoAugmentPolicy.IMAGENET, interpolation=\"nearest\", fill=None)",
          semantics="same sub-policies, probabilities, magnitude bins and sign flips",
          notes=_NOTES + "; IMAGENET, CIFAR10, SVHN")
class AutoAugment(_AutoAugmentBase):
    """AutoAugment: one of the policy's sub-policies per sample, each of its two ops with its probability.

    Accepts torchvision's ``AutoAugmentPolicy`` or ours (or its value string).
    """

    n_slots = 2
    # the sub-policy, then per op: whether it applies, its sign
    n_uniforms = 5

    def __init__(self, policy: Any = AutoAugmentPolicy.IMAGENET, interpolation: Any = "nearest",
                 fill: Any = None) -> None:
        super().__init__(interpolation, fill)
        self.policy = _policy(policy)
        table = POLICIES[self.policy]
        self._ops = np.array([[_OP_INDEX[op] for op, _, _ in sub] for sub in table], dtype=np.int64)
        self._probs = np.array([[p for _, p, _ in sub] for sub in table], dtype=np.float64)
        self._bins = np.array([[-1 if b is None else b for _, _, b in sub] for sub in table], dtype=np.int64)

    @classmethod
    def from_torchvision(cls, t: Any) -> AutoAugment:
        return cls(t.policy, interpolation=t.interpolation, fill=t.fill)

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        h, w = _sizes(geometry)
        sub = _pick(u[:, 0], len(self._ops))
        op = self._ops[sub]
        applied = u[:, 1:3] <= self._probs[sub]
        bins = np.maximum(self._bins[sub], 0)
        mag = np.stack([magnitudes("AutoAugment", op[:, i], bins[:, i], u[:, 3 + i], _AUTOAUGMENT_BINS, h, w)
                        for i in range(2)], axis=1)
        return {"policy": sub, "op": np.where(applied, op, -1), "magnitude": np.where(applied, mag, 0.0)}

    def extra_repr(self) -> str:
        return f"policy={self.policy}, {self._base_repr()}"


@register("RandAugment",
          usage="RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31, interpolation=\"nearest\", fill=None)",
          semantics="same op table, magnitude bins and sign flips",
          notes=_NOTES)
class RandAugment(_AutoAugmentBase):
    """RandAugment: ``num_ops`` uniformly drawn ops per sample, all at bin ``magnitude``."""

    def __init__(self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31,
                 interpolation: Any = "nearest", fill: Any = None) -> None:
        super().__init__(interpolation, fill)
        self.num_ops = _check_int(num_ops, "RandAugment", "num_ops", 0)
        self.num_magnitude_bins = _check_int(num_magnitude_bins, "RandAugment", "num_magnitude_bins", 2)
        self.magnitude = _check_int(magnitude, "RandAugment", "magnitude", 0)
        if magnitude >= num_magnitude_bins:
            raise ValueError(f"RandAugment: magnitude={magnitude} must be below num_magnitude_bins="
                             f"{num_magnitude_bins} (it indexes the bins)")
        self.n_slots = self.num_ops
        self.n_uniforms = 2 * self.num_ops  # per op: which op, its sign

    @classmethod
    def from_torchvision(cls, t: Any) -> RandAugment:
        return cls(t.num_ops, t.magnitude, t.num_magnitude_bins, interpolation=t.interpolation, fill=t.fill)

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        h, w = _sizes(geometry)
        B = len(geometry)
        ops = _space_ops(RANDAUGMENT_SPACE)
        op = np.zeros((B, self.num_ops), dtype=np.int64)
        mag = np.zeros((B, self.num_ops), dtype=np.float64)
        bins = np.full(B, self.magnitude, dtype=np.int64)
        for k in range(self.num_ops):
            op[:, k] = ops[_pick(u[:, 2 * k], len(ops))]
            mag[:, k] = magnitudes("RandAugment", op[:, k], bins, u[:, 2 * k + 1], self.num_magnitude_bins,
                                   h, w)
        return {"op": op, "magnitude": mag}

    def extra_repr(self) -> str:
        return (f"num_ops={self.num_ops}, magnitude={self.magnitude}, num_magnitude_bins={self.num_magnitude_bins}, "
                f"{self._base_repr()}")


@register("TrivialAugmentWide",
          usage="TrivialAugmentWide(num_magnitude_bins=31, interpolation=\"nearest\", fill=None)",
          semantics="same op table, magnitude bins and sign flips",
          notes=_NOTES)
class TrivialAugmentWide(_AutoAugmentBase):
    """TrivialAugment Wide: one uniformly drawn op per sample at a uniformly drawn bin."""

    n_slots = 1
    n_uniforms = 3  # op, bin, sign

    def __init__(self, num_magnitude_bins: int = 31, interpolation: Any = "nearest", fill: Any = None) -> None:
        super().__init__(interpolation, fill)
        self.num_magnitude_bins = _check_int(num_magnitude_bins, "TrivialAugmentWide", "num_magnitude_bins", 2)

    @classmethod
    def from_torchvision(cls, t: Any) -> TrivialAugmentWide:
        return cls(t.num_magnitude_bins, interpolation=t.interpolation, fill=t.fill)

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        h, w = _sizes(geometry)
        ops = _space_ops(TRIVIALAUGMENT_SPACE)
        op = ops[_pick(u[:, 0], len(ops))]
        bins = _pick(u[:, 1], self.num_magnitude_bins)
        mag = magnitudes("TrivialAugmentWide", op, bins, u[:, 2], self.num_magnitude_bins, h, w)
        return {"op": op[:, None], "magnitude": mag[:, None]}

    def extra_repr(self) -> str:
        return f"num_magnitude_bins={self.num_magnitude_bins}, {self._base_repr()}"


@register("AugMix",
          usage="AugMix(severity=3, mixture_width=3, chain_depth=-1, alpha=1.0, all_ops=True)",
          semantics="same op table, chain depths, Dirichlet/Beta weights and float32 mix truncated to uint8",
          notes=_NOTES)
class AugMix(_AutoAugmentBase):
    """AugMix: ``mixture_width`` chains of ops mixed with Dirichlet weights, then with the image by a Beta weight.

    Slots: chain ``i`` uses slots ``i * depth .. i * depth + depth - 1`` (``depth``
    is ``chain_depth``, or 3 when it is drawn per chain from 1..3; unused slots are
    identity); the rows after them hold the mixing weights in ``m0..m7``:
    the image's weight, then each chain's.
    """

    def __init__(self, severity: int = 3, mixture_width: int = 3, chain_depth: int = -1, alpha: float = 1.0,
                 all_ops: bool = True, interpolation: Any = "bilinear", fill: Any = None) -> None:
        super().__init__(interpolation, fill)
        self.severity = _check_int(severity, "AugMix", "severity")
        if not 1 <= severity <= _AUGMIX_PARAMETER_MAX:
            raise ValueError(f"AugMix: the severity must be between [1, {_AUGMIX_PARAMETER_MAX}]. "
                             f"Got {severity} instead.")
        self.mixture_width = _check_int(mixture_width, "AugMix", "mixture_width", 1)
        self.chain_depth = _check_int(chain_depth, "AugMix", "chain_depth")
        if not alpha > 0:
            raise ValueError(f"AugMix: alpha must be positive, got {alpha!r}")
        self.alpha = float(alpha)
        self.all_ops = bool(all_ops)
        self._space_name = "AugMix" if self.all_ops else "AugMix-partial"
        self._space = SPACES[self._space_name]
        self.depth = chain_depth if chain_depth > 0 else 3
        n_weights = 1 + self.mixture_width
        self.weight_rows = -(-n_weights // 8)  # eight weights (m0..m7) per row
        self.n_slots = self.mixture_width * self.depth + self.weight_rows
        # Beta (2 Gammas) and Dirichlet (mixture_width Gammas) weights, then per chain
        # its depth and per op (op, bin, sign)
        self._chain_u0 = (2 + self.mixture_width) * GAMMA_UNIFORMS
        self.n_uniforms = self._chain_u0 + self.mixture_width * (1 + 3 * self.depth)

    @classmethod
    def from_torchvision(cls, t: Any) -> AugMix:
        return cls(t.severity, t.mixture_width, t.chain_depth, t.alpha, t.all_ops, interpolation=t.interpolation,
                   fill=t.fill)

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        h, w = _sizes(geometry)
        B = len(geometry)
        beta = sample_dirichlet(self.alpha, 2, u[:, :2 * GAMMA_UNIFORMS])
        chains = sample_dirichlet(self.alpha, self.mixture_width, u[:, 2 * GAMMA_UNIFORMS:self._chain_u0])
        # float32 products, as torchvision combines its float32 Dirichlet draws
        weights = np.concatenate([beta[:, :1], chains * beta[:, 1:2]], axis=1).astype(np.float32)
        ops = _space_ops(self._space)
        op = np.full((B, self.mixture_width * self.depth), -1, dtype=np.int64)
        mag = np.zeros(op.shape, dtype=np.float64)
        depth = np.zeros((B, self.mixture_width), dtype=np.int64)
        for i in range(self.mixture_width):
            base = self._chain_u0 + i * (1 + 3 * self.depth)
            depth[:, i] = self.chain_depth if self.chain_depth > 0 else 1 + _pick(u[:, base], 3)
            for j in range(self.depth):
                c = base + 1 + 3 * j
                k = i * self.depth + j
                drawn = ops[_pick(u[:, c], len(ops))]
                bins = _pick(u[:, c + 1], self.severity)
                m = magnitudes(self._space_name, drawn, bins, u[:, c + 2], _AUGMIX_PARAMETER_MAX, h, w)
                used = j < depth[:, i]
                op[:, k] = np.where(used, drawn, -1)
                mag[:, k] = np.where(used, m, 0.0)
        return {"op": op, "magnitude": mag, "depth": depth, "weights": weights}

    def write_slots(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        chain_slots = self.mixture_width * self.depth
        super().write_slots(geometry, params, slots[:, :chain_slots])
        weights = params["weights"]
        for r in range(self.weight_rows):
            part = weights[:, 8 * r:8 * (r + 1)]
            slots[:, chain_slots + r, layout.SLOT_M0:layout.SLOT_M0 + part.shape[1]] = part

    def mixing_weights(self, slots: torch.Tensor) -> torch.Tensor:
        """``[B, 1 + mixture_width]`` float32 weights (the image's, then each chain's) from the weight rows."""
        rows = slots[:, self.mixture_width * self.depth:, layout.SLOT_M0:layout.SLOT_M7 + 1]
        return rows.reshape(rows.shape[0], -1)[:, :1 + self.mixture_width]

    def apply_program(self, images: torch.Tensor, slots: torch.Tensor, run_slot: RunSlot) -> torch.Tensor:
        """Run the chains on ``images`` (uint8 ``[B, 3, H, W]``) and mix them as torchvision does.

        float32 ``w0 * image + sum_i w_i * chain_i``, accumulated in chain order,
        then truncated to uint8 by ``.to(torch.uint8)``.
        """
        weights = self.mixing_weights(slots).to(device=images.device, dtype=torch.float32)
        shape = (images.shape[0], 1, 1, 1)
        mix = weights[:, 0].reshape(shape) * images
        for i in range(self.mixture_width):
            aug = images
            for j in range(self.depth):
                aug = run_slot(aug, slots[:, i * self.depth + j])
            mix.add_(weights[:, 1 + i].reshape(shape) * aug)
        return mix.to(torch.uint8)

    def extra_repr(self) -> str:
        return (f"severity={self.severity}, mixture_width={self.mixture_width}, chain_depth={self.chain_depth}, "
                f"alpha={self.alpha}, all_ops={self.all_ops}, {self._base_repr()}")
