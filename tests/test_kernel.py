"""Tests of the fused resized-crop kernel.

* kernel vs plain-torch reference, through one helper (:func:`_check`) with a
  tolerance table; on CPU the kernel runs under ``TRITON_INTERPRET=1``, on a
  GPU natively (``cuda``-marked parameters);
* reference vs torchvision, an independent implementation of the same math.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import torch

# Must precede the first `import triton` (the kernel module imports it lazily).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torchvision.transforms.v2.functional as TF  # noqa: E402

from csrc_triton import NUM_PARAMS, LaunchSettings, fused_resized_crop, resized_crop_reference

HAS_TRITON = importlib.util.find_spec("triton") is not None

INTERPRET = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")

DEVICES = [
    pytest.param(
        "cpu",
        marks=pytest.mark.skipif(
            not (HAS_TRITON and INTERPRET), reason="kernel on CPU needs triton and TRITON_INTERPRET=1"
        ),
    ),
    pytest.param(
        "cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not HAS_TRITON, reason="needs triton")]
    ),
]
OUT_DTYPES = [torch.uint8, torch.float32, torch.float16, torch.bfloat16]
IMAGENET_SCALE = [1 / (0.229 * 255), 1 / (0.224 * 255), 1 / (0.225 * 255)]
IMAGENET_BIAS = [-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225]
IDENTITY = ([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])


# --------------------------------------------------------------------------- #
# Helpers
# --------------------------------------------------------------------------- #


def _images(sizes: list[tuple[int, int, int]], seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, s, generator=g, dtype=torch.uint8) for s in sizes]


def _pack(images: list[torch.Tensor], gap: int = 5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pack HWC images into (data, offsets, shapes); `gap` junk bytes between
    images make sure nothing depends on images being adjacent."""
    chunks, offsets, pos = [], [], 0
    for img in images:
        junk = torch.full((gap,), 77, dtype=torch.uint8)
        chunks += [junk, img.flatten()]
        offsets.append(pos + gap)
        pos += gap + img.numel()
    data = torch.cat(chunks) if chunks else torch.empty(0, dtype=torch.uint8)
    shapes = torch.tensor([list(i.shape) for i in images], dtype=torch.int32).reshape(-1, 3)
    return data, torch.tensor(offsets, dtype=torch.int64), shapes


def _geom(
    H: int,
    W: int,
    out: tuple[int, int],
    box: tuple[int, int, int, int] | None = None,
    flip: tuple[bool, bool] = (False, False),
    clamp: tuple[int, int, int, int] | None = None,
    valid: tuple[int, int, int, int] | None = None,
) -> list[float]:
    """Params row resizing `box` = (top, left, h, w) of an H x W image to `out`.

    The clamp region defaults to the box (torchvision's crop-then-resize);
    `flip` = (vertical, horizontal) walks the box backwards.
    """
    oh, ow = out
    top, left, h, w = box if box is not None else (0, 0, H, W)
    oy, sy, ox, sx = float(top), h / oh, float(left), w / ow
    if flip[0]:
        oy, sy = float(top + h), -sy
    if flip[1]:
        ox, sx = float(left + w), -sx
    ly, hy, lx, hx = clamp if clamp is not None else (top, top + h, left, left + w)
    v = valid if valid is not None else (0, oh, 0, ow)
    return [oy, ox, sy, sx, ly, hy, lx, hx, *v]


def _params(rows: list[list[float]]) -> torch.Tensor:
    """Rows of the leading (geometry) columns, the rest of each row zero: bilinear
    filter, no erase box."""
    out = torch.zeros(len(rows), NUM_PARAMS, dtype=torch.float32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.float32)
    return out


# Kernel vs reference. uint8: |diff| <= 1 and at most 1% of pixels off.
# Floats: atol relative to max |expected| (at least 1).
_TOL: dict[torch.dtype, float] = {
    torch.uint8: 1.0,
    torch.float32: 1e-4,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}
_MAX_MISMATCH_FRACTION = 0.01


def _allowed_mismatches(n: int, fraction: float = _MAX_MISMATCH_FRACTION) -> int:
    # 1% of the values, but never fewer than 2 so that tiny outputs tolerate
    # an unlucky tie or two.
    return max(2, int(fraction * n))


def _assert_close(
    got: torch.Tensor, exp: torch.Tensor, scale: list[float], quantized: bool,
    max_fraction: float = _MAX_MISMATCH_FRACTION,
) -> None:
    """Kernel vs reference. Float32 rounding differs between the two (order of
    sums, fused multiply-add), and resampling weights are often rational, so a
    value can be an exact .5 tie that each side rounds its own way: on uint8
    output that is atol=1; on float output after quantisation it is one
    quantisation step (|scale|). Either is allowed on at most 1% of the values."""
    assert got.shape == exp.shape and got.dtype == exp.dtype
    diff = (got.double() - exp.double()).abs()
    if exp.dtype == torch.uint8:
        assert diff.max() <= _TOL[torch.uint8], f"max |diff| {diff.max()} > {_TOL[torch.uint8]}"
        n_bad = int((diff != 0).sum())
        assert n_bad <= _allowed_mismatches(diff.numel(), max_fraction), f"{n_bad} of {diff.numel()} pixels differ"
        return
    rel = _TOL[exp.dtype]
    tol = rel * max(exp.double().abs().max().item(), 1.0)
    tight = diff <= tol
    if quantized:
        step = torch.tensor(scale, dtype=torch.float64).abs().view(1, 3, 1, 1)
        assert (diff <= step + tol).all(), f"max |diff| {diff.max()} beyond one quantisation step"
        n_bad = int((~tight).sum())
        assert n_bad <= _allowed_mismatches(diff.numel(), max_fraction), \
            f"{n_bad} of {diff.numel()} values differ by > {tol}"
    else:
        assert tight.all(), f"max |diff| {diff.max()} > {tol}"


def _check(
    images: list[torch.Tensor],
    rows: list[list[float]],
    out_size: tuple[int, int],
    device: str,
    *,
    scale: list[float] = IDENTITY[0],
    bias: list[float] = IDENTITY[1],
    exact: bool = False,
    noncontig_meta: bool = False,
    launch: LaunchSettings | None = None,
    **kwargs,
) -> torch.Tensor:
    """Run the kernel on `device` and the reference on CPU; compare; check that
    the kernel left its inputs alone. Returns the kernel's output (on CPU)."""
    data, offsets, shapes = _pack(images)
    params = _params(rows)
    if noncontig_meta:
        # Views with the right values and unusual strides.
        params = torch.cat([params, params], dim=1)[:, :NUM_PARAMS]
        offsets = torch.stack([offsets, offsets], dim=1)[:, 1]
        shapes = shapes.t().contiguous().t()
        assert not (params.is_contiguous() or offsets.is_contiguous() or shapes.is_contiguous())
    names = ("data", "offsets", "shapes", "params")
    cpu_in = (data, offsets, shapes, params)
    before = [t.clone() for t in cpu_in]
    exp = resized_crop_reference(*cpu_in, out_size, scale, bias, **kwargs)
    for name, t, b in zip(names, cpu_in, before):
        assert torch.equal(t, b), f"reference modified its input {name}"

    dev_in = [t.to(device) for t in cpu_in]
    got = fused_resized_crop(*dev_in, out_size, scale, bias, launch=launch, **kwargs)
    for name, t, b in zip(names, dev_in, before):
        assert torch.equal(t.cpu(), b), f"kernel modified its input {name}"
    assert got.device.type == torch.device(device).type
    got = got.cpu()
    assert got.shape == (len(images), 3, *out_size)
    if exact:
        assert torch.equal(got, exp), f"max |diff| {(got.double() - exp.double()).abs().max()}"
    else:
        _assert_close(got, exp, scale, kwargs.get("quantize", True))
    return got


def _box(g: torch.Generator, H: int, W: int, min_frac: float = 0.3) -> tuple[int, int, int, int]:
    h = int(torch.randint(max(1, int(H * min_frac)), H + 1, (1,), generator=g))
    w = int(torch.randint(max(1, int(W * min_frac)), W + 1, (1,), generator=g))
    top = int(torch.randint(0, H - h + 1, (1,), generator=g))
    left = int(torch.randint(0, W - w + 1, (1,), generator=g))
    return top, left, h, w


# --------------------------------------------------------------------------- #
# Kernel vs reference
# --------------------------------------------------------------------------- #


def _case(name: str) -> tuple[list[torch.Tensor], list[list[float]], tuple[int, int], dict]:
    """Named geometry cases: (images, params rows, out_size, extra kwargs)."""
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    if name == "odd_sizes":
        sizes = [(37, 45, 3), (23, 31, 3), (29, 17, 3)]
        out = (17, 13)
    elif name == "batch_of_1":
        sizes = [(33, 47, 3)]
        out = (19, 23)
    elif name == "ragged_gray_rgb":
        sizes = [(40, 50, 1), (19, 27, 3), (33, 21, 1), (8, 9, 3)]
        out = (15, 18)
    elif name == "upscale":
        sizes = [(9, 11, 3), (5, 7, 1)]
        out = (24, 21)
    elif name == "downscale_gt2":
        sizes = [(40, 50, 3), (37, 43, 1)]
        out = (7, 9)
    else:
        raise AssertionError(name)
    images = _images(sizes, seed=len(name))
    rows = [_geom(H, W, out, _box(g, H, W)) for H, W, _ in sizes]
    if name == "downscale_gt2":  # make sure both axes shrink by more than 2
        rows = [_geom(40, 50, out), _geom(37, 43, out, (1, 2, 30, 35))]
        assert all(r[2] > 2 and r[3] > 2 for r in rows)
    return images, rows, out, {}


KERNEL_CASES = ["odd_sizes", "batch_of_1", "ragged_gray_rgb", "upscale", "downscale_gt2"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", KERNEL_CASES)
def test_kernel_matches_reference(case: str, device: str) -> None:
    images, rows, out, kw = _case(case)
    _check(images, rows, out, device, out_dtype=torch.uint8, **kw)
    # Float output without quantisation shows any difference in the weights
    # that uint8 rounding could hide.
    _check(images, rows, out, device, out_dtype=torch.float32, quantize=False, **kw)


# The default and tiles smaller than every image, so that an image spans
# several tiles in both directions.
# (8x16 rather than smaller: the interpreter's time grows with the number of tiles, and the
# 36x40 output still spans 5x3 of them, two of its padding columns' tiles all padding)
LAUNCHES = [None, LaunchSettings(block_h=8, block_w=16, num_warps=1)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("launch", LAUNCHES, ids=["default", "8x16"])
def test_kernel_tiles(launch: LaunchSettings | None, device: str) -> None:
    """Strong downscale, several tiles per image, tiles that are all padding and a flipped upscale."""
    images = _images([(150, 210, 3), (70, 90, 1), (9, 11, 3)], seed=23)
    out = (36, 40)
    rows = [
        _geom(150, 210, out),  # 4.2x / 5.25x downscale
        _geom(70, 90, out, (3, 5, 60, 80), valid=(0, 36, 33, 40)),  # columns 0..32 padding
        _geom(9, 11, out, flip=(True, True)),
    ]
    for kw in (dict(out_dtype=torch.uint8), dict(out_dtype=torch.float32, quantize=False),
               dict(out_dtype=torch.bfloat16, antialias=False, channels_last=True)):
        got = _check(images, rows, out, device, launch=launch, **kw)
    _check(images, rows, out, device, launch=launch, scale=IMAGENET_SCALE, bias=IMAGENET_BIAS,
           out_dtype=torch.float16)
    assert (got[1, :, :, :33] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(6))
def test_kernel_random_geometry(seed: int, device: str) -> None:
    """Random mixes of box, flips, clamp region, padding window and flags."""
    g = torch.Generator().manual_seed(100 + seed)

    def ri(lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    out = (ri(3, 24), ri(3, 24))
    sizes = [(ri(2, 40), ri(2, 50), 1 if ri(0, 2) == 0 else 3) for _ in range(ri(1, 4))]
    rows = []
    for H, W, _ in sizes:
        box = _box(g, H, W, min_frac=0.1)
        flip = (ri(0, 1) == 1, ri(0, 1) == 1)
        clamp = None if ri(0, 1) else (0, H, 0, W)
        valid = (ri(0, 3), out[0] - ri(0, 3), ri(0, 3), out[1] - ri(0, 3))
        rows.append(_geom(H, W, out, box, flip, clamp, valid))
    kw = dict(antialias=ri(0, 3) > 0, out_dtype=OUT_DTYPES[ri(0, 3)], channels_last=ri(0, 1) == 1)
    _check(_images(sizes, seed), rows, out, device, scale=IMAGENET_SCALE, bias=IMAGENET_BIAS, **kw)
    _check(_images(sizes, seed), rows, out, device, quantize=False, **{**kw, "out_dtype": torch.float32})


@pytest.mark.cuda
def test_kernel_realistic_cuda() -> None:
    """ImageNet-like sizes, natively on the GPU only (too slow interpreted)."""
    g = torch.Generator().manual_seed(0)
    sizes = [(375, 500, 3), (500, 333, 3), (256, 256, 1), (1024, 768, 3)] * 2
    out = (224, 224)
    rows = []
    for i, (H, W, _) in enumerate(sizes):
        rows.append(_geom(H, W, out, _box(g, H, W, min_frac=0.3), flip=(False, i % 2 == 1)))
    _check(_images(sizes, 0), rows, out, "cuda", scale=IMAGENET_SCALE, bias=IMAGENET_BIAS,
           out_dtype=torch.bfloat16, channels_last=True)
    _check(_images(sizes, 0), rows, out, "cuda", out_dtype=torch.uint8)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_flip(device: str) -> None:
    images = _images([(31, 40, 3), (22, 19, 1), (35, 28, 3)], seed=3)
    out = (14, 17)
    g = torch.Generator().manual_seed(3)
    box0 = _box(g, 31, 40)
    rows = [
        _geom(31, 40, out, box0, flip=(False, True)),
        _geom(22, 19, out, _box(g, 22, 19), flip=(True, False)),
        _geom(35, 28, out, _box(g, 35, 28), flip=(True, True)),
    ]
    flipped = _check(images, rows, out, device, out_dtype=torch.float32, quantize=False)
    # A flip must really mirror: compare with the unflipped result reversed.
    plain = _check(images[:1], [_geom(31, 40, out, box0)], out, device, out_dtype=torch.float32, quantize=False)
    torch.testing.assert_close(flipped[0], plain[0].flip(-1), atol=1e-3, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_antialias_false(device: str) -> None:
    images = _images([(40, 50, 3), (17, 23, 1)], seed=5)
    out = (11, 24)  # y downscales ~3.6x, x ~2x and upscales for the second image
    rows = [_geom(40, 50, out), _geom(17, 23, out, (2, 1, 14, 21))]
    a = _check(images, rows, out, device, antialias=False, out_dtype=torch.float32, quantize=False)
    b = _check(images, rows, out, device, antialias=True, out_dtype=torch.float32, quantize=False)
    assert not torch.allclose(a, b), "antialias flag had no effect on a 3.6x downscale"


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_padding_and_clamp_region(device: str) -> None:
    images = _images([(15, 20, 3), (40, 20, 1), (30, 36, 3)], seed=7)
    out = (24, 24)
    rows = [
        # CenterCrop(24) of a 15x20 image: zero border of 4/5 rows, 2/2 columns.
        [-4.0, -2.0, 1.0, 1.0, 0, 15, 0, 20, 4, 19, 2, 22],
        # Letterbox: 40x20 resized to 24x12 and centred, columns 6..17 valid.
        [0.0, -6 * 20 / 12, 40 / 24, 20 / 12, 0, 40, 0, 20, 0, 24, 6, 18],
        # Box in the middle but taps may reach outside it, up to the image edge.
        _geom(30, 36, out, (5, 6, 20, 24), clamp=(0, 30, 0, 36)),
    ]
    got = _check(images, rows, out, device, out_dtype=torch.float32, quantize=False)
    assert (got[0, :, :4] == 0).all() and (got[0, :, 19:] == 0).all()
    assert (got[0, :, :, :2] == 0).all() and (got[0, :, :, 22:] == 0).all()
    assert (got[1, :, :, :6] == 0).all() and (got[1, :, :, 18:] == 0).all()
    assert (got[0, :, 4:19, 2:22] == images[0].permute(2, 0, 1).float()).all()


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_outside_clamp_region_uses_nearest(device: str) -> None:
    """Sample points beyond [lo, hi) have no tap with weight > 0: the nearest
    pixel of the region is used (edge replication)."""
    images = _images([(12, 14, 3), (20, 25, 1)], seed=9)
    out = (24, 24)
    rows = [
        [-5.0, -3.0, 1.0, 1.0, 0, 12, 0, 14, 0, 24, 0, 24],
        [-30.0, 40.0, 2.5, -2.5, 2, 18, 3, 21, 0, 24, 0, 24],  # downscale, far outside, flipped
    ]
    got = _check(images[:1], rows[:1], out, device, out_dtype=torch.uint8, exact=True)
    yy = (torch.arange(24) - 5).clamp(0, 11)
    xx = (torch.arange(24) - 3).clamp(0, 13)
    assert torch.equal(got[0], images[0][yy][:, xx].permute(2, 0, 1))
    _check(images, rows, out, device, out_dtype=torch.uint8)
    _check(images, rows, out, device, out_dtype=torch.float32, quantize=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
def test_kernel_exact_crop_and_flip(out_dtype: torch.dtype, device: str) -> None:
    """Step +-1 with integer origins copies pixels: results must be identical.
    Scale/bias are exact in float32 so fused multiply-add cannot differ."""
    images = _images([(21, 25, 3), (18, 23, 1)], seed=11)
    out = (13, 16)
    rows = [
        [3.0, 25.0, 1.0, -1.0, 0, 21, 0, 25, 0, 13, 0, 16],  # crop + horizontal flip
        [18.0, 2.0, -1.0, 1.0, 0, 18, 0, 23, 1, 13, 0, 15],  # vertical flip, padded edge
    ]
    got = _check(images, rows, out, device, scale=[1.0, 0.5, 2.0], bias=[0.0, -3.0, 10.0],
                 out_dtype=out_dtype, exact=True)
    expect0 = images[0][3:16].flip(1)[:, :16].permute(2, 0, 1).float()
    expect0 = expect0 * torch.tensor([1.0, 0.5, 2.0]).view(3, 1, 1) + torch.tensor([0.0, -3.0, 10.0]).view(3, 1, 1)
    if out_dtype == torch.uint8:
        expect0 = (expect0.clamp(0, 255) + 0.5).floor()  # half up, not half to even
    torch.testing.assert_close(got[0].float(), expect0.to(out_dtype).float(), atol=0, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
def test_kernel_dtypes_and_layouts(out_dtype: torch.dtype, channels_last: bool, device: str) -> None:
    images = _images([(27, 33, 3), (16, 21, 1)], seed=13)
    out = (12, 10)
    g = torch.Generator().manual_seed(13)
    rows = [_geom(27, 33, out, _box(g, 27, 33)), _geom(16, 21, out, _box(g, 16, 21), flip=(False, True))]
    scale, bias = (IDENTITY if out_dtype == torch.uint8 else (IMAGENET_SCALE, IMAGENET_BIAS))
    data, offsets, shapes = _pack(images)
    got = _check(images, rows, out, device, scale=scale, bias=bias, out_dtype=out_dtype,
                 channels_last=channels_last)
    assert got.dtype == out_dtype
    res = fused_resized_crop(data.to(device), offsets.to(device), shapes.to(device), _params(rows).to(device),
                             out, scale, bias, out_dtype=out_dtype, channels_last=channels_last)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    assert res.is_contiguous(memory_format=fmt)
    ref = resized_crop_reference(data, offsets, shapes, _params(rows), out, scale, bias,
                                 out_dtype=out_dtype, channels_last=channels_last)
    assert ref.is_contiguous(memory_format=fmt) and ref.dtype == out_dtype


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_out_noncontiguous_and_tensor_affine(device: str) -> None:
    images = _images([(26, 31, 3), (14, 19, 1)], seed=17)
    out_size = (9, 11)
    rows = [_geom(26, 31, out_size, (1, 2, 20, 25)), _geom(14, 19, out_size, flip=(True, False))]
    data, offsets, shapes = _pack(images)
    params = _params(rows)
    scale = torch.tensor(IMAGENET_SCALE)
    bias = torch.tensor(IMAGENET_BIAS, dtype=torch.float64)  # any real dtype, any device
    exp = resized_crop_reference(data, offsets, shapes, params, out_size, scale, bias)

    # [B, 3, oh, ow] view into a larger buffer: every stride unusual, and the
    # skipped elements must stay untouched.
    # Row stride 100 is not column stride * width, so swapped strides show up.
    base = torch.full((2, 10, 25, 4), -7.0, device=device)
    out = base[:, :9, :22:2, 1:].permute(0, 3, 1, 2)
    assert out.shape == (2, 3, 9, 11) and out.stride() == (1000, 1, 100, 8)
    res = fused_resized_crop(data.to(device), offsets.to(device), shapes.to(device), params.to(device),
                             out_size, scale, bias, out=out)
    assert res.data_ptr() == out.data_ptr()
    _assert_close(out.cpu(), exp, IMAGENET_SCALE, quantized=True)
    untouched = torch.ones_like(base, dtype=torch.bool)
    untouched[:, :9, :22:2, 1:] = False
    assert (base[untouched] == -7.0).all(), "kernel wrote outside the `out` view"

    # The reference honours `out` the same way.
    base_r = torch.full((2, 10, 25, 4), -7.0)
    out_r = base_r[:, :9, :22:2, 1:].permute(0, 3, 1, 2)
    resized_crop_reference(data, offsets, shapes, params, out_size, scale, bias, out=out_r)
    assert torch.equal(out_r, exp) and (base_r[untouched.cpu()] == -7.0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_noncontiguous_metadata(device: str) -> None:
    images, rows, out, _ = _case("ragged_gray_rgb")
    _check(images, rows, out, device, out_dtype=torch.uint8, noncontig_meta=True)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_bad_metadata_stays_in_bounds(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU metadata is not validated on the host; the kernel must then keep its
    reads inside each image (and `data`) with well-defined fallbacks."""
    monkeypatch.setattr(sys.modules[fused_resized_crop.__module__], "_check_values", lambda *a: None)
    sizes = [(10, 12, 3), (9, 8, 3), (11, 7, 1), (6, 5, 3), (4, 6, 3)]
    images = _images(sizes, seed=19)
    data, offsets, shapes = _pack(images)
    shapes = shapes.long()
    out = (6, 7)
    rows = [_geom(H, W, out) for H, W, _ in sizes]
    rows[1][4] = 1000.0  # lo_y past the image: only its last row is usable
    rows[2][1] = float("nan")  # origin_x NaN: nearest-pixel fallback to the last column
    shapes[3, 0] = 1 << 40  # image far past the end of data: reads nothing
    offsets[0] = -3  # negative offset: reads nothing
    offsets[4] = data.numel() - 10  # overhangs the end of data: reads nothing
    bias = [5.0, 6.0, 7.0]
    got = fused_resized_crop(data.to(device), offsets.to(device), shapes.to(device), _params(rows).to(device),
                             out, [1.0, 1.0, 1.0], bias, quantize=False).cpu()
    assert torch.isfinite(got).all()
    for b in (0, 3, 4):
        assert torch.equal(got[b], torch.tensor(bias).view(3, 1, 1).expand(3, *out)), f"sample {b}"
    last_row = list(rows[1])
    last_row[4], last_row[5] = 8.0, 9.0
    exp1 = resized_crop_reference(*_pack(images[1:2]), _params([last_row]), out, [1.0, 1.0, 1.0], bias,
                                  quantize=False)
    torch.testing.assert_close(got[1], exp1[0], atol=1e-3, rtol=0)
    assert (got[1] == got[1][:, -1:, :]).all()
    # The reference clamps such a region the same way.
    same = resized_crop_reference(*_pack(images[1:2]), _params(rows[1:2]), out, [1.0, 1.0, 1.0], bias,
                                  quantize=False)
    assert torch.equal(same, exp1)
    # Sampling x at 6.5 with step 0 reads exactly column 6, the last one.
    last_col = list(rows[2])
    last_col[1], last_col[3] = 6.5, 0.0
    exp2 = resized_crop_reference(*_pack(images[2:3]), _params([last_col]), out, [1.0, 1.0, 1.0], bias,
                                  quantize=False)
    torch.testing.assert_close(got[2], exp2[0], atol=1e-3, rtol=0)
    assert got[2].amin() < got[2].amax()  # it did read pixels


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("source", ["interleaved", "ycbcr", "mixed"])
@pytest.mark.parametrize("fn", [fused_resized_crop, resized_crop_reference], ids=["kernel", "reference"])
def test_batch_of_zero(fn, source: str, device: str) -> None:
    data = torch.zeros(10, dtype=torch.uint8, device=device)
    offsets = torch.zeros(0, dtype=torch.int64, device=device)
    shapes = torch.zeros(0, 3, dtype=torch.int64, device=device)
    params = torch.zeros(0, NUM_PARAMS, device=device)
    res = fn(data, offsets, shapes, params, (5, 7), *IDENTITY, out_dtype=torch.float16, source=source)
    assert res.shape == (0, 3, 5, 7) and res.dtype == torch.float16 and res.device.type == device


# --------------------------------------------------------------------------- #
# Argument checking
# --------------------------------------------------------------------------- #


def _valid_args() -> dict:
    images = _images([(6, 7, 3), (5, 4, 1)], seed=0)
    data, offsets, shapes = _pack(images)
    params = _params([_geom(6, 7, (3, 3)), _geom(5, 4, (3, 3))])
    return dict(data=data, offsets=offsets, shapes=shapes, params=params, out_size=(3, 3),
                scale=[1, 1, 1], bias=[0, 0, 0])


def _bad(**changes) -> dict:
    args = _valid_args()
    for k, v in changes.items():
        args[k] = v(args) if callable(v) else v
    return args


def _set_shape(args: dict, i: int, j: int, value: int) -> torch.Tensor:
    s = args["shapes"].clone()
    s[i, j] = value
    return s


BAD_ARGS = {
    "data_float": (TypeError, "uint8", lambda: _bad(data=lambda a: a["data"].float())),
    "data_2d": (ValueError, "1-D", lambda: _bad(data=lambda a: a["data"].view(1, -1))),
    "data_not_tensor": (TypeError, "data", lambda: _bad(data=lambda a: a["data"].tolist())),
    "params_float64": (TypeError, "float32", lambda: _bad(params=lambda a: a["params"].double())),
    "params_columns": (ValueError, "params", lambda: _bad(params=lambda a: a["params"][:, :11])),
    "offsets_float": (TypeError, "offsets", lambda: _bad(offsets=lambda a: a["offsets"].float())),
    "offsets_len": (ValueError, "offsets", lambda: _bad(offsets=lambda a: a["offsets"][:1])),
    "shapes_float": (TypeError, "shapes", lambda: _bad(shapes=lambda a: a["shapes"].float())),
    "shapes_cols": (ValueError, "shapes", lambda: _bad(shapes=lambda a: a["shapes"][:, :2])),
    "channels_4": (ValueError, "channel", lambda: _bad(shapes=lambda a: _set_shape(a, 1, 2, 4))),
    "image_past_end": (ValueError, "does not fit", lambda: _bad(shapes=lambda a: _set_shape(a, 1, 0, 50))),
    "clamp_region": (ValueError, "clamp region",
                     lambda: _bad(params=lambda a: a["params"].index_fill(1, torch.tensor([7]), 3.5))),
    "huge_shape": (ValueError, "does not fit",
                   lambda: _bad(shapes=lambda a: a["shapes"].long().index_fill(1, torch.tensor([0, 1]), 1 << 32))),
    "nan_param": (ValueError, "non-finite",
                  lambda: _bad(params=lambda a: a["params"].index_fill(1, torch.tensor([2]), float("nan")))),
    "scale_len": (ValueError, "scale", lambda: _bad(scale=[1, 1])),
    "bias_tensor_len": (ValueError, "bias", lambda: _bad(bias=torch.zeros(4))),
    "out_size_float": (TypeError, "out_size", lambda: _bad(out_size=(3.0, 3))),
    "out_size_neg": (ValueError, "out_size", lambda: _bad(out_size=(-1, 3))),
}


@pytest.mark.parametrize("name", list(BAD_ARGS))
@pytest.mark.parametrize("fn", [fused_resized_crop, resized_crop_reference], ids=["kernel", "reference"])
def test_bad_arguments(fn, name: str) -> None:
    exc, match, make = BAD_ARGS[name]
    with pytest.raises(exc, match=match):
        fn(**make())


@pytest.mark.parametrize("fn", [fused_resized_crop, resized_crop_reference], ids=["kernel", "reference"])
def test_bad_out_and_dtype(fn) -> None:
    args = _valid_args()
    with pytest.raises(TypeError, match="out_dtype"):
        fn(**args, out_dtype=torch.int32)
    with pytest.raises(ValueError, match="shape"):
        fn(**args, out=torch.empty(2, 3, 3, 4))
    with pytest.raises(TypeError, match="dtype"):
        fn(**args, out=torch.empty(2, 3, 3, 3), out_dtype=torch.float16)


@pytest.mark.cuda
@pytest.mark.parametrize("fn", [fused_resized_crop, resized_crop_reference], ids=["kernel", "reference"])
def test_device_mismatch(fn) -> None:
    args = _valid_args()
    with pytest.raises(ValueError, match="is on cpu but data is on cuda"):
        fn(**{**args, "data": args["data"].cuda()})
    cuda_args = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in args.items()}
    with pytest.raises(ValueError, match="out is on cpu"):
        fn(**cuda_args, out=torch.empty(2, 3, 3, 3))


def test_kernel_on_cpu_without_interpreter_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    if not HAS_TRITON:
        pytest.skip("needs triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="resized_crop_reference"):
        fused_resized_crop(**_valid_args())


def test_import_without_triton() -> None:
    """The package imports without Triton; the reference works, the launcher
    explains what is missing."""
    root = Path(__file__).resolve().parents[1]
    code = """
import sys, torch
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name == "triton" or name.startswith("triton."):
            raise ImportError("blocked for the test")
sys.meta_path.insert(0, _Block())
import csrc_triton as k
args = (torch.zeros(12, dtype=torch.uint8), torch.tensor([0]), torch.tensor([[2, 2, 3]]),
        torch.nn.functional.pad(torch.tensor([[0, 0, 1, 1, 0, 2, 0, 2, 0, 2, 0, 2]], dtype=torch.float32),
                                (0, k.NUM_PARAMS - 12)), (2, 2), [1, 1, 1], [0, 0, 0])
assert k.resized_crop_reference(*args).shape == (1, 3, 2, 2)
try:
    k.fused_resized_crop(*args)
except RuntimeError as e:
    assert "Triton" in str(e), e
else:
    raise AssertionError("no RuntimeError")
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_import_is_light() -> None:
    """Importing the package must not import (let alone compile) Triton."""
    root = Path(__file__).resolve().parents[1]
    code = "import sys, csrc_triton; print('triton' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "False", (r.stdout, r.stderr)


# --------------------------------------------------------------------------- #
# Reference vs torchvision (independent implementation of the same math)
# --------------------------------------------------------------------------- #


def _tv_case(seed: int, upscale: bool) -> tuple[torch.Tensor, tuple[int, int, int, int], tuple[int, int]]:
    g = torch.Generator().manual_seed(seed)
    H = int(torch.randint(37, 201, (1,), generator=g))
    W = int(torch.randint(53, 301, (1,), generator=g))
    img = torch.randint(0, 256, (3, H, W), generator=g, dtype=torch.uint8)
    top, left, h, w = _box(g, H, W, min_frac=0.2)
    if upscale:
        oh = int(torch.randint(h + 1, 2 * h + 10, (1,), generator=g))
        ow = int(torch.randint(w + 1, 2 * w + 10, (1,), generator=g))
    else:
        oh = max(1, h // int(torch.randint(2, 6, (1,), generator=g)))
        ow = max(1, w // int(torch.randint(2, 6, (1,), generator=g)))
    return img, (top, left, h, w), (oh, ow)


def _ref_chw(img: torch.Tensor, row: list[float], out: tuple[int, int], **kwargs) -> torch.Tensor:
    C, H, W = img.shape
    data = img.permute(1, 2, 0).contiguous().flatten()
    return resized_crop_reference(data, torch.tensor([0]), torch.tensor([[H, W, C]]), _params([row]), out,
                                  *IDENTITY, **kwargs)[0]


def _assert_uint8_near(got: torch.Tensor, exp: torch.Tensor) -> None:
    # torchvision's uint8 path rounds to uint8 between its two passes and uses
    # fixed-point weights, so off-by-one is common; more is a real difference.
    d = (got.int() - exp.int()).abs()
    assert d.max() <= 2, f"max |diff| {d.max()}"
    frac = (d <= 1).double().mean().item()
    assert frac >= 0.999, f"only {frac:.5f} within 1"


@pytest.mark.parametrize("upscale", [False, True], ids=["down", "up"])
@pytest.mark.parametrize("seed", range(4))
def test_reference_vs_torchvision_resized_crop(seed: int, upscale: bool) -> None:
    img, (top, left, h, w), (oh, ow) = _tv_case(seed, upscale)
    H, W = img.shape[1:]
    row = _geom(H, W, (oh, ow), (top, left, h, w))
    exp = TF.resized_crop(img, top, left, h, w, [oh, ow], antialias=True)
    got = _ref_chw(img, row, (oh, ow), out_dtype=torch.uint8)
    _assert_uint8_near(got, exp)
    # On float input torchvision resamples without intermediate rounding, so
    # the unquantised result must agree to float precision ...
    expf = TF.resized_crop(img.float(), top, left, h, w, [oh, ow], antialias=True)
    gotf = _ref_chw(img, row, (oh, ow), quantize=False)
    torch.testing.assert_close(gotf, expf, atol=1e-2, rtol=0)
    # ... and the uint8 result is that value rounded half up, except where it
    # lies within float error of a .5 boundary.
    d = (got.int() - (expf.clamp(0, 255) + 0.5).floor().int()).abs()
    assert d.max() <= 1 and (d == 0).double().mean() >= 0.99


@pytest.mark.parametrize("seed", range(2))
def test_reference_vs_torchvision_no_antialias(seed: int) -> None:
    img, box, out = _tv_case(seed + 10, upscale=False)
    H, W = img.shape[1:]
    expf = TF.resized_crop(img.float(), *box, list(out), antialias=False)
    gotf = _ref_chw(img, _geom(H, W, out, box), out, quantize=False, antialias=False)
    torch.testing.assert_close(gotf, expf, atol=1e-2, rtol=0)


@pytest.mark.parametrize("vertical", [False, True], ids=["hflip", "vflip"])
@pytest.mark.parametrize("upscale", [False, True], ids=["down", "up"])
def test_reference_vs_torchvision_flip(upscale: bool, vertical: bool) -> None:
    img, (top, left, h, w), (oh, ow) = _tv_case(20 + upscale, upscale)
    H, W = img.shape[1:]
    row = _geom(H, W, (oh, ow), (top, left, h, w), flip=(vertical, not vertical))
    flip = TF.vertical_flip if vertical else TF.horizontal_flip
    exp = flip(TF.resized_crop(img, top, left, h, w, [oh, ow], antialias=True))
    _assert_uint8_near(_ref_chw(img, row, (oh, ow), out_dtype=torch.uint8), exp)
    expf = flip(TF.resized_crop(img.float(), top, left, h, w, [oh, ow], antialias=True))
    torch.testing.assert_close(_ref_chw(img, row, (oh, ow), quantize=False), expf, atol=1e-2, rtol=0)


@pytest.mark.parametrize("size", [(224, 224), (61, 97), (150, 40)])
def test_reference_vs_torchvision_resize(size: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(size[0])
    img = torch.randint(0, 256, (3, 137, 211), generator=g, dtype=torch.uint8)
    exp = TF.resize(img, list(size), antialias=True)
    row = _geom(137, 211, size)
    _assert_uint8_near(_ref_chw(img, row, size, out_dtype=torch.uint8), exp)


@pytest.mark.parametrize("crop", [(24, 24), (30, 11), (9, 60)])
def test_reference_vs_torchvision_center_crop_padding(crop: tuple[int, int]) -> None:
    """CenterCrop larger than the image pads with zeros: the valid window."""
    img = _images([(3, 17, 40)], seed=1)[0]
    H, W = 17, 40
    oh, ow = crop
    row: list[float] = [0.0] * NUM_PARAMS
    for axis, (n_in, n_out) in enumerate(((H, oh), (W, ow))):
        pad = (n_out - n_in) // 2 if n_out > n_in else 0
        origin = -pad if pad else int(round((n_in - n_out) / 2.0))
        row[axis] = float(origin)
        row[2 + axis] = 1.0
        row[4 + 2 * axis], row[5 + 2 * axis] = 0.0, float(n_in)
        row[8 + 2 * axis], row[9 + 2 * axis] = float(pad), float(min(n_out, pad + n_in))
    exp = TF.center_crop(img, [oh, ow])
    got = _ref_chw(img, row, crop, out_dtype=torch.uint8)
    assert torch.equal(got, exp)


def test_reference_grayscale_replicates_channel() -> None:
    gray = _images([(23, 29, 1)], seed=2)[0]
    rgb = gray.expand(-1, -1, 3).contiguous()
    row = _geom(23, 29, (10, 12), (2, 3, 19, 21))
    g = resized_crop_reference(*_pack([gray]), _params([row]), (10, 12), *IDENTITY, quantize=False)
    c = resized_crop_reference(*_pack([rgb]), _params([row]), (10, 12), *IDENTITY, quantize=False)
    assert torch.equal(g, c)
    assert not torch.equal(g[0, 0], g[0, 0].flip(-1))  # non-trivial content


@pytest.mark.parametrize("device", [pytest.param("cpu"), pytest.param("cuda", marks=pytest.mark.cuda)])
def test_upload_gives_each_part_back_with_its_shape_dtype_and_values(device):
    """Launch metadata packed into one copy (csrc_triton._triton.upload) arrives as it left:
    numpy and torch parts, odd byte sizes next to 8-byte dtypes, a transposed view, a
    0-d tensor, an empty array and bfloat16 (which numpy lacks)."""
    import numpy as np

    from csrc_triton._triton import upload

    g = torch.Generator().manual_seed(0)
    parts = [np.arange(15, dtype=np.int64).reshape(5, 3), torch.rand(7, 9, generator=g),
             torch.tensor([True, False, True]), np.zeros((0, 3), dtype=np.int64),
             torch.tensor(-7, dtype=torch.int16), torch.rand(4, 6, generator=g).t(),
             torch.randint(0, 255, (13,), dtype=torch.uint8, generator=g), torch.rand(5, dtype=torch.float64),
             torch.rand(2, 3, generator=g).to(torch.bfloat16)]
    got = upload(parts, torch.device(device))
    assert len(got) == len(parts)
    for part, out in zip(parts, got):
        want = torch.from_numpy(part) if isinstance(part, np.ndarray) else part
        assert out.device.type == device
        assert out.dtype == want.dtype and out.shape == want.shape
        assert torch.equal(out.cpu(), want)


@pytest.mark.cuda
def test_kernel_device_affine_follows_in_place_changes() -> None:
    """scale/bias tensors on the device (as a loader passes them for every batch): a second
    launch with the same pair gives the same output, and one after an in-place change to
    either follows the new values, as the reference does."""
    images = _images([(26, 31, 3), (14, 19, 3)], seed=5)
    out_size = (9, 11)
    rows = [_geom(26, 31, out_size, (1, 2, 20, 25)), _geom(14, 19, out_size)]
    data, offsets, shapes = _pack(images)
    params = _params(rows)
    scale = torch.tensor(IMAGENET_SCALE, device="cuda")
    bias = torch.tensor(IMAGENET_BIAS, device="cuda")
    args = (data.cuda(), offsets.cuda(), shapes.cuda(), params.cuda(), out_size)
    first = fused_resized_crop(*args, scale, bias)
    again = fused_resized_crop(*args, scale, bias)
    assert torch.equal(first, again)
    for t, k in ((scale, 2.0), (bias, -3.0)):
        t.mul_(k) if t is scale else t.add_(k)
        got = fused_resized_crop(*args, scale, bias).cpu()
        exp = resized_crop_reference(data, offsets, shapes, params, out_size, scale.cpu(), bias.cpu())
        _assert_close(got, exp, scale.cpu().tolist(), quantized=True)
        assert not torch.equal(got, first.cpu())


@pytest.mark.skipif(not HAS_TRITON, reason="needs triton")
def test_kernels_reading_module_constants_are_keyed_by_the_sources():
    """Triton's disk cache does not hash module constants (``layout.NUM_PARAMS``): every kernel
    that reads them takes ``CACHE_KEY``, so a changed layout never runs a kernel compiled before."""
    import importlib

    from csrc_triton import _triton

    for module, name in (("_resized_crop_kernel", "resized_crop_kernel"), ("_finish_kernel", "finish_kernel"),
                         ("_augment_kernel", "augment_slot_kernel"), ("_augment_kernel", "image_stats_kernel")):
        fn = getattr(importlib.import_module(f"csrc_triton.{module}"), name)
        assert "CACHE_KEY" in fn.arg_names, name
    assert isinstance(_triton.cache_key(), int) and _triton.cache_key() == _triton.cache_key()
