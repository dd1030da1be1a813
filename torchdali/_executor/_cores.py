"""A CPU core kept for the executor thread, which drives nvJPEG.

nvJPEG's batched hardware decode keeps its calling thread on a CPU for the whole
call (its host work and its wait for the engines are both CPU time), so the
executor thread needs a core of its own while it is inside the call. When the
workers also decode (``cpu_decode_share``), they are busy enough to take that core
from it: on the H200 with 16 cores and a share of 0.15, the executor thread lost
0.9 ms of every 10.5 ms call to them, and with the thread on a core the workers may
not use, the call ran at the rate it has alone. ``DataLoader(decode_core=...)``
chooses the core (``plan_decode_core``); the executor thread moves onto it when it
starts (``pin_this_thread``) and every worker moves off it (``KeepOff``, wrapping
the user's ``worker_init_fn``). The training loop's own thread is left alone.
"""
from __future__ import annotations

import os
from typing import Any, Callable

MIN_CPUS = 4  # "auto" keeps a core only where the process may use at least this many


def _allowed() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set()


def plan_decode_core(setting: Any, share: float, num_workers: int) -> tuple[int | None, frozenset[int]]:
    """(the executor thread's core, the CPUs left to the workers), or ``(None, all)`` for no pinning.

    ``setting``: ``"auto"`` keeps the last CPU this process may use when the workers
    decode a share (``share > 0``), there are workers, and at least ``MIN_CPUS`` CPUs;
    None never pins; an int is that CPU, which this process must be allowed to use.
    """
    allowed = _allowed()
    if setting is None or not allowed or not hasattr(os, "sched_setaffinity"):
        return None, frozenset(allowed)
    if setting == "auto":
        if share <= 0.0 or num_workers <= 0 or len(allowed) < MIN_CPUS:
            return None, frozenset(allowed)
        core = max(allowed)
    else:
        core = int(setting)
        if core not in allowed:
            raise ValueError(f"decode_core={core} is not among the CPUs this process may use "
                             f"({sorted(allowed)})")
        if len(allowed) < 2:
            raise ValueError(f"decode_core={core}: this process may use only that CPU, none would be left "
                             f"for the workers")
    return core, frozenset(allowed - {core})


def pin_this_thread(core: int | None) -> None:
    """Move the calling thread onto ``core`` (nothing for None)."""
    if core is not None:
        os.sched_setaffinity(0, {core})


class KeepOff:
    """A ``worker_init_fn`` that first moves the worker onto ``cpus``, then calls the user's."""

    def __init__(self, cpus: frozenset[int], user_fn: Callable[[int], Any] | None) -> None:
        self.cpus = cpus
        self.user_fn = user_fn

    def __call__(self, worker_id: int) -> None:
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)
        if self.user_fn is not None:
            self.user_fn(worker_id)
