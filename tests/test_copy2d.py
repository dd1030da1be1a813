"""``torchdali.video._copy2d.copy_2d``, the driver's pitched copy that moves NVDEC's planes into the batch
buffer, against torch's own slicing of the same bytes."""
from __future__ import annotations

import pytest
import torch

from torchdali.video._copy2d import copy_2d


def test_a_missing_driver_library_is_a_runtime_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without libcuda the copy raises RuntimeError, which ClipDecoder counts as an NVDEC failure (the clip
    then decodes on the CPU), rather than an OSError that would end the batch."""
    from torchdali.video import _copy2d

    def no_library(name: str) -> None:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(_copy2d, "_fn", None)
    monkeypatch.setattr(_copy2d.ctypes, "CDLL", no_library)
    with pytest.raises(RuntimeError, match="libcuda.so.1"):
        copy_2d(1 << 20, 4, 2 << 20, 4, 4, 2, 0)


@pytest.mark.parametrize("height,width,pitch", [(16, 48, 64), (9, 33, 512), (1, 1, 1), (240, 426, 512)])
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_rows_of_a_pitched_plane_land_packed_at_the_offset(height: int, width: int, pitch: int) -> None:
    g = torch.Generator(device="cuda").manual_seed(height * 1000 + width)
    src = torch.randint(0, 256, (height, pitch), dtype=torch.uint8, device="cuda", generator=g)
    dst = torch.full((7 + height * width + 5,), 0xA5, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    copy_2d(dst.data_ptr() + 7, width, src.data_ptr(), pitch, width, height, stream.cuda_stream)
    stream.synchronize()
    assert torch.equal(dst[7: 7 + height * width].view(height, width), src[:, :width])
    assert (dst[:7] == 0xA5).all() and (dst[7 + height * width:] == 0xA5).all()  # nothing written outside


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_an_empty_plane_queues_nothing() -> None:
    dst = torch.zeros(4, dtype=torch.uint8, device="cuda")
    copy_2d(dst.data_ptr(), 2, 0, 2, 0, 5, torch.cuda.current_stream().cuda_stream)  # src 0 would fault if read
    copy_2d(dst.data_ptr(), 2, 0, 2, 2, 0, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert not dst.any()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_drivers_refusal_is_an_error() -> None:
    dst = torch.zeros(64, dtype=torch.uint8, device="cuda")
    with pytest.raises(RuntimeError, match="cuMemcpy2DAsync failed"):
        # a source pitch below the width: the driver refuses the copy before it is queued
        copy_2d(dst.data_ptr(), 8, dst.data_ptr(), 4, 8, 2, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()  # the stream and context are still usable
