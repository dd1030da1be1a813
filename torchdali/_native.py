"""C sources of the library built into shared libraries on first use, and loaded with ctypes.

The library ships a few small C files (``torchdali/video/_cuvid_clip.c``: NVDEC's parser callbacks, which
must not take the interpreter once per picture). They include no Python or NVIDIA header and link against
nothing, so any C compiler builds them, as Triton builds its launchers: ``$CC``, else ``cc``, ``gcc`` or
``clang`` on the PATH. The library is kept in ``$TORCHDALI_CACHE_DIR`` (default
``$XDG_CACHE_HOME/torchdali``, else ``~/.cache/torchdali``; where it cannot be written, a folder in the
temporary directory) under a name made from the source's and the
compiler's hash, written under a temporary name and renamed, so that processes building it at once (the
ranks of a torchrun job) each load a whole file.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

__all__ = ["build", "cache_dir", "compiler"]

_lock = threading.Lock()
_loaded: dict[Path, ctypes.CDLL] = {}


def compiler() -> str:
    """The C compiler: ``$CC``, else the first of ``cc``, ``gcc``, ``clang`` on the PATH. RuntimeError
    where there is none."""
    name = os.environ.get("CC")
    found = shutil.which(name) if name else next(filter(None, map(shutil.which, ("cc", "gcc", "clang"))), None)
    if not found:
        raise RuntimeError(f"no C compiler found ({'$CC=' + name if name else 'cc, gcc, clang'} not on the PATH): "
                           f"torchdali builds its small C helpers with one on first use; install gcc or set CC")
    return found


def cache_dir() -> Path:
    """Where built libraries are kept (see the module docstring)."""
    root = os.environ.get("TORCHDALI_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torchdali"


def _writable_dir() -> Path:
    """``cache_dir()``, or where it cannot be written (a read-only home), a folder of this user's in the
    temporary directory."""
    for folder in (cache_dir(), Path(tempfile.gettempdir()) / f"torchdali-{os.getuid()}"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK | os.X_OK):
            return folder
    raise RuntimeError(f"no writable folder for torchdali's built C helpers ({cache_dir()} nor the temporary "
                       f"directory): set TORCHDALI_CACHE_DIR")


def build(source: Path) -> ctypes.CDLL:
    """``source`` compiled (``-O2 -shared -fPIC``) and loaded; built once per content and compiler, then
    taken from the cache. RuntimeError naming the source and the compiler's message where it fails."""
    source = Path(source)
    with _lock:
        lib = _loaded.get(source)
        if lib is not None:
            return lib
        cc = compiler()
        text = source.read_bytes()
        key = hashlib.sha256(text + b"\0" + cc.encode() + b"\0" + str(os.stat(cc).st_mtime_ns).encode()).hexdigest()
        target = _writable_dir() / f"{source.stem}-{key[:20]}.so"
        if not target.exists():
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{source.stem}-", suffix=".so")
            os.close(fd)
            try:
                done = subprocess.run([cc, "-O2", "-std=c11", "-shared", "-fPIC", "-o", tmp, str(source)],
                                      capture_output=True, text=True)
                if done.returncode:
                    raise RuntimeError(f"building {source.name} with {cc} failed (exit {done.returncode}): "
                                       f"{(done.stderr or done.stdout).strip()[-2000:]}")
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        lib = _loaded[source] = ctypes.CDLL(str(target))
        return lib
