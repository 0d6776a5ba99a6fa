"""The one-pass crop-resize-flip-normalise: the plain-torch reference against torchvision
per sample, and the fused Triton kernel against the reference (on CUDA, and on the CPU
through Triton's interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torchvision.transforms.v2 import functional as TF

from fastload.decode.crop import crop_resize_finish
from fastload.decode.resample import axis_weights, crop_resize_finish_reference
from fastload.finishing import Finish

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@st.composite
def image_and_box(draw):
    height, width = draw(st.integers(1, 64)), draw(st.integers(1, 64))
    box_h, box_w = draw(st.integers(1, height)), draw(st.integers(1, width))
    top, left = draw(st.integers(0, height - box_h)), draw(st.integers(0, width - box_w))
    size = (draw(st.integers(1, 48)), draw(st.integers(1, 48)))
    seed = draw(st.integers(0, 2**16))
    image = torch.randint(
        0, 256, (3, height, width), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )
    return image, (top, left, box_h, box_w), size


def torchvision_reference(image, box, size, flip, mean=None, std=None):
    out = TF.resized_crop(image, *box, list(size), antialias=True)  # the uint8 path
    out = TF.horizontal_flip(out) if flip else out
    out = TF.to_dtype(out, torch.float32, scale=True)
    return out if mean is None else TF.normalize(out, mean, std)


@given(image_and_box(), st.booleans())
def test_the_reference_is_torchvisions_resized_crop_flip_normalize_within_a_level(case, flip):
    image, box, size = case
    out = crop_resize_finish_reference(
        [image], torch.tensor([box], dtype=torch.float32), size, torch.tensor([flip]),
        Finish.normalized(MEAN, STD),
    )  # fmt: skip
    expected = torchvision_reference(image, box, size, flip, MEAN, STD)
    level = 1 / (255 * min(STD))  # torchvision's uint8 path rounds its fixed-point sums
    assert out.shape == (1, 3, *size) and out.dtype == torch.float32
    assert (out[0] - expected).abs().max() <= level * 1.001


def test_uint8_output_is_within_one_level_and_upscales_too():
    image = torch.randint(
        0, 256, (3, 5, 7), dtype=torch.uint8, generator=torch.Generator().manual_seed(1)
    )
    for box, size in [((0, 0, 5, 7), (40, 33)), ((1, 2, 3, 2), (9, 4)), ((0, 0, 5, 7), (2, 1))]:
        out = crop_resize_finish([image], torch.tensor([box], dtype=torch.float32), size,
                                 torch.tensor([False]), Finish())  # fmt: skip
        expected = TF.resized_crop(image, *box, list(size), antialias=True)
        assert (out[0].int() - expected.int()).abs().max() <= 1, (box, size)


def test_a_one_pixel_output_is_torchs_float_result():
    # torch's own uint8 path fails an internal assert for a 1x1 output (torch 2.14.1)
    image = torch.randint(
        0, 256, (3, 5, 7), dtype=torch.uint8, generator=torch.Generator().manual_seed(1)
    )
    out = crop_resize_finish([image], torch.tensor([[0.0, 0.0, 5.0, 7.0]]), (1, 1),
                             torch.tensor([False]), Finish(dtype=torch.float32))  # fmt: skip
    expected = TF.resize(image.float(), [1, 1], antialias=True)
    assert torch.allclose(out[0], expected, atol=1e-3)


def test_a_one_pixel_box_fills_the_output_with_that_pixel():
    image = torch.arange(3 * 4 * 5, dtype=torch.uint8).view(3, 4, 5)
    out = crop_resize_finish([image], torch.tensor([[2.0, 3.0, 1.0, 1.0]]), (6, 4),
                             torch.tensor([True]), Finish())  # fmt: skip
    assert torch.equal(out[0], image[:, 2:3, 3:4].expand(3, 6, 4))


def test_an_empty_batch_is_an_empty_finished_tensor():
    finish = Finish.normalized(MEAN, STD, torch.bfloat16, channels_last=True)
    out = crop_resize_finish(
        [], torch.zeros(0, 4), (8, 8), torch.zeros(0, dtype=torch.bool), finish
    )
    assert out.shape == (0, 3, 8, 8) and out.dtype == torch.bfloat16


def test_dtype_and_channels_last_are_the_float32_result_cast_once():
    image = torch.randint(
        0, 256, (3, 30, 41), dtype=torch.uint8, generator=torch.Generator().manual_seed(2)
    )
    boxes, flip = torch.tensor([[3.0, 5.0, 20.0, 30.0]]), torch.tensor([True])
    full = crop_resize_finish([image], boxes, (16, 16), flip, Finish.normalized(MEAN, STD))
    half = crop_resize_finish(
        [image], boxes, (16, 16), flip, Finish.normalized(MEAN, STD, torch.bfloat16, True)
    )
    assert half.dtype == torch.bfloat16 and half.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(half, full.to(torch.bfloat16))


def test_hwc_images_give_the_chw_result():
    generator = torch.Generator().manual_seed(3)
    images = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=generator)
              for h, w in [(20, 31), (9, 4)]]  # fmt: skip
    boxes, flip = torch.tensor([[2.0, 3.5, 15.0, 20.0], [0.0, 0.0, 9.0, 4.0]]), torch.tensor([1, 0])
    chw = crop_resize_finish(images, boxes, (7, 11), flip, Finish(dtype=torch.float32))
    hwc = crop_resize_finish([image.permute(1, 2, 0).contiguous() for image in images], boxes,
                             (7, 11), flip, Finish(dtype=torch.float32), hwc=True)  # fmt: skip
    assert torch.allclose(chw, hwc, atol=1e-4)


@pytest.mark.parametrize(
    ("boxes", "flip", "message"),
    [
        (torch.zeros(1, 4), torch.zeros(3), r"boxes: \(3, 4\) for 3 images, got \(1, 4\)"),
        (torch.zeros(3, 2), torch.zeros(3), r"boxes: \(3, 4\) for 3 images, got \(3, 2\)"),
        (torch.zeros(3, 4), torch.zeros(1), "flip: 3 values for 3 images, got 1"),
    ],
)
def test_one_box_and_one_flip_per_image_or_a_clear_error(boxes, flip, message):
    images = [torch.zeros(3, 4, 5, dtype=torch.uint8)] * 3
    with pytest.raises(ValueError, match=message):  # never broadcast over the batch
        crop_resize_finish(images, boxes, (2, 2), flip, Finish())


def test_stored_images_are_cropped_as_their_orientation_shows_them():
    from fastload.decode.orientation import orient

    generator = torch.Generator().manual_seed(0)
    images = [torch.randint(0, 256, (3, 6, 9), dtype=torch.uint8, generator=generator)] * 3
    orientations = np.array([1, 6, 3])
    shown = [orient(image, int(o)) for image, o in zip(images, orientations, strict=True)]
    boxes = torch.tensor([[0.0, 0.0, 6.0, 9.0], [1.0, 0.0, 8.0, 6.0], [0.0, 2.0, 6.0, 7.0]])
    flip, finish = torch.tensor([False, True, False]), Finish(dtype=torch.float32)
    want = crop_resize_finish(shown, boxes, (4, 4), flip, finish)
    got = crop_resize_finish(images, boxes, (4, 4), flip, finish, orientations=orientations)
    assert torch.equal(got, want) and not torch.equal(got[1], got[0])
    with pytest.raises(ValueError, match="orientations are for CHW images as stored"):
        hwc = [image.permute(1, 2, 0) for image in images]
        crop_resize_finish(hwc, boxes, (4, 4), flip, finish, hwc=True, orientations=orientations)


def test_an_image_of_another_size_than_its_box_was_drawn_for_is_named():
    images = [torch.zeros(3, 4, 5, dtype=torch.uint8), torch.zeros(3, 6, 5, dtype=torch.uint8)]
    boxes, flip = torch.tensor([[0.0, 0.0, 4.0, 5.0]] * 2), torch.tensor([False, False])
    drawn_for = np.array([[4, 5], [4, 5]])
    message = r"image 1 of the batch is \(6, 5\) \(height, width\), its box was drawn for \(4, 5\)"
    with pytest.raises(ValueError, match=message):
        crop_resize_finish(images, boxes, (2, 2), flip, Finish(), sizes=drawn_for)
    resample_triton = pytest.importorskip("fastload.decode.resample_triton")
    with pytest.raises(ValueError, match=message):  # the kernel's table checks them alike
        resample_triton.image_table(images, boxes, (2, 2), flip, images[0].device, sizes=drawn_for)
    drawn_for[1] = (6, 5)
    assert crop_resize_finish(images, boxes, (2, 2), flip, Finish(), sizes=drawn_for).shape[0] == 2


def test_fractional_boxes_weigh_taps_inside_the_box_only():
    weights, first = axis_weights(1.5, 3.0, 8, 3)  # the box covers 1.5 .. 4.5: taps 1 .. 4
    assert first == 1 and weights.shape == (3, 4)
    assert torch.allclose(weights.sum(dim=1), torch.ones(3))


FUSED_CHECK = textwrap.dedent(
    """
    import torch
    from fastload.decode.resample import crop_resize_finish_reference
    from fastload.finishing import Finish
    from fastload.decode.resample_triton import crop_resize_finish

    device = {device!r}
    generator = torch.Generator().manual_seed(0)
    images, boxes = [], []
    for height, width in [(1, 1), (7, 3), (37, 50), (64, 17), (12, 90)]:
        images.append(torch.randint(0, 256, (3, height, width), dtype=torch.uint8,
                                    generator=generator).to(device))
        box_h = int(torch.randint(1, height + 1, (1,), generator=generator))
        box_w = int(torch.randint(1, width + 1, (1,), generator=generator))
        boxes.append([float(height - box_h) / 2, 0.5 * (width - box_w), box_h, box_w])
    boxes = torch.tensor(boxes)
    flip = torch.tensor([True, False, True, True, False])
    # float32 on the 0..255 scale: a GPU fuses multiply-adds over a dozen taps in another
    # order than the reference, a few float32 steps at 255 (1.5e-5 each); normalised,
    # that error is divided by the smallest std on that scale (0.2 * 255)
    for finish, tolerance in [
        (Finish(dtype=torch.float32), 1e-3),
        (Finish(), 1),
        (Finish.normalized((0.5, 0.4, 0.3), (0.2, 0.25, 0.3), torch.float32, True),
         1e-3 / (0.2 * 255)),
    ]:
        for size in [(9, 13), (1, 1), (30, 20)]:
            expected = crop_resize_finish_reference(images, boxes, size, flip, finish)
            for hwc in (False, True):
                given = [image.permute(1, 2, 0).contiguous() for image in images] if hwc else images
                got = crop_resize_finish(given, boxes, size, flip, finish, hwc=hwc)
                assert got.dtype == expected.dtype and got.stride() == expected.stride()
                error = (got.float() - expected.float()).abs().max().item()
                assert error <= tolerance, (finish.dtype, size, hwc, error)
    # the decoders' images are read where they lie, whatever their strides: transposed
    # views (EXIF orientation), pitched HWC rows, and all of them in one buffer with gaps
    finish, size = Finish(dtype=torch.float32), (9, 13)
    expected = crop_resize_finish_reference(images, boxes, size, flip, finish)
    transposed = [image.transpose(1, 2).contiguous().transpose(1, 2) for image in images]
    pitched = []
    for image in images:
        rows = torch.zeros(image.shape[1], image.shape[2] + 5, 3, dtype=torch.uint8, device=device)
        rows[:, : image.shape[2]] = image.permute(1, 2, 0)
        pitched.append(rows[:, : image.shape[2]])
    shared = torch.zeros(sum(image.numel() + 7 for image in images), dtype=torch.uint8,
                         device=device)
    in_one, at = [], 7
    for image in images:
        view = shared[at : at + image.numel()].view(image.shape)
        in_one.append(view.copy_(image))
        at += image.numel() + 7
    assert not transposed[2].is_contiguous() and not pitched[2].is_contiguous()
    for name, given, hwc in [("transposed", transposed, False), ("pitched", pitched, True),
                             ("one buffer", in_one, False)]:
        got = crop_resize_finish(given, boxes, size, flip, finish, hwc=hwc)
        error = (got - expected).abs().max().item()
        assert error <= 1e-3, (name, error)
    # images as nvJPEG stores them, shown as their EXIF orientation says, with no copy
    import numpy as np
    from fastload.decode.orientation import orient
    orientations = np.array([6, 3, 8, 2, 5])
    shown = [orient(image, int(o)) for image, o in zip(images, orientations)]
    turned = []
    for image in shown:
        height, width = image.shape[1:]
        turned.append([0.25 * (height - 1), 0.25 * width, (height + 1) / 2, 0.75 * width])
    turned = torch.tensor(turned)
    expected = crop_resize_finish_reference(shown, turned, size, flip, finish)
    got = crop_resize_finish(images, turned, size, flip, finish, orientations=orientations,
                             sizes=np.array([image.shape[1:] for image in shown]))
    error = (got - expected).abs().max().item()
    assert error <= 1e-3, ("orientations", error)
    print("equal")
    """
)


def test_the_kernels_table_points_at_each_image_where_it_lies():
    resample_triton = pytest.importorskip("fastload.decode.resample_triton")
    chw = torch.zeros(3, 4, 5, dtype=torch.uint8)
    transposed = torch.zeros(3, 6, 4, dtype=torch.uint8).transpose(1, 2)  # (3, 4, 6)
    boxes = torch.tensor([[0.0, 0.0, 4.0, 5.0], [1.0, 0.5, 2.0, 5.5]])
    table = resample_triton.image_table(
        [chw, transposed], boxes, (2, 2), torch.tensor([True, False]), chw.device
    )
    assert table.dtype == torch.int64 and table.shape == (2, len(resample_triton.COLUMNS))
    assert table[:, 0].tolist() == [chw.data_ptr(), transposed.data_ptr()]  # no copy read
    # height, width, strides (channel, row, column), taps along y and x, flip
    assert table[:, 1:].tolist() == [[4, 5, 20, 5, 1, 6, 8, 1], [4, 6, 24, 1, 4, 4, 8, 0]]
    hwc = torch.zeros(4, 5, 3, dtype=torch.uint8)
    row = resample_triton.image_table([hwc], boxes[:1], (2, 2), torch.tensor([False]),
                                      hwc.device, hwc=True)  # fmt: skip
    assert row[0, 1:6].tolist() == [4, 5, 1, 15, 3]


@pytest.mark.parametrize(
    ("image", "hwc", "message"),
    [
        (
            torch.zeros(3, 4, 5),
            False,
            r"image 1: a uint8 \(3, H, W\) image expected, got torch.float32",
        ),
        (
            torch.zeros(1, 4, 5, dtype=torch.uint8),
            False,
            r"image 1: .* got torch.uint8 \(1, 4, 5\)",
        ),
        (torch.zeros(4, 5, dtype=torch.uint8), False, r"image 1: .* \(4, 5\)"),
        (torch.zeros(3, 4, 5, dtype=torch.uint8), True, r"image 1: a uint8 \(H, W, 3\) image"),
        (
            torch.zeros(3, 4, 5, dtype=torch.uint8, device="meta"),
            False,
            "image 1 is on meta, the batch on cpu",
        ),
    ],
)
def test_an_image_the_kernel_cannot_read_as_its_row_says_is_refused_by_index(image, hwc, message):
    resample_triton = pytest.importorskip("fastload.decode.resample_triton")
    first = torch.zeros((4, 5, 3) if hwc else (3, 4, 5), dtype=torch.uint8)
    boxes, flip = torch.tensor([[0.0, 0.0, 4.0, 5.0]] * 2), torch.tensor([False, False])
    with pytest.raises(ValueError, match=message):
        resample_triton.image_table([first, image], boxes, (2, 2), flip, first.device, hwc=hwc)


@pytest.mark.slow
def test_the_triton_kernel_equals_the_reference_in_the_interpreter():
    pytest.importorskip("triton", reason="needs Triton (with torch's Linux wheels)")
    done = subprocess.run(
        [sys.executable, "-c", FUSED_CHECK.format(device="cpu")],
        env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "equal", done.stderr[-3000:]


@pytest.mark.needs_cuda
def test_the_triton_kernel_equals_the_reference_on_cuda():
    pytest.importorskip("triton", reason="needs Triton (with torch's Linux wheels)")
    namespace: dict = {}
    exec(FUSED_CHECK.format(device="cuda"), namespace)
