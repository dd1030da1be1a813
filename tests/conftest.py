"""Shared pytest configuration: the ``cuda`` marker, and CUDA's work queues as the README asks for them."""
from __future__ import annotations

import os

import pytest
import torch

# what td.set_cuda_work_queues() sets, before any test starts CUDA: the GPU tests run the loader as users are
# told to (tests of the call and of the warning without it take the variable out of their environment)
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (skipped when torch.cuda.is_available() is False)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
