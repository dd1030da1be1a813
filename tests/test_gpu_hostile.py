"""Hostile input on the GPU path (run on a GPU machine: pytest -m cuda).

Fuzzing through nvJPEG (the loader with on_error="skip", and the decoder directly
on each backend it has), the per-batch decode memory bound, and a dying worker.
"""
from __future__ import annotations

import faulthandler
import logging
import os
import re
import signal
import time

import numpy as np
import pytest
import torch

import torchdali as td
from torchdali import transforms as T
from torchdali._executor import _decode
from torchdali._synthetic import synthetic_image
from torchdali.decode._jpeg_header import jpeg_info

from ._fuzz import fuzz_corpus, loader_gate
from ._helpers import jpeg_bytes, make_folder

pytestmark = pytest.mark.cuda

WATCHDOG_S = 900  # a hang anywhere in a test ends the run with a traceback instead of blocking it


@pytest.fixture()
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


class MixedDataset(torch.utils.data.Dataset):
    """Good JPEGs with a mutated one every ``every`` samples; items are (bytes, index)."""

    def __init__(self, good: list[bytes], bad: list[bytes], every: int) -> None:
        self.good, self.bad, self.every = good, bad, every

    def __len__(self) -> int:
        return len(self.bad) * self.every

    def path_of(self, index: int) -> str:
        return f"mem://{'bad' if index % self.every == 0 else 'good'}/{index}"

    def __getitem__(self, index: int):
        if index % self.every == 0:
            return np.frombuffer(self.bad[index // self.every], np.uint8).copy(), index
        return np.frombuffer(self.good[index % len(self.good)], np.uint8).copy(), index


def _good_batch(n: int = 12) -> list[bytes]:
    rng = np.random.default_rng(1)
    return [jpeg_bytes(synthetic_image(rng, int(rng.integers(30, 90)), int(rng.integers(30, 90))),
                       subsampling=int(k % 3)) for k in range(n)]


def test_fuzz_through_the_gpu_loader_skips_or_names_every_file(watchdog, caplog):
    corpus = fuzz_corpus()
    good = _good_batch()
    # one mutated file per batch of 16, so the batch's spare samples can always replace it
    ds = MixedDataset(good, [b for _, b in corpus], every=16)
    tf = T.Compose([T.Resize((32, 32))])
    loader = td.DataLoader(ds, batch_size=16, num_workers=2, transforms=tf, device="cuda", on_error="skip",
                           seed=0)
    t0 = time.perf_counter()
    seen = 0
    with caplog.at_level(logging.WARNING, logger="torchdali"):
        for images, targets in loader:
            assert images.shape == (16, 3, 32, 32)
            seen += images.shape[0]
        torch.cuda.synchronize()
    reasons = [r.getMessage() for r in caplog.records if "skipped bad sample" in r.getMessage()]
    assert reasons and all(re.search(r"sample \d+ \(mem://bad/\d+\): ", m) for m in reasons), reasons[:5]
    seconds = time.perf_counter() - t0
    skipped = loader.stats().last.skipped
    print(f"\nloader fuzz: {len(corpus)} mutated JPEGs among {len(ds)} samples, {skipped} skipped, "
          f"{seen / seconds:.0f} samples/s ({len(corpus) / seconds:.0f} mutated files/s)")
    assert seen == len(ds)
    # the context is not poisoned: a clean loader still matches the CPU path
    gpu = td.DataLoader(_Listed(good), batch_size=len(good), transforms=tf, device="cuda", seed=0)
    cpu = td.DataLoader(_Listed(good), batch_size=len(good), transforms=tf, device="cpu", seed=0)
    (g, _), (c, _) = next(iter(gpu)), next(iter(cpu))
    assert (g.cpu().float() - c.float()).abs().mean() < 2.5


class _Listed(torch.utils.data.Dataset):
    def __init__(self, items: list[bytes]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return np.frombuffer(self.items[i], np.uint8).copy(), i


def _decode_direct(dec, blobs: list[bytes], sizes: list[tuple[int, int]], stream):
    if not blobs:
        return [], torch.empty(0), np.zeros(0, np.int64), np.zeros((0, 2), np.int64)
    sizes = np.array(sizes, dtype=np.int64).reshape(-1, 2)
    lengths = np.array([len(b) for b in blobs], dtype=np.int64)
    offsets = np.zeros(len(blobs), dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    data = torch.frombuffer(bytearray(b"".join(blobs)), dtype=torch.uint8).pin_memory()
    nbytes = sizes[:, 0] * sizes[:, 1] * 3
    out_off = np.zeros(len(blobs), dtype=np.int64)
    np.cumsum(nbytes[:-1], out=out_off[1:])
    out = torch.empty(max(int(nbytes.sum()), 1), dtype=torch.uint8, device=dec.device)
    status = dec.decode_batch(data, offsets, lengths, sizes, out, out_off, stream)
    stream.synchronize()  # a sticky CUDA error (a poisoned context) raises here
    return status, out, out_off, sizes


CHUNK_TIMEOUT_S = 60  # a chunk of 64 small files takes well under a second; the first also starts CUDA


def _fuzz_one_backend(name: str, replies) -> None:
    """Child process: the gated corpus through one backend, reporting each chunk before
    decoding it, so the parent can name the chunk of a hang or a crash."""
    import traceback

    from torchdali.decode import STATUS_OK, NvjpegDecoder, decode_cpu

    try:
        dec = NvjpegDecoder(backend="hybrid" if name == "hybrid" else "auto")
        if name == "hardware" and not dec.has_hardware:
            replies.put(("skip",))
            return
        corpus = fuzz_corpus()
        good = _good_batch()
        refs = [decode_cpu(b) for b in good]
        sent = [(what, b, hw) for what, b in corpus if (hw := loader_gate(b)) is not None]
        stream = torch.cuda.Stream(dec.device)
        ok = failed = 0
        t0 = time.perf_counter()
        for start in range(0, len(sent), 64):
            chunk = sent[start:start + 64]
            replies.put(("chunk", start, [what for what, _, _ in chunk]))
            status, _, _, _ = _decode_direct(dec, [b for _, b, _ in chunk], [hw for *_, hw in chunk], stream)
            for k, st in enumerate(status):
                if st == STATUS_OK:
                    ok += 1
                else:
                    failed += 1
                    assert dec.describe(st, k), chunk[k][0]  # a named reason
            if start % 512 == 0:  # every later batch still decodes correctly
                _check_good(dec, good, refs, stream)
        _check_good(dec, good, refs, stream)
        replies.put(("done", len(sent), len(corpus), ok, failed, time.perf_counter() - t0))
        dec.close()
    except BaseException:
        replies.put(("error", traceback.format_exc()))


@pytest.mark.parametrize("backend", ["hybrid", "hardware"])
def test_fuzz_through_the_decoder_on_each_backend(backend):
    """Each backend gets what the loader's workers would hand it (the rest goes to the
    CPU decoder, which the loader fuzz test and test_hostile.py cover); every file is
    decoded or reported, and the context stays usable. The decoding runs in a child
    process, so a hang or a crash inside nvJPEG fails this test naming the chunk instead
    of taking the run down. ``benchmarks/fuzz_nvjpeg.py`` (last changed in 26b488a,
    removed since: check out 26b488a to run it) also fed the decoder the files the gate
    keeps back, and isolated single files."""
    import multiprocessing as mp
    import queue

    ctx = mp.get_context("spawn")
    replies = ctx.Queue()
    child = ctx.Process(target=_fuzz_one_backend, args=(backend, replies), daemon=True)
    child.start()
    chunk = None
    try:
        while True:
            try:
                msg = replies.get(timeout=CHUNK_TIMEOUT_S)
            except queue.Empty:
                where = f"chunk at {chunk[0]} ({sorted(set(chunk[1]))})" if chunk else "start-up"
                state = "hung" if child.is_alive() else f"died (exit code {child.exitcode})"
                pytest.fail(f"{backend}: nvJPEG {state} on the {where}")
            if msg[0] == "chunk":
                chunk = msg[1:]
            elif msg[0] == "skip":
                pytest.skip("no hardware JPEG engines on this GPU")
            elif msg[0] == "error":
                pytest.fail(f"{backend}:\n{msg[1]}")
            else:
                _, sent, total, ok, failed, seconds = msg
                print(f"\n{backend}: {sent} of {total} mutated JPEGs sent to nvJPEG, {seconds:.1f} s "
                      f"({sent / seconds:.0f}/s): {ok} decoded, {failed} reported")
                assert ok + failed == sent
                break
    finally:
        if child.is_alive():
            child.kill()
        child.join(timeout=10)


def _check_good(dec, good, refs, stream) -> None:
    sizes = [(jpeg_info(np.frombuffer(b, np.uint8)).height, jpeg_info(np.frombuffer(b, np.uint8)).width) for b in good]
    status, out, out_off, sizes = _decode_direct(dec, good, sizes, stream)
    assert all(st == 0 for st in status), [dec.describe(st, k) for k, st in enumerate(status) if st]
    for k, ref in enumerate(refs):
        h, w = (int(v) for v in sizes[k])
        img = out[int(out_off[k]): int(out_off[k]) + h * w * 3].view(h, w, 3).cpu()
        assert (img.float() - ref.float()).abs().mean() < 2.5, k


# -- the decode memory bound -----------------------------------------------------

BIG = (5773, 8660)  # ~50 MP


def _flat_jpeg(h: int, w: int, value: int, subsampling: int = 2) -> bytes:
    return jpeg_bytes(np.full((h, w, 3), value, np.uint8), quality=90, subsampling=subsampling)


@pytest.mark.parametrize("subsampling", ["444", "420"])
def test_two_50mp_images_in_a_batch_stay_within_the_decode_bound(tmp_path, watchdog, subsampling):
    from torchdali._executor._decode import GrowOnlyBuffer

    root = make_folder(tmp_path / "big", n=14, classes=1, lo=200, hi=600)
    for k, value in enumerate((60, 200)):
        with open(os.path.join(root, "c0", f"big_{k}.jpg"), "wb") as f:
            f.write(_flat_jpeg(*BIG, value, subsampling=0 if subsampling == "444" else 2))
    ds = td.datasets.ImageFolder(root)
    big = [i for i, (p, _) in enumerate(ds.samples) if "big_" in p]
    assert len(big) == 2
    tf = T.Compose([T.Resize((64, 64))])
    loader = td.DataLoader(ds, batch_size=8, transforms=tf, device="cuda", seed=0)  # both big ones in batch 1
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    out = []
    for images, _ in loader:
        out.append(images)
        torch.cuda.synchronize()
        assert time.perf_counter() - t0 < 120, "a batch took over two minutes"
    peak = torch.cuda.max_memory_allocated() - base
    rgb_bytes = BIG[0] * BIG[1] * 3
    out_bytes = sum(x.numel() * x.element_size() for x in out)
    if subsampling == "444":
        # As 4:4:4 planes (150 MB each, as RGB) both big images together exceed
        # DECODE_GROUP_BYTES, so they are decoded in turn into one buffer, sized for one big
        # image and a few ordinary ones.
        largest = rgb_bytes + (8 << 20)
    else:
        # As 4:2:0 planes (75 MB each) the whole batch fits one group.
        largest = 2 * (BIG[0] * BIG[1] + 2 * (-(-BIG[0] // 2)) * (-(-BIG[1] // 2))) + (8 << 20)

    def held(n: int) -> int:  # what a GrowOnlyBuffer holds for a need of n bytes
        return -(-int(n * GrowOnlyBuffer.HEADROOM) // GrowOnlyBuffer.ALIGN) * GrowOnlyBuffer.ALIGN

    # The bound: the decode buffer, the scan check's copy of the encoded bytes (a few MB),
    # the outputs, and 64 MiB for the kernel's working memory on a group, its output and the
    # parameters (a run decoding to RGB on the H200 peaked 87 KiB above 32 MiB of those).
    # Decoding the 4:4:4 batch at once would hold 384 MiB.
    bound = held(largest) + held(8 << 20) + out_bytes + (64 << 20)
    assert bound < held(2 * rgb_bytes + (8 << 20))
    print(f"\n{subsampling}: peak torch allocation {peak / 2**20:.0f} MiB for two {BIG[0]}x{BIG[1]} images "
          f"({2 * rgb_bytes / 2**20:.0f} MiB as RGB) among 14 others; bound {bound / 2**20:.0f} MiB")
    assert peak <= bound
    flat = torch.cat(out)
    for i, value in zip(big, (60, 200)):
        assert (flat[i].float() - value).abs().max() <= 2


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_grouped_decode_equals_the_whole_batch(tmp_path, monkeypatch, on_error):
    root = make_folder(tmp_path / "g", n=24, lo=40, hi=120)
    if on_error == "skip":
        # overwritten scan data: the GPU's scan check flags it, the CPU cannot decode it
        # either, and on_error replaces it on the GPU side (_decode.GpuDecoder._replace)
        data = bytearray(jpeg_bytes(synthetic_image(np.random.default_rng(2), 160, 200), quality=95))
        start = data.find(b"\xff\xda") + 40
        data[start:start + 2000] = np.random.default_rng(3).integers(0, 256, 2000, dtype=np.uint8).tobytes()
        with open(os.path.join(root, "c1", "0004.jpg"), "wb") as f:
            f.write(bytes(data))
    ds = td.datasets.ImageFolder(root)
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()])

    def run():
        loader = td.DataLoader(ds, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0),
                               transforms=tf, device="cuda", seed=5, on_error=on_error)
        return [(x.cpu(), y.cpu()) for x, y in loader], loader.stats().last.skipped

    whole, skipped_whole = run()
    monkeypatch.setattr(_decode, "DECODE_GROUP_BYTES", 1)  # every image a group of its own
    grouped, skipped_grouped = run()
    assert skipped_whole == skipped_grouped
    for (xa, ya), (xb, yb) in zip(whole, grouped):
        assert torch.equal(ya, yb) and torch.equal(xa, xb)


# -- a worker that dies ------------------------------------------------------------

class _Killer(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 16

    def path_of(self, index: int) -> str:
        return f"/data/{index}.jpg"

    def __getitem__(self, index: int):
        if index == 6:
            os.kill(os.getpid(), signal.SIGKILL)
        return np.frombuffer(_good_batch(1)[0], np.uint8).copy(), index


def test_killed_worker_on_the_gpu_path_names_its_batch(watchdog):
    loader = td.DataLoader(_Killer(), batch_size=4, num_workers=2, transforms=T.Compose([T.Resize((16, 16))]),
                           device="cuda")
    with pytest.raises(td.WorkerDied) as info:
        for _ in loader:
            pass
    assert [i for i, _ in info.value.samples] == [4, 5, 6, 7]
    assert info.value.samples[2] == (6, "/data/6.jpg")
    assert "SIGKILL" in str(info.value)


# -- a batch that never comes back from the decoder --------------------------------


@pytest.mark.parametrize("where", ["executor", "staging"])
def test_a_batch_that_hangs_ends_in_decoder_stalled(watchdog, monkeypatch, where):
    """The third batch blocks (as inside a hung nvJPEG call) in the executor thread, or in the
    staging thread's decode a batch ahead of the executor's kernels: the training loop gets
    DecoderStalled naming that batch's samples after gpu_timeout, the loader refuses another
    epoch, and nothing waits on the stuck stream."""
    import threading

    from torchdali._executor import _executor
    from torchdali._executor._decode import GpuDecoder

    release = threading.Event()

    def hung(real):
        def call(self, batch, *args, **kwargs):
            if 8 in batch.indices.tolist():
                release.wait(120)
            return real(self, batch, *args, **kwargs)
        return call

    if where == "executor":
        monkeypatch.setattr(_executor.BatchExecutor, "process", hung(_executor.BatchExecutor.process))
    else:
        monkeypatch.setattr(_executor, "DECODE_AHEAD_MIN_CPUS", 1)  # on any machine
        monkeypatch.setattr(GpuDecoder, "decode", hung(GpuDecoder.decode))
    before = {t.ident for t in threading.enumerate()}
    good = _good_batch()
    ds = MixedDataset(good, good[:4], every=4)  # 16 good samples; "bad" only names every fourth path
    loader = td.DataLoader(ds, batch_size=4, num_workers=2, transforms=T.Compose([T.Resize((16, 16))]),
                           device="cuda", gpu_timeout=10)  # the first batch also compiles the kernel
    seen = []
    t0 = time.monotonic()
    try:
        with pytest.raises(td.DecoderStalled) as info:
            for _, targets in loader:
                seen.append(targets.tolist())
        waited = time.monotonic() - t0
        assert seen == [[0, 1, 2, 3], [4, 5, 6, 7]]
        assert [i for i, _ in info.value.samples] == [8, 9, 10, 11]
        assert info.value.samples[0] == (8, "mem://bad/8") and info.value.path == "mem://bad/8"
        assert "gpu_timeout=10" in str(info.value) and info.value.seconds > 10
        if where == "staging":
            assert "being decoded" in str(info.value)
        assert waited < 90, waited
        with pytest.raises(RuntimeError, match="stuck on an earlier batch"):
            iter(loader)
    finally:
        loader.close()  # keeps the stuck executor's ring and handles: the thread still holds them
        release.set()  # the "hung" call returns and finds its iterator closed
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and [t for t in threading.enumerate() if t.name == "torchdali-executor"
                                           and t.ident not in before]:
        time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name == "torchdali-executor" and t.ident not in before]
