"""Warnings addressed to the user, attributed to the user's line.

``warnings.warn(..., stacklevel=2)`` names the caller of the function that warns. Inside
torchdali that caller is usually torchdali again (a class's ``__init__`` calling a helper,
``compile_transforms`` converting a torchvision pipeline), so the warning would point at
our source and the user could neither find the call nor filter it by module. Python 3.12's
``skip_file_prefixes`` does this walk for us; 3.11 does not have it.
"""
from __future__ import annotations

import os
import sys
import warnings

# csrc_triton ships beside torchdali (setup.py): its frames are the library's too
_LIBRARY_DIRS = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), name) + os.sep
    for name in ("torchdali", "csrc_triton")
)


def _is_library(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_LIBRARY_DIRS)


def _is_import_machinery(filename: str) -> bool:
    # the frames `warnings` itself passes over when it counts ``stacklevel`` (its
    # _is_internal_frame): an import-time warning must land on the importing line
    return "importlib" in filename and "_bootstrap" in filename


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` called by the caller of this
    function name the first frame outside torchdali and csrc_triton (import machinery
    passed over, as ``warnings`` counts it).

    Where every frame is the library's (a worker's or thread's own loop), the outermost
    library frame is named.
    """
    frame = sys._getframe(1)  # the function that will call warnings.warn: level 1
    level = 1
    while frame.f_back is not None and _is_library(frame.f_code.co_filename):
        frame = frame.f_back
        while frame.f_back is not None and _is_import_machinery(frame.f_code.co_filename):
            frame = frame.f_back
        level += 1
    return level


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the user's code: the first frame
    outside torchdali (see :func:`user_stacklevel`), so the report names the user's line
    and ``filterwarnings`` can select it by the user's module."""
    warnings.warn(message, category, stacklevel=user_stacklevel())
