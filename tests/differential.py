"""The differential run: one generated loader configuration through DataLoader, through
FastLoader with its defaults, and through FastLoader behind a DataPrefetcher (on the
CPU), each as a training loop sees it: every batch (values, types, order), every error
at its step (the loop skips the batch and goes on), and a resume from a state saved at a
drawn step. ``tests/loader/test_differential.py`` draws the configurations; a
divergence it ever finds becomes a fixed example there.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset, TensorDataset

from fastload import DataPrefetcher, FastLoader

Pair = collections.namedtuple("Pair", ["image", "label"])
Summary = collections.namedtuple("Summary", ["labels", "count"])

SAMPLES = ("tuple", "dict", "named", "string", "ragged")
DATASETS = ("map", "getitems", "tensor", "subset", "subset_subclass", "iterable")
BATCHES = ("lists", "tuples", "generators", "refilled", "with_empty", "negative")
#: Batch samplers whose batches DataLoader's workers read too late (see loader_arguments).
READ_LATE = ("generators", "refilled")
COLLATES = ("default", "tuple", "dict", "named", "strings", "ragged", "none")

#: What a loop reads of an epoch at most (a batch sampler whose ``__len__`` lies is
#: still read to its end; none here is endless).
MOST_STEPS = 400


@dataclasses.dataclass(frozen=True)
class Config:
    """One loader configuration: the dataset, its order, the batches, the collate, the
    workers, the loop (epochs, a resume)."""

    dataset: str
    size: int
    sample: str
    failing: frozenset[int]
    replaced: bool  # the data replaced between epochs
    order: str  # "sequential", "shuffle" or "batch_sampler"
    batches: str  # the batch sampler's kind (with order "batch_sampler")
    lying_len: int  # what the batch sampler's __len__ adds to the truth
    batch_size: int
    drop_last: bool
    collate: str
    collate_later: bool  # set on the loader after construction
    workers: int | None  # None: FastLoader chooses (DataLoader's default, 0)
    persistent: bool | None  # None: each loader's default
    epochs: int
    resume_at: int | None  # the step of epoch 0 whose state_dict a new loader resumes from


# --- datasets -------------------------------------------------------------------------------


def make_sample(kind: str, value: int) -> Any:
    """Sample ``value`` of a kind: fields as image data sets have them."""
    if kind == "tuple":
        return torch.full((2,), float(value)), value
    if kind == "dict":
        return {"x": torch.tensor([value, value]), "y": value, "name": f"n{value}"}
    if kind == "named":
        return Pair(torch.full((3,), value % 256, dtype=torch.uint8), value)
    if kind == "string":
        return f"s{value}"
    return torch.arange(value % 3 + 1), value  # ragged: default_collate refuses most batches


class Samples(Dataset):
    """A map-style dataset of ``values`` (a list: negative indices read from the end);
    sample ``i`` raises where ``i`` (or its negative) is failing."""

    def __init__(self, values: list[int], kind: str, failing: frozenset[int]) -> None:
        self.values, self.kind, self.failing = values, kind, failing

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, index: int) -> Any:
        position = index % len(self.values) if index < 0 else index
        if position in self.failing:
            raise ValueError(f"bad sample {index}")  # as the sampler gave it
        return make_sample(self.kind, self.values[index])


class BatchedSamples(Samples):
    """The same, with a batched fetch of its own (``__getitems__``)."""

    def __getitems__(self, indices: list[int]) -> list[Any]:
        return [self[index] for index in indices]


class Stream(IterableDataset):
    """An iterable dataset of the same samples (a failing one ends its stream)."""

    def __init__(self, values: list[int], kind: str, failing: frozenset[int]) -> None:
        self.values, self.kind, self.failing = values, kind, failing

    def __iter__(self) -> Iterator[Any]:
        for position, value in enumerate(self.values):
            if position in self.failing:
                raise ValueError(f"bad sample {position}")
            yield make_sample(self.kind, value)


class Doubled(Subset):
    """A Subset subclass that changes its rows."""

    def __getitem__(self, index: int) -> Any:
        x, y = super().__getitem__(index)
        return x * 2, y

    def __getitems__(self, indices: list[int]) -> list[Any]:
        return [self[index] for index in indices]


def make_dataset(config: Config) -> Dataset[Any]:
    values = list(range(config.size))
    if config.dataset == "map":
        return Samples(values, config.sample, config.failing)
    if config.dataset == "getitems":
        return BatchedSamples(values, config.sample, config.failing)
    if config.dataset == "iterable":
        return Stream(values, config.sample, config.failing)
    rows = config.size + 3  # a Subset leaves rows out
    tensors = TensorDataset(torch.arange(rows * 2.0).view(rows, 2), torch.arange(rows))
    if config.dataset == "tensor":
        return TensorDataset(*(tensor[: config.size] for tensor in tensors.tensors))
    indices = [(index * 7 + 1) % rows for index in range(config.size)]
    return (Doubled if config.dataset == "subset_subclass" else Subset)(tensors, indices)


def replace_data(dataset: Any) -> None:
    """New data between epochs, as a curriculum or active learning swaps it in."""
    if isinstance(dataset, (Samples, Stream)):
        dataset.values = [value + 1000 for value in dataset.values]
    elif isinstance(dataset, TensorDataset):
        dataset.tensors = tuple(tensor + 1000 for tensor in dataset.tensors)
    elif isinstance(dataset, Subset):
        dataset.indices = list(reversed(dataset.indices))


# --- batch samplers and collates ------------------------------------------------------------


class Batches:
    """A batch sampler of fixed ``batches`` yielded as ``kind`` says, its ``__len__``
    off by ``lying``."""

    def __init__(self, batches: list[list[int]], kind: str, lying: int) -> None:
        self.batches, self.kind, self.lying = batches, kind, lying

    def __len__(self) -> int:
        return max(len(self.batches) + self.lying, 0)

    def __iter__(self) -> Iterator[Any]:
        if self.kind == "refilled":
            batch: list[int] = []
            for indices in self.batches:
                batch.clear()
                batch.extend(indices)
                yield batch
            return
        for indices in self.batches:
            if self.kind == "tuples":
                yield tuple(indices)
            elif self.kind == "generators":
                yield (index for index in indices)
            else:
                yield list(indices)


def make_batches(config: Config, order: list[int]) -> Batches:
    size = config.batch_size
    batches = [order[start : start + size] for start in range(0, len(order), size)]
    if config.drop_last and batches and len(batches[-1]) < size:
        batches.pop()
    if config.batches == "with_empty":
        batches.insert(len(batches) // 2, [])
    if config.batches == "negative":
        batches = [[index - config.size if index % 2 else index for index in b] for b in batches]
    return Batches(batches, config.batches, config.lying_len)


def label_of(sample: Any) -> Any:
    if isinstance(sample, dict):
        return sample["y"]
    if isinstance(sample, str):
        return sample
    label = sample[1]
    return label.item() if isinstance(label, torch.Tensor) else label


def tuple_collate(samples: list[Any]) -> tuple:
    return len(samples), [label_of(sample) for sample in samples]


def dict_collate(samples: list[Any]) -> dict:
    return {"labels": [label_of(sample) for sample in samples], "count": len(samples)}


def named_collate(samples: list[Any]) -> Summary:
    return Summary([label_of(sample) for sample in samples], len(samples))


def strings_collate(samples: list[Any]) -> list[str]:
    return [f"l{label_of(sample)}" for sample in samples]


def ragged_collate(samples: list[Any]) -> list[torch.Tensor]:
    return [torch.arange(hash(str(label_of(sample))) % 3 + 1) for sample in samples]


def none_collate(samples: list[Any]) -> None:
    return None


COLLATE_FUNCTIONS: dict[str, Callable[[list[Any]], Any] | None] = {
    "default": None,
    "tuple": tuple_collate,
    "dict": dict_collate,
    "named": named_collate,
    "strings": strings_collate,
    "ragged": ragged_collate,
    "none": none_collate,
}


# --- the loaders ----------------------------------------------------------------------------


def loader_arguments(config: Config, dataset: Dataset[Any], *, fast: bool) -> dict[str, Any]:
    """DataLoader's arguments for ``config``, the same for both loaders (a generator
    seeded alike, so a shuffle draws alike); a worker count FastLoader chooses is
    DataLoader's default 0."""
    arguments: dict[str, Any] = {"generator": torch.Generator().manual_seed(11)}
    if config.order == "batch_sampler":
        order = list(range(config.size))
        arguments["batch_sampler"] = make_batches(config, order)
    else:
        arguments.update(batch_size=config.batch_size, drop_last=config.drop_last)
        if config.order == "shuffle" and config.dataset != "iterable":
            arguments["shuffle"] = True
    collate = COLLATE_FUNCTIONS[config.collate]
    if collate is not None and not config.collate_later:
        arguments["collate_fn"] = collate
    workers = config.workers
    if config.batches in READ_LATE and not fast:
        # DataLoader's workers read a batch when a queue thread pickles it, later: a
        # generator never arrives (DataLoader waits for ever), a refilled list arrives
        # changed. Its batches are the ones it loads in the main process (a batch
        # sampler of fixed batches draws nothing: the workers change nothing else).
        workers = 0
    if workers is not None:
        arguments["num_workers"] = workers
    elif not fast:
        workers = 0
    if config.persistent is not None and workers:  # refused by both without workers
        arguments["persistent_workers"] = config.persistent
    return arguments


def make_loader(config: Config, *, fast: bool) -> tuple[DataLoader[Any], Dataset[Any]]:
    dataset = make_dataset(config)
    kind = FastLoader if fast else DataLoader
    loader = kind(dataset, **loader_arguments(config, dataset, fast=fast))
    if config.collate_later and COLLATE_FUNCTIONS[config.collate] is not None:
        loader.collate_fn = COLLATE_FUNCTIONS[config.collate]
    return loader, dataset


# --- what a loop sees -----------------------------------------------------------------------


def canonical(value: Any) -> Any:
    """A value as comparable plain data, its types kept (tensors by dtype, shape, values)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), value.tolist())
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.shape, value.tolist())
    if isinstance(value, dict):
        return (type(value).__name__, [(key, canonical(item)) for key, item in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [canonical(item) for item in value])
    return (type(value).__name__, value)


@dataclasses.dataclass(frozen=True)
class Step:
    """What the loop got at a step: a batch, or an error (its type, and the sample it
    names: ``bad sample N``)."""

    batch: Any = None
    error: str | None = None
    message: str = dataclasses.field(default="", compare=False)


def take(batches: Iterator[Any]) -> Step | None:
    """The loop's next step; None at the epoch's end."""
    try:
        batch = next(batches)
    except StopIteration:
        return None
    except Exception as error:  # the loop skips the batch and goes on, as training loops do
        notes = "\n".join(getattr(error, "__notes__", []))
        return Step(error=type(error).__name__, message=f"{error}\n{notes}")
    return Step(batch=canonical(batch))


def epoch(batches: Iterable[Any], steps: int = MOST_STEPS) -> list[Step]:
    """An epoch as a loop sees it (at most ``steps`` steps)."""
    iterator, seen = iter(batches), []
    while len(seen) < steps:
        step = take(iterator)
        if step is None:
            break
        seen.append(step)
    return seen


def run(config: Config, pipeline: str) -> list[list[Step]]:
    """The epochs of ``pipeline`` (``dataloader``, ``fastloader``, ``prefetcher``)."""
    try:
        loader, dataset = make_loader(config, fast=pipeline != "dataloader")
    except Exception as error:  # refused as it is built (a shuffle of no samples, say)
        return [[Step(error=f"at construction: {type(error).__name__}", message=str(error))]]
    source: Iterable[Any] = loader
    if pipeline == "prefetcher":
        source = DataPrefetcher(loader, device="cpu", dtype=None)
    epochs = []
    for number in range(config.epochs):
        if number and config.replaced:
            replace_data(dataset)
        epochs.append(epoch(source))
    return epochs


def resumed(config: Config, pipeline: str) -> tuple[list[Step], list[Step]]:
    """Epoch 0 after ``config.resume_at`` steps, as the interrupted run went on and as a
    new loader resumed from its state goes on."""
    assert config.resume_at is not None
    loader, _ = make_loader(config, fast=True)
    source: Any = (
        DataPrefetcher(loader, device="cpu", dtype=None) if pipeline == "prefetcher" else loader
    )
    batches = iter(source)
    for _ in range(config.resume_at):
        take(batches)
    state = source.state_dict()
    rest = epoch(batches)
    again_loader, _ = make_loader(config, fast=True)
    again: Any = again_loader
    if pipeline == "prefetcher":
        again = DataPrefetcher(again_loader, device="cpu", dtype=None)
    again.load_state_dict(state)
    return rest, epoch(again)


def differences(ours: list[list[Step]], theirs: list[list[Step]]) -> list[str]:
    """Where two runs differ: each epoch's steps (batches by value, errors by type and
    sample)."""
    found = []
    for number, (mine, other) in enumerate(itertools.zip_longest(ours, theirs, fillvalue=[])):
        if len(mine) != len(other):
            found.append(f"epoch {number}: {len(mine)} steps, DataLoader {len(other)}")
        for step, (a, b) in enumerate(zip(mine, other, strict=False)):  # lengths told apart above
            if (a.batch, a.error) != (b.batch, b.error):
                found.append(f"epoch {number} step {step}: {a} != {b}")
                break
    return found


def unnamed_failures(steps: list[list[Step]]) -> list[str]:
    """FastLoader's errors of a failing sample that do not name it (``bad sample N``
    must come with ``index N``, or ``N`` among the batch's ``indices [...]``)."""
    missing = []
    for step in itertools.chain.from_iterable(steps):
        failed = re.findall(r"bad sample (-?\d+)", step.message)
        if step.error != "ValueError" or not failed:
            continue
        number = failed[-1]
        # a batched fetch (__getitems__) names its batch, past 8 indices shortened
        own = rf"(?<![\d-]){number}\b"  # the number itself, not a longer one ending so
        named = rf"loading dataset (index {own}|indices \[[^\]]*({own}|\.\.\.))"
        if re.search(named, step.message) is None:
            missing.append(step.message)
    return missing


# --- the configurations ---------------------------------------------------------------------


@st.composite
def configs(draw: st.DrawFn, *, workers: tuple[int | None, ...]) -> Config:
    dataset = draw(st.sampled_from(DATASETS))
    size = draw(st.integers(0, 60))
    in_memory = dataset in ("tensor", "subset", "subset_subclass")
    sample = "tuple" if in_memory else draw(st.sampled_from(SAMPLES))
    failing = frozenset()
    if not in_memory and size and draw(st.booleans()):
        failing = frozenset(draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=3)))
    order = (
        "sequential"
        if dataset == "iterable"
        else draw(st.sampled_from(("sequential", "shuffle", "batch_sampler")))
    )
    batches = draw(st.sampled_from(BATCHES)) if order == "batch_sampler" else "lists"
    lying = draw(st.sampled_from((0, 0, 0, 2, -2))) if order == "batch_sampler" else 0
    worker_count = draw(st.sampled_from(workers))
    epochs = draw(st.integers(1, 2))
    resume_at = None
    if dataset != "iterable" and lying == 0 and size and draw(st.booleans()):
        resume_at = draw(st.integers(0, 4))
    return Config(
        dataset=dataset,
        size=size,
        sample=sample,
        failing=failing,
        replaced=epochs > 1 and draw(st.booleans()),
        order=order,
        batches=batches,
        lying_len=lying,
        batch_size=draw(st.integers(1, 70)),
        drop_last=draw(st.booleans()),
        collate=draw(st.sampled_from(COLLATES)),
        collate_later=draw(st.booleans()),
        workers=worker_count,
        # kept workers see no data replaced, which DataLoader without workers would
        persistent=draw(
            st.sampled_from((None, False) if batches in READ_LATE else (None, True, False))
        ),
        epochs=epochs,
        resume_at=resume_at,
    )
