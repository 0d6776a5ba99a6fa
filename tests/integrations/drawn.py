"""The samples the framework runs train on (accelerate_train.py, lightning_train.py): each
holds one random draw, so a run's log shows which sample came when, with which draw and
flip; and how the tests read those logs."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

SAMPLES, BATCH, EPOCHS = 40, 4, 2
Steps = dict[int, list[list]]  # rank -> its logged [epoch, step, indices, pixels] lines


class Drawn(Dataset):
    """Sample ``i``: a 3x8x8 uint8 image, zero but for one draw from torch's generator in
    its left column (keyed by ``seed``: the same for the same sample in any process; a
    flip moves it to the right), and ``i``."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = torch.zeros(3, 8, 8, dtype=torch.uint8)
        image[:, :, 0] = torch.randint(1, 256, (1,), dtype=torch.uint8)
        return image, index


def by_sample(steps: Steps, epoch: int) -> dict[int, list[int]]:
    """Sample index -> its pixels in ``epoch``, each sample once across the ranks."""
    found: dict[int, list[int]] = {}
    for lines in steps.values():
        for line_epoch, _step, indices, pixels in lines:
            if line_epoch == epoch:
                for index, pixel in zip(indices, pixels, strict=True):
                    assert index not in found, f"sample {index} twice in epoch {epoch}"
                    found[index] = pixel
    return found
