"""Per-op parity with torchvision on photographs: max |diff| and share of values within 1.

    python benchmarks/parity_table.py [--size 176] [--crops 24] [--markdown]
    python benchmarks/parity_table.py --detection [--images 32] [--markdown]

Every op runs once through torchdali's functional (the plain-torch reference of the
kernels, which the kernel tests hold the Triton kernels to) and once through
``torchvision.transforms.v2.functional`` on the same uint8 CHW tensors, with the same
parameters. Inputs are random crops of the photographs that ship with scikit-image,
resized to ``--size``; every op runs at several magnitudes. The table is what
benchmarks/RESULTS.md quotes.

``--detection``: torchvision's detection reference presets (as ``tests/test_iou_crop.py``
writes them out) through the loader's CPU path, against torchvision v2 applied to the same
decoded photographs with the loader's draw replayed (``tests/test_geometry_targets.py``), on
a COCO-shaped set (``photo_folder.coco_folder``): images (max |diff| and share within 1 on
the 0..255 scale), boxes (max |diff|, samples whose kept boxes are the same after
SanitizeBoundingBoxes) and masks (samples exactly equal).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png", "retina.jpg",
          "hubble_deep_field.jpg", "ihc.png")


def photo_crops(size: int, n: int, seed: int = 0) -> list[torch.Tensor]:
    """``n`` uint8 ``[3, size, size]`` crops of scikit-image's photographs."""
    import skimage
    from PIL import Image
    from torchvision.transforms.v2 import functional as F

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        path = os.path.join(os.path.dirname(skimage.__file__), "data", PHOTOS[i % len(PHOTOS)])
        img = torch.from_numpy(np.asarray(Image.open(path).convert("RGB"))).permute(2, 0, 1).contiguous()
        h, w = img.shape[1:]
        side = int(min(h, w) * rng.uniform(0.4, 1.0))
        top, left = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        out.append(F.resized_crop(img, top, left, side, side, [size, size], antialias=True))
    return out


def cases(size: int):
    """(row name, our call, torchvision call) for every op and magnitude."""
    from torchvision.transforms.v2 import InterpolationMode as IM
    from torchvision.transforms.v2 import functional as F

    from torchdali.transforms import functional as O

    def both(name, *args, **kwargs):
        return (lambda x: getattr(O, name)(x, *args, **kwargs), lambda x: getattr(F, name)(x, *args, **kwargs))

    rows = []
    for f in (0.2, 0.6, 1.4, 1.9):
        rows.append(("adjust_brightness", f"factor {f}", *both("adjust_brightness", f)))
        rows.append(("adjust_contrast", f"factor {f}", *both("adjust_contrast", f)))
        rows.append(("adjust_saturation", f"factor {f}", *both("adjust_saturation", f)))
        rows.append(("adjust_sharpness", f"factor {f}", *both("adjust_sharpness", f)))
    for h in (-0.4, -0.1, 0.05, 0.3):
        rows.append(("adjust_hue", f"factor {h}", *both("adjust_hue", h)))
    rows.append(("rgb_to_grayscale", "3 channels", *both("rgb_to_grayscale", 3)))
    rows.append(("invert", "", *both("invert")))
    for b in (1, 4, 7):
        rows.append(("posterize", f"bits {b}", *both("posterize", b)))
    for t in (32.0, 128.0, 230.0):
        rows.append(("solarize", f"threshold {t:g}", *both("solarize", t)))
    rows.append(("autocontrast", "", *both("autocontrast")))
    rows.append(("equalize", "", *both("equalize")))
    for k, s in ((3, 0.8), (9, 2.0), (23, 5.0)):
        rows.append(("gaussian_blur", f"kernel {k}, sigma {s}", *both("gaussian_blur", [k, k], [s, s])))
    for interp in (IM.NEAREST, IM.BILINEAR):
        tag = interp.value
        for a in (-30.0, 12.5, 90.0):
            rows.append(("rotate", f"{a:g} deg, {tag}", *both("rotate", a, interpolation=interp)))
        rows.append(("affine", f"shear 17 deg, {tag}",
                     *both("affine", 0.0, [0, 0], 1.0, [17.0, 0.0], interpolation=interp)))
        rows.append(("affine", f"translate (13, -7), scale 0.8, rot 7, {tag}",
                     *both("affine", 7.0, [13, -7], 0.8, [0.0, 0.0], interpolation=interp, fill=[10, 200, 30])))
        start = [[0, 0], [size - 1, 0], [size - 1, size - 1], [0, size - 1]]
        end = [[9, 4], [size - 20, 11], [size - 6, size - 14], [3, size - 30]]
        rows.append(("perspective", f"corners moved by up to 30 px, {tag}",
                     *both("perspective", start, end, interpolation=interp)))
    for interp in (IM.BILINEAR, IM.BICUBIC, IM.NEAREST, IM.NEAREST_EXACT):
        for out in (112, 300):
            rows.append(("resize", f"{interp.value} to {out}, antialias",
                         lambda x, o=out, m=interp: O.resize(x, [o, o], interpolation=m, antialias=True),
                         lambda x, o=out, m=interp: F.resize(x, [o, o], interpolation=m, antialias=True)))
    return rows


class _CocoPhotos(torch.utils.data.Dataset):
    """A ``coco_folder`` set's first ``n`` images decoded (HWC uint8) with their COCO targets, in the
    interface of the tests' replay (``sizes``, ``image(i)``, ``target(i)``)."""

    def __init__(self, root: str, annotations: str, n: int) -> None:
        import torchdali as td

        self.coco = td.datasets.CocoDetection(root, annotations, target_keys=["boxes", "labels", "masks", "image_id"])
        self.n = min(n, len(self.coco))
        self.sizes = [tuple(self.coco.canvas_size(i)) for i in range(self.n)]

    def image(self, i: int) -> np.ndarray:
        from PIL import Image

        return np.asarray(Image.open(self.coco.path_of(i)).convert("RGB"))

    def target(self, i: int) -> dict:
        return self.coco[i][1]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple:
        return self.image(i), self.target(i)


def detection_rows(n_images: int) -> list[tuple]:
    """(preset, images max diff, % within 1, boxes max diff, samples with the same kept boxes, samples
    with equal masks, samples) for each detection preset, CPU path against torchvision."""
    import tempfile

    from torchvision import tv_tensors

    from benchmarks.photo_folder import coco_folder
    from tests.test_geometry_targets import expected, run_loader
    from tests.test_iou_crop import PRESETS, _preset
    from torchdali import transforms as T

    paths = coco_folder(os.path.join(tempfile.gettempdir(), f"torchdali-parity-coco-{n_images}"), n_images,
                        progress=False)
    ds = _CocoPhotos(paths["images"], paths["annotations"], n_images)
    rows = []
    for name in PRESETS:
        tf = _preset(name)
        got, want = run_loader(ds, tf, "cpu", batch_size=8), expected(ds, tf)
        img_d, box_d, same_kept, same_masks = [], 0.0, 0, 0
        for (image, target), (w_image, w_target) in zip(got, want):
            ours = image.double() * (255 if image.is_floating_point() else 1)  # the replay stops before ToDtype
            img_d.append((ours - w_image.as_subclass(torch.Tensor).double()).abs().flatten())
            b, wb = target["boxes"].as_subclass(torch.Tensor), w_target["boxes"].as_subclass(torch.Tensor)
            if b.shape == wb.shape and torch.equal(target["labels"], w_target["labels"]):
                same_kept += 1
                if len(b):
                    box_d = max(box_d, float((b.double() - wb.double()).abs().max()))
            m, wm = target.get("masks"), w_target.get("masks")
            same_masks += int(isinstance(m, tv_tensors.Mask) and m.shape == wm.shape and torch.equal(m, wm))
        d = torch.cat(img_d)
        if any(t.stage == "program" for t in T.compile_transforms(tf).transforms):  # colour ops: not replayed
            rows.append((name, None, None, box_d, same_kept, same_masks, len(got)))
            continue
        rows.append((name, float(d.max()), float((d <= 1 + 1e-3).double().mean() * 100), box_d, same_kept,
                     same_masks, len(got)))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=176)
    p.add_argument("--crops", type=int, default=24)
    p.add_argument("--detection", action="store_true", help="the detection presets' images, boxes and masks")
    p.add_argument("--images", type=int, default=32, help="--detection: photographs of the COCO-shaped set")
    p.add_argument("--markdown", action="store_true", help="print the table as markdown")
    args = p.parse_args()
    import torchvision

    if args.detection:
        print(f"# {time.strftime('%Y-%m-%d')}, torch {torch.__version__}, torchvision {torchvision.__version__}, "
              f"{args.images} COCO-shaped photographs, the loader's CPU path")
        print("| preset | images max diff | % within 1 | boxes max diff | same kept boxes | masks equal |\n"
              "|---|---|---|---|---|---|")
        for name, mx, w1, bd, kept, masks, n in detection_rows(args.images):
            image = "colour ops not replayed | " if mx is None else f"{mx:.3f} | {w1:.4f} | "
            print(f"| {name} | {image}{bd:.2e} | {kept} of {n} | {masks} of {n} |")
        return 0

    images = photo_crops(args.size, args.crops)
    print(f"# {time.strftime('%Y-%m-%d')}, {platform.processor() or 'cpu'}, torch {torch.__version__}, "
          f"torchvision {torchvision.__version__}, {args.crops} photo crops of {args.size}x{args.size}")
    rows = []
    for name, what, ours, theirs in cases(args.size):
        diffs = []
        for img in images:
            a = ours(img).to(torch.int16)
            b = theirs(img).to(torch.int16)
            if b.shape[0] == 1:
                b = b.expand(3, -1, -1)
            diffs.append((a - b).abs().flatten())
        d = torch.cat(diffs)
        rows.append((name, what, int(d.max()), float((d <= 1).double().mean() * 100),
                     float((d == 0).double().mean() * 100)))
    if args.markdown:
        print("| op | parameters | max diff | % within 1 | % exact |\n|---|---|---|---|---|")
        for name, what, mx, w1, ex in rows:
            print(f"| `{name}` | {what} | {mx} | {w1:.4f} | {ex:.2f} |")
    else:
        for name, what, mx, w1, ex in rows:
            print(f"{name:<18} {what:<42} max {mx:>3}  within1 {w1:8.4f}%  exact {ex:6.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
