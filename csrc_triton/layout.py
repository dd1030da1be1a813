"""The per-sample parameter layout: one row of float32 columns per sample.

Every sample of a batch carries its own parameters in a row of the ``params``
tensor the fused kernel reads. The row is made of named blocks, one per kernel
stage that needs per-sample values, and every block of named columns. This
module is the only place that fixes the order: the transforms that draw the
values, the launcher that checks them, the Triton stages that load them and the
plain-torch reference all use the names below (``layout.ORIGIN_Y``,
``layout.axis("x")``), never a bare number.

Blocks:

* ``geometry``: how an output pixel maps back to the source, per axis
  ``source = origin + step * (out + 0.5)``; the clamp region ``[lo, hi)`` of the
  source the resampling may read (the image border torchvision's resize sees),
  the valid window ``[valid0, valid1)`` of the output (outside it, padding),
  and ``filter``, the sample's interpolation code (``FILTER_*`` below), read
  only by a kernel compiled with ``FILTER_PER_SAMPLE``.
* ``source``: per-sample values of the source stage (how a sample's pixels are read):
  the **fold box** ``[fold_y0, fold_y1) x [fold_x0, fold_x1)`` of the source, read
  only by a kernel compiled with a padding mode (``PAD_*`` below, the ``PAD_MODE``
  switch). Such a pipeline pads with more than zeros (a fill, or torchvision's
  ``edge``/``reflect``/``symmetric`` modes) before it resamples: the clamp region
  then reaches past the image to the padded extent, and every tap outside the fold
  box (the image as the padding step saw it) is folded back into it (``edge``:
  clamped; ``reflect``: mirrored without repeating the border; ``symmetric``:
  mirrored repeating it) or reads the fill (``constant``), so that a resize after
  the padding resamples the padded image, as torchvision does. Samples that pad
  nothing keep the fold box at their image box ``[0, H) x [0, W)``.
* ``colour``: the per-sample colour program (jitter factors, grayscale, ...).
* ``epilogue``: per-sample values applied at the output size: the RandomErasing
  box ``[erase_y0, erase_y1) x [erase_x0, erase_x1)`` of the output (empty when
  ``erase_y1 <= erase_y0``) and ``erase_seed``, the per-sample key of the
  ``value="random"`` noise.
* ``output``: ``out_h``, ``out_w``, the sample's own output size (integers). With a
  fixed output size they equal it and no kernel reads them; when the size varies
  from sample to sample they say, on the host, how large each sample's output is
  (the batch's **placement** below is computed from them) and whether a batch's
  samples share one size.

``colour`` is empty while no stage reads per-sample values there; adding a column
is a change to this file only, and ``NUM_PARAMS`` follows.

**Placement** of a variable-size output (the third table): when the samples of a
batch have different output sizes, the fused kernel writes every sample into one
1-D output buffer, sample ``b`` as the ``[3, height, width]`` image at element
``offset`` with element strides ``(stride_c, stride_h, stride_w)``: an int64 row of
``PLACEMENT_WIDTH`` columns per sample, ``placement[B, PLACEMENT_WIDTH]``. A side
tensor rather than ``params`` columns: offsets pass float32's 2**24 exact integers
in any real batch. The strides let one kernel write a list of contiguous CHW images
(``stride_c = height * width``), channels-last ones (``stride_c = 1``) or a padded
``[B, 3, H, W]`` batch (``stride_h = W``): the caller decides, the kernel only reads.

The second table of this module is the **augment program**: ops that need the
whole output-size image (auto-augment policies, warps after the resize,
photometric ops, reductions) run after the fused kernel as a sequence of
*slots*, each slot one op per sample. A slot's parameters are a row of
``SLOT_WIDTH`` float32 columns, ``slots[B, K, SLOT_WIDTH]`` for ``K`` slots;
``SLOT_OP`` holds the op code (``OP_*`` below) and ``SLOT_M0..SLOT_M7`` its
arguments, named per op in ``OP_ARGS``. ``SLOT_INTERP`` and ``SLOT_FILL0..2``
are the interpolation (``FILTER_NEAREST`` or ``FILTER_BILINEAR``) and fill of
the warps: ``fill0..2`` are the per-channel fill values (0..255) that
torchvision's ``fill=[f0, f1, f2]`` gives; ``fill0 = NaN`` stands for
``fill=None`` (no mask channel: bilinear taps outside the image read 0 and are
not re-filled), which is what the auto-augment policies use by default.

**Sources** (``SOURCE_*``, a compile-time switch of the fused resized-crop kernel)
say how the decoded batch ``data`` (1-D uint8) holds sample ``b``, which starts at
``offsets[b]``:

* ``SOURCE_INTERLEAVED``: an HWC image, ``shapes[b] = (H, W, C)`` with ``C`` 1
  (grayscale, read as R = G = B) or 3 (RGB); ``H * W * C`` bytes.
* ``SOURCE_YCBCR``: a JPEG's planes as decoded before upsampling and colour
  conversion. ``shapes[b] = (H, W, S)`` with ``S`` a chroma subsampling code
  (``S_*`` below, numbered as nvJPEG's ``nvjpegChromaSubsampling_t``). The Y plane
  (``H x W``, rows ``W`` bytes apart) comes first, then Cb, then Cr, each ``ch x cw``
  with ``ch = ceil(H / vf)``, ``cw = ceil(W / hf)`` (rows ``cw`` bytes apart), all
  contiguous: :func:`planar_size` bytes. ``(hf, vf)`` is ``SUBSAMPLING[S]``:
  ``S_444`` (1, 1), ``S_422`` (2, 1), ``S_420`` (2, 2), ``S_440`` (1, 2);
  ``S_GRAY`` has the Y plane only (R = G = B = Y). The source stage turns this into
  RGB exactly as libjpeg(-turbo) does by default: "fancy" (triangle) chroma
  upsampling, then the JFIF YCbCr -> RGB conversion in 16-bit fixed point (the
  formulas are above ``reference.ycbcr_planes_to_rgb``).
* ``SOURCE_MIXED``: each sample either way: ``shapes[b] = (H, W, C)`` with ``C`` 1 or
  3 for an interleaved sample, ``(H, W, PLANAR + S)`` for a planar one. The kernel
  picks the reader per sample (one program reads one sample, so nothing diverges).
  NV12 frames do not mix with these: a batch of them is ``SOURCE_NV12``.
* ``SOURCE_NV12``: a video frame as NVDEC decodes it, 4:2:0 with interleaved chroma.
  ``shapes[b] = (H, W, F)`` with ``F`` the frame's colour format (``NV12_*`` below):
  its matrix coefficients (``NV12_BT601`` or ``NV12_BT709``), plus ``NV12_FULL_RANGE``
  for full ("pc", 0..255) range, else limited ("tv": Y 16..235, Cb, Cr 16..240);
  :func:`nv12_code` builds it. The Y plane comes first, ``H`` rows of ``W`` bytes,
  then the chroma plane, ``ch = ceil(H / 2)`` rows of ``2 * cw`` bytes, ``cw =
  ceil(W / 2)``, each row ``Cb0 Cr0 Cb1 Cr1 ...``; both tightly packed (no pitch:
  NVDEC's pitched surfaces are copied row by row into ``data``), contiguous:
  :func:`nv12_size` bytes. The source stage upsamples the chroma bilinearly with
  MPEG-2/H.264's default ("left") siting, chroma sample ``(r, k)`` at luma position
  ``(2 r + 1/2, 2 k)``: vertically weights 3/4 and 1/4 of the two nearest chroma rows,
  horizontally the co-sited sample on even columns, the mean of its two neighbours on
  odd ones, indices clamped to the plane (the sums are exact, in eighths). Then
  Y'CbCr -> R'G'B' with the matrix and range (:func:`nv12_coefficients`) in
  ``NV12_FRAC_BITS``-bit fixed point, rounded half up and clamped to ``0..255`` once:
  each source pixel is an integer RGB value, the same in the kernel and the
  reference (``reference.nv12_to_rgb``), bit for bit.

Interpolation codes (``FILTER_*``) are compile-time switches of the samplers;
``FILTER_PER_SAMPLE`` compiles all of them and picks one per sample from the
``filter`` column (one program works on one sample, so the branch never diverges).

Padding modes (``PAD_*``) are the compile-time ``PAD_MODE`` switch of the fused
kernel, one per pipeline: ``PAD_NONE`` (the default: taps stay inside the image,
the fold columns are not read, pixels outside the valid window are 0),
``PAD_CONSTANT`` (taps outside the fold box and pixels outside the valid window
read the pipeline's fill, 3 values passed beside ``params``), ``PAD_EDGE``,
``PAD_REFLECT``, ``PAD_SYMMETRIC`` (taps outside the fold box folded into it;
pixels outside the valid window 0).
"""
from __future__ import annotations

import numbers
from typing import NamedTuple

__all__ = [
    "AxisColumns", "BLOCKS", "Block", "COLUMNS", "NUM_PARAMS", "axis", "block", "column",
    "ORIGIN_Y", "ORIGIN_X", "STEP_Y", "STEP_X", "LO_Y", "HI_Y", "LO_X", "HI_X",
    "VALID_Y0", "VALID_Y1", "VALID_X0", "VALID_X1", "FILTER",
    "FOLD_Y0", "FOLD_Y1", "FOLD_X0", "FOLD_X1",
    "ERASE_Y0", "ERASE_Y1", "ERASE_X0", "ERASE_X1", "ERASE_SEED", "OUT_H", "OUT_W",
    "PLACEMENT_COLUMNS", "PLACEMENT_WIDTH", "PLACE_OFFSET", "PLACE_H", "PLACE_W", "PLACE_STRIDE_C",
    "PLACE_STRIDE_H", "PLACE_STRIDE_W", "placement_column",
    "FILTER_BILINEAR", "FILTER_BICUBIC", "FILTER_NEAREST", "FILTER_NEAREST_EXACT", "FILTER_PER_SAMPLE",
    "FILTERS", "filter_code", "filter_name",
    "PAD_NONE", "PAD_CONSTANT", "PAD_EDGE", "PAD_REFLECT", "PAD_SYMMETRIC", "PAD_MODES", "pad_mode_code",
    "pad_mode_name",
    "SOURCE_INTERLEAVED", "SOURCE_YCBCR", "SOURCE_MIXED", "SOURCE_NV12", "PLANAR", "SOURCES", "source_code",
    "S_444", "S_422", "S_420", "S_440", "S_GRAY", "SUBSAMPLING", "SUBSAMPLINGS", "chroma_shape", "planar_size",
    "NV12_BT601", "NV12_BT709", "NV12_FULL_RANGE", "NV12_MATRIX_MASK", "NV12_CODES", "NV12_MATRICES", "NV12_KR_KB",
    "NV12_FRAC_BITS", "Nv12Coefficients", "nv12_code", "nv12_format", "nv12_chroma_shape", "nv12_size",
    "nv12_coefficients",
    "SLOT_COLUMNS", "SLOT_WIDTH", "SLOT_OP", "SLOT_M0", "SLOT_M1", "SLOT_M2", "SLOT_M3", "SLOT_M4",
    "SLOT_M5", "SLOT_M6", "SLOT_M7", "SLOT_INTERP", "SLOT_FILL0", "SLOT_FILL1", "SLOT_FILL2",
    "OPS", "OP_ARGS", "op_code", "slot_column",
]


class Block(NamedTuple):
    """A run of named columns, starting at column ``start`` of a row."""

    name: str
    columns: tuple[str, ...]
    start: int

    @property
    def stop(self) -> int:
        return self.start + len(self.columns)


def _stack(*blocks: tuple[str, tuple[str, ...]]) -> tuple[Block, ...]:
    out, start = [], 0
    for name, columns in blocks:
        out.append(Block(name, columns, start))
        start += len(columns)
    return tuple(out)


BLOCKS: tuple[Block, ...] = _stack(
    ("geometry", ("origin_y", "origin_x", "step_y", "step_x",
                  "lo_y", "hi_y", "lo_x", "hi_x",
                  "valid_y0", "valid_y1", "valid_x0", "valid_x1", "filter")),
    ("source", ("fold_y0", "fold_y1", "fold_x0", "fold_x1")),
    ("colour", ()),
    ("epilogue", ("erase_y0", "erase_y1", "erase_x0", "erase_x1", "erase_seed")),
    ("output", ("out_h", "out_w")),
)

#: column name -> index in a row
COLUMNS: dict[str, int] = {c: b.start + i for b in BLOCKS for i, c in enumerate(b.columns)}

#: width of a row (``params`` is ``[B, NUM_PARAMS]`` float32)
NUM_PARAMS: int = sum(len(b.columns) for b in BLOCKS)


def column(name: str) -> int:
    """Index of the column ``name``; a KeyError names the known columns."""
    try:
        return COLUMNS[name]
    except KeyError:
        raise KeyError(f"no parameter column {name!r}; the layout has {list(COLUMNS)}") from None


def block(name: str) -> Block:
    """The block ``name`` (``geometry``, ``source``, ``colour``, ``epilogue``, ``output``)."""
    for b in BLOCKS:
        if b.name == name:
            return b
    raise KeyError(f"no parameter block {name!r}; the layout has {[b.name for b in BLOCKS]}")


class AxisColumns(NamedTuple):
    """The geometry columns of one axis."""

    origin: int
    step: int
    lo: int
    hi: int
    valid0: int
    valid1: int


def axis(name: str) -> AxisColumns:
    """Geometry columns of axis ``"y"`` or ``"x"``."""
    if name not in ("y", "x"):
        raise ValueError(f"axis must be 'y' or 'x', got {name!r}")
    return AxisColumns(*(column(f"{c}_{name}") for c in ("origin", "step", "lo", "hi")),
                       column(f"valid_{name}0"), column(f"valid_{name}1"))


# Module constants for the Triton stages, which read columns as `layout.ORIGIN_Y`
# (a Triton function can read a module's attributes, not a dict).
ORIGIN_Y, ORIGIN_X = column("origin_y"), column("origin_x")
STEP_Y, STEP_X = column("step_y"), column("step_x")
LO_Y, HI_Y, LO_X, HI_X = column("lo_y"), column("hi_y"), column("lo_x"), column("hi_x")
VALID_Y0, VALID_Y1 = column("valid_y0"), column("valid_y1")
VALID_X0, VALID_X1 = column("valid_x0"), column("valid_x1")
FILTER = column("filter")
FOLD_Y0, FOLD_Y1 = column("fold_y0"), column("fold_y1")
FOLD_X0, FOLD_X1 = column("fold_x0"), column("fold_x1")
ERASE_Y0, ERASE_Y1 = column("erase_y0"), column("erase_y1")
ERASE_X0, ERASE_X1 = column("erase_x0"), column("erase_x1")
ERASE_SEED = column("erase_seed")
OUT_H, OUT_W = column("out_h"), column("out_w")


# --------------------------------------------------------------------------- #
# Placement of a variable-size output: one int64 row per sample (module docstring)
# --------------------------------------------------------------------------- #

PLACEMENT_COLUMNS: tuple[str, ...] = ("offset", "height", "width", "stride_c", "stride_h", "stride_w")
PLACEMENT_WIDTH: int = len(PLACEMENT_COLUMNS)


def placement_column(name: str) -> int:
    """Index of the placement column ``name``."""
    try:
        return PLACEMENT_COLUMNS.index(name)
    except ValueError:
        raise KeyError(f"no placement column {name!r}; a placement row has {list(PLACEMENT_COLUMNS)}") from None


PLACE_OFFSET, PLACE_H, PLACE_W = (placement_column(n) for n in ("offset", "height", "width"))
PLACE_STRIDE_C, PLACE_STRIDE_H, PLACE_STRIDE_W = (placement_column(n) for n in ("stride_c", "stride_h", "stride_w"))


# --------------------------------------------------------------------------- #
# Interpolation: compile-time codes of the samplers
# --------------------------------------------------------------------------- #

FILTER_BILINEAR = 0  # triangle filter (widened when antialiasing a downscale)
FILTER_BICUBIC = 1  # Keys cubic: a = -0.5 widened when antialiasing (_upsample_bicubic2d_aa), else a = -0.75
FILTER_NEAREST = 2  # torch's "nearest": floor(out * scale)
FILTER_NEAREST_EXACT = 3  # torch's "nearest-exact": floor((out + 0.5) * scale)
FILTER_PER_SAMPLE = -1  # each sample's code is in its ``filter`` column

#: name (torchvision's ``InterpolationMode.value``) -> code
FILTERS: dict[str, int] = {"bilinear": FILTER_BILINEAR, "bicubic": FILTER_BICUBIC,
                           "nearest": FILTER_NEAREST, "nearest-exact": FILTER_NEAREST_EXACT}


def filter_code(interpolation: int | str) -> int:
    """The code of ``interpolation``: a ``FILTER_*`` code, a name of ``FILTERS`` or ``"per-sample"``."""
    if isinstance(interpolation, str):
        if interpolation == "per-sample":
            return FILTER_PER_SAMPLE
        if interpolation in FILTERS:
            return FILTERS[interpolation]
    elif isinstance(interpolation, numbers.Integral) and not isinstance(interpolation, bool):
        if interpolation == FILTER_PER_SAMPLE or interpolation in FILTERS.values():
            return int(interpolation)
    raise ValueError(f"interpolation must be one of {[*FILTERS, 'per-sample']} or its code "
                     f"{[*FILTERS.values(), FILTER_PER_SAMPLE]}, got {interpolation!r}")


def filter_name(code: int) -> str:
    """The name of the code ``code`` (``"per-sample"`` for ``FILTER_PER_SAMPLE``)."""
    for name, c in FILTERS.items():
        if c == code:
            return name
    if code == FILTER_PER_SAMPLE:
        return "per-sample"
    raise ValueError(f"no interpolation code {code!r}")


# --------------------------------------------------------------------------- #
# Padding modes: the PAD_MODE switch of kernel 1 (see the module docstring)
# --------------------------------------------------------------------------- #

PAD_NONE = 0  # taps inside the image; zeros outside the valid window
PAD_CONSTANT = 1  # taps outside the fold box, and pixels outside the valid window, read the fill
PAD_EDGE = 2  # taps outside the fold box read its nearest border pixel
PAD_REFLECT = 3  # mirrored about the border pixel (d c b | a b c d | c b a), torch's "reflect"
PAD_SYMMETRIC = 4  # mirrored repeating the border pixel (c b a | a b c d | d c b)

#: name (torchvision's ``padding_mode``, plus ``"none"``) -> code
PAD_MODES: dict[str, int] = {"none": PAD_NONE, "constant": PAD_CONSTANT, "edge": PAD_EDGE,
                             "reflect": PAD_REFLECT, "symmetric": PAD_SYMMETRIC}


def pad_mode_code(mode: int | str) -> int:
    """The code of ``mode``: a ``PAD_*`` code or a name of ``PAD_MODES``."""
    if isinstance(mode, str) and mode in PAD_MODES:
        return PAD_MODES[mode]
    if isinstance(mode, numbers.Integral) and not isinstance(mode, bool) and mode in PAD_MODES.values():
        return int(mode)
    raise ValueError(f"pad_mode must be one of {list(PAD_MODES)} or its code {list(PAD_MODES.values())}, "
                     f"got {mode!r}")


def pad_mode_name(code: int) -> str:
    """The name of the padding mode ``code``."""
    for name, c in PAD_MODES.items():
        if c == code:
            return name
    raise ValueError(f"no padding mode code {code!r}")


# --------------------------------------------------------------------------- #
# Sources: how kernel 1 reads a sample's decoded pixels (see the module docstring)
# --------------------------------------------------------------------------- #

SOURCE_INTERLEAVED = 0  # HWC uint8, shapes (H, W, C)
SOURCE_YCBCR = 1  # planar Y, Cb, Cr at native chroma resolution, shapes (H, W, S)
# Either, per sample: shapes (H, W, C) with C 1 or 3 for an interleaved sample, (H, W,
# PLANAR + S) for a planar one. A decoded batch mixes them when some of its samples were
# decoded on the CPU (formats nvJPEG does not take, files it rejected).
SOURCE_MIXED = 2
PLANAR = 16  # added to a planar sample's subsampling code in a SOURCE_MIXED batch
SOURCE_NV12 = 3  # NV12 video frames (Y plane, then interleaved CbCr at half size), shapes (H, W, NV12 code)

#: name (the launcher's ``source=`` argument) -> code
SOURCES: dict[str, int] = {"interleaved": SOURCE_INTERLEAVED, "ycbcr": SOURCE_YCBCR, "mixed": SOURCE_MIXED,
                           "nv12": SOURCE_NV12}


def source_code(source: int | str) -> int:
    """The code of ``source``: a ``SOURCE_*`` code or a name of ``SOURCES``."""
    if isinstance(source, str) and source in SOURCES:
        return SOURCES[source]
    if isinstance(source, numbers.Integral) and not isinstance(source, bool) and source in SOURCES.values():
        return int(source)
    raise ValueError(f"source must be one of {list(SOURCES)} or its code {list(SOURCES.values())}, got {source!r}")


# Chroma subsampling codes of the planar YCbCr source: the values of nvJPEG's
# nvjpegChromaSubsampling_t, so that a decoder can pass its own code through.
S_444 = 0
S_422 = 1  # h2v1: chroma at half width
S_420 = 2  # h2v2: half width, half height
S_440 = 3  # h1v2: half height
S_GRAY = 6  # luma only

#: code -> (hf, vf), the horizontal and vertical chroma subsampling factors
#: (``(1, 1)`` for ``S_GRAY``, which has no chroma planes)
SUBSAMPLING: dict[int, tuple[int, int]] = {S_444: (1, 1), S_422: (2, 1), S_420: (2, 2), S_440: (1, 2),
                                           S_GRAY: (1, 1)}

#: name (as ``decode._jpeg_header.JpegInfo.subsampling`` spells it) -> code
SUBSAMPLINGS: dict[str, int] = {"444": S_444, "422": S_422, "420": S_420, "440": S_440, "gray": S_GRAY}


def chroma_shape(H: int, W: int, S: int) -> tuple[int, int]:
    """``(ch, cw)`` of each chroma plane of an ``H x W`` image with subsampling ``S``;
    ``(0, 0)`` for ``S_GRAY``."""
    if S == S_GRAY:
        return 0, 0
    hf, vf = SUBSAMPLING[S]
    return -(-H // vf), -(-W // hf)


def planar_size(H: int, W: int, S: int) -> int:
    """Bytes of an ``H x W`` sample of the planar YCbCr source with subsampling ``S``."""
    ch, cw = chroma_shape(H, W, S)
    return H * W + 2 * ch * cw


# NV12 colour formats: ``shapes[b, 2]`` of a ``SOURCE_NV12`` frame is a matrix code,
# plus NV12_FULL_RANGE for full range (see the module docstring).
NV12_BT601 = 0  # ITU-R BT.601 matrix (SD video, and H.264/HEVC's "unspecified" in practice)
NV12_BT709 = 1  # ITU-R BT.709 matrix (HD video)
NV12_MATRIX_MASK = 1  # the bits of the matrix code
NV12_FULL_RANGE = 2  # flag: full range, Y, Cb, Cr 0..255 ("pc"); without it limited ("tv")
NV12_CODES: tuple[int, ...] = (NV12_BT601, NV12_BT709, NV12_BT601 | NV12_FULL_RANGE, NV12_BT709 | NV12_FULL_RANGE)

#: name (as FFmpeg's ``colorspace`` spells it) -> matrix code
NV12_MATRICES: dict[str, int] = {"bt601": NV12_BT601, "bt709": NV12_BT709}

#: matrix code -> (Kr, Kb), the luma weights of red and blue (Kg = 1 - Kr - Kb)
NV12_KR_KB: dict[int, tuple[float, float]] = {NV12_BT601: (0.299, 0.114), NV12_BT709: (0.2126, 0.0722)}

#: fractional bits of the fixed-point conversion (every sum stays below 2**30)
NV12_FRAC_BITS = 20


def nv12_code(matrix: int | str, full_range: bool) -> int:
    """The ``shapes[b, 2]`` code of an NV12 frame with ``matrix`` (``NV12_BT601``,
    ``NV12_BT709`` or a name of ``NV12_MATRICES``) and range (full when ``full_range``)."""
    if isinstance(matrix, str) and matrix in NV12_MATRICES:
        m = NV12_MATRICES[matrix]
    elif isinstance(matrix, numbers.Integral) and not isinstance(matrix, bool) and matrix in NV12_MATRICES.values():
        m = int(matrix)
    else:
        raise ValueError(f"matrix must be one of {list(NV12_MATRICES)} or its code {list(NV12_MATRICES.values())}, "
                         f"got {matrix!r}")
    return m | (NV12_FULL_RANGE if full_range else 0)


def nv12_format(code: int) -> tuple[int, bool]:
    """``(matrix, full_range)`` of the NV12 code ``code``; a ValueError for an unknown code."""
    if isinstance(code, bool) or not isinstance(code, numbers.Integral) or code not in NV12_CODES:
        raise ValueError(f"no NV12 colour format code {code!r}: codes are {list(NV12_CODES)} (NV12_BT601 or "
                         f"NV12_BT709, plus NV12_FULL_RANGE={NV12_FULL_RANGE} for full range)")
    return int(code) & NV12_MATRIX_MASK, bool(code & NV12_FULL_RANGE)


def nv12_chroma_shape(H: int, W: int) -> tuple[int, int]:
    """``(ch, cw)``: chroma samples of an ``H x W`` NV12 frame per column and per row
    (its chroma plane is ``ch`` rows of ``2 * cw`` bytes)."""
    return -(-H // 2), -(-W // 2)


def nv12_size(H: int, W: int) -> int:
    """Bytes of an ``H x W`` NV12 frame: the Y plane, then the CbCr plane."""
    ch, cw = nv12_chroma_shape(H, W)
    return H * W + 2 * ch * cw


class Nv12Coefficients(NamedTuple):
    """Y'CbCr -> R'G'B' of one NV12 colour format, in ``NV12_FRAC_BITS``-bit fixed point.

    With ``Y`` the luma (0..255) and ``cb8 = 8 (Cb - 128)``, ``cr8 = 8 (Cr - 128)`` the
    upsampled chroma in eighths (integers), ``a = 2 ** (NV12_FRAC_BITS - 1)``::

        R = (y_scale (Y - y_offset) + cr_r cr8 + a) >> NV12_FRAC_BITS
        G = (y_scale (Y - y_offset) - cb_g cb8 - cr_g cr8 + a) >> NV12_FRAC_BITS
        B = (y_scale (Y - y_offset) + cb_b cb8 + a) >> NV12_FRAC_BITS

    each clamped to ``0..255``: the float formula ``R = Ys + 2 (1 - Kr) Crs``, ``G = Ys -
    2 Kb (1 - Kb) / Kg Cbs - 2 Kr (1 - Kr) / Kg Crs``, ``B = Ys + 2 (1 - Kb) Cbs`` with
    ``Ys = (Y - 16) 255 / 219``, ``Cbs = (Cb - 128) 255 / 224`` (limited range) or ``Ys = Y``,
    ``Cbs = Cb - 128`` (full range), rounded half up (before rounding, within 2**-9 of
    the float formula).
    """

    y_offset: int
    y_scale: int
    cr_r: int
    cb_g: int
    cr_g: int
    cb_b: int


def nv12_coefficients(code: int) -> Nv12Coefficients:
    """The fixed-point conversion of the NV12 colour format ``code``."""
    matrix, full = nv12_format(code)
    kr, kb = NV12_KR_KB[matrix]
    kg = 1.0 - kr - kb
    ys, cs = (1.0, 1.0) if full else (255.0 / 219.0, 255.0 / 224.0)
    one = float(1 << NV12_FRAC_BITS)
    c = one * cs / 8.0  # per eighth of a chroma level
    return Nv12Coefficients(0 if full else 16, round(one * ys), round(c * 2.0 * (1.0 - kr)),
                            round(c * 2.0 * kb * (1.0 - kb) / kg), round(c * 2.0 * kr * (1.0 - kr) / kg),
                            round(c * 2.0 * (1.0 - kb)))


# Module constants for the Triton source stage (see the note above the geometry
# constants), picked per frame by ``stages/source.py: nv12_coefficients``.
NV12_Y_OFFSET_LIMITED = nv12_coefficients(NV12_BT601).y_offset
NV12_Y_SCALE_LIMITED = nv12_coefficients(NV12_BT601).y_scale
NV12_Y_SCALE_FULL = nv12_coefficients(NV12_BT601 | NV12_FULL_RANGE).y_scale
_, _, NV12_CR_R_601, NV12_CB_G_601, NV12_CR_G_601, NV12_CB_B_601 = nv12_coefficients(NV12_BT601)
_, _, NV12_CR_R_709, NV12_CB_G_709, NV12_CR_G_709, NV12_CB_B_709 = nv12_coefficients(NV12_BT709)
_, _, NV12_CR_R_601_FULL, NV12_CB_G_601_FULL, NV12_CR_G_601_FULL, NV12_CB_B_601_FULL = nv12_coefficients(
    NV12_BT601 | NV12_FULL_RANGE)
_, _, NV12_CR_R_709_FULL, NV12_CB_G_709_FULL, NV12_CR_G_709_FULL, NV12_CB_B_709_FULL = nv12_coefficients(
    NV12_BT709 | NV12_FULL_RANGE)


# --------------------------------------------------------------------------- #
# The augment program: one row of SLOT_WIDTH columns per (sample, slot)
# --------------------------------------------------------------------------- #

SLOT_COLUMNS: tuple[str, ...] = ("op", "m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7",
                                 "interp", "fill0", "fill1", "fill2")
SLOT_WIDTH: int = len(SLOT_COLUMNS)


def slot_column(name: str) -> int:
    """Index of the slot column ``name``."""
    try:
        return SLOT_COLUMNS.index(name)
    except ValueError:
        raise KeyError(f"no slot column {name!r}; a slot has {list(SLOT_COLUMNS)}") from None


SLOT_OP = slot_column("op")
SLOT_M0, SLOT_M1, SLOT_M2, SLOT_M3 = (slot_column(f"m{i}") for i in range(4))
SLOT_M4, SLOT_M5, SLOT_M6, SLOT_M7 = (slot_column(f"m{i}") for i in range(4, 8))
SLOT_INTERP = slot_column("interp")
SLOT_FILL0, SLOT_FILL1, SLOT_FILL2 = (slot_column(f"fill{i}") for i in range(3))

#: op code -> (name, argument names in m0, m1, ...). Every op takes a uint8
#: ``[3, H, W]`` image to one of the same size, as the torchvision.transforms.v2
#: functional of that name does on a uint8 tensor with these arguments.
OP_ARGS: dict[int, tuple[str, tuple[str, ...]]] = {
    0: ("identity", ()),
    # inverse affine matrix of torchvision's _get_inverse_affine_matrix (output
    # pixel, relative to the image centre -> input pixel, relative to the centre)
    1: ("affine", ("a", "b", "c", "d", "e", "f")),
    # torchvision's perspective coefficients (_get_perspective_coeffs)
    2: ("perspective", ("a", "b", "c", "d", "e", "f", "g", "h")),
    3: ("brightness", ("factor",)),
    # blends with the mean of the grayscale image. The executor may set m1 > 0: the image's pixel count,
    # where it lies in a longer zero-padded row (a leading program's rows, ``torchdali/transforms/_execute.py``)
    4: ("contrast", ("factor",)),
    5: ("saturation", ("factor",)),
    6: ("hue", ("factor",)),
    7: ("grayscale", ()),
    8: ("invert", ()),
    9: ("posterize", ("bits",)),
    10: ("solarize", ("threshold",)),
    11: ("sharpness", ("factor",)),
    12: ("autocontrast", ()),
    13: ("equalize", ()),
    14: ("gaussian_blur", ("kernel_x", "kernel_y", "sigma_x", "sigma_y")),
    # timm's SolarizeAdd: add ``addition`` to pixels below ``threshold``, saturating at 255
    15: ("solarize_add", ("addition", "threshold")),
    # output channel i is input channel ``c_i`` (torchvision's ``permute_channels(permutation=[c0, c1, c2])``)
    16: ("permute_channels", ("c0", "c1", "c2")),
}

#: op name -> code
OPS: dict[str, int] = {name: code for code, (name, _) in OP_ARGS.items()}


def op_code(name: str) -> int:
    """Code of the augment op ``name``; a KeyError names the known ops."""
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"no augment op {name!r}; the program knows {list(OPS)}") from None


# Module constants for the Triton code (see the note above the geometry constants).
OP_IDENTITY, OP_AFFINE, OP_PERSPECTIVE = OPS["identity"], OPS["affine"], OPS["perspective"]
OP_BRIGHTNESS, OP_CONTRAST, OP_SATURATION, OP_HUE = (OPS[n] for n in ("brightness", "contrast", "saturation", "hue"))
OP_GRAYSCALE, OP_INVERT, OP_POSTERIZE, OP_SOLARIZE = (OPS[n] for n in ("grayscale", "invert", "posterize", "solarize"))
OP_SHARPNESS, OP_AUTOCONTRAST, OP_EQUALIZE = OPS["sharpness"], OPS["autocontrast"], OPS["equalize"]
OP_GAUSSIAN_BLUR, OP_SOLARIZE_ADD = OPS["gaussian_blur"], OPS["solarize_add"]
OP_PERMUTE_CHANNELS = OPS["permute_channels"]
