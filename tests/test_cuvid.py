"""The NVDEC session (``torchdali.video._cuvid`` and its C side, ``_cuvid_clip.c``) on the CPU: its
structures against NVIDIA's headers, the C side's re-framing against ``_annexb.to_annexb``, and what the
session does with the parser's callbacks, against a stand-in driver that plays the parser and the decoder
(``_FakeDriver``), called by the compiled C side as the real one is. The session's real decodes, bit for
bit against FFmpeg's software decoder, are the GPU tests (``test_video_nvdec.py``, ``test_clip_merge.py``,
``test_annexb.py``)."""
from __future__ import annotations

import ctypes
import random
import warnings
from typing import Any, Callable

import numpy as np
import pytest

from torchdali.video import ClipDecodeError
from torchdali.video import _cuvid as cuvid
from torchdali.video._annexb import to_annexb


# -- the structures ----------------------------------------------------------------------------------

def test_structures_have_the_sdk_headers_layout() -> None:
    """Sizes and the offsets the session relies on, as a C compiler lays out ``nvcuvid.h`` and ``cuviddec.h``
    (Video Codec SDK 13.0, from FFmpeg's nv-codec-headers) on 64-bit Linux."""
    sizes = {cuvid.VideoFormat: 64, cuvid._DisplayInfo: 24, cuvid._Packet: 32, cuvid._ParserParams: 136,
             cuvid._CreateInfo: 176, cuvid._ProcParams: 264, cuvid._DecodeCaps: 88, cuvid.Memcpy2D: 128}
    assert {s.__name__: ctypes.sizeof(s) for s in sizes} == {s.__name__: n for s, n in sizes.items()}
    assert cuvid._ParserParams.pUserData.offset == 40 and cuvid._ParserParams.pExtVideoInfo.offset == 128
    assert cuvid._CreateInfo.display_area.offset == 80 and cuvid._CreateInfo.vidLock.offset == 120
    assert cuvid._ProcParams.output_stream.offset == 56
    assert (cuvid._PIC_CURR_IDX, cuvid._PIC_REF_FLAG) == (8, 56)  # CUVIDPICPARAMS's CurrPicIdx, ref_pic_flag


def test_a_missing_library_is_a_runtime_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> Any:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(cuvid, "_lib", None)
    monkeypatch.setattr(cuvid._c, "CDLL", missing)
    with pytest.raises(RuntimeError, match="libnvcuvid.so.1"):
        cuvid.library()


def test_codecs_it_does_not_feed_are_refused_without_the_driver() -> None:
    assert cuvid.refuse("av1", 64, 48) == "codec av1"
    assert cuvid.refuse("mpeg4", 64, 48) == "codec mpeg4"


def test_the_c_side_has_the_session_structures_layout() -> None:
    """``td_clip`` as the C compiler lays it out is ``_ClipState`` (``native`` refuses to load otherwise)."""
    assert cuvid.native().td_clip_size() == ctypes.sizeof(cuvid._ClipState)


def _mp4_packet(rng: random.Random, length_size: int) -> bytes:
    sizes = [0, 1, 2, 5, 40] + ([300, 1000] if length_size > 1 else [255])  # sizes of more than one byte
    units = [bytes(rng.randrange(256) for _ in range(rng.choice(sizes))) for _ in range(rng.randint(1, 4))]
    if not any(units):
        units.append(b"\x65")
    return b"".join(len(u).to_bytes(length_size, "big") + u for u in units) + b"\x00" * rng.choice([0, 0, 1])


@pytest.mark.parametrize("length_size", [1, 2, 4])
def test_the_c_side_reframes_packets_as_to_annexb(length_size: int) -> None:
    """``td_frame`` (what ``td_decode`` feeds the parser) against ``to_annexb``, on packets with empty NAL
    units and padding, the prefix before the first packet only; and its refusals, with ``to_annexb``'s
    messages."""
    rng = random.Random(length_size)
    raw = [_mp4_packet(rng, length_size) for _ in range(30)]
    data = np.frombuffer(b"".join(raw), dtype=np.uint8)
    offsets = np.cumsum([0] + [len(p) for p in raw])
    pts = np.arange(len(raw)) * 3
    got = cuvid.parser_payloads(cuvid.Packets(data, offsets, pts, b"SETS", length_size))
    assert got == [to_annexb(p, length_size, b"SETS" if j == 0 else b"") for j, p in enumerate(raw)]
    unit = b"\x41\x42\x43"
    for bad in (len(unit + b"!").to_bytes(length_size, "big") + unit,  # runs past the end
                len(unit).to_bytes(length_size, "big") + unit + b"\x07",  # bytes after the last unit
                b"\x00" * length_size):  # no unit
        packet = np.frombuffer(bad, dtype=np.uint8)
        with pytest.raises(ClipDecodeError) as ours:
            cuvid.parser_payloads(cuvid.Packets(packet, np.array([0, len(bad)]), np.array([0]), b"", length_size))
        with pytest.raises(ClipDecodeError) as reference:
            to_annexb(bad, length_size)
        assert str(ours.value) == str(reference.value)


# -- the callbacks, against a stand-in driver ----------------------------------------------------------

W, H = 64, 48
STREAM, EVENT = 5, 9


class _FakeDriver:
    """``libnvcuvid`` and the CUDA calls the C side makes, played in Python: a parser that reads each packet as
    one picture (its last two bytes: reference flag, display position), calls back sequence (first packet),
    decode (each packet) and display (in display position order, at most ``delay`` pictures held; the rest at
    end of stream) with the smallest timestamp it holds (the driver's parser hands its timestamps out in
    display order, whichever picture's packet brought them), and a decoder whose maps hand out fake
    addresses. It checks the session's use of the API: surfaces, mapped frames at once, a wait on the
    session's event before each unmap; what it finds wrong goes to ``errors`` (a stand-in called from C
    cannot raise into the test)."""

    def __init__(self, *, bits: int = 0, size: tuple[int, int] = (W, H), surfaces: int = 4, fail_decode: int = -1,
                 lose: int | None = None, reformat: int = -1) -> None:
        self.bits, self.size, self.min_surfaces, self.fail_decode, self.lose = bits, size, surfaces, fail_decode, lose
        self.reformat = reformat  # the packet before which a new sequence header asks for more surfaces
        self.created: list[int] = []  # decode surfaces of each decoder made
        self.destroyed = 0
        self.decoded: list[int] = []  # display position of each picture decoded
        self.flags: list[int] = []
        self.payloads: list[bytes] = []
        self.mapped: dict[int, int] = {}  # address -> copies queued since the last wait
        self.max_mapped = 0
        self.parsers = 0
        self.recorded = False
        self.log: list[tuple] = []
        self.errors: list[str] = []
        self.api = cuvid._Api(**{name: cuvid.API[name](self._guard(getattr(self, name))) for name in cuvid.API})

    def _guard(self, fn: Callable[..., int]) -> Callable[..., int]:
        def call(*args: Any) -> int:
            try:
                return fn(*args)
            except Exception as e:  # noqa: BLE001 - reported by the test
                self.errors.append(f"{fn.__name__}: {e!r}")
                return 999
        return call

    # the parser (its creation from Python, its parsing from C)
    def cuvidCreateVideoParser(self, handle: Any, params: Any) -> int:
        self.params = params._obj
        self.parsers += 1
        self.pending: list[tuple[int, int]] = []  # (display position, surface) not yet displayed
        self.stamps: list[int] = []  # timestamps of the pending pictures' packets
        self.started, self.next_surface, self.surfaces = False, 0, 0
        handle._obj.value = 1000 + self.parsers
        return 0

    def cuvidDestroyVideoParser(self, parser: Any) -> int:
        self.parsers -= 1
        return 0

    def parse(self, parser: int, packet_p: Any) -> int:
        p, packet = self.params, packet_p.contents
        self.flags.append(packet.flags)
        if packet.flags & cuvid._PKT_ENDOFSTREAM:
            return self._display(0)
        if len(self.decoded) == self.reformat:
            self.started, self.min_surfaces = False, self.min_surfaces + 6
        payload = ctypes.string_at(ctypes.c_void_p.from_buffer(packet, cuvid._Packet.payload.offset).value,
                                   packet.payload_size)
        self.payloads.append(payload)
        if not self.started:
            fmt = cuvid.VideoFormat(codec=p.CodecType, coded_width=self.size[0], coded_height=self.size[1] + 16,
                                    chroma_format=1, bit_depth_luma_minus8=self.bits, bit_depth_chroma_minus8=self.bits,
                                    min_num_decode_surfaces=self.min_surfaces)
            fmt.display_area = cuvid._Rect(0, 0, self.size[0], self.size[1])
            self.surfaces = p.pfnSequenceCallback(p.pUserData, ctypes.pointer(fmt))
            if not self.surfaces:
                return 0
            self.started = True
        pic = (ctypes.c_int * 64)()
        pic[cuvid._PIC_CURR_IDX // 4] = self.next_surface
        pic[cuvid._PIC_REF_FLAG // 4] = payload[-2]
        self.current = payload[-1]
        if not p.pfnDecodePicture(p.pUserData, ctypes.addressof(pic)):
            return 0
        self.pending.append((payload[-1], self.next_surface))
        self.stamps.append(packet.timestamp)
        self.next_surface = (self.next_surface + 1) % self.surfaces
        return self._display(p.ulMaxDisplayDelay)

    def _display(self, hold: int) -> int:
        self.pending.sort()
        self.stamps.sort()
        while len(self.pending) > hold:
            (position, surface), timestamp = self.pending.pop(0), self.stamps.pop(0)
            if position == self.lose:
                continue
            info = cuvid._DisplayInfo(picture_index=surface, progressive_frame=1, timestamp=timestamp)
            if not self.params.pfnDisplayPicture(self.params.pUserData, ctypes.pointer(info)):
                return 0
        return 0

    # the decoder
    def cuvidCreateDecoder(self, handle: Any, info: Any) -> int:
        info = info._obj
        assert (info.ulTargetWidth, info.ulTargetHeight) == self.size
        assert info.ulNumOutputSurfaces == cuvid.OUTPUT_SURFACES
        self.created.append(info.ulNumDecodeSurfaces)
        handle._obj.value = 77 + len(self.created)
        return 0

    def cuvidDestroyDecoder(self, handle: Any) -> int:
        self.destroyed += 1
        return 0

    def decode_picture(self, decoder: int, pic: int) -> int:
        assert decoder == 77 + len(self.created), "decoded into a decoder other than the newest"
        if len(self.decoded) == self.fail_decode:
            return 700  # CUDA_ERROR_ILLEGAL_ADDRESS, say
        self.decoded.append(self.current)
        return 0

    def map(self, decoder: int, index: int, ptr: Any, pitch: Any, proc: Any) -> int:
        assert proc.contents.output_stream == STREAM and proc.contents.progressive_frame == 1
        address = 0x100000 * (index + 1)
        assert address not in self.mapped
        self.mapped[address] = 0
        self.max_mapped = max(self.max_mapped, len(self.mapped))
        ptr[0], pitch[0] = address, 128
        return 0

    def unmap(self, decoder: int, address: int) -> int:
        assert self.mapped.pop(address) == 0, "unmapped before its copies were waited for"
        return 0

    def copy_2d(self, copy_p: Any, stream: int) -> int:
        c = copy_p.contents
        assert c.srcMemoryType == c.dstMemoryType == 2  # device to device
        self.mapped[c.srcDevice] += 1
        self.log.append((c.dstDevice, c.dstPitch, c.srcDevice, c.srcPitch, c.WidthInBytes, c.Height, stream))
        return 0

    def event_record(self, event: int, stream: int) -> int:
        assert (event, stream) == (EVENT, STREAM)
        self.recorded = True
        return 0

    def event_synchronize(self, event: int) -> int:
        assert event == EVENT and self.recorded, "waited on an event not recorded"
        self.recorded = False
        self.mapped = dict.fromkeys(self.mapped, 0)
        return 0


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(**kwargs: Any) -> _FakeDriver:
        fake = _FakeDriver(**kwargs)
        monkeypatch.setattr(cuvid, "_lib", fake)
        monkeypatch.setattr(cuvid, "_driver_api", fake.api)
        return fake
    return install


#: decode order of a GOP with B-frames: (display position, reference flag)
GOP = [(0, 1), (3, 1), (1, 0), (2, 0), (6, 1), (4, 0), (5, 0), (9, 1), (7, 0), (8, 0)]
PTS = [1000 + 7 * position for position, _ in GOP]  # the packets' timestamps, named in errors


def _packets(gop: list[tuple[int, int]] = GOP, prefix: bytes = b"") -> cuvid.Packets:
    raw = b"".join(bytes([0xAB, ref, position]) for position, ref in gop)
    return cuvid.Packets(np.frombuffer(raw, dtype=np.uint8), np.arange(len(gop) + 1) * 3,
                         np.array([1000 + 7 * position for position, _ in gop]), prefix)


def _outputs(places: dict[int, list[int]], gop: list[tuple[int, int]] = GOP) -> cuvid.Outputs:
    """Display position -> device offsets, as packet ranges."""
    per_packet = [places.get(position, []) for position, _ in gop]
    start = np.cumsum([0] + [len(p) for p in per_packet])
    return cuvid.Outputs(start, np.array([o for p in per_packet for o in p], dtype=np.int64))


@pytest.mark.parametrize("codec", ["h264", "hevc", "vp9"])
def test_wanted_pictures_are_copied_to_each_of_their_places(driver: Any, codec: str) -> None:
    """Every wanted picture is mapped and copied once per place it goes (Y and CbCr in one copy of 3/2 H
    rows from the mapped address, at the frame's pitch, packed); H.264's unwanted pictures that nothing
    refers to are not decoded (HEVC's and VP9's are: see the module docstring); never more
    frames mapped than the decoder's output surfaces, each unmapped only after a wait; the prefix goes
    before the first packet only."""
    fake = driver()
    places = {1: [0], 2: [18432], 4: [36864, 55296], 7: [73728]}  # position 4 goes to two places
    session = cuvid.Session(stream=STREAM, event=EVENT)
    pictures = session.decode(codec, _packets(prefix=b"SETS"), W, H, _outputs(places), 1 << 40)
    assert fake.errors == []
    skipped = {5, 8} if codec == "h264" else set()  # unwanted, not referred to
    assert fake.decoded == [pos for pos, _ in GOP if pos not in skipped] and pictures == len(fake.decoded)
    surface = {pos: i % fake.created[0] for i, (pos, _) in enumerate(GOP)}  # the fake parser's, in turn
    assert sorted((dst - (1 << 40), src) for dst, _, src, *_ in fake.log) == sorted(
        (o, 0x100000 * (surface[pos] + 1)) for pos in places for o in places[pos])
    assert {(dp, sp, w, h, st) for _, dp, _, sp, w, h, st in fake.log} == {(W, 128, W, H * 3 // 2, STREAM)}
    assert fake.mapped == {} and 0 < fake.max_mapped <= cuvid.OUTPUT_SURFACES
    assert fake.created == [4 + cuvid.DISPLAY_DELAY + 1] and fake.parsers == 0
    whole = cuvid._PKT_ENDOFPICTURE if codec != "vp9" else 0  # VP9's packets may hold several pictures
    assert fake.flags == [cuvid._PKT_TIMESTAMP | whole] * len(GOP) + [cuvid._PKT_ENDOFSTREAM]
    assert fake.payloads == [b"SETS" + bytes([0xAB, 1, 0])] + [bytes([0xAB, r, p]) for p, r in GOP[1:]]


def test_the_decoder_serves_the_next_clip_and_is_made_again_for_more_surfaces(driver: Any) -> None:
    fake = driver()
    session = cuvid.Session(stream=STREAM, event=EVENT)
    for _ in range(2):
        session.decode("h264", _packets(), W, H, _outputs({0: [0]}), 0)
    assert fake.created == [7] and fake.destroyed == 0
    fake.min_surfaces = 9
    session.decode("h264", _packets(), W, H, _outputs({0: [0]}), 0)
    assert fake.created == [7, 12] and fake.destroyed == 1
    fake.min_surfaces = 4  # fewer needed: the bigger decoder serves
    session.decode("h264", _packets(), W, H, _outputs({0: [0]}), 0)
    assert fake.created == [7, 12]
    session.close()
    assert fake.destroyed == 2 and fake.errors == []


@pytest.mark.parametrize("case,match", [
    ("lost", "NVDEC gave no picture of timestamps \\[1042\\]"),
    ("decode fails", "cuvidDecodePicture failed with CUresult 700"),
    ("10-bit", "not 8-bit 4:2:0"),
    ("size", "gives 80x48 frames; the clip is 64x48"),
    ("new format", "the stream's format changes inside the clip"),
])
def test_failures_are_clip_decode_errors(driver: Any, case: str, match: str) -> None:
    """A wanted picture the parser never displays (named by its packet's pts), a decode the driver refuses, a
    stream that is not 8-bit 4:2:0 or not the clip's size, a new format while pictures wait to be shown:
    ``ClipDecodeError`` (the clip goes to the CPU), the parser destroyed and every mapped frame given back."""
    fake = driver(**{"lost": {"lose": 6}, "decode fails": {"fail_decode": 3}, "10-bit": {"bits": 2},
                     "size": {"size": (80, 48)}, "new format": {"reformat": 4}}[case])
    session = cuvid.Session(stream=STREAM, event=EVENT)
    with pytest.raises(ClipDecodeError, match=match):
        session.decode("h264", _packets(), W, H, _outputs({0: [0], 1: [100], 6: [200]}), 0)
    assert fake.parsers == 0 and fake.mapped == {} and fake.errors == []
    fake.lose, fake.fail_decode, fake.bits, fake.size, fake.reformat = None, -1, 0, (W, H), -1
    fake.decoded.clear()
    assert session.decode("h264", _packets(), W, H, _outputs({0: [0]}), 0) > 0  # the session serves the next clip
    assert fake.errors == []


def test_nvdec_unavailable_sends_clips_to_the_cpu_and_says_so_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the session cannot be had (no C compiler for its C side, no libnvcuvid), ``ClipDecoder`` sends
    clips to the CPU with the reason, and warns once per decoder: a silent fall to the CPU costs most of the
    speed."""
    from types import SimpleNamespace

    from torchdali.video import _nvdec

    def unavailable(codec: str, width: int, height: int) -> str:
        raise RuntimeError("no C compiler found")

    monkeypatch.setattr(_nvdec, "refuse", unavailable)
    decoder = _nvdec.ClipDecoder("cuda:0")  # nothing runs on the device
    clip = SimpleNamespace(codec="h264", extradata=b"", width=64, height=48)
    with pytest.warns(RuntimeWarning, match="NVDEC unavailable: no C compiler found; video clips decode on the CPU"):
        assert decoder._refuse(clip) == "NVDEC unavailable: no C compiler found"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert decoder._refuse(clip) == "NVDEC unavailable: no C compiler found"


def test_mp4_form_packets_reach_the_parser_in_annexb(driver: Any) -> None:
    """Packets of length-prefixed NAL units go to the parser re-framed (``to_annexb``, the parameter sets
    before the first only) and decode as the Annex-B ones do; a packet whose NAL size runs past its end
    fails the clip with ``to_annexb``'s message before anything is parsed."""
    fake = driver()
    units = [bytes([0xAB, ref, position]) for position, ref in GOP]
    mp4 = [len(u).to_bytes(4, "big") + u for u in units]
    offsets = np.cumsum([0] + [len(p) for p in mp4])
    packets = cuvid.Packets(np.frombuffer(b"".join(mp4), dtype=np.uint8), offsets, np.array(PTS), b"SETS", 4)
    session = cuvid.Session(stream=STREAM, event=EVENT)
    pictures = session.decode("h264", packets, W, H, _outputs({1: [0], 7: [4608]}), 0)
    assert fake.payloads == [to_annexb(p, 4, b"SETS" if j == 0 else b"") for j, p in enumerate(mp4)]
    assert pictures == len(fake.decoded) and sorted(dst for dst, *_ in fake.log) == [0, 4608]
    assert fake.errors == [] and fake.mapped == {}
    bad = mp4[:3] + [(len(units[3]) + 9).to_bytes(4, "big") + units[3]] + mp4[4:]
    data = np.frombuffer(b"".join(bad), dtype=np.uint8)
    fake.payloads.clear()
    with pytest.raises(ClipDecodeError) as err:
        session.decode("h264", packets._replace(data=data, offsets=np.cumsum([0] + [len(p) for p in bad])), W, H,
                       _outputs({1: [0]}), 0)
    with pytest.raises(ClipDecodeError) as reference:
        to_annexb(bad[3], 4)
    assert str(err.value) == str(reference.value)
    assert fake.payloads == [] and fake.parsers == 0 and fake.errors == []
