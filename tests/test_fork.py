"""Objects holding CUDA state are not finalised in forked children (torchdali/_fork.py)."""
from __future__ import annotations

import gc
import logging
import os
import threading
import time

import pytest

import torchdali as td
from torchdali import _fork
from torchdali._fork import _LIVE, keep_in_children

from ._helpers import make_folder


class _Finalised:
    """Cyclic garbage whose finaliser writes the pid it ran in to ``fd``."""

    def __init__(self, fd: int, register: bool) -> None:
        self.fd = fd
        self.cycle = self
        if register:
            keep_in_children(self)

    def __del__(self) -> None:
        os.write(self.fd, f"{os.getpid()}\n".encode())


def _pids_finalised_after_fork(register: bool) -> tuple[int, list[int]]:
    r, w = os.pipe()
    gc.disable()
    try:
        _Finalised(w, register)  # garbage in a cycle: only the cyclic collector frees it
        pid = os.fork()
        if pid == 0:  # the child collects its copy of the garbage, then exits without finalising more
            gc.collect()
            os._exit(0)
        os.waitpid(pid, 0)
        gc.collect()  # the parent's copy
    finally:
        gc.enable()
    os.close(w)
    with os.fdopen(r) as f:
        lines = f.read().split()
    return pid, [int(x) for x in lines]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_registered_garbage_is_finalised_in_the_parent_only(monkeypatch):
    monkeypatch.setattr(_fork, "FREEZE_AT_FORK", False)  # the registry alone
    child, pids = _pids_finalised_after_fork(register=True)
    assert pids == [os.getpid()]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_any_garbage_from_before_the_fork_is_finalised_in_the_parent_only():
    # the child's frozen generation: a CUDA tensor in an exception's traceback is not registered
    child, pids = _pids_finalised_after_fork(register=False)
    assert pids == [os.getpid()]
    assert gc.get_freeze_count() == 0  # the parent itself is never frozen


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_garbage_another_thread_makes_while_the_fork_waits_is_not_finalised_in_the_child():
    # logging's before-fork hook takes logging's lock; while another thread holds it, the
    # forking thread waits there with the GIL released and that thread runs on, after
    # torchdali's own before-fork hook
    r, w = os.pipe()
    holding, made = threading.Event(), threading.Event()

    def other() -> None:
        with logging._lock:
            holding.set()
            time.sleep(0.3)  # the main thread is inside os.fork() by now, waiting for the lock
            _Finalised(w, register=False)
            made.set()

    t = threading.Thread(target=other)
    t.start()
    holding.wait()
    pid = os.fork()
    if pid == 0:
        gc.collect()
        os._exit(0)
    t.join()
    os.waitpid(pid, 0)
    assert made.is_set()
    gc.collect()
    os.close(w)
    with os.fdopen(r) as f:
        pids = [int(x) for x in f.read().split()]
    assert pids == [os.getpid()]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_without_the_guards_the_child_finalises_its_copy(monkeypatch):
    # the control: what aborted DataLoader workers that inherited CUDA state in garbage
    monkeypatch.setattr(_fork, "FREEZE_AT_FORK", False)
    child, pids = _pids_finalised_after_fork(register=False)
    assert sorted(pids) == sorted([child, os.getpid()])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_programs_own_frozen_objects_stay_frozen_and_collection_stays_on():
    def frozen(obj) -> bool:  # the permanent generation is not in gc.get_objects()
        return not any(o is obj for o in gc.get_objects())

    marker = [object()]
    gc.freeze()
    try:
        fresh = [object()]  # made after the program's freeze: the child freezes it too
        pid = os.fork()
        if pid == 0:
            os._exit(0 if frozen(marker) and frozen(fresh) and gc.isenabled() else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert frozen(marker) and not frozen(fresh) and gc.isenabled()  # the parent as it was
    finally:
        gc.unfreeze()


def test_loaders_are_registered(tmp_path):
    root = make_folder(tmp_path / "f", n=2, classes=1)
    loader = td.DataLoader(td.datasets.ImageFolder(root), batch_size=2, transforms=td.transforms.Resize((8, 8)))
    assert loader in _LIVE
    loader.close()


@pytest.mark.cuda
def test_delivered_batches_are_registered(tmp_path):
    # record_stream'd blocks record CUDA events when freed: a forked child must never free them
    import torch

    root = make_folder(tmp_path / "f", n=4, classes=2)
    loader = td.DataLoader(td.datasets.ImageFolder(root), batch_size=2, device="cuda",
                           transforms=td.transforms.Resize((8, 8)))
    images, targets = next(iter(loader))
    live = list(_LIVE)  # tensors compare elementwise: look them up by identity
    assert images.is_cuda and any(x is images for x in live)
    assert not isinstance(targets, torch.Tensor) or not targets.is_cuda or any(x is targets for x in live)
    loader.close()
