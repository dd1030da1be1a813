"""The fused kernel's band resample (``stages/sample.py``): a tile reads each of its source rows once.

The windowed filters walk a tile's band of source rows and add every row into every
output row of the tile, weighted 0 outside the output row's window; every output pixel
so gets its own taps' operations in the same order whatever rows share its tile.
Tested here, on the sources, filters and padding modes, in tiles whose bands span many
rows (a strong downscale, flips, a clamp region cut short, a partly valid window):

* tiles of 1, 4 and 16 rows give the output of the launcher's own tiles bit for bit;
* that output is the plain-torch reference's, within the kernel tests' tolerance.
"""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from csrc_triton import LaunchSettings, fused_resized_crop, layout, resized_crop_reference  # noqa: E402

from ._helpers import kernel_devices  # noqa: E402
from ._ycbcr import pack_planar, random_planes  # noqa: E402
from .test_kernel import _assert_close, _geom, _images, _pack, _params  # noqa: E402

DEVICES = kernel_devices()
OUT = (12, 10)
#: (height, width, channels or subsampling code) of the batch's samples
SIZES = [(31, 27), (23, 20), (7, 6)]


def _rows(pad: bool) -> list[list[float]]:
    """Params rows: a 2.6x / 2.7x downscale flipped both ways; a 2x one with its clamp region cut
    short and columns outside the valid window; an upscale. Padded, the second box reaches past
    its image (the fold box is the image). The filters of "per-sample": bicubic, bilinear,
    nearest."""
    (h0, w0), (h1, w1), (h2, w2) = SIZES
    rows = [
        _geom(h0, w0, OUT, flip=(True, True)),
        _geom(h1, w1, OUT, (0, 0, 23, 20), clamp=(2, 21, 0, 15), valid=(0, OUT[0], 2, 9)),
        _geom(h2, w2, OUT, (1, 1, 5, 5)),
    ]
    if pad:
        rows[1] = _geom(h1, w1, OUT, (-4, -3, 30, 26), clamp=(-4, 26, -3, 23))
    # the filter column (read by "per-sample"), then the fold box
    filters = [layout.FILTER_BICUBIC, layout.FILTER_BILINEAR, layout.FILTER_NEAREST]
    return [r + [float(f), 0.0, float(h), 0.0, float(w)] for r, f, (h, w) in zip(rows, filters, SIZES)]


def _batch(source: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if source == "ycbcr":
        g = torch.Generator().manual_seed(5)
        codes = [layout.S_420, layout.S_422, layout.S_GRAY]
        return pack_planar([(random_planes(h, w, s, g), h, w, s) for (h, w), s in zip(SIZES, codes)])
    return _pack(_images([(h, w, c) for (h, w), c in zip(SIZES, (3, 1, 3))], seed=7))


#: (interpolation, antialias, source, padding mode, a tile (rows, columns) compared with the launcher's)
CASES = [
    ("bilinear", True, "interleaved", "none", (1, 8)),
    ("bilinear", False, "interleaved", "constant", (16, 8)),
    ("bicubic", True, "interleaved", "reflect", (4, 8)),
    ("bicubic", False, "interleaved", "edge", (1, 8)),
    ("per-sample", True, "interleaved", "symmetric", (16, 8)),
    ("bilinear", True, "ycbcr", "constant", (4, 8)),
]


def _run(args: list[torch.Tensor], tile: tuple[int, int] | None, **kw) -> torch.Tensor:
    # None: the launcher's tiles (8x32, on a 12x10 output one tile of 8 rows and one of 4 per sample);
    # a tile of the 2.6x downscale reads a band of ~25 source rows
    launch = None if tile is None else LaunchSettings(*tile, 1)
    return fused_resized_crop(*args, OUT, [1.0] * 3, [0.0] * 3, launch=launch, **kw).cpu()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interpolation,antialias,source,pad_mode,tile", CASES)
def test_tile_rows_do_not_change_the_output(interpolation: str, antialias: bool, source: str,
                                            pad_mode: str, tile: tuple[int, int], device: str) -> None:
    data, offsets, shapes = _batch(source)
    params = _params(_rows(pad_mode != "none"))
    kw = dict(interpolation=interpolation, antialias=antialias, source=source, pad_mode=pad_mode,
              out_dtype=torch.float32, quantize=False)
    if pad_mode == "constant":
        kw["fill"] = (20.0, 130.5, 250.0)
    args = [t.to(device) for t in (data, offsets, shapes, params)]
    got = _run(args, None, **kw)
    other = _run(args, tile, **kw)
    assert torch.equal(other, got), f"tile {tile}: max |diff| {(other - got).abs().max()} from the launcher's tiles"
    exp = resized_crop_reference(data, offsets, shapes, params, OUT, [1.0] * 3, [0.0] * 3, **kw)
    _assert_close(got, exp, [1.0] * 3, quantized=False)
    if interpolation == "bicubic" and not antialias:
        # quantised bicubic rounds each row's horizontal sums, the same in every chunk
        kw.update(quantize=True, out_dtype=torch.uint8)
        got = _run(args, None, **kw)
        assert torch.equal(_run(args, tile, **kw), got)
        exp = resized_crop_reference(data, offsets, shapes, params, OUT, [1.0] * 3, [0.0] * 3, **kw)
        _assert_close(got, exp, [1.0] * 3, quantized=True)
