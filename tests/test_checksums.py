"""Pinned outputs: the same seed gives bitwise the same batches, release after release.

The checksums below were taken from the loader before its internals were
reorganised (kernel stages, parameter layout, executor files); any change to the
pixels a recipe produces shows up here. A deliberate change of output (a fix in
the resampling, say) updates them in the same commit and says why.

CPU checksums hold for the plain-torch path on any machine. GPU checksums depend
on the Triton compiler and the GPU generation (contracted multiply-adds), so they
are pinned per (Triton major.minor, compute capability) and the GPU test is
skipped on a combination that has none.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

import torchdali as td
from torchdali import transforms as T

from ._helpers import jpeg_bytes

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class _Mixed(torch.utils.data.Dataset):
    """Deterministic decoded images (RGB and grayscale, odd sizes) and a few JPEGs."""

    def __init__(self, n: int = 24, jpeg_every: int = 0, bad: tuple[int, ...] = ()) -> None:
        self.n, self.jpeg_every, self.bad = n, jpeg_every, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        rng = np.random.default_rng(1000 + i)
        h, w = 20 + (i * 7) % 37, 18 + (i * 11) % 41
        if i in self.bad:
            return b"\xff\xd8 not a jpeg", i
        # smooth fields plus noise: resampling errors show, unlike on flat colour
        base = rng.uniform(0, 255, size=(3, 3, 3))
        yy, xx = np.meshgrid(np.linspace(0, 2, h), np.linspace(0, 2, w), indexing="ij")
        img = base[np.minimum(yy.astype(int), 2), np.minimum(xx.astype(int), 2)]
        img = np.clip(img + rng.normal(0, 20, size=img.shape), 0, 255).astype(np.uint8)
        if i % 5 == 3:
            img = img[:, :, 0]  # grayscale
        if self.jpeg_every and i % self.jpeg_every == 0:
            rgb = img if img.ndim == 3 else np.repeat(img[:, :, None], 3, axis=2)
            return np.frombuffer(jpeg_bytes(rgb, quality=90), dtype=np.uint8), i
        return img, i


def _recipes() -> dict:
    return {
        "train_f32": (dict(transforms=[T.RandomResizedCrop(24), T.RandomHorizontalFlip(),
                                       T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)]), {}),
        "val_u8": (dict(transforms=[T.Resize(28), T.CenterCrop(24)]), {}),
        "crop_bf16_cl": (dict(transforms=[T.Resize((30, 34)), T.RandomVerticalFlip(), T.RandomCrop(16),
                                          T.ToDtype(torch.bfloat16, scale=True)],
                              memory_format=torch.channels_last), {}),
        "pad_f16": (dict(transforms=[T.CenterCrop(40), T.Resize((20, 26)), T.ToDtype(torch.float16, scale=True),
                                     T.Normalize(MEAN, STD)]), {}),
        "jpeg_skip_u8": (dict(transforms=[T.RandomResizedCrop((20, 28), scale=(0.3, 1.0)),
                                          T.RandomHorizontalFlip()], on_error="skip"),
                         dict(jpeg_every=3, bad=(4, 13))),
    }


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def batch_checksums(recipe: str, device: str, num_workers: int = 0) -> list[str]:
    """sha256 of every batch (images, then targets) of two epochs of ``recipe``, first 16 hex digits."""
    kwargs, ds_kwargs = _recipes()[recipe]
    loader = td.DataLoader(_Mixed(**ds_kwargs), batch_size=8, shuffle=True, num_workers=num_workers, seed=123,
                           device=device, generator=torch.Generator().manual_seed(7), **kwargs)
    out = []
    try:
        for _ in range(2):
            for images, targets in loader:
                out.append(_digest(images)[:16] + ":" + _digest(targets)[:16])
    finally:
        loader.close()
    return out


CPU = {
    "crop_bf16_cl": [
        "15a4e9bc3853ba57:305a438a4cc86849",
        "2eca1676608ae87a:178eea70d1ba5e6d",
        "bb92227f1a9e41f7:3c9b48d2cd010388",
        "5d52fbb0819757aa:d1ae9881fc4d1003",
        "d66f8be327bc0a8e:108f508ad36d209d",
        "4430fa174dcb4dd4:516732a9171ebc81",
    ],
    "jpeg_skip_u8": [
        "ff422f7596a51845:305a438a4cc86849",
        "4dc030860ec13de3:7178af28f4fc4e74",
        "9718a03df4a6264e:a7a6c8bf8ac66a41",
        "52fe5b6d6ce5945c:83378b549d6cfdbb",
        "972f31dce40de859:108f508ad36d209d",
        "46b30c67903e2c83:e3c1881bdcb26056",
    ],
    "pad_f16": [
        "80392fcbd4ee4912:305a438a4cc86849",
        "17926ca9745e847c:178eea70d1ba5e6d",
        "c9e737e54c938000:3c9b48d2cd010388",
        "5b9a29cf0eac28a9:d1ae9881fc4d1003",
        "c65ccc1d3fc0195f:108f508ad36d209d",
        "43df365db85dbdd3:516732a9171ebc81",
    ],
    "train_f32": [
        "a697110c1dbaad28:305a438a4cc86849",
        "e8fb4adde61405af:178eea70d1ba5e6d",
        "e3fb9e5458fcd71b:3c9b48d2cd010388",
        "3ef710b01ce08c41:d1ae9881fc4d1003",
        "a07ad09501f86f3a:108f508ad36d209d",
        "f4d889b3f8e86d2e:516732a9171ebc81",
    ],
    "val_u8": [
        "840b3ff7e75511e1:305a438a4cc86849",
        "461cb109143cd391:178eea70d1ba5e6d",
        "57d44aa61f952904:3c9b48d2cd010388",
        "8b4adcfeb49617f3:d1ae9881fc4d1003",
        "01b8bbca329462a3:108f508ad36d209d",
        "847b45f95ee86c0b:516732a9171ebc81",
    ],
}

# (triton major.minor, compute capability) -> recipe -> checksums, from the GPU machine.
GPU: dict[tuple[str, tuple[int, int]], dict[str, list[str]]] = {
    # H200, torch 2.11, Triton 3.6
    ("3.6", (9, 0)): {
        "crop_bf16_cl": [
            "624b985928bf46d2:305a438a4cc86849",
            "7a2b1f0bf8754238:178eea70d1ba5e6d",
            "bb92227f1a9e41f7:3c9b48d2cd010388",
            "f52e2b91ff4a2284:d1ae9881fc4d1003",
            "0d90f7869cf6f330:108f508ad36d209d",
            "bc867bfa520de261:516732a9171ebc81",
        ],
        "jpeg_skip_u8": [
            "695425ce0d201471:305a438a4cc86849",
            "6b00dbf943c62e51:7178af28f4fc4e74",
            "3965163751170410:a7a6c8bf8ac66a41",
            "d24cee0b41944f2b:83378b549d6cfdbb",
            "fb802bd846f1af8f:108f508ad36d209d",
            "82c000b492553ed4:e3c1881bdcb26056",
        ],
        "pad_f16": [
            "352d00bf95a01f9f:305a438a4cc86849",
            "ee99eccd755ae1e0:178eea70d1ba5e6d",
            "c9e737e54c938000:3c9b48d2cd010388",
            "529e395f61b59bc8:d1ae9881fc4d1003",
            "cffef09380be8644:108f508ad36d209d",
            "cd3d561343073d8d:516732a9171ebc81",
        ],
        "train_f32": [
            "975986e3f5500141:305a438a4cc86849",
            "080a4f5786ee98eb:178eea70d1ba5e6d",
            "31cf9fdabf3d53c3:3c9b48d2cd010388",
            "89fecb45375b8672:d1ae9881fc4d1003",
            "9d35ea2cda1424a0:108f508ad36d209d",
            "fa974e0c7e27dc3e:516732a9171ebc81",
        ],
        "val_u8": [
            "3af2e1e3f0681673:305a438a4cc86849",
            "9366063e1975b9fe:178eea70d1ba5e6d",
            "c41ea940fcb8d05f:3c9b48d2cd010388",
            "baf91901ea69485e:d1ae9881fc4d1003",
            "e1f166b22954ed8c:108f508ad36d209d",
            "8f1091ae683fa8f2:516732a9171ebc81",
        ],
    },
}


@pytest.mark.parametrize("recipe", sorted(_recipes()))
def test_cpu_batches_are_pinned(recipe: str) -> None:
    assert batch_checksums(recipe, "cpu") == CPU[recipe]


def test_cpu_checksums_do_not_depend_on_workers() -> None:
    assert batch_checksums("jpeg_skip_u8", "cpu", num_workers=2) == CPU["jpeg_skip_u8"]


@pytest.mark.cuda
@pytest.mark.parametrize("recipe", sorted(_recipes()))
def test_gpu_batches_are_pinned(recipe: str) -> None:
    import triton

    key = (".".join(triton.__version__.split(".")[:2]), torch.cuda.get_device_capability())
    if key not in GPU:
        pytest.skip(f"no GPU checksums pinned for Triton {key[0]} on compute capability {key[1]}")
    assert batch_checksums(recipe, "cuda", num_workers=2) == GPU[key][recipe]
