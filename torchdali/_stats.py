"""Per-epoch timing counters: is the training loop input-bound?"""
from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class EpochStats:
    epoch: int
    batches: int = 0
    samples: int = 0
    wall_s: float = 0.0  # from the first request to the end of the epoch
    first_batch_s: float = 0.0  # from the first request to the first batch handed to the loop
    # GPU path: the epoch's first batches were prepared while the epoch before ran
    # (Note [torchdali run-ahead] in _executor/_run_ahead.py)
    ran_ahead: bool = False
    wait_s: float = 0.0  # time the training loop spent blocked on the loader
    worker_s: float = 0.0  # summed worker time (read + pack, or decode + transform on the CPU path)
    executor_s: float = 0.0  # GPU path: host time of the executor thread per batch
    executor_cpu_s: float = 0.0  # GPU path: the executor thread's CPU time in it (the rest: waits)
    fetch_s: float = 0.0  # GPU path: staging thread waiting for the workers' next batch
    stage_s: float = 0.0  # GPU path: copying the batch's bytes into pinned staging memory
    # GPU path: host time decoding (the three below, the CPU fallback, on_error), on the staging thread
    # (a batch decoded at once, while the executor launches the batch before) or the executor's (in groups)
    decode_s: float = 0.0
    nvjpeg_s: float = 0.0  # GPU path: host time inside nvJPEG's batched decode calls
    nvjpeg_cpu_s: float = 0.0  # GPU path: CPU time of the decoding thread in those calls (waits excluded)
    scan_wait_s: float = 0.0  # GPU path: host time waiting for the scan check after the decode
    launch_s: float = 0.0  # GPU path: the executor thread's host time after the decode: kernels, targets, copies
    kernel_s: float = 0.0  # GPU path: GPU time of the fused kernel (CUDA events)
    skipped: int = 0
    # GPU path: where the batch's JPEGs were decoded. nvJPEG's hardware engines in batches,
    # its CUDA (hybrid) backend, one at a time after a failed batch (slow), or on the CPU
    # (in the workers, for formats nvJPEG does not take, or after nvJPEG rejected them).
    decoded_hardware: int = 0
    decoded_hybrid: int = 0
    decoded_one_by_one: int = 0
    decoded_cpu: int = 0
    # GPU path, video: clips decoded by NVDEC, and by FFmpeg's software decoders in the executor
    # (streams NVDEC does not take: pixel formats other than 8-bit 4:2:0 and colour matrices other
    # than BT.601/709, decided from the stream's parameters, codecs or sizes its engine lacks, failures);
    # the CPU path decodes every clip in its workers
    decoded_nvdec: int = 0
    decoded_video_cpu: int = 0
    # GPU path, video: pictures decoded (those from a clip's keyframe to its first frame included, see
    # ``_nvdec.DecodedClips``) and frames handed to the loop; decoding from keyframes makes the first larger,
    # clips of one video in a batch that share packets are decoded once (``video._merge``), which makes it smaller
    decoded_video_frames: int = 0
    delivered_video_frames: int = 0

    @property
    def wait_fraction(self) -> float:
        return self.wait_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def decoded_per_delivered_frame(self) -> float:
        """Video: pictures decoded per frame delivered (1.0 where every decoded picture is delivered;
        0.0 before any clip)."""
        return self.decoded_video_frames / self.delivered_video_frames if self.delivered_video_frames else 0.0

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["wait_fraction"] = self.wait_fraction
        d["decoded_per_delivered_frame"] = self.decoded_per_delivered_frame
        d["images_per_s"] = self.samples / self.wall_s if self.wall_s > 0 else 0.0
        return d


@dataclass
class LoaderStats:
    """Timings of every epoch this loader has run; ``last`` is the current one."""

    epochs: list[EpochStats] = field(default_factory=list)
    _t0: float = 0.0

    def start_epoch(self, epoch: int) -> None:
        self.epochs.append(EpochStats(epoch))
        self._t0 = time.perf_counter()

    @property
    def last(self) -> EpochStats | None:
        return self.epochs[-1] if self.epochs else None

    def add_batch(self, n: int, wait: float, worker: float = 0.0, stages: dict | None = None) -> None:
        e = self.epochs[-1]
        if not e.batches:
            e.first_batch_s = time.perf_counter() - self._t0
        e.batches += 1
        e.samples += n
        e.wait_s += wait
        e.worker_s += worker
        for k, v in (stages or {}).items():
            setattr(e, k, getattr(e, k) + v)
        e.wall_s = time.perf_counter() - self._t0

    def end_epoch(self) -> None:
        if self.epochs:
            self.epochs[-1].wall_s = time.perf_counter() - self._t0

    def summary(self) -> str:
        e = self.last
        if e is None:
            return "no epoch run yet"
        d = e.as_dict()
        line = (f"epoch {e.epoch}: {e.samples} images in {e.wall_s:.2f}s ({d['images_per_s']:.0f}/s), "
                f"first batch after {1e3 * e.first_batch_s:.0f} ms{' (prepared ahead)' if e.ran_ahead else ''}, waited {e.wait_s:.2f}s "
                f"({100 * e.wait_fraction:.1f}%), workers {e.worker_s:.2f}s")
        if e.executor_s:
            line += (f"; fetch {e.fetch_s:.2f}s, staging {e.stage_s:.2f}s; executor {e.executor_s:.2f}s ({e.executor_cpu_s:.2f} CPU; decode "
                     f"{e.decode_s:.2f}, in nvJPEG {e.nvjpeg_s:.2f} ({e.nvjpeg_cpu_s:.2f} CPU), launch {e.launch_s:.2f}), kernel {e.kernel_s:.3f}s GPU")
        if e.executor_s and (e.decoded_nvdec or e.decoded_video_cpu):
            line += (f"; clips decoded: {e.decoded_nvdec} NVDEC, {e.decoded_video_cpu} CPU, "
                     f"{e.decoded_per_delivered_frame:.2f} frames decoded per frame delivered")
        elif e.executor_s:
            line += (f"; decoded: {e.decoded_hardware} hardware, {e.decoded_hybrid} hybrid, "
                     f"{e.decoded_one_by_one} one by one, {e.decoded_cpu} CPU")
        if e.skipped:
            line += f"; {e.skipped} bad samples replaced"
        return line
