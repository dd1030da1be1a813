"""Small deterministic test videos written with PyAV's encoders, whose frames say their own number.

Frame ``i`` is a 2 x 4 grid of blocks; block ``b`` (row-major) shows ``ON`` where bit ``b``
of ``i`` is set and ``OFF`` elsewhere. The two colours differ by about 125 in luma, so
``frame_number`` reads the number back from any decoded frame despite lossy coding,
and they are saturated enough that decoding with the wrong YCbCr matrix shows.
"""
from __future__ import annotations

import os
from fractions import Fraction
from typing import Any

import numpy as np

os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1: errors only

ON = (240, 200, 40)
OFF = (40, 60, 220)
_ROWS, _COLS = 2, 4

_MATRIX = {"bt601": 5, "bt709": 1, "bt2020": 9}  # AVColorSpace (BT.2020: non-constant luminance)
_PRIMARIES = {"bt601": 6, "bt709": 1, "bt2020": 9}  # AVColorPrimaries: SMPTE170M, BT709, BT2020
_TRC = {"bt601": 6, "bt709": 1, "bt2020": 14}  # AVColorTransferCharacteristic (BT2020_10)
_RANGE = {"limited": 1, "full": 2}  # AVColorRange
_SWS_MATRIX = {"bt601": "itu601", "bt709": "itu709", "bt2020": "bt2020"}
#: (Kr, Kb) of each matrix: the luma weights of red and blue
KR_KB = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722), "bt2020": (0.2627, 0.0593)}
_SWS_RANGE = {"limited": "MPEG", "full": "JPEG"}


def frame_rgb(i: int, width: int, height: int) -> np.ndarray:
    """Frame ``i`` as ``[height, width, 3]`` uint8 RGB."""
    out = np.empty((height, width, 3), dtype=np.uint8)
    ys = np.linspace(0, height, _ROWS + 1).astype(int)
    xs = np.linspace(0, width, _COLS + 1).astype(int)
    for b in range(_ROWS * _COLS):
        r, c = divmod(b, _COLS)
        out[ys[r]:ys[r + 1], xs[c]:xs[c + 1]] = ON if (i >> b) & 1 else OFF
    return out


def frame_number(rgb: np.ndarray) -> int:
    """The number ``frame_rgb`` wrote into a decoded ``[H, W, 3]`` frame (block centres' luma)."""
    height, width = rgb.shape[:2]
    ys = np.linspace(0, height, _ROWS + 1).astype(int)
    xs = np.linspace(0, width, _COLS + 1).astype(int)
    luma = rgb.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    number = 0
    for b in range(_ROWS * _COLS):
        r, c = divmod(b, _COLS)
        y0, y1, x0, x1 = ys[r], ys[r + 1], xs[c], xs[c + 1]
        dy, dx = max((y1 - y0) // 4, 0), max((x1 - x0) // 4, 0)
        if luma[y0 + dy:y1 - dy, x0 + dx:x1 - dx].mean() > 128:
            number |= 1 << b
    return number


def vfr_pts(count: int, seed: int = 0) -> list[int]:
    """Irregular, increasing presentation times in milliseconds (10 to 90 ms apart)."""
    gaps = np.random.default_rng(seed).integers(10, 91, size=count)
    return [int(t) for t in np.concatenate([[0], np.cumsum(gaps[:-1])])]


def write_video(path: str | os.PathLike, codec: str = "libx264", frames: int = 24, width: int = 64,
                height: int = 48, rate: int = 25, options: dict[str, str] | None = None,
                pts_ms: list[int] | None = None, matrix: str = "bt601", color_range: str = "limited",
                first: int = 0, pix_fmt: str = "yuv420p") -> str:
    """Write ``frames`` frames (``frame_rgb(first + i)``) with encoder ``codec``; the container comes
    from the file's extension. ``pts_ms`` gives variable-rate presentation times (time base 1/1000).
    The stream is tagged with ``matrix`` ("bt601", "bt709" or "bt2020") and ``color_range``
    ("limited" or "full"), and the pictures are converted to YCbCr with them, in the pixel format
    ``pix_fmt`` (FFmpeg's name: "yuv420p", "yuv444p10le", ...)."""
    import av

    path = os.fspath(path)
    with av.open(path, "w") as out:
        stream: Any = out.add_stream(codec, rate=rate, options=dict(options or {}))
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        cc = stream.codec_context
        cc.colorspace, cc.color_range = _MATRIX[matrix], _RANGE[color_range]
        cc.color_primaries, cc.color_trc = _PRIMARIES[matrix], _TRC[matrix]
        if pts_ms is not None:
            stream.time_base = cc.time_base = Fraction(1, 1000)
        for i in range(frames):
            rgb = av.VideoFrame.from_ndarray(frame_rgb(first + i, width, height), format="rgb24")
            frame = rgb.reformat(format=pix_fmt, src_colorspace=_SWS_MATRIX[matrix],
                                 dst_colorspace=_SWS_MATRIX[matrix], src_color_range="JPEG",
                                 dst_color_range=_SWS_RANGE[color_range])
            frame.colorspace, frame.color_range = _MATRIX[matrix], _RANGE[color_range]
            if pts_ms is not None:
                frame.pts, frame.time_base = pts_ms[i], Fraction(1, 1000)
            else:
                frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


_X264_GOP = {"bf": "3", "g": "8", "x264-params": "keyint=8:min-keyint=8:scenecut=0:log-level=error"}
#: name -> ``write_video`` arguments of the test videos (file name ``<name>.<ext>``)
VIDEOS: dict[str, dict[str, Any]] = {
    # closed GOPs of 8 with up to 3 B-frames
    "h264_bframes.mp4": dict(codec="libx264", frames=30, options=_X264_GOP),
    # open GOPs: leading B-frames after each non-IDR I-frame reference the previous GOP
    "h264_open_gop.mkv": dict(codec="libx264", frames=30, width=80, height=64, options={
        "bf": "3", "g": "8", "x264-params": "keyint=8:min-keyint=8:scenecut=0:open-gop=1:log-level=error"}),
    "hevc.mp4": dict(codec="libx265", frames=26, options={
        "x265-params": "keyint=8:min-keyint=8:bframes=3:open-gop=1:scenecut=0:log-level=error"}),
    "vp9.webm": dict(codec="libvpx-vp9", frames=20, options={"g": "8", "deadline": "realtime", "cpu-used": "8"}),
    "av1.mp4": dict(codec="libsvtav1", frames=20, options={"g": "8", "preset": "12"}),
    # variable frame rate: irregular presentation times in a millisecond time base
    "h264_vfr.mp4": dict(codec="libx264", frames=25, pts_ms=vfr_pts(25), options=_X264_GOP),
    "vp9_vfr.mkv": dict(codec="libvpx-vp9", frames=16, pts_ms=vfr_pts(16, seed=1),
                        options={"g": "6", "deadline": "realtime", "cpu-used": "8"}),
    # sizes that are not multiples of 16 (even: 4:2:0)
    "h264_odd.mp4": dict(codec="libx264", frames=12, width=70, height=46, options=_X264_GOP),
    "hevc_odd.mkv": dict(codec="libx265", frames=10, width=70, height=46, options={
        "x265-params": "keyint=4:bframes=2:log-level=error"}),
    # colour tags
    "h264_bt709_full.mp4": dict(codec="libx264", frames=10, width=96, height=64, matrix="bt709",
                                color_range="full", options=_X264_GOP),
    "h264_bt709_limited.mp4": dict(codec="libx264", frames=10, width=96, height=64, matrix="bt709",
                                   options=_X264_GOP),
    "h264_bt601_full.mp4": dict(codec="libx264", frames=10, width=96, height=64, color_range="full",
                                options=_X264_GOP),
    "vp9_bt709_full.webm": dict(codec="libvpx-vp9", frames=8, matrix="bt709", color_range="full",
                                options={"deadline": "realtime", "cpu-used": "8"}),
}


def write_all(folder: str | os.PathLike, names: list[str] | None = None) -> dict[str, str]:
    """Write the ``VIDEOS`` (or those named) into ``folder``; name -> path."""
    paths = {}
    for name in names or list(VIDEOS):
        paths[name] = write_video(os.path.join(folder, name), **VIDEOS[name])
    return paths


def decode_all(path: str | os.PathLike) -> list[Any]:
    """Every frame of the file's first video stream, decoded sequentially by PyAV (the tests' reference)."""
    import av

    with av.open(os.fspath(path)) as container:
        stream = container.streams.video[0]
        return list(container.decode(stream))


def ycbcr_planes(frame: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """A planar YCbCr frame's ``Y``, ``Cb``, ``Cr`` planes (float64, each at its own size) and bit depth."""
    bits = frame.format.components[0].bits
    dtype = np.dtype(np.uint8) if bits <= 8 else np.dtype("<u2")
    planes = []
    for p in frame.planes[:3]:
        rows = np.frombuffer(p, dtype=dtype).reshape(p.height, p.line_size // dtype.itemsize)
        planes.append(rows[:, :p.width].astype(np.float64))
    return planes[0], planes[1], planes[2], bits


def _upsample_chroma(c: np.ndarray, height: int, width: int) -> np.ndarray:
    """A chroma plane at full size, bilinearly, sited as H.264 and HEVC's default: samples on the even
    columns (the odd ones halfway between two) and, when rows are subsampled, halfway between two rows."""
    ch, cw = c.shape
    if cw < width:
        x = np.arange(width) / 2.0
        k0 = np.floor(x).astype(int)
        t = x - k0
        c = c[:, k0] * (1 - t) + c[:, np.minimum(k0 + 1, cw - 1)] * t
    if ch < height:
        y = (np.arange(height) - 0.5) / 2.0
        j0 = np.floor(y).astype(int)
        t = (y - j0)[:, None]
        c = c[np.clip(j0, 0, ch - 1)] * (1 - t) + c[np.clip(j0 + 1, 0, ch - 1)] * t
    return c


def rgb_formula(frame: Any, matrix: str = "bt601", color_range: str = "limited") -> np.ndarray:
    """R'G'B' (float64 ``[H, W, 3]``, 0..255 before rounding) of a decoded planar YCbCr frame of any
    subsampling and bit depth, by the matrix's formula (ITU-R BT.601/709/2020): limited range Y
    ``16..235``, Cb, Cr ``16..240`` times ``2 ** (bits - 8)``; full range the code values over
    ``2 ** bits - 1``. The chroma is interpolated bilinearly (``_upsample_chroma``)."""
    y, cb, cr, bits = ycbcr_planes(frame)
    height, width = y.shape
    cb, cr = _upsample_chroma(cb, height, width), _upsample_chroma(cr, height, width)
    if color_range == "limited":
        s = 2.0 ** (bits - 8)
        ys, cbs, crs = (y / s - 16) * 255 / 219, (cb / s - 128) * 255 / 224, (cr / s - 128) * 255 / 224
    else:
        mid, top = 2.0 ** (bits - 1), 2.0 ** bits - 1
        ys, cbs, crs = y * 255 / top, (cb - mid) * 255 / top, (cr - mid) * 255 / top
    kr, kb = KR_KB[matrix]
    kg = 1 - kr - kb
    return np.stack([ys + 2 * (1 - kr) * crs,
                     ys - 2 * kb * (1 - kb) / kg * cbs - 2 * kr * (1 - kr) / kg * crs,
                     ys + 2 * (1 - kb) * cbs], axis=-1)


def reference_rgb(frame: Any, matrix: str = "bt601", color_range: str = "limited") -> np.ndarray:
    """``rgb_formula`` rounded and clamped: uint8 ``[H, W, 3]``."""
    return np.clip(np.floor(rgb_formula(frame, matrix, color_range) + 0.5), 0, 255).astype(np.uint8)
