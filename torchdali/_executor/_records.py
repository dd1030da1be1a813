"""What each DataLoader worker is building, kept where the main process can read it
after the worker has died.

A worker killed by the out-of-memory killer, or one whose decoder crashes, takes
its Python state with it: torch can only say "DataLoader worker (pid N) exited
unexpectedly". Before reading a batch, a worker writes the batch's dataset
indices into its row of a small shared-memory table (``WorkerRecords.begin``);
once the batch is built it clears the row (``end``). When a worker dies, the
iterators turn torch's error into a ``WorkerDied`` naming the samples of the row
it left behind (Note [torchdali iterator shutdown], "A worker dies").

The table is a shared-memory tensor: forked workers inherit it, spawned ones get
it through torch's tensor sharing when the dataset wrapper is pickled to them.
"""
from __future__ import annotations

import signal
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import torch

from ..errors import SampleError, WorkerDied
from .._torch_compat import WORKER_DEATH_TEXT, worker_processes
from ._tags import sample_path

_STATE, _COUNT = 0, 1  # columns of a row; the indices follow
_HEAD = 2
_IDLE, _BUILDING = 0, 1
LISTED = 16  # samples a WorkerDied message lists by path; all are in ``.samples``


class WorkerRecord(NamedTuple):
    """A dead worker's row: the dataset indices of the batch it was building."""

    indices: list[int]
    total: int  # samples in the batch (``indices`` holds the first ``capacity`` of them)


class WorkerRecords:
    """One row per worker: ``[state, count, index_0, index_1, ...]`` in shared memory."""

    def __init__(self, num_workers: int, capacity: int) -> None:
        self.capacity = max(1, int(capacity))
        self.table = torch.zeros((max(1, num_workers), _HEAD + self.capacity), dtype=torch.int64).share_memory_()
        self._rows: np.ndarray | None = None

    def __getstate__(self) -> dict:
        return {"capacity": self.capacity, "table": self.table}

    def __setstate__(self, state: dict) -> None:
        self.capacity, self.table, self._rows = state["capacity"], state["table"], None

    def _row(self) -> np.ndarray | None:
        """This worker's row (None in the main process: nothing survives there to read)."""
        info = torch.utils.data.get_worker_info()
        if info is None or info.id >= self.table.shape[0]:
            return None
        if self._rows is None:
            self._rows = self.table.numpy()
        return self._rows[info.id]

    # -- worker side -----------------------------------------------------------
    def begin(self, indices: Sequence[int]) -> None:
        """The worker starts reading the batch of ``indices``."""
        row = self._row()
        if row is None:
            return
        n = len(indices)
        k = min(n, self.capacity)
        row[_STATE] = _IDLE  # a death half-way through this write leaves no half-written record
        row[_HEAD:_HEAD + k] = np.fromiter(indices, dtype=np.int64, count=n)[:k] if n else ()
        row[_COUNT] = n
        row[_STATE] = _BUILDING

    def building(self) -> bool:
        row = self._row()
        return row is not None and row[_STATE] == _BUILDING

    def end(self) -> None:
        """The worker has built its batch (or failed with an exception it reports itself)."""
        row = self._row()
        if row is not None:
            row[_STATE] = _IDLE

    # -- main-process side -------------------------------------------------------
    def read(self, worker_id: int) -> WorkerRecord | None:
        """What worker ``worker_id`` was building, or None when it was between batches."""
        if not 0 <= worker_id < self.table.shape[0]:
            return None
        row = self.table[worker_id].tolist()
        if row[_STATE] != _BUILDING:
            return None
        n = int(row[_COUNT])
        return WorkerRecord([int(i) for i in row[_HEAD:_HEAD + min(n, self.capacity)]], n)


class EndRecord:
    """The inner loader's ``collate_fn``: runs the packing step, then clears the worker's record.

    A map-style dataset's batch was recorded when its samples were read
    (``TaggedDataset.__getitems__``); an iterable dataset's is recorded here, so a
    crash while decoding is still named.
    """

    def __init__(self, collate: Callable, records: WorkerRecords) -> None:
        self.collate = collate
        self.records = records

    def __call__(self, samples: Sequence[Any]) -> Any:
        records = self.records
        if not records.building():
            records.begin([s.tag.index for s in samples if not s.tag.spare])
        try:
            return self.collate(samples)
        finally:
            records.end()


def _how(exitcode: int | None) -> str:
    if exitcode is None:
        return "exited unexpectedly"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (the kernel's out-of-memory killer sends SIGKILL)" if -exitcode == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {exitcode}"


def worker_died(exc: BaseException, torch_iter: Any, records: WorkerRecords | None,
                dataset: Any) -> WorkerDied | None:
    """``exc`` as a ``WorkerDied`` naming the dead worker's batch, or None when ``exc`` is
    not torch reporting a dead worker (or no record of it exists).

    See Note [torchdali iterator shutdown] in ``_iterators.py``, "A worker dies".
    """
    if records is None or not isinstance(exc, RuntimeError) or isinstance(exc, SampleError):
        return None
    text = str(exc)
    if not any(m in text for m in WORKER_DEATH_TEXT):
        return None
    workers = worker_processes(torch_iter)
    for worker_id, w in enumerate(workers):
        try:
            exitcode = w.exitcode
        except (ValueError, AssertionError):  # a closed process object
            continue
        if exitcode is None or exitcode == 0:
            continue
        record = records.read(worker_id)
        if record is None:
            continue
        samples = [(i, sample_path(dataset, i)) for i in record.indices]
        listed = ", ".join(f"{i} ({p})" if p else str(i) for i, p in samples[:LISTED])
        more = record.total - min(len(samples), LISTED)
        if more > 0:
            listed += f" and {more} more" + (" (see .samples)" if len(samples) > LISTED else "")
        message = (f"samples {listed}: DataLoader worker {worker_id} (pid {w.pid}) {_how(exitcode)} while "
                   f"building their batch; one of these files may need more memory than the worker has (an "
                   f"image too large: see max_image_pixels) or crash a decoder (torch: {text})")
        first = samples[0] if samples else (None, None)
        return WorkerDied(message, index=first[0], path=first[1], samples=samples, worker_id=worker_id,
                          pid=w.pid, exitcode=exitcode)
    return None
