"""How a worker gets a sample's bytes, and what the header table saves it.

On the GPU path, a sample of torchdali's own file datasets arrives as a ``FileRef``
(``_tags.py``): the worker reads the batch's files one after the other straight into
the batch's staging-ring slot (``read_into``), or the ordinary way when the slot has
no room left (``read_file_of``); ``sample_bytes`` gives either. With the ring's
header table (``HostRing.known``, ``HostRing.note``), a file read again in a later
epoch is not parsed again: ``load_noted`` takes what a worker found in its header
the first time, while the file keeps its size and modification time.

Note [torchdali scan check once]
nvJPEG's hardware engines decode a JPEG whose compressed data holds a marker no scan can
hold (a bad disk block, a cut download) into garbage without an error, so the GPU path
checks every JPEG's scan data (``GpuDecoder._check_scans``). On the GPU that check
copies each batch's bytes over the bus a second time, beside the engines' own reads, and
the loader ran measurably faster without it (``benchmarks/RESULTS.md``, decisions table:
the scan-marker check once per file). So a worker that reads a file straight into the
ring and notes its header in the header table (``HostRing.note``) checks its scan data
first (``load_noted``), in numpy (``entropy_data_ok``, the same rule), and notes a clean
file with no scan start: no batch checks it again while the file keeps its size and
modification time, whichever worker reads it. A file written again is checked again. A
file that fails keeps its scan start, and the GPU check sends it to the CPU decoder in
every epoch, which names what is wrong with it. Samples that are not files read into the
ring, and every sample with the table off (``_options.Options.header_table``), are
checked on the GPU in every epoch. What the table cannot see is a file's bytes changing
on the medium under the same size and time.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import torch

from ..errors import SampleError
from ._classify import LoadedSample, decoders
from ._tags import FileRef
from ._wire import ENCODED


def read_into(slot: torch.Tensor, start: int, stop: int,
              files: Sequence[tuple[int, str]]) -> tuple[dict[int, Any], dict[int, tuple[int, int]], int]:
    """Read ``files`` (``(sample, path)`` pairs) one after the other into ``slot[start:stop]``.

    Returns ``{sample: its bytes, a view of the slot, or the OSError that stopped the
    read}``, ``{sample: (size, mtime_ns) of the file read}`` and where the bytes read
    end. A file that does not fit in what is left, or that grew while it was read, is
    left out (the caller reads it the ordinary way).
    """
    out: dict[int, Any] = {}
    stamps: dict[int, tuple[int, int]] = {}
    if not files:
        return out, stamps, start
    mem = memoryview(slot.numpy())
    pos = start
    for i, path in files:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as e:
            out[i] = e
            continue
        try:
            st = os.fstat(fd)
            size = st.st_size
            if size <= 0 or pos + size >= stop:  # empty, or no room: one byte more tells a grown file
                continue
            got = os.readv(fd, [mem[pos:pos + size + 1]])
            while 0 < got < size and (more := os.readv(fd, [mem[pos + got:pos + size + 1]])):
                got += more  # a short read before the end (regular files do not, other files may)
        except OSError as e:
            out[i] = e
            continue
        finally:
            os.close(fd)
        if got > size:  # it grew while it was read
            continue
        out[i] = slot[pos:pos + got]
        if got == size:
            stamps[i] = (size, st.st_mtime_ns)
        pos += got
    return out, stamps, pos


def read_file_of(path: str, idx: int) -> torch.Tensor:
    """The bytes of a sample's file (``datasets.read_file``), or a SampleError naming it."""
    from ..datasets import read_file

    try:
        return read_file(path)
    except OSError as e:
        raise SampleError.for_sample(idx, path, "cannot read file", e) from None


def sample_bytes(data: Any, read: Any, idx: int, path: str | None) -> Any:
    """What to load for a sample whose item holds ``data``: ``data`` itself, except for a
    ``FileRef``: the file's bytes as ``read_into`` left them in the slot (``read``: a view,
    or the OSError that stopped the read, raised as a SampleError naming the file), or,
    when they are not there (no room left), read the ordinary way."""
    if not isinstance(data, FileRef):
        return data
    if read is None:  # not read into the slot: no room left
        return read_file_of(data.path, idx)
    if isinstance(read, BaseException):
        raise SampleError.for_sample(idx, path, "cannot read file", read)
    return read


def load_noted(ring: Any, load: Callable[[Any, int, str | None], LoadedSample], data: Any, idx: int,
               path: str | None, stamp: tuple[int, int] | None) -> LoadedSample:
    """Sample ``idx`` loaded: for a file read into the ring (``stamp``: its size and
    mtime_ns, as ``read_into`` read it) whose version a worker noted in the ring's header
    table, what that worker found; otherwise ``load(data, idx, path)``, and a file for
    nvJPEG is noted, its scan data checked once (Note [torchdali scan check once])."""
    known = ring.known(idx, *stamp) if stamp is not None else None
    if known is not None:  # this file's header, as a worker found it in an earlier epoch
        shape, hint, scan_start = known
        return LoadedSample(ENCODED, data, shape, hint, scan_start)
    loaded = load(data, idx, path)
    if stamp is not None and loaded.kind == ENCODED and loaded.hint >= 0:
        scan_start = loaded.scan_start
        # the scan-marker check, once per version of the file: Note [torchdali scan check once]
        if scan_start >= 0 and ring.table is not None and decoders().entropy_data_ok(loaded.payload, int(scan_start)):
            scan_start = -1
        ring.note(idx, *stamp, loaded.shape, int(loaded.hint), int(scan_start))
        loaded = loaded._replace(scan_start=scan_start)
    return loaded
