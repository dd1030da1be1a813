"""Bad-sample policy, exact resume, shutdown (CPU path; the GPU path shares the code above the executor)."""
from __future__ import annotations

import logging
import os
import threading
import time

import numpy as np
import pytest
import torch

import torchdali as td
from torchdali import transforms as T

from ._helpers import make_folder

TF = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])


@pytest.fixture()
def bad_folder(tmp_path):
    root = make_folder(tmp_path / "imgs", n=20, classes=2)
    ds = td.datasets.ImageFolder(root)
    bad = {3: b"", 11: b"\xff\xd8\xff\xe0 garbage that is not a jpeg"}
    for idx, payload in bad.items():
        with open(ds.samples[idx][0], "wb") as f:
            f.write(payload)
    return root, bad


@pytest.mark.parametrize("num_workers", [0, 2])
def test_skip_keeps_batch_size_logs_once_and_counts(bad_folder, num_workers, caplog):
    root, bad = bad_folder
    ds = td.datasets.ImageFolder(root)
    loader = td.DataLoader(ds, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0),
                           num_workers=num_workers, transforms=TF, device="cpu", on_error="skip", seed=1)
    with caplog.at_level(logging.WARNING, logger="torchdali"):
        for _ in range(2):
            sizes = [images.shape[0] for images, _ in loader]
            assert sizes == [4] * 5
    assert loader.stats().epochs[0].skipped == 2 and loader.stats().epochs[1].skipped == 2
    logged = [r.getMessage() for r in caplog.records if "skipped bad sample" in r.getMessage()]
    assert len(logged) == 2  # once per bad sample, not once per epoch
    for idx in bad:
        assert any(f"sample {idx} ({ds.samples[idx][0]})" in m for m in logged)


def test_skip_replaces_more_bad_files_in_one_batch_than_four(tmp_path):
    """A large batch carries more spares than the four a small one gets: 1% bad files in
    batches of 256 put more than four in one batch one time in eight. Here 6 of a
    batch of 128 (8 spares), in every one of 4 epochs."""
    from torchdali._executor._tags import NUM_SPARES, num_spares

    assert num_spares(4) == NUM_SPARES == 4 and num_spares(128) == 8 and num_spares(256) == 16
    root = make_folder(tmp_path / "imgs", n=128, classes=2, lo=16, hi=24)
    ds = td.datasets.ImageFolder(root)
    bad = [5, 17, 40, 77, 90, 121]
    for idx in bad:
        with open(ds.samples[idx][0], "wb") as f:
            f.write(b"")
    loader = td.DataLoader(ds, batch_size=128, transforms=TF, device="cpu", on_error="skip", seed=3)
    for _ in range(4):
        (images, targets), = list(loader)
        assert images.shape[0] == 128
    assert [e.skipped for e in loader.stats().epochs] == [6] * 4


def test_skip_is_deterministic_across_num_workers(bad_folder):
    root, _ = bad_folder
    ds = td.datasets.ImageFolder(root)
    runs = []
    for nw in (0, 2):
        loader = td.DataLoader(ds, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0),
                               num_workers=nw, transforms=TF, device="cpu", on_error="skip", seed=1)
        runs.append([(x, y) for x, y in loader])
    for (xa, ya), (xb, yb) in zip(*runs):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_callable_policy_gets_index_path_exception_and_can_replace(bad_folder):
    root, bad = bad_folder
    ds = td.datasets.ImageFolder(root)
    calls = []

    def policy(index, path, exc):
        calls.append((index, path, type(exc).__name__))
        return np.full((20, 20, 3), 7, dtype=np.uint8), -1

    loader = td.DataLoader(ds, batch_size=5, transforms=T.Compose([T.Resize((8, 8))]), device="cpu",
                           on_error=policy)
    batches = list(loader)
    assert sorted(c[0] for c in calls) == sorted(bad)
    assert all(c[1] == ds.samples[c[0]][0] and c[2] == "SampleError" for c in calls)
    images = torch.cat([x for x, _ in batches])
    targets = torch.cat([y for _, y in batches])
    for idx in bad:
        assert targets[idx] == -1 and (images[idx] == 7).all()


def test_raise_is_the_default_and_bad_policy_is_rejected(bad_folder):
    root, _ = bad_folder
    ds = td.datasets.ImageFolder(root)
    with pytest.raises(td.SampleError, match="sample 3"):
        list(td.DataLoader(ds, batch_size=4, transforms=TF, device="cpu"))
    with pytest.raises(ValueError, match="on_error"):
        td.DataLoader(ds, batch_size=4, transforms=TF, device="cpu", on_error="ignore")


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("generator", [True, False])
def test_resume_mid_epoch_is_bitwise_identical(tmp_path, num_workers, generator):
    root = make_folder(tmp_path / "r", n=22)
    ds = td.datasets.ImageFolder(root)

    def make():
        return td.DataLoader(ds, batch_size=3, shuffle=True, num_workers=num_workers, transforms=TF,
                             device="cpu", seed=9,
                             generator=torch.Generator().manual_seed(4) if generator else None)

    torch.manual_seed(123)
    full = make()
    reference = [b for _ in range(2) for b in full]  # two epochs, uninterrupted

    torch.manual_seed(123)
    first = make()
    it = iter(first)
    got = [next(it) for _ in range(4)]
    state = first.state_dict()
    del it
    torch.manual_seed(999)  # the resumed process starts from a different global RNG
    resumed = make()
    resumed.load_state_dict(state)
    got += list(resumed)  # rest of epoch 0
    got += list(resumed)  # epoch 1
    assert len(got) == len(reference)
    for (xa, ya), (xb, yb) in zip(got, reference):
        assert torch.equal(ya, yb) and torch.equal(xa, xb)


def test_state_dict_between_epochs_resumes_next_epoch(tmp_path):
    root = make_folder(tmp_path / "e", n=10)
    ds = td.datasets.ImageFolder(root)

    def make():
        return td.DataLoader(ds, batch_size=4, shuffle=True, transforms=TF, device="cpu", seed=2,
                             generator=torch.Generator().manual_seed(6))

    a = make()
    list(a)
    state = a.state_dict()
    expected = list(a)
    b = make()
    b.load_state_dict(state)
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(list(b), expected))


def test_a_state_dict_saved_with_a_cpu_decode_share_still_loads(tmp_path):
    """Loaders once had a CPU decode share, and their ``state_dict()`` a "cpu_share" key;
    such a state still resumes (the key is ignored)."""
    ds = td.datasets.ImageFolder(make_folder(tmp_path / "s", n=14))

    def make():
        return td.DataLoader(ds, batch_size=3, shuffle=True, transforms=TF, device="cpu", seed=5,
                             generator=torch.Generator().manual_seed(8))

    reference = list(make())
    first = make()
    it = iter(first)
    got = [next(it) for _ in range(2)]
    state = first.state_dict()
    assert "cpu_share" not in state
    del it
    resumed = make()
    resumed.load_state_dict({**state, "cpu_share": 0.25})
    got += list(resumed)
    assert len(got) == len(reference)
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(got, reference))


class SlowDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        time.sleep(0.01)
        return np.zeros((8, 8, 3), dtype=np.uint8), i


def _ends_within(workers, seconds: float) -> float:
    t0 = time.perf_counter()
    while any(w.is_alive() for w in workers) and time.perf_counter() - t0 < seconds:
        time.sleep(0.02)
    assert not any(w.is_alive() for w in workers), "a worker outlived its iterator"
    return time.perf_counter() - t0


def test_break_exception_and_keyboard_interrupt_end_cleanly_within_5s():
    loader = td.DataLoader(SlowDataset(), batch_size=4, num_workers=2, transforms=T.Compose([T.CenterCrop(4)]),
                           device="cpu")

    def consume(stop_at, box, exc=None):
        it = iter(loader)
        workers = list(it._it._workers)
        box.extend(workers)
        assert len(workers) == 2 and all(w.is_alive() for w in workers)
        try:
            for k, _ in enumerate(it):
                if k == stop_at:
                    if exc is not None:
                        raise exc
                    break
        finally:
            del it
        return workers

    import gc

    for exc in (None, ValueError("boom in the training step"), KeyboardInterrupt()):
        workers: list = []
        try:
            consume(2, workers, exc)
        except (ValueError, KeyboardInterrupt) as e:
            assert e is exc
            del e
        gc.collect()
        assert _ends_within(workers, 5.0) < 5.0
    assert not [t for t in threading.enumerate() if t.name.startswith("torchdali")]


def test_killed_worker_raises_clear_error_quickly():
    import signal

    loader = td.DataLoader(SlowDataset(), batch_size=4, num_workers=2, transforms=T.Compose([T.CenterCrop(4)]),
                           device="cpu")
    it = iter(loader)
    next(it)
    inner = it._it
    os.kill(inner._workers[0].pid, signal.SIGKILL)
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="worker"):
        for _ in range(1000):
            next(it)
    assert time.perf_counter() - t0 < 5


def test_entropy_data_check_accepts_valid_jpegs_and_flags_overwritten_ones():
    from PIL import Image
    import io

    from torchdali._synthetic import synthetic_image
    from torchdali.decode._jpeg_defects import entropy_data_ok

    rng = np.random.default_rng(0)
    arr = synthetic_image(rng, 90, 130)
    variants = []
    for kw in ({"subsampling": 0}, {"subsampling": 1}, {"subsampling": 2}, {"progressive": True},
               {"optimize": True}, {"restart_marker_blocks": 3}):
        buf = io.BytesIO()
        try:
            Image.fromarray(arr).save(buf, format="JPEG", quality=90, **kw)
        except TypeError:
            continue
        variants.append(buf.getvalue())
    buf = io.BytesIO()
    Image.fromarray(arr[:, :, 0]).save(buf, format="JPEG")
    variants.append(buf.getvalue())
    for v in variants:
        assert entropy_data_ok(np.frombuffer(v, np.uint8))
    flagged = 0
    for seed in range(20):
        v = bytearray(variants[2])
        sos = v.find(b"\xff\xda")
        r = np.random.default_rng(seed)
        start = sos + 30 + int(r.integers(0, 500))
        v[start:start + 800] = r.integers(0, 256, 800, dtype=np.uint8).tobytes()
        flagged += not entropy_data_ok(np.frombuffer(bytes(v), np.uint8))
    assert flagged >= 19


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("persistent", [False, True])
def test_host_memory_flat_over_50_epochs(tmp_path, persistent):
    root = make_folder(tmp_path / "m", n=24)
    loader = td.DataLoader(td.datasets.ImageFolder(root), batch_size=6, shuffle=True, num_workers=2,
                           persistent_workers=persistent, transforms=TF, device="cpu", seed=0)
    rss = []
    for epoch in range(50):
        for images, _ in loader:
            images.sum()
        rss.append(_rss_bytes())
    growth = max(rss[10:]) - rss[10]
    assert growth < 16 << 20, f"RSS grew by {growth / 2**20:.1f} MiB between epochs 10 and 50"
    assert len(loader.stats().epochs) == 50


class _Batch:
    """Stands in for a GPU batch held in a frame's locals."""


def test_a_kept_sample_error_does_not_keep_the_frames_it_passed_through():
    import gc
    import weakref

    from torchdali.errors import without_frames

    def decode(data: bytes) -> None:
        try:
            raise ValueError("bad huffman code")
        except ValueError:
            raise td.SampleError.for_sample(3, "/d/x.jpg", "cannot decode image", "bad huffman code") from None

    def process(kept: list) -> weakref.ref:
        batch = _Batch()  # a local of the frame the error passes through, as the executor's output is
        try:
            decode(b"")
        except td.SampleError as err:
            kept.append(without_frames(err) if strip else err)
        return weakref.ref(batch)

    gc.disable()  # only reference counts may free the batch: a cycle must not be needed
    try:
        for strip, freed in ((False, False), (True, True)):  # the control, then the helper
            kept: list = []
            ref = process(kept)
            assert (ref() is None) is freed
            err = kept[0]
            assert str(err).startswith("sample 3 (/d/x.jpg): cannot decode image") and err.index == 3
            del kept, err
    finally:
        gc.enable()
