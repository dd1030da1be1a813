"""The lifecycle of a GPU iterator (``_iterators.GpuIterator``): its states, the transitions
between them in one table, and what closing does from each state.

::

    RUNNING --epoch ends--------------------------> ENDED --+
    RUNNING --epoch ends, next one under way------> PARKED  |
    PARKED  --next iter() takes it (run-ahead)----> RUNNING |
    RUNNING --a batch past gpu_timeout------------> STUCK   |
    RUNNING, ENDED, PARKED, STUCK --close, error,           |
            garbage collection, interpreter exit--> CLOSED <+

A new iterator starts RUNNING. ``Lifecycle.move`` is the only way to change the state, and
raises ``IllegalTransition`` on a move the table does not hold. What ``_close`` does
depends only on the state it closes from (``close_plan``); Note [torchdali iterator
shutdown] in ``_iterators.py`` says why each step is needed.
"""
from __future__ import annotations

import enum
import threading
from typing import NamedTuple


class IterState(enum.IntEnum):
    """Where a GPU iterator is in its life."""

    RUNNING = 0  # an epoch is under way: the threads stage and decode, ``__next__`` hands batches over
    ENDED = 1  # the workers' pass ended with the epoch: it closes at once, persistent workers kept
    PARKED = 2  # the epoch ended with the next one under way behind it: open, kept by the loader's runtime
    STUCK = 3  # the executor has been inside one batch past ``gpu_timeout`` (``DecoderStalled``)
    CLOSED = 4  # threads stopped, ring slots released: ``__next__`` raises StopIteration


S = IterState

#: every legal move, with what makes it
TRANSITIONS: dict[tuple[IterState, IterState], str] = {
    (S.RUNNING, S.ENDED): "the workers' pass ended with the epoch",
    (S.RUNNING, S.PARKED): "the epoch ended with the next one under way (Note [torchdali run-ahead])",
    (S.PARKED, S.RUNNING): "the next iter() takes the epoch run ahead (resume_epoch)",
    (S.RUNNING, S.STUCK): "a batch inside the executor past gpu_timeout",
    (S.RUNNING, S.CLOSED): "closed half-way: close(), an error, garbage collection, the interpreter's exit",
    (S.ENDED, S.CLOSED): "closed at the end of its epoch",
    (S.PARKED, S.CLOSED): "a parked iterator not taken, or its loader closed or collected",
    (S.STUCK, S.CLOSED): "closed on the DecoderStalled it raised",
}


class IllegalTransition(RuntimeError):
    """A move between two states that ``TRANSITIONS`` does not hold: a bug in torchdali."""


class ClosePlan(NamedTuple):
    """What closing does, from the state it closes from (Note [torchdali iterator shutdown])."""

    release_slots: bool  # wait for the executor's stream, then free the ring slots (step 4)
    keep_workers: bool  # persistent workers stay for torch's reset at the next iter() (step 5)
    join_stager_first: bool  # the staging thread is inside the next epoch: workers stay only once it is out


def close_plan(previous: IterState, persistent: bool) -> ClosePlan:
    """What ``GpuIterator._close`` does when it closes from ``previous``."""
    keep = persistent and previous in (S.ENDED, S.PARKED)
    # a stuck executor's stream never finishes: its ring slots stay taken
    return ClosePlan(previous is not S.STUCK, keep, keep and previous is S.PARKED)


class Lifecycle:
    """The state of one iterator; ``move`` is atomic, so a close that races another is done once."""

    def __init__(self) -> None:
        self.state = S.RUNNING
        self._lock = threading.Lock()

    def move(self, to: IterState) -> IterState:
        """Go to ``to``; returns the state left. Raises ``IllegalTransition`` on a move not in
        ``TRANSITIONS``."""
        with self._lock:
            previous = self.state
            if (previous, to) not in TRANSITIONS:
                raise IllegalTransition(f"torchdali: a GPU iterator cannot go from {previous.name} to {to.name}")
            self.state = to
            return previous

    def close(self) -> IterState | None:
        """Go to CLOSED; returns the state left, or None when it was closed already."""
        with self._lock:
            if self.state is S.CLOSED:
                return None
            previous, self.state = self.state, S.CLOSED
            return previous
