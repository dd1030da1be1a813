"""Exceptions that name the sample that caused them."""
from __future__ import annotations


class SampleError(RuntimeError):
    """A sample could not be read, decoded or transformed.

    The message always starts with ``sample <index>`` and the file path when the
    dataset knows it, so the culprit can be found in a dataset of millions.
    Constructible from a single message so torch's worker re-raise keeps the type.
    """

    def __init__(self, message: str, index: int | None = None, path: str | None = None) -> None:
        super().__init__(message)
        self.index = index
        self.path = path

    @classmethod
    def for_sample(cls, index: int, path: str | None, what: str, reason: BaseException | str) -> "SampleError":
        where = f"sample {index}" + (f" ({path})" if path else "")
        err = cls(f"{where}: {what}: {reason}", index=index, path=path)
        return err
