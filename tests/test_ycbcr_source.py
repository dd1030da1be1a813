"""The planar YCbCr source of the fused resized-crop kernel (``layout.SOURCE_YCBCR``).

* the reference conversion (``reference.ycbcr_planes_to_rgb``) against libjpeg
  through Pillow, bit for bit, on real JPEGs (4:2:0, 4:4:4, grayscale), and
  against a loop transliteration of libjpeg's upsampling (4:2:2, 4:4:0);
* the kernel on planes against the kernel on the RGB images the reference
  converts them to (bit for bit: the source stage must produce exactly those
  pixels) and against the reference path;
* bounds and argument checking.
"""
from __future__ import annotations

import os
import sys

import torch

# Must precede the first `import triton` (the kernel module imports it lazily).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from csrc_triton import fused_resized_crop, layout, reference, resized_crop_reference  # noqa: E402

from ._helpers import jpeg_bytes  # noqa: E402
from ._ycbcr import (jpeg_planes, jpeg_rgb, jpeg_ycbcr, pack_planar, planes_bytes,  # noqa: E402
                     random_planes, subsampling_code, upsample_loop, ycc_to_rgb_loop)
from .test_kernel import DEVICES, _assert_close, _box, _geom, _params  # noqa: E402

IDENTITY = ([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])
ALL_S = [layout.S_444, layout.S_422, layout.S_420, layout.S_440, layout.S_GRAY]
PILLOW_SUBSAMPLING = {layout.S_444: 0, layout.S_422: 1, layout.S_420: 2}


def _photo(H: int, W: int, seed: int = 0) -> np.ndarray:
    from torchdali._synthetic import synthetic_image

    return synthetic_image(np.random.default_rng(seed), H, W)


def _jpeg(H: int, W: int, S: int, seed: int = 0) -> bytes:
    img = _photo(H, W, seed)
    if S == layout.S_GRAY:
        return jpeg_bytes(img.mean(axis=2).astype(np.uint8), quality=90)
    return jpeg_bytes(img, quality=90, subsampling=PILLOW_SUBSAMPLING[S])


def _to_rgb(buf: torch.Tensor, H: int, W: int, S: int) -> np.ndarray:
    return reference.ycbcr_planes_to_rgb(buf, 0, H, W, S).numpy()


# --------------------------------------------------------------------------- #
# Reference conversion vs libjpeg (Pillow) and vs the loop version
# --------------------------------------------------------------------------- #

# odd and even sizes, and planes 1 and 2 samples wide (libjpeg replicates those)
PHOTO_SIZES = [(37, 53), (64, 40), (2, 2), (3, 4), (5, 3), (4, 9), (9, 2)]


@pytest.mark.parametrize("S", [layout.S_420, layout.S_444, layout.S_GRAY], ids=["420", "444", "gray"])
@pytest.mark.parametrize("size", PHOTO_SIZES, ids=[f"{h}x{w}" for h, w in PHOTO_SIZES])
def test_reference_matches_pillow(S: int, size: tuple[int, int]) -> None:
    H, W = size
    b = _jpeg(H, W, S, seed=H * W)
    assert subsampling_code(b) == S
    y, cb, cr, _ = jpeg_planes(b)
    buf = planes_bytes(y, cb, cr)
    np.testing.assert_array_equal(_to_rgb(buf, H, W, S), jpeg_rgb(b))
    if S == layout.S_420:
        # the upsampling alone, against libjpeg's own upsampled planes
        ky, kx = torch.arange(H), torch.arange(W)
        full = jpeg_ycbcr(b)
        for plane, expected in zip((cb, cr), (full[..., 1], full[..., 2])):
            got = reference.upsample_chroma(torch.from_numpy(plane), S, ky, kx)
            np.testing.assert_array_equal(got.numpy(), expected)


def test_reference_matches_pillow_on_a_photograph() -> None:
    skimage_data = pytest.importorskip("skimage.data")
    img = skimage_data.astronaut()[101:304, 60:377]  # 203 x 317
    H, W = img.shape[:2]
    for ss, S in ((2, layout.S_420), (0, layout.S_444)):
        b = jpeg_bytes(img, quality=85, subsampling=ss)
        buf = planes_bytes(*jpeg_planes(b)[:3])
        np.testing.assert_array_equal(_to_rgb(buf, H, W, S), jpeg_rgb(b))
        # a region converts to the same pixels as the whole image has there
        region = (17, 150, 3, 208)
        part = reference.ycbcr_planes_to_rgb(buf, 0, H, W, S, region).numpy()
        np.testing.assert_array_equal(part, jpeg_rgb(b)[17:150, 3:208])


def test_loop_upsampling_matches_pillow() -> None:
    """The loop version is libjpeg's: it reproduces Pillow's own upsampled 4:2:0 chroma."""
    for H, W in ((37, 53), (6, 4), (7, 3), (2, 5)):
        b = _jpeg(H, W, layout.S_420, seed=W)
        _, cb, cr, _ = jpeg_planes(b)
        full = jpeg_ycbcr(b)
        for plane, expected in zip((cb, cr), (full[..., 1], full[..., 2])):
            np.testing.assert_array_equal(upsample_loop(plane, H, W, layout.S_420), expected)


def test_conversion_matches_pillow_on_422() -> None:
    """4:2:2 has no native planes from Pillow; its colour conversion does (libjpeg's
    upsampled chroma in, libjpeg's RGB out), and a plane at most 2 samples wide is
    replicated, not fancy-upsampled."""
    for H, W in ((37, 53), (9, 4), (5, 3)):
        b = _jpeg(H, W, layout.S_422, seed=H)
        assert subsampling_code(b) == layout.S_422
        full = torch.from_numpy(jpeg_ycbcr(b))
        rgb = reference.ycc_to_rgb(full[..., 0], full[..., 1], full[..., 2])
        np.testing.assert_array_equal(rgb.numpy(), jpeg_rgb(b))
        if W <= 4:
            for u in (full[..., 1], full[..., 2]):
                assert torch.equal(u[:, 0::2][:, : W // 2], u[:, 1::2])


LOOP_SIZES = [(1, 1), (1, 6), (2, 3), (3, 4), (4, 5), (5, 9), (9, 7), (13, 16), (6, 1)]


@pytest.mark.parametrize("S", [layout.S_422, layout.S_440, layout.S_420, layout.S_444],
                         ids=["422", "440", "420", "444"])
def test_reference_upsampling_matches_loop(S: int) -> None:
    g = torch.Generator().manual_seed(S)
    for H, W in LOOP_SIZES:
        ch, cw = layout.chroma_shape(H, W, S)
        plane = torch.randint(0, 256, (ch, cw), generator=g, dtype=torch.uint8)
        got = reference.upsample_chroma(plane, S, torch.arange(H), torch.arange(W))
        np.testing.assert_array_equal(got.numpy(), upsample_loop(plane.numpy(), H, W, S), err_msg=f"{H}x{W}")


def test_reference_440_is_transposed_422() -> None:
    """h1v2 is h2v1 along the other axis (where h2v1 is fancy: planes wider than 2)."""
    g = torch.Generator().manual_seed(4)
    for H, W in ((11, 6), (8, 8), (5, 2)):
        plane = torch.randint(0, 256, (-(-H // 2), W), generator=g, dtype=torch.uint8)
        v = reference.upsample_chroma(plane, layout.S_440, torch.arange(H), torch.arange(W))
        h = reference.upsample_chroma(plane.t(), layout.S_422, torch.arange(W), torch.arange(H))
        assert torch.equal(v, h.t())


def _all_chroma_pairs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A 256 x 256 image holding every (Cb, Cr) pair once (Cb = column, Cr = row), under
    a luma that sweeps 0..255 (so R, G, B clamp at both ends somewhere)."""
    i = torch.arange(256)
    y = ((i[:, None] * 7 + i[None, :] * 13) % 256).to(torch.uint8)
    return y, i[None, :].expand(256, 256).to(torch.uint8), i[:, None].expand(256, 256).to(torch.uint8)


def test_reference_conversion_matches_loop() -> None:
    y, cb, cr = _all_chroma_pairs()
    got = reference.ycc_to_rgb(y, cb, cr)
    np.testing.assert_array_equal(got.numpy(), ycc_to_rgb_loop(y.numpy(), cb.numpy(), cr.numpy()))


def test_reference_grayscale_replicates_luma() -> None:
    y = torch.arange(12, dtype=torch.uint8).view(3, 4)
    rgb = reference.ycbcr_planes_to_rgb(y.flatten(), 0, 3, 4, layout.S_GRAY)
    assert torch.equal(rgb, y[..., None].expand(3, 4, 3))


def test_layout_sizes() -> None:
    assert layout.chroma_shape(5, 7, layout.S_420) == (3, 4)
    assert layout.chroma_shape(5, 7, layout.S_422) == (5, 4)
    assert layout.chroma_shape(5, 7, layout.S_440) == (3, 7)
    assert layout.chroma_shape(5, 7, layout.S_444) == (5, 7)
    assert layout.planar_size(5, 7, layout.S_420) == 35 + 2 * 12
    assert layout.planar_size(5, 7, layout.S_GRAY) == 35
    assert layout.source_code("ycbcr") == layout.SOURCE_YCBCR
    assert layout.source_code(layout.SOURCE_INTERLEAVED) == layout.SOURCE_INTERLEAVED


# --------------------------------------------------------------------------- #
# Kernel on planes vs kernel on the converted RGB images, and vs the reference
# --------------------------------------------------------------------------- #


def _interleaved(data: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same batch as HWC RGB images, converted by the reference."""
    images = [reference.ycbcr_planes_to_rgb(data, int(o), int(H), int(W), int(S))
              for o, (H, W, S) in zip(offsets.tolist(), shapes.tolist())]
    sizes = [i.numel() for i in images]
    offs = torch.tensor([0] + sizes[:-1], dtype=torch.int64).cumsum(0)
    flat = torch.cat([i.flatten() for i in images]) if images else torch.empty(0, dtype=torch.uint8)
    return flat, offs, torch.tensor([[H, W, 3] for H, W, _ in shapes.tolist()], dtype=torch.int32).reshape(-1, 3)


def _random_batch(sizes: list[tuple[int, int, int]], seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return pack_planar([(random_planes(H, W, S, g), H, W, S) for H, W, S in sizes])


def _random_rows(sizes: list[tuple[int, int, int]], out: tuple[int, int], seed: int) -> list[list[float]]:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for H, W, _ in sizes:
        flip = tuple(bool(v) for v in torch.randint(0, 2, (2,), generator=g))
        rows.append(_geom(H, W, out, _box(g, H, W), flip=flip))
    return rows


def _check_planar(data: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor, rows: list[list[float]],
                  out: tuple[int, int], device: str, **kwargs) -> None:
    """Kernel on the planes == kernel on the converted RGB batch (bit for bit), reference
    on the planes == reference on the RGB batch (bit for bit), kernel ~ reference;
    inputs untouched."""
    params = _params(rows)
    before = [t.clone() for t in (data, offsets, shapes, params)]
    rgb = _interleaved(data, offsets, shapes)
    dev = [t.to(device) for t in (data, offsets, shapes, params)]
    got = fused_resized_crop(*dev, out, *IDENTITY, source="ycbcr", **kwargs).cpu()
    for t, b in zip(dev, before):
        assert torch.equal(t.cpu(), b), "kernel modified its input"
    exp = fused_resized_crop(*(t.to(device) for t in rgb), dev[3], out, *IDENTITY, **kwargs).cpu()
    assert torch.equal(got, exp), f"max |diff| {(got.double() - exp.double()).abs().max()}"
    ref = resized_crop_reference(data, offsets, shapes, params, out, *IDENTITY, source="ycbcr", **kwargs)
    for t, b in zip((data, offsets, shapes, params), before):
        assert torch.equal(t, b), "reference modified its input"
    assert torch.equal(ref, resized_crop_reference(*rgb, params, out, *IDENTITY, **kwargs))
    # Uniform noise planes at rational scales land on exact .5 ties more often than
    # photographs do; on the GPU (fused multiply-add) 12 of 1008 pixels went the other way.
    _assert_close(got, ref, IDENTITY[0], kwargs.get("quantize", True), max_fraction=0.02)


RAGGED = [(13, 17, layout.S_420), (9, 4, layout.S_422), (10, 11, layout.S_440), (7, 8, layout.S_444),
          (6, 5, layout.S_GRAY), (12, 3, layout.S_420), (5, 9, layout.S_422), (11, 10, layout.S_420)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
@pytest.mark.parametrize("seed", [0, 1])
def test_kernel_ragged_batch(interpolation: str, seed: int, device: str) -> None:
    """Every subsampling code in one batch, random crops and flips, up- and downscaling."""
    out = (7, 6) if seed == 0 else (4, 9)
    data, offsets, shapes = _random_batch(RAGGED, seed)
    _check_planar(data, offsets, shapes, _random_rows(RAGGED, out, seed), out, device,
                  out_dtype=torch.uint8, interpolation=interpolation)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_jpeg_planes(device: str) -> None:
    """Planes of real JPEGs (smooth chroma, unlike random planes), batch of one per code."""
    for S, (H, W) in ((layout.S_420, (23, 31)), (layout.S_444, (14, 19)), (layout.S_GRAY, (9, 12))):
        b = _jpeg(H, W, S, seed=S)
        y, cb, cr, _ = jpeg_planes(b)
        data, offsets, shapes = pack_planar([(planes_bytes(y, cb, cr), H, W, S)])
        np.testing.assert_array_equal(_interleaved(data, offsets, shapes)[0].view(H, W, 3).numpy(), jpeg_rgb(b))
        _check_planar(data, offsets, shapes, [_geom(H, W, (7, 9), (2, 1, H - 3, W - 2), flip=(False, True))],
                      (7, 9), device, out_dtype=torch.uint8)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_conversion_all_chroma_pairs(device: str) -> None:
    """The kernel's colour conversion on every (Cb, Cr) pair: an off-by-one in a
    rounding constant changes only a few of them."""
    y, cb, cr = _all_chroma_pairs()
    data, offsets, shapes = pack_planar([(planes_bytes(y, cb, cr), 256, 256, layout.S_444)])
    params = _params([_geom(256, 256, (256, 256))])
    got = fused_resized_crop(data.to(device), offsets.to(device), shapes.to(device), params.to(device), (256, 256),
                             *IDENTITY, out_dtype=torch.uint8, interpolation="nearest", source="ycbcr")
    assert torch.equal(got[0].cpu().permute(1, 2, 0), reference.ycc_to_rgb(y, cb, cr))


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_per_sample_filter_float_output(device: str) -> None:
    sizes = RAGGED[:5]
    out = (5, 6)
    data, offsets, shapes = _random_batch(sizes, 7)
    rows = _random_rows(sizes, out, 7)
    codes = [layout.FILTER_BICUBIC, layout.FILTER_NEAREST, layout.FILTER_BILINEAR, layout.FILTER_NEAREST_EXACT,
             layout.FILTER_BICUBIC]
    rows = [r + [float(c)] for r, c in zip(rows, codes)]
    _check_planar(data, offsets, shapes, rows, out, device, out_dtype=torch.float32, interpolation="per-sample",
                  antialias=False, quantize=False)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_bad_metadata_reads_nothing(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU metadata is not validated on the host: a sample whose planes do not fit in
    ``data``, or whose subsampling code is unknown, reads nothing (as an interleaved
    image that does not fit: test_kernel.py's test_kernel_bad_metadata_stays_in_bounds)."""
    monkeypatch.setattr(sys.modules[fused_resized_crop.__module__], "_check_values", lambda *a: None)
    sizes = [(8, 9, layout.S_420), (7, 6, layout.S_444), (6, 7, layout.S_420), (5, 5, layout.S_422),
             (6, 6, layout.S_440)]
    data, offsets, shapes = _random_batch(sizes, 3)
    shapes = shapes.long()
    out = (4, 5)
    rows = [_geom(H, W, out) for H, W, _ in sizes]
    # luma fits, chroma planes overhang the end of data by one byte
    offsets[2] = data.numel() - layout.planar_size(6, 7, layout.S_420) + 1
    shapes[1, 2] = 4  # 4:1:1, not a code of the planar source
    offsets[3] = -2
    shapes[4, 0] = 1 << 40
    bias = [5.0, 6.0, 7.0]
    got = fused_resized_crop(data.to(device), offsets.to(device), shapes.to(device), _params(rows).to(device),
                             out, [1.0, 1.0, 1.0], bias, quantize=False, source="ycbcr").cpu()
    for b in (1, 2, 3, 4):
        assert torch.equal(got[b], torch.tensor(bias).view(3, 1, 1).expand(3, *out)), f"sample {b}"
    # the sample that fits is read as usual, also when it ends exactly at the end of data
    end = int(offsets[0]) + layout.planar_size(8, 9, layout.S_420)
    args = (data[:end], offsets[:1], shapes[:1], _params(rows[:1]), out, [1.0, 1.0, 1.0], bias)
    exp = resized_crop_reference(*args, quantize=False, source="ycbcr")
    torch.testing.assert_close(got[0], exp[0], atol=1e-3, rtol=0)
    got0 = fused_resized_crop(*(a.to(device) for a in args[:4]), *args[4:], quantize=False, source="ycbcr")
    torch.testing.assert_close(got0.cpu(), exp, atol=1e-3, rtol=0)


# --------------------------------------------------------------------------- #
# Argument checking
# --------------------------------------------------------------------------- #


def _valid() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    sizes = [(6, 7, layout.S_420), (5, 4, layout.S_GRAY)]
    data, offsets, shapes = _random_batch(sizes, 0)
    return data, offsets, shapes, _params([_geom(H, W, (3, 3)) for H, W, _ in sizes])


@pytest.mark.parametrize("fn", [fused_resized_crop, resized_crop_reference], ids=["kernel", "reference"])
@pytest.mark.parametrize("code", [4, 5, 7, -1, 3000])
def test_rejects_bad_subsampling_code(fn, code: int) -> None:
    data, offsets, shapes, params = _valid()
    shapes[1, 2] = code
    with pytest.raises(ValueError, match=rf"sample 1: .*subsampling code .*got {code}"):
        fn(data, offsets, shapes, params, (3, 3), *IDENTITY, source="ycbcr")


@pytest.mark.parametrize("fn", [fused_resized_crop, resized_crop_reference], ids=["kernel", "reference"])
def test_rejects_planes_past_the_end(fn) -> None:
    data, offsets, shapes, params = _valid()
    # 5 x 4 grayscale fits; as 4:4:4 its chroma planes would not
    shapes[1, 2] = layout.S_444
    with pytest.raises(ValueError, match="sample 1: planar YCbCr sample .* does not fit"):
        fn(data, offsets, shapes, params, (3, 3), *IDENTITY, source="ycbcr")
    with pytest.raises(ValueError, match="height and width"):
        fn(data, offsets, shapes.index_fill(1, torch.tensor([0]), 0), params, (3, 3), *IDENTITY, source="ycbcr")


@pytest.mark.parametrize("fn", [fused_resized_crop, resized_crop_reference], ids=["kernel", "reference"])
def test_rejects_unknown_source(fn) -> None:
    data, offsets, shapes, params = _valid()
    with pytest.raises(ValueError, match="source must be one of"):
        fn(data, offsets, shapes, params, (3, 3), *IDENTITY, source="yuv")
    # the interleaved source reads the third column as a channel count
    with pytest.raises(ValueError, match="channel count"):
        fn(data, offsets, shapes, params, (3, 3), *IDENTITY)


# --------------------------------------------------------------------------- #
# Mixed batches: planar and interleaved samples side by side
# --------------------------------------------------------------------------- #


def _mixed(data: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor, interleaved: set[int]
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The planar batch with the samples in ``interleaved`` replaced by their RGB images
    (grayscale ones by their 1-channel luma), as the GPU decoder's CPU fallback leaves
    them; the others keep their planes, marked ``PLANAR + S``."""
    parts, shp = [], []
    for b, (o, (H, W, S)) in enumerate(zip(offsets.tolist(), shapes.tolist())):
        if b in interleaved:
            rgb = reference.ycbcr_planes_to_rgb(data, o, H, W, S)
            img = rgb[:, :, :1] if S == layout.S_GRAY else rgb
            parts.append(img.flatten())
            shp.append([H, W, img.shape[2]])
        else:
            parts.append(data[o: o + layout.planar_size(H, W, S)])
            shp.append([H, W, layout.PLANAR + S])
    sizes = [p.numel() for p in parts]
    offs = torch.tensor([0] + sizes[:-1], dtype=torch.int64).cumsum(0)
    return torch.cat(parts), offs, torch.tensor(shp, dtype=torch.int64)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interpolation", ["bilinear", "per-sample"])
def test_kernel_mixed_batch_equals_interleaved(interpolation: str, device: str) -> None:
    """A batch mixing planar samples with interleaved RGB and grayscale ones reads each
    sample its own way: the same output as the all-interleaved batch, bit for bit."""
    out = (6, 7)
    data, offsets, shapes = _random_batch(RAGGED, 3)
    params = _params(_random_rows(RAGGED, out, 3))
    if interpolation == "per-sample":
        params[:, layout.FILTER] = torch.tensor([(layout.FILTER_BILINEAR, layout.FILTER_BICUBIC)[k % 2]
                                                 for k in range(len(RAGGED))], dtype=torch.float32)
    mixed = _mixed(data, offsets, shapes, interleaved={1, 3, 4})
    rgb = _interleaved(data, offsets, shapes)
    got = fused_resized_crop(*(t.to(device) for t in mixed), params.to(device), out, *IDENTITY, source="mixed",
                             out_dtype=torch.uint8, interpolation=interpolation).cpu()
    exp = fused_resized_crop(*(t.to(device) for t in rgb), params.to(device), out, *IDENTITY,
                             out_dtype=torch.uint8, interpolation=interpolation).cpu()
    assert torch.equal(got, exp), f"max |diff| {(got.double() - exp.double()).abs().max()}"
    ref = resized_crop_reference(*mixed, params, out, *IDENTITY, source="mixed", out_dtype=torch.uint8,
                                 interpolation=interpolation)
    assert torch.equal(ref, resized_crop_reference(*rgb, params, out, *IDENTITY, out_dtype=torch.uint8,
                                                   interpolation=interpolation))


@pytest.mark.parametrize("fn", [fused_resized_crop, resized_crop_reference])
@pytest.mark.parametrize("code", [2, 4, layout.PLANAR + 5, layout.PLANAR - 1])
def test_mixed_rejects_unknown_codes(fn, code: int) -> None:
    data = torch.zeros(64, dtype=torch.uint8)
    shapes = torch.tensor([[4, 4, code]])
    params = _params([_geom(4, 4, (2, 2), (0, 0, 4, 4))])
    with pytest.raises(ValueError, match="mixed batch"):
        fn(data, torch.zeros(1, dtype=torch.int64), shapes, params, (2, 2), *IDENTITY, source="mixed")
