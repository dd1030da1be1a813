"""The NV12 source of the fused resized-crop kernel (``layout.SOURCE_NV12``).

* the reference conversion (``reference.nv12_to_rgb``) against FFmpeg's swscale
  through PyAV (frames made from RGB by swscale, converted back by swscale told
  the MPEG-2 chroma siting), BT.601 and BT.709, limited and full range; against the
  float64 formula on flat colours and, on odd sizes, against the siting written as
  positions (bilinear sampling at ``((y - 1/2) / 2, x / 2)``, clamped);
* the kernel's source stage against the reference conversion, bit for bit, and the
  whole kernel on NV12 frames against the kernel on the RGB images the reference
  converts them to (bit for bit) and against the reference path (the kernel tests'
  tolerance): crops, flips, down- and up-scaling, odd sizes, ragged batches, uint8
  and float outputs, a padding mode; inputs untouched;
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
import torchvision.transforms.v2.functional as TF  # noqa: E402

from csrc_triton import fused_resized_crop, layout, reference, resized_crop_reference  # noqa: E402

from ._helpers import kernel_devices  # noqa: E402
from .test_kernel import IMAGENET_BIAS, IMAGENET_SCALE, _assert_close, _box, _geom, _params  # noqa: E402

DEVICES = kernel_devices()
IDENTITY = ([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])
FORMATS = [(m, full) for m in ("bt601", "bt709") for full in (False, True)]
FORMAT_IDS = ["601-tv", "601-pc", "709-tv", "709-pc"]


def _photo_rgb(H: int, W: int, seed: int = 0, noise: float = 6.0) -> np.ndarray:
    """An HWC uint8 image like a photograph: smooth gradients in every channel, plus noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W]
    base = np.stack([128 + 100 * np.sin(xx / 17 + c + seed) * np.cos(yy / 13 - c) for c in range(3)], -1)
    return np.clip(base + rng.normal(0, noise, base.shape), 0, 255).astype(np.uint8)


def _float_formula(y: np.ndarray, cb: np.ndarray, cr: np.ndarray, matrix: str, full: bool) -> np.ndarray:
    """Y'CbCr -> R'G'B' in float64 (Y, Cb, Cr any reals), before rounding: ``[..., 3]``."""
    kr, kb = layout.NV12_KR_KB[layout.NV12_MATRICES[matrix]]
    kg = 1.0 - kr - kb
    if full:
        ys, cbs, crs = y, cb - 128.0, cr - 128.0
    else:
        ys, cbs, crs = (y - 16.0) * 255 / 219, (cb - 128.0) * 255 / 224, (cr - 128.0) * 255 / 224
    r = ys + 2 * (1 - kr) * crs
    g = ys - 2 * kb * (1 - kb) / kg * cbs - 2 * kr * (1 - kr) / kg * crs
    b = ys + 2 * (1 - kb) * cbs
    return np.stack([r, g, b], -1)


def _assert_rounds_like(got: np.ndarray, exact: np.ndarray) -> None:
    """``got`` (uint8) is ``exact`` (float64) rounded half up and clamped, except within 2**-9 of
    a .5 tie, where the fixed point may round the other way (layout.Nv12Coefficients)."""
    expected = np.clip(np.floor(exact + 0.5), 0, 255)
    diff = np.abs(got.astype(np.float64) - expected)
    near_tie = np.abs(exact - np.floor(exact) - 0.5) < 2.0 ** -9
    assert diff.max() <= 1
    assert not (diff[~near_tie] != 0).any(), f"{int((diff[~near_tie] != 0).sum())} values off away from a tie"


# --------------------------------------------------------------------------- #
# The reference conversion
# --------------------------------------------------------------------------- #


def _av_nv12(rgb: np.ndarray, matrix: str, full: bool):
    """swscale's NV12 frame of ``rgb`` with ``matrix`` and range, and its planes ``y``, ``uv``."""
    av = pytest.importorskip("av")
    frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
    nv = frame.reformat(format="nv12", dst_colorspace={"bt601": "ITU601", "bt709": "ITU709"}[matrix],
                        dst_color_range="JPEG" if full else "MPEG")
    H, W = rgb.shape[:2]
    ch, cw = layout.nv12_chroma_shape(H, W)
    # planes have a pitch (line_size); the packed layout has none
    y = np.frombuffer(nv.planes[0], np.uint8).reshape(-1, nv.planes[0].line_size)[:H, :W]
    uv = np.frombuffer(nv.planes[1], np.uint8).reshape(-1, nv.planes[1].line_size)[:ch, :2 * cw]
    return nv, torch.from_numpy(y.copy()), torch.from_numpy(uv.copy())


def _sws_rgb(nv, matrix: str, full: bool) -> np.ndarray:
    """swscale's RGB of the NV12 frame ``nv``: its ``scale`` filter, told the frame's matrix and
    range and the MPEG-2 chroma siting (chroma co-sited with even luma columns, half a row below
    its first luma row), with exact rounding and chroma interpolated at every output pixel.
    ``VideoFrame.reformat`` cannot pass the siting; swscale then assumes centred chroma."""
    av = pytest.importorskip("av")
    graph = av.filter.Graph()
    src = graph.add_buffer(width=nv.width, height=nv.height, format="nv12", time_base=1)
    scale = graph.add("scale", f"in_color_matrix={matrix}:in_range={'pc' if full else 'tv'}:out_range=pc:"
                               "in_h_chr_pos=0:in_v_chr_pos=128:flags=bilinear+accurate_rnd+full_chroma_int+bitexact")
    fmt = graph.add("format", "rgb24")
    sink = graph.add("buffersink")
    src.link_to(scale)
    scale.link_to(fmt)
    fmt.link_to(sink)
    graph.configure()
    graph.push(nv)
    out = graph.pull()
    p = out.planes[0]
    return np.frombuffer(p, np.uint8).reshape(-1, p.line_size)[:out.height, :3 * out.width].reshape(
        out.height, out.width, 3)


@pytest.mark.parametrize("matrix,full", FORMATS, ids=FORMAT_IDS)
def test_reference_matches_swscale(matrix: str, full: bool) -> None:
    """Even sizes: swscale scales a chroma plane of ``ceil(W / 2)`` samples to ``W`` pixels,
    which for odd sizes is not the half-size plane's geometry (those are checked against the
    siting formula below)."""
    for H, W, seed in ((48, 64, 0), (38, 90, 1)):
        rgb = _photo_rgb(H, W, seed)
        nv, y, uv = _av_nv12(rgb, matrix, full)
        got = reference.nv12_to_rgb(y, uv, matrix, full).numpy().astype(np.int16)
        diff = np.abs(got - _sws_rgb(nv, matrix, full))
        assert (diff <= 2).mean() >= 0.99
        assert diff.max() <= 1, diff.max()  # swscale's 15-bit fixed point against ours, at most one level
        assert np.abs(got - rgb).mean() < 6  # and the round trip is a round trip


@pytest.mark.parametrize("matrix,full", FORMATS, ids=FORMAT_IDS)
def test_reference_flat_colours_match_the_formula(matrix: str, full: bool) -> None:
    """Chroma flat over 8 x 8 luma blocks (a Cb, Cr pair per block), luma varying per pixel:
    inside a block the upsampling reads one chroma value, so the matrix alone is checked,
    against float64, for 64 chroma pairs (legal and beyond, to clamp) x 64 luma values."""
    g = torch.Generator().manual_seed(len(matrix) + full)
    n, B = 8, 8
    lo, hi = (0, 256) if full else (16, 241)
    cb = torch.randint(lo - 8 * (not full), hi + 8 * (not full), (n, n), generator=g).clamp(0, 255)
    cr = torch.randint(lo - 8 * (not full), hi + 8 * (not full), (n, n), generator=g).clamp(0, 255)
    y = torch.randint(0, 256, (n * B, n * B), generator=g, dtype=torch.uint8)
    plane = lambda c: c.repeat_interleave(B // 2, 0).repeat_interleave(B // 2, 1)  # noqa: E731
    uv = torch.stack([plane(cb), plane(cr)], -1).to(torch.uint8)
    got = reference.nv12_to_rgb(y, uv, matrix, full).numpy()
    full_c = lambda c: c.repeat_interleave(B, 0).repeat_interleave(B, 1).double().numpy()  # noqa: E731
    exact = _float_formula(y.double().numpy(), full_c(cb), full_c(cr), matrix, full)
    inner = np.zeros(n * B, bool)
    for i in range(n):
        inner[i * B + 2: i * B + B - 2] = True  # two pixels off each block edge: one chroma sample
    keep = inner[:, None] & inner[None, :]
    _assert_rounds_like(got[keep], exact[keep])
    # and directly, every luma with a grid of chroma pairs, no upsampling at all
    Y, Cb, Cr = torch.meshgrid(torch.arange(256), torch.arange(0, 256, 15), torch.arange(0, 256, 15), indexing="ij")
    code = layout.nv12_code(matrix, full)
    got = reference.nv12_ycc_to_rgb(Y, 8 * Cb, 8 * Cr, code).numpy()
    _assert_rounds_like(got, _float_formula(Y.double().numpy(), Cb.double().numpy(), Cr.double().numpy(),
                                            matrix, full))


def _siting_formula(y: torch.Tensor, uv: torch.Tensor, matrix: str, full: bool) -> np.ndarray:
    """The upsampling written as positions: pixel ``(y, x)`` samples the chroma grid at
    ``((y - 1/2) / 2, x / 2)`` bilinearly, indices clamped to the grid; then float64."""
    H, W = y.shape
    ch, cw = layout.nv12_chroma_shape(H, W)
    c = uv.reshape(ch, cw, 2).double().numpy()

    def axis(pos: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        i0 = np.floor(pos)
        f = pos - i0
        return np.clip(i0, 0, n - 1).astype(int), np.clip(i0 + 1, 0, n - 1).astype(int), f

    r0, r1, fy = axis((np.arange(H) - 0.5) / 2, ch)
    k0, k1, fx = axis(np.arange(W) / 2, cw)
    rows = (1 - fy)[:, None, None] * c[r0] + fy[:, None, None] * c[r1]
    up = (1 - fx)[None, :, None] * rows[:, k0] + fx[None, :, None] * rows[:, k1]
    return _float_formula(y.double().numpy(), up[..., 0], up[..., 1], matrix, full)


@pytest.mark.parametrize("matrix,full", FORMATS, ids=FORMAT_IDS)
def test_reference_matches_the_siting_on_odd_sizes(matrix: str, full: bool) -> None:
    g = torch.Generator().manual_seed(3)
    for H, W in ((1, 1), (1, 2), (2, 1), (3, 5), (5, 3), (7, 8), (8, 7), (13, 21)):
        ch, cw = layout.nv12_chroma_shape(H, W)
        y = torch.randint(0, 256, (H, W), generator=g, dtype=torch.uint8)
        uv = torch.randint(0, 256, (ch, 2 * cw), generator=g, dtype=torch.uint8)
        got = reference.nv12_to_rgb(y, uv, matrix, full)
        assert got.shape == (H, W, 3) and got.dtype == torch.uint8
        _assert_rounds_like(got.numpy(), _siting_formula(y, uv, matrix, full))
        # a region converts to what the whole frame has there
        region = (H // 3, H, W // 2, W)
        part = reference.nv12_to_rgb(y, uv, matrix, full, region)
        assert torch.equal(part, got[H // 3:, W // 2:])


def test_reference_even_columns_read_the_cosited_sample() -> None:
    """A chroma impulse: on even columns only its own column, weights 3/4 and 1/4 on rows."""
    y = torch.full((8, 8), 128, dtype=torch.uint8)
    uv = torch.full((4, 4, 2), 128, dtype=torch.uint8)
    uv[1, 1] = 128 + 64
    c8 = reference.upsample_nv12_chroma(uv, torch.arange(8), torch.arange(8))[..., 0] - 8 * 128
    expected = torch.zeros(8, 8, dtype=torch.int32)
    for yy, wy in ((1, 1), (2, 3), (3, 3), (4, 1)):  # chroma row 1 sits between luma rows 2 and 3
        expected[yy, 2] = 8 * 64 * wy // 4
        expected[yy, 1] = expected[yy, 3] = 8 * 64 * wy // 8
    assert torch.equal(c8, expected)
    assert reference.nv12_to_rgb(y, uv, "bt709", False).shape == (8, 8, 3)


def test_layout_codes_and_sizes() -> None:
    assert layout.source_code("nv12") == layout.SOURCE_NV12
    assert layout.nv12_size(5, 7) == 35 + 3 * 4 * 2
    assert layout.nv12_size(4, 6) == 24 + 12
    assert layout.nv12_chroma_shape(1, 1) == (1, 1)
    for matrix in ("bt601", "bt709"):
        for full in (False, True):
            code = layout.nv12_code(matrix, full)
            assert code in layout.NV12_CODES
            assert layout.nv12_format(code) == (layout.NV12_MATRICES[matrix], full)
    assert layout.nv12_code(layout.NV12_BT709, True) == layout.NV12_BT709 | layout.NV12_FULL_RANGE
    with pytest.raises(ValueError, match="matrix must be one of"):
        layout.nv12_code("bt2020", False)
    with pytest.raises(ValueError, match="no NV12 colour format code 4"):
        layout.nv12_format(4)
    # every fixed-point sum stays within int32
    for code in layout.NV12_CODES:
        k = layout.nv12_coefficients(code)
        assert k.y_scale * 255 + 1024 * max(k.cr_r, k.cb_b, k.cb_g + k.cr_g) < 2 ** 30
    with pytest.raises(ValueError, match=r"uv of a 5 x 7 frame must be \[3, 4, 2\]"):
        reference.nv12_to_rgb(torch.zeros(5, 7, dtype=torch.uint8), torch.zeros(3, 7, dtype=torch.uint8),
                              "bt601", False)


# --------------------------------------------------------------------------- #
# The kernel: source stage, then the whole kernel against RGB and the reference
# --------------------------------------------------------------------------- #


def _frame(H: int, W: int, code: int, g: torch.Generator) -> torch.Tensor:
    """An NV12 frame: smooth luma with noise, random chroma, in the code's legal range."""
    full = layout.nv12_format(code)[1]
    yy = torch.arange(H, dtype=torch.float32)[:, None]
    xx = torch.arange(W, dtype=torch.float32)[None, :]
    luma = 128 + 90 * torch.sin(xx / 5 + float(torch.rand(1, generator=g)) * 6) * torch.cos(yy / 4)
    luma = luma + torch.randn(H, W, generator=g) * 8
    lo, hi_y, hi_c = (0, 255, 255) if full else (16, 235, 240)
    ch, cw = layout.nv12_chroma_shape(H, W)
    uv = torch.randint(lo, hi_c + 1, (ch * cw * 2,), generator=g)
    return torch.cat([luma.round().clamp(lo, hi_y).flatten(), uv.float()]).to(torch.uint8)


def _pack(frames: list[torch.Tensor], specs: list[tuple[int, int, int]], gap: int = 3
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Frames back to back, with ``gap`` junk bytes before each (nothing may depend on adjacency)."""
    parts, offsets, pos = [], [], 0
    for f in frames:
        parts += [torch.full((gap,), 201, dtype=torch.uint8), f]
        offsets.append(pos + gap)
        pos += gap + f.numel()
    data = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8)
    return data, torch.tensor(offsets, dtype=torch.int64), torch.tensor(specs, dtype=torch.int32).reshape(-1, 3)


def _batch(specs: list[tuple[int, int, int]], seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return _pack([_frame(H, W, F, g) for H, W, F in specs], specs)


def _rgb_images(data: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor) -> list[torch.Tensor]:
    return [reference.source_nv12(data, o, (H, W, F), (0, H, 0, W))
            for o, (H, W, F) in zip(offsets.tolist(), shapes.tolist())]


def _interleaved(data: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same batch as HWC RGB images, converted by the reference."""
    images = _rgb_images(data, offsets, shapes)
    sizes = [i.numel() for i in images]
    offs = torch.tensor([0] + sizes[:-1], dtype=torch.int64).cumsum(0)
    flat = torch.cat([i.flatten() for i in images]) if images else torch.empty(0, dtype=torch.uint8)
    return flat, offs, torch.tensor([[H, W, 3] for H, W, _ in shapes.tolist()], dtype=torch.int32).reshape(-1, 3)


def _check_nv12(data: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor, rows: list[list[float]],
                out: tuple[int, int], device: str, scale: list[float] = IDENTITY[0], bias: list[float] = IDENTITY[1],
                **kwargs) -> torch.Tensor:
    """Kernel on the frames == kernel on the converted RGB batch (bit for bit), reference on
    the frames == reference on the RGB batch (bit for bit), kernel ~ reference (the kernel
    tests' tolerance); inputs untouched. Returns the kernel's output."""
    params = _params(rows)
    before = [t.clone() for t in (data, offsets, shapes, params)]
    rgb = _interleaved(data, offsets, shapes)
    dev = [t.to(device) for t in (data, offsets, shapes, params)]
    got = fused_resized_crop(*dev, out, scale, bias, source="nv12", **kwargs).cpu()
    for t, b in zip(dev, before):
        assert torch.equal(t.cpu(), b), "kernel modified its input"
    exp = fused_resized_crop(*(t.to(device) for t in rgb), dev[3], out, scale, bias, **kwargs).cpu()
    assert torch.equal(got, exp), f"max |diff| {(got.double() - exp.double()).abs().max()}"
    ref = resized_crop_reference(data, offsets, shapes, params, out, scale, bias, source="nv12", **kwargs)
    for t, b in zip((data, offsets, shapes, params), before):
        assert torch.equal(t, b), "reference modified its input"
    assert torch.equal(ref, resized_crop_reference(*rgb, params, out, scale, bias, **kwargs))
    # small batches: the GPU's fused multiply-adds move a few more values across a rounding edge
    # than the kernel tests' default fraction allows (as the YCbCr source's tests allow too)
    _assert_close(got, ref, scale, kwargs.get("quantize", True), max_fraction=0.02)
    return got


ODD = [(9, 13, layout.nv12_code("bt601", False)), (6, 7, layout.nv12_code("bt709", False)),
       (7, 6, layout.nv12_code("bt601", True)), (5, 5, layout.nv12_code("bt709", True)),
       (1, 1, layout.NV12_BT709), (2, 3, layout.NV12_BT601), (3, 1, layout.NV12_BT709 | layout.NV12_FULL_RANGE)]


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_source_is_the_reference_conversion(device: str) -> None:
    """The source stage alone (one nearest tap per pixel, no resize): every frame's RGB
    image, bit for bit, for every colour format and odd sizes (chroma ceil(H/2) x ceil(W/2))."""
    data, offsets, shapes = _batch(ODD, 1)
    out = (9, 13)
    rows = [_geom(H, W, out, valid=(0, H, 0, W)) for H, W, _ in ODD]
    for r, (H, W, _) in zip(rows, ODD):  # one source pixel per output pixel, the rest invalid
        r[2], r[3] = 1.0, 1.0
    got = fused_resized_crop(data.to(device), offsets.to(device), shapes.to(device), _params(rows).to(device), out,
                             *IDENTITY, out_dtype=torch.uint8, interpolation="nearest", source="nv12").cpu()
    for b, (img, (H, W, _)) in enumerate(zip(_rgb_images(data, offsets, shapes), ODD)):
        assert torch.equal(got[b, :, :H, :W].permute(1, 2, 0), img), f"frame {b} ({H} x {W})"
        assert not got[b, :, H:].any() and not got[b, :, :, W:].any()


RAGGED = [(13, 17, 0), (9, 4, 1), (10, 11, 2), (7, 8, 3), (12, 3, 1), (11, 10, 0)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_kernel_ragged_batch_crops_and_flips(interpolation: str, device: str) -> None:
    """Frames of different sizes and formats in one batch, random crops and flips, up- and downscaling."""
    out = (7, 6)
    data, offsets, shapes = _batch(RAGGED, 2)
    g = torch.Generator().manual_seed(2)
    rows = []
    for H, W, _ in RAGGED:
        flip = tuple(bool(v) for v in torch.randint(0, 2, (2,), generator=g))
        rows.append(_geom(H, W, out, _box(g, H, W), flip=flip))
    _check_nv12(data, offsets, shapes, rows, out, device, out_dtype=torch.uint8, interpolation=interpolation)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_antialias_downscale_float_output(device: str) -> None:
    """A batch of one shrunk by more than 2 with antialias, normalised to float32."""
    specs = [(27, 31, layout.nv12_code("bt709", False))]
    data, offsets, shapes = _batch(specs, 3)
    rows = [_geom(27, 31, (6, 7), (1, 2, 25, 29), flip=(False, True))]
    assert rows[0][2] > 2 and abs(rows[0][3]) > 2
    _check_nv12(data, offsets, shapes, rows, (6, 7), device, IMAGENET_SCALE, IMAGENET_BIAS,
                out_dtype=torch.float32, antialias=True)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_upscale_odd_frames(device: str) -> None:
    """Odd frames upscaled (taps between source pixels of both chroma parities), uint8 and bf16."""
    specs = [(5, 7, layout.nv12_code("bt601", True)), (3, 5, layout.nv12_code("bt709", False))]
    data, offsets, shapes = _batch(specs, 4)
    rows = [_geom(5, 7, (11, 13), flip=(True, False)), _geom(3, 5, (11, 13))]
    _check_nv12(data, offsets, shapes, rows, (11, 13), device, out_dtype=torch.uint8)
    _check_nv12(data, offsets, shapes, rows, (11, 13), device, IMAGENET_SCALE, IMAGENET_BIAS,
                out_dtype=torch.bfloat16, channels_last=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_kernel_folds_nv12_frames_like_their_rgb(device: str, mode: str) -> None:
    """Padding before the resampling: the fold is applied to the tap index before the NV12
    loader, so a padded frame equals its RGB image padded (torchvision's ``pad``)."""
    from torchdali.transforms import _geometry as G

    specs = [(7, 9, 0), (6, 5, 3), (5, 8, 1)]
    data, offsets, shapes = _batch(specs, 5)
    geom = G.BatchGeometry.identity(np.asarray([(H, W) for H, W, _ in specs]))
    G.pad(geom, 2, 3, 4, 1, mode="reflect")
    params = geom.to_params()
    fill = [3, 100, 250] if mode == "constant" else None
    kw = dict(out_dtype=torch.uint8, pad_mode=mode, fill=fill)
    before = data.clone()
    got = fused_resized_crop(data.to(device), offsets.to(device), shapes.to(device), params.to(device), (11, 15),
                             *IDENTITY, source="nv12", **kw).cpu()
    assert torch.equal(data, before)
    exp = resized_crop_reference(data, offsets, shapes, params, (11, 15), *IDENTITY, source="nv12", **kw)
    assert torch.equal(got, exp)
    for b, (img, (H, W, _)) in enumerate(zip(_rgb_images(data, offsets, shapes), specs)):
        tv = TF.pad(img.permute(2, 0, 1), [2, 3, 4, 1], fill=fill or 0, padding_mode=mode)
        assert torch.equal(exp[b, :, :H + 4, :W + 6], tv)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn", [fused_resized_crop, resized_crop_reference], ids=["kernel", "reference"])
def test_batch_of_zero(fn, device: str) -> None:
    res = fn(torch.zeros(10, dtype=torch.uint8, device=device), torch.zeros(0, dtype=torch.int64, device=device),
             torch.zeros(0, 3, dtype=torch.int64, device=device), torch.zeros(0, layout.NUM_PARAMS, device=device),
             (5, 7), *IDENTITY, out_dtype=torch.float16, source="nv12")
    assert res.shape == (0, 3, 5, 7) and res.dtype == torch.float16 and res.device.type == device


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_bad_metadata_reads_nothing(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU metadata is not validated on the host: a frame whose chroma plane overhangs
    ``data``, or whose colour format code is unknown, reads nothing."""
    monkeypatch.setattr(sys.modules[fused_resized_crop.__module__], "_check_values", lambda *a: None)
    specs = [(8, 9, 0), (7, 6, 1), (6, 7, 2), (5, 5, 3), (6, 6, 0)]
    data, offsets, shapes = _batch(specs, 6)
    shapes = shapes.long()
    out = (4, 5)
    rows = [_geom(H, W, out) for H, W, _ in specs]
    offsets[2] = data.numel() - layout.nv12_size(6, 7) + 1  # luma fits, the chroma plane overhangs by a byte
    shapes[1, 2] = 4  # not a colour format code
    offsets[3] = -2
    shapes[4, 0] = 1 << 40
    bias = [5.0, 6.0, 7.0]
    got = fused_resized_crop(data.to(device), offsets.to(device), shapes.to(device), _params(rows).to(device),
                             out, [1.0, 1.0, 1.0], bias, quantize=False, source="nv12").cpu()
    for b in (1, 2, 3, 4):
        assert torch.equal(got[b], torch.tensor(bias).view(3, 1, 1).expand(3, *out)), f"frame {b}"
    # the frame that fits is read as usual, also when it ends exactly at the end of data
    end = int(offsets[0]) + layout.nv12_size(8, 9)
    args = (data[:end], offsets[:1], shapes[:1], _params(rows[:1]), out, [1.0, 1.0, 1.0], bias)
    exp = resized_crop_reference(*args, quantize=False, source="nv12")
    torch.testing.assert_close(got[0], exp[0], atol=1e-3, rtol=0)
    got0 = fused_resized_crop(*(a.to(device) for a in args[:4]), *args[4:], quantize=False, source="nv12")
    torch.testing.assert_close(got0.cpu(), exp, atol=1e-3, rtol=0)


# --------------------------------------------------------------------------- #
# Argument checking
# --------------------------------------------------------------------------- #


def _valid() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    specs = [(6, 7, 0), (5, 4, 3)]
    data, offsets, shapes = _batch(specs, 0)
    return data, offsets, shapes, _params([_geom(H, W, (3, 3)) for H, W, _ in specs])


@pytest.mark.parametrize("fn", [fused_resized_crop, resized_crop_reference], ids=["kernel", "reference"])
@pytest.mark.parametrize("code", [4, 7, -1, 16])
def test_rejects_bad_colour_format_code(fn, code: int) -> None:
    data, offsets, shapes, params = _valid()
    shapes[1, 2] = code
    with pytest.raises(ValueError, match=rf"sample 1: an NV12 frame's .*colour format code .*got {code}"):
        fn(data, offsets, shapes, params, (3, 3), *IDENTITY, source="nv12")


@pytest.mark.parametrize("fn", [fused_resized_crop, resized_crop_reference], ids=["kernel", "reference"])
def test_rejects_frames_past_the_end(fn) -> None:
    data, offsets, shapes, params = _valid()
    with pytest.raises(ValueError, match=r"sample 1: NV12 frame .* does not fit"):
        fn(data[:-1], offsets, shapes, params, (3, 3), *IDENTITY, source="nv12")
    with pytest.raises(ValueError, match="height and width"):
        fn(data, offsets, shapes.index_fill(1, torch.tensor([1]), 0), params, (3, 3), *IDENTITY, source="nv12")
    with pytest.raises(ValueError, match=r"shapes must have shape \[B, 3\]=\[2, 3\] \(H, W, NV12 code"):
        fn(data, offsets, shapes[:, :2], params, (3, 3), *IDENTITY, source="nv12")


@pytest.mark.parametrize("fn", [fused_resized_crop, resized_crop_reference], ids=["kernel", "reference"])
def test_nv12_frames_do_not_mix(fn) -> None:
    """A mixed batch has no NV12 marker: its codes read as channel counts, and the refusal
    says where NV12 frames go."""
    data, offsets, shapes, params = _valid()
    with pytest.raises(ValueError, match=r"sample 0: in a mixed batch .*NV12 frames do not mix .*source='nv12'"):
        fn(data, offsets, shapes, params, (3, 3), *IDENTITY, source="mixed")
