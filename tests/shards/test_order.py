"""ShardShuffle's groups: every sample once an epoch but the final incomplete global batch,
the same global batches for any world size, each node's ranks within their group's shards
but in a short tail, one group the order of before, and a FastLoader state that resumes
on another world size."""

from __future__ import annotations

import bisect
import itertools
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fastload import FastLoader, make_image_folder
from fastload.seeds import splitmix64
from fastload.shards import ShardedDataset, ShardShuffle, write_shards


class StandIn:
    """What ShardShuffle reads of a ShardedDataset, without files: shards of ``sizes``
    samples, in index order."""

    transport = None  # a local folder

    def __init__(self, sizes: list[int]) -> None:
        self.meta = {"shards_sha256": "0" * 64}  # what names the shard set
        self.starts = list(itertools.accumulate(sizes, initial=0))
        self.shards = list(range(len(sizes)))  # only their number is read

    def __len__(self) -> int:
        return self.starts[-1]

    def shard_range(self, shard: int) -> range:
        return range(self.starts[shard], self.starts[shard + 1])

    def shard_of(self, index: int) -> int:
        return bisect.bisect_right(self.starts, index) - 1


def order_before_groups(dataset: StandIn, seed: int, window: int, epoch: int) -> list[int]:
    """``ShardShuffle.global_order`` as it was before ``groups`` (commit a56dca8), copied."""
    key = splitmix64(splitmix64(seed) ^ epoch) & (2**63 - 1)
    generator = torch.Generator().manual_seed(key)
    shards = torch.randperm(len(dataset.shards), generator=generator).tolist()
    order: list[int] = []
    for first in range(0, len(shards), window):
        indices = [
            index
            for shard in shards[first : first + window]
            for index in dataset.shard_range(shard)
        ]
        shuffled = torch.randperm(len(indices), generator=generator).tolist()
        order.extend(indices[i] for i in shuffled)
    return order


def sampler(dataset, **options) -> ShardShuffle:
    return ShardShuffle(dataset, **{"seed": 3, "window": 2, **options})


def global_batches(dataset, world: int, epoch: int = 0, **options) -> list[list[int]]:
    """The global batches the ``world`` ranks read, each the ranks' slices side by side."""
    ranks = []
    for rank in range(world):
        mine = sampler(dataset, rank=rank, world_size=world, **options)
        mine.set_epoch(epoch)
        ranks.append(list(mine))
    share = options["global_batch_size"] // world
    return [
        list(itertools.chain(*(order[first : first + share] for order in ranks)))
        for first in range(0, len(ranks[0]), share)
    ]


# 128 samples in 20 shards: 8 global batches of 16, none left out; in epoch 0, the groups'
# samples differ (63 and 65 with 2 groups, 31 to 34 with 4). With 129, one is left out.
SIZES = [7, 5, 9, 3, 8, 6, 7, 4, 9, 5, 6, 8, 2, 7, 9, 6, 5, 8, 3, 11]
ONE_MORE = [*SIZES[:-1], 12]


@pytest.mark.parametrize("sizes", [SIZES, ONE_MORE])
@pytest.mark.parametrize("groups", [2, 4])
def test_the_global_batches_are_the_same_for_any_world_size(groups: int, sizes: list[int]):
    dataset = StandIn(sizes)
    for epoch in range(2):
        whole = sampler(dataset, global_batch_size=16, groups=groups).global_order(epoch)
        expected = [whole[first : first + 16] for first in range(0, 128, 16)]
        for world in (1, 2, 4, 8):
            batches = global_batches(dataset, world, epoch, global_batch_size=16, groups=groups)
            assert batches == expected, (world, epoch)
    one, other = (sampler(dataset, global_batch_size=16, groups=groups).global_order(epoch)
                  for epoch in (0, 1))  # fmt: skip
    assert one != other


@pytest.mark.parametrize("sizes", [SIZES, ONE_MORE])
@pytest.mark.parametrize("groups, worlds", [(2, (2, 4, 8)), (4, (4, 8))])
def test_each_rank_reads_its_groups_shards_but_in_a_short_tail(groups: int, worlds, sizes):
    dataset = StandIn(sizes)
    share = 16 // groups
    mine = sampler(dataset, global_batch_size=16, groups=groups)
    owner = {shard: group for group, shards in enumerate(mine.shard_groups()) for shard in shards}
    largest = max(sizes)
    for world in worlds:
        batches = global_batches(dataset, world, global_batch_size=16, groups=groups)
        per_rank = 16 // world
        foreign = [
            (step, rank)
            for step, batch in enumerate(batches)
            for rank in range(world)
            for index in batch[rank * per_rank : (rank + 1) * per_rank]
            if owner[dataset.shard_of(index)] != rank * groups // world
        ]
        assert foreign, "the groups of these sizes differ: some ranks read across groups"
        # the groups' sizes differ by a shard at most: the samples read across groups
        # are fewer than groups - 1 shards' and lie in the last global batches
        assert len(foreign) <= (groups - 1) * largest
        tail = math.ceil(largest / share) + 1
        assert min(step for step, _ in foreign) >= len(batches) - tail, world


@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=14),
    window=st.integers(1, 5),
    groups=st.integers(1, 4),
    per_group=st.integers(1, 6),
    seed=st.integers(0, 2**32),
)
def test_every_sample_is_read_once_but_the_final_incomplete_global_batch(
    sizes, window, groups, per_group, seed
):
    dataset = StandIn(sizes)
    options = {"global_batch_size": groups * per_group, "seed": seed, "window": window,
               "groups": groups}  # fmt: skip
    order = sampler(dataset, **options).global_order(epoch=1)
    assert sorted(order) == list(range(len(dataset)))
    read = len(dataset) // (groups * per_group) * (groups * per_group)
    for size in {1, groups, groups * per_group}:
        batches = global_batches(dataset, size, epoch=1, **options)
        assert len(sampler(dataset, world_size=size, rank=0, **options)) * size == read
        assert list(itertools.chain(*batches)) == order[:read]  # the last partial one left out


@given(
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=30),
    window=st.integers(1, 5),
    groups=st.integers(2, 5),
    share=st.integers(1, 6),
    seed=st.integers(0, 2**32),
)
def test_each_group_fills_its_slots_but_for_what_it_lacks(sizes, window, groups, share, seed):
    dataset = StandIn(sizes)
    mine = ShardShuffle(dataset, global_batch_size=groups * share, seed=seed, window=window,
                        groups=groups)  # fmt: skip
    dealt = mine.shard_groups()
    owner = {shard: group for group, shards in enumerate(dealt) for shard in shards}
    order = mine.global_order()
    steps = len(dataset) // (groups * share)
    # slot number n: group n % groups's part of global batch n // groups
    slots = [order[n * share : (n + 1) * share] for n in range(steps * groups)]
    foreign = [(number // groups, index) for number, slot in enumerate(slots) for index in slot
               if owner[dataset.shard_of(index)] != number % groups]  # fmt: skip
    lacking = [max(steps * share - sum(sizes[s] for s in shards), 0) for shards in dealt]
    assert len(foreign) == sum(lacking)  # a group's slots hold its own samples but these
    if foreign:  # in the last global batches
        assert min(step for step, _ in foreign) >= steps - math.ceil(max(lacking) / share) - 1


@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=14),
    window=st.integers(1, 16),
    batch=st.integers(1, 12),
    seed=st.integers(0, 2**32),
)
def test_one_group_is_the_order_of_before(sizes, window, batch, seed):
    dataset = StandIn(sizes)
    order = ShardShuffle(dataset, global_batch_size=batch, seed=seed, window=window)
    assert order.global_order(epoch=2) == order_before_groups(dataset, seed, window, epoch=2)


def test_the_groups_hold_every_shard_once_with_about_equal_samples():
    dataset = StandIn(SIZES)
    for groups in (1, 3, 4, 20):
        dealt = sampler(dataset, global_batch_size=60, groups=groups).shard_groups()
        assert len(dealt) == groups
        assert sorted(itertools.chain(*dealt)) == list(range(len(SIZES)))
        samples = [sum(SIZES[shard] for shard in group) for group in dealt]
        assert max(samples) - min(samples) <= max(SIZES)
    first, second = (sampler(dataset, global_batch_size=4, groups=4).shard_groups(epoch)
                     for epoch in (0, 1))  # fmt: skip
    assert first != second  # dealt anew each epoch


def test_more_groups_than_shards_still_reads_every_sample_once():
    dataset = StandIn([5, 6])
    order = sampler(dataset, global_batch_size=4, groups=4).global_order()
    assert sorted(order) == list(range(11))


def test_refusals_name_the_arguments():
    dataset = StandIn(SIZES)
    with pytest.raises(ValueError, match="global_batch_size 6 is not a multiple of groups 4"):
        ShardShuffle(dataset, global_batch_size=6, groups=4)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match=rf"groups must be an int >= 1, got {bad!r}"):
            ShardShuffle(dataset, global_batch_size=6, groups=bad)


def test_the_order_identity_names_what_the_batches_depend_on():
    mine = ShardShuffle(StandIn(SIZES), global_batch_size=8, seed=4, window=3, groups=2)
    expected = {"global_batch_size": 8, "seed": 4, "window": 3, "groups": 2,
                "shard_set": "0" * 64, "drop_last": 1}  # fmt: skip
    assert mine.order_identity() == expected


# --- through FastLoader ----------------------------------------------------------------


class Indexed(ShardedDataset):
    """Each sample as its index, and a random draw from torch's generator (seeded by
    FastLoader's ``seed=`` per sample)."""

    def __getitem__(self, index):
        return index, torch.rand(())


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """72 samples in 6 shards: 6 global batches of 12 an epoch."""
    images = make_image_folder(
        tmp_path_factory.mktemp("images"), num_classes=3, images_per_class=24, size=(32, 24)
    )
    folder = tmp_path_factory.mktemp("shards")
    write_shards(images, folder, shard_size=12_000)
    return folder


def world(shards: Path, size: int, state=None, **options) -> list[FastLoader]:
    """One FastLoader per rank of a world of ``size``, each resumed from ``state``."""
    options = {"seed": 5, "window": 2, "groups": 2, **options}
    loaders = []
    for rank in range(size):
        dataset = Indexed(shards)
        order = ShardShuffle(dataset, global_batch_size=12, rank=rank, world_size=size,
                             **options)  # fmt: skip
        loader = FastLoader(dataset, batch_size=12 // size, sampler=order, seed=9,
                            num_workers=0)  # fmt: skip
        if state is not None:
            loader.load_state_dict(state)
        loaders.append(loader)
    return loaders


def take(loaders, count: int | None = None) -> list[list[tuple[int, float]]]:
    """The next ``count`` global batches (all, without a count): the ranks' slices side
    by side, each sample as (index, its random draw)."""
    batches = []
    for parts in zip(*(iter(loader) for loader in loaders), strict=True):
        batches.append([(int(i), float(x)) for index, draw in parts
                        for i, x in zip(index, draw, strict=True)])  # fmt: skip
        if len(batches) == count:
            break
    return batches


def test_a_state_with_groups_resumes_on_another_world_size(shards):
    whole = take(world(shards, 1))
    assert len(whole) == 6 and sorted(i for b in whole for i, _ in b) == list(range(72))
    for before, after in [(4, 2), (2, 6)]:
        loaders = world(shards, before)
        assert take(loaders, count=2) == whole[:2]
        resumed = take(world(shards, after, loaders[0].state_dict()))
        assert resumed == whole[2:], (before, after)  # same samples, order and draws


@pytest.mark.parametrize("other", [{"groups": 1}, {"window": 3}, {"seed": 6}])
def test_a_state_from_another_order_is_refused(shards, other):
    loaders = world(shards, 2)
    take(loaders, count=1)
    with pytest.raises(ValueError, match=next(iter(other))):
        world(shards, 2, loaders[0].state_dict(), **other)


class Sized:
    """A data set of ``count`` shards of ``size`` bytes, local or in a cache of ``limit``."""

    def __init__(self, count: int, size: int, remote: bool, limit: int | None = None) -> None:
        from types import SimpleNamespace

        self.shards = [SimpleNamespace(size=size, samples=[None]) for _ in range(count)]
        self.transport = SimpleNamespace(cache_limit=limit) if remote else None
        self.download_depth, self.download_ahead_bytes = 8, None


@pytest.mark.parametrize(
    ("dataset", "groups", "window"),
    [
        (Sized(500, 1 << 28, remote=False), 1, 64),  # a folder: 64 shards open at once
        (Sized(40, 1 << 28, remote=False), 1, 40),  # no wider than the shards
        (Sized(500, 1 << 28, remote=False), 8, 63),  # nor than a group's (ceil(500 / 8))
        (Sized(500, 1 << 28, remote=True), 1, 16),  # a bucket
        (Sized(500, 1 << 28, remote=True, limit=1 << 28), 1, 16),  # a node's limit: no say
    ],
)
def test_the_default_window_depends_on_the_data_set_only(dataset, groups, window):
    from fastload.shards.order import default_window

    assert default_window(dataset, groups) == window


def test_a_cache_that_cannot_hold_the_window_is_warned_of():
    dataset = Sized(500, 1 << 28, remote=True, limit=12 << 28)
    dataset.shard_range = lambda shard: range(shard, shard + 1)
    with pytest.warns(UserWarning, match=r"holds fewer than window 16 \+ download_ahead 8 shards"):
        ShardShuffle(dataset, global_batch_size=4)


@pytest.mark.parametrize("world_size", [1, 2])
def test_the_final_incomplete_global_batch_is_dropped_or_filled_as_chosen(world_size):
    dataset = StandIn([7, 7, 4])  # 18 samples, global batches of 8: 2 full, 2 left over
    orders = {}
    for drop_last in (True, False):
        ranks = [ShardShuffle(dataset, global_batch_size=8, seed=3, window=2, rank=rank,
                              world_size=world_size, drop_last=drop_last)
                 for rank in range(world_size)]  # fmt: skip
        read = [index for sampler in ranks for index in sampler]
        assert [len(sampler) for sampler in ranks] == [len(list(s)) for s in ranks]
        orders[drop_last] = read
        assert "drop_last=" + str(drop_last) in repr(ranks[0])
    assert len(orders[True]) == 16 and len(set(orders[True])) == 16
    assert len(orders[False]) == 24 and set(orders[False]) == set(range(18))
    assert sorted(orders[False]) != sorted(set(orders[False]))  # 6 read twice, as padding
