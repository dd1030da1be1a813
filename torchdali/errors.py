"""Exceptions that name the sample that caused them."""
from __future__ import annotations

import re
from typing import Sequence


class SampleError(RuntimeError):
    """A sample could not be read, decoded or transformed.

    The message always starts with ``sample <index>`` and the file path when the
    dataset knows it, so the culprit can be found in a dataset of millions.
    Constructible from a single message so torch's worker re-raise keeps the type.
    """

    def __init__(self, message: str, index: int | None = None, path: str | None = None) -> None:
        super().__init__(message)
        if index is None:
            index, path = _named_sample(message)
        self.index = index
        self.path = path

    @classmethod
    def for_sample(cls, index: int, path: str | None, what: str, reason: BaseException | str) -> "SampleError":
        where = f"sample {index}" + (f" ({path})" if path else "")
        err = cls(f"{where}: {what}: {reason}", index=index, path=path)
        return err


# torch re-raises a worker's error as ``type(message)``, the message being the worker's
# formatted traceback: its last line is ``<module>.<Error>: sample <index> (<path>): ...``,
# which ``for_sample`` wrote, so the sample can be read back from it.
_NAMED = re.compile(r"^[\w.]*Error: sample (\d+)(?: \((.+?)\))?: ", re.M)


def _named_sample(message: str) -> tuple[int | None, str | None]:
    """``(index, path)`` of the last error line of ``message`` that names a sample, else Nones."""
    found = None
    for found in _NAMED.finditer(message):
        pass
    return (int(found.group(1)), found.group(2)) if found is not None else (None, None)


class SampleDrawError(ValueError):
    """A transform cannot take one sample of a batch, found while the batch's parameters are
    drawn, where only positions in the batch are known (``sample``). ``reason`` is what is
    wrong with it; the message adds the position.

    The worker that drew the batch (``_executor/_worker.py``) raises it again as a
    ``SampleError`` naming the sample's dataset index and path, or hands the sample to
    ``on_error`` like any other bad sample.
    """

    def __init__(self, reason: str, sample: int | None = None) -> None:
        # (torch re-raises a worker's error from its message alone: the position is then unknown)
        super().__init__(reason if sample is None else f"{reason} (sample {sample} of the batch)")
        self.reason = reason
        self.sample = sample

    def __reduce__(self) -> tuple:
        return type(self), (self.reason, self.sample)


def without_frames(err: BaseException) -> BaseException:
    """``err`` with its traceback, and those of the errors it was raised from, dropped.

    An error kept after its handler (to apply ``on_error`` later) would otherwise keep
    every frame it passed through alive, and with them their locals: on the GPU path a
    whole decoded batch and its output. Those frames form a cycle with the list that
    keeps the error, so only the cyclic collector would free them, at its own pace.
    """
    seen: set[int] = set()
    todo: list[BaseException | None] = [err]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = None
        todo += [e.__cause__, e.__context__]
    return err


class WorkerDied(SampleError):
    """A DataLoader worker died (killed, out of memory, crashed) while building a batch.

    ``samples`` holds the ``(index, path)`` of every sample of that batch (path None
    when the dataset does not know it); ``index`` and ``path`` are the first one's.
    ``worker_id``, ``pid`` and ``exitcode`` (negative: the signal) say which worker
    and how it ended.
    """

    def __init__(self, message: str, index: int | None = None, path: str | None = None,
                 samples: Sequence[tuple[int, str | None]] = (), worker_id: int | None = None,
                 pid: int | None = None, exitcode: int | None = None) -> None:
        super().__init__(message, index=index, path=path)
        self.samples = list(samples)
        self.worker_id = worker_id
        self.pid = pid
        self.exitcode = exitcode


class DecoderStalled(SampleError):
    """The GPU executor spent longer than the loader's ``gpu_timeout`` on one batch.

    Decoding and transforming a batch takes milliseconds; a batch that takes minutes
    holds a file that hangs the decoder (nvJPEG has hung on malformed JPEGs that
    libjpeg refuses). ``samples`` holds the ``(index, path)`` of every sample of
    that batch; ``index`` and ``path`` are the first one's; ``seconds`` is how long
    it had been inside. The loader's GPU executor stays stuck, so the loader refuses
    to start another epoch.
    """

    def __init__(self, message: str, index: int | None = None, path: str | None = None,
                 samples: Sequence[tuple[int, str | None]] = (), seconds: float = 0.0) -> None:
        super().__init__(message, index=index, path=path)
        self.samples = list(samples)
        self.seconds = seconds
