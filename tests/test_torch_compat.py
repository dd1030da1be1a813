"""torch's private DataLoader internals that torchdali uses (``torchdali/_torch_compat.py``):
each test fails when the installed torch changes one of them, by name, kind or behaviour."""
from __future__ import annotations

import inspect
import multiprocessing as mp
import os
import signal

import pytest
import torch.utils.data as tud
from torch.utils.data import dataloader as torch_dataloader

from torchdali import _torch_compat as compat


class _Gated(tud.Dataset):
    """Items wait until the test opens the gate: the workers' next batch comes when the test says."""

    def __init__(self, gate, n: int = 4) -> None:
        self.gate, self.n = gate, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        self.gate.wait()
        return i


def _fork():
    return mp.get_context("fork")


def test_the_names_exist_with_the_kind_and_signature_used():
    it_type = torch_dataloader._MultiProcessingDataLoaderIter
    assert compat.MultiProcessingIter is it_type and inspect.isclass(it_type)
    assert issubclass(it_type, torch_dataloader._BaseDataLoaderIter)
    params = list(inspect.signature(it_type._try_get_data).parameters)
    assert params == ["self", "timeout"]
    assert list(inspect.signature(it_type._shutdown_workers).parameters) == ["self"]
    hook = getattr(tud.DataLoader, compat.ITERATOR_HOOK)
    assert callable(hook) and list(inspect.signature(hook).parameters) == ["self"]
    # torch's __iter__ builds each epoch's iterator through the hook DataLoader overrides
    assert f"self.{compat.ITERATOR_HOOK}()" in inspect.getsource(tud.DataLoader.__iter__)
    # every wait of torch's iterator on the workers goes through _try_get_data
    assert "self._try_get_data(" in inspect.getsource(it_type._get_data)
    # a dead worker: the messages WORKER_DEATH_TEXT reads
    source = inspect.getsource(it_type._try_get_data)
    assert "DataLoader worker" in source and "exited unexpectedly" in source


def test_a_single_process_iterator_has_no_workers():
    it = iter(tud.DataLoader(list(range(4)), batch_size=2))
    assert not compat.has_workers(it) and compat.worker_processes(it) == []
    assert compat.workers_shutdown(it) is None
    compat.shutdown_workers(it)  # nothing to do
    assert next(it).tolist() == [0, 1]


def test_torch_get_iterator_is_torchs_own():
    loader = tud.DataLoader(list(range(4)), batch_size=2)
    it = compat.torch_get_iterator(loader)
    assert type(it) is torch_dataloader._SingleProcessDataLoaderIter
    assert [b.tolist() for b in it] == [[0, 1], [2, 3]]


def test_next_within_ends_a_wait_by_type_and_the_iterator_goes_on_as_before():
    ctx = _fork()
    gate = ctx.Event()
    loader = tud.DataLoader(_Gated(gate), batch_size=2, num_workers=1, multiprocessing_context=ctx,
                            prefetch_factor=1)
    it = iter(loader)
    try:
        assert compat.has_workers(it)
        for _ in range(2):
            with pytest.raises(compat.WorkerWaitTimeout):
                compat.next_within(it, 0.05)
        gate.set()
        assert compat.next_within(it, 60).tolist() == [0, 1]
        # a plain next() waits as torch does (the bounded wait is only the caller's)
        assert next(it).tolist() == [2, 3]
        with pytest.raises(StopIteration):
            compat.next_within(it, 60)
    finally:
        gate.set()
        compat.shutdown_workers(it)


def test_a_dead_worker_reads_as_a_death_and_its_process_names_it():
    ctx = _fork()
    gate = ctx.Event()
    loader = tud.DataLoader(_Gated(gate), batch_size=2, num_workers=1, multiprocessing_context=ctx)
    it = iter(loader)
    try:
        workers = compat.worker_processes(it)
        assert len(workers) == 1 and workers[0].is_alive()
        with pytest.raises(RuntimeError) as info:
            os.kill(workers[0].pid, signal.SIGKILL)
            workers[0].join(60)
            for _ in range(1000):  # torch's SIGCHLD handler may raise in any of these waits
                compat.next_within(it, 0.05)
        assert not isinstance(info.value, compat.WorkerWaitTimeout)
        assert any(m in str(info.value) for m in compat.WORKER_DEATH_TEXT), str(info.value)
        assert workers[0].exitcode == -signal.SIGKILL
    finally:
        gate.set()
        compat.shutdown_workers(it)


def test_persistent_iterator_shutdown_and_forget():
    ctx = _fork()
    gate = ctx.Event()
    gate.set()
    loader = tud.DataLoader(_Gated(gate), batch_size=2, num_workers=1, multiprocessing_context=ctx,
                            persistent_workers=True)
    assert compat.persistent_iterator(loader) is None
    it = iter(loader)
    assert compat.persistent_iterator(loader) is it
    assert [b.tolist() for b in it] == [[0, 1], [2, 3]]
    assert iter(loader) is it  # torch resets the same iterator, with its workers
    workers = compat.worker_processes(it)
    compat.workers_shutdown(it)()
    assert all(not w.is_alive() for w in workers)
    compat.forget_persistent_iterator(loader, object())  # another iterator: kept
    assert compat.persistent_iterator(loader) is it
    compat.forget_persistent_iterator(loader, it)
    assert compat.persistent_iterator(loader) is None
    again = iter(loader)
    try:
        assert again is not it and [b.tolist() for b in again] == [[0, 1], [2, 3]]
    finally:
        compat.shutdown_workers(again)
