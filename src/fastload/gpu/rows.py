"""Copying a batch's rows by index: the policies apply each operation to the samples that
drew it, gathered, then put back."""

from __future__ import annotations

from torch import Tensor

__all__ = ["put_rows", "take_rows"]


def take_rows(images: Tensor, rows: Tensor) -> Tensor:
    """``images[rows]`` for a 1-D index: ``index_select``, which copies whole rows where
    advanced indexing on the CPU goes element by element."""
    return images.index_select(0, rows)


def put_rows(out: Tensor, rows: Tensor, values: Tensor) -> None:
    """``out[rows] = values`` in place, for a 1-D index of distinct rows. On the CPU, a
    copy per row (advanced indexing there goes element by element, many times slower
    than copying the rows); elsewhere one indexed write."""
    if out.device.type != "cpu":
        out[rows] = values
        return
    for position, row in enumerate(rows.tolist()):
        out[row].copy_(values[position])
