"""NVDEC through the driver's own video decoding library, ``libnvcuvid``: its bitstream parser and its
decoder, called through ctypes, with no FFmpeg in between.

A clip's packets go to a parser (``cuvidCreateVideoParser``, one per clip: it is CPU state only), which
calls back three times:

- ``sequence``: a sequence header was read (``CUVIDEOFORMAT``). The session gives it a decoder
  (``cuvidCreateDecoder``: the NVDEC surfaces, which take milliseconds to create) for the format's codec,
  coded size, display area, chroma format and bit depth, reused from clip to clip, and returns the number
  of decode surfaces the parser cycles through: the format's minimum (``min_num_decode_surfaces``) plus
  the display delay, at least what the decoder was made with.
- ``decode``: a picture is ready to decode, in decode order (``CUVIDPICPARAMS``, passed on to
  ``cuvidDecodePicture`` untouched). For H.264, a picture no other refers to (``ref_pic_flag``, from its
  ``nal_ref_idc``) whose packet's timestamp the clip does not want is not decoded: its packets are each one
  whole picture (``CUVID_PKT_ENDOFPICTURE``: the parser calls back while it parses that packet). HEVC's
  non-reference pictures are only so within their temporal sub-layer (pictures of higher sub-layers may
  refer to them), so HEVC decodes every picture.
- ``display``: a picture is next in display order, with the timestamp of the packet it came in
  (``CUVIDPARSERDISPINFO``). A wanted one is mapped (``cuvidMapVideoFrame64``: NVDEC's post-processing
  writes it, cropped to the display area, into one of the decoder's output surfaces, on the session's
  stream) and its two planes, one after the other at one pitch, are copied into the batch's buffer by one
  driver 2-D copy (``cuMemcpy2DAsync``), on the same stream; a mapped surface is given back
  (``cuvidUnmapVideoFrame64``) once the stream has done the copies (a blocking event waited for), after
  ``OUTPUT_SURFACES`` maps or at the end of the clip.

The packet loop and the decode and display callbacks are C (``_cuvid_clip.c``, built on first use by
``torchdali._native``): called through ctypes, the parser runs a whole clip without the interpreter, so
eight decode threads and the training loop do not take turns at it several times per picture. The
sequence callback, once per sequence header, stays here. Each packet's timestamp is its pts' rank in the
clip (the parser hands timestamps out in display order; ``_cuvid_clip.c`` says more); H.264 and HEVC
packets in MP4 form are re-framed to Annex-B on the way (``Packets``).

An end-of-stream packet flushes the parser's display queue; then the parser is destroyed.

The structures below are those of NVIDIA's ``nvcuvid.h`` and ``cuviddec.h`` (Video Codec SDK), field for
field; ``unsigned long`` is 8 bytes on the 64-bit Linux this runs on. Every call needs the device's CUDA
context current on the calling thread (the decode threads make torch's primary context current first),
and a session belongs to one thread: the parser calls back on the thread that feeds it.
"""
from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ._container import ClipDecodeError

__all__ = ["CODECS", "DISPLAY_DELAY", "OUTPUT_SURFACES", "Outputs", "Packets", "Session", "driver_api", "library",
           "native", "parser_payloads", "refuse"]

#: FFmpeg's codec names the session decodes, and their ``cudaVideoCodec``
CODECS = {"h264": 4, "hevc": 8, "vp8": 9, "vp9": 10}
#: codecs whose packets are each exactly one picture (MP4 and Matroska samples are whole access units), so
#: that the parser calls back for a packet's picture while it parses that packet
_WHOLE_PICTURES = frozenset({"h264", "hevc"})
#: codecs whose unwanted pictures are skipped where ``ref_pic_flag`` says no picture refers to them
_SKIP_NON_REFERENCE = frozenset({"h264"})
#: pictures the parser holds before it displays one: the engines decode that far ahead of the maps
DISPLAY_DELAY = 2
#: mapped frames a decoder holds at once (its output surfaces), the copies out of them queued
OUTPUT_SURFACES = 4
_MAX_SURFACES = 32  # decode surfaces NVDEC takes at most
#: decoders a session keeps (least recently used dropped): one per format, each holding its surfaces
DECODERS_PER_SESSION = 4

_CHROMA_420 = 1
_SURFACE_NV12 = 0
_DEINTERLACE_WEAVE = 0
_CREATE_PREFER_CUVID = 0x04
_PKT_ENDOFSTREAM, _PKT_TIMESTAMP, _PKT_ENDOFPICTURE = 0x01, 0x02, 0x08
_PIC_CURR_IDX, _PIC_REF_FLAG = 8, 56  # byte offsets of CurrPicIdx and ref_pic_flag in CUVIDPICPARAMS

_c = ctypes


class _Rect(_c.Structure):
    _fields_ = [("left", _c.c_int), ("top", _c.c_int), ("right", _c.c_int), ("bottom", _c.c_int)]


class _ShortRect(_c.Structure):
    _fields_ = [("left", _c.c_short), ("top", _c.c_short), ("right", _c.c_short), ("bottom", _c.c_short)]


class VideoFormat(_c.Structure):
    """``CUVIDEOFORMAT``."""

    _fields_ = [
        ("codec", _c.c_int), ("frame_rate_num", _c.c_uint), ("frame_rate_den", _c.c_uint),
        ("progressive_sequence", _c.c_ubyte), ("bit_depth_luma_minus8", _c.c_ubyte),
        ("bit_depth_chroma_minus8", _c.c_ubyte), ("min_num_decode_surfaces", _c.c_ubyte),
        ("coded_width", _c.c_uint), ("coded_height", _c.c_uint), ("display_area", _Rect),
        ("chroma_format", _c.c_int), ("bitrate", _c.c_uint), ("aspect_x", _c.c_int), ("aspect_y", _c.c_int),
        ("video_signal_description", _c.c_ubyte * 4), ("seqhdr_data_length", _c.c_uint),
    ]


class _DisplayInfo(_c.Structure):
    """``CUVIDPARSERDISPINFO``."""

    _fields_ = [("picture_index", _c.c_int), ("progressive_frame", _c.c_int), ("top_field_first", _c.c_int),
                ("repeat_first_field", _c.c_int), ("timestamp", _c.c_longlong)]


class _Packet(_c.Structure):
    """``CUVIDSOURCEDATAPACKET``."""

    _fields_ = [("flags", _c.c_ulong), ("payload_size", _c.c_ulong), ("payload", _c.c_char_p),
                ("timestamp", _c.c_longlong)]  # a bytes payload is pointed at, not copied


_SEQUENCE = _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.POINTER(VideoFormat))
_DECODE = _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.c_void_p)  # CUVIDPICPARAMS *, read by offset only
_DISPLAY = _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.POINTER(_DisplayInfo))


class _ParserParams(_c.Structure):
    """``CUVIDPARSERPARAMS`` (the AV1 and SEI callbacks left NULL)."""

    _fields_ = [
        ("CodecType", _c.c_int), ("ulMaxNumDecodeSurfaces", _c.c_uint), ("ulClockRate", _c.c_uint),
        ("ulErrorThreshold", _c.c_uint), ("ulMaxDisplayDelay", _c.c_uint), ("flags", _c.c_uint),
        ("uReserved1", _c.c_uint * 4), ("pUserData", _c.c_void_p), ("pfnSequenceCallback", _SEQUENCE),
        ("pfnDecodePicture", _DECODE), ("pfnDisplayPicture", _DISPLAY), ("pfnGetOperatingPoint", _c.c_void_p),
        ("pfnGetSEIMsg", _c.c_void_p), ("pvReserved2", _c.c_void_p * 5), ("pExtVideoInfo", _c.c_void_p),
    ]


class _CreateInfo(_c.Structure):
    """``CUVIDDECODECREATEINFO``."""

    _fields_ = [
        ("ulWidth", _c.c_ulong), ("ulHeight", _c.c_ulong), ("ulNumDecodeSurfaces", _c.c_ulong),
        ("CodecType", _c.c_int), ("ChromaFormat", _c.c_int), ("ulCreationFlags", _c.c_ulong),
        ("bitDepthMinus8", _c.c_ulong), ("ulIntraDecodeOnly", _c.c_ulong), ("ulMaxWidth", _c.c_ulong),
        ("ulMaxHeight", _c.c_ulong), ("Reserved1", _c.c_ulong), ("display_area", _ShortRect),
        ("OutputFormat", _c.c_int), ("DeinterlaceMode", _c.c_int), ("ulTargetWidth", _c.c_ulong),
        ("ulTargetHeight", _c.c_ulong), ("ulNumOutputSurfaces", _c.c_ulong), ("vidLock", _c.c_void_p),
        ("target_rect", _ShortRect), ("enableHistogram", _c.c_ulong), ("Reserved2", _c.c_ulong * 4),
    ]


class _ProcParams(_c.Structure):
    """``CUVIDPROCPARAMS``."""

    _fields_ = [
        ("progressive_frame", _c.c_int), ("second_field", _c.c_int), ("top_field_first", _c.c_int),
        ("unpaired_field", _c.c_int), ("reserved_flags", _c.c_uint), ("reserved_zero", _c.c_uint),
        ("raw_input_dptr", _c.c_ulonglong), ("raw_input_pitch", _c.c_uint), ("raw_input_format", _c.c_uint),
        ("raw_output_dptr", _c.c_ulonglong), ("raw_output_pitch", _c.c_uint), ("Reserved1", _c.c_uint),
        ("output_stream", _c.c_void_p), ("Reserved", _c.c_uint * 46), ("histogram_dptr", _c.c_void_p),
        ("Reserved2", _c.c_void_p * 1),
    ]


class Memcpy2D(_c.Structure):
    """``CUDA_MEMCPY2D`` (cuda.h)."""

    _fields_ = [
        ("srcXInBytes", _c.c_size_t), ("srcY", _c.c_size_t), ("srcMemoryType", _c.c_int),
        ("srcHost", _c.c_void_p), ("srcDevice", _c.c_uint64), ("srcArray", _c.c_void_p), ("srcPitch", _c.c_size_t),
        ("dstXInBytes", _c.c_size_t), ("dstY", _c.c_size_t), ("dstMemoryType", _c.c_int),
        ("dstHost", _c.c_void_p), ("dstDevice", _c.c_uint64), ("dstArray", _c.c_void_p), ("dstPitch", _c.c_size_t),
        ("WidthInBytes", _c.c_size_t), ("Height", _c.c_size_t),
    ]


class _DecodeCaps(_c.Structure):
    """``CUVIDDECODECAPS``."""

    _fields_ = [
        ("eCodecType", _c.c_int), ("eChromaFormat", _c.c_int), ("nBitDepthMinus8", _c.c_uint),
        ("reserved1", _c.c_uint * 3), ("bIsSupported", _c.c_ubyte), ("nNumNVDECs", _c.c_ubyte),
        ("nOutputFormatMask", _c.c_ushort), ("nMaxWidth", _c.c_uint), ("nMaxHeight", _c.c_uint),
        ("nMaxMBCount", _c.c_uint), ("nMinWidth", _c.c_ushort), ("nMinHeight", _c.c_ushort),
        ("bIsHistogramSupported", _c.c_ubyte), ("nCounterBitDepth", _c.c_ubyte),
        ("nMaxHistogramBins", _c.c_ushort), ("reserved3", _c.c_uint * 10),
    ]


_SIGNATURES = {
    "cuvidGetDecoderCaps": [_c.POINTER(_DecodeCaps)],
    "cuvidCreateDecoder": [_c.POINTER(_c.c_void_p), _c.POINTER(_CreateInfo)],
    "cuvidDestroyDecoder": [_c.c_void_p],
    "cuvidDecodePicture": [_c.c_void_p, _c.c_void_p],
    "cuvidMapVideoFrame64": [_c.c_void_p, _c.c_int, _c.POINTER(_c.c_ulonglong), _c.POINTER(_c.c_uint),
                             _c.POINTER(_ProcParams)],
    "cuvidUnmapVideoFrame64": [_c.c_void_p, _c.c_ulonglong],
    "cuvidCreateVideoParser": [_c.POINTER(_c.c_void_p), _c.POINTER(_ParserParams)],
    "cuvidParseVideoData": [_c.c_void_p, _c.POINTER(_Packet)],
    "cuvidDestroyVideoParser": [_c.c_void_p],
}
_lock = threading.Lock()
_lib: Any = None
_native_lib: Any = None
_driver_api: Any = None
_caps: dict[str, _DecodeCaps] = {}


def library() -> Any:
    """The driver's ``libnvcuvid.so.1``, its functions typed. Raises ``RuntimeError`` where the driver has
    none (a container started without the video capability, say): the clip then goes to the CPU."""
    global _lib
    with _lock:
        if _lib is None:
            try:
                lib = _c.CDLL("libnvcuvid.so.1")
                for name, args in _SIGNATURES.items():
                    fn = getattr(lib, name)
                    fn.argtypes, fn.restype = args, _c.c_int
            except (OSError, AttributeError) as e:
                raise RuntimeError(f"NVIDIA's video decoding library is not available (libnvcuvid.so.1): "
                                   f"{e}") from None
            _lib = lib
    return _lib


def _check(err: int, what: str) -> None:
    if err:
        raise ClipDecodeError(f"{what} failed with CUresult {err}")


def refuse(codec: str, width: int, height: int) -> str | None:
    """Why NVDEC does not decode 8-bit 4:2:0 ``codec`` frames of ``width x height`` (None: it does), from
    the engines' capabilities (``cuvidGetDecoderCaps``, asked once per codec)."""
    if codec not in CODECS:
        return f"codec {codec}"
    native()  # the clip loop's C side built (RuntimeError where it cannot be: the clip goes to the CPU)
    caps = _caps.get(codec)
    if caps is None:
        caps = _DecodeCaps(eCodecType=CODECS[codec], eChromaFormat=_CHROMA_420, nBitDepthMinus8=0)
        _check(library().cuvidGetDecoderCaps(_c.byref(caps)), f"cuvidGetDecoderCaps({codec})")
        _caps[codec] = caps
    if not caps.bIsSupported:
        return f"codec {codec} (not on this GPU's NVDEC)"
    if not (caps.nMinWidth <= width <= caps.nMaxWidth and caps.nMinHeight <= height <= caps.nMaxHeight):
        return (f"frame size outside NVDEC's {codec} range ({caps.nMinWidth}x{caps.nMinHeight} to "
                f"{caps.nMaxWidth}x{caps.nMaxHeight})")
    return None


class _Decoder:
    """One NVDEC decoder: its decode surfaces and output surfaces, for one format."""

    def __init__(self, codec: int, fmt: VideoFormat, surfaces: int) -> None:
        area = fmt.display_area
        self.width, self.height = area.right - area.left, area.bottom - area.top
        self.surfaces = surfaces
        info = _CreateInfo(
            ulWidth=fmt.coded_width, ulHeight=fmt.coded_height, ulNumDecodeSurfaces=surfaces, CodecType=codec,
            ChromaFormat=fmt.chroma_format, ulCreationFlags=_CREATE_PREFER_CUVID,
            bitDepthMinus8=fmt.bit_depth_luma_minus8, ulMaxWidth=fmt.coded_width, ulMaxHeight=fmt.coded_height,
            OutputFormat=_SURFACE_NV12, DeinterlaceMode=_DEINTERLACE_WEAVE, ulTargetWidth=self.width,
            ulTargetHeight=self.height, ulNumOutputSurfaces=OUTPUT_SURFACES)
        info.display_area = _ShortRect(area.left, area.top, area.right, area.bottom)
        handle = _c.c_void_p()
        _check(library().cuvidCreateDecoder(_c.byref(handle), _c.byref(info)),
               f"cuvidCreateDecoder({fmt.coded_width}x{fmt.coded_height}, {surfaces} surfaces)")
        self.handle = handle

    def close(self) -> None:
        if self.handle:
            library().cuvidDestroyDecoder(self.handle)
            self.handle = _c.c_void_p()


def format_key(fmt: VideoFormat) -> tuple:
    """What a decoder is made for: codec, coded size, display area, chroma format and bit depths."""
    a = fmt.display_area
    return (fmt.codec, fmt.coded_width, fmt.coded_height, a.left, a.top, a.right, a.bottom, fmt.chroma_format,
            fmt.bit_depth_luma_minus8, fmt.bit_depth_chroma_minus8)


class Packets(NamedTuple):
    """A clip's packets as ``Session.decode`` feeds them: packet ``j`` is ``data[offsets[j]:offsets[j + 1]]``
    (uint8; int64 ``[P + 1]``), in decode order from a keyframe, its timestamp ``pts[j]`` (named in errors);
    ``prefix`` (Annex-B bytes: parameter sets) goes before the first; where ``length_size`` > 0 the packets
    hold NAL units after ``length_size``-byte sizes (MP4 form) and are re-framed to Annex-B
    (``_annexb.to_annexb`` does the same in Python)."""

    data: np.ndarray
    offsets: np.ndarray
    pts: np.ndarray
    prefix: bytes = b""
    length_size: int = 0


class Outputs(NamedTuple):
    """Where the pictures go: packet ``j``'s picture to every device offset of
    ``offsets[start[j]:start[j + 1]]`` (int64; none where the clip does not want it)."""

    start: np.ndarray  # int64 [P + 1]
    offsets: np.ndarray  # int64


# -- the C side (``_cuvid_clip.c``) --------------------------------------------------------------------------
_TD_CALL, _TD_NOT_DECODED, _TD_NAL_OVERRUN, _TD_NAL_TRAILING, _TD_NO_NAL, _TD_STOPPED, _TD_NO_MEMORY, \
    _TD_BAD_INDEX = range(1, 9)
_TD_CALLS = ("cuvidParseVideoData", "cuvidDecodePicture", "cuvidMapVideoFrame64", "cuMemcpy2DAsync",
             "cuEventRecord", "cuEventSynchronize")
_MAX_MAPPED = 8

#: the driver's entry points the C side calls, as ``td_api`` lists them (C function types)
API = {
    "parse": _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.POINTER(_Packet)),
    "decode_picture": _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.c_void_p),
    "map": _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.c_int, _c.POINTER(_c.c_ulonglong), _c.POINTER(_c.c_uint),
                        _c.POINTER(_ProcParams)),
    "unmap": _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.c_ulonglong),
    "copy_2d": _c.CFUNCTYPE(_c.c_int, _c.POINTER(Memcpy2D), _c.c_void_p),
    "event_record": _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.c_void_p),
    "event_synchronize": _c.CFUNCTYPE(_c.c_int, _c.c_void_p),
}


class _Api(_c.Structure):
    """``td_api``."""

    _fields_ = [(name, kind) for name, kind in API.items()]


class _ClipState(_c.Structure):
    """``td_clip``: one clip's state, shared by the session's Python and the C callbacks."""

    _fields_ = [
        ("api", _c.POINTER(_Api)), ("decoder", _c.c_void_p), ("stream", _c.c_void_p), ("event", _c.c_void_p),
        ("base", _c.c_ulonglong), ("stamps", _c.c_void_p), ("by_stamp", _c.c_void_p), ("out_start", _c.c_void_p),
        ("out_offsets", _c.c_void_p), ("done", _c.c_void_p),
        ("packets", _c.c_int64), ("current", _c.c_int64), ("width", _c.c_int32), ("height", _c.c_int32),
        ("skip", _c.c_int32), ("output_surfaces", _c.c_int32), ("decoded", _c.c_uint64),
        ("mapped", _c.c_ulonglong * _MAX_MAPPED), ("n_mapped", _c.c_int32), ("failed", _c.c_int32),
        ("pictures", _c.c_int64), ("detail", _c.c_int64), ("detail2", _c.c_int64), ("call", _c.c_int32),
        ("result", _c.c_int32), ("proc", _ProcParams),
    ]


def native() -> Any:
    """``_cuvid_clip.c`` built and loaded (``torchdali._native``), its functions typed. RuntimeError where
    it cannot be built (no C compiler)."""
    global _native_lib
    with _lock:
        if _native_lib is None:
            from .._native import build

            try:
                lib = build(Path(__file__).with_name("_cuvid_clip.c"))
            except OSError as e:  # a library that does not load (a cache on a noexec mount, say)
                raise RuntimeError(f"cannot build or load _cuvid_clip.c: {e}") from None
            lib.td_clip_size.restype = _c.c_int64
            if lib.td_clip_size() != _c.sizeof(_ClipState):
                raise RuntimeError(f"_cuvid_clip.c's td_clip is {lib.td_clip_size()} bytes, _ClipState "
                                   f"{_c.sizeof(_ClipState)}: the two must be changed together")
            state = _c.POINTER(_ClipState)
            lib.td_unmap.argtypes, lib.td_unmap.restype = [state], _c.c_int
            lib.td_decode.argtypes = [state, _c.c_void_p, _c.c_void_p, _c.c_void_p, _c.c_int64, _c.c_ulong,
                                      _c.c_char_p, _c.c_int64, _c.c_int]
            lib.td_decode.restype = _c.c_int
            lib.td_frame_bound.argtypes = [_c.c_int64, _c.c_int64, _c.c_int64, _c.c_int]
            lib.td_frame_bound.restype = _c.c_int64
            lib.td_frame.argtypes = [state, _c.c_void_p, _c.c_void_p, _c.c_int64, _c.c_char_p, _c.c_int64, _c.c_int,
                                     _c.c_void_p, _c.c_void_p]
            lib.td_frame.restype = _c.c_int
            _native_lib = lib
    return _native_lib


def driver_api() -> _Api:
    """The driver's entry points for the C side: libnvcuvid's and libcuda's. RuntimeError where one is
    missing."""
    global _driver_api
    with _lock:
        api = _driver_api
    if api is None:
        lib = library()
        try:
            cuda = _c.CDLL("libcuda.so.1")
            names = {"parse": lib.cuvidParseVideoData, "decode_picture": lib.cuvidDecodePicture,
                     "map": lib.cuvidMapVideoFrame64, "unmap": lib.cuvidUnmapVideoFrame64,
                     "copy_2d": cuda.cuMemcpy2DAsync_v2, "event_record": cuda.cuEventRecord,
                     "event_synchronize": cuda.cuEventSynchronize}
        except (OSError, AttributeError) as e:
            raise RuntimeError(f"the CUDA driver's library is not available (libcuda.so.1): {e}") from None
        api = _Api(**{k: API[k](_c.cast(fn, _c.c_void_p).value) for k, fn in names.items()})
        with _lock:
            _driver_api = api
    return api


def parser_payloads(packets: Packets) -> list[bytes]:
    """What ``Session.decode`` feeds the parser for each of ``packets``: the prefix before the first, each
    re-framed to Annex-B where ``length_size`` > 0, by the C side's ``td_frame`` (which ``td_decode``
    frames with). ``ClipDecodeError`` where a packet does not re-frame, as ``decode`` raises it."""
    lib, state, n = native(), _ClipState(), len(packets.pts)
    data = np.ascontiguousarray(packets.data, dtype=np.uint8)
    offsets = np.ascontiguousarray(packets.offsets, dtype=np.int64)
    out = np.empty(lib.td_frame_bound(n, int(offsets[n] - offsets[0]), len(packets.prefix), packets.length_size),
                   dtype=np.uint8)
    at = np.zeros(n + 1, dtype=np.int64)
    if lib.td_frame(_c.byref(state), data.ctypes.data, offsets.ctypes.data, n, packets.prefix, len(packets.prefix),
                    packets.length_size, out.ctypes.data, at.ctypes.data):
        raise _failure(state, packets)
    return [out[at[j]: at[j + 1]].tobytes() for j in range(n)]


def _failure(state: _ClipState, packets: Packets) -> ClipDecodeError:
    """The C side's failure as the error ``Session.decode`` raises."""
    what, j = state.failed, int(state.current)
    size = int(packets.offsets[j + 1] - packets.offsets[j]) if 0 <= j < len(packets.pts) else 0
    if what == _TD_CALL:
        return ClipDecodeError(f"{_TD_CALLS[state.call]} failed with CUresult {state.result}")
    if what == _TD_NOT_DECODED:
        return ClipDecodeError(f"the picture of timestamp {int(packets.pts[state.detail])} was displayed without "
                               f"being decoded")
    if what == _TD_NAL_OVERRUN:
        return ClipDecodeError(f"a NAL unit's size ({state.detail} bytes, at byte {state.detail2}) runs past the "
                               f"end of its {size}-byte packet: the packet is corrupt, or not "
                               f"{packets.length_size}-byte length-prefixed as the stream's extradata says")
    if what == _TD_NAL_TRAILING:
        return ClipDecodeError(f"{state.detail} bytes after the last NAL unit of a {size}-byte packet, too few "
                               f"for a {packets.length_size}-byte NAL unit size: the packet is corrupt")
    if what == _TD_NO_NAL:
        return ClipDecodeError(f"a {size}-byte packet holds no NAL unit")
    if what == _TD_BAD_INDEX:
        return ClipDecodeError(f"the parser gave picture index {state.detail}, outside NVDEC's surfaces")
    if what == _TD_NO_MEMORY:
        return ClipDecodeError(f"no memory for the clip's packets re-framed ({state.detail} bytes)")
    return ClipDecodeError(f"NVDEC's clip failed ({what})")


class Session:
    """One decode thread's NVDEC decoders, reused from clip to clip, and its parser callbacks: the sequence
    callback here, the decode and display callbacks and the packet loop in C (``_cuvid_clip.c``), so that a
    clip's pictures take the interpreter only once per sequence header.

    ``stream``: the ``CUstream`` handle the maps and copies run on; ``event``: a ``CUevent`` made with
    blocking sync, which the C side records on the stream and waits for before it gives mapped surfaces
    back (a stream's own synchronize spins a core while it waits).
    """

    def __init__(self, stream: int, event: int) -> None:
        self._lib = library()
        self._native = native()
        self._api = driver_api()
        self._decoders: "OrderedDict[tuple, _Decoder]" = OrderedDict()
        self._decoder: _Decoder | None = None
        self._error: BaseException | None = None
        self._state = _ClipState(api=_c.pointer(self._api), stream=stream, event=event,
                                 output_surfaces=OUTPUT_SURFACES)
        self._state.proc.output_stream = stream
        self._state_ref = _c.byref(self._state)
        # the callbacks must live as long as any parser that may call them
        self._sequence = _SEQUENCE(self._on_sequence)
        self._decode_cb = _DECODE(_c.cast(self._native.td_on_decode, _c.c_void_p).value)
        self._display_cb = _DISPLAY(_c.cast(self._native.td_on_display, _c.c_void_p).value)

    def close(self) -> None:
        """Destroy every decoder (the device's context current on this thread)."""
        for decoder in self._decoders.values():
            decoder.close()
        self._decoders.clear()
        self._decoder = None
        self._state.decoder = None

    def decode(self, codec: str, packets: Packets, width: int, height: int, outputs: Outputs, base: int) -> int:
        """Decode ``packets`` (``codec`` as FFmpeg names it), writing the NV12 planes of packet ``j``'s picture
        (``width x height``, even; Y then CbCr, no pitch) at device address ``base + o`` for every ``o`` of
        ``outputs`` for ``j``; every copy is done when this returns. Returns the pictures decoded. Raises
        ``ClipDecodeError`` where NVDEC cannot decode them or a wanted picture does not come out."""
        n = len(packets.pts)
        data = np.ascontiguousarray(packets.data, dtype=np.uint8)
        offsets = np.ascontiguousarray(packets.offsets, dtype=np.int64)
        start = np.ascontiguousarray(outputs.start, dtype=np.int64)
        places = np.ascontiguousarray(outputs.offsets, dtype=np.int64)
        if len(offsets) != n + 1 or len(start) != n + 1 or (n and offsets[-1] > len(data)):
            raise ValueError(f"{n} packets need {n + 1} packet offsets within the data and {n + 1} output "
                             f"starts; got {len(offsets)} and {len(start)}")
        done = np.zeros(max(n, 1), dtype=np.uint8)
        # timestamps in display order (see _cuvid_clip.c): each packet's pts' rank
        by_stamp = np.argsort(np.asarray(packets.pts, dtype=np.int64), kind="stable")
        stamps = np.empty_like(by_stamp)
        stamps[by_stamp] = np.arange(n, dtype=by_stamp.dtype)
        s = self._state
        s.stamps, s.by_stamp = stamps.ctypes.data, by_stamp.ctypes.data
        s.base, s.out_start, s.out_offsets, s.done = base, start.ctypes.data, places.ctypes.data, done.ctypes.data
        s.packets, s.current, s.width, s.height = n, 0, width, height
        s.skip, s.decoded, s.n_mapped, s.failed, s.pictures = codec in _SKIP_NON_REFERENCE, 0, 0, 0, 0
        self._error = None
        params = _ParserParams(CodecType=CODECS[codec], ulMaxNumDecodeSurfaces=1, ulErrorThreshold=0,
                               ulMaxDisplayDelay=DISPLAY_DELAY, pUserData=_c.addressof(s),
                               pfnSequenceCallback=self._sequence, pfnDecodePicture=self._decode_cb,
                               pfnDisplayPicture=self._display_cb)
        parser = _c.c_void_p()
        _check(self._lib.cuvidCreateVideoParser(_c.byref(parser), _c.byref(params)), "cuvidCreateVideoParser")
        flags = _PKT_TIMESTAMP | (_PKT_ENDOFPICTURE if codec in _WHOLE_PICTURES else 0)
        try:
            self._native.td_decode(self._state_ref, parser, data.ctypes.data, offsets.ctypes.data, n, flags,
                                   packets.prefix, len(packets.prefix), packets.length_size)
        finally:
            self._lib.cuvidDestroyVideoParser(parser)
            self._native.td_unmap(self._state_ref)
        if s.failed:
            raise self._error if s.failed == _TD_STOPPED and self._error is not None else _failure(s, packets)
        missing = np.flatnonzero((start[1:] > start[:-1]) & (done[:n] == 0))
        if len(missing):
            raise ClipDecodeError(f"NVDEC gave no picture of timestamps {packets.pts[missing][:8].tolist()}")
        return int(s.pictures)

    def _unmap(self) -> None:
        """The C side's wait for the queued copies, then the mapped surfaces given back to the current decoder.
        Where it fails, the failure is in the state (``decode`` raises it)."""
        if self._native.td_unmap(self._state_ref):
            raise ClipDecodeError("the wait before the mapped frames go back failed")

    def _on_sequence(self, _user: Any, fmt_p: Any) -> int:
        """The parser's sequence callback (see the module docstring): the decoder for the format, the decode
        surfaces; 0 stops the parser, the error kept for ``decode``."""
        s = self._state
        try:
            fmt = fmt_p.contents
            if fmt.chroma_format != _CHROMA_420 or fmt.bit_depth_luma_minus8 or fmt.bit_depth_chroma_minus8:
                raise ClipDecodeError(f"the stream is chroma format {fmt.chroma_format} with "
                                      f"{8 + fmt.bit_depth_luma_minus8}-bit luma, not 8-bit 4:2:0")
            area = fmt.display_area
            if (area.right - area.left, area.bottom - area.top) != (s.width, s.height):
                raise ClipDecodeError(f"the stream's sequence header gives {area.right - area.left}x"
                                      f"{area.bottom - area.top} frames; the clip is {s.width}x{s.height}")
            need = min(_MAX_SURFACES, fmt.min_num_decode_surfaces + DISPLAY_DELAY + 1)
            key = format_key(fmt)
            decoder = self._decoders.get(key)
            if s.decoded and (decoder is None or decoder is not self._decoder or decoder.surfaces < need):
                # another decoder now would lose the pictures decoded into this one and not yet shown
                raise ClipDecodeError("the stream's format changes inside the clip")
            decoder = self._decoders.pop(key, None)
            if decoder is not None and decoder.surfaces < need:
                self._unmap()  # its mapped surfaces go back before it does
                decoder.close()
                decoder = None
            if decoder is None:
                if len(self._decoders) >= DECODERS_PER_SESSION:
                    _, oldest = self._decoders.popitem(last=False)
                    oldest.close()
                decoder = _Decoder(fmt.codec, fmt, need)
            self._decoders[key] = decoder  # the most recently used
            if decoder is not self._decoder:
                self._unmap()
                self._decoder = decoder
                s.decoder = decoder.handle.value
            return decoder.surfaces
        except BaseException as e:  # noqa: BLE001 - raised by ``decode`` once the parser returns
            self._error = e
            if not s.failed:
                s.failed = _TD_STOPPED
            return 0
