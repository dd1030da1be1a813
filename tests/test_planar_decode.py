"""The planar (Y, Cb, Cr) GPU decode path's host side: which samples the workers send
to nvJPEG as planes, how many bytes each decoded sample takes, and which kernel source
reads a decoded batch. The decode itself runs in the cuda tests (test_gpu_loader.py,
test_decode.py)."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from csrc_triton import layout
from torchdali import transforms as T
from torchdali._executor._decode import decode_groups, decoded_sizes, kernel_source
from torchdali._executor._wire import ENCODED, RAW
from torchdali._executor._worker import PrepareBatch
from torchdali._synthetic import synthetic_image
from torchdali.transforms import compile_transforms

from ._helpers import jpeg_bytes


def _load(data: bytes):
    prepare = PrepareBatch(compile_transforms(T.Compose([T.Resize((8, 8))])), "gpu")
    return prepare.load(torch.frombuffer(bytearray(data), dtype=torch.uint8), 0, "x.jpg")


@pytest.mark.parametrize("subsampling, code", [(2, layout.S_420), (1, layout.S_422), (0, layout.S_444)])
def test_workers_send_colour_jpegs_as_planes(subsampling, code):
    img = synthetic_image(np.random.default_rng(0), 37, 53)
    data = jpeg_bytes(img, subsampling=subsampling)
    loaded = _load(data)
    assert loaded.kind == ENCODED and loaded.shape == (37, 53, layout.PLANAR + code)


def test_workers_send_jpegs_without_a_planar_reader_as_rgb():
    """A JPEG nvJPEG takes but the kernel has no planar reader for (4:1:1, unequal chroma
    planes: ``planar_chroma`` is None) goes to nvJPEG as RGB, ``(H, W, 3)``."""
    from torchdali._executor._classify import _gpu_decodable_shape
    from torchdali.decode._jpeg_header import jpeg_info

    data = jpeg_bytes(synthetic_image(np.random.default_rng(0), 37, 53), subsampling=2)
    payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    info = jpeg_info(np.frombuffer(data, np.uint8))
    assert _gpu_decodable_shape(payload, info)[0] == (37, 53, layout.PLANAR + layout.S_420)
    for sampling in (((4, 1), (1, 1), (1, 1)), ((2, 2), (1, 1), (2, 1))):  # 4:1:1, unequal chroma planes
        assert _gpu_decodable_shape(payload, info._replace(sampling=sampling))[0] == (37, 53, 3)


def test_workers_send_grayscale_as_luma_and_png_decoded():
    gray = jpeg_bytes(synthetic_image(np.random.default_rng(1), 20, 30)[:, :, 0])
    assert _load(gray).shape == (20, 30, layout.PLANAR + layout.S_GRAY)
    buf = io.BytesIO()
    Image.fromarray(synthetic_image(np.random.default_rng(2), 9, 11)).save(buf, format="PNG")
    png = _load(buf.getvalue())
    assert png.kind == RAW and png.shape == (9, 11, 3)


def test_decoded_sizes_count_planes_and_pixels():
    shapes = np.array([[37, 53, 3], [37, 53, layout.PLANAR + layout.S_420], [20, 30, 1],
                       [20, 30, layout.PLANAR + layout.S_GRAY], [7, 9, layout.PLANAR + layout.S_422],
                       [7, 9, layout.PLANAR + layout.S_444]])
    expected = [37 * 53 * 3, 37 * 53 + 2 * 19 * 27, 600, 600, 63 + 2 * 7 * 5, 3 * 63]
    assert decoded_sizes(shapes).tolist() == expected
    assert decoded_sizes(shapes[[0, 2]]).tolist() == [37 * 53 * 3, 600]


def test_chroma_shapes_match_the_layout():
    from torchdali._executor._decode import chroma_shapes

    shapes = [(h, w, layout.PLANAR + s) for h in (1, 2, 7, 37) for w in (1, 3, 8, 53) for s in layout.SUBSAMPLING]
    expected = [layout.chroma_shape(h, w, c - layout.PLANAR) for h, w, c in shapes]
    assert [tuple(r) for r in chroma_shapes(np.array(shapes)).tolist()] == expected
    assert decoded_sizes(np.array(shapes)).tolist() == [layout.planar_size(h, w, c - layout.PLANAR)
                                                        for h, w, c in shapes]


def test_kernel_source_and_groups_follow_the_planes():
    rgb = np.array([[10, 10, 3], [10, 10, 1]])
    mixed = np.array([[10, 10, 3], [10, 10, layout.PLANAR + layout.S_420]])
    assert kernel_source(rgb) == layout.SOURCE_INTERLEAVED
    assert kernel_source(mixed) == layout.SOURCE_MIXED
    # groups are cut by the decoded size: 100 + 2 * 25 = 150 bytes for the 4:2:0 sample
    assert decode_groups(mixed, cap=300) == [(0, 1), (1, 2)]
    assert decode_groups(mixed, cap=450) == [(0, 2)]


# -- on the GPU --------------------------------------------------------------------------

def _photo_jpeg(h: int, w: int, subsampling: int | None, seed: int) -> bytes:
    """A crop of a photograph (smooth chroma, as in real data); grayscale when
    ``subsampling`` is None."""
    from skimage import data as skdata

    src = skdata.astronaut()
    rng = np.random.default_rng(seed)
    y, x = int(rng.integers(0, src.shape[0] - h)), int(rng.integers(0, src.shape[1] - w))
    crop = np.ascontiguousarray(src[y:y + h, x:x + w])
    if subsampling is None:
        return jpeg_bytes(crop[:, :, 1], quality=90)
    return jpeg_bytes(crop, quality=90, subsampling=subsampling)


@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["auto", "hybrid"])
def test_nvjpeg_planes_match_libjpeg_planes(backend):
    """nvJPEG's planar output against the planes libjpeg decodes (Pillow): the same
    layout and sizes, values within the IDCTs' difference."""
    from torchdali.decode import NvjpegDecoder
    from torchdali.decode._jpeg_header import jpeg_info, planar_chroma

    from ._ycbcr import jpeg_planes

    blobs = [_photo_jpeg(203, 317, 2, 0), _photo_jpeg(64, 40, 0, 1), _photo_jpeg(37, 53, None, 2),
             _photo_jpeg(120, 99, 2, 3)]
    infos = [jpeg_info(np.frombuffer(b, np.uint8)) for b in blobs]
    sizes = np.array([[i.height, i.width] for i in infos])
    chroma = np.array([planar_chroma(i)[1:] for i in infos])
    nbytes = sizes[:, 0] * sizes[:, 1] + 2 * chroma[:, 0] * chroma[:, 1]
    offs = np.concatenate([[0], np.cumsum(nbytes)[:-1]])
    lengths = np.array([len(b) for b in blobs])
    data = torch.frombuffer(bytearray(b"".join(blobs)), dtype=torch.uint8).pin_memory()
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    with NvjpegDecoder(backend=backend) as dec:
        out = torch.zeros(int(nbytes.sum()), dtype=torch.uint8, device=dec.device)
        stream = torch.cuda.Stream(dec.device)
        status = dec.decode_batch(data, starts, lengths, sizes, out, offs, stream, chroma=chroma)
        stream.synchronize()
    assert status == [0] * len(blobs), dec.last_errors
    out = out.cpu().numpy()
    for k, b in enumerate(blobs):
        y, cb, cr, _ = jpeg_planes(b)
        (H, W), (ch, cw), o = sizes[k], chroma[k], int(offs[k])
        got_y = out[o: o + H * W].reshape(H, W)
        planes = [(got_y, y)]
        if ch:
            got_cb = out[o + H * W: o + H * W + ch * cw].reshape(ch, cw)
            got_cr = out[o + H * W + ch * cw: o + H * W + 2 * ch * cw].reshape(ch, cw)
            planes += [(got_cb, cb), (got_cr, cr)]
        for got, ref in planes:
            diff = np.abs(got.astype(int) - ref.astype(int))
            assert got.shape == ref.shape and diff.mean() < 0.5 and diff.max() <= 3, (k, diff.mean(), diff.max())


def _mixed_folder(tmp_path) -> str:
    """Photo JPEGs of every subsampling the planar path takes and grayscale ones, a PNG
    and a CMYK JPEG (both decoded in the workers)."""
    root = tmp_path / "mixed" / "c0"
    root.mkdir(parents=True)
    files = {}
    for k in range(16):
        h, w = 90 + 7 * k, 120 - 3 * k
        files[f"{k:02d}_420.jpg"] = _photo_jpeg(h, w, 2, k)
        if k % 4 == 1:
            files[f"{k:02d}_444.jpg"] = _photo_jpeg(h, w, 0, k)
        if k % 4 == 2:
            files[f"{k:02d}_422.jpg"] = _photo_jpeg(h, w, 1, k)
        if k % 4 == 3:
            files[f"{k:02d}_gray.jpg"] = _photo_jpeg(h, w, None, k)
    buf = io.BytesIO()
    Image.fromarray(synthetic_image(np.random.default_rng(5), 70, 90)).save(buf, format="PNG")
    files["png.png"] = buf.getvalue()
    buf = io.BytesIO()
    Image.fromarray(synthetic_image(np.random.default_rng(6), 60, 80)).convert("CMYK").save(buf, format="JPEG")
    files["cmyk.jpg"] = buf.getvalue()
    for name, data in files.items():
        (root / name).write_bytes(data)
    return str(tmp_path / "mixed")


@pytest.mark.cuda
def test_planar_loader_matches_the_cpu_path_with_and_without_rgb_decodes(tmp_path, monkeypatch):
    """The loader with nvJPEG decoding to planes and the kernel converting them: within 1
    of the CPU path (libjpeg) on >= 99.9% of values, never more than 2. The same with the
    4:4:4 JPEGs sent as RGB, as the workers send a JPEG the kernel has no planar reader
    for (4:1:1, ...): nvJPEG upsamples and converts those itself, in the batch's second
    nvJPEG call."""
    import torchdali as td
    from torchdali._executor import _classify

    root = _mixed_folder(tmp_path)
    ds = td.datasets.ImageFolder(root)
    tf = T.Compose([T.Resize(64), T.CenterCrop(56)])
    kw = dict(batch_size=len(ds), transforms=tf, seed=0)  # no workers: the header checks run here
    cpu = next(iter(td.DataLoader(ds, device="cpu", **kw)))[0].int()
    loader = td.DataLoader(ds, device="cuda", **kw)
    planar = next(iter(loader))[0].cpu().int()
    e = loader.stats().last
    assert e.decoded_cpu == 2 and e.decoded_hardware + e.decoded_hybrid == len(ds) - 2, loader.stats().summary()
    checks = _classify.decoders()
    real = checks.planar_chroma
    monkeypatch.setattr(checks, "planar_chroma", lambda info: None if (real(info) or ("",))[0] == "444" else real(info))
    loader = td.DataLoader(ds, device="cuda", **kw)
    rgb = next(iter(loader))[0].cpu().int()
    e = loader.stats().last
    assert e.decoded_cpu == 2 and e.decoded_hardware + e.decoded_hybrid == len(ds) - 2, loader.stats().summary()
    for name, got in (("planar", planar), ("planar and rgb", rgb)):
        diff = (got - cpu).abs()
        within = (diff <= 1).float().mean().item()
        print(f"\n{name} vs CPU path: {100 * within:.4f}% within 1, max {diff.max().item()}, "
              f"mean {diff.float().mean().item():.3f}")
        assert within >= 0.999 and diff.max() <= 2, name


@pytest.mark.cuda
def test_planar_loader_decodes_what_nvjpeg_rejects_on_the_cpu(tmp_path, monkeypatch):
    """A JPEG nvJPEG rejects (its slot holds planes, smaller than the RGB image) is decoded
    on the CPU and placed after the batch: the same pixels as the CPU path."""
    import torchdali as td
    from torchdali._executor import _decode

    root = _mixed_folder(tmp_path)
    ds = td.datasets.ImageFolder(root)
    tf = T.Compose([T.Resize((48, 48))])
    kw = dict(batch_size=len(ds), transforms=tf, seed=0)
    cpu = next(iter(td.DataLoader(ds, device="cpu", **kw)))[0].int()
    real = _decode.GpuDecoder._check_scans

    def flag_first(self, batch, pinned, enc):  # as if the scan check flagged the first JPEG
        check = real(self, batch, pinned, enc)
        return check._replace(flagged=lambda: [int(enc[0])])

    monkeypatch.setattr(_decode.GpuDecoder, "_check_scans", flag_first)
    loader = td.DataLoader(ds, device="cuda", **kw)
    planar = next(iter(loader))[0].cpu().int()
    assert loader.stats().last.decoded_cpu == 3
    first = 0  # the first JPEG of the batch: sorted file names, 00_420.jpg
    # both decoded by libjpeg: only the kernel's and the reference's rounding of ties differ
    assert (planar[first] - cpu[first]).abs().max() <= 1
    assert ((planar - cpu).abs() <= 1).float().mean() >= 0.999



def _photo_folder(tmp_path, n: int = 48) -> str:
    """``n`` files of the benchmarks' photographic set (``benchmarks/photo_folder.py``:
    scikit-image's photographs cut and rescaled to ImageNet's sizes, mostly 4:2:0)."""
    from benchmarks.photo_folder import make_one

    root = str(tmp_path / "photos")
    for i in range(n):
        make_one((root, i, 1, 0))
    return root


@pytest.mark.cuda
def test_gpu_val_output_is_within_1_of_torchvision_on_photographs(tmp_path):
    """The fidelity target on photographs: the val recipe in uint8 through the loader's
    default GPU path (planes, the kernel's upsampling and colour conversion) against
    torchvision's (decode_jpeg on the CPU, Resize(256) with antialias, CenterCrop(224)):
    >= 99.9% of values within 1, none more than 2 apart."""
    import torchdali as td
    import torchvision
    from torchvision.io import ImageReadMode, decode_jpeg, read_file
    from torchvision.transforms import v2

    ds = td.datasets.ImageFolder(_photo_folder(tmp_path))
    tv = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224)])
    expected = torch.stack([tv(decode_jpeg(read_file(p), mode=ImageReadMode.RGB)) for p, _ in ds.samples])
    recipe = T.Compose([T.Resize(256, antialias=True), T.CenterCrop(224), T.ToDtype(torch.uint8)])
    loader = td.DataLoader(ds, batch_size=16, num_workers=2, transforms=recipe, device="cuda")
    got = torch.cat([x.cpu() for x, _ in loader])
    e = loader.stats().last
    assert e.decoded_cpu == 0, loader.stats().summary()
    diff = (got.int() - expected.int()).abs()
    within = (diff <= 1).double().mean().item()
    print(f"\nGPU val vs torchvision {torchvision.__version__}: {100 * within:.4f}% within 1, "
          f"max {diff.max().item()}, mean {diff.float().mean().item():.4f}")
    assert within >= 0.999 and diff.max().item() <= 2
