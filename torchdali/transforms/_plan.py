"""The transform protocol, and a pipeline compiled into what the fused kernel needs.

A transform takes part in three steps, each a method of ``Transform``:

1. ``update_state(state) -> state``, once when the pipeline is compiled: how it
   changes what is known before any data is seen (dtype, output size, the
   epilogue's scale and bias). Invalid pipelines fail here.
2. ``make_params(geometry, u) -> dict``, once per batch: draw this transform's
   per-sample parameters (boxes, sizes, flip masks) for the whole batch from
   ``n_uniforms`` uniforms per sample. Randomness lives only here.
3. ``transform(geometry, params)``, once per batch: apply those parameters to
   the batch geometry (see ``_geometry.py``), deterministically, so the same
   parameters replay the same output.

Transforms of the ``program`` stage (photometric ops, warps after the last
resize, auto-augment policies) need the whole output-size image, so they run
after the fused kernel as an *augment program* (``csrc_triton/layout.py``): a
sequence of slots, one op per sample each. Instead of step 3 such a transform
has ``n_slots`` (may be set per instance) and
``write_slots(geometry, params, slots)``, which fills its own slots
``[B, n_slots, SLOT_WIDTH]`` (zero-filled = identity) from its parameters;
``apply_program(images, slots, run_slot)`` runs them (by default one after the
other; a transform that mixes several chains, like AugMix, overrides it).

``Plan`` runs step 1 at compile time and steps 2-3 per batch, leaf by leaf, into
a ``BatchParams`` (kernel parameters, program slots, batch-level values);
``_execute.execute`` runs a plan with those parameters on a batch. The protocol
and the plan share this module because ``Transform.__call__`` runs a plan on the
CPU reference path.

A pipeline need not fix its output size: without a step that sets it, each
sample's output size is its own (``_ragged.py`` says how such batches are laid
out and delivered). Its memory must still be boundable: ``Plan.check_bound``
folds ``Transform.bound_size`` over the pipeline from the input images' limit
(the loader's ``max_image_pixels``) and refuses a pipeline whose output has no
bound, saying what to add.

Compile-time rules for the program and erasing (each refusal says what to move):
program transforms come after every geometry transform (they run on the
output-size image), or before all of them (a *leading* program: they run on each
decoded image at its own size, before the geometry, as SSD's photometric
distortion does in torchvision's detection preset), and while the image is still
uint8 (they are uint8 ops, as torchvision's are on a uint8 tensor); RandomErasing
comes after every geometry, colour and program transform (only dtype conversion
and Normalize may follow it, and its value is mapped through their affine).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterator, NamedTuple, Sequence

import numpy as np
import torch
from csrc_triton import layout

from .. import _rng
from . import _convert
from . import _geometry as G
from . import _registry
from . import _ragged
from ._execute import REFERENCE, SIZE_SLOT, execute
from ._reference import pack_images, to_hwc
from ._state import FLOAT_DTYPES, UNBOUNDED, BatchImagesSpec, EraseSpec, PadSpec, SizeBound, StaticState

__all__ = [
    "STAGES", "BatchParams", "Compose", "Plan", "ProgramEntry", "Transform", "apply_to_images",
    "compile_transforms", "pack_images", "run_reference", "to_hwc", "to_torchdali",
]

#: Kernel stages a transform can belong to, in the order the kernel runs them
#: (named like the parameter blocks of ``csrc_triton.layout``), ``program`` for the
#: augment program that runs on the output-size image after the fused kernel, plus
#: ``meta`` for transforms that change nothing (ToImage) or only hold others (Compose).
STAGES = ("source", "geometry", "colour", "epilogue", "program", "meta")

#: run_slot(images, slot) -> images: one slot (``[B, SLOT_WIDTH]`` float32, on the host) run over the batch
RunSlot = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@functools.lru_cache(maxsize=16)
def _no_slots(batch: int) -> torch.Tensor:
    """An empty ``[batch, 0, SLOT_WIDTH]`` slots tensor (it holds nothing, so it is shared)."""
    return torch.zeros(batch, 0, layout.SLOT_WIDTH, dtype=torch.float32)


class BatchParams(NamedTuple):
    """Everything drawn for one batch: what ``_execute.execute`` needs besides the pixels."""

    #: ``[B, layout.NUM_PARAMS]`` float32 per-sample kernel parameters
    params: torch.Tensor
    #: ``[B, K, layout.SLOT_WIDTH]`` float32 augment program slots (K = ``Plan.n_slots``, may be 0)
    slots: torch.Tensor
    #: batch-level values (empty unless a transform draws per batch)
    batch: dict

    @classmethod
    def without_program(cls, params: torch.Tensor) -> BatchParams:
        """Kernel parameters alone (a plan with no program)."""
        return cls(params, _no_slots(params.shape[0]), {})


class Transform:
    """Base class: a step of a batched, fused pipeline (see the module docstring).

    A subclass sets ``stage`` and, if it is random, ``n_uniforms``, and overrides
    the steps it takes part in; the defaults change nothing.
    """

    #: the kernel stage that carries out this transform (one of ``STAGES``)
    stage: ClassVar[str] = "meta"
    #: uniforms this transform draws per sample. Part of the random stream: changing
    #: it changes every batch of every pipeline using the transform.
    n_uniforms: ClassVar[int] = 0
    #: program slots this transform fills (``program`` stage only; may be set per instance)
    n_slots: int = 0
    #: whether ``make_params`` reads the samples' boxes (``geometry.boxes``: RandomIoUCrop), so that
    #: the batch must be drawn with its targets' boxes (``Plan.params(..., boxes=)``)
    draws_from_boxes: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.stage not in STAGES:
            raise TypeError(f"{cls.__name__}.stage is {cls.stage!r}; use one of {STAGES}")

    def update_state(self, state: StaticState) -> StaticState:
        """The static state after this transform (a new object; raise ValueError if invalid)."""
        return state

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        """Per-sample parameters for the batch, as named arrays of length ``len(geometry)``.

        ``geometry`` is the batch as the earlier transforms left it (read its sizes,
        do not change it); ``u`` is ``[B, n_uniforms]`` uniforms in [0, 1), or None
        when ``n_uniforms`` is 0.
        """
        return {}

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        """Apply ``params`` (from ``make_params``) to ``geometry``, in place."""

    def write_slots(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray], slots: np.ndarray) -> None:
        """``program`` stage: fill ``slots`` (float32 ``[B, n_slots, SLOT_WIDTH]``, zero = identity)
        from ``params`` (from ``make_params``); ``geometry`` holds the output size."""

    def bound_size(self, bound: SizeBound) -> SizeBound:
        """The largest output this transform makes of images within ``bound``.

        By default: a transform that is not a geometry step keeps the size; a geometry
        step that fixes the size (``update_state``) bounds it by that size; any other
        geometry step must say (override), else its output counts as unbounded.
        """
        if self.stage != "geometry":
            return bound
        size = self.update_state(StaticState()).size
        return SizeBound.fixed(*size) if size is not None else UNBOUNDED

    def apply_program(self, images: torch.Tensor, slots: torch.Tensor, run_slot: RunSlot) -> torch.Tensor:
        """``program`` stage: run this transform's slots (host ``[B, n_slots, SLOT_WIDTH]``) on the
        uint8 ``[B, 3, H, W]`` batch, by default one after the other; returns the new batch."""
        for k in range(slots.shape[1]):
            images = run_slot(images, slots[:, k])
        return images

    def leaves(self) -> Iterator[Transform]:
        """The transforms a pipeline runs for this one (itself, or a container's contents)."""
        yield self

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.extra_repr()})"

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        """Apply to one image (CHW or HWC uint8 tensor) on the CPU reference path; returns CHW."""
        if self.stage in ("program", "epilogue"):
            # these keep the size, which a pipeline must fix first: the image's own size
            hwc = to_hwc(image)
            return apply_to_images(Compose([_KeepSize(int(hwc.shape[0]), int(hwc.shape[1])), self]), [hwc])[0]
        return apply_to_images(Compose([self]), [image])[0]


def to_torchdali(t: Any) -> Transform:
    """Return ``t`` as a torchdali transform, converting torchvision (v1 or v2) and timm objects,
    whole pipelines and the presets that hold one.

    Raises one ValueError listing every step that has no fused equivalent, with
    its position and what to use instead (``_convert.py``).
    """
    if isinstance(t, Transform):
        return t
    # imported here so the batch transforms register after the per-sample ones (the README table's order)
    from ._batch import BatchTransform, misplaced_error

    if isinstance(t, BatchTransform):
        raise misplaced_error(t)
    return _convert.convert(t, Transform)


@_registry.register("Compose", semantics="yes", notes="accepts torchvision objects")
class Compose(Transform):
    """Chain transforms, as ``torchvision.transforms.v2.Compose``."""

    def __init__(self, transforms: Sequence[Any]) -> None:
        if not isinstance(transforms, Sequence):
            raise TypeError("Compose: argument must be a sequence of transforms")
        self.transforms = _convert.convert_all(list(transforms), Transform)

    @classmethod
    def from_torchvision(cls, t: Any) -> Compose:
        return cls(list(t.transforms))

    def update_state(self, state: StaticState) -> StaticState:
        for t in self.transforms:
            state = t.update_state(state)
        return state

    def make_params(self, geometry: G.BatchGeometry, u: np.ndarray | None) -> dict[str, np.ndarray]:
        # Each leaf draws from its own random stream, which a Compose cannot hand out.
        raise TypeError("Compose has no parameters of its own; compile_transforms runs its leaves()")

    def transform(self, geometry: G.BatchGeometry, params: dict[str, np.ndarray]) -> None:
        raise TypeError("Compose has no parameters of its own; compile_transforms runs its leaves()")

    def leaves(self) -> Iterator[Transform]:
        for t in self.transforms:
            yield from t.leaves()

    def extra_repr(self) -> str:
        return ", ".join(repr(t) for t in self.transforms)


class ProgramEntry(NamedTuple):
    """A program transform of a plan and where its slots are."""

    transform: Transform
    start: int  # its first slot in ``BatchParams.slots``
    stop: int  # one past its last slot


class _KeepSize(Transform):
    """Fixes the output size to the input's, which is ``(height, width)`` (a single image's call)."""

    stage = "geometry"

    def __init__(self, height: int, width: int) -> None:
        self.size = (height, width)

    def update_state(self, state: StaticState) -> StaticState:
        return dataclasses.replace(state, size=self.size)


@dataclass(frozen=True)
class Plan:
    """Static description of a pipeline plus per-batch parameter sampling."""

    transforms: tuple[Transform, ...]
    #: the output (height, width) of every sample; None when it is each sample's own
    #: (the ``out_h``/``out_w`` parameter columns, see ``_ragged.py``)
    out_size: tuple[int, int] | None
    out_dtype: torch.dtype
    scale: tuple[float, float, float]
    bias: tuple[float, float, float]
    quantize: bool
    antialias: bool
    #: ``layout.FILTER_*`` code of the kernel (``FILTER_PER_SAMPLE``: the params' ``filter`` column)
    interpolation: int = layout.FILTER_BILINEAR
    #: the program transforms, in pipeline order, with their slots
    program: tuple[ProgramEntry, ...] = ()
    #: how many of them lead the pipeline (before its geometry): they run on the decoded images at
    #: their own size, before kernel 1's geometry pass (``_execute``); the rest on its output. Such a
    #: plan's slots start with ``SIZE_SLOT``.
    leading: int = 0
    #: total program slots K
    n_slots: int = 0
    #: RandomErasing: the value written in the output (after the affine), per channel;
    #: None without erasing or when ``erase_random``
    erase_value: tuple[float, float, float] | None = None
    #: RandomErasing with ``value="random"``: standard normal noise per pixel, from ``erase_seed``
    erase_random: bool = False
    #: ``BatchImages``: every batch padded to its largest image, delivered as an ``ImageList``
    batch_images: BatchImagesSpec | None = None
    #: how the pipeline pads where it pads with a fill or a padding mode (None: zeros at most)
    pad: PadSpec | None = None

    @property
    def pad_mode(self) -> str:
        """The kernel's padding mode (``layout.PAD_MODES`` name): ``"none"`` unless a step pads
        with a fill or a padding mode."""
        return self.pad.mode if self.pad is not None else "none"

    @property
    def fill(self) -> tuple[float, float, float] | None:
        """The constant mode's fill (0..255 scale, before the affine); None for the other modes."""
        return self.pad.fill if self.pad is not None and self.pad.mode == "constant" else None

    @property
    def erases(self) -> bool:
        """Whether the pipeline has a RandomErasing."""
        return self.erase_value is not None or self.erase_random

    @property
    def varies(self) -> bool:
        """Whether batches are laid out per batch from the drawn sizes (``_ragged.py``):
        no fixed output size, or ``BatchImages``."""
        return self.out_size is None or self.batch_images is not None

    def size_bound(self, max_image_pixels: int | None) -> SizeBound:
        """The largest output image of this pipeline from inputs of at most ``max_image_pixels``
        pixels (None: no limit)."""
        if self.out_size is not None:
            return SizeBound.fixed(*self.out_size)
        bound = SizeBound.of_input(max_image_pixels)
        for t in self.transforms:
            bound = t.bound_size(bound)
        return bound

    def check_bound(self, max_image_pixels: int | None) -> None:
        """Raise ValueError when the output size varies and nothing bounds it, so that the
        memory of a batch could not be known; the message says what to add."""
        if self.size_bound(max_image_pixels).bounded:
            return
        why = ("max_image_pixels=None puts no limit on the input images, and no step fixes or caps the output "
               "size")
        bound = SizeBound.of_input(max_image_pixels)
        for t in self.transforms:
            after = t.bound_size(bound)
            if bound.bounded and not after.bounded:  # a geometry step without a bound_size of its own
                why = f"{t!r} does not say how large its output can be (Transform.bound_size)"
                break
            bound = after
        raise ValueError(
            f"the output size of this pipeline varies from image to image and has no bound, so the memory of a "
            f"batch cannot be known: {why}. Bound it: end the pipeline with a fixed-size step (CenterCrop, "
            f"RandomCrop, RandomResizedCrop or Resize((h, w))), cap the longer side with Resize(size, "
            f"max_size=...), or give the DataLoader a max_image_pixels limit. Pipeline: "
            f"{Compose(list(self.transforms))!r}")

    @property
    def draws_from_boxes(self) -> bool:
        """Whether a step draws its parameters from the samples' boxes (RandomIoUCrop): the batch
        is drawn with its targets (``params(..., boxes=)``)."""
        return any(t.draws_from_boxes for t in self.transforms)

    def _draw(self, sizes: np.ndarray, keys: np.ndarray, slots: np.ndarray | None,
              watch: Callable[[Any, G.BatchGeometry, Any, Callable[[], Any]], None] | None = None,
              boxes: Any = None) -> G.BatchGeometry:
        """The batch's geometry, its program slots written into ``slots`` when given.

        ``watch(t, g, p, run)``, when given, is called for every transform ``t`` (``p`` its
        drawn parameters) in place of applying it, and applies it by calling ``run()``
        (which returns ``t``'s slot region for a program transform): the targets' trace
        (``_targets.trace_plan``) follows the same draw step by step instead of repeating
        this loop.

        ``boxes``: the samples' boxes (a ``_targets.BoxTrack``), needed when a step draws from
        them (``draws_from_boxes``). Up to the last such step they follow every geometry step
        (``g.boxes``), so that step sees them where the draw stands.
        """
        last = max((k for k, t in enumerate(self.transforms) if t.draws_from_boxes), default=-1)
        if last >= 0 and boxes is None:
            raise ValueError(f"{self.transforms[last]!r} draws its parameters from each sample's BoundingBoxes, as "
                             f"torchvision's does: give the dataset's targets boxes (the loader draws from them)")
        g = G.BatchGeometry.identity(sizes)
        if self.fill is not None and any(self.fill):
            g.fill_by = self.pad.by  # type: ignore[union-attr]  # zero padding cannot happen (CenterCrop)
        starts = {id(e.transform): e for e in self.program}
        # The random stream of a transform is its position among the leaves, so a
        # sample's draws depend only on its key and the pipeline, never on the batch.
        for stream, t in enumerate(self.transforms):
            g.boxes = boxes if stream <= last else None
            u = _rng.uniform(keys, stream, t.n_uniforms) if t.n_uniforms else None
            p = t.make_params(g, u)

            def run(t=t, p=p, stream=stream) -> Any:
                if t.stage != "program":
                    if g.boxes is None:
                        return t.transform(g, p)
                    before = g.boxes.before(g)
                    t.transform(g, p)
                    return g.boxes.after(before, g, t, stream)
                if slots is not None:
                    region = slots[:, starts[id(t)].start: starts[id(t)].stop]
                    t.write_slots(g, p, region)
                    return region
                return None

            if watch is None:
                run()
            else:
                watch(t, g, p, run)
        g.boxes = None
        return g

    def geometry(self, sizes: np.ndarray, keys: np.ndarray) -> G.BatchGeometry:
        """Per-sample geometry for images of ``sizes`` ([B, 2] H, W) with sample ``keys``."""
        return self._draw(sizes, keys, None)

    def params(self, sizes: np.ndarray, keys: np.ndarray, boxes: Any = None, watch: Any = None) -> BatchParams:
        """The batch's kernel parameters (``[B, layout.NUM_PARAMS]``) and program slots
        (``[B, n_slots, layout.SLOT_WIDTH]``), both float32, for images of ``sizes``
        ([B, 2] H, W) with sample ``keys`` (and their ``boxes``, a ``_targets.BoxTrack``,
        for a plan that ``draws_from_boxes``; ``watch`` as ``_draw``'s)."""
        n = len(np.asarray(keys))
        slots = np.zeros((n, self.n_slots, layout.SLOT_WIDTH), dtype=np.float32)
        g = self._draw(sizes, keys, slots, watch, boxes)
        if self.leading:
            hw = np.asarray(sizes, dtype=np.float64).reshape(-1, 2)
            slots[:, SIZE_SLOT, layout.SLOT_M0], slots[:, SIZE_SLOT, layout.SLOT_M1] = hw[:, 0], hw[:, 1]
        return BatchParams(g.to_params(), torch.from_numpy(slots), {})


def compile_transforms(transforms: Any) -> Plan:
    """Validate a (torchdali or torchvision) Compose and compile it.

    Raises ValueError when transforms are unsupported (one error listing all of
    them, see ``to_torchdali``) or out of order. A pipeline whose output size
    depends on the input image compiles with ``out_size`` None; whether its memory
    is bounded is ``Plan.check_bound``'s question (the loader asks it).
    """
    if transforms is None:
        raise ValueError("no transforms: pass transforms=, the image steps the loader runs on each batch, for "
                         "example T.Compose([T.Resize(256), T.CenterCrop(224), T.ToDtype(torch.float32, scale=True)]) "
                         "with `from torchdali import transforms as T`; T.Compose([]) delivers the decoded uint8 "
                         "images (a list when their sizes differ). A torchvision dataset built with transform= needs "
                         "none: the loader takes its transform over")
    if isinstance(transforms, Sequence) and not isinstance(transforms, (str, bytes)):
        transforms = Compose(list(transforms))
    root = to_torchdali(transforms)
    leaves = tuple(root.leaves())
    state = StaticState()
    program: list[ProgramEntry] = []
    first_program: Transform | None = None
    leading = 0  # program entries before every geometry transform
    seen_geometry = False
    eraser: Transform | None = None
    k = 0
    for t in leaves:
        if state.batch_images is not None and t.stage != "meta":
            raise ValueError(f"{t!r} comes after BatchImages, which pads the finished batch: BatchImages must be "
                             f"the last step of the pipeline")
        if eraser is not None and t.stage not in ("epilogue", "meta"):
            raise ValueError(f"{t!r} comes after {eraser!r}: RandomErasing must be the last image transform "
                             f"(only ToDtype and Normalize may follow it); move {type(t).__name__} before it")
        if t.stage == "geometry" and first_program is not None:
            if seen_geometry:
                raise ValueError(
                    f"{first_program!r} comes between {t!r} and an earlier geometry transform: colour and warp "
                    f"transforms run on the decoded image before every transform that crops, resizes or flips, "
                    f"or on the output-size image after all of them; move {type(first_program).__name__} "
                    f"after {type(t).__name__}")
            # the program so far leads the pipeline: it runs on the decoded images, before the geometry
            leading, first_program = len(program), None
        if t.stage == "geometry":
            seen_geometry = True
        if t.stage == "program":
            if state.dtype != torch.uint8:
                raise ValueError(f"{t!r} runs on the uint8 image, but the image is {state.dtype} by then; "
                                 f"move ToDtype (and Normalize) after {type(t).__name__}")
            first_program = first_program or t
            n = int(t.n_slots)
            program.append(ProgramEntry(t, k, k + n))
            k += n
        before = state
        state = t.update_state(state)
        if state.erase is not None and before.erase is None:
            eraser = t
    erase_value, erase_random = _erase_output(state)
    return Plan(
        transforms=leaves,
        out_size=state.size,
        # the kernel writes float64 as float32 (no float64 output path)
        out_dtype=state.dtype if state.dtype != torch.float64 else torch.float32,
        scale=state.scale,
        bias=state.bias,
        quantize=state.quantize,
        antialias=state.antialias,
        interpolation=state.interpolation,
        # a leading program's plan reserves the first slot (SIZE_SLOT): every entry one further
        program=tuple(e._replace(start=e.start + 1, stop=e.stop + 1) for e in program) if leading else tuple(program),
        leading=leading,
        n_slots=k + 1 if leading else k,
        erase_value=erase_value,
        erase_random=erase_random,
        batch_images=_batch_images(state),
        pad=state.pad,
    )


def _batch_images(state: StaticState) -> BatchImagesSpec | None:
    """``BatchImages``' spec, its fill checked against the output dtype."""
    spec = state.batch_images
    if spec is not None and state.dtype == torch.uint8 and not (float(spec.fill).is_integer()
                                                               and 0 <= spec.fill <= 255):
        raise ValueError(f"BatchImages(fill={spec.fill}) on a uint8 output: the fill must be an integer in 0..255 "
                         f"(it is a value of the output, after ToDtype and Normalize)")
    return spec


def _erase_output(state: StaticState) -> tuple[tuple[float, float, float] | None, bool]:
    """(erase value in the output, random) of the pipeline's RandomErasing, or (None, False).

    The value is given where RandomErasing stands; the transforms after it (ToDtype,
    Normalize) map it through the rest of the affine: ``value`` at affine ``(s1, b1)``
    is the pixel ``(value - b1) / s1``, which the output writes as ``pixel * s + b``.
    """
    spec: EraseSpec | None = state.erase
    if spec is None:
        return None, False
    if spec.random:
        if spec.dtype not in FLOAT_DTYPES:
            raise ValueError("RandomErasing(value='random') needs a float image (torchvision writes normal "
                             "noise, which a uint8 image cannot hold); put it after ToDtype(torch.float32, scale=True)")
        if spec.scale != state.scale or spec.bias != state.bias:
            raise ValueError("RandomErasing(value='random') writes standard normal noise in the output; a "
                             "Normalize or ToDtype(scale=True) after it would change the noise: move "
                             "RandomErasing after them")
        return None, True
    value = list(spec.value) * 3 if len(spec.value) == 1 else list(spec.value)
    if spec.dtype == torch.uint8:
        # assigning a float value into a uint8 image truncates it, as torchvision's erase does
        value = [float(min(max(int(v), 0), 255)) for v in value]
    out = tuple(float((v - b1) / s1 * s2 + b2)
                for v, s1, b1, s2, b2 in zip(value, spec.scale, spec.bias, state.scale, state.bias))
    return out, False  # type: ignore[return-value]


def run_reference(plan: Plan, images: Sequence[torch.Tensor], params: BatchParams | torch.Tensor,
                  channels_last: bool = False) -> torch.Tensor | _ragged.RaggedImages | _ragged.ImageList:
    """Run ``plan`` with ``params`` (from ``Plan.params``; a bare kernel-parameter tensor
    for a plan without program) on HWC uint8 CPU images with the plain-torch backend.
    A batch of a pipeline without a fixed output size comes back as ``execute`` gives it."""
    if isinstance(params, torch.Tensor):
        params = BatchParams.without_program(params)
    data, offsets, shapes = pack_images(images)
    return execute(plan, data, offsets, shapes, params, REFERENCE, channels_last=channels_last)


def apply_to_images(transforms: Any, images: Sequence[torch.Tensor], seed: int = 0) -> list[torch.Tensor]:
    """Apply a pipeline to single images (CHW or HWC uint8), returning CHW outputs."""
    plan = compile_transforms(transforms)
    hwc = [to_hwc(im) for im in images]
    keys = _rng.sample_keys(seed, 0, np.arange(len(hwc)))
    params = plan.params(np.array([im.shape[:2] for im in hwc]).reshape(-1, 2), keys)
    return _ragged.unbind(run_reference(plan, hwc, params))
