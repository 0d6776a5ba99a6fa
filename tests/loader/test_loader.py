from __future__ import annotations

import collections
import inspect
import logging
import pickle
import random
import traceback

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    TensorDataset,
    _DatasetKind,
    random_split,
)

from common_utils import deadline
from fastload import FastLoader, auto_num_workers
from fastload.loader import defaults
from fastload.loader.defaults import MAX_AUTO_WORKERS
from fastload.loader.fetch import DatasetView, IndexBatches
from fastload.loader.workers import WorkerInit


class SquaresDataset(Dataset):
    """A map-style dataset that is not made of tensors: the per-sample path."""

    classes = ("even", "odd")

    def __init__(self, size: int = 37) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not 0 <= index < self.size:
            raise IndexError(index)
        return torch.tensor([index, index * index]), index % 2


def tensor_dataset(size: int = 37) -> TensorDataset:
    return TensorDataset(torch.arange(size * 3.0).reshape(size, 3), torch.arange(size))


def epochs(loader, count: int = 2) -> list:
    return [batch for _ in range(count) for batch in loader]


def assert_same_batches(expected: list, actual: list) -> None:
    assert len(actual) == len(expected)
    for want, got in zip(expected, actual, strict=True):
        assert type(got) is type(want)
        assert len(got) == len(want)
        for a, b in zip(want, got, strict=True):
            assert torch.equal(a, b)


def both_loaders(dataset, seed: int = 0, **kwargs) -> tuple[list, list]:
    """Two epochs of DataLoader and of FastLoader, each from a generator seeded alike."""
    plain = DataLoader(dataset, generator=torch.Generator().manual_seed(seed), **kwargs)
    fast = FastLoader(
        dataset, generator=torch.Generator().manual_seed(seed), num_workers=0, **kwargs
    )
    return epochs(plain), epochs(fast)


DATASETS = {"tensors": tensor_dataset, "per-sample": SquaresDataset}


# --- parity with DataLoader -------------------------------------------------------------


@pytest.mark.parametrize("make", DATASETS.values(), ids=DATASETS.keys())
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_same_batches_as_dataloader(make, shuffle, drop_last):
    expected, actual = both_loaders(make(), batch_size=8, shuffle=shuffle, drop_last=drop_last)
    assert_same_batches(expected, actual)


@pytest.mark.parametrize("make", DATASETS.values(), ids=DATASETS.keys())
def test_same_batches_without_a_generator_from_the_global_seed(make):
    torch.manual_seed(5)
    expected = epochs(DataLoader(make(), batch_size=8, shuffle=True))
    after_plain = torch.rand(1)
    torch.manual_seed(5)
    actual = epochs(FastLoader(make(), batch_size=8, shuffle=True, num_workers=0))
    assert_same_batches(expected, actual)
    # The global RNG was consumed exactly as DataLoader consumes it.
    assert torch.equal(torch.rand(1), after_plain)


@pytest.mark.parametrize("make", DATASETS.values(), ids=DATASETS.keys())
def test_same_batches_with_a_custom_sampler(make):
    sampler = SubsetRandomSampler(range(0, 37, 2), generator=torch.Generator().manual_seed(3))
    expected = epochs(DataLoader(make(), batch_size=4, sampler=sampler))
    sampler.generator.manual_seed(3)
    actual = epochs(FastLoader(make(), batch_size=4, sampler=sampler, num_workers=0))
    assert_same_batches(expected, actual)


@pytest.mark.parametrize("make", DATASETS.values(), ids=DATASETS.keys())
def test_same_batches_with_a_batch_sampler(make):
    batches = [[3, 1, 4], [1, 5, 9, 2, 6], [5]]
    expected = epochs(DataLoader(make(), batch_sampler=batches))
    actual = epochs(FastLoader(make(), batch_sampler=batches, num_workers=0))
    assert_same_batches(expected, actual)


def test_same_samples_without_automatic_batching():
    expected = epochs(DataLoader(SquaresDataset(), batch_size=None))
    actual = epochs(FastLoader(SquaresDataset(), batch_size=None, num_workers=0))
    assert len(actual) == len(expected) == 74
    for (x1, y1), (x2, y2) in zip(expected, actual, strict=True):
        assert torch.equal(x1, x2) and y1 == y2


def test_subset_of_tensor_dataset_is_fetched_a_batch_at_a_time():
    train, _ = random_split(tensor_dataset(), [30, 7], generator=torch.Generator().manual_seed(0))
    expected, actual = both_loaders(train, batch_size=8, shuffle=True)
    assert_same_batches(expected, actual)
    assert isinstance(FastLoader(train, batch_size=8).dataset, DatasetView)


def test_user_collate_fn_is_used_and_disables_batched_fetch():
    def collate(samples):
        return len(samples)

    loader = FastLoader(tensor_dataset(), batch_size=8, collate_fn=collate)
    assert list(loader) == [8, 8, 8, 8, 5]
    assert loader.collate_fn is collate
    assert not isinstance(loader.dataset, DatasetView)


@given(
    size=st.integers(1, 60),
    batch_size=st.integers(1, 70),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_index_batches_equal_batch_sampler(size, batch_size, drop_last, shuffle, seed):
    def batch_sampler():
        generator = torch.Generator().manual_seed(seed)
        source = range(size)
        sampler = (
            RandomSampler(source, generator=generator) if shuffle else SequentialSampler(source)
        )
        return BatchSampler(sampler, batch_size, drop_last)

    reference = batch_sampler()
    expected = [list(batch) for _ in range(2) for batch in reference]
    index_batches = IndexBatches(batch_sampler())
    actual = [batch.tolist() for _ in range(2) for batch in index_batches]
    assert actual == expected
    assert len(index_batches) == len(batch_sampler())


@given(size=st.integers(1, 40), batch_size=st.integers(1, 50), drop_last=st.booleans())
def test_index_batches_drain_any_other_sampler(size, batch_size, drop_last):
    order = list(reversed(range(size)))  # a plain list is a valid sampler
    expected = list(BatchSampler(order, batch_size, drop_last))
    actual = [batch.tolist() for batch in IndexBatches(BatchSampler(order, batch_size, drop_last))]
    assert actual == expected


# --- keyword pass-through and defaults ----------------------------------------------------


def _collate(batch):
    return batch


def _init(worker_id):
    pass


_DATASET = SquaresDataset()
_SAMPLER = SequentialSampler(range(37))
_BATCHES = BatchSampler(SequentialSampler(range(37)), batch_size=4, drop_last=False)
_GENERATOR = torch.Generator()
_WORKERS = {"num_workers": 2}

#: DataLoader parameter -> (the arguments that set it off its default, what reads it back).
PASSED_THROUGH = {
    "dataset": ({}, lambda loader: loader.dataset is _DATASET),
    "batch_size": ({"batch_size": 5}, lambda loader: loader.batch_size == 5),
    "shuffle": ({"shuffle": True}, lambda loader: type(loader.sampler) is RandomSampler),
    "sampler": ({"sampler": _SAMPLER}, lambda loader: loader.sampler is _SAMPLER),
    "batch_sampler": (
        {"batch_sampler": _BATCHES},
        lambda loader: loader.batch_sampler is _BATCHES and loader.batch_size is None,
    ),
    "num_workers": (_WORKERS, lambda loader: loader.num_workers == 2),
    "collate_fn": ({"collate_fn": _collate}, lambda loader: loader.collate_fn is _collate),
    "pin_memory": ({"pin_memory": True}, lambda loader: loader.pin_memory is True),
    "drop_last": ({"drop_last": True}, lambda loader: loader.drop_last and len(loader) == 37),
    "timeout": ({"timeout": 7.0}, lambda loader: loader.timeout == 7.0),
    "worker_init_fn": (
        {"worker_init_fn": _init},
        lambda loader: (
            isinstance(loader.worker_init_fn, WorkerInit) and loader.worker_init_fn.user_fn is _init
        ),
    ),
    "multiprocessing_context": (
        {**_WORKERS, "multiprocessing_context": "spawn"},
        lambda loader: loader.multiprocessing_context.get_start_method() == "spawn",
    ),
    "generator": ({"generator": _GENERATOR}, lambda loader: loader.generator is _GENERATOR),
    "prefetch_factor": (
        {**_WORKERS, "prefetch_factor": 7},
        lambda loader: loader.prefetch_factor == 7,
    ),
    "persistent_workers": (
        {**_WORKERS, "persistent_workers": False},
        lambda loader: loader.persistent_workers is False,
    ),
    "pin_memory_device": (
        {"pin_memory": True, "pin_memory_device": "cpu"},
        lambda loader: loader.pin_memory_device == "cpu",
    ),
    "in_order": ({**_WORKERS, "in_order": False}, lambda loader: loader.in_order is False),
}

DATALOADER_PARAMETERS = [
    name for name in inspect.signature(DataLoader.__init__).parameters if name != "self"
]


def test_every_dataloader_parameter_is_checked_below():
    unknown = set(DATALOADER_PARAMETERS) - set(PASSED_THROUGH)
    assert not unknown, f"DataLoader has parameters this test does not check: {unknown}"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pin_memory_device, in torch 2.7+
@pytest.mark.parametrize("name", DATALOADER_PARAMETERS)
def test_every_dataloader_parameter_reaches_the_dataloader(name):
    arguments, reads_back = PASSED_THROUGH[name]
    loader = FastLoader(_DATASET, **arguments)
    assert reads_back(loader), f"{name}={arguments.get(name)!r} did not reach the DataLoader"


def test_explicit_arguments_reach_the_dataloader():
    def init(worker_id):
        pass

    sampler = SequentialSampler(range(37))
    generator = torch.Generator()
    loader = FastLoader(
        SquaresDataset(),
        batch_size=5,
        sampler=sampler,
        num_workers=2,
        pin_memory=False,
        drop_last=True,
        timeout=7.0,
        worker_init_fn=init,
        multiprocessing_context="spawn",
        generator=generator,
        prefetch_factor=3,
        persistent_workers=False,
        in_order=False,
    )
    assert (loader.batch_size, loader.num_workers, loader.prefetch_factor) == (5, 2, 3)
    assert loader.sampler is sampler and loader.generator is generator
    assert (loader.pin_memory, loader.drop_last, loader.persistent_workers) == (False, True, False)
    assert loader.timeout == 7.0 and loader.in_order is False
    assert loader.multiprocessing_context.get_start_method() == "spawn"
    assert isinstance(loader.worker_init_fn, WorkerInit) and loader.worker_init_fn.user_fn is init
    assert len(loader) == 7


def test_defaults_for_a_disk_style_dataset():
    loader = FastLoader(SquaresDataset(), batch_size=4)
    assert loader.num_workers == auto_num_workers()
    assert loader.pin_memory is torch.cuda.is_available()
    assert loader.persistent_workers is True
    assert loader.prefetch_factor * loader.num_workers >= 4
    assert loader.prefetch_factor >= 2


def test_defaults_for_in_memory_tensors():
    loader = FastLoader(tensor_dataset(), batch_size=4)
    assert loader.num_workers == 0
    assert loader.persistent_workers is False and loader.prefetch_factor is None
    assert isinstance(loader.dataset, DatasetView)


def test_explicit_values_win_over_defaults():
    loader = FastLoader(
        SquaresDataset(),
        num_workers=1,
        persistent_workers=False,
        prefetch_factor=2,
        pin_memory=False,
    )
    assert (loader.num_workers, loader.persistent_workers, loader.prefetch_factor) == (1, False, 2)
    assert loader.pin_memory is False
    assert "num_workers" not in loader.choices


@pytest.mark.parametrize(
    ("cpus", "local_world_size", "expected"),
    [
        (1, 1, 1),
        (2, 1, 2),
        (16, 1, MAX_AUTO_WORKERS),
        (64, 1, MAX_AUTO_WORKERS),
        (32, 8, 4),
        (8, 8, 1),
        (4, 8, 1),
    ],
)
def test_auto_num_workers_rule(cpus, local_world_size, expected):
    assert auto_num_workers(cpus=cpus, local_world_size=local_world_size) == expected


@pytest.mark.parametrize("bad", [-1, "many", "AUTO", 1.5, True, None])
def test_bad_num_workers_is_rejected(bad):
    with pytest.raises(
        ValueError,
        match=r"^num_workers option should be non-negative; fastload takes a non-negative int, "
        r"'auto' or 'tune', got",
    ):
        FastLoader(SquaresDataset(), num_workers=bad)


def test_repr_and_log_say_what_was_chosen_and_why(caplog):
    with caplog.at_level(logging.INFO, logger="fastload.loader"):
        loader = FastLoader(tensor_dataset(), batch_size=8)
    text = repr(loader)
    assert text.startswith("FastLoader(dataset=TensorDataset, batch_size=8, num_workers=0,")
    assert "batched_fetch=True" in text
    assert "num_workers=0 (in-memory tensors are indexed a batch at a time)" in text
    assert "num_workers=0 (in-memory tensors are indexed a batch at a time)" in caplog.text


def test_the_dataset_is_the_users_own_unless_fetched_as_tensors():
    dataset = SquaresDataset()
    assert FastLoader(dataset, num_workers=0).dataset is dataset
    tensors = tensor_dataset()
    view = FastLoader(tensors, batch_size=4).dataset  # the batched tensor fetch
    assert view.tensors is tensors.tensors and len(view) == len(tensors)
    assert view.dataset is tensors and torch.equal(view[3][1], tensors[3][1])


def test_recreating_from_dataset_attribute_does_not_wrap_twice():
    first = FastLoader(tensor_dataset(), batch_size=4)
    second = FastLoader(first.dataset, batch_size=4)
    assert second.dataset.dataset is first.dataset.dataset


def test_view_and_worker_init_pickle_for_spawn():
    view = pickle.loads(pickle.dumps(DatasetView(tensor_dataset())))
    assert torch.equal(view.__getitems__([2, 0])[1], torch.tensor([2, 0]))
    assert pickle.loads(pickle.dumps(WorkerInit(None))).user_fn is None


# --- workers: seeding, settings, user init --------------------------------------------------


class RandomDrawsDataset(Dataset):
    """Reports what each worker's RNGs and settings are when it loads a sample."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> dict:
        import cv2

        return {
            "python": random.random(),
            "numpy": float(np.random.rand()),
            "torch": float(torch.rand(())),
            "torch_threads": torch.get_num_threads(),
            "cv2_threads": cv2.getNumThreads(),
            "user": float(getattr(np, "_fastload_test_flag", -1.0)),
        }


def set_flag(worker_id: int) -> None:
    np._fastload_test_flag = 100.0 + worker_id


def draws(loader, epochs_: int = 2) -> list[list[float]]:
    return [[sample["numpy"].item() for sample in loader] for _ in range(epochs_)]


def test_workers_are_seeded_differently_and_reproducibly():
    def make():
        return FastLoader(
            RandomDrawsDataset(),
            batch_size=1,
            num_workers=2,
            worker_init_fn=set_flag,
            generator=torch.Generator().manual_seed(11),
            super_batches=False,  # batch i from worker i % 2, as DataLoader sends them
        )

    first = [[dict(sample) for sample in make()]]
    samples = first[0]
    by_worker = {0: samples[0::2], 1: samples[1::2]}  # in-order round-robin over 2 workers
    for key in ("python", "numpy", "torch"):
        assert by_worker[0][0][key].item() != by_worker[1][0][key].item()
    assert {s["user"].item() for s in by_worker[0]} == {100.0}
    assert {s["user"].item() for s in by_worker[1]} == {101.0}
    assert {s["torch_threads"].item() for s in samples} == {1}
    assert {s["cv2_threads"].item() for s in samples} == {1}  # setNumThreads(0): sequential

    epochs_a, epochs_b = draws(make()), draws(make())
    assert epochs_a == epochs_b  # same generator seed, same streams
    assert epochs_a[0] != epochs_a[1]  # a new epoch draws new numbers


def test_worker_init_seeds_from_torch_seed_in_the_main_process_too():
    # A worker's start-up, run here: what it changes for its process is put back after.
    create_fetcher, threads = vars(_DatasetKind)["create_fetcher"], torch.get_num_threads()
    try:
        torch.manual_seed(3)
        WorkerInit()(0)
        first = (random.random(), np.random.rand())
        torch.manual_seed(3)
        WorkerInit()(0)
        assert (random.random(), np.random.rand()) == first
    finally:
        _DatasetKind.create_fetcher = create_fetcher
        torch.set_num_threads(threads)


# --- errors ----------------------------------------------------------------------------------


class FailingDataset(SquaresDataset):
    def __getitem__(self, index: int):
        if index == 7:
            raise ValueError("corrupt sample")
        return super().__getitem__(index)


def full_text(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_dataset_error_keeps_its_type_and_message(num_workers):
    loader = FastLoader(FailingDataset(), batch_size=4, num_workers=num_workers)
    batches = iter(loader)
    assert next(batches)[0].shape == (4, 2)  # indices 0..3 load
    with pytest.raises(ValueError, match="corrupt sample") as caught:
        next(batches)
    assert "in __getitem__" in full_text(caught.value)  # the dataset's own frame is shown


def test_error_in_batched_fetch_names_the_indices():
    loader = FastLoader(tensor_dataset(5), batch_sampler=[[0, 1], [4, 9]])
    batches = iter(loader)
    next(batches)
    with pytest.raises(IndexError) as caught:
        next(batches)
    assert "while loading dataset indices [4, 9]" in full_text(caught.value)


class Stream(torch.utils.data.IterableDataset):
    """An iterable dataset that shards itself across workers, as the docs advise."""

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        start, step = (info.id, info.num_workers) if info else (0, 1)
        yield from (torch.tensor([i]) for i in range(start, 20, step))


def test_iterable_datasets_pass_through_untouched():
    loader = FastLoader(Stream(), batch_size=5, num_workers=2)
    assert isinstance(loader.dataset, Stream)  # no view: no indices to fetch by
    assert not isinstance(loader.sampler, torch.utils.data.DistributedSampler)
    values = sorted(v for batch in loader for v in batch.flatten().tolist())
    assert values == list(range(20))


# --- a true drop-in: what PyTorch's own DataLoader tests expect ------------------------------


def test_fastloader_is_generic_like_dataloader():
    def batches(loader: FastLoader[torch.Tensor]) -> list[torch.Tensor]:
        return list(loader)

    assert FastLoader[int].__origin__ is FastLoader
    assert len(batches(FastLoader(tensor_dataset(8), batch_size=4))) == 2


class Unsharded(torch.utils.data.IterableDataset):
    """An iterable dataset that does not split itself across workers."""

    def __iter__(self):
        yield from (torch.tensor([i]) for i in range(20))


def test_auto_never_duplicates_an_iterable_dataset():
    loader = FastLoader(Unsharded(), batch_size=5)
    assert loader.num_workers == 0
    assert "IterableDataset is copied into every worker" in repr(loader)
    assert sorted(v for batch in loader for v in batch.flatten().tolist()) == list(range(20))


def test_a_batch_a_worker_cannot_send_is_an_error_naming_it_not_a_hang():
    Pair = collections.namedtuple("Pair", "image label")  # local: cannot be pickled

    class Pairs(Dataset):
        def __len__(self) -> int:
            return 8

        def __getitem__(self, index: int):
            return Pair(torch.tensor([index]), index)

    loader = FastLoader(Pairs(), batch_size=4, num_workers=1, timeout=60)
    with deadline(60), pytest.raises(TypeError, match=r"cannot send its batch \(Pair\)"):
        next(iter(loader))
    assert loader.collate_fn is torch.utils.data.default_collate  # what users see is unchanged


class NamedSamples(Dataset):
    Sample = collections.namedtuple("Sample", "x y")  # in a class: pickle cannot find it

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int):
        return self.Sample(torch.tensor([index]), index)


def test_auto_workers_give_way_when_batches_cannot_leave_them():
    loader = FastLoader(NamedSamples(), batch_size=4)
    assert loader.num_workers > 0
    with deadline(60), pytest.warns(UserWarning, match=r"no workers: .*cannot send its batch"):
        batches = list(loader)
    assert loader.num_workers == 0
    assert [type(b).__name__ for b in batches] == ["Sample", "Sample"]
    assert batches[1].x.flatten().tolist() == [4, 5]
    assert len(list(loader)) == 2  # the next epoch too


@pytest.fixture
def small_shm(monkeypatch):
    monkeypatch.setattr(defaults, "shared_memory_free", lambda: 64 << 20)


def test_a_small_dev_shm_gives_no_workers_and_says_how_to_fix_it(small_shm):
    with pytest.warns(UserWarning, match=r"no workers: only 64 MiB free in /dev/shm.*--shm-size"):
        loader = FastLoader(SquaresDataset(), batch_size=4)
    assert loader.num_workers == 0 and len(list(loader)) == 10


def test_explicit_workers_with_a_small_dev_shm_are_kept_with_a_warning(small_shm):
    with pytest.warns(UserWarning, match=r"FastLoader with 2 workers: only 64 MiB free"):
        loader = FastLoader(SquaresDataset(), batch_size=4, num_workers=2)
    assert loader.num_workers == 2
