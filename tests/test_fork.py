"""Objects holding CUDA state are not finalised in forked children (torchdali/_fork.py)."""
from __future__ import annotations

import gc
import os

import pytest

import torchdali as td
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
def test_registered_garbage_is_finalised_in_the_parent_only():
    child, pids = _pids_finalised_after_fork(register=True)
    assert pids == [os.getpid()]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_unregistered_garbage_is_finalised_in_the_child_too():
    # the control: without registration the child finalises its copy (what aborted
    # DataLoader workers that inherited a collected loader's CUDA state)
    child, pids = _pids_finalised_after_fork(register=False)
    assert sorted(pids) == sorted([child, os.getpid()])


def test_loaders_are_registered(tmp_path):
    root = make_folder(tmp_path / "f", n=2, classes=1)
    loader = td.DataLoader(td.datasets.ImageFolder(root), batch_size=2, transforms=td.transforms.Resize((8, 8)))
    assert loader in _LIVE
    loader.close()
