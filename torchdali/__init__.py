"""torchdali: a GPU-side image (and video clip) input pipeline that keeps PyTorch's data model."""
from . import datasets, transforms, video
from ._cuda_env import set_cuda_work_queues
from .dataloader import DataLoader
from .errors import DecoderStalled, SampleError, WorkerDied

__version__ = "0.1.0"
__all__ = ["DataLoader", "DecoderStalled", "SampleError", "WorkerDied", "datasets", "set_cuda_work_queues", "transforms",
           "video", "__version__"]
