"""What runs in each worker process: its start-up, and the check that a batch can leave it."""

from __future__ import annotations

import io
import multiprocessing as mp
import random
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from fastload.loader.errors import name_failures

__all__ = [
    "SendableBatch",
    "UnsendableBatchError",
    "WorkerInit",
    "dataset_fingerprint",
    "unsendable_reason",
    "workers_refusal",
]


class WorkerInit:
    """Worker start-up: seed ``random`` and NumPy from torch's per-worker seed, keep
    OpenCV and torch to one thread each (the workers already are the parallelism), have
    a failing sample named on its exception, then call the user's ``worker_init_fn``.

    torch's worker seed is ``base_seed + worker_id`` with ``base_seed`` drawn from the
    loader's ``generator`` at every epoch, so streams differ across workers and epochs
    and a seeded generator reproduces them. A class rather than a closure so that it
    pickles for the ``spawn`` start method.
    """

    def __init__(self, user_fn: Callable[[int], None] | None = None) -> None:
        self.user_fn = user_fn

    def __call__(self, worker_id: int) -> None:
        name_failures()
        info = get_worker_info()
        seed = info.seed if info is not None else torch.initial_seed()
        random.seed(seed)
        np.random.seed(np.random.SeedSequence(seed).generate_state(1))
        torch.set_num_threads(1)
        import cv2  # late: the main process may never need OpenCV

        cv2.setNumThreads(0)
        if self.user_fn is not None:
            self.user_fn(worker_id)

    def __repr__(self) -> str:
        return f"WorkerInit(user_fn={self.user_fn!r})"


class _StructurePickler(ForkingPickler):
    """Pickles a batch the way a worker sends it, minus the tensor and array data."""

    def persistent_id(self, obj: Any) -> str | None:
        return "data" if isinstance(obj, (torch.Tensor, np.ndarray)) else None


class UnsendableBatchError(TypeError):
    """A batch a worker cannot pickle, so it could never reach the main process."""


class SendableBatch:
    """A worker's collate function that checks the batch can be sent to the main process.

    A batch that cannot be pickled (say a namedtuple defined inside a function) is lost
    by the worker's queue thread, and DataLoader then waits for it forever; this raises
    in the worker instead, where DataLoader hands the error to the training loop.
    """

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, samples: Any) -> Any:
        batch = self.collate_fn(samples)
        try:
            _StructurePickler(io.BytesIO()).dump(batch)
        except Exception as error:  # PicklingError, TypeError, AttributeError: all mean lost
            raise UnsendableBatchError(
                f"a worker cannot send its batch ({type(batch).__name__}) to the main process: "
                f"{error}; a type defined inside a function (a local namedtuple or class) "
                "cannot be pickled: define it at module level"
            ) from None
        return batch


def workers_refusal(loader: DataLoader[Any]) -> tuple[str, str] | None:
    """Why ``loader``'s workers could never work (what its ``choices`` say, and the
    warning), where FastLoader chose to have them: a batch that cannot be sent from a
    worker, or, where the start method pickles what each worker gets (spawn,
    forkserver), a dataset, collate or worker start-up that cannot be pickled. None where
    they can work, or where that cannot be told."""
    reason = unsendable_reason(loader.dataset, loader.collate_fn, loader._auto_collation)
    if reason is not None:
        return "batches cannot be sent from a worker", reason
    context = loader.multiprocessing_context
    method = context.get_start_method() if context is not None else mp.get_start_method()
    if method == "fork":
        return None
    given = (loader.dataset, loader.collate_fn, loader.worker_init_fn)
    try:
        _StructurePickler(io.BytesIO()).dump(given)
    except Exception as error:  # PicklingError, AttributeError, TypeError: all mean no start
        return f"the {method} start method cannot start a worker", (
            f"the {method} start method pickles the dataset, collate_fn and worker_init_fn "
            f"for each worker, and they cannot be pickled ({error}): a class or function "
            "defined inside a function cannot be; define it at module level"
        )
    return None


def unsendable_reason(
    dataset: Any, collate_fn: Callable[[Any], Any], auto_collation: bool
) -> str | None:
    """Why a batch of the first sample could not travel from a worker (a class defined
    in a function, say), or None when it can or cannot be told. DataLoader, with no
    workers by default, never has to send it."""
    try:
        sample = dataset[0]
        SendableBatch(collate_fn)([sample] if auto_collation else sample)
    except UnsendableBatchError as error:
        return str(error)
    except Exception:  # an empty or failing dataset: its own error comes in the loop
        return None
    return None


def dataset_fingerprint(dataset: Any) -> tuple[Any, ...]:
    """What a dataset's workers were given, as far as a look that costs no copy tells:
    the dataset's attributes, each by its object and its length (or shape), and the same
    of each dataset it holds (alone, or in a list as ``ConcatDataset`` holds them). An
    attribute given a new object (``subset.indices = ...``, ``dataset.samples = ...``) or
    grown or cut in place changes it; values written in place over the same length do
    not."""
    seen: set[int] = set()

    def look(value: Any, depth: int) -> tuple[Any, ...]:
        if id(value) in seen or depth > 3:
            return (id(value),)
        seen.add(id(value))
        fields = []
        for name, item in sorted(getattr(value, "__dict__", {}).items()):
            try:
                size: Any = getattr(item, "shape", None)
                size = len(item) if size is None else tuple(size)
            except Exception:  # no length (or a closed file's): its object is all there is
                size = None
            inner: tuple[Any, ...] = ()
            if isinstance(item, Dataset):
                inner = look(item, depth + 1)
            elif isinstance(item, (list, tuple)) and item and isinstance(item[0], Dataset):
                inner = tuple(look(part, depth + 1) for part in item)
            fields.append((name, id(item), size, inner))
        return (type(value), id(value), tuple(fields))

    return look(dataset, 0)
