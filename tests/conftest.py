"""Shared pytest configuration: the ``cuda`` marker, CUDA's work queues as the README asks for them, and
Triton's interpreter on a machine without a GPU."""
from __future__ import annotations

import os

import pytest
import torch

# what td.set_cuda_work_queues() sets, before any test starts CUDA: the GPU tests run the loader as users are
# told to (tests of the call and of the warning without it take the variable out of their environment)
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")

# Without a GPU the kernels run under Triton's interpreter, which Triton reads when a function is decorated,
# and `import torchvision` imports triton.language (through torch._dynamo): so here, before any test module
# is collected, not in the kernel test modules, whose turn depends on which file pytest collects first
# (triton.language's own jit functions, tl.randn say, then stay compiled, and an interpreted kernel calling
# them fails)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (skipped when torch.cuda.is_available() is False)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
