"""Objects that hold CUDA state are never finalised in a forked child.

A DataLoader worker is a fork of the training process. Whatever was unreachable
garbage in the parent at that moment (a loader from an earlier epoch or test,
caught in a reference cycle) is copied into the child, and the child's cyclic
garbage collector may finalise it there. Finalising frees CUDA tensors, streams
and nvJPEG handles, and CUDA cannot be used in a forked child: the call fails
inside a C++ destructor and the worker aborts ("CUDA error: initialization
error"), which the parent sees as a dead worker.

:func:`keep_in_children` registers such an object; right after a fork, the child
takes a strong reference to every registered object that is still alive, so the
child never finalises them. The parent's copies are untouched and are released
in the parent as usual. Workers end with ``os._exit``, so nothing is leaked.
"""
from __future__ import annotations

import os
import weakref
from typing import Any

_LIVE: "weakref.WeakSet[Any]" = weakref.WeakSet()
_KEPT: list[Any] = []


def keep_in_children(obj: Any) -> None:
    """Never finalise ``obj`` in a process forked from this one."""
    _LIVE.add(obj)


def _after_fork_in_child() -> None:
    _KEPT.extend(list(_LIVE))


os.register_at_fork(after_in_child=_after_fork_in_child)
