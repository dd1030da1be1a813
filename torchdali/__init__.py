"""torchdali: a GPU-side image (and video clip) input pipeline that keeps PyTorch's data model."""
import os as _os

import torch as _torch

from ._cuda_env import ask_for_work_queues as _ask_for_work_queues
from ._warn import warn_user as _warn_user

# before anything here starts CUDA: more hardware work queues for nvJPEG's streams (_cuda_env.py)
_late = _ask_for_work_queues(_os.environ, _torch.cuda.is_initialized())
if _late is not None:
    _warn_user(_late)

from . import datasets, transforms, video
from .dataloader import DataLoader
from .errors import DecoderStalled, SampleError, WorkerDied

__version__ = "0.1.0"
__all__ = ["DataLoader", "DecoderStalled", "SampleError", "WorkerDied", "datasets", "transforms", "video", "__version__"]
