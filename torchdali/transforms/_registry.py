"""The one list of supported transforms.

Each torchdali transform class registers, with the ``@register`` decorator on its
definition, the torchvision class names it stands for and the row it gets in the
README's transform table; the class's ``from_torchvision`` classmethod reads a
torchvision object's attributes and builds the torchdali equivalent. ``SUPPORTED``,
the conversion of torchvision objects and the README table all come from here,
so supporting a new transform is one class plus its ``@register`` line.

A timm class is registered as ``"timm.<ClassName>"`` (timm's ``ToTensor`` does
not scale, torchvision's does). A name registered with ``any_module=True`` is
matched on objects of that class name from any module: classes known by name only,
such as the presets of torchvision's reference scripts.

This module knows nothing about the transform classes beyond that protocol, so
it sits below them (they import it to register). ``_convert.py`` walks whole
pipelines with ``from_torchvision`` as its per-object step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

C = TypeVar("C", bound=type)


@dataclass(frozen=True)
class Entry:
    """One torchdali class and what it stands for."""

    cls: type
    #: torchvision class names (v1 or v2) converted to ``cls``
    torchvision_names: tuple[str, ...]
    #: first column of the README table: the constructor as users write it
    usage: str
    #: which torchvision.transforms.v2 semantics are kept
    semantics: str
    notes: str


_ENTRIES: list[Entry] = []
_BY_NAME: dict[str, Entry] = {}
_ANY_MODULE: set[str] = set()  # names matched whatever module their class comes from

_TABLE_HEADER = (
    "| torchdali.transforms | torchvision.transforms.v2 semantics kept | notes |\n"
    "|---|---|---|"
)


def register(*torchvision_names: str, usage: str | None = None, semantics: str,
             notes: str = "", any_module: bool = False) -> Callable[[C], C]:
    """Class decorator: ``cls`` stands for the torchvision classes ``torchvision_names``.

    A timm class is named ``"timm.<ClassName>"`` and converts objects of that class
    name from any ``timm.`` module; with ``any_module=True`` the names match classes
    of those names from any module.

    ``usage`` is the README's first column (default: the names in backticks);
    ``cls.from_torchvision(obj)`` must build the equivalent of a torchvision ``obj``.
    """
    if not torchvision_names:
        raise ValueError("register: name at least one torchvision class the transform stands for")

    def decorate(cls: C) -> C:
        if not callable(getattr(cls, "from_torchvision", None)):
            raise TypeError(f"register: {cls.__name__} needs a from_torchvision(obj) classmethod")
        for name in torchvision_names:
            if name in _BY_NAME:
                raise ValueError(f"register: {name} is already registered by {_BY_NAME[name].cls.__name__}")
        text = f"`{usage}`" if usage is not None else ", ".join(f"`{n}`" for n in torchvision_names)
        entry = Entry(cls, tuple(torchvision_names), text, semantics, notes)
        _ENTRIES.append(entry)
        for name in torchvision_names:
            _BY_NAME[name] = entry
            if any_module:
                _ANY_MODULE.add(name)
        return cls

    return decorate


def supported() -> tuple[str, ...]:
    """Names of the torchvision transforms that have a torchdali equivalent, in registry order."""
    return tuple(n for e in _ENTRIES for n in e.torchvision_names)


def registry_name(obj: Any) -> str | None:
    """The name ``obj``'s class is registered under if it has an equivalent: torchvision's
    class name, ``"timm.<ClassName>"`` for timm, or an ``any_module`` name; else None."""
    name = type(obj).__name__
    library = (type(obj).__module__ or "").split(".", 1)[0]
    if library == "timm":
        name = f"timm.{name}"
    elif library != "torchvision" and name not in _ANY_MODULE:
        return None
    return name if name in _BY_NAME else None


def from_torchvision(obj: Any) -> Any:
    """The torchdali transform equivalent to the torchvision transform ``obj``.

    Raises ValueError naming ``obj`` and listing the supported transforms when it is
    not a torchvision transform or has no fused equivalent.
    """
    name = type(obj).__name__
    module = type(obj).__module__ or ""
    library = module.split(".", 1)[0]
    if library == "timm":
        # timm's own classes register as "timm.<ClassName>" (timm is read by attribute, never imported)
        name = f"timm.{name}"
    elif library != "torchvision" and name not in _ANY_MODULE:
        raise ValueError(
            f"unsupported transform {obj!r}: torchdali runs the pipeline as one fused GPU kernel and "
            f"supports {', '.join(supported())}"
        )
    entry = _BY_NAME.get(name)
    if entry is None:
        raise ValueError(
            f"unsupported {library} transform {name}: torchdali supports {', '.join(supported())}"
        )
    return entry.cls.from_torchvision(obj)


def supported_table() -> str:
    """The README's transform table (markdown), one row per registered class."""
    rows = ["|" + "|".join(f" {cell} " if cell else " " for cell in (e.usage, e.semantics, e.notes)) + "|"
            for e in _ENTRIES]
    return "\n".join([_TABLE_HEADER, *rows])
