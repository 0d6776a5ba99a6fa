from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from fastload import make_image_folder, write_lmdb


class NumberedImages(Dataset):
    """Image ``i`` is filled with ``i % 256`` and labelled ``i``: every record says where
    it came from. ``delay`` slows each read, to kill a conversion part-way."""

    classes = None

    def __init__(self, count: int = 40, delay: float = 0.0, offset: int = 0) -> None:
        self.count, self.delay, self.offset = count, delay, offset

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        time.sleep(self.delay)
        index += self.offset
        return torch.full((3, 6, 5), index % 256, dtype=torch.uint8), index


class KilledAt(NumberedImages):
    """NumberedImages whose item ``kill_at``, read in a worker process (not the process
    that made the dataset), kills that worker with SIGKILL, as the out-of-memory killer
    does."""

    def __init__(self, count: int = 40, kill_at: int = 13) -> None:
        super().__init__(count)
        self.kill_at, self.parent = kill_at, os.getpid()

    def __getitem__(self, index: int):
        if index == self.kill_at and os.getpid() != self.parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(index)


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory):
    """2 classes x 3 small JPEGs, shared read-only by the tests."""
    return make_image_folder(
        tmp_path_factory.mktemp("images"), num_classes=2, images_per_class=3, size=(64, 48)
    )


@pytest.fixture(scope="session")
def database(image_folder, tmp_path_factory):
    path = tmp_path_factory.mktemp("db") / "train.lmdb"
    write_lmdb(image_folder, path, num_workers=0, progress=False)
    return path


def rgb(path) -> np.ndarray:
    import cv2

    return cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)
