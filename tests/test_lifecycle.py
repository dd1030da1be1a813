"""The GPU iterator's lifecycle (``torchdali/_executor/_lifecycle.py``): one test per transition,
and what closing does from each state. The table and ``close_plan`` are what ``GpuIterator``
runs; its own tests (``tests/test_gpu_loader.py``, ``-m cuda``) run the threads and the GPU."""
from __future__ import annotations

import threading

import pytest

from torchdali._executor._lifecycle import (TRANSITIONS, ClosePlan, IllegalTransition, IterState, Lifecycle,
                                            close_plan)

S = IterState


def _at(*path: IterState) -> Lifecycle:
    life = Lifecycle()
    for state in path:
        life.move(state)
    return life


def test_start():
    life = Lifecycle()
    assert life.state is S.RUNNING


def test_park_between_epochs():
    life = Lifecycle()
    assert life.move(S.PARKED) is S.RUNNING and life.state is S.PARKED
    # parked, closed by a miss or by its loader: the persistent workers stay once the stager is out
    assert close_plan(life.close(), persistent=True) == ClosePlan(True, True, True)
    assert life.state is S.CLOSED


def test_run_ahead():
    life = _at(S.PARKED)
    assert life.move(S.RUNNING) is S.PARKED and life.state is S.RUNNING
    life.move(S.PARKED)  # and again at the next epoch's end
    assert life.move(S.RUNNING) is S.PARKED


def test_epoch_end():
    life = _at(S.ENDED)
    assert close_plan(life.close(), persistent=True) == ClosePlan(True, True, False)
    assert close_plan(S.ENDED, persistent=False) == ClosePlan(True, False, False)


def test_stall():
    life = _at(S.STUCK)
    # a stuck executor's stream never finishes: no wait for it, no slot released, workers shut down
    assert close_plan(life.close(), persistent=True) == ClosePlan(False, False, False)


def test_error_and_close_half_way():
    life = Lifecycle()
    # a background thread's failure, the user's close(), Ctrl-C: from RUNNING straight to CLOSED
    assert close_plan(life.close(), persistent=True) == ClosePlan(True, False, False)
    assert life.state is S.CLOSED


def test_interpreter_exit_closes_from_every_open_state_once():
    # __del__ (garbage collection, the interpreter's exit) calls close() from whatever state it is in
    for path in [(), (S.ENDED,), (S.PARKED,), (S.STUCK,), (S.PARKED, S.RUNNING)]:
        life = _at(*path)
        assert life.close() is (path[-1] if path else S.RUNNING)
        assert life.close() is None  # idempotent: the second close does nothing
        assert life.state is S.CLOSED


def test_every_other_move_is_illegal():
    legal = set(TRANSITIONS)
    assert len(legal) == 8
    paths = {S.RUNNING: (), S.ENDED: (S.ENDED,), S.PARKED: (S.PARKED,), S.STUCK: (S.STUCK,)}
    for start in S:
        for to in S:
            if (start, to) in legal:
                continue
            life = _at(*paths[start]) if start is not S.CLOSED else Lifecycle()
            if start is S.CLOSED:
                life.close()
            with pytest.raises(IllegalTransition, match=f"from {start.name} to {to.name}"):
                life.move(to)
            assert life.state is start


def test_closed_is_the_end_and_every_state_can_reach_it():
    assert not any(a is S.CLOSED for a, _ in TRANSITIONS)
    assert {a for a, b in TRANSITIONS if b is S.CLOSED} == set(S) - {S.CLOSED}


def test_a_close_racing_another_is_done_once():
    life = Lifecycle()
    barrier = threading.Barrier(8)
    got = []

    def close():
        barrier.wait()
        got.append(life.close())

    threads = [threading.Thread(target=close) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got, key=lambda s: s is None) == [S.RUNNING] + [None] * 7
