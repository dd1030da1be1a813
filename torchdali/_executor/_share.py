"""The CPU's share of the GPU path's JPEG decoding, sized from an epoch's measured rates.

With ``DataLoader(cpu_decode_share="auto")`` the workers decode a fraction ``s`` of
each epoch's JPEGs on the CPU and nvJPEG the rest (which samples: see
``_worker.cpu_share_member``). Per image, nvJPEG takes ``t_g`` seconds of the
decode thread, a worker takes ``t_c`` to decode one on the CPU and ``a`` for
everything else it does (read, header, pack). With ``W`` workers, the GPU keeps
up with ``1 / ((1 - s) t_g)`` images per second and the workers with
``W / (a + s t_c)``; they are equal at

    s* = (W t_g - a) / (W t_g + t_c)

Between epochs the share moves halfway to ``s*`` (clipped to ``[0, cap]``). When
the training loop hardly waited for data, the loader is not the bottleneck and
the share decays towards 0: it would only cost CPU time.
"""
from __future__ import annotations

from .._stats import EpochStats

AUTO_START = 0.1  # the first epoch's share: DALI's fixed hw_decoder_load=0.9 leaves the CPU 0.1
AUTO_FLOOR = 0.02  # the least share "auto" keeps, so that t_c stays measured
IDLE_WAIT = 0.05  # the loop waited less than this fraction of the epoch: not input-bound


def next_cpu_share(share: float, e: EpochStats, num_workers: int, cap: float) -> float:
    """The next epoch's share after an epoch ``e`` run with ``share``."""
    n_gpu = e.decoded_hardware + e.decoded_hybrid + e.decoded_one_by_one
    if e.samples <= 0 or n_gpu <= 0 or e.decode_s <= 0.0 or num_workers <= 0 or e.share_decoded <= 0:
        return min(max(share, AUTO_FLOOR), cap)
    if e.wait_fraction < IDLE_WAIT:
        target = 0.0
    else:
        t_g = e.decode_s / n_gpu
        t_c = e.share_decode_s / e.share_decoded
        a = max(e.worker_s - e.share_decode_s, 0.0) / e.samples
        target = (num_workers * t_g - a) / (num_workers * t_g + t_c)
    target = min(max(target, 0.0), cap)
    return round(min(max(0.5 * share + 0.5 * target, AUTO_FLOOR), cap), 4)
