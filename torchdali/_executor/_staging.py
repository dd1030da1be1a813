"""Staging: a packed batch's encoded bytes in pinned host memory, where nvJPEG reads them.

The workers have written most batches into the shared staging ring
(``_ring.py``): nothing to copy, and the batch's ring slot goes back to the
workers once the GPU has read it. A batch that did not fit there arrives as a
blob and is copied into a reused pinned buffer (``PinnedSlot``), free again
once the GPU has passed the event recorded after its batch.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, NamedTuple, Union

import torch

from ._wire import PackedBatch

SLOT_POLL_S = 0.1  # a wait for a free pinned slot checks this often whether the iterator is stopping


class Stopped(Exception):
    """Internal: the iterator is shutting down (Note [torchdali iterator shutdown], ``_iterators.py``)."""


class Turns:
    """``count`` device buffers that batches take in turn (``GpuDecoder``'s decode buffers, a video loader's
    frame buffers): ``claim`` gives the next one once the batch that held it has given it back
    (``give_back``) and what may still read or write it has ended (the ``wait`` given back with it), so
    that the staging thread works on the next batch while the executor finishes this one."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._claimed = [False] * count
        self._waits: list[Callable[[], Any] | None] = [None] * count
        self._turn = 0  # the buffer the next claim gets
        self._cond = threading.Condition()

    def claim(self, stop: threading.Event | None = None) -> int:
        """The next buffer in turn, once given back and its ``wait`` done. Raises ``Stopped`` when ``stop``
        is set while it waits."""
        with self._cond:
            k = self._turn
            while self._claimed[k]:
                if stop is not None and stop.is_set():  # Note [torchdali iterator shutdown]
                    raise Stopped()
                self._cond.wait(timeout=SLOT_POLL_S)
            self._claimed[k] = True
            self._turn = (k + 1) % self.count
            wait, self._waits[k] = self._waits[k], None
        if wait is not None:
            wait()
        return k

    def give_back(self, k: int, wait: Callable[[], Any] | None = None) -> None:
        """Buffer ``k`` free for the next batch; ``wait``: what its next ``claim`` calls first (waits for
        the work that still reads or writes it)."""
        with self._cond:
            self._waits[k] = wait
            self._claimed[k] = False
            self._cond.notify_all()


class PinnedSlot:
    """A reusable pinned host buffer, free again once ``event`` has completed."""

    def __init__(self) -> None:
        self.buffer = torch.empty(0, dtype=torch.uint8)
        self.event: torch.cuda.Event | None = None
        self.view = self.buffer

    def take(self, nbytes: int) -> torch.Tensor:
        """The first ``nbytes`` of the buffer, once the GPU has read the batch before (grown if needed)."""
        if self.event is not None:
            self.event.synchronize()  # only blocks when the GPU is a whole ring behind
        if self.buffer.numel() < nbytes:
            # grow with headroom so a slightly larger batch does not reallocate
            self.buffer = torch.empty(int(nbytes * 1.25) + 4096, dtype=torch.uint8, pin_memory=True)
        self.view = self.buffer[:nbytes]
        return self.view


class RingSlot:
    """A batch's bytes in the shared staging ring: nothing to copy, released by batch number."""

    def __init__(self, view: torch.Tensor) -> None:
        self.view = view


Slot = Union[PinnedSlot, RingSlot]


class HeldRingSlot(NamedTuple):
    """Batch ``seq``'s ring slot, which the GPU may read until ``ready`` has passed."""

    ready: torch.cuda.Event
    seq: int


class Staging:
    """The pinned memory a batch's bytes wait in until the GPU has read them.

    ``stage`` runs on the staging thread; ``give_back``, ``hold`` and
    ``release_ready`` on the executor thread; ``release_all`` on the user's thread
    once the executor thread has stopped.
    """

    def __init__(self, depth: int, ring: Any = None) -> None:
        self.free_slots: queue.Queue[PinnedSlot] = queue.Queue()
        for _ in range(depth + 2):
            self.free_slots.put(PinnedSlot())
        self.ring = ring  # HostRing the workers write into, or None
        if ring is not None:
            ring.register()
        self.pending: list[HeldRingSlot] = []  # ring slots the GPU may still read, oldest first

    def stage(self, batch: PackedBatch, stop: threading.Event) -> tuple[Slot, float]:
        """(slot holding the batch's bytes, seconds spent copying): copies a blob into a
        free pinned slot; a batch in the staging ring is already there.

        Raises ``Stopped`` when ``stop`` is set while it waits for a free slot.
        """
        t0 = time.perf_counter()
        if batch.ring_seq >= 0:
            nbytes = int((batch.offsets + batch.lengths).max()) if len(batch.offsets) else 0
            return RingSlot(self.ring.slot(batch.ring_seq)[:nbytes]), 0.0
        while True:
            try:
                slot = self.free_slots.get(timeout=SLOT_POLL_S)
                break
            except queue.Empty:
                if stop.is_set():  # Note [torchdali iterator shutdown]
                    raise Stopped() from None
        slot.take(batch.blob.numel()).copy_(batch.blob)
        return slot, time.perf_counter() - t0

    def give_back(self, slot: Slot) -> None:
        """Return a pinned slot for reuse (its event guards the reuse). A ring slot goes
        back by its batch number instead: ``hold``, then ``release_ready`` or ``release_all``."""
        if not isinstance(slot, RingSlot):
            self.free_slots.put(slot)

    def hold(self, ready: torch.cuda.Event, seq: int) -> None:
        """Batch ``seq``'s ring slot goes back to the workers once ``ready`` has passed.

        Every numbered batch comes through here, in order, whether or not its bytes
        went through the ring: the next batch for that slot waits for exactly this number.
        """
        self.pending.append(HeldRingSlot(ready, seq))

    def release_ready(self) -> None:
        """Hand ring slots back to the workers once the GPU has read them."""
        while self.pending and self.pending[0].ready.query():
            self.ring.release(self.pending.pop(0).seq)

    def release_all(self, last_seq: int) -> None:
        """Free every ring slot up to batch ``last_seq``; the caller has waited for the GPU.
        See Note [torchdali iterator shutdown]."""
        self.pending.clear()
        self.ring.release_upto(last_seq)
