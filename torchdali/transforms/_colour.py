"""Photometric transforms, named after ``torchvision.transforms.v2``; augment-program ops.

Each runs on the uint8 output-size image after the fused kernel, as program
slots (``_plan.py``), with exactly the arithmetic of the torchvision.transforms.v2
functional of the same name on a uint8 tensor. Parameters are drawn per sample
with torchvision's distributions.
"""
from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np

from ._program import ProgramTransform, RandomApplyOp, check_p, put_op
from ._registry import register

__all__ = [
    "ColorJitter", "GaussianBlur", "Grayscale", "RandomAdjustSharpness", "RandomAutocontrast", "RandomEqualize",
    "RandomGrayscale", "RandomInvert", "RandomPhotometricDistort", "RandomPosterize", "RandomSolarize",
]


def _uniform(lo: float, hi: float, u: np.ndarray) -> np.ndarray:
    """``torch.empty(1).uniform_(lo, hi)`` from uniforms ``u``: computed (and rounded) in float32."""
    lo32, hi32 = np.float32(lo), np.float32(hi)
    return (lo32 + (hi32 - lo32) * u.astype(np.float32)).astype(np.float64)


def _jitter_range(value: Any, name: str, center: float = 1.0, bound: tuple[float, float] = (0.0, float("inf")),
                  clip_first_on_zero: bool = True) -> tuple[float, float] | None:
    """torchvision's ``ColorJitter._check_input``: the factor range, or None when it is the identity."""
    if value is None:
        return None
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"ColorJitter: if {name} is a single number, it must be non negative")
        lohi = [center - float(value), center + float(value)]
        if clip_first_on_zero:
            lohi[0] = max(lohi[0], 0.0)
    elif isinstance(value, Sequence) and len(value) == 2:
        lohi = [float(v) for v in value]
    else:
        raise TypeError(f"ColorJitter: {name}={value} should be a single number or a sequence with length 2")
    if not bound[0] <= lohi[0] <= lohi[1] <= bound[1]:
        raise ValueError(f"ColorJitter: {name} values should be between {bound} and increasing, but got {lohi}")
    return None if lohi[0] == lohi[1] == center else (lohi[0], lohi[1])


@register("ColorJitter", usage="ColorJitter(brightness=0, contrast=0, saturation=0, hue=0)",
          semantics="same factor ranges, the four ops in a random order per sample",
          notes="drawn per sample; uint8 ops on the output-size image")
class ColorJitter(ProgramTransform):
    """Random brightness, contrast, saturation and hue, in a random order, per sample.

    As torchvision's ``ColorJitter``: each factor is uniform in its range
    (``_check_input``'s ranges) and the order of the four ops is a uniformly random
    permutation (``torch.randperm(4)``), drawn per sample here.
    """

    n_uniforms = 8  # the order (4), then the brightness, contrast, saturation and hue factors
    n_slots = 4
    #: the ops in torchvision's numbering of ``fn_idx``
    OPS = ("brightness", "contrast", "saturation", "hue")

    def __init__(self, brightness: Any = None, contrast: Any = None, saturation: Any = None,
                 hue: Any = None) -> None:
        self.brightness = _jitter_range(brightness, "brightness")
        self.contrast = _jitter_range(contrast, "contrast")
        self.saturation = _jitter_range(saturation, "saturation")
        self.hue = _jitter_range(hue, "hue", center=0.0, bound=(-0.5, 0.5), clip_first_on_zero=False)

    @classmethod
    def from_torchvision(cls, t: Any) -> ColorJitter:
        return cls(t.brightness, t.contrast, t.saturation, t.hue)

    def make_params(self, geometry: Any, u: np.ndarray | None) -> dict[str, np.ndarray]:
        # the ranks of four iid uniforms are a uniformly random permutation, like randperm(4)
        params: dict[str, np.ndarray] = {"order": np.argsort(u[:, :4], axis=1, kind="stable")}
        for i, name in enumerate(self.OPS):
            lohi = getattr(self, name)
            if lohi is not None:
                params[name] = _uniform(lohi[0], lohi[1], u[:, 4 + i])
        return params

    def write_slots(self, geometry: Any, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        order = params["order"]
        for k in range(4):
            for fn, name in enumerate(self.OPS):
                if name in params:
                    put_op(slots[:, k], name, order[:, k] == fn, factor=params[name])

    def extra_repr(self) -> str:
        return ", ".join(f"{n}={getattr(self, n)}" for n in self.OPS if getattr(self, n) is not None)


@register("RandomPhotometricDistort",
          usage="RandomPhotometricDistort(brightness=(0.875, 1.125), contrast=(0.5, 1.5), saturation=(0.5, 1.5), "
                "hue=(-0.05, 0.05), p=0.5)",
          semantics="same order (contrast before or after saturation and hue), each op and the channel "
                    "permutation with its own p",
          notes="drawn per sample (SSD); uint8 ops on the output-size image")
class RandomPhotometricDistort(ProgramTransform):
    """SSD's photometric distortion, drawn per sample, as torchvision's ``RandomPhotometricDistort``:
    brightness, contrast (before saturation, or after hue: a coin), saturation, hue, then a
    random channel permutation (``torch.randperm(3)``), each applied with probability ``p``
    and with a factor uniform in its range."""

    #: per sample: 4 coins and 4 factors (brightness, contrast, saturation, hue), the
    #: contrast-before coin, the permutation coin and 3 uniforms whose ranks are the permutation
    n_uniforms = 13
    n_slots = 6  # brightness, contrast (before), saturation, hue, contrast (after), permutation
    OPS = ("brightness", "contrast", "saturation", "hue")

    def __init__(self, brightness: Sequence[float] = (0.875, 1.125), contrast: Sequence[float] = (0.5, 1.5),
                 saturation: Sequence[float] = (0.5, 1.5), hue: Sequence[float] = (-0.05, 0.05),
                 p: float = 0.5) -> None:
        for name, value in (("brightness", brightness), ("contrast", contrast), ("saturation", saturation),
                            ("hue", hue)):
            if not (isinstance(value, Sequence) and len(value) == 2 and value[0] <= value[1]):
                raise ValueError(f"RandomPhotometricDistort: {name} must be (min, max), got {value!r}")
            setattr(self, name, (float(value[0]), float(value[1])))
        if not -0.5 <= self.hue[0] <= self.hue[1] <= 0.5:
            raise ValueError(f"RandomPhotometricDistort: hue must lie in [-0.5, 0.5], got {self.hue}")
        self.p = check_p(p, "RandomPhotometricDistort")

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomPhotometricDistort:
        return cls(tuple(t.brightness), tuple(t.contrast), tuple(t.saturation), tuple(t.hue), p=t.p)

    def make_params(self, geometry: Any, u: np.ndarray | None) -> dict[str, np.ndarray]:
        params: dict[str, np.ndarray] = {}
        for i, name in enumerate(self.OPS):
            lo, hi = getattr(self, name)
            params[f"apply_{name}"] = u[:, i] < self.p
            params[name] = _uniform(lo, hi, u[:, 4 + i])
        params["contrast_before"] = u[:, 8] < 0.5
        params["permute"] = u[:, 9] < self.p
        # the ranks of three iid uniforms are a uniformly random permutation, like randperm(3)
        params["permutation"] = np.argsort(u[:, 10:13], axis=1, kind="stable")
        return params

    def write_slots(self, geometry: Any, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        before = params["contrast_before"]
        for k, name, where in ((0, "brightness", None), (1, "contrast", before), (2, "saturation", None),
                               (3, "hue", None), (4, "contrast", ~before)):
            on = params[f"apply_{name}"] if where is None else params[f"apply_{name}"] & where
            put_op(slots[:, k], name, on, factor=params[name])
        perm = params["permutation"]
        put_op(slots[:, 5], "permute_channels", params["permute"], c0=perm[:, 0], c1=perm[:, 1], c2=perm[:, 2])

    def extra_repr(self) -> str:
        return (f"brightness={self.brightness}, contrast={self.contrast}, saturation={self.saturation}, "
                f"hue={self.hue}, p={self.p}")


@register("Grayscale", usage="Grayscale(num_output_channels=1)", semantics="same luma weights",
          notes="always 3 output channels (of equal value), as the batch is RGB")
class Grayscale(ProgramTransform):
    """Convert to grayscale. The batch keeps 3 channels: with ``num_output_channels=1``
    each holds the gray value (torchvision would return one channel)."""

    def __init__(self, num_output_channels: int = 1) -> None:
        if num_output_channels not in (1, 3):
            raise ValueError(f"Grayscale: num_output_channels must be 1 or 3, got {num_output_channels}")
        self.num_output_channels = num_output_channels

    @classmethod
    def from_torchvision(cls, t: Any) -> Grayscale:
        return cls(t.num_output_channels)

    def write_slots(self, geometry: Any, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        put_op(slots[:, 0], "grayscale")

    def extra_repr(self) -> str:
        return f"num_output_channels={self.num_output_channels}"


@register("RandomGrayscale", usage="RandomGrayscale(p=0.1)", semantics="yes", notes="drawn per sample")
class RandomGrayscale(RandomApplyOp):
    """Grayscale (3 equal channels) with probability ``p``, per sample."""

    op = "grayscale"

    def __init__(self, p: float = 0.1) -> None:
        super().__init__(p)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomGrayscale:
        return cls(t.p)


@register("RandomInvert", usage="RandomInvert(p=0.5)", semantics="yes", notes="drawn per sample")
class RandomInvert(RandomApplyOp):
    """``255 - x`` with probability ``p``, per sample."""

    op = "invert"

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomInvert:
        return cls(t.p)


@register("RandomPosterize", usage="RandomPosterize(bits, p=0.5)", semantics="yes", notes="drawn per sample")
class RandomPosterize(RandomApplyOp):
    """Keep the ``bits`` high bits of each channel with probability ``p``, per sample."""

    op = "posterize"

    def __init__(self, bits: int, p: float = 0.5) -> None:
        super().__init__(p)
        if not isinstance(bits, numbers.Integral) or not 0 <= bits <= 8:
            raise ValueError(f"RandomPosterize: bits must be an int in [0, 8], got {bits!r}")
        self.bits = int(bits)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomPosterize:
        return cls(t.bits, t.p)

    def op_args(self) -> dict[str, float]:
        return {"bits": self.bits}


@register("RandomSolarize", usage="RandomSolarize(threshold, p=0.5)", semantics="yes",
          notes="threshold in uint8 units (0..255); drawn per sample")
class RandomSolarize(RandomApplyOp):
    """Invert the pixels ``>= threshold`` with probability ``p``, per sample (uint8 units)."""

    op = "solarize"

    def __init__(self, threshold: float, p: float = 0.5) -> None:
        super().__init__(p)
        if not isinstance(threshold, numbers.Number) or threshold > 255:
            raise ValueError(f"RandomSolarize: threshold must be a number <= 255 (the image is uint8), "
                             f"got {threshold!r}")
        self.threshold = float(threshold)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomSolarize:
        return cls(t.threshold, t.p)

    def op_args(self) -> dict[str, float]:
        return {"threshold": self.threshold}


@register("RandomAdjustSharpness", usage="RandomAdjustSharpness(sharpness_factor, p=0.5)", semantics="yes",
          notes="drawn per sample")
class RandomAdjustSharpness(RandomApplyOp):
    """Sharpen (factor > 1) or blur (< 1) with probability ``p``, per sample."""

    op = "sharpness"

    def __init__(self, sharpness_factor: float, p: float = 0.5) -> None:
        super().__init__(p)
        if sharpness_factor < 0:
            raise ValueError(f"RandomAdjustSharpness: sharpness_factor must be >= 0, got {sharpness_factor}")
        self.sharpness_factor = float(sharpness_factor)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomAdjustSharpness:
        return cls(t.sharpness_factor, t.p)

    def op_args(self) -> dict[str, float]:
        return {"factor": self.sharpness_factor}


@register("RandomAutocontrast", usage="RandomAutocontrast(p=0.5)", semantics="yes", notes="drawn per sample")
class RandomAutocontrast(RandomApplyOp):
    """Stretch each channel to [0, 255] with probability ``p``, per sample."""

    op = "autocontrast"

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomAutocontrast:
        return cls(t.p)


@register("RandomEqualize", usage="RandomEqualize(p=0.5)", semantics="yes", notes="drawn per sample")
class RandomEqualize(RandomApplyOp):
    """Equalize each channel's histogram with probability ``p``, per sample."""

    op = "equalize"

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomEqualize:
        return cls(t.p)


@register("GaussianBlur", usage="GaussianBlur(kernel_size, sigma=(0.1, 2.0))",
          semantics="same kernel, reflect padding, sigma drawn per sample", notes="drawn per sample")
class GaussianBlur(ProgramTransform):
    """Gaussian blur with ``kernel_size`` (kx, ky; odd) and sigma uniform in ``sigma``, per sample."""

    n_uniforms = 1

    def __init__(self, kernel_size: int | Sequence[int], sigma: float | Sequence[float] = (0.1, 2.0)) -> None:
        if isinstance(kernel_size, numbers.Integral):
            ks = [int(kernel_size)] * 2
        elif isinstance(kernel_size, Sequence) and len(kernel_size) in (1, 2):
            ks = [int(k) for k in kernel_size] * (2 if len(kernel_size) == 1 else 1)
        else:
            raise ValueError(f"GaussianBlur: kernel_size must be an int or 2 ints, got {kernel_size!r}")
        if any(k <= 0 or k % 2 == 0 for k in ks):
            raise ValueError(f"GaussianBlur: kernel size values must be odd and positive, got {ks}")
        if isinstance(sigma, numbers.Number):
            lohi = [float(sigma)] * 2
        elif isinstance(sigma, Sequence) and len(sigma) in (1, 2):
            lohi = [float(sigma[0]), float(sigma[-1])]
        else:
            raise ValueError(f"GaussianBlur: sigma must be a number or (min, max), got {sigma!r}")
        if not 0.0 < lohi[0] <= lohi[1]:
            raise ValueError(f"GaussianBlur: sigma values must be positive and of the form (min, max), got {lohi}")
        self.kernel_size = (ks[0], ks[1])
        self.sigma = (lohi[0], lohi[1])

    @classmethod
    def from_torchvision(cls, t: Any) -> GaussianBlur:
        return cls(list(t.kernel_size), list(t.sigma))

    def make_params(self, geometry: Any, u: np.ndarray | None) -> dict[str, np.ndarray]:
        return {"sigma": _uniform(self.sigma[0], self.sigma[1], u[:, 0])}

    def write_slots(self, geometry: Any, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        s = params["sigma"]
        put_op(slots[:, 0], "gaussian_blur", kernel_x=self.kernel_size[0], kernel_y=self.kernel_size[1],
               sigma_x=s, sigma_y=s)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, sigma={self.sigma}"

