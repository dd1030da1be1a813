"""torchdali: a GPU-side image (and video clip) input pipeline that keeps PyTorch's data model."""
from . import datasets, transforms, video
from .dataloader import DataLoader
from .errors import DecoderStalled, SampleError, WorkerDied

__version__ = "0.1.0"
__all__ = ["DataLoader", "DecoderStalled", "SampleError", "WorkerDied", "datasets", "transforms", "video", "__version__"]
