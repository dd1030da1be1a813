"""Decoding: header probing, nvJPEG batch decoding on the GPU, CPU fallback.

``jpeg_info``/``image_format``/``image_info_batch`` read headers only (cheap, CPU);
``NvjpegDecoder`` decodes JPEG batches on a GPU; ``decode_cpu`` handles whatever the
GPU path reports as ``STATUS_NEEDS_CPU``.
"""
from . import _formats, _image_info, _jpeg_header, _nvjpeg, _nvjpeg_lib
from ._cpu import DecodeError, decode_cpu
from ._formats import (
    FORMAT_BMP,
    FORMAT_GIF,
    FORMAT_JPEG,
    FORMAT_NAMES,
    FORMAT_PNG,
    FORMAT_TIFF,
    FORMAT_UNKNOWN,
    FORMAT_WEBP,
    image_format,
)
from ._image_info import (
    FLAG_ARITHMETIC,
    FLAG_CMYK,
    FLAG_CORRUPT,
    FLAG_GPU_UNSUITABLE,
    FLAG_HIGH_PRECISION,
    FLAG_LOSSLESS,
    FLAG_ORIENTED,
    FLAG_PROGRESSIVE,
    FLAG_RESTART,
    FLAG_RGB_CODED,
    FLAG_YCCK,
    ImageInfoBatch,
    image_info_batch,
)
from ._jpeg_header import JpegInfo, jpeg_info
from ._nvjpeg import NvjpegDecoder
from ._nvjpeg_lib import (
    STATUS_NEEDS_CPU,
    STATUS_OK,
    STATUS_SIZE_MISMATCH,
    NvjpegError,
    load_nvjpeg,
    nvjpeg_version,
    status_name,
)

__all__ = [
    "decode_cpu",
    "DecodeError",
    *_jpeg_header.__all__,
    *_image_info.__all__,
    *_formats.__all__,
    *(name for name in (*_nvjpeg.__all__, *_nvjpeg_lib.__all__) if name in globals()),
]
