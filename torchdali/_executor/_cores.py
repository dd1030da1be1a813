"""A CPU core kept for the executor thread, which drives nvJPEG.

nvJPEG's batched hardware decode keeps its calling thread on a CPU for the whole
call (its host work and its wait for the engines are both CPU time), so the
executor thread needs a core of its own while it is inside the call. Workers that
decode a share of the JPEGs (``cpu_decode_share``) take it from it: on the H200
with 16 cores and a share of 0.1-0.2, the executor thread was off its CPU for
0.1-0.9 ms of every 8-11 ms call, against under 0.1 ms on a core the workers may
not use. Workers that only read bytes rarely take it (0.01-0.2 ms), and pinning
then changed the loader's rate by -4% to +9%, within the runs' spread
(``benchmarks/RESULTS.md``), so "auto" pins only with a share. ``DataLoader(decode_core=...)``
chooses the core (``plan_decode_core``); the executor thread moves onto it when it
starts (``pin_this_thread``) and every worker moves off it (``KeepOff``, wrapping
the user's ``worker_init_fn``). The training loop's own thread is left alone.

Processes of one node started by torchrun see the same CPUs unless they were bound
apart: local rank ``r`` of ``LOCAL_WORLD_SIZE`` takes the ``r``-th CPU from the top
of the set, and the workers of every rank keep off all of those.
"""
from __future__ import annotations

import os
from typing import Any, Callable

MIN_LEFT = 3  # "auto" keeps a core only where at least this many are left to the workers


def _allowed() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set()


def _local_rank() -> tuple[int, int]:
    """(local rank, processes on this node) as torchrun sets them; (0, 1) otherwise."""
    try:
        size = max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)
        return min(max(int(os.environ.get("LOCAL_RANK", "0")), 0), size - 1), size
    except ValueError:
        return 0, 1


def plan_decode_core(setting: Any, share: float, num_workers: int) -> tuple[int | None, frozenset[int]]:
    """(the executor thread's core, the CPUs left to the workers), or ``(None, all)`` for no pinning.

    ``setting``: ``"auto"`` keeps a CPU when the workers decode a share (``share > 0``)
    and at least ``MIN_LEFT`` CPUs are left to them: the highest this process may use,
    or for torchrun's local rank ``r`` the ``r``-th from the top (the workers keep off
    the CPUs of every local rank); None never pins; an int is that CPU, which this
    process must be allowed to use.
    """
    allowed = _allowed()
    if setting is None or not allowed or not hasattr(os, "sched_setaffinity"):
        return None, frozenset(allowed)
    if setting == "auto":
        rank, size = _local_rank()
        top = sorted(allowed)[::-1][:size]
        if share <= 0.0 or num_workers <= 0 or len(allowed) - len(top) < MIN_LEFT or rank >= len(top):
            return None, frozenset(allowed)
        return top[rank], frozenset(allowed - set(top))
    core = int(setting)
    if core not in allowed:
        raise ValueError(f"decode_core={core} is not among the CPUs this process may use ({sorted(allowed)})")
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
