"""The batch walker: what goes in comes out with the same types, keys, order and values,
whatever the nesting (as torch's pin_memory rebuilds it), through DataPrefetcher too."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastload import DataPrefetcher
from fastload.batches import map_tensors, tensor_leaves, with_item


class Pair(NamedTuple):
    first: Any
    second: Any


@dataclasses.dataclass
class Box:
    content: Any
    label: str = "box"


@dataclasses.dataclass(frozen=True)
class Frozen:
    content: Any


class Tagged(dict):
    """A dict subclass with an attribute of its own and an __init__ that takes no items."""

    def __init__(self, tag: str) -> None:
        super().__init__()
        self.tag = tag


class Rows(list):
    """A list subclass whose __init__ takes a name, not the items."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


def tagged(items: dict) -> Tagged:
    out = Tagged("t")
    out.update(items)
    return out


def rows(items: list) -> Rows:
    out = Rows("r")
    out.extend(items)
    return out


def default_list(items: dict) -> collections.defaultdict:
    return collections.defaultdict(list, items)


leaves = st.one_of(
    st.integers(-3, 3).map(lambda n: torch.arange(n, n + 3)),
    st.floats(-1, 1, width=32).map(lambda x: torch.full((2, 2), x)),
    st.text(max_size=3),
    st.integers(),
    st.none(),
)


def containers(children: st.SearchStrategy) -> st.SearchStrategy:
    keyed = st.dictionaries(st.text(max_size=2), children, max_size=3)
    return st.one_of(
        keyed,
        keyed.map(collections.OrderedDict),
        keyed.map(default_list),
        keyed.map(lambda items: collections.defaultdict(Box, items)),
        keyed.map(tagged),
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.lists(children, max_size=3).map(rows),
        st.tuples(children, children).map(lambda pair: Pair(*pair)),
        children.map(Box),
        children.map(Frozen),
    )


batches = st.recursive(leaves, containers, max_leaves=12)


def assert_same(got: Any, want: Any) -> None:
    """``got`` is ``want`` rebuilt: the same type at every level, the same keys in the
    same order, attributes and default factories, equal tensors and other leaves."""
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and torch.equal(got, want)
    elif isinstance(want, Mapping):
        assert list(got) == list(want)
        if hasattr(want, "__dict__"):  # a subclass's own attributes
            assert vars(got) == vars(want)
        if isinstance(want, collections.defaultdict):
            assert got.default_factory is want.default_factory
        for key in want:
            assert_same(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        if hasattr(want, "__dict__"):  # a subclass's own attributes
            assert vars(got) == vars(want)
        for got_item, want_item in zip(got, want, strict=True):
            assert_same(got_item, want_item)
    elif dataclasses.is_dataclass(want):
        for field in dataclasses.fields(want):
            assert_same(getattr(got, field.name), getattr(want, field.name))
    else:
        assert got == want


@settings(max_examples=100)
@given(batch=batches)
def test_what_goes_through_the_prefetcher_comes_out_alike(batch):
    (out,) = DataPrefetcher([batch], "cpu", dtype=None)
    assert_same(out, batch)


@settings(max_examples=100)
@given(batch=batches)
def test_the_walk_rebuilds_every_level_with_each_leaf_in_its_place(batch):
    paths = [path for path, _ in tensor_leaves(batch)]
    out = map_tensors(batch, lambda path, tensor: tensor + 1)
    assert [path for path, _ in tensor_leaves(out)] == paths
    assert_same(out, map_tensors(batch, lambda path, tensor: tensor + 1))
    assert all(
        torch.equal(after, before + 1)
        for (_, after), (_, before) in zip(tensor_leaves(out), tensor_leaves(batch), strict=True)
    )


def test_a_defaultdict_keeps_its_factory_and_still_makes_missing_keys():
    batch = collections.defaultdict(list, {"image": torch.zeros(1, 3, 2, 2), "ids": [1, 2]})
    (out,) = DataPrefetcher([batch], "cpu", dtype=None)
    assert type(out) is collections.defaultdict and out.default_factory is list
    assert out["missing"] == [] and list(out) == ["image", "ids", "missing"]
    assert "missing" not in batch  # the input is not changed


def test_replacing_an_item_keeps_the_mappings_type():
    batch = collections.defaultdict(int, {"a": 1, "b": 2})
    out = with_item(batch, "a", 5)
    assert type(out) is collections.defaultdict and out.default_factory is int
    assert dict(out) == {"a": 5, "b": 2} and batch["a"] == 1
    ordered = with_item(collections.OrderedDict(b=1, a=2), "b", 3)
    assert type(ordered) is collections.OrderedDict
    assert list(ordered.items()) == [("b", 3), ("a", 2)]


class Fixed(Mapping):
    """A read-only mapping whose constructor takes no items."""

    def __init__(self) -> None:
        self._items = {"x": torch.ones(1)}

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def test_a_mapping_that_cannot_be_rebuilt_is_named_with_its_place():
    with pytest.raises(TypeError, match=r"cannot rebuild the Fixed at \['meta', 0\] of the batch"):
        map_tensors({"meta": [Fixed()]}, lambda path, tensor: tensor)


def test_a_loaders_defaultdict_batches_come_through_the_prefetcher_as_they_were_collated():
    from fastload import FastLoader

    def collate(samples: list[torch.Tensor]) -> collections.defaultdict:
        batch = collections.defaultdict(list)
        batch["x"], batch["n"] = torch.stack(samples), len(samples)
        return batch

    samples = [torch.full((3,), float(i)) for i in range(12)]
    loader = FastLoader(samples, batch_size=4, collate_fn=collate)
    out = list(DataPrefetcher(loader, "cpu", dtype=None))
    assert [type(batch) for batch in out] == [collections.defaultdict] * 3
    assert all(batch.default_factory is list and batch["n"] == 4 for batch in out)
    assert [batch["x"][:, 0].tolist() for batch in out] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 10, 11],
    ]
