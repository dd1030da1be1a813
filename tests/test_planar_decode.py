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
from torchdali._executor._worker import ENCODED, RAW, PrepareBatch
from torchdali._synthetic import synthetic_image
from torchdali.transforms import compile_transforms

from ._helpers import jpeg_bytes


def _load(data: bytes, planar: bool):
    prepare = PrepareBatch(compile_transforms(T.Compose([T.Resize((8, 8))])), "gpu", planar=planar)
    return prepare.load(torch.frombuffer(bytearray(data), dtype=torch.uint8), 0, "x.jpg")


@pytest.mark.parametrize("subsampling, code", [(2, layout.S_420), (1, layout.S_422), (0, layout.S_444)])
def test_workers_send_colour_jpegs_as_planes(subsampling, code):
    img = synthetic_image(np.random.default_rng(0), 37, 53)
    data = jpeg_bytes(img, subsampling=subsampling)
    loaded = _load(data, planar=True)
    assert loaded.kind == ENCODED and loaded.shape == (37, 53, layout.PLANAR + code)
    assert _load(data, planar=False).shape == (37, 53, 3)  # the RGB path is unchanged


def test_workers_send_grayscale_as_luma_and_png_decoded():
    gray = jpeg_bytes(synthetic_image(np.random.default_rng(1), 20, 30)[:, :, 0])
    assert _load(gray, planar=True).shape == (20, 30, layout.PLANAR + layout.S_GRAY)
    buf = io.BytesIO()
    Image.fromarray(synthetic_image(np.random.default_rng(2), 9, 11)).save(buf, format="PNG")
    png = _load(buf.getvalue(), planar=True)
    assert png.kind == RAW and png.shape == (9, 11, 3)


def test_gpu_decode_defaults_to_planes_and_names_its_choices():
    import torchdali as td

    ds, tf = [(torch.zeros(3, 4, 4, dtype=torch.uint8), 0)], T.Compose([T.Resize((2, 2))])
    assert td.DataLoader(ds, transforms=tf).gpu_decode == "planar"
    assert td.DataLoader(ds, transforms=tf, gpu_decode="rgb").gpu_decode == "rgb"
    with pytest.raises(ValueError, match="gpu_decode must be one of 'planar', 'rgb', got 'yuv'"):
        td.DataLoader(ds, transforms=tf, gpu_decode="yuv")


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


def test_window_chroma_counts_the_chroma_samples_that_cover_a_window():
    """Against the planes cut by hand: a window starting on the chroma grid holds chroma
    rows ``[y / vf, ceil((y + h) / vf))``; whole-image rows and grayscale stay as given."""
    from torchdali.decode._nvjpeg import window_chroma

    heights, widths = np.array([375, 375, 375, 64, 50]), np.array([500, 500, 500, 64, 41])
    chroma = np.array([[188, 250], [375, 250], [188, 250], [0, 0], [50, 41]])  # 4:2:0, 4:2:2, 4:2:0, gray, 4:4:4
    rois = np.array([[32, 48, 160, 96], [32, 48, 161, 97], [16, 352, 224, 23], [16, 16, 32, 32], [0, 0, -1, -1]])
    got = window_chroma(heights, widths, chroma, rois)
    for k in range(len(rois)):
        H, W = int(heights[k]), int(widths[k])
        x, y, w, h = (int(v) for v in rois[k])
        ch, cw = (int(v) for v in chroma[k])
        if ch == 0 or w <= 0:
            assert tuple(got[k]) == (ch, cw)
            continue
        vf, hf = (2 if ch < H else 1), (2 if cw < W else 1)
        rows = {r // vf for r in range(y, y + h)}  # the chroma rows the window's luma rows use
        cols = {c // hf for c in range(x, x + w)}
        assert tuple(got[k]) == (len(rows), len(cols)) and min(rows) == y // vf, k


@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["auto", "hybrid"])
def test_nvjpeg_planar_windows_are_the_whole_decodes_planes_cut(backend):
    """Planar output with windows (``rois`` with ``chroma``): each plane of a window is the
    same plane of the whole image's planar decode, cut to the window, byte for byte. The
    hardware engines decode the window; the hybrid backend decodes the whole image and
    copies it out. Windows end inside the image or at its edge, and one image has none."""
    from torchdali.decode import NvjpegDecoder
    from torchdali.decode._jpeg_header import jpeg_info, planar_chroma
    from torchdali.decode._nvjpeg import window_chroma

    blobs = [_photo_jpeg(203, 317, 2, 0), _photo_jpeg(160, 96, 0, 1), _photo_jpeg(120, 99, 2, 3),
             _photo_jpeg(37, 53, None, 2), _photo_jpeg(90, 64, 1, 4)]
    rois = np.array([[32, 16, 128, 96], [16, 48, 64, 112], [48, 32, 51, 88], [16, 0, 32, 32], [0, 0, -1, -1]])
    infos = [jpeg_info(np.frombuffer(b, np.uint8)) for b in blobs]
    sizes = np.array([[i.height, i.width] for i in infos])
    chroma = np.array([planar_chroma(i)[1:] for i in infos])
    lengths = np.array([len(b) for b in blobs])
    data = torch.frombuffer(bytearray(b"".join(blobs)), dtype=torch.uint8).pin_memory()
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    whole_n = sizes[:, 0] * sizes[:, 1] + 2 * chroma[:, 0] * chroma[:, 1]
    wc = window_chroma(sizes[:, 0], sizes[:, 1], chroma, rois)
    on = rois[:, 2] > 0
    win_n = np.where(on, rois[:, 2] * rois[:, 3], sizes[:, 0] * sizes[:, 1]) + 2 * wc[:, 0] * wc[:, 1]
    with NvjpegDecoder(backend=backend) as dec:
        stream = torch.cuda.Stream(dec.device)
        whole = torch.zeros(int(whole_n.sum()), dtype=torch.uint8, device=dec.device)
        w_off = np.concatenate([[0], np.cumsum(whole_n)[:-1]])
        assert dec.decode_batch(data, starts, lengths, sizes, whole, w_off, stream, chroma=chroma) == [0] * 5
        cut = torch.full((int(win_n.sum()),), 7, dtype=torch.uint8, device=dec.device)
        c_off = np.concatenate([[0], np.cumsum(win_n)[:-1]])
        status = dec.decode_batch(data, starts, lengths, sizes, cut, c_off, stream, chroma=chroma, rois=rois)
        routed, hardware = dict(dec.last_stats), dec.has_hardware
        stream.synchronize()
        with pytest.raises(ValueError, match="chroma factors"):  # a window off the 4:2:0 grid
            dec.decode_batch(data, starts, lengths, sizes, cut, c_off, stream, chroma=chroma,
                             rois=np.array([[33, 16, 64, 64]] + rois[1:].tolist()))
    assert status == [0] * 5, dec.last_errors
    # where the windows were decoded: by the engines, or whole by the hybrid backend and cut
    assert routed["hardware" if backend == "auto" and hardware else "hybrid"] == 5, routed
    whole, cut = whole.cpu(), cut.cpu()
    for k in range(5):
        (H, W), (ch, cw), o, q = sizes[k], chroma[k], int(w_off[k]), int(c_off[k])
        x, y, w, h = (int(v) for v in rois[k]) if on[k] else (0, 0, int(W), int(H))
        vf, hf = (2 if ch < H else 1), (2 if cw < W else 1)
        assert torch.equal(cut[q:q + h * w].view(h, w), whole[o:o + H * W].view(H, W)[y:y + h, x:x + w]), k
        if ch:
            wh, ww = (int(v) for v in wc[k])
            for p in range(2):
                src = whole[o + H * W + p * ch * cw: o + H * W + (p + 1) * ch * cw].view(int(ch), int(cw))
                got = cut[q + h * w + p * wh * ww: q + h * w + (p + 1) * wh * ww].view(wh, ww)
                assert torch.equal(got, src[y // vf:y // vf + wh, x // hf:x // hf + ww]), (k, p)


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
def test_planar_loader_matches_the_cpu_path_and_the_rgb_path(tmp_path, monkeypatch):
    """The loader with nvJPEG decoding to planes and the kernel converting them: within 1
    of the CPU path (libjpeg) on >= 99.9% of values, never more than 2, as the RGB path."""
    import torchdali as td

    root = _mixed_folder(tmp_path)
    ds = td.datasets.ImageFolder(root)
    tf = T.Compose([T.Resize(64), T.CenterCrop(56)])
    kw = dict(batch_size=len(ds), transforms=tf, seed=0)
    cpu = next(iter(td.DataLoader(ds, device="cpu", **kw)))[0].int()
    rgb = next(iter(td.DataLoader(ds, device="cuda", gpu_decode="rgb", **kw)))[0].cpu().int()
    loader = td.DataLoader(ds, device="cuda", **kw)  # gpu_decode="planar", the default
    planar = next(iter(loader))[0].cpu().int()
    e = loader.stats().last
    assert e.decoded_cpu == 2 and e.decoded_hardware + e.decoded_hybrid == len(ds) - 2, loader.stats().summary()
    for name, got in (("planar", planar), ("rgb", rgb)):
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
