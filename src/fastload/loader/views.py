"""What DataLoader reads for a FastLoader: the user's dataset, or a view over it (the
in-memory tensors' batched fetch, or the keyed wrapper of ``seed=``), with the collate
that goes with it; and back to the user's own arguments where a FastLoader is made
again from another's attributes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.data import Dataset

from fastload.loader.defaults import choose_fetch
from fastload.loader.fetch import DatasetView, passthrough_collate, tensor_source
from fastload.loader.seeding import SeededSamples
from fastload.loader.workers import WorkerInit

__all__ = ["as_given", "collate_set", "data_view", "fetches_rows"]


def as_given(
    dataset: Dataset[Any],
    collate_fn: Callable[[list[Any]], Any] | None,
    worker_init_fn: Callable[[int], None] | None,
) -> tuple[Dataset[Any], Callable[[list[Any]], Any] | None, Callable[[int], None] | None]:
    """The user's own arguments where a FastLoader is re-created from another's attributes
    (as Lightning does): its dataset, collate and worker_init_fn unwrapped."""
    if isinstance(dataset, (DatasetView, SeededSamples)):
        dataset = dataset.dataset
    if collate_fn is passthrough_collate:
        collate_fn = None
    if isinstance(worker_init_fn, WorkerInit):
        worker_init_fn = worker_init_fn.user_fn
    return dataset, collate_fn, worker_init_fn


def data_view(
    dataset: Dataset[Any],
    collate_fn: Callable[[list[Any]], Any] | None,
    *,
    iterable: bool,
    seed: int | None,
    collates: bool,
) -> tuple[Dataset[Any], Callable[[list[Any]], Any] | None, bool, bool]:
    """What DataLoader reads, and with which collate: in-memory tensors through the
    batched fetch's view, a seeded dataset through the keyed wrapper, else the dataset;
    and whether each of the two applies."""
    in_memory, keyed = choose_fetch(
        iterable=iterable,
        tensor_dataset=tensor_source(dataset) is not None,
        collate_fn_given=collate_fn is not None,
        collates=collates,
        seeded=seed is not None,
    )
    if in_memory:
        return DatasetView(dataset), passthrough_collate, in_memory, keyed
    if keyed:
        return SeededSamples(dataset, seed), collate_fn, in_memory, keyed  # type: ignore[arg-type]
    return dataset, collate_fn, in_memory, keyed


def collate_set(view: Dataset[Any], collate_fn: Any, choices: dict[str, str]) -> None:
    """A loader's ``collate_fn`` set after construction (DataLoader allows it): the
    batched tensor fetch, which collates for itself, then hands the new one the samples
    (``choices`` says so)."""
    if not isinstance(view, DatasetView):
        return
    view.collates = collate_fn is passthrough_collate
    if not view.collates:
        choices["fetch"] = "collate_fn set after construction: each sample as DataLoader fetches it"


def fetches_rows(view: Dataset[Any]) -> bool:
    """Whether the loader reading ``view`` fetches in-memory tensors by rows."""
    return isinstance(view, DatasetView) and view.collates
