"""torchdali: a GPU-side image (and video clip) input pipeline that keeps PyTorch's data model."""
import os as _os

# CUDA gives a process 8 hardware work queues unless CUDA_DEVICE_MAX_CONNECTIONS says otherwise, and
# streams that share a queue run in order. nvJPEG's hardware decoder spreads a batch's uploads and
# plane copies over about 28 streams of its own and waits for them on the host, so beside a training
# model its copies queued behind the model's kernels and its call took 2-3x as long
# (benchmarks/RESULTS.md, 2026-11-27). CUDA reads the variable when it makes the context: set here,
# on import, unless the user chose a value.
_os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")

from . import datasets, transforms, video
from .dataloader import DataLoader
from .errors import DecoderStalled, SampleError, WorkerDied

__version__ = "0.1.0"
__all__ = ["DataLoader", "DecoderStalled", "SampleError", "WorkerDied", "datasets", "transforms", "video", "__version__"]
