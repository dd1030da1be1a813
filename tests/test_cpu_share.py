"""The CPU's share of the GPU path's decoding (``DataLoader(cpu_decode_share=...)``): which
samples the workers decode, and what they send."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import torchdali as td
from torchdali import transforms as T
from torchdali._executor._tags import SampleTag, TaggedSample
from torchdali._executor._worker import ENCODED, RAW, PrepareBatch, cpu_share_member
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
    """The share's JPEGs arrive decoded (RAW RGB, as the CPU path decodes them), the others
    encoded; which ones depends on the position only."""
    ds = td.datasets.ImageFolder(make_folder(tmp_path / "f", n=40, classes=2, lo=30, hi=50))
    plan = compile_transforms(T.Compose([T.Resize((16, 16))]))
    samples = [TaggedSample(SampleTag(0, 0, 100 + i, i, False, 0), ds.samples[i][0], ds[i]) for i in range(40)]
    batch = PrepareBatch(plan, "gpu", cpu_decode_share=0.25)(samples)
    on_cpu = [cpu_share_member(100 + i, 0.25) for i in range(40)]
    assert 8 <= sum(on_cpu) <= 12
    assert [k == RAW for k in batch.kinds] == on_cpu
    blob = batch.blob
    for i in np.flatnonzero(on_cpu):
        got = blob[batch.offsets[i]: batch.offsets[i] + batch.lengths[i]]
        assert torch.equal(got, decode_cpu(ds[i][0]).reshape(-1))
    plain = PrepareBatch(plan, "gpu")(samples)
    assert (plain.kinds == ENCODED).all()


def test_the_share_is_validated_and_kept():
    ds = td.datasets.FileList([])
    with pytest.raises(ValueError, match="cpu_decode_share"):
        td.DataLoader(ds, transforms=T.Resize((8, 8)), cpu_decode_share=1.5)
    loader = td.DataLoader(ds, transforms=T.Resize((8, 8)), cpu_decode_share=0.1)
    assert loader.cpu_decode_share == 0.1


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
