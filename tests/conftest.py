from __future__ import annotations

import random
import weakref

import numpy as np
import pytest
import torch
from hypothesis import settings
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

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


_worker_iterators: weakref.WeakSet[_MultiProcessingDataLoaderIter] = weakref.WeakSet()
_start_workers = _MultiProcessingDataLoaderIter.__init__


def _tracked_init(self: _MultiProcessingDataLoaderIter, loader: object) -> None:
    _start_workers(self, loader)
    _worker_iterators.add(self)


_MultiProcessingDataLoaderIter.__init__ = _tracked_init  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _stop_workers_after_each_test():
    """A test's DataLoader workers stop when it ends. An iterator that raised is kept alive
    by the exception's traceback; left to the garbage collector, it takes 5 s a worker to
    shut down, in whichever later test the collection happens."""
    yield
    for iterator in list(_worker_iterators):
        iterator._shutdown_workers()
