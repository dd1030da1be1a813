"""Planar YCbCr test data (``layout.SOURCE_YCBCR``): native planes of real JPEGs from
Pillow, batches of planes, and an independent loop version of libjpeg's upsampling.

Pillow decodes with libjpeg(-turbo) and is the ground truth: for a JPEG of
``H x W``,

* ``draft("YCbCr", (W, H))`` decodes Y and libjpeg's own fancy-upsampled chroma at
  full size, without colour conversion;
* ``draft("YCbCr", (W // 2, H // 2))`` decodes at scale 1/2, where libjpeg runs a
  full 8x8 IDCT on 4:2:0 chroma instead of upsampling it: the Cb and Cr channels
  are then the native ``ceil(H / 2) x ceil(W / 2)`` planes (this needs ``H, W >= 2``);
* a plain open is libjpeg's final RGB.

4:2:2 and 4:4:0 have no such trick (and Pillow cannot write 4:4:0), so their
upsampling is checked against :func:`upsample_loop`, a transliteration of
libjpeg's row routines written apart from the vectorised reference.
"""
from __future__ import annotations

import io

import numpy as np
import torch

from csrc_triton import layout


def _open(b: bytes, mode: str | None = None, size: tuple[int, int] | None = None):
    from PIL import Image

    im = Image.open(io.BytesIO(b))
    if mode is not None:
        im.draft(mode, size or im.size)
    return im


def subsampling_code(b: bytes) -> int:
    """The ``layout.S_*`` code of a JPEG, from its frame's sampling factors."""
    im = _open(b)
    if im.mode == "L":
        return layout.S_GRAY
    (_, h0, v0, _), *chroma = im.layer
    assert all((h, v) == (1, 1) for _, h, v, _ in chroma), im.layer
    return {(1, 1): layout.S_444, (2, 1): layout.S_422, (2, 2): layout.S_420, (1, 2): layout.S_440}[(h0, v0)]


def jpeg_planes(b: bytes) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, int]:
    """Native ``(Y, Cb, Cr, S)`` of a 4:4:4, 4:2:0 or grayscale JPEG, as libjpeg decodes
    them before upsampling (``Cb``/``Cr`` None for grayscale)."""
    S = subsampling_code(b)
    im = _open(b)
    W, H = im.size
    if S == layout.S_GRAY:
        return np.asarray(im).copy(), None, None, S
    full = np.asarray(_open(b, "YCbCr"))
    if S == layout.S_444:
        return full[..., 0].copy(), full[..., 1].copy(), full[..., 2].copy(), S
    if S != layout.S_420:
        raise ValueError(f"Pillow gives no native chroma planes for subsampling code {S}")
    assert H >= 2 and W >= 2, "scale 1/2 needs H, W >= 2"
    half = np.asarray(_open(b, "YCbCr", (W // 2, H // 2)))
    ch, cw = layout.chroma_shape(H, W, S)
    assert half.shape[:2] == (ch, cw), (half.shape, ch, cw)
    return full[..., 0].copy(), half[..., 1].copy(), half[..., 2].copy(), S


def jpeg_rgb(b: bytes) -> np.ndarray:
    """libjpeg's RGB decode (``[H, W, 3]`` uint8; grayscale replicated)."""
    return np.asarray(_open(b).convert("RGB"))


def jpeg_ycbcr(b: bytes) -> np.ndarray:
    """libjpeg's full-size Y, Cb, Cr of a JPEG (``[H, W, 3]`` uint8): its own chroma
    upsampling, no colour conversion."""
    return np.asarray(_open(b, "YCbCr")).copy()


def planes_bytes(y: np.ndarray | torch.Tensor, cb: np.ndarray | torch.Tensor | None,
                 cr: np.ndarray | torch.Tensor | None) -> torch.Tensor:
    """The planes back to back, one sample of ``layout.SOURCE_YCBCR``."""
    parts = [y] + ([] if cb is None else [cb, cr])
    return torch.from_numpy(np.concatenate([np.ascontiguousarray(p).reshape(-1) for p in parts]))


def random_planes(H: int, W: int, S: int, g: torch.Generator) -> torch.Tensor:
    """A random planar sample: uniform bytes (saturating colours included)."""
    return torch.randint(0, 256, (layout.planar_size(H, W, S),), generator=g, dtype=torch.uint8)


def pack_planar(samples: list[tuple[torch.Tensor, int, int, int]], gap: int = 5
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(data, offsets, shapes)`` of planar samples ``(bytes, H, W, S)``, with ``gap``
    junk bytes before each so that nothing depends on samples being adjacent."""
    chunks, offsets, pos = [], [], 0
    for buf, H, W, S in samples:
        assert buf.numel() == layout.planar_size(H, W, S)
        chunks += [torch.full((gap,), 77, dtype=torch.uint8), buf]
        offsets.append(pos + gap)
        pos += gap + buf.numel()
    data = torch.cat(chunks) if chunks else torch.empty(0, dtype=torch.uint8)
    shapes = torch.tensor([[H, W, S] for _, H, W, S in samples], dtype=torch.int32).reshape(-1, 3)
    return data, torch.tensor(offsets, dtype=torch.int64), shapes


# --------------------------------------------------------------------------- #
# libjpeg's upsampling, row by row (jdsample.c), on Python ints
# --------------------------------------------------------------------------- #


def _h2v1_fancy_row(c: list[int]) -> list[int]:
    # h2v1_fancy_upsample: the first and last columns are special cases
    n = len(c)
    out = [c[0], (c[0] * 3 + c[1] + 2) >> 2]
    for i in range(1, n - 1):
        out += [(c[i] * 3 + c[i - 1] + 1) >> 2, (c[i] * 3 + c[i + 1] + 2) >> 2]
    out += [(c[n - 1] * 3 + c[n - 2] + 1) >> 2, c[n - 1]]
    return out


def _h2v2_fancy_rows(near: list[int], far: list[int]) -> list[int]:
    # h2v2_fancy_upsample: one output row from the nearest input row and the next nearest
    n = len(near)
    colsum = [near[i] * 3 + far[i] for i in range(n)]
    out = [(colsum[0] * 4 + 8) >> 4, (colsum[0] * 3 + colsum[1] + 7) >> 4]
    for i in range(1, n - 1):
        out += [(colsum[i] * 3 + colsum[i - 1] + 8) >> 4, (colsum[i] * 3 + colsum[i + 1] + 7) >> 4]
    out += [(colsum[n - 1] * 3 + colsum[n - 2] + 8) >> 4, (colsum[n - 1] * 4 + 7) >> 4]
    return out


def upsample_loop(plane: np.ndarray, H: int, W: int, S: int) -> np.ndarray:
    """libjpeg's upsampling of a ``[ch, cw]`` chroma plane of subsampling ``S`` to ``H x W``.

    As jinit_upsampler picks the routines: h2v1 and h2v2 fancy only for planes more
    than 2 samples wide, else plain replication; h1v2 always fancy. The rows above
    the first and below the last are the edge rows repeated (jdmainct.c).
    """
    c = [[int(v) for v in row] for row in plane]
    ch, cw = len(c), len(c[0])
    hf, vf = layout.SUBSAMPLING[S]
    out: list[list[int]] = []
    if (hf, vf) == (1, 1):
        out = c
    elif (hf, vf) == (2, 1):
        for row in c:
            out.append(_h2v1_fancy_row(row) if cw > 2 else [v for v in row for _ in range(2)])
    elif (hf, vf) == (1, 2):
        for r in range(ch):
            above, below = c[max(r - 1, 0)], c[min(r + 1, ch - 1)]
            out.append([(c[r][i] * 3 + above[i] + 1) >> 2 for i in range(cw)])
            out.append([(c[r][i] * 3 + below[i] + 2) >> 2 for i in range(cw)])
    else:
        for r in range(ch):
            if cw > 2:
                out.append(_h2v2_fancy_rows(c[r], c[max(r - 1, 0)]))
                out.append(_h2v2_fancy_rows(c[r], c[min(r + 1, ch - 1)]))
            else:
                row = [v for v in c[r] for _ in range(2)]
                out += [row, row]
    return np.array([row[:W] for row in out[:H]], dtype=np.int64)


def ycc_to_rgb_loop(y: np.ndarray, cb: np.ndarray, cr: np.ndarray) -> np.ndarray:
    """jdcolor.c's ycc_rgb_convert, pixel by pixel, from its tables' definitions."""
    def fix(x: float) -> int:
        return int(x * 65536 + 0.5)

    out = np.zeros(y.shape + (3,), dtype=np.uint8)
    for i in range(y.shape[0]):
        for j in range(y.shape[1]):
            Y, b, r = int(y[i, j]), int(cb[i, j]) - 128, int(cr[i, j]) - 128
            red = Y + ((fix(1.40200) * r + 32768) >> 16)
            green = Y + ((-fix(0.34414) * b - fix(0.71414) * r + 32768) >> 16)
            blue = Y + ((fix(1.77200) * b + 32768) >> 16)
            out[i, j] = [min(max(v, 0), 255) for v in (red, green, blue)]
    return out
