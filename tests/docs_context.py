"""What the README's code blocks run in, as tests (pytest-markdown-docs, `conftest.py`).

A block that is a whole script (the before/after) imports everything itself. A fragment
("checkpoint and resume", "knowing your bottleneck", ...) uses names a reader has from the
script above it: `fragment_names()` gives each block those, built fresh, in a temporary
directory that holds the script's `data/train`. Options on a block's fence add what it
reads from disk: `fixture:train_lmdb`, `fixture:coco_lmdb` (detection targets),
`fixture:seg_lmdb` (class masks), `fixture:shard_set`, `fixture:s3_bucket` (a local
S3 server), `fixture:world_size`, and
`fixture:torchrun` (the environment torchrun sets, for one process).
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
import torch

# The script's data: 10 classes of 4 photo-like 500x375 JPEGs.
DATA = "data/train"


def fragment_names() -> dict[str, Any]:
    """The names the README's script defines, for the fragments that follow it."""
    import torchvision
    from torch import nn
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    import fastload
    from fastload import DataPrefetcher, FastLoader, ImageFolder, LMDBDataset, gpu
    from fastload.transforms import RandomResizedCrop

    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step(images: torch.Tensor, labels: torch.Tensor) -> None:
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    dataset = ImageFolder(DATA, transform=RandomResizedCrop(32))  # small: fragments run fast
    loader = FastLoader(dataset, batch_size=8, shuffle=True, num_workers=0)
    augment = nn.Sequential(gpu.RandomHorizontalFlip(), gpu.ColorJitter(0.4, 0.4))
    prefetcher = DataPrefetcher(loader, transform=augment, mean=mean, std=std)
    images, labels = next(iter(loader))
    return {
        "torch": torch, "torchvision": torchvision, "nn": nn, "v2": v2,
        "tv_tensors": tv_tensors, "fastload": fastload, "gpu": gpu,
        "DataPrefetcher": DataPrefetcher, "FastLoader": FastLoader,
        "ImageFolder": ImageFolder, "LMDBDataset": LMDBDataset,
        "RandomResizedCrop": RandomResizedCrop,
        "IMAGENET_MEAN": mean, "IMAGENET_STD": std, "root": DATA,
        "device": torch.device("cpu"), "model": model, "optimizer": optimizer,
        "train_step": train_step, "epochs": 1, "dataset": dataset, "loader": loader,
        "augment": augment, "prefetcher": prefetcher, "images": images, "labels": labels,
    }  # fmt: skip


@pytest.fixture(scope="session")
def _script_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fastload import make_image_folder

    return make_image_folder(
        tmp_path_factory.mktemp("readme") / "train", num_classes=10, images_per_class=4
    )


@pytest.fixture
def docs_directory(_script_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory holding the script's `data/train`."""
    shutil.copytree(_script_data, tmp_path / DATA)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def train_lmdb(docs_directory: Path) -> Path:
    """`train.lmdb`: the script's images, as `fastload convert data/train train.lmdb`."""
    from fastload import write_lmdb

    write_lmdb(DATA, "train.lmdb", num_workers=0, progress=False)
    return docs_directory / "train.lmdb"


@pytest.fixture
def coco_lmdb(docs_directory: Path) -> Path:
    """`coco.lmdb`: images with boxes, labels and instance masks, as a COCO conversion."""
    from fastload import write_lmdb
    from fastload.testing.shapes import ShapesDetection

    write_lmdb(ShapesDetection(8, size=(96, 128)), "coco.lmdb", num_workers=0, progress=False)
    return docs_directory / "coco.lmdb"


@pytest.fixture
def seg_lmdb(docs_directory: Path) -> Path:
    """`seg.lmdb`: the script's images, each with a class mask, as `convert --masks`."""
    import cv2
    import numpy as np

    from fastload import write_lmdb

    for index, image in enumerate(sorted((docs_directory / DATA).rglob("*.jpg"))):
        mask = docs_directory / "masks" / image.relative_to(docs_directory / DATA)
        mask.parent.mkdir(parents=True, exist_ok=True)
        classes = np.zeros(cv2.imread(str(image)).shape[:2], np.uint8)
        classes[: classes.shape[0] // 2] = index % 21  # the top half is one object's
        cv2.imwrite(str(mask.with_suffix(".png")), classes)
    write_lmdb(DATA, "seg.lmdb", masks="masks", num_workers=0, progress=False)
    return docs_directory / "seg.lmdb"


@pytest.fixture
def shard_set(docs_directory: Path) -> Path:
    """`shards/`: the script's images as a shard set, as `fastload convert --shards`."""
    from fastload.shards import write_shards

    write_shards(DATA, "shards", shard_size=200_000)
    return docs_directory / "shards"


@pytest.fixture
def s3_bucket(docs_directory: Path, monkeypatch: pytest.MonkeyPatch):
    """`s3://my-bucket/train`: the script's images as shards on a local S3 server (Swift's
    S3 API on 127.0.0.1), the AWS variables pointing at it."""
    boto3 = pytest.importorskip("boto3", reason="S3 needs boto3: pip install '.[s3]'")
    from fastload.shards import write_shards
    from fastload.testing.s3server import LocalS3, swift_installed

    if not swift_installed():
        pytest.skip("the local S3 server needs OpenStack Swift: pip install swift")
    with LocalS3() as server:
        for name, value in server.environment().items():
            monkeypatch.setenv(name, value)
        boto3.client("s3", **server.client_options()).create_bucket(Bucket="my-bucket")
        write_shards(DATA, "s3://my-bucket/train", shard_size=200_000)
        yield "s3://my-bucket/train"


@pytest.fixture
def world_size() -> int:
    """The world a block's script runs in: one process."""
    return 1


@pytest.fixture
def torchrun(monkeypatch: pytest.MonkeyPatch):
    """The variables torchrun sets, for a world of one process; the group destroyed after."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for name, value in {
        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    yield
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
