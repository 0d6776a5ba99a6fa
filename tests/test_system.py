from __future__ import annotations

import os

import pytest
import torch

from fastload.system import available_cpus, default_device


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux affinity API")
def test_available_cpus_respects_the_affinity_mask():
    allowed = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(allowed)})
        assert available_cpus() == 1
    finally:
        os.sched_setaffinity(0, allowed)
    assert available_cpus() == len(allowed)


def test_default_device_is_the_current_cuda_device_else_the_cpu():
    device = default_device()
    if torch.cuda.is_available():
        assert device == torch.device("cuda", torch.cuda.current_device())
    else:
        assert device == torch.device("cpu")
