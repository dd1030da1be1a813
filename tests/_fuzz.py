"""Mutated JPEGs from a fixed seed, for the fuzz tests (tests/test_gpu_hostile.py,
tests/test_hostile.py): bit flips and truncations in the entropy-coded data,
edited SOF/DHT/DQT/SOS fields, wrong component counts, removed tables."""
from __future__ import annotations

import io
import struct

import numpy as np

from torchdali._synthetic import synthetic_image

from ._helpers import jpeg_bytes

FUZZ_SEED = 20261123
FUZZ_COUNT = 2048


def _base_jpegs() -> list[bytes]:
    """Valid JPEGs of the kinds nvJPEG routes differently: subsamplings, progressive,
    restart markers, grayscale, odd sizes."""
    from PIL import Image

    rng = np.random.default_rng(FUZZ_SEED)
    out = []
    for h, w, kw in [(48, 64, {"subsampling": 2}), (37, 53, {"subsampling": 1}), (64, 40, {"subsampling": 0}),
                     (56, 72, {"progressive": True}), (40, 40, {"restart_marker_blocks": 2}),
                     (96, 80, {"optimize": True})]:
        out.append(jpeg_bytes(synthetic_image(rng, h, w), quality=85, **kw))
    buf = io.BytesIO()
    Image.fromarray(synthetic_image(rng, 50, 45)[:, :, 0]).save(buf, format="JPEG", quality=80)
    out.append(buf.getvalue())
    return out


def _segments(data: bytes) -> list[tuple[int, int, int]]:
    """(marker, position of 0xFF, segment length) up to and including SOS."""
    segs, pos = [], 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        length = struct.unpack_from(">H", data, pos + 2)[0]
        segs.append((marker, pos, length))
        if marker == 0xDA:
            break
        pos += 2 + length
    return segs


def _mutate(data: bytes, rng: np.random.Generator) -> tuple[str, bytes]:
    """One mutation of a valid JPEG: (what was done, the bytes)."""
    d = bytearray(data)
    segs = _segments(data)
    sos = next(p + 2 + n for m, p, n in segs if m == 0xDA)
    by = {m: (p, n) for m, p, n in segs}
    kind = int(rng.integers(0, 12))
    if kind <= 2:  # bit flips in the entropy-coded data
        for _ in range(int(rng.integers(1, 9))):
            i = int(rng.integers(sos, len(d) - 2))
            d[i] ^= 1 << int(rng.integers(0, 8))
        return "entropy bit flips", bytes(d)
    if kind == 3:  # truncated scan, with or without an EOI after it
        cut = int(rng.integers(sos, len(d) - 2))
        return "truncated scan", bytes(d[:cut]) + (b"\xff\xd9" if rng.random() < 0.5 else b"")
    if kind == 4:  # truncated header
        return "truncated header", bytes(d[:int(rng.integers(2, sos))])
    sof = next((by[m] for m in (0xC0, 0xC1, 0xC2) if m in by), None)
    if kind == 5 and sof:  # SOF size fields
        p = sof[0]
        choices = [0, 1, 7, 8, 9, 255, 4096, 16384, 65500, 65535]
        h = int(rng.choice(choices)) if rng.random() < 0.5 else int(rng.integers(1, 512))
        w = int(rng.choice(choices)) if rng.random() < 0.5 else int(rng.integers(1, 512))
        struct.pack_into(">HH", d, p + 5, h, w)
        return f"SOF size {h}x{w}", bytes(d)
    if kind == 6 and sof:  # SOF component count, precision, sampling factors, table selectors
        p, n = sof
        field = int(rng.integers(0, 4))
        if field == 0:
            d[p + 9] = int(rng.choice([0, 2, 4, 5, 255]))  # wrong component count
            return "SOF component count", bytes(d)
        if field == 1:
            d[p + 4] = int(rng.choice([0, 1, 12, 16, 255]))
            return "SOF precision", bytes(d)
        c = int(rng.integers(0, max(1, (n - 8) // 3)))
        if field == 2:
            d[p + 11 + 3 * c] = int(rng.integers(0, 256))  # sampling factors
            return "SOF sampling", bytes(d)
        d[p + 12 + 3 * c] = int(rng.integers(0, 256))  # quantisation table selector
        return "SOF table selector", bytes(d)
    if kind == 7 and 0xC4 in by:  # DHT: class/id, code counts or symbols
        p, n = by[0xC4]
        i = p + 4 + int(rng.integers(0, max(1, n - 2)))
        d[i] = int(rng.integers(0, 256))
        return "DHT byte", bytes(d)
    if kind == 8 and 0xDB in by:  # DQT: precision/id or values (zero quantisers)
        p, n = by[0xDB]
        i = p + 4 + int(rng.integers(0, max(1, n - 2)))
        d[i] = int(rng.choice([0, 0x10, 0x13, 0xFF, int(rng.integers(0, 256))]))
        return "DQT byte", bytes(d)
    if kind == 9 and 0xDA in by:  # SOS: component count, selectors, Ss/Se/Ah/Al
        p, n = by[0xDA]
        i = p + 4 + int(rng.integers(0, max(1, n - 2)))
        d[i] = int(rng.integers(0, 256))
        return "SOS byte", bytes(d)
    if kind == 10:  # a whole table segment removed
        victims = [(p, n) for m, p, n in segs if m in (0xC4, 0xDB)]
        if victims:
            p, n = victims[int(rng.integers(0, len(victims)))]
            return "table removed", bytes(d[:p] + d[p + 2 + n:])
    # random bytes anywhere in the header
    for _ in range(int(rng.integers(1, 5))):
        d[int(rng.integers(2, sos))] = int(rng.integers(0, 256))
    return "header bytes", bytes(d)


def loader_gate(blob: bytes, max_pixels: int = 4 << 20) -> tuple[int, int] | None:
    """(height, width) when the loader hands ``blob`` to nvJPEG; None when it decodes it
    on the CPU or refuses it (the workers' header guard and ``_gpu_decodable_shape``, then
    the batch's scan check, ``entropy_data_ok``)."""
    import torch

    from torchdali._executor._classify import _gpu_decodable_shape
    from torchdali.decode._jpeg_defects import entropy_data_ok
    from torchdali.decode._jpeg_header import jpeg_info
    from torchdali.decode._limits import ImageTooLarge, ImplausibleHeader, check_header, header_size

    try:
        check_header(header_size(blob), len(blob), max_pixels)
        info = jpeg_info(np.frombuffer(blob, np.uint8))
    except (ImageTooLarge, ImplausibleHeader, ValueError):
        return None
    probe = _gpu_decodable_shape(torch.frombuffer(bytearray(blob), dtype=torch.uint8), info)
    if probe is None or not entropy_data_ok(np.frombuffer(blob, np.uint8)):  # the batch's scan check
        return None
    return probe[0][:2]


def fuzz_corpus(n: int = FUZZ_COUNT, seed: int = FUZZ_SEED) -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(seed)
    base = _base_jpegs()
    return [_mutate(base[int(rng.integers(0, len(base)))], rng) for _ in range(n)]
