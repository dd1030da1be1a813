"""The iterators ``DataLoader.__iter__`` returns: where batches reach the training loop.

``GpuIterator`` (device="cuda"): a staging thread takes packed batches from the
inner torch DataLoader and stages their bytes (``_staging.py``); an executor
thread decodes and transforms them (``BatchExecutor.process``); at most
``prefetch_depth`` finished batches wait in the prefetch queue for the training
loop, whose stream waits on each batch's ready event. ``CpuIterator``
(device="cpu"): the workers finished the batches; it only hands them over.

Note [torchdali iterator shutdown]
==================================

A GPU iterator's states and the moves between them are in ``_lifecycle.py``.
The staging thread sends ``_END`` (or, run ahead, ``_EPOCH_END``: Note
[torchdali run-ahead] in ``_run_ahead.py``) down the queues when the workers'
pass ends; a background thread's error comes as a ``_Failure``; the user's own
wait can also be interrupted, by Ctrl-C or by torch's SIGCHLD handler when a
worker dies. Every way out ends in ``_close``, which runs once
(``Lifecycle.close``), does what ``close_plan`` says for the state it closes
from, and does, in this order:

1. Set the stop event. No background wait blocks for good: each one polls with
   a named timeout (``QUEUE_POLL_S``, ``RING_POLL_S``, ``WORKER_POLL_S``,
   ``_staging.SLOT_POLL_S``) and checks the event in between. A put that sees it
   gives up and its thread returns; a wait that sees it raises ``Stopped``, which
   ends the thread quietly. Torch's iterator has no way to cancel a wait for a
   worker, so ``_next_inner`` waits in ``WORKER_POLL_S`` steps
   (``_torch_compat.next_within``, which leaves torch's state untouched when a
   step ends); the user's ``timeout`` still holds across the steps.
2. Drain both queues, so a producer blocked on a full queue wakes; staged
   batches give their pinned slots back.
3. Join the executor thread (``EXEC_JOIN_S``): it is the only thread that queues
   GPU work on the staged bytes and releases ring slots.
4. Retire the sampler pass (``TaggedBatchSampler.retire``), which returns the
   last batch number handed out, *then* release ring slots up to it
   (``BatchExecutor.release_all``: wait for the executor's stream and the scan
   check's, so the GPU is done reading, then ``HostRing.release_upto``). Staged batches
   dropped in step 2 or 6 give their decode buffers back (``BatchExecutor.drop``). Workers may be writing
   (or waiting to write) batches this iterator dispatched and will never
   consume; after the release every slot is theirs, so they never block. The
   staging thread may still be inside torch's iterator, which refills its
   prefetch from the sampler: retiring first means no batch number past
   ``last`` can be handed out by this iterator, so none waits for a slot that
   is never released.
5. Workers. At the end of an epoch, persistent workers stay: torch resets them
   on the next ``iter()`` (with the user's ``timeout``: the short steps are the
   staging thread's alone). Otherwise (workers not persistent, or the epoch
   left half-way, when the staging thread may still be inside torch's iterator
   and the workers cannot be reset safely) the workers are shut down, and the
   inner loader forgets its persistent iterator so the next epoch starts anew.
   A parked iterator's staging thread is inside the next epoch: it is joined
   first, and the workers stay when it has ended (torch's reset then drops the
   batches they built ahead).
   On the error path (``wait_for_workers=False``) the shutdown runs on a
   background thread (``torchdali-worker-shutdown``): a stuck worker (the
   reason for a timeout) must not hold the error back, and torch's shutdown
   ends the workers within seconds.
6. Join both threads (``THREAD_JOIN_S`` each) and drain the staged queue once
   more: the staging thread may have put a batch there while we drained.

A worker dies
-------------
A worker killed by the out-of-memory killer or crashed by a decoder reaches
the user as torch's RuntimeError ("DataLoader worker (pid N) exited
unexpectedly" from the staging thread's wait, or "... is killed by signal"
from torch's SIGCHLD handler in the user's thread). Before closing, both
iterators pass it through ``_records.worker_died``, which finds the worker
with a non-zero exit code and reads the batch it had recorded in the
shared ``WorkerRecords`` table before reading its samples; the user gets a
``WorkerDied`` (a ``SampleError``) naming those samples' indices and paths,
chained to torch's error. The table belongs to the loader, so it can still
be read after the workers are gone.

A batch stalls
--------------
nvJPEG has hung on malformed JPEGs (the workers keep the ones they can recognise
from it: ``_classify._gpu_decodable_shape``). A hung call cannot be cancelled, so
the executor thread notes the batch it is inside (``_busy``), as the staging thread
notes the batch it decodes (``BatchExecutor.decoding``), and ``__next__``, waking
every ``CONSUMER_POLL_S``, raises ``DecoderStalled`` naming that batch's samples
once it has been there for the loader's ``gpu_timeout`` (STUCK). The executor
is then stuck for good: ``_close`` skips step 4's wait for its stream (the ring
slots it holds stay taken), ``DataLoader.close`` leaves its nvJPEG handles
alone, and the loader refuses another epoch.

Errors in a background thread never leave it: it sends them as a ``_Failure``
(unless the stop event is set: then the error is a consequence of the
shutdown), and ``__next__`` closes the iterator (error path) and re-raises
them in the user's thread. The executor thread wraps errors other than
``SampleError`` with the batch they happened in. ``DataLoader.close`` releases
what outlives iterators: the executors (nvJPEG handles), persistent workers,
and the ring.
"""
from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import Any, NamedTuple

import torch

from .._fork import keep_in_children
from .._torch_compat import WorkerWaitTimeout, forget_persistent_iterator, has_workers, next_within, workers_shutdown
from ..errors import DecoderStalled, SampleError, WorkerDied
from ..transforms._ragged import tensors_of
from ..transforms._target_plan import TargetList, target_tensors
from ._deliver import Stage
from ._executor import executor_for
from ._lifecycle import IterState, Lifecycle, close_plan
from ._records import LISTED, worker_died
from ._run_ahead import offer_next_epoch
from ._runtime import LoaderRuntime
from ._staging import Slot, Stopped
from ._tags import sample_path
from ._wire import PackedBatch
from ._worker import merge_parts

QUEUE_POLL_S = 0.1  # how often a blocked put, or the executor's wait for a staged batch, checks the stop event
RING_POLL_S = 0.002  # that wait's step while ring slots wait for the GPU: a worker may be waiting for one
WORKER_POLL_S = 0.05  # the staging thread waits for the workers' next batch in steps this long
EXEC_JOIN_S = 2.0  # close waits this long for the executor thread before it releases ring slots
THREAD_JOIN_S = 5.0  # close waits this long for each background thread at the end
CONSUMER_POLL_S = 1.0  # the training loop's wait for a batch checks this often that the threads are alive

_END = object()  # end of the epoch and of the workers' pass, sent down both queues
_EPOCH_END = object()  # end of the epoch, with the next one under way behind it (Note [torchdali run-ahead])


class _Failure:
    """An exception raised in a background thread, carried to the user's thread."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class StagedBatch(NamedTuple):
    """A batch whose bytes wait in pinned memory for the executor thread."""

    batch: PackedBatch
    slot: Slot
    fetch_s: float  # staging thread waiting for the workers' batch
    stage_s: float  # copying its bytes into pinned memory
    prepared: Any  # what ``BatchExecutor.prepare`` made of it: the batch decoded (or its sizes), or its clips started


class GpuIterator:
    """Iterator over GPU batches.

    Two background threads: one takes packed batches from the workers and stages
    their bytes in pinned memory, the other decodes and transforms them; at most
    ``prefetch_depth`` finished batches wait for the training loop.
    """

    def __init__(self, loader: Any, rt: LoaderRuntime, inner: torch.utils.data.DataLoader) -> None:
        keep_in_children(self)
        device = loader.device
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        # While an epoch runs, ``_loader``; parked after it with the next epoch under way
        # (Note [torchdali run-ahead]), only a weak reference, so that a loader dropped
        # without close() is still collected and closes this iterator.
        self._loader: Any = loader
        self._loader_ref = weakref.ref(loader)
        self._life = Lifecycle()  # _lifecycle.py: RUNNING until it ends, parks, stalls or closes
        self._runtime = rt
        # what the background threads and _close read, so that they never need the loader
        self._user_timeout = float(loader.timeout or 0)
        self._delivery = rt.delivery
        self._persistent = bool(loader.persistent_workers)
        self._epoch_state = rt.epoch_state
        self._device = device
        self._executor = executor_for(loader, rt, device)
        self._stats = rt.stats
        self._start_stats(ran_ahead=False)
        self._queue: queue.Queue = queue.Queue(maxsize=loader.prefetch_depth)  # ReadyBatch, _END or _Failure
        self._staged: queue.Queue = queue.Queue(maxsize=1)  # StagedBatch, _END or _Failure
        self._stop = threading.Event()
        self._inner = inner
        self._busy: tuple[float, int, PackedBatch] | None = None  # (since, number, batch) inside the executor
        self._inner_it = iter(inner)
        offer_next_epoch(loader, rt)  # before the threads start: the pass has not left this epoch yet
        self._threads = [threading.Thread(target=self._stage_loop, name="torchdali-stage", daemon=True),
                         threading.Thread(target=self._exec_loop, name="torchdali-executor", daemon=True)]
        for t in self._threads:
            t.start()

    def _start_stats(self, ran_ahead: bool) -> None:
        self._stats.start_epoch(self._epoch_state.epoch)
        self._stats.last.ran_ahead = ran_ahead

    def resume_epoch(self, loader: Any) -> GpuIterator:
        """Hand the parked iterator the epoch its threads went on to (Note [torchdali run-ahead])."""
        self._life.move(IterState.RUNNING)
        self._loader = loader
        self._start_stats(ran_ahead=True)
        return self

    @property
    def parked(self) -> bool:
        """Whether the epoch ended with the next one under way behind it, and this iterator is
        open, waiting for ``resume_epoch``."""
        return self._life.state is IterState.PARKED

    # -- producers -------------------------------------------------------------
    def _put(self, q: queue.Queue, item: Any) -> bool:
        """Put ``item`` into ``q``; False when the iterator stopped first
        (Note [torchdali iterator shutdown], step 1)."""
        staging = self._executor.staging
        while not self._stop.is_set():
            try:
                q.put(item, timeout=QUEUE_POLL_S)
                return True
            except queue.Full:
                if q is self._queue and staging.pending:
                    staging.release_ready()  # the training loop is busy: workers need not be
                continue
        return False

    def _next_inner(self) -> PackedBatch:
        """The workers' next batch; raises ``Stopped`` when the iterator is closed.

        Waits in ``WORKER_POLL_S`` steps: Note [torchdali iterator shutdown], step 1.
        """
        it = self._inner_it
        if not has_workers(it):
            return next(it)
        user_timeout = self._user_timeout
        step = WORKER_POLL_S if not user_timeout else min(WORKER_POLL_S, user_timeout)
        waited = 0.0
        while True:
            try:
                return next_within(it, step)
            except WorkerWaitTimeout:
                if self._stop.is_set():
                    raise Stopped() from None
                waited += step
                if user_timeout and waited >= user_timeout:  # torch's own error for the user's timeout
                    raise RuntimeError(f"DataLoader timed out after {user_timeout} seconds") from None

    def _stage_loop(self) -> None:
        """Staging thread: workers' batches -> pinned memory (and the scan check started:
        ``BatchExecutor.prepare``) -> ``_staged``."""
        staging = self._executor.staging
        ends = getattr(self._inner.batch_sampler, "ends", None)  # Note [torchdali run-ahead]
        epoch = None  # the epoch being staged (None: the next batch starts one)
        try:
            torch.cuda.set_device(self._device)
            t_fetch = time.perf_counter()
            while True:
                try:
                    batch = self._next_inner()
                except StopIteration:
                    break
                if batch.parts > 1:  # an epoch's first batches come in parts (_tags.EpochStart)
                    batch = self._whole(batch)
                if epoch is not None and batch.epoch != epoch:  # never hand the loop another epoch's batch
                    raise RuntimeError(f"torchdali: a batch of epoch {batch.epoch} arrived in epoch {epoch} "
                                       "before the end of that epoch was noted")
                epoch = batch.epoch
                fetch_s = time.perf_counter() - t_fetch
                if self._stop.is_set():  # Note [torchdali iterator shutdown]
                    return
                slot, seconds = staging.stage(batch, self._stop)
                try:
                    prepared = self._executor.prepare(batch, slot, self._stop)
                except BaseException:
                    staging.give_back(slot)
                    raise
                t_fetch = time.perf_counter()
                if not self._put(self._staged, StagedBatch(batch, slot, fetch_s, seconds, prepared)):
                    self._executor.drop(prepared)
                    staging.give_back(slot)
                    return
                if ends and batch.seq == ends[0]:  # the epoch's last batch; the next epoch follows
                    ends.popleft()
                    epoch = None
                    if not self._put(self._staged, _EPOCH_END):
                        return
            self._put(self._staged, _END)
        except Stopped:
            return
        except BaseException as e:  # re-raised in the consumer's thread
            if not self._stop.is_set():
                self._put(self._staged, _Failure(e))

    def _whole(self, first: PackedBatch) -> PackedBatch:
        """The batch whose first part is ``first``: its other parts are the workers' next
        ``first.parts - 1`` batches (torch hands batches over in order)."""
        parts = [first]
        while len(parts) < first.parts:
            try:
                part = self._next_inner()
            except StopIteration:
                raise RuntimeError(f"torchdali: the epoch ended after {len(parts)} of the {first.parts} parts of "
                                   f"the batch at position {first.first_position}") from None
            prev = parts[-1]
            if part.parts != first.parts or part.seq != first.seq \
                    or part.first_position != prev.first_position + len(prev.indices):
                raise RuntimeError(f"torchdali: a part of the batch at position {first.first_position} arrived "
                                   f"out of order (at position {part.first_position}, {part.parts} parts)")
            parts.append(part)
        return merge_parts(parts, self._delivery, self._executor.staging.ring)

    def _exec_loop(self) -> None:
        """Executor thread: ``_staged`` -> decode + kernel -> the prefetch queue."""
        try:
            torch.cuda.set_device(self._device)
            k = 0
            ex = self._executor
            staging = ex.staging
            while not self._stop.is_set():  # Note [torchdali iterator shutdown]
                try:
                    # while ring slots wait for the GPU, poll often: a worker may wait for one
                    item = self._staged.get(timeout=RING_POLL_S if staging.pending else QUEUE_POLL_S)
                except queue.Empty:
                    if staging.pending:
                        staging.release_ready()
                    continue
                if item is _END or isinstance(item, _Failure):
                    self._put(self._queue, item)
                    return
                if item is _EPOCH_END:
                    if not self._put(self._queue, item):
                        return
                    k = 0
                    continue
                batch = item.batch
                self._busy = (time.monotonic(), k, batch)  # the consumer's watchdog: _stall_error
                try:
                    done = ex.process(batch, item.slot, item.prepared)
                except SampleError:
                    raise
                except Exception as e:
                    raise RuntimeError(
                        f"torchdali GPU executor failed on batch {k} (samples {batch.indices[:8].tolist()}"
                        f"{'...' if len(batch.indices) > 8 else ''}): {type(e).__name__}: {e}") from e
                finally:
                    self._busy = None
                done.stages["fetch_s"], done.stages["stage_s"] = item.fetch_s, item.stage_s
                if not self._put(self._queue, done):
                    return
                k += 1
        except BaseException as e:
            if not self._stop.is_set():
                self._put(self._queue, _Failure(e))

    # -- consumer ------------------------------------------------------------
    def __iter__(self) -> GpuIterator:
        return self

    def __len__(self) -> int:
        loader = self._loader_ref()
        return len(loader) if loader is not None else 0

    def __next__(self) -> Any:
        if self._life.state in (IterState.CLOSED, IterState.PARKED):
            raise StopIteration
        t0 = time.perf_counter()
        try:
            while True:
                try:
                    item = self._queue.get(timeout=CONSUMER_POLL_S)
                    break
                except queue.Empty:
                    if not any(t.is_alive() for t in self._threads):
                        raise RuntimeError("torchdali executor threads ended without a result") from None
                    stalled = self._stall_error()
                    if stalled is not None:
                        raise stalled from None
        except BaseException as e:
            # also what torch's SIGCHLD handler raises here when a worker dies, and Ctrl-C
            died = self._worker_died(e)  # Note [torchdali iterator shutdown], "A worker dies"
            self._close(wait_for_workers=False)
            if died is not None:
                raise died from e
            raise
        if item is _END:
            self._life.move(IterState.ENDED)
            self._stats.end_epoch()
            self.close()
            raise StopIteration
        if item is _EPOCH_END:  # Note [torchdali run-ahead]: the threads go on into the next epoch
            self._life.move(IterState.PARKED)
            self._stats.end_epoch()
            self._loader = None
            self._runtime.running = self
            raise StopIteration
        if isinstance(item, _Failure):
            died = self._worker_died(item.exc)  # Note [torchdali iterator shutdown], "A worker dies"
            self._close(wait_for_workers=False)
            if died is not None:
                raise died from item.exc
            raise item.exc
        batch: PackedBatch = item.batch
        consumer = torch.cuda.current_stream(self._device)
        consumer.wait_event(item.ready)
        # Freeing a block used on another stream records CUDA events, which a forked
        # worker cannot do (it aborts): a batch alive at a fork is kept alive in the child.
        for t in tensors_of(item.images):
            t.record_stream(consumer)
            keep_in_children(t)
        targets = item.targets
        for t in [targets] if isinstance(targets, torch.Tensor) else \
                target_tensors(targets) if isinstance(targets, TargetList) else ():
            if t.is_cuda:
                t.record_stream(consumer)
                keep_in_children(t)
        # the loop's part of delivery, in this thread, on its stream (``_deliver.py``)
        out = self._delivery.deliver(batch, item.images, targets, Stage.LOOP, self._device)
        self._stats.add_batch(len(batch.indices), wait=time.perf_counter() - t0, worker=batch.seconds,
                              stages=item.stages)
        self._runtime.on_batch(batch, self._loader.on_error)
        return out

    def close(self) -> None:
        """Stop the threads and the workers; idempotent."""
        self._close(wait_for_workers=True)

    def _stall_error(self) -> DecoderStalled | None:
        """A ``DecoderStalled`` when the executor has been inside one batch for longer than
        the loader's ``gpu_timeout``; marks this iterator and the loader stuck."""
        busy, limit = self._busy, self._loader.gpu_timeout
        decoding = self._executor.decoding
        if decoding is not None and (busy is None or decoding[0] < busy[0]):
            busy = (decoding[0], "being decoded", decoding[1])
        if busy is None or not limit or time.monotonic() - busy[0] <= limit:
            return None
        since, k, batch = busy
        k = f"number {k} of the epoch" if isinstance(k, int) else k
        seconds = time.monotonic() - since
        samples = [(int(i), sample_path(self._loader.dataset, int(i))) for i in batch.indices.tolist()]
        listed = ", ".join(f"{i} ({p})" if p else str(i) for i, p in samples[:LISTED])
        if len(samples) > LISTED:
            listed += f" and {len(samples) - LISTED} more (see .samples)"
        err = DecoderStalled(
            f"samples {listed}: the GPU executor has been decoding and transforming their batch ({k}) "
            f"for {seconds:.0f} s, past gpu_timeout={limit:g}; a batch takes milliseconds, so one "
            "of these files probably hangs the GPU decoder (nvJPEG). Decode them one by one with "
            "torchdali.decode.decode_cpu to find it.", index=samples[0][0] if samples else None,
            path=samples[0][1] if samples else None, samples=samples, seconds=seconds)
        self._life.move(IterState.STUCK)
        self._runtime.stalled = err
        return err

    def _worker_died(self, exc: BaseException) -> WorkerDied | None:
        return worker_died(exc, self._inner_it, self._runtime.records, self._loader.dataset)

    def _close(self, wait_for_workers: bool) -> None:
        """Note [torchdali iterator shutdown]; ``wait_for_workers=False`` is its error path."""
        previous = self._life.close()
        if previous is None:
            return
        plan = close_plan(previous, self._persistent)
        self._stop.set()  # step 1
        for q in (self._queue, self._staged):  # step 2
            while True:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, StagedBatch):
                    self._executor.drop(item.prepared)
                    self._executor.staging.give_back(item.slot)
        self._threads[1].join(timeout=EXEC_JOIN_S)  # step 3
        sampler = getattr(self._inner, "batch_sampler", None)  # step 4
        last = sampler.retire() if hasattr(sampler, "retire") else self._epoch_state.next_seq - 1
        if plan.release_slots:
            self._executor.release_all(last)
        keep = plan.keep_workers  # step 5
        if plan.join_stager_first:
            self._threads[0].join(timeout=THREAD_JOIN_S)
            keep = not self._threads[0].is_alive()
        shutdown = workers_shutdown(self._inner_it)
        if shutdown is not None and not keep:
            if wait_for_workers:
                shutdown()
            else:
                threading.Thread(target=shutdown, name="torchdali-worker-shutdown", daemon=True).start()
            if self._persistent:
                forget_persistent_iterator(self._inner, self._inner_it)
        for t in self._threads:  # step 6
            t.join(timeout=THREAD_JOIN_S)
        while True:
            try:
                item = self._staged.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, StagedBatch):
                self._executor.drop(item.prepared)
                self._executor.staging.give_back(item.slot)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class CpuIterator:
    """Iterator over CPU batches: finished in the workers; the main process only hands them over.

    Torch's own iterator shuts its workers down; of Note [torchdali iterator
    shutdown] only "A worker dies" applies here.
    """

    def __init__(self, loader: Any, rt: LoaderRuntime, inner: torch.utils.data.DataLoader) -> None:
        self._loader = loader
        self._runtime = rt
        self._it = iter(inner)
        self._stats = rt.stats
        self._stats.start_epoch(rt.epoch_state.epoch)

    def __iter__(self) -> CpuIterator:
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self) -> Any:
        t0 = time.perf_counter()
        try:
            batch = next(self._it)
        except StopIteration:
            self._stats.end_epoch()
            raise
        except RuntimeError as e:
            # Note [torchdali iterator shutdown], "A worker dies"; torch's iterator shuts its workers down
            died = worker_died(e, self._it, self._runtime.records, self._loader.dataset)
            if died is None:
                raise
            raise died from e
        self._stats.add_batch(len(batch.indices), wait=time.perf_counter() - t0, worker=batch.seconds)
        self._runtime.on_batch(batch, self._loader.on_error)
        if batch.has_output:  # finished in the worker (_deliver.py)
            return batch.output
        return self._runtime.delivery.deliver(batch, batch.images, batch.targets, Stage.LOOP)
