"""Batches whose images differ in size: how the output is laid out and what the loop gets.

A pipeline fixes its output size when a step sets it (a crop, ``Resize((h, w))``);
otherwise (``Resize(256)`` alone, ``Pad``, photometric ops on images of their own
size) each sample's output size is its own, drawn with its parameters: the
``out_h``/``out_w`` columns of its parameter row (``csrc_triton/layout.py``). For
such a pipeline every batch is laid out, on the host, from those sizes
(:func:`output_layout`), one of three ways:

* ``"stacked"``: every sample of the batch has the same size. The batch is the
  ``[B, 3, H, W]`` tensor a fixed-size pipeline of that size would give, and
  torch's ``default_collate`` of the samples would: the fixed-size kernel runs,
  unchanged. Decided per batch, so a dataset of equal-size images gets stacked
  batches throughout.
* ``"list"``: sizes differ. The kernel writes every sample into one 1-D buffer at its
  own offset (the ``placement`` rows of ``layout.py``) and the loop gets a list of
  ``[3, h_i, w_i]`` tensors, views into that buffer (:class:`RaggedImages` until
  then), as torchvision's detection references get from
  ``collate_fn=lambda b: tuple(zip(*b))``. The samples are grouped by size in the
  buffer (the groups in order of their first sample, each group's samples in batch
  order), so an augment program runs on each group as one ``[n, 3, h, w]`` batch.
* ``"padded"``: the pipeline ends with ``BatchImages``: every batch is one
  ``[B, 3, H, W]`` tensor, ``H``/``W`` the largest height/width of the batch rounded up
  to ``size_divisible``, each image at the top left, the rest ``fill``; the loop gets
  an :class:`ImageList` ``(tensors, image_sizes)``, as torchvision's
  ``GeneralizedRCNNTransform.batch_images`` makes it. The kernel writes into it
  directly (the placement's strides are the padded tensor's).

Targets follow the images (``_executor/_deliver.py``): collated by
``default_collate`` for a stacked batch, the list of the samples' targets otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch
from csrc_triton import layout

from ._state import BatchImagesSpec

__all__ = ["ImageList", "OutputLayout", "RaggedImages", "SizeGroup", "concat", "for_loop", "group_view",
           "output_layout", "output_sizes", "packed_placement", "padded_tensor", "tensors_of", "unbind"]


class ImageList(NamedTuple):
    """A batch of images of different sizes padded to one tensor, with each image's size:
    the fields of torchvision's ``models.detection.image_list.ImageList``."""

    #: ``[B, 3, H, W]``: image ``i`` in ``tensors[i, :, :h_i, :w_i]``, the rest the fill
    tensors: torch.Tensor
    #: ``(h_i, w_i)`` of each image
    image_sizes: list[tuple[int, int]]

    def to(self, *args: Any, **kwargs: Any) -> ImageList:
        """The same batch with ``tensors.to(*args, **kwargs)``."""
        return ImageList(self.tensors.to(*args, **kwargs), self.image_sizes)


@dataclass
class RaggedImages:
    """A batch of images of different sizes in one 1-D ``buffer``, before it reaches the
    loop (which gets ``images()``). Crosses processes as one tensor plus a numpy array."""

    #: every sample's pixels, at the offsets and strides of ``placement``
    buffer: torch.Tensor
    #: ``int64 [B, layout.PLACEMENT_WIDTH]`` (host)
    placement: np.ndarray

    def __len__(self) -> int:
        return len(self.placement)

    @property
    def image_sizes(self) -> list[tuple[int, int]]:
        return [(int(r[layout.PLACE_H]), int(r[layout.PLACE_W])) for r in self.placement]

    def images(self) -> list[torch.Tensor]:
        """Sample ``i`` as a ``[3, h_i, w_i]`` view of ``buffer``."""
        out = []
        for r in self.placement.tolist():
            out.append(self.buffer.as_strided(
                (3, r[layout.PLACE_H], r[layout.PLACE_W]),
                (r[layout.PLACE_STRIDE_C], r[layout.PLACE_STRIDE_H], r[layout.PLACE_STRIDE_W]),
                r[layout.PLACE_OFFSET]))
        return out


class SizeGroup(NamedTuple):
    """The samples of a batch that share one output size."""

    height: int
    width: int
    #: their positions in the batch, ascending
    index: np.ndarray
    #: where the group starts in a list layout's buffer (its samples follow back to back)
    offset: int


class OutputLayout(NamedTuple):
    """How one batch of a variable-size pipeline is laid out (module docstring)."""

    #: ``"stacked"``, ``"list"`` or ``"padded"``
    kind: str
    #: ``[B, 2]`` int64 (h, w) of each sample's output
    sizes: np.ndarray
    #: stacked: the batch's (H, W); list: the largest height and width (the kernel's grid);
    #: padded: the padded tensor's (H, W)
    size: tuple[int, int]
    #: list and padded: ``int64 [B, layout.PLACEMENT_WIDTH]``; None when stacked
    placement: np.ndarray | None
    #: elements of the output buffer
    numel: int
    #: list: the size groups in buffer order; empty otherwise
    groups: tuple[SizeGroup, ...]


def output_sizes(params: torch.Tensor | np.ndarray) -> np.ndarray:
    """``[B, 2]`` int64 output (h, w) of each sample, from host parameter rows."""
    p = params.numpy() if isinstance(params, torch.Tensor) else np.asarray(params)
    return np.rint(p[:, [layout.OUT_H, layout.OUT_W]]).astype(np.int64).reshape(-1, 2)


def _groups(sizes: np.ndarray) -> list[tuple[int, int, np.ndarray]]:
    """The distinct sizes in order of their first sample, each with its samples."""
    if len(sizes) == 0:
        return []
    _, first, inverse = np.unique(sizes, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    out = []
    for u in np.argsort(first, kind="stable"):
        index = np.flatnonzero(inverse == u)
        h, w = sizes[index[0]]
        out.append((int(h), int(w), index))
    return out


def _strides(height: int, width: int, channels_last: bool) -> tuple[int, int, int]:
    """(stride_c, stride_h, stride_w) of a ``[3, height, width]`` image in its own memory."""
    return (1, 3 * width, 3) if channels_last else (height * width, width, 1)


def output_layout(sizes: np.ndarray, channels_last: bool = False,
                  batch_images: BatchImagesSpec | None = None, stack: bool = True) -> OutputLayout:
    """The layout of a batch whose samples' output sizes are ``sizes`` (``[B, 2]``);
    ``stack=False``: a list layout even when the sizes are equal."""
    sizes = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)
    B = len(sizes)
    if batch_images is not None:
        d = max(int(batch_images.size_divisible), 1)
        top = sizes.max(axis=0) if B else np.zeros(2, dtype=np.int64)
        H, W = (int(-(-int(v) // d) * d) for v in top)
        sc, sh, sw = _strides(H, W, channels_last)
        placement = np.zeros((B, layout.PLACEMENT_WIDTH), dtype=np.int64)
        placement[:, layout.PLACE_OFFSET] = np.arange(B, dtype=np.int64) * (3 * H * W)
        placement[:, [layout.PLACE_H, layout.PLACE_W]] = sizes
        placement[:, [layout.PLACE_STRIDE_C, layout.PLACE_STRIDE_H, layout.PLACE_STRIDE_W]] = (sc, sh, sw)
        return OutputLayout("padded", sizes, (H, W), placement, B * 3 * H * W, ())
    if B == 0 or stack and (sizes == sizes[0]).all():
        size = (int(sizes[0, 0]), int(sizes[0, 1])) if B else (0, 0)
        return OutputLayout("stacked", sizes, size, None, B * 3 * size[0] * size[1], ())
    # every sample's group (distinct sizes in order of their first sample) and place in it, at once:
    # a detection batch has as many groups as samples
    _, first, inverse, counts = np.unique(sizes, axis=0, return_index=True, return_inverse=True,
                                          return_counts=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    group = rank[inverse.reshape(-1)]  # each sample's group, numbered by first appearance
    members = np.argsort(group, kind="stable")  # the samples group by group, each group in sample order
    n_of = counts[order]
    hw = sizes[first[order]]  # [G, 2]
    numel = 3 * hw[:, 0] * hw[:, 1]
    starts = np.concatenate([[0], np.cumsum(n_of * numel)])
    first_member = np.concatenate([[0], np.cumsum(n_of)[:-1]])
    slot = np.empty(B, dtype=np.int64)
    slot[members] = np.arange(B) - np.repeat(first_member, n_of)  # place within its group
    placement = packed_placement(starts[group] + slot * numel[group], sizes, channels_last)
    index = np.split(members, first_member[1:])
    groups = tuple(SizeGroup(int(h), int(w), ix, int(at)) for (h, w), ix, at in zip(hw.tolist(), index, starts[:-1]))
    top = sizes.max(axis=0)
    return OutputLayout("list", sizes, (int(top[0]), int(top[1])), placement, int(starts[-1]), groups)


def packed_placement(offsets: np.ndarray, sizes: np.ndarray, channels_last: bool) -> np.ndarray:
    """``int64 [B, layout.PLACEMENT_WIDTH]``: each sample's image of ``sizes`` (``[B, 2]``) packed on
    its own at ``offsets`` (elements of one buffer), channels-last (HWC) or planar (CHW)."""
    rows = np.zeros((len(sizes), layout.PLACEMENT_WIDTH), dtype=np.int64)
    rows[:, layout.PLACE_OFFSET] = offsets
    h, w = sizes[:, 0], sizes[:, 1]
    rows[:, layout.PLACE_H], rows[:, layout.PLACE_W] = h, w
    rows[:, layout.PLACE_STRIDE_C], rows[:, layout.PLACE_STRIDE_H], rows[:, layout.PLACE_STRIDE_W] = \
        (1, 3 * w, 3) if channels_last else (h * w, w, 1)
    return rows


def group_view(buffer: torch.Tensor, group: SizeGroup, channels_last: bool = False) -> torch.Tensor:
    """The ``[n, 3, h, w]`` batch of ``group`` in a list layout's ``buffer``."""
    n, h, w = len(group.index), group.height, group.width
    flat = buffer[group.offset: group.offset + n * 3 * h * w]
    if channels_last:
        return flat.view(n, h, w, 3).permute(0, 3, 1, 2)
    return flat.view(n, 3, h, w)


def tensors_of(images: Any) -> list[torch.Tensor]:
    """The tensors holding a batch's images (what a stream or a fork must keep alive)."""
    if isinstance(images, RaggedImages):
        return [images.buffer]
    if isinstance(images, ImageList):
        return [images.tensors]
    return [images] if isinstance(images, torch.Tensor) else []


def unbind(images: Any) -> list[torch.Tensor]:
    """Each sample's image of a batch (views): a stacked tensor, a RaggedImages, an ImageList, or
    the list of images the loop gets."""
    if isinstance(images, RaggedImages):
        return images.images()
    if isinstance(images, ImageList):
        return [t[:, :h, :w] for t, (h, w) in zip(images.tensors.unbind(0), images.image_sizes)]
    if isinstance(images, (list, tuple)):
        return list(images)
    return list(images.unbind(0))


def for_loop(images: Any) -> Any:
    """What the training loop gets for a batch's images: the list of views of a RaggedImages,
    anything else as it is."""
    return images.images() if isinstance(images, RaggedImages) else images


def concat(parts: Sequence[Any], channels_last: bool = False,
           batch_images: BatchImagesSpec | None = None) -> Any:
    """One batch from consecutive parts (each a stacked tensor, a RaggedImages or an ImageList,
    as ``_execute.execute`` returns them), laid out as ``output_layout`` lays the whole batch."""
    images = [im for p in parts for im in unbind(p)]
    sizes = np.array([im.shape[1:] for im in images], dtype=np.int64).reshape(-1, 2)
    lay = output_layout(sizes, channels_last, batch_images)
    ref = tensors_of(parts[0])[0]
    if lay.kind == "stacked":
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        out = torch.empty((len(images), 3, *lay.size), dtype=ref.dtype, device=ref.device, memory_format=fmt)
        for i, im in enumerate(images):
            out[i].copy_(im)
        return out
    if lay.kind == "padded":
        fill = batch_images.fill
        out = torch.full(lay.numel, fill, dtype=ref.dtype, device=ref.device)
        result: Any = ImageList(padded_tensor(out, len(images), lay.size, channels_last),
                                [tuple(s) for s in sizes.tolist()])
    else:
        out = torch.empty(lay.numel, dtype=ref.dtype, device=ref.device)
        result = RaggedImages(out, lay.placement)
    for dst, im in zip(unbind(result), images):
        dst.copy_(im)
    return result


def padded_tensor(buffer: torch.Tensor, B: int, size: tuple[int, int], channels_last: bool) -> torch.Tensor:
    """A padded layout's buffer as its ``[B, 3, H, W]`` tensor."""
    H, W = size
    if channels_last:
        return buffer.view(B, H, W, 3).permute(0, 3, 1, 2)
    return buffer.view(B, 3, H, W)
