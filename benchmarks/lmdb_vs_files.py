"""A folder of JPEG files vs the same images in one fastload LMDB file.

Random-order reads of every image (the order a shuffled epoch reads them in):
raw bytes, then bytes decoded to HWC uint8 RGB, each with a warm page cache and a
cold one (POSIX_FADV_DONTNEED on every file before each repeat, where the OS allows
it). Also the conversion itself: one process vs all CPUs.

Usage:
    python benchmarks/lmdb_vs_files.py [--repeats 5] [--plot]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
from functools import partial
from pathlib import Path

from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import Row, plot, report
from benchmarks.lib.data import jpeg_folder
from fastload import LMDBDataset, write_lmdb
from fastload.decode.opencv import read_image
from fastload.lmdb.store import close_reader
from fastload.tools.measure import measure


def drop_from_cache(paths: list[Path]) -> bool:
    """Ask the kernel to forget the files' cached pages; False where it cannot."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # only clean pages are dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()

    folder = jpeg_folder()
    _, class_to_idx = find_classes(str(folder))
    files = [Path(path) for path, _ in make_dataset(str(folder), class_to_idx, IMG_EXTENSIONS)]
    work = Path(tempfile.mkdtemp(prefix="fastload-bench-"))
    try:
        rows = []
        for name, workers in [
            ("convert, 1 process", 0),
            (f"convert, {os.cpu_count()} processes", None),
        ]:

            def convert(workers=workers):
                target = work / "convert.lmdb"
                target.unlink(missing_ok=True)
                write_lmdb(folder, target, num_workers=workers, progress=False)

            rows.append(
                Row(
                    name,
                    measure(convert, repeats=3, warmup=0),
                    len(files),
                    versus="convert, 1 process",
                )
            )

        database = work / "train.lmdb"
        write_lmdb(folder, database, progress=False)
        dataset = LMDBDataset(database)
        order = list(range(len(files)))
        random.Random(0).shuffle(order)
        total_bytes = sum(files[i].stat().st_size for i in order)

        def files_raw():
            for i in order:
                files[i].read_bytes()

        def lmdb_raw(dataset=dataset):
            for i in order:
                dataset.record(i)

        def files_decoded():
            for i in order:
                read_image(files[i])

        def lmdb_decoded():
            for i in order:
                dataset[i]

        def cold(read, paths):
            def setup_then_read():
                close_reader(database)  # pages mapped by this process would stay cached
                drop_from_cache(paths)
                read()

            return setup_then_read

        can_drop = drop_from_cache(files)
        variants = [
            ("files, raw bytes, warm", files_raw, None),
            ("LMDB, raw bytes, warm", lmdb_raw, "files, raw bytes, warm"),
            ("files, decoded, warm", files_decoded, None),
            ("LMDB, decoded, warm", lmdb_decoded, "files, decoded, warm"),
        ]
        if can_drop:
            variants += [
                ("files, raw bytes, cold", cold(files_raw, files), None),
                ("LMDB, raw bytes, cold", cold(lmdb_raw, [database]), "files, raw bytes, cold"),
                (
                    "LMDB, raw bytes, cold, readahead off",
                    cold(partial(lmdb_raw, LMDBDataset(database, readahead=False)), [database]),
                    "files, raw bytes, cold",
                ),
                ("files, decoded, cold", cold(files_decoded, files), None),
                ("LMDB, decoded, cold", cold(lmdb_decoded, [database]), "files, decoded, cold"),
            ]
        for name, read, versus in variants:
            timing = measure(read, repeats=args.repeats, warmup=1)
            megabytes = total_bytes / timing.median / 2**20
            rows.append(
                Row(name, timing, len(files), {"MB/s": f"{megabytes:,.0f}"}, versus=versus or name)
            )
        result = report(
            "lmdb_vs_files",
            rows,
            baseline="files, raw bytes, warm",
            unit="images",
            settings=vars(args)
            | {
                "images": len(files),
                "bytes": total_bytes,
                "cold_cache": can_drop,
                "order": "random",
            },
        )
    finally:
        close_reader(work / "train.lmdb")
        shutil.rmtree(work)
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
