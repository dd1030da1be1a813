"""The decoders' exception, apart so the header checks (``_limits``) and the CPU
decoder (``_cpu``) can both raise it without importing each other."""
from __future__ import annotations

__all__ = ["DecodeError"]


class DecodeError(RuntimeError):
    """An encoded image could not be decoded; the message carries the decoder's reason.

    Callers add the sample index and file path.
    """
