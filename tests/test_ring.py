"""The shared staging ring: slot reuse across processes, and the worker side of a GPU batch."""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import time

import numpy as np
import pytest
import torch

from torchdali import transforms as T
from torchdali._executor._ring import PARENT_CHECK_S, HostRing, plan_ring, ring_supported
from torchdali._executor._tags import SampleTag, TaggedSample
from torchdali._executor._wire import PackedBatch
from torchdali._executor._worker import PrepareBatch
from torchdali.transforms import compile_transforms

from ._helpers import make_folder

pytestmark = pytest.mark.skipif(not ring_supported(), reason="needs memfd_create and /proc")


def _fill(ring: HostRing, seq: int, value: int, stamp: "mp.Queue") -> None:
    ring.acquire(seq)[:16].fill_(value)
    stamp.put((seq, time.monotonic()))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_worker_writes_are_visible_and_wait_for_release(method):
    ring = HostRing(2, 4096)
    ctx = mp.get_context(method)
    stamps = ctx.Queue()
    # seq 0 and 1 are free from the start; both land in the main process's mapping
    for seq, value in ((0, 7), (1, 9)):
        p = ctx.Process(target=_fill, args=(ring, seq, value, stamps))
        p.start()
        p.join(30)
        assert p.exitcode == 0
    assert ring.slot(0)[:16].tolist() == [7] * 16
    assert ring.slot(1)[:16].tolist() == [9] * 16
    # seq 2 reuses slot 0: it must wait until batch 0 is released
    p = ctx.Process(target=_fill, args=(ring, 2, 5, stamps))
    p.start()
    time.sleep(1.0)
    assert ring.slot(0)[:16].tolist() == [7] * 16, "a worker overwrote a slot that was not released"
    released_at = time.monotonic()
    ring.release(0)
    p.join(30)
    assert p.exitcode == 0
    got = dict(stamps.get(timeout=5) for _ in range(3))
    assert got[2] >= released_at
    assert ring.slot(2)[:16].tolist() == [5] * 16
    ring.close()


def test_release_upto_frees_every_dispatched_slot():
    ring = HostRing(4, 4096)
    ring.release_upto(9)  # batches 0..9 abandoned: 6..9 were the last users of slots 2, 3, 0, 1
    assert ring._released.tolist() == [8, 9, 6, 7]
    for seq in range(10, 14):  # the next round never waits
        ring.acquire(seq)
    ring.release(3)
    assert ring._released.tolist() == [8, 9, 6, 7]  # an older release does not move a slot back
    ring.close()
    ring.release_upto(20)  # an iterator collected after its loader's close(): nothing left to free


def _encoded_samples(folder, n, seq):
    import torchdali as td

    ds = td.datasets.ImageFolder(folder)
    return [TaggedSample(SampleTag(0, 0, i, i, False, seq), ds.samples[i][0], ds[i]) for i in range(n)]


def test_prepare_batch_writes_the_batch_into_its_slot_and_pickles_small(tmp_path):
    folder = make_folder(tmp_path, n=6, lo=20, hi=40)
    plan = compile_transforms(T.Compose([T.RandomResizedCrop(16)]))
    ring = HostRing(3, 1 << 20)
    ring.release_upto(3)  # batches 0..3 came and went
    samples = _encoded_samples(folder, 6, seq=4)
    batch = PrepareBatch(plan, "gpu", ring=ring)(samples)
    assert batch.blob is None and batch.ring_seq == 4
    total = int(batch.offsets[-1] + batch.lengths[-1])
    expected = torch.cat([s.item[0] for s in samples])
    assert torch.equal(ring.slot(4)[:total], expected)
    wire = pickle.dumps(batch)
    assert len(wire) < 8192  # metadata only: the bytes stayed in the ring
    back = pickle.loads(wire)
    assert isinstance(back.params, torch.Tensor) and torch.equal(back.params, batch.params)
    assert torch.equal(back.targets, batch.targets)
    ring.close()


def test_a_batch_larger_than_a_slot_travels_as_a_blob(tmp_path):
    folder = make_folder(tmp_path, n=4, lo=40, hi=60)
    plan = compile_transforms(T.Compose([T.CenterCrop(16)]))
    ring = HostRing(3, 4096)  # smaller than four JPEGs
    samples = _encoded_samples(folder, 4, seq=0)
    batch = PrepareBatch(plan, "gpu", ring=ring)(samples)
    assert batch.ring_seq == -1
    assert torch.equal(batch.blob, torch.cat([s.item[0] for s in samples]))
    assert ring._released.tolist() == [-3, -2, -1]  # nothing released
    ring.close()


def test_plan_ring_sizes_slots_from_the_files(tmp_path):
    import torchdali as td

    folder = make_folder(tmp_path, n=12, lo=40, hi=90)
    ds = td.datasets.ImageFolder(folder)
    sizes = [len(ds[i][0]) for i in range(len(ds))]
    n_slots, slot_bytes = plan_ring(ds, batch_size=8, num_workers=3, prefetch_factor=2, depth=2)
    assert n_slots == 3 * 2 + 2 + 4
    assert slot_bytes > 8 * np.mean(sizes)
    assert plan_ring(ds, batch_size=8, num_workers=3, prefetch_factor=2, depth=2, max_bytes=slot_bytes) is None


def test_packed_batch_keeps_unusual_target_types():
    b = PackedBatch(seed=0, epoch=0, indices=np.arange(2), positions=np.arange(2), paths=[None, None],
                    params=torch.zeros(2, 12), targets=torch.tensor([1.5, 2.5], dtype=torch.bfloat16),
                    has_target=True)
    back = pickle.loads(pickle.dumps(b))
    assert back.targets.dtype == torch.bfloat16 and torch.equal(back.targets, b.targets)
    b.targets = ["a", "b"]
    assert pickle.loads(pickle.dumps(b)).targets == ["a", "b"]


def test_a_retired_sampler_pass_hands_out_no_more_batch_numbers():
    import copy

    from torchdali._executor._tags import EpochState, TaggedBatchSampler

    state = EpochState()
    sampler = TaggedBatchSampler(torch.utils.data.BatchSampler(range(20), 4, False), state)
    old = iter(sampler)
    seqs = [next(old)[0].seq for _ in range(2)]
    assert seqs == [0, 1]
    assert sampler.retire() == 1
    with pytest.raises(StopIteration):  # the abandoned pass is done, even mid-epoch
        next(old)
    new = [b[0].seq for b in sampler]  # the next pass numbers on from there
    assert new == [2, 3, 4, 5, 6]
    assert [t.index for t in next(iter(sampler))] == [0, 1, 2, 3]
    clone = pickle.loads(pickle.dumps(sampler))
    assert [b[0].seq for b in copy.deepcopy(clone)][:1] == [8]


def test_a_long_wait_for_a_slot_is_reported(monkeypatch):
    import threading

    ring = HostRing(2, 4096)
    monkeypatch.setattr(HostRing, "WARN_AFTER_S", 0.2)
    threading.Timer(0.6, ring.release, args=(0,)).start()
    with pytest.warns(RuntimeWarning, match="batch 2 has waited .* staging slot 0, which batch 0 still holds"):
        ring.acquire(2)
    assert ring._released[0] == 0
    ring.close()


def _wait_for_a_slot_after_the_owner_died(ring: HostRing, w: int) -> None:
    """A worker of ``ring`` (forked from its owner) that starts waiting for a slot only once the
    owner has died: by then its parent is already another process."""
    while os.getppid() == ring.owner_pid:
        time.sleep(0.01)
    try:
        ring.acquire(2)  # slot 0, which batch 0 holds: never released
        result = "acquired"
    except RuntimeError as e:
        result = str(e)
    os.write(w, result.encode())


def test_a_wait_for_a_slot_ends_when_the_main_process_is_gone():
    import select

    r, w = os.pipe()
    owner = os.fork()
    if owner == 0:  # the main process: makes the ring, forks a worker, dies
        try:
            ring = HostRing(2, 4096)
            worker = os.fork()
            if worker == 0:
                try:
                    _wait_for_a_slot_after_the_owner_died(ring, w)
                finally:
                    os._exit(0)
            os.write(w, f"{worker}\n".encode())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(owner, 0)
    with os.fdopen(r, "rb", buffering=0) as f:
        worker = int(f.readline())
        ready, _, _ = select.select([f], [], [], 10 * PARENT_CHECK_S)
        if not ready:
            os.kill(worker, signal.SIGKILL)
        assert ready, f"the worker still waits for a slot {10 * PARENT_CHECK_S} s after the main process died"
        result = f.read().decode()
    assert f"main process (pid {owner})" in result and "staging slot 0" in result, result


def _note_row(ring, index, value):
    ring.note(index, 1000 + value, 7 * value, (value, value + 1, 3), 40 + value, 600 + value)


def test_the_header_table_keeps_what_a_worker_noted_for_the_same_file():
    ring = HostRing(2, 4096, samples=10)
    assert ring.known(3, 1003, 21) is None  # nothing noted yet
    _note_row(ring, 3, 3)
    assert ring.known(3, 1003, 21) == ((3, 4, 3), 43, 603)
    assert ring.known(3, 1004, 21) is None  # the file changed size ...
    assert ring.known(3, 1003, 22) is None  # ... or was written again
    assert ring.known(4, 1003, 21) is None and ring.known(10, 1003, 21) is None and ring.known(-1, 0, 0) is None
    ring.table[3, 4] = 1  # a row caught half-written does not pass its check
    assert ring.known(3, 1003, 21) is None
    ring.close()
    small = HostRing(2, 4096)  # no table
    small.note(0, 1, 2, (3, 4, 3), 5, 6)
    assert small.table is None and small.known(0, 1, 2) is None
    small.close()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_the_header_table_is_shared_with_the_workers(method):
    ring = HostRing(2, 4096, samples=8)
    ctx = mp.get_context(method)
    p = ctx.Process(target=_note_row, args=(ring, 5, 9))
    p.start()
    p.join(30)
    assert p.exitcode == 0
    assert ring.known(5, 1009, 63) == ((9, 10, 3), 49, 609)
    ring.close()
