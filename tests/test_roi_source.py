"""Kernel 1 on a decoded window of each image (region-of-interest decode, the
``roi_y0``/``roi_x0`` source columns of ``csrc_triton/layout.py``).

A window that holds the clamp region gives the output of the whole image, bit for
bit, in the kernel and in the plain-torch reference, for interleaved images and for
planar YCbCr (with the margin its chroma upsampling needs); a window that does not
is read only inside it (the clamp region is held to the window), identically by both.
"""
from __future__ import annotations

import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pytest  # noqa: E402

from csrc_triton import fused_resized_crop, layout, resized_crop_reference  # noqa: E402

from .test_kernel import DEVICES, IDENTITY, _assert_close, _geom, _images, _pack, _params  # noqa: E402


def _windows(images, rows, margins):
    """Each image cut to a window around its clamp region, ``margins`` pixels wider
    (clamped to the image), with the ROI columns of its parameter row set."""
    cut, params = [], _params(rows)
    y, x = layout.axis("y"), layout.axis("x")
    for b, (img, m) in enumerate(zip(images, margins)):
        H, W = img.shape[:2]
        p = params[b]
        y0 = max(0, int(p[y.lo].floor()) - m)
        y1 = min(H, int(p[y.hi].ceil()) + m)
        x0 = max(0, int(p[x.lo].floor()) - m)
        x1 = min(W, int(p[x.hi].ceil()) + m)
        cut.append(img[y0:y1, x0:x1].contiguous())
        p[layout.ROI_Y0], p[layout.ROI_X0] = float(y0), float(x0)
    return cut, params


def _run(images, params, out, device, **kw):
    data, offsets, shapes = _pack(images)
    dev = [t.to(device) for t in (data, offsets, shapes, params)]
    got = fused_resized_crop(*dev, out, *IDENTITY, **kw).cpu()
    ref = resized_crop_reference(data, offsets, shapes, params, out, *IDENTITY, **kw)
    return got, ref


SIZES = [(37, 53, 3), (64, 40, 3), (23, 31, 1), (80, 61, 3), (9, 14, 3)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "nearest"])
@pytest.mark.parametrize("antialias", [True, False])
def test_a_window_holding_the_clamp_region_gives_the_whole_images_output(device, interpolation, antialias):
    g = torch.Generator().manual_seed(7)
    images = _images(SIZES, seed=3)
    out = (11, 9)
    rows = []
    for H, W, _ in SIZES:
        h = int(torch.randint(2, H + 1, (1,), generator=g))
        w = int(torch.randint(2, W + 1, (1,), generator=g))
        top = int(torch.randint(0, H - h + 1, (1,), generator=g))
        left = int(torch.randint(0, W - w + 1, (1,), generator=g))
        flip = (bool(torch.randint(0, 2, (1,), generator=g)), bool(torch.randint(0, 2, (1,), generator=g)))
        rows.append(_geom(H, W, out, (top, left, h, w), flip=flip))
    kw = dict(out_dtype=torch.uint8, interpolation=interpolation, antialias=antialias)
    full, full_ref = _run(images, _params(rows), out, device, **kw)
    cut, params = _windows(images, rows, margins=[0, 1, 3, 16, 2])
    assert sum(c.numel() for c in cut) < sum(i.numel() for i in images)
    got, ref = _run(cut, params, out, device, **kw)
    assert torch.equal(got, full), f"max |diff| {(got.double() - full.double()).abs().max()}"
    assert torch.equal(ref, full_ref)
    _assert_close(got, ref, IDENTITY[0], True)


@pytest.mark.parametrize("device", DEVICES)
def test_a_window_smaller_than_the_clamp_region_is_read_only_inside(device):
    """Both sides hold the clamp region to the window: equal to the whole image
    resized with the clamp region cut to the window, and no read outside it."""
    images = _images([(40, 50, 3), (30, 30, 3)], seed=5)
    out = (8, 8)
    rows = [_geom(40, 50, out), _geom(30, 30, out, (4, 4, 20, 20))]
    windows = [(10, 12, 15, 20), (0, 0, 30, 30)]  # (y0, x0, h, w): the first misses most of the image
    cut = [img[y0:y0 + h, x0:x0 + w].contiguous() for img, (y0, x0, h, w) in zip(images, windows)]
    params = _params(rows)
    for b, (y0, x0, _, _) in enumerate(windows):
        params[b, layout.ROI_Y0], params[b, layout.ROI_X0] = float(y0), float(x0)
    got, ref = _run(cut, params, out, device, out_dtype=torch.uint8)
    # the same clamp, on the whole image
    clamped = _params([_geom(40, 50, out, clamp=(10, 25, 12, 32)), rows[1]])
    whole, _ = _run(images, clamped, out, device, out_dtype=torch.uint8)
    assert torch.equal(got, whole)
    _assert_close(got, ref, IDENTITY[0], True)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_roi_columns_read_inside_the_buffer(device):
    """Negative, huge and fractional window starts: whole numbers in [0, 2**22] (a
    negative one is 0), and the clamp region held to the window, so every read stays
    in the image; the kernel and the reference agree. (NaN also reads as 0 in the
    kernel; the launchers refuse non-finite params where they can see them.)"""
    images = _images([(20, 24, 3)] * 3, seed=9)
    out = (6, 6)
    params = _params([_geom(20, 24, out)] * 3)
    for b, v in enumerate([-5.0, 1e30, 3.7]):
        params[b, layout.ROI_Y0] = params[b, layout.ROI_X0] = v
    got, ref = _run(images, params, out, device, out_dtype=torch.uint8)
    _assert_close(got, ref, IDENTITY[0], True)
    whole, _ = _run(images[:1], _params([_geom(20, 24, out)]), out, device, out_dtype=torch.uint8)
    assert torch.equal(got[0], whole[0])  # a negative start is 0: the whole image
    assert not torch.equal(got[2], whole[0])  # 3.7 is 3: the window starts 3 rows and columns in


def _planar_window(buf: torch.Tensor, H: int, W: int, S: int, y0: int, x0: int, h: int, w: int) -> torch.Tensor:
    """The planes of window ``[y0, y0 + h) x [x0, x0 + w)`` of a planar sample: Y cut to it,
    Cb and Cr to the chroma samples that cover it (``y0``, ``x0`` even)."""
    y = buf[: H * W].view(H, W)[y0:y0 + h, x0:x0 + w]
    if S == layout.S_GRAY:
        return y.contiguous().reshape(-1)
    hf, vf = layout.SUBSAMPLING[S]
    ch, cw = layout.chroma_shape(H, W, S)
    planes = [y]
    for k in range(2):
        c = buf[H * W + k * ch * cw: H * W + (k + 1) * ch * cw].view(ch, cw)
        planes.append(c[y0 // vf: -(-(y0 + h) // vf), x0 // hf: -(-(x0 + w) // hf)])
    return torch.cat([p.contiguous().reshape(-1) for p in planes])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_a_planar_window_with_a_margin_gives_the_whole_planes_output(device, interpolation):
    """Planes cut to a window that starts on even rows and columns and keeps at least two
    pixels around the clamp region (where the image allows): the chroma upsampling the
    kernel computes at every pixel it reads is the one of the whole planes."""
    from ._ycbcr import pack_planar, random_planes

    g = torch.Generator().manual_seed(11)
    sizes = [(45, 61, layout.S_420), (40, 33, layout.S_422), (37, 50, layout.S_440), (30, 30, layout.S_444),
             (26, 35, layout.S_GRAY), (51, 47, layout.S_420)]
    boxes = [(10, 12, 20, 30), (4, 3, 30, 25), (8, 10, 25, 36), (6, 6, 10, 10), (0, 0, 26, 35), (20, 1, 31, 40)]
    out = (9, 7)
    whole, cut, rows = [], [], []
    for (H, W, S), (top, left, h, w) in zip(sizes, boxes):
        buf = random_planes(H, W, S, g)
        whole.append((buf, H, W, S))
        rows.append(_geom(H, W, out, (top, left, h, w), flip=(top % 2 == 1, left % 2 == 0)))
        y0, x0 = max(0, top - 2) // 2 * 2, max(0, left - 2) // 2 * 2
        y1, x1 = min(H, top + h + 2), min(W, left + w + 2)
        cut.append((_planar_window(buf, H, W, S, y0, x0, y1 - y0, x1 - x0), y1 - y0, x1 - x0, S, y0, x0))
    kw = dict(out_dtype=torch.uint8, interpolation=interpolation, source="ycbcr")
    data, offsets, shapes = pack_planar(whole)
    params = _params(rows)
    full = fused_resized_crop(*(t.to(device) for t in (data, offsets, shapes, params)), out, *IDENTITY, **kw).cpu()
    full_ref = resized_crop_reference(data, offsets, shapes, params, out, *IDENTITY, **kw)
    wdata, woffsets, wshapes = pack_planar([(b, h, w, S) for b, h, w, S, _, _ in cut])
    wparams = params.clone()
    for k, (*_, y0, x0) in enumerate(cut):
        wparams[k, layout.ROI_Y0], wparams[k, layout.ROI_X0] = float(y0), float(x0)
    got = fused_resized_crop(*(t.to(device) for t in (wdata, woffsets, wshapes, wparams)), out, *IDENTITY,
                             **kw).cpu()
    ref = resized_crop_reference(wdata, woffsets, wshapes, wparams, out, *IDENTITY, **kw)
    assert wdata.numel() < data.numel()
    assert torch.equal(got, full), f"max |diff| {(got.double() - full.double()).abs().max()}"
    assert torch.equal(ref, full_ref)
