"""DataPrefetcher over super-batches: a run of small batches is copied (and, with nothing
done per batch, finished) once and cut into the loader's batches, which come out as they
would one by one: the same values, the same keyed draws, never written again while held."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import Dataset

from common_utils import cpu_and_cuda, resumed_rest
from fastload import DataPrefetcher, FastLoader, gpu

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class Pictures(Dataset):
    """Sample ``i``: a uint8 image drawn from ``i`` and its label ``i``."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index)
        image = torch.randint(0, 256, (3, 4, 6), dtype=torch.uint8, generator=generator)
        return image, index


def prefetched(
    device,
    *,
    super_batches: bool,
    epochs: int = 2,
    size: int = 50,
    batch_size: int = 4,
    workers: int = 0,
    transform=None,
    **options,
) -> list:
    """Every batch of ``epochs`` epochs, all held at once (nothing handed out may be
    written again while held)."""  # fmt: skip
    loader = FastLoader(
        Pictures(size), batch_size=batch_size, shuffle=True, seed=11, num_workers=workers,
        super_batches=super_batches,
    )  # fmt: skip
    prefetcher = DataPrefetcher(loader, device, transform=transform, **options)
    return [batch for _ in range(epochs) for batch in prefetcher]


def assert_same(ours: list, theirs: list) -> None:
    assert len(ours) == len(theirs)
    for (images, labels), (want_images, want_labels) in zip(ours, theirs, strict=True):
        assert images.dtype == want_images.dtype and images.shape == want_images.shape
        assert images.is_contiguous() == want_images.is_contiguous()
        assert torch.equal(images.cpu(), want_images.cpu())
        assert torch.equal(labels.cpu(), want_labels.cpu())


def storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


OPTIONS = {
    "0..1 floats": {},
    "normalised": {"mean": MEAN, "std": STD},
    "channels last, half": {"channels_last": True, "dtype": torch.float16},
    "uint8 kept": {"dtype": None},
}


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("flip", [False, True], ids=["no transform", "keyed flip"])
def test_batches_are_those_prepared_one_by_one(device, options, flip):
    transform = gpu.RandomHorizontalFlip() if flip else None
    ours = prefetched(device, super_batches=True, transform=transform, **options)
    theirs = prefetched(device, super_batches=False, transform=transform, **options)
    assert_same(ours, theirs)
    if flip:  # the draws are the samples' own: some images flipped, some not
        unflipped = prefetched(device, super_batches=True, epochs=1, **options)
        first_epoch = zip(ours[: len(unflipped)], unflipped, strict=True)
        kept = [
            torch.equal(a, b) for (x, _), (y, _) in first_epoch for a, b in zip(x, y, strict=True)
        ]
        assert len(kept) == 50 and 0 < sum(kept) < 50


@pytest.mark.slow
@pytest.mark.parametrize("device", cpu_and_cuda())
def test_batches_from_workers_are_those_prepared_one_by_one(device):
    flip = gpu.RandomHorizontalFlip()
    ours = prefetched(device, super_batches=True, workers=2, transform=flip, mean=MEAN, std=STD)
    theirs = prefetched(device, super_batches=False, workers=2, transform=flip, mean=MEAN, std=STD)
    assert_same(ours, theirs)


@settings(max_examples=25)
@given(size=st.integers(1, 90), batch_size=st.integers(1, 20))
def test_any_data_and_batch_size_give_the_batches_prepared_one_by_one(size, batch_size):
    arguments = {"size": size, "batch_size": batch_size, "epochs": 1, "mean": MEAN, "std": STD}
    ours = prefetched("cpu", super_batches=True, **arguments)
    assert_same(ours, prefetched("cpu", super_batches=False, **arguments))
    assert sorted(i for _, labels in ours for i in labels.tolist()) == list(range(size))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_a_run_is_copied_and_finished_once_then_cut(device):
    batches = prefetched(device, super_batches=True, epochs=1, size=100, batch_size=4)
    per_run = -(-64 // 4)  # batches of 4 in a run of 64 samples
    images = [storage(images) for images, _ in batches]
    labels = [storage(labels) for _, labels in batches]
    assert images[:per_run] == [images[0]] * per_run  # one finished buffer
    assert labels[:per_run] == [labels[0]] * per_run  # one copy
    assert images[per_run] != images[0]  # the next run: another
    alone = prefetched(device, super_batches=False, epochs=1, batch_size=4)
    assert storage(alone[0][0]) != storage(alone[1][0])


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_a_transform_sees_each_batch_alone(device):
    sizes = []

    def record(images: torch.Tensor) -> torch.Tensor:
        sizes.append(len(images))
        return images

    batches = prefetched(device, super_batches=True, epochs=1, size=10, transform=record)
    assert sizes == [4, 4, 2] and [len(labels) for _, labels in batches] == sizes


@pytest.mark.parametrize("taken", [1, 3, 6])
def test_a_state_saved_inside_a_run_resumes_at_the_next_batch(taken):
    def make() -> DataPrefetcher:
        loader = FastLoader(Pictures(40), batch_size=3, shuffle=True, seed=2, super_batches=True)
        return DataPrefetcher(loader, "cpu", transform=gpu.RandomHorizontalFlip())

    rest, again = resumed_rest(make, taken)
    assert len(again) == len(rest) == 14 - taken
    assert_same(again, rest)
