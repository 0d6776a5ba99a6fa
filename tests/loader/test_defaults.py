"""What FastLoader fills in, as the pure function of arguments and machine it is."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastload import FastLoader
from fastload.loader.contracts import KeyedSeedSource, ResumableLoader
from fastload.loader.defaults import (
    LOCAL_SIZE_VARIABLES,
    MAX_AUTO_WORKERS,
    Machine,
    check_num_workers,
    choose_defaults,
    choose_fetch,
    local_processes,
)

GPU_BOX = Machine(cuda=True, cpus=32, local_processes=8, shm_shortage=None, distributed=False)
LAPTOP = Machine(cuda=False, cpus=4, local_processes=1, shm_shortage=None, distributed=False)
DOCKER = Machine(cuda=True, cpus=16, local_processes=1, shm_shortage="only 64 MiB free",
                 distributed=False)  # fmt: skip


def test_auto_on_a_gpu_machine_shares_the_cpus_among_local_processes():
    chosen = choose_defaults(num_workers="auto", machine=GPU_BOX)
    assert (chosen.num_workers, chosen.pin_memory) == (4, True)
    assert (chosen.persistent_workers, chosen.prefetch_factor) == (True, 2)
    assert chosen.warning is None and not chosen.distributed_sampler
    assert chosen.choices == {
        "num_workers": f"32 CPUs / 8 local process(es), at most {MAX_AUTO_WORKERS}",
        "pin_memory": "CUDA available",
        "persistent_workers": "workers kept across epochs",
        "prefetch_factor": "8 batches in flight",
    }


def test_one_worker_gets_enough_prefetch_for_four_batches_in_flight():
    chosen = choose_defaults(num_workers=1, machine=LAPTOP)
    assert chosen.prefetch_factor == 4 and chosen.choices["prefetch_factor"] == (
        "4 batches in flight"
    )


def test_explicit_arguments_always_win():
    chosen = choose_defaults(
        num_workers=3,
        machine=GPU_BOX,
        pin_memory=False,
        persistent_workers=False,
        prefetch_factor=9,
    )
    assert (chosen.num_workers, chosen.pin_memory) == (3, False)
    assert (chosen.persistent_workers, chosen.prefetch_factor) == (False, 9)
    assert chosen.choices == {}


@pytest.mark.parametrize(
    ("in_memory", "iterable", "reason"),
    [
        (True, False, "in-memory tensors are indexed a batch at a time"),
        (False, True, "an IterableDataset is copied into every worker"),
    ],
)
def test_auto_uses_no_workers_where_they_cannot_help(in_memory, iterable, reason):
    chosen = choose_defaults(
        num_workers="auto", machine=GPU_BOX, in_memory=in_memory, iterable=iterable
    )
    assert chosen.num_workers == 0 and chosen.prefetch_factor is None
    assert chosen.choices["num_workers"].startswith(reason)
    assert chosen.persistent_workers is False


def test_little_shared_memory_means_no_auto_workers_and_a_warning_for_chosen_ones():
    auto = choose_defaults(num_workers="auto", machine=DOCKER)
    assert auto.num_workers == 0 and auto.warning == "FastLoader uses no workers: only 64 MiB free"
    chosen = choose_defaults(num_workers=2, machine=DOCKER)
    assert chosen.num_workers == 2
    assert chosen.warning == "FastLoader with 2 workers: only 64 MiB free"


def test_tuned_workers_and_prefetch_are_used_with_the_measurements_as_reason():
    chosen = choose_defaults(num_workers="tune", machine=LAPTOP, tuned=(2, 4, "tuned, 2w/4: 9"))
    assert (chosen.num_workers, chosen.prefetch_factor) == (2, 4)
    assert chosen.choices["num_workers"] == "tuned, 2w/4: 9"
    assert chosen.choices["prefetch_factor"] == "tuned with num_workers"


def test_a_distributed_sampler_only_where_none_was_given():
    group = Machine(cuda=True, cpus=8, local_processes=2, shm_shortage=None, distributed=True)
    assert choose_defaults(num_workers=0, machine=group).distributed_sampler
    assert not choose_defaults(num_workers=0, machine=group, has_sampler=True).distributed_sampler
    assert not choose_defaults(num_workers=0, machine=group, iterable=True).distributed_sampler


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        ({"tensor_dataset": True}, (True, False)),
        ({"tensor_dataset": True, "seeded": True}, (True, False)),  # keyed per sample: no
        ({"tensor_dataset": True, "collate_fn_given": True}, (False, False)),
        ({"tensor_dataset": True, "collates": False}, (False, False)),
        ({"seeded": True}, (False, True)),
        ({"seeded": True, "iterable": True}, (False, False)),
    ],
)
def test_choose_fetch(facts, expected):
    arguments = dict(
        iterable=False, tensor_dataset=False, collate_fn_given=False, collates=True, seeded=False
    )
    assert choose_fetch(**(arguments | facts)) == expected


@given(
    workers=st.integers(0, 64),
    cpus=st.integers(1, 256),
    local=st.integers(1, 16),
    cuda=st.booleans(),
)
def test_defaults_are_consistent_for_any_machine(workers, cpus, local, cuda):
    machine = Machine(cuda=cuda, cpus=cpus, local_processes=local, shm_shortage=None,
                      distributed=False)  # fmt: skip
    auto = choose_defaults(num_workers="auto", machine=machine)
    assert 1 <= auto.num_workers <= min(MAX_AUTO_WORKERS, max(1, cpus // local))
    assert auto.pin_memory is cuda
    given_ = choose_defaults(num_workers=workers, machine=machine)
    assert given_.num_workers == workers
    assert (given_.prefetch_factor is None) == (workers == 0)
    if workers:
        assert given_.prefetch_factor * workers >= 4


@pytest.mark.parametrize("bad", [-1, 1.5, True, "many", None])
def test_num_workers_is_checked_with_dataloaders_wording(bad):
    with pytest.raises(ValueError, match="num_workers option should be non-negative"):
        check_num_workers(bad)


def test_fastloader_meets_the_contracts_the_prefetcher_relies_on():
    loader = FastLoader(list(range(8)), batch_size=2, seed=1)
    assert isinstance(loader, KeyedSeedSource) and isinstance(loader, ResumableLoader)
    assert not isinstance([1, 2], KeyedSeedSource)
    assert not isinstance([1, 2], ResumableLoader)


@pytest.fixture
def process_group(tmp_path):
    """A real one-process gloo group, as a launcher leaves it."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}",
                            rank=0, world_size=1)  # fmt: skip
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"LOCAL_WORLD_SIZE": "4"}, 4),  # torchrun
        ({"OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, 3),  # Open MPI
        ({"SLURM_NTASKS_PER_NODE": "8(x2)"}, 8),  # SLURM, 8 tasks on each of 2 nodes
        ({"LOCAL_WORLD_SIZE": "2", "SLURM_NTASKS_PER_NODE": "8"}, 2),  # torchrun's wins
        ({"WORLD_SIZE": "1", "LOCAL_RANK": "0"}, 1),  # Lightning's: the world size
    ],
)
def test_local_processes_come_from_whichever_launcher_started_them(
    process_group, monkeypatch, variables, expected
):
    for name in (*LOCAL_SIZE_VARIABLES, "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert local_processes() == expected


def test_without_a_process_group_this_is_the_only_process(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert local_processes() == 1
