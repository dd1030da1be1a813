"""The built package: ``csrc_triton`` and ``torchdali`` import from an installed copy."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A wheel of the checkout, installed (not editable) into a folder of its own."""
    tmp = tmp_path_factory.mktemp("wheel")
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp),
             str(ROOT)]
    r = subprocess.run(build, capture_output=True, text=True, timeout=300, cwd=tmp)
    assert r.returncode == 0, r.stderr
    (wheel,) = tmp.glob("torchdali-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    sources = {p.relative_to(ROOT).as_posix() for d in ("torchdali", "csrc_triton") for p in (ROOT / d).rglob("*.py")}
    assert sources <= set(names), f"missing from the wheel: {sorted(sources - set(names))}"
    site = tmp / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                       capture_output=True, text=True, timeout=300, cwd=tmp)
    assert r.returncode == 0, r.stderr
    return site


def test_installed_copy_imports_both_packages(installed: Path) -> None:
    code = """
import csrc_triton, torchdali
from csrc_triton import layout, resized_crop_reference
from torchdali.transforms import compile_transforms
print(csrc_triton.__file__)
print(torchdali.__file__)
print(layout.NUM_PARAMS)
"""
    env = {**os.environ, "PYTHONPATH": str(installed)}
    # run outside the checkout so that its folders are not importable
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                       cwd=installed.parent)
    assert r.returncode == 0, r.stderr
    kernels, library, width = r.stdout.split()
    assert Path(kernels).is_relative_to(installed) and Path(library).is_relative_to(installed)
    assert int(width) > 0


def _env_without_queues() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def test_import_leaves_the_process_environment_alone() -> None:
    code = "import os, torchdali, torch; print(os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS'), torch.cuda.is_initialized())"
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120,
                       env=_env_without_queues())
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["None", "False"]


@pytest.mark.parametrize("chosen, started, value, took", [(None, False, "32", True), (None, True, "32", False),
                                                          ("8", False, "8", True), ("1", True, "1", False)])
def test_set_cuda_work_queues_keeps_the_users_value_and_says_when_it_is_too_late(monkeypatch, chosen, started, value,
                                                                                 took) -> None:
    import torch

    from torchdali import set_cuda_work_queues

    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    if chosen is not None:
        monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", chosen)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: started)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert set_cuda_work_queues() is took
    assert os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] == value
    late = [w for w in record if "called after CUDA started" in str(w.message)]
    assert len(late) == (0 if took else 1)


@pytest.mark.parametrize("queues", [0, 33, 8.0, True, "32"])
def test_set_cuda_work_queues_refuses_what_cuda_would_not_take(queues) -> None:
    from torchdali import set_cuda_work_queues

    with pytest.raises(ValueError, match="from 1 to 32"):
        set_cuda_work_queues(queues)


@pytest.mark.parametrize("environ, warned", [({}, True), ({"CUDA_DEVICE_MAX_CONNECTIONS": "8"}, False),
                                             ({"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, False)])
def test_default_work_queues_are_named_with_their_cost_only_when_nobody_chose(environ, warned) -> None:
    from torchdali._cuda_env import work_queue_warning

    message = work_queue_warning(environ)
    assert (message is not None) == warned
    if warned:
        assert "torchdali.set_cuda_work_queues()" in message and "%" in message


@pytest.mark.cuda
def test_set_cuda_work_queues_after_cuda_started_warns_on_the_gpu() -> None:
    code = ("import warnings, torch, torchdali; torch.cuda.init(); warnings.simplefilter('always');\n"
            "print(torchdali.set_cuda_work_queues())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=_env_without_queues())
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False"] and "called after CUDA started" in r.stderr
