"""The GPU path end to end (run on a GPU machine: pytest -m cuda)."""
from __future__ import annotations

import io
import os

import numpy as np
import pytest
import torch

import torchdali as td
from torchdali import transforms as T
from torchdali._torch_compat import persistent_iterator, worker_processes

from ._helpers import jpeg_bytes, make_folder, set_options

pytestmark = pytest.mark.cuda

RECIPE = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip()])


def _batches(loader):
    out = []
    for images, targets in loader:
        out.append((images.cpu(), targets.cpu()))
    return out


def _mean_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().mean().item()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("gpu"), n=40, lo=60, hi=180)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_gpu_output_matches_cpu_path_with_same_seed(folder, num_workers):
    ds = td.datasets.ImageFolder(folder)
    kw = dict(batch_size=8, shuffle=True, num_workers=num_workers, transforms=RECIPE, seed=3)
    gpu = td.DataLoader(ds, device="cuda", generator=torch.Generator().manual_seed(0), **kw)
    cpu = td.DataLoader(ds, device="cpu", generator=torch.Generator().manual_seed(0), **kw)
    g, c = _batches(gpu), _batches(cpu)
    assert len(g) == len(c) == len(gpu)
    for (gi, gt), (ci, ct) in zip(g, c):
        assert torch.equal(gt, ct)
        assert gi.shape == ci.shape == (8, 3, 48, 48) and gi.dtype == torch.uint8
        for k in range(gi.shape[0]):
            # nvJPEG and libjpeg-turbo differ by about a level; the geometry must be identical
            assert _mean_abs(gi[k], ci[k]) < 2.5, k


@pytest.mark.parametrize("min_cpus", [1, 10 ** 6], ids=["staging-thread", "executor-thread"])
def test_decode_on_either_thread_gives_the_cpu_paths_batches(folder, monkeypatch, min_cpus):
    """A batch decoded on the staging thread (ahead of the executor's kernels) or on the executor
    thread: the same batches as the CPU path, over two epochs (the decode buffers in turn)."""
    from torchdali._executor import _executor

    monkeypatch.setattr(_executor, "DECODE_AHEAD_MIN_CPUS", min_cpus)
    ds = td.datasets.ImageFolder(folder)
    kw = dict(batch_size=4, shuffle=True, num_workers=2, transforms=RECIPE, seed=5, persistent_workers=True)
    gpu = td.DataLoader(ds, device="cuda", generator=torch.Generator().manual_seed(0), **kw)
    cpu = td.DataLoader(ds, device="cpu", generator=torch.Generator().manual_seed(0), **kw)
    try:
        for _ in range(2):
            g, c = _batches(gpu), _batches(cpu)
            assert len(g) == len(c) == 10
            for (gi, gt), (ci, ct) in zip(g, c):
                assert torch.equal(gt, ct)
                assert all(_mean_abs(gi[k], ci[k]) < 2.5 for k in range(gi.shape[0]))
        ex = next(iter(gpu._runtime.executors.values()))
        assert ex.decode_ahead == (min_cpus == 1)
    finally:
        gpu.close()
        cpu.close()


def test_float_normalized_channels_last_output_on_device(folder):
    ds = td.datasets.ImageFolder(folder)
    tf = T.Compose([T.Resize(64), T.CenterCrop(56), T.ToDtype(torch.bfloat16, scale=True),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    gpu = td.DataLoader(ds, batch_size=16, transforms=tf, device="cuda", memory_format=torch.channels_last)
    cpu = td.DataLoader(ds, batch_size=16, transforms=tf, device="cpu")
    for (gi, gt), (ci, ct) in zip(gpu, cpu):
        assert gi.is_cuda and gt.is_cuda and gi.dtype == torch.bfloat16
        assert gi.is_contiguous(memory_format=torch.channels_last)
        assert _mean_abs(gi.cpu(), ci) < 0.05


def _cmyk_jpeg(arr: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).convert("CMYK").save(buf, format="JPEG", quality=92)
    return buf.getvalue()


def _png(arr: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def test_png_and_cmyk_fall_back_to_cpu_inside_a_gpu_batch(tmp_path):
    from torchdali._synthetic import synthetic_image

    rng = np.random.default_rng(1)
    files = []
    for i in range(12):
        arr = synthetic_image(rng, 70 + i, 90 - i)
        kind = ("jpg", "png", "cmyk", "gray")[i % 4]
        data = {"jpg": lambda: jpeg_bytes(arr), "png": lambda: _png(arr), "cmyk": lambda: _cmyk_jpeg(arr),
                "gray": lambda: jpeg_bytes(arr[:, :, 0])}[kind]()
        path = tmp_path / f"{i:02d}_{kind}.{ 'png' if kind == 'png' else 'jpg'}"
        path.write_bytes(data)
        files.append((str(path), i))
    ds = td.datasets.FileList(files)
    tf = T.Compose([T.Resize((40, 44))])
    loader = td.DataLoader(ds, batch_size=12, transforms=tf, device="cuda")
    g = _batches(loader)
    c = _batches(td.DataLoader(ds, batch_size=12, transforms=tf, device="cpu"))
    e = loader.stats().last
    # PNG and CMYK go to the CPU in the workers; the JPEGs and grayscale JPEGs to nvJPEG
    assert e.decoded_cpu == 6
    assert e.decoded_hardware + e.decoded_hybrid + e.decoded_one_by_one == 6
    assert "one by one, 6 CPU" in loader.stats().summary()  # the decode routes, not a time in seconds
    for k in range(12):
        limit = 1.0 if k % 4 in (1, 2) else 2.5  # PNG/CMYK decode on the CPU in both paths
        assert _mean_abs(g[0][0][k], c[0][0][k]) < limit, files[k]


def _overwrite_scan_middle(path: str) -> bytes:
    """Overwrite the middle third of a JPEG's compressed data with random bytes, as a bad
    disk block would, keeping the header and EOI (nothing looks wrong from outside);
    returns the good bytes."""
    good = open(path, "rb").read()
    sos = good.find(b"\xff\xda")
    cut = (len(good) - sos) // 3
    noise = bytes(np.random.default_rng(0).integers(0, 256, cut, dtype=np.uint8))
    open(path, "wb").write(good[: sos + cut] + noise + good[sos + 2 * cut:])
    return good


def test_corrupt_jpeg_names_the_sample_and_the_decoder_keeps_working(tmp_path):
    root = make_folder(tmp_path / "c", n=16, classes=1, lo=60, hi=120)
    ds = td.datasets.ImageFolder(root)
    victim = ds.samples[9][0]
    good = _overwrite_scan_middle(victim)
    loader = td.DataLoader(ds, batch_size=4, transforms=T.Compose([T.Resize((32, 32))]), device="cuda")
    cpu = td.DataLoader(ds, batch_size=4, transforms=T.Compose([T.Resize((32, 32))]), device="cpu")
    seen = 0
    with pytest.raises(td.SampleError) as info:
        for _ in loader:
            seen += 1
    assert "sample 9" in str(info.value) and victim in str(info.value)
    assert seen == 2  # batches before the bad one were delivered
    open(victim, "wb").write(good)
    for (gi, _), (ci, _) in zip(_batches(loader), _batches(cpu)):  # same decoder, next epoch
        for k in range(gi.shape[0]):
            assert _mean_abs(gi[k], ci[k]) < 2.5
    torch.cuda.synchronize()  # the CUDA context is still healthy


def test_skipped_files_on_the_gpu_do_not_keep_batches_alive(tmp_path):
    # a sample nvJPEG and then the CPU refuse is skipped on the GPU; its error must not keep
    # the executor's frames, and with them the batch's output, alive until a collection
    import gc

    root = make_folder(tmp_path / "c", n=16, classes=1, lo=60, hi=120)
    ds = td.datasets.ImageFolder(root)
    _overwrite_scan_middle(ds.samples[5][0])
    loader = td.DataLoader(ds, batch_size=8, transforms=T.Resize((64, 64)), device="cuda", on_error="skip")
    allocated = []
    gc.disable()
    try:
        for _ in range(4):
            for images, _ in loader:
                pass
            del images
            torch.cuda.synchronize()
            allocated.append(torch.cuda.memory_allocated())
        skipped = loader.stats().last.skipped
    finally:
        gc.enable()
    assert skipped == 1
    assert max(allocated[1:]) - min(allocated[1:]) < 8 * 3 * 64 * 64, allocated  # not one batch more


def test_gpu_and_host_memory_flat_over_50_epochs(folder):
    import gc

    gc.collect()  # earlier tests' loaders, freed by a collection during this one, would look like a change
    ds = td.datasets.ImageFolder(folder)
    loader = td.DataLoader(ds, batch_size=8, num_workers=2, persistent_workers=True,
                           transforms=T.Compose([RECIPE, T.ToDtype(torch.float32, scale=True)]), device="cuda")
    allocated, rss = [], []
    for epoch in range(50):
        for images, _ in loader:
            images.sum()
        torch.cuda.synchronize()
        allocated.append(torch.cuda.memory_allocated())
        with open("/proc/self/statm") as f:
            rss.append(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
    reserved = torch.cuda.memory_reserved()
    assert max(allocated[2:]) - min(allocated[2:]) <= 1 << 20, allocated
    assert max(rss[10:]) - rss[10] < 32 << 20, [r >> 20 for r in rss]
    for _ in loader:
        pass
    assert torch.cuda.memory_reserved() <= reserved + (8 << 20)


def test_killed_worker_on_the_gpu_path_raises_and_shuts_down(folder):
    import signal
    import threading
    import time

    ds = td.datasets.ImageFolder(folder)
    loader = td.DataLoader(ds, batch_size=2, num_workers=2, transforms=RECIPE, device="cuda", prefetch_factor=1)
    it = iter(loader)
    next(it)
    os.kill(it._inner_it._workers[0].pid, signal.SIGKILL)
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="worker"):
        for _ in it:
            pass
    assert time.perf_counter() - t0 < 5
    time.sleep(0.2)
    assert not [t for t in threading.enumerate() if t.name in ("torchdali-executor", "torchdali-stage")]
    torch.cuda.synchronize()
    loader.close()


def test_break_out_of_the_loop_shuts_the_thread_down(folder):
    import threading

    ds = td.datasets.ImageFolder(folder)
    loader = td.DataLoader(ds, batch_size=4, num_workers=2, transforms=RECIPE, device="cuda")
    before = {t.name for t in threading.enumerate()}
    it = iter(loader)
    next(it)
    it.close()
    del it
    alive = [t for t in threading.enumerate() if t.name in ("torchdali-executor", "torchdali-stage")]
    assert not alive, alive
    # what is left belongs to the loader and goes with it
    assert all(n == "QueueFeederThread" for n in {t.name for t in threading.enumerate()} - before)
    loader.close()
    import time

    time.sleep(0.2)
    assert not [t for t in threading.enumerate() if t.name.startswith("torchdali")]


@pytest.mark.parametrize("persistent", [False, True])
def test_staging_ring_gives_the_same_batches_as_the_copy_path(folder, monkeypatch, persistent):
    """Workers writing straight into the shared pinned ring change nothing in the output,
    across epochs, with slots reused many times, and with batches too large for a slot."""
    import torchdali._executor._ring as ring_mod

    ds = td.datasets.ImageFolder(folder)
    kw = dict(batch_size=4, shuffle=True, num_workers=2, transforms=RECIPE, seed=11,
              persistent_workers=persistent)

    def epochs(loader, n=3):
        out = []
        for _ in range(n):
            out.extend(_batches(loader))
        return out

    set_options(monkeypatch, staging_ring=False)
    plain = td.DataLoader(ds, generator=torch.Generator().manual_seed(1), **kw)
    expected = epochs(plain)
    assert plain._runtime.ring is None
    plain.close()

    set_options(monkeypatch, staging_ring=True)
    ringed = td.DataLoader(ds, generator=torch.Generator().manual_seed(1), **kw)
    got = epochs(ringed)
    ring = ringed._runtime.ring
    assert ring is not None and ring.n_slots < len(expected)  # every slot was reused
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, expected))
    ringed.close()

    # slots too small for some batches: those travel as blobs, the rest through the ring
    sizes = sorted(int(batch_bytes) for batch_bytes in
                   (sum(len(ds[i][0]) for i in range(k, k + 4)) for k in range(0, len(ds), 4)))
    monkeypatch.setattr(ring_mod, "plan_ring", lambda *a, **k: (6, sizes[len(sizes) // 2]))
    mixed = td.DataLoader(ds, generator=torch.Generator().manual_seed(1), **kw)
    got = epochs(mixed)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, expected))
    mixed.close()


def test_breaking_out_early_does_not_leave_workers_waiting_for_slots(folder):
    import time

    ds = td.datasets.ImageFolder(folder)
    loader = td.DataLoader(ds, batch_size=2, num_workers=2, transforms=RECIPE, device="cuda",
                           persistent_workers=True, prefetch_factor=4)
    for _ in range(3):  # each iterator abandons batches the workers already hold
        it = iter(loader)
        next(it)
        t0 = time.perf_counter()
        it.close()
        assert time.perf_counter() - t0 < 3.0
    assert len(list(loader)) == len(loader)
    loader.close()


class _Slow(torch.utils.data.Dataset):
    """Sample 5 takes long to read."""

    def __init__(self, inner, delay: float) -> None:
        self.inner, self.delay = inner, delay

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i):
        if i == 5:
            import time

            time.sleep(self.delay)
        return self.inner[i]


def test_the_users_timeout_still_holds_and_a_slow_worker_is_waited_for(folder):
    import time

    ds = _Slow(td.datasets.ImageFolder(folder), delay=20.0)
    loader = td.DataLoader(ds, batch_size=4, num_workers=2, transforms=RECIPE, device="cuda", timeout=1.0)
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="timed out after 1.0 seconds"):
        for _ in loader:
            pass
    # long before the slow sample arrives (the bound leaves room for the loader's start on a busy machine)
    assert time.perf_counter() - t0 < 10.0
    loader.close()
    # without a timeout the same slow sample is simply waited for, across the staging thread's short waits
    ds.delay = 1.0
    loader = td.DataLoader(ds, batch_size=4, num_workers=2, transforms=RECIPE, device="cuda",
                           persistent_workers=True)
    for _ in range(2):
        assert sum(images.shape[0] for images, _ in loader) == len(ds)
    loader.close()


@pytest.mark.parametrize("persistent", [False, True])
def test_an_epochs_first_batches_in_parts_give_the_same_batches(folder, monkeypatch, persistent):
    """The first batches of every epoch go to the workers in parts and are put back together
    on the staging thread: the output is the one of whole batches, epoch after epoch."""
    from torchdali._executor import _tags

    ds = td.datasets.ImageFolder(folder)
    kw = dict(batch_size=8, shuffle=True, num_workers=6, transforms=RECIPE, seed=4, persistent_workers=persistent,
              on_error="skip")
    monkeypatch.setattr(_tags, "START_PART_SAMPLES", 2)

    def epochs(batches):
        monkeypatch.setattr(_tags, "START_BATCHES", batches)
        loader = td.DataLoader(ds, generator=torch.Generator().manual_seed(1), **kw)
        start = loader._inner_loader().batch_sampler.start
        out = [b for _ in range(3) for b in _batches(loader)]
        first = [e.first_batch_s for e in loader.stats().epochs]
        loader.close()
        return out, start, first

    expected, start, _ = epochs(0)
    assert start.parts == 1
    got, start, first = epochs(2)
    assert start == _tags.EpochStart(2, 3)  # 2 of the 5 batches of an epoch, in 3 parts each
    assert len(got) == len(expected) == 15
    for k, (a, b) in enumerate(zip(got, expected)):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), k
    assert all(f > 0 for f in first) and len(first) == 3


def test_files_found_bad_on_the_gpu_in_a_batch_made_of_parts_are_replaced(tmp_path, monkeypatch):
    """Overwritten scan data (found by the GPU's scan check, after the parts were put together)
    in a batch sent in parts and in a whole batch: both replaced from the batch's spares, every
    other sample as in a loader that sends every batch whole."""
    from torchdali._executor import _tags

    root = make_folder(tmp_path / "c", n=40, classes=1, lo=60, hi=140)
    ds = td.datasets.ImageFolder(root)
    bad = [3, 30]  # batch 0 (in parts) and batch 3 (whole); no shuffle: position == index
    for i in bad:
        _overwrite_scan_middle(ds.samples[i][0])
    monkeypatch.setattr(_tags, "START_PART_SAMPLES", 2)

    def run(batches):
        monkeypatch.setattr(_tags, "START_BATCHES", batches)
        loader = td.DataLoader(ds, batch_size=8, num_workers=6, transforms=T.Resize((48, 48)), on_error="skip",
                               persistent_workers=True)
        start = loader._inner_loader().batch_sampler.start
        out = [torch.cat([images.cpu() for images, _ in loader]) for _ in range(2)]
        skipped = [e.skipped for e in loader.stats().epochs]
        loader.close()
        return out, start, skipped

    whole, start, skipped = run(0)
    assert start.parts == 1 and skipped == [2, 2]
    split, start, skipped = run(2)
    assert start == _tags.EpochStart(2, 3) and skipped == [2, 2]
    keep = [i for i in range(40) if i not in bad]
    for a, b in zip(split, whole):
        assert a.shape == b.shape == (40, 3, 48, 48)
        assert torch.equal(a[keep], b[keep])


def _run_ahead_epochs(ds, monkeypatch, run_ahead, n=4, between=lambda loader, e: None, **kw):
    set_options(monkeypatch, run_ahead=run_ahead)
    opts = dict(batch_size=4, shuffle=True, num_workers=2, transforms=RECIPE, device="cuda", seed=3,
                persistent_workers=True)
    opts.update(kw)
    torch.manual_seed(0)
    loader = td.DataLoader(ds, **opts)
    out = []
    for e in range(n):
        between(loader, e)
        out.append(_batches(loader))
    ahead = [s.ran_ahead for s in loader.stats().epochs]
    loader.close()
    return out, ahead


@pytest.mark.parametrize("kw", [dict(), dict(on_error="skip"), dict(shuffle=False)])
def test_run_ahead_gives_the_batches_of_a_loader_that_does_not(folder, monkeypatch, kw):
    """Note [torchdali run-ahead]: each epoch after the first starts with batches the epoch
    before prepared; they are the batches a loader that starts every epoch at its iter() gives."""
    ds = td.datasets.ImageFolder(folder)
    expected, off = _run_ahead_epochs(ds, monkeypatch, False, **kw)
    got, on = _run_ahead_epochs(ds, monkeypatch, True, **kw)
    assert off == [False] * 4 and on == [False, True, True, True]
    assert len(got) == 4 and all(len(e) == 10 for e in got)
    for e, (a, b) in enumerate(zip(got, expected)):
        for k, (x, y) in enumerate(zip(a, b)):
            assert torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]), (e, k)
    if kw.get("shuffle", True):  # shuffled anew each epoch
        assert not all(torch.equal(x[1], y[1]) for x, y in zip(got[0], got[1]))


def test_an_epoch_drawn_ahead_that_is_not_asked_for_is_dropped(folder, monkeypatch):
    """A draw from torch's generator between epochs, set_epoch back to 0, and a loop that leaves
    an epoch early: the parked pipeline is dropped and the epoch is the one asked for."""
    ds = td.datasets.ImageFolder(folder)

    def between(loader, e):
        if e == 2:
            torch.rand(1)  # the order of epoch 2 is not the one drawn ahead
        if e == 4:
            loader.set_epoch(0)
        if e == 5:  # leave an epoch that was run ahead after one batch
            it = iter(loader)
            next(it)
            it.close()

    # seed=None: the order is drawn from torch's generator (seed= would draw it from (seed, epoch))
    expected, off = _run_ahead_epochs(ds, monkeypatch, False, n=7, between=between, seed=None)
    got, on = _run_ahead_epochs(ds, monkeypatch, True, n=7, between=between, seed=None)
    assert on == [False, True, False, True, False, True, False, True]
    for e, (a, b) in enumerate(zip(got, expected)):
        assert len(a) == len(b) == 10
        for k, (x, y) in enumerate(zip(a, b)):
            assert torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]), (e, k)


def test_a_loader_dropped_with_an_epoch_run_ahead_is_collected_and_ends_its_threads(folder):
    import gc
    import threading
    import time
    import weakref

    ds = td.datasets.ImageFolder(folder)
    loader = td.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, transforms=RECIPE, device="cuda",
                           persistent_workers=True)
    assert len(_batches(loader)) == 10
    running = loader._runtime.running
    assert running is not None and running.parked
    workers = worker_processes(persistent_iterator(loader._runtime.inner))
    ref = weakref.ref(loader)
    del loader, running
    gc.collect()
    assert ref() is None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and ([t for t in threading.enumerate() if t.name.startswith("torchdali")]
                                           or any(w.is_alive() for w in workers)):
        time.sleep(0.1)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("torchdali")]
    assert not any(w.is_alive() for w in workers)


def test_run_ahead_with_a_distributed_sampler_follows_set_epoch(folder, monkeypatch):
    """A DistributedSampler's next epoch is drawn as following the loader's (set_epoch each
    epoch): the batches are those of a loader that does not run ahead."""
    ds = td.datasets.ImageFolder(folder)

    def run(run_ahead):
        sampler = torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=6)
        return _run_ahead_epochs(ds, monkeypatch, run_ahead, n=3, shuffle=None, sampler=sampler, batch_size=2,
                                 between=lambda loader, e: loader.set_epoch(e))

    (expected, off), (got, on) = run(False), run(True)
    assert off == [False] * 3 and on == [False, True, True]
    for e, (a, b) in enumerate(zip(got, expected)):
        assert len(a) == len(b) == 10
        for k, (x, y) in enumerate(zip(a, b)):
            assert torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]), (e, k)
    assert not all(torch.equal(x[1], y[1]) for x, y in zip(got[0], got[1]))


def test_a_batch_is_not_overwritten_while_its_kernel_waits(tmp_path, monkeypatch):
    """nvJPEG's hardware engines write a decode buffer during the call, whatever is still
    queued on the executor's stream: while a batch's kernel waits on the GPU, the next
    batches must not be decoded into the buffer it reads."""
    from torchdali._executor import _launch

    # one size and subsampling, so every batch's call reuses its initialised nvJPEG state
    ds = td.datasets.ImageFolder(make_folder(tmp_path, n=96, lo=96, hi=97))
    kw = dict(batch_size=8, num_workers=2, transforms=RECIPE, seed=5, device="cuda")
    want = _batches(td.DataLoader(ds, **kw))
    real = _launch.KernelLauncher.launch

    def late(self, decoded, params, stream, targets=None):
        torch.cuda._sleep(50_000_000)  # about 25 ms of GPU time ahead of the kernel that reads the buffer
        return real(self, decoded, params, stream, targets)

    monkeypatch.setattr(_launch.KernelLauncher, "launch", late)
    loader = td.DataLoader(ds, **kw)
    got = _batches(loader)
    if loader.stats().last.decoded_hardware == 0:
        pytest.skip("no hardware JPEG engines: the CUDA decoder's writes are ordered on the stream")
    assert len(got) == len(want) == len(loader)
    for k, ((gi, gt), (wi, wt)) in enumerate(zip(got, want)):
        assert torch.equal(gt, wt), k
        assert torch.equal(gi, wi), f"batch {k}"
