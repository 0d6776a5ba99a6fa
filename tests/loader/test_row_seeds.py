"""FastLoader(seed=...) over a dataset that fetches a batch itself: one ``__getitems__``
call per batch (no per-row fallback), each row's draws keyed by the row when it seeds
through ``seeded_rows``, and a batch's draws keyed by the batch when it does not."""

from __future__ import annotations

import io
import random
import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import Dataset, Subset

from fastload import FastLoader
from fastload.loader.seeding import fetches_batches
from fastload.seeds import batch_seed, current_seeds, keyed_seeds, sample_seed, seeded_rows


def draws() -> list[float]:
    return [random.random(), float(np.random.rand()), float(torch.rand(()))]


class RowByRow(Dataset):
    """Sample ``i``: its index and a draw from each generator, loaded one at a time."""

    def __len__(self) -> int:
        return 23

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor]:
        return index, torch.tensor(draws(), dtype=torch.float64)


class Batched(RowByRow):
    """The same samples through one batched read, each row seeded as its own: counts
    its calls (in the process that makes them) and records the seeds each call saw."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.seen: list[list[int] | None] = []

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor]:
        raise AssertionError("a batched dataset loaded one row at a time")

    def __getitems__(self, indices: list[int]) -> list[tuple[int, torch.Tensor]]:
        self.calls.append(list(indices))
        seeds = current_seeds()
        self.seen.append(None if seeds is None else list(seeds))
        return [
            (indices[row], torch.tensor(draws(), dtype=torch.float64))
            for row in seeded_rows(len(indices))
        ]


class BatchKeyed(Batched):
    """A batched read whose draws do not seed row by row (a transform run on the batch)."""

    def __getitems__(self, indices: list[int]) -> list[tuple[int, torch.Tensor]]:
        self.calls.append(list(indices))
        return [(index, torch.tensor(draws(), dtype=torch.float64)) for index in indices]


def by_index(loader, epochs: int = 2) -> list[dict[int, list[float]]]:
    found = []
    for _ in range(epochs):
        rows = {}
        for indices, values in loader:
            rows.update(zip(indices.tolist(), values.tolist(), strict=True))
        found.append(rows)
    return found


def test_a_batched_dataset_is_called_once_per_batch_with_its_rows_seeds():
    dataset = Batched()
    loader = FastLoader(dataset, batch_size=5, shuffle=True, num_workers=0, seed=11)
    batches = [indices.tolist() for indices, _ in loader]
    assert dataset.calls == batches  # one call a batch, never a row at a time
    assert len(batches) == 5 and sorted(i for batch in batches for i in batch) == list(range(23))
    assert dataset.seen == [keyed_seeds(11, 0, batch).tolist() for batch in batches]
    assert current_seeds() is None  # outside the call


@pytest.mark.parametrize("workers", [0, 2])
def test_rows_seeded_by_row_draw_as_if_loaded_alone(workers):
    alone = by_index(FastLoader(RowByRow(), batch_size=4, shuffle=True, seed=3, num_workers=0))
    batched = FastLoader(
        Batched(), batch_size=5, shuffle=True, seed=3, num_workers=workers
    )  # fmt: skip
    assert by_index(batched) == alone
    assert alone[0] != alone[1]  # each epoch draws afresh


@settings(max_examples=15, deadline=None)
@given(batch_size=st.integers(1, 9), drop_last=st.booleans())
def test_a_rows_draws_do_not_depend_on_its_batch(batch_size, drop_last):
    reference = by_index(FastLoader(RowByRow(), batch_size=1, seed=8, num_workers=0), 1)[0]
    loader = FastLoader(
        Batched(), batch_size=batch_size, shuffle=True, seed=8, num_workers=0, drop_last=drop_last
    )
    rows = by_index(loader, 1)[0]
    assert len(rows) == ((23 // batch_size) * batch_size if drop_last else 23)
    assert rows == {index: reference[index] for index in rows}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_batch_without_row_seeding_draws_from_its_batch_seed(workers):
    def run(workers: int):
        loader = FastLoader(BatchKeyed(), batch_size=6, shuffle=True, seed=4, num_workers=workers)
        return [(i.tolist(), v.tolist()) for i, v in loader]

    first = run(0)
    assert run(workers) == first  # the same for any worker count
    indices, values = first[0]
    seed = batch_seed(keyed_seeds(4, 0, indices).tolist())
    random.seed(seed)
    np.random.seed(np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32))
    torch.manual_seed(seed)
    assert values == [draws() for _ in indices]


def test_the_loops_generators_are_left_as_they_were_in_the_main_process():
    loader = FastLoader(Batched(), batch_size=5, shuffle=True, seed=2, num_workers=0)
    torch.manual_seed(0)
    random.seed(0)
    expected = (torch.rand(3).tolist(), random.random())
    torch.manual_seed(0)
    random.seed(0)
    list(loader)
    assert (torch.rand(3).tolist(), random.random()) == expected


def test_a_subset_of_a_row_by_row_dataset_keeps_loading_row_by_row():
    assert not fetches_batches(Subset(RowByRow(), range(10)))
    assert fetches_batches(Subset(Subset(Batched(), range(20)), range(10)))
    subset = Subset(RowByRow(), list(range(0, 23, 2)))
    whole = by_index(FastLoader(RowByRow(), batch_size=3, seed=5, num_workers=0), 1)[0]
    rows = by_index(FastLoader(subset, batch_size=5, seed=5, num_workers=0), 1)[0]
    # Subset positions are keys: position p is sample 2p of the whole set
    assert set(rows) == set(range(0, 23, 2)) and rows[0] == whole[0]


def test_a_resumed_epoch_of_a_batched_dataset_draws_the_same():
    def make():
        return FastLoader(Batched(), batch_size=4, shuffle=True, seed=6, num_workers=0)

    uninterrupted = [(i.tolist(), v.tolist()) for i, v in make()]
    interrupted = make()
    batches = iter(interrupted)
    head = [(i.tolist(), v.tolist()) for i, v in (next(batches) for _ in range(2))]
    buffer = io.BytesIO()
    torch.save(interrupted.state_dict(), buffer)
    buffer.seek(0)
    torch.manual_seed(999)
    resumed = make()
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert head + [(i.tolist(), v.tolist()) for i, v in resumed] == uninterrupted


class Failing(Batched):
    def __getitems__(self, indices: list[int]) -> list[tuple[int, torch.Tensor]]:
        if 7 in indices:
            raise ValueError("row 7 is corrupt")
        return super().__getitems__(indices)


def test_a_failing_batch_call_names_its_indices():
    loader = FastLoader(Failing(), batch_size=6, seed=1, num_workers=0)
    with pytest.raises(ValueError, match="row 7 is corrupt") as caught:
        list(loader)
    assert caught.value.__notes__ == [
        "fastload: raised while loading dataset indices [6, 7, 8, 9, 10, 11]"
    ]


def test_seeded_rows_refuses_a_count_that_is_not_the_batchs():
    from fastload.seeds import loading_seeds

    with loading_seeds([1, 2, 3]), pytest.raises(ValueError, match="2 rows for a batch of 3"):
        list(seeded_rows(2))
    assert list(seeded_rows(2)) == [0, 1]  # unseeded outside a batch call


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 10**6),
    indices=st.lists(st.integers(0, 2**40), min_size=1, max_size=20),
)
def test_the_batchs_seeds_in_one_pass_equal_each_samples_seed(seed, epoch, indices):
    assert keyed_seeds(seed, epoch, indices).tolist() == [
        sample_seed(seed, epoch, index) for index in indices
    ]
    assert 0 <= batch_seed([sample_seed(seed, epoch, i) for i in indices]) < 2**63


class Drawing(Dataset):
    """Sample ``i``: a few of torch's draws, made while it loads."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> list[float]:
        return [torch.rand(()).item() for _ in range(20)]


def test_keyed_loads_on_two_threads_at_once_draw_their_own_seeds():
    def draws() -> list:
        loader = FastLoader(Drawing(), batch_size=4, seed=9, num_workers=0)
        return [[row.tolist() for row in batch] for batch in (torch.stack(b, 1) for b in loader)]

    alone = draws()
    results: list = [None, None]

    def run(slot: int) -> None:
        results[slot] = draws()

    threads = [threading.Thread(target=run, args=(slot,)) for slot in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [alone, alone]
