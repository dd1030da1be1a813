"""H.264 and HEVC packets from their MP4 form (length-prefixed NAL units) to Annex-B (start codes).

MP4 and Matroska store an H.264 or HEVC stream as ISO/IEC 14496-15 describes: each sample (packet) is a run
of NAL units, each preceded by its size in ``lengthSizeMinusOne + 1`` big-endian bytes, and the parameter
sets are not in the samples but in the sample entry's decoder configuration record, the stream's extradata:

- ``AVCDecoderConfigurationRecord`` (``avcC``, H.264; 14496-15 section 5.3.3.1): byte 0 configurationVersion
  (1), bytes 1-3 profile, compatibility and level, byte 4 six reserved bits and lengthSizeMinusOne (2 bits),
  byte 5 three reserved bits and numOfSequenceParameterSets (5 bits), then each SPS as a 16-bit size and the
  NAL unit, one byte numOfPictureParameterSets, each PPS likewise. High profiles may append the chroma format,
  bit depths and SPS extensions, which FFmpeg's decoder does not read either (ignored here).
- ``HEVCDecoderConfigurationRecord`` (``hvcC``, HEVC; 14496-15 section 8.3.3.1): byte 0 configurationVersion
  (1), bytes 1-20 profile, tier, level and format fields, byte 21 ends with lengthSizeMinusOne (2 bits), byte
  22 numOfArrays; then each array: one byte array_completeness (1 bit), reserved (1) and NAL_unit_type (6),
  a 16-bit numNalus, and each NAL unit as a 16-bit size and its bytes (VPS, SPS, PPS, SEI).

Annex B of H.264 and H.265 frames the same NAL units with a start code (``00 00 00 01``) before each, and
carries the parameter sets in band: the form NVDEC's parser reads (``_cuvid``). ``parameter_sets`` reads a
record once per stream; the session's C side re-frames each packet on its way to the parser, the clip's
first with the stream's parameter sets before it (``_cuvid_clip.c``: ``td_frame``). ``to_annexb`` is the
same re-framing in Python, its reference in the tests. A clip starts at a keyframe (``read_clip``), where
the parameter sets are valid.

Pure functions on bytes.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

from ._container import ClipDecodeError

__all__ = ["START_CODE", "ParameterSets", "parse_avcc", "parse_hvcc", "parameter_sets", "to_annexb"]

#: the start code written before every NAL unit (the four-byte form, valid before any NAL unit)
START_CODE = b"\x00\x00\x00\x01"
_AVCC_HEADER = 6  # bytes before the first SPS's size
_HVCC_HEADER = 23  # bytes before the first array, numOfArrays included


class ParameterSets(NamedTuple):
    """What a length-prefixed stream's decoder configuration record gives its packets' re-framing.

    ``length_size``: bytes of each NAL unit's size in the packets (``lengthSizeMinusOne + 1``).
    ``annexb``: the record's NAL units (SPS, PPS; for HEVC every array: VPS, SPS, PPS, SEI) in its
    order, each after a start code, to go before the first packet a decoder is given.
    """

    length_size: int
    annexb: bytes


def _nal_units(record: bytes, at: int, count: int) -> tuple[list[bytes], int]:
    """``count`` NAL units of ``record`` from ``at``, each a 16-bit big-endian size and its bytes; and
    the offset after them. Raises ``ValueError`` where the record ends before them."""
    units = []
    for _ in range(count):
        if at + 2 > len(record):
            raise ValueError(f"the record ends at byte {len(record)}, inside a NAL unit's size at {at}")
        size = int.from_bytes(record[at: at + 2], "big")
        at += 2
        if at + size > len(record):
            raise ValueError(f"a NAL unit of {size} bytes at {at} runs past the record's {len(record)} bytes")
        if size:
            units.append(record[at: at + size])
        at += size
    return units, at


def _joined(units: list[bytes]) -> bytes:
    return b"".join(START_CODE + unit for unit in units)


def parse_avcc(extradata: bytes) -> ParameterSets:
    """An ``AVCDecoderConfigurationRecord``'s NAL unit size, parameter sets and what each SPS counts a
    decoder's pictures from (see the module docstring). Raises ``ValueError`` for a record that is not
    version 1 or is cut short, or an SPS cut short."""
    record = bytes(extradata)
    if len(record) < _AVCC_HEADER or record[0] != 1:
        raise ValueError("not an avcC record: shorter than its 6-byte header or not configurationVersion 1")
    sps, at = _nal_units(record, _AVCC_HEADER, record[5] & 0x1F)
    if at >= len(record):
        raise ValueError("the avcC record ends before numOfPictureParameterSets")
    pps, _ = _nal_units(record, at + 1, record[at])
    return ParameterSets((record[4] & 0x03) + 1, _joined(sps + pps))


def parse_hvcc(extradata: bytes) -> ParameterSets:
    """An ``HEVCDecoderConfigurationRecord``'s NAL unit size and the NAL units of all its arrays, in
    order (see the module docstring). Raises ``ValueError`` for a record that is not version 1 or is cut
    short."""
    record = bytes(extradata)
    if len(record) < _HVCC_HEADER or record[0] != 1:
        raise ValueError("not an hvcC record: shorter than its 23-byte header or not configurationVersion 1")
    units: list[bytes] = []
    at = _HVCC_HEADER
    for _ in range(record[22]):
        if at + 3 > len(record):
            raise ValueError(f"the hvcC record ends at byte {len(record)}, inside an array's header at {at}")
        found, at = _nal_units(record, at + 3, int.from_bytes(record[at + 1: at + 3], "big"))
        units += found
    return ParameterSets((record[21] & 0x03) + 1, _joined(units))


_PARSERS = {"h264": parse_avcc, "hevc": parse_hvcc}


@functools.lru_cache(maxsize=1024)
def parameter_sets(codec: str, extradata: bytes) -> ParameterSets | None:
    """The parameter sets of an H.264 or HEVC stream whose packets are length-prefixed (extradata an
    avcC or hvcC record, version 1); None for every other stream: other codecs, streams already in
    Annex-B (no extradata, or extradata that starts with a start code) and records that do not parse,
    which are decoded as they are, their extradata given to the decoder (FFmpeg decides)."""
    parse = _PARSERS.get(codec)
    if parse is None or not extradata or extradata[:3] == START_CODE[1:] or extradata[:4] == START_CODE:
        return None
    try:
        return parse(extradata)
    except ValueError:
        return None


def to_annexb(packet: bytes | bytearray | memoryview, length_size: int, prefix: bytes = b"") -> bytes:
    """``packet``'s NAL units, each after a start code instead of its ``length_size``-byte size, with
    ``prefix`` (Annex-B bytes: a stream's parameter sets) before them. Zero-sized NAL units are dropped,
    and so are zero bytes after the last one too few to hold a size (padding).

    Raises ``ClipDecodeError`` where a NAL unit's size runs past the packet's end, bytes other than
    padding follow the last one, or the packet holds no NAL unit (a decoder takes an empty packet for
    the end of the stream).
    """
    view = memoryview(packet).cast("B")
    end = len(view)
    parts: list[bytes | memoryview] = [prefix] if prefix else []
    at = 0
    while end - at >= length_size:
        size = int.from_bytes(view[at: at + length_size], "big")
        at += length_size
        if size > end - at:
            raise ClipDecodeError(f"a NAL unit's size ({size} bytes, at byte {at - length_size}) runs past the "
                                  f"end of its {end}-byte packet: the packet is corrupt, or not "
                                  f"{length_size}-byte length-prefixed as the stream's extradata says")
        if size:
            parts += (START_CODE, view[at: at + size])
        at += size
    if at < end and any(view[at:]):
        raise ClipDecodeError(f"{end - at} bytes after the last NAL unit of a {end}-byte packet, too few for a "
                              f"{length_size}-byte NAL unit size: the packet is corrupt")
    if len(parts) <= (1 if prefix else 0):
        raise ClipDecodeError(f"a {end}-byte packet holds no NAL unit")
    return b"".join(parts)
