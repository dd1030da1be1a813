"""The CPU's share of the GPU path's JPEG decoding, sized from the epochs' measured rates.

With ``DataLoader(cpu_decode_share="auto")`` the workers decode a fraction ``s`` of
each epoch's JPEGs on the CPU and nvJPEG the rest (which samples: see
``_worker.cpu_share_member``). Per image, nvJPEG takes ``t_g`` seconds of the
decode thread, a worker takes ``t_c`` to decode one on the CPU and ``a`` for
everything else it does (read, header, pack). With ``W`` workers, the GPU keeps
up with ``1 / ((1 - s) t_g)`` images per second and the workers with
``W / (a + s t_c)``.

``t_g`` is not a constant of the GPU: nvJPEG's batched decode spends most of its
time on the host, and the cores the workers spend decoding slow it down (on the
H200 with 16 cores, a share of 0.21 raised nvJPEG's host time per image from 39 to
51 us, and the loader lost 12%). So ``t_g`` is modelled as ``t0 + m s``: from one
epoch, ``m = 0`` (the share at which both sides finish together,
``s* = (W t_g - a) / (W t_g + t_c)``); once two epochs ran with different shares,
``t0`` and ``m`` come from their two measurements, and ``s*`` is the share in
``[0, cap]`` with the least time per image, ``max((1 - s)(t0 + m s), (a + s t_c) / W)``.
When ``m > t0`` the GPU side only gets slower with a share, and ``s*`` is 0.

Between epochs the share moves halfway to ``s*`` (clipped to ``[AUTO_FLOOR, cap]``).
When the training loop hardly waited for data, the loader is not the bottleneck and
the share decays towards the floor: it would only cost CPU time.
"""
from __future__ import annotations

from .._stats import EpochStats

AUTO_START = 0.1  # the first epoch's share: DALI's fixed hw_decoder_load=0.9 leaves the CPU 0.1
AUTO_FLOOR = 0.02  # the least share "auto" keeps, so that t_c stays measured
IDLE_WAIT = 0.05  # the loop waited less than this fraction of the epoch: not input-bound
SEPARATE = 0.01  # two epochs' shares at least this far apart give the slope of t_g


def _rates(e: EpochStats) -> tuple[float, float, float] | None:
    """``(t_g, t_c, a)`` measured in epoch ``e``, or None when it decoded no share."""
    n_gpu = e.decoded_hardware + e.decoded_hybrid + e.decoded_one_by_one
    if e.samples <= 0 or n_gpu <= 0 or e.decode_s <= 0.0 or e.share_decoded <= 0:
        return None
    t_g = e.decode_s / n_gpu
    t_c = e.share_decode_s / e.share_decoded
    a = max(e.worker_s - e.share_decode_s, 0.0) / e.samples
    return t_g, t_c, a


def next_cpu_share(share: float, e: EpochStats, num_workers: int, cap: float,
                   previous: EpochStats | None = None) -> float:
    """The next epoch's share after an epoch ``e`` run with ``share`` (``previous``: the
    epoch before it, if any, with its own ``cpu_share``)."""
    rates = _rates(e)
    if rates is None or num_workers <= 0:
        return min(max(share, AUTO_FLOOR), cap)
    if e.wait_fraction < IDLE_WAIT:
        target = 0.0
    else:
        t_g, t_c, a = rates
        W = num_workers
        earlier = _rates(previous) if previous is not None else None
        if earlier is not None and abs(previous.cpu_share - share) >= SEPARATE:
            m = max((t_g - earlier[0]) / (share - previous.cpu_share), 0.0)
            t0 = max(t_g - m * share, 1e-12)
            steps = 200
            grid = [cap * k / steps for k in range(steps + 1)]
            target = min(grid, key=lambda x: (max((1 - x) * (t0 + m * x), (a + x * t_c) / W), x))
        else:
            target = (W * t_g - a) / (W * t_g + t_c)
    target = min(max(target, 0.0), cap)
    return round(min(max(0.5 * share + 0.5 * target, AUTO_FLOOR), cap), 4)
