"""Train a ResNet on a folder of JPEGs (one sub-folder per class) with fastload: the three
changes of the README's "Before and after" in a plain training loop.

    python examples/train_classifier.py                      # a small generated folder
    python examples/train_classifier.py data/train --epochs 10 --batch-size 128

1. FastLoader's workers decode with OpenCV and crop to uint8 CHW images;
2. the rest of the augmentation, a flip and colour jitter per sample, runs on the batch
   on the device (fastload.gpu modules);
3. DataPrefetcher copies the next batch to the device while the step runs, augments it
   and normalises it.

With a GPU that is where steps 2 and 3 run; without one the same code runs on the CPU.
The measured comparisons with torchvision's DataLoader, DALI and the rest are in
benchmarks/ (benchmarks/train_harness.py, benchmarks/end_to_end.py).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torchvision
from torch import nn

from fastload import DataPrefetcher, FastLoader, ImageFolder, gpu, make_image_folder
from fastload.transforms import RandomResizedCrop

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("data", type=Path, nargs="?", help="default: 160 generated JPEGs")
    parser.add_argument("--model", default="resnet18", help="a torchvision model")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=160)
    parser.add_argument("--workers", type=int, default=None, help="default: FastLoader's")
    args = parser.parse_args()
    root = args.data or make_image_folder("data/train", num_classes=10, images_per_class=16)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    dataset = ImageFolder(root, transform=RandomResizedCrop(args.image_size))
    workers = {} if args.workers is None else {"num_workers": args.workers}
    loader = FastLoader(dataset, batch_size=args.batch_size, shuffle=True, **workers)  # 1
    augment = nn.Sequential(gpu.RandomHorizontalFlip(), gpu.ColorJitter(0.4, 0.4))  # 2
    batches = DataPrefetcher(  # 3
        loader, device, transform=augment, mean=IMAGENET_MEAN, std=IMAGENET_STD
    )

    model = getattr(torchvision.models, args.model)(num_classes=len(dataset.classes))
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for epoch in range(args.epochs):
        start, images, loss_sum = time.perf_counter(), 0, torch.zeros((), device=device)
        for x, y in batches:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            images += len(y)
            loss_sum += loss.detach() * len(y)  # no .item() in the loop: it would wait
        seconds = time.perf_counter() - start
        print(f"epoch {epoch}: loss {loss_sum.item() / images:.3f}, "
              f"{images / seconds:,.0f} images/s on {device}")  # fmt: skip


if __name__ == "__main__":  # the loader's workers may re-import this file
    main()
