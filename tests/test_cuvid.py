"""The NVDEC session (``torchdali.video._cuvid``) on the CPU: its structures against NVIDIA's headers, and
what it does with the parser's callbacks, against a stand-in driver library that plays the parser and the
decoder (``_FakeDriver``). The session's real decodes, bit for bit against FFmpeg's software decoder, are
the GPU tests (``test_video_nvdec.py``, ``test_clip_merge.py``, ``test_annexb.py``)."""
from __future__ import annotations

import ctypes
from typing import Any

import pytest

from torchdali.video import ClipDecodeError
from torchdali.video import _cuvid as cuvid


# -- the structures ----------------------------------------------------------------------------------

def test_structures_have_the_sdk_headers_layout() -> None:
    """Sizes and the offsets the session relies on, as a C compiler lays out ``nvcuvid.h`` and ``cuviddec.h``
    (Video Codec SDK 13.0, from FFmpeg's nv-codec-headers) on 64-bit Linux."""
    sizes = {cuvid.VideoFormat: 64, cuvid._DisplayInfo: 24, cuvid._Packet: 32, cuvid._ParserParams: 136,
             cuvid._CreateInfo: 176, cuvid._ProcParams: 264, cuvid._DecodeCaps: 88}
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


# -- the callbacks, against a stand-in driver ----------------------------------------------------------

W, H = 64, 48


class _FakeDriver:
    """``libnvcuvid`` played in Python: a parser that reads each packet as one picture (payload byte 0 its
    reference flag), calls back sequence (first packet), decode (each packet) and display (pts order, at most
    ``delay`` pictures held; the rest at end of stream), and a decoder whose maps hand out fake addresses.
    It checks the session's use of the API: surfaces, mapped frames at once, a wait before each unmap."""

    def __init__(self, *, bits: int = 0, size: tuple[int, int] = (W, H), surfaces: int = 4, fail_decode: int = -1,
                 lose: int | None = None, reformat: int = -1) -> None:
        self.bits, self.size, self.min_surfaces, self.fail_decode, self.lose = bits, size, surfaces, fail_decode, lose
        self.reformat = reformat  # the packet before which a new sequence header asks for more surfaces
        self.created: list[int] = []  # decode surfaces of each decoder made
        self.destroyed = 0
        self.decoded: list[int] = []  # pts of each picture decoded
        self.flags: list[int] = []
        self.mapped: dict[int, int] = {}  # address -> copies queued since the last wait
        self.max_mapped = 0
        self.parsers = 0
        self.log: list[tuple] = []

    # the parser
    def cuvidCreateVideoParser(self, handle: Any, params: Any) -> int:
        self.params = params._obj
        self.parsers += 1
        self.pending: list[tuple[int, int]] = []  # (pts, surface) decoded, not yet displayed
        self.started, self.next_surface, self.surfaces = False, 0, 0
        handle._obj.value = 1000 + self.parsers
        return 0

    def cuvidDestroyVideoParser(self, parser: Any) -> int:
        self.parsers -= 1
        return 0

    def cuvidParseVideoData(self, parser: Any, packet_ref: Any) -> int:
        p, packet = self.params, packet_ref._obj
        self.flags.append(packet.flags)
        if packet.flags & cuvid._PKT_ENDOFSTREAM:
            return self._display(0)
        if len(self.decoded) == self.reformat:
            self.started, self.min_surfaces = False, self.min_surfaces + 6
        payload = ctypes.string_at(ctypes.c_void_p.from_buffer(packet, cuvid._Packet.payload.offset).value,
                                   packet.payload_size)
        if not self.started:
            fmt = cuvid.VideoFormat(codec=p.CodecType, coded_width=self.size[0], coded_height=self.size[1] + 16,
                                    chroma_format=1, bit_depth_luma_minus8=self.bits, bit_depth_chroma_minus8=self.bits,
                                    min_num_decode_surfaces=self.min_surfaces)
            fmt.display_area = cuvid._Rect(0, 0, self.size[0], self.size[1])
            self.surfaces = p.pfnSequenceCallback(None, ctypes.pointer(fmt))
            if not self.surfaces:
                return 0
            self.started = True
        pic = (ctypes.c_int * 64)()
        pic[cuvid._PIC_CURR_IDX // 4] = self.next_surface
        pic[cuvid._PIC_REF_FLAG // 4] = payload[0]
        self.current = packet.timestamp
        if not p.pfnDecodePicture(None, ctypes.addressof(pic)):
            return 0
        self.pending.append((packet.timestamp, self.next_surface))
        self.next_surface = (self.next_surface + 1) % self.surfaces
        return self._display(p.ulMaxDisplayDelay)

    def _display(self, hold: int) -> int:
        self.pending.sort()
        while len(self.pending) > hold:
            pts, surface = self.pending.pop(0)
            if pts == self.lose:
                continue
            info = cuvid._DisplayInfo(picture_index=surface, progressive_frame=1, timestamp=pts)
            if not self.params.pfnDisplayPicture(None, ctypes.pointer(info)):
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

    def cuvidDecodePicture(self, decoder: Any, pic: int) -> int:
        if len(self.decoded) == self.fail_decode:
            return 700  # CUDA_ERROR_ILLEGAL_ADDRESS, say
        self.decoded.append(self.current)
        return 0

    def cuvidMapVideoFrame64(self, decoder: Any, index: int, ptr: Any, pitch: Any, proc: Any) -> int:
        assert proc._obj.output_stream == 5 and proc._obj.progressive_frame == 1  # the session's stream
        address = 0x100000 * (index + 1)
        assert address not in self.mapped
        self.mapped[address] = 0
        self.max_mapped = max(self.max_mapped, len(self.mapped))
        ptr._obj.value, pitch._obj.value = address, 128
        return 0

    def cuvidUnmapVideoFrame64(self, decoder: Any, address: int) -> int:
        assert self.mapped.pop(address) == 0, "unmapped before its copies were waited for"
        return 0

    # what the session calls besides the library
    def copy_2d(self, dst: int, dst_pitch: int, src: int, src_pitch: int, width: int, height: int,
                stream: int) -> None:
        self.mapped[src] += 1
        self.log.append((dst, dst_pitch, src, src_pitch, width, height, stream))

    def sync(self) -> None:
        self.mapped = dict.fromkeys(self.mapped, 0)


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(**kwargs: Any) -> _FakeDriver:
        fake = _FakeDriver(**kwargs)
        monkeypatch.setattr(cuvid, "_lib", fake)
        monkeypatch.setattr(cuvid, "copy_2d", fake.copy_2d)
        return fake
    return install


#: decode order of a GOP with B-frames: (pts, reference flag); display order is by pts
GOP = [(0, 1), (3, 1), (1, 0), (2, 0), (6, 1), (4, 0), (5, 0), (9, 1), (7, 0), (8, 0)]


def _packets(gop: list[tuple[int, int]] = GOP) -> list[tuple[bytes, int]]:
    return [(bytes([ref, 0xAB]), pts) for pts, ref in gop]


@pytest.mark.parametrize("codec", ["h264", "hevc", "vp9"])
def test_wanted_pictures_are_copied_to_each_of_their_places(driver: Any, codec: str) -> None:
    """Every wanted picture is mapped and copied once per place it goes (Y and CbCr in one copy of 3/2 H
    rows from the mapped address, at the frame's pitch, packed); H.264's unwanted pictures that nothing
    refers to are not decoded (HEVC's and VP9's are: see the module docstring); never more
    frames mapped than the decoder's output surfaces, each unmapped only after a wait."""
    fake = driver()
    outputs = {1: [0], 2: [18432], 4: [36864, 55296], 7: [73728]}  # pts 4 goes to two places
    session = cuvid.Session(stream=5)
    pictures = session.decode(codec, _packets(), W, H, outputs, 1 << 40, fake.sync)
    skipped = {5, 8} if codec == "h264" else set()  # unwanted, not referred to
    assert fake.decoded == [pts for pts, _ in GOP if pts not in skipped] and pictures == len(fake.decoded)
    surface = {pts: i % fake.created[0] for i, (pts, _) in enumerate(GOP)}  # the fake parser's, in turn
    assert sorted((dst - (1 << 40), src) for dst, _, src, *_ in fake.log) == sorted(
        (o, 0x100000 * (surface[pts] + 1)) for pts in outputs for o in outputs[pts])
    assert {(dp, sp, w, h, st) for _, dp, _, sp, w, h, st in fake.log} == {(W, 128, W, H * 3 // 2, 5)}
    assert fake.mapped == {} and 0 < fake.max_mapped <= cuvid.OUTPUT_SURFACES
    assert fake.created == [4 + cuvid.DISPLAY_DELAY + 1] and fake.parsers == 0
    whole = cuvid._PKT_ENDOFPICTURE if codec != "vp9" else 0  # VP9's packets may hold several pictures
    assert fake.flags == [cuvid._PKT_TIMESTAMP | whole] * len(GOP) + [cuvid._PKT_ENDOFSTREAM]


def test_the_decoder_serves_the_next_clip_and_is_made_again_for_more_surfaces(driver: Any) -> None:
    fake = driver()
    session = cuvid.Session(stream=5)
    for _ in range(2):
        session.decode("h264", _packets(), W, H, {0: [0]}, 0, fake.sync)
    assert fake.created == [7] and fake.destroyed == 0
    fake.min_surfaces = 9
    session.decode("h264", _packets(), W, H, {0: [0]}, 0, fake.sync)
    assert fake.created == [7, 12] and fake.destroyed == 1
    fake.min_surfaces = 4  # fewer needed: the bigger decoder serves
    session.decode("h264", _packets(), W, H, {0: [0]}, 0, fake.sync)
    assert fake.created == [7, 12]
    session.close()
    assert fake.destroyed == 2


@pytest.mark.parametrize("case,match", [
    ("lost", "NVDEC gave no picture of timestamps \\[6\\]"),
    ("decode fails", "cuvidDecodePicture failed with CUresult 700"),
    ("10-bit", "not 8-bit 4:2:0"),
    ("size", "gives 80x48 frames; the clip is 64x48"),
    ("new format", "the stream's format changes inside the clip"),
])
def test_failures_are_clip_decode_errors(driver: Any, case: str, match: str) -> None:
    """A wanted picture the parser never displays, a decode the driver refuses, a stream that is not 8-bit
    4:2:0 or not the clip's size, a new format while pictures wait to be shown: ``ClipDecodeError`` (the
    clip goes to the CPU), the parser destroyed and every mapped frame given back."""
    fake = driver(**{"lost": {"lose": 6}, "decode fails": {"fail_decode": 3}, "10-bit": {"bits": 2},
                     "size": {"size": (80, 48)}, "new format": {"reformat": 4}}[case])
    with pytest.raises(ClipDecodeError, match=match):
        cuvid.Session(stream=5).decode("h264", _packets(), W, H, {0: [0], 1: [100], 6: [200]}, 0, fake.sync)
    assert fake.parsers == 0 and fake.mapped == {}
