"""Run-ahead (Note [torchdali run-ahead] in torchdali/_executor/_run_ahead.py): the inner sampler's
pass goes on into the next epoch, drawn at the previous ``iter()``; the next ``iter()``
takes it only when nothing the draw depended on changed. Batches, the generator's state
and ``state_dict()`` must be those of a loader that does not run ahead."""
from __future__ import annotations

import collections
import itertools

import pytest
import torch
import torch.utils.data as tud

import torchdali as td
import torchdali.dataloader as dl
from torchdali import transforms as T
from torchdali import _rng
from torchdali._executor._run_ahead import offer_next_epoch
from torchdali._executor._tags import EpochPlan, EpochStart, EpochState, SeededRandomSampler, TaggedBatchSampler

from ._helpers import set_options


def _plan(batches, epoch=1, seed=0):
    state = torch.get_rng_state()
    return EpochPlan(seed, epoch, EpochPlan.draw(batches), len(batches), state, state)


def test_a_pass_goes_on_into_the_offered_epoch_whole_and_notes_where_the_first_ended():
    first = tud.BatchSampler(list(range(100)), 32, False)  # 32, 32, 32, 4
    then = tud.BatchSampler(list(range(100, 164)), 32, False)
    sampler = TaggedBatchSampler(first, EpochState(epoch=0), EpochStart(2, 2))
    it = iter(sampler)
    got = [next(it)]  # the pass has started: offers go to it
    plan = _plan(then, epoch=1, seed=7)
    sampler.offer(plan)
    got += list(it)
    epoch0 = [tb for tb in got if tb.epoch == 0]
    epoch1 = [tb for tb in got if tb.epoch == 1]
    assert [(len(tb.indices), tb.parts, tb.seq) for tb in epoch0] == \
        [(16, 2, 0), (16, 2, 0), (16, 2, 1), (16, 2, 1), (32, 1, 2), (4, 1, 3)]
    # the epoch it went on to: whole batches (the workers are busy already), numbered on, its own seed
    assert [(tb.indices, tb.parts, tb.seq, tb.seed, tb.first_position) for tb in epoch1] == \
        [(list(range(100, 132)), 1, 4, 7, 0), (list(range(132, 164)), 1, 5, 7, 32)]
    assert got == epoch0 + epoch1
    assert list(sampler.ends) == [3] and sampler.ahead is plan
    # it went on once: the epoch after it was not offered, so the pass ends there
    assert sampler.state.next_seq == 6


def test_without_an_offer_a_pass_ends_with_its_epoch_and_a_new_pass_forgets_old_offers():
    batches = tud.BatchSampler(list(range(10)), 4, False)
    sampler = TaggedBatchSampler(batches, EpochState())
    sampler.offer(_plan(batches))  # made before the pass started: not for it
    assert [tb.epoch for tb in sampler] == [0, 0, 0]
    assert sampler.ahead is None and not sampler.ends
    it = iter(sampler)
    next(it)
    sampler.offer(_plan(batches))
    sampler.offer(None)  # taken back
    assert len(list(it)) == 2 and sampler.ahead is None


def test_retiring_a_pass_stops_it_and_drops_what_it_went_on_to():
    batches = tud.BatchSampler(list(range(10)), 4, False)
    sampler = TaggedBatchSampler(batches, EpochState())
    it = iter(sampler)
    next(it)
    sampler.offer(_plan(batches))
    assert [tb.epoch for tb in itertools.islice(it, 3)] == [0, 0, 1]
    assert sampler.ahead is not None and list(sampler.ends) == [2]
    assert sampler.retire() == 3
    assert list(it) == [] and sampler.ahead is None and not sampler.ends


def test_a_plan_with_spares_draws_them_from_its_own_epoch():
    batches = tud.BatchSampler(list(range(40)), 8, False)
    ahead = TaggedBatchSampler(batches, EpochState(spares=True))
    it = iter(ahead)
    got = [next(it)]
    ahead.offer(_plan(tud.BatchSampler(list(range(40)), 8, False), epoch=1))
    got += list(it)
    # a pass of its own over epoch 1 (numbered after epoch 0) picks the same spares
    alone = TaggedBatchSampler(batches, EpochState(spares=True, epoch=1, next_seq=5))
    expected = list(alone)
    got1 = [tb for tb in got if tb.epoch == 1]
    assert [(tb.seq, tb.indices, tb.spare_positions, tb.spare_indices) for tb in got1] == \
        [(tb.seq, tb.indices, tb.spare_positions, tb.spare_indices) for tb in expected]


@pytest.mark.parametrize("kind", ["random", "generator", "distributed"])
def test_a_drawn_plan_leaves_the_generator_as_it_was_and_is_the_pass_a_later_iter_draws(kind):
    data = list(range(50))
    gen = torch.Generator().manual_seed(5) if kind == "generator" else None
    if kind == "distributed":
        sampler = tud.DistributedSampler(data, num_replicas=2, rank=1, shuffle=True, seed=3)
    else:
        sampler = tud.RandomSampler(data, generator=gen)
    batches = tud.BatchSampler(sampler, 6, True)
    rng = gen if gen is not None else torch.default_generator
    torch.manual_seed(11)
    before = rng.get_state()
    drawn = list(EpochPlan.draw(batches))
    after = rng.get_state()
    rng.set_state(before)
    assert list(batches) == drawn  # the draw did not depend on anything but the generator
    assert torch.equal(rng.get_state(), after)
    if kind == "random":
        assert not torch.equal(before, after)
    assert EpochPlan.draw(tud.BatchSampler([], 4, False)) is None


# -- the loader's side, with a stand-in for GpuIterator ---------------------------------

class _Pipeline:
    """What ``GpuIterator`` does with the inner sampler's pass, without workers or a GPU:
    torch primes ``prefetch_factor * num_workers`` tasks at ``iter()``, then takes one
    more each time it hands a batch over; after the batch that ``ends`` names, the epoch
    ends and the pipeline parks on the loader."""

    def __init__(self, loader, rt, inner) -> None:
        self.loader, self.rt = loader, rt
        self.sampler = inner.batch_sampler
        self.pass_ = iter(self.sampler)
        self.ready = collections.deque(itertools.islice(self.pass_, 2 * loader.num_workers))
        offer_next_epoch(loader, rt)
        self.parked = self.closed = self.epoch_over = False
        self.resumed = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.parked or self.closed:
            raise StopIteration
        if self.epoch_over:
            self.parked, self.epoch_over = True, False
            self.rt.running = self
            raise StopIteration
        self.ready.extend(itertools.islice(self.pass_, 1))
        if not self.ready:
            self.close()
            raise StopIteration
        tags = self.ready.popleft()
        if tags.part == tags.parts - 1:
            self.rt.on_batch(type("B", (), {"skipped": ()})(), self.loader.on_error)
            ends = self.sampler.ends
            if ends and tags.seq == ends[0]:
                ends.popleft()
                self.epoch_over = True
        return tags

    def resume_epoch(self, loader):
        self.parked = False
        self.resumed += 1
        return self

    def close(self):
        self.closed = True
        self.sampler.retire()


def _loader(monkeypatch, run_ahead=True, **kw):
    set_options(monkeypatch, staging_ring=False, run_ahead=run_ahead)
    monkeypatch.setattr(dl, "GpuIterator", _Pipeline)
    ds = [(b"", 0)] * kw.pop("n", 60)
    opts = dict(batch_size=4, shuffle=True, num_workers=2, persistent_workers=True, device="cpu",
                transforms=T.Compose([T.Resize((8, 8))]))
    opts.update(kw)
    loader = td.DataLoader(ds, **opts)
    loader.__dict__["device"] = torch.device("cuda")  # the GPU path's iterator: the stand-in above
    return loader


def _epochs(loader, n, between=lambda e: None):
    out, rng, states, resumed = [], [], [], []
    for e in range(n):
        between(e)
        it = iter(loader)
        rng.append(loader._rng_state())
        resumed.append(getattr(it, "resumed", 0))
        got = []
        for k, tags in enumerate(it):
            got.append((tags.epoch, tags.seed, tags.first_position, list(tags.indices)))
            if k == 3:
                states.append(loader.state_dict())
        out.append(got)
        states.append(loader.state_dict())
    return out, rng, states, resumed


def _same_states(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x.pop("rng_state"), y.pop("rng_state")) and x == y


@pytest.mark.parametrize("kw", [dict(), dict(seed=5, generator=2), dict(shuffle=False), dict(on_error="skip"),
                                dict(drop_last=True, n=62)])
def test_run_ahead_gives_the_batches_rng_and_state_dicts_of_a_loader_that_does_not(monkeypatch, kw):
    ahead = "generator" not in kw  # torch's RandomSampler draws from a generator it is given as its pass ends
    def loader(run_ahead):
        torch.manual_seed(0)
        opts = dict(kw)
        if "generator" in opts:
            opts["generator"] = torch.Generator().manual_seed(opts["generator"])
        return _loader(monkeypatch, run_ahead=run_ahead, **opts)

    expected = _epochs(loader(False), 4)
    got = _epochs(loader(True), 4)
    assert got[0] == expected[0]
    assert [e[0][0] for e in got[0]] == [0, 1, 2, 3]
    assert all(torch.equal(a, b) for a, b in zip(got[1], expected[1]))
    _same_states(got[2], expected[2])
    assert got[3] == ([0, 1, 2, 3] if ahead else [0] * 4) and expected[3] == [0] * 4  # each epoch after the first


def test_a_draw_from_the_generator_between_epochs_is_a_miss_and_two_in_a_row_stop_it(monkeypatch):
    def between(e):
        if e in (1, 3, 4):
            torch.rand(1)  # as another DataLoader's iter() without persistent workers would

    torch.manual_seed(0)
    expected = _epochs(_loader(monkeypatch, run_ahead=False), 7, between)
    torch.manual_seed(0)
    loader = _loader(monkeypatch)
    got = _epochs(loader, 7, between)
    assert got[0] == expected[0] and all(torch.equal(a, b) for a, b in zip(got[1], expected[1]))
    _same_states(got[2], expected[2])
    # epoch 1 missed, 2 ran ahead, 3 and 4 missed: then it stops
    assert [r > 0 for r in got[3]] == [False, False, True, False, False, False, False]
    assert loader._run_ahead_blocker() == "2 epochs in a row were not the ones drawn ahead"
    assert loader._runtime.running is None


def test_set_epoch_and_load_state_dict_between_epochs_are_honoured(monkeypatch):
    def run(run_ahead):
        torch.manual_seed(0)
        loader = _loader(monkeypatch, run_ahead=run_ahead, seed=1)
        out = _epochs(loader, 2)[0]
        loader.set_epoch(0)  # the epoch drawn ahead was 2: not taken
        out += _epochs(loader, 1)[0]
        state = loader.state_dict()
        out += _epochs(loader, 1)[0]
        loader.load_state_dict(state)  # back to the start of epoch 1
        again = _epochs(loader, 2)
        return out + again[0], again[3]

    expected, _ = run(False)
    got, resumed = run(True)
    assert [b[0][0] for b in got] == [0, 1, 0, 1, 1, 2]
    assert got == expected
    assert got[4] == got[3]
    assert resumed == [0, 1]  # after the resume it runs ahead again


@pytest.mark.parametrize("calls_set_epoch", [True, False])
def test_a_distributed_sampler_follows_the_loaders_epochs_or_stays(monkeypatch, calls_set_epoch):
    def run(run_ahead):
        sampler = tud.DistributedSampler(list(range(60)), num_replicas=2, rank=0, shuffle=True, seed=4)
        loader = _loader(monkeypatch, run_ahead=run_ahead, shuffle=None, sampler=sampler, seed=1)

        def between(e):
            if calls_set_epoch:
                loader.set_epoch(e)

        return _epochs(loader, 4, between)

    expected, got = run(False), run(True)
    assert got[0] == expected[0]
    # epoch 0 cannot tell the two apart: taken to follow the loader's epochs
    assert got[3] == ([0, 1, 2, 3] if calls_set_epoch else [0, 0, 1, 2])
    orders = [[b[3] for b in epoch] for epoch in got[0]]
    assert (orders[1] == orders[0]) is not calls_set_epoch  # the same order every epoch without set_epoch


def test_an_order_drawn_from_the_seed_runs_ahead_past_a_draw_from_the_generator(monkeypatch):
    """With seed= (shuffle, no generator) the order comes from (seed, epoch), not from torch's
    generator: a draw from it between epochs is no miss, the loop finds the generator where it
    left it, and each epoch's order is the one of its own (seed, epoch)."""
    def between(e):
        if e:
            torch.rand(1)

    torch.manual_seed(0)
    expected = _epochs(_loader(monkeypatch, run_ahead=False, seed=5), 5, between)
    torch.manual_seed(0)
    loader = _loader(monkeypatch, seed=5)
    assert type(loader.sampler) is SeededRandomSampler and loader._run_ahead_blocker() is None
    got = _epochs(loader, 5, between)
    assert got[0] == expected[0] and all(torch.equal(a, b) for a, b in zip(got[1], expected[1]))
    _same_states(got[2], expected[2])
    assert got[3] == [0, 1, 2, 3, 4]  # each epoch after the first was run ahead
    generator = lambda e: torch.Generator().manual_seed(_rng.order_seed(5, e))  # noqa: E731
    assert [[i for b in epoch for i in b[3]] for epoch in got[0]] == \
        [list(tud.RandomSampler(range(60), generator=generator(e))) for e in range(5)]
    assert loader.sampler.epoch == 4  # keyed back to the epoch running after the next one was drawn


def test_what_does_not_run_ahead_and_why(monkeypatch):
    assert _loader(monkeypatch)._run_ahead_blocker() is None
    assert _loader(monkeypatch, run_ahead=False)._run_ahead_blocker() == "TORCHDALI_RUN_AHEAD=0"
    assert "persistent" in _loader(monkeypatch, persistent_workers=False)._run_ahead_blocker()
    if dl._HAS_IN_ORDER:
        assert _loader(monkeypatch, in_order=False)._run_ahead_blocker() == "in_order=False"
    class Batches(tud.BatchSampler):
        pass

    own = Batches(tud.SequentialSampler(range(60)), 4, False)
    assert "batch_sampler" in _loader(monkeypatch, batch_size=1, shuffle=None, batch_sampler=own)._run_ahead_blocker()
    weighted = tud.WeightedRandomSampler([1.0] * 60, 60)
    assert "WeightedRandomSampler" in _loader(monkeypatch, shuffle=None, sampler=weighted)._run_ahead_blocker()
    own = tud.RandomSampler(range(60), generator=torch.Generator())
    assert _loader(monkeypatch, shuffle=None, sampler=own)._run_ahead_blocker() == "a RandomSampler with a generator"
    assert _loader(monkeypatch, generator=torch.Generator())._run_ahead_blocker() == "a RandomSampler with a generator"
    assert _loader(monkeypatch, shuffle=False, generator=torch.Generator())._run_ahead_blocker() is None
    # a sampler it does not run ahead with gives plain epochs
    loader = _loader(monkeypatch, shuffle=None, sampler=weighted)
    assert _epochs(loader, 2)[3] == [0, 0]


def test_closing_the_loader_closes_a_parked_pipeline(monkeypatch):
    loader = _loader(monkeypatch)
    _epochs(loader, 1)
    running = loader._runtime.running
    assert running.parked and loader._runtime.inner.batch_sampler.ahead is not None
    loader.close()
    assert running.closed and loader._runtime.running is None
