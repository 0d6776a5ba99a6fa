from __future__ import annotations

import dataclasses
import itertools
import warnings
from collections import namedtuple

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.utils.data import Dataset
from torchvision.transforms.v2 import functional as TF

from common_utils import cpu_and_cuda, deadline
from fastload import DataPrefetcher, FastLoader

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# The prefetcher folds 1/255, mean and std into one multiply-add; the reference below
# divides step by step. They agree to float32 rounding: 1e-5 on values of order 1.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def reference(images: torch.Tensor, mean=MEAN, std=STD) -> torch.Tensor:
    """torchvision's recipe, by hand: ToDtype(scale=True), then Normalize."""
    pixels = images.double() / 255 if images.dtype == torch.uint8 else images.double()
    mean = torch.tensor(mean, dtype=torch.float64).view(1, -1, 1, 1)
    std = torch.tensor(std, dtype=torch.float64).view(1, -1, 1, 1)
    return ((pixels - mean) / std).float()


def uint8_images(n=4, c=3, h=8, w=6, seed=0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=generator)


def image_batches(count=5, n=4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(uint8_images(n=n, seed=i), torch.arange(i * n, (i + 1) * n)) for i in range(count)]


# --- values -------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_uint8_images_are_normalised_like_torchvision(device):
    batches = image_batches()
    out = list(DataPrefetcher(batches, device, mean=MEAN, std=STD))
    assert len(out) == len(batches)
    for (images, labels), (want_images, want_labels) in zip(out, batches, strict=True):
        assert images.device.type == device and images.dtype == torch.float32
        torch.testing.assert_close(images.cpu(), reference(want_images), **TOLERANCE)
        assert labels.dtype == torch.int64 and torch.equal(labels.cpu(), want_labels)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_statistics_on_the_255_scale_as_in_apex(device):
    images = uint8_images()
    apex_mean, apex_std = [m * 255 for m in MEAN], [s * 255 for s in STD]
    (out,) = DataPrefetcher([images], device, mean=apex_mean, std=apex_std, statistics_scale=255)
    torch.testing.assert_close(out.cpu(), reference(images), **TOLERANCE)
    with pytest.raises(ValueError, match=r"not on the 0\.\.1 scale: .*statistics_scale=255"):
        DataPrefetcher([images], device, mean=apex_mean, std=apex_std)  # not guessed
    with pytest.raises(ValueError, match=r"statistics_scale is 1 .* or 255, got 100"):
        DataPrefetcher([images], device, mean=MEAN, std=STD, statistics_scale=100)


def test_float_images_in_0_1_are_not_rescaled():
    images = uint8_images().float() / 255
    (out,) = DataPrefetcher([images], "cpu", mean=MEAN, std=STD)
    torch.testing.assert_close(out, reference(images), **TOLERANCE)


def test_without_statistics_uint8_becomes_0_1_exactly():
    images = uint8_images()
    (out,) = DataPrefetcher([images], "cpu")
    assert torch.equal(out, images.float() / 255)


def integer_images(dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """A batch spanning ``dtype``'s whole range (its two ends included)."""
    info = torch.iinfo(dtype)
    generator = torch.Generator().manual_seed(seed)
    values = torch.randint(0, 2**16, (2, 3, 4, 5), generator=generator).double() / (2**16 - 1)
    values = (info.min + values * (float(info.max) - info.min)).clamp(info.min, info.max)
    values.view(-1)[:2] = torch.tensor([info.min, info.max], dtype=torch.float64)
    return values.to(torch.int64).clamp(info.min, info.max).to(dtype)


WIDE_INTEGERS = [torch.uint16, torch.int16, torch.int8, torch.int32]


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", WIDE_INTEGERS)
def test_integer_images_are_scaled_as_torchvisions_to_dtype(device, dtype):
    images = integer_images(dtype)
    (out,) = DataPrefetcher([images], device)
    assert out.dtype == torch.float32
    assert torch.equal(out.cpu(), TF.to_dtype(images, torch.float32, scale=True))
    (normalised,) = DataPrefetcher([images], device, mean=MEAN, std=STD)
    want = TF.normalize(TF.to_dtype(images, torch.float64, scale=True), MEAN, STD).float()
    torch.testing.assert_close(normalised.cpu(), want, **TOLERANCE)


@pytest.mark.parametrize("dtype", [torch.uint32, torch.bool])
def test_an_image_dtype_with_no_scale_is_refused_naming_it(dtype):
    images = torch.ones(2, 3, 4, 5, dtype=dtype)
    for statistics in ({}, {"mean": MEAN, "std": STD}):
        with pytest.raises(TypeError) as caught:
            next(iter(DataPrefetcher([images], "cpu", **statistics)))
        assert str(caught.value) == (
            f"the image batch is {dtype}: DataPrefetcher converts floating images and "
            "torch.uint8, torch.uint16, torch.int8, torch.int16, torch.int32 and torch.int64 "
            "ones (scaled to 0..1 by the largest value, as torchvision's to_dtype), or "
            "leaves the dtype alone with dtype=None"
        )


def test_dtype_none_only_moves_the_image():
    images = uint8_images()
    (out,) = DataPrefetcher([images], "cpu", dtype=None)
    assert out.dtype == torch.uint8 and torch.equal(out, images)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_the_fp32_result_cast_once(device, dtype):
    images = uint8_images()
    (out,) = DataPrefetcher([images], device, mean=MEAN, std=STD, dtype=dtype)
    assert out.dtype == dtype
    (full,) = DataPrefetcher([images], device, mean=MEAN, std=STD)
    assert torch.equal(out, full.to(dtype))


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_channels_last(device):
    (out,) = DataPrefetcher([uint8_images()], device, mean=MEAN, std=STD, channels_last=True)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert not out.is_contiguous()


@given(
    shape=st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(1, 9), st.integers(1, 9)),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    stats=st.data(),
)
def test_any_shape_and_statistics_match_the_reference(shape, dtype, stats):
    c = shape[1]
    mean = stats.draw(st.lists(st.floats(0, 1), min_size=c, max_size=c))
    std = stats.draw(st.lists(st.floats(0.05, 1), min_size=c, max_size=c))
    images = torch.randint(0, 256, shape, dtype=torch.uint8)
    (out,) = DataPrefetcher([images], "cpu", mean=mean, std=std, dtype=dtype)
    assert out.shape == shape and out.dtype == dtype
    want = reference(images, mean, std).to(dtype)
    tolerance = TOLERANCE if dtype == torch.float32 else {"rtol": 1e-2, "atol": 2e-2}
    torch.testing.assert_close(out, want, **tolerance)


class Flip(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.dtype] = []

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        self.seen.append(images.dtype)
        return images.flip(-1)


def test_transform_runs_on_the_uint8_image_before_normalisation():
    images, flip = uint8_images(), Flip()
    (out,) = DataPrefetcher([images], "cpu", mean=MEAN, std=STD, transform=flip)
    assert flip.seen == [torch.uint8]
    torch.testing.assert_close(out, reference(images.flip(-1)), **TOLERANCE)


# --- structure, order, length ------------------------------------------------------------------

Sample = namedtuple("Sample", ["image", "label", "name"])


@dataclasses.dataclass
class Record:
    image: torch.Tensor
    boxes: list
    source: str


def test_nested_structures_keep_their_shape_and_non_tensor_leaves():
    images = uint8_images()
    name = "batch-0"
    batch = {
        "image": images,
        "meta": {"names": [name, "b"], "ids": (torch.tensor([1, 2]), None)},
        "sample": Sample(images, torch.tensor([3]), name),
        "record": Record(images, [torch.ones(2)], "disk"),
    }
    (out,) = DataPrefetcher([batch], "cpu", mean=MEAN, std=STD)
    assert set(out) == set(batch)
    torch.testing.assert_close(out["image"], reference(images), **TOLERANCE)
    assert out["meta"]["names"][0] is name and out["meta"]["ids"][1] is None
    assert torch.equal(out["meta"]["ids"][0], torch.tensor([1, 2]))
    assert isinstance(out["sample"], Sample) and out["sample"].name is name
    assert out["sample"].image.dtype == torch.uint8  # only one leaf is the image
    assert isinstance(out["record"], Record) and out["record"].source == "disk"
    assert torch.equal(out["record"].boxes[0], torch.ones(2))


@pytest.mark.parametrize(
    ("batch", "image", "converted"),
    [
        ({"label": torch.tensor([1]), "pixels": uint8_images()}, "pixels", "pixels"),
        ((torch.tensor([1]), uint8_images()), 1, 1),
        ([uint8_images(), torch.tensor([1])], None, 0),
    ],
)
def test_the_image_leaf_is_configurable(batch, image, converted):
    (out,) = DataPrefetcher([batch], "cpu", mean=MEAN, std=STD, image=image)
    assert out[converted].dtype == torch.float32
    others = [
        key for key in (batch.keys() if isinstance(batch, dict) else range(2)) if key != converted
    ]
    assert all(out[key].dtype == torch.int64 for key in others)


def test_an_image_key_that_names_no_tensor_is_an_error_naming_it():
    prefetcher = DataPrefetcher([{"img": uint8_images()}], "cpu", image="image")
    with pytest.raises(KeyError, match="image='image' names no tensor in a batch of type dict"):
        next(iter(prefetcher))


@pytest.mark.parametrize("depth", [1, 2, 3, 10])
def test_order_and_count_are_preserved_at_any_depth(depth):
    batches = image_batches(count=7)
    prefetcher = DataPrefetcher(batches, "cpu", depth=depth)
    for _ in range(2):  # and again for a second epoch
        labels = [labels.tolist() for _, labels in prefetcher]
        assert labels == [b[1].tolist() for b in batches]
    assert len(prefetcher) == 7


def test_next_returns_none_exactly_once_then_starts_the_next_epoch():
    prefetcher = DataPrefetcher(image_batches(count=3), "cpu")
    got = [prefetcher.next() for _ in range(8)]
    assert [g is None for g in got] == [False, False, False, True, False, False, False, True]
    assert [g[1][0].item() for g in got if g is not None] == [0, 4, 8, 0, 4, 8]


def test_apex_style_loop():
    prefetcher = DataPrefetcher(image_batches(count=4), "cpu", mean=MEAN, std=STD)
    seen = 0
    batch = prefetcher.next()
    while batch is not None:
        images, labels = batch
        assert images.dtype == torch.float32
        seen += len(labels)
        batch = prefetcher.next()
    assert seen == 16


class Numbered(Dataset):
    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at

    def __len__(self) -> int:
        return 24

    def __getitem__(self, index: int):
        if index == self.fail_at:
            raise ValueError(f"bad sample {index}")
        return torch.full((3, 4, 4), index, dtype=torch.uint8), index


def test_fastloader_with_persistent_workers_over_epochs():
    loader = FastLoader(Numbered(), batch_size=4, num_workers=2)
    prefetcher = DataPrefetcher(loader, "cpu", mean=(0.5,) * 3, std=(0.5,) * 3)
    assert prefetcher.sampler is loader.sampler and prefetcher.batch_size == 4
    assert prefetcher.dataset is loader.dataset
    with deadline(60):
        for _ in range(2):
            labels = [label for _, labels in prefetcher for label in labels.tolist()]
            assert labels == list(range(24))
    assert len(prefetcher) == 6


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_loader_error_is_raised_at_its_batch(num_workers):
    loader = FastLoader(Numbered(fail_at=13), batch_size=4, num_workers=num_workers)
    prefetcher = DataPrefetcher(loader, "cpu", depth=2)
    delivered = []
    with deadline(60), pytest.raises(ValueError, match="bad sample 13"):
        for _, labels in prefetcher:
            delivered.append(labels.tolist())
    assert delivered == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def failing_after(count: int, error: BaseException):
    def batches():
        yield from image_batches(count=count)
        raise error

    return batches


class Replayable:
    """An iterable that makes a new generator per epoch, like a DataLoader."""

    def __init__(self, make) -> None:
        self.make = make

    def __iter__(self):
        return self.make()


def test_keyboard_interrupt_leaves_nothing_half_done():
    prefetcher = DataPrefetcher(Replayable(failing_after(2, KeyboardInterrupt())), "cpu", depth=3)
    with pytest.raises(KeyboardInterrupt):
        next(iter(prefetcher))  # interrupted while filling the pipeline
    assert prefetcher._iterator is None and not prefetcher._pending
    prefetcher = DataPrefetcher(Replayable(failing_after(3, KeyboardInterrupt())), "cpu", depth=1)
    got = []
    with pytest.raises(KeyboardInterrupt):
        for _, labels in prefetcher:
            got.append(labels[0].item())
    assert got == [0, 4]  # the third batch was never finished, so it is not handed out
    assert prefetcher._iterator is None and not prefetcher._pending


def test_a_bad_image_shape_is_reported_at_its_batch():
    batches = [uint8_images(), uint8_images(c=1)]
    prefetcher = iter(DataPrefetcher(batches, "cpu", mean=MEAN, std=STD))
    next(prefetcher)
    with pytest.raises(
        ValueError, match=r"mean/std have 3 channels; the image batch has shape \(4, 1, 8, 6\)"
    ):
        next(prefetcher)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"depth": 0}, ValueError, "depth must be an int >= 1, got 0"),
        ({"dtype": torch.int32}, TypeError, "dtype must be a floating dtype or None"),
        ({"mean": MEAN}, ValueError, "give both mean and std, or neither"),
        ({"mean": MEAN, "std": (0.2, 0.2)}, ValueError, "mean and std differ in length: 3 and 2"),
        ({"mean": MEAN, "std": (0.2, 0.0, 0.2)}, ValueError, "std must be positive"),
        ({"mean": (), "std": ()}, ValueError, "mean must hold one value per channel"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, error, message):
    with pytest.raises(error, match=message):
        DataPrefetcher([], "cpu", **kwargs)


# --- CUDA: streams ---------------------------------------------------------------------------


@pytest.mark.needs_cuda
def test_cuda_results_equal_the_synchronous_cpu_path():
    batches = image_batches(count=6, n=16)
    pinned = [(images.pin_memory(), labels.pin_memory()) for images, labels in batches]
    options = {"mean": MEAN, "std": STD, "channels_last": True, "transform": Flip()}
    gpu = [(x.cpu(), y.cpu()) for x, y in DataPrefetcher(pinned, "cuda", depth=3, **options)]
    cpu = list(DataPrefetcher(batches, "cpu", **options))
    for (x1, y1), (x2, y2) in zip(gpu, cpu, strict=True):
        torch.testing.assert_close(x1, x2, rtol=0, atol=1e-6)
        assert torch.equal(y1, y2)


@pytest.mark.needs_cuda
def test_a_large_copy_read_at_once_is_complete():
    # 64 MB per batch, each batch a distinct constant: a read that overtook its copy
    # would see part of the previous batch (or garbage) and the sum would be off.
    count, size = 6, 64 * 2**20
    batches = [
        torch.full((1, 1, 1, size), i + 1, dtype=torch.uint8).pin_memory() for i in range(count)
    ]
    sums = []
    for images in DataPrefetcher(batches, "cuda", dtype=None, depth=2):
        sums.append(images.sum(dtype=torch.int64))  # on the consumer stream, no sync
    assert [s.item() for s in sums] == [(i + 1) * size for i in range(count)]


@pytest.mark.needs_cuda
def test_one_stream_and_no_growth_of_reserved_memory_over_epochs():
    batches = [(x.pin_memory(), y.pin_memory()) for x, y in image_batches(count=8, n=64)]
    prefetcher = DataPrefetcher(batches, "cuda", mean=MEAN, std=STD)
    stream = prefetcher._preparer.stream
    reserved = []
    for _ in range(6):
        for images, _ in prefetcher:
            images.mul(2)
        torch.cuda.synchronize()
        reserved.append(torch.cuda.memory_reserved())
    assert prefetcher._preparer.stream is stream
    assert reserved[-1] <= reserved[1]


def test_a_dict_batch_finds_its_image_whatever_the_key_order():
    images = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
    labels = torch.tensor([3, 4])
    for batch in ({"label": labels, "image": images}, {"label": labels, "pixels": images}):
        out = next(iter(DataPrefetcher([batch], "cpu", mean=[0.5] * 3, std=[0.5] * 3)))
        image_key = "image" if "image" in batch else "pixels"
        assert torch.equal(out["label"], labels)  # moved, not converted
        assert out[image_key].dtype == torch.float32
        assert torch.allclose(out[image_key], torch.ones(2, 3, 4, 4))


def test_a_batch_without_an_image_like_tensor_says_how_to_name_it():
    batch = {"label": torch.tensor([3, 4]), "pixels": torch.zeros(2, 12)}
    with pytest.raises(ValueError, match=r"name it: DataPrefetcher\(\.\.\., image="):
        next(iter(DataPrefetcher([batch], "cpu", mean=[0.5] * 3, std=[0.5] * 3)))


def test_float_images_on_the_0_255_scale_are_warned_about_once():
    batch = (torch.full((2, 3, 4, 4), 200.0), torch.tensor([0, 1]))
    prefetcher = DataPrefetcher([batch, batch], "cpu", mean=[0.5] * 3, std=[0.5] * 3)
    with pytest.warns(UserWarning, match="values up to 200: float pixels are normalised as 0..1"):
        list(prefetcher)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(prefetcher)  # once per prefetcher
        list(DataPrefetcher([(batch[0] / 255, batch[1])], "cpu", mean=[0.5] * 3, std=[0.5] * 3))


# --- CPU buffers and threads ---------------------------------------------------------------------


def test_batches_kept_by_the_caller_are_never_overwritten():
    batches = image_batches(count=6)
    kept = [images for images, _ in DataPrefetcher(batches, "cpu", mean=MEAN, std=STD, depth=1)]
    for (images, _), got in zip(batches, kept, strict=True):
        torch.testing.assert_close(got, reference(images), **TOLERANCE)


def test_released_batches_leave_their_memory_to_the_next_ones():
    prefetcher = DataPrefetcher(image_batches(count=12), "cpu", mean=MEAN, std=STD, depth=2)
    addresses = {images.data_ptr() for images, _ in prefetcher}
    assert len(addresses) <= 4  # depth in flight, the one held, one being made


class WorkerLoader(list):
    """Batches as a loader with worker processes presents them (without starting any)."""

    num_workers = 2


def test_beside_worker_processes_the_cpu_work_runs_on_one_thread():
    seen = []

    def transform(images):
        seen.append(torch.get_num_threads())
        return images

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        list(DataPrefetcher(WorkerLoader(image_batches(count=2)), "cpu", transform=transform))
        assert seen == [1, 1] and torch.get_num_threads() == 2
        list(DataPrefetcher(image_batches(count=1), "cpu", transform=transform))
        assert seen[-1] == 2  # no workers: the main process has the cores
    finally:
        torch.set_num_threads(before)


@given(
    shape=st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(1, 9), st.integers(1, 9)),
    seed=st.integers(0, 100),
)
def test_the_cpu_normalisation_equals_torchs_multiply_add(shape, seed):
    from fastload.gpu.functional import normalize_into

    generator = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)
    scale = torch.rand(1, shape[1], 1, 1, generator=generator) + 0.5
    shift = torch.randn(1, shape[1], 1, 1, generator=generator)
    out = torch.full(shape, float("nan"))
    assert normalize_into(out, pixels, scale, shift) is out
    torch.testing.assert_close(out, pixels.float() * scale + shift, rtol=1e-6, atol=1e-6)


# --- detection and segmentation batches ---------------------------------------------------------


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_a_detection_batch_moves_its_targets_with_the_image(device):
    from torchvision import tv_tensors

    from fastload import gpu

    images = uint8_images(n=3, h=8, w=6)
    masks = tv_tensors.Mask(torch.arange(3 * 8 * 6).view(3, 8, 6) % 5)
    boxes = [
        tv_tensors.BoundingBoxes(
            [[0.0, 1.0, 2.0, 5.0]] * (i + 1), format="XYXY", canvas_size=(8, 6)
        )
        for i in range(3)
    ]
    batch = {"masks": masks, "img": images, "boxes": boxes, "labels": torch.tensor([1, 2, 3])}
    flip = nn.Sequential(gpu.RandomHorizontalFlip(p=1.0), gpu.ColorJitter(brightness=0.0))
    (out,) = DataPrefetcher([batch], device, mean=MEAN, std=STD, transform=flip, image="img")
    want = reference(images.flip(-1))
    torch.testing.assert_close(out["img"].cpu(), want, **TOLERANCE)  # flipped, then normalised
    assert type(out["masks"]) is tv_tensors.Mask and out["masks"].dtype == masks.dtype
    assert torch.equal(out["masks"].cpu(), masks.flip(-1))  # moved, not converted
    assert [len(b) for b in out["boxes"]] == [1, 2, 3]
    assert (
        out["boxes"][0].tolist() == [[4.0, 1.0, 6.0, 5.0]] and out["boxes"][0].device.type == device
    )
    assert out["labels"].tolist() == [1, 2, 3]


def test_a_4d_mask_is_never_taken_for_the_image():
    from torchvision import tv_tensors

    masks = tv_tensors.Mask(torch.zeros(2, 1, 4, 4, dtype=torch.uint8))
    (out,) = DataPrefetcher([(masks, uint8_images(n=2, h=4, w=4))], "cpu", mean=MEAN, std=STD)
    assert out[0].dtype == torch.uint8 and out[1].dtype == torch.float32


# --- one iter() is one pass ---------------------------------------------------------------------


def _first_labels(batches) -> list[int]:
    return [int(labels[0]) for _, labels in batches]


def test_iterating_a_pass_again_goes_on_where_it_was():
    prefetcher = DataPrefetcher(image_batches(count=5), "cpu")
    it = iter(prefetcher)
    first = next(it)
    assert int(first[1][0]) == 0
    assert iter(it) is it and len(it) == 5
    assert _first_labels(it) == [4, 8, 12, 16]  # not the epoch again from batch 0
    assert list(it) == []  # a pass that ended stays ended
    assert _first_labels(itertools.islice(iter(prefetcher), 2)) == [0, 4]


def test_a_new_pass_ends_the_old_one_with_an_error():
    prefetcher = DataPrefetcher(image_batches(count=3), "cpu")
    old = iter(prefetcher)
    next(old)
    new = iter(prefetcher)
    with pytest.raises(RuntimeError, match="iter\\(\\) began a newer pass; this one is over"):
        next(old)
    assert _first_labels(new) == [0, 4, 8]


def test_a_checkpoint_after_next_then_for_counts_the_batches_had():
    loader = FastLoader(Numbered(), batch_size=4, num_workers=0)
    prefetcher = DataPrefetcher(loader, "cpu")
    it = iter(prefetcher)
    next(it)
    for _ in it:
        break
    state = prefetcher.state_dict()
    assert (state["batches"], state["between_epochs"]) == (2, False)


class CountedStarts(list):
    """Batches whose epochs count their starts, as a loader's ``iter()`` would."""

    starts = 0

    def __iter__(self):
        self.starts += 1
        return super().__iter__()


@pytest.mark.parametrize("background", [False, True])
def test_iter_starts_no_epoch_until_the_first_batch_is_asked_for(background):
    # Lightning calls iter() on a train loader to check it, then drops the iterator
    loader = CountedStarts(image_batches(count=3))
    prefetcher = DataPrefetcher(loader, "cpu", background=background)
    checked = iter(prefetcher)
    del checked
    assert loader.starts == 0 and len(prefetcher) == 3
    passes = iter(prefetcher)
    assert loader.starts == 0
    assert _first_labels(passes) == [0, 4, 8] and loader.starts == 1
    assert _first_labels(prefetcher) == [0, 4, 8] and loader.starts == 2
