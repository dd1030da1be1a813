"""Packaging for torchdali.

``csrc_triton/`` (the Triton kernels) ships as the import package
``torchdali.csrc_triton`` through ``package_dir`` so kernels keep their own
top-level folder in the source tree.
"""
from setuptools import setup

setup(
    name="torchdali",
    version="0.1.0",
    description="GPU-side image input pipeline for PyTorch: nvJPEG batch decoding and one fused Triton kernel",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="BSD-3-Clause",
    python_requires=">=3.10",
    packages=[
        "torchdali",
        "torchdali.transforms",
        "torchdali.decode",
        "torchdali._executor",
        "torchdali.csrc_triton",
    ],
    package_dir={"torchdali.csrc_triton": "csrc_triton"},
    install_requires=[
        "torch>=2.4",
        "torchvision>=0.19",
        "numpy",
        "tqdm",
        "triton; platform_system == 'Linux'",
        # nvJPEG for CUDA 13 torch builds; CUDA 12 builds use the `cu12` extra.
        "nvidia-nvjpeg>=13,<14; platform_system == 'Linux' and platform_machine == 'x86_64'",
    ],
    extras_require={
        "cu12": ["nvidia-nvjpeg-cu12>=12,<13; platform_system == 'Linux'"],
        "bench": ["pillow", "matplotlib"],
        "lightning": ["lightning>=2.0"],
        "test": ["pytest", "pillow", "matplotlib", "lightning>=2.0"],
    },
    entry_points={"console_scripts": ["torchdali-bench=torchdali.bench:main"]},
)
