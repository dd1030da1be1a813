"""Packaging for torchdali.

Two import packages ship: ``torchdali`` (the library) and ``csrc_triton`` (the
Triton kernels, their stages and plain-torch references), each from its own
top-level folder, so ``import csrc_triton`` works the same in a source checkout
and in an installed copy.
"""
from setuptools import find_packages, setup

setup(
    name="torchdali",
    version="0.1.0",
    description="GPU-side image input pipeline for PyTorch: nvJPEG batch decoding and one fused Triton kernel",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="BSD-3-Clause",
    python_requires=">=3.10",
    packages=find_packages(include=["torchdali", "torchdali.*", "csrc_triton", "csrc_triton.*"]),
    # C sources built on first use with the system compiler (torchdali/_native.py)
    package_data={"torchdali.video": ["*.c"]},
    install_requires=[
        "torch>=2.4",
        "torchvision>=0.19",
        "numpy",
        "pillow",  # the CPU decoder (torchvision.io's image decoding is deprecated since torchvision 0.29)
        "tqdm",
        "triton; platform_system == 'Linux'",
        # nvJPEG for CUDA 13 torch builds; CUDA 12 builds use the `cu12` extra.
        "nvidia-nvjpeg>=13,<14; platform_system == 'Linux' and platform_machine == 'x86_64'",
    ],
    extras_require={
        "cu12": ["nvidia-nvjpeg-cu12>=12,<13; platform_system == 'Linux'"],
        "bench": ["pillow", "matplotlib", "scikit-image"],  # scikit-image: the photographs of benchmarks/photo_folder.py
        "lightning": ["lightning>=2.0"],
        # timm: the parity tests of its augmentations; pycocotools: torchvision's CocoDetection, which
        # the COCO tests compare with (the library itself imports neither); av: the video tests;
        # pytest-xdist: `make test` runs in TEST_WORKERS processes
        "test": ["pytest", "pytest-xdist", "pillow", "matplotlib", "lightning>=2.0", "timm>=1.0", "pycocotools",
                 "av>=14"],
        "video": ["av>=14"],  # PyAV: video probing, demuxing and CPU decoding (torchdali.video)
    },
    entry_points={"console_scripts": ["torchdali-bench=torchdali.bench:main"]},
)
