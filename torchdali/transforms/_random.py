"""``RandomApply``, ``RandomChoice`` and ``RandomOrder``, decided per sample.

torchvision decides once per call, so once per image; here every sample of a
batch makes its own decision, from its own uniforms, and the result is exactly
that of the decision taken:

- geometry contents (flips: transforms that keep the static state, so the batch's
  size and dtype do not depend on the decision): every option is applied to its
  own copy of the batch geometry, and each sample takes the copy of its decision;
- augment-program contents (colour and warp ops): the slots of the options are
  written per sample (identity where an option is not taken, an order's blocks
  concatenated in the sample's order), so one program serves the whole batch.

Contents that change the static state (a resize, a crop, a dtype conversion), mix
geometry with program transforms, or run their own program (AugMix) are refused
when the container is built, with the reason.

A container takes the stage of its contents (it is a single leaf of the plan),
so ``stage``, ``n_uniforms`` and ``n_slots`` are set per instance.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
from csrc_triton import layout

from . import _convert
from . import _geometry as G
from ._plan import Transform
from ._registry import register
from ._state import SizeBound, StaticState

__all__ = ["RandomApply", "RandomChoice", "RandomOrder"]

_PER_SAMPLE_STAGES = ("geometry", "program")


def _units(transforms: Any, name: str) -> list[list[Transform]]:
    """The options of a container: each a list of leaves (a nested Compose is one option)."""
    if not isinstance(transforms, Sequence) or isinstance(transforms, (str, bytes)) or not transforms:
        raise ValueError(f"{name}: transforms must be a non-empty sequence of transforms")
    converted = _convert.convert_all(list(transforms), Transform)
    return [[leaf for leaf in t.leaves() if leaf.stage != "meta"] for t in converted]


def _shape_of(state: StaticState) -> StaticState:
    """``state`` without the padding it declares (``pad``, ``zero_pad``): what must not change
    for a step to be applied to some samples only."""
    return dataclasses.replace(state, pad=None, zero_pad=None)


def _stage_of(units: list[list[Transform]], name: str) -> str:
    leaves = [leaf for unit in units for leaf in unit]
    stages = {leaf.stage for leaf in leaves}
    if not stages:
        return "meta"
    if len(stages) > 1 or not stages <= set(_PER_SAMPLE_STAGES):
        raise ValueError(
            f"{name}: per-sample decisions need contents that are all flips or all colour/warp transforms, got "
            f"{', '.join(f'{leaf!r} ({leaf.stage})' for leaf in leaves)}")
    stage = stages.pop()
    for leaf in leaves:
        if _shape_of(leaf.update_state(StaticState())) != StaticState():
            raise ValueError(f"{name}: {leaf!r} changes the batch's size or dtype, so applying it to some samples "
                             f"only would not make one batch")
        if stage == "program" and type(leaf).apply_program is not Transform.apply_program:
            raise ValueError(f"{name}: {type(leaf).__name__} runs its own program and cannot be chosen per sample")
    return stage


def _copy(g: G.BatchGeometry) -> G.BatchGeometry:
    return dataclasses.replace(g, **{f.name: getattr(g, f.name).copy() for f in dataclasses.fields(g)
                                     if isinstance(getattr(g, f.name), np.ndarray)})


def _take(g: G.BatchGeometry, option: G.BatchGeometry, rows: np.ndarray) -> None:
    """Overwrite ``g``'s per-sample fields with ``option``'s where ``rows`` is True."""
    for f in dataclasses.fields(g):
        mine, theirs = getattr(g, f.name), getattr(option, f.name)
        if isinstance(mine, np.ndarray):
            mine[rows] = theirs[rows]
        elif mine != theirs:
            raise ValueError(f"per-sample choice: {f.name} would differ between samples")


class _PerSample(Transform):
    """Base of the containers: options (lists of leaves), their uniforms and slots."""

    stage = "meta"  # set per instance: the stage of the contents
    own_uniforms = 0  # the container's own draws per sample, before its contents'

    def __init__(self, transforms: Sequence[Any]) -> None:
        name = type(self).__name__
        self.units = _units(transforms, name)
        self.stage = _stage_of(self.units, name)
        self.contents = [leaf for unit in self.units for leaf in unit]
        self.n_uniforms = self.own_uniforms + sum(leaf.n_uniforms for leaf in self.contents)
        self.unit_slots = [sum(int(getattr(leaf, "n_slots", 0)) for leaf in unit) for unit in self.units]

    def update_state(self, state: StaticState) -> StaticState:
        after = state
        for leaf in self.contents:
            after = leaf.update_state(after)
        if _shape_of(after) != _shape_of(state):
            raise ValueError(f"{type(self).__name__}: its contents change the batch's size or dtype")
        # how the contents pad is the pipeline's, whichever option a sample takes
        return dataclasses.replace(state, pad=after.pad, zero_pad=after.zero_pad)

    def bound_size(self, bound: SizeBound) -> SizeBound:
        # any option, or none (a RandomApply not taken): the union of their bounds
        out = bound
        for unit in self.units:
            b = bound
            for leaf in unit:
                b = leaf.bound_size(b)
            out = out.union(b)
        return out

    # -- parameters ----------------------------------------------------------------------
    def _own(self, u: np.ndarray | None) -> np.ndarray:
        return u[:, : self.own_uniforms]

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        # The contents keep the batch's size (checked when built), so what their make_params
        # read of the geometry is the same whichever option or order a sample takes.
        params: dict[str, np.ndarray] = self.decide(self._own(u)) if self.own_uniforms else {}
        col = self.own_uniforms
        for i, leaf in enumerate(self.contents):
            ul = u[:, col: col + leaf.n_uniforms] if leaf.n_uniforms else None
            col += leaf.n_uniforms
            for key, value in leaf.make_params(geometry, ul).items():
                params[f"{i}.{key}"] = value
        return params

    def decide(self, u: np.ndarray) -> dict[str, np.ndarray]:
        """The container's own per-sample decision from its uniforms."""
        raise NotImplementedError

    def _leaf_params(self, params: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
        prefix = f"{i}."
        return {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}

    def _unit_leaf_indices(self) -> list[list[int]]:
        out, i = [], 0
        for unit in self.units:
            out.append(list(range(i, i + len(unit))))
            i += len(unit)
        return out

    # -- geometry --------------------------------------------------------------------------
    def _apply_units(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray],
                     order: Sequence[int]) -> G.BatchGeometry:
        """A copy of ``geometry`` with the units ``order`` applied in that order."""
        g = _copy(geometry)
        indices = self._unit_leaf_indices()
        for u in order:
            for i in indices[u]:
                self.contents[i].transform(g, self._leaf_params(params, i))
        return g

    # -- program ---------------------------------------------------------------------------
    def _unit_slots(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray], u: int,
                    n: int) -> np.ndarray:
        """Unit ``u``'s slots for every sample, ``[B, unit_slots[u], W]``."""
        out = np.zeros((n, self.unit_slots[u], layout.SLOT_WIDTH), dtype=np.float32)
        col = 0
        for i in self._unit_leaf_indices()[u]:
            leaf = self.contents[i]
            k = int(getattr(leaf, "n_slots", 0))
            leaf.write_slots(geometry, self._leaf_params(params, i), out[:, col: col + k])
            col += k
        return out

    def leaves(self):
        yield self

    def extra_repr(self) -> str:
        return ", ".join(repr(leaf) for leaf in self.contents)


@register("RandomApply", usage="RandomApply(transforms, p=0.5)",
          semantics="applied when rand < p, decided per sample",
          notes="contents: flips, or colour/warp transforms")
class RandomApply(_PerSample):
    """Apply all of ``transforms`` (in order) with probability ``p``, decided per sample."""

    own_uniforms = 1

    def __init__(self, transforms: Sequence[Any], p: float = 0.5) -> None:
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"RandomApply: p must be in [0, 1], got {p}")
        self.p = float(p)
        super().__init__(transforms)
        self.n_slots = sum(self.unit_slots)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomApply:
        return cls(list(t.transforms), p=t.p)

    def decide(self, u: np.ndarray) -> dict[str, np.ndarray]:
        return {"apply": u[:, 0] < self.p}

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        _take(geometry, self._apply_units(geometry, params, range(len(self.units))), params["apply"])

    def write_slots(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        col = 0
        for u, k in enumerate(self.unit_slots):
            slots[:, col: col + k] = self._unit_slots(geometry, params, u, len(slots))
            col += k
        slots[~params["apply"]] = 0.0  # zero-filled = identity

    def extra_repr(self) -> str:
        return f"[{super().extra_repr()}], p={self.p}"


@register("RandomChoice", usage="RandomChoice(transforms, p=None)",
          semantics="one of them, with probabilities p, chosen per sample",
          notes="contents: flips, or colour/warp transforms")
class RandomChoice(_PerSample):
    """Apply one of ``transforms``, chosen per sample with probabilities ``p`` (default: equal)."""

    own_uniforms = 1

    def __init__(self, transforms: Sequence[Any], p: Sequence[float] | None = None) -> None:
        n = len(transforms) if isinstance(transforms, Sequence) else 0
        p = [1.0] * n if p is None else [float(v) for v in p]
        if len(p) != n or any(v < 0 for v in p) or sum(p) <= 0:
            raise ValueError(f"RandomChoice: p must hold one non-negative weight per transform, got {p}")
        self.p = [v / sum(p) for v in p]
        super().__init__(transforms)
        self.n_slots = max(self.unit_slots)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomChoice:
        return cls(list(t.transforms), p=getattr(t, "p", None))

    def decide(self, u: np.ndarray) -> dict[str, np.ndarray]:
        edges = np.cumsum(self.p)[:-1]
        return {"choice": np.searchsorted(edges, u[:, 0], side="right")}

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        options = [self._apply_units(geometry, params, [j]) for j in range(len(self.units))]
        for j, option in enumerate(options):
            _take(geometry, option, params["choice"] == j)

    def write_slots(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        for j, k in enumerate(self.unit_slots):
            rows = params["choice"] == j
            if k and rows.any():
                slots[rows, :k] = self._unit_slots(geometry, params, j, len(slots))[rows]

    def extra_repr(self) -> str:
        return f"[{super().extra_repr()}], p={[round(v, 4) for v in self.p]}"


@register("RandomOrder", usage="RandomOrder(transforms)", semantics="all of them, in an order drawn per sample",
          notes="contents: flips, or colour/warp transforms")
class RandomOrder(_PerSample):
    """Apply all of ``transforms`` in a random order, drawn per sample (uniform over orders)."""

    def __init__(self, transforms: Sequence[Any]) -> None:
        self.own_uniforms = len(transforms) if isinstance(transforms, Sequence) else 0
        super().__init__(transforms)
        self.n_slots = sum(self.unit_slots)

    @classmethod
    def from_torchvision(cls, t: Any) -> RandomOrder:
        return cls(list(t.transforms))

    def decide(self, u: np.ndarray) -> dict[str, np.ndarray]:
        # the ranks of independent uniforms are a uniformly random permutation
        return {"order": np.argsort(u, axis=1, kind="stable")}

    def _orders(self, params: dict[str, np.ndarray]):
        """(order, rows taking it) for each order present in the batch."""
        order = params["order"]
        for perm in np.unique(order, axis=0):
            yield perm, np.all(order == perm, axis=1)

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        if len(params["order"]) == 0:
            return
        options = [(self._apply_units(geometry, params, list(perm)), rows) for perm, rows in self._orders(params)]
        for option, rows in options:
            _take(geometry, option, rows)

    def write_slots(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        blocks = [self._unit_slots(geometry, params, u, len(slots)) for u in range(len(self.units))]
        for perm, rows in self._orders(params):
            col = 0
            for u in perm:
                k = self.unit_slots[u]
                slots[rows, col: col + k] = blocks[u][rows]
                col += k

    def extra_repr(self) -> str:
        return f"[{super().extra_repr()}]"
