"""Running a compiled plan on one decoded batch: the one place both paths share.

``execute(plan, data, offsets, shapes, batch_params, backend)`` takes a batch of
decoded HWC uint8 images packed back to back (``_reference.pack_images``'s
format, which is also what the GPU decoder produces) and the batch's drawn
parameters (``Plan.params``), and returns the output batch ``[B, 3, H, W]``:

1. kernel 1 (``fused_resized_crop``): crop, resize and flip. Without a program it
   also applies the affine (ToDtype/Normalize), the cast, the layout and
   RandomErasing, and is the only step. With a program it writes the uint8
   output-size image the program ops expect (torchvision's resize rounds to uint8
   too), with no affine.
2. the augment program: each program transform's ``apply_program`` runs its slots,
   one launch per slot over the batch. A slot whose op is identity for every
   sample is skipped (read from the slots on the host, never from the device).
   Consecutive transforms that run their slots in turn, where every op of a run of
   slots is pointwise (``csrc_triton/pointwise.py``), run that run in one pass, in
   place.
3. ``fused_finish``: affine, cast, layout and RandomErasing of the program's
   output, skipped when it would copy the uint8 batch unchanged.

The ``KERNEL`` backend runs the Triton launchers (the GPU executor's
``_launch.py``); ``REFERENCE`` runs their plain-torch twins (the CPU path's
``run_reference`` and the functionals). Both see exactly the same steps.

A pipeline whose program leads it (``Plan.leading``: colour or warp transforms before
every geometry transform, as SSD's photometric distortion in torchvision's detection
preset) first runs :func:`_leading_pass`: kernel 1 with the identity geometry writes
each decoded image at its own size as interleaved RGB (HWC, one buffer), the leading
program runs on each group of equal-size images (or, when it is pointwise, on all of
them at once, each image a row of one padded batch), and that buffer becomes the input
of the steps above.

A pipeline without a fixed output size (``Plan.out_size`` None, or ending with
``BatchImages``) is laid out per batch from the samples' drawn sizes
(``_ragged.output_layout``): a batch whose samples share one size runs the steps
above at that size; otherwise kernel 1 writes every sample at its own place in one
buffer (``placement``), in one launch. With a program, kernel 1 writes the uint8
images grouped by size, and the program and the finishing kernel run once per
group of equal-size samples, each group an ``[n, 3, h, w]`` batch (a ragged
augment program is not written yet).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import csrc_triton
import numpy as np
import torch
from csrc_triton import layout, pointwise
from csrc_triton._triton import upload

from . import _geometry as G
from . import _ragged
from ._ragged import ImageList, OutputLayout, RaggedImages

__all__ = ["Backend", "KERNEL", "REFERENCE", "SIZE_SLOT", "batch_layout", "execute"]

#: The slot a plan with a leading program reserves, first: op identity (never launched) with each
#: sample's source height and width in ``m0``/``m1``, the sizes the leading program runs at
#: (``_leading_pass``). Slots are per-sample host rows on every path, where the shapes may be a
#: device tensor that would have to be synced for.
SIZE_SLOT = 0

_IDENTITY = (1.0, 1.0, 1.0)
_ZERO = (0.0, 0.0, 0.0)


class Backend(NamedTuple):
    """Which implementation of each step runs: functions exported by ``csrc_triton``, by name."""

    name: str
    resized_crop: str  # kernel 1 (csrc_triton/resized_crop.py)
    augment_slot: str  # one program slot (csrc_triton/augment.py)
    finish: str  # affine, cast, layout and erase after a program (csrc_triton/finish.py)
    pointwise: str  # a run of pointwise slots in one pass (csrc_triton/pointwise.py)
    #: the slot launcher takes the host copy of the op codes (``ops_host``), to pick its statistics
    takes_ops_host: bool

    def fn(self, step: str) -> Callable[..., torch.Tensor]:
        """The function that runs ``step`` (``resized_crop``, ``augment_slot``, ``finish`` or ``pointwise``)."""
        return getattr(csrc_triton, getattr(self, step))


KERNEL = Backend("kernel", "fused_resized_crop", "fused_augment_slot", "fused_finish", "fused_pointwise_program", True)
REFERENCE = Backend("reference", "resized_crop_reference", "augment_slot_reference", "finish_reference",
                    "pointwise_program_reference", False)


def _erase_kwargs(plan: Any) -> dict[str, Any]:
    # Pipelines without RandomErasing call kernel 1 exactly as before erasing existed.
    if not plan.erases:
        return {}
    return {"erase_value": plan.erase_value, "erase_random": plan.erase_random}


def _pad_kwargs(plan: Any) -> dict[str, Any]:
    # Pipelines that pad with zeros at most call kernel 1 exactly as before padding modes existed.
    if getattr(plan, "pad_mode", "none") == "none":
        return {}
    return {"pad_mode": plan.pad_mode, "fill": plan.fill}


def batch_layout(plan: Any, params: torch.Tensor, channels_last: bool = False) -> OutputLayout | None:
    """How a batch of ``plan`` with the (host) parameter rows ``params`` is laid out
    (``_ragged.output_layout``); None for a pipeline with a fixed output size."""
    if not plan.varies:
        return None
    return _ragged.output_layout(_ragged.output_sizes(params), channels_last, plan.batch_images)


def execute(plan: Any, data: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor,
            batch_params: Any, backend: Backend, *, channels_last: bool = False,
            scale: torch.Tensor | None = None, bias: torch.Tensor | None = None,
            source: int = layout.SOURCE_INTERLEAVED, out_layout: OutputLayout | None = None,
            placement: torch.Tensor | None = None) -> torch.Tensor | RaggedImages | ImageList:
    """The output batch of ``plan`` (a ``_plan.Plan``; this module sits below it) for the
    packed decoded images ``data`` (``offsets [B]``, ``shapes [B, 3]``, on ``data``'s
    device) with the batch's drawn ``batch_params`` (a ``_plan.BatchParams``).

    ``batch_params`` may be on the host (its slots are always read there; what a
    step needs is copied to ``data``'s device). ``scale``/``bias`` may hold the
    plan's affine already on the device (default: ``plan.scale``/``plan.bias``).
    ``source`` says how ``data`` holds the samples (``layout.SOURCE_*``: interleaved
    pixels, planar Y/Cb/Cr, or either per sample).

    A pipeline without a fixed output size needs the batch's layout: ``out_layout``
    (``batch_layout`` of the host parameters; computed here from ``batch_params``
    when None) and, optionally, its placement already on the device. Its batch is a
    ``[B, 3, H, W]`` tensor when stacked, else a ``RaggedImages`` or an ``ImageList``.
    """
    if getattr(plan, "leading", 0):
        data, offsets, shapes = _leading_pass(plan, data, offsets, shapes, batch_params, backend, source)
        source = layout.SOURCE_INTERLEAVED
    if plan.varies:
        return _execute_varying(plan, data, offsets, shapes, batch_params, backend, channels_last, scale, bias,
                                source, out_layout, placement)
    return _execute_fixed(plan, plan.out_size, data, offsets, shapes, batch_params, backend, channels_last, scale,
                          bias, source)


def _leading_pass(plan: Any, data: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor, batch_params: Any,
                  backend: Backend, source: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The leading program on the decoded images at their own sizes: ``(data, offsets, shapes)``
    of the result, interleaved RGB packed back to back (the kernels' input format).

    Kernel 1 with the identity geometry writes each sample as HWC uint8 into one buffer,
    grouped by size (a list layout with channels-last strides: each image is packed HWC
    there), so each group is an ``[n, 3, h, w]`` view the program's slots run on. The
    sizes are read from the plan's size slot (``SIZE_SLOT``, host rows), so nothing
    waits for the device.
    """
    device = data.device
    slots = batch_params.slots.cpu()
    sizes = np.rint(slots[:, SIZE_SLOT, [layout.SLOT_M0, layout.SLOT_M1]].numpy()).astype(np.int64).reshape(-1, 2)
    if len(sizes) == 0:
        return data, offsets, shapes
    entries = plan.program[: plan.leading]
    if not (sizes == sizes[0]).all() and all(_in_turn(e) for e in entries) \
            and pointwise.is_pointwise(slots[:, entries[0].start: entries[-1].stop, layout.SLOT_OP]):
        return _leading_rows(data, offsets, shapes, sizes, slots[:, entries[0].start: entries[-1].stop], backend,
                             source)
    lay = _ragged.output_layout(sizes, channels_last=True, stack=False)
    buffer, offsets_d, shapes_d = _write_hwc(data, offsets, shapes, sizes, lay.size, lay.placement,
                                             torch.empty(lay.numel, dtype=torch.uint8, device=device), backend,
                                             source)
    for group in lay.groups:
        _run_in_place(entries, _ragged.group_view(buffer, group, channels_last=True),
                      slots[torch.from_numpy(group.index)], backend, device)
    return buffer, offsets_d, shapes_d


def _write_hwc(data: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor, sizes: np.ndarray,
               grid: tuple[int, int], placement: np.ndarray, buffer: torch.Tensor, backend: Backend,
               source: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Kernel 1 with the identity geometry: each decoded image written as interleaved RGB (HWC
    uint8) into ``buffer`` where ``placement`` puts it; returns the buffer and the images'
    ``(offsets, shapes)`` in it on the device, the kernels' input format."""
    packed = np.concatenate([sizes, np.full((len(sizes), 1), 3, dtype=np.int64)], axis=1)
    identity = G.BatchGeometry.identity(sizes).to_params()
    params_d, placement_d, offsets_d, shapes_d = upload(
        [identity, placement, np.ascontiguousarray(placement[:, layout.PLACE_OFFSET]), packed], buffer.device)
    backend.fn("resized_crop")(data, offsets, shapes, params_d, grid, _IDENTITY, _ZERO, out_dtype=torch.uint8,
                               quantize=False, source=source, placement=placement_d, out=buffer)
    return buffer, offsets_d, shapes_d


def _run_in_place(entries: Any, view: torch.Tensor, slots: torch.Tensor, backend: Backend,
                  device: torch.device) -> None:
    """The program ``entries`` on ``view``, the result written back into it."""
    done = _run_program(entries, view, slots, backend, device)
    if done.data_ptr() != view.data_ptr():  # (an all-identity program returns its input)
        view.copy_(done)


#: pixels per row of ``_leading_rows``' view: a multiple of one tile (8 x 64) per row
_ROW_WIDTH, _ROW_QUANTUM = 64, 8 * 64


def _leading_rows(data: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor, sizes: np.ndarray,
                  slots: torch.Tensor, backend: Backend,
                  source: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_leading_pass`` for a pointwise program (``slots``: its host ``[B, n, SLOT_WIDTH]``) on
    images of many sizes (detection sets: nearly every image its own size). Each image is written
    HWC at the start of its own row of ``N`` pixels (the largest image's count, rounded up to a
    tile) in one buffer, and the program runs once, in place, on the ``[B, 3, N / 64, 64]`` view
    of it, not once per size group. Nothing these ops compute crosses pixels except contrast's
    luma sum, which counts each image's own pixels (its count in the contrast slots' ``m1``)."""
    device = data.device
    B = len(sizes)
    pixels = sizes[:, 0] * sizes[:, 1]
    row = int(-(-int(pixels.max()) // _ROW_QUANTUM) * _ROW_QUANTUM)
    placement = _ragged.packed_placement(np.arange(B, dtype=np.int64) * (3 * row), sizes, channels_last=True)
    grid = (int(sizes[:, 0].max()), int(sizes[:, 1].max()))
    buffer, offsets_d, shapes_d = _write_hwc(data, offsets, shapes, sizes, grid, placement,
                                             torch.empty(B * 3 * row, dtype=torch.uint8, device=device),
                                             backend, source)
    slots = slots.clone()
    contrast = slots[..., layout.SLOT_OP] == layout.OP_CONTRAST
    counts = torch.from_numpy(pixels.astype(np.float32))[:, None].expand_as(contrast)
    slots[..., layout.SLOT_M1] = torch.where(contrast, counts, slots[..., layout.SLOT_M1])
    view = buffer.view(B, row // _ROW_WIDTH, _ROW_WIDTH, 3).permute(0, 3, 1, 2)
    _run_pointwise(view, slots, backend, device)
    return buffer, offsets_d, shapes_d


def _execute_fixed(plan: Any, out_size: tuple[int, int], data: torch.Tensor, offsets: torch.Tensor,
                   shapes: torch.Tensor, batch_params: Any, backend: Backend, channels_last: bool,
                   scale: torch.Tensor | None, bias: torch.Tensor | None, source: int) -> torch.Tensor:
    """``execute`` with every sample of size ``out_size``: ``[B, 3, *out_size]``."""
    device = data.device
    params = batch_params.params.to(device, non_blocking=True)
    scale = plan.scale if scale is None else scale
    bias = plan.bias if bias is None else bias
    resized_crop = backend.fn("resized_crop")
    if not _after(plan):
        return resized_crop(data, offsets, shapes, params, out_size, scale, bias, out_dtype=plan.out_dtype,
                            channels_last=channels_last, antialias=plan.antialias, quantize=plan.quantize,
                            interpolation=plan.interpolation, source=source, **_erase_kwargs(plan),
                            **_pad_kwargs(plan))
    images = resized_crop(data, offsets, shapes, params, out_size, _IDENTITY, _ZERO, out_dtype=torch.uint8,
                          channels_last=False, antialias=plan.antialias, quantize=plan.quantize,
                          interpolation=plan.interpolation, source=source, **_pad_kwargs(plan))
    slots = batch_params.slots.cpu()
    images = _run_program(_after(plan), images, slots, backend, device)
    if not _needs_finish(plan, channels_last):
        return images
    finish = backend.fn("finish")
    return finish(images, params, scale, bias, out_dtype=plan.out_dtype, channels_last=channels_last,
                  erase_value=plan.erase_value, erase_random=plan.erase_random)


def _run_program(entries: Any, images: torch.Tensor, slots: torch.Tensor, backend: Backend,
                 device: torch.device) -> torch.Tensor:
    """The program ``entries`` (``ProgramEntry``) on the uint8 ``[B, 3, H, W]`` ``images`` with
    their host ``slots``. Consecutive entries that run their slots in turn (``_in_turn``) run
    as one sequence of slots (``_run_slots``), so that pointwise ones across transforms fuse."""
    augment_slot = backend.fn("augment_slot")

    def run_slot(batch: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        ops = slot[:, layout.SLOT_OP]
        if not bool((ops != layout.OP_IDENTITY).any()):
            return batch
        extra = {"ops_host": ops} if backend.takes_ops_host else {}
        return augment_slot(batch, slot.to(device, non_blocking=True), **extra)

    i = 0
    while i < len(entries):
        j = i
        while j < len(entries) and _in_turn(entries[j]):
            j += 1
        if j > i:
            images = _run_slots(images, slots[:, entries[i].start: entries[j - 1].stop], run_slot, backend, device)
            i = j
        else:
            entry = entries[i]
            images = entry.transform.apply_program(images, slots[:, entry.start: entry.stop], run_slot)
            i += 1
    return images


def _in_turn(entry: Any) -> bool:
    """Whether ``entry``'s transform runs its slots one after the other (the default
    ``apply_program``; AugMix, for one, mixes its chains)."""
    return type(entry.transform).apply_program.__qualname__ == "Transform.apply_program"  # (_plan imports us)


def _run_slots(images: torch.Tensor, slots: torch.Tensor, run_slot: Callable, backend: Backend,
               device: torch.device) -> torch.Tensor:
    """``slots`` (host ``[B, n, SLOT_WIDTH]``) one after the other on ``images``: each run of
    slots whose ops are all pointwise in one pass (``_run_pointwise``), the others one launch each."""
    pointwise_slot = np.isin(slots[..., layout.SLOT_OP].numpy(), pointwise.POINTWISE_OPS).all(axis=0)
    k = 0
    while k < len(pointwise_slot):
        if not pointwise_slot[k]:
            images = run_slot(images, slots[:, k])
            k += 1
            continue
        stop = k
        while stop < len(pointwise_slot) and pointwise_slot[stop]:
            stop += 1
        images = _run_pointwise(images, slots[:, k:stop], backend, device)
        k = stop
    return images


def _run_pointwise(images: torch.Tensor, slots: torch.Tensor, backend: Backend, device: torch.device) -> torch.Tensor:
    """A run of pointwise slots (host ``[B, n, SLOT_WIDTH]``) on ``images``, in place, in one pass
    (none when every op is the identity); returns ``images``."""
    ops = slots[..., layout.SLOT_OP]
    active = (ops != layout.OP_IDENTITY).any(dim=0)
    if not bool(active.any()):
        return images
    slots = slots[:, active] if not bool(active.all()) else slots
    return backend.fn("pointwise")(images, slots.to(device, non_blocking=True), ops_host=ops[:, active],
                                   out=images)


def _after(plan: Any) -> Any:
    """The program entries that run on kernel 1's output (those after the leading ones)."""
    return plan.program[getattr(plan, "leading", 0):]


def _needs_finish(plan: Any, channels_last: bool) -> bool:
    """Whether the program's uint8 output needs the finishing kernel (else it is the output)."""
    return not (plan.out_dtype == torch.uint8 and not plan.erases and not channels_last
                and tuple(plan.scale) == _IDENTITY and tuple(plan.bias) == _ZERO)


def _execute_varying(plan: Any, data: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor,
                     batch_params: Any, backend: Backend, channels_last: bool, scale: torch.Tensor | None,
                     bias: torch.Tensor | None, source: int, lay: OutputLayout | None,
                     placement: torch.Tensor | None) -> torch.Tensor | RaggedImages | ImageList:
    """``execute`` for a pipeline without a fixed output size (module docstring)."""
    if lay is None:
        lay = batch_layout(plan, batch_params.params.cpu(), channels_last)
    if lay.kind == "stacked":
        return _execute_fixed(plan, lay.size, data, offsets, shapes, batch_params, backend, channels_last, scale,
                              bias, source)
    device = data.device
    B = len(lay.sizes)
    params = batch_params.params.to(device, non_blocking=True)
    scale = plan.scale if scale is None else scale
    bias = plan.bias if bias is None else bias
    grid = (int(lay.sizes[:, 0].max()), int(lay.sizes[:, 1].max()))
    if lay.kind == "padded":
        buffer = torch.full((lay.numel,), plan.batch_images.fill, dtype=plan.out_dtype, device=device)
        result: Any = ImageList(_ragged.padded_tensor(buffer, B, lay.size, channels_last),
                                [(int(h), int(w)) for h, w in lay.sizes.tolist()])
    else:
        buffer = torch.empty(lay.numel, dtype=plan.out_dtype, device=device)
        result = RaggedImages(buffer, lay.placement)
    resized_crop = backend.fn("resized_crop")
    if not _after(plan):
        if placement is None:
            placement = torch.from_numpy(lay.placement).to(device, non_blocking=True)
        resized_crop(data, offsets, shapes, params, grid, scale, bias, out_dtype=plan.out_dtype,
                     antialias=plan.antialias, quantize=plan.quantize, interpolation=plan.interpolation,
                     source=source, placement=placement, out=buffer, **_erase_kwargs(plan), **_pad_kwargs(plan))
        return result
    # With a program: kernel 1 writes the uint8 images grouped by size (contiguous: the
    # list layout of the same sizes), then each group runs the program and the finish.
    grouped = _ragged.output_layout(lay.sizes, stack=False)
    if placement is None or lay.kind != "list" or channels_last:
        placement = torch.from_numpy(grouped.placement).to(device, non_blocking=True)
    finish = backend.fn("finish") if _needs_finish(plan, channels_last) else None
    if lay.kind == "list" and finish is None and not channels_last:
        images = buffer  # the program's uint8 output is the output: write it in place
    else:
        images = torch.empty(grouped.numel, dtype=torch.uint8, device=device)
    resized_crop(data, offsets, shapes, params, grid, _IDENTITY, _ZERO, out_dtype=torch.uint8,
                 antialias=plan.antialias, quantize=plan.quantize, interpolation=plan.interpolation,
                 source=source, placement=placement, out=images, **_pad_kwargs(plan))
    slots = batch_params.slots.cpu()
    # the groups' sample indices on the device, in one copy (as the launcher's metadata)
    on_device = upload([g.index for g in grouped.groups], device)
    for group, index in zip(grouped.groups, on_device):
        done = _run_program(_after(plan), _ragged.group_view(images, group),
                            slots[torch.from_numpy(group.index)], backend, device)
        if lay.kind == "list":  # same groups, same offsets: only the strides may differ
            dst = _ragged.group_view(buffer, group, channels_last)
            if finish is None:
                if done.data_ptr() != dst.data_ptr():  # (an all-identity program returns its input)
                    dst.copy_(done)
            else:
                finish(done, params[index], scale, bias, out_dtype=plan.out_dtype, erase_value=plan.erase_value,
                       erase_random=plan.erase_random, out=dst)
        else:
            if finish is not None:
                done = finish(done, params[index], scale, bias, out_dtype=plan.out_dtype,
                              erase_value=plan.erase_value, erase_random=plan.erase_random)
            result.tensors[index, :, :group.height, :group.width] = done
    return result
