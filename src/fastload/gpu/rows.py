"""A batch's samples in groups: those that drew an operation (gathered by index,
transformed, put back), and on a CPU runs of samples small enough for the cache."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor

__all__ = ["CPU_RUN_BYTES", "apply_each_drawn", "in_runs", "put_rows", "run_length", "take_rows"]

#: On a CPU, the samples an operation is applied to at once hold at most about this many
#: bytes as float32 (at least one sample): an operation's intermediates then stay in the
#: cache, where a whole batch's would stream through memory several times
#: (benchmarks/timm_loader.py's per-op table).
CPU_RUN_BYTES = 1 << 20


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


def apply_each_drawn(
    images: Tensor,
    drawn: Tensor,
    transform: Callable[[Tensor, int, Tensor], Tensor],
    *,
    owned: bool = False,
) -> Tensor:
    """Each sample through the operation it drew: ``drawn`` (N,) holds an operation's
    index per sample (-1: none), and ``transform(rows_images, index, rows)`` applies
    operation ``index`` to the samples ``rows`` that drew it, given as ``images[rows]``.

    Samples that drew the same operation are transformed together: on a GPU all of them,
    on a CPU runs of at most :data:`CPU_RUN_BYTES`. Each sample's result is its own
    (the operations are per sample), so the runs do not change it. ``images`` is left as
    it is, unless ``owned`` (the caller made it and lets it be written into).
    """
    result = None
    for index in torch.unique(drawn).tolist():
        if index < 0:
            continue
        for rows in _runs((drawn == index).nonzero().squeeze(1), images):
            changed = transform(take_rows(images, rows), index, rows)
            if result is None:
                result = images if owned else images.clone()
            put_rows(result, rows, changed.to(images.dtype))
    return images if result is None else result


def in_runs(images: Tensor, transform: Callable[[Tensor, slice], Tensor]) -> Tensor:
    """``transform(images[rows], rows)`` for a per-sample ``transform`` (``rows`` a slice,
    to take each sample's parameters with): on a GPU the whole batch at once, on a CPU
    runs of consecutive samples of at most :data:`CPU_RUN_BYTES`, put together in one
    batch laid out as ``images`` is."""
    step = run_length(images)
    if images.device.type != "cpu" or step >= len(images):
        return transform(images, slice(None))
    layout = torch.contiguous_format
    if images.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous():
        layout = torch.channels_last
    out = None
    for start in range(0, len(images), step):
        rows = slice(start, start + step)
        part = transform(images[rows], rows)
        if out is None:
            shape = (len(images), *part.shape[1:])
            out = torch.empty(shape, dtype=part.dtype, device=part.device, memory_format=layout)
        out[rows] = part
    assert out is not None  # images has a sample: the loop ran
    return out


def _runs(rows: Tensor, images: Tensor) -> Iterator[Tensor]:
    if images.device.type != "cpu":
        yield rows
        return
    yield from torch.split(rows, run_length(images))


def run_length(images: Tensor) -> int:
    """Samples of ``images`` in a run: at most :data:`CPU_RUN_BYTES` as float32."""
    if not len(images):
        return 1
    return max(1, CPU_RUN_BYTES // max(1, 4 * images[0].numel()))
