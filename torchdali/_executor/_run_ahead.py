"""Run-ahead: on the GPU path, with persistent workers, the next epoch's batches are
under way before its ``iter()``. These functions get the loader (its public
configuration) and its ``LoaderRuntime`` (``_runtime.py``), which keeps the state:
``running``, the parked iterator, and ``run_ahead_misses``. The ``DataLoader`` calls
``take_parked`` at ``iter()``; ``GpuIterator`` calls ``offer_next_epoch``.

Note [torchdali run-ahead]
==========================

An epoch's start costs time that the rest of the epoch does not: until the
workers have read and packed the first batch and nvJPEG has decoded it, the
training loop waits (tens of milliseconds; ``stats().last.first_batch_s``).
NVIDIA DALI's pipeline does not stop at an epoch's end, so its next epoch starts
with batches ready. On the GPU path, with persistent workers, torchdali's does
the same when it can be sure which samples the next epoch holds:

* At ``iter()`` (``offer_next_epoch``), once the epoch's own batch order is
  drawn, the loader draws the next epoch's too: its batch sampler's next pass,
  first batch taken, so that a shuffling sampler has made its random draw
  (``EpochPlan.draw``). The loader's generator (torch's global one by default) is
  then set back, so the loop sees the state it would see without run-ahead. The
  plan is offered to the inner sampler's pass (``TaggedBatchSampler.offer``).
* When the epoch's batches run out, the pass goes on into the plan instead of
  ending: the workers, the staging thread and the executor carry on with the next
  epoch's batches, as far as the ring and the prefetch queue let them. The pass
  notes the epoch's last batch number (``ends``); after that batch the staging
  thread sends ``_EPOCH_END`` down the queues. The training loop's iterator
  stops there (``StopIteration``) and parks itself on the runtime (``running``),
  holding the loader only weakly, so that a loader dropped without ``close()``
  is still collected and closes it.
* The next ``iter()`` takes the parked iterator (``resume_epoch``) only if
  everything the draw depended on is still what it was (``take_parked``): no
  ``load_state_dict`` in between, the same seed, epoch number (``set_epoch``),
  number of batches, the generator's state and a DistributedSampler's epoch.
  Then it sets the generator to its state after the draw, as the draw at this
  ``iter()`` would have left it, and offers the epoch after. The loader's own
  shuffle of ``seed=`` (``_tags.SeededRandomSampler``) draws from ``(seed,
  epoch)`` alone, not from the generator: its draw leaves the generator as it
  was, and a draw from the generator in between changes nothing. Batches,
  ``state_dict()`` and the generator's state are the same as without run-ahead.
  The offer comes late for an epoch the pipeline went through whole while
  parked (one of at most about ``prefetch_factor * num_workers`` batches): the
  epoch after it then starts at its own ``iter()``.
* Otherwise the parked iterator is closed (Note [torchdali iterator shutdown]
  in ``_iterators.py``; the persistent workers stay, and torch's reset
  drops what they built ahead) and the epoch starts from scratch. After
  ``RUN_AHEAD_MISSES`` such epochs in a row the loader runs ahead no more: a
  loop that draws from torch's global generator between its epochs (another
  DataLoader's ``iter()`` without persistent workers does) would pay for work
  thrown away at each. A ``DistributedSampler`` does not draw from it.

The draw is only known to depend on nothing else for torch's ``BatchSampler``
over a ``SequentialSampler``, a ``RandomSampler`` without a ``generator`` (it
seeds a generator of its own from torch's global one, once per epoch; one it is
given, it draws from again as its pass ends, after the next epoch was drawn),
the loader's ``SeededRandomSampler`` (keyed by the next epoch for the draw, then
set back), or a ``DistributedSampler``, whose next epoch is taken to follow the
loader's (``set_epoch`` each epoch) if it did this epoch, and otherwise to stay.
Other samplers, workers that are not persistent and out-of-order delivery never
run ahead; nor does anything when ``TORCHDALI_RUN_AHEAD=0`` was set before
``import torchdali`` (``torchdali/_options.py``).
"""
from __future__ import annotations

import logging
from typing import Any

import torch
import torch.utils.data as tud

from .. import _options
from ._runtime import LoaderRuntime, effective_seed, in_order, key_order, orders_by_seed, restore_rng, rng_state
from ._tags import EpochPlan, SeededRandomSampler, TaggedBatchSampler

_log = logging.getLogger("torchdali")

RUN_AHEAD_MISSES = 2  # epochs in a row not drawn as run ahead, after which a loader stops (Note [torchdali run-ahead])


def take_parked(loader: Any, rt: LoaderRuntime, running: Any, resume: dict | None) -> bool:
    """Whether ``running``, the iterator parked on ``loader`` with the next epoch under way,
    serves this ``iter()`` (``resume``: what ``load_state_dict`` left, if anything). If it
    does not, it is closed and the miss counted (Note [torchdali run-ahead])."""
    if resume is None and _continue(loader, rt, running):
        rt.run_ahead_misses = 0
        return True
    running.close()
    rt.run_ahead_misses += 1
    if rt.run_ahead_misses == RUN_AHEAD_MISSES:
        _log.info("torchdali: %d epochs in a row were not the ones drawn ahead; this loader no longer starts an "
                  "epoch before its iter() (Note [torchdali run-ahead] in torchdali/_executor/_run_ahead.py)",
                  RUN_AHEAD_MISSES)
    return False


def _continue(loader: Any, rt: LoaderRuntime, running: Any) -> bool:
    """Hand ``running`` the next epoch if it is the one its threads went on to
    (Note [torchdali run-ahead])."""
    sampler = rt.inner.batch_sampler
    plan: EpochPlan | None = sampler.ahead
    if plan is None or blocker(loader, rt) is not None:
        return False
    by_seed = orders_by_seed(loader)  # the draw took nothing from the generator
    if (plan.epoch != rt.epochs_started or plan.seed != effective_seed(loader)
            or plan.count != len(loader.batch_sampler)
            or (plan.sampler_epoch is not None and getattr(loader.sampler, "epoch", None) != plan.sampler_epoch)
            or (not by_seed and not torch.equal(rng_state(loader), plan.rng_before))):
        return False
    sampler.ahead = None
    state = rt.epoch_state
    if by_seed:  # the generator is where the loop left it, as this iter() would find and leave it
        rt.epoch_rng_state = rng_state(loader)
    else:
        rt.epoch_rng_state = plan.rng_before
        restore_rng(loader, plan.rng_after)
    state.seed, state.epoch = plan.seed, plan.epoch
    key_order(loader, plan.seed, plan.epoch)
    rt.batches_done, rt.epochs_started = 0, plan.epoch + 1
    running.resume_epoch(loader)
    offer_next_epoch(loader, rt)
    return True


def blocker(loader: Any, rt: LoaderRuntime) -> str | None:
    """Why ``loader`` would not run ahead into its next epoch on the GPU path (None: it would)."""
    if not _options.OPTIONS.run_ahead:
        return "TORCHDALI_RUN_AHEAD=0"
    if rt.run_ahead_misses >= RUN_AHEAD_MISSES:
        return f"{RUN_AHEAD_MISSES} epochs in a row were not the ones drawn ahead"
    if isinstance(loader.dataset, tud.IterableDataset):
        return "an IterableDataset"
    if not loader.persistent_workers or loader.num_workers < 1:
        return "workers are not persistent"
    if not in_order(loader):
        return "in_order=False"
    sampler = loader.sampler
    if type(loader.batch_sampler) is not tud.BatchSampler:
        return "a batch_sampler of the user's"
    if type(sampler) is SeededRandomSampler:
        return None
    if type(sampler) is tud.RandomSampler:
        if sampler.generator is not None or loader.generator is not None:
            # torch's RandomSampler draws from a generator it was given again as the pass ends
            return "a RandomSampler with a generator"
        return None
    if type(sampler) in (tud.SequentialSampler, tud.DistributedSampler):
        return None
    return f"a sampler of the user's ({type(sampler).__name__})"


def offer_next_epoch(loader: Any, rt: LoaderRuntime) -> None:
    """Draw ``loader``'s next epoch now and offer it to the inner sampler's pass, or offer
    nothing (Note [torchdali run-ahead]). Called once this epoch's own order is drawn."""
    sampler = rt.inner.batch_sampler
    if not isinstance(sampler, TaggedBatchSampler):
        return
    plan = None
    if blocker(loader, rt) is None and len(loader) > 0:
        state = rt.epoch_state
        seed, epoch = effective_seed(loader), rt.epochs_started
        before = rng_state(loader)
        dist = loader.sampler if isinstance(loader.sampler, tud.DistributedSampler) else None
        sampler_epoch = None
        if dist is not None:  # it follows the loader's epoch, or stays where it is
            sampler_epoch = rt.epochs_started if dist.epoch == state.epoch else dist.epoch
            current, dist.epoch = dist.epoch, sampler_epoch
        # this epoch's order was drawn at its iter() (the workers' first tasks): the key can move on
        key_order(loader, seed, epoch)
        try:
            batches = EpochPlan.draw(loader.batch_sampler)
            after = rng_state(loader)
        finally:
            if dist is not None:
                dist.epoch = current
            key_order(loader, state.seed, state.epoch)
            restore_rng(loader, before)
        if batches is not None:
            plan = EpochPlan(seed, epoch, batches, len(loader.batch_sampler), before, after, sampler_epoch)
    sampler.offer(plan)
