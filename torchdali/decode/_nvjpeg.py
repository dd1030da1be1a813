"""Batched GPU JPEG decoder built on the ctypes binding in ``_nvjpeg_lib``.

Output memory always comes from torch; nvJPEG only allocates its own scratch buffers.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .._fork import keep_in_children
from ._nvjpeg_lib import (
    _LOSSY_ENCODINGS,
    NVJPEG_BACKEND_DEFAULT,
    NVJPEG_BACKEND_GPU_HYBRID,
    NVJPEG_BACKEND_HARDWARE,
    NVJPEG_CSS_444,
    NVJPEG_CSS_UNKNOWN,
    NVJPEG_FLAGS_DEFAULT,
    NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION,
    NVJPEG_OUTPUT_RGBI,
    NVJPEG_OUTPUT_YUV,
    STATUS_NEEDS_CPU,
    STATUS_OK,
    STATUS_SIZE_MISMATCH,
    NvjpegError,
    NvjpegImage,
    load_nvjpeg,
    nvjpeg_version,
    status_name,
)

__all__ = ["NvjpegDecoder"]


def _device_index(device: Union[int, str, torch.device, None]) -> int:
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"NvjpegDecoder needs a CUDA device, got {device}")
    return device.index if device.index is not None else torch.cuda.current_device()


def _as_int64(x, name: str, shape: Optional[Tuple[int, ...]] = None) -> np.ndarray:
    """``x`` as an int64 numpy array; ``shape`` None means any 1-D length."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if shape is None:
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    else:
        if arr.size == 0:
            arr = arr.reshape(shape)
        if arr.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got {arr.dtype}")
    return arr.astype(np.int64, copy=False)


class _StateSet:
    """nvJPEG states used by one decode_batch call, reused ``pipeline_depth`` calls later."""

    __slots__ = ("hw", "hy", "single", "event", "recorded", "hw_batch", "hy_batch", "inflight")

    def __init__(self) -> None:
        self.hw: Optional[int] = None  # nvjpegJpegState_t on the hardware handle
        self.hy: Optional[int] = None  # batched state on the hybrid handle
        self.single: Optional[int] = None  # nvjpegDecode state on the hybrid handle
        self.event: Optional[torch.cuda.Event] = None  # recorded after the call's work
        self.recorded = False
        # (batch size, output format) ``hw`` / ``hy`` are initialised for; () forces
        # nvjpegDecodeBatchedInitialize
        self.hw_batch: tuple = ()
        self.hy_batch: tuple = ()
        self.inflight: tuple = ()  # objects the queued work reads or writes


def engine_order(kinds: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """The order in which a batched call hands its images to the hardware engines: grouped
    by ``kinds`` (header codes: chroma subsampling, SOF, ...), then by height, then width;
    ties keep their order.

    Every image keeps its own bytes and its own place in the output; only the order of the
    call's arrays changes. The engines decode a batch of photographs faster so ordered than
    in the order drawn, and faster than with the kinds grouped alone (``benchmarks/RESULTS.md``,
    decisions table: engine order, and the tenth GPU run).
    """
    return np.lexsort((np.asarray(widths), np.asarray(heights), np.asarray(kinds)))


class NvjpegDecoder:
    """Batched JPEG decoder on one GPU: nvJPEG hardware engines first, CUDA hybrid otherwise.

    Every image is decoded into a slice of one caller-provided uint8 CUDA buffer, as
    its Y, Cb and Cr planes at its own chroma subsampling (``chroma`` in
    :meth:`decode_batch`: the loader's route, its fused kernel upsamples and converts
    them) or as interleaved RGB (HWC, pitch ``3 * width``: the loader's route for the
    JPEGs whose planes the kernel has no reader for, such as 4:1:1).  Images the
    hardware backend accepts (``nvjpegDecodeBatchedSupported``) go through one
    ``nvjpegDecodeBatched`` call on the hardware handle; the rest (progressive JPEGs,
    and whatever else the engines refuse) through the GPU-hybrid handle.  Images nvJPEG
    cannot take (not JPEG, CMYK/YCCK, lossless, 12-bit, header errors) are reported as
    ``STATUS_NEEDS_CPU`` for the caller to decode with :func:`decode_cpu`.

    Args:
        device: CUDA device (index, ``torch.device`` or None for the current device).
        backend: "auto" (hardware engines when present, hybrid for the rest),
            "hardware" (as auto, but raise if there are no engines) or "hybrid" (GPU
            hybrid only).
        max_batch: most images passed to one nvJPEG batched call; larger batches are
            split.
        gpu_grayscale: decode 1-component JPEGs on the GPU (nvJPEG replicates luma into
            R, G and B).  With False they are reported as needing the CPU.
        pipeline_depth: sets of nvJPEG states used in turn.  A call reuses the states
            of the call ``pipeline_depth`` calls earlier and first waits (on the host)
            until that call's GPU work has finished, so with the default of 2 the host
            side of batch N+1 overlaps the GPU decode of batch N.

    The handles are created with NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION (nvJPEG >=
    12.1) so that RGB output interpolates chroma as libjpeg-turbo does and GPU and CPU
    decodes of 4:2:0/4:2:2 images agree more closely; the flag is dropped silently where
    nvjpegCreateEx refuses it (``self.handle_flags`` says what each handle got).

    Calls are serialised by a lock; for parallel host-side work use one decoder per
    thread.
    """

    def __init__(
        self,
        device: Union[int, str, torch.device, None] = None,
        backend: str = "auto",
        max_batch: int = 256,
        *,
        gpu_grayscale: bool = True,
        pipeline_depth: int = 2,
    ):
        self._closed = True  # until every handle exists; close() tolerates partial init
        keep_in_children(self)
        self._hw = self._hy = self._jstream = None
        self._sets: List[_StateSet] = []
        if int(pipeline_depth) < 1:
            raise ValueError(f"pipeline_depth must be >= 1, got {pipeline_depth}")
        if backend not in ("auto", "hardware", "hybrid"):
            raise ValueError(f"backend must be 'auto', 'hardware' or 'hybrid', got {backend!r}")
        if int(max_batch) < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if not torch.cuda.is_available():
            raise RuntimeError("NvjpegDecoder needs a CUDA GPU, but torch.cuda.is_available() is False")
        self._lib = load_nvjpeg()
        index = _device_index(device)
        self.device = torch.device("cuda", index)
        self.max_batch = int(max_batch)
        self.gpu_grayscale = bool(gpu_grayscale)
        self.hardware_engines = 0
        self.hardware_cores_per_engine = 0
        self.hardware_unavailable_reason: Optional[str] = None
        self.backend = backend
        self.hybrid_backend = ""
        #: nvjpegCreateEx flags each handle was created with ("hardware", "hybrid")
        self.handle_flags: Dict[str, int] = {}
        #: per-index failure reasons of the most recent decode_batch call
        self.last_errors: Dict[int, str] = {}
        #: how the most recent decode_batch call routed its images
        self.last_stats: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._next_set = 0
        #: backend chosen per header code (see decode_batch's ``hints``): True = hardware
        self._routes: Dict[int, bool] = {}
        self._call_hints: Optional[List[int]] = None
        self._call_codes: Optional[np.ndarray] = None  # the same as an array
        # where grayscale images' chroma planes go in planar decodes; never read, so calls
        # share it (each call's state set holds it until its work is done)
        self._gray_scratch: Optional[torch.Tensor] = None
        wanted_flags = NVJPEG_FLAGS_DEFAULT
        try:
            if nvjpeg_version()[:2] >= (12, 1):
                wanted_flags |= NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION
        except NvjpegError:
            pass
        self._closed = False
        try:
            with torch.cuda.device(index):
                # Make the primary context current on this thread before nvJPEG (which
                # carries its own CUDA runtime) creates anything on it.
                torch.cuda.synchronize(index)
                self._create(backend, wanted_flags, int(pipeline_depth))
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- construction

    def _create_handle(self, backend: int, flags: int) -> Tuple[int, Optional[int], int]:
        """(status, handle, flags used): retries without optional flags on refusal."""
        lib = self._lib
        handle = ctypes.c_void_p()
        status = lib.nvjpegCreateEx(backend, None, None, flags, ctypes.byref(handle))
        if status != 0 and flags:
            handle = ctypes.c_void_p()
            status = lib.nvjpegCreateEx(backend, None, None, NVJPEG_FLAGS_DEFAULT, ctypes.byref(handle))
            flags = NVJPEG_FLAGS_DEFAULT
        return status, (handle.value if status == 0 else None), flags

    @staticmethod
    def _new(create_fn, handle: int, what: str) -> int:
        obj = ctypes.c_void_p()
        status = create_fn(handle, ctypes.byref(obj))
        if status:
            raise NvjpegError(status, what)
        return obj.value

    def _create(self, backend: str, flags: int, depth: int) -> None:
        lib = self._lib
        if backend in ("auto", "hardware"):
            status, handle, used = self._create_handle(NVJPEG_BACKEND_HARDWARE, flags)
            if status == 0:
                engines, cores = -1, -1
                if hasattr(lib, "nvjpegGetHardwareDecoderInfo"):
                    n_eng, n_core = ctypes.c_uint(), ctypes.c_uint()
                    st = lib.nvjpegGetHardwareDecoderInfo(handle, ctypes.byref(n_eng), ctypes.byref(n_core))
                    engines, cores = (n_eng.value, n_core.value) if st == 0 else (0, 0)
                if engines == 0:
                    lib.nvjpegDestroy(handle)
                    self.hardware_unavailable_reason = "nvjpegGetHardwareDecoderInfo reports no decode engines"
                else:
                    self._hw = handle
                    self.hardware_engines, self.hardware_cores_per_engine = engines, cores
                    self.handle_flags["hardware"] = used
            else:
                self.hardware_unavailable_reason = f"nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE) returned {status_name(status)}"
            if backend == "hardware" and self._hw is None:
                raise RuntimeError(
                    f"the nvJPEG hardware decoder is not available on {torch.cuda.get_device_name(self.device)}: "
                    f"{self.hardware_unavailable_reason}. Use backend='auto' to fall back to the CUDA decoder."
                )
        # the CUDA decoder: the GPU-hybrid backend, else nvJPEG's default one
        status = 0
        for code, name in ((NVJPEG_BACKEND_GPU_HYBRID, "gpu_hybrid"), (NVJPEG_BACKEND_DEFAULT, "default")):
            status, handle, used = self._create_handle(code, flags)
            if status == 0:
                self._hy = handle
                self.hybrid_backend = name
                self.handle_flags["hybrid"] = used
                break
        if self._hy is None:
            raise NvjpegError(status, "nvjpegCreateEx", f"device {self.device}")
        info_handle = self._hw if self._hw is not None else self._hy
        self._jstream = self._new(lib.nvjpegJpegStreamCreate, info_handle, "nvjpegJpegStreamCreate")
        for _ in range(depth):
            ss = _StateSet()
            self._sets.append(ss)  # appended first so close() frees a half-built set
            ss.hy = self._new(lib.nvjpegJpegStateCreate, self._hy, "nvjpegJpegStateCreate")
            ss.single = self._new(lib.nvjpegJpegStateCreate, self._hy, "nvjpegJpegStateCreate")
            if self._hw is not None:
                ss.hw = self._new(lib.nvjpegJpegStateCreate, self._hw, "nvjpegJpegStateCreate")
                if hasattr(lib, "nvjpegDecodeBatchedPreAllocate"):
                    # It lets the hardware backend keep a memory pool instead of
                    # reallocating for every batch (a batch of one 1x1 image: a hint
                    # only).  Failure is harmless.
                    lib.nvjpegDecodeBatchedPreAllocate(self._hw, ss.hw, 1, 1, 1, NVJPEG_CSS_444, NVJPEG_OUTPUT_RGBI)
            ss.event = torch.cuda.Event()
        # Scratch output cells reused by the per-image header queries.
        self._c_ncomp = ctypes.c_int()
        self._c_css = ctypes.c_int()
        self._c_w = (ctypes.c_int * 4)()
        self._c_h = (ctypes.c_int * 4)()
        self._c_enc = ctypes.c_int()
        self._c_prec = ctypes.c_uint()
        self._c_sup = ctypes.c_int()

    # ---------------------------------------------------------------- properties

    @property
    def has_hardware(self) -> bool:
        """True when batches go to the hardware JPEG engines."""
        return self._hw is not None

    def describe(self, status: int, index: Optional[int] = None) -> str:
        """Why an image got ``status``; with ``index``, the specific reason from the last call."""
        if index is not None and index in self.last_errors:
            return f"{status_name(status)}: {self.last_errors[index]}"
        if status == STATUS_NEEDS_CPU:
            return "NEEDS_CPU: nvJPEG cannot decode this image (not a JPEG nvJPEG handles); use the CPU decoder"
        if status == STATUS_SIZE_MISMATCH:
            return "SIZE_MISMATCH: nvJPEG reads a different frame size than the caller gave"
        if status == STATUS_OK:
            return "OK"
        return f"{status_name(status)}: nvJPEG failed to decode the image"

    def __repr__(self) -> str:
        hw = (f"hardware engines={self.hardware_engines}x{self.hardware_cores_per_engine}"
              if self._hw is not None else "no hardware decoder")
        return f"NvjpegDecoder(device={self.device}, {hw}, hybrid={self.hybrid_backend}, closed={self._closed})"

    # ---------------------------------------------------------------- decoding

    def _check_out(self, out: torch.Tensor) -> None:
        if not isinstance(out, torch.Tensor) or out.dtype != torch.uint8 or out.dim() != 1:
            raise TypeError("out must be a 1-D uint8 CUDA tensor")
        if out.device != self.device:
            raise ValueError(f"out is on {out.device}, the decoder on {self.device}")
        if not out.is_contiguous():
            raise ValueError("out must be contiguous")

    def _empty(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    @staticmethod
    def _host_pointers(data, offsets, lengths) -> Tuple[np.ndarray, np.ndarray]:
        """(pointers, lengths) as uint64 arrays for every encoded image."""
        if isinstance(data, (torch.Tensor, np.ndarray)):
            if offsets is None or lengths is None:
                raise ValueError("a packed input buffer needs offsets and lengths")
            if isinstance(data, torch.Tensor):
                if data.device.type != "cpu":
                    raise ValueError(f"encoded input must be in host memory (pinned or pageable), got {data.device}")
                if data.dtype != torch.uint8 or data.dim() != 1 or not data.is_contiguous():
                    raise ValueError("the packed input must be a contiguous 1-D uint8 tensor")
                base, total = data.data_ptr(), data.numel()
            else:
                if data.dtype != np.uint8 or data.ndim != 1 or not data.flags.c_contiguous:
                    raise ValueError("the packed input must be a contiguous 1-D uint8 array")
                base, total = data.ctypes.data, data.size
            off = _as_int64(offsets, "offsets")
            ln = _as_int64(lengths, "lengths", off.shape)
            if off.size and ((off < 0).any() or (ln < 0).any() or (off + ln > total).any()):
                raise ValueError(f"offsets/lengths point outside the packed input of {total} bytes")
            return (off + base).astype(np.uint64), ln.astype(np.uint64)
        if offsets is not None or lengths is not None:
            raise ValueError("offsets/lengths only apply to a packed tensor or array input")
        pairs = np.asarray(list(data), dtype=np.uint64)
        if pairs.size == 0:
            pairs = pairs.reshape(0, 2)
        if pairs.ndim != 2 or pairs.shape[1] != 2:
            raise ValueError("buffers must be a sequence of (pointer, length) pairs")
        return np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])

    def decode_batch(
        self,
        data: Union[torch.Tensor, np.ndarray, Sequence[Tuple[int, int]]],
        offsets=None,
        lengths=None,
        sizes=None,
        out: Optional[torch.Tensor] = None,
        out_offsets=None,
        stream: Union[torch.cuda.Stream, int, None] = None,
        *,
        hints=None,
        chroma=None,
        stream_order: bool = True,
    ) -> List[int]:
        """Decode a batch of encoded images into ``out`` as interleaved RGB, or as planar
        Y, Cb, Cr at each image's own chroma subsampling (``chroma``).

        Args:
            data: the encoded images in host memory: either one packed uint8 tensor
                (pinned or pageable) or numpy array with ``offsets``/``lengths``
                (int64, one per image), or a sequence of ``(pointer, length)`` pairs.
            sizes: ``(N, 2)`` ints, ``(height, width)`` of each image as its header
                says (see :func:`jpeg_info`).  nvJPEG's own reading must agree, which
                guards the output buffer; a disagreement gives STATUS_SIZE_MISMATCH.
            out: 1-D uint8 CUDA tensor on this decoder's device.
            out_offsets: ``(N,)`` byte offsets into ``out``; image ``i`` occupies
                ``h * w * 3`` bytes there (HWC, row pitch ``3 * w``) where ``(h, w)``
                is its size (with ``chroma``, its planes' bytes).
            stream: CUDA stream (``torch.cuda.Stream`` or a raw ``cudaStream_t`` int) to
                decode on; default: the current stream of the decoder's device.
            hints: optional ``(N,)`` int64 codes of what each image's header says
                (SOF type, components, sampling, restart interval, size class), from a
                header parse the caller trusts. Images whose code has been checked once
                skip nvJPEG's per-image header checks and go straight to the backend
                that took the first one, which saves most of the host time per batch.
            chroma: optional ``(N, 2)`` ints: decode as planes, with no chroma upsampling
                and no colour conversion. Row ``i`` is the height and width of image
                ``i``'s Cb and Cr planes (``ceil(h * h_i / h_max)`` etc. from its sampling
                factors); image ``i`` then occupies ``h * w + 2 * ch * cw`` bytes at its
                offset: Y (row pitch ``w``), then Cb, then Cr (row pitch ``cw``). ``(0, 0)``
                marks a grayscale image: Y only.
            stream_order: the hardware engines write ``out`` while the call runs,
                whatever work is still queued on ``stream`` before it (nvJPEG's batched
                hardware decode does not wait for the stream). With True the call first
                waits, on the host, until ``stream`` has done that work, so nothing queued
                earlier still reads or writes ``out`` when the engines write it. Pass
                False only when nothing queued before the call on any stream uses the
                images' bytes of ``out`` (the loader waits for the batch that last read a
                buffer before it decodes into it again).

        Returns:
            One status per image: STATUS_OK (0), STATUS_NEEDS_CPU (-1: decode it with
            ``decode_cpu``), STATUS_SIZE_MISMATCH (-2), or the positive nvjpegStatus_t
            of the call that failed.  ``self.last_errors[i]`` says why image ``i``
            was not decoded.  Failed images leave their slice of ``out`` undefined.

        The work is queued on ``stream``; the caller must keep ``data`` and ``out``
        alive (and ``data`` unmodified) until that stream has passed this point (an
        event recorded on it after the call has completed, or a synchronize).  The
        decoder also holds references to both until its next call.
        """
        if sizes is None or out is None or out_offsets is None:
            raise TypeError("decode_batch needs sizes, out and out_offsets")
        with self._lock:
            if self._closed:
                raise RuntimeError("NvjpegDecoder is closed")
            ptrs, lens = self._host_pointers(data, offsets, lengths)
            n = int(ptrs.shape[0])
            hw_sizes = _as_int64(sizes, "sizes", (n, 2))
            heights = hw_sizes[:, 0]
            widths = hw_sizes[:, 1]
            out_off = _as_int64(out_offsets, "out_offsets", (n,))
            self._check_out(out)
            planes = None
            if chroma is not None:
                planes = _as_int64(chroma, "chroma", (n, 2))
                bad = ((planes < 0).any(1) | (planes[:, 0] > heights) | (planes[:, 1] > widths)
                       | ((planes[:, 0] == 0) != (planes[:, 1] == 0)))
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    raise ValueError(f"chroma planes {tuple(planes[i])} of image {i} do not fit its "
                                     f"{heights[i]}x{widths[i]} frame")
            if planes is None:
                nbytes = heights * widths * 3
            else:
                nbytes = heights * widths + 2 * planes[:, 0] * planes[:, 1]
            if n and ((out_off < 0).any() or (out_off + nbytes > out.numel()).any()):
                i = int(np.flatnonzero((out_off < 0) | (out_off + nbytes > out.numel()))[0])
                raise ValueError(f"image {i} needs bytes [{out_off[i]}, {out_off[i] + nbytes[i]}) of out, "
                                 f"which has {out.numel()}")
            self.last_errors = {}
            self.last_stats = {}
            self._call_codes = None if hints is None else _as_int64(hints, "hints", (n,))
            self._call_hints = None if hints is None else self._call_codes.tolist()
            if n == 0:
                return []
            if stream is None:
                stream = torch.cuda.current_stream(self.device)
            elif isinstance(stream, int):
                stream = torch.cuda.ExternalStream(stream, device=self.device)
            if stream.device != self.device:
                raise ValueError(f"stream is on {stream.device}, the decoder on {self.device}")
            status = np.zeros(n, dtype=np.int32)
            dst = (out_off + out.data_ptr()).astype(np.uint64)
            ss = self._sets[self._next_set]
            self._next_set = (self._next_set + 1) % len(self._sets)
            with torch.cuda.device(self.device):
                if ss.recorded:
                    # These states must not be reinitialised or reused while the batch
                    # that last used them still runs on the GPU.
                    ss.event.synchronize()
                    ss.inflight = ()
                scratch: list = []
                try:
                    self._decode(ss, ptrs, lens, heights, widths, dst, status, stream, scratch, planes,
                                 stream_order)
                finally:
                    ss.event.record(stream)
                    ss.recorded = True
                    ss.inflight = (data, out, scratch)
            return status.tolist()

    def _classify(self, ptrs, lens, heights, widths, status, planes=None) -> Tuple[List[int], List[int]]:
        """Header checks for every image: (hardware indices, hybrid indices)."""
        lib = self._lib
        errors = self.last_errors
        get_info = lib.nvjpegGetImageInfo
        parse_header = lib.nvjpegJpegStreamParseHeader
        get_encoding = lib.nvjpegJpegStreamGetJpegEncoding
        get_precision = lib.nvjpegJpegStreamGetSamplePrecision
        supported = lib.nvjpegDecodeBatchedSupported
        hw = self._hw
        info_handle = hw if hw is not None else self._hy
        js = self._jstream
        p_ncomp, p_css = ctypes.byref(self._c_ncomp), ctypes.byref(self._c_css)
        c_w, c_h = self._c_w, self._c_h
        p_enc, p_prec, p_sup = ctypes.byref(self._c_enc), ctypes.byref(self._c_prec), ctypes.byref(self._c_sup)
        c_ncomp, c_css, c_enc, c_prec, c_sup = self._c_ncomp, self._c_css, self._c_enc, self._c_prec, self._c_sup
        gray_ok = self.gpu_grayscale
        ptr_l, len_l = ptrs.tolist(), lens.tolist()
        h_l, w_l = heights.tolist(), widths.tolist()
        hw_idx: List[int] = []
        hy_idx: List[int] = []
        hints_l = self._call_hints
        # The backend that took the first image of a header code takes the others without
        # nvJPEG's per-image checks.
        routes = self._routes
        for i in range(len(ptr_l)):
            hint = hints_l[i] if hints_l is not None else None
            if hint is not None and hint in routes:
                (hw_idx if routes[hint] else hy_idx).append(i)
                continue
            p, length = ptr_l[i], len_l[i]
            if length == 0 or h_l[i] <= 0 or w_l[i] <= 0:
                status[i] = STATUS_NEEDS_CPU
                errors[i] = "empty input" if length == 0 else "no output size given"
                continue
            st = get_info(info_handle, p, length, p_ncomp, p_css, c_w, c_h)
            if st:
                status[i] = STATUS_NEEDS_CPU
                errors[i] = f"nvjpegGetImageInfo: {status_name(st)}"
                continue
            nc = c_ncomp.value
            if nc != 3 and not (nc == 1 and gray_ok):
                status[i] = STATUS_NEEDS_CPU
                errors[i] = f"{nc}-component JPEG"
                continue
            if c_css.value == NVJPEG_CSS_UNKNOWN:
                status[i] = STATUS_NEEDS_CPU
                errors[i] = "unknown chroma subsampling"
                continue
            if c_w[0] != w_l[i] or c_h[0] != h_l[i]:
                status[i] = STATUS_SIZE_MISMATCH
                errors[i] = f"nvJPEG reads {c_h[0]}x{c_w[0]}, caller gave {h_l[i]}x{w_l[i]}"
                continue
            if planes is not None and (nc == 1) != (planes[i, 0] == 0) or \
                    planes is not None and nc == 3 and (c_h[1], c_w[1]) != (planes[i, 0], planes[i, 1]):
                status[i] = STATUS_SIZE_MISMATCH
                errors[i] = (f"nvJPEG reads {nc} components, chroma {c_h[1]}x{c_w[1]}; caller gave chroma "
                             f"{planes[i, 0]}x{planes[i, 1]}")
                continue
            st = parse_header(info_handle, p, length, js)
            if st:
                status[i] = STATUS_NEEDS_CPU
                errors[i] = f"nvjpegJpegStreamParseHeader: {status_name(st)}"
                continue
            st = get_encoding(js, p_enc)
            if st or c_enc.value not in _LOSSY_ENCODINGS:
                status[i] = STATUS_NEEDS_CPU
                errors[i] = f"JPEG encoding 0x{c_enc.value:02X} (SOF) not handled by nvJPEG's lossy decoders"
                continue
            st = get_precision(js, p_prec)
            if st or c_prec.value != 8:
                status[i] = STATUS_NEEDS_CPU
                errors[i] = f"{c_prec.value}-bit samples"
                continue
            if hw is not None:
                st = supported(hw, js, p_sup)
                if st == 0 and c_sup.value == 0:
                    hw_idx.append(i)
                    if hint is not None:
                        routes[hint] = True
                    continue
            hy_idx.append(i)
            if hint is not None:
                routes[hint] = False
        return hw_idx, hy_idx

    @staticmethod
    def _claim(state: int, used: set, stream) -> None:
        """Wait for earlier work of this call on ``state`` before reusing it.

        nvJPEG keeps per-state staging buffers that queued GPU work may still read;
        nvjpegDecodeBatchedInitialize also requires earlier batches to be finished.
        Only chunked batches (more than max_batch images) and single-image retries
        reuse a state within one call.
        """
        if state in used:
            stream.synchronize()
        used.add(state)

    def _batched(self, ss: _StateSet, which: str, idx: List[int], ptrs, lens, images, fmt: int,
                 stream, used: set) -> int:
        """One nvjpegDecodeBatched call for images ``idx`` into ``images`` (their
        nvjpegImage_t rows, from :meth:`_image_rows`) in output format ``fmt``; returns
        its status."""
        lib = self._lib
        if which == "hw":
            handle, state, attr = self._hw, ss.hw, "hw_batch"
        else:
            handle, state, attr = self._hy, ss.hy, "hy_batch"
        k = len(idx)
        self._claim(state, used, stream)
        stream_handle = stream.cuda_stream
        sel = np.asarray(idx, dtype=np.int64)
        data_arr = np.ascontiguousarray(ptrs[sel])
        len_arr = np.ascontiguousarray(lens[sel])
        images = np.ascontiguousarray(images, dtype=np.uint64)
        if getattr(ss, attr) != (k, fmt):
            st = lib.nvjpegDecodeBatchedInitialize(handle, state, k, 1, fmt)
            if st:
                setattr(ss, attr, ())
                return st
            setattr(ss, attr, (k, fmt))
        st = lib.nvjpegDecodeBatched(handle, state, data_arr.ctypes.data, len_arr.ctypes.data,
                                     images.ctypes.data, stream_handle)
        if st:
            # "If the batch decoding fails, call nvjpegDecodeBatchedInitialize() again."
            setattr(ss, attr, ())
        return st

    def _single(self, ss: _StateSet, ptr: int, length: int, row, fmt: int, stream, used: set) -> int:
        self._claim(ss.single, used, stream)
        img = NvjpegImage()
        for c in range(4):
            img.channel[c] = int(row[c])
            img.pitch[c] = int(row[4 + c])
        return self._lib.nvjpegDecode(self._hy, ss.single, ptr, length, fmt, ctypes.byref(img), stream.cuda_stream)

    def _image_rows(self, heights, widths, dst, planes, stream, scratch) -> np.ndarray:
        """The nvjpegImage_t of every image, ``(n, 8)`` uint64: channel pointers, then pitches.

        Interleaved RGB: one channel, pitch ``3 * width``. Planar: Y, Cb and Cr back to
        back. nvJPEG may write chroma planes for a grayscale image too; they go to scratch
        memory, never into the batch.
        """
        rows = np.zeros((len(dst), 8), dtype=np.uint64)
        rows[:, 0] = dst
        h, w = heights, widths
        if planes is None:
            rows[:, 4] = 3 * w
            return rows
        luma = h * w
        ch, cw = planes[:, 0], planes[:, 1]
        rows[:, 1] = dst + luma.astype(np.uint64)
        rows[:, 2] = rows[:, 1] + (ch * cw).astype(np.uint64)
        rows[:, 4], rows[:, 5], rows[:, 6] = w, cw, cw
        gray = np.flatnonzero(ch == 0)
        if len(gray):
            need = int(2 * luma[gray].sum())
            tmp = self._gray_scratch
            if tmp is None or tmp.numel() < need:
                with torch.cuda.stream(stream):
                    tmp = self._gray_scratch = self._empty(2 * need)
            scratch.append(tmp)
            pos = tmp.data_ptr() + np.concatenate([[0], np.cumsum(2 * luma[gray])[:-1]]).astype(np.uint64)
            rows[gray, 1] = pos
            rows[gray, 2] = pos + luma[gray].astype(np.uint64)
            rows[gray, 5] = rows[gray, 6] = w[gray]
        return rows

    def _kinds(self, sel: np.ndarray, heights, widths, planes) -> np.ndarray:
        """What groups images ``sel`` for :func:`engine_order`: the call's header codes, else
        the chroma subsampling the planes' sizes tell (planar output), else nothing."""
        if self._call_codes is not None:
            return self._call_codes[sel]
        if planes is not None:
            ch, cw = planes[sel, 0], planes[sel, 1]
            return (ch == 0) * 4 + (ch < heights[sel]) * 2 + (cw < widths[sel])
        return np.zeros(len(sel), dtype=np.int64)

    def _decode(self, ss: _StateSet, ptrs, lens, heights, widths, dst, status, stream, scratch,
                planes=None, stream_order: bool = True) -> None:
        hw_idx, hy_idx = self._classify(ptrs, lens, heights, widths, status, planes)
        if len(hw_idx) > 1:
            sel = np.asarray(hw_idx, dtype=np.int64)
            order = engine_order(self._kinds(sel, heights, widths, planes), heights[sel], widths[sel])
            hw_idx = sel[order].tolist()
        errors = self.last_errors
        stats = self.last_stats
        stats["needs_cpu"] = int((status == STATUS_NEEDS_CPU).sum())
        used: set = set()
        retry: List[int] = []
        step = self.max_batch
        fmt = NVJPEG_OUTPUT_RGBI if planes is None else NVJPEG_OUTPUT_YUV
        rows = self._image_rows(heights, widths, dst, planes, stream, scratch)
        if hw_idx and stream_order:
            # The engines write the images during the call, not in the stream's order
            # (the CUDA decoder's calls below are ordered): let earlier work finish first.
            stream.synchronize()
        for start in range(0, len(hw_idx), step):
            chunk = hw_idx[start:start + step]
            sel = np.asarray(chunk, dtype=np.int64)
            st = self._batched(ss, "hw", chunk, ptrs, lens, rows[sel], fmt, stream, used)
            if st:
                retry.extend(chunk)
                errors.update((i, f"hardware batch failed ({status_name(st)}), retried alone") for i in chunk)
        stats["hardware"] = len(hw_idx) - len(retry)
        stats["hardware_retried"] = len(retry)
        stats["hybrid"] = len(hy_idx)
        fallback = hy_idx + retry
        if not fallback:
            return
        fb_rows = rows[np.asarray(fallback, dtype=np.int64)]
        single_only = set(retry)
        batch = [j for j, i in enumerate(fallback) if i not in single_only]
        singles = [j for j, i in enumerate(fallback) if i in single_only]
        if len(batch) == 1:
            singles = batch + singles
            batch = []
        for start in range(0, len(batch), step):
            js = batch[start:start + step]
            chunk = [fallback[j] for j in js]
            st = self._batched(ss, "hy", chunk, ptrs, lens, fb_rows[js], fmt, stream, used)
            if st:
                singles.extend(js)
                errors.update((i, f"hybrid batch failed ({status_name(st)}), retried alone") for i in chunk)
        for j in singles:
            i = fallback[j]
            st = self._single(ss, int(ptrs[i]), int(lens[i]), fb_rows[j], fmt, stream, used)
            if st:
                status[i] = st
                errors[i] = f"nvjpegDecode: {status_name(st)}"
            else:
                errors.pop(i, None)

    # ---------------------------------------------------------------- teardown

    def close(self) -> None:
        """Wait for queued work, then destroy nvJPEG states and handles.  Idempotent."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            self._release()
            return
        with lock:
            self._release()

    def _release(self) -> None:
        self._closed = True
        self._gray_scratch = None
        lib = getattr(self, "_lib", None)
        sets = getattr(self, "_sets", [])
        objects = []
        for ss in sets:
            objects += [("nvjpegJpegStateDestroy", ss.hw), ("nvjpegJpegStateDestroy", ss.single),
                        ("nvjpegJpegStateDestroy", ss.hy)]
        objects += [
            ("nvjpegJpegStreamDestroy", getattr(self, "_jstream", None)),
            ("nvjpegDestroy", getattr(self, "_hw", None)),
            ("nvjpegDestroy", getattr(self, "_hy", None)),
        ]
        if lib is None or not any(obj for _, obj in objects):
            return
        for ss in sets:
            try:
                if ss.recorded:
                    ss.event.synchronize()
            except Exception:  # interpreter shutdown or a dead context: free what we can
                pass
        for name, obj in objects:
            if obj:
                try:
                    getattr(lib, name)(obj)
                except Exception:
                    pass
        self._sets = []
        self._jstream = self._hw = self._hy = None

    def __enter__(self) -> "NvjpegDecoder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
