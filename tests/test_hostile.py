"""Hostile files and dying workers must not take the job down (CPU path).

Decompression bombs run in a subprocess under an address-space limit
(tests/_bomb_worker.py): a regression fails there with an allocation error
instead of taking the machine's memory.
"""
from __future__ import annotations

import faulthandler
import io
import json
import os
import signal
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch

import torchdali as td
from torchdali import transforms as T
from torchdali.decode import decode_cpu
from torchdali.decode._limits import (
    ImageTooLarge,
    ImplausibleHeader,
    _jpeg_min_bytes,
    _png_min_bytes,
    check_header,
    default_max_image_pixels,
    header_size,
)

from ._helpers import jpeg_bytes, make_folder

ADDRESS_SPACE_GIB = 4.0
BOMB_SIDE = 65500  # the largest size a JPEG frame header allows libjpeg to decode


def _encode(arr: np.ndarray, fmt: str, **kw) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt, **kw)
    return buf.getvalue()


def jpeg_bomb(side: int = BOMB_SIDE) -> bytes:
    """A valid 64x64 JPEG whose frame header (SOF) is edited to claim side x side."""
    data = bytearray(jpeg_bytes(np.full((64, 64, 3), 90, np.uint8)))
    sof = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, side, side)
    return bytes(data)


def png_bomb(side: int = BOMB_SIDE) -> bytes:
    """A valid 64x64 PNG whose IHDR is edited to claim side x side (CRC fixed up)."""
    data = bytearray(_encode(np.full((64, 64, 3), 90, np.uint8), "PNG"))
    struct.pack_into(">II", data, 16, side, side)
    struct.pack_into(">I", data, 29, zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def _bomb_folder(tmp_path, bomb: bytes, ext: str) -> tuple[str, int, str]:
    """15 good JPEGs and the bomb; returns (root, the bomb's index, its path)."""
    root = make_folder(tmp_path / "imgs", n=15, classes=1)
    path = os.path.join(root, "c0", f"zz_bomb.{ext}")
    with open(path, "wb") as f:
        f.write(bomb)
    ds = td.datasets.ImageFolder(root)
    index = [p for p, _ in ds.samples].index(path)
    return root, index, path


BOMBS = {"jpeg": (jpeg_bomb, "jpg"), "png": (png_bomb, "png")}
RUNS = ("raise:default", "skip:default", "callable:default", "raise:none")


@pytest.fixture(scope="module", params=sorted(BOMBS))
def bomb_runs(request, tmp_path_factory):
    """Every run of RUNS over a folder holding one bomb, in one subprocess (imports are slow)."""
    make, ext = BOMBS[request.param]
    root, index, path = _bomb_folder(tmp_path_factory.mktemp(f"bomb_{request.param}"), make(), ext)
    script = os.path.join(os.path.dirname(__file__), "_bomb_worker.py")
    proc = subprocess.run([sys.executable, script, root, str(ADDRESS_SPACE_GIB), *RUNS],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            out = json.loads(line)
            runs[out["run"]] = out
    assert set(runs) == set(RUNS), proc.stdout[-3000:] + proc.stderr[-3000:]
    return runs, index, path


@pytest.mark.parametrize("on_error", ["raise", "skip", "callable"])
def test_bomb_is_a_sample_error_not_a_dead_worker(bomb_runs, on_error):
    runs, index, path = bomb_runs
    out = runs[f"{on_error}:default"]
    claim = f"{BOMB_SIDE}x{BOMB_SIDE}"
    limit = f"max_image_pixels={default_max_image_pixels():,}"
    if on_error == "raise":
        err = out["error"]
        assert err is not None and err["type"] == "SampleError", out
        # torch re-raises a worker's exception from its message, which names the sample
        assert f"sample {index} ({path})" in err["message"]
        assert claim in err["message"] and limit in err["message"], err["message"]
        return
    assert out["error"] is None, out["error"]
    assert out["batches"] == [[4, 3, 16, 16]] * 4
    assert out["skipped"] == 1
    if on_error == "callable":
        (call,) = out["calls"]
        assert call["index"] == index and call["path"] == path and call["type"] == "SampleError"
        assert claim in call["message"] and limit in call["message"]


def test_forged_header_is_refused_even_without_a_pixel_limit(bomb_runs):
    runs, index, path = bomb_runs
    err = runs["raise:none"]["error"]
    assert err is not None and err["type"] == "SampleError" and f"sample {index} ({path})" in err["message"], err
    assert "forged header" in err["message"] and f"{BOMB_SIDE}x{BOMB_SIDE}" in err["message"]


def test_max_image_pixels_limit_and_none(tmp_path):
    root = make_folder(tmp_path / "s", n=8, classes=1, lo=40, hi=41)  # every image 40x40
    ds = td.datasets.ImageFolder(root)
    tf = T.Compose([T.Resize((8, 8))])
    with pytest.raises(td.SampleError, match=r"sample 0 .*40x40 pixels \(1,600\), more than max_image_pixels=1,599"):
        list(td.DataLoader(ds, batch_size=4, transforms=tf, device="cpu", max_image_pixels=1599))
    assert len(list(td.DataLoader(ds, batch_size=4, transforms=tf, device="cpu", max_image_pixels=1600))) == 2
    loader = td.DataLoader(ds, batch_size=4, transforms=tf, device="cpu", max_image_pixels=None)
    assert loader.max_image_pixels is None and len(list(loader)) == 2
    assert td.DataLoader(ds, batch_size=4, transforms=tf, device="cpu").max_image_pixels == default_max_image_pixels()
    with pytest.raises(ValueError, match="max_image_pixels"):
        td.DataLoader(ds, batch_size=4, transforms=tf, device="cpu", max_image_pixels=0)


def test_header_size_of_every_format():
    rgb = np.random.default_rng(0).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    from PIL import Image

    encoded = {
        "jpeg": _encode(rgb, "JPEG"),
        "png": _encode(rgb, "PNG"),
        "gif": _encode(np.asarray(Image.fromarray(rgb).convert("P")), "GIF"),
        "bmp": _encode(rgb, "BMP"),
        "webp": _encode(rgb, "WEBP", lossless=True),
        "tiff": _encode(rgb, "TIFF"),
        "ppm": _encode(rgb, "PPM"),
    }
    for name, data in encoded.items():
        h = header_size(data)
        assert (h.height, h.width) == (37, 53), name
        with pytest.raises(ImageTooLarge, match="37x53 pixels .* more than max_image_pixels=1,000"):
            check_header(h, len(data), 1000)
        check_header(h, len(data), 37 * 53)
        with pytest.raises(ImageTooLarge):  # decode_cpu refuses too when given a limit
            decode_cpu(data, max_pixels=1000)
        assert tuple(decode_cpu(data, max_pixels=37 * 53).shape) == (37, 53, 3)
    assert header_size(b"not an image at all").height == 0
    check_header(header_size(b"\xff\xd8\xff garbage"), 12, 1)  # unreadable: the decoder says why


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_length_bound_passes_flat_quality_1_jpegs_and_pngs(mode):
    """The floors hold for the most compressible files there are: flat images at
    quality 1 (optimised Huffman tables, progressive, every subsampling) and flat
    PNGs at the highest zlib level."""
    for h, w in [(1, 1), (8, 8), (33, 17), (2, 5000), (1000, 1000), (3000, 4000)]:
        arr = np.full((h, w, 3) if mode == "RGB" else (h, w), 128, np.uint8)
        variants = [_encode(arr, "JPEG", quality=1, **kw) for kw in (
            {}, {"optimize": True}, {"progressive": True}, {"progressive": True, "optimize": True},
            {"subsampling": 0, "optimize": True}, {"subsampling": 2, "optimize": True})]
        variants.append(_encode(arr, "PNG", optimize=True, compress_level=9))
        for data in variants:
            check_header(header_size(data), len(data), None)
    one_bit = _encode(np.zeros((4000, 4000), bool), "PNG", optimize=True)
    check_header(header_size(one_bit), len(one_bit), None)


def test_length_bound_refuses_truncated_and_forged_files():
    data = _encode(np.full((2000, 2000, 3), 128, np.uint8), "JPEG", quality=1, optimize=True)
    head = header_size(data)
    floor = 2 * _jpeg_min_bytes(head.jpeg)
    assert len(data) > 2 * floor  # the real file is far above the floor ...
    check_header(head, floor // 2 + 1, None)
    with pytest.raises(ImplausibleHeader, match="2000x2000"):  # ... and a stump far below it is refused
        check_header(head, floor // 2 - 1, None)
    assert _png_min_bytes(65500, 65500, 24) * 2 > 12_000_000
    for bomb in (jpeg_bomb(), png_bomb()):
        with pytest.raises(ImplausibleHeader, match="forged header"):
            check_header(header_size(bomb), len(bomb), None)
        with pytest.raises(ImageTooLarge):
            check_header(header_size(bomb), len(bomb), default_max_image_pixels())


def test_repo_images_pass_the_header_checks(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True).stdout.split()
    images = [f for f in files if f.lower().endswith((".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif",
                                                      ".tiff"))]
    made = make_folder(tmp_path / "m", n=30)
    images += [os.path.join(d, f) for d, _, fs in os.walk(made) for f in fs]
    for name in images:
        with open(os.path.join(root, name), "rb") as f:
            data = f.read()
        check_header(header_size(data), len(data), default_max_image_pixels())


def test_fuzzed_jpegs_end_as_an_image_or_a_sample_error_on_the_cpu_path():
    from torchdali._executor._worker import PrepareBatch
    from torchdali.transforms import compile_transforms

    from ._fuzz import fuzz_corpus

    prepare = PrepareBatch(compile_transforms(T.Compose([T.Resize((8, 8))])), "cpu",
                           max_image_pixels=default_max_image_pixels())
    decoded = named = 0
    for i, (what, data) in enumerate(fuzz_corpus()):
        try:
            loaded = prepare.load(np.frombuffer(data, np.uint8).copy(), i, f"mem://{i}")
        except td.SampleError as e:
            assert str(e).startswith(f"sample {i} (mem://{i}): "), what
            named += 1
            continue
        assert loaded.payload.dim() == 3 and loaded.payload.shape[2] == 3, what
        decoded += 1
    assert decoded > 100 and named > 100, (decoded, named)


def test_animated_gif_decodes_only_its_first_frame(monkeypatch):
    """Only the first frame of an animation is decoded: every frame at the canvas size
    would claim memory the header check cannot see."""
    from PIL import GifImagePlugin, Image

    frames = [Image.fromarray(np.full((300, 400, 3), 40 * k, np.uint8)).convert("P") for k in range(6)]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])

    seen = []
    seek = GifImagePlugin.GifImageFile.seek

    def recorded_seek(self, frame):
        seen.append(frame)
        return seek(self, frame)

    monkeypatch.setattr(GifImagePlugin.GifImageFile, "seek", recorded_seek)
    out = decode_cpu(buf.getvalue())
    assert max(seen, default=0) == 0
    assert tuple(out.shape) == (300, 400, 3) and int(out[0, 0, 0]) == 0


# -- a worker that dies ---------------------------------------------------------

class KillerDataset(torch.utils.data.Dataset):
    """Sixteen samples with file-like paths; reading ``victim`` kills the worker."""

    def __init__(self, victim: int) -> None:
        self.victim = victim

    def __len__(self) -> int:
        return 16

    def path_of(self, index: int) -> str:
        return f"/data/train/img_{index:03d}.jpg"

    def __getitem__(self, index: int):
        if index == self.victim:
            os.kill(os.getpid(), signal.SIGKILL)
        return np.zeros((8, 8, 3), np.uint8), index


@pytest.fixture()
def watchdog():
    """A hang fails the run (traceback dump and exit) instead of blocking CI for good."""
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.mark.parametrize("context", [None, "spawn"])
def test_killed_worker_names_the_batch_it_was_building(watchdog, context):
    ds = KillerDataset(victim=9)
    loader = td.DataLoader(ds, batch_size=4, num_workers=2, transforms=T.Compose([T.CenterCrop(4)]),
                           device="cpu", multiprocessing_context=context)
    with pytest.raises(td.WorkerDied) as info:
        for _ in loader:
            pass
    err = info.value
    assert isinstance(err, td.SampleError)
    assert [i for i, _ in err.samples] == [8, 9, 10, 11]
    assert err.samples[1] == (9, "/data/train/img_009.jpg")
    assert err.index == 8 and err.path == "/data/train/img_008.jpg"
    assert err.exitcode == -signal.SIGKILL and err.worker_id in (0, 1)
    msg = str(err)
    assert msg.startswith("samples 8 (/data/train/img_008.jpg), 9 (/data/train/img_009.jpg)")
    assert "was killed by SIGKILL" in msg
    # torch's own words come after ours: its timeout path says the worker "exited
    # unexpectedly", its SIGCHLD handler (when the signal lands first) "is killed by signal"
    assert "exited unexpectedly" in msg or "is killed by signal" in msg
    assert isinstance(err.__cause__, RuntimeError)
    if context is None:  # the loader still works afterwards (spawned workers are slow to start: once is enough)
        loader.dataset.victim = -1
        assert len(list(loader)) == 4


def test_worker_record_is_cleared_between_batches():
    from torchdali._executor._records import WorkerRecords

    rec = WorkerRecords(2, capacity=3)
    assert rec.read(0) is None and rec.read(5) is None
    rec.begin([1, 2])  # the main process keeps no record
    assert rec.read(0) is None
    row = rec.table.numpy()[1]
    row[:] = [1, 5, 7, 8, 9]  # as worker 1 would leave it: building, 5 samples, the first 3 kept
    assert rec.read(1).indices == [7, 8, 9] and rec.read(1).total == 5


# -- the GPU path's decode groups (the GPU tests run them for real) ----------------

def test_decode_groups_split_a_batch_at_the_cap():
    from torchdali._executor._decode import DECODE_GROUP_BYTES, decode_groups

    shapes = np.array([[10, 10, 3]] * 3 + [[100, 100, 3]] + [[10, 10, 3]] * 2 + [[100, 100, 3]], dtype=np.int64)
    assert decode_groups(shapes) == [(0, 7)]  # fits: one group, the whole batch
    assert decode_groups(shapes, cap=32_000) == [(0, 6), (6, 7)]
    assert decode_groups(shapes, cap=1) == [(k, k + 1) for k in range(7)]  # oversized images stand alone
    assert decode_groups(np.zeros((0, 3), np.int64)) == [(0, 0)]
    assert DECODE_GROUP_BYTES >= 3 * default_max_image_pixels()  # the largest allowed image fits one group


def test_sub_batch_replacements_carry_back():
    from torchdali._executor._decode import merge_sub_batch, sub_batch
    from torchdali._executor._wire import PackedBatch, Skipped

    n = 6
    batch = PackedBatch(seed=0, epoch=0, indices=np.arange(n), positions=np.arange(n) + 100,
                        paths=[f"p{i}" for i in range(n)], params=torch.zeros(n, 4),
                        targets=torch.arange(n), has_target=True, kinds=np.zeros(n, np.int8),
                        offsets=np.arange(n) * 10, lengths=np.full(n, 10), shapes=np.ones((n, 3), np.int64),
                        spares=["s0", "s1"])
    sub = sub_batch(batch, 2, 5)
    assert sub.indices.tolist() == [2, 3, 4] and sub.offsets.tolist() == [20, 30, 40] and sub.skipped == []
    # what GpuDecoder._replace does to sample 1 of the group
    sub.indices[1], sub.positions[1], sub.paths[1] = 77, 777, "spare"
    sub.params = sub.params.clone()
    sub.params[1] = 9
    sub.targets[1] = -1
    sub.spares = ["s1"]
    sub.skipped.append(Skipped(3, "p3", "bad"))
    merge_sub_batch(batch, sub, 2, 5)
    assert batch.indices.tolist() == [0, 1, 2, 77, 4, 5] and batch.positions[3] == 777
    assert batch.paths[3] == "spare" and batch.targets.tolist() == [0, 1, 2, -1, 4, 5]
    assert batch.params[3].tolist() == [9, 9, 9, 9] and batch.params[2].tolist() == [0, 0, 0, 0]
    assert batch.spares == ["s1"] and batch.skipped == [Skipped(3, "p3", "bad")]
