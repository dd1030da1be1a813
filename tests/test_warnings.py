"""Warnings torchdali gives its users: they name the user's line, and torch's own warnings
about our conversions do not appear.

A warning that names torchdali's source cannot be found in the user's code nor filtered by
the user's module (``filterwarnings(..., module=...)``); each one here is raised from calls
of different depth inside the library, and must land on this file's line that made the call.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms.v2 as v2
import torchvision.transforms.v2.functional as TF

import torchdali as td
from torchdali import transforms as T
from torchdali._warn import user_stacklevel, warn_user

from ._helpers import make_folder

ROOT = Path(__file__).resolve().parents[1]
HERE = os.path.abspath(__file__)
BICUBIC = "bicubic warps run bilinear"


def _hits(record: list[warnings.WarningMessage], match: str) -> list[warnings.WarningMessage]:
    hits = [w for w in record if match in str(w.message)]
    assert hits, [str(w.message) for w in record]
    return hits


@pytest.mark.parametrize("make", [
    lambda: T.AutoAugment(interpolation="bicubic"),
    lambda: T.RandAugment(interpolation=v2.InterpolationMode.BICUBIC),
    # converted from torchvision: compile_transforms -> the converter -> the class -> warp_filter
    lambda: T.compile_transforms(v2.Compose([v2.RandomResizedCrop(16),
                                             v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BICUBIC)])),
], ids=["class", "class-enum", "converted"])
def test_bicubic_warp_warning_names_the_callers_line(make) -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        make()
    # the lambda's frame is the first one outside torchdali: its lines, in this file (the
    # converter may build the class more than once; every report names the same line)
    first = make.__code__.co_firstlineno
    for w in _hits(record, BICUBIC):
        assert w.category is UserWarning
        assert os.path.abspath(w.filename) == HERE and first <= w.lineno <= first + 2, (w.filename, w.lineno)


def test_bicubic_warp_warning_is_filtered_by_the_users_module() -> None:
    # the reason for naming the user's frame: a filter on the user's module applies
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message=".*" + BICUBIC, module=__name__)
        T.AutoAugment(interpolation="bicubic")
    assert not [w for w in record if BICUBIC in str(w.message)]


def test_dataloader_not_lifting_the_transform_names_the_callers_line(tmp_path) -> None:
    from torchvision.datasets.folder import pil_loader

    ds = torchvision.datasets.ImageFolder(make_folder(tmp_path, n=2), loader=lambda p: pil_loader(p).rotate(90),
                                          transform=v2.Compose([v2.PILToTensor(), v2.CenterCrop(16)]))
    with pytest.warns(UserWarning, match="as under torch") as record:
        line = sys._getframe().f_lineno + 1
        td.DataLoader(ds, batch_size=2, device="cpu")
    (w,) = _hits(list(record), "as under torch")
    assert (os.path.abspath(w.filename), w.lineno) == (HERE, line)


def _run_script(tmp_path, text: str) -> list[str]:
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(text))
    env = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_work_queues_asked_for_too_late_name_the_calling_line(tmp_path) -> None:
    """set_cuda_work_queues() after CUDA started warns at the user's call, past the library's frames."""
    count, filename, lineno = _run_script(tmp_path, """\
        import warnings
        import torch
        torch.cuda.is_initialized = lambda: True  # as after torch.cuda.init(), without a GPU
        import torchdali
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            torchdali.set_cuda_work_queues()
        hits = [w for w in record if "called after CUDA started" in str(w.message)]
        print(len(hits), hits[0].filename, hits[0].lineno)
        """)
    assert (count, os.path.abspath(filename), lineno) == ("1", str(tmp_path / "user_script.py"), "7")


@pytest.mark.cuda
def test_gpu_epochs_with_the_default_work_queues_warn_once_at_the_users_loop(tmp_path) -> None:
    folder = make_folder(tmp_path / "data", n=8)
    count, filename, lineno, after_call = _run_script(tmp_path, f"""\
        import subprocess, sys, warnings
        import torchdali as td
        from torchdali import transforms as T
        ds = td.datasets.ImageFolder({folder!r})
        loader = td.DataLoader(ds, batch_size=4, transforms=T.Compose([T.CenterCrop(16)]), device="cuda")
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            for epoch in range(2):
                for images, labels in loader:
                    pass
        hits = [w for w in record if "default 8 hardware work queues" in str(w.message)]
        code = ("import warnings, torchdali as td; warnings.simplefilter('error'); print(td.set_cuda_work_queues())")
        print(len(hits), hits[0].filename, hits[0].lineno, subprocess.check_output([sys.executable, "-c", code],
              text=True).strip())
        """)
    assert (count, os.path.abspath(filename), lineno) == ("1", str(tmp_path / "user_script.py"), "9")
    assert after_call == "True"


def test_user_stacklevel_counts_the_library_frames() -> None:
    """Called from here (outside the library) it is 1 + the frames of torchdali above us: none."""
    assert user_stacklevel() == 1
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        warn_user("from the test", RuntimeWarning)
    (w,) = record
    assert (w.category, os.path.abspath(w.filename), w.lineno) == (RuntimeWarning, HERE, line)


# --------------------------------------------------------------------------- #
# torch's "The given NumPy array is not writable" on the CPU path
# --------------------------------------------------------------------------- #

NOT_WRITABLE = "The given NumPy array is not writable"


@pytest.fixture
def torch_warns_every_time():
    """torch gives this warning once per process: without this, an earlier test (or a forked
    worker's parent) that made it would hide it here."""
    before = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    yield
    torch.set_warn_always(before)


class _PilImages(torch.utils.data.Dataset):
    """Items as a user's dataset returns them: a PIL image (np.asarray of it is read-only) or
    that read-only array."""

    def __init__(self, as_array: bool) -> None:
        rng = np.random.default_rng(0)
        self.arrays = [rng.integers(0, 256, (20 + i, 24, 3), dtype=np.uint8) for i in range(4)]
        self.as_array = as_array

    def __len__(self) -> int:
        return len(self.arrays)

    def __getitem__(self, i: int):
        from PIL import Image

        image = Image.fromarray(self.arrays[i])
        return (np.asarray(image) if self.as_array else image), i


@pytest.mark.parametrize("num_workers", [0, 1])
@pytest.mark.parametrize("as_array", [False, True], ids=["pil", "read-only-array"])
def test_pil_items_on_the_cpu_path_give_no_not_writable_warning(num_workers: int, as_array: bool,
                                                                torch_warns_every_time) -> None:
    ds = _PilImages(as_array)
    assert not np.asarray(ds[0][0]).flags.writeable  # the case that made torch warn
    loader = td.DataLoader(ds, batch_size=4, device="cpu", num_workers=num_workers,
                           transforms=T.Compose([T.CenterCrop(16)]))
    # the filter is inherited by a forked worker; a warning there fails the batch
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=NOT_WRITABLE)
        images, targets = next(iter(loader))
    for k in range(4):
        expected = TF.center_crop(torch.from_numpy(ds.arrays[k]).permute(2, 0, 1), [16, 16])
        assert torch.equal(images[k], expected)
    assert targets.tolist() == [0, 1, 2, 3]


def test_to_hwc_shares_a_writable_array_and_copies_a_read_only_one(torch_warns_every_time) -> None:
    from torchdali.transforms._reference import to_hwc

    a = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    t = to_hwc(a)
    assert t.data_ptr() == a.ctypes.data  # no copy where none is needed
    ro = a.copy()
    ro.flags.writeable = False
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=NOT_WRITABLE)
        r = to_hwc(ro)
    assert r.data_ptr() != ro.ctypes.data and torch.equal(r, t)


def test_an_epoch_without_a_batch_says_why():
    """drop_last with fewer samples than one batch: torch's loader gives nothing without a word."""
    import torch

    import torchdali as td
    from torchdali import transforms as T

    images = [torch.zeros(3, 8, 8, dtype=torch.uint8)] * 3
    loader = td.DataLoader(images, batch_size=4, drop_last=True, device="cpu", transforms=T.Compose([]))
    with pytest.warns(UserWarning, match="an epoch gives no batch: its 3 samples are fewer than batch_size=4") as rec:
        assert list(loader) == []
    assert rec[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(list(td.DataLoader(images, batch_size=3, drop_last=True, device="cpu",
                                      transforms=T.Compose([])))) == 1
