"""Shared by every test, and the code blocks of the README and docs/ as tests.

Each Python block of a Markdown file under `testpaths` (README.md, and every page under
docs/) is a test: pasted into a file of its own and run in a fresh process, in a folder
of its page's, with nothing injected (`tests/docs_blocks.py`)."""

from __future__ import annotations

import random
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from docs_blocks import MarkdownPage

# Old module paths kept for one release: importing them warns, so the doctest collection
# leaves them to their own test (tests/test_api.py).
collect_ignore = ["src/fastload/tools/s3server.py", "src/fastload/tools/shapes.py"]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix == ".md":
        return MarkdownPage.from_parent(parent, path=file_path)
    return None


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
