"""Tests for torchdali.decode: header probing, CPU decoding, nvJPEG binding.

CPU tests run everywhere; tests marked ``cuda`` need a GPU (and exercise the real
nvJPEG library: hardware engines where the GPU has them).
"""
from __future__ import annotations

import io
import struct
import warnings
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from torchdali.decode import (
    FLAG_CMYK,
    FLAG_CORRUPT,
    FLAG_GPU_UNSUITABLE,
    FLAG_ORIENTED,
    FLAG_PROGRESSIVE,
    FLAG_RESTART,
    FLAG_RGB_CODED,
    FORMAT_BMP,
    FORMAT_GIF,
    FORMAT_JPEG,
    FORMAT_PNG,
    FORMAT_TIFF,
    FORMAT_UNKNOWN,
    FORMAT_WEBP,
    STATUS_NEEDS_CPU,
    STATUS_OK,
    STATUS_SIZE_MISMATCH,
    DecodeError,
    NvjpegDecoder,
    NvjpegError,
    decode_cpu,
    image_format,
    image_info_batch,
    jpeg_info,
    load_nvjpeg,
    nvjpeg_version,
    status_name,
)
from torchdali.decode import _nvjpeg_lib

from ._helpers import jpeg_bytes
from ._ycbcr import jpeg_planes


# ------------------------------------------------------------------------------ helpers


def smooth_rgb(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A smooth test picture: JPEG round trips stay close, unlike noise."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    r = 128 + 100 * np.sin(x / 17.0 + seed)
    g = 128 + 100 * np.cos(y / 23.0 + 2 * seed)
    b = 255 * (x + y) / (h + w + 1)
    return np.clip(np.stack([r, g, b], -1), 0, 255).astype(np.uint8)


def encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def jpeg(h: int, w: int, mode: str = "RGB", seed: int = 0, **kw) -> bytes:
    img = Image.fromarray(smooth_rgb(h, w, seed))
    if mode != "RGB":
        img = img.convert(mode)
    kw.setdefault("quality", 92)
    return encode(img, "JPEG", **kw)


def pil_rgb(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def pack(blobs: list[bytes]) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    lengths = np.array([len(b) for b in blobs], dtype=np.int64)
    offsets = np.zeros(len(blobs), dtype=np.int64)
    if len(blobs) > 1:
        np.cumsum(lengths[:-1], out=offsets[1:])
    buf = torch.frombuffer(bytearray(b"".join(blobs)), dtype=torch.uint8) if blobs else torch.zeros(0, dtype=torch.uint8)
    return buf, offsets, lengths


def restart_kwargs() -> dict:
    """Pillow >= 11 can write restart markers; skip where it cannot."""
    try:
        encode(Image.new("RGB", (16, 16)), "JPEG", restart_marker_blocks=2)
    except TypeError:  # pragma: no cover - old Pillow
        pytest.skip("this Pillow cannot write restart markers")
    return {"restart_marker_blocks": 2}


# (id, height, width, mode, save kwargs)
JPEG_CASES = [
    ("420", 64, 80, "RGB", {"subsampling": 2}),
    ("422", 64, 80, "RGB", {"subsampling": 1}),
    ("444", 64, 80, "RGB", {"subsampling": 0}),
    ("gray", 48, 40, "L", {}),
    ("cmyk", 32, 24, "CMYK", {}),
    ("progressive", 64, 80, "RGB", {"progressive": True}),
    ("1x1", 1, 1, "RGB", {}),
    ("7x13", 13, 7, "RGB", {"subsampling": 2}),
    ("odd_333x517", 517, 333, "RGB", {"subsampling": 2}),
]
EXPECTED_SUBSAMPLING = {"420": "420", "422": "422", "444": "444", "gray": "gray", "cmyk": "444",
                        "progressive": "420", "1x1": "420", "7x13": "420", "odd_333x517": "420"}


# ------------------------------------------------------------------------------ jpeg_info


@pytest.mark.parametrize("name,h,w,mode,kw", JPEG_CASES, ids=[c[0] for c in JPEG_CASES])
def test_jpeg_info_matches_pil(name, h, w, mode, kw):
    data = jpeg(h, w, mode, **kw)
    info = jpeg_info(data)
    with Image.open(io.BytesIO(data)) as im:
        assert (info.width, info.height) == im.size
        assert info.ncomp == len(im.getbands()) == info.num_components
    assert info.subsampling == EXPECTED_SUBSAMPLING[name]
    assert info.progressive == bool(kw.get("progressive"))
    assert info.sof == (0xC2 if kw.get("progressive") else 0xC0)
    assert info.precision == 8 and not info.lossless and not info.arithmetic
    assert info.baseline == (not kw.get("progressive"))
    assert info.is_cmyk == (mode == "CMYK")
    if mode == "CMYK":
        assert info.adobe_transform is not None  # libjpeg writes an Adobe marker for CMYK
    assert info.restart_interval == 0 and not info.has_restart_markers
    assert info.orientation is None
    assert len(info.sampling) == info.ncomp == len(info.component_ids)


def test_jpeg_info_restart_markers():
    data = jpeg(64, 80, **restart_kwargs())
    info = jpeg_info(data)
    assert info.restart_interval == 2 and info.has_restart_markers
    assert (info.height, info.width) == (64, 80)


def test_jpeg_info_exif_orientation():
    exif = Image.Exif()
    exif[0x0112] = 6
    exif[0x010F] = "maker"
    data = jpeg(20, 30, exif=exif.tobytes())
    assert jpeg_info(data).orientation == 6
    batch = image_info_batch(*pack([data]))
    assert batch.orientation[0] == 6 and batch.flags[0] & FLAG_ORIENTED


def test_jpeg_info_adobe_rgb_flagged():
    data = jpeg(16, 16)
    # Splice an Adobe APP14 segment with transform 0 (components are R, G, B) after SOI.
    adobe = b"\xff\xee" + struct.pack(">H", 14) + b"Adobe" + struct.pack(">HHHB", 100, 0, 0, 0)
    info = jpeg_info(data[:2] + adobe + data[2:])
    assert info.adobe_transform == 0 and info.is_rgb_coded
    batch = image_info_batch(*pack([data[:2] + adobe + data[2:]]))
    assert batch.flags[0] & FLAG_RGB_CODED and batch.flags[0] & FLAG_GPU_UNSUITABLE


@pytest.mark.parametrize("data", [b"", b"\xff", b"\x89PNG\r\n\x1a\n" + b"\0" * 20, b"hello world", b"\xd8\xff"])
def test_jpeg_info_not_jpeg(data):
    assert jpeg_info(data) is None


def _sof_offset(data: bytes) -> int:
    pos = data.find(b"\xff\xc0")
    assert pos > 0
    return pos


def test_jpeg_info_truncated_before_sof_raises():
    data = jpeg(40, 50)
    sof = _sof_offset(data)
    for cut in (2, 3, 4, 20, sof, sof + 1, sof + 5, sof + 12):
        with pytest.raises(ValueError, match="truncated|SOF"):
            jpeg_info(data[:cut])


def test_jpeg_info_truncated_after_header_still_parses():
    data = jpeg(40, 50)
    info = jpeg_info(data[: len(data) // 2])  # cut inside the entropy-coded data
    assert (info.height, info.width, info.ncomp) == (40, 50, 3)


def test_jpeg_info_corrupt_raises():
    data = jpeg(16, 16)
    # APP0 (right after SOI) with an impossible segment length of 1
    bad_len = data[:4] + b"\x00\x01" + data[6:]
    with pytest.raises(ValueError, match="invalid length"):
        jpeg_info(bad_len)
    with pytest.raises(ValueError, match="start-of-scan"):
        jpeg_info(b"\xff\xd8\xff\xda\x00\x08" + b"\x00" * 40)
    with pytest.raises(ValueError, match="end-of-image"):
        jpeg_info(b"\xff\xd8\xff\xd9")
    sof = _sof_offset(data)
    zero_width = bytearray(data)
    zero_width[sof + 7:sof + 9] = b"\x00\x00"
    with pytest.raises(ValueError, match="width"):
        jpeg_info(bytes(zero_width))


def test_jpeg_info_skips_junk_and_fill_bytes():
    data = jpeg(16, 24)
    # fill bytes before a marker are legal; libjpeg also tolerates junk between segments
    app0_end = 4 + struct.unpack(">H", data[4:6])[0]
    padded = data[:app0_end] + b"\xff\xff\xff" + data[app0_end:]
    junk = data[:app0_end] + b"\x00\x12" + data[app0_end:]
    for variant in (padded, junk):
        info = jpeg_info(variant)
        assert (info.height, info.width) == (16, 24)


def test_jpeg_info_input_types():
    data = jpeg(21, 34)
    arr = np.frombuffer(data, dtype=np.uint8)
    expected = jpeg_info(data)
    for obj in (bytearray(data), memoryview(data), arr, torch.from_numpy(arr.copy()), arr[::1]):
        assert jpeg_info(obj) == expected
    with pytest.raises(TypeError):
        jpeg_info(arr.astype(np.int32))


# ------------------------------------------------------------------------------ image_format


def _samples() -> dict[str, bytes]:
    rgb = smooth_rgb(13, 7)
    rgba = np.concatenate([rgb, np.full((13, 7, 1), 200, np.uint8)], -1)
    return {
        "jpeg": jpeg(13, 7),
        "png": encode(Image.fromarray(rgb), "PNG"),
        "png_rgba": encode(Image.fromarray(rgba), "PNG"),
        "gif": encode(Image.fromarray(rgb).convert("P"), "GIF"),
        "bmp": encode(Image.fromarray(rgb), "BMP"),
        "webp_lossy": encode(Image.fromarray(rgb), "WEBP", quality=90),
        "webp_lossless": encode(Image.fromarray(rgb), "WEBP", lossless=True),
        "webp_alpha": encode(Image.fromarray(rgba), "WEBP", lossless=True),
        "tiff": encode(Image.fromarray(rgb), "TIFF"),
    }


def test_image_format_sniffing():
    s = _samples()
    assert image_format(s["jpeg"]) == "jpeg"
    assert image_format(s["png"]) == image_format(s["png_rgba"]) == "png"
    assert image_format(s["gif"]) == "gif"
    assert image_format(s["bmp"]) == "bmp"
    assert image_format(s["webp_lossy"]) == image_format(s["webp_lossless"]) == "webp"
    assert image_format(s["tiff"]) == "tiff"
    for junk in (b"", b"\xff", b"\xff\xd8", b"hello world", b"RIFF\0\0\0\0WAVE"):
        assert image_format(junk) == "unknown"
    assert image_format(np.frombuffer(s["png"], np.uint8)) == "png"
    assert image_format(torch.frombuffer(bytearray(s["gif"]), dtype=torch.uint8)) == "gif"


def test_image_info_batch_mixed():
    s = _samples()
    corrupt = s["jpeg"][:_sof_offset(s["jpeg"]) + 4]
    cmyk = jpeg(9, 11, "CMYK")
    prog = jpeg(10, 12, progressive=True)
    names = list(s) + ["corrupt", "cmyk", "progressive", "garbage", "empty"]
    blobs = list(s.values()) + [corrupt, cmyk, prog, b"not an image", b""]
    buf, offsets, lengths = pack(blobs)
    for container in (buf, buf.numpy(), bytes(buf.numpy())):
        info = image_info_batch(container, offsets, torch.from_numpy(lengths))
        assert all(a.dtype == np.int32 and a.shape == (len(blobs),) for a in info)
        by = dict(zip(names, zip(info.height, info.width, info.ncomp, info.format, info.flags)))
        for name in ("jpeg", "png", "png_rgba", "gif", "bmp", "webp_lossy", "webp_lossless", "webp_alpha"):
            assert by[name][:2] == (13, 7), name
        assert by["tiff"][3] == FORMAT_TIFF
        assert [by[n][3] for n in ("jpeg", "png", "gif", "bmp", "webp_lossy")] == [
            FORMAT_JPEG, FORMAT_PNG, FORMAT_GIF, FORMAT_BMP, FORMAT_WEBP]
        assert by["png"][2] == 3 and by["png_rgba"][2] == 4 and by["webp_alpha"][2] == 4
        assert by["webp_lossy"][2] == 3 and by["webp_lossless"][2] == 3
        assert by["jpeg"][4] == 0 and by["jpeg"][2] == 3
        assert by["corrupt"][3] == FORMAT_JPEG and by["corrupt"][4] == FLAG_CORRUPT and by["corrupt"][0] == 0
        assert by["cmyk"][4] & FLAG_CMYK and by["cmyk"][4] & FLAG_GPU_UNSUITABLE and by["cmyk"][:2] == (9, 11)
        assert by["progressive"][4] & FLAG_PROGRESSIVE and not by["progressive"][4] & FLAG_GPU_UNSUITABLE
        assert by["garbage"][3] == by["empty"][3] == FORMAT_UNKNOWN
    with pytest.raises(ValueError, match="outside"):
        image_info_batch(buf, offsets + 1, lengths)


def test_image_info_batch_stays_inside_each_sample():
    s = _samples()
    # a short sample must not borrow magic bytes or header bytes from its neighbour
    blobs = [b"RIFF", s["webp_lossy"], s["jpeg"][:3], s["jpeg"], b"\x89PNG", s["png"]]
    info = image_info_batch(*pack(blobs))
    assert list(info.format) == [FORMAT_UNKNOWN, FORMAT_WEBP, FORMAT_JPEG, FORMAT_JPEG, FORMAT_UNKNOWN, FORMAT_PNG]
    assert info.flags[2] == FLAG_CORRUPT and info.height[2] == 0
    assert info.height[3] == 13 and info.height[5] == 13


def test_image_info_batch_restart_flag():
    data = jpeg(32, 32, **restart_kwargs())
    info = image_info_batch(*pack([data]))
    assert info.flags[0] & FLAG_RESTART


# ------------------------------------------------------------------------------ decode_cpu


def _check_hwc(img: torch.Tensor, h: int, w: int) -> None:
    assert img.dtype == torch.uint8 and tuple(img.shape) == (h, w, 3) and img.is_contiguous()


def test_decode_cpu_png_exact():
    rgb = smooth_rgb(13, 7, seed=3)
    rgba = np.concatenate([rgb, np.arange(13 * 7, dtype=np.uint8).reshape(13, 7, 1)], -1)
    cases = {
        "rgb": Image.fromarray(rgb),
        "rgba": Image.fromarray(rgba),
        "gray": Image.fromarray(rgb[..., 1]),
        "palette": Image.fromarray(rgb).convert("P"),
        "gray_alpha": Image.fromarray(rgb).convert("LA"),
    }
    for name, img in cases.items():
        data = encode(img, "PNG")
        out = decode_cpu(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        _check_hwc(out, 13, 7)
        np.testing.assert_array_equal(out.numpy(), pil_rgb(data), err_msg=name)


def test_decode_cpu_png_16bit():
    values = ((np.arange(13 * 7, dtype=np.int64).reshape(13, 7) * 719) % 65536).astype(np.uint16)
    img = Image.frombytes("I;16", (7, 13), values.astype("<u2").tobytes())
    out = decode_cpu(encode(img, "PNG"))
    _check_hwc(out, 13, 7)
    expected = (values >> 8).astype(np.uint8)
    for c in range(3):
        np.testing.assert_array_equal(out[..., c].numpy(), expected)


@pytest.mark.parametrize("name,h,w,mode,kw", JPEG_CASES, ids=[c[0] for c in JPEG_CASES])
def test_decode_cpu_jpeg_close_to_pil(name, h, w, mode, kw):
    data = jpeg(h, w, mode, **kw)
    out = decode_cpu(np.frombuffer(data, np.uint8))
    _check_hwc(out, h, w)
    diff = np.abs(out.numpy().astype(np.int16) - pil_rgb(data).astype(np.int16))
    assert diff.mean() < 2, (name, diff.mean())
    if mode == "L":
        o = out.numpy()
        assert (o[..., 0] == o[..., 1]).all() and (o[..., 1] == o[..., 2]).all()


def test_decode_cpu_restart_markers():
    data = jpeg(64, 80, **restart_kwargs())
    out = decode_cpu(data)
    assert np.abs(out.numpy().astype(int) - pil_rgb(data).astype(int)).mean() < 2


def test_decode_cpu_other_formats():
    s = _samples()
    for name in ("gif", "bmp", "webp_lossless", "webp_alpha", "tiff"):
        out = decode_cpu(s[name])
        _check_hwc(out, 13, 7)
        np.testing.assert_array_equal(out.numpy(), pil_rgb(s[name]), err_msg=name)
    out = decode_cpu(s["webp_lossy"])
    _check_hwc(out, 13, 7)
    assert np.abs(out.numpy().astype(int) - pil_rgb(s["webp_lossy"]).astype(int)).mean() < 2


def test_decode_cpu_gif_first_frame():
    a = Image.fromarray(smooth_rgb(12, 10)).convert("P")
    b = Image.fromarray(255 - smooth_rgb(12, 10)).convert("P")
    data = encode(a, "GIF", save_all=True, append_images=[b])
    out = decode_cpu(data)
    _check_hwc(out, 12, 10)
    np.testing.assert_array_equal(out.numpy(), pil_rgb(data))  # PIL shows frame 0 after open


def test_decode_cpu_input_types():
    data = jpeg(9, 10)
    ref = decode_cpu(data)
    arr = np.frombuffer(data, np.uint8)
    strided = torch.from_numpy(np.repeat(arr, 2))[::2]  # non-contiguous view
    for obj in (bytearray(data), memoryview(data), arr, torch.from_numpy(arr.copy()), strided):
        assert torch.equal(decode_cpu(obj), ref)
    with pytest.raises(TypeError):
        decode_cpu(torch.zeros(2, 3, dtype=torch.uint8))
    with pytest.raises(TypeError):
        decode_cpu("file.jpg")


def test_decode_cpu_errors():
    with pytest.raises(DecodeError, match="empty file"):
        decode_cpu(torch.zeros(0, dtype=torch.uint8))
    with pytest.raises(DecodeError, match="unrecognised image format"):
        decode_cpu(b"definitely not an image")
    data = jpeg(40, 50)
    with pytest.raises(DecodeError, match="jpeg"):
        decode_cpu(data[: len(data) // 2])
    with pytest.raises(DecodeError, match="jpeg"):
        decode_cpu(data[:_sof_offset(data) + 4])
    png = encode(Image.fromarray(smooth_rgb(8, 8)), "PNG")
    with pytest.raises(DecodeError, match="png"):
        decode_cpu(png[:40])
    assert issubclass(DecodeError, RuntimeError)


# ------------------------------------------------------------------------------ decode_cpu against torchvision.io


def torchvision_rgb(data: bytes) -> np.ndarray:
    """``torchvision.io.decode_image(mode=RGB)`` as HWC, 16-bit reduced to its high byte: the decoder
    whose pixels decode_cpu keeps, bit for bit (deprecated since torchvision 0.29: a reference only)."""
    import torchvision.io as tio

    if not hasattr(tio, "decode_image"):
        pytest.skip("this torchvision has no image decoding")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        img = tio.decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=tio.ImageReadMode.RGB)
    if img.dtype != torch.uint8:
        img = (img.to(torch.int32) >> 8).to(torch.uint8)
    return img.permute(1, 2, 0).numpy()


def photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    """Photo-like pixels (edges and noise): rounding differences in a decoder show, unlike on smooth fields."""
    from torchdali._synthetic import synthetic_image

    return synthetic_image(np.random.default_rng(seed), h, w)


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def png16(samples: np.ndarray, color_type: int) -> bytes:
    """A 16-bit PNG of ``(H, W, C)`` samples (Pillow writes 16-bit grey only)."""
    h, w, _ = samples.shape
    raw = b"".join(b"\0" + row.astype(">u2").tobytes() for row in samples)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0))
            + _png_chunk(b"IDAT", zlib.compress(raw)) + _png_chunk(b"IEND", b""))


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def _bit_exact_cases() -> dict:
    a = photo(45, 61, seed=5)
    rgba = np.dstack([a, a[:, :, :1] ^ 0x5A])
    im = Image.fromarray(a)
    return {
        "jpeg_420": lambda: encode(im, "JPEG", quality=90, subsampling=2),
        "jpeg_422": lambda: encode(im, "JPEG", quality=90, subsampling=1),
        "jpeg_444": lambda: encode(im, "JPEG", quality=90, subsampling=0),
        "jpeg_gray": lambda: encode(im.convert("L"), "JPEG", quality=90),
        "jpeg_cmyk": lambda: encode(im.convert("CMYK"), "JPEG", quality=90),
        "jpeg_progressive": lambda: encode(im, "JPEG", quality=90, progressive=True),
        "jpeg_restart": lambda: encode(im, "JPEG", quality=90, **restart_kwargs()),
        "jpeg_optimized_q100": lambda: encode(im, "JPEG", quality=100, optimize=True),
        "jpeg_1x1": lambda: encode(Image.fromarray(a[:1, :1]), "JPEG"),
        "png_rgb": lambda: encode(im, "PNG"),
        "png_rgba": lambda: encode(Image.fromarray(rgba), "PNG"),
        "png_gray": lambda: encode(im.convert("L"), "PNG"),
        "png_gray_alpha": lambda: encode(Image.fromarray(rgba).convert("LA"), "PNG"),
        "png_palette": lambda: encode(im.convert("P"), "PNG"),
        "png_palette_transparency": lambda: encode(im.convert("P"), "PNG", transparency=3),
        "png_palette_4bit": lambda: encode(im.quantize(16), "PNG", bits=4),
        "png_1bit": lambda: encode(im.convert("1"), "PNG"),
        "png_gray16": lambda: encode(Image.fromarray(a[:, :, 0].astype(np.uint16) * 257 + 3), "PNG"),
        "png_rgb16": lambda: png16(a.astype(np.uint16) * 257 + 5, 2),
        "png_rgba16": lambda: png16(rgba.astype(np.uint16) * 255 + 11, 6),
        "png_gray_alpha16": lambda: png16(rgba[:, :, 2:].astype(np.uint16) * 251, 4),
        "webp_lossy": lambda: encode(im, "WEBP", quality=85),
        "webp_lossless": lambda: encode(im, "WEBP", lossless=True),
        "webp_lossy_alpha": lambda: encode(Image.fromarray(rgba), "WEBP", quality=85),
        "webp_lossless_alpha": lambda: encode(Image.fromarray(rgba), "WEBP", lossless=True, exact=True),
    }


@pytest.mark.parametrize("kind", list(_bit_exact_cases()))
def test_decode_cpu_matches_torchvision_bit_for_bit(kind):
    """The pixels torchvision.io's decoder gave (and the GPU path's tests compare with): libjpeg-turbo
    with ISLOW and fancy upsampling, Adobe CMYK, alpha dropped, 16-bit to its high byte."""
    data = _bit_exact_cases()[kind]()
    out = decode_cpu(data)
    expected = torchvision_rgb(data)
    _check_hwc(out, *expected.shape[:2])
    np.testing.assert_array_equal(out.numpy(), expected, err_msg=kind)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_decode_cpu_leaves_exif_orientation_alone(orientation):
    """As decode_image by default (and nvJPEG): the pixels as stored, whatever the EXIF orientation."""
    data = encode(Image.fromarray(photo(30, 44, orientation)), "JPEG", quality=90, exif=_exif(orientation))
    assert jpeg_info(data).orientation == orientation
    out = decode_cpu(data)
    _check_hwc(out, 30, 44)
    np.testing.assert_array_equal(out.numpy(), torchvision_rgb(data))
    png = encode(Image.fromarray(photo(30, 44, orientation)), "PNG", exif=_exif(orientation))
    np.testing.assert_array_equal(decode_cpu(png).numpy(), photo(30, 44, orientation))


def _jpeg_segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def test_decode_cpu_jpeg_with_cut_short_app_segments():
    """libjpeg skips an APPn segment it cannot use (a JFIF or Adobe segment shorter than its
    fields, a bare ICC header); Pillow refuses such a file. decode_cpu decodes it as libjpeg does."""
    clean = encode(Image.fromarray(photo(40, 56, 1)), "JPEG", quality=90)
    app0_end = 4 + struct.unpack(">H", clean[4:6])[0]
    body = clean[app0_end:]
    expected = decode_cpu(clean).numpy()
    variants = {
        "short JFIF": b"\xff\xd8" + _jpeg_segment(0xE0, b"JFIF\0\1") + body,
        "short Adobe": clean[:app0_end] + _jpeg_segment(0xEE, b"Adobe\0") + body,
        "bare ICC": clean[:app0_end] + _jpeg_segment(0xE2, b"ICC_PROFILE\0") + body,
    }
    for name, data in variants.items():
        with pytest.raises(Exception):  # what decode_cpu recovers from
            with Image.open(io.BytesIO(data)) as im:
                im.load()
        np.testing.assert_array_equal(decode_cpu(data).numpy(), expected, err_msg=name)
        np.testing.assert_array_equal(decode_cpu(data).numpy(), torchvision_rgb(data), err_msg=name)
    # an Adobe segment libjpeg reads still counts: CMYK keeps its colours
    cmyk = encode(Image.fromarray(photo(24, 32, 2)).convert("CMYK"), "JPEG", quality=90)
    cut_icc = cmyk[:2] + _jpeg_segment(0xE2, b"ICC_PROFILE\0") + cmyk[2:]
    np.testing.assert_array_equal(decode_cpu(cut_icc).numpy(), decode_cpu(cmyk).numpy())
    np.testing.assert_array_equal(decode_cpu(cut_icc).numpy(), torchvision_rgb(cmyk))


def test_decode_cpu_png_with_metadata_pillow_refuses():
    """An ancillary chunk with a bad checksum (libpng drops it) or compressed text over Pillow's
    limit: the pixels still decode, from the critical chunks."""
    rgb = photo(20, 30, 3)
    clean = encode(Image.fromarray(rgb), "PNG")
    text = _png_chunk(b"tEXt", b"Comment\0hello")
    variants = {
        "tEXt with a bad CRC": clean[:33] + text[:-1] + bytes([text[-1] ^ 1]) + clean[33:],
        "3 MB of zTXt": clean[:33] + _png_chunk(b"zTXt", b"Comment\0\0" + zlib.compress(b"x" * 3_000_000))
        + clean[33:],
    }
    for name, data in variants.items():
        with pytest.raises(Exception):
            with Image.open(io.BytesIO(data)) as im:
                im.load()
        np.testing.assert_array_equal(decode_cpu(data).numpy(), rgb, err_msg=name)
    # a broken critical chunk stays an error, named
    bad_ihdr = bytearray(clean)
    bad_ihdr[20] ^= 0x40  # inside IHDR: its checksum no longer matches
    with pytest.raises(DecodeError, match="png"):
        decode_cpu(bytes(bad_ihdr))


def test_decode_cpu_corrupt_png_data_is_an_error():
    """Bytes flipped inside the compressed pixels: an error to report (torchvision 0.29's PNG
    decoder crashed the process on this one)."""
    data = bytearray(encode(Image.fromarray(photo(120, 160, 99)), "PNG"))
    assert data[37:41] == b"IDAT"
    data[53] ^= 1
    with pytest.raises(DecodeError, match="cannot decode png image"):
        decode_cpu(bytes(data))


def test_decode_cpu_limit_is_max_pixels_not_pillows(monkeypatch):
    """JPEG, PNG and WebP are limited by max_pixels alone (None: no limit), not by Pillow's
    Image.MAX_IMAGE_PIXELS, which Image.open applies (a warning above it, an error above twice it).
    Pillow's WebP reader refuses above twice the limit by itself."""
    from PIL import Image as PILImage

    from torchdali.decode._limits import ImageTooLarge

    rgb = photo(40, 50, 4)  # 2,000 pixels
    for fmt, kw, pil_limit in (("JPEG", {"quality": 90}, 100), ("PNG", {}, 100), ("WEBP", {"lossless": True}, 1500)):
        monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", pil_limit)
        data = encode(Image.fromarray(rgb), fmt, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("error", PILImage.DecompressionBombWarning)
            out = decode_cpu(data)
            assert tuple(decode_cpu(data, max_pixels=2000).shape) == (40, 50, 3)
        _check_hwc(out, 40, 50)
        if fmt != "JPEG":
            np.testing.assert_array_equal(out.numpy(), rgb, err_msg=fmt)
        with pytest.raises(ImageTooLarge, match="max_image_pixels=1,999"):
            decode_cpu(data, max_pixels=1999)


def test_decode_cpu_refuses_a_forged_size_without_max_pixels():
    """Pillow's limit does not apply to JPEG and PNG, so the header check does, max_pixels or not:
    a header claiming far more pixels than its data can hold is refused before any allocation."""
    from torchdali.decode._limits import ImplausibleHeader

    png = bytearray(encode(Image.fromarray(photo(20, 30)), "PNG"))
    struct.pack_into(">I", png, 20, 1 << 30)  # IHDR height
    struct.pack_into(">I", png, 29, zlib.crc32(bytes(png[12:29])) & 0xFFFFFFFF)
    jpg = bytearray(jpeg(20, 30))
    struct.pack_into(">HH", jpg, _sof_offset(bytes(jpg)) + 5, 65500, 65500)
    for data in (png, jpg):
        with pytest.raises(ImplausibleHeader, match="forged header"):
            decode_cpu(bytes(data))


def test_cpu_loader_does_not_use_torchvision_image_decoding(monkeypatch):
    """Through the CPU path, no deprecated torchvision.io decoder runs and no DeprecationWarning
    comes from torchvision or torchdali."""
    import torchvision.io as tio

    import torchdali as td
    from torchdali import transforms as T

    rgb = photo(40, 48, 6)
    rgba = np.dstack([rgb, rgb[:, :, :1]])
    blobs = [encode(Image.fromarray(rgb), "JPEG", quality=90),
             encode(Image.fromarray(rgb).convert("CMYK"), "JPEG", quality=90),
             encode(Image.fromarray(rgb), "JPEG", quality=90, progressive=True),
             encode(Image.fromarray(rgba), "PNG"),
             encode(Image.fromarray(rgb), "WEBP", lossless=True),
             encode(Image.fromarray(rgb).convert("P"), "GIF")]
    expected = [pil_rgb(b)[12:28, 16:32] for b in blobs]  # CenterCrop(16) of 40x48

    called = []

    def refuse(name):
        def call(*args, **kwargs):
            called.append(name)  # the decoder might swallow the error: the call is what counts
            raise AssertionError(f"torchvision.io.{name} was called")
        return call

    for name in ("decode_image", "decode_jpeg", "decode_png", "decode_webp", "decode_gif", "decode_avif",
                 "decode_heic", "read_image"):
        if hasattr(tio, name):
            monkeypatch.setattr(tio, name, refuse(name))
    loader = td.DataLoader([(b, i) for i, b in enumerate(blobs)], batch_size=3, num_workers=0, device="cpu",
                           transforms=T.Compose([T.CenterCrop(16)]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [(img, int(t)) for images, targets in loader for img, t in zip(images, targets)]
        direct = [decode_cpu(b) for b in blobs]
    deprecations = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught
                    if issubclass(w.category, DeprecationWarning)
                    and ("torchvision" in w.filename or "torchdali" in w.filename)]
    assert called == [] and deprecations == []
    assert sorted(t for _, t in got) == list(range(len(blobs)))
    for img, t in got:
        np.testing.assert_array_equal(img.permute(1, 2, 0).numpy(), expected[t], err_msg=str(t))
    for out, b in zip(direct, blobs):
        np.testing.assert_array_equal(out.numpy(), pil_rgb(b))


# ------------------------------------------------------------------------------ nvJPEG, no GPU needed


@pytest.mark.skipif(torch.version.cuda is None, reason="CPU-only torch build")
def test_load_nvjpeg_finds_library():
    lib = load_nvjpeg()
    assert "libnvjpeg" in lib._name
    assert lib is load_nvjpeg()  # cached
    major = int(torch.version.cuda.split(".")[0])
    assert lib._name.endswith(f".so.{major}")
    version = nvjpeg_version()
    assert version[0] == major and all(isinstance(v, int) for v in version)
    for name in ("nvjpegDecodeBatched", "nvjpegGetImageInfo", "nvjpegDecode", "nvjpegDecodeBatchedSupported"):
        assert getattr(lib, name).restype is not None and getattr(lib, name).argtypes


def test_load_nvjpeg_failure_lists_places(monkeypatch, tmp_path):
    missing = str(tmp_path / "nowhere" / "libnvjpeg.so.99")
    monkeypatch.setattr(_nvjpeg_lib, "_lib", None)
    monkeypatch.setattr(_nvjpeg_lib, "_lib_error", None)
    monkeypatch.setattr(_nvjpeg_lib, "_cuda_majors", lambda: [99])
    monkeypatch.setattr(_nvjpeg_lib, "_search_plan", lambda major: [
        ("pip nvidia-nvjpeg", missing, "glob"),
        ("dynamic loader", "libnvjpeg.so.99", "soname"),
    ])
    with pytest.raises(RuntimeError) as err:
        load_nvjpeg()
    msg = str(err.value)
    assert missing in msg and "libnvjpeg.so.99" in msg
    assert "pip install nvidia-nvjpeg" in msg and "nvidia-nvjpeg-cu12" in msg
    with pytest.raises(RuntimeError):  # the failure is cached too
        load_nvjpeg()


def test_search_plan_covers_all_sources(monkeypatch):
    monkeypatch.setenv("CUDA_HOME", "/opt/cudaX")
    monkeypatch.setenv("TORCHDALI_NVJPEG_LIBRARY", "/custom/libnvjpeg.so.13")
    plan = _nvjpeg_lib._search_plan(13)
    patterns = [p for _, p, _ in plan]
    assert patterns[0] == "/custom/libnvjpeg.so.13"
    text = "\n".join(patterns)
    assert "cu13/lib/libnvjpeg.so.13" in text or "'nvidia' is not importable" in text
    assert "torchvision.libs" in text
    assert "/opt/cudaX/lib64/libnvjpeg.so.13" in text
    assert "/usr/local/cuda/lib64/libnvjpeg.so.13" in text
    assert plan[-1] == ("dynamic loader", "libnvjpeg.so.13", "soname")


def test_status_names_and_error():
    assert status_name(STATUS_OK) == "OK"
    assert status_name(STATUS_NEEDS_CPU) == "NEEDS_CPU"
    assert status_name(STATUS_SIZE_MISMATCH) == "SIZE_MISMATCH"
    assert status_name(3) == "NVJPEG_STATUS_BAD_JPEG"
    err = NvjpegError(7, "nvjpegCreateEx")
    assert err.status == 7 and err.call == "nvjpegCreateEx"
    assert "NVJPEG_STATUS_ARCH_MISMATCH" in str(err) and "nvjpegCreateEx" in str(err)


def test_nvjpeg_image_layout():
    import ctypes

    assert ctypes.sizeof(_nvjpeg_lib.NvjpegImage) == 64
    assert _nvjpeg_lib.NvjpegImage.channel.offset == 0 and _nvjpeg_lib.NvjpegImage.pitch.offset == 32


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_decoder_needs_gpu():
    with pytest.raises(RuntimeError, match="CUDA"):
        NvjpegDecoder(0)


# ------------------------------------------------------------------------------ nvJPEG on a GPU


@pytest.fixture(scope="module")
def decoder():
    dec = NvjpegDecoder(0)
    yield dec
    dec.close()


def gpu_decode(dec: NvjpegDecoder, blobs: list[bytes], sizes=None, pinned: bool = True):
    """Decode ``blobs`` in one batch on a side stream; returns (statuses, CPU HWC tensors or None)."""
    buf, offsets, lengths = pack(blobs)
    if pinned:
        buf = buf.pin_memory()
    if sizes is None:
        sizes = []
        for b in blobs:
            try:
                info = jpeg_info(b)
            except ValueError:
                info = None
            sizes.append((info.height, info.width) if info else (1, 1))
    sizes = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)
    nbytes = sizes[:, 0] * sizes[:, 1] * 3
    out_offsets = np.zeros(len(blobs), dtype=np.int64)
    if len(blobs) > 1:
        np.cumsum(nbytes[:-1], out=out_offsets[1:])
    out = torch.full((int(nbytes.sum()) + 1,), 77, dtype=torch.uint8, device=dec.device)
    stream = torch.cuda.Stream(dec.device)
    stream.wait_stream(torch.cuda.current_stream(dec.device))  # `out` was filled on the current stream
    status = dec.decode_batch(buf, offsets, lengths, sizes, out, out_offsets, stream)
    stream.synchronize()
    assert out[-1].item() == 77  # nothing written past the last image
    host = out.cpu()
    images = []
    for i, st in enumerate(status):
        o, (h, w) = int(out_offsets[i]), sizes[i]
        images.append(host[o:o + h * w * 3].view(int(h), int(w), 3) if st == STATUS_OK else None)
    return status, images


def assert_close(gpu: torch.Tensor, ref: torch.Tensor, tol: float = 2.0, what: str = "") -> None:
    assert gpu.shape == ref.shape, (what, gpu.shape, ref.shape)
    diff = (gpu.to(torch.int16) - ref.to(torch.int16)).abs().float().mean().item()
    assert diff < tol, f"{what}: mean abs diff {diff:.3f}"


GPU_CASES = [c for c in JPEG_CASES if c[0] not in ("cmyk", "1x1")]


@pytest.mark.cuda
def test_gpu_hardware_engines_reported(decoder):
    name = torch.cuda.get_device_name(decoder.device)
    print(f"{name}: {decoder!r}, flags={decoder.handle_flags}, reason={decoder.hardware_unavailable_reason}")
    assert decoder.hybrid_backend in ("gpu_hybrid", "default")
    if any(k in name for k in ("A100", "A30", "H100", "H200", "H20", "B200", "GB200")):
        assert decoder.has_hardware and decoder.hardware_engines != 0
    if decoder.has_hardware:
        assert decoder.hardware_engines > 0 or decoder.hardware_engines == -1


@pytest.mark.cuda
@pytest.mark.parametrize("name,h,w,mode,kw", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_gpu_matches_cpu(decoder, name, h, w, mode, kw):
    data = jpeg(h, w, mode, **kw)
    status, images = gpu_decode(decoder, [data])
    assert status == [STATUS_OK], decoder.last_errors
    assert_close(images[0], decode_cpu(data), what=name)
    print(name, decoder.last_stats)


@pytest.mark.cuda
def test_gpu_restart_markers(decoder):
    data = jpeg(96, 128, **restart_kwargs())
    status, images = gpu_decode(decoder, [data])
    assert status == [STATUS_OK], decoder.last_errors
    assert_close(images[0], decode_cpu(data), what="restart")


@pytest.mark.cuda
def test_gpu_mixed_batch(decoder):
    cases = GPU_CASES + [("restart", 72, 88, "RGB", restart_kwargs()), ("tiny", 1, 1, "RGB", {})]
    blobs = [jpeg(h, w, mode, seed=i, **kw) for i, (_, h, w, mode, kw) in enumerate(cases)]
    # non-JPEG and CMYK samples in the middle must come back as "needs CPU"
    png = encode(Image.fromarray(smooth_rgb(10, 12)), "PNG")
    cmyk = jpeg(24, 20, "CMYK")
    blobs = blobs[:3] + [png, cmyk] + blobs[3:]
    names = [c[0] for c in cases[:3]] + ["png", "cmyk"] + [c[0] for c in cases[3:]]
    status, images = gpu_decode(decoder, blobs)
    print(decoder.last_stats, decoder.last_errors)
    for name, st, data, img in zip(names, status, blobs, images):
        if name in ("png", "cmyk"):
            assert st == STATUS_NEEDS_CPU, (name, st)
            assert decoder.describe(st, names.index(name)).startswith("NEEDS_CPU")
        elif name == "tiny":
            assert st in (STATUS_OK, STATUS_NEEDS_CPU) or st > 0  # 1x1: whatever nvJPEG says, no crash
            if st == STATUS_OK:
                assert_close(img, decode_cpu(data), tol=4, what=name)
        else:
            assert st == STATUS_OK, (name, st, decoder.last_errors)
            assert_close(img, decode_cpu(data), what=name)
    if decoder.has_hardware:
        assert decoder.last_stats["hardware"] > 0


@pytest.mark.cuda
def test_gpu_corrupt_image_does_not_poison_batch(decoder):
    good = [jpeg(64, 80, seed=i) for i in range(4)]
    header_corrupt = good[0][:_sof_offset(good[0]) + 6]
    entropy_truncated = good[1][: len(good[1]) * 2 // 3]
    blobs = [good[0], header_corrupt, good[1], entropy_truncated, good[2], good[3]]
    sizes = [(64, 80)] * len(blobs)
    status, images = gpu_decode(decoder, blobs, sizes=sizes)
    print(status, decoder.last_errors)
    assert status[1] != STATUS_OK
    assert 1 in decoder.last_errors
    for i in (0, 2, 4, 5):
        assert status[i] == STATUS_OK, (i, decoder.last_errors)
        assert_close(images[i], decode_cpu(blobs[i]), what=f"image {i}")
    # nvJPEG may or may not notice a truncated entropy segment; either way later batches work
    status, images = gpu_decode(decoder, good)
    assert status == [STATUS_OK] * 4
    for img, data in zip(images, good):
        assert_close(img, decode_cpu(data))


@pytest.mark.cuda
def test_gpu_batch_failure_retries_one_by_one(monkeypatch):
    blobs = [jpeg(48, 64, seed=i) for i in range(3)] + [jpeg(40, 40, progressive=True)]
    with NvjpegDecoder(0) as dec:
        with monkeypatch.context() as m:
            # Every batched decode call "fails" (NVJPEG_STATUS_INTERNAL_ERROR) after its
            # nvjpegDecodeBatchedInitialize: exercises the retry path.  dec._lib is the
            # CDLL the decoder looks this function up on at call time.
            m.setattr(dec._lib, "nvjpegDecodeBatched", lambda *args: 8)
            status, images = gpu_decode(dec, blobs)
            assert status == [STATUS_OK] * 4, dec.last_errors
            for img, data in zip(images, blobs):
                assert_close(img, decode_cpu(data))
        status, _ = gpu_decode(dec, blobs)
        assert status == [STATUS_OK] * 4


@pytest.mark.cuda
def test_gpu_size_mismatch_is_reported(decoder):
    data = jpeg(40, 50)
    status, _ = gpu_decode(decoder, [data, data], sizes=[(40, 50), (41, 50)])
    assert status == [STATUS_OK, STATUS_SIZE_MISMATCH]
    assert "40x50" in decoder.last_errors[1]


@pytest.mark.cuda
def test_gpu_hybrid_backend_only():
    blobs = [jpeg(h, w, mode, seed=i, **kw) for i, (_, h, w, mode, kw) in enumerate(GPU_CASES)]
    with NvjpegDecoder(0, backend="hybrid") as dec:
        assert not dec.has_hardware
        status, images = gpu_decode(dec, blobs)
        assert status == [STATUS_OK] * len(blobs), dec.last_errors
        for img, data in zip(images, blobs):
            assert_close(img, decode_cpu(data))


def test_engine_order_groups_kinds_then_sizes():
    from torchdali.decode._nvjpeg import engine_order

    rng = np.random.default_rng(3)
    n = 300
    kinds = rng.choice([7, 7, 7, 7, 3, 9], n)  # header codes, one of them common
    heights = rng.integers(333, 337, n)
    widths = rng.integers(400, 403, n)
    order = engine_order(kinds, heights, widths)
    # Python's sort is stable: equal keys keep the order drawn
    assert order.tolist() == sorted(range(n), key=lambda i: (kinds[i], heights[i], widths[i]))
    assert engine_order(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []
    assert engine_order([5], [10], [20]).tolist() == [0]


@pytest.mark.cuda
def test_gpu_hardware_call_takes_the_batch_in_engine_order(monkeypatch):
    """The hardware call gets a mixed batch grouped by header code, then size; every image
    still lands in its own place, byte for byte as when decoded alone."""
    import ctypes

    from torchdali.decode._jpeg_header import header_code
    from torchdali.decode._nvjpeg import engine_order

    # (height, width, PIL subsampling: 0 = 4:4:4, 1 = 4:2:2, 2 = 4:2:0), all taken by the engines
    specs = [(64, 80, 2), (48, 48, 1), (64, 72, 0), (40, 80, 2), (64, 80, 0), (48, 40, 1), (40, 64, 2), (64, 72, 2)]
    blobs = [jpeg(h, w, seed=i, subsampling=s) for i, (h, w, s) in enumerate(specs)]
    infos = [jpeg_info(b) for b in blobs]
    hints = np.array([header_code(i) for i in infos], dtype=np.int64)
    sizes = np.array([(i.height, i.width) for i in infos], dtype=np.int64)
    buf, offsets, lengths = pack(blobs)
    buf = buf.pin_memory()
    nbytes = sizes[:, 0] * sizes[:, 1] * 3
    out_offsets = np.concatenate([[0], np.cumsum(nbytes)[:-1]]).astype(np.int64)
    with NvjpegDecoder(0) as dec:
        if not dec.has_hardware:
            pytest.skip("no hardware JPEG engines: the order only applies to them")
        alone = []
        stream = torch.cuda.Stream(dec.device)
        for b, (h, w) in zip(blobs, sizes.tolist()):
            one, o1, l1 = pack([b])
            out1 = torch.zeros(h * w * 3, dtype=torch.uint8, device=dec.device)
            stream.wait_stream(torch.cuda.current_stream(dec.device))
            assert dec.decode_batch(one.pin_memory(), o1, l1, [(h, w)], out1, [0], stream) == [STATUS_OK]
            stream.synchronize()
            alone.append(out1.cpu())
        seen = []
        real = dec._lib.nvjpegDecodeBatched

        def record(handle, state, data, lens, images, strm):
            if handle == dec._hw:
                pointers = np.ctypeslib.as_array((ctypes.c_uint64 * len(blobs)).from_address(data)).copy()
                seen.append([int(np.flatnonzero(offsets == p - buf.data_ptr())[0]) for p in pointers])
            return real(handle, state, data, lens, images, strm)

        monkeypatch.setattr(dec._lib, "nvjpegDecodeBatched", record)
        out = torch.zeros(int(nbytes.sum()), dtype=torch.uint8, device=dec.device)
        stream.wait_stream(torch.cuda.current_stream(dec.device))
        status = dec.decode_batch(buf, offsets, lengths, sizes, out, out_offsets, stream, hints=hints)
        stream.synchronize()
        assert status == [STATUS_OK] * len(blobs), dec.last_errors
        assert dec.last_stats["hardware"] == len(blobs)
    assert seen == [engine_order(hints, sizes[:, 0], sizes[:, 1]).tolist()]
    assert seen[0] != sorted(seen[0])  # the batch was not in that order already
    host = out.cpu()
    for i, (h, w) in enumerate(sizes.tolist()):
        img = host[out_offsets[i]: out_offsets[i] + h * w * 3]
        assert torch.equal(img, alone[i]), f"image {i}"
        assert_close(img.view(h, w, 3), decode_cpu(blobs[i]), what=f"image {i}")


@pytest.mark.cuda
def test_gpu_hardware_decode_waits_for_work_queued_on_its_stream():
    """nvJPEG's batched hardware decode writes its output during the call, whatever is still
    queued on the stream (a decoder's first calls, which initialise its states, may wait);
    decode_batch first lets that work finish, so a copy queued before the decode reads the
    bytes from before it."""
    blobs = [jpeg(64, 80, seed=i) for i in range(4)]
    sizes = np.array([(64, 80)] * len(blobs), dtype=np.int64)
    buf, offsets, lengths = pack(blobs)
    buf = buf.pin_memory()
    n = 64 * 80 * 3
    out_offsets = np.arange(len(blobs), dtype=np.int64) * n
    with NvjpegDecoder(0) as dec:
        if not dec.has_hardware:
            pytest.skip("no hardware JPEG engines: the CUDA decoder's calls are ordered on the stream")
        stream = torch.cuda.Stream(dec.device)
        out = torch.zeros(len(blobs) * n, dtype=torch.uint8, device=dec.device)
        early = []
        for call in range(6):  # past the first call on each of the decoder's two state sets
            out.zero_()
            torch.cuda.synchronize()
            with torch.cuda.stream(stream):
                torch.cuda._sleep(100_000_000)  # about 50 ms of GPU time queued before the copy
                before = out.clone()
            status = dec.decode_batch(buf, offsets, lengths, sizes, out, out_offsets, stream)
            stream.synchronize()
            assert status == [STATUS_OK] * len(blobs), dec.last_errors
            assert dec.last_stats["hardware"] == len(blobs)
            if before.any():
                early.append(call)
    assert early == [], f"calls {early}: the engines wrote before the work queued ahead of them was done"
    host = out.cpu()
    for i, b in enumerate(blobs):
        assert_close(host[i * n:(i + 1) * n].view(64, 80, 3), decode_cpu(b), what=f"image {i}")


@pytest.mark.cuda
def test_gpu_interpolated_upsampling():
    """RGB output with the handles' interpolated chroma upsampling (nvJPEG >= 12.1):
    close to libjpeg on 4:2:0, 4:2:2 and 4:4:4, and the engines still take baseline images."""
    blobs = [jpeg(64, 80, seed=i, subsampling=s) for i, s in enumerate((2, 1, 0, 2))]
    refs = [decode_cpu(b).to(torch.int16) for b in blobs]
    with NvjpegDecoder(0) as dec:
        status, images = gpu_decode(dec, blobs)
        assert status == [STATUS_OK] * 4, dec.last_errors
        diffs = [(img.to(torch.int16) - ref).abs().float().mean().item() for img, ref in zip(images, refs)]
        print(f"flags={dec.handle_flags} stats={dec.last_stats} "
              f"mean abs diff vs libjpeg (420, 422, 444, 420): {[round(d, 3) for d in diffs]}")
        assert max(diffs) < 2
        if dec.has_hardware:
            # Would fail if the flag made the engines refuse ordinary baseline images.
            assert dec.last_stats["hardware"] == 4


@pytest.mark.cuda
def test_gpu_chunking_pageable_input_and_pointer_pairs():
    blobs = [jpeg(30 + i, 40 + 2 * i, seed=i, progressive=(i % 4 == 3)) for i in range(11)]
    with NvjpegDecoder(0, max_batch=4) as dec:
        status, images = gpu_decode(dec, blobs, pinned=False)
        assert status == [STATUS_OK] * len(blobs), dec.last_errors
        for img, data in zip(images, blobs):
            assert_close(img, decode_cpu(data))
        # the same through a list of (pointer, length) pairs
        buf, offsets, lengths = pack(blobs)
        buf = buf.pin_memory()
        pairs = [(buf.data_ptr() + int(o), int(n)) for o, n in zip(offsets, lengths)]
        sizes = [(jpeg_info(b).height, jpeg_info(b).width) for b in blobs]
        nbytes = [h * w * 3 for h, w in sizes]
        out_offsets = np.concatenate([[0], np.cumsum(nbytes)[:-1]])
        out = torch.empty(sum(nbytes), dtype=torch.uint8, device=dec.device)
        status = dec.decode_batch(pairs, sizes=sizes, out=out, out_offsets=out_offsets)
        torch.cuda.current_stream(dec.device).synchronize()
        assert status == [STATUS_OK] * len(blobs)
        for i, data in enumerate(blobs):
            h, w = sizes[i]
            img = out[out_offsets[i]:out_offsets[i] + h * w * 3].view(h, w, 3).cpu()
            assert_close(img, decode_cpu(data))


@pytest.mark.cuda
def test_gpu_argument_checks_and_close(decoder):
    data = jpeg(16, 16)
    buf, offsets, lengths = pack([data])
    out = torch.empty(16 * 16 * 3, dtype=torch.uint8, device=decoder.device)
    with pytest.raises(ValueError, match="needs bytes"):
        decoder.decode_batch(buf, offsets, lengths, [(16, 16)], out[:-1], [0])
    with pytest.raises(ValueError, match="host memory"):
        decoder.decode_batch(buf.to(decoder.device), offsets, lengths, [(16, 16)], out, [0])
    with pytest.raises(ValueError, match="out is on"):
        decoder.decode_batch(buf, offsets, lengths, [(16, 16)], out.cpu(), [0])
    with pytest.raises(TypeError, match="uint8"):
        decoder.decode_batch(buf, offsets, lengths, [(16, 16)], out.float(), [0])
    assert decoder.decode_batch(buf[:0], offsets[:0], lengths[:0], np.zeros((0, 2)), out, []) == []
    dec = NvjpegDecoder(0)
    dec.close()
    dec.close()
    with pytest.raises(RuntimeError, match="closed"):
        dec.decode_batch(buf, offsets, lengths, [(16, 16)], out, [0])


# -- planar (Y, Cb, Cr) decode: plane geometry -----------------------------------------

@pytest.mark.parametrize("h, w", [(37, 53), (64, 40), (203, 317), (5, 7)])
def test_planar_chroma_matches_libjpeg_plane_sizes(h, w):
    from torchdali._synthetic import synthetic_image
    from torchdali.decode._jpeg_header import planar_chroma

    rng = np.random.default_rng(h * w)
    img = synthetic_image(rng, h, w)
    b420 = jpeg_bytes(img, subsampling=2)
    kind, ch, cw = planar_chroma(jpeg_info(np.frombuffer(b420, np.uint8)))
    native_cb = jpeg_planes(b420)[1]  # libjpeg's own chroma plane (Pillow, half-scale decode)
    assert kind == "420" and (ch, cw) == native_cb.shape == (-(-h // 2), -(-w // 2))
    assert planar_chroma(jpeg_info(np.frombuffer(jpeg_bytes(img, subsampling=0), np.uint8))) == ("444", h, w)
    assert planar_chroma(jpeg_info(np.frombuffer(jpeg_bytes(img, subsampling=1), np.uint8))) == \
        ("422", h, -(-w // 2))
    assert planar_chroma(jpeg_info(np.frombuffer(jpeg_bytes(img[:, :, 0]), np.uint8))) == ("gray", 0, 0)


def test_planar_chroma_leaves_out_other_subsamplings():
    from torchdali.decode._jpeg_header import planar_chroma

    info = jpeg_info(np.frombuffer(jpeg_bytes(np.zeros((16, 32, 3), np.uint8), subsampling=2), np.uint8))
    assert planar_chroma(info) == ("420", 8, 16)
    assert planar_chroma(info._replace(sampling=((4, 1), (1, 1), (1, 1)))) is None  # 4:1:1
    assert planar_chroma(info._replace(sampling=((2, 2), (1, 1), (2, 1)))) is None  # unequal chroma planes


def test_planar_image_rows_place_y_cb_cr_back_to_back():
    from torchdali.decode._nvjpeg import NvjpegDecoder

    heights, widths = np.array([37, 64]), np.array([53, 40])
    planes = np.array([[19, 27], [64, 40]])
    dst = np.array([1000, 9000], dtype=np.uint64)
    rows = NvjpegDecoder._image_rows(None, heights, widths, dst, planes, None, [])
    assert rows[0].tolist() == [1000, 1000 + 37 * 53, 1000 + 37 * 53 + 19 * 27, 0, 53, 27, 27, 0]
    assert rows[1].tolist() == [9000, 9000 + 64 * 40, 9000 + 2 * 64 * 40, 0, 40, 40, 40, 0]
    rgb = NvjpegDecoder._image_rows(None, heights, widths, dst, None, None, [])
    assert rgb[:, 0].tolist() == [1000, 9000] and rgb[:, 4].tolist() == [3 * 53, 3 * 40]


def test_the_decode_buffer_grows_rarely_and_never_shrinks():
    """Batches of varying size: the buffer grows to 1.25x the need (32 MiB steps) only
    when a batch needs more than it holds, and every view starts at its front."""
    from torchdali._executor._decode import GrowOnlyBuffer

    buf = GrowOnlyBuffer("cpu")
    mib = 1 << 20
    first = buf.take(100 * mib)
    assert buf.tensor.numel() == 128 * mib and first.numel() == 100 * mib and buf.grown == 1
    rng = np.random.default_rng(0)
    for need in rng.integers(90 * mib, 103 * mib, size=50):  # within the headroom: no new block
        view = buf.take(int(need))
        assert view.numel() == need and view.data_ptr() == buf.tensor.data_ptr()
    assert buf.grown == 1
    buf.take(129 * mib)
    assert buf.tensor.numel() == 192 * mib and buf.grown == 2  # ceil(1.25 * 129 / 32) * 32
    assert buf.take(0).numel() == 1 and buf.tensor.numel() == 192 * mib


def test_appending_cpu_images_reuses_one_buffer_and_keeps_the_bytes():
    """The decode buffer with the CPU's images appended goes to a grow-only buffer too:
    from another buffer, in place when the batch grows twice, and across a growth."""
    from torchdali._executor._decode import GrowOnlyBuffer, _grown

    into = GrowOnlyBuffer("cpu")
    decoded = torch.arange(1000, dtype=torch.int64).to(torch.uint8)
    extra = [torch.full((300,), 7, dtype=torch.uint8), torch.full((5,), 9, dtype=torch.uint8)]
    once = _grown(decoded, extra, into)
    expected = torch.cat([decoded, *extra])
    assert torch.equal(once, expected) and once.data_ptr() == into.tensor.data_ptr()
    twice = _grown(once, [torch.full((11,), 3, dtype=torch.uint8)], into)  # in place
    assert torch.equal(twice[:1305], expected) and (twice[1305:] == 3).all() and into.grown == 1
    big = [torch.full((64 << 20,), 5, dtype=torch.uint8)]
    thrice = _grown(twice, big, into)  # outgrows the block: the bytes move with it
    assert into.grown == 2 and torch.equal(thrice[:1305], expected) and (thrice[1305:1316] == 3).all()
    assert (thrice[1316:] == 5).all()
    again = _grown(decoded, extra, into)
    assert torch.equal(again, expected) and into.grown == 2
