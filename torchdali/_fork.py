"""Objects that hold CUDA state are never finalised in a forked child.

A DataLoader worker is a fork of the training process. Whatever was unreachable
garbage in the parent at that moment (a loader from an earlier epoch or test, an
exception's traceback holding a batch, anything caught in a reference cycle) is
copied into the child, and the child's cyclic garbage collector may finalise it
there. Finalising frees CUDA tensors, streams and nvJPEG handles, and CUDA cannot
be used in a forked child: the call fails inside a C++ destructor and the worker
aborts ("CUDA error: initialization error"), which the parent sees as a dead worker.

Two guards, both installed with ``os.register_at_fork``:

* The child freezes the collector's generations (``gc.freeze``) in its after-fork hook,
  so everything it inherited sits in the permanent generation, which its collector
  never visits. Freezing in the child rather than before the fork matters: between
  the before-fork hooks and the fork itself, other threads can still run (another
  before-fork hook may wait on a lock, logging's does) and make new garbage. Automatic
  collection is off from the before-fork hook until the child's freeze, so none of
  that garbage is collected in between; the parent gets its own setting back at once.
* :func:`keep_in_children` registers an object; the before-fork hook takes a strong
  reference to every registered object that is still alive, which the parent drops
  right after the fork and the child keeps. So the child never finalises them, even
  when the interpreter drops the parent's other threads (and their references) on the
  way into the child. The GPU path registers its loaders, decoders, rings and
  iterators, and every batch it delivers: a batch's tensors are used on the training
  loop's stream (``record_stream``), and freeing such a block records CUDA events.

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
_collecting = False  # whether automatic collection was on when the fork began
_held: list[Any] = []  # registered objects, from the before-fork hook until the fork is done


def _before_fork() -> None:
    global _collecting, _held
    _held = list(_LIVE)
    _collecting = FREEZE_AT_FORK and gc.isenabled()
    if _collecting:
        gc.disable()


def _after_fork_in_parent() -> None:
    global _held
    _held = []
    if _collecting:
        gc.enable()


def _after_fork_in_child() -> None:
    _KEPT.extend(_held)
    if FREEZE_AT_FORK:
        gc.freeze()  # a program's own frozen objects stay frozen: the child never unfreezes
    if _collecting:
        gc.enable()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)
