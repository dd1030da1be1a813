"""The built package: ``csrc_triton`` and ``torchdali`` import from an installed copy."""
from __future__ import annotations

import os
import subprocess
import sys
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


@pytest.mark.parametrize("chosen", [None, "1"])
def test_import_gives_cuda_32_work_queues_unless_the_user_chose(chosen: str | None) -> None:
    # CUDA reads CUDA_DEVICE_MAX_CONNECTIONS when it makes the context, so it must be set on import
    env = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    if chosen is not None:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = chosen
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    code = "import os, torchdali, torch; print(os.environ['CUDA_DEVICE_MAX_CONNECTIONS'], torch.cuda.is_initialized())"
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["32" if chosen is None else chosen, "False"]


@pytest.mark.parametrize("chosen, started, warned", [(None, False, False), (None, True, True),
                                                     ("8", True, False), ("1", False, False)])
def test_cuda_started_before_the_import_is_named(chosen: str | None, started: bool, warned: bool) -> None:
    from torchdali._cuda_env import ask_for_work_queues

    environ = {} if chosen is None else {"CUDA_DEVICE_MAX_CONNECTIONS": chosen}
    message = ask_for_work_queues(environ, started)
    assert environ == {"CUDA_DEVICE_MAX_CONNECTIONS": chosen or "32"}
    assert (message is not None) == warned
    if warned:
        assert "Import torchdali before the first CUDA call" in message


@pytest.mark.cuda
def test_import_after_cuda_started_warns() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    code = "import torch; torch.cuda.init(); import torchdali"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "imported after CUDA started" in r.stderr
