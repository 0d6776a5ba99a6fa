"""Walking a batch: every tensor leaf of nested tuples, lists, namedtuples, mappings and
dataclasses, with the path of indices and keys that leads to it. The one walker of the
package: the prefetcher, the collates and the GPU modules' targets use it. Each level is
rebuilt as its own type, as torch's ``pin_memory`` rebuilds it (a ``defaultdict`` keeps
its ``default_factory``, a subclass its attributes). Which leaves are targets
(torchvision's ``tv_tensors``) it tells without importing torchvision.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import torch

__all__ = [
    "Path",
    "has_targets",
    "image_leaf_path",
    "is_target",
    "map_tensors",
    "tensor_leaves",
    "with_item",
]

Path = tuple[Any, ...]


def is_target(leaf: Any) -> bool:
    """Whether ``leaf`` is a detection or segmentation target (mask, boxes, keypoints)."""
    # torchvision not imported, no leaf can be one of its tv_tensors: importing it here
    # would load its models for batches of plain tensors (and the commands that walk them)
    tv_tensors = sys.modules.get("torchvision.tv_tensors")
    if tv_tensors is None:
        return False
    names = ("Mask", "BoundingBoxes", "KeyPoints")  # KeyPoints: torchvision >= 0.23
    return isinstance(leaf, tuple(getattr(tv_tensors, n) for n in names if hasattr(tv_tensors, n)))


def has_targets(value: Any) -> bool:
    """Whether ``value`` (a tensor, or any structure of them) holds a target."""
    if isinstance(value, torch.Tensor):
        return is_target(value)
    return any(is_target(leaf) for _, leaf in tensor_leaves(value))


def map_tensors(batch: Any, fn: Callable[[Path, torch.Tensor], Any], path: Path = ()) -> Any:
    """Rebuild ``batch`` with ``fn(path, tensor)`` in place of every tensor leaf.

    Walks tuples, lists, namedtuples, dicts (and other mappings) and dataclasses, in
    order; ``path`` is the sequence of indices and keys that leads to the leaf. Other
    leaves (strings, numbers, None) are returned as they are. Each container comes back
    as its own type (see :func:`_like`).

    Raises:
        TypeError: A container that cannot be rebuilt (a read-only mapping whose
            constructor takes no items, say), named by its path.

    Example:
        >>> map_tensors({"x": torch.ones(1), "id": "a"}, lambda p, t: p)
        {'x': ('x',), 'id': 'a'}
    """
    if isinstance(batch, torch.Tensor):
        return fn(path, batch)
    if isinstance(batch, Mapping):
        items = {key: map_tensors(value, fn, (*path, key)) for key, value in batch.items()}
        return _like(batch, items, path)
    if isinstance(batch, (list, tuple)):
        return _like(batch, [map_tensors(v, fn, (*path, i)) for i, v in enumerate(batch)], path)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        changes = {
            field.name: map_tensors(getattr(batch, field.name), fn, (*path, field.name))
            for field in dataclasses.fields(batch)
            if field.init
        }
        return dataclasses.replace(batch, **changes)
    return batch


def with_item(batch: Any, key: Any, value: Any) -> Any:
    """``batch`` with its top-level item ``key`` replaced, of the same type."""
    if isinstance(batch, Mapping):
        return _like(batch, {**batch, key: value}, ())
    items = list(batch)
    items[key] = value
    return _like(batch, items, ())


def _like(batch: Mapping[Any, Any] | list[Any] | tuple[Any, ...], items: Any, path: Path) -> Any:
    """``items`` (a dict, or a list) as a container of ``batch``'s type, rebuilt as torch's
    ``pin_memory`` does: a mutable one copied and filled (a ``defaultdict`` keeps its
    ``default_factory``, a subclass its attributes, whatever its ``__init__`` takes), a
    namedtuple from its fields, another made from the items.

    Raises:
        TypeError: A container that cannot be made from its items, named with ``path``.
    """
    if type(batch) in (dict, list):
        return items
    try:
        if isinstance(batch, (MutableMapping, list)):
            clone = copy.copy(batch)
            if isinstance(clone, list):
                clone[:] = items
            else:
                clone.update(items)
            return clone
        if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
            return type(batch)(*items)
        return type(batch)(items)  # type: ignore[call-arg]
    except TypeError as error:  # no copy, or a constructor that takes something else
        raise TypeError(
            f"cannot rebuild the {type(batch).__name__} at {list(path)} of the batch from its "
            f"items ({error}): make it a dict, a mutable mapping, a list or a tuple"
        ) from error


def image_leaf_path(batch: Any) -> Path | None:
    """Where the image most likely is: the key ``"image"`` or ``"images"`` of a dict
    batch, else the first 4-D tensor (N, C, H, W), else the first tensor at all."""
    if isinstance(batch, Mapping):
        for key in ("image", "images"):
            if isinstance(batch.get(key), torch.Tensor):
                return (key,)
    found = tensor_leaves(batch)
    # masks (N, K, H, W) are 4-D too: never the image
    images = [path for path, tensor in found if tensor.dim() == 4 and not is_target(tensor)]
    return images[0] if images else (found[0][0] if found else None)


def tensor_leaves(batch: Any) -> list[tuple[Path, torch.Tensor]]:
    """Every tensor leaf of ``batch`` with its path, in :func:`map_tensors`' order.

    Example:
        >>> tensor_leaves({"x": torch.ones(1), "y": [torch.zeros(1)]})
        [(('x',), tensor([1.])), (('y', 0), tensor([0.]))]
    """
    found: list[tuple[Path, torch.Tensor]] = []

    def visit(path: Path, tensor: torch.Tensor) -> torch.Tensor:
        found.append((path, tensor))
        return tensor

    map_tensors(batch, visit)
    return found
