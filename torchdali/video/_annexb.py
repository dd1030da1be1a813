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
carries the parameter sets in band. A decoder created without extradata and fed Annex-B takes each stream's
parameter sets where they appear, so one decoder serves many streams of a size, whatever their extradata:
``parameter_sets`` reads a record once per stream, ``to_annexb`` re-frames each packet (the clip's first
with the stream's parameter sets before it). A clip starts at a keyframe (``read_clip``), where the
parameter sets are valid.

Not every stream of a size: FFmpeg's H.264 decoder re-creates its hardware decoder only when the size or
format changes, and NVDEC's holds the surfaces counted from the first SPS it saw (``max_num_ref_frames``
plus the reorder depth, ``nvdec_h264.c``): too few for a stream that keeps more pictures. So the SPS fields
that count them (``ParameterSets.dpb``, from ``h264_dpb``: ITU-T H.264 sections 7.3.2.1.1 and E.1.1) are
part of what a decoder is shared on. FFmpeg's HEVC decoder re-creates its hardware decoder for every new
SPS, so HEVC streams need nothing more.

Pure functions on bytes; ``to_annexb`` runs per packet in the decode threads, so it walks only the NAL
sizes and copies the payloads once, by slices.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

from ._container import ClipDecodeError

__all__ = ["START_CODE", "ParameterSets", "h264_dpb", "parse_avcc", "parse_hvcc", "parameter_sets", "to_annexb"]

#: the start code written before every NAL unit (the four-byte form, valid before any NAL unit)
START_CODE = b"\x00\x00\x00\x01"
_AVCC_HEADER = 6  # bytes before the first SPS's size
_HVCC_HEADER = 23  # bytes before the first array, numOfArrays included


class ParameterSets(NamedTuple):
    """What a length-prefixed stream's decoder configuration record gives its packets' re-framing.

    ``length_size``: bytes of each NAL unit's size in the packets (``lengthSizeMinusOne + 1``).
    ``annexb``: the record's NAL units (SPS, PPS; for HEVC every array: VPS, SPS, PPS, SEI) in its
    order, each after a start code, to go before the first packet a decoder is given.
    ``dpb``: for H.264, ``h264_dpb`` of each SPS (what a hardware decoder's surfaces are counted from);
    empty for HEVC (see the module docstring).
    """

    length_size: int
    annexb: bytes
    dpb: tuple = ()


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


class _Bits:
    """An RBSP read bit by bit, most significant first, with H.264's Exp-Golomb codes (section 9.1).
    Raises ``ValueError`` past its end."""

    def __init__(self, rbsp: bytes) -> None:
        self.value = int.from_bytes(rbsp, "big")
        self.left = 8 * len(rbsp)

    def u(self, n: int) -> int:
        if n > self.left:
            raise ValueError("the SPS ends early")
        self.left -= n
        return (self.value >> self.left) & ((1 << n) - 1)

    def ue(self) -> int:
        zeros = 0
        while not self.u(1):
            zeros += 1
            if zeros > 31:
                raise ValueError("an Exp-Golomb code longer than 32 bits in the SPS")
        return (1 << zeros) - 1 + self.u(zeros)

    def se(self) -> int:
        k = self.ue()
        return (k + 1) // 2 if k & 1 else -(k // 2)


# profile_idc values whose SPS carries chroma_format_idc, bit depths and scaling matrices (7.3.2.1.1)
_HIGH_PROFILES = frozenset({100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135})


def _skip_hrd(bits: _Bits) -> None:
    """hrd_parameters() (E.1.2)."""
    count = bits.ue() + 1  # cpb_cnt_minus1
    bits.u(8)  # bit_rate_scale, cpb_size_scale
    for _ in range(count):
        bits.ue()
        bits.ue()
        bits.u(1)
    bits.u(20)  # four 5-bit lengths


def h264_dpb(sps: bytes) -> tuple[int, int | None, int | None]:
    """What an H.264 SPS NAL unit (header byte included) counts a decoder's pictures from:
    ``(max_num_ref_frames, max_num_reorder_frames, level_idc)``. The reorder depth is None where the
    VUI has no bitstream restriction; then FFmpeg derives it from the level and the size, so the level is
    given (None otherwise). Raises ``ValueError`` for an SPS cut short."""
    bits = _Bits(bytes(sps[1:]).replace(b"\x00\x00\x03", b"\x00\x00"))  # emulation prevention bytes out
    profile = bits.u(8)
    bits.u(8)  # constraint flags
    level = bits.u(8)
    bits.ue()  # seq_parameter_set_id
    if profile in _HIGH_PROFILES:
        chroma = bits.ue()
        if chroma == 3:
            bits.u(1)  # separate_colour_plane_flag
        bits.ue()  # bit_depth_luma_minus8
        bits.ue()  # bit_depth_chroma_minus8
        bits.u(1)  # qpprime_y_zero_transform_bypass_flag
        if bits.u(1):  # seq_scaling_matrix_present_flag
            for i in range(12 if chroma == 3 else 8):
                if bits.u(1):  # scaling_list() (7.3.2.1.1.1): deltas until one makes the next scale 0
                    last = following = 8
                    for _ in range(16 if i < 6 else 64):
                        if following:
                            following = (last + bits.se() + 256) % 256
                        last = following or last
    bits.ue()  # log2_max_frame_num_minus4
    poc_type = bits.ue()
    if poc_type == 0:
        bits.ue()  # log2_max_pic_order_cnt_lsb_minus4
    elif poc_type == 1:
        bits.u(1)
        bits.se()
        bits.se()
        for _ in range(bits.ue()):
            bits.se()
    refs = bits.ue()
    bits.u(1)  # gaps_in_frame_num_value_allowed_flag
    bits.ue()  # pic_width_in_mbs_minus1
    bits.ue()  # pic_height_in_map_units_minus1
    if not bits.u(1):  # frame_mbs_only_flag
        bits.u(1)
    bits.u(1)  # direct_8x8_inference_flag
    if bits.u(1):  # frame_cropping_flag
        for _ in range(4):
            bits.ue()
    if not bits.u(1):  # vui_parameters_present_flag
        return refs, None, level
    # vui_parameters() (E.1.1)
    if bits.u(1) and bits.u(8) == 255:  # aspect_ratio_info_present_flag, aspect_ratio_idc: Extended_SAR
        bits.u(32)
    if bits.u(1):  # overscan_info_present_flag
        bits.u(1)
    if bits.u(1):  # video_signal_type_present_flag
        bits.u(4)
        if bits.u(1):  # colour_description_present_flag
            bits.u(24)
    if bits.u(1):  # chroma_loc_info_present_flag
        bits.ue()
        bits.ue()
    if bits.u(1):  # timing_info_present_flag
        bits.u(65)
    nal_hrd = bits.u(1)
    if nal_hrd:
        _skip_hrd(bits)
    vcl_hrd = bits.u(1)
    if vcl_hrd:
        _skip_hrd(bits)
    if nal_hrd or vcl_hrd:
        bits.u(1)  # low_delay_hrd_flag
    bits.u(1)  # pic_struct_present_flag
    if not bits.u(1):  # bitstream_restriction_flag
        return refs, None, level
    bits.u(1)  # motion_vectors_over_pic_boundaries_flag
    for _ in range(4):  # max_bytes_per_pic_denom, max_bits_per_mb_denom, log2_max_mv_length_{horizontal,vertical}
        bits.ue()
    return refs, bits.ue(), None


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
    return ParameterSets((record[4] & 0x03) + 1, _joined(sps + pps), tuple(h264_dpb(unit) for unit in sps))


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
