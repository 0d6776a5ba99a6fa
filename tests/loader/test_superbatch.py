"""Super-batches: workers load runs of batches as one message; FastLoader hands out the
same batches as DataLoader, in the same order, and resumes at any batch."""

from __future__ import annotations

import collections

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from common_utils import resumed_rest
from fastload import FastLoader
from fastload.loader.superbatch import GROUP_SAMPLES, Grouping, Mode

Named = collections.namedtuple("Named", ["image", "label"])


class Items(Dataset):
    """Sample ``i``: a dict of a float tensor, an int, a string and a namedtuple, as an
    image data set's samples are (what ``default_collate`` collates a field at a time)."""

    def __init__(self, size: int, bad: int | None = None) -> None:
        self.size, self.bad = size, bad

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict:
        if index == self.bad:
            raise ValueError("broken sample")
        image = torch.full((2, 3), float(index))
        return {"image": image, "label": index, "name": f"s{index}", "pair": Named(image, index)}


def pair_collate(samples: list) -> tuple:
    """A collate of its own: the batch's images stacked, and its size."""
    return torch.stack([s["image"] for s in samples]), len(samples)


class Uneven:
    """A batch sampler of batches of 1, 2, 3, 1, 2, 3, ... indices, in reverse order."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __iter__(self):
        order, sizes, start = list(range(self.size))[::-1], [1, 2, 3], 0
        for n in range(self.size):
            if start >= self.size:
                return
            yield order[start : start + sizes[n % 3]]
            start += sizes[n % 3]

    def __len__(self) -> int:
        return sum(1 for _ in self)


def assert_same(ours, theirs) -> None:
    """Equal values, types, dtypes and shapes, all the way down."""
    assert type(ours) is type(theirs)
    if isinstance(theirs, torch.Tensor):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        assert torch.equal(ours, theirs)
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs)
        for key in theirs:
            assert_same(ours[key], theirs[key])
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs)
        for mine, other in zip(ours, theirs, strict=True):
            assert_same(mine, other)
    else:
        assert ours == theirs


def buffer(tensor: torch.Tensor) -> int:
    """Where a tensor's memory is: views of one buffer share it."""
    return tensor.untyped_storage().data_ptr()


def assert_same_batches(ours: list, theirs: list) -> None:
    assert len(ours) == len(theirs)
    for mine, other in zip(ours, theirs, strict=True):
        assert_same(mine, other)


def loaders(dataset, workers: int, **kwargs) -> tuple[FastLoader, DataLoader]:
    """FastLoader with super-batches and DataLoader with its defaults, each with a
    generator seeded alike and the same workers (FastLoader's kept across epochs, which
    draw from the generator as DataLoader's new ones do at each epoch)."""
    fast = FastLoader(
        dataset, num_workers=workers, super_batches=True,
        generator=torch.Generator().manual_seed(3), **kwargs,
    )  # fmt: skip
    reference = DataLoader(
        dataset, num_workers=workers, generator=torch.Generator().manual_seed(3), **kwargs
    )
    return fast, reference


CASES = {
    "default collate": {"collate_fn": None},
    "own collate": {"collate_fn": pair_collate},
}


def batch_arguments(batch_size: int, drop_last: bool, collate_fn) -> dict:
    arguments = {"batch_size": batch_size, "shuffle": True, "drop_last": drop_last}
    return arguments if collate_fn is None else {**arguments, "collate_fn": collate_fn}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("batch_size", [1, 3, 8])
@pytest.mark.parametrize("drop_last", [False, True])
def test_same_batches_as_dataloader_in_the_main_process(case, batch_size, drop_last):
    arguments = batch_arguments(batch_size, drop_last, case["collate_fn"])
    fast, reference = loaders(Items(29), 0, **arguments)
    for _ in range(2):  # two epochs: the order's generator goes on alike
        assert_same_batches(list(fast), list(reference))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("batch_size", [1, 3, 8])
@pytest.mark.parametrize("drop_last", [False, True])
def test_same_batches_as_dataloader_from_workers(case, batch_size, drop_last):
    arguments = batch_arguments(batch_size, drop_last, case["collate_fn"])
    fast, reference = loaders(Items(29), 2, **arguments)
    for _ in range(2):  # the persistent workers' second epoch
        assert_same_batches(list(fast), list(reference))


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_same_batches_with_a_batch_sampler_of_its_own(workers):
    fast, reference = loaders(Items(23), workers, batch_sampler=Uneven(23))
    assert_same_batches(list(fast), list(reference))


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_in_memory_tensors_give_dataloaders_batches(workers):
    data = TensorDataset(torch.arange(58.0).view(29, 2), torch.arange(29))
    fast, reference = loaders(data, workers, batch_size=3, shuffle=True)
    assert_same_batches(list(fast), list(reference))


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(1, 150),
    batch_size=st.integers(1, 70),
    drop_last=st.booleans(),
    in_memory=st.booleans(),
)
def test_any_batch_and_data_size_gives_dataloaders_batches(size, batch_size, drop_last, in_memory):
    data = (
        TensorDataset(torch.arange(size * 2).view(size, 2), torch.arange(size))
        if in_memory
        else Items(size)
    )
    fast, reference = loaders(data, 0, batch_size=batch_size, shuffle=True, drop_last=drop_last)
    assert_same_batches(list(fast), list(reference))


def test_a_group_is_sent_as_one_set_of_buffers():
    fast = FastLoader(Items(20), batch_size=4, num_workers=0, super_batches=True)
    first, second = list(fast)[:2]
    storage = buffer(first["image"])
    assert buffer(second["image"]) == storage
    assert first["image"].shape == (4, 2, 3) and second["name"] == ["s4", "s5", "s6", "s7"]


def test_samples_that_differ_are_collated_batch_by_batch():
    class Sizes(Items):  # batch k's images are k+1 wide: one stack of the group would fail
        def __getitem__(self, index: int) -> dict:
            return {"image": torch.zeros(1, index // 2 + 1), "label": index}

    fast, reference = loaders(Sizes(10), 0, batch_size=2)
    assert_same_batches(list(fast), list(reference))


# --- resume ---------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_resume_at_every_batch_inside_a_group(batch_size):
    def make():
        return FastLoader(Items(29), batch_size=batch_size, shuffle=True, seed=5, num_workers=0,
                          super_batches=True)  # fmt: skip

    total = len(make())
    for taken in range(total):  # (after the last, a resume begins the next epoch)
        rest, again = resumed_rest(make, taken)
        assert len(rest) == total - taken
        assert_same_batches(again, rest)


@pytest.mark.slow
def test_resume_inside_a_group_from_workers():
    def make():
        return FastLoader(Items(29), batch_size=3, shuffle=True, seed=5, num_workers=2)

    assert make().super_batches
    for taken in (1, 4, 9):  # one group of ten batches: each inside it
        rest, again = resumed_rest(make, taken)
        assert_same_batches(again, rest)


# --- failures -------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_a_failing_batch_costs_that_batch_alone(workers):
    fast = FastLoader(Items(40, bad=13), batch_size=4, num_workers=workers, super_batches=True)
    batches = iter(fast)
    handed = [next(batches)["label"].tolist() for _ in range(3)]
    assert handed == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    with pytest.raises(ValueError, match="broken sample") as caught:
        next(batches)
    named = "\n".join(getattr(caught.value, "__notes__", [])) + str(caught.value)
    assert "index 13" in named
    assert fast.state_dict()["batches"] == 4  # the failed batch is behind the loop
    rest = [batch["label"].tolist() for batch in batches]
    assert rest == [list(range(start, start + 4)) for start in range(16, 40, 4)]
    assert fast.state_dict()["between_epochs"] and fast.state_dict()["epoch"] == 1


# --- when it applies ------------------------------------------------------------------------


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(10))


def test_on_by_default_with_workers_and_shown_in_the_repr():
    loader = FastLoader(Items(10), batch_size=8, num_workers=2)
    assert loader.super_batches
    assert "super_batches=True" in repr(loader)
    assert f"about {GROUP_SAMPLES} samples a message" in repr(loader)


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ({"batch_size": 8, "num_workers": 0}, "each batch is loaded when it is asked for"),
        ({"batch_size": GROUP_SAMPLES, "num_workers": 2}, "or more go one by one"),
        ({"batch_size": None, "num_workers": 2}, "samples are not batched"),
    ],
)
def test_off_by_default_where_it_brings_nothing_with_the_reason(arguments, why):
    loader = FastLoader(Items(10), **arguments)
    assert not loader.super_batches
    assert why in repr(loader)


def test_an_iterable_dataset_is_left_alone_and_refused_explicitly():
    loader = FastLoader(Stream(), batch_size=2)
    assert not loader.super_batches and "batches its own samples" in repr(loader)
    with pytest.raises(ValueError, match="super_batches=True cannot apply: an IterableDataset"):
        FastLoader(Stream(), batch_size=2, super_batches=True)


def test_turned_off_the_batches_go_one_by_one():
    loader = FastLoader(Items(20), batch_size=4, num_workers=0, super_batches=False)
    first, second = list(loader)[:2]
    assert buffer(first["image"]) != buffer(second["image"])
    assert "super_batches=False" in repr(loader)


def test_in_memory_tensors_are_indexed_a_group_at_a_time():
    loader = FastLoader(TensorDataset(torch.arange(10)), batch_size=2, super_batches=True)
    assert loader.super_batches and loader._grouping == Grouping(Mode.ROWS, 2)
    first, second = list(loader)[:2]
    assert buffer(first[0]) == buffer(second[0])
