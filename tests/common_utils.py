"""Helpers shared by the tests (as torchvision's tests/common_utils.py)."""

from __future__ import annotations

import pytest


def cpu_and_cuda() -> list:
    """Device parameters: every device test runs on CPU here and on CUDA where present
    (the ``needs_cuda`` mark is skipped by conftest.py without CUDA)."""
    return ["cpu", pytest.param("cuda", marks=pytest.mark.needs_cuda)]
