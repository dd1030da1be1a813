"""A ring of batch-sized slots in shared host memory that workers write into directly.

Without it every batch's bytes travel twice through the main process: torch
moves the worker's batch tensor through a fresh shared-memory segment (a file
descriptor handed over a socket, a new mapping, a page fault per 4 KiB on first
touch), and the executor then copies it into pinned memory for the GPU. With
the ring the worker copies the encoded bytes once, into slot ``seq % n_slots``
of one shared mapping that the main process has registered with CUDA (pinned),
and nvJPEG reads them from there. Only small metadata crosses the worker queue.

Slot reuse: batch ``seq`` may be written once the batch that last used its
slot, ``seq - n_slots``, is released, i.e. the GPU is done reading it. The main
process publishes releases in a header of the mapping; a worker that gets ahead
waits there (it never happens while ``n_slots`` exceeds the batches in flight).
Batches are released in any order; the lowest unreleased batch never waits, so
the ring cannot deadlock as long as the executor keeps going. Closing an
iterator releases every slot it dispatched, so workers finishing abandoned
batches never block (Note [torchdali iterator shutdown], ``_iterators.py``).

After the slots, the mapping may hold a table of what the workers found in each
sample's file header (``HostRing.known``, ``HostRing.note``): a file read again in a
later epoch, by any worker, with the same size and modification time, is not parsed
again.

The mapping is an anonymous ``memfd``: forked workers inherit it, spawned ones
open it through ``/proc/<pid>/fd``, and it disappears with the last process
that maps it, even after a crash: the workers end within a second of the main
process, however it ends (``_lifeline.py``), and a worker waiting for a slot
stops waiting once the main process is gone.
"""
from __future__ import annotations

import mmap
import os
import time
from typing import Any

import numpy as np
import torch

from .._fork import keep_in_children
from . import _lifeline

_HEADER = 4096  # released[n_slots] int64, then the abandon watermark
_ALIGN = 4096
MAX_SLOTS = 256  # the header holds this many release counters
ACQUIRE_FIRST_SLEEP_S = 1e-4  # a worker waiting for a slot first sleeps this long, doubling each time ...
ACQUIRE_MAX_SLEEP_S = 5e-3  # ... up to this, so a slot released soon is taken soon without a busy loop
PARENT_CHECK_S = 1.0  # a waiting worker checks this often that the main process is still running
# The header table: one row per dataset sample, (size, mtime_ns, H, W, C, header code, scan start, check).
TABLE_COLUMNS = 8
MAX_TABLE_BYTES = 512 << 20  # 8.4 million samples; a larger dataset goes without the table
_MIX = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
        0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x27D4EB2F165667C5)


def _row_check(values: list[int]) -> int:
    """A check word over a table row's seven values, never 0 (an unwritten row is all zeros),
    so a row read while another worker writes it is taken for unknown."""
    h = 0
    for v, m in zip(values, _MIX):
        h = ((h ^ (v & 0xFFFFFFFFFFFFFFFF)) * m) & 0xFFFFFFFFFFFFFFFF
    return (h >> 1) | 1


def ring_supported() -> bool:
    return hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


class HostRing:
    """``n_slots`` slots of ``slot_bytes`` each, shared by the main process and its workers."""

    WARN_AFTER_S = 120.0  # a worker waiting this long for a slot says so (once per batch)

    def __init__(self, n_slots: int, slot_bytes: int, samples: int = 0) -> None:
        if not 1 <= n_slots <= MAX_SLOTS:
            raise ValueError(f"n_slots must be in [1, {MAX_SLOTS}], got {n_slots}")
        self.n_slots = int(n_slots)
        self.slot_bytes = -(-int(slot_bytes) // _ALIGN) * _ALIGN
        # rows of the header table (0: none); its pages are only allocated once written
        self.samples = int(samples) if 0 < int(samples) * TABLE_COLUMNS * 8 <= MAX_TABLE_BYTES else 0
        self.size = _HEADER + self.n_slots * self.slot_bytes + self.samples * TABLE_COLUMNS * 8
        # the main process, which workers check while they wait (its start time tells a reused pid)
        self.owner_pid, self.owner_start = os.getpid(), _lifeline.here().start
        keep_in_children(self)
        self._fd = os.memfd_create("torchdali-ring", os.MFD_CLOEXEC)
        os.ftruncate(self._fd, self.size)
        self._attach(self._fd)
        # slot k starts free for batch k: released = k - n_slots
        self._released[:] = np.arange(self.n_slots, dtype=np.int64) - self.n_slots
        self._registered = False

    # -- mapping ---------------------------------------------------------------
    def _attach(self, fd: int) -> None:
        self._map = mmap.mmap(fd, self.size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        header = np.frombuffer(self._map, dtype=np.int64, count=_HEADER // 8)
        self._released = header[: self.n_slots]
        self._mem = torch.frombuffer(self._map, dtype=torch.uint8, offset=_HEADER,
                                     count=self.n_slots * self.slot_bytes)
        self.table = None
        if self.samples:
            self.table = np.frombuffer(self._map, dtype=np.int64, offset=_HEADER + self.n_slots * self.slot_bytes,
                                       count=self.samples * TABLE_COLUMNS).reshape(self.samples, TABLE_COLUMNS)

    def __getstate__(self) -> dict:
        # spawned/forkserver workers re-open the same memfd through /proc
        return {"n_slots": self.n_slots, "slot_bytes": self.slot_bytes, "size": self.size,
                "samples": self.samples, "owner_pid": self.owner_pid, "owner_start": self.owner_start,
                "fd": self._fd}

    def __setstate__(self, state: dict) -> None:
        self.n_slots, self.slot_bytes, self.size = state["n_slots"], state["slot_bytes"], state["size"]
        self.samples = state["samples"]
        self.owner_pid, self.owner_start, self._registered = state["owner_pid"], state["owner_start"], False
        fd = os.open(f"/proc/{state['owner_pid']}/fd/{state['fd']}", os.O_RDWR | os.O_CLOEXEC)
        try:
            self._attach(fd)
        finally:
            os.close(fd)
        self._fd = -1

    def slot(self, seq: int) -> torch.Tensor:
        k = seq % self.n_slots
        return self._mem[k * self.slot_bytes: (k + 1) * self.slot_bytes]

    # -- worker side -----------------------------------------------------------
    def acquire(self, seq: int) -> torch.Tensor:
        """The slot of batch ``seq``, once the batch before it in that slot is released.

        In a worker, a wait ends in RuntimeError once the main process that made the ring
        is no longer running (checked every ``PARENT_CHECK_S``, first at the first sleep):
        no one would release the slot. The process itself ends soon after
        (``_lifeline.py``)."""
        k = seq % self.n_slots
        need = seq - self.n_slots
        if self._released[k] < need:
            delay, waited, since_check = ACQUIRE_FIRST_SLEEP_S, 0.0, PARENT_CHECK_S
            in_worker = os.getpid() != self.owner_pid
            warned = False
            while self._released[k] < need:
                time.sleep(delay)
                waited += delay
                since_check += delay
                delay = min(delay * 2, ACQUIRE_MAX_SLEEP_S)
                if in_worker and since_check >= PARENT_CHECK_S:
                    since_check = 0.0
                    # the owner, not the parent seen when the wait began: that may already be init
                    if not _lifeline.running(self.owner_pid, self.owner_start):
                        raise RuntimeError(f"torchdali: the main process (pid {self.owner_pid}) that this "
                                           f"worker writes batches for is gone; it stops waiting for staging "
                                           f"slot {k}")
                if not warned and waited > self.WARN_AFTER_S:
                    warned = True
                    import warnings

                    warnings.warn(
                        f"torchdali: batch {seq} has waited {waited:.0f} s for staging slot {k}, which batch "
                        f"{need} still holds (released up to {int(self._released[k])}). Expected while the "
                        f"training loop does not ask for batches; otherwise the loader is stuck.",
                        RuntimeWarning, stacklevel=2)
        return self.slot(seq)

    def known(self, index: int, size: int, mtime_ns: int) -> tuple[tuple[int, int, int], int, int] | None:
        """``((H, W, C), header code, scan start)`` that a worker noted for sample ``index``
        when its file had this size and modification time; None when none did."""
        if self.table is None or not 0 <= index < self.samples:
            return None
        row = self.table[index].tolist()
        if row[0] != size or row[1] != mtime_ns or row[7] != _row_check(row[:7]):
            return None
        return (row[2], row[3], row[4]), row[5], row[6]

    def note(self, index: int, size: int, mtime_ns: int, shape: tuple, hint: int, scan_start: int) -> None:
        """Note what sample ``index``'s header says (a JPEG nvJPEG decodes, its checks
        passed), for the file of this size and modification time."""
        if self.table is None or not 0 <= index < self.samples:
            return
        values = [int(size), int(mtime_ns), int(shape[0]), int(shape[1]), int(shape[2]), int(hint), int(scan_start)]
        row = self.table[index]
        row[7] = 0  # unknown while it is written
        row[:7] = values
        row[7] = _row_check(values)

    # -- main-process side -------------------------------------------------------
    def register(self) -> None:
        """Pin the whole mapping for DMA (main process, once)."""
        if self._registered:
            return
        err = torch.cuda.cudart().cudaHostRegister(self._mem.data_ptr(), self._mem.numel(), 0)
        code = getattr(err, "value", err)
        if code != 0:
            raise RuntimeError(f"cudaHostRegister of the {self._mem.numel() >> 20} MiB staging ring "
                               f"failed ({err})")
        self._registered = True

    def release(self, seq: int) -> None:
        k = seq % self.n_slots
        if self._released[k] < seq:
            self._released[k] = seq

    def release_upto(self, seq: int) -> None:
        """Release every batch up to ``seq``: an abandoned iterator's dispatched batches,
        once the GPU is done (Note [torchdali iterator shutdown], ``_iterators.py``). Nothing
        once the ring is closed: an iterator collected after its loader's ``close()``."""
        if self._released is None:
            return
        self._released[:] = np.maximum(self._released, seq - (seq - np.arange(self.n_slots)) % self.n_slots)

    def close(self) -> None:
        if getattr(self, "_map", None) is None:
            return
        if self._registered:
            torch.cuda.cudart().cudaHostUnregister(self._mem.data_ptr())
            self._registered = False
        self._released = self._mem = self.table = None
        try:
            self._map.close()
        except BufferError:  # a tensor view still alive: the mapping goes with it
            pass
        self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def plan_ring(dataset: Any, batch_size: int, num_workers: int, prefetch_factor: int | None,
              depth: int, max_bytes: int = 3 << 30) -> tuple[int, int] | None:
    """(n_slots, slot_bytes) for a loader, or None when the ring would not help or fit.

    Slot size comes from the sizes of a sample of the dataset's files; a batch that
    does not fit travels the ordinary way, so this is a performance guess, never a
    limit.
    """
    if not ring_supported():
        return None
    import random

    samples = getattr(dataset, "samples", None)
    sizes = []
    if samples:
        rng = random.Random(0)
        for entry in rng.sample(list(samples), min(64, len(samples))):
            path = entry[0] if isinstance(entry, (tuple, list)) else entry
            try:
                sizes.append(os.stat(path).st_size)
            except (OSError, TypeError):
                pass
    # a batch's total varies little around the mean (a sum of many sizes); a few
    # large files on top cover the tail
    per_sample = (float(np.mean(sizes)) * 1.2 + 4 * float(np.max(sizes)) / max(batch_size, 1)) if sizes \
        else 192 << 10
    slot_bytes = int(per_sample * batch_size) + (1 << 20)
    in_flight = (num_workers * (prefetch_factor or 2) if num_workers > 0 else 1) + depth + 4
    n_slots = min(in_flight, MAX_SLOTS, max_bytes // slot_bytes)
    if n_slots < depth + 3:
        return None
    return n_slots, slot_bytes
