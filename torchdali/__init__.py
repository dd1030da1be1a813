"""torchdali: a GPU-side image input pipeline that keeps PyTorch's data model."""
import importlib.util as _ilu
import os as _os
import sys as _sys


def _alias_source_kernels() -> None:
    # An installed torchdali maps csrc_triton/ to torchdali.csrc_triton (setup.py's
    # package_dir). Running from a source checkout (PYTHONPATH=.) has no such
    # mapping, so register the folder next to the package under that name.
    if _ilu.find_spec(__name__ + ".csrc_triton") is not None:
        return
    folder = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), "csrc_triton")
    init = _os.path.join(folder, "__init__.py")
    if not _os.path.exists(init):
        return
    spec = _ilu.spec_from_file_location(__name__ + ".csrc_triton", init, submodule_search_locations=[folder])
    module = _ilu.module_from_spec(spec)
    _sys.modules[spec.name] = module
    spec.loader.exec_module(module)


_alias_source_kernels()

from . import datasets, transforms  # noqa: E402
from .dataloader import DataLoader  # noqa: E402
from .errors import SampleError  # noqa: E402

__version__ = "0.1.0"
__all__ = ["DataLoader", "SampleError", "datasets", "transforms", "__version__"]
