"""torch's private DataLoader internals: every use torchdali makes of them, each named once.

torch's public DataLoader API has no way to wait for the workers' next batch with a
deadline, to end the workers of an iterator the loop left half-way, or to learn which
worker process died. torchdali needs all three (Note [torchdali iterator shutdown] in
``_executor/_iterators.py``), so it reaches into torch's iterator here and nowhere else.
Each name below says what it touches and why; ``tests/test_torch_compat.py`` fails when
the installed torch changes one of them (checked on torch 2.11 and 2.14).
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

import torch.utils.data as tud
from torch.utils.data import dataloader as _torch_dataloader

#: torch's iterator over worker processes. Its type, not its attributes, says that an
#: iterator has workers to poll, to shut down and to name (``num_workers=0`` gives
#: ``_SingleProcessDataLoaderIter``, which has none).
MultiProcessingIter: type = _torch_dataloader._MultiProcessingDataLoaderIter

#: the method of ``torch.utils.data.DataLoader`` that builds an epoch's iterator; torch's
#: ``__iter__`` calls it (and keeps what it returns for persistent workers). ``DataLoader``
#: overrides it, the hook by which a subclass changes only how batches are produced.
ITERATOR_HOOK = "_get_iterator"

#: what torch's errors for a dead worker say: ``_try_get_data`` raises a plain RuntimeError
#: "DataLoader worker (pid(s) N) exited unexpectedly" and the SIGCHLD handler (C++) one that
#: says "... is killed by signal: ...". No type or state tells them from another RuntimeError
#: at the point they arrive, so ``_records.worker_died`` reads the text, and then confirms it
#: by the state: a worker process with a non-zero exit code.
WORKER_DEATH_TEXT = ("DataLoader worker", "exited unexpectedly", "is killed by signal")


class WorkerWaitTimeout(Exception):
    """The workers' next batch did not come within the wait ``next_within`` was given. Raised
    where torch would raise its own timeout error, before torch's iterator changed any state,
    so the same iterator can be waited on again."""


def torch_get_iterator(loader: tud.DataLoader) -> Any:
    """torch's own ``_get_iterator`` for ``loader`` (``ITERATOR_HOOK``): the iterator of a
    loader that runs as under torch."""
    return getattr(tud.DataLoader, ITERATOR_HOOK)(loader)


def has_workers(it: Any) -> bool:
    """Whether ``it`` (what ``iter()`` of a torch DataLoader gave) waits on worker processes."""
    return isinstance(it, MultiProcessingIter)


class _BoundedGet:
    """Stands in, on one torch iterator, for its ``_try_get_data``: the one call through which
    torch's iterator waits on the workers' queue (with ``timeout=0`` it waits in
    ``MP_STATUS_CHECK_INTERVAL`` steps forever, otherwise it raises a RuntimeError that differs
    from a worker's own only by its text). While a thread waits in ``next_within``, that
    thread's wait is ``seconds`` long and ends in ``WorkerWaitTimeout``; every other wait is
    torch's own. It holds the iterator weakly: torch's iterator shuts its workers down when it
    is collected, which a reference cycle would delay."""

    def __init__(self, it: Any) -> None:
        self._it = weakref.ref(it)
        self._method = type(it)._try_get_data  # torch: _MultiProcessingDataLoaderIter._try_get_data
        self.local = threading.local()

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[bool, Any]:
        it = self._it()
        seconds = getattr(self.local, "seconds", None)
        if seconds is None:
            return self._method(it, *args, **kwargs)
        # torch returns (False, None) exactly when its queue's get timed out and no worker died
        success, data = self._method(it, seconds)
        if not success:
            raise WorkerWaitTimeout(seconds)
        return success, data


def next_within(it: Any, seconds: float) -> Any:
    """``next(it)`` waiting at most about ``seconds`` for the workers' next batch, else
    ``WorkerWaitTimeout`` (``it`` unchanged: call again to wait more). torch's own wait cannot
    be cancelled, and its ``timeout`` error is told from a worker's only by text; a wait in
    steps, with this type at the end of each, lets the staging thread see a stop request
    (Note [torchdali iterator shutdown], step 1). ``it`` must be a ``MultiProcessingIter``."""
    get = it.__dict__.get("_try_get_data")
    if not isinstance(get, _BoundedGet):
        get = _BoundedGet(it)
        it._try_get_data = get  # an instance attribute: the class's method is untouched
    get.local.seconds = seconds
    try:
        return next(it)
    finally:
        get.local.seconds = None


def worker_processes(it: Any) -> list:
    """The worker processes of torch's iterator ``it``, by worker id (empty for one without
    workers): ``_records.worker_died`` finds the one that died by its exit code."""
    return list(getattr(it, "_workers", None) or []) if has_workers(it) else []


def shutdown_workers(it: Any) -> None:
    """End the workers of torch's iterator ``it`` now (nothing for one without workers). torch
    ends them only when the iterator is exhausted or collected; an iterator left half-way, or
    a persistent one whose loader closes, must end them itself."""
    if has_workers(it):
        it._shutdown_workers()


def workers_shutdown(it: Any) -> Callable[[], None] | None:
    """What ends the workers of ``it`` (``shutdown_workers``), to run on another thread; None
    when it has none."""
    return (lambda: shutdown_workers(it)) if has_workers(it) else None


def persistent_iterator(loader: tud.DataLoader) -> Any:
    """The iterator torch keeps on ``loader`` with persistent workers (``_iterator``), reset by
    its next ``iter()``; None when there is none."""
    return getattr(loader, "_iterator", None)


def forget_persistent_iterator(loader: tud.DataLoader, it: Any) -> None:
    """Make ``loader``'s next ``iter()`` start new workers instead of resetting ``it``, whose
    workers were shut down: torch would otherwise reset an iterator without workers."""
    if getattr(loader, "_iterator", None) is it:
        loader._iterator = None
