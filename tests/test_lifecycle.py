"""The GPU iterator's lifecycle (``torchdali/_executor/_lifecycle.py``): one test per transition,
and what closing does from each state. The table and ``close_plan`` are what ``GpuIterator``
runs; its own tests (``tests/test_gpu_loader.py``, ``-m cuda``) run the threads and the GPU."""
from __future__ import annotations

import os
import threading
import time

import pytest

from torchdali._executor._lifecycle import (TRANSITIONS, ClosePlan, IllegalTransition, IterState, Lifecycle,
                                            close_plan)

S = IterState


def _at(*path: IterState) -> Lifecycle:
    life = Lifecycle()
    for state in path:
        life.move(state)
    return life


def test_start():
    life = Lifecycle()
    assert life.state is S.RUNNING


def test_park_between_epochs():
    life = Lifecycle()
    assert life.move(S.PARKED) is S.RUNNING and life.state is S.PARKED
    # parked, closed by a miss or by its loader: the persistent workers stay once the stager is out
    assert close_plan(life.close(), persistent=True) == ClosePlan(True, True, True)
    assert life.state is S.CLOSED


def test_run_ahead():
    life = _at(S.PARKED)
    assert life.move(S.RUNNING) is S.PARKED and life.state is S.RUNNING
    life.move(S.PARKED)  # and again at the next epoch's end
    assert life.move(S.RUNNING) is S.PARKED


def test_epoch_end():
    life = _at(S.ENDED)
    assert close_plan(life.close(), persistent=True) == ClosePlan(True, True, False)
    assert close_plan(S.ENDED, persistent=False) == ClosePlan(True, False, False)


def test_stall():
    life = _at(S.STUCK)
    # a stuck executor's stream never finishes: no wait for it, no slot released, workers shut down
    assert close_plan(life.close(), persistent=True) == ClosePlan(False, False, False)


def test_error_and_close_half_way():
    life = Lifecycle()
    # a background thread's failure, the user's close(), Ctrl-C: from RUNNING straight to CLOSED
    assert close_plan(life.close(), persistent=True) == ClosePlan(True, False, False)
    assert life.state is S.CLOSED


def test_interpreter_exit_closes_from_every_open_state_once():
    # __del__ (garbage collection, the interpreter's exit) calls close() from whatever state it is in
    for path in [(), (S.ENDED,), (S.PARKED,), (S.STUCK,), (S.PARKED, S.RUNNING)]:
        life = _at(*path)
        assert life.close() is (path[-1] if path else S.RUNNING)
        assert life.close() is None  # idempotent: the second close does nothing
        assert life.state is S.CLOSED


def test_every_other_move_is_illegal():
    legal = set(TRANSITIONS)
    assert len(legal) == 8
    paths = {S.RUNNING: (), S.ENDED: (S.ENDED,), S.PARKED: (S.PARKED,), S.STUCK: (S.STUCK,)}
    for start in S:
        for to in S:
            if (start, to) in legal:
                continue
            life = _at(*paths[start]) if start is not S.CLOSED else Lifecycle()
            if start is S.CLOSED:
                life.close()
            with pytest.raises(IllegalTransition, match=f"from {start.name} to {to.name}"):
                life.move(to)
            assert life.state is start


def test_closed_is_the_end_and_every_state_can_reach_it():
    assert not any(a is S.CLOSED for a, _ in TRANSITIONS)
    assert {a for a, b in TRANSITIONS if b is S.CLOSED} == set(S) - {S.CLOSED}


def test_a_close_racing_another_is_done_once():
    life = Lifecycle()
    barrier = threading.Barrier(8)
    got = []

    def close():
        barrier.wait()
        got.append(life.close())

    threads = [threading.Thread(target=close) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got, key=lambda s: s is None) == [S.RUNNING] + [None] * 7


# -- GpuIterator itself, its GPU work stood in for -------------------------------------------------

import collections  # noqa: E402
import types  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from torchdali import DecoderStalled  # noqa: E402
from torchdali._executor import _iterators  # noqa: E402
from torchdali._executor._deliver import Delivery  # noqa: E402
from torchdali._executor._runtime import LoaderRuntime  # noqa: E402


class _Staging:
    ring, pending = None, False

    def stage(self, batch, stop):
        return object(), 0.0

    def give_back(self, slot):
        pass

    def release_ready(self):
        pass


class _Executor:
    """``BatchExecutor`` without a GPU: a batch's "images" are its first position; ``block``
    holds ``process`` (a hung decoder), ``fail`` makes it raise."""

    def __init__(self) -> None:
        self.staging, self.decoding = _Staging(), None
        self.block, self.fail = threading.Event(), False
        self.block.set()
        self.released: list[int] = []

    def prepare(self, batch, slot, stop):
        return None

    def process(self, batch, slot, prepared):
        self.block.wait()
        if self.fail:
            raise ValueError("bad batch")
        return types.SimpleNamespace(batch=batch, images=f"images {batch.first_position}", targets=batch.seq,
                                     ready=None, stages={})

    def drop(self, prepared):
        pass

    def release_all(self, last):
        self.released.append(last)


class _Sampler:
    """The inner loader's batch sampler: ``ends`` notes the epoch's last batch when it went on."""

    def __init__(self, ends=()) -> None:
        self.ends = collections.deque(ends)
        self.retired = 0

    def retire(self):
        self.retired += 1
        return 99


class _Inner:
    def __init__(self, batches, ends=()) -> None:
        self.batches, self.batch_sampler = batches, _Sampler(ends)

    def __iter__(self):
        return iter(self.batches)


class _Loader:
    device = torch.device("cuda", 0)
    timeout, prefetch_depth, dataset, on_error = 0, 2, list(range(100)), "raise"

    def __init__(self, persistent: bool, gpu_timeout: float = 300.0) -> None:
        self.persistent_workers, self.gpu_timeout = persistent, gpu_timeout

    def __len__(self) -> int:
        return 3


def _batch(seq: int, epoch: int = 0):
    return types.SimpleNamespace(parts=1, epoch=epoch, seq=seq, first_position=4 * seq, seed=0, has_target=True,
                                 seconds=0.0, skipped=(), indices=np.arange(4 * seq, 4 * seq + 4))


@pytest.fixture
def gpu_iterator(monkeypatch):
    executor = _Executor()
    monkeypatch.setattr(_iterators, "executor_for", lambda loader, rt, device: executor)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: types.SimpleNamespace(wait_event=lambda e: 0))
    monkeypatch.setattr(_iterators, "CONSUMER_POLL_S", 0.01)
    monkeypatch.setattr(_iterators, "EXEC_JOIN_S", 0.1)
    monkeypatch.setattr(_iterators, "THREAD_JOIN_S", 0.1)
    made = []

    def make(batches, persistent=False, ends=(), hang=False, fail=False, **kw):
        if hang:  # the decoder hangs
            executor.block.clear()
        executor.fail = fail
        loader, inner = _Loader(persistent, **kw), _Inner(batches, ends)
        rt = LoaderRuntime(Delivery(), inner=inner)
        it = _iterators.GpuIterator(loader, rt, inner)
        made.append(it)
        return it, loader, rt, executor

    yield make
    executor.block.set()
    for it in made:
        it.close()


def test_gpu_iterator_start_and_epoch_end(gpu_iterator):
    it, loader, rt, ex = gpu_iterator([_batch(k) for k in range(3)], persistent=True)
    assert it._life.state is S.RUNNING and not it.parked
    assert [out for out in it] == [(f"images {4 * k}", k) for k in range(3)]
    assert it._life.state is S.CLOSED and rt.batches_done == 3 and rt.running is None
    assert ex.released == [99]  # the pass retired, its slots released
    assert next(it, None) is None


def test_gpu_iterator_parks_and_runs_ahead(gpu_iterator):
    batches = [_batch(0), _batch(1), _batch(2, epoch=1), _batch(3, epoch=1)]
    it, loader, rt, ex = gpu_iterator(batches, persistent=True, ends=[1])
    assert [out[1] for out in it] == [0, 1]
    assert it.parked and it._life.state is S.PARKED and rt.running is it and ex.released == []
    assert next(it, None) is None  # parked: the epoch is over for the loop
    it.resume_epoch(loader)  # the next iter() takes it (Note [torchdali run-ahead])
    assert it._life.state is S.RUNNING and [out[1] for out in it] == [2, 3]
    assert it._life.state is S.CLOSED


def test_gpu_iterator_stalls(gpu_iterator):
    it, loader, rt, ex = gpu_iterator([_batch(0)], gpu_timeout=1e-6, hang=True)
    with pytest.raises(DecoderStalled, match="gpu_timeout"):
        next(it)
    assert it._life.state is S.CLOSED and isinstance(rt.stalled, DecoderStalled)
    assert ex.released == []  # a stuck executor's stream never finishes: its slots stay taken


def test_gpu_iterator_error_closes_it(gpu_iterator):
    it, loader, rt, ex = gpu_iterator([_batch(0), _batch(1)], fail=True)
    with pytest.raises(RuntimeError, match="GPU executor failed on batch 0.*bad batch"):
        next(it)
    assert it._life.state is S.CLOSED and ex.released == [99]
    assert next(it, None) is None


def test_gpu_iterator_closed_half_way(gpu_iterator):
    it, loader, rt, ex = gpu_iterator([_batch(k) for k in range(3)], persistent=True)
    assert next(it)[1] == 0
    it.close()
    it.close()
    assert it._life.state is S.CLOSED and ex.released == [99] and next(it, None) is None
    assert not any(t.is_alive() for t in it._threads)



class _GatedBatches(torch.utils.data.Dataset):
    """Fake packed batches that a worker hands over once the gate file exists (a file, not a
    lock: a worker shut down while it waits must leave nothing held)."""

    def __init__(self, gate: str, n: int = 3) -> None:
        self.gate, self.n = gate, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k: int):
        while not os.path.exists(self.gate):
            time.sleep(0.01)
        return _batch(k)


def _workers_inner(gate: str):
    import multiprocessing as mp

    return torch.utils.data.DataLoader(_GatedBatches(gate), batch_size=None, num_workers=1,
                                       multiprocessing_context=mp.get_context("fork"))


def _stand_in(monkeypatch) -> None:
    executor = _Executor()
    monkeypatch.setattr(_iterators, "executor_for", lambda loader, rt, device: executor)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: types.SimpleNamespace(wait_event=lambda e: 0))
    monkeypatch.setattr(_iterators, "CONSUMER_POLL_S", 0.01)


def test_gpu_iterator_waits_on_workers_in_steps_and_keeps_the_users_timeout(monkeypatch, tmp_path):
    _stand_in(monkeypatch)
    inner = _workers_inner(str(tmp_path / "gate"))  # never opened: the workers' first batch never comes
    loader = _Loader(False)
    loader.timeout = 0.3
    it = _iterators.GpuIterator(loader, LoaderRuntime(Delivery(), inner=inner), inner)
    try:
        with pytest.raises(RuntimeError, match=r"DataLoader timed out after 0.3 seconds"):
            next(it)
        assert it._life.state is S.CLOSED
    finally:
        it.close()


def test_gpu_iterator_closed_while_it_waits_on_workers_ends_its_threads(monkeypatch, tmp_path):
    _stand_in(monkeypatch)
    inner = _workers_inner(str(tmp_path / "gate"))
    it = _iterators.GpuIterator(_Loader(False), LoaderRuntime(Delivery(), inner=inner), inner)
    workers = list(it._inner_it._workers)
    it.close()  # the staging thread is inside torch's wait for the workers: the stop ends it
    assert not any(t.is_alive() for t in it._threads)
    # not persistent: shut down (torch joins each worker for a while, then terminates it: its end can trail)
    deadline = time.monotonic() + 10.0
    while any(w.is_alive() for w in workers) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(not w.is_alive() for w in workers)


def test_gpu_iterator_takes_the_workers_batches(monkeypatch, tmp_path):
    _stand_in(monkeypatch)
    (tmp_path / "gate").touch()
    inner = _workers_inner(str(tmp_path / "gate"))
    it = _iterators.GpuIterator(_Loader(False), LoaderRuntime(Delivery(), inner=inner), inner)
    assert [out[1] for out in it] == [0, 1, 2] and it._life.state is S.CLOSED
