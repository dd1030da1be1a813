"""Readers that return encoded bytes and a target, never decoded pixels.

Decoding happens batched, on the GPU (or in the CPU path's workers), so a reader's
only job is to hand over the file's bytes as a 1-D uint8 tensor.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import torch
from torchvision.datasets import DatasetFolder
from torchvision.datasets.folder import IMG_EXTENSIONS

__all__ = ["ImageFolder", "FileList", "FileBytes", "lift_blocker", "read_file", "IMG_EXTENSIONS"]


def read_file(path: str | os.PathLike) -> torch.Tensor:
    """The file's bytes as a 1-D uint8 tensor."""
    with open(path, "rb", buffering=0) as f:
        # read straight into the tensor's buffer: one copy out of the page cache
        buf = bytearray(os.fstat(f.fileno()).st_size)
        n = f.readinto(buf) if buf else 0
        if n < len(buf):  # the file shrank while we read it
            del buf[n:]
        rest = f.read()  # or grew
        if rest:
            buf += rest
    if not buf:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(buf, dtype=torch.uint8)


def _path_and_target(dataset: Any, index: int) -> tuple[str, Any]:
    """``(path, target_transform(target))`` of ``dataset.samples[index]``."""
    path, target = dataset.samples[index]
    if dataset.target_transform is not None:
        target = dataset.target_transform(target)
    return os.fspath(path), target


class ImageFolder(DatasetFolder):
    """``torchvision.datasets.ImageFolder`` that returns ``(encoded bytes, target)``.

    ``classes``, ``class_to_idx``, ``samples``, ``targets``, ``extensions``,
    ``is_valid_file`` and ``allow_empty`` behave exactly as torchvision's (this
    class is a ``DatasetFolder``); only the loader differs. ``transform`` runs on
    the bytes tensor if given; image transforms belong to the DataLoader.
    """

    def __init__(self, root: str | os.PathLike, transform: Callable | None = None,
                 target_transform: Callable | None = None, loader: Callable = read_file,
                 is_valid_file: Callable[[str], bool] | None = None, allow_empty: bool = False) -> None:
        super().__init__(
            root, loader, IMG_EXTENSIONS if is_valid_file is None else None,
            transform=transform, target_transform=target_transform,
            is_valid_file=is_valid_file, allow_empty=allow_empty,
        )
        self.imgs = self.samples

    def path_of(self, index: int) -> str:
        return self.samples[index][0]

    def file_item(self, index: int) -> tuple[str, Any] | None:
        """``(path, target)`` when item ``index`` is ``(read_file(path), target)``: the
        DataLoader's GPU path then reads the file into its staging memory itself. None
        with a ``transform``, another ``loader`` or a subclass's own ``__getitem__``."""
        if self.transform is not None or self.loader is not read_file \
                or type(self).__getitem__ is not DatasetFolder.__getitem__:
            return None
        return _path_and_target(self, index)


class _FileSamples(torch.utils.data.Dataset):
    """Items ``(file bytes, target_transform(target))`` of ``self.samples`` (``(path, target)`` pairs)."""

    samples: list
    target_transform: Callable | None

    def __getitem__(self, index: int) -> tuple[torch.Tensor, Any]:
        path, target = self.samples[index]
        if self.target_transform is not None:
            target = self.target_transform(target)
        return read_file(path), target

    def path_of(self, index: int) -> str:
        return os.fspath(self.samples[index][0])

    def file_item(self, index: int) -> tuple[str, Any] | None:
        """``(path, target)`` when item ``index`` is ``(read_file(path), target)``: the
        DataLoader's GPU path then reads the file into its staging memory itself. None
        for a subclass with its own ``__getitem__``."""
        if type(self).__getitem__ is not _FileSamples.__getitem__:
            return None
        return _path_and_target(self, index)


class FileList(_FileSamples):
    """Files with targets, given as a list or a text file of ``path [label]`` lines.

    Relative paths are taken from ``root``. Lines starting with ``#`` are skipped.
    Without labels the target is -1.
    """

    def __init__(self, files: str | os.PathLike | Sequence[str | tuple[str, int]],
                 root: str | os.PathLike | None = None,
                 target_transform: Callable | None = None) -> None:
        entries: list[tuple[str, int]] = []
        if isinstance(files, (str, os.PathLike)):
            list_path = os.fspath(files)
            root = root if root is not None else os.path.dirname(list_path)
            with open(list_path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    line = line.strip()
                    if not line or line.startswith("#"):
                        continue
                    path, _, label = line.rpartition(" ") if " " in line else (line, "", "")
                    if not path:
                        path, label = label, ""
                    try:
                        entries.append((path, int(label) if label else -1))
                    except ValueError:
                        raise ValueError(f"{list_path}:{lineno}: label {label!r} is not an integer") from None
        else:
            for item in files:
                if isinstance(item, (tuple, list)):
                    entries.append((os.fspath(item[0]), int(item[1])))
                else:
                    entries.append((os.fspath(item), -1))
        if root is not None:
            entries = [(p if os.path.isabs(p) else os.path.join(root, p), t) for p, t in entries]
        self.samples = entries
        self.targets = [t for _, t in entries]
        self.target_transform = target_transform

    def __len__(self) -> int:
        return len(self.samples)



def _decoding_loaders() -> tuple[Callable, ...]:
    """torchvision's loaders that only decode the file (what the loader's decoder does too)."""
    import torchvision.io as tio
    from torchvision.datasets import folder

    found = [folder.default_loader, folder.pil_loader, folder.accimage_loader, tio.decode_image]
    if hasattr(tio, "read_image"):
        found.append(tio.read_image)
    return tuple(found)


def lift_blocker(dataset: Any) -> str | None:
    """Why the images of ``dataset`` cannot be read as file bytes instead, or None when they can.

    Liftable: a folder dataset in torchvision's style (``samples`` of ``(path, target)``
    and a ``loader`` that only decodes: ``default_loader``, ``pil_loader``,
    ``decode_image``), whose items are ``(transform(loader(path)), target_transform(target))``.
    """
    samples = getattr(dataset, "samples", None)
    loader = getattr(dataset, "loader", None)
    if not isinstance(samples, Sequence) or loader is None:
        return f"{type(dataset).__name__} has no samples list and loader (a torchvision DatasetFolder has both)"
    if samples and not (isinstance(samples[0], (tuple, list)) and len(samples[0]) == 2
                        and isinstance(samples[0][0], (str, os.PathLike))):
        return f"{type(dataset).__name__}.samples does not hold (path, target) pairs"
    if not any(loader is known for known in _decoding_loaders()):
        name = getattr(loader, "__qualname__", type(loader).__name__)
        return (f"its loader {name} is not one of torchvision's decoding loaders (default_loader, pil_loader, "
                f"decode_image), so reading the file's bytes instead could change what the transform sees")
    return None


class FileBytes(_FileSamples):
    """A torchvision folder dataset whose items are ``(file bytes, target)`` instead of images.

    ``samples``, ``targets``, ``classes`` and ``class_to_idx`` are the dataset's;
    ``target_transform`` still applies. The DataLoader uses this when it runs the
    dataset's image ``transform`` itself (see ``torchdali.DataLoader``); the
    original dataset is ``.dataset``.
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.samples = dataset.samples
        self.target_transform = getattr(dataset, "target_transform", None)
        for name in ("targets", "classes", "class_to_idx", "root"):
            if hasattr(dataset, name):
                setattr(self, name, getattr(dataset, name))

    def __len__(self) -> int:
        return len(self.dataset)

    def __repr__(self) -> str:
        return f"FileBytes({self.dataset!r})"
