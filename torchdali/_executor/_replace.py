"""What ``on_error`` does with a sample that cannot be used.

``check_on_error`` checks the policy when the loader is built. ``replace`` finds what
takes a failed sample's place: the callable policy's sample, else one of the spare
samples of the same epoch sent with the batch (``_tags.num_spares``). The worker
replaces a sample that fails there (``_worker.PrepareBatch``); the GPU path replaces
one that fails later, in nvJPEG or the scan check (``_decode.py``), the same way. Either
records it as a ``_wire.Skipped`` in the batch.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import torch

from ..errors import SampleDrawError, SampleError
from ._classify import LoadedSample, split_item
from ._tags import SampleTag, sample_path


class Replacement(NamedTuple):
    """What on_error put in place of a failed sample (``replace``)."""

    tag: SampleTag | None  # the spare sample used; None when the callable policy supplied the sample
    path: str | None
    target: Any
    has_target: bool
    kind: int
    payload: torch.Tensor
    shape: tuple
    hint: int = -1  # its header code for nvJPEG (``LoadedSample``)
    scan_start: int = -1  # where its JPEG scan data starts (-1: not checked)


def check_on_error(on_error: Any) -> None:
    """Raise ValueError unless ``on_error`` is a valid bad-sample policy."""
    if not (on_error in ("raise", "skip") or callable(on_error)):
        raise ValueError(f'on_error must be "raise", "skip" or a callable (index, path, exception) -> '
                         f"replacement sample or None; got {on_error!r}")


def replace(err: SampleError, spares: list[SampleTag], used: set[SampleTag], on_error: Any, dataset: Any,
            load: Callable[[Any, int, str | None], LoadedSample],
            check: Callable[[Any, Any, int, str | None], Any] | None = None,
            read: Callable[[SampleTag], Any] | None = None,
            vet: Callable[[SampleTag | None, tuple, Any], None] | None = None) -> Replacement:
    """A replacement for a failed sample, its data loaded by ``load(data, index, path)`` and its
    target checked by ``check(target, (H, W), index, path)`` (boxes and masks against the image).
    A spare's item is ``read(tag)`` (default: ``dataset[tag.index]``; a video clip is read with
    the spare's own ``u``). ``vet(tag, shape, target)`` (the spare's tag; None for the callable
    policy's sample) raises for a replacement the transforms cannot take (``errors.SampleDrawError``).

    The callable policy is asked first; then the ``spares`` of ``dataset`` not ``used``
    yet are tried in order (each one tried is added to ``used``). Raises the original
    error when nothing can replace it.
    """
    if callable(on_error):
        item = on_error(err.index, err.path, err)
        if item is not None:
            data, target, has = split_item(item)
            loaded = load(data, err.index, err.path)
            if has and check is not None:
                check(target, loaded.shape[:2], err.index, err.path)
            if vet is not None:
                try:
                    vet(None, loaded.shape, target)
                except SampleDrawError as e:
                    raise SampleError.for_sample(err.index, err.path, "cannot transform the sample on_error gave "
                                                 "in its place", e.reason) from None
            return Replacement(None, err.path, target, has, loaded.kind, loaded.payload, loaded.shape, loaded.hint,
                               loaded.scan_start)
    for tag in spares:
        if tag in used or dataset is None:
            continue
        used.add(tag)
        path = sample_path(dataset, tag.index)
        try:
            data, target, has = split_item(dataset[tag.index] if read is None else read(tag))
            loaded = load(data, tag.index, path)
            if has and check is not None:
                check(target, loaded.shape[:2], tag.index, path)
            if vet is not None:
                vet(tag, loaded.shape, target)
        except Exception:
            continue
        return Replacement(tag, path, target, has, loaded.kind, loaded.payload, loaded.shape, loaded.hint,
                           loaded.scan_start)
    raise SampleError(f"{err} (on_error could not replace it: the {len(spares)} spare samples sent with this "
                      "batch are used up or unreadable; more bad files in one batch than that)",
                      index=err.index, path=err.path) from err
