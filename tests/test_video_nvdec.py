"""NVDEC decode of clips (``torchdali.video._nvdec.ClipDecoder``) against FFmpeg's software decoder.

H.264, HEVC and VP9 decoding is exact by the standards, so the NV12 planes NVDEC gives must equal
the software decoder's bit for bit; streams NVDEC does not take go to the CPU, counted."""
from __future__ import annotations

import numpy as np
import pytest
import torch

av = pytest.importorskip("av")

from csrc_triton import layout  # noqa: E402
from torchdali.video import decode_clip_nv12, probe, read_clip  # noqa: E402

from . import _video  # noqa: E402

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    return _video.write_all(tmp_path_factory.mktemp("videos"))


def _planes(out, k):
    H, W, _ = (int(v) for v in out.shapes[k])
    o = int(out.offsets[k])
    host = out.data[o: o + layout.nv12_size(H, W)].cpu().numpy()
    ch, cw = layout.nv12_chroma_shape(H, W)
    return host[: H * W].reshape(H, W), host[H * W:].reshape(ch, cw, 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_nvdec_frames_equal_the_software_decoders(videos):
    from torchdali.video._nvdec import ClipDecoder

    decoder = ClipDecoder("cuda")
    stream = torch.cuda.Stream()
    routes = {}
    for name, path in videos.items():
        info = probe(path)
        n = info.num_frames
        windows = [np.arange(0, min(8, n)), np.arange(max(0, n - 9), n, 2), np.array([n // 2, n // 2 + 1, n - 1, n - 1])]
        clips = [read_clip(path, w, info) for w in windows]
        out = decoder.decode(clips, stream)
        torch.cuda.synchronize()
        assert out.nvdec + out.cpu == len(clips)
        routes[name] = out.nvdec
        k = 0
        for clip in clips:
            ref = decode_clip_nv12(clip)
            for f in range(clip.num_frames):
                y, uv = _planes(out, k)
                assert np.array_equal(y, ref.y[f]) and np.array_equal(uv, ref.uv[f]), f"{name}: frame {f}"
                assert tuple(out.shapes[k]) == (clip.height, clip.width,
                                                layout.nv12_code(clip.color.conversion_matrix, clip.color.full_range))
                k += 1
    # H.264 at every size here goes to NVDEC (its smallest frame is 48 x 16); the others are
    # below NVDEC's smallest HEVC/VP9 frame, or AV1, and decode on the CPU
    assert all(routes[name] == 3 for name in videos if name.startswith("h264")), routes
