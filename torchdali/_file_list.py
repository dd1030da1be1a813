"""The ``path [label]`` list format that ``datasets.FileList`` and ``video.VideoFileList`` share."""
from __future__ import annotations

import os
from typing import Sequence


def read_file_list(files: str | os.PathLike | Sequence[str | tuple[str, int]],
                   root: str | os.PathLike | None = None) -> list[tuple[str, int]]:
    """``(path, label)`` pairs from a list of paths or ``(path, label)`` pairs, or from a text file
    of ``path [label]`` lines. Relative paths are taken from ``root`` (a list file's own folder
    by default); ``#`` lines and blank lines are skipped; without a label the target is -1."""
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
    return entries
