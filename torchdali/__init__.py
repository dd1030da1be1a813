"""torchdali: a GPU-side image input pipeline that keeps PyTorch's data model."""
from . import datasets, transforms
from .dataloader import DataLoader
from .errors import DecoderStalled, SampleError, WorkerDied

__version__ = "0.1.0"
__all__ = ["DataLoader", "DecoderStalled", "SampleError", "WorkerDied", "datasets", "transforms", "__version__"]
