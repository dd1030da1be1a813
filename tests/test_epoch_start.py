"""An epoch's first batches go to the workers in parts (``_tags.EpochStart``), and the
staging thread puts them back together (``_worker.merge_parts``): the batch must be
the one a worker would have packed whole."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import torchdali as td
from torchdali import transforms as T
from torchdali._executor import _tags
from torchdali._executor._deliver import Delivery
from torchdali._executor._tags import (EpochStart, EpochState, TagBatch, TaggedBatchSampler, TaggedDataset,
                                       num_spares, plan_epoch_start, split_sizes)
from torchdali._executor._worker import PrepareBatch, merge_parts
from torchdali.transforms._plan import compile_transforms

from ._helpers import make_folder


def test_plan_epoch_start_spreads_the_first_batches_over_the_workers_first_round():
    assert plan_epoch_start(256, 16) == EpochStart(4, 4)  # 16 parts of 64: one per worker
    assert plan_epoch_start(256, 16, batches=2) == EpochStart(2, 8)
    assert plan_epoch_start(256, 32) == EpochStart(4, 8)
    assert plan_epoch_start(256, 8) == EpochStart(4, 2)
    assert plan_epoch_start(256, 3) == EpochStart(1, 3)  # too few workers for more batches
    assert plan_epoch_start(32, 16) == EpochStart(4, 2)  # parts of at least 16 samples
    assert plan_epoch_start(256, 16, batches=0) == EpochStart()
    for args in [(256, 1), (256, 0), (16, 8), (None, 8)]:
        assert plan_epoch_start(*args).parts == 1, args


def test_split_sizes():
    assert split_sizes(256, 16) == [16] * 16
    assert split_sizes(50, 3) == [17, 17, 16]
    assert sum(split_sizes(1001, 7)) == 1001


def _tags_of(sampler):
    return [list(tb) for tb in sampler]


def test_the_first_batches_go_in_parts_and_cover_the_same_samples():
    batches = torch.utils.data.BatchSampler(torch.randperm(200, generator=torch.Generator().manual_seed(0)).tolist(),
                                            64, False)
    whole = list(TaggedBatchSampler(batches, EpochState()))
    split = list(TaggedBatchSampler(batches, EpochState(), EpochStart(2, 4)))
    assert [len(tb) for tb in whole] == [64, 64, 64, 8]
    # the parts of a batch share its number, and so its staging-ring slot
    assert [(len(tb), tb.parts, tb.part, tb.seq) for tb in split] == \
        [(16, 4, j, b) for b in range(2) for j in range(4)] + [(64, 1, 0, 2), (8, 1, 0, 3)]
    assert [tb.seq for tb in whole] == [0, 1, 2, 3]
    flat = [(t.position, t.index) for tb in split for t in tb]
    assert flat == [(t.position, t.index) for tb in whole for t in tb]
    assert all(t.parts == 4 and t.part == k % 4 for k, tb in enumerate(split[:8]) for t in tb)


def test_a_short_batch_is_split_into_fewer_parts_or_none():
    batches = torch.utils.data.BatchSampler(range(40), 32, False)  # 32 and 8
    got = list(TaggedBatchSampler(batches, EpochState(), EpochStart(4, 16)))
    assert [(len(tb), tb.parts) for tb in got] == [(16, 2), (16, 2), (8, 1)]


def test_parts_have_spares_of_their_own_and_whole_batches_keep_theirs():
    batches = torch.utils.data.BatchSampler(range(300), 64, False)
    whole = list(TaggedBatchSampler(batches, EpochState(seed=5, spares=True)))
    split = list(TaggedBatchSampler(batches, EpochState(seed=5, spares=True), EpochStart(2, 4)))
    parts = split[:8]
    assert all(len(tb.spare_indices) == num_spares(16) for tb in parts)
    for b in range(2):  # the parts of one batch never share a spare draw
        picks = [p for tb in parts[4 * b:4 * b + 4] for p in tb.spare_positions]
        assert len(picks) == 4 * num_spares(16)
    rest_whole, rest_split = whole[2:], split[8:]
    assert [(tb.spare_positions, tb.spare_indices) for tb in rest_split] == \
        [(tb.spare_positions, tb.spare_indices) for tb in rest_whole]
    # a resumed epoch splits (and draws for) the same batches: batch 1 is still in parts
    resumed = list(TaggedBatchSampler(batches, EpochState(seed=5, spares=True, skip_batches=1), EpochStart(2, 4)))
    assert [(list(tb.indices), tb.spare_indices, tb.parts) for tb in resumed] == \
        [(list(tb.indices), tb.spare_indices, tb.parts) for tb in split[4:]]


def test_a_tag_batch_pickles_with_its_parts():
    import pickle

    tb = TagBatch(1, 2, 6, 16, [3, 4, 5], [900], [7], parts=4, part=2)
    back = pickle.loads(pickle.dumps(tb))
    assert list(back) == list(tb) and (back.parts, back.part) == (4, 2) and back[3].spare
    assert (back[0].parts, back[0].part, back[3].part) == (4, 2, 2)


FIELDS = ("seed", "epoch", "seq", "indices", "positions", "paths", "params", "targets", "has_target", "blob", "kinds",
          "offsets", "lengths", "shapes", "hints", "scan_starts", "first_position", "slots",
          "batch_values", "skipped", "images")


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype \
            and torch.equal(a, b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype \
            and np.array_equal(a, b)
    return a == b


def _pack(prepare, ds, tb, defer=False):
    return prepare(TaggedDataset(ds, defer_files=defer).__getitems__(tb))


def _add_files_decoded_in_the_worker(folder: str, k: int, seed: int = 0) -> None:
    """``k`` more files the GPU path's workers decode themselves, of varied sizes: PNGs and
    CMYK JPEGs (nvJPEG takes neither)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for j in range(k):
        h, w = (int(v) for v in rng.integers(30, 90, size=2))
        image = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        path = os.path.join(folder, f"c{j % 2}", f"09{j:02d}")
        if j % 2:
            image.convert("CMYK").save(path + ".jpg", quality=90)
        else:
            image.save(path + ".png")


@pytest.mark.parametrize("recipe", ["train", "colour", "val"])
def test_merged_parts_equal_the_batch_packed_whole(tmp_path, recipe):
    """Every field the executor reads, compared with a worker packing the batch whole;
    the folder mixes 4:2:0 and 4:4:4 JPEGs, odd sizes, PNGs and CMYK JPEGs (decoded in the worker)."""
    from PIL import Image

    folder = make_folder(tmp_path, n=50, lo=40, hi=300, every_444=3)
    Image.fromarray(np.full((37, 41, 3), 90, np.uint8)).save(os.path.join(folder, "c0", "0100.png"))
    _add_files_decoded_in_the_worker(folder, 4)
    tf = {"train": T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()]),
          "colour": T.Compose([T.RandomResizedCrop(32), T.ColorJitter(0.4, 0.4, 0.4)]),
          "val": T.Compose([T.Resize(36), T.CenterCrop(32)])}[recipe]
    ds = td.datasets.ImageFolder(folder)
    prepare = PrepareBatch(compile_transforms(tf), "gpu", delivery=Delivery())
    batches = torch.utils.data.BatchSampler(torch.randperm(len(ds), generator=torch.Generator().manual_seed(2)).tolist(),
                                            48, False)
    state = dict(seed=9, epoch=3)
    whole = next(iter(TaggedBatchSampler(batches, EpochState(**state))))
    parts = [tb for tb in TaggedBatchSampler(batches, EpochState(**state), EpochStart(1, 3)) if tb.parts > 1]
    assert [len(tb) for tb in parts] == [16, 16, 16]
    expected = _pack(prepare, ds, whole)
    packed = [_pack(prepare, ds, tb) for tb in parts]
    assert all(p.parts == 3 and isinstance(p.targets, list) and p.blob is not None for p in packed)
    got = merge_parts(packed, Delivery())
    assert got.parts == 1 and got.ring_seq == expected.ring_seq == -1
    assert (expected.kinds == 1).sum() >= 3  # the PNGs and CMYK JPEGs: pixels
    for name in FIELDS:
        assert _equal(getattr(got, name), getattr(expected, name)), name


def test_a_user_collate_fn_gets_the_targets_of_every_part(tmp_path):
    folder = make_folder(tmp_path, n=12, lo=40, hi=80)
    ds = td.datasets.ImageFolder(folder)
    prepare = PrepareBatch(compile_transforms(T.Compose([T.CenterCrop(16)])), "gpu",
                           delivery=Delivery(collate_fn=lambda samples: samples))
    batches = torch.utils.data.BatchSampler(range(12), 12, False)
    parts = list(TaggedBatchSampler(batches, EpochState(), EpochStart(1, 3)))
    got = merge_parts([_pack(prepare, ds, tb) for tb in parts], Delivery(collate_fn=lambda samples: samples))
    assert got.targets == [ds.samples[i][1] for i in range(12)]  # left for the user's collate_fn, in order


def test_a_bad_file_in_a_part_is_replaced_from_that_parts_spares(tmp_path):
    folder = make_folder(tmp_path, n=40, lo=40, hi=80)
    ds = td.datasets.ImageFolder(folder)
    bad = 20  # in the second part
    with open(ds.samples[bad][0], "wb") as f:
        f.write(b"\xff\xd8 not a jpeg")
    prepare = PrepareBatch(compile_transforms(T.Compose([T.CenterCrop(16)])), "gpu", on_error="skip", dataset=ds)
    batches = torch.utils.data.BatchSampler(range(40), 32, False)
    parts = [tb for tb in TaggedBatchSampler(batches, EpochState(spares=True), EpochStart(1, 2)) if tb.parts > 1]
    packed = [_pack(prepare, ds, tb) for tb in parts]
    got = merge_parts(packed, Delivery())
    assert len(got.indices) == 32 and bad not in got.indices.tolist()
    assert [s.index for s in got.skipped] == [bad] and got.skipped[0].path == ds.samples[bad][0]
    replacement = got.indices[bad]
    assert replacement in parts[1].spare_indices
    assert got.positions[bad] >= len(ds)  # the spare's own position: its params differ from the original's
    used = next(t for t in parts[1] if t.spare and t.position == got.positions[bad])
    assert got.spares == [t for tb in parts for t in tb if t.spare and t != used]  # the unused ones, in order


def test_merge_refuses_what_it_cannot_put_together(tmp_path):
    folder = make_folder(tmp_path, n=32, lo=40, hi=80)
    ds = td.datasets.ImageFolder(folder)
    plan = compile_transforms(T.Compose([T.CenterCrop(16)]))
    parts = list(TaggedBatchSampler(torch.utils.data.BatchSampler(range(32), 32, False), EpochState(),
                                    EpochStart(1, 2)))
    assert len(parts) == 2
    cpu = [_pack(PrepareBatch(plan, "cpu"), ds, tb) for tb in parts]
    with pytest.raises(ValueError, match="GPU-path batch"):
        merge_parts(cpu, Delivery())


def test_the_loader_plans_parts_only_where_the_staging_thread_merges_them(tmp_path, monkeypatch):
    folder = make_folder(tmp_path, n=8, lo=40, hi=80)
    ds = td.datasets.ImageFolder(folder)
    tf = T.Compose([T.CenterCrop(16)])
    monkeypatch.setattr(_tags, "START_PART_SAMPLES", 2)
    cpu = td.DataLoader(ds, batch_size=8, num_workers=2, transforms=tf, device="cpu")
    assert cpu._inner_loader().batch_sampler.start == EpochStart()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the plan only: nothing runs
    gpu = td.DataLoader(ds, batch_size=8, num_workers=2, transforms=tf, device="cuda")
    assert gpu._inner_loader().batch_sampler.start == EpochStart(1, 2)
    one = td.DataLoader(ds, batch_size=8, num_workers=1, transforms=tf, device="cuda")
    assert one._inner_loader().batch_sampler.start == EpochStart()
    for loader in (cpu, gpu, one):
        loader.close()


def test_every_field_of_a_packed_batch_is_compared_or_known_to_differ():
    import dataclasses

    from torchdali._executor._wire import PackedBatch

    differ = {"spares",  # dealt per part: compared in the spares tests above
              "ring_seq", "parts",  # compared in the ring tests
              "seconds",  # timings
              "scan_check", "output", "has_output",  # set later, in the main process or on the CPU path
              "trace",  # parts are traced again where their targets are mapped (test_iou_crop checks the trace)
              "clips"}  # video batches are never sent in parts (test_video_loader checks the plan)
    assert {f.name for f in dataclasses.fields(PackedBatch)} == set(FIELDS) | differ


def _ring_case(tmp_path, n, batch, parts, slot_bytes=None, defer=False):
    from torchdali._executor._ring import HostRing

    folder = make_folder(tmp_path, n=n, lo=40, hi=300, seed=4)
    ds = td.datasets.ImageFolder(folder)
    plan = compile_transforms(T.Compose([T.RandomResizedCrop(32)]))
    batches = torch.utils.data.BatchSampler(range(n), batch, False)
    whole = next(iter(TaggedBatchSampler(batches, EpochState())))
    split = [tb for tb in TaggedBatchSampler(batches, EpochState(), EpochStart(1, parts)) if tb.parts > 1]
    expected = _pack(PrepareBatch(plan, "gpu"), ds, whole)  # a blob
    ring = HostRing(3, slot_bytes or 2 * int(expected.blob.numel()))
    packed = [_pack(PrepareBatch(plan, "gpu", ring=ring), ds, tb, defer) for tb in split]
    return ds, ring, expected, packed


@pytest.mark.parametrize("defer", [False, True], ids=["read", "read-into-slot"])
def test_parts_write_into_their_share_of_the_batchs_ring_slot(tmp_path, defer):
    from torchdali._executor._worker import RING_PART_ALIGN

    ds, ring, expected, packed = _ring_case(tmp_path, n=48, batch=48, parts=3, defer=defer)
    region = ring.slot_bytes // 3 // RING_PART_ALIGN * RING_PART_ALIGN
    assert [(p.seq, p.ring_seq, p.blob) for p in packed] == [(0, 0, None)] * 3
    assert [int(p.offsets[0]) for p in packed] == [0, region, 2 * region]
    got = merge_parts(packed, Delivery(), ring)
    assert got.ring_seq == got.seq == 0 and got.blob is None
    slot = ring.slot(0)
    for i in range(len(got.indices)):  # every image's bytes where the offsets say, as packed whole
        o, n, eo = int(got.offsets[i]), int(got.lengths[i]), int(expected.offsets[i])
        assert torch.equal(slot[o:o + n], expected.blob[eo:eo + n]), i
    for name in set(FIELDS) - {"offsets", "blob"}:
        assert _equal(getattr(got, name), getattr(expected, name)), name
    ring.close()


@pytest.mark.parametrize("defer", [False, True], ids=["read", "read-into-slot"])
def test_a_part_too_large_for_its_share_travels_as_a_blob_and_the_batch_as_one(tmp_path, defer):
    ds, ring, expected, packed = _ring_case(tmp_path, n=32, batch=32, parts=2)
    totals = sorted(int(p.lengths.sum()) for p in packed)
    ring.close()
    # a share between the two parts' sizes: the smaller part fits, the larger does not
    ds, ring, expected, packed = _ring_case(tmp_path / "again", n=32, batch=32, parts=2,
                                            slot_bytes=2 * (totals[0] + totals[1]) // 2 + 8192, defer=defer)
    region = ring.slot_bytes // 2 // 4096 * 4096
    assert totals[0] <= region < totals[1], (totals, region)
    assert sorted(p.ring_seq for p in packed) == [-1, 0]
    got = merge_parts(packed, Delivery(), ring)
    assert got.seq == 0 and got.ring_seq == -1  # one blob; the slot is still the batch's, released in turn
    for name in FIELDS:
        assert _equal(getattr(got, name), getattr(expected, name)), name
    with pytest.raises(ValueError, match="no ring"):
        merge_parts(packed, Delivery())
    ring.close()


@pytest.mark.parametrize("parts", [1, 3])
def test_files_read_into_the_slot_pack_as_the_ordinary_read(tmp_path, parts):
    """torchdali's own datasets send file names (``FileRef``) and the worker reads the files
    into the batch's slot itself; samples decoded in the worker (PNGs, CMYK JPEGs) go
    after the files. Every sample's bytes must be those of the ordinary read."""
    from PIL import Image

    from torchdali._executor._ring import HostRing

    folder = make_folder(tmp_path, n=40, lo=40, hi=200, every_444=3, seed=6)
    Image.fromarray(np.full((37, 41, 3), 90, np.uint8)).save(os.path.join(folder, "c1", "0100.png"))
    _add_files_decoded_in_the_worker(folder, 6, seed=6)
    ds = td.datasets.ImageFolder(folder)
    plan = compile_transforms(T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()]))
    batches = torch.utils.data.BatchSampler(torch.randperm(len(ds), generator=torch.Generator().manual_seed(1)).tolist(),
                                            len(ds), False)
    state = dict(seed=3, epoch=1)
    whole = next(iter(TaggedBatchSampler(batches, EpochState(**state))))
    expected = _pack(PrepareBatch(plan, "gpu"), ds, whole)  # read by the dataset, one blob
    assert (expected.kinds == 1).sum() == 7  # the PNGs and CMYK JPEGs: decoded in the worker
    items = TaggedDataset(ds, defer_files=True).__getitems__(whole)
    assert all(isinstance(s.item[0], _tags.FileRef) and s.item[1] == ds.targets[s.tag.index] for s in items)
    ring = HostRing(3, 4 * int(expected.blob.numel()))
    tbs = [whole] if parts == 1 else \
        [tb for tb in TaggedBatchSampler(batches, EpochState(**state), EpochStart(1, parts)) if tb.parts > 1]
    packed = [_pack(PrepareBatch(plan, "gpu", ring=ring), ds, tb, defer=True) for tb in tbs]
    got = merge_parts(packed, Delivery(), ring) if parts > 1 else packed[0]
    assert got.ring_seq == 0 and got.blob is None
    slot = ring.slot(0)
    spans = sorted((int(o), int(o + n)) for o, n in zip(got.offsets, got.lengths))
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "two samples' bytes overlap"
    if parts == 1:  # the files went straight in, in order; what the worker decoded went after them
        files, decoded = got.offsets[got.kinds == 0], got.offsets[got.kinds == 1]
        assert (np.diff(files) > 0).all() and files.max() < decoded.min()
    for i in range(len(got.indices)):
        o, n, eo = int(got.offsets[i]), int(got.lengths[i]), int(expected.offsets[i])
        assert torch.equal(slot[o:o + n], expected.blob[eo:eo + n]), i
    for name in set(FIELDS) - {"offsets", "blob", "targets"}:
        assert _equal(getattr(got, name), getattr(expected, name)), name
    assert torch.equal(torch.as_tensor(got.targets), torch.as_tensor(expected.targets))
    ring.close()


@pytest.mark.parametrize("parts", [1, 3])
def test_the_pixels_decoded_in_the_workers_reach_the_decode_buffer_each_in_its_place(tmp_path, parts):
    """The executor copies what the workers decoded (PNGs, CMYK JPEGs) from the slot to
    the decode buffer as one span when they lie together (``decoded_layout``). Every such
    sample must land where its output offset says, byte for byte as the worker wrote it,
    and no sample's output may overlap another's."""
    from PIL import Image

    from torchdali._executor._decode import decoded_layout, decoded_sizes
    from torchdali._executor._ring import HostRing
    from torchdali._executor._wire import RAW

    folder = make_folder(tmp_path, n=40, lo=40, hi=200, every_444=3, seed=7)
    Image.fromarray(np.full((37, 41, 3), 90, np.uint8)).save(os.path.join(folder, "c1", "0100.png"))
    _add_files_decoded_in_the_worker(folder, 9, seed=7)
    ds = td.datasets.ImageFolder(folder)
    plan = compile_transforms(T.Compose([T.RandomResizedCrop(32)]))
    batches = torch.utils.data.BatchSampler(list(range(len(ds))), len(ds), False)
    state = dict(seed=3, epoch=1)
    whole = next(iter(TaggedBatchSampler(batches, EpochState(**state))))
    ring = HostRing(3, 1 << 20)
    tbs = [whole] if parts == 1 else \
        [tb for tb in TaggedBatchSampler(batches, EpochState(**state), EpochStart(1, parts)) if tb.parts > 1]
    packed = [_pack(PrepareBatch(plan, "gpu", ring=ring), ds, tb, defer=True) for tb in tbs]
    got = merge_parts(packed, Delivery(), ring) if parts > 1 else packed[0]
    assert got.ring_seq == 0
    slot = ring.slot(0)
    raw = np.flatnonzero(got.kinds == RAW)
    assert len(raw) >= 8
    numel = decoded_sizes(got.shapes)
    out, total, span = decoded_layout(got.kinds, got.offsets, got.lengths, numel)
    if parts == 1:  # read into the slot, then the decoded pixels after the files: one span of them alone
        assert span is not None and span[1] - span[0] == int(numel[raw].sum())
    buffer = torch.zeros(total, dtype=torch.uint8)
    if span is not None:
        start, stop, at = span
        buffer[at:at + stop - start] = slot[start:stop]
    else:
        for i in raw:
            buffer[out[i]:out[i] + numel[i]] = slot[got.offsets[i]:got.offsets[i] + got.lengths[i]]
    for i in raw:
        assert torch.equal(buffer[out[i]:out[i] + numel[i]], slot[got.offsets[i]:got.offsets[i] + numel[i]]), i
    ends = sorted((int(o), int(o + k)) for o, k in zip(out, numel))
    assert ends[0][0] >= 0 and ends[-1][1] <= total
    assert all(a[1] <= b[0] for a, b in zip(ends, ends[1:])), "two samples' outputs overlap"
    ring.close()


def test_pixels_decoded_in_the_workers_scattered_among_jpegs_are_placed_one_by_one():
    from torchdali._executor._decode import decoded_layout
    from torchdali._executor._wire import ENCODED, RAW

    kinds = np.array([ENCODED, RAW, ENCODED, RAW, ENCODED])
    k = 100  # sizes well above the span's allowance of 64 KiB
    lengths = k * np.array([5000, 300, 6000, 200, 4000])
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])  # a blob: in batch order
    numel = k * np.array([9000, 300, 9500, 200, 7000])
    out, total, span = decoded_layout(kinds, offsets, lengths, numel)
    assert span is None and total == int(numel.sum())
    assert out.tolist() == [k * v for v in (0, 9000, 9300, 18800, 19000)]
    offsets = k * np.array([0, 15000, 5000, 15300, 11000])  # the same, decoded pixels after the JPEGs
    out, total, span = decoded_layout(kinds, offsets, lengths, numel)
    assert span == (k * 15000, k * 15500, k * 25500) and total == k * 26000
    assert out.tolist() == [k * v for v in (0, 25500, 9000, 25800, 18500)]
    out, total, span = decoded_layout(kinds, offsets, lengths, numel, room=k * 26000 - 1)  # no room for the span
    assert span is None and total == int(numel.sum()) and out.tolist() == [k * v for v in (0, 9000, 9300, 18800, 19000)]
    lengths[1] += 1  # a payload that is not exactly its pixels: one by one
    assert decoded_layout(kinds, offsets, lengths, numel)[2] is None


def test_a_file_that_cannot_be_read_is_a_bad_sample_named_by_index_and_path(tmp_path):
    from torchdali._executor._ring import HostRing
    from torchdali.errors import SampleError

    from ._helpers import jpeg_bytes, smooth_image

    folder = make_folder(tmp_path, n=6, lo=40, hi=80)
    ds = td.datasets.ImageFolder(folder)
    gone = ds.samples[2][0]
    os.remove(gone)
    plan = compile_transforms(T.Compose([T.CenterCrop(16)]))
    tb = next(iter(TaggedBatchSampler(torch.utils.data.BatchSampler(range(6), 6, False), EpochState())))
    ring = HostRing(3, 1 << 20)
    with pytest.raises(SampleError, match="cannot read file") as info:
        _pack(PrepareBatch(plan, "gpu", ring=ring), ds, tb, defer=True)
    assert info.value.index == 2 and info.value.path == gone
    spare = jpeg_bytes(smooth_image(30, 30).permute(1, 2, 0).contiguous().numpy())
    policy = lambda index, path, err: (spare, 0)  # noqa: E731
    got = _pack(PrepareBatch(plan, "gpu", ring=ring, on_error=policy), ds, tb, defer=True)
    assert [(s.index, s.path) for s in got.skipped] == [(2, gone)]
    o, n = int(got.offsets[2]), int(got.lengths[2])
    assert bytes(ring.slot(0)[o:o + n].numpy()) == spare
    ring.close()


def test_only_plain_file_items_are_sent_as_file_names(tmp_path):
    folder = make_folder(tmp_path, n=3)
    assert td.datasets.ImageFolder(folder).file_item(1) is not None
    assert td.datasets.ImageFolder(folder, transform=lambda b: b).file_item(1) is None
    assert td.datasets.ImageFolder(folder, target_transform=lambda t: t + 10).file_item(1)[1] >= 10

    class Own(td.datasets.ImageFolder):
        def __getitem__(self, index):
            return super().__getitem__(index)

    assert Own(folder).file_item(1) is None
    files = td.datasets.FileList([os.path.join(folder, "c1", "0001.jpg")])
    assert files.file_item(0) == (os.path.join(folder, "c1", "0001.jpg"), -1)
    plain = TaggedDataset(torch.utils.data.TensorDataset(torch.zeros(3, 4, dtype=torch.uint8)), defer_files=True)
    assert not plain.defer_files


def test_a_later_epoch_takes_each_files_header_from_the_table(tmp_path, monkeypatch):
    """The second epoch's workers take what the first one found in each file's header
    from the ring's table instead of parsing it again, and pack the same batch; a file
    written again in between is parsed again."""
    from torchdali._executor._ring import HostRing
    from torchdali._synthetic import synthetic_image

    from ._helpers import jpeg_bytes

    folder = make_folder(tmp_path, n=24, lo=40, hi=200, every_444=3, seed=8)
    ds = td.datasets.ImageFolder(folder)
    plan = compile_transforms(T.Compose([T.RandomResizedCrop(32)]))
    tb = next(iter(TaggedBatchSampler(torch.utils.data.BatchSampler(range(24), 24, False), EpochState())))
    expected = _pack(PrepareBatch(plan, "gpu"), ds, tb)
    ring = HostRing(3, 4 * int(expected.blob.numel()), samples=len(ds))
    parsed = []
    load = PrepareBatch.load
    monkeypatch.setattr(PrepareBatch, "load", lambda self, data, idx, *a: parsed.append(idx) or load(self, data, idx, *a))
    first = _pack(PrepareBatch(plan, "gpu", ring=ring), ds, tb, defer=True)
    assert sorted(parsed) == list(range(24))
    parsed.clear()
    ring.release_upto(0)
    again = _pack(PrepareBatch(plan, "gpu", ring=ring), ds, tb, defer=True)
    assert parsed == []
    for got in (first, again):
        for name in set(FIELDS) - {"offsets", "blob", "scan_starts"}:
            assert _equal(getattr(got, name), getattr(expected, name)), name
        # their scan data checked in the worker: the GPU does not check them (Note [torchdali scan check once])
        assert (expected.scan_starts > 0).all() and (got.scan_starts == -1).all()
    # sample 5 becomes a larger image: parsed again, and packed with its new size
    path = ds.samples[5][0]
    with open(path, "wb") as f:
        f.write(jpeg_bytes(synthetic_image(np.random.default_rng(0), 211, 97)))
    ring.release_upto(1)
    third = _pack(PrepareBatch(plan, "gpu", ring=ring), ds, tb, defer=True)
    assert parsed == [5]
    assert tuple(third.shapes[5, :2]) == (211, 97)
    assert _equal(third.shapes, _pack(PrepareBatch(plan, "gpu"), ds, tb).shapes)
    ring.close()


def test_the_workers_check_each_files_scan_data_once_and_leave_a_damaged_one_to_the_gpu_check(tmp_path):
    """With the header table, a worker checks a file's scan data as it reads it and notes a
    clean file with no scan start (the GPU does not check it, in this epoch or a later
    one); a file whose scan data holds a marker no scan can hold keeps its scan start in
    every epoch, so the GPU check sends it to the CPU decoder. Without the table every
    file keeps its scan start. The reference is ``csrc_triton``'s plain-torch check."""
    from csrc_triton.scan_check import bad_scan_markers_reference
    from torchdali._executor._ring import HostRing

    folder = make_folder(tmp_path, n=12, lo=40, hi=120, seed=3)
    ds = td.datasets.ImageFolder(folder)
    for k in (4, 9):  # a start-of-frame marker in the middle of the scan data, as a bad block leaves one
        path = ds.samples[k][0]
        good = open(path, "rb").read()
        mid = (good.find(b"\xff\xda") + len(good)) // 2
        open(path, "wb").write(good[:mid] + b"\xff\xc0" + good[mid + 2:])
    plan = compile_transforms(T.Compose([T.RandomResizedCrop(32)]))
    tb = next(iter(TaggedBatchSampler(torch.utils.data.BatchSampler(range(12), 12, False), EpochState())))
    plain = _pack(PrepareBatch(plan, "gpu"), ds, tb)
    blob = plain.blob.reshape(-1)
    bad = bad_scan_markers_reference(blob, plain.offsets, plain.lengths, plain.scan_starts).numpy()
    assert bad.tolist() == [k in (4, 9) for k in range(12)]
    assert (plain.scan_starts > 0).all()
    ring = HostRing(3, 4 * int(blob.numel()), samples=len(ds))
    for epoch in range(2):
        ring.release_upto(epoch - 1)
        got = _pack(PrepareBatch(plan, "gpu", ring=ring), ds, tb, defer=True)
        assert _equal(got.scan_starts, np.where(bad, plain.scan_starts, -1)), epoch
    ring.close()
    untabled = HostRing(3, 4 * int(blob.numel()))
    got = _pack(PrepareBatch(plan, "gpu", ring=untabled), ds, tb, defer=True)
    assert untabled.table is None and _equal(got.scan_starts, plain.scan_starts)
    untabled.close()


def test_detection_parts_merge_into_the_batch_mapped_whole():
    """Each part's worker ships its targets unmapped with the trace of its draw; merged, the
    batch's targets and trace map (``_executor.map_targets``) as the batch packed whole does,
    and as the dataset's targets do."""
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    from torchdali import _rng
    from torchdali._executor._executor import map_targets
    from torchdali.transforms._target_plan import TargetPlan

    from .test_geometry_targets import MIXED, Detection, assert_target

    ds = Detection(sizes=MIXED * 8)
    plan = compile_transforms([T.RandomZoomOut(fill={tv_tensors.Mask: 3}, p=1.0), T.RandomIoUCrop(),
                               T.RandomHorizontalFlip(),
                               v2.SanitizeBoundingBoxes(labels_getter=lambda inputs: inputs[1]["masks"]),
                               T.Resize((24, 24))])
    prepare = PrepareBatch(plan, "gpu", delivery=Delivery())
    n = len(ds)
    batches = torch.utils.data.BatchSampler(range(n), n, False)
    state = dict(seed=4, epoch=2)
    whole = _pack(prepare, ds, next(iter(TaggedBatchSampler(batches, EpochState(**state)))))
    parts = [tb for tb in TaggedBatchSampler(batches, EpochState(**state), EpochStart(1, 2)) if tb.parts > 1]
    assert len(parts) == 2
    got = merge_parts([_pack(prepare, ds, tb) for tb in parts], Delivery())
    assert got.trace is not None and whole.trace is not None
    tp = TargetPlan.of(plan)
    sizes = whole.shapes[:, :2]
    mapped = [map_targets(tp, b.targets, b, b.shapes, torch.device("cpu")) for b in (got, whole)]
    want = tp.map([ds.target(i) for i in range(n)], sizes, _rng.sample_keys(4, 2, whole.positions), "cpu")
    for i, (a, b, w) in enumerate(zip(*mapped, want)):
        assert_target(a, w, f"merged: sample {i}")
        assert_target(b, w, f"whole: sample {i}")


def test_detection_batch_leaves_the_worker_unmapped_with_its_trace():
    """The GPU path's worker maps no target: it ships them packed as the dataset gave them, with
    the trace of its draw, and ``map_targets`` maps them whole (with masks or without)."""
    from torchvision.transforms import v2

    from torchdali import _rng
    from torchdali._executor._executor import map_targets
    from torchdali.transforms._target_plan import TargetPlan

    from .test_geometry_targets import MIXED, Detection, assert_target

    plan = compile_transforms([T.RandomZoomOut(p=1.0), T.RandomIoUCrop(), T.RandomHorizontalFlip(),
                               v2.SanitizeBoundingBoxes(), T.Resize((24, 24))])
    tp = TargetPlan.of(plan)
    for masks in (False, True):
        ds = Detection(sizes=MIXED * 4, masks=masks)
        n = len(ds)
        tb = next(iter(TaggedBatchSampler(torch.utils.data.BatchSampler(range(n), n, False),
                                          EpochState(seed=4, epoch=2))))
        batch = _pack(PrepareBatch(plan, "gpu", delivery=Delivery()), ds, tb)
        assert batch.trace is not None
        for i, t in enumerate(batch.targets):
            assert_target(t, ds.target(i), f"unmapped: sample {i}")
        got = map_targets(tp, batch.targets, batch, batch.shapes, torch.device("cpu"))
        want = tp.map([ds.target(i) for i in range(n)], batch.shapes[:, :2], _rng.sample_keys(4, 2, batch.positions),
                      "cpu")
        for i, (a, w) in enumerate(zip(got, want)):
            assert_target(a, w, f"masks={masks}: sample {i}")
