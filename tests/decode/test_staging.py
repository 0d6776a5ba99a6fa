"""fastload.decode.staging: OpenCV's images packed into one buffer come back out of it on
the device as they went in, HWC or as CHW views, from one copy."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastload.decode.staging import stage

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.needs_cuda),
]

shapes = st.lists(
    st.tuples(st.integers(1, 9), st.integers(1, 9), st.sampled_from([1, 3])), max_size=6
)


@settings(deadline=None, max_examples=30)
@given(shapes=shapes, chw=st.booleans())
def test_images_come_out_as_they_went_in_end_to_end_in_one_buffer(shapes, chw):
    generator = torch.Generator().manual_seed(len(shapes))
    hwc = [torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator) for shape in shapes]
    images = {3 * i + 1: image.permute(2, 0, 1) if chw else image for i, image in enumerate(hwc)}
    staged = stage(images, chw=chw, pin=False)
    assert len(staged.places) == len(images)
    assert staged.buffer.numel() == sum(image.numel() for image in hwc)
    # end to end, in the order given: each image starts where the one before ended
    offsets = [offset for offset, _ in staged.places.values()]
    assert offsets == [sum(image.numel() for image in hwc[:i]) for i in range(len(hwc))]
    out = staged.on(torch.device("cpu"))
    assert list(out) == list(images)
    for index, image in images.items():
        assert out[index].shape == image.shape and torch.equal(out[index], image)


@pytest.mark.parametrize("device", DEVICES)
def test_a_pinned_buffer_goes_to_the_device_in_one_copy_made_by_a_pool(device):
    images = {i: torch.full((4 + i, 5, 3), i, dtype=torch.uint8) for i in range(8)}
    pin = device == "cuda"
    copied: list[tuple[int, str]] = []

    def recorded(copy, indices):
        def one(index):
            copy(index)
            copied.append((index, threading.current_thread().name))

        return pool.map(one, indices)

    with ThreadPoolExecutor(4, thread_name_prefix="copier") as pool:
        staged = stage(images, chw=False, pin=pin, map_=recorded)
    assert sorted(index for index, _ in copied) == list(images)  # each copied once, by the pool
    assert all(name.startswith("copier") for _, name in copied)
    assert staged.buffer.is_pinned() is pin
    out = staged.on(torch.device(device))
    # every image a view of the one copied buffer
    storages = {image.untyped_storage().data_ptr() for image in out.values()}
    assert len(storages) == 1
    for index, image in out.items():
        assert image.device.type == device and torch.equal(image.cpu(), images[index])
