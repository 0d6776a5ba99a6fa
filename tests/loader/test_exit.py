"""Persistent workers end when the script ends, without torch's 5-s join per worker at exit
(pytorch/pytorch#81794, with pinned memory on torch < 2.14)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from common_utils import cpu_and_cuda
from fastload import FastLoader
from fastload.loader import exit as loader_exit


def test_the_exit_handler_ends_every_live_iterators_workers():
    loaders = [
        FastLoader(torch.arange(12.0), batch_size=4, num_workers=2, persistent_workers=True)
        for _ in range(2)
    ]
    iterators = []
    for loader in loaders:
        assert [len(batch) for batch in loader] == [4, 4, 4]
        iterators.append(loader._iterator)
        loader_exit._LIVE.add(loader._iterator)  # as where torch joins each worker at exit
    workers = [worker for iterator in iterators for worker in iterator._workers]
    assert len(workers) == 4 and all(worker.is_alive() for worker in workers)

    loader_exit._end_live_workers()

    assert all(iterator._shutdown for iterator in iterators)
    assert not any(worker.is_alive() for worker in workers)
    assert all(worker.exitcode == 0 for worker in workers)  # told to stop, not killed


def test_a_loader_whose_persistent_workers_were_ended_makes_new_ones_for_its_next_pass():
    loader = FastLoader(torch.arange(12.0), batch_size=4, num_workers=2, persistent_workers=True)
    assert torch.cat(list(loader)).tolist() == list(range(12))
    ended = loader._iterator
    ended._shutdown_workers()  # what an exit handler registered after the user's does first

    assert torch.cat(list(loader)).tolist() == list(range(12))  # not "Queue is closed"
    assert loader._iterator is not ended and not loader._iterator._shutdown


def test_no_exit_handler_is_registered_where_torch_needs_none_of_ours():
    # torch 2.14 ends its persistent iterators itself; without pinned memory no torch
    # registers a per-worker join: a handler of ours would only run before the user's
    loader = FastLoader(torch.arange(8.0), batch_size=4, num_workers=1, persistent_workers=True)
    iterator = iter(loader)
    pinned = iterator._pin_memory
    assert (iterator in loader_exit._LIVE) == (pinned and not loader_exit._TORCH_ENDS_THEM)
    del iterator


EXITING = textwrap.dedent(
    """
    import torch
    from torch.utils.data import _utils
    from fastload import FastLoader

    # torch < 2.14 joins each pinned-memory persistent worker at exit with this timeout:
    # an hour each makes a missed shutdown a hang, not a slow exit
    _utils.MP_STATUS_CHECK_INTERVAL = 3600.0
    loader = FastLoader(torch.arange(64.0), batch_size=8, num_workers=3,
                        persistent_workers=True, pin_memory={pin})
    for epoch in range(2):
        for batch in loader:
            pass
    for batch in loader:
        break  # a loop left early: its workers have batches in flight
    print("done", flush=True)
    """
)


def run_script(script: str, device: str) -> subprocess.CompletedProcess[str]:
    """``script`` in a Python of its own, pinning memory on CUDA; it must exit 0."""
    done = subprocess.run(
        [sys.executable, "-c", script.format(pin=device == "cuda")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done


LAST_PASS_AT_EXIT = textwrap.dedent(
    """
    import atexit
    import torch
    from fastload import FastLoader

    def last_pass():  # registered before the loader makes any iterator
        print("last pass", sum(batch.sum().item() for batch in loader), flush=True)

    atexit.register(last_pass)
    loader = FastLoader(torch.arange(64.0), batch_size=8, num_workers=2,
                        persistent_workers=True, pin_memory={pin})
    for epoch in range(2):
        for batch in loader:
            pass
    print("done", flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("device", cpu_and_cuda())
def test_a_users_exit_handler_gets_its_last_pass_over_the_loader(device):
    done = run_script(LAST_PASS_AT_EXIT, device)
    assert done.stdout == "done\nlast pass 2016.0\n"
    assert "Error" not in done.stderr, done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("device", cpu_and_cuda())
def test_a_script_ends_after_its_last_line_with_persistent_workers(device):
    done = run_script(EXITING, device)
    assert done.stdout == "done\n"
