"""Scan-marker check: which JPEGs of a packed batch hold a marker no scan can hold.

Inside entropy-coded data a 0xFF byte may only be followed by 0x00 (a stuffed
0xFF), a restart marker, EOI, or the table/scan markers that separate the scans
of a multi-scan JPEG. Random overwrites of compressed data almost always break
that rule. nvJPEG's hardware engines decode such a stream without an error, so
the executor runs this check on the batch it has copied to the GPU and sends the
flagged samples to the CPU decoder, which names what is wrong with them.

:func:`bad_scan_markers` launches the Triton kernel (``_scan_check_kernel.py``: one
program per sample and block of bytes, no temporaries); :func:`bad_scan_markers_reference` is the same
function in plain torch.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from . import _triton

__all__ = ["bad_scan_markers", "bad_scan_markers_reference", "SCAN_OK"]

#: SCAN_OK[b]: byte ``b`` may follow 0xFF inside scan data: stuffing (0x00), fill
#: (0xFF), restart markers, EOI, and the table/scan markers that separate the scans
#: of a multi-scan JPEG.
SCAN_OK = np.zeros(256, dtype=bool)
SCAN_OK[[0x00, 0xFF, 0xD9, 0xC4, 0xCC, 0xDA, 0xDB, 0xDD, 0xFE]] = True
SCAN_OK[0xD0:0xD8] = True
SCAN_OK[0xE0:0xF0] = True

_BLOCK = 4096  # bytes per program
_TABLES: dict = {}


def bad_scan_markers(data: torch.Tensor, offsets: Any, lengths: Any, starts: Any) -> torch.Tensor:
    """Per sample, True when its scan data holds a marker no scan can hold.

    ``data``: packed JPEGs, 1-D uint8 on a CUDA device (or on the CPU under
    ``TRITON_INTERPRET=1``). Sample ``i`` is ``data[offsets[i]: offsets[i] + lengths[i]]``
    and its entropy-coded data starts ``starts[i]`` bytes in (-1: not checked).
    ``offsets``, ``lengths`` and ``starts`` are int sequences, numpy arrays or
    tensors. The result is a bool tensor on ``data``'s device; nothing waits for it.
    """
    if data.dtype != torch.uint8 or data.dim() != 1:
        raise ValueError(f"data must be a 1-D uint8 tensor, got {data.dtype} with shape {tuple(data.shape)}")
    offsets_np, lengths_np, starts_np = (
        np.asarray(v.cpu() if isinstance(v, torch.Tensor) else v, dtype=np.int64) for v in (offsets, lengths, starts))
    n = int(lengths_np.shape[0])
    dev = data.device
    flags = torch.zeros(n, dtype=torch.uint8, device=dev)
    if n == 0 or data.numel() < 2:
        return flags.bool()
    span = int((lengths_np - np.maximum(starts_np, 0)).max())
    if span <= 1:
        return flags.bool()
    ok = _TABLES.get(dev)
    if ok is None:
        ok = _TABLES[dev] = torch.from_numpy(SCAN_OK.astype(np.uint8)).to(dev)
    kernel = _triton.kernel("_scan_check_kernel", "scan_check_kernel", dev,
                            "bad_scan_markers", "bad_scan_markers_reference")
    grid = (n, _triton.cdiv(span, _BLOCK))
    meta, = _triton.upload([np.stack([offsets_np, lengths_np, starts_np])], dev)
    kernel[grid](data, data.numel(), meta[0], meta[1], meta[2], ok, flags, BLOCK=_BLOCK)
    return flags.bool()


def bad_scan_markers_reference(data: torch.Tensor, offsets: Any, lengths: Any, starts: Any) -> torch.Tensor:
    """:func:`bad_scan_markers` in plain torch (any device)."""
    dev = data.device
    offsets, lengths, starts = (torch.as_tensor(v, dtype=torch.int64).to(dev) for v in (offsets, lengths, starts))
    n = offsets.numel()
    if n == 0 or data.numel() < 2:
        return torch.zeros(n, dtype=torch.bool, device=dev)
    ok = torch.from_numpy(SCAN_OK).to(dev)
    bad = (data[:-1] == 0xFF) & ~ok[data[1:].long()]
    csum = torch.zeros(data.numel(), dtype=torch.int64, device=dev)
    torch.cumsum(bad, 0, out=csum[1:])
    lo = (offsets + starts.clamp(min=0)).clamp(max=data.numel() - 1)
    hi = (offsets + lengths - 1).clamp(min=0, max=data.numel() - 1)
    return ((csum[hi] - csum[torch.minimum(lo, hi)]) > 0) & (starts >= 0)
