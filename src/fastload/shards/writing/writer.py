"""Writing a shard set: samples as tar shards (:mod:`fastload.shards.writing.tar`) of about
``shard_size`` bytes, here or on Ray workers, the index last.

A shard is written to a temporary name and put into the destination when complete
(:mod:`fastload.shards.writing.destination`); the progress lists the finished ones, so
``resume=True`` after an interruption (even ``kill -9``) keeps them and goes on from the
first unfinished sample, re-encoding nothing finished.
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Unpack

from fastload._checks import check_int
from fastload.records.captions import captioned_source
from fastload.records.conversion import Conversion, SourceOptions, require_samples
from fastload.records.format import RESUME
from fastload.records.sources import Encoding, Source
from fastload.shards.format.index import INDEX, VERSION
from fastload.shards.writing.destination import Destination, destination, shard_name
from fastload.shards.writing.tar import write_range

__all__ = ["write_shards"]


def write_shards(
    source: Any,
    destination: str | os.PathLike[str],
    *,
    shard_size: int = 256 << 20,
    storage_options: dict[str, Any] | None = None,
    ray: bool = False,
    parts: int | None = None,
    captions: bool = False,
    **options: Unpack[SourceOptions],
) -> dict[str, Any]:
    """Write ``source`` (an image folder, a list of ``(path, label)``, any Dataset, a COCO
    folder with ``annotations``, a segmentation folder with ``masks``: what
    :func:`fastload.write_lmdb` reads) as tar shards into the folder ``destination``, or
    to ``s3://bucket/prefix`` (each shard uploaded when complete, the index last; the AWS
    variables and ``storage_options`` configure the client);
    ``options`` are :func:`fastload.write_lmdb`'s
    (:class:`~fastload.records.conversion.SourceOptions`: ``resume``, ``skip_bad``,
    ``resize``, ``quality``, ``annotations``, ``instance_masks``, ``masks``).

    ``captions=True``: image-text pairs, each sample's caption a ``txt`` member beside
    its image (:func:`~fastload.records.captions.captioned_source`: a folder where
    ``cat.jpg`` has ``cat.txt`` beside it, or a ``.csv``/``.jsonl`` of path and caption);
    read back with ``ShardedDataset(..., keys=("jpg", "txt"))``.

    ``ray=True`` spreads the conversion over a Ray cluster (``ray.init()``'s: the one
    ``RAY_ADDRESS`` names, or a local one): ``parts`` contiguous ranges of samples
    (default: four per CPU of the cluster), each written as whole shards by one task,
    the index committed by this process after all. The source must be readable by
    every worker (a shared folder, a bucket, a Dataset that pickles).

    Returns the index's metadata, and under ``shards`` how many shards it has. Raises
    ``FileExistsError`` for a destination that holds a shard set or a conversion in
    progress (pass ``resume=True`` for the latter: finished shards are kept, neither
    re-encoded nor re-uploaded), or, for a new conversion, a file under a name it writes
    (``shard-000000.tar``, ...: never replaced), before any work.

    Example:
        >>> from fastload.testing.shapes import ShapesDetection
        >>> import tempfile
        >>> meta = write_shards(ShapesDetection(3, size=(32, 32)), tempfile.mkdtemp())
        >>> meta["samples"], meta["shards"], meta["fields"]
        (3, 1, ['boxes', 'labels', 'masks'])
    """
    conversion = Conversion.of(options, "write_shards")
    if shard_size < 1:
        raise ValueError(f"shard_size must be positive, got {shard_size}")
    if parts is not None and not ray:
        raise ValueError("parts: the parts are Ray's (ray=True)")
    if parts is not None:
        check_int(parts, "parts", low=1)
    target, found = _destination(destination, storage_options)
    try:
        if captions and (conversion.annotations or conversion.masks) is not None:
            raise ValueError("captions are image-text pairs: give no annotations or masks")
        items = require_samples(
            captioned_source(source) if captions
            else conversion.source(source)
        )  # fmt: skip
        encoding = conversion.encoding
        # the index version too: a conversion begun before the tables went inside the
        # shards wrote shards without them, and is not finished as if they held them
        what = {"description": items.description, "samples": len(items),
                "resize": encoding.resize, "quality": encoding.quality,
                "shard_size": shard_size, "index_version": VERSION}  # fmt: skip
        progress = _progress(target, found, what, conversion.resume)
        if ray:
            from fastload.shards.writing.on_ray import convert_on_ray

            shards, skipped = convert_on_ray(
                items, target, progress, encoding=encoding, shard_size=shard_size,
                skip_bad=conversion.skip_bad, parts=parts, options=storage_options,
            )  # fmt: skip
        else:
            shards, skipped = _convert(
                items, target, progress, encoding, shard_size, conversion.skip_bad
            )
        meta = {
            "source": items.description,
            "samples": sum(len(shard["samples"]) for shard in shards),
            "classes": items.classes,
            "fields": items.fields,
            "skipped": skipped,
        }
        target.commit(shards, meta)
    finally:
        target.close()
    return meta | {"shards": len(shards)}


def _destination(
    where: str | os.PathLike[str], options: dict[str, Any] | None
) -> tuple[Destination, dict[str, Any] | None]:
    """The destination and the progress of its unfinished conversion, if any; refused
    when it holds a shard set, or, for a new conversion, a file under a shard's name."""
    target = destination(where, options)
    try:
        if target.has_index():
            raise FileExistsError(f"{target}: already holds a shard set ({INDEX})")
        progress = target.progress()
        if progress is None:
            target.refuse_foreign()
    except BaseException:
        target.close()
        raise
    return target, progress


def _progress(
    target: Destination, progress: dict[str, Any] | None, what: dict[str, Any], resume: bool
) -> dict[str, Any]:
    """The unfinished conversion's ``progress``, checked to be of the same source,
    length, encoding and shard size; for a new one, ``what`` it converts, saved at once
    (a shard set with a progress is never taken for a finished or a WebDataset one)."""
    if progress is None:
        target.save_progress(what)
        return dict(what)
    if not resume:
        raise FileExistsError(
            f"{target}: holds an unfinished conversion: pass {RESUME} to finish it"
        )
    differs = [f"{key} {progress.get(key)!r}, now {value!r}" for key, value in what.items()
               if progress.get(key) != value]  # fmt: skip
    if differs:
        raise ValueError(
            f"{target}: the unfinished conversion differs from this one: {'; '.join(differs)}"
        )
    target.clear_unfinished()
    return progress


def _convert(
    items: Source,
    target: Destination,
    progress: dict[str, Any],
    encoding: Encoding,
    shard_size: int,
    skip_bad: bool,
) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """In this process, shard after shard, each recorded in the progress when finished."""
    if "parts" in progress:
        raise ValueError(f"{target}: the unfinished conversion ran on Ray: resume it with ray=True")
    shards: list[dict[str, Any]] = progress.get("shards", [])
    skipped: list[list[str]] = progress.get("skipped", [])

    def finished(entry: dict[str, Any], position: int, bad: list[list[str]]) -> None:
        target.record_shard(len(shards), {"entry": entry, "next": position, "skipped": bad})
        shards.append(entry)
        skipped.extend(bad)

    names = (shard_name(number) for number in itertools.count(len(shards)))
    rest = write_range(items, progress.get("next", 0), len(items), target, names,
                       encoding=encoding, shard_size=shard_size, skip_bad=skip_bad,
                       on_shard=finished)  # fmt: skip
    skipped.extend(rest)
    return shards, skipped
