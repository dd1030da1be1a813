"""Pitched device-to-device copies through the CUDA driver's ``cuMemcpy2DAsync``.

A mapped NVDEC frame is pitched device memory (``_cuvid``); the batch buffer wants it
without pitch. ``torch``'s ``copy_`` between two strided views does it with an
elementwise kernel, but each call costs the decode thread tens of microseconds of
Python and dispatch while it holds the interpreter, and eight decode threads share
one interpreter. One driver call per frame, made through ``ctypes`` (which lets go of
the interpreter during the call), moves the same bytes with the copy engine.

The calling thread must have the device's context current (the decode threads make
torch's primary context current before they decode).
"""
from __future__ import annotations

import ctypes
import threading

__all__ = ["copy_2d"]

_CU_MEMORYTYPE_DEVICE = 2


class _Memcpy2D(ctypes.Structure):
    """``CUDA_MEMCPY2D`` (cuda.h), field for field."""

    _fields_ = [
        ("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t), ("srcMemoryType", ctypes.c_int),
        ("srcHost", ctypes.c_void_p), ("srcDevice", ctypes.c_uint64), ("srcArray", ctypes.c_void_p),
        ("srcPitch", ctypes.c_size_t),
        ("dstXInBytes", ctypes.c_size_t), ("dstY", ctypes.c_size_t), ("dstMemoryType", ctypes.c_int),
        ("dstHost", ctypes.c_void_p), ("dstDevice", ctypes.c_uint64), ("dstArray", ctypes.c_void_p),
        ("dstPitch", ctypes.c_size_t),
        ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t),
    ]


_lock = threading.Lock()
_fn = None


def _memcpy2d_async():
    """``cuMemcpy2DAsync_v2`` of the driver library the process already has loaded. Raises
    ``RuntimeError`` where there is none (the decode then fails as any NVDEC failure does)."""
    global _fn
    with _lock:
        if _fn is None:
            try:
                fn = ctypes.CDLL("libcuda.so.1").cuMemcpy2DAsync_v2
            except (OSError, AttributeError) as e:
                raise RuntimeError(f"the CUDA driver's cuMemcpy2DAsync_v2 is not available (libcuda.so.1): "
                                   f"{e}") from None
            fn.argtypes = [ctypes.POINTER(_Memcpy2D), ctypes.c_void_p]
            fn.restype = ctypes.c_int
            _fn = fn
    return _fn


def copy_2d(dst: int, dst_pitch: int, src: int, src_pitch: int, width: int, height: int, stream: int) -> None:
    """Queue on ``stream`` (a ``CUstream`` handle) the copy of ``height`` rows of ``width`` bytes from
    device address ``src`` (rows ``src_pitch`` bytes apart) to ``dst`` (rows ``dst_pitch`` apart).
    Raises ``RuntimeError`` with the driver's error code where the driver refuses it."""
    if width <= 0 or height <= 0:
        return
    p = _Memcpy2D()
    p.srcMemoryType = p.dstMemoryType = _CU_MEMORYTYPE_DEVICE
    p.srcDevice, p.srcPitch, p.dstDevice, p.dstPitch = src, src_pitch, dst, dst_pitch
    p.WidthInBytes, p.Height = width, height
    err = _memcpy2d_async()(ctypes.byref(p), stream)
    if err:
        raise RuntimeError(f"cuMemcpy2DAsync failed with CUresult {err} ({width} x {height} bytes, "
                           f"pitches {src_pitch} -> {dst_pitch})")
