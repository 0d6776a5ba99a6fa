"""Train a torchvision detector with fastload: images, boxes and instance masks from the
workers as padded uint8 batches, flipped and jittered per sample on the device, boxes
and masks moved with their images.

    python examples/train_detector.py                  # synthetic shapes, one short epoch
    python examples/train_detector.py --images 512 --epochs 5 --batch-size 16
    python examples/train_detector.py --lmdb shapes.lmdb  # stored once, then read from it

The data is fastload's ShapesDetection (shapes with known boxes and masks on photo-like
backgrounds); any dataset that returns ``(image, {"boxes", "labels", "masks"})`` as
torchvision's detection datasets do works the same way. The model is torchvision's
``fasterrcnn_mobilenet_v3_large_320_fpn`` without pretrained weights (nothing to download).
--lmdb writes the data set into one LMDB file (boxes, labels and PNG masks as fields)
the first time and reads it from there, as ``fastload convert --annotations`` data
would be. --json prints each epoch's metrics as one line.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

import torch
import torchvision
from torch import nn
from torch.utils.data import Dataset

from fastload import DataPrefetcher, FastLoader, LMDBDataset, gpu, write_lmdb
from fastload.collate import padded_collate
from fastload.testing.shapes import ShapesDetection


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--workers", default="auto", help="int or auto")
    parser.add_argument("--lmdb", type=Path, help="store the data here first, then read it")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    workers = args.workers if args.workers == "auto" else int(args.workers)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    dataset: Dataset = ShapesDetection(args.images, size=(240, 320))
    if args.lmdb is not None:
        if not args.lmdb.exists():
            write_lmdb(dataset, args.lmdb, progress=False)
        dataset = LMDBDataset(args.lmdb, decode="tensor")
    loader = FastLoader(
        dataset, batch_size=args.batch_size, shuffle=True, num_workers=workers,
        collate_fn=functools.partial(padded_collate, multiple=32),
    )  # fmt: skip
    # Per sample on the batch; the boxes, instance masks and valid region move with it.
    augment = nn.Sequential(gpu.RandomHorizontalFlip(), gpu.ColorJitter(0.2, 0.2, 0.2))
    batches = DataPrefetcher(loader, device, transform=augment, image=0)  # float 0..1

    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=ShapesDetection.num_classes
    ).to(device)  # it normalises and resizes its input itself
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    model.train()
    for epoch in range(args.epochs):
        start, images_seen, loss = time.perf_counter(), 0, None
        for images, _valid, _sizes, targets in batches:
            wanted = [{"boxes": t["boxes"], "labels": t["labels"]} for t in targets]
            losses = model(list(images), wanted)
            loss = sum(losses.values())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            images_seen += len(images)
        seconds = time.perf_counter() - start
        metrics = {
            "epoch": epoch,
            "images_per_second": images_seen / seconds,
            "loss": None if loss is None else float(loss.detach()),
            "device": str(device),
        }
        if args.json:
            print(json.dumps(metrics), flush=True)
        else:
            print(
                f"epoch {epoch}: {metrics['images_per_second']:.1f} images/s, "
                f"loss {metrics['loss']:.3f} on {device}",
                flush=True,
            )


if __name__ == "__main__":
    main()
