"""FastLoader.state_dict/load_state_dict: a loader restored from a state taken after batch
k yields batches k+1, k+2, ... of the run that was not interrupted; with ``seed``, the
same augmentation draws, whatever ``num_workers``. The kill -9 runs are in
test_resume_killed.py."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    Dataset,
    DistributedSampler,
    IterableDataset,
    SequentialSampler,
    SubsetRandomSampler,
    TensorDataset,
)

from common_utils import cpu_and_cuda
from fastload import DataPrefetcher, FastLoader, gpu
from fastload.loader import BucketBatchSampler


class Draws(Dataset):
    """Sample ``i``: its index and one draw from each of Python's, NumPy's and torch's
    generators, as an augmentation in a worker would draw."""

    def __init__(self, size: int = 30) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor]:
        draws = [random.random(), float(np.random.rand()), float(torch.rand(()))]
        return index, torch.tensor(draws, dtype=torch.float64)


def as_lists(batches) -> list:
    return [(b[0].tolist(), b[1].tolist()) for b in batches]


def saved(state: dict) -> dict:
    """Through torch.save and a weights-only load, as a checkpoint goes."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def resume(make, state: dict) -> FastLoader:
    torch.manual_seed(999)  # another process: the global generator is elsewhere
    random.seed(999)
    np.random.seed(999)
    loader = make()
    loader.load_state_dict(saved(state))
    return loader


ORDER_CASES = {
    "sequential": {"shuffle": False},
    "shuffle, global generator": {"shuffle": True},
    "shuffle, generator": {"shuffle": True, "generator": "given"},
    "shuffle, seed": {"shuffle": True, "seed": 5},
}


def make_loader(dataset, workers: int, persistent: bool, case: dict, batch_size: int = 4):
    kwargs = dict(case)
    if kwargs.get("generator") == "given":
        kwargs["generator"] = torch.Generator().manual_seed(3)
    return FastLoader(
        dataset, batch_size=batch_size, num_workers=workers,
        persistent_workers=persistent if workers else None, **kwargs,
    )  # fmt: skip


@pytest.mark.parametrize("case", ORDER_CASES.values(), ids=ORDER_CASES.keys())
@pytest.mark.parametrize(
    ("workers", "persistent"),
    [(0, False), (2, False), (2, True)],
    ids=["w0", "w2", "w2 persistent"],
)
@pytest.mark.parametrize("stop", [0, 3, 7])
def test_a_resumed_epoch_yields_the_rest_of_the_interrupted_one(case, workers, persistent, stop):
    """Stopped in the second epoch (persistent workers then reset rather than start)."""

    def make():
        return make_loader(Draws(30), workers, persistent, case)

    torch.manual_seed(2)
    uninterrupted = make()
    epoch0 = [b[0].tolist() for b in uninterrupted]
    epoch1 = [b[0].tolist() for b in uninterrupted]

    torch.manual_seed(2)
    interrupted = make()
    assert [b[0].tolist() for b in interrupted] == epoch0
    batches = iter(interrupted)
    assert [next(batches)[0].tolist() for _ in range(stop)] == epoch1[:stop]
    state = interrupted.state_dict()
    assert (state["epoch"], state["batches"], state["between_epochs"]) == (1, stop, False)

    resumed = resume(make, state)
    assert [b[0].tolist() for b in resumed] == epoch1[stop:]
    assert sorted(i for batch in epoch1 for i in batch) == list(range(30))  # each once


@pytest.mark.parametrize("case", ["generator", "seed"])
@pytest.mark.parametrize("workers", [0, 2])
def test_after_the_resumed_epoch_the_next_ones_follow_as_uninterrupted(case, workers):
    kwargs = {"seed": 5} if case == "seed" else {"generator": "given"}

    def make():
        return make_loader(Draws(30), workers, True, {"shuffle": True, **kwargs})

    uninterrupted = make()
    epochs = [as_lists(uninterrupted) for _ in range(3)]
    interrupted = make()
    batches = iter(interrupted)
    for _ in range(4):
        next(batches)
    resumed = resume(make, interrupted.state_dict())
    rest = [as_lists(resumed) for _ in range(2)]
    indices = [[i for i, _ in epoch] for epoch in (rest[0], rest[1])]
    assert indices == [[i for i, _ in epochs[0][4:]], [i for i, _ in epochs[1]]]
    if case == "seed":  # the draws too: keyed by (seed, epoch, index)
        assert rest == [epochs[0][4:], epochs[1]]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_taken_at_the_end_of_an_epoch_starts_the_next_one(workers):
    def make():
        return make_loader(Draws(30), workers, True, {"shuffle": True, "seed": 9})

    uninterrupted = make()
    epochs = [as_lists(uninterrupted) for _ in range(2)]
    finished = make()
    assert as_lists(finished) == epochs[0]
    state = finished.state_dict()
    assert (state["epoch"], state["batches"], state["between_epochs"]) == (1, 0, True)
    assert as_lists(resume(make, state)) == epochs[1]
    fresh = make().state_dict()
    assert (fresh["epoch"], fresh["batches"], fresh["between_epochs"]) == (0, 0, True)


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_with_a_seed_an_epoch_is_the_same_whatever_the_worker_count(workers):
    reference = as_lists(FastLoader(Draws(30), batch_size=4, shuffle=True, num_workers=0, seed=4))
    loader = FastLoader(Draws(30), batch_size=4, shuffle=True, num_workers=workers, seed=4)
    assert as_lists(loader) == reference
    other_seed = FastLoader(Draws(30), batch_size=4, shuffle=True, num_workers=workers, seed=8)
    assert as_lists(other_seed) != reference


def test_a_seed_keys_each_sample_not_its_batch_or_position():
    by_fours = dict(
        (i, draws)
        for indices, rows in as_lists(FastLoader(Draws(30), batch_size=4, seed=4, num_workers=0))
        for i, draws in zip(indices, rows, strict=True)
    )
    by_sevens = dict(
        (i, draws)
        for indices, rows in as_lists(FastLoader(Draws(30), batch_size=7, seed=4, num_workers=0))
        for i, draws in zip(indices, rows, strict=True)
    )
    assert by_fours == by_sevens
    assert len({tuple(draws) for draws in by_fours.values()}) == 30  # each its own draws


def test_a_seed_leaves_the_training_loop_generators_alone_without_workers():
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    expected = (torch.rand(1), random.random(), np.random.rand())
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    list(FastLoader(Draws(12), batch_size=4, num_workers=0, seed=4))
    assert (torch.rand(1), random.random(), np.random.rand()) == expected


def test_resuming_with_another_worker_count_is_allowed():
    def make(workers):
        return FastLoader(Draws(30), batch_size=4, shuffle=True, num_workers=workers, seed=2)

    whole = as_lists(make(2))
    interrupted = make(2)
    batches = iter(interrupted)
    for _ in range(3):
        next(batches)
    resumed = make(0)
    resumed.load_state_dict(interrupted.state_dict())
    assert as_lists(resumed) == whole[3:]


def test_in_memory_tensors_resume_on_the_batched_path():
    data = TensorDataset(torch.arange(50))

    def make():
        return FastLoader(data, batch_size=8, shuffle=True, seed=1)

    whole = [b[0].tolist() for b in make()]
    interrupted = make()
    batches = iter(interrupted)
    next(batches), next(batches)
    resumed = resume(make, interrupted.state_dict())
    assert [b[0].tolist() for b in resumed] == whole[2:]


SAMPLERS = {
    "subset random, own generator": lambda: {
        "sampler": SubsetRandomSampler(range(0, 30, 2), torch.Generator().manual_seed(1))
    },
    "batch sampler": lambda: {
        "batch_sampler": BatchSampler(SequentialSampler(range(30)), 4, drop_last=True)
    },
    "buckets": lambda: {
        "batch_sampler": BucketBatchSampler([(10, 10 + i) for i in range(30)], 4, seed=3)
    },
    "distributed rank 1 of 3": lambda: {
        "sampler": DistributedSampler(range(30), num_replicas=3, rank=1, seed=6)
    },
}


@pytest.mark.parametrize("sampler", SAMPLERS.values(), ids=SAMPLERS.keys())
def test_samplers_resume_too(sampler):
    def make():
        kwargs = sampler()
        batch_size = 1 if "batch_sampler" in kwargs else 4
        return FastLoader(Draws(30), batch_size=batch_size, num_workers=0, **kwargs)

    uninterrupted = make()
    list(uninterrupted)
    for owner in (uninterrupted.sampler, uninterrupted.batch_sampler):
        if hasattr(owner, "set_epoch"):
            owner.set_epoch(1)
    expected = [b[0].tolist() for b in uninterrupted]
    interrupted = make()
    list(interrupted)
    for owner in (interrupted.sampler, interrupted.batch_sampler):
        if hasattr(owner, "set_epoch"):
            owner.set_epoch(1)
    batches = iter(interrupted)
    next(batches), next(batches)
    resumed = resume(make, interrupted.state_dict())
    assert [b[0].tolist() for b in resumed] == expected[2:]


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_the_prefetcher_saves_what_the_loop_had_not_what_is_in_flight(device):
    def make():
        return FastLoader(Draws(40), batch_size=4, shuffle=True, num_workers=2, seed=3)

    whole = [b[0].tolist() for b in DataPrefetcher(make(), device=device, dtype=None)]
    prefetcher = DataPrefetcher(make(), device=device, dtype=None, depth=3)
    batches = iter(prefetcher)
    assert [next(batches)[0].tolist() for _ in range(2)] == whole[:2]
    state = prefetcher.state_dict()
    assert state["batches"] == 2  # five are out of the loader: two handed, three in flight
    resumed = DataPrefetcher(make(), device=device, dtype=None)
    resumed.load_state_dict(saved(state))
    assert [b[0].tolist() for b in resumed] == whole[2:]


class Images(Dataset):
    """uint8 images numbered by their pixels, labelled by index."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, index: int):
        image = torch.arange(3 * 8 * 8, dtype=torch.uint8).view(3, 8, 8) + index
        return image, index


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("workers", [0, 2])
def test_gpu_transforms_draw_per_sample_and_replay_after_a_resume(workers, device):
    augment = torch.nn.Sequential(gpu.RandomErasing(p=0.5), gpu.RandomHorizontalFlip())

    def make(batch_size=4, w=workers):
        loader = FastLoader(Images(), batch_size=batch_size, shuffle=True, num_workers=w, seed=1)
        return DataPrefetcher(loader, device=device, dtype=None, transform=augment)

    def by_index(prefetcher):
        return {int(i): image.cpu() for images, labels in prefetcher
                for i, image in zip(labels, images, strict=True)}  # fmt: skip

    whole = by_index(make())
    assert {i: image.tolist() for i, image in by_index(make(6, 0)).items()} == {
        i: image.tolist() for i, image in whole.items()
    }  # another batch size and worker count: each sample augmented alike
    flipped = [i for i, image in whole.items() if torch.equal(image, Images()[i][0].flip(-1))]
    assert 0 < len(flipped) < 24

    interrupted = make()
    batches = iter(interrupted)
    held = [next(batches) for _ in range(2)]
    state = interrupted.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    for images, labels in [*held, *resumed]:
        for i, image in zip(labels.tolist(), images.cpu(), strict=True):
            assert torch.equal(image, whole[i])


def test_a_state_from_another_loader_is_refused_saying_what_differs():
    state = FastLoader(Draws(30), batch_size=4, shuffle=True, seed=1, num_workers=0).state_dict()
    for other, message in [
        (FastLoader(Draws(30), batch_size=5, shuffle=True, seed=1, num_workers=0),
         "batch_size 4 in the state, 5 here"),
        (FastLoader(Draws(31), batch_size=4, shuffle=True, seed=1, num_workers=0),
         "dataset_length 30 in the state, 31 here"),
        (FastLoader(Draws(30), batch_size=4, shuffle=True, seed=2, num_workers=0),
         "seed 1 in the state, 2 here"),
        (FastLoader(Draws(30), batch_size=4, shuffle=False, seed=1, num_workers=0),
         "sampler 'RandomSampler' in the state, 'SequentialSampler' here"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=f"cannot resume: .*{message}"):
            other.load_state_dict(state)
    loader = FastLoader(Draws(30), batch_size=4, shuffle=True, seed=1, num_workers=0)
    with pytest.raises(
        ValueError, match=r"not a FastLoader state: give what FastLoader.state_dict"
    ):
        loader.load_state_dict({"epoch": 1})
    with pytest.raises(ValueError, match="FastLoader state version 9; this fastload reads 2 and 3"):
        loader.load_state_dict(state | {"version": 9})
    with pytest.raises(ValueError, match="batches -1 is not a count"):
        loader.load_state_dict(state | {"batches": -1})
    with pytest.raises(ValueError, match="generator 'torch' does not match"):
        loader.load_state_dict(state | {"generators": {"torch": b"short"}})


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("workers", [0, 2])
def test_every_rank_resumes_its_own_batches_from_the_state_rank_0_saved(shuffle, workers):
    # Lightning and Accelerate save rank 0's loader state and load it on every rank
    def make(rank, world=2, seed=3):
        sampler = DistributedSampler(Draws(43), num_replicas=world, rank=rank, shuffle=shuffle,
                                     seed=seed)  # fmt: skip
        return FastLoader(Draws(43), batch_size=4, sampler=sampler, seed=5, num_workers=workers)

    whole = {rank: [b[0].tolist() for b in make(rank)] for rank in (0, 1)}
    seen = [i for rank in whole.values() for batch in rank for i in batch]
    assert len(seen) == 44 and set(seen) == set(range(43))  # 43 padded to 2 x 22
    interrupted = make(0)
    batches = iter(interrupted)
    next(batches), next(batches)
    state = saved(interrupted.state_dict())
    for rank in (0, 1):
        resumed = make(rank)
        resumed.load_state_dict(state)
        assert [b[0].tolist() for b in resumed] == whole[rank][2:], rank
        assert [b[0].tolist() for b in resumed] == whole[rank]  # then the next epoch
    for other, message in [(make(1, world=3), "world_size 2 in the state, 3 here"),
                           (make(1, seed=4), "sampler_seed 3 in the state, 4 here")]:  # fmt: skip
        with pytest.raises(ValueError, match=f"cannot resume: .*{message}"):
            other.load_state_dict(state)


@pytest.mark.parametrize(
    ("tampered", "message"),
    [
        ({"batches": 8}, "batches 8 is not within an epoch of 8 batches"),
        ({"batches": 10**9}, "is not within an epoch of 8 batches"),
        ({"epoch": 1.0}, "epoch 1.0 is not a count"),
        ({"base_draw": "yes"}, "base_draw 'yes' is not True or False"),
        ({"between_epochs": None}, "between_epochs None is not True or False"),
        ({"sampler_epochs": {"sampler": -3}}, "sampler_epochs {'sampler': -3} is not epochs"),
        ({"sampler_epochs": None}, "sampler_epochs None is not epochs"),
        ({"generators": {"torch": "text"}}, "no generator states"),
        (
            {"sampler_epochs": {"sampler": 2**70}},
            r"sampler_epochs \{'sampler': 1180591620717411303424\} is not epochs",
        ),
        ({"epoch": 2**64}, "epoch 18446744073709551616 is not a count"),
        ({"version": 2.0}, "FastLoader state version 2.0; this fastload reads 2 and 3"),
        ({"version": True}, "FastLoader state version True"),
        ({"world_size": 1.0}, "world_size 1.0 in the state, 1 here"),
        ({"batches": 2, "between_epochs": True}, "between_epochs with batches 2"),
    ],
)
def test_a_tampered_state_is_refused_and_the_loader_left_as_it_was(tampered, message):
    def make():
        return FastLoader(Draws(30), batch_size=4, shuffle=True, seed=1, num_workers=0)

    source = make()
    next(iter(source))
    state = source.state_dict()
    loader = make()
    with pytest.raises(ValueError, match=message):
        loader.load_state_dict(state | tampered)
    assert as_lists(loader) == as_lists(make())  # a fresh epoch 0


def test_a_seeded_stream_asked_to_shuffle_gets_dataloaders_own_refusal():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    with pytest.raises(ValueError, match="IterableDataset: expected unspecified shuffle option"):
        FastLoader(Stream(), batch_size=2, shuffle=True, seed=1, num_workers=0)


def test_a_state_without_the_orders_generator_is_refused_not_replayed_afresh():
    """A state saved when the order came from the loader's generator (fastload before the
    seeded order had a generator of its own) holds no state of the sampler's: resumed,
    the order would start afresh, samples seen twice or never."""
    source = FastLoader(Draws(30), batch_size=4, shuffle=True, seed=1, num_workers=0)
    next(iter(source))
    state = source.state_dict()
    assert set(state["generators"]) == {"torch", "loader", "sampler"}
    old = state | {"generators": {k: v for k, v in state["generators"].items() if k != "sampler"}}
    loader = FastLoader(Draws(30), batch_size=4, shuffle=True, seed=1, num_workers=0)
    with pytest.raises(ValueError, match=r"no state for the generator\(s\) \['sampler'\]"):
        loader.load_state_dict(old)
    loader.load_state_dict(state)  # the state as saved resumes


def test_an_iterable_dataset_has_no_state_to_save():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(3))

    loader = FastLoader(Stream(), batch_size=2, num_workers=0)
    with pytest.raises(TypeError, match="an IterableDataset keeps its own position"):
        loader.state_dict()


@pytest.mark.parametrize("seed", [-1, 2**63, 1.5, True])
def test_a_seed_must_be_a_non_negative_int(seed):
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 9223372036854775807\]"):
        FastLoader(Draws(4), seed=seed)


def test_with_a_seed_a_sample_is_augmented_alike_whatever_the_world_size():
    def draws(world: int, rank: int) -> dict:
        sampler = DistributedSampler(range(30), num_replicas=world, rank=rank, seed=6)
        loader = FastLoader(Draws(30), batch_size=4, sampler=sampler, num_workers=0, seed=4)
        return {
            i: d for indices, rows in as_lists(loader) for i, d in zip(indices, rows, strict=True)
        }

    alone = draws(1, 0)
    split = draws(3, 0) | draws(3, 1) | draws(3, 2)
    assert split == alone and len(alone) == 30


def test_a_state_from_another_batch_sampler_is_refused():
    sizes = [(10, 20 + i % 3) for i in range(30)]
    bucketed = FastLoader(Draws(30), batch_sampler=BucketBatchSampler(sizes, 4), num_workers=0)
    next(iter(bucketed))
    state = bucketed.state_dict()
    plain = FastLoader(Draws(30), batch_sampler=BatchSampler(range(30), 4, False), num_workers=0)
    with pytest.raises(
        ValueError,
        match="batch_sampler 'BucketBatchSampler' in the state, 'BatchSampler' here",
    ):
        plain.load_state_dict(state)


def test_a_corrupt_generator_state_is_refused_at_load_and_the_global_one_untouched():
    def make():
        return FastLoader(Draws(30), batch_size=4, shuffle=True, seed=1, num_workers=0)

    state = make().state_dict()
    corrupt = bytes(len(state["generators"]["torch"]))  # the right length, all zeros
    loader = make()
    before = torch.get_rng_state()
    with pytest.raises(ValueError, match="generator 'torch': Invalid mt19937 state"):
        loader.load_state_dict(state | {"generators": {**state["generators"], "torch": corrupt}})
    assert torch.equal(torch.get_rng_state(), before)
    assert as_lists(loader) == as_lists(make())  # a fresh epoch, as if nothing was loaded


class OwnIterator:
    """A batch sampler that is its own iterator and starts anew at each iter(), as
    Lightning's _IndexBatchSamplerWrapper (its predict loop's) does."""

    def __init__(self, batch_sampler: BatchSampler) -> None:
        self.batch_sampler, self.batches = batch_sampler, iter(())

    def __iter__(self):
        self.batches = iter(self.batch_sampler)
        return self

    def __next__(self):
        return next(self.batches)

    def __len__(self) -> int:
        return len(self.batch_sampler)


@pytest.mark.parametrize("dataset", [Draws(10), TensorDataset(torch.arange(10))])
def test_a_batch_sampler_that_is_its_own_iterator_gives_each_batch_once(dataset):
    batches = OwnIterator(BatchSampler(SequentialSampler(dataset), batch_size=4, drop_last=False))
    loader = FastLoader(dataset, batch_sampler=batches, num_workers=0)
    assert [b[0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


@pytest.fixture
def one_process_group(tmp_path):
    """A real one-process gloo group: FastLoader then makes and drives its own
    DistributedSampler."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}",
                            rank=0, world_size=1)  # fmt: skip
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("between", [False, True])
def test_a_state_whose_sampler_epoch_disagrees_with_the_loaders_is_refused(
    one_process_group, between
):
    def make():
        return FastLoader(Draws(12), batch_size=4, shuffle=True, seed=2, num_workers=0)

    loader = make()
    assert isinstance(loader.sampler, DistributedSampler)  # its own, driven by the loader
    for _ in range(2):
        list(loader)  # two epochs: the sampler's epoch 1
    if between:  # the third epoch not begun
        state = saved(loader.state_dict())
        expected = [b[0].tolist() for b in loader]
    else:  # one batch into the third
        batches = iter(loader)
        next(batches)
        state = saved(loader.state_dict())
        expected = [b[0].tolist() for b in batches]
    assert state["sampler_offset"] == 0 and state["between_epochs"] == between
    resumed = make()
    resumed.load_state_dict(state)
    assert [b[0].tolist() for b in resumed] == expected
    with pytest.raises(ValueError, match=r"sampler_epochs \{'sampler': 7\} disagree with epoch"):
        make().load_state_dict(state | {"sampler_epochs": {"sampler": 7}})


def test_a_sampler_the_user_drives_may_count_its_own_epochs():
    sampler = DistributedSampler(Draws(12), num_replicas=1, rank=0, shuffle=True, seed=1)
    loader = FastLoader(Draws(12), batch_size=4, sampler=sampler, num_workers=0)
    sampler.set_epoch(7)  # the user's count, not the loader's
    next(iter(loader))
    state = loader.state_dict()
    assert state["sampler_offset"] is None and state["sampler_epochs"] == {"sampler": 7}
    again = DistributedSampler(Draws(12), num_replicas=1, rank=0, shuffle=True, seed=1)
    FastLoader(Draws(12), batch_size=4, sampler=again, num_workers=0).load_state_dict(state)


def test_a_version_2_state_is_still_read_on_any_rank():
    def make(rank):
        sampler = DistributedSampler(Draws(20), num_replicas=2, rank=rank, shuffle=True, seed=0)
        return FastLoader(Draws(20), batch_size=2, sampler=sampler, num_workers=0)

    whole = [b[0].tolist() for b in make(1)]
    loader = make(0)
    batches = iter(loader)
    next(batches), next(batches)
    state = loader.state_dict()
    version_2 = {key: value for key, value in state.items() if not key.startswith("sampler_")}
    version_2 |= {"version": 2, "rank": 0, "sampler_epochs": state["sampler_epochs"]}
    resumed = make(1)
    resumed.load_state_dict(version_2)
    assert [b[0].tolist() for b in resumed] == whole[2:]


def test_a_prefetcher_state_between_iter_and_its_first_batch_starts_the_next_epoch():
    def make():
        loader = FastLoader(Draws(12), batch_size=4, shuffle=True, seed=3, num_workers=0)
        return DataPrefetcher(loader, device="cpu", dtype=None)

    prefetcher = make()
    list(prefetcher)  # epoch 0 done
    iter(prefetcher)  # a pass begun, its loader not yet started
    state = prefetcher.state_dict()
    assert (state["epoch"], state["batches"], state["between_epochs"]) == (1, 0, True)
    reference = make()
    list(reference)
    resumed = make()
    resumed.load_state_dict(state)
    assert [b[0].tolist() for b in resumed] == [b[0].tolist() for b in reference]  # epoch 1


def test_a_loaded_state_saved_again_before_its_epoch_begins_is_the_same_state(
    one_process_group,
):
    def make():
        return FastLoader(Draws(12), batch_size=4, shuffle=True, seed=2, num_workers=0)

    loader = make()
    list(loader)
    state = saved(loader.state_dict())  # between epochs 0 and 1
    again = make()
    again.load_state_dict(state)
    resaved = saved(again.state_dict())  # a checkpoint before the next epoch begins
    assert resaved["between_epochs"] and resaved["epoch"] == state["epoch"]
    third = make()
    third.load_state_dict(resaved)  # not refused as altered
    assert [b[0].tolist() for b in third] == [b[0].tolist() for b in loader]  # epoch 1


def test_with_a_seed_every_epochs_order_is_the_same_whatever_the_worker_count():
    def orders(workers: int, persistent: bool | None = None) -> list[list[int]]:
        loader = FastLoader(Draws(12), batch_size=4, shuffle=True, seed=3,
                            num_workers=workers, persistent_workers=persistent)  # fmt: skip
        return [[i for b in loader for i in b[0].tolist()] for _ in range(3)]

    first = orders(0)
    assert len({tuple(epoch) for epoch in first}) == 3  # a new order each epoch
    assert first == orders(1) == orders(2) == orders(2, persistent=False)


@pytest.mark.parametrize("background", [False, True], ids=["in step", "background"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_prefetchers_loader_counts_the_batches_trained_not_those_in_flight(background, workers):
    def make():
        loader = FastLoader(Draws(40), batch_size=4, shuffle=True, seed=3, num_workers=workers)
        return loader, DataPrefetcher(loader, device="cpu", dtype=None, background=background)

    loader, prefetcher = make()
    reference = as_lists(make()[1])
    batches = iter(prefetcher)
    trained = [next(batches) for _ in range(3)]  # the prefetcher holds 2 more
    assert as_lists(trained) == reference[:3]
    state = loader.state_dict()
    assert (state["epoch"], state["batches"]) == (0, 3)
    assert saved(state) == saved(prefetcher.state_dict())  # either one may be saved

    resumed = resume(lambda: make()[0], state)
    assert as_lists(resumed) == reference[3:]  # batch 3 next: none skipped


def test_a_pass_left_early_counts_its_trained_batches_until_the_next_epoch_starts():
    loader = FastLoader(Draws(40), batch_size=4, shuffle=True, seed=3, num_workers=0)
    prefetcher = DataPrefetcher(loader, device="cpu", dtype=None)
    for number, _ in enumerate(prefetcher):
        if number == 2:
            break
    iter(prefetcher)  # a new pass begun, its loader not yet started
    assert loader.state_dict()["batches"] == 3
    assert next(iter(prefetcher)) is not None  # the loader's next epoch under way
    state = loader.state_dict()
    assert (state["epoch"], state["batches"]) == (1, 1)


def test_a_loader_iterated_without_its_prefetcher_counts_its_own_batches():
    loader = FastLoader(Draws(40), batch_size=4, shuffle=True, seed=3, num_workers=0)
    prefetcher = DataPrefetcher(loader, device="cpu", dtype=None)
    next(iter(prefetcher))
    direct = iter(loader)  # a new epoch, with no prefetcher in between
    next(direct), next(direct)
    state = loader.state_dict()
    assert (state["epoch"], state["batches"]) == (1, 2)
