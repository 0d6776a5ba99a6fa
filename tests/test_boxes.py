"""torchvision's box draw, once: the batch form (tensors) and the per-sample form (plain
Python) give the same boxes for the same uniforms, fallbacks included; the modules and
the CPU transform that use it."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastload import gpu, transforms
from fastload.boxes import TRIES, sample_box, sample_boxes
from fastload.decode import GPUDecoder

uniform = st.floats(0.0, 1.0, exclude_max=True, width=32)  # exact in float32, as torch.rand
tries = st.lists(st.tuples(uniform, uniform, uniform, uniform), min_size=TRIES, max_size=TRIES)
ranges = st.tuples(st.floats(0.01, 3.0), st.floats(0.01, 3.0)).map(lambda r: tuple(sorted(r)))
ratios = st.tuples(st.floats(0.1, 10.0), st.floats(0.1, 10.0)).map(lambda r: tuple(sorted(r)))


def batch_form(sizes, uniforms, scale, ratio, erasing, *, numpy=False):
    heights = torch.tensor([h for h, _ in sizes], dtype=torch.float32)
    widths = torch.tensor([w for _, w in sizes], dtype=torch.float32)
    uniforms = torch.tensor(uniforms)
    if numpy:  # the same rule on NumPy arrays, as GPUDecoder draws on the host
        heights, widths, uniforms = heights.numpy(), widths.numpy(), uniforms.numpy()
    boxes = sample_boxes(heights, widths, uniforms, scale, ratio, erasing=erasing)
    assert all(isinstance(v, np.ndarray) == numpy for v in boxes)  # what it was given
    assert all(v.dtype == (np.float32 if numpy else torch.float32) for v in boxes[:4])
    columns = [[int(x) for x in v.tolist()] for v in boxes[:4]]
    return list(zip(*columns, boxes.found.tolist(), strict=True))


@settings(max_examples=300, deadline=None)
@given(
    images=st.lists(st.tuples(st.integers(1, 1200), st.integers(1, 1200), tries), min_size=1,
                    max_size=8),
    scale=ranges,
    ratio=ratios,
    erasing=st.booleans(),
    numpy=st.booleans(),
)  # fmt: skip
def test_the_batch_and_the_sample_form_draw_the_same_boxes(images, scale, ratio, erasing, numpy):
    sizes = [(h, w) for h, w, _ in images]
    uniforms = [draws for _, _, draws in images]
    together = batch_form(sizes, uniforms, scale, ratio, erasing, numpy=numpy)
    alone = [sample_box(h, w, draws, scale, ratio, erasing=erasing) for h, w, draws in images]
    assert together == alone
    for (height, width), (top, left, box_h, box_w, _) in zip(sizes, alone, strict=True):
        assert top >= 0 and top + box_h <= height and left >= 0 and left + box_w <= width


@pytest.mark.parametrize(
    ("height", "width", "ratio", "want"),
    [
        (100, 400, (3 / 4, 4 / 3), (0, 133, 100, 133)),  # too wide: clamped to 4/3, centred
        (400, 100, (3 / 4, 4 / 3), (133, 0, 133, 100)),  # too tall: clamped to 3/4
        (100, 110, (1.0, 1.0), (0, 5, 100, 100)),
        (90, 100, (0.5, 2.0), (0, 0, 90, 100)),  # within the ratios: the whole image
    ],
)
def test_after_ten_failed_tries_both_forms_take_the_centre(height, width, ratio, want):
    # a scale above 1 never fits: every try fails, and both fall back to the centre crop
    draws = torch.rand(1, TRIES, 4, generator=torch.Generator().manual_seed(0))
    together = batch_form([(height, width)], draws.tolist(), (2.0, 3.0), ratio, False)
    on_the_host = batch_form([(height, width)], draws.tolist(), (2.0, 3.0), ratio, False,
                             numpy=True)  # fmt: skip
    alone = sample_box(height, width, draws[0].tolist(), (2.0, 3.0), ratio)
    assert together == on_the_host == [alone] == [(*want, False)]


def test_erasing_that_never_fits_erases_nothing():
    module = gpu.RandomErasing(p=1.0, scale=(1.0, 1.0), ratio=(1.0, 1.0), value=255)
    batch = torch.zeros(3, 3, 8, 8, dtype=torch.uint8)
    assert not module.sample_params(batch.shape, batch.device)["apply"].any()
    assert torch.equal(module(batch), batch)


def test_the_sample_form_reads_only_the_tries_it_needs():
    taken = []

    def draws():
        for index in range(TRIES):
            taken.append(index)
            yield (0.5, 0.5, 0.5, 0.5)

    assert sample_box(100, 100, draws(), (0.5, 0.5), (1.0, 1.0))[4]
    assert taken == [0]


@settings(max_examples=50, deadline=None)
@given(height=st.integers(1, 600), width=st.integers(1, 600), seed=st.integers(0, 2**16))
def test_crop_box_is_the_sample_form_on_four_uniforms_a_try(height, width, seed):
    rng = random.Random(seed)
    draws = [tuple(rng.random() for _ in range(4)) for _ in range(TRIES)]
    box = transforms.crop_box(height, width, rng=random.Random(seed))
    assert box == sample_box(height, width, draws, (0.08, 1.0), (3 / 4, 4 / 3))[:4]


def test_the_decoder_and_the_module_draw_the_same_boxes():
    sizes = torch.tensor([[48.0, 64.0]] * 16)
    decoder = GPUDecoder(16, device="cpu", scale=(0.2, 0.9), ratio=(0.5, 2.0))
    module = gpu.BatchRandomResizedCrop(16, scale=(0.2, 0.9), ratio=(0.5, 2.0))
    from_decoder = decoder.sample_params(sizes, torch.Generator().manual_seed(3))
    from_module = module.sample_params(
        torch.Size((16, 3, 48, 64)), torch.device("cpu"), torch.Generator().manual_seed(3)
    )
    assert from_decoder.keys() == {*from_module.keys(), "flip"}  # the decoder flips too
    assert all(torch.equal(from_decoder[k], from_module[k]) for k in from_module)
    assert not from_decoder["flip"].any()  # flip=0: no coin drawn, no draw moved


def test_the_old_names_are_the_classes():
    assert gpu.RandomResizedCrop is gpu.BatchRandomResizedCrop
    assert transforms.RandomResizedCrop is transforms.DecodeRandomResizedCrop
    assert repr(gpu.RandomResizedCrop(8)).startswith("BatchRandomResizedCrop(")
    assert repr(transforms.RandomResizedCrop(8)).startswith("DecodeRandomResizedCrop(")


def test_the_box_draw_loads_without_the_modules():
    import subprocess
    import sys

    code = "import sys, fastload.boxes; print(any(m in sys.modules for m in " \
        "('fastload.gpu.geometric', 'fastload.gpu.base', 'fastload.gpu.policies')))"  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert gpu.RandomErasing.__module__ == "fastload.gpu.erase"  # names load on first use


@pytest.mark.parametrize("crop", ["center", "resize", "random"])
def test_crop_boxes_on_numpy_arrays_are_the_tensors_boxes(crop):
    from fastload.boxes import crop_boxes

    generator = torch.Generator().manual_seed(1)
    sizes = torch.randint(1, 900, (64, 2), generator=generator).float()
    uniforms = torch.rand(64, TRIES, 4, generator=generator)
    options = {"scale": (0.08, 1.0), "ratio": (3 / 4, 4 / 3), "crop_fraction": 0.875}
    on_tensors = crop_boxes(sizes, crop, (224, 160), uniforms=uniforms, **options)
    on_arrays = crop_boxes(sizes.numpy(), crop, (224, 160), uniforms=uniforms.numpy(), **options)
    assert on_tensors.keys() == on_arrays.keys() == {"top", "left", "height", "width"}
    for key, value in on_arrays.items():
        assert isinstance(value, np.ndarray) and value.dtype == np.float32, key
        if crop == "center":  # fractional boxes: torch's float32 division may round apart
            assert np.allclose(value, on_tensors[key].numpy(), rtol=1e-6, atol=1e-4), key
        else:  # whole pixels
            assert torch.equal(torch.from_numpy(value), on_tensors[key]), key
