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
