"""A shard conversion spread over a Ray cluster (``pip install '.[ray]'``).

The samples are cut into contiguous parts; one Ray task writes a part as whole shards
(``shard-PPPPP-NNNN.tar``) straight into the destination, a folder every worker
reaches or a bucket, and returns their index entries. This process records each
finished part in the conversion's progress and writes the index after the last, in
part order, so the shard set reads as the same samples in the same order as a
conversion in one process. A worker that dies has its task run again by Ray (its
shards are rewritten under the same names); a driver killed with ``kill -9`` resumes
with ``resume=True``, re-running only the parts not recorded.
"""

from __future__ import annotations

import itertools
from typing import Any

from fastload.records.format import RESUME
from fastload.records.sources import Encoding, Source
from fastload.shards.writing.destination import Destination, destination, part_shard_name
from fastload.shards.writing.tar import write_range

__all__ = ["convert_on_ray", "split"]

Entries = tuple[list[dict[str, Any]], list[list[str]]]


def split(samples: int, parts: int) -> list[list[int]]:
    """``[start, stop]`` of ``parts`` contiguous ranges covering ``samples``, sizes
    differing by one at most (fewer parts than asked when there are fewer samples).

    Example:
        >>> split(10, 3)
        [[0, 3], [3, 6], [6, 10]]
    """
    parts = max(1, min(parts, samples))
    edges = [samples * part // parts for part in range(parts + 1)]
    return [[start, stop] for start, stop in itertools.pairwise(edges)]


def convert_on_ray(
    items: Source,
    target: Destination,
    progress: dict[str, Any],
    *,
    encoding: Encoding,
    shard_size: int,
    skip_bad: bool,
    parts: int | None,
    options: dict[str, Any] | None,
) -> Entries:
    """The shards of ``items`` written by Ray tasks into ``target``; returns their index
    entries in sample order and the samples skipped."""
    try:
        import ray
    except ImportError:
        raise ImportError("ray=True (--ray) needs Ray: pip install '.[ray]'") from None
    if "next" in progress:
        raise ValueError(f"{target}: the unfinished conversion ran in one process: resume it "
                         "without ray")  # fmt: skip
    started_here = not ray.is_initialized()
    if started_here:  # RAY_ADDRESS's cluster, or a local one
        ray.init(log_to_driver=False, configure_logging=False)
    try:
        if "parts" not in progress:
            cpus = int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]  # Ray leaves it unannotated
            progress = {**progress, "parts": split(len(items), parts or 4 * cpus), "done": {}}
            target.save_progress(progress)  # the partition, for a resume
        return _run(ray, items, target, progress, encoding, shard_size, skip_bad, options)
    finally:
        if started_here:
            ray.shutdown()


def _run(
    ray: Any,
    items: Source,
    target: Destination,
    progress: dict[str, Any],
    encoding: Encoding,
    shard_size: int,
    skip_bad: bool,
    options: dict[str, Any] | None,
) -> Entries:
    spans, done = progress["parts"], progress["done"]
    task = ray.remote(write_part)
    shared = ray.put(items)
    pending = {
        task.remote(shared, span, str(target), options, number, encoding, shard_size, skip_bad):
            number
        for number, span in enumerate(spans)
        if str(number) not in done
    }  # fmt: skip
    try:
        while pending:
            [ready], _ = ray.wait(list(pending), num_returns=1)
            number = pending.pop(ready)
            try:
                shards, skipped = ray.get(ready)
            except ray.exceptions.RayTaskError as error:  # the worker's own exception
                cause = error.cause if isinstance(error.cause, Exception) else error
                raise cause from None
            except ray.exceptions.RayError as error:  # its worker died, retries spent
                first, stop = spans[number]
                raise RuntimeError(
                    f"{target}: part {number} (samples {first}-{stop}): its Ray worker died "
                    f"as often as Ray retries a task ({type(error).__name__}); {RESUME} "
                    "runs the unfinished parts again"
                ) from None
            done[str(number)] = {"shards": shards, "skipped": skipped}
            target.save_progress(progress)
    finally:
        for reference in pending:
            ray.cancel(reference)
    target.clear_unfinished()  # what attempts whose workers died left half-written
    ordered = [done[str(number)] for number in range(len(spans))]
    return (
        [entry for part in ordered for entry in part["shards"]],
        [bad for part in ordered for bad in part["skipped"]],
    )


def write_part(
    items: Source,
    span: list[int],
    where: str,
    options: dict[str, Any] | None,
    number: int,
    encoding: Encoding,
    shard_size: int,
    skip_bad: bool,
) -> Entries:
    """One Ray task: samples ``span`` of ``items`` as shards ``shard-{number}-*.tar``."""
    target = destination(where, options)
    shards: list[dict[str, Any]] = []
    skipped: list[list[str]] = []

    def finished(entry: dict[str, Any], _position: int, bad: list[list[str]]) -> None:
        shards.append(entry)
        skipped.extend(bad)

    names = (part_shard_name(number, count) for count in itertools.count())
    try:
        rest = write_range(items, span[0], span[1], target, names, encoding=encoding,
                           shard_size=shard_size, skip_bad=skip_bad, on_shard=finished)  # fmt: skip
    finally:
        target.close()
    return shards, skipped + rest
