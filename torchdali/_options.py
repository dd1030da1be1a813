"""The loader's private options, read once when torchdali is imported.

Users set only one of them, ``run_ahead``, through the documented escape hatch
``TORCHDALI_RUN_AHEAD=0`` (Note [torchdali run-ahead] in ``_executor/_run_ahead.py``), which
must be in the environment before ``import torchdali``. The others exist so that
tests can compare a path with the one it replaced: they replace ``OPTIONS`` (e.g.
``monkeypatch.setattr(_options, "OPTIONS", dataclasses.replace(OPTIONS, ...))``), so
the code reads ``_options.OPTIONS`` when it needs a value, never a copy taken at import.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    # GPU path, persistent workers: start the next epoch's batches before its iter()
    run_ahead: bool = True
    # GPU path: workers write batches into the shared pinned staging ring (``_executor/_ring.py``);
    # off, every batch crosses the worker queue as a tensor
    staging_ring: bool = True
    # torchdali's own file datasets: the workers read each file straight into the ring
    # (``_tags.FileRef``); off, the dataset reads it and the worker copies it in
    direct_read: bool = True
    # with direct reads: the ring keeps what each file's header said, and that its scan data
    # was checked, for later epochs (``HostRing.note``; Note [torchdali scan check once])
    header_table: bool = True


OPTIONS = Options(run_ahead=os.environ.get("TORCHDALI_RUN_AHEAD", "1") != "0")
