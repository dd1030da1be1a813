"""timm's training augmentations, converted by class name.

timm (``timm.data.create_transform(..., is_training=True)``) builds its training
pipelines from torchvision transforms plus a few of its own classes. This module
holds the torchdali equivalents of timm's own augmentation classes; they are
registered under ``timm.<ClassName>`` and converted from any object whose class
lives in a ``timm.`` module, by reading its attributes. timm itself is never
imported.

* ``timm.data.auto_augment.RandAugment`` -> ``TimmRandAugment``: an augment
  program of ``num_layers`` slots. Per sample and layer it draws, as timm's
  ``RandAugment.__call__`` / ``AugmentOp.__call__`` do: the op (uniformly with
  replacement, or without replacement by ``choice_weights`` as
  ``np.random.choice(..., replace=False, p=...)`` does: successive draws from the
  renormalised remaining weights), whether it applies (``prob``), its magnitude
  (``gauss(magnitude, magnitude_std)``, or ``uniform(0, magnitude)`` for an
  infinite std, clipped to ``[0, magnitude_max or 10]``), the random sign of
  signed ops, and timm's level argument from that magnitude. Each op then runs
  as the program op of the same meaning on the uint8 image:

  - ShearX/Y, TranslateX/Y(Rel), Rotate: ``affine`` with the matrix timm hands to
    PIL (``Image.transform(AFFINE)``; PIL's ``rotate`` about the centre), moved to
    the centred output->input convention of the program's affine, fill
    ``img_mean``. timm picks bilinear or bicubic at random per op; the program's
    warps are bilinear (or nearest when timm's interpolation is nearest), so the
    bicubic half is resampled bilinearly.
  - Brightness/Color/Contrast/Sharpness (and ``Increasing``): ``brightness``,
    ``saturation``, ``contrast``, ``sharpness`` with timm's enhancement factor
    (PIL's ImageEnhance blends with the same degenerate images; torchvision's
    tensor ops differ from PIL by rounding: the grayscale of Color and the mean
    of Contrast).
  - Posterize/Solarize (all variants), SolarizeAdd, AutoContrast, Equalize,
    Invert, Desaturate: ``posterize``, ``solarize``, ``solarize_add``,
    ``autocontrast``, ``equalize``, ``invert``, ``saturation``. PosterizeIncreasing
    at magnitude 10 keeps 0 bits: a black image, as older PIL and torchvision give
    (PIL 13 raises for 0 bits, so timm itself fails there with it).

  GaussianBlur and GaussianBlurRand (timm's '3a' sets) are refused: PIL's
  GaussianBlur is an iterated box blur with no kernel-size argument, not
  torchvision's Gaussian kernel.

* ``timm.data.auto_augment.AutoAugment`` -> ``TimmAutoAugment``: the same
  AugmentOps, one sub-policy per sample (``random.choice(policy)``), its ops in
  order, one slot each.

* ``timm.data.random_erasing.RandomErasing`` -> ``TimmRandomErasing``:
  torchvision's ``RandomErasing`` on the normalized output. With one box per
  image (``max_count`` of 1) timm's draw is torchvision's (probability, area
  fraction in ``[min_area, max_area]``, log-uniform aspect, ten attempts, strict
  fit, uniform position); ``mode='const'`` erases with 0 and ``mode='pixel'``
  with per-pixel standard normal noise. ``mode='rand'`` (one normal colour per
  box) and several boxes per image are refused.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from csrc_triton import layout

from . import _geometry as G
from ._erase import RandomErasing
from ._program import ProgramTransform, put_op
from ._registry import register

__all__ = ["TIMM_AUGMENT_OPS", "TimmAutoAugment", "TimmRandAugment", "TimmRandomErasing"]

_LEVEL_DENOM = 10.0  # timm's 'M' magnitude scale: level = magnitude / 10
_DEFAULT_FILL = (128, 128, 128)  # timm's _FILL, used when hparams has no img_mean
_DEFAULT_TRANSLATE_CONST = 250  # timm's _HPARAMS_DEFAULT
_DEFAULT_TRANSLATE_PCT = 0.45
_PIL_NEAREST, _PIL_BILINEAR, _PIL_BICUBIC = 0, 2, 3  # PIL.Image.Resampling values

#: timm's AugmentOp names that run as program ops
TIMM_AUGMENT_OPS: tuple[str, ...] = (
    "AutoContrast", "Equalize", "Invert", "Rotate",
    "Posterize", "PosterizeIncreasing", "PosterizeOriginal", "Solarize", "SolarizeIncreasing", "SolarizeAdd",
    "Color", "ColorIncreasing", "Contrast", "ContrastIncreasing", "Brightness", "BrightnessIncreasing",
    "Sharpness", "SharpnessIncreasing", "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel",
    "TranslateYRel", "Desaturate",
)

_REFUSED_OPS = {
    "GaussianBlur": "PIL's GaussianBlur(radius) is an iterated box blur without a kernel size, "
                    "not torchvision's Gaussian kernel",
    "GaussianBlurRand": "PIL's GaussianBlur(radius) is an iterated box blur without a kernel size, "
                        "not torchvision's Gaussian kernel",
}

_GEOMETRIC = ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel", "TranslateYRel")
_NO_LEVEL = ("AutoContrast", "Equalize", "Invert")


def _timm_level(name: str, magnitude: np.ndarray, negate: np.ndarray, hparams: dict[str, Any]) -> np.ndarray:
    """timm's level argument (``LEVEL_TO_ARG[name]``) for float64 magnitudes; ``negate`` flips signed ones.

    float64 and the same order of operations as timm's Python floats, so integer
    levels (posterize bits, solarize thresholds) truncate where timm's do.
    """
    level = magnitude / _LEVEL_DENOM
    sign = np.where(negate, -1.0, 1.0)
    if name in _NO_LEVEL:
        return np.zeros_like(magnitude)
    if name == "Rotate":
        return sign * (level * 30.0)
    if name in ("Color", "Contrast", "Brightness", "Sharpness"):
        return level * 1.8 + 0.1
    if name.endswith("Increasing") and name[: -len("Increasing")] in ("Color", "Contrast", "Brightness", "Sharpness"):
        return np.maximum(0.1, 1.0 + sign * (level * 0.9))
    if name in ("ShearX", "ShearY"):
        return sign * (level * 0.3)
    if name in ("TranslateX", "TranslateY"):
        return sign * (level * float(hparams.get("translate_const", _DEFAULT_TRANSLATE_CONST)))
    if name in ("TranslateXRel", "TranslateYRel"):
        return sign * (level * hparams.get("translate_pct", _DEFAULT_TRANSLATE_PCT))
    bits = np.trunc(level * 4)  # int(): magnitudes are >= 0
    if name == "Posterize":
        return bits
    if name == "PosterizeIncreasing":
        return 4 - bits
    if name == "PosterizeOriginal":
        return bits + 4
    threshold = np.minimum(256, np.trunc(level * 256))
    if name == "Solarize":
        return threshold
    if name == "SolarizeIncreasing":
        return 256 - threshold
    if name == "SolarizeAdd":
        return np.minimum(128, np.trunc(level * 110))
    if name == "Desaturate":
        return np.clip(0.5 + 0.5 * level, 0.5, 1.0)
    raise KeyError(name)


def _pil_code(value: Any) -> int:
    return int(getattr(value, "value", value))


def _interp(resample: Any, where: str) -> int:
    """Program filter for timm's ``resample`` (a PIL code, or a tuple timm picks from at random)."""
    codes = [_pil_code(r) for r in resample] if isinstance(resample, (list, tuple)) else [_pil_code(resample)]
    if any(c not in (_PIL_NEAREST, _PIL_BILINEAR, _PIL_BICUBIC) for c in codes):
        raise ValueError(f"{where}: PIL's affine transform resamples with nearest, bilinear or bicubic only, "
                         f"got resample={resample!r}")
    if codes == [_PIL_NEAREST]:
        return layout.FILTER_NEAREST
    # bicubic (alone or as timm's random half) is resampled bilinearly: the program's warps are
    # torchvision's grid_sample warps, which have nearest and bilinear modes only
    return layout.FILTER_BILINEAR


class _Op:
    """One of timm's ``AugmentOp``s, read from its attributes."""

    def __init__(self, name: str, prob: float, magnitude: float, magnitude_std: float,
                 magnitude_max: float | None, hparams: dict[str, Any], fill: Sequence[float], interp: int) -> None:
        self.name, self.prob, self.magnitude = name, float(prob), float(magnitude)
        self.magnitude_std = float(magnitude_std)
        self.upper = float(magnitude_max or _LEVEL_DENOM)
        self.hparams = dict(hparams)
        self.fill = tuple(float(f) for f in fill)
        self.interp = interp

    def __repr__(self) -> str:
        return f"{self.name}(p={self.prob}, m={self.magnitude}, mstd={self.magnitude_std})"


class _TimmOps(ProgramTransform):
    """timm's ``AugmentOp``s run as program ops: their per-op draws (prob, magnitude, sign,
    level) and the slots they write. Subclasses pick which op each slot runs."""

    ops: list[_Op]
    _title = "timm"

    def _make_op(self, op: dict[str, Any]) -> _Op:
        name = op["name"]
        if name in _REFUSED_OPS:
            raise ValueError(f"{self._title} op {name} is not supported: {_REFUSED_OPS[name]}")
        if name not in TIMM_AUGMENT_OPS:
            raise ValueError(f"{self._title}: unknown op {name!r}; supported: {', '.join(TIMM_AUGMENT_OPS)}")
        # what AugmentOp.__init__ derives from hparams, unless given (as from_timm does) explicitly
        hparams = dict(op.get("hparams") or {})
        fill = op.get("fill", hparams.get("img_mean", _DEFAULT_FILL))
        if isinstance(fill, (int, float)):
            fill = (fill,) * 3
        if len(fill) != 3:
            raise ValueError(f"{self._title}: img_mean must have 3 values, got {fill!r}")
        resample = op.get("resample", hparams.get("interpolation", (_PIL_BILINEAR, _PIL_BICUBIC)))
        interp = _interp(resample, f"{self._title} op {name}") if name in _GEOMETRIC else layout.FILTER_BILINEAR
        std = max(float(op.get("magnitude_std", hparams.get("magnitude_std", 0)) or 0), 0.0)
        return _Op(name, op.get("prob", 0.5), op.get("magnitude", 10), std,
                   op.get("magnitude_max", hparams.get("magnitude_max", None)), hparams, fill, interp)

    @staticmethod
    def _op_dict(op: Any) -> dict[str, Any]:
        """A timm ``AugmentOp``'s attributes (its kwargs hold the fill and resample it passes to PIL)."""
        kwargs = getattr(op, "kwargs", {})
        out = dict(name=op.name, prob=op.prob, magnitude=op.magnitude, hparams=op.hparams,
                   magnitude_std=op.magnitude_std, magnitude_max=op.magnitude_max)
        if "fillcolor" in kwargs:
            out["fill"] = kwargs["fillcolor"]
        if "resample" in kwargs:
            out["resample"] = kwargs["resample"]
        return out

    def _draw_ops(self, chosen: np.ndarray, u: np.ndarray) -> dict[str, np.ndarray]:
        """What ``AugmentOp.__call__`` draws for the ops ``chosen`` (``[B, L]`` indices into
        ``self.ops``, -1 for none) from ``u`` (``[B, L, 4]``: prob check, two uniforms of
        the normal magnitude noise, sign). Returns ``op`` (``chosen``, -1 where the op does
        not apply) and ``level`` (timm's level argument, float64)."""
        valid = chosen >= 0
        safe = np.maximum(chosen, 0)
        prob = np.array([o.prob for o in self.ops])[safe]
        mag = np.array([o.magnitude for o in self.ops])[safe]
        std = np.array([o.magnitude_std for o in self.ops])[safe]
        upper = np.array([o.upper for o in self.ops])[safe]
        # Box-Muller on (1 - u) in (0, 1], so the log is finite
        normal = np.sqrt(-2.0 * np.log1p(-u[..., 1])) * np.cos(2.0 * math.pi * u[..., 2])
        magnitude = mag.copy()
        noisy = (std > 0) & np.isfinite(std)
        magnitude[noisy] += std[noisy] * normal[noisy]
        uniform = np.isinf(std)  # timm: an infinite std means uniform(0, magnitude)
        magnitude[uniform] = mag[uniform] * u[..., 1][uniform]
        magnitude = np.maximum(0.0, np.minimum(magnitude, upper))
        negate = u[..., 3] > 0.5
        level = np.zeros(chosen.shape, dtype=np.float64)
        for i, o in enumerate(self.ops):
            mask = chosen == i
            if mask.any():
                level[mask] = _timm_level(o.name, magnitude[mask], negate[mask], o.hparams)
        # timm skips an op when prob < 1 and random() > prob
        applied = valid & ((prob >= 1.0) | (u[..., 0] <= prob))
        return {"op": np.where(applied, chosen, -1), "level": np.where(applied, level, 0.0)}

    def write_slots(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        height = np.asarray(geometry.height, dtype=np.float64)
        width = np.asarray(geometry.width, dtype=np.float64)
        for k in range(self.n_slots):
            for i, o in enumerate(self.ops):
                where = params["op"][:, k] == i
                if where.any():
                    _write_op(o, params["level"][:, k], height, width, slots[:, k], where)


@register("timm.RandAugment",
          semantics="timm.data.auto_augment's op table, per-op prob, magnitude noise, signs, weighted choice",
          notes="drawn per sample; warps bilinear (timm's bicubic half too); no GaussianBlur ops")
class TimmRandAugment(_TimmOps):
    """timm's RandAugment as an augment program of ``num_layers`` slots (see the module docstring).

    ``ops`` is a list of dicts (``name``, ``prob``, ``magnitude``, ``hparams``) in
    timm's ``AugmentOp`` terms; ``from_timm`` reads them off a timm object.
    """

    _title = "RandAugment"

    def __init__(self, ops: Sequence[dict[str, Any]], num_layers: int = 2,
                 choice_weights: Sequence[float] | None = None) -> None:
        if not ops:
            raise ValueError("RandAugment: no ops")
        self.ops = [self._make_op(dict(op)) for op in ops]
        self.num_layers = int(num_layers)
        if self.num_layers < 0:
            raise ValueError(f"RandAugment: num_layers must be >= 0, got {num_layers}")
        if choice_weights is not None:
            w = np.asarray(choice_weights, dtype=np.float64)
            if w.shape != (len(self.ops),) or np.any(w < 0) or not np.isclose(w.sum(), 1.0):
                raise ValueError("RandAugment: choice_weights must be one probability per op, summing to 1")
            if np.count_nonzero(w) < self.num_layers:
                raise ValueError("RandAugment: fewer ops with non-zero weight than num_layers "
                                 "(ops are chosen without replacement when weighted)")
            choice_weights = w
        self.choice_weights = choice_weights
        self.n_slots = self.num_layers
        # per layer: op choice, prob check, two uniforms for the normal magnitude noise, sign
        self.n_uniforms = 5 * self.num_layers

    @classmethod
    def from_timm(cls, t: Any) -> TimmRandAugment:
        weights = None if t.choice_weights is None else list(np.asarray(t.choice_weights, dtype=np.float64))
        return cls([cls._op_dict(op) for op in t.ops], num_layers=t.num_layers, choice_weights=weights)

    from_torchvision = from_timm

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        """``op``: index into ``self.ops`` per (sample, layer), -1 where no op applies;
        ``level``: timm's level argument of that op (float64)."""
        n, layers = len(geometry), self.num_layers
        if layers == 0 or n == 0:
            return {"op": np.full((n, layers), -1, dtype=np.int64), "level": np.zeros((n, layers))}
        u = np.asarray(u, dtype=np.float64).reshape(n, layers, 5)
        return self._draw_ops(self._choose(u[:, :, 0]), u[:, :, 1:])

    def _choose(self, u: np.ndarray) -> np.ndarray:
        n_ops = len(self.ops)
        if self.choice_weights is None:
            return np.minimum(np.floor(u * n_ops).astype(np.int64), n_ops - 1)
        # numpy's choice(replace=False, p=w): successive draws from the renormalised remaining weights
        w = np.broadcast_to(self.choice_weights, (u.shape[0], n_ops)).copy()
        rows = np.arange(u.shape[0])
        out = np.empty(u.shape, dtype=np.int64)
        for k in range(u.shape[1]):
            cdf = np.cumsum(w, axis=1)
            cdf /= cdf[:, -1:]
            pick = np.minimum((cdf <= u[:, k:k + 1]).sum(axis=1), n_ops - 1)
            # never land on a zero-weight op through the clamp above
            while True:
                bad = w[rows, pick] == 0
                if not bad.any():
                    break
                pick[bad] -= 1
            out[:, k] = pick
            w[rows, pick] = 0.0
        return out

    def extra_repr(self) -> str:
        return f"num_layers={self.num_layers}, ops={self.ops}, weighted={self.choice_weights is not None}"


@register("timm.AutoAugment",
          semantics="timm.data.auto_augment's policies (v0, v0r, original, originalr), per-op prob, magnitude noise",
          notes="drawn per sample; warps bilinear (timm's bicubic half too); no GaussianBlur ops ('3a')")
class TimmAutoAugment(_TimmOps):
    """timm's AutoAugment: per sample one sub-policy, chosen uniformly, whose ops run in order.

    ``policy`` is a list of sub-policies, each a list of op dicts as ``TimmRandAugment``'s.
    """

    _title = "AutoAugment"

    def __init__(self, policy: Sequence[Sequence[dict[str, Any]]]) -> None:
        if not policy or not all(policy):
            raise ValueError("AutoAugment: the policy needs at least one sub-policy, each with at least one op")
        self.ops = [self._make_op(dict(op)) for sub in policy for op in sub]
        self.n_slots = max(len(sub) for sub in policy)
        # [sub-policy, slot] -> index into self.ops, -1 past the end of a shorter sub-policy
        self._table = np.full((len(policy), self.n_slots), -1, dtype=np.int64)
        i = 0
        for s, sub in enumerate(policy):
            self._table[s, : len(sub)] = np.arange(i, i + len(sub))
            i += len(sub)
        # sub-policy choice, then per slot: prob check, two uniforms for the magnitude noise, sign
        self.n_uniforms = 1 + 4 * self.n_slots

    @classmethod
    def from_timm(cls, t: Any) -> TimmAutoAugment:
        return cls([[cls._op_dict(op) for op in sub] for sub in t.policy])

    from_torchvision = from_timm

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        """As ``TimmRandAugment.make_params``, one column per op of the chosen sub-policy."""
        n = len(geometry)
        u = np.asarray(u, dtype=np.float64).reshape(n, self.n_uniforms)
        n_sub = len(self._table)
        sub = np.minimum(np.floor(u[:, 0] * n_sub).astype(np.int64), n_sub - 1)
        return self._draw_ops(self._table[sub], u[:, 1:].reshape(n, self.n_slots, 4))

    def extra_repr(self) -> str:
        return f"sub_policies={len(self._table)}, ops={self.ops}"


def _affine_rows(name: str, level: np.ndarray, height: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Centred inverse affine ``(a, b, c, d, e, f)`` per sample for timm's warp ``name``.

    timm hands PIL a matrix from output to input pixel coordinates with the origin
    at the top-left corner (``x_in = a x + b y + c``); the program's affine takes
    it relative to the image centre: ``[A | A c0 + t - c0]`` for the centre ``c0``.
    """
    one, zero = np.ones_like(level), np.zeros_like(level)
    if name == "ShearX":  # PIL (1, f, 0, 0, 1, 0)
        return np.stack([one, level, level * height / 2, zero, one, zero], axis=1)
    if name == "ShearY":  # PIL (1, 0, 0, f, 1, 0)
        return np.stack([one, zero, zero, level, one, level * width / 2], axis=1)
    if name in ("TranslateX", "TranslateXRel"):  # PIL (1, 0, px, 0, 1, 0)
        px = level * width if name == "TranslateXRel" else level
        return np.stack([one, zero, px, zero, one, zero], axis=1)
    if name in ("TranslateY", "TranslateYRel"):  # PIL (1, 0, 0, 0, 1, py)
        py = level * height if name == "TranslateYRel" else level
        return np.stack([one, zero, zero, zero, one, py], axis=1)
    if name == "Rotate":  # PIL's rotate(deg) about the centre: output -> input by angle -deg
        angle = -np.radians(level)
        cos, sin = np.cos(angle), np.sin(angle)
        return np.stack([cos, sin, zero, -sin, cos, zero], axis=1)
    raise KeyError(name)


def _write_op(o: _Op, level: np.ndarray, height: np.ndarray, width: np.ndarray, slot: np.ndarray,
              where: np.ndarray) -> None:
    """Write timm's op ``o`` with level arguments ``level`` ([B]) into ``slot`` ([B, SLOT_WIDTH]) at ``where``."""
    name = o.name
    if name in _GEOMETRIC:
        put_op(slot, "affine", where, interp=o.interp, fill=o.fill,
               **dict(zip("abcdef", _affine_rows(name, level, height, width).T)))
    elif name in ("AutoContrast", "Equalize", "Invert"):
        put_op(slot, name.lower(), where)
    elif name.startswith("Posterize"):
        # timm returns the image unchanged for 8 bits or more
        put_op(slot, "posterize", where & (level < 8), bits=level)
    elif name.startswith("Solarize") and name != "SolarizeAdd":
        # a threshold of 256 changes no uint8 value (and is out of torchvision's range)
        put_op(slot, "solarize", where & (level <= 255), threshold=level)
    elif name == "SolarizeAdd":
        put_op(slot, "solarize_add", where, addition=level, threshold=128.0)
    elif name == "Desaturate":
        put_op(slot, "saturation", where, factor=np.clip(1.0 - level, 0.0, 1.0))
    else:
        base = name[: -len("Increasing")] if name.endswith("Increasing") else name
        put_op(slot, {"Color": "saturation", "Contrast": "contrast", "Brightness": "brightness",
                      "Sharpness": "sharpness"}[base], where, factor=level)


@register("timm.RandomErasing",
          semantics="timm.data.random_erasing's box draw with one box; mode 'const' (0) or 'pixel' (normal noise)",
          notes="= `RandomErasing(probability, (min_area, max_area), (min_aspect, max_aspect))`; "
                "mode 'rand' and max_count > 1 refused")
class TimmRandomErasing(RandomErasing):
    """timm's RandomErasing with one box per image: torchvision's RandomErasing with timm's defaults.

    timm draws the box as torchvision does (see the module docstring); its 'const'
    mode erases with 0 and its 'pixel' mode with standard normal noise, on the
    normalized image it follows. ``mode='rand'`` and several boxes are refused.
    """

    def __init__(self, probability: float = 0.5, min_area: float = 0.02, max_area: float = 1 / 3,
                 min_aspect: float = 0.3, max_aspect: float | None = None, mode: str = "const",
                 min_count: int = 1, max_count: int | None = None) -> None:
        mode = (mode or "const").lower()
        if mode == "rand":
            raise ValueError("timm RandomErasing(mode='rand') draws one normal colour per box; torchdali erases "
                             "with a constant or per-pixel noise: use mode='const' or mode='pixel'")
        if mode not in ("const", "pixel"):
            raise ValueError(f"timm RandomErasing: unknown mode {mode!r} (timm has 'const', 'rand', 'pixel')")
        max_count = max_count or min_count
        if min_count != 1 or max_count != 1:
            raise ValueError(f"timm RandomErasing with count=({min_count}, {max_count}) erases up to {max_count} "
                             "boxes per image; torchdali erases one box per image: use max_count=1 (re_count=1)")
        max_aspect = max_aspect or 1 / min_aspect
        super().__init__(p=probability, scale=(min_area, max_area), ratio=(min_aspect, max_aspect),
                         value="random" if mode == "pixel" else 0.0)
        self.mode = mode

    @classmethod
    def from_timm(cls, t: Any) -> TimmRandomErasing:
        # timm keeps the aspect range as logs; its num_splits only splits 4-D batches, which a
        # per-sample pipeline never hands it
        lo, hi = t.log_aspect_ratio
        return cls(t.probability, t.min_area, t.max_area, math.exp(lo), math.exp(hi), mode=t.mode,
                   min_count=t.min_count, max_count=t.max_count)

    from_torchvision = from_timm

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, mode={self.mode!r}"
