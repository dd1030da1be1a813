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
  driver 2-D copy (``copy_2d``), on the same stream; a mapped surface is given back
  (``cuvidUnmapVideoFrame64``) once the stream has done the copies, after ``OUTPUT_SURFACES`` maps or at
  the end of the clip.

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
from typing import Any, Callable, Iterable, Mapping, Sequence

from ._container import ClipDecodeError
from ._copy2d import copy_2d

__all__ = ["CODECS", "DISPLAY_DELAY", "OUTPUT_SURFACES", "Session", "library", "refuse"]

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


class _Clip:
    """What the callbacks need of the clip being decoded."""

    def __init__(self, width: int, height: int, outputs: Mapping[int, Sequence[int]], base: int, skip: bool,
                 sync: Callable[[], None]) -> None:
        self.width, self.height = width, height
        self.outputs, self.base, self.skip, self.sync = outputs, base, skip, sync
        self.pts = 0  # the timestamp of the packet being parsed
        self.decoded: set[int] = set()  # surfaces holding a picture decoded and not yet displayed
        self.done: set[int] = set()  # timestamps written
        self.mapped: list[int] = []  # mapped surfaces whose copies are queued
        self.pictures = 0
        self.error: BaseException | None = None


class Session:
    """One decode thread's NVDEC decoders, reused from clip to clip, and its parser callbacks.

    ``stream``: the ``CUstream`` handle the maps and copies run on; ``decode`` waits for it
    (``sync``) before it gives mapped surfaces back.
    """

    def __init__(self, stream: int) -> None:
        self._lib = library()
        self.stream = stream
        self._decoders: "OrderedDict[tuple, _Decoder]" = OrderedDict()
        self._decoder: _Decoder | None = None
        self._clip: _Clip | None = None
        # the map's arguments, set anew for each picture
        self._proc, self._ptr, self._pitch = _ProcParams(output_stream=stream), _c.c_ulonglong(), _c.c_uint()
        self._map_args = (_c.byref(self._ptr), _c.byref(self._pitch), _c.byref(self._proc))
        # the C callbacks must live as long as any parser that may call them
        self._callbacks = (_SEQUENCE(self._on_sequence), _DECODE(self._on_decode), _DISPLAY(self._on_display))

    def close(self) -> None:
        """Destroy every decoder (the device's context current on this thread)."""
        for decoder in self._decoders.values():
            decoder.close()
        self._decoders.clear()
        self._decoder = None

    def decode(self, codec: str, packets: Iterable[tuple[Any, int]], width: int, height: int,
               outputs: Mapping[int, Sequence[int]], base: int, sync: Callable[[], None]) -> int:
        """Decode ``packets`` (each its payload, bytes or a contiguous buffer, and its timestamp, in decode
        order, from a keyframe; ``codec`` as FFmpeg names it), writing the NV12 planes of the picture of
        timestamp ``t`` (``width x height``, Y then CbCr, no pitch) at device address ``base + o`` for every
        ``o`` in ``outputs[t]``; every copy is done when this returns. Returns the pictures decoded. Raises
        ``ClipDecodeError`` where NVDEC cannot decode them or a wanted picture does not come out."""
        clip = self._clip = _Clip(width, height, outputs, base, codec in _SKIP_NON_REFERENCE, sync)
        seq, dec, disp = self._callbacks
        params = _ParserParams(CodecType=CODECS[codec], ulMaxNumDecodeSurfaces=1, ulErrorThreshold=0,
                               ulMaxDisplayDelay=DISPLAY_DELAY, pfnSequenceCallback=seq, pfnDecodePicture=dec,
                               pfnDisplayPicture=disp)
        parser = _c.c_void_p()
        _check(self._lib.cuvidCreateVideoParser(_c.byref(parser), _c.byref(params)), "cuvidCreateVideoParser")
        flags = _PKT_TIMESTAMP | (_PKT_ENDOFPICTURE if codec in _WHOLE_PICTURES else 0)
        packet = _Packet()
        ref = _c.byref(packet)
        try:
            for payload, pts in packets:
                data = payload if isinstance(payload, bytes) else bytes(payload)
                packet.flags, packet.payload_size, packet.payload, packet.timestamp = flags, len(data), data, pts
                clip.pts = pts
                self._parse(parser, ref, clip)
            packet.flags, packet.payload_size, packet.payload, packet.timestamp = _PKT_ENDOFSTREAM, 0, None, 0
            self._parse(parser, ref, clip)
        finally:
            self._lib.cuvidDestroyVideoParser(parser)
            self._unmap(clip)
            self._clip = None
        missing = set(outputs) - clip.done
        if missing:
            raise ClipDecodeError(f"NVDEC gave no picture of timestamps {sorted(missing)[:8]}")
        return clip.pictures

    def _parse(self, parser: Any, packet: Any, clip: _Clip) -> None:
        err = self._lib.cuvidParseVideoData(parser, packet)
        if clip.error is not None:
            raise clip.error
        _check(err, "cuvidParseVideoData")

    def _unmap(self, clip: _Clip) -> None:
        """Wait for the queued copies, then give the mapped surfaces back."""
        if clip.mapped:  # mapped from the current decoder (another one unmaps them first)
            clip.sync()
            for ptr in clip.mapped:
                self._lib.cuvidUnmapVideoFrame64(self._decoder.handle, ptr)
            clip.mapped.clear()

    # -- the parser's callbacks: each returns 1 (go on) or 0 (stop), never raises ----------------------------
    def _on_sequence(self, _user: Any, fmt_p: Any) -> int:
        clip = self._clip
        try:
            fmt = fmt_p.contents
            if fmt.chroma_format != _CHROMA_420 or fmt.bit_depth_luma_minus8 or fmt.bit_depth_chroma_minus8:
                raise ClipDecodeError(f"the stream is chroma format {fmt.chroma_format} with "
                                      f"{8 + fmt.bit_depth_luma_minus8}-bit luma, not 8-bit 4:2:0")
            area = fmt.display_area
            if (area.right - area.left, area.bottom - area.top) != (clip.width, clip.height):
                raise ClipDecodeError(f"the stream's sequence header gives {area.right - area.left}x"
                                      f"{area.bottom - area.top} frames; the clip is {clip.width}x{clip.height}")
            need = min(_MAX_SURFACES, fmt.min_num_decode_surfaces + DISPLAY_DELAY + 1)
            key = format_key(fmt)
            decoder = self._decoders.get(key)
            if clip.decoded and (decoder is None or decoder is not self._decoder or decoder.surfaces < need):
                # another decoder now would lose the pictures decoded into this one and not yet shown
                raise ClipDecodeError("the stream's format changes inside the clip")
            decoder = self._decoders.pop(key, None)
            if decoder is not None and decoder.surfaces < need:
                self._unmap(clip)  # its mapped surfaces go back before it does
                decoder.close()
                decoder = None
            if decoder is None:
                if len(self._decoders) >= DECODERS_PER_SESSION:
                    _, oldest = self._decoders.popitem(last=False)
                    oldest.close()
                decoder = _Decoder(fmt.codec, fmt, need)
            self._decoders[key] = decoder  # the most recently used
            if decoder is not self._decoder:
                self._unmap(clip)
                self._decoder = decoder
            return decoder.surfaces
        except BaseException as e:  # noqa: BLE001 - raised by ``decode`` once the parser returns
            clip.error = e
            return 0

    def _on_decode(self, _user: Any, pic: int) -> int:
        clip = self._clip
        try:
            index = _c.c_int.from_address(pic + _PIC_CURR_IDX).value
            if clip.skip and clip.pts not in clip.outputs and not _c.c_int.from_address(pic + _PIC_REF_FLAG).value:
                clip.decoded.discard(index)  # nothing refers to it and it is not wanted
                return 1
            _check(self._lib.cuvidDecodePicture(self._decoder.handle, pic), "cuvidDecodePicture")
            clip.decoded.add(index)
            clip.pictures += 1
            return 1
        except BaseException as e:  # noqa: BLE001
            clip.error = e
            return 0

    def _on_display(self, _user: Any, info_p: Any) -> int:
        clip = self._clip
        try:
            if not info_p:
                return 1
            info = info_p.contents
            index, ts = info.picture_index, info.timestamp
            wanted = ts in clip.outputs and ts not in clip.done
            if index not in clip.decoded:
                if wanted:
                    raise ClipDecodeError(f"the picture of timestamp {ts} was displayed without being decoded")
                return 1
            clip.decoded.discard(index)
            if not wanted:
                return 1
            if len(clip.mapped) >= OUTPUT_SURFACES:
                self._unmap(clip)
            decoder, proc = self._decoder, self._proc
            proc.progressive_frame, proc.top_field_first = info.progressive_frame, info.top_field_first
            _check(self._lib.cuvidMapVideoFrame64(decoder.handle, index, *self._map_args), "cuvidMapVideoFrame64")
            ptr, pitch = self._ptr.value, self._pitch.value
            clip.mapped.append(ptr)
            # the CbCr plane's rows follow the Y plane's at the same pitch, from row ``(height + 1) & ~1``: the
            # decoder's height is the clip's (``_on_sequence``), even (``ClipDecoder`` refuses odd sizes), so
            # one copy of 3/2 H rows writes both
            W, H = clip.width, clip.height
            for off in clip.outputs[ts]:
                copy_2d(clip.base + off, W, ptr, pitch, W, H + H // 2, self.stream)
            clip.done.add(ts)
            return 1
        except BaseException as e:  # noqa: BLE001
            clip.error = e
            return 0
