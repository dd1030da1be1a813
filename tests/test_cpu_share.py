"""The CPU's share of the GPU path's decoding (``DataLoader(cpu_decode_share=...)``): which
samples the workers decode, and what they send."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

import torchdali as td
from torchdali import transforms as T
from torchdali._executor._share import next_cpu_share
from torchdali._executor._tags import TagBatch, TaggedSample
from torchdali._executor._worker import ENCODED, RAW, PrepareBatch, cpu_share_member
from torchdali._stats import EpochStats
from torchdali.decode import decode_cpu
from torchdali.transforms import compile_transforms

from ._helpers import make_folder


@pytest.mark.parametrize("share", [0.05, 0.1, 0.25, 0.5])
def test_cpu_share_is_even_in_every_batch(share):
    for start in (0, 1000, 123457):
        for batch in (64, 256):
            members = sum(cpu_share_member(p, share) for p in range(start, start + batch))
            assert abs(members - share * batch) <= 1.5, (start, batch, members)
    assert not any(cpu_share_member(p, 0.0) for p in range(1000))
    assert all(cpu_share_member(p, 1.0) for p in range(1000))


def test_workers_decode_the_cpu_share_and_pack_the_rest(tmp_path):
    """The share travels with the batch's tags; its JPEGs arrive decoded (RAW RGB, as the
    CPU path decodes them), the others encoded; which ones depends on the position only."""
    ds = td.datasets.ImageFolder(make_folder(tmp_path / "f", n=40, classes=2, lo=30, hi=50))
    plan = compile_transforms(T.Compose([T.Resize((16, 16))]))

    def tagged(share):
        tags = TagBatch(0, 0, 0, 100, list(range(40)), cpu_share=share)
        tags = pickle.loads(pickle.dumps(tags))  # as the sampler sends it to a worker
        return [TaggedSample(tag, ds.samples[tag.index][0], ds[tag.index]) for tag in tags]

    batch = PrepareBatch(plan, "gpu")(tagged(0.25))
    on_cpu = [cpu_share_member(100 + i, 0.25) for i in range(40)]
    assert 8 <= sum(on_cpu) <= 12 and batch.share_decoded == sum(on_cpu) and batch.share_decode_s > 0
    assert [k == RAW for k in batch.kinds] == on_cpu
    for i in np.flatnonzero(on_cpu):
        got = batch.blob[batch.offsets[i]: batch.offsets[i] + batch.lengths[i]]
        assert torch.equal(got, decode_cpu(ds[i][0]).reshape(-1))
    plain = PrepareBatch(plan, "gpu")(tagged(0.0))
    assert (plain.kinds == ENCODED).all() and plain.share_decoded == 0
    cpu_path = PrepareBatch(plan, "cpu")(tagged(0.25))  # the CPU path decodes everything anyway
    assert cpu_path.share_decoded == 0


def _epoch(**kw) -> EpochStats:
    e = EpochStats(0)
    for k, v in kw.items():
        setattr(e, k, v)
    return e


def test_auto_share_balances_the_gpu_and_the_workers():
    # 10,000 images: nvJPEG 100 us each on 9,000; the workers 2 ms per CPU decode on 1,000
    # and 200 us per image for the rest of their work; 16 workers; the loop waited half the time
    e = _epoch(samples=10_000, wall_s=2.0, wait_s=1.0, decoded_hardware=9_000, decode_s=0.9,
               share_decoded=1_000, share_decode_s=2.0, worker_s=2.0 + 10_000 * 200e-6)
    t_g, t_c, a, W = 1e-4, 2e-3, 2e-4, 16
    s_star = (W * t_g - a) / (W * t_g + t_c)
    assert next_cpu_share(0.1, e, W, cap=0.5) == pytest.approx(0.5 * 0.1 + 0.5 * s_star, abs=1e-4)
    # at s*, the GPU's and the workers' time per image agree
    assert (1 - s_star) * t_g == pytest.approx((a + s_star * t_c) / W)
    assert next_cpu_share(0.1, e, W, cap=0.05) == 0.05  # capped
    # the loop hardly waited: the share decays (it only costs CPU)
    idle = _epoch(samples=10_000, wall_s=2.0, wait_s=0.01, decoded_hardware=9_000, decode_s=0.9,
                  share_decoded=1_000, share_decode_s=2.0, worker_s=4.0)
    assert next_cpu_share(0.2, idle, W, cap=0.5) == pytest.approx(0.1)
    # nothing measured yet (CPU path, or no share decoded): unchanged
    assert next_cpu_share(0.1, _epoch(samples=100), W, cap=0.5) == 0.1


def _at_share(share: float, t_g: float, t_c: float = 1.6e-3, a: float = 45e-6, n: int = 10_000) -> EpochStats:
    """An input-bound epoch run with ``share``: nvJPEG ``t_g`` per image on the rest."""
    n_cpu = round(share * n)
    return _epoch(samples=n, wall_s=1.0, wait_s=0.9, decoded_hardware=n - n_cpu, decode_s=t_g * (n - n_cpu),
                  share_decoded=n_cpu, share_decode_s=t_c * n_cpu, worker_s=t_c * n_cpu + a * n, cpu_share=share)


def _best_share(t0: float, m: float, t_c: float, a: float, W: int, cap: float) -> float:
    s = np.linspace(0.0, cap, 100_001)
    per_image = np.maximum((1 - s) * (t0 + m * s), (a + s * t_c) / W)
    return float(s[np.argmin(per_image)])


def test_auto_share_backs_off_when_the_workers_slow_nvjpeg_down():
    # the H200 measurement: nvJPEG's host time per image rose from 39 to 51 us between
    # shares 0 and 0.21; here 40 us at 0.1 and 50 us at 0.2: t_g = 30 us + 100 us * s,
    # and every share costs the GPU side more than it takes off it
    W, cap = 16, 0.5
    previous, e = _at_share(0.1, 40e-6), _at_share(0.2, 50e-6)
    assert _best_share(30e-6, 100e-6, 1.6e-3, 45e-6, W, cap) == 0.0
    assert next_cpu_share(0.2, e, W, cap, previous) == pytest.approx(0.1)
    # without the earlier epoch, the constant-t_g balance would raise the share
    assert next_cpu_share(0.2, e, W, cap) > 0.2


def test_auto_share_with_mild_interference_moves_to_the_best_share():
    W, cap = 8, 0.5
    previous, e = _at_share(0.1, 100e-6), _at_share(0.2, 102e-6)  # t_g = 98 us + 20 us * s
    best = _best_share(98e-6, 20e-6, 1.6e-3, 45e-6, W, cap)
    assert 0.3 < best < 0.35  # where both sides take the same time per image
    assert (1 - best) * (98e-6 + 20e-6 * best) == pytest.approx((45e-6 + best * 1.6e-3) / W, rel=1e-3)
    assert next_cpu_share(0.2, e, W, cap, previous) == pytest.approx(0.5 * 0.2 + 0.5 * best, abs=2e-3)
    # shares too close together give no slope: the constant-t_g balance
    close = _at_share(0.195, 101.9e-6)
    t_g, t_c, a = 102e-6, 1.6e-3, 45e-6
    assert next_cpu_share(0.2, e, W, cap, close) == pytest.approx(
        0.5 * 0.2 + 0.5 * (W * t_g - a) / (W * t_g + t_c), abs=1e-4)


def test_the_share_is_validated_and_kept_in_the_state_dict():
    ds = td.datasets.FileList([])
    for bad in (1.5, -0.1, "half", True):
        with pytest.raises(ValueError, match="cpu_decode_share"):
            td.DataLoader(ds, transforms=T.Resize((8, 8)), cpu_decode_share=bad)
    loader = td.DataLoader(ds, transforms=T.Resize((8, 8)), cpu_decode_share="auto", max_cpu_decode_share=0.3)
    assert loader.cpu_decode_share == "auto" and loader.state_dict()["cpu_share"] == 0.1
    fixed = td.DataLoader(ds, transforms=T.Resize((8, 8)), cpu_decode_share=0.25)
    assert fixed.state_dict()["cpu_share"] == 0.25


@pytest.mark.cuda
def test_gpu_loader_with_a_cpu_share_matches_the_cpu_path(tmp_path):
    """A quarter of the JPEGs decoded by the workers, the rest by nvJPEG, all transformed
    by the kernel: within the decoders' difference of the CPU path, and the counters say
    where each sample went."""
    ds = td.datasets.ImageFolder(make_folder(tmp_path / "f", n=48, classes=2, lo=60, hi=120))
    tf = T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip()])
    kw = dict(batch_size=16, transforms=tf, seed=5, num_workers=2)
    cpu = [b[0] for b in td.DataLoader(ds, device="cpu", **kw)]
    loader = td.DataLoader(ds, device="cuda", cpu_decode_share=0.25, **kw)
    gpu = [b[0].cpu() for b in loader]
    for g, c in zip(gpu, cpu):
        # nvJPEG and libjpeg-turbo differ by about a level; the geometry must be identical
        assert (g.float() - c.float()).abs().mean() < 2.5
    e = loader.stats().last
    assert 10 <= e.decoded_cpu <= 14 and e.decoded_cpu + e.decoded_hardware + e.decoded_hybrid == 48


@pytest.mark.cuda
def test_auto_share_adapts_between_epochs_and_reports_its_cost(tmp_path):
    ds = td.datasets.ImageFolder(make_folder(tmp_path / "f", n=64, classes=2, lo=60, hi=120))
    loader = td.DataLoader(ds, batch_size=16, transforms=T.Compose([T.RandomResizedCrop(32)]), seed=1,
                           num_workers=2, device="cuda", cpu_decode_share="auto", max_cpu_decode_share=0.3)
    for _ in range(3):
        for _ in loader:
            pass
    epochs = loader.stats().epochs
    assert epochs[0].cpu_share == 0.1 and all(0.02 <= e.cpu_share <= 0.3 for e in epochs)
    assert all(e.share_decoded > 0 and e.share_decode_s > 0 for e in epochs)
    assert loader.state_dict()["cpu_share"] == epochs[-1].cpu_share
    assert "as the CPU's share" in loader.stats().summary()


# -- the executor thread's core (DataLoader(decode_core=...), _executor/_cores.py) --------------

def _allow(monkeypatch, cpus):
    from torchdali._executor import _cores

    monkeypatch.setattr(_cores, "_allowed", lambda: set(cpus))


def test_auto_keeps_the_highest_cpu_when_the_workers_decode_a_share(monkeypatch):
    from torchdali._executor._cores import plan_decode_core

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    _allow(monkeypatch, range(16))
    assert plan_decode_core("auto", 0.15, 16) == (15, frozenset(range(15)))
    assert plan_decode_core("auto", 0.0, 16) == (None, frozenset(range(16)))  # workers only read bytes
    assert plan_decode_core("auto", 0.15, 0) == (None, frozenset(range(16)))  # no workers to keep off
    assert plan_decode_core(None, 0.15, 16) == (None, frozenset(range(16)))
    assert plan_decode_core(3, 0.0, 16) == (3, frozenset(range(16)) - {3})  # asked for: pinned whatever the share
    _allow(monkeypatch, [4, 9, 11])  # a process already bound to few CPUs (taskset)
    assert plan_decode_core("auto", 0.15, 16) == (None, frozenset({4, 9, 11}))  # too few to spare one
    _allow(monkeypatch, [4, 9, 11, 12])
    assert plan_decode_core("auto", 0.15, 16) == (12, frozenset({4, 9, 11}))
    assert plan_decode_core(9, 0.15, 16) == (9, frozenset({4, 11, 12}))
    with pytest.raises(ValueError, match="decode_core=5 is not among"):
        plan_decode_core(5, 0.15, 16)
    _allow(monkeypatch, [2])
    with pytest.raises(ValueError, match="none would be left"):
        plan_decode_core(2, 0.15, 16)


def test_local_ranks_on_one_node_get_different_cpus(monkeypatch):
    """torchrun's processes share the node's CPUs unless bound apart: one CPU per local rank,
    and every rank's workers keep off all of them."""
    from torchdali._executor._cores import plan_decode_core

    _allow(monkeypatch, range(16))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    cores = []
    for rank in range(4):
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        core, rest = plan_decode_core("auto", 0.1, 8)
        cores.append(core)
        assert rest == frozenset(range(12))
    assert cores == [15, 14, 13, 12]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "14")  # 2 CPUs would be left: too few
    assert plan_decode_core("auto", 0.1, 8) == (None, frozenset(range(16)))


def _affinity_after(init, queue):
    init(7)
    import os

    queue.put(sorted(os.sched_getaffinity(0)))


def test_workers_move_off_the_core_before_the_users_worker_init_fn(tmp_path):
    import multiprocessing as mp
    import os

    from torchdali._executor._cores import KeepOff

    calls = tmp_path / "calls"
    allowed = sorted(os.sched_getaffinity(0))
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_affinity_after, args=(KeepOff(frozenset(allowed[:1]), _RecordAffinity(calls)), q))
    p.start()
    seen = q.get(timeout=60)
    p.join(60)
    assert seen == allowed[:1]
    assert calls.read_text() == f"7 {allowed[:1]}"  # the user's function ran after the move, with its worker id
    # pickled with the loader's other arguments for spawned workers
    again = pickle.loads(pickle.dumps(KeepOff(frozenset({0}), None)))
    assert again.cpus == frozenset({0}) and again.user_fn is None


class _RecordAffinity:
    def __init__(self, path):
        self.path = path

    def __call__(self, worker_id):
        import os

        self.path.write_text(f"{worker_id} {sorted(os.sched_getaffinity(0))}")


def test_decode_core_is_validated():
    ds = td.datasets.FileList([])
    for bad in ("last", -1, 1.5, True):
        with pytest.raises(ValueError, match="decode_core"):
            td.DataLoader(ds, transforms=T.Resize((8, 8)), decode_core=bad)
    assert td.DataLoader(ds, transforms=T.Resize((8, 8))).decode_core == "auto"
    assert td.DataLoader(ds, transforms=T.Resize((8, 8)), decode_core=None).decode_core is None


@pytest.mark.cuda
def test_with_a_cpu_share_the_executor_thread_has_a_core_the_workers_do_not_use(tmp_path):
    import os
    import threading

    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 4:
        pytest.skip("decode_core='auto' keeps a core only with 4 or more CPUs")
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        assert name not in os.environ
    ds = td.datasets.ImageFolder(make_folder(tmp_path / "f", n=64, classes=2, lo=60, hi=120))
    loader = td.DataLoader(ds, batch_size=16, transforms=T.Compose([T.RandomResizedCrop(32)]), seed=1,
                           num_workers=2, device="cuda", cpu_decode_share=0.25, persistent_workers=True)
    it = iter(loader)
    next(it)
    executor = [t for t in threading.enumerate() if t.name == "torchdali-executor"]
    assert len(executor) == 1 and os.sched_getaffinity(executor[0].native_id) == {allowed[-1]}
    workers = loader._inner._iterator._workers
    assert workers and all(os.sched_getaffinity(w.pid) == set(allowed[:-1]) for w in workers)
    assert os.sched_getaffinity(0) == set(allowed)  # the training loop's thread stays where it was
    for _ in it:
        pass
    loader.close()
    plain = td.DataLoader(ds, batch_size=16, transforms=T.Compose([T.RandomResizedCrop(32)]), seed=1,
                          num_workers=2, device="cuda", persistent_workers=True)
    it = iter(plain)
    next(it)
    executor = [t for t in threading.enumerate() if t.name == "torchdali-executor"]
    assert os.sched_getaffinity(executor[0].native_id) == set(allowed)  # no share: nothing pinned
    assert all(os.sched_getaffinity(w.pid) == set(allowed) for w in plain._inner._iterator._workers)
    for _ in it:
        pass
    plain.close()
