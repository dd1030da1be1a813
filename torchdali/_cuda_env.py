"""CUDA's hardware work queues: the one process-wide setting the GPU path wants, asked for explicitly.

A CUDA context has ``CUDA_DEVICE_MAX_CONNECTIONS`` hardware work queues (8 by default), read
once, when the context is made. Streams are spread over them at creation, and the streams that
share a queue run in order. nvJPEG's hardware decoder spreads each batch's uploads and plane
copies over about 28 streams of its own and waits for them on the host: with 8 queues some of
them share the training stream's queue and wait behind the model's kernels, queued milliseconds
ahead. Those streams are nvJPEG's, made inside its hardware backend, so no choice of ours (our own
streams, their priorities) takes them off that queue; only more queues do.

Importing torchdali changes nothing: the process's environment is the user's. ``set_cuda_work_queues``
is the explicit call, to make before CUDA starts; the GPU path's first epoch warns, once per
process, when the variable was never set (``work_queue_warning``). A value the user chose (Megatron-style
training sets 1, for instance) is theirs: no call overrides it, and no warning questions it.
"""
from __future__ import annotations

import os
from typing import Mapping

import torch

from ._warn import warn_user

#: Work queues asked for: enough that nvJPEG's ~28 streams do not share the training stream's queue.
WORK_QUEUES = 32

#: The cost of CUDA's default 8 queues, measured with ``benchmarks/train_speed.py``, bf16 channels-last
#: (benchmarks/RESULTS.md, "2026-11-29, second (H200) — CUDA's work queues asked for explicitly").
MEASURED_COST = ("ResNet-18 with 16 cores on an H200 trained at 74% of its own speed instead of 82-87%, "
                 "ResNet-50 with 3 cores at 93% instead of 95%")

_ENV = "CUDA_DEVICE_MAX_CONNECTIONS"
_warned = False


def set_cuda_work_queues(queues: int = WORK_QUEUES) -> bool:
    """Give this process ``queues`` CUDA hardware work queues (``CUDA_DEVICE_MAX_CONNECTIONS``), so
    nvJPEG's copies do not wait behind the training model's kernels. Call it before the first CUDA
    call; a value already in the environment is kept.

    Returns True when the setting will take effect. After CUDA has started it cannot (CUDA reads the
    variable once, when it makes the context): it warns with what that costs and returns False.
    """
    if not isinstance(queues, int) or isinstance(queues, bool) or not 1 <= queues <= 32:
        raise ValueError(f"queues must be an int from 1 to 32 (CUDA's range for {_ENV}), got {queues!r}")
    os.environ.setdefault(_ENV, str(queues))  # a value already there is the user's
    if not torch.cuda.is_initialized():
        return True
    warn_user(f"set_cuda_work_queues() was called after CUDA started, so this process keeps the work queues it "
              f"started with ({_ENV}={os.environ.get(_ENV)} now has no effect). With CUDA's default 8, {MEASURED_COST}. "
              f"Call it before the first CUDA call: first thing in the training script.", RuntimeWarning)
    return False


def work_queue_warning(environ: Mapping[str, str]) -> str | None:
    """What to tell a process whose GPU path runs with the work queues nobody chose, else None."""
    if _ENV in environ:
        return None
    return (f"this process runs with CUDA's default 8 hardware work queues, so nvJPEG's copies wait behind the "
            f"model's kernels: {MEASURED_COST}. For the {WORK_QUEUES} queues the GPU path is measured with, "
            f"call torchdali.set_cuda_work_queues() before the first CUDA call (or set {_ENV}={WORK_QUEUES} in the "
            f"environment).")


def warn_once_about_work_queues() -> None:
    """The GPU path's first epoch in this process: ``work_queue_warning``, if any, at the user's line."""
    global _warned
    if _warned:
        return
    _warned = True
    message = work_queue_warning(os.environ)
    if message is not None:
        warn_user(message, RuntimeWarning)
