"""What every launcher in this package needs from Triton, in one place.

* **Lazy import.** Importing ``csrc_triton`` must not import Triton: the plain-torch
  references run without it, and ``import torchdali`` stays cheap. The Triton code
  (the kernels and their stages) lives in modules that only :func:`kernel` imports,
  on the first launch.
* **Interpret mode.** On CPU tensors a kernel runs under Triton's interpreter when
  ``TRITON_INTERPRET`` is set (:func:`interpret_mode`); it is the CPU tests' way to
  run the very kernel code. Without it a clear error points at the reference.
* **Launch settings.** Tile shapes and warps of a launch are a :class:`LaunchSettings`,
  picked by :func:`tile_settings` and overridable per call (benchmarks sweep them
  through the launcher's ``launch=`` argument, never by editing module state).

A note on interpretation: ``triton.jit`` decides between compiling and
interpreting when a function is decorated, and the Triton modules here are
imported on the first launch. Run the CPU tests with ``TRITON_INTERPRET=1`` set
before that (the test modules set it at import).
"""
from __future__ import annotations

import importlib
import os
from typing import Any, NamedTuple

import torch

__all__ = ["LaunchSettings", "cdiv", "interpret_mode", "kernel", "next_power_of_2", "tile_settings"]

_TRUE = ("1", "true", "on", "yes")
_kernels: dict[tuple[str, str, str], Any] = {}


def interpret_mode() -> bool:
    """Whether ``TRITON_INTERPRET`` asks for Triton's interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in _TRUE


def kernel(module: str, name: str, device: torch.device, launcher: str, reference: str) -> Any:
    """The Triton kernel ``name`` of ``csrc_triton.<module>``, launchable on ``device``.

    Imports Triton and the kernel's module on first use. On a GPU this is the
    compiled kernel; on the CPU the interpreted one, which needs
    ``TRITON_INTERPRET=1``. ``launcher`` and ``reference`` name the public
    functions for the error messages.
    """
    mode = "jit" if device.type != "cpu" else "interpret"
    if mode == "interpret" and not interpret_mode():
        raise RuntimeError(
            f"{launcher} got CPU tensors: Triton kernels run on a GPU. Use {reference} on the CPU, "
            "or set TRITON_INTERPRET=1 to run the kernel interpreted"
        )
    key = (module, name, mode)
    if key in _kernels:
        return _kernels[key]
    try:
        import triton  # noqa: F401  (the kernel module imports it too; this names what is missing)
    except ImportError as e:
        raise RuntimeError(
            f"{launcher} needs Triton, which is not installed (pip install triton); "
            f"{reference} computes the same result in plain torch"
        ) from e
    fn = getattr(importlib.import_module(f"{__package__}.{module}"), name)
    if mode == "interpret":
        from triton.runtime.interpreter import InterpretedFunction

        fn = InterpretedFunction(fn.fn)
    _kernels[key] = fn
    return fn


class LaunchSettings(NamedTuple):
    """Tile shape and warps of a launch; ``maxnreg`` caps registers per thread (None: no cap)."""

    block_h: int
    block_w: int
    num_warps: int
    maxnreg: int | None = None

    def options(self) -> dict[str, int]:
        """Compile options beyond the tile: the register cap, which the interpreter does not take."""
        return {"maxnreg": self.maxnreg} if self.maxnreg and not interpret_mode() else {}


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for ``n <= 1``)."""
    return 1 << max(int(n) - 1, 0).bit_length()


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative ints."""
    return -(-a // b)


def tile_settings(out_h: int, out_w: int) -> LaunchSettings:
    """Output tiles for an ``out_h x out_w`` image: 8x64 on 2 warps at ImageNet sizes.

    8 output pixels per thread; a row of stores is 256 contiguous bytes in NCHW
    float32, and source rows are reused across the 8 output rows through L1.
    Measured 25-35% faster than 16x32 on 4 warps in every recipe of
    ``benchmarks/kernel_bandwidth.py --sweep`` on an H200. Small outputs get
    smaller tiles (powers of two, at most 512 pixels).
    """
    block_w = max(8, min(64, next_power_of_2(max(out_w, 1))))
    block_h = max(1, min(512 // block_w, next_power_of_2(max(out_h, 1))))
    return LaunchSettings(block_h, block_w, num_warps=2)
