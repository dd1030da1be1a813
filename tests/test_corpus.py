"""A corpus of good, odd and broken files through the loader, against PIL.

Each file either decodes to what PIL gives (orientation left alone, as
torchvision.io.decode_image does by default) or goes through the on_error
policy. Run on the CPU in CI and on the GPU with ``pytest -m cuda``.
"""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch

import torchdali as td
from torchdali import transforms as T

CROP = 16


def _encode(img, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def _smooth(h: int, w: int, seed: int = 0) -> np.ndarray:
    from torchdali._synthetic import synthetic_image

    return synthetic_image(np.random.default_rng(seed), h, w)


def build_corpus() -> list[tuple[str, bytes, np.ndarray | None, float]]:
    """(name, file bytes, expected HWC uint8 or None when it must fail, tolerance in mean |diff|)."""
    from PIL import Image

    rgb = _smooth(70, 90)
    jpg = _encode(Image.fromarray(rgb), "JPEG", quality=90)

    def pil(data: bytes):
        try:
            im = Image.open(io.BytesIO(data))
            im.load()
            return np.asarray(im.convert("RGB"))
        except Exception:
            return None

    items: list[tuple[str, bytes, np.ndarray | None, float]] = []
    for name, data, tol in [
        ("jpeg_420", jpg, 2.0),
        ("jpeg_422", _encode(Image.fromarray(rgb), "JPEG", quality=90, subsampling=1), 2.0),
        ("jpeg_444", _encode(Image.fromarray(rgb), "JPEG", quality=90, subsampling=0), 2.0),
        ("jpeg_gray", _encode(Image.fromarray(rgb[:, :, 1]), "JPEG"), 2.0),
        ("jpeg_cmyk", _encode(Image.fromarray(rgb).convert("CMYK"), "JPEG", quality=95), 3.0),
        ("jpeg_progressive", _encode(Image.fromarray(rgb), "JPEG", progressive=True), 2.0),
        ("jpeg_1x1", _encode(Image.fromarray(rgb[:1, :1]), "JPEG"), 3.0),
        ("jpeg_1x8000", _encode(Image.fromarray(np.repeat(rgb[:1, :80], 100, axis=1)), "JPEG"), 3.0),
        ("jpeg_8000x8000", _encode(Image.fromarray(np.full((8000, 8000, 3), (30, 140, 220), np.uint8)),
                                   "JPEG", quality=80), 2.0),
        ("png_rgba", _encode(Image.fromarray(np.dstack([rgb, rgb[:, :, :1]])), "PNG"), 0.0),
        ("gif", _encode(Image.fromarray(rgb).convert("P"), "GIF"), 0.0),
        ("bmp", _encode(Image.fromarray(rgb), "BMP"), 0.0),
        ("webp_lossless", _encode(Image.fromarray(rgb), "WEBP", lossless=True), 0.0),
        ("empty", b"", None),
        ("random_bytes", np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes(), None),
        ("text_named_jpg", b"this is not an image, just text in a .jpg file\n" * 20, None),
    ]:
        items.append((name, data, pil(data) if tol is not None else None, tol if tol is not None else 0.0))
    try:
        data = _encode(Image.fromarray(rgb), "JPEG", quality=90, restart_marker_blocks=2)
        items.append(("jpeg_restart", data, pil(data), 2.0))
    except TypeError:  # Pillow without restart-marker support
        pass
    # 16-bit PNG: decoders keep the high byte; PIL's RGB conversion clips instead
    g16 = (_smooth(40, 50)[:, :, 0].astype(np.uint16) * 257)
    items.append(("png_16bit_gray", _encode(Image.fromarray(g16), "PNG"),
                  np.repeat((g16 >> 8).astype(np.uint8)[:, :, None], 3, axis=2), 0.0))
    # EXIF orientation 6: left as stored, as decode_image(apply_exif_orientation=False)
    exif = Image.Exif()
    exif[0x0112] = 6
    data = _encode(Image.fromarray(rgb), "JPEG", quality=90, exif=exif.tobytes())
    items.append(("jpeg_exif_rotated", data, pil(data), 2.0))
    for frac in (0.1, 0.5, 0.9):  # truncated: PIL refuses, so must we
        items.append((f"jpeg_truncated_{frac}", jpg[: int(len(jpg) * frac)], pil(jpg[: int(len(jpg) * frac)]), 2.0))
    return items


class Corpus(torch.utils.data.Dataset):
    def __init__(self, items):
        self.items = items
        self.samples = [(f"corpus/{name}.jpg", i) for i, (name, *_rest) in enumerate(items)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i][1], i


def _center(arr: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(np.array(arr)).permute(2, 0, 1)
    import torchvision.transforms.v2.functional as TF

    return TF.center_crop(t, [CROP, CROP]).numpy()


def _record(index, path, exc):
    """on_error callable (runs in the workers): check the message, mark the sample as failed."""
    assert f"sample {index} ({path})" in str(exc) and path.startswith("corpus/"), str(exc)
    return np.zeros((4, 4, 3), np.uint8), -1000 - index


def _run_corpus(device: str, num_workers: int):
    items = build_corpus()
    failures: set[int] = set()

    loader = td.DataLoader(Corpus(items), batch_size=5, num_workers=num_workers, device=device,
                           transforms=T.Compose([T.CenterCrop(CROP)]), on_error=_record)
    got = {}
    for images, targets in loader:
        for img, t in zip(images.cpu(), targets.cpu().tolist()):
            if t >= 0:
                got[t] = img.numpy()
            else:
                failures.add(-1000 - t)
    for i, (name, _data, expected, tol) in enumerate(items):
        if expected is None:
            assert i in failures and i not in got, f"{name}: expected an error"
        else:
            assert i not in failures, f"{name} failed to decode"
            diff = np.abs(got[i].astype(int) - _center(expected).astype(int)).mean()
            assert diff <= tol + 1e-9, f"{name}: mean abs diff {diff:.3f} > {tol}"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_corpus_cpu(num_workers):
    _run_corpus("cpu", num_workers)


@pytest.mark.cuda
def test_corpus_gpu():
    _run_corpus("cuda", 2)
    torch.cuda.synchronize()


def _mutants(n: int, seed: int) -> list[bytes]:
    from PIL import Image

    rng = np.random.default_rng(seed)
    base = [_encode(Image.fromarray(_smooth(48 + 8 * k, 64, k)), "JPEG", quality=85, subsampling=k % 3)
            for k in range(4)]
    out = []
    for i in range(n):
        b = bytearray(base[i % len(base)])
        op = rng.integers(0, 4)
        if op == 0:  # flip a few bytes anywhere (headers included)
            for p in rng.integers(0, len(b), rng.integers(1, 8)):
                b[p] = int(rng.integers(0, 256))
        elif op == 1:  # truncate
            b = b[: int(rng.integers(0, len(b)))]
        elif op == 2:  # overwrite a run
            p = int(rng.integers(0, len(b)))
            b[p:p + 64] = rng.integers(0, 256, len(b[p:p + 64]), dtype=np.uint8).tobytes()
        else:  # insert junk
            p = int(rng.integers(0, len(b)))
            b[p:p] = rng.integers(0, 256, int(rng.integers(1, 32)), dtype=np.uint8).tobytes()
        out.append(bytes(b))
    return out


def _fuzz(device: str, n: int, seed: int):
    blobs = _mutants(n, seed)
    loader = td.DataLoader([(b, i) for i, b in enumerate(blobs)], batch_size=16, device=device, num_workers=2,
                           transforms=T.Compose([T.Resize((12, 12))]), on_error=_fuzz_record, timeout=60)
    delivered, errors = [], []
    for images, targets in loader:
        assert images.shape[1:] == (3, 12, 12)
        for t in targets.cpu().tolist():
            (delivered if t >= 0 else errors).append(t if t >= 0 else -1000 - t)
    assert sorted(delivered + errors) == list(range(n))  # every sample: decoded or reported, once
    return len(errors)


def _fuzz_record(index, path, exc):
    assert f"sample {index}" in str(exc), str(exc)
    return np.zeros((8, 8, 3), np.uint8), -1000 - index


def test_fuzz_cpu_bounded():
    errors = _fuzz("cpu", 160, seed=0)
    assert 0 < errors < 160  # the mutations produce both decodable and broken files


@pytest.mark.cuda
def test_fuzz_gpu_longer():
    errors = _fuzz("cuda", 2000, seed=1)
    assert 0 < errors < 2000
    torch.cuda.synchronize()
