"""Shared test utilities: small image folders and tolerance checks."""
from __future__ import annotations

import dataclasses
import io
import os

import numpy as np
import torch


def jpeg_bytes(arr: np.ndarray, quality: int = 92, **kwargs) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=quality, **kwargs)
    return buf.getvalue()


def make_folder(root, n: int = 24, classes: int = 3, seed: int = 0, lo: int = 24, hi: int = 72,
                every_444: int = 0) -> str:
    """A tiny ImageFolder of JPEGs with varied sizes (some odd), 4:2:0. With ``every_444``,
    every ``every_444``-th image (the first included) is 4:4:4."""
    from torchdali._synthetic import synthetic_image

    rng = np.random.default_rng(seed)
    root = os.fspath(root)
    for i in range(n):
        d = os.path.join(root, f"c{i % classes}")
        os.makedirs(d, exist_ok=True)
        h, w = (int(v) for v in rng.integers(lo, hi, size=2))
        subsampling = 0 if every_444 and i % every_444 == 0 else 2
        with open(os.path.join(d, f"{i:04d}.jpg"), "wb") as f:
            f.write(jpeg_bytes(synthetic_image(rng, h, w), subsampling=subsampling))
    return root


def assert_close_uint8(actual: torch.Tensor, expected: torch.Tensor, max_off: int = 2, frac_within_1: float = 0.999):
    """uint8 images agree: never more than ``max_off`` apart, and ``frac_within_1`` of pixels within 1."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    diff = (actual.to(torch.int16) - expected.to(torch.int16)).abs()
    within = (diff <= 1).double().mean().item()
    assert diff.max().item() <= max_off, f"max difference {diff.max().item()} > {max_off}"
    assert within >= frac_within_1, f"only {within:.5f} of pixels within 1"


def smooth_image(h: int, w: int, seed: int = 0) -> torch.Tensor:
    """A CHW uint8 image, smooth plus noise, so resampling errors show up (flat images hide them)."""
    g = torch.Generator().manual_seed(seed * 1000 + h * 7 + w)
    base = torch.nn.functional.interpolate(torch.rand(1, 3, 5, 5, generator=g) * 255, size=(h, w),
                                           mode="bilinear", align_corners=False)[0]
    return (base + torch.randn(3, h, w, generator=g) * 30).clamp(0, 255).to(torch.uint8)


def photo_image(h: int, w: int, seed: int = 0) -> torch.Tensor:
    """A CHW uint8 image like a photograph: smooth, mild pixel noise, no clipped regions.

    torchvision's v1 tensor ``resize`` keeps bicubic's two passes in float and clamps once;
    v2, PIL and torchdali round and clamp between the passes. Where an image saturates
    (``smooth_image``'s heavy noise) the overshoot clipped in between differs by several
    levels; on images like this one they agree within 1.
    """
    g = torch.Generator().manual_seed(seed * 1000 + h * 7 + w)
    base = torch.nn.functional.interpolate(torch.rand(1, 3, 6, 6, generator=g) * 200 + 28, size=(h, w),
                                           mode="bicubic", align_corners=False)[0]
    return (base + torch.randn(3, h, w, generator=g) * 6).clamp(0, 255).round().to(torch.uint8)


def set_options(monkeypatch, **changes) -> None:
    """For the rest of the test, torchdali's private options (``torchdali/_options.py``)
    with ``changes``, e.g. ``set_options(monkeypatch, staging_ring=False)``."""
    from torchdali import _options

    monkeypatch.setattr(_options, "OPTIONS", dataclasses.replace(_options.OPTIONS, **changes))


def drawn_params(plan, sizes, keys) -> list[dict]:
    """Each leaf's drawn parameters for images of ``sizes`` ([B, 2]) with sample ``keys``, replaying
    ``Plan._draw`` (a leaf's random stream is its position among the leaves)."""
    from torchdali import _rng
    from torchdali.transforms import _geometry as G

    g = G.BatchGeometry.identity(np.asarray(sizes))
    out = []
    for stream, t in enumerate(plan.transforms):
        u = _rng.uniform(keys, stream, t.n_uniforms) if t.n_uniforms else None
        p = t.make_params(g, u)
        out.append(p)
        if t.stage != "program":
            t.transform(g, p)
    return out


def kernel_devices() -> list:
    """The ``device`` parameters of a kernel test: ``"cpu"`` (the kernels under Triton's interpreter:
    the test module sets ``TRITON_INTERPRET=1`` before Triton is imported) and ``"cuda"`` (marked
    ``cuda``), each skipped where it cannot run."""
    import importlib.util

    import pytest

    has_triton = importlib.util.find_spec("triton") is not None
    interpret = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
    return [
        pytest.param("cpu", marks=pytest.mark.skipif(not (has_triton and interpret),
                                                     reason="kernels on CPU need triton and TRITON_INTERPRET=1")),
        pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not has_triton, reason="needs triton")]),
    ]


def run_plan(plan, images, device, backend, seed: int = 0) -> list:
    """Each sample's output (CHW, on the CPU) of ``plan`` on CHW uint8 ``images`` with ``backend``
    (``_execute.KERNEL`` or ``REFERENCE``) on ``device``, the sample keys of ``seed``'s epoch 0."""
    from torchdali import _rng
    from torchdali.transforms import _execute, _ragged
    from torchdali.transforms._plan import pack_images, to_hwc

    data, offsets, shapes = pack_images([to_hwc(im) for im in images])
    bp = plan.params(shapes[:, :2].numpy(), _rng.sample_keys(seed, 0, np.arange(len(images))))
    out = _execute.execute(plan, data.to(device), offsets.to(device), shapes.to(device), bp, backend)
    return [im.cpu() for im in _ragged.unbind(out)]


def assert_gpu_loader_matches_cpu_path(ds, value_scale: float = 255.0, **kw) -> list:
    """``td.DataLoader(ds, **kw)`` on the GPU against its CPU path: the same batch types and image
    shapes, each image within 2 (uint8 steps; a float image's difference times ``value_scale``),
    more than 1 apart on under 1% of the values. Returns the ``(gpu, cpu)`` batch pairs (the
    targets are the caller's to check)."""
    import torchdali as td
    from torchdali.transforms import _ragged

    gpu = list(td.DataLoader(ds, device="cuda", **kw))
    cpu = list(td.DataLoader(ds, device="cpu", **kw))
    assert len(gpu) == len(cpu)
    for (gi, _), (ci, _) in zip(gpu, cpu):
        assert type(gi) is type(ci)
        for a, b in zip(_ragged.unbind(gi), _ragged.unbind(ci)):
            assert a.is_cuda and a.shape == b.shape
            d = (a.cpu().double() - b.double()).abs() * (1.0 if a.dtype == torch.uint8 else value_scale)
            assert d.max().item() <= 2 + 1e-6 and (d > 1 + 1e-3).double().mean().item() < 0.01
    return list(zip(gpu, cpu))


# Note [warps against torchvision]
# torchvision builds a warp's sampling grid with a float32 bmm (``_affine_grid``,
# ``_perspective_grid``). BLAS kernels round differently from CPU to CPU (MKL's AVX-512 and
# AVX2 kernels do), so a grid coordinate can move by an ulp or two from one machine to the
# next; our reference (the kernel's twin) computes the grid elementwise, in one fixed order.
# Where the exact source coordinate is half way between two pixels (rows and columns of
# them with integer perspective corners, a shear about the pixel origin, a quarter turn of
# an image whose sides differ in parity), that ulp decides which neighbour a nearest-
# neighbour warp takes, or whether the pixel is filled: there either answer is right. A
# bilinear value that lands on .5 rounds either way for the same reason. Elsewhere the
# float32 error changes nothing.
#
# So warps compared with torchvision are exact except at these ties, and the ties are
# located independently of either implementation: from torchvision's own grid computed in
# float64. The float32 grids (torchvision's and our reference's) measured within 3.3 float32
# ulps of the image's largest coordinate (3.3 * max(h, w) * 2**-23 pixel) of that float64
# grid on these tests' warps, so within 6.6 of each other; a coordinate within 16 such ulps
# of a half is taken as a tie (``warp_tie_tolerance``).
WARP_TIE_ULPS = 16
# A comparison where ties are most of the image would test little: the tests' warps have
# at most 0.84% (integer perspective corners on ~40-pixel images).
WARP_MAX_TIE_FRAC = 0.01
# Bilinear, and other float sums torchvision takes in a CPU-dependent order (a convolution
# in oneDNN, whose kernel depends on the instruction set): values one level apart (never
# more) on at most this fraction of the values, those whose exact value is within the
# float32 error of a .5. With torchvision's grids moved by up to three ulps at random, the
# tests' bilinear warps measured at most 0.042% (and nearest ones differed only at ties).
ROUNDING_TIE_FRAC = 0.001


def warp_tie_tolerance(h: int, w: int) -> float:
    """The distance (pixels) from a half within which a warp's source coordinate is a tie."""
    return WARP_TIE_ULPS * max(h, w) * 2.0 ** -23


def affine_warp_matrix(h: int, w: int, angle: float, translate=(0.0, 0.0), scale: float = 1.0,
                       shear=(0.0, 0.0), center=None, rotate: bool = False) -> list[float]:
    """The inverse matrix (6 values) torchvision's ``affine`` (``rotate=True``: ``rotate``, whose
    angle turns the other way) builds for an ``h`` x ``w`` image with these arguments."""
    from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

    center_f = [0.0, 0.0] if center is None else [c - s * 0.5 for c, s in zip(center, (w, h))]
    if rotate:
        return _get_inverse_affine_matrix(center_f, -angle, [0.0, 0.0], 1.0, [0.0, 0.0])
    if isinstance(shear, (int, float)):
        shear = (shear, 0.0)
    return _get_inverse_affine_matrix(center_f, angle, [float(t) for t in translate], scale, list(shear))


def perspective_warp_coeffs(startpoints, endpoints) -> list[float]:
    """torchvision's 8 perspective coefficients for these corners."""
    from torchvision.transforms.v2.functional._geometry import _get_perspective_coeffs

    return _get_perspective_coeffs([[int(v) for v in p] for p in startpoints],
                                   [[int(v) for v in p] for p in endpoints])


def warp_ties(h: int, w: int, *, matrix=None, coeffs=None) -> torch.Tensor:
    """``[h, w]`` True where the source coordinate of torchvision's warp of an ``h`` x ``w``
    image (an affine ``matrix`` or perspective ``coeffs``), its grid computed in float64, is
    within ``warp_tie_tolerance(h, w)`` of half way between two pixels (Note [warps against
    torchvision])."""
    from torchvision.transforms.v2.functional._geometry import _affine_grid, _perspective_grid

    if (matrix is None) == (coeffs is None):
        raise ValueError("pass an affine matrix or perspective coefficients")
    if matrix is not None:
        theta = torch.tensor([float(v) for v in matrix], dtype=torch.float64).reshape(1, 2, 3)
        grid = _affine_grid(theta, w=w, h=h, ow=w, oh=h)[0]
    else:
        grid = _perspective_grid([float(v) for v in coeffs], ow=w, oh=h, dtype=torch.float64,
                                 device=torch.device("cpu"))[0]
    # grid_sample's unnormalisation with align_corners=False
    x = (grid[..., 0] + 1) * (w / 2) - 0.5
    y = (grid[..., 1] + 1) * (h / 2) - 0.5
    tol = warp_tie_tolerance(h, w)
    return ((x - x.floor() - 0.5).abs() < tol) | ((y - y.floor() - 0.5).abs() < tol)


def assert_warp_matches_torchvision(actual: torch.Tensor, expected: torch.Tensor, nearest: bool,
                                    ties: torch.Tensor | None = None, what: str = "") -> None:
    """A warp's ``[..., C, H, W]`` uint8 output against torchvision's (Note [warps against torchvision]).

    Nearest: every pixel is equal except where ``ties`` (``[..., H, W]``, from :func:`warp_ties`)
    is True; ties must be at most ``WARP_MAX_TIE_FRAC`` of the pixels. Bilinear:
    :func:`assert_equal_but_rounding_ties`.
    """
    assert actual.shape == expected.shape and actual.dtype == expected.dtype == torch.uint8, \
        (what, actual.shape, expected.shape, actual.dtype, expected.dtype)
    diff = (actual.to(torch.int16) - expected.to(torch.int16)).abs()
    if nearest:
        if ties is None:
            raise ValueError("a nearest-neighbour warp is compared outside its ties: pass ties=warp_ties(...)")
        ties = ties.to(diff.device).expand(diff.shape[:-3] + diff.shape[-2:])
        tie_frac = ties.double().mean().item()
        assert tie_frac <= WARP_MAX_TIE_FRAC, f"{what}: {tie_frac:.4f} of the pixels are ties, too many to test"
        off = diff.amax(dim=-3) > 0
        wrong = off & ~ties
        assert not wrong.any(), (f"{what}: {int(wrong.sum())} pixels differ that are no tie (largest difference "
                                 f"{int(diff.max())}), first at {wrong.nonzero()[0].tolist()}")
        return
    assert_equal_but_rounding_ties(actual, expected, what)


def assert_equal_but_rounding_ties(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    """uint8 results of a float sum that torchvision computes in a CPU-dependent order are
    equal, but for values one level apart (never more) on at most ``ROUNDING_TIE_FRAC`` of
    them (Note [warps against torchvision])."""
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    diff = (actual.to(torch.int16) - expected.to(torch.int16)).abs()
    frac = (diff > 0).double().mean().item()
    assert diff.max().item() <= 1, f"{what}: max difference {diff.max().item()} > 1"
    assert frac <= ROUNDING_TIE_FRAC, f"{what}: {frac:.5f} of the values differ (> {ROUNDING_TIE_FRAC})"
