"""Workers end when the process that started them is gone.

A DataLoader worker is a child of the training process. When that process dies
without shutting its workers down (SIGKILL, the out-of-memory killer, ``os._exit``,
a crash), nothing tells them. Torch's worker loop looks at its parent only between
tasks, every ``MP_STATUS_CHECK_INTERVAL`` (5 s), and a worker blocked elsewhere
never does: one waiting for a staging slot that is never released
(``HostRing.acquire``), or one at its own exit, in multiprocessing's join of its
result queue's feeder thread, writing to a full pipe whose read end the other
workers (forked from the same parent) still hold. Such a worker lives on with its
memory, the staging ring (a memfd: it goes with the last process that maps it), the
dead parent's GPU context (a fork of a process that used CUDA inherits its
``/dev/nvidia*`` descriptors, and the driver keeps the context while one is open),
and the write end of whatever pipe the trainer's output went to
(``python train.py | tee log`` never ends).

So every worker starts one daemon thread (``torchdali-lifeline``) before its first
task: the inner loader's ``worker_init_fn`` is a ``Lifeline``, which starts it and
then calls the user's ``worker_init_fn``. Torch's worker loop calls it first, in
every worker, on both paths and with every start method. (A dataset the loader runs
as torch would, its transform not lifted, has torch's workers and torch's check
alone.) The thread looks every ``POLL_S`` whether the
process that started the worker is still running and, once it is not, ends the
worker at once with ``os._exit``: nothing that could block (no finalizers, no
queue joins, no write to an output pipe that may be full).

Which process that is, is recorded in the parent, never read in the worker later
(``os.getppid()`` is already 1 when the parent died before the worker looked): the
process that forked the worker (``os.register_at_fork``), or, when the worker was
started from a pickle (spawn, forkserver), the process that pickled its ``Lifeline``
(``Lifeline.owner``). Under forkserver the worker's
parent is the fork server, not that process, so a parent other than the owner is
checked through ``/proc`` (running, not a zombie, the same start time).

On Linux the worker also asks the kernel for SIGKILL when its parent ends
(``PR_SET_PDEATHSIG``), which needs no thread and no GIL; but the kernel sends it
when the *thread* that created the worker ends, not the process. So it is asked
for only when that thread was the main thread, which lives as long as the process;
a loader iterated from another thread (which may end while the workers are meant
to live on) relies on the polling thread alone.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any, Callable, NamedTuple

POLL_S = 0.5  # how often a worker looks whether the process that started it is still running
EXIT_STATUS = 1  # a worker whose owner is gone ends with this status; no one is left to read it
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class Owner(NamedTuple):
    """The process a worker lives for, as recorded in that process."""

    pid: int
    start: int | None  # its start time in clock ticks since boot (/proc/<pid>/stat), to tell a reused pid
    main_thread: bool  # whether the thread that created the worker is the main thread


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in ticks) of ``pid`` from ``/proc``; None when it is not there."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()  # the name, in parentheses, may hold spaces
    try:
        return fields[0].decode(), int(fields[19])
    except (IndexError, ValueError):
        return None


_own: tuple[int, int | None] | None = None  # (pid, its start time): a process's start time never changes


def _own_start() -> int | None:
    global _own
    pid = os.getpid()
    if _own is None or _own[0] != pid:
        stat = _proc_stat(pid)
        _own = (pid, stat[1] if stat is not None else None)
    return _own[1]


def here() -> Owner:
    """This process and thread, as a worker about to be created here should record them."""
    return Owner(os.getpid(), _own_start(), threading.current_thread() is threading.main_thread())


def running(pid: int, start: int | None = None) -> bool:
    """Whether process ``pid`` (started at ``start``, when known) is still running.

    The parent of the calling process needs no lookup. A zombie has ended: its
    descendants were already given to another parent, and a zombie stays until its
    own parent reaps it, which may be never."""
    if os.getppid() == pid:
        return True
    stat = _proc_stat(pid)
    if stat is not None:
        return stat[0] not in ("Z", "X", "x") and (start is None or stat[1] == start)
    if os.path.isdir("/proc/self"):
        return False
    try:  # no /proc (not Linux): a zombie passes for running
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


# The process that forked this one, as recorded there just before the fork; None in a process
# that no process with this module imported forked (a spawned worker).
_forked_by: Owner | None = None
_forking: Owner | None = None  # in the forking process, from its before-fork hook until the fork


def _before_fork() -> None:
    global _forking
    _forking = here()


def _after_fork_in_child() -> None:
    global _forked_by
    _forked_by = _forking


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)

_watching: int | None = None  # the pid of the process whose lifeline runs


def watch(owner: Owner) -> None:
    """End this process once ``owner`` is no longer running (once per process)."""
    global _watching
    if _watching == os.getpid():
        return
    _watching = os.getpid()
    if owner.main_thread and sys.platform.startswith("linux") and os.getppid() == owner.pid:
        _ask_for_parent_death_signal()
    if not running(owner.pid, owner.start):  # the owner died before the signal was asked for
        os._exit(EXIT_STATUS)
    threading.Thread(target=_watch, args=(owner,), name="torchdali-lifeline", daemon=True).start()


def _watch(owner: Owner) -> None:
    while running(owner.pid, owner.start):
        time.sleep(POLL_S)
    os._exit(EXIT_STATUS)  # at once: cleanup may block (see the module's docstring)


def _ask_for_parent_death_signal() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the polling thread alone
        pass


class Lifeline:
    """The inner loader's ``worker_init_fn``: starts the worker's lifeline, then calls the
    user's ``worker_init_fn`` (``then``), if any."""

    def __init__(self, then: Callable[[int], Any] | None = None) -> None:
        self.then = then
        self._owner = here()
        self._unpickled_in: int | None = None

    def __getstate__(self) -> dict:
        # pickled to start a worker (spawn, forkserver): in the process that starts it
        return {"then": self.then, "owner": here()}

    def __setstate__(self, state: dict) -> None:
        self.then, self._owner = state["then"], Owner(*state["owner"])
        self._unpickled_in = os.getpid()

    def owner(self) -> Owner:
        """The process this worker lives for: the one that pickled this object to start it
        (spawn, forkserver), else the one that forked it (this object is then a copy of its own,
        which may have been made, or unpickled, in an earlier process)."""
        if self._unpickled_in == os.getpid() or _forked_by is None:
            return self._owner
        return _forked_by

    def __call__(self, worker_id: int) -> None:
        watch(self.owner())
        if self.then is not None:
            self.then(worker_id)
