"""The batch's kernels: the plan run on a decoded batch by ``transforms._execute.execute``
with the Triton backend (the fused crop + resize + flip + normalize kernel, then the
augment program's slots and the finishing kernel when the pipeline has them).

Each batch's launches are bracketed by one pair of CUDA timing events. A batch's kernel time is read
when the next batch is launched, from events that have passed by then, so
timing never makes the host wait for the GPU.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch
from csrc_triton._triton import upload

from ..transforms._execute import KERNEL, batch_layout, execute
from ..transforms._plan import BatchParams
from ..transforms._ragged import ImageList, RaggedImages
from ._decode import DecodedBatch


# targets of these dtypes travel with the batch's metadata (``upload``); others on their own
_PLAIN_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                 torch.float16, torch.bfloat16, torch.float32, torch.float64)


class KernelEvents(NamedTuple):
    """The timing events recorded around one launch."""

    start: torch.cuda.Event
    end: torch.cuda.Event


class KernelLauncher:
    """Per-loader, per-device kernel state: the plan's output format and its
    normalisation constants on the device."""

    def __init__(self, plan: Any, device: torch.device, channels_last: bool) -> None:
        self.plan = plan
        self.device = device
        self.channels_last = channels_last
        self.scale = torch.tensor(plan.scale, dtype=torch.float32, device=device)
        self.bias = torch.tensor(plan.bias, dtype=torch.float32, device=device)
        self._previous: KernelEvents | None = None

    def launch(self, decoded: DecodedBatch, params: BatchParams, stream: torch.cuda.Stream,
               targets: Any = None) -> tuple[torch.Tensor | RaggedImages | ImageList, KernelEvents, Any]:
        """(output images, timing events, ``targets`` on the device when they are a
        tensor) of the batch's kernels.

        Runs with ``stream`` current on the executor's device: the metadata goes over
        in one copy through pinned memory (``upload``: a copy from pageable memory
        could make the host wait for the decode queued before it), and the kernels are
        ordered on the stream after the decode. The events span every kernel of the
        batch (kernel 1, the program's slots, the finishing kernel). A pipeline without
        a fixed output size lays the batch out from the host parameters first
        (``_execute.batch_layout``); its placement travels in the same copy.
        """
        out_layout = batch_layout(self.plan, params.params, self.channels_last)
        parts = [decoded.shapes, decoded.offsets, params.params]
        send_placement = out_layout is not None and out_layout.placement is not None
        if send_placement:
            parts.append(out_layout.placement)
        send_targets = isinstance(targets, torch.Tensor) and targets.dtype in _PLAIN_DTYPES
        if send_targets:
            parts.append(targets)
        shapes_d, offsets_d, params_d, *rest = upload(parts, self.device)
        placement_d = rest.pop(0) if send_placement else None
        if send_targets:
            targets = rest[0]
        params = params._replace(params=params_d)
        k_start, k_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        k_start.record(stream)
        images = execute(self.plan, decoded.buffer, offsets_d, shapes_d, params, KERNEL,
                         channels_last=self.channels_last, scale=self.scale, bias=self.bias,
                         source=decoded.source, out_layout=out_layout, placement=placement_d)
        k_end.record(stream)
        return images, KernelEvents(k_start, k_end), targets

    def previous_kernel_s(self, events: KernelEvents) -> float:
        """GPU seconds of the previously launched kernel (0.0 while its end event has not
        passed, and for the first batch); remembers ``events`` for the next call."""
        kernel_s = 0.0
        if self._previous is not None and self._previous.end.query():
            kernel_s = self._previous.start.elapsed_time(self._previous.end) / 1e3
        self._previous = events
        return kernel_s
