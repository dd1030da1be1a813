"""What every launcher in this package needs from Triton, in one place.

* **Lazy import.** Importing ``csrc_triton`` must not import Triton: the plain-torch
  references run without it, and ``import torchdali`` stays cheap. The Triton code
  (the kernels and their stages) lives in modules that only :func:`kernel` imports,
  on the first launch.
* **Interpret mode.** On CPU tensors a kernel runs under Triton's interpreter when
  ``TRITON_INTERPRET`` is set (:func:`interpret_mode`); it is the CPU tests' way to
  run the very kernel code. Without it a clear error points at the reference.
* **Metadata uploads.** A launch's small per-sample arrays go to the device in one
  copy through pinned memory (:func:`upload`): a copy from pageable memory may make
  the host wait for the stream's queued work first.
* **Cache key.** Triton's on-disk cache keys a compiled kernel by the source of its
  jit functions and the launch's constexpr values, not by the module constants it
  reads (``layout.NUM_PARAMS``, ``layout.ERASE_SEED``, ``augment.STATS_HIST``): after a
  change of ``layout.py`` alone, a machine whose cache holds a kernel from before
  would run it with the old columns. Every kernel that reads such constants takes
  ``CACHE_KEY: tl.constexpr`` = :func:`cache_key`, a fingerprint of this package's
  sources, so that any change to them compiles afresh.
* **Launch settings.** Tile shapes and warps of a launch are a :class:`LaunchSettings`,
  picked by :func:`tile_settings` (:func:`resample_settings` for the resized crop) and
  overridable per call (benchmarks sweep them
  through the launcher's ``launch=`` argument, never by editing module state).

A note on interpretation: ``triton.jit`` decides between compiling and
interpreting when a function is decorated, and the Triton modules here are
imported on the first launch. Run the CPU tests with ``TRITON_INTERPRET=1`` set
before that (the test modules set it at import).
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import os
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch

__all__ = ["LaunchSettings", "cache_key", "cdiv", "interpret_mode", "kernel", "next_power_of_2", "resample_settings",
           "tile_settings", "upload"]

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


@functools.lru_cache(maxsize=None)
def cache_key() -> int:
    """A fingerprint (60 bits) of every Python source of this package: the ``CACHE_KEY``
    constexpr of the kernels that read module constants (see the module docstring)."""
    here = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(here)):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                digest.update(os.path.relpath(path, here).encode())
                with open(path, "rb") as fh:
                    digest.update(fh.read())
    return int(digest.hexdigest()[:15], 16)


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
    """Output tiles of the pointwise, finish and augment kernels for an ``out_h x out_w`` image: 8x64
    on 2 warps at ImageNet sizes (the resized crop has its own, :func:`resample_settings`).

    8 output pixels per thread; a row of stores is 256 contiguous bytes in NCHW float32.
    Faster than 16x32 on 4 warps in every recipe of ``benchmarks/kernel_bandwidth.py --sweep``
    when the resized crop used it too (``benchmarks/RESULTS.md``, decisions table: tiles). Small
    outputs get smaller tiles (powers of two, at most 512 pixels).
    """
    block_w = max(8, min(64, next_power_of_2(max(out_w, 1))))
    block_h = max(1, min(512 // block_w, next_power_of_2(max(out_h, 1))))
    return LaunchSettings(block_h, block_w, num_warps=2)


def resample_settings(out_h: int, out_w: int) -> LaunchSettings:
    """Output tiles of the resized-crop kernel: 8x32 on one warp.

    Each of the warp's 32 threads holds one column of the tile's 8 rows, and adds each
    source row of the band into them within the thread (a tile whose rows were split across
    warps would exchange them through shared memory). On an H200 (batch of 256 at 224x224, Triton 3.6)
    this took 0.21 ms for interleaved RGB and 0.52 ms for planar 4:2:0 YCbCr, against
    0.31 and 0.68 ms for 8x64 on 2 warps reading 4 band rows at a time, and 0.35 and 1.09
    ms before the band (``benchmarks/RESULTS.md``, "2026-11-29, sixth"). Small outputs
    get smaller tiles (powers of two).
    """
    block_w = max(8, min(32, next_power_of_2(max(out_w, 1))))
    block_h = max(1, min(8, next_power_of_2(max(out_h, 1))))
    return LaunchSettings(block_h, block_w, num_warps=1)


_UPLOAD_ALIGN = 16  # bytes: every part starts aligned for any dtype it may be viewed as


def upload(parts: Sequence[np.ndarray | torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """``parts`` (host arrays or tensors of any shape and real or bool dtype) as tensors
    on ``device``, of the same shapes and dtypes, through one asynchronous copy on the
    current stream.

    CUDA may synchronise with the stream before copying from pageable memory ("API
    synchronization behavior"), so a per-batch ``tensor.to(device)`` after queued work
    (a decode) could make the host wait for that work. Here the parts are packed into
    one pinned buffer from torch's caching host allocator, which keeps the buffer from
    reuse until the copy is done. Parts already on ``device`` are returned as they are.
    """
    device = torch.device(device)
    tensors = [p if isinstance(p, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(p)) for p in parts]
    sizes, starts, total = [], [], 0
    for t in tensors:
        starts.append(total)
        nbytes = t.numel() * t.element_size() if t.device.type == "cpu" else 0
        sizes.append(nbytes)
        total += -(-nbytes // _UPLOAD_ALIGN) * _UPLOAD_ALIGN
    # on a CPU device the same packing runs (and is what the CPU tests check), unpinned
    host = torch.empty(max(total, 1), dtype=torch.uint8, pin_memory=device.type == "cuda")
    flat = host.numpy()
    for t, start, nbytes in zip(tensors, starts, sizes):
        if nbytes:
            flat[start:start + nbytes] = _host_bytes(t)
    on_device = host.to(device, non_blocking=True) if device.type == "cuda" else host
    out = []
    for t, start, nbytes in zip(tensors, starts, sizes):
        if t.device.type != "cpu":
            out.append(t if t.device == device else t.to(device, non_blocking=True))
        elif nbytes == 0:
            out.append(torch.empty(t.shape, dtype=t.dtype, device=device))
        else:
            out.append(on_device[start:start + nbytes].view(t.dtype).view(t.shape))
    return out


def _host_bytes(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's elements in row-major order, as bytes (numpy views where it can)."""
    try:
        a = t.detach().numpy()  # shares the tensor's memory; numpy has no bfloat16
    except TypeError:
        return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)
