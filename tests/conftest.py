from __future__ import annotations

import pytest
import torch
from hypothesis import settings

# Deterministic property tests: CI and a developer see the same examples.
settings.register_profile("fastload", derandomize=True, deadline=None, max_examples=40)
settings.load_profile("fastload")

# Scripts the framework tests start (they import Lightning or Accelerate): not test modules.
collect_ignore_glob = ["integrations/*_train.py"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "needs_cuda" in item.keywords:
            item.add_marker(skip)
