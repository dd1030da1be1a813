"""ctypes binding to libnvjpeg: library search and loading, prototypes, constants.

No compiled extension: the shared library is found at run time (pip wheel, the copy
torchvision ships, or the CUDA toolkit) and every function used gets an explicit
ctypes prototype taken from ``nvjpeg.h``.  Status codes, ``NvjpegError`` and the
constants here are shared with the decoder in ``_nvjpeg``.
"""
from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import threading
from typing import List, Optional, Tuple

import torch

__all__ = [
    "NvjpegError",
    "NvjpegImage",
    "load_nvjpeg",
    "nvjpeg_version",
    "status_name",
    "STATUS_OK",
    "STATUS_NEEDS_CPU",
    "STATUS_SIZE_MISMATCH",
]

# --------------------------------------------------------------------------------------
# Constants from nvjpeg.h
# --------------------------------------------------------------------------------------

_NVJPEG_STATUS = {
    0: "NVJPEG_STATUS_SUCCESS",
    1: "NVJPEG_STATUS_NOT_INITIALIZED",
    2: "NVJPEG_STATUS_INVALID_PARAMETER",
    3: "NVJPEG_STATUS_BAD_JPEG",
    4: "NVJPEG_STATUS_JPEG_NOT_SUPPORTED",
    5: "NVJPEG_STATUS_ALLOCATOR_FAILURE",
    6: "NVJPEG_STATUS_EXECUTION_FAILED",
    7: "NVJPEG_STATUS_ARCH_MISMATCH",
    8: "NVJPEG_STATUS_INTERNAL_ERROR",
    9: "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED",
    10: "NVJPEG_STATUS_INCOMPLETE_BITSTREAM",
}
_NVJPEG_HINTS = {
    6: "a CUDA call inside nvJPEG failed (no usable GPU, driver too old for this nvJPEG, "
       "or out of device memory)",
    7: "this GPU does not support the requested backend",
    5: "nvJPEG could not allocate memory",
}

NVJPEG_BACKEND_DEFAULT = 0
NVJPEG_BACKEND_GPU_HYBRID = 2
NVJPEG_BACKEND_HARDWARE = 3

NVJPEG_OUTPUT_YUV = 1  # planar Y, U (Cb), V (Cr) at the image's own subsampling
NVJPEG_OUTPUT_RGBI = 5

NVJPEG_CSS_444 = 0
NVJPEG_CSS_UNKNOWN = -1

NVJPEG_FLAGS_DEFAULT = 0
NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION = 1 << 5

# nvjpegJpegEncoding_t values nvJPEG's lossy decoders handle (baseline, extended, progressive).
_LOSSY_ENCODINGS = frozenset((0xC0, 0xC1, 0xC2))

# libraryPropertyType
_MAJOR_VERSION, _MINOR_VERSION, _PATCH_LEVEL = 0, 1, 2

# Per-image statuses returned by NvjpegDecoder.decode_batch (positive values are
# nvjpegStatus_t codes of the call that failed).
STATUS_OK = 0
STATUS_NEEDS_CPU = -1
STATUS_SIZE_MISMATCH = -2


def status_name(code: int) -> str:
    """Readable name of a decode_batch status or an nvjpegStatus_t code."""
    if code == STATUS_OK:
        return "OK"
    if code == STATUS_NEEDS_CPU:
        return "NEEDS_CPU"
    if code == STATUS_SIZE_MISMATCH:
        return "SIZE_MISMATCH"
    return _NVJPEG_STATUS.get(code, f"NVJPEG_STATUS_{code}")


class NvjpegError(RuntimeError):
    """An nvJPEG call returned a status other than NVJPEG_STATUS_SUCCESS."""

    def __init__(self, status: int, call: str, detail: str = ""):
        self.status = int(status)
        self.call = call
        self.status_name = status_name(self.status)
        msg = f"{call} failed with {self.status_name} ({self.status})"
        hint = _NVJPEG_HINTS.get(self.status)
        if hint:
            msg += f": {hint}"
        if detail:
            msg += f" [{detail}]"
        super().__init__(msg)


class NvjpegImage(ctypes.Structure):
    """``nvjpegImage_t``: four channel pointers then four pitches (64 bytes)."""

    _fields_ = [
        ("channel", ctypes.c_void_p * 4),
        ("pitch", ctypes.c_size_t * 4),
    ]


# NvjpegDecoder (_nvjpeg.py) builds arrays of nvjpegImage_t as an (N, 8) uint64 numpy array, which
# relies on this exact layout.
assert ctypes.sizeof(NvjpegImage) == 64 and NvjpegImage.pitch.offset == 32

# --------------------------------------------------------------------------------------
# Library loading and prototypes
# --------------------------------------------------------------------------------------

_P = ctypes.c_void_p
_I = ctypes.c_int
_U = ctypes.c_uint
_SZ = ctypes.c_size_t
_PI = ctypes.POINTER(ctypes.c_int)
_PU = ctypes.POINTER(ctypes.c_uint)
_PP = ctypes.POINTER(ctypes.c_void_p)
_PIMG = ctypes.POINTER(NvjpegImage)

# Every pointer to an array or opaque object is declared c_void_p so raw addresses
# (Python ints from numpy/torch) pass straight through; enums are C ints.
_REQUIRED = {
    "nvjpegGetProperty": (_I, _PI),
    "nvjpegCreateEx": (_I, _P, _P, _U, _PP),
    "nvjpegDestroy": (_P,),
    "nvjpegJpegStateCreate": (_P, _PP),
    "nvjpegJpegStateDestroy": (_P,),
    "nvjpegGetImageInfo": (_P, _P, _SZ, _PI, _PI, _PI, _PI),
    "nvjpegDecode": (_P, _P, _P, _SZ, _I, _PIMG, _P),
    "nvjpegDecodeBatchedInitialize": (_P, _P, _I, _I, _I),
    "nvjpegDecodeBatched": (_P, _P, _P, _P, _P, _P),
    "nvjpegJpegStreamCreate": (_P, _PP),
    "nvjpegJpegStreamDestroy": (_P,),
    "nvjpegJpegStreamParse": (_P, _P, _SZ, _I, _I, _P),
    "nvjpegJpegStreamParseHeader": (_P, _P, _SZ, _P),
    "nvjpegJpegStreamGetJpegEncoding": (_P, _PI),
    "nvjpegJpegStreamGetSamplePrecision": (_P, _PU),
    "nvjpegJpegStreamGetFrameDimensions": (_P, _PU, _PU),
    "nvjpegJpegStreamGetComponentsNum": (_P, _PU),
    "nvjpegDecodeBatchedSupported": (_P, _P, _PI),
}
# Newer entry points; used when present.
_OPTIONAL = {
    "nvjpegGetHardwareDecoderInfo": (_P, _PU, _PU),
    "nvjpegDecodeBatchedPreAllocate": (_P, _P, _I, _I, _I, _I, _I),
}

_load_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_error: Optional[str] = None


def _declare(lib: ctypes.CDLL) -> None:
    missing = [name for name in _REQUIRED if not hasattr(lib, name)]
    if missing:
        raise OSError(f"missing symbols {', '.join(missing)} (nvJPEG too old?)")
    for table in (_REQUIRED, _OPTIONAL):
        for name, argtypes in table.items():
            if not hasattr(lib, name):
                continue
            fn = getattr(lib, name)
            fn.argtypes = list(argtypes)
            fn.restype = ctypes.c_int


def _cuda_majors() -> List[int]:
    version = getattr(torch.version, "cuda", None)
    if version:
        return [int(version.split(".")[0])]
    return [13, 12]  # CPU-only torch: nothing to match, try the current majors


def _search_plan(major: int) -> List[Tuple[str, str, str]]:
    """(origin, pattern, kind) in search order; kind is "glob", "soname" or "note"."""
    plan: List[Tuple[str, str, str]] = []
    override = os.environ.get("TORCHDALI_NVJPEG_LIBRARY")
    if override:
        plan.append(("$TORCHDALI_NVJPEG_LIBRARY", override, "glob"))
    try:
        import nvidia  # namespace package of the NVIDIA pip wheels

        roots = [os.path.abspath(p) for p in getattr(nvidia, "__path__", [])]
    except ImportError:
        roots = []
    if roots:
        for root in roots:
            # nvidia-nvjpeg 13.x: nvidia/cu13/lib; nvidia-nvjpeg-cu12: nvidia/nvjpeg/lib
            plan.append(("pip nvidia-nvjpeg", os.path.join(root, f"cu{major}", "lib", f"libnvjpeg.so.{major}"), "glob"))
            plan.append(("pip nvidia-nvjpeg-cu12", os.path.join(root, "nvjpeg", "lib", f"libnvjpeg.so.{major}"), "glob"))
    else:
        plan.append(("pip wheels", "python package 'nvidia' is not importable", "note"))
    try:
        spec = importlib.util.find_spec("torchvision")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            libs = os.path.join(os.path.dirname(os.path.abspath(loc)), "torchvision.libs")
            plan.append(("torchvision", os.path.join(libs, f"libnvjpeg*.so.{major}"), "glob"))
    else:
        plan.append(("torchvision", "torchvision is not installed", "note"))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            for sub in ("lib64", "lib", os.path.join("targets", "*-linux", "lib")):
                plan.append((f"${var}", os.path.join(root, sub, f"libnvjpeg.so.{major}"), "glob"))
    plan.append(("CUDA toolkit", f"/usr/local/cuda/lib64/libnvjpeg.so.{major}", "glob"))
    plan.append(("CUDA toolkit", f"/usr/local/cuda-{major}*/lib64/libnvjpeg.so.{major}", "glob"))
    plan.append(("dynamic loader", f"libnvjpeg.so.{major}", "soname"))
    return plan


def _try_load(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    _declare(lib)
    return lib


def load_nvjpeg() -> ctypes.CDLL:
    """Load libnvjpeg for torch's CUDA major version, with prototypes declared.

    Search order: ``$TORCHDALI_NVJPEG_LIBRARY``, the NVIDIA pip wheels (found through
    the ``nvidia`` namespace package), the copy in ``torchvision.libs``, the CUDA
    toolkit (``$CUDA_HOME``, ``$CUDA_PATH``, ``/usr/local/cuda``) and finally the
    dynamic loader's own path.  The result (or the failure) is cached.  The returned
    object's ``_name`` is the path that was loaded.
    """
    global _lib, _lib_error
    if _lib is not None:
        return _lib
    with _load_lock:
        if _lib is not None:
            return _lib
        if _lib_error is not None:
            raise RuntimeError(_lib_error)
        tried: List[str] = []
        for major in _cuda_majors():
            for origin, pattern, kind in _search_plan(major):
                if kind == "note":
                    tried.append(f"{origin}: {pattern}")
                    continue
                if kind == "soname":
                    candidates = [pattern]
                else:
                    candidates = sorted(glob.glob(pattern))
                    if not candidates:
                        tried.append(f"{origin}: {pattern} (not found)")
                        continue
                for path in candidates:
                    try:
                        _lib = _try_load(path)
                        return _lib
                    except OSError as exc:
                        tried.append(f"{origin}: {path} ({exc})")
        cuda = getattr(torch.version, "cuda", None)
        wanted = " or ".join(f"libnvjpeg.so.{m}" for m in _cuda_majors())
        _lib_error = (
            f"could not load {wanted} (torch is built for CUDA {cuda or 'none: CPU-only build'}).\n"
            "Tried:\n  - " + "\n  - ".join(tried) + "\n"
            "Fix: `pip install nvidia-nvjpeg` (torch built for CUDA 13) or "
            "`pip install nvidia-nvjpeg-cu12` (torch built for CUDA 12), or install the CUDA "
            "toolkit and set CUDA_HOME, or set TORCHDALI_NVJPEG_LIBRARY to a libnvjpeg.so path."
        )
        raise RuntimeError(_lib_error)


def nvjpeg_version() -> Tuple[int, int, int]:
    """(major, minor, patch) of the loaded libnvjpeg; needs no GPU."""
    lib = load_nvjpeg()
    out = []
    value = ctypes.c_int()
    for prop in (_MAJOR_VERSION, _MINOR_VERSION, _PATCH_LEVEL):
        status = lib.nvjpegGetProperty(prop, ctypes.byref(value))
        if status:
            raise NvjpegError(status, "nvjpegGetProperty")
        out.append(value.value)
    return out[0], out[1], out[2]
