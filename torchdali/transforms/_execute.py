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
3. ``fused_finish``: affine, cast, layout and RandomErasing of the program's
   output, skipped when it would copy the uint8 batch unchanged.

The ``KERNEL`` backend runs the Triton launchers (the GPU executor's
``_launch.py``); ``REFERENCE`` runs their plain-torch twins (the CPU path's
``run_reference`` and the functionals). Both see exactly the same steps.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import csrc_triton
import torch
from csrc_triton import layout

__all__ = ["Backend", "KERNEL", "REFERENCE", "execute"]

_IDENTITY = (1.0, 1.0, 1.0)
_ZERO = (0.0, 0.0, 0.0)


class Backend(NamedTuple):
    """Which implementation of each step runs: functions exported by ``csrc_triton``, by name."""

    name: str
    resized_crop: str  # kernel 1 (csrc_triton/resized_crop.py)
    augment_slot: str  # one program slot (csrc_triton/augment.py)
    finish: str  # affine, cast, layout and erase after a program (csrc_triton/finish.py)
    #: the slot launcher takes the host copy of the op codes (``ops_host``), to pick its statistics
    takes_ops_host: bool

    def fn(self, step: str) -> Callable[..., torch.Tensor]:
        """The function that runs ``step`` (``resized_crop``, ``augment_slot`` or ``finish``)."""
        return getattr(csrc_triton, getattr(self, step))


KERNEL = Backend("kernel", "fused_resized_crop", "fused_augment_slot", "fused_finish", True)
REFERENCE = Backend("reference", "resized_crop_reference", "augment_slot_reference", "finish_reference", False)


def _erase_kwargs(plan: Any) -> dict[str, Any]:
    # Pipelines without RandomErasing call kernel 1 exactly as before erasing existed.
    if not plan.erases:
        return {}
    return {"erase_value": plan.erase_value, "erase_random": plan.erase_random}


def execute(plan: Any, data: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor,
            batch_params: Any, backend: Backend, *, channels_last: bool = False,
            scale: torch.Tensor | None = None, bias: torch.Tensor | None = None,
            source: int = layout.SOURCE_INTERLEAVED) -> torch.Tensor:
    """The output batch of ``plan`` (a ``_plan.Plan``; this module sits below it) for the
    packed decoded images ``data`` (``offsets [B]``, ``shapes [B, 3]``, on ``data``'s
    device) with the batch's drawn ``batch_params`` (a ``_plan.BatchParams``).

    ``batch_params`` may be on the host (its slots are always read there; what a
    step needs is copied to ``data``'s device). ``scale``/``bias`` may hold the
    plan's affine already on the device (default: ``plan.scale``/``plan.bias``).
    ``source`` says how ``data`` holds the samples (``layout.SOURCE_*``: interleaved
    pixels, planar Y/Cb/Cr, or either per sample).
    """
    device = data.device
    params = batch_params.params.to(device, non_blocking=True)
    scale = plan.scale if scale is None else scale
    bias = plan.bias if bias is None else bias
    resized_crop = backend.fn("resized_crop")
    if not plan.program:
        return resized_crop(data, offsets, shapes, params, plan.out_size, scale, bias, out_dtype=plan.out_dtype,
                            channels_last=channels_last, antialias=plan.antialias, quantize=plan.quantize,
                            interpolation=plan.interpolation, source=source, **_erase_kwargs(plan))
    images = resized_crop(data, offsets, shapes, params, plan.out_size, _IDENTITY, _ZERO, out_dtype=torch.uint8,
                          channels_last=False, antialias=plan.antialias, quantize=plan.quantize,
                          interpolation=plan.interpolation, source=source)
    slots = batch_params.slots.cpu()
    augment_slot = backend.fn("augment_slot")

    def run_slot(batch: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        ops = slot[:, layout.SLOT_OP]
        if not bool((ops != layout.OP_IDENTITY).any()):
            return batch
        extra = {"ops_host": ops} if backend.takes_ops_host else {}
        return augment_slot(batch, slot.to(device, non_blocking=True), **extra)

    for entry in plan.program:
        images = entry.transform.apply_program(images, slots[:, entry.start: entry.stop], run_slot)
    if (plan.out_dtype == torch.uint8 and not plan.erases and not channels_last
            and tuple(plan.scale) == _IDENTITY and tuple(plan.bias) == _ZERO):
        return images
    finish = backend.fn("finish")
    return finish(images, params, scale, bias, out_dtype=plan.out_dtype, channels_last=channels_last,
                  erase_value=plan.erase_value, erase_random=plan.erase_random)
