"""MixUp and CutMix: images and labels mixed with the same weights."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fastload import gpu
from gpu_cases import (
    images,
)


def test_mixup_mixes_images_and_labels_with_the_same_weights():
    batch, labels = images(dtype=torch.float32), torch.tensor([0, 1, 2, 0, 1, 2])
    module = gpu.MixUp(alpha=0.4, num_classes=3)
    params = module.sample_params(batch.shape, batch.device)
    mixed, soft = module(batch, labels, params=params)
    lam = params["lam"].view(-1, 1, 1, 1)
    torch.testing.assert_close(mixed, lam * batch + (1 - lam) * batch.roll(1, 0))
    torch.testing.assert_close(soft.sum(dim=1), torch.ones(6))
    expected = (
        params["lam"] * nn.functional.one_hot(labels, 3).T
        + (1 - params["lam"]) * nn.functional.one_hot(labels.roll(1), 3).T
    )
    torch.testing.assert_close(soft, expected.T.float())
    assert len(set(params["lam"].tolist())) == 6


def test_cutmix_pastes_a_box_and_weights_labels_by_its_area():
    batch, labels = images(dtype=torch.uint8), torch.tensor([0, 1, 2, 0, 1, 2])
    module = gpu.CutMix(alpha=1.0, num_classes=3, generator=torch.Generator().manual_seed(3))
    mixed, soft = module(batch, labels)
    previous = batch.roll(1, 0)
    from_previous = (mixed == previous).all(dim=1) & (mixed != batch).any(dim=1)
    pasted_fraction = from_previous.flatten(1).float().mean(dim=1)
    kept = soft[torch.arange(6), labels]
    # Each label keeps the share of its own pixels (where a pixel equals both, it counts as kept).
    assert (kept <= 1.0).all() and (kept >= 1.0 - pasted_fraction - 1e-6).all()
    torch.testing.assert_close(soft.sum(dim=1), torch.ones(6))


def test_mix_label_errors():
    module = gpu.MixUp(num_classes=3)
    with pytest.raises(ValueError, match="MixUp needs one label per image"):
        module(images(), torch.tensor([0, 1]))
    with pytest.raises(TypeError, match=r"class labels must be integers, got torch\.float32"):
        module(images(), torch.zeros(6))
