"""Video clips: one dataset item is a clip (a list of frames) of a video.

* ``_clips``: which frames make a clip (``ClipSampler``; uniform and random clips, padding).
* ``_container``: ``probe`` a file (demux only), ``read_clip`` (the packets a clip needs, as a
  picklable ``EncodedClip``), ``decode_clip_nv12`` / ``decode_clip_rgb`` (FFmpeg's software decoders;
  ``as_nv12`` says which a clip's pixel format and colour matrix take).
* ``_datasets``: ``VideoFolder`` and ``VideoFileList``.
* ``_nvdec``: ``ClipDecoder``, a batch's clips decoded on the GPU by NVDEC, driven through the driver's
  ``libnvcuvid`` (``_cuvid``, its per-picture callbacks in C: ``_cuvid_clip.c``; clips that share packets
  merged by ``_merge``).

``torchdali.DataLoader`` takes these datasets: one sample is one clip, placed by the loader's seeded
per-sample generator, every frame of a clip transformed with the same drawn parameters; batches are
``[B, F, C, H, W]`` (``video_layout="BCFHW"``: ``[B, C, F, H, W]``), decoded by NVDEC on the GPU path
(``torchdali/_executor/_video.py``).

PyAV (``pip install av``, or ``pip install -e ".[video]"`` in a clone) is imported only when a file is opened.
"""
from ._clips import (
    CLIP_MODES, MISSING_FRAME, PAD_MODES, ClipSampler, ShortVideoError, clip_frame_indices, clip_span,
    random_clip_start, uniform_clip_starts,
)
from ._container import (
    NV12_PIX_FMTS, ClipDecodeError, ColorInfo, EncodedClip, NV12Clip, UnsupportedVideoError, VideoInfo, as_nv12,
    decode_clip_nv12, decode_clip_rgb, probe, read_clip,
)
from ._datasets import VIDEO_EXTENSIONS, VideoFileList, VideoFolder, probe_videos

__all__ = [
    "CLIP_MODES", "MISSING_FRAME", "PAD_MODES", "VIDEO_EXTENSIONS",
    "ClipSampler", "ShortVideoError", "clip_frame_indices", "clip_span", "random_clip_start", "uniform_clip_starts",
    "ClipDecodeError", "ColorInfo", "EncodedClip", "NV12Clip", "UnsupportedVideoError", "VideoInfo",
    "NV12_PIX_FMTS", "as_nv12", "decode_clip_nv12", "decode_clip_rgb", "probe", "read_clip",
    "VideoFileList", "VideoFolder", "probe_videos",
]
