"""fastload.integrations.timm on the CPU, where it must keep up with timm: pixel erasing
draws noise for the erased boxes alone, with timm's semantics (N(0, 1) inside the boxes,
the image untouched outside); mixing runs in the workers on uint8, rounded as timm's; the
loop's batch work runs on one intra-op thread; policies move rows, not elements."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fastload
from fastload import gpu
from fastload.gpu.rows import put_rows, take_rows
from fastload.integrations.timm import Mixup, RandomErasing, augment_from_string, create_loader

timm_data = pytest.importorskip("timm.data")

#: No standard-normal draw is this value: a pixel still holding it was not erased.
UNTOUCHED = 1000.0


def _erase(mode: str, shape: tuple[int, ...], count: int, p: float, seed: int) -> torch.Tensor:
    eraser = RandomErasing(p=p, mode=mode, max_count=count,
                           generator=torch.Generator().manual_seed(seed))  # fmt: skip
    return eraser(torch.full(shape, UNTOUCHED))


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 6),
    channels=st.integers(1, 4),
    height=st.integers(4, 24),
    width=st.integers(4, 24),
    count=st.integers(1, 4),
    p=st.sampled_from([0.0, 0.25, 1.0]),
    seed=st.integers(0, 2**31),
)
def test_pixel_noise_fills_exactly_the_boxes_const_mode_erases(
    n, channels, height, width, count, p, seed
):
    """The boxes come from the same draws in every mode: pixel mode changes exactly the
    pixels const mode zeroes, in every channel, and nothing else; a seeded generator
    gives the same noise again."""
    shape = (n, channels, height, width)
    boxes = _erase("const", shape, count, p, seed) == 0
    noisy = _erase("pixel", shape, count, p, seed)
    assert torch.equal(noisy != UNTOUCHED, boxes)
    assert torch.equal(boxes, boxes[:, :1].expand_as(boxes))  # whole pixels, every channel
    assert torch.equal(noisy, _erase("pixel", shape, count, p, seed))


def test_pixel_noise_is_drawn_for_the_erased_pixels_alone():
    eraser = RandomErasing(p=0.25, mode="pixel", max_count=2)
    shape = torch.Size((32, 3, 64, 64))
    params = eraser.sample_params(shape, torch.device("cpu"), torch.Generator().manual_seed(3))
    erased = (eraser.apply_transform(torch.full(shape, UNTOUCHED), params) != UNTOUCHED).sum()
    assert 0 < int(erased) <= params["fill"].numel() < shape.numel() // 2


def test_pixel_noise_is_standard_normal():
    images = torch.full((400, 3, 32, 32), UNTOUCHED)
    erased = _erase("pixel", tuple(images.shape), 3, 1.0, seed=5)
    noise = erased[erased != UNTOUCHED]
    assert noise.numel() > 100_000
    assert float(noise.mean()) == pytest.approx(0.0, abs=0.01)
    assert float(noise.std()) == pytest.approx(1.0, abs=0.01)


def test_pixel_noise_stays_keyed_by_sample_inside_sample_seeds():
    eraser = RandomErasing(p=1.0, mode="pixel", max_count=2)
    images = torch.full((2, 3, 16, 16), UNTOUCHED)
    with gpu.sample_seeds([11, 12]):
        pair = eraser(images)
    with gpu.sample_seeds([12]):
        alone = eraser(images[1:])
    assert torch.equal(pair[1:], alone)
    assert (pair != UNTOUCHED).any(dim=(1, 2, 3)).all()


# every pair at once; two pairs, then the third; a pair at a time
@pytest.mark.parametrize("side", [8, 180, 300])
def test_mixing_uint8_rounds_to_nearest_as_timms_collate(side):
    """timm's FastCollateMixup blends uint8 in float32 and rounds (np.rint)."""
    images = torch.randint(0, 256, (6, 3, side, side), dtype=torch.uint8)
    lam = 0.3
    params = {
        "lam": torch.full((6,), lam), "cut": torch.zeros(6, dtype=torch.bool),
        "top": torch.zeros(6), "left": torch.zeros(6),
        "height": torch.zeros(6), "width": torch.zeros(6),
    }  # fmt: skip
    want = np.rint(images.numpy().astype(np.float32) * lam
                   + images.flip(0).numpy().astype(np.float32) * (1 - lam))  # fmt: skip
    for mode in ("batch", "elem"):
        mixed = Mixup(mixup_alpha=1.0, num_classes=3, mode=mode).apply_transform(images, params)
        assert np.array_equal(mixed.numpy(), want.astype(np.uint8))


class _ThreadsSeen(RandomErasing):
    """Erasing that notes torch's intra-op threads while it runs."""

    def __init__(self) -> None:
        super().__init__(p=0.5, mode="pixel")
        self.threads: set[int] = set()

    def apply_transform(self, images: torch.Tensor, params: dict) -> torch.Tensor:
        self.threads.add(torch.get_num_threads())
        return super().apply_transform(images, params)


@pytest.mark.slow
def test_cpu_loader_mixes_in_workers_and_finishes_on_one_thread(tmp_path):
    """On a CPU with workers, mixing runs in the workers' collate (on uint8, as timm's),
    and the loop's batch work runs on one intra-op thread, the loop itself on all."""
    root = fastload.make_image_folder(tmp_path, num_classes=2, images_per_class=4, size=(40, 30))
    mixup = timm_data.FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=2)
    loader = create_loader(fastload.ImageFolder(root), (3, 16, 16), batch_size=4,
                           is_training=True, collate_fn=mixup, num_workers=2, device="cpu",
                           persistent_workers=False)  # fmt: skip
    assert loader.mixup_in_workers and loader.loader.collate_fn.mixup is loader.mixup
    loader.random_erasing = seen = _ThreadsSeen()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        batches = list(loader)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert seen.threads == {1} and len(batches) == 2
    assert all(target.shape == (4, 2) for _, target in batches)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 8),
    dtype=st.sampled_from([torch.uint8, torch.float32]),
    data=st.data(),
)
def test_take_rows_and_put_rows_are_indexing_by_rows(n, dtype, data):
    rows = torch.tensor(
        data.draw(st.lists(st.integers(0, n - 1), unique=True, min_size=1, max_size=n))
    )
    images = (torch.rand(n, 3, 5, 4) * 255).to(dtype)
    values = (torch.rand(len(rows), 3, 5, 4) * 255).to(dtype)
    assert torch.equal(take_rows(images, rows), images[rows])
    want, got = images.clone(), images.clone()
    want[rows] = values
    put_rows(got, rows, values)
    assert torch.equal(got, want)


@pytest.mark.parametrize("policy", ["rand-m9-mstd0.5-inc1", "original"])
def test_a_policy_gives_each_sample_what_it_gives_it_alone(policy):
    """The batch path gathers the samples that drew an operation and puts them back:
    each sample comes out as it does through the same draws alone."""
    augment = augment_from_string(policy, image_size=24, mean=(0.485, 0.456, 0.406))
    images = torch.randint(0, 256, (12, 3, 24, 24), dtype=torch.uint8)
    params = augment.sample_params(images.shape, images.device, torch.Generator().manual_seed(4))
    batch = augment.apply_transform(images, params)
    for i in range(len(images)):
        alone = {key: value[i : i + 1] for key, value in params.items()}
        assert torch.equal(batch[i : i + 1], augment.apply_transform(images[i : i + 1], alone))
