"""The batched scan-marker check (Triton kernel) against the per-file numpy check and a torch reference."""
from __future__ import annotations

import io
import os

import numpy as np
import torch

# Must precede the first `import triton` (the kernel module imports it lazily).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from csrc_triton.scan_check import bad_scan_markers, bad_scan_markers_reference  # noqa: E402
from torchdali.decode._jpeg_defects import entropy_data_ok  # noqa: E402
from torchdali.decode._jpeg_header import scan_offset  # noqa: E402

from ._helpers import kernel_devices  # noqa: E402

DEVICES = kernel_devices()


def _jpegs(n: int, seed: int = 0) -> tuple[list[bytes], np.ndarray]:
    """JPEGs of mixed kinds; odd ones get a stretch of their scan data overwritten."""
    from PIL import Image

    from torchdali._synthetic import synthetic_image

    rng = np.random.default_rng(seed)
    out = []
    kinds = ({}, {"subsampling": 0}, {"progressive": True}, {"restart_marker_blocks": 2})
    for k in range(n):
        arr = synthetic_image(rng, int(rng.integers(16, 80)), int(rng.integers(16, 80)))
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, format="JPEG", quality=int(rng.integers(70, 98)), **kinds[k % 4])
        v = bytearray(buf.getvalue())
        if k % 2:
            s = scan_offset(np.frombuffer(bytes(v), np.uint8))
            at = s + int(rng.integers(0, max(1, len(v) - s - 300)))
            v[at:at + 250] = rng.integers(0, 256, 250, dtype=np.uint8).tobytes()
        out.append(bytes(v))
    starts = np.array([scan_offset(np.frombuffer(b, np.uint8)) for b in out])
    return out, starts


@pytest.mark.parametrize("device", DEVICES)
def test_flags_match_the_per_file_check(device):
    files, starts = _jpegs(24)
    expected = np.array([not entropy_data_ok(np.frombuffer(b, np.uint8)) for b in files])
    assert 4 <= expected.sum() <= 12  # the corpus has both kinds
    lengths = np.array([len(b) for b in files])
    offsets = np.cumsum(lengths) - lengths
    data = torch.frombuffer(bytearray(b"".join(files)), dtype=torch.uint8).to(device)
    before = data.clone()
    got = bad_scan_markers(data, offsets, lengths, starts)
    assert got.device.type == device and got.dtype == torch.bool
    assert got.cpu().numpy().tolist() == expected.tolist()
    assert bad_scan_markers_reference(data, offsets, lengths, starts).cpu().numpy().tolist() == expected.tolist()
    assert torch.equal(data, before)


@pytest.mark.parametrize("device", DEVICES)
def test_unchecked_samples_gaps_and_edges(device):
    files, starts = _jpegs(6, seed=3)
    # samples out of order with gaps between them, one unchecked (-1), one empty
    gap = b"\xff\x13" * 8  # bad pairs outside every sample must not count
    blob = bytearray(gap)
    offsets, lengths = [], []
    for b in files[::-1]:
        offsets.append(len(blob))
        lengths.append(len(b))
        blob += b + gap
    offsets.append(len(blob))
    lengths.append(0)
    st = list(starts[::-1]) + [-1]
    st[0] = -1  # the last file (corrupted) is not checked
    data = torch.frombuffer(blob, dtype=torch.uint8).to(device)
    got = bad_scan_markers(data, offsets, lengths, st).cpu().tolist()
    ref = bad_scan_markers_reference(data, offsets, lengths, st).cpu().tolist()
    per_file = [not entropy_data_ok(np.frombuffer(b, np.uint8)) for b in files[::-1]]
    assert got == ref == [False] + per_file[1:] + [False]
    assert bad_scan_markers(data, [], [], []).numel() == 0


def test_rejects_wrong_input():
    with pytest.raises(ValueError, match="1-D uint8"):
        bad_scan_markers(torch.zeros(4, dtype=torch.int32), [0], [4], [0])
