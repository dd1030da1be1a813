"""``header_defect`` and ``scan_header``: the JPEG tables and scan headers the loader keeps from nvJPEG.

Valid files from several encoders pass; each defect is named; over the fuzz corpus,
every file it flags is one libjpeg (through Pillow) refuses, except the two kinds
libjpeg accepts by design (a scan without its Huffman tables: libjpeg substitutes
the standard ones; a sequential scan with odd spectral selection, and junk between
segments: libjpeg warns).
"""
from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import torch
from PIL import Image

from torchdali._executor._classify import _gpu_decodable_shape
from torchdali.decode._jpeg_defects import header_defect, scan_header
from torchdali.decode._jpeg_header import jpeg_info, scan_offset

from ._fuzz import _base_jpegs, _segments, fuzz_corpus


def _pil_jpeg(h: int = 37, w: int = 53, **kw) -> bytes:
    img = (np.random.default_rng(h * w).random((h, w, 3)) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", **kw)
    return buf.getvalue()


def _pil_decodes(data: bytes) -> bool:
    try:
        Image.open(io.BytesIO(data)).load()
        return True
    except Exception:
        return False


@pytest.mark.parametrize("kw", [dict(quality=5), dict(quality=95, subsampling=0), dict(subsampling=1),
                                dict(progressive=True), dict(optimize=True), dict(restart_marker_rows=1),
                                dict(quality=100, subsampling=2, progressive=True)])
def test_valid_pillow_files_pass(kw):
    assert header_defect(_pil_jpeg(**kw)) is None


def test_valid_files_of_other_encoders_pass():
    from torchvision.io import encode_jpeg

    img = torch.from_numpy((np.random.default_rng(0).random((3, 40, 31)) * 255).astype(np.uint8))
    assert header_defect(encode_jpeg(img, quality=90).numpy()) is None
    assert header_defect(encode_jpeg(img[:1].contiguous(), quality=50).numpy()) is None
    for data in _base_jpegs():  # grayscale, restart markers, progressive, odd sizes
        assert header_defect(data) is None


def _segment(data: bytes, marker: int) -> tuple[int, int]:
    return next((p, n) for m, p, n in _segments(data) if m == marker)


def test_each_defect_is_named():
    data = _pil_jpeg()
    dht, _ = _segment(data, 0xC4)
    d = bytearray(data)
    assert d[dht + 5] == 0 and d[dht + 7] >= 3  # Pillow's DC luma table: no 1-bit, five 3-bit codes
    d[dht + 5], d[dht + 7] = 3, d[dht + 7] - 3  # three 1-bit codes (same total): more than fit
    assert "more codes of 1 bits than fit" in header_defect(bytes(d))
    sof, _ = _segment(data, 0xC0)
    d = bytearray(data)
    d[sof + 11] = 0x31  # luma 3x1 with chroma 1x1 ... and 2x2 elsewhere: not whole ratios
    d[sof + 14] = 0x21
    assert "not whole ratios" in header_defect(bytes(d))
    d = bytearray(data)
    d[sof + 12] = 3  # quantisation table 3, never defined
    assert "quantisation table 3, which is not defined" in header_defect(bytes(d))
    assert not _pil_decodes(bytes(d))
    sos, _ = _segment(data, 0xDA)
    d = bytearray(data)
    d[sos + 5] = 9  # a component id the frame does not have
    assert "component 9, not in the frame" in header_defect(bytes(d))
    p, n = _segment(data, 0xC4)
    no_dht = data[:p] + data[p + 2 + n:]
    while any(m == 0xC4 for m, _, _ in _segments(no_dht)):
        p, n = _segment(no_dht, 0xC4)
        no_dht = no_dht[:p] + no_dht[p + 2 + n:]
    assert "not defined" in header_defect(no_dht)
    assert _pil_decodes(no_dht)  # libjpeg substitutes the standard tables ...
    info = jpeg_info(np.frombuffer(no_dht, np.uint8))
    assert _gpu_decodable_shape(torch.frombuffer(bytearray(no_dht), dtype=torch.uint8), info) is None  # ... CPU
    assert _gpu_decodable_shape(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                                jpeg_info(np.frombuffer(data, np.uint8))) is not None


def test_dc_symbols_over_15_are_refused():
    data = _pil_jpeg()
    p, n = _segment(data, 0xC4)
    d = bytearray(data)
    assert d[p + 4] >> 4 == 0  # Pillow writes the DC luma table first
    count = sum(d[p + 5:p + 21])
    d[p + 21 + count - 1] = 16
    assert "DC table 0 has a symbol over 15" in header_defect(bytes(d))
    assert not _pil_decodes(bytes(d))


def test_flagged_fuzz_files_are_the_ones_libjpeg_refuses():
    flagged = refused = 0
    for what, data in fuzz_corpus(512):
        defect = header_defect(data)
        if defect is None:
            continue
        flagged += 1
        if any(k in defect for k in ("Huffman tables", "sequential scan with spectral selection", "junk")):
            continue
        assert not _pil_decodes(data), (what, defect)
        refused += 1
    assert flagged > 100 and refused > 50, (flagged, refused)


def test_truncated_headers_are_named_not_raised():
    data = _pil_jpeg()
    sos, n = _segment(data, 0xDA)
    for cut in (3, 10, sos + 3):
        assert isinstance(header_defect(data[:cut]), str)
    assert header_defect(b"not a jpeg") == "no SOI marker"
    d = bytearray(data)
    struct.pack_into(">H", d, 4, 1)  # the APP0 segment's length below its own 2 bytes
    assert "has length 1" in header_defect(bytes(d))


def test_gpu_timeout_is_validated():
    import torchdali as td
    from torchdali import transforms as T

    ds, tf = td.datasets.FileList([]), T.Resize((8, 8))
    for bad in (-1, True, float("nan")):
        with pytest.raises(ValueError, match="gpu_timeout"):
            td.DataLoader(ds, transforms=tf, gpu_timeout=bad)
    assert td.DataLoader(ds, transforms=tf).gpu_timeout == 300.0
    assert td.DataLoader(ds, transforms=tf, gpu_timeout=0).gpu_timeout == 0.0


def test_scan_header_gives_the_scan_start_of_scan_offset():
    """The worker takes the scan start from the same walk as the defects."""
    files = [_pil_jpeg(**kw) for kw in (dict(quality=50), dict(progressive=True), dict(restart_marker_rows=1))]
    files += _base_jpegs() + [data for _, data in fuzz_corpus(256)]
    checked = 0
    for data in files:
        defect, start = scan_header(data)
        if defect is None:
            assert start == scan_offset(np.frombuffer(data, np.uint8)) > 0
            checked += 1
        else:
            assert start == -1
    assert checked > 100
