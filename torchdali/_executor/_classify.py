"""What a sample is, as a worker finds it, and which decoder takes it.

``classify`` tells encoded bytes (``ENCODED``) from decoded pixels (``RAW``).
``load_sample`` checks an encoded image's header before anything is decoded (over
``max_image_pixels``, or a header its data cannot fill: a ``SampleError``), then sends
a JPEG nvJPEG decodes well to the GPU (``_gpu_decodable_shape``: its shape, nvJPEG
routing code and scan start) and decodes everything else here, in the worker, on the
CPU (PNG, CMYK, lossless, ...).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np
import torch
from csrc_triton import layout

from ..errors import SampleError
from ..transforms._plan import to_hwc
from ._wire import ENCODED, RAW


def split_item(item: Any) -> tuple[Any, Any, bool]:
    """(data, target, has_target) of a dataset item."""
    if isinstance(item, (tuple, list)) and len(item) >= 2:
        target = item[1] if len(item) == 2 else tuple(item[1:])
        return item[0], target, True
    return item, None, False


def classify(data: Any) -> tuple[int, Any]:
    """(kind, payload): encoded bytes as a 1-D uint8 tensor, or HWC uint8 pixels."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        buf = bytes(data) if isinstance(data, memoryview) else data
        if len(buf) == 0:
            return ENCODED, torch.empty(0, dtype=torch.uint8)
        return ENCODED, torch.frombuffer(bytearray(buf) if isinstance(buf, bytes) else buf, dtype=torch.uint8)
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise TypeError(f"expected uint8 data, got numpy {data.dtype}")
        if data.ndim == 1:
            # torch wants writable memory; read-only arrays (np.frombuffer of bytes) are copied
            data = np.ascontiguousarray(data) if data.flags.writeable else data.copy()
            return ENCODED, torch.from_numpy(data)
        return RAW, to_hwc(data)
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8:
            raise TypeError(f"expected a uint8 tensor, got {data.dtype}")
        if data.ndim == 1:
            return ENCODED, data.contiguous()
        return RAW, to_hwc(data)
    if hasattr(data, "mode") and hasattr(data, "size") and hasattr(data, "convert"):  # PIL image
        return RAW, to_hwc(np.asarray(data.convert("RGB")))
    raise TypeError(
        f"expected encoded bytes (bytes, bytearray, 1-D uint8 array/tensor) or a decoded uint8 image, "
        f"got {type(data).__name__}"
    )


class LoadedSample(NamedTuple):
    """One sample ready to pack: its kind, payload and (H, W, C)."""

    kind: int  # ENCODED or RAW
    payload: torch.Tensor  # encoded bytes (1-D) or HWC uint8 pixels
    shape: tuple  # (H, W, C) of the decoded image
    hint: int  # header code for nvJPEG's backend routing (-1: none)
    scan_start: int  # where the JPEG's scan data starts (-1: not checked)


def load_sample(data: Any, idx: int, path: str | None, mode: str, max_image_pixels: int | None) -> LoadedSample:
    """One sample's data, classified (and decoded here when the GPU cannot, or on the CPU
    path, ``mode="cpu"``); raises SampleError naming it."""
    try:
        kind, payload = classify(data)
    except (TypeError, ValueError) as e:
        raise SampleError.for_sample(idx, path, "unsupported sample", e) from None
    if kind == ENCODED:
        header = _checked_header(payload, max_image_pixels, idx, path)
        probe = _gpu_decodable_shape(payload, header.jpeg) if mode == "gpu" else None
        if probe is not None:
            shape, hint, scan_start = probe
            return LoadedSample(kind, payload, shape, hint, scan_start)
        dec = decoders()
        kind, payload = RAW, _decode_or_raise(dec.decode_cpu, dec.DecodeError, payload, idx, path)
    return LoadedSample(kind, payload, tuple(payload.shape), -1, -1)


def _decode_or_raise(decode_cpu: Callable, decode_error: type, payload: torch.Tensor, idx: int,
                     path: str | None) -> torch.Tensor:
    try:
        return decode_cpu(payload)
    except decode_error as e:
        raise SampleError.for_sample(idx, path, "cannot decode image", e) from None
    except Exception as e:  # decoders raise a zoo of types on corrupt data
        raise SampleError.for_sample(idx, path, "cannot decode image", f"{type(e).__name__}: {e}") from None


def _checked_header(payload: torch.Tensor, max_pixels: int | None, idx: int, path: str | None) -> Any:
    """The size the sample's header claims (``decode._limits.HeaderSize``); raises SampleError,
    before anything is decoded, for an image over ``max_pixels`` or a header its data cannot fill."""
    dec = decoders()
    header = dec.header_size(payload)
    try:
        dec.check_header(header, payload.numel(), max_pixels)
    except (dec.ImageTooLarge, dec.ImplausibleHeader) as e:
        raise SampleError.for_sample(idx, path, "refused before decoding", e) from None
    return header


def _gpu_decodable_shape(payload: torch.Tensor, info: Any) -> tuple[tuple[int, int, int], int, int] | None:
    """((H, W, layout.PLANAR + S), header code, scan start) when nvJPEG should decode this
    sample, else None (decode on the CPU): nvJPEG decodes it to its Y/Cb/Cr planes at their
    own subsampling ``S``, which the fused kernel converts. A JPEG whose planes the kernel
    has no reader for (4:1:1, unequal chroma planes: ``planar_chroma`` is None) gets
    ``(H, W, 3)``: nvJPEG decodes it to interleaved RGB.

    CMYK/YCCK, RGB-coded, lossless, arithmetic-coded and 12-bit JPEGs go to the
    CPU, and so do files that do not end in an EOI marker and files whose tables or
    scan header libjpeg would refuse (``scan_header``). Whether the scan data
    holds a marker no scan can hold (nvJPEG may decode such a stream without
    complaint) is checked for the whole batch on the GPU, from the scan start.
    ``info`` is the parsed JPEG header (None: not a JPEG, or a corrupt header, which
    the CPU decoder reports precisely).
    """
    if info is None or info.height <= 0 or info.width <= 0:
        return None
    if (info.ncomp not in (1, 3) or info.lossless or info.arithmetic or info.precision != 8
            or info.is_rgb_coded):  # (4 components, CMYK or YCCK, are out with the count)
        return None
    data = payload.numpy()
    if len(data) < 2 or data[-2] != 0xFF or data[-1] != 0xD9:
        return None
    dec = decoders()
    defect, start = dec.scan_header(data)  # one walk over the segments: defects and the scan start
    if defect is not None:
        return None
    chroma = dec.planar_chroma(info)
    channels = 3 if chroma is None else layout.PLANAR + layout.SUBSAMPLINGS[chroma[0]]
    return (info.height, info.width, channels), dec.header_code(info), start


_DECODERS: Any = None


def decoders() -> Any:
    """The ``decode`` package's header checks and CPU decoder, imported on first use (in the
    workers; ``import torchdali`` does not load the decode package), then looked up once."""
    global _DECODERS
    if _DECODERS is None:
        from types import SimpleNamespace

        from ..decode import DecodeError, decode_cpu
        from ..decode._jpeg_defects import entropy_data_ok, scan_header
        from ..decode._jpeg_header import header_code, planar_chroma
        from ..decode._limits import ImageTooLarge, ImplausibleHeader, check_header, header_size

        _DECODERS = SimpleNamespace(
            DecodeError=DecodeError, decode_cpu=decode_cpu, header_code=header_code, planar_chroma=planar_chroma,
            scan_header=scan_header, ImageTooLarge=ImageTooLarge, ImplausibleHeader=ImplausibleHeader,
            check_header=check_header, header_size=header_size, entropy_data_ok=entropy_data_ok)
    return _DECODERS
