"""CUDA settings torchdali makes for its process on import, before CUDA starts."""
from __future__ import annotations

from typing import MutableMapping

#: Hardware work queues asked of CUDA (``CUDA_DEVICE_MAX_CONNECTIONS``; CUDA's default is 8). Streams
#: that share a queue run in order, and nvJPEG's hardware decoder spreads a batch's uploads and plane
#: copies over about 28 streams of its own and waits for them on the host: with 8 queues its copies
#: queued behind the training model's kernels. ResNet-18 on an H100, 16 cores: 76.9% -> 88.3% of the
#: model's own speed (benchmarks/RESULTS.md, 2026-11-27, CUDA's work queues).
WORK_QUEUES = 32


def ask_for_work_queues(environ: MutableMapping[str, str], cuda_started: bool) -> str | None:
    """Set ``CUDA_DEVICE_MAX_CONNECTIONS`` in ``environ`` unless the user chose a value. CUDA reads
    it when it makes the context: returns a warning to show when that has happened already."""
    if "CUDA_DEVICE_MAX_CONNECTIONS" in environ:
        return None
    environ["CUDA_DEVICE_MAX_CONNECTIONS"] = str(WORK_QUEUES)
    if not cuda_started:
        return None
    return (f"torchdali was imported after CUDA started, so this process keeps CUDA's 8 hardware work queues "
            f"instead of {WORK_QUEUES}: nvJPEG's copies then wait behind the model's kernels, and training runs "
            f"slower (ResNet-18 on an H100: 77% instead of 88% of its own speed). Import torchdali before the "
            f"first CUDA call, or set CUDA_DEVICE_MAX_CONNECTIONS={WORK_QUEUES} in the environment.")
