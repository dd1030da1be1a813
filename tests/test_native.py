"""``torchdali._native``: C sources built with the system compiler on first use, kept in the cache, loaded with
ctypes; a missing compiler or a source that does not compile is a RuntimeError that says so."""
from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from torchdali import _native


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCHDALI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(_native, "_loaded", {})
    return tmp_path / "cache"


def _source(tmp_path: Path, body: str, name: str = "probe.c") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def test_a_source_is_built_once_and_loaded(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _source(tmp_path, "long td_twice(long x) { return 2 * x; }\n")
    lib = _native.build(source)
    lib.td_twice.argtypes, lib.td_twice.restype = [ctypes.c_long], ctypes.c_long
    assert lib.td_twice(21) == 42
    (built,) = cache.glob("probe-*.so")
    assert _native.build(source) is lib  # loaded once per process
    monkeypatch.setattr(_native, "_loaded", {})
    monkeypatch.setattr(_native.subprocess, "run", lambda *a, **k: pytest.fail("built again"))
    _native.build(source)  # another process: taken from the cache
    assert list(cache.glob("probe-*.so")) == [built] and not list(cache.glob(".probe-*"))


def test_a_changed_source_is_built_again(cache: Path, tmp_path: Path) -> None:
    source = _source(tmp_path, "int td_value(void) { return 1; }\n")
    assert _native.build(source).td_value() == 1
    _native._loaded.clear()
    source.write_text("int td_value(void) { return 2; }\n")
    assert _native.build(source).td_value() == 2
    assert len(list(cache.glob("probe-*.so"))) == 2


def test_a_source_that_does_not_compile_names_itself_and_the_error(cache: Path, tmp_path: Path) -> None:
    source = _source(tmp_path, "int td_broken(void) { return undeclared_name; }\n", "broken.c")
    with pytest.raises(RuntimeError, match=r"(?s)building broken\.c with .* failed .*undeclared_name"):
        _native.build(source)
    assert not cache.exists() or not list(cache.iterdir())  # no half-written library left


def test_no_compiler_is_a_runtime_error_that_says_what_to_do(cache: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "no-such-compiler-torchdali")
    with pytest.raises(RuntimeError, match="no C compiler found.*install gcc or set CC"):
        _native.build(_source(tmp_path, "int td_x(void) { return 0; }\n"))
    monkeypatch.delenv("CC")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RuntimeError, match="no C compiler found"):
        _native.compiler()


def test_the_cache_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TORCHDALI_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _native.cache_dir() == tmp_path / "xdg" / "torchdali"
    monkeypatch.setenv("TORCHDALI_CACHE_DIR", str(tmp_path / "mine"))
    assert _native.cache_dir() == tmp_path / "mine"


def test_an_unwritable_cache_falls_back_to_the_temporary_directory(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("TORCHDALI_CACHE_DIR", str(blocker / "cache"))  # under a file: cannot be made
    monkeypatch.setattr(_native.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    monkeypatch.setattr(_native, "_loaded", {})
    lib = _native.build(_source(tmp_path, "int td_three(void) { return 3; }\n"))
    assert lib.td_three() == 3
    assert list((tmp_path / "tmp").glob("torchdali-*/probe-*.so"))
