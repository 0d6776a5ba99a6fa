"""Where FastLoader's fast paths (super-batches, the in-memory fetch, the prefetcher)
met what DataLoader does, each case against DataLoader itself: the same batches, the
same errors at the same step, the same worker for each batch."""

from __future__ import annotations

import gc

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset, get_worker_info

from differential import canonical, epoch
from fastload import DataPrefetcher, FastLoader


def tensors(size: int = 12) -> TensorDataset:
    return TensorDataset(torch.arange(size * 2.0).view(size, 2), torch.arange(size))


def steps(loader) -> list:
    """An epoch as a loop that skips failing batches sees it."""
    return [(step.batch, step.error) for step in epoch(loader)]


class Labels(Dataset):
    """Sample ``i`` is ``(i, worker id)``; those in ``failing`` raise."""

    def __init__(self, size: int, failing: tuple[int, ...] = ()) -> None:
        self.size, self.failing = size, failing

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[int, int]:
        if index in self.failing:
            raise ValueError(f"bad sample {index}")
        info = get_worker_info()
        return index, -1 if info is None else info.id


def pairs(samples: list) -> tuple:
    """A collate of one's own, returning a tuple."""
    return tuple(samples)


# --- the in-memory fetch --------------------------------------------------------------------


@pytest.mark.parametrize("data", [tensors(), Subset(tensors(15), list(range(14, 2, -1)))])
def test_a_collate_set_after_construction_gets_the_samples(data):
    fast, plain = FastLoader(data, batch_size=5), DataLoader(data, batch_size=5)
    fast.collate_fn = plain.collate_fn = pairs
    assert steps(fast) == steps(plain)
    assert type(next(iter(fast))) is tuple
    assert "batched_fetch=False" in repr(fast) and "collate_fn set after construction" in repr(fast)


@pytest.mark.parametrize("data", [tensors(), Labels(12)])
def test_an_empty_batch_raises_as_dataloader_raises(data):
    batches = [[0, 1], [], [2, 3]]
    fast = FastLoader(data, batch_sampler=batches, num_workers=0)
    plain = DataLoader(data, batch_sampler=batches)
    seen = steps(fast)
    assert seen == steps(plain)
    assert [error for _, error in seen] == [None, "IndexError", None]


class Refilled:
    """A batch sampler that yields one list, cleared and refilled for each batch."""

    def __len__(self) -> int:
        return 4

    def __iter__(self):
        batch: list[int] = []
        for start in range(0, 12, 3):
            batch.clear()
            batch.extend(range(start, start + 3))
            yield batch


class Generators:
    """A batch sampler that yields each batch as a generator."""

    def __len__(self) -> int:
        return 3

    def __iter__(self):
        for start in range(0, 12, 4):
            yield (index for index in range(start, start + 4))


@pytest.mark.parametrize("sampler", [Refilled, Generators])
@pytest.mark.parametrize("data", [tensors(), Subset(tensors(13), list(range(12))), Labels(12)])
def test_a_batch_is_read_as_the_sampler_gave_it(sampler, data):
    fast = FastLoader(data, batch_sampler=sampler(), num_workers=0, super_batches=True)
    plain = DataLoader(data, batch_sampler=sampler())
    assert steps(fast) == steps(plain)
    assert all(batch is not None for batch, _ in steps(fast))


class Tripled(Subset):
    """A Subset that changes its rows (both of torch's ways to fetch them)."""

    def __getitem__(self, index: int):
        x, y = super().__getitem__(index)
        return x * 3, y

    def __getitems__(self, indices):
        return [self[index] for index in indices]


def test_a_subset_subclass_is_fetched_its_own_way():
    data = Tripled(tensors(), [3, 1, 4, 1, 5, 9])
    fast = FastLoader(data, batch_size=4)
    assert steps(fast) == steps(DataLoader(data, batch_size=4))
    assert "batched_fetch=False" in repr(fast)
    assert next(iter(fast))[0][0].tolist() == [18.0, 21.0]


def test_data_replaced_between_epochs_is_what_the_next_epoch_loads():
    data = Subset(tensors(20), list(range(10)))
    fast, plain = FastLoader(data, batch_size=4), DataLoader(data, batch_size=4)
    first = steps(fast)
    assert first == steps(plain)
    data.indices = list(range(19, 9, -1))
    data.dataset.tensors = tuple(tensor * 10 for tensor in data.dataset.tensors)
    assert steps(fast) == steps(plain) != first


@pytest.mark.parametrize(
    "data", [tensors(), Subset(tensors(14), [-1, 0, 5, -3, 2, 7, 8, 1, 4, 6, 3, 9])]
)
def test_negative_and_out_of_range_indices_read_as_dataloader_reads_them(data):
    batches = [[-1, 0, -12], [3, -5], [4, 12], [2, 1]]
    fast, plain = FastLoader(data, batch_sampler=batches), DataLoader(data, batch_sampler=batches)
    seen = steps(fast)
    assert seen == steps(plain)
    assert [error for _, error in seen] == [None, None, "IndexError", None]


@pytest.mark.parametrize(
    "batch",
    [
        torch.tensor([1, 0, 1], dtype=torch.uint8),  # a mask to torch
        torch.tensor([True, False, True]),
        [0.0, 1.0],
        torch.tensor([0.0, 1.0]),
        torch.tensor([[0, 1], [2, 3]]),
    ],
    ids=["uint8", "bool", "floats", "float tensor", "2-d"],
)
def test_indices_the_fetch_cannot_read_as_rows_go_the_plain_way(batch):
    data = tensors(3)
    fast = FastLoader(data, batch_sampler=[batch], num_workers=0)
    assert steps(fast) == steps(DataLoader(data, batch_sampler=[batch]))


# --- super-batches --------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, "no", 1.5])
def test_super_batches_is_true_false_or_none(value):
    with pytest.raises(
        TypeError, match=f"super_batches must be True, False or None, got {value!r}"
    ):
        FastLoader(Labels(8), batch_size=2, super_batches=value)


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [1, 3, 16])
def test_each_batch_is_loaded_by_the_worker_dataloader_sends_it_to(batch_size):
    fast = FastLoader(Labels(70), batch_size=batch_size, num_workers=2)
    assert fast.super_batches
    plain = DataLoader(Labels(70), batch_size=batch_size, num_workers=2)
    assert steps(fast) == steps(plain)
    workers = {int(worker) for _, workers in fast for worker in workers}
    assert workers == {0, 1}


def test_in_order_false_hands_batches_out_one_by_one():
    fast = FastLoader(Labels(8), batch_size=2, num_workers=2, in_order=False)
    assert not fast.super_batches and "in_order=False" in repr(fast)
    with pytest.raises(ValueError, match="super_batches=True cannot apply: in_order=False"):
        FastLoader(Labels(8), batch_size=2, num_workers=2, in_order=False, super_batches=True)


# --- a failing sample -----------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_behind_a_prefetcher_a_failing_sample_costs_its_batch_alone(workers):
    loader = FastLoader(Labels(60, failing=(13, 44)), batch_size=2, num_workers=workers)
    prefetcher = DataPrefetcher(loader, device="cpu", dtype=None)
    trained, failed, states = [], 0, []
    batches = iter(prefetcher)
    while True:
        try:
            indices, _ = next(batches)
        except StopIteration:
            break
        except ValueError as error:
            assert "bad sample" in str(error)
            failed += 1
            states.append(prefetcher.state_dict()["batches"])
            continue
        trained += indices.tolist()
    assert failed == 2 and states == [7, 23]  # the batches of 13 and 44: 7th and 23rd
    assert sorted(trained) == [i for i in range(60) if i not in (12, 13, 44, 45)]
    state = loader.state_dict()
    assert state["between_epochs"] and state["epoch"] == 1


def test_a_resume_after_a_skipped_failing_batch_goes_on_after_it():
    def make():
        return FastLoader(Labels(30, failing=(9,)), batch_size=3, shuffle=False, num_workers=0)

    loader = make()
    batches = iter(loader)
    seen = [canonical(next(batches)) for _ in range(3)]
    with pytest.raises(ValueError, match="bad sample 9"):
        next(batches)
    state = loader.state_dict()
    rest = [canonical(batch) for batch in batches]
    resumed = make()
    resumed.load_state_dict(state)
    assert [canonical(batch) for batch in resumed] == rest and len(seen) + 1 + len(rest) == 10


# --- workers FastLoader chose ---------------------------------------------------------------


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_dataset_a_started_worker_cannot_get_is_loaded_without_workers(method):
    class Local(Dataset):  # defined in a function: spawn and forkserver cannot pickle it
        def __len__(self) -> int:
            return 6

        def __getitem__(self, index: int) -> int:
            return index

    loader = FastLoader(Local(), batch_size=2, multiprocessing_context=method)
    assert loader.num_workers > 0  # chosen before the first pass
    with pytest.warns(UserWarning, match=f"FastLoader uses no workers: the {method} start"):
        assert [batch.tolist() for batch in loader] == [[0, 1], [2, 3], [4, 5]]
    assert loader.num_workers == 0
    assert f"the {method} start method cannot start a worker" in repr(loader)


@pytest.mark.slow
@pytest.mark.parametrize("prefetch", [False, True], ids=["loader", "prefetcher"])
def test_a_failure_raised_keeps_no_worker_alive_once_the_loader_goes(prefetch):
    collecting = gc.isenabled()
    gc.disable()  # a cycle through the raised error would keep the workers: none may
    try:
        loader = FastLoader(Labels(12, failing=(3,)), batch_size=2, num_workers=2)
        source = DataPrefetcher(loader, device="cpu", dtype=None) if prefetch else loader
        assert [error for _, error in steps(source)] == [None, "ValueError", *[None] * 4]
        workers = list(loader._iterator._workers)
        assert all(worker.is_alive() for worker in workers)  # persistent: FastLoader's choice
        del loader, source
        assert not any(worker.is_alive() for worker in workers)
    finally:
        if collecting:
            gc.enable()


class Named(Dataset):
    """Samples by name, as a sampler hands out ``batch_size=None`` keys."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, key: str) -> str:
        return key.upper()


def test_a_key_of_batch_size_none_reaches_the_dataset_as_it_is():
    keys = ["cat", "dog"]
    fast = FastLoader(Named(), batch_size=None, sampler=keys, num_workers=0)
    assert list(fast) == list(DataLoader(Named(), batch_size=None, sampler=keys)) == ["CAT", "DOG"]


class Uneven:
    """Batches of 10, 100, 60, 3, 7, ... samples: rounds of whole turns of the workers."""

    sizes = (10, 100, 60, 3, 7, 30, 1, 40, 2, 5, 50)

    def __len__(self) -> int:
        return len(self.sizes)

    def __iter__(self):
        start = 0
        for size in self.sizes:
            yield list(range(start, start + size))
            start += size


class Draws(Dataset):
    """Sample ``i``: its index, the worker that loads it, and a draw of that worker's."""

    def __len__(self) -> int:
        return 400

    def __getitem__(self, index: int) -> tuple:
        info = get_worker_info()
        return index, -1 if info is None else info.id, torch.rand(())


def drawing_collate(samples: list) -> tuple:
    """A collate that draws too (as mixup draws its lambda)."""
    return torch.utils.data.default_collate(samples), torch.rand(())


@pytest.mark.slow
@pytest.mark.parametrize(
    "arguments",
    [{"batch_sampler": Uneven()}, {"batch_size": 4, "collate_fn": drawing_collate}],
    ids=["uneven batches", "a collate that draws"],
)
def test_each_worker_loads_and_draws_as_under_dataloader(arguments):
    def make(kind):
        return kind(Draws(), num_workers=2, generator=torch.Generator().manual_seed(5), **arguments)

    fast = make(FastLoader)
    assert fast.super_batches
    assert steps(fast) == steps(make(DataLoader))


@pytest.mark.slow
def test_a_worker_init_fn_set_after_construction_runs_with_fastloaders_start_up():
    started = []
    fast = FastLoader(Labels(16), batch_size=2, num_workers=2)
    fast.worker_init_fn = started.append  # (runs in the workers: the list here stays empty)
    assert fast.super_batches
    assert steps(fast) == steps(DataLoader(Labels(16), batch_size=2, num_workers=2))


@pytest.mark.slow
def test_concatenated_data_replaced_between_epochs_reaches_the_workers():
    parts = [Labels(6), Labels(6)]
    data = torch.utils.data.ConcatDataset(parts)
    fast = FastLoader(data, batch_size=3, num_workers=2)
    plain = DataLoader(data, batch_size=3, num_workers=2)
    assert steps(fast) == steps(plain)
    parts[1].failing = (1,)  # sample 7 of the whole: a new attribute object inside a list
    assert steps(fast) == steps(plain)
    assert [error for _, error in steps(fast)].count("ValueError") == 1


def test_an_epoch_a_prefetcher_began_ahead_is_begun_again_when_the_data_changed():
    data = Subset(tensors(20), list(range(10)))
    loader = FastLoader(data, batch_size=4, shuffle=True, seed=3)
    prefetcher = DataPrefetcher(loader, device="cpu", dtype=None, background=True)
    alone = FastLoader(data, batch_size=4, shuffle=True, seed=3)
    assert steps(prefetcher) == steps(alone)  # the prefetcher then begins epoch 1 ahead
    data.indices = list(range(19, 9, -1))
    second = steps(prefetcher)
    assert second == steps(alone)
    assert all(label >= 10 for batch, _ in second for label in batch[1][1][3])


@pytest.mark.parametrize("kind", [FastLoader, DataLoader])
def test_without_workers_a_change_between_batches_is_the_next_batchs(kind):
    data = tensors(64)
    loader = kind(data, batch_size=8)
    seen = []
    for step, (_, labels) in enumerate(loader):
        seen.append(labels[0].item())
        data.tensors[1][:] = 1000 * (step + 1)  # labels rewritten in place, as pseudo-labels are
    assert seen == [0] + [1000 * step for step in range(1, 8)]
    if kind is FastLoader:
        assert not loader.super_batches and "no workers" in repr(loader)
