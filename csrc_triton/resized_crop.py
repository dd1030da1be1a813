"""Fused resized-crop: crop + flip + pad + resize + normalise + cast, one launch.

One launch turns a ragged batch of decoded HWC ``uint8`` images, packed back to
back in a 1-D buffer, into a ``[B, 3, out_h, out_w]`` tensor. Each sample carries
its own geometry in a row of ``params`` (named columns, see ``layout.py``), so
RandomResizedCrop, Resize, CenterCrop (with zero padding) and the flips all come
down to this one kernel with different parameters. The interpolation (bilinear,
bicubic, nearest, nearest-exact: torchvision's ``resize`` modes) is compiled in,
or chosen per sample from the ``filter`` column of ``params``. With
``source="ycbcr"`` the batch holds JPEG planes instead of RGB images (Y, Cb, Cr at
native chroma resolution, see ``layout.py``): each source pixel the resize reads
is upsampled and converted to RGB as libjpeg does, in the same pass; with
``source="nv12"`` it holds NV12 video frames (a Y plane, then interleaved Cb, Cr at
half size), upsampled and converted with each frame's matrix and range. With a
``pad_mode`` the clamp region may reach past the image and every tap is folded
into the sample's fold box (edge, reflect, symmetric) or reads the ``fill``
(constant): padding before a resize, resampled as torchvision resamples the
padded image.

The kernel (``_resized_crop_kernel.py``) is a composition of four stages,
``stages/{source,sample,colour,epilogue}.py``, whose math each stage module's
docstring gives. :func:`fused_resized_crop` is its launcher (validates, picks the
tiles, allocates the output); :func:`resized_crop_reference` is the same function
in plain torch, composed of the stages' twins in ``reference.py``, and is also the
library's CPU path.

The kernel gathers each output pixel's taps straight from the packed source. A
tensor-core formulation (source staged per tile, both passes as band-matrix
products) was measured slower on an H200 in every recipe and was dropped; see
benchmarks/RESULTS.md.
"""
from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from . import _triton, layout, reference

__all__ = ["fused_resized_crop", "resized_crop_reference"]

_OUT_DTYPES = (torch.uint8, torch.float32, torch.float16, torch.bfloat16)


# --------------------------------------------------------------------------- #
# Argument checking shared by the launcher and the reference
# --------------------------------------------------------------------------- #


@dataclass
class _Args:
    """Validated, normalised arguments (contiguous metadata, affine on device)."""

    data: torch.Tensor
    offsets: torch.Tensor
    shapes: torch.Tensor
    params: torch.Tensor
    affine: torch.Tensor  # float32 [6] on the data's device
    out_h: int
    out_w: int
    out: torch.Tensor  # allocated or the caller's
    source: int  # layout.SOURCE_*
    placement: torch.Tensor | None = None  # int64 [B, PLACEMENT_WIDTH]: a variable-size output
    pad_mode: int = layout.PAD_NONE  # layout.PAD_*
    fill: torch.Tensor | None = None  # float32 [3] on the data's device (pad_mode PAD_CONSTANT)


def _require_tensor(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def _affine_values(name: str, v: Sequence[float] | torch.Tensor, device: torch.device) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        if v.numel() != 3:
            raise ValueError(f"{name} must have 3 elements (one per output channel), got shape {tuple(v.shape)}")
        if v.is_complex() or v.dtype == torch.bool:
            raise TypeError(f"{name} must be real-valued, got {v.dtype}")
        # Any device is accepted: a CPU mean/std next to GPU data is common.
        return v.detach().reshape(3).to(device=device, dtype=torch.float32)
    try:
        vals = [float(x) for x in v]
    except TypeError as e:
        raise TypeError(f"{name} must be a sequence of 3 floats or a tensor, got {type(v).__name__}") from e
    if len(vals) != 3:
        raise ValueError(f"{name} must have 3 values (one per output channel), got {len(vals)}")
    # kept per device: ``torch.tensor`` to a GPU copies from pageable memory, which waits for the
    # stream's queued work (the executor passes the same constants every batch)
    key = (tuple(vals), device)
    t = _CONSTANTS.get(key)
    if t is None:
        t = _CONSTANTS[key] = torch.tensor(vals, dtype=torch.float32, device=device)
    return t


#: the per-device tensors of the constant scale, bias and fill sequences met so far (``_affine_values``)
_CONSTANTS: dict = {}


def _check_values(data: torch.Tensor, offsets: torch.Tensor, shapes: torch.Tensor, params: torch.Tensor,
                  interpolation: int, source: int = layout.SOURCE_INTERLEAVED,
                  pad_mode: int = layout.PAD_NONE) -> None:
    """Check per-sample metadata; reads the tensors, so only run where that is cheap."""
    shp = shapes.to(device="cpu", dtype=torch.int64)
    offs = offsets.to(device="cpu", dtype=torch.int64)
    prm = params.to(device="cpu")
    H, W, C = shp[:, 0], shp[:, 1], shp[:, 2]

    def first(bad: torch.Tensor) -> int:
        return int(bad.nonzero()[0, 0])

    planar = torch.zeros_like(C, dtype=torch.bool)  # which samples are planar
    if source == layout.SOURCE_YCBCR:
        bad = ~torch.isin(C, torch.tensor(list(layout.SUBSAMPLINGS.values())))
        if bad.any():
            i = first(bad)
            raise ValueError(f"sample {i}: a planar YCbCr sample's shapes[:, 2] must be a subsampling code of "
                             f"{layout.SUBSAMPLINGS}, got {int(C[i])} (shape {shp[i].tolist()})")
        planar[:] = True
    elif source == layout.SOURCE_NV12:
        bad = ~torch.isin(C, torch.tensor(layout.NV12_CODES))
        if bad.any():
            i = first(bad)
            raise ValueError(f"sample {i}: an NV12 frame's shapes[:, 2] must be a colour format code of "
                             f"{list(layout.NV12_CODES)} (layout.nv12_code(matrix, full_range)), got {int(C[i])} "
                             f"(shape {shp[i].tolist()})")
    elif source == layout.SOURCE_MIXED:
        planar = C >= layout.PLANAR
        codes = torch.tensor([1, 3] + [layout.PLANAR + s for s in layout.SUBSAMPLINGS.values()])
        bad = ~torch.isin(C, codes)
        if bad.any():
            i = first(bad)
            raise ValueError(f"sample {i}: in a mixed batch shapes[:, 2] must be 1 or 3 (interleaved) or "
                             f"{layout.PLANAR} + a subsampling code of {layout.SUBSAMPLINGS} (planar), got "
                             f"{int(C[i])} (shape {shp[i].tolist()}); NV12 frames do not mix with these, "
                             f"they go in a batch of their own (source='nv12')")
    else:
        bad = (C != 1) & (C != 3)
        if bad.any():
            i = first(bad)
            raise ValueError(f"sample {i}: channel count must be 1 or 3, got C={int(C[i])} (shape {shp[i].tolist()})")
    bad = (H < 1) | (W < 1)
    if bad.any():
        i = first(bad)
        raise ValueError(f"sample {i}: image height and width must be >= 1, got shape {shp[i].tolist()}")
    # float64: an int64 product of absurd shapes could wrap around and pass.
    # Python ints are exact; the codes were checked above
    if source == layout.SOURCE_NV12:
        sizes = [float(layout.nv12_size(h, w)) for h, w, _ in shp.tolist()]
    else:
        sizes = [float(layout.planar_size(h, w, c % layout.PLANAR)) if is_planar else float(h) * w * c
                 for (h, w, c), is_planar in zip(shp.tolist(), planar.tolist())]
    end = offs.double() + torch.tensor(sizes, dtype=torch.float64).reshape(-1)
    bad = (offs < 0) | (end > data.numel())
    if bad.any():
        i = first(bad)
        what = ("NV12 frame (Y plane, CbCr plane)" if source == layout.SOURCE_NV12
                else "planar YCbCr sample (Y, Cb, Cr planes)" if planar[i] else "image")
        raise ValueError(
            f"sample {i}: {what} at offset {int(offs[i])} with shape {shp[i].tolist()} does not fit in "
            f"data ({data.numel()} elements)"
        )
    if not torch.isfinite(prm).all():
        i = first(~torch.isfinite(prm).all(dim=1))
        raise ValueError(f"sample {i}: params contain a non-finite value: {prm[i].tolist()}")
    if interpolation == layout.FILTER_PER_SAMPLE:
        codes = prm[:, layout.FILTER]
        bad = ~torch.isin(codes, torch.tensor(list(layout.FILTERS.values()), dtype=codes.dtype))
        if bad.any():
            i = first(bad)
            raise ValueError(f"sample {i}: filter column holds {float(codes[i])}, not an interpolation code "
                             f"of {layout.FILTERS}")
    for axis in ("y", "x"):
        cols = layout.axis(axis)
        lo, hi = prm[:, cols.lo], prm[:, cols.hi]
        bad = (lo != lo.floor()) | (hi != hi.floor())
        if bad.any():
            i = first(bad)
            raise ValueError(
                f"sample {i}: clamp region [{float(lo[i])}, {float(hi[i])}) along {axis} must have integer bounds"
            )
        if pad_mode != layout.PAD_NONE:
            f0, f1 = prm[:, layout.column(f"fold_{axis}0")], prm[:, layout.column(f"fold_{axis}1")]
            bad = (f0 != f0.floor()) | (f1 != f1.floor())
            if bad.any():
                i = first(bad)
                raise ValueError(
                    f"sample {i}: fold box [{float(f0[i])}, {float(f1[i])}) along {axis} must have integer bounds"
                )


def _prepare(
    data: torch.Tensor,
    offsets: torch.Tensor,
    shapes: torch.Tensor,
    params: torch.Tensor,
    out_size: tuple[int, int],
    scale: Sequence[float] | torch.Tensor,
    bias: Sequence[float] | torch.Tensor,
    out_dtype: torch.dtype,
    channels_last: bool,
    out: torch.Tensor | None,
    check_values: bool,
    interpolation: int = layout.FILTER_BILINEAR,
    source: int = layout.SOURCE_INTERLEAVED,
    placement: torch.Tensor | None = None,
    pad_mode: int = layout.PAD_NONE,
    fill: Sequence[float] | torch.Tensor | None = None,
) -> _Args:
    data = _require_tensor("data", data)
    offsets = _require_tensor("offsets", offsets)
    shapes = _require_tensor("shapes", shapes)
    params = _require_tensor("params", params)

    if data.dtype != torch.uint8:
        raise TypeError(f"data must be uint8 (decoded pixels), got {data.dtype}")
    if data.dim() != 1:
        raise ValueError(f"data must be 1-D (images packed back to back), got shape {tuple(data.shape)}")
    if params.dim() != 2 or params.shape[1] != layout.NUM_PARAMS:
        raise ValueError(f"params must have shape [B, {layout.NUM_PARAMS}], got {tuple(params.shape)}")
    B = params.shape[0]
    if params.dtype != torch.float32:
        raise TypeError(f"params must be float32, got {params.dtype}")
    if offsets.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"offsets must be int64 (or int32), got {offsets.dtype}")
    if offsets.shape != (B,):
        raise ValueError(f"offsets must have shape [B]=[{B}] to match params, got {tuple(offsets.shape)}")
    if shapes.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"shapes must be int32 or int64, got {shapes.dtype}")
    if shapes.shape != (B, 3):
        per = {layout.SOURCE_YCBCR: "H, W, S", layout.SOURCE_MIXED: "H, W, C or PLANAR + S",
               layout.SOURCE_NV12: "H, W, NV12 code"}.get(source, "H, W, C")
        raise ValueError(f"shapes must have shape [B, 3]=[{B}, 3] ({per} per image), got {tuple(shapes.shape)}")
    device = data.device
    for name, t in (("offsets", offsets), ("shapes", shapes), ("params", params)):
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but data is on {device}; move them to the same device")

    if (
        not isinstance(out_size, (tuple, list))
        or len(out_size) != 2
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in out_size)
    ):
        raise TypeError(f"out_size must be a pair of ints (out_h, out_w), got {out_size!r}")
    out_h, out_w = out_size
    if out_h < 0 or out_w < 0:
        raise ValueError(f"out_size must be non-negative, got {tuple(out_size)}")
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {[str(d) for d in _OUT_DTYPES]}, got {out_dtype}")

    shape = (B, 3, out_h, out_w)
    if placement is not None:
        placement, out = _prepare_placement(placement, out, B, out_h, out_w, out_dtype, device)
    elif out is None:
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        out = torch.empty(shape, dtype=out_dtype, device=device, memory_format=fmt)
    else:
        out = _require_tensor("out", out)
        if tuple(out.shape) != shape:
            raise ValueError(f"out must have shape {list(shape)}, got {list(out.shape)}")
        if out.dtype != out_dtype:
            raise TypeError(f"out has dtype {out.dtype} but out_dtype is {out_dtype}")
        if out.device != device:
            raise ValueError(f"out is on {out.device} but data is on {device}")

    affine = torch.cat([_affine_values("scale", scale, device), _affine_values("bias", bias, device)])
    if pad_mode == layout.PAD_CONSTANT:
        fill_t = _affine_values("fill", (0.0, 0.0, 0.0) if fill is None else fill, device)
    elif fill is not None:
        raise ValueError(f"fill is read with pad_mode='constant' only, got pad_mode={layout.pad_mode_name(pad_mode)!r}")
    else:
        fill_t = None
    offsets = offsets.to(torch.int64).contiguous()
    shapes = shapes.contiguous()
    params = params.contiguous()
    if check_values and B > 0:
        _check_values(data, offsets, shapes, params, interpolation, source, pad_mode)
    return _Args(data, offsets, shapes, params, affine, out_h, out_w, out, source, placement, pad_mode, fill_t)


def placement_extent(placement: torch.Tensor) -> int:
    """Elements a 1-D output buffer needs for ``placement`` (host rows): one past the
    farthest element any sample writes (0 for an empty batch)."""
    p = placement.to(device="cpu", dtype=torch.int64)
    if p.shape[0] == 0:
        return 0
    h, w = p[:, layout.PLACE_H], p[:, layout.PLACE_W]
    last = (p[:, layout.PLACE_OFFSET] + 2 * p[:, layout.PLACE_STRIDE_C] + (h - 1) * p[:, layout.PLACE_STRIDE_H]
            + (w - 1) * p[:, layout.PLACE_STRIDE_W])
    empty = (h <= 0) | (w <= 0)
    return int(torch.where(empty, 0, last + 1).max())


def _prepare_placement(placement: object, out: torch.Tensor | None, B: int, out_h: int, out_w: int,
                       out_dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Check a variable-size output's ``placement`` (and ``out``, allocated when None):
    (placement as contiguous int64, the 1-D output buffer). Per-sample values are read
    only from a host placement (a device one would synchronise)."""
    placement = _require_tensor("placement", placement)
    if placement.dtype != torch.int64 or tuple(placement.shape) != (B, layout.PLACEMENT_WIDTH):
        raise ValueError(f"placement must be int64 [B, {layout.PLACEMENT_WIDTH}]=[{B}, {layout.PLACEMENT_WIDTH}] "
                         f"({', '.join(layout.PLACEMENT_COLUMNS)} per sample), got {placement.dtype} "
                         f"{tuple(placement.shape)}")
    host = placement.device.type == "cpu"
    if out is None:
        if not host:
            raise ValueError("a placement on the device needs out= (sizing the buffer would read the placement "
                             "back to the host)")
        out = torch.empty(placement_extent(placement), dtype=out_dtype, device=device)
    out = _require_tensor("out", out)
    if out.dim() != 1 or not out.is_contiguous():
        raise ValueError(f"with a placement, out must be a contiguous 1-D buffer, got shape {tuple(out.shape)}")
    if out.dtype != out_dtype:
        raise TypeError(f"out has dtype {out.dtype} but out_dtype is {out_dtype}")
    if out.device != device:
        raise ValueError(f"out is on {out.device} but data is on {device}")
    if host and B > 0:
        p = placement
        h, w = p[:, layout.PLACE_H], p[:, layout.PLACE_W]
        strides = p[:, [layout.PLACE_STRIDE_C, layout.PLACE_STRIDE_H, layout.PLACE_STRIDE_W]]
        for bad, what in (((h < 0) | (w < 0), "height and width must be >= 0"),
                          ((h > out_h) | (w > out_w), f"size must fit in out_size {(out_h, out_w)} (the grid)"),
                          ((p[:, layout.PLACE_OFFSET] < 0) | (strides < 0).any(dim=1),
                           "offset and strides must be >= 0")):
            if bad.any():
                i = int(bad.nonzero()[0, 0])
                raise ValueError(f"sample {i}: placement {p[i].tolist()}: {what}")
        if placement_extent(p) > out.numel():
            raise ValueError(f"placement writes up to element {placement_extent(p)} but out has {out.numel()}")
    return placement.to(device).contiguous(), out


# --------------------------------------------------------------------------- #
# Triton launcher
# --------------------------------------------------------------------------- #


def fused_resized_crop(
    data: torch.Tensor,
    offsets: torch.Tensor,
    shapes: torch.Tensor,
    params: torch.Tensor,
    out_size: tuple[int, int],
    scale: Sequence[float] | torch.Tensor,
    bias: Sequence[float] | torch.Tensor,
    *,
    out_dtype: torch.dtype = torch.float32,
    channels_last: bool = False,
    antialias: bool = True,
    quantize: bool = True,
    interpolation: int | str = layout.FILTER_BILINEAR,
    erase_value: Sequence[float] | torch.Tensor | None = None,
    erase_random: bool = False,
    source: int | str = "interleaved",
    placement: torch.Tensor | None = None,
    pad_mode: int | str = "none",
    fill: Sequence[float] | torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    launch: _triton.LaunchSettings | None = None,
) -> torch.Tensor:
    """Crop, flip, pad, resize and normalise a ragged batch of images in one kernel.

    Args:
        data: 1-D ``uint8`` tensor holding the decoded images back to back, each
            HWC contiguous (or, with ``source="ycbcr"``, each its Y, Cb, Cr planes;
            with ``source="nv12"``, each an NV12 frame).
        offsets: ``int64 [B]``, element offset of image ``b`` in ``data``.
        shapes: ``int32``/``int64 [B, 3]``, ``(H, W, C)`` of image ``b``; ``C`` is
            1 (replicated to 3 channels) or 3. With ``source="ycbcr"``,
            ``(H, W, S)``: ``S`` is the chroma subsampling code (``layout.S_444``,
            ``S_422``, ``S_420``, ``S_440`` or ``S_GRAY``). With ``source="nv12"``,
            ``(H, W, F)``: ``F`` is the frame's colour format,
            ``layout.nv12_code(matrix, full_range)``.
        params: ``float32 [B, layout.NUM_PARAMS]`` per-sample parameters, the
            columns named in ``csrc_triton/layout.py`` (geometry: origin, step,
            clamp region ``[lo, hi)`` and valid window per axis; see
            ``stages/sample.py``). ``lo``/``hi`` are integers, normally ``0 <= lo < hi <= H`` (resp.
            ``W``); a region reaching outside the image is clamped to it,
            keeping at least one pixel.
        out_size: ``(out_h, out_w)`` for the whole batch; with ``placement``, the
            largest sample's (the grid is sized over it; every sample fits in it).
        scale: 3 per-channel multipliers applied after resampling.
        bias: 3 per-channel addends applied after ``scale``. ``scale`` and
            ``bias`` may be tensors on any device.
        out_dtype: ``uint8`` (rounded, saturated), ``float32``, ``float16`` or
            ``bfloat16``.
        channels_last: allocate the output in channels-last memory format
            (ignored when ``out`` is given).
        antialias: widen the filter when downscaling (torchvision's default;
            the nearest filters ignore it).
        quantize: round the resampled value to an integer in ``[0, 255]`` before
            ``scale``/``bias``, as torchvision does when resizing a uint8 image.
        interpolation: a ``layout.FILTER_*`` code or its name (``"bilinear"``,
            ``"bicubic"``, ``"nearest"``, ``"nearest-exact"``), the math of
            torchvision's ``resize`` in that mode (see ``stages/sample.py``);
            ``layout.FILTER_PER_SAMPLE`` (``"per-sample"``) reads each sample's
            code from its ``filter`` column.
        erase_value: RandomErasing with a constant: inside each sample's box
            ``[erase_y0, erase_y1) x [erase_x0, erase_x1)`` of the output (epilogue
            columns of ``params``, truncated to integers; empty when ``erase_y1 <=
            erase_y0``) the value after ``scale``/``bias`` is replaced by
            ``erase_value[c]`` (3 floats, in the output's value space) before the cast.
        erase_random: erase with standard normal noise instead (Philox keyed by the
            sample's ``erase_seed``, counter ``(c * out_h + y) * out_w + x``; see
            ``reference.philox_normal``). Without either, nothing is erased.
        source: how ``data`` holds a sample (``layout.SOURCES``): ``"interleaved"``
            (HWC pixels) or ``"ycbcr"``, a JPEG's planes before chroma upsampling
            and colour conversion: the Y plane (``H x W``), then Cb and Cr (each
            ``ceil(H / vf) x ceil(W / hf)``), contiguous (``layout.py`` has the
            layout). The kernel reconstructs the RGB pixels libjpeg(-turbo) decodes
            by default (fancy upsampling, ``ycc_rgb_convert``), bit for bit, and
            resizes them: the result equals that of the interleaved source on
            :func:`csrc_triton.reference.ycbcr_planes_to_rgb`'s images.
            ``"mixed"``: either, per sample (``shapes[:, 2]`` 1 or 3: interleaved;
            ``layout.PLANAR`` + a subsampling code: planar). ``"nv12"``: NV12 video
            frames, the Y plane (``H x W``) then the chroma plane (``ceil(H / 2)``
            rows of ``ceil(W / 2)`` pairs Cb, Cr), contiguous, no pitch
            (``layout.nv12_size`` bytes); the chroma is upsampled bilinearly with
            MPEG-2 siting and converted with the frame's matrix (BT.601 or BT.709)
            and range (limited or full), in integers: the result equals that of the
            interleaved source on :func:`csrc_triton.reference.nv12_to_rgb`'s images.
            NV12 frames do not mix with other samples in one batch.
        placement: a variable-size output: ``int64 [B, layout.PLACEMENT_WIDTH]``,
            per sample ``(offset, height, width, stride_c, stride_h, stride_w)``
            (``layout.PLACEMENT_COLUMNS``): sample ``b`` is written as the ``[3,
            height, width]`` image at element ``offset`` of ``out`` (1-D) with those
            element strides, its output pixel ``(y, x)`` mapped by its ``params``
            row as in a batch of its own (the erase noise counts over its own size).
            ``height``/``width`` are normally the sample's ``out_h``/``out_w``
            columns. Without ``out``, a host placement sizes a new buffer
            (:func:`placement_extent`); a device placement needs ``out``. Samples must
            not overlap (not checked). ``channels_last`` is ignored (the strides say it).
        pad_mode: padding before the resampling (``layout.PAD_MODES``): ``"none"`` (the
            default: the clamp region is forced inside the image, pixels outside the
            valid window are 0); ``"edge"``, ``"reflect"``, ``"symmetric"``: the clamp
            region may reach past the image, and each tap index is folded into the
            sample's fold box (``fold_*`` columns of ``params``, integers) as
            torchvision's ``pad`` of that mode reads it; ``"constant"``: taps outside
            the fold box, and pixels outside the valid window, read ``fill``.
        fill: with ``pad_mode="constant"``, 3 floats (default 0), the padding value per
            channel on the 0..255 scale of the resampled values (before ``scale``/``bias``).
        out: optional preallocated ``[B, 3, out_h, out_w]`` output of dtype
            ``out_dtype`` on the data's device; any strides. With ``placement``, the
            contiguous 1-D buffer the samples are written into.
        launch: tile shape and warps to use instead of
            :func:`csrc_triton._triton.resample_settings`'s choice (for tuning sweeps).

    Returns:
        ``[B, 3, out_h, out_w]`` tensor (``out`` when given); with ``placement``, the
        1-D buffer.

    Raises:
        TypeError / ValueError: for unsupported or inconsistent arguments.
        RuntimeError: when Triton is missing, or for CPU tensors without
            ``TRITON_INTERPRET=1``.

    Per-sample values (``shapes``, ``offsets``, ``params``) are only checked when
    they are on the CPU: reading them back from a GPU would synchronise. On a GPU
    the kernel keeps every read inside its own image, so bad values give wrong
    pixels but never an illegal memory access.
    """
    device = data.device if isinstance(data, torch.Tensor) else None
    code = layout.filter_code(interpolation)
    a = _prepare(
        data, offsets, shapes, params, out_size, scale, bias, out_dtype, channels_last, out,
        check_values=device is not None and device.type == "cpu", interpolation=code,
        source=layout.source_code(source), placement=placement, pad_mode=layout.pad_mode_code(pad_mode), fill=fill,
    )
    B = a.params.shape[0]
    mode = reference.erase_mode(erase_value, erase_random)
    erase_t = (_affine_values("erase_value", erase_value, a.data.device) if mode == reference.ERASE_VALUE
               else a.affine)
    if B == 0 or a.out_h == 0 or a.out_w == 0:
        return a.out
    kernel = _triton.kernel("_resized_crop_kernel", "resized_crop_kernel", a.data.device,
                            "fused_resized_crop", "resized_crop_reference")
    s = launch if launch is not None else _triton.resample_settings(a.out_h, a.out_w)
    n_tiles_w = _triton.cdiv(a.out_w, s.block_w)
    n_tiles = _triton.cdiv(a.out_h, s.block_h) * n_tiles_w
    grid = (B * n_tiles,)
    if a.placement is None:
        so, placement_t = a.out.stride(), a.params  # placement_t: any pointer, never read
    else:
        so, placement_t = (0, 0, 0, 0), a.placement  # each sample's strides are in its placement row
    # Triton launches on the current CUDA device, which need not be the data's.
    with torch.cuda.device(a.data.device) if a.data.device.type == "cuda" else nullcontext():
        kernel[grid](
            a.data, a.offsets, a.shapes, a.params, a.affine, erase_t, placement_t,
            a.fill if a.fill is not None else a.affine, a.out,  # the affine: any pointer, never read
            a.data.numel(), a.out_h, a.out_w, n_tiles_w, n_tiles,
            so[0], so[1], so[2], so[3],
            FILTER=code,
            # the nearest filters ignore it: one compiled variant each
            ANTIALIAS=bool(antialias) and code not in (layout.FILTER_NEAREST, layout.FILTER_NEAREST_EXACT),
            QUANTIZE=bool(quantize),
            OUT_UINT8=out_dtype == torch.uint8,
            ERASE=mode,
            SOURCE=a.source,
            RAGGED=a.placement is not None,
            PAD_MODE=a.pad_mode,
            CACHE_KEY=_triton.cache_key(),
            BLOCK_H=s.block_h,
            BLOCK_W=s.block_w,
            num_warps=s.num_warps,
            **s.options(),
        )
    return a.out


# --------------------------------------------------------------------------- #
# Plain-torch reference (also the CPU execution path)
# --------------------------------------------------------------------------- #


def resized_crop_reference(
    data: torch.Tensor,
    offsets: torch.Tensor,
    shapes: torch.Tensor,
    params: torch.Tensor,
    out_size: tuple[int, int],
    scale: Sequence[float] | torch.Tensor,
    bias: Sequence[float] | torch.Tensor,
    *,
    out_dtype: torch.dtype = torch.float32,
    channels_last: bool = False,
    antialias: bool = True,
    quantize: bool = True,
    interpolation: int | str = layout.FILTER_BILINEAR,
    erase_value: Sequence[float] | torch.Tensor | None = None,
    erase_random: bool = False,
    source: int | str = "interleaved",
    placement: torch.Tensor | None = None,
    pad_mode: int | str = "none",
    fill: Sequence[float] | torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Plain-torch twin of :func:`fused_resized_crop` (same arguments and result).

    The kernel's stages, one sample at a time, in float32 (``reference.py``);
    works on any device and is the library's CPU path. Per-sample values are
    always validated here (they are read to the host anyway).
    """
    code = layout.filter_code(interpolation)
    a = _prepare(
        data, offsets, shapes, params, out_size, scale, bias, out_dtype, channels_last, out,
        check_values=True, interpolation=code, source=layout.source_code(source), placement=placement,
        pad_mode=layout.pad_mode_code(pad_mode), fill=fill,
    )
    B = a.params.shape[0]
    mode = reference.erase_mode(erase_value, erase_random)
    value = _affine_values("erase_value", erase_value, a.data.device) if mode == reference.ERASE_VALUE else None
    if B == 0 or a.out_h == 0 or a.out_w == 0:
        return a.out
    shapes_l = a.shapes.tolist()
    offsets_l = a.offsets.tolist()
    params = reference.clamp_region(a.params, a.shapes, a.pad_mode)
    y, x = layout.axis("y"), layout.axis("x")
    regions = params[:, [y.lo, y.hi, x.lo, x.hi]].to(torch.int64).tolist()
    folds = (params[:, [layout.FOLD_Y0, layout.FOLD_Y1, layout.FOLD_X0, layout.FOLD_X1]].to(torch.int64).tolist()
             if a.pad_mode != layout.PAD_NONE else [None] * B)
    if code == layout.FILTER_PER_SAMPLE:
        codes = params[:, layout.FILTER].to(torch.int64).tolist()
    else:
        codes = [code] * B
    if a.placement is None:
        sizes = [(a.out_h, a.out_w)] * B
        dst = [a.out[b].permute(1, 2, 0) for b in range(B)]
    else:
        sizes, dst = _placed(a.out, a.placement)
    # The taps of every sample, computed for all samples of one filter (and one output
    # height, resp. width) at once.
    taps_y: list[tuple] = [()] * B
    taps_x: list[tuple] = [()] * B
    for axis, dim, taps in (("y", 0, taps_y), ("x", 1, taps_x)):
        for f, n_out in sorted({(codes[b], sizes[b][dim]) for b in range(B)}):
            members = [b for b in range(B) if codes[b] == f and sizes[b][dim] == n_out]
            idx, w, t = reference.axis_taps(params[members], axis, n_out, antialias, f)
            for j, b in enumerate(members):
                taps[b] = (idx[j, :, : t[j]], w[j, :, : t[j]])
    scale_t, bias_t = a.affine[:3], a.affine[3:]
    for b in range(B):
        if sizes[b][0] == 0 or sizes[b][1] == 0:
            continue
        kind = a.source
        if kind == layout.SOURCE_MIXED:
            kind = layout.SOURCE_YCBCR if shapes_l[b][2] >= layout.PLANAR else layout.SOURCE_INTERLEAVED
        if a.pad_mode != layout.PAD_NONE:
            pixels = reference.source_folded(a.data, offsets_l[b], shapes_l[b], regions[b], folds[b], a.pad_mode,
                                             a.fill, kind)
        else:
            pixels = reference.READERS[kind](a.data, offsets_l[b], shapes_l[b], regions[b])
        v = reference.sample(pixels, *taps_y[b], *taps_x[b], quantize and codes[b] == layout.FILTER_BICUBIC)
        if a.pad_mode == layout.PAD_CONSTANT:
            v = reference.fill_outside(v, params[b], a.fill)
        v = reference.colour(v)
        reference.epilogue(v, scale_t, bias_t, quantize, dst[b], reference.erase_args(a.params, b, mode, value))
    return a.out


def _placed(out: torch.Tensor, placement: torch.Tensor) -> tuple[list[tuple[int, int]], list[torch.Tensor]]:
    """Per sample of a variable-size output: its ``(height, width)`` and its HWC view of ``out``."""
    rows = placement.cpu().tolist()
    sizes, views = [], []
    for r in rows:
        h, w = r[layout.PLACE_H], r[layout.PLACE_W]
        sc, sh, sw = r[layout.PLACE_STRIDE_C], r[layout.PLACE_STRIDE_H], r[layout.PLACE_STRIDE_W]
        sizes.append((h, w))
        views.append(out.as_strided((h, w, 3), (sh, sw, sc), r[layout.PLACE_OFFSET]) if h and w else None)
    return sizes, views
