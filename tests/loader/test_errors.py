"""A sample that fails to load is named on its exception, whatever the workers."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import Dataset, TensorDataset, get_worker_info

from fastload import FastLoader, ImageFolder
from fastload.loader.errors import describe_indices
from fastload.seeds import SampleKey


class Broken(Dataset):
    """Raises for one index; checks the workers load from the user's object (or, with
    ``seed=``, FastLoader's seeding view of it)."""

    def __init__(self, bad: int = 37, size: int = 64) -> None:
        self.bad, self.size = bad, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        info = get_worker_info()
        if info is not None and self not in (info.dataset, getattr(info.dataset, "dataset", 0)):
            raise AssertionError("the worker's dataset is not the user's object")
        if index == self.bad:
            raise ValueError("broken sample")
        return torch.tensor(index)


def _failure(loader: FastLoader) -> ValueError:
    with pytest.raises(ValueError, match="broken sample") as caught:
        for _ in loader:
            pass
    return caught.value


def _named(error: BaseException) -> str:
    """What the user reads: the notes, or, from a worker, the re-raised message."""
    return "\n".join([str(error), *getattr(error, "__notes__", ())])


@pytest.mark.parametrize("seed", [None, 5])
@pytest.mark.parametrize("batch_size", [8, None])
def test_the_failing_index_is_named_in_the_main_process(seed, batch_size):
    loader = FastLoader(Broken(), batch_size=batch_size, num_workers=0, seed=seed)
    error = _failure(loader)
    assert error.__notes__ == ["fastload: raised while loading dataset index 37"]
    assert type(error) is ValueError and str(error) == "broken sample"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [None, 5])
def test_the_failing_index_is_named_from_a_worker(seed):
    dataset = Broken()
    loader = FastLoader(dataset, batch_size=8, num_workers=2, seed=seed, shuffle=True)
    if seed is None:
        assert loader.dataset is dataset  # not wrapped
    error = _failure(loader)
    assert "fastload: raised while loading dataset index 37\n" in _named(error)
    assert "index 36" not in _named(error)


def test_a_file_dataset_names_the_file(tmp_path):
    folder = tmp_path / "cats"
    folder.mkdir()
    for name in ("a.jpg", "b.jpg"):
        (folder / name).write_bytes(b"not an image")
    error = None
    try:
        for _ in FastLoader(ImageFolder(tmp_path), batch_size=2, num_workers=0):
            pass
    except Exception as caught:
        error = caught
    assert error is not None
    notes = [n for n in error.__notes__ if n.startswith("fastload:")]
    assert notes == [f"fastload: raised while loading dataset index 0 ({folder / 'a.jpg'})"]


def test_an_in_memory_batch_names_its_indices():
    data = TensorDataset(torch.arange(4.0))
    loader = FastLoader(data, batch_sampler=[[0, 9]])
    with pytest.raises(IndexError) as caught:
        list(loader)
    assert caught.value.__notes__ == ["fastload: raised while loading dataset indices [0, 9]"]


def test_describe_indices_shortens_long_batches():
    assert describe_indices(list(range(10))) == (
        "indices [0, 1, 2, 3, 4, 5, 6, 7, ... (10 in all)]"
    )
    assert describe_indices(SampleKey(3, 12)) == "index 12"  # a seeded key (epoch, index)
    assert describe_indices([SampleKey(0, 4), SampleKey(0, 5)]) == "indices [4, 5]"
    assert describe_indices((37, 1)) == "index (37, 1)"  # a dataset indexed by pairs
    assert describe_indices([(37, 1), (2, 0)]) == "indices [(37, 1), (2, 0)]"


class Grid(Dataset):
    """Indexed by ``(row, column)`` pairs; the pair ``(37, 1)`` fails."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, key: tuple) -> int:
        if key == (37, 1):
            raise KeyError(key)
        return key[0] * 10 + key[1]


def test_a_failing_pair_is_named_as_the_pair():
    loader = FastLoader(Grid(), batch_size=None, sampler=[(0, 1), (37, 1)], num_workers=0)
    batches = iter(loader)
    assert next(batches) == 1
    with pytest.raises(KeyError) as caught:
        next(batches)
    assert caught.value.__notes__ == ["fastload: raised while loading dataset index (37, 1)"]


def test_seed_refuses_an_index_it_cannot_key_by_name():
    loader = FastLoader(Grid(), batch_size=None, sampler=[(0, 1)], seed=3, num_workers=0)
    with pytest.raises(TypeError, match=r"integer index; the sampler gave \(0, 1\)"):
        next(iter(loader))


class DropsOne(Dataset):
    """A batched fetch that loses the last sample of a batch of ``drop_at`` or more."""

    def __init__(self, size: int = 20, drop_at: int = 4, extra: bool = False) -> None:
        self.size, self.drop_at, self.extra = size, drop_at, extra

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(index)

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        rows = [torch.tensor(i) for i in indices]
        if self.extra:
            return rows + rows[:1]
        return rows[:-1] if len(indices) >= self.drop_at else rows


@pytest.mark.parametrize("extra", [False, True], ids=["short", "long"])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("seed", [None, 5])
def test_a_batched_fetch_of_another_size_is_refused_naming_the_indices(seed, workers, extra):
    loader = FastLoader(DropsOne(extra=extra), batch_size=4, num_workers=workers, seed=seed)
    with pytest.raises(ValueError) as caught:
        list(loader)
    got = 5 if extra else 3
    assert f"DropsOne.__getitems__ returned {got} samples for the 4 indices [0, 1, 2, 3]" in (
        _named(caught.value)
    )


def test_a_batched_fetch_of_the_right_size_passes_untouched():
    loader = FastLoader(DropsOne(drop_at=99), batch_size=4, num_workers=0, seed=1)
    assert torch.cat(list(loader)).tolist() == list(range(20))
