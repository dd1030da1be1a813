"""Objects that hold CUDA state are never finalised in a forked child.

A DataLoader worker is a fork of the training process. Whatever was unreachable
garbage in the parent at that moment (a loader from an earlier epoch or test, an
exception's traceback holding a batch, anything caught in a reference cycle) is
copied into the child, and the child's cyclic garbage collector may finalise it
there. Finalising frees CUDA tensors, streams and nvJPEG handles, and CUDA cannot
be used in a forked child: the call fails inside a C++ destructor and the worker
aborts ("CUDA error: initialization error"), which the parent sees as a dead worker.

Two guards, both installed with ``os.register_at_fork``:

* Every fork freezes the collector's generations first (``gc.freeze``) and unfreezes
  them in the parent right after, so the child inherits everything from before the
  fork in the permanent generation, which its collector never visits; the parent
  collects its own copies as usual. Skipped when the program froze objects itself
  (``gc.get_freeze_count()`` not 0): unfreezing would undo that.
* :func:`keep_in_children` registers an object; right after a fork, the child takes
  a strong reference to every registered object that is still alive, so the child
  never finalises them even when it drops its own references. The GPU path registers
  its loaders, decoders, rings and iterators, and every batch it delivers: a batch's
  tensors are used on the training loop's stream (``record_stream``), and freeing such
  a block records CUDA events.

Workers end with ``os._exit``, so nothing is leaked.
"""
from __future__ import annotations

import gc
import os
import weakref
from typing import Any

_LIVE: "weakref.WeakSet[Any]" = weakref.WeakSet()
_KEPT: list[Any] = []


def keep_in_children(obj: Any) -> None:
    """Never finalise ``obj`` in a process forked from this one."""
    _LIVE.add(obj)


FREEZE_AT_FORK = True  # the first guard; tests turn it off to show what it prevents
_froze = False


def _before_fork() -> None:
    global _froze
    _froze = FREEZE_AT_FORK and gc.get_freeze_count() == 0
    if _froze:
        gc.freeze()


def _after_fork_in_parent() -> None:
    if _froze:
        gc.unfreeze()


def _after_fork_in_child() -> None:
    _KEPT.extend(list(_LIVE))  # the frozen generation stays frozen here


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)
