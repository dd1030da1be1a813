"""H.264 and HEVC packets re-framed from MP4's length-prefixed form to Annex-B (``torchdali.video._annexb``),
the form NVDEC's parser reads (``_nvdec._packets``, re-framed by the session's C side: ``_cuvid.parser_payloads``).

References: FFmpeg's own ``h264_mp4toannexb`` / ``hevc_mp4toannexb`` bitstream filters for the NAL units,
FFmpeg's software decoder given the stream's extradata
(what the CPU path does) and PyAV's sequential decode of the whole file for the frames. The same decoder
gives the same bits, so frames must be equal.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np
import pytest
import torch

av = pytest.importorskip("av")

from tests import _video  # noqa: E402
from torchdali.video import ClipDecodeError, EncodedClip, VideoInfo, decode_clip_nv12, probe, read_clip  # noqa: E402
from torchdali.video._annexb import (  # noqa: E402
    START_CODE, ParameterSets, parameter_sets, parse_avcc, parse_hvcc, to_annexb,
)
from torchdali.video import _nvdec  # noqa: E402
from torchdali.video._cuvid import parser_payloads  # noqa: E402
from torchdali.video._nvdec import NVDEC_FAILURES, ClipDecoder, _Lane, _packets, stream_key  # noqa: E402

av.logging.set_level(av.logging.PANIC)  # the decodes without parameter sets make FFmpeg log errors on purpose


def _has_encoder(name: str) -> bool:
    try:
        av.Codec(name, "w")
    except Exception:
        return False
    return True


CODECS = ["h264"] + (["hevc"] if _has_encoder("libx265") else [])
_ENCODER = {"h264": "libx264", "hevc": "libx265"}
_OPTIONS = {
    "h264": {"bf": "3", "g": "8", "x264-params": "keyint=8:min-keyint=8:scenecut=0:log-level=error"},
    "hevc": {"x265-params": "keyint=8:min-keyint=8:bframes=3:scenecut=0:open-gop=0:log-level=error"},
}
#: one reference frame, no B-frames: a decoder that kept the others' SPS would decode these pictures wrongly
#: (x264 counts them with another picture order count type; x265 codes them without SAO)
_SIMPLE = {
    "h264": {"bf": "0", "g": "8", "x264-params": "keyint=8:min-keyint=8:scenecut=0:ref=1:bframes=0:log-level=error"},
    "hevc": {"x265-params": "keyint=8:min-keyint=8:bframes=0:ref=1:sao=0:scenecut=0:open-gop=0:log-level=error"},
}
#: name -> (width, height, frame rate): two videos of one size whose frame rates differ (so do their
#: SPS's timing fields, hence their extradata), a third of that size encoded otherwise, one of another size
_SHAPES = {"same_25": (64, 48, 25), "same_30": (64, 48, 30), "same_simple": (64, 48, 25), "other": (80, 64, 25)}
FRAMES = 24
#: clips (frame indices): from the first keyframe, from one inside (frame 8 is one), and across two GOPs
WINDOWS = [np.arange(0, 8), np.arange(10, 18), np.arange(13, 24, 2)]
_NAL_TYPE = {"h264": lambda b: b & 0x1F, "hevc": lambda b: (b >> 1) & 0x3F}
_PARAMETER_SETS = {"h264": {7, 8}, "hevc": {32, 33, 34}}


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """codec -> name -> path of an mp4; ``same_25`` also as mkv (``same_25_mkv``)."""
    folder = tmp_path_factory.mktemp("annexb")
    out: dict[str, dict[str, str]] = {}
    for codec in CODECS:
        out[codec] = {}
        for name, (w, h, rate) in _SHAPES.items():
            options = (_SIMPLE if name == "same_simple" else _OPTIONS)[codec]
            out[codec][name] = _video.write_video(folder / f"{codec}_{name}.mp4", codec=_ENCODER[codec], frames=FRAMES,
                                                  width=w, height=h, rate=rate, options=options)
        w, h, rate = _SHAPES["same_25"]
        out[codec]["same_25_mkv"] = _video.write_video(folder / f"{codec}_same_25.mkv", codec=_ENCODER[codec],
                                                       frames=FRAMES, width=w, height=h, rate=rate,
                                                       options=_OPTIONS[codec])
    return out


def _clips(path: str) -> list[EncodedClip]:
    info = probe(path)
    return [read_clip(path, w, info) for w in WINDOWS]


def _nal_units(annexb: bytes) -> list[bytes]:
    """The NAL units of an Annex-B byte stream (start codes of 3 or 4 bytes). A NAL unit never holds
    ``00 00 01`` (emulation prevention) nor ends in a zero byte, so the split is exact."""
    return [unit.rstrip(b"\x00") for unit in annexb.split(b"\x00\x00\x01") if unit.rstrip(b"\x00")]


def _reframed(clip: EncodedClip, prefix: bool = True) -> list[bytes]:
    sets = parameter_sets(clip.codec, clip.extradata)
    assert sets is not None
    return [to_annexb(clip.packet(j), sets.length_size, sets.annexb if prefix and j == 0 else b"")
            for j in range(clip.num_packets)]


def _software(codec: str, extradata: bytes = b"") -> Any:
    ctx = av.CodecContext.create(codec, "r")
    if extradata:
        ctx.extradata = extradata
    return ctx


def _decode(ctx: Any, clip: EncodedClip, payloads: list[bytes]) -> dict[int, np.ndarray]:
    """pts -> the planes (``to_ndarray``) of every frame ``ctx`` gives for ``payloads`` (the clip's
    packets, re-framed or not), then drained, as ``_nvdec`` and ``_container`` feed a decoder."""
    out: dict[int, np.ndarray] = {}

    def take(frames: list) -> None:
        for frame in frames:
            out.setdefault(frame.pts, frame.to_ndarray())

    for j, payload in enumerate(payloads):
        packet = av.Packet(payload)
        packet.pts = int(clip.pts[j])
        packet.dts = None if clip.dts[j] == VideoInfo.NO_TIMESTAMP else int(clip.dts[j])
        packet.is_keyframe = bool(clip.key[j])
        take(ctx.decode(packet))
    take(ctx.decode(None))
    return out


_REFERENCE: dict[str, dict[int, np.ndarray]] = {}


def _reference(path: str) -> dict[int, np.ndarray]:
    """pts -> planes of every frame of ``path``, decoded sequentially by PyAV from the file."""
    if path not in _REFERENCE:
        _REFERENCE[path] = {frame.pts: frame.to_ndarray() for frame in _video.decode_all(path)}
    return _REFERENCE[path]


def _assert_frames(got: dict[int, np.ndarray], clip: EncodedClip, path: str, where: str) -> None:
    want = _reference(path)
    for pts in clip.frame_pts.tolist():
        assert pts in got, f"{where}: no frame for pts {pts}"
        assert np.array_equal(got[pts], want[pts]), f"{where}: the frame at pts {pts} differs"


# -- parsing ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_same_size_videos_have_different_extradata(videos: dict[str, dict[str, str]], codec: str) -> None:
    """The premise of sharing a decoder: the extradata of two videos of one size differ."""
    a, b = probe(videos[codec]["same_25"]), probe(videos[codec]["same_30"])
    assert (a.width, a.height) == (b.width, b.height)
    assert a.extradata != b.extradata


@pytest.mark.parametrize("codec", CODECS)
def test_the_records_parameter_sets_are_found(videos: dict[str, dict[str, str]], codec: str) -> None:
    """H.264: SPS (nal_unit_type 7), PPS (8); HEVC: VPS (32), SPS (33), PPS (34) first, then SEI (39, 40)
    if any. The record's length size is 4 (what x264 and x265 write, in mp4 and mkv alike)."""
    for name, path in videos[codec].items():
        info = probe(path)
        sets = parameter_sets(info.codec, info.extradata)
        assert sets is not None and sets.length_size == 4, name
        assert sets.annexb.startswith(START_CODE)
        types = [_NAL_TYPE[codec](unit[0]) for unit in _nal_units(sets.annexb)]
        if codec == "h264":
            assert types == [7, 8], (name, types)
        else:
            assert types[:3] == [32, 33, 34] and set(types[3:]) <= {39, 40}, (name, types)


@pytest.mark.parametrize("codec", CODECS)
def test_reframed_packets_hold_ffmpegs_mp4toannexb_nal_units(videos: dict[str, dict[str, str]], codec: str) -> None:
    """Every packet of the file re-framed holds the NAL units FFmpeg's bitstream filter makes of it,
    in order. The filter puts the parameter sets before each keyframe's first slice; ``to_annexb`` puts
    the record's before the packet it is given as the first (here every keyframe)."""
    path = videos[codec]["same_30"]
    info = probe(path)
    sets = parameter_sets(info.codec, info.extradata)
    assert sets is not None
    mine = _nal_units(sets.annexb)
    kinds = _PARAMETER_SETS[codec]
    with av.open(path) as container:
        stream = container.streams.video[0]
        bsf = av.bitstream.BitStreamFilterContext(f"{codec}_mp4toannexb", stream)
        count = 0
        for packet in container.demux(stream):
            if packet.size == 0:
                continue
            key, raw = packet.is_keyframe, bytes(packet)
            got = _nal_units(to_annexb(raw, sets.length_size, sets.annexb if key else b""))
            want = [u for out in bsf.filter(packet) for u in _nal_units(bytes(out))]
            assert [u for u in got if _NAL_TYPE[codec](u[0]) not in kinds] == \
                   [u for u in want if _NAL_TYPE[codec](u[0]) not in kinds], f"packet {count}"
            if key:
                assert got[:len(mine)] == mine
                assert [u for u in want if _NAL_TYPE[codec](u[0]) in kinds] == \
                       [u for u in mine if _NAL_TYPE[codec](u[0]) in kinds], f"packet {count}"
            count += 1
    assert count == info.num_frames


# -- decoding --------------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_a_decoder_without_extradata_fed_annexb_gives_the_same_frames(videos: dict[str, dict[str, str]],
                                                                       codec: str) -> None:
    """Each clip decoded by a software decoder created without extradata from the re-framed packets equals
    the same packets decoded by one given the extradata, and the file decoded from its start. Without the
    parameter sets before it, a clip that starts inside the file gives none of its frames: the encoders
    put them in the record only, so the prefix is what decodes it."""
    for name, path in videos[codec].items():
        for k, clip in enumerate(_clips(path)):
            raw = [bytes(clip.packet(j)) for j in range(clip.num_packets)]
            reference = _decode(_software(codec, clip.extradata), clip, raw)
            got = _decode(_software(codec), clip, _reframed(clip))
            _assert_frames(reference, clip, path, f"{name} clip {k} (extradata)")
            _assert_frames(got, clip, path, f"{name} clip {k} (Annex-B)")
            assert got.keys() == reference.keys()
            if k == 1:
                try:
                    bare = _decode(_software(codec), clip, _reframed(clip, prefix=False))
                except av.FFmpegError:
                    bare = {}
                assert not set(bare) & set(clip.frame_pts.tolist()), name


@pytest.mark.parametrize("codec", CODECS)
def test_one_decoder_reused_across_videos_of_a_size(videos: dict[str, dict[str, str]], codec: str) -> None:
    """One software decoder, flushed between clips, decodes clips of the same-size videos in turn, each fed
    its own parameter sets: every frame equals the file's own, decoded by a decoder of its own. One of them
    is encoded otherwise, so that a decoder keeping another stream's SPS would decode its pictures wrongly."""
    ctx = _software(codec)
    paths = [videos[codec][n] for n in ("same_25", "same_30", "same_simple", "same_25_mkv")]
    turns = [(p, k, clip) for k in range(len(WINDOWS)) for p in paths for clip in [_clips(p)[k]]]
    turns += turns[::-1]
    for n, (path, k, clip) in enumerate(turns):
        if n:
            ctx.flush_buffers()
        _assert_frames(_decode(ctx, clip, _reframed(clip)), clip, path, f"turn {n}: {os.path.basename(path)} clip {k}")


# -- SPSs built by hand ---------------------------------------------------------------------------

class _Writer:
    """An H.264 RBSP written bit by bit, with Exp-Golomb codes; ``nal`` adds the header, the stop bit and
    the emulation prevention bytes (7.4.1)."""

    def __init__(self) -> None:
        self.bits: list[int] = []

    def u(self, n: int, value: int) -> "_Writer":
        self.bits += [(value >> (n - 1 - i)) & 1 for i in range(n)]
        return self

    def ue(self, value: int) -> "_Writer":
        n = (value + 1).bit_length()
        return self.u(n - 1, 0).u(n, value + 1)

    def se(self, value: int) -> "_Writer":
        return self.ue(2 * value - 1 if value > 0 else -2 * value)

    def nal(self, header: int = 0x67) -> bytes:
        bits = self.bits + [1] + [0] * (-(len(self.bits) + 1) % 8)
        rbsp = bytes(int("".join(map(str, bits[i: i + 8])), 2) for i in range(0, len(bits), 8))
        out, zeros = bytearray([header]), 0
        for byte in rbsp:
            if zeros >= 2 and byte <= 3:
                out.append(3)
                zeros = 0
            out.append(byte)
            zeros = zeros + 1 if byte == 0 else 0
        return bytes(out)


def _sps(profile: int, level: int, refs: int, *, scaling: list[list[int]] | None = None, poc_type: int = 0,
         vui: str = "none", reorder: int = 0) -> bytes:
    """An SPS of 64 x 48 (4 x 3 macroblocks). ``scaling``: the delta_scale values of each list present
    (high profiles); ``vui``: "none", "no_restriction" (timing only: the 31 leading zero bits of its
    tick need an emulation prevention byte) or "restriction" (``reorder`` pictures)."""
    w = _Writer().u(8, profile).u(8, 0).u(8, level).ue(0)
    if profile == 100:
        w.ue(1).ue(0).ue(0).u(1, 0).u(1, scaling is not None)
        if scaling is not None:
            for i in range(8):
                present = i < len(scaling) and scaling[i] is not None
                w.u(1, present)
                if present:
                    for delta in scaling[i]:
                        w.se(delta)
    w.ue(0).ue(poc_type)
    if poc_type == 0:
        w.ue(2)
    elif poc_type == 1:
        w.u(1, 0).se(-1).se(2).ue(3).se(1).se(-2).se(0)
    w.ue(refs).u(1, 0).ue(3).ue(2).u(1, 1).u(1, 1).u(1, 0)
    if vui == "none":
        return w.u(1, 0).nal()
    w.u(1, 1).u(1, 0).u(1, 0).u(1, 0).u(1, 0)  # no aspect ratio, overscan, signal type, chroma siting
    w.u(1, 1).u(32, 1).u(32, 50).u(1, 1)  # timing: 1/50 s ticks
    w.u(1, 0).u(1, 0).u(1, 0)  # no HRD, pic_struct
    if vui == "no_restriction":
        return w.u(1, 0).nal()
    return w.u(1, 1).u(1, 1).ue(2).ue(1).ue(16).ue(16).ue(reorder).ue(refs).nal()


def test_payloads_are_what_the_parser_takes(videos: dict[str, dict[str, str]]) -> None:
    """What the session feeds the parser (``_packets``, re-framed by its C side): an MP4-form stream
    re-framed, its parameter sets first, decodes to the file's own frames on a decoder given no extradata;
    Annex-B extradata goes before the first packet; a record that does not parse, and other codecs, leave
    the packets as they are."""
    for codec in CODECS:
        path = videos[codec]["same_25"]
        for k, clip in enumerate(_clips(path)):
            payloads = parser_payloads(_packets(clip))
            _assert_frames(_decode(_software(codec), clip, payloads), clip, path, f"clip {k}")
    clip = _clips(videos["h264"]["same_25"])[0]
    sets = parameter_sets(clip.codec, clip.extradata)
    assert sets is not None
    raw = [bytes(clip.packet(j)) for j in range(clip.num_packets)]
    annexb = dataclasses.replace(clip, extradata=sets.annexb)
    assert parser_payloads(_packets(annexb)) == [sets.annexb + raw[0]] + raw[1:]
    for odd in (dataclasses.replace(clip, extradata=clip.extradata[:20]), dataclasses.replace(clip, extradata=b""),
                dataclasses.replace(clip, codec="vp9")):
        assert parser_payloads(_packets(odd)) == raw


# -- malformed input -------------------------------------------------------------------------------

def _avcc(sps: bytes, pps: bytes, length_size: int = 4) -> bytes:
    return (bytes([1, 0x64, 0, 0x0A, 0xFC | (length_size - 1), 0xE1]) + len(sps).to_bytes(2, "big") + sps
            + b"\x01" + len(pps).to_bytes(2, "big") + pps)


def _hvcc(arrays: list[tuple[int, list[bytes]]], length_size: int = 4) -> bytes:
    header = bytearray(23)
    header[0], header[21], header[22] = 1, 0x0C | (length_size - 1), len(arrays)
    body = b"".join(bytes([0x80 | t]) + len(units).to_bytes(2, "big")
                    + b"".join(len(u).to_bytes(2, "big") + u for u in units) for t, units in arrays)
    return bytes(header) + body


def test_records_built_by_hand_parse() -> None:
    sps, pps = _sps(100, 30, 3, vui="restriction", reorder=1), b"\x68\xeb\xe3"
    whole = START_CODE + sps + START_CODE + pps
    assert parse_avcc(_avcc(sps, pps, 2)) == ParameterSets(2, whole)
    # high profiles may append chroma format, bit depths and SPS extensions: not read
    assert parse_avcc(_avcc(sps, pps) + b"\xfd\xf8\xf8\x00") == ParameterSets(4, whole)
    vps, hevc_sps, sei = b"\x40\x01\x0c", b"\x42\x01\x01", b"\x4e\x01\x05"
    record = _hvcc([(32, [vps]), (33, [hevc_sps]), (34, [pps, pps]), (39, [sei])], 1)
    assert parse_hvcc(record) == ParameterSets(1, b"".join(START_CODE + u for u in (vps, hevc_sps, pps, pps, sei)))


def test_malformed_records_fall_back() -> None:
    """Cut short anywhere, or of another version: ``ValueError`` from the parsers, None from
    ``parameter_sets`` (the stream's packets then go to the parser as they are)."""
    sps, pps = _sps(66, 30, 3), b"\x68\xeb\xe3"
    avcc, hvcc = _avcc(sps, pps), _hvcc([(32, [b"\x40\x01"]), (33, [b"\x42\x01\x01"]), (34, [pps])])
    for codec, record, parse in (("h264", avcc, parse_avcc), ("hevc", hvcc, parse_hvcc)):
        for cut in range(1, len(record)):
            if record[:cut][:3] == START_CODE[1:]:
                continue
            with pytest.raises(ValueError):
                parse(record[:cut])
            assert parameter_sets(codec, record[:cut]) is None, cut
        for version in (0, 2):
            with pytest.raises(ValueError, match="configurationVersion 1"):
                parse(bytes([version]) + record[1:])
            assert parameter_sets(codec, bytes([version]) + record[1:]) is None
        assert parameter_sets(codec, record) == parse(record)


def test_packets_reframed_and_malformed_packets_refused() -> None:
    a, b = b"\x65\x88\x84\x00\x21", b"\x06\x05\x01\x80"
    framed = len(a).to_bytes(4, "big") + a + len(b).to_bytes(4, "big") + b
    assert to_annexb(framed, 4) == START_CODE + a + START_CODE + b
    assert to_annexb(bytearray(len(a).to_bytes(2, "big") + a), 2, b"P") == b"P" + START_CODE + a
    assert to_annexb(memoryview(bytes([len(a)]) + a), 1) == START_CODE + a
    # zero-sized NAL units and zero padding too short for a size are dropped
    assert to_annexb(b"\x00\x00\x00\x00" + len(a).to_bytes(4, "big") + a + b"\x00\x00", 4) == START_CODE + a
    with pytest.raises(ClipDecodeError, match="runs past the end"):
        to_annexb((len(a) + 1).to_bytes(4, "big") + a, 4)
    with pytest.raises(ClipDecodeError, match="after the last NAL unit"):
        to_annexb(len(a).to_bytes(4, "big") + a + b"\x00\x01", 4)
    for empty in (b"", b"\x00\x00\x00\x00"):
        with pytest.raises(ClipDecodeError, match="holds no NAL unit"):
            to_annexb(empty, 4, b"P")


class _Feeder:
    """A stand-in for a decode thread's NVDEC session: it re-frames every packet as its C side does."""

    def decode(self, codec: str, packets: Any, *args: Any) -> int:
        return len(parser_payloads(packets))


def test_a_malformed_packet_fails_its_stream_only(videos: dict[str, dict[str, str]],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A clip whose packet's NAL size runs past its end goes the way of NVDEC's failures (counted against
    its own stream, the clip to the CPU): another video of its size is still sent to NVDEC after
    ``NVDEC_FAILURES`` of them. The thread's lane and session are stand-ins: no GPU is touched."""
    good = _clips(videos["h264"]["same_30"])[0]
    clip = _clips(videos["h264"]["same_25"])[0]
    data = clip.data.copy()
    data[int(clip.offsets[0]): int(clip.offsets[0]) + 4] = 0xFF
    bad = dataclasses.replace(clip, data=data)
    monkeypatch.setattr(_nvdec, "refuse", lambda codec, width, height: None)  # the engines' range, untouched
    decoder = ClipDecoder("cuda:0")
    lane = _Lane(copy_stream=None, done=None, session=_Feeder())  # type: ignore[arg-type]
    decoder._lane = lambda: lane  # type: ignore[method-assign]
    for n in range(NVDEC_FAILURES):
        assert decoder._refuse(bad) is None
        assert decoder._nvdec(bad, torch.empty(0, dtype=torch.uint8), np.zeros(bad.num_frames, np.int64)) is None
    assert decoder._failures == {stream_key(bad): NVDEC_FAILURES}
    (why, count), = decoder.reasons.items()
    assert count == NVDEC_FAILURES and why.startswith("NVDEC failed: ClipDecodeError: a NAL unit's size")
    assert decoder._refuse(bad) is not None
    assert decoder._refuse(good) is None


# -- on the GPU ------------------------------------------------------------------------------------

_GPU = {"h264": "keyint=40:min-keyint=40:scenecut=0:bframes=3:log-level=error",
        "hevc": "keyint=40:min-keyint=40:scenecut=0:bframes=3:open-gop=0:log-level=error"}
#: more reference frames (and, for H.264, a deeper B-pyramid) than the others: more decode surfaces
_GPU_REFS = {"h264": ":ref=16:b-pyramid=normal", "hevc": ":ref=5:bframes=4"}


@pytest.mark.cuda
@pytest.mark.parametrize("codec", CODECS)
def test_nvdec_shares_one_decoder_across_videos_of_a_size(tmp_path: Any, codec: str) -> None:
    """Clips of three videos of one size (160 x 144: NVDEC's smallest HEVC frame is 144 x 144) decoded in
    turn through one decode thread, whose session keeps one decoder for them all: two differ in frame rate
    (so in their records), a third keeps more reference frames (the decoder is re-made with more surfaces
    once, then serves the others too). Every clip goes to NVDEC and every frame equals the CPU's."""
    specs = [("rate_25", 25, ""), ("rate_30", 30, ""), ("refs", 25, _GPU_REFS[codec])]
    paths = [_video.write_video(tmp_path / f"{name}.mp4", codec=_ENCODER[codec], frames=40, width=160, height=144,
                                rate=rate, options={"x264-params" if codec == "h264" else "x265-params":
                                                    _GPU[codec] + extra})
             for name, rate, extra in specs]
    infos = [probe(p) for p in paths]
    assert len({i.extradata for i in infos}) == 3
    windows = [np.arange(0, 32), np.arange(5, 40, 3), np.arange(30, 40)]
    clips = [read_clip(p, w, i) for w in windows for p, i in zip(paths, infos)]
    clips += clips[::-1]
    decoder, stream = ClipDecoder("cuda", threads=1), torch.cuda.Stream()
    try:
        for n, clip in enumerate(clips):
            out = decoder.decode([clip], stream)
            assert (out.nvdec, out.cpu) == (1, 0), (n, decoder.reasons)
            ref = decode_clip_nv12(clip)
            H, W = clip.height, clip.width
            for f in range(clip.num_frames):
                o = int(out.offsets[f])
                host = out.data[o: o + H * W * 3 // 2].cpu().numpy()
                assert np.array_equal(host[: H * W].reshape(H, W), ref.y[f]), f"clip {n}, frame {f}: Y"
                assert np.array_equal(host[H * W:].reshape(H // 2, W // 2, 2), ref.uv[f]), f"clip {n}, frame {f}: CbCr"
        (lane,) = decoder._lanes.values()
        assert len(lane.session._decoders) == 1
        assert decoder.reasons == {} and decoder._failures == {}
    finally:
        decoder.close()
