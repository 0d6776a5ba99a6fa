from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import settings

# Deterministic property tests: CI and a developer see the same examples.
settings.register_profile("fastload", derandomize=True, deadline=None, max_examples=40)
settings.load_profile("fastload")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "needs_cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _restore_rng_state():
    """Tests may seed or draw from the global RNGs; none leaks into the next test."""
    python, numpy_state, torch_state = (
        random.getstate(),
        np.random.get_state(),
        torch.get_rng_state(),
    )
    yield
    random.setstate(python)
    np.random.set_state(numpy_state)
    torch.set_rng_state(torch_state)
