"""A folder of JPEGs: DataLoader with its defaults vs FastLoader with its defaults.

Same torchvision ImageFolder, same transform (PIL decode, RandomResizedCrop 224, flip,
uint8 tensor), same batch size; each loader keeps every default it has. A warm-up
epoch each, then the loaders take turns epoch by epoch (interleaved); medians.

Usage:
    python benchmarks/loader_defaults.py [--batch-size 64] [--repeats 5] [--plot]
"""

from __future__ import annotations

import argparse

if not __package__:  # python benchmarks/X.py: import benchmarks as -m does
    import _bootstrap  # noqa: F401

from benchmarks.lib.common import Row, plot, report
from benchmarks.lib.data import jpeg_folder
from fastload.tools.demo import compare_loaders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()

    runs = compare_loaders(
        jpeg_folder(), batch_size=args.batch_size, image_size=args.image_size, repeats=args.repeats
    )
    rows = [Row(run.name, run.measurement, run.images, {"settings": run.settings}) for run in runs]
    result = report(
        "loader_defaults",
        rows,
        baseline="DataLoader",
        unit="images",
        settings=vars(args) | {"images": runs[0].images, "image": "JPEG 500x375"},
    )
    if args.plot:
        plot(result)


if __name__ == "__main__":
    main()
