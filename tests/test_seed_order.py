"""``seed=`` fixes the whole epoch: with ``shuffle=True`` and neither a ``sampler`` nor a
``generator``, each epoch's order is torch's ``RandomSampler`` with a generator seeded from
``(seed, epoch)``, whatever torch's global generator holds, for any ``num_workers``, in any
process, after ``load_state_dict``. A ``generator`` or ``sampler`` of the user's decides the
order as under torch. Orders are read from the targets: a sample's target is its index."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import torchdali as td
from torchdali import _rng
from torchdali import transforms as T

from ._helpers import make_folder, set_options

N = 22
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TF = T.Compose([T.RandomResizedCrop(8, scale=(0.2, 1.0)), T.RandomHorizontalFlip()])


class Indexed(tud.Dataset):
    """Decoded uint8 images that differ everywhere (so crops and flips show), target = index."""

    def __init__(self, n: int = N) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        rng = np.random.default_rng(i)
        return rng.integers(0, 256, (12 + i % 3, 14, 3), dtype=np.uint8), i


def _loader(global_seed: int | None = None, dataset: tud.Dataset | None = None, **kw) -> td.DataLoader:
    """A loader of ``dataset`` (``Indexed()``) with ``seed=0, shuffle=True`` unless ``kw`` says
    otherwise, built after ``torch.manual_seed(global_seed)``."""
    if global_seed is not None:
        torch.manual_seed(global_seed)
    opts = dict(batch_size=4, shuffle=True, seed=0, transforms=TF, device="cpu")
    opts.update(kw)
    return td.DataLoader(dataset if dataset is not None else Indexed(), **opts)


def _epochs(loader, n: int = 2) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    return [[(x, y) for x, y in loader] for _ in range(n)]


def _order(epoch_batches) -> list[int]:
    return [int(t) for _, y in epoch_batches for t in y]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(len(x) == len(y) and all(torch.equal(p[0], q[0]) and torch.equal(p[1], q[1])
                                                            for p, q in zip(x, y)) for x, y in zip(a, b))


def _reference(seed: int, epoch: int, n: int = N) -> list[int]:
    """torch's RandomSampler with a generator seeded from ``(seed, epoch)``."""
    return list(tud.RandomSampler(range(n), generator=torch.Generator().manual_seed(_rng.order_seed(seed, epoch))))


def test_the_same_seed_gives_the_same_order_and_batches_whatever_the_global_seed_and_num_workers():
    a = _epochs(_loader(1, num_workers=0))
    b = _epochs(_loader(2, num_workers=2))
    c = _epochs(_loader(3, num_workers=2))
    assert _same(a, b) and _same(a, c)
    assert [_order(e) for e in a] == [_reference(0, 0), _reference(0, 1)]
    assert sorted(_order(a[0])) == list(range(N))
    # torch's own shuffle, from the same global seed, is another order: the seed decided this one
    torch.manual_seed(1)
    plain = [int(t) for b in tud.DataLoader(list(range(N)), batch_size=4, shuffle=True) for t in b]
    assert plain != _order(a[0])


def test_an_epoch_is_shuffled_anew_and_another_seed_gives_other_orders():
    a = _epochs(_loader(0), 3)
    orders = [_order(e) for e in a]
    assert len({tuple(o) for o in orders}) == 3
    other = [_order(e) for e in _epochs(_loader(0, seed=1), 3)]
    assert all(x != y for x, y in zip(orders, other))
    assert other == [_reference(1, e) for e in range(3)]


def test_set_epoch_picks_the_epochs_order_and_draws():
    loader = _loader(0)
    expected = _epochs(_loader(5), 6)[5]
    loader.set_epoch(5)
    got = _epochs(loader, 1)[0]
    assert _same([got], [expected]) and _order(got) == _reference(0, 5)


_CHILD = """
import json, sys
import torch
sys.path.insert(0, {root!r})
from tests.test_seed_order import _loader, _epochs, _order
torch.manual_seed(12345)
torch.rand(7)
loader = _loader(num_workers={workers})
print(json.dumps([_order(e) for e in _epochs(loader, 2)]))
"""


def test_another_process_draws_the_same_order():
    code = _CHILD.format(root=ROOT, workers=0)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == [_order(e) for e in _epochs(_loader(0), 2)] == [_reference(0, 0), _reference(0, 1)]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_generator_of_the_users_decides_the_order_as_under_torch(num_workers):
    def torch_orders(**kw):
        loader = tud.DataLoader(list(range(N)), batch_size=4, num_workers=num_workers, **kw)
        return [[int(t) for b in loader for t in b] for _ in range(2)]

    torch.manual_seed(0)
    ours = _epochs(_loader(generator=torch.Generator().manual_seed(7), num_workers=num_workers))
    torch.manual_seed(1)  # torch's global generator plays no part
    assert [_order(e) for e in ours] == torch_orders(shuffle=True, generator=torch.Generator().manual_seed(7))
    assert _order(ours[0]) != _reference(0, 0)
    # a sampler of the user's, with its own generator, too
    torch.manual_seed(2)
    sampled = _epochs(_loader(shuffle=None, sampler=tud.RandomSampler(range(N), generator=torch.Generator()
                                                                         .manual_seed(9)), num_workers=num_workers))
    assert [_order(e) for e in sampled] == \
        torch_orders(sampler=tud.RandomSampler(range(N), generator=torch.Generator().manual_seed(9)))


def test_without_seed_the_order_is_torchs_global_generators():
    orders = [_order(e) for e in _epochs(_loader(4, seed=None))]
    torch.manual_seed(4)
    plain = tud.DataLoader(list(range(N)), batch_size=4, shuffle=True)
    assert orders == [[int(t) for b in plain for t in b] for _ in range(2)]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("epoch,k", [(0, 2), (1, 3), (1, 0)])
def test_resume_mid_epoch_and_between_epochs_is_bitwise(num_workers, epoch, k):
    """A state_dict after ``epoch`` whole epochs and ``k`` batches of the next resumes in a new
    loader, built after another global seed, with the batches of the uninterrupted run."""
    expected = _epochs(_loader(0, num_workers=num_workers), 3)
    first = _loader(0, num_workers=num_workers)
    _epochs(first, epoch)
    head = []
    if k:
        it = iter(first)
        head = [next(it) for _ in range(k)]
        del it
    state = first.state_dict()
    assert (state["epoch"], state["batches_done"]) == (epoch, k)
    torch.manual_seed(999)  # the resumed process's global generator is another
    torch.rand(3)
    resumed = _loader(num_workers=num_workers)
    resumed.load_state_dict(state)
    got = ([head + [(x, y) for x, y in resumed]] if k else []) + _epochs(resumed, 3 - epoch - (k > 0))
    assert _same(got, expected[epoch:])


def test_persistent_workers_give_the_batches_of_workers_started_each_epoch():
    persistent = _loader(1, num_workers=2, persistent_workers=True)
    try:
        got = _epochs(persistent, 3)
    finally:
        persistent.close()
    assert _same(got, _epochs(_loader(2, num_workers=2), 3))
    assert [_order(e) for e in got] == [_reference(0, e) for e in range(3)]


def test_the_loader_keeps_torchs_arguments_and_shuffle_semantics():
    loader = _loader(0, drop_last=True)
    assert isinstance(loader.sampler, tud.RandomSampler) and loader.generator is None
    assert len(loader) == N // 4 and all(len(y) == 4 for _, y in loader)
    with pytest.raises(ValueError):  # torch's check of a sampler with shuffle=True
        _loader(sampler=tud.SequentialSampler(range(N)))
    # shuffle=False keeps torch's sequential order
    assert _order(_epochs(_loader(0, shuffle=False), 1)[0]) == list(range(N))


def test_distributed_keeps_torchs_sampler_seeded_with_seed(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = _loader(0, seed=3, distributed=True, shuffle=True)
    assert type(loader.sampler) is tud.DistributedSampler and loader.sampler.seed == 3
    got = []
    for e in range(2):
        loader.set_epoch(e)
        got.append(_order(_epochs(loader, 1)[0]))
    expected = []
    for e in range(2):
        ref = tud.DistributedSampler(range(N), num_replicas=2, rank=1, shuffle=True, seed=3)
        ref.set_epoch(e)
        expected.append(list(ref))
    assert got == expected and got[0] != got[1]
    # mid-epoch resume of epoch 1
    first = _loader(5, seed=3, distributed=True, shuffle=True)
    first.set_epoch(1)
    it = iter(first)
    head = [next(it)]
    state = first.state_dict()
    del it
    resumed = _loader(6, seed=3, distributed=True, shuffle=True)
    resumed.load_state_dict(state)
    full = _loader(7, seed=3, distributed=True, shuffle=True)
    full.set_epoch(1)
    assert _same([head + list(resumed)], [list(full)])


def test_lightning_recreates_the_loader_with_its_own_sampler():
    pytest.importorskip("lightning")
    from lightning.fabric.utilities.data import _replace_dunder_methods, _update_dataloader
    from lightning.pytorch.utilities.data import _is_dataloader_shuffled

    ds = Indexed()
    with _replace_dunder_methods(tud.DataLoader, "dataset"):  # what Lightning does around the hook
        wrapped = _loader(0, dataset=ds)
    plain = _loader(0, dataset=ds)
    for loader in (wrapped, plain):
        assert _is_dataloader_shuffled(loader)  # Lightning gives a shuffling DistributedSampler
        sampler = tud.DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True, seed=4)
        new = _update_dataloader(loader, sampler)
        assert type(new) is td.DataLoader and new.sampler is sampler and new.generator is None
        assert new.seed == 0 and new.transforms is loader.transforms
        assert _order(_epochs(new, 1)[0]) == list(tud.DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True,
                                                                          seed=4))


# -- the GPU path --------------------------------------------------------------------------------------------

@pytest.mark.cuda
def test_gpu_path_orders_by_seed_and_runs_ahead_past_a_draw_from_the_global_generator(tmp_path, monkeypatch):
    """The GPU path's order is the CPU path's; with persistent workers it runs ahead into every
    epoch, even when the loop draws from torch's generator in between (the order does not
    depend on it), and gives the batches of a loader that does not run ahead."""
    ds = td.datasets.ImageFolder(make_folder(tmp_path, n=40, lo=60, hi=120))
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()])

    def run(run_ahead, global_seed):
        set_options(monkeypatch, run_ahead=run_ahead)
        torch.manual_seed(global_seed)
        loader = td.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, persistent_workers=True, seed=3,
                               transforms=tf, device="cuda")
        out = []
        try:
            for _ in range(4):
                out.append([(x.cpu(), y.cpu()) for x, y in loader])
                torch.rand(5)  # the loop's own draw
            return out, [s.ran_ahead for s in loader.stats().epochs]
        finally:
            loader.close()

    expected, off = run(False, 1)
    got, on = run(True, 2)
    assert off == [False] * 4 and on == [False, True, True, True]
    assert _same(got, expected)
    cpu = td.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, seed=3, transforms=tf, device="cpu")
    assert [[int(t) for _, y in e for t in y] for e in got] == [_order(e) for e in _epochs(cpu, 4)]
    # (an ImageFolder's targets are its classes: the reference order read through them)
    assert [_order(e) for e in got] == [[ds.targets[i] for i in _reference(3, e, n=40)] for e in range(4)]
