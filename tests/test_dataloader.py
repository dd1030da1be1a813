"""td.DataLoader and td.datasets against torch's DataLoader and torchvision's ImageFolder."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms.v2.functional as TF
from torch.utils.data import BatchSampler, DataLoader as TorchLoader, SequentialSampler

import torchdali as td
from torchdali import transforms as T

from ._helpers import assert_close_uint8, make_folder

RESIZE = T.Compose([T.Resize((16, 20))])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("imgs"), n=23)


class IndexedImages(torch.utils.data.Dataset):
    """Decoded images whose first pixel encodes the index; target = index."""

    def __init__(self, n: int = 37):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        img = np.zeros((12 + i % 5, 10 + i % 3, 3), dtype=np.uint8)
        img[:] = i % 251
        return img, i


def test_image_folder_matches_torchvision(folder):
    ours = td.datasets.ImageFolder(folder)
    ref = torchvision.datasets.ImageFolder(folder)
    assert ours.classes == ref.classes and ours.class_to_idx == ref.class_to_idx
    assert ours.samples == ref.samples and ours.targets == ref.targets
    data, target = ours[5]
    assert data.dtype == torch.uint8 and data.ndim == 1 and target == ref.targets[5]
    with open(ref.samples[5][0], "rb") as f:
        assert bytes(data.numpy()) == f.read()
    only_c0 = td.datasets.ImageFolder(folder, is_valid_file=lambda p: "c0" in p, allow_empty=True)
    assert only_c0.samples == torchvision.datasets.ImageFolder(
        folder, is_valid_file=lambda p: "c0" in p, allow_empty=True).samples


def test_file_list_reader(folder, tmp_path):
    ref = torchvision.datasets.ImageFolder(folder)
    lst = tmp_path / "list.txt"
    lst.write_text("# path label\n" + "".join(f"{os.path.relpath(p, folder)} {t}\n" for p, t in ref.samples))
    ds = td.datasets.FileList(str(lst), root=folder)
    assert len(ds) == len(ref) and ds.targets == ref.targets
    assert ds.samples[3][0] == ref.samples[3][0]
    assert bytes(ds[3][0].numpy()) == open(ref.samples[3][0], "rb").read()


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("shuffle,drop_last,batch_size", [(False, False, 5), (True, False, 4), (True, True, 6)])
def test_index_order_len_and_targets_match_torch(num_workers, shuffle, drop_last, batch_size):
    ds = IndexedImages()
    ref = TorchLoader(ds, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
                      generator=torch.Generator().manual_seed(11), collate_fn=lambda b: [y for _, y in b])
    ours = td.DataLoader(ds, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, num_workers=num_workers,
                         generator=torch.Generator().manual_seed(11), transforms=RESIZE, device="cpu")
    assert len(ours) == len(ref)
    for epoch in range(2):  # the generator advances identically across epochs
        expected = [torch.tensor(b) for b in ref]
        got = []
        for images, targets in ours:
            assert images.shape[1:] == (3, 16, 20) and images.dtype == torch.uint8
            # pixels came from the sample the target names
            assert torch.equal(images[:, 0, 0, 0].long(), targets % 251)
            got.append(targets)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert torch.equal(g, e), (epoch, g, e)


def test_batch_sampler_and_collate_fn_are_honoured():
    ds = IndexedImages(10)

    def collate(samples):  # torch's semantics: the batch's (image, target) samples, images transformed
        return [t * 10 for _, t in samples], torch.stack([im for im, _ in samples])

    bs = BatchSampler(SequentialSampler(ds), batch_size=3, drop_last=False)
    loader = td.DataLoader(ds, batch_sampler=bs, transforms=RESIZE, device="cpu", collate_fn=collate)
    ref = TorchLoader([(TF.resize(torch.from_numpy(im).permute(2, 0, 1), [16, 20], antialias=True), t)
                       for im, t in (ds[i] for i in range(len(ds)))],
                      batch_sampler=BatchSampler(SequentialSampler(ds), batch_size=3, drop_last=False),
                      collate_fn=collate)
    assert len(loader) == 4
    got, expected = list(loader), list(ref)
    assert [t for t, _ in got] == [t for t, _ in expected] == [[0, 10, 20], [30, 40, 50], [60, 70, 80], [90]]
    for (_, images), (_, ref_images) in zip(got, expected):
        assert torch.equal(images, ref_images)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_images_match_torchvision_on_decoded_jpegs(folder, num_workers):
    ds = td.datasets.ImageFolder(folder)
    loader = td.DataLoader(ds, batch_size=8, num_workers=num_workers, transforms=RESIZE, device="cpu")
    ref = torchvision.datasets.ImageFolder(folder, loader=torchvision.io.decode_image)
    seen = 0
    for images, targets in loader:
        for k in range(images.shape[0]):
            img, t = ref[seen]
            assert targets[k].item() == t
            assert_close_uint8(images[k], TF.resize(img, [16, 20], antialias=True))
            seen += 1
    assert seen == len(ds)


def test_same_seed_same_batches_across_num_workers(folder):
    tf = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])
    ds = td.datasets.ImageFolder(folder)

    def run(nw, seed):
        loader = td.DataLoader(ds, batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(1),
                               num_workers=nw, transforms=tf, device="cpu", seed=seed)
        return [x for x, _ in loader] + [x for x, _ in loader]  # two epochs

    a, b, c = run(0, 3), run(2, 3), run(0, 4)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))
    # a new epoch draws new crops
    assert not torch.equal(a[0], a[len(a) // 2])


def test_external_source_decoded_arrays_and_tensors():
    rng = np.random.default_rng(0)
    hwc = [rng.integers(0, 255, (30 + i, 40, 3), dtype=np.uint8) for i in range(3)]
    chw = [torch.from_numpy(a).permute(2, 0, 1).contiguous() for a in hwc]
    gray = [a[:, :, 0] for a in hwc]
    for items in (hwc, chw, gray):
        loader = td.DataLoader([(x, i) for i, x in enumerate(items)], batch_size=3,
                               transforms=T.Compose([T.CenterCrop(20)]), device="cpu")
        images, targets = next(iter(loader))
        for k in range(3):
            expected = TF.center_crop(torch.from_numpy(hwc[k]).permute(2, 0, 1), [20, 20])
            if items is gray:
                expected = expected[:1].expand(3, -1, -1)
            assert torch.equal(images[k], expected)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("payload", [b"", b"not a jpeg at all", "truncated"])
def test_bad_sample_error_names_index_and_path(tmp_path, num_workers, payload):
    root = make_folder(tmp_path / "bad", n=6, classes=1)
    ds = td.datasets.ImageFolder(root)
    victim = ds.samples[4][0]
    if payload == "truncated":
        good = open(victim, "rb").read()
        payload = good[: len(good) // 3]
    with open(victim, "wb") as f:
        f.write(payload)
    loader = td.DataLoader(ds, batch_size=3, num_workers=num_workers, transforms=RESIZE, device="cpu")
    with pytest.raises(td.SampleError) as info:
        for _ in loader:
            pass
    msg = str(info.value)
    assert "sample 4" in msg and victim in msg


def test_loader_construction_validates_transforms():
    with pytest.raises(ValueError, match="has no bound"):  # tests/test_variable_size.py: the bounded case runs
        td.DataLoader(IndexedImages(), batch_size=2, transforms=T.Compose([T.Resize(32)]), device="cpu",
                      max_image_pixels=None)
    with pytest.raises(ValueError, match="transforms"):
        td.DataLoader(IndexedImages(), batch_size=2, device="cpu")
    with pytest.raises(ValueError, match="batch_size=None"):
        td.DataLoader(IndexedImages(), batch_size=None, transforms=RESIZE, device="cpu")
    # torch's own argument checks still apply
    with pytest.raises(ValueError):
        td.DataLoader(IndexedImages(), batch_size=2, shuffle=True, sampler=SequentialSampler(range(3)),
                      transforms=RESIZE, device="cpu")


def test_channels_last_and_stats(folder):
    ds = td.datasets.ImageFolder(folder)
    loader = td.DataLoader(ds, batch_size=8, transforms=T.Compose([T.Resize((8, 8)), T.ToDtype(torch.float16)]),
                           device="cpu", memory_format=torch.channels_last)
    images, _ = next(iter(loader))
    assert images.dtype == torch.float16 and images.is_contiguous(memory_format=torch.channels_last)
    for _ in loader:
        pass
    e = loader.stats().last
    assert e.samples == len(ds) and e.batches == len(loader) and e.wall_s >= e.wait_s > 0


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "numpy", "tensor"])
def test_user_dataset_returning_encoded_bytes_in_any_container(folder, kind):
    ref = torchvision.datasets.ImageFolder(folder)

    class Bytes(torch.utils.data.Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            raw = open(ref.samples[i][0], "rb").read()
            data = {"bytes": raw, "bytearray": bytearray(raw), "numpy": np.frombuffer(raw, np.uint8),
                    "tensor": torch.frombuffer(bytearray(raw), dtype=torch.uint8)}[kind]
            return data, ref.targets[i]

    images, targets = next(iter(td.DataLoader(Bytes(), batch_size=6, transforms=RESIZE, device="cpu")))
    for k in range(6):
        assert_close_uint8(images[k], TF.resize(torchvision.io.decode_image(ref.samples[k][0]), [16, 20],
                                                antialias=True))
    assert targets.tolist() == ref.targets[:6]
