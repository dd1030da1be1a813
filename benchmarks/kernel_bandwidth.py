"""Fused kernel throughput against the GPU's device-to-device copy bandwidth.

    python benchmarks/kernel_bandwidth.py [--batch 256] [--sweep] [--json out.json]

Bytes counted: each sample's source pixels inside its crop box (read once) plus
the output batch (written once). The ratio to a large device-to-device copy
(bytes read + written) says how close the kernel is to memory speed.

``--sweep`` also times other tile shapes and warp counts. Each recipe also runs on the
same images as planar 4:2:0 Y/Cb/Cr (the ``ycbcr`` source: chroma upsampling and colour
conversion in the kernel), rows marked "planar"; the bytes read are then the planes'.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from torchdali import transforms as T  # noqa: E402
from csrc_triton import LaunchSettings, fused_resized_crop  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def time_ms(fn, iters: int = 10, per_timing: int = 20, warmup: int = 5) -> list[float]:
    """ms per launch: ``iters`` timings of ``per_timing`` back-to-back launches each."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(per_timing):
            fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / per_timing)
    return out


def copy_bandwidth() -> float:
    """GB/s of a 2 GiB device-to-device copy, counting bytes read + written."""
    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = float(np.median(time_ms(lambda: dst.copy_(src), iters=10)))
    return 2 * src.numel() / ms / 1e6


def _triton_version() -> str:
    try:
        import triton

        return triton.__version__
    except ImportError:
        return "none"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--json", default=None)
    p.add_argument("--sweep", action="store_true", help="also time other tile shapes / warp counts")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    n = args.batch
    sizes = np.stack([rng.integers(330, 530, n), rng.integers(330, 530, n)], 1)  # ~0.19 MP like ImageNet
    shapes = torch.tensor(np.concatenate([sizes, np.full((n, 1), 3)], 1), dtype=torch.int64)
    numel = shapes.prod(1)
    offsets = torch.zeros(n, dtype=torch.int64)
    offsets[1:] = numel.cumsum(0)[:-1]
    # several input sets so repeated runs are not served from L2
    sets = [torch.randint(0, 256, (int(numel.sum()),), dtype=torch.uint8, device="cuda") for _ in range(4)]
    # the same images as planar 4:2:0: Y, then Cb and Cr at half size each way
    from csrc_triton import layout

    p_shapes = shapes.clone()
    p_shapes[:, 2] = layout.S_420
    p_numel = torch.tensor([layout.planar_size(int(h), int(w), layout.S_420) for h, w in sizes])
    p_offsets = torch.zeros(n, dtype=torch.int64)
    p_offsets[1:] = p_numel.cumsum(0)[:-1]
    p_sets = [torch.randint(0, 256, (int(p_numel.sum()),), dtype=torch.uint8, device="cuda") for _ in range(4)]
    results = {"device": torch.cuda.get_device_name(), "batch": n, "copy_GBps": copy_bandwidth(), "recipes": {},
               "versions": {"torch": torch.__version__, "triton": _triton_version()}, "cpus": os.cpu_count()}
    recipes = {
        "train RRC224+flip fp32": T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                             T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)]),
        "train RRC224+flip fp16 channels_last": T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                                           T.ToDtype(torch.float16, scale=True),
                                                           T.Normalize(MEAN, STD)]),
        "val Resize256+CenterCrop224 fp32": T.Compose([T.Resize(256), T.CenterCrop(224),
                                                       T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)]),
        "train RRC224 uint8": T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()]),
    }
    # any uint64 per sample keys its random parameters (crop boxes, flips)
    keys = np.random.default_rng(1).integers(0, np.iinfo(np.uint64).max, n, dtype=np.uint64)
    runs = {}
    variants = [(name, tf, False) for name, tf in recipes.items()]
    variants += [(f"{name} planar", tf, True) for name, tf in recipes.items() if "fp16" not in name]
    for name, tf, planar in variants:
        plan = T.compile_transforms(tf)
        g = plan.geometry(sizes, keys)
        params = g.to_params().cuda()
        read = float(((g.hi_y - g.lo_y) * (g.hi_x - g.lo_x) * (1.5 if planar else 3)).sum())
        cl = "channels_last" in name
        out = torch.empty(n, 3, *plan.out_size, dtype=plan.out_dtype, device="cuda")
        if cl:
            out = out.contiguous(memory_format=torch.channels_last)
        written = out.numel() * out.element_size()
        off_d, shp_d = (p_offsets.cuda(), p_shapes.cuda()) if planar else (offsets.cuda(), shapes.cuda())
        data_sets = p_sets if planar else sets

        def run(launch=None, k=[0], plan=plan, params=params, cl=cl, out=out, off_d=off_d, shp_d=shp_d,
                data_sets=data_sets, source="ycbcr" if planar else "interleaved"):
            k[0] = (k[0] + 1) % len(data_sets)
            fused_resized_crop(data_sets[k[0]], off_d, shp_d, params, plan.out_size, plan.scale, plan.bias,
                               out_dtype=plan.out_dtype, channels_last=cl, antialias=plan.antialias,
                               quantize=plan.quantize, out=out, launch=launch, source=source)

        runs[name] = run
        ms = time_ms(run)
        med = float(np.median(ms))
        gbps = (read + written) / med / 1e6
        results["recipes"][name] = {
            "ms_median": med, "ms_min": float(np.min(ms)), "ms_max": float(np.max(ms)),
            "MB_read": read / 1e6, "MB_written": written / 1e6, "GBps": gbps,
            "fraction_of_copy": gbps / results["copy_GBps"], "images_per_s": n / med * 1e3,
        }
    print(f"{results['device']}: device-to-device copy {results['copy_GBps']:.0f} GB/s (read + written)")
    print(f"{'recipe':<49} {'ms':>7} {'min':>7} {'max':>7} {'GB/s':>7} {'of copy':>8} {'images/s':>10}")
    for name, r in results["recipes"].items():
        print(f"{name:<49} {r['ms_median']:>7.3f} {r['ms_min']:>7.3f} {r['ms_max']:>7.3f} {r['GBps']:>7.0f} "
              f"{100 * r['fraction_of_copy']:>7.1f}% {r['images_per_s']:>10.0f}")
    if args.sweep:
        results["sweep"] = {}
        # (BLOCK_H, BLOCK_W, num_warps, maxnreg), each against every recipe
        configs = ((8, 32, 1, None), (8, 64, 1, None), (8, 64, 2, None), (16, 32, 2, None),
                   (8, 128, 4, None), (4, 64, 2, None), (16, 64, 2, None), (8, 64, 2, 64))
        print("tile sweep (BLOCK_H x BLOCK_W x warps x register cap): ms per launch "
              "(median of 10 timings of 20 launches), per recipe above")
        for cfg in configs:
            launch = LaunchSettings(*cfg)
            key = "x".join(map(str, cfg))
            try:
                row = {name: float(np.median(time_ms(lambda run=run: run(launch)))) for name, run in runs.items()}
            except Exception as e:  # a config the compiler rejects
                print(f"  {key}: failed: {type(e).__name__}: {str(e)[:200]}")
                continue
            results["sweep"][key] = row
            print(f"  {key:<10} " + "  ".join(f"{v:.3f}" for v in row.values()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
