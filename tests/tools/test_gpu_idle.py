"""StepEvents: the GPU's idle time between steps, from CUDA events."""

from __future__ import annotations

import time

import pytest
import torch

from fastload.tools.diagnostics.gpu_idle import StepEvents


def test_a_cpu_device_is_refused_by_name():
    with pytest.raises(ValueError, match="StepEvents needs a CUDA device, got cpu"):
        StepEvents("cpu")


@pytest.mark.needs_cuda
def test_calls_out_of_order_and_too_few_steps_are_refused():
    events = StepEvents("cuda")
    with pytest.raises(RuntimeError, match="ended\\(\\) without started\\(\\)"):
        events.ended()
    events.started()
    with pytest.raises(RuntimeError, match="started\\(\\) twice"):
        events.started()
    events.ended()
    with pytest.raises(ValueError, match="at least 2 steps"):
        events.idle_fraction()


@pytest.mark.needs_cuda
def test_a_host_that_keeps_the_gpu_waiting_shows_as_idle():
    events = StepEvents("cuda")
    x = torch.randn(256, 256, device="cuda")
    for _ in range(4):
        events.started()
        for _ in range(3):
            x = x @ x / 256
        events.ended()
        torch.cuda.synchronize()  # the GPU runs dry: the next start comes much later
        time.sleep(0.02)
    idle = events.idle_fraction()
    assert events.steps == 4 and 0.5 < idle <= 1.0  # 3 gaps of 20 ms around microsecond steps


@pytest.mark.needs_cuda
def test_step_seconds_count_from_the_events_making_in_order():
    events = StepEvents("cuda")
    assert events.step_seconds() == []
    time.sleep(0.05)  # the first batch comes late: the GPU reaches the first start after it
    x = torch.randn(64, 64, device="cuda")
    for _ in range(3):
        events.started()
        x = x @ x / 64
        events.ended()
    times = events.step_seconds()
    assert len(times) == 3 and times[0][0] >= 0.05
    flat = [moment for step in times for moment in step]
    assert flat == sorted(flat)
