"""fastload.gpu: one shared contract for every module, then parity with torchvision's
functional kernels applied image by image, for the same (fixed) parameters.

Tolerances: float32 images match torchvision to 1e-5, except RandomResizedCrop
(roi_align's averaging vs torchvision's triangle antialias filter: mean 3e-3, max 0.08).
uint8 images match to 1 level, except ColorJitter (all four operations: 8 levels, mean
2; over 80 seeds the worst was 6 and 1.7), because torchvision truncates to uint8 after
every operation while we round once at the end.
"""

from __future__ import annotations

import pickle

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torchvision.transforms.v2 import functional as TF

from common_utils import cpu_and_cuda
from fastload import DataPrefetcher, gpu


def images(n=6, height=40, width=56, dtype=torch.uint8, device="cpu", seed=0) -> torch.Tensor:
    """Smooth random images: a coarse grid upsampled, like photographs, not noise."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.rand(n, 3, 5, 7, generator=generator)
    smooth = nn.functional.interpolate(coarse, size=(height, width), mode="bicubic").clamp(0, 1)
    out = (smooth * 255).round().to(torch.uint8) if dtype == torch.uint8 else smooth.to(dtype)
    return out.to(device)


MODULES = {
    "RandomResizedCrop": lambda: gpu.RandomResizedCrop(24),
    "RandomCrop": lambda: gpu.RandomCrop(24, padding=4),
    "CenterCrop": lambda: gpu.CenterCrop(24),
    "Resize": lambda: gpu.Resize((24, 30)),
    "RandomHorizontalFlip": lambda: gpu.RandomHorizontalFlip(),
    "RandomVerticalFlip": lambda: gpu.RandomVerticalFlip(),
    "ColorJitter": lambda: gpu.ColorJitter(0.4, 0.4, 0.4, 0.1),
    "RandomGrayscale": lambda: gpu.RandomGrayscale(p=0.5),
    "GaussianBlur": lambda: gpu.GaussianBlur(5, sigma=(1.0, 2.0)),  # 0.1 would be the identity
    "RandomErasing": lambda: gpu.RandomErasing(p=0.9),
}
FLOAT_ONLY = {"Normalize": lambda: gpu.Normalize((0.5, 0.4, 0.3), (0.2, 0.3, 0.4))}
PROBABILISTIC = [
    "RandomHorizontalFlip",
    "RandomVerticalFlip",
    "ColorJitter",
    "RandomGrayscale",
    "GaussianBlur",
    "RandomErasing",
]
#: Public modules that the image contract above cannot take, each with its own tests.
OUTSIDE_THE_CONTRACT = {
    "BatchTransform": "the base class",
    "GPUDecoder": "takes encoded bytes: tests/gpu/test_decode.py",
    "MixUp": "takes (images, labels): the mixing tests below",
    "CutMix": "takes (images, labels): the mixing tests below",
    "ToDtype": "changes the dtype: its parity test below",
}
OUTPUT_SHAPE = {
    "RandomResizedCrop": (24, 24),
    "RandomCrop": (24, 24),
    "CenterCrop": (24, 24),
    "Resize": (24, 30),
}


# --- the contract every module keeps ---------------------------------------------------------


def test_every_public_module_is_enrolled_in_the_contract_or_says_why_not():
    enrolled = set(MODULES) | set(FLOAT_ONLY) | set(OUTSIDE_THE_CONTRACT)
    assert set(gpu.__all__) == enrolled


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float16])
@pytest.mark.parametrize("name", MODULES)
def test_smoke_shape_dtype_and_device(name, dtype, device):
    batch = images(dtype=dtype, device=device)
    out = MODULES[name]()(batch)
    assert out.dtype == dtype and out.device == batch.device
    assert out.shape == (6, 3, *OUTPUT_SHAPE.get(name, (40, 56)))
    if dtype != torch.uint8:
        assert out.min() >= 0 and out.max() <= 1.0 + 1e-3


@pytest.mark.parametrize("name", PROBABILISTIC)
def test_p_zero_is_the_identity_and_p_one_changes_every_sample(name):
    batch = images()
    module = MODULES[name]()
    module.p = 0.0
    assert torch.equal(module(batch), batch)
    module.p = 1.0
    changed = (module(batch) != batch).flatten(1).any(dim=1)
    assert changed.all()


@pytest.mark.parametrize("name", MODULES | FLOAT_ONLY)
def test_fixed_params_replay_and_compose_and_pickle(name):
    batch = images(dtype=torch.float32)
    module = (MODULES | FLOAT_ONLY)[name]()
    params = module.sample_params(batch.shape, batch.device)
    assert torch.equal(module(batch, params=params), module(batch, params=params))
    assert nn.Sequential(module, nn.Identity())(batch).shape[0] == 6
    clone = pickle.loads(pickle.dumps(module))
    assert torch.equal(clone(batch, params=params), module(batch, params=params))
    assert repr(module).startswith(name + "(")


@pytest.mark.parametrize("name", MODULES)
def test_bad_input_is_rejected_clearly(name):
    module = MODULES[name]()
    with pytest.raises(
        ValueError, match=rf"{name} expects a 4-D batch \(N, C, H, W\), got shape \(3, 40, 56\)"
    ):
        module(images()[0])
    with pytest.raises(TypeError, match=rf"{name} expects a tensor batch"):
        module([images()])
    with pytest.raises(
        TypeError, match=rf"{name} expects uint8 or floating images, got torch.int32"
    ):
        module(images().int())


@pytest.mark.parametrize("name", MODULES | FLOAT_ONLY)
def test_an_empty_batch_gives_an_empty_batch(name):
    empty = images(dtype=torch.float32)[:0]
    out = (MODULES | FLOAT_ONLY)[name]()(empty)
    assert out.shape == (0, 3, *OUTPUT_SHAPE.get(name, (40, 56))) and out.dtype == torch.float32


@pytest.mark.parametrize("name", MODULES)
def test_a_channels_last_batch_is_refused_not_silently_misread(name):
    nhwc = images().permute(0, 2, 3, 1)  # (6, 40, 56, 3): what an HWC dataset collates to
    with pytest.raises(ValueError, match=rf"{name} expects channels first .* looks channels-last"):
        MODULES[name]()(nhwc)
    # channels_last *memory format* is still NCHW, and fine
    assert MODULES[name]()(images().contiguous(memory_format=torch.channels_last)).shape[1] == 3


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("make", [
    lambda: gpu.ColorJitter(brightness=NAN),
    lambda: gpu.ColorJitter(contrast=(0.5, INF)),
    lambda: gpu.ColorJitter(saturation=INF),
    lambda: gpu.ColorJitter(hue=NAN),
    lambda: gpu.RandomHorizontalFlip(p=NAN),
    lambda: gpu.RandomResizedCrop(24, scale=(NAN, 1.0)),
    lambda: gpu.RandomResizedCrop(24, ratio=(0.75, INF)),
    lambda: gpu.GaussianBlur(5, sigma=NAN),
    lambda: gpu.RandomErasing(value=NAN),
    lambda: gpu.RandomErasing(scale=(0.02, NAN)),
    lambda: gpu.RandomCrop(24, padding=4, fill=NAN),
    lambda: gpu.Normalize((0.5, NAN, 0.5), (0.2, 0.2, 0.2)),
    lambda: gpu.Normalize((0.5, 0.5, 0.5), (0.2, INF, 0.2)),
    lambda: gpu.MixUp(alpha=NAN, num_classes=10),
    lambda: gpu.CutMix(alpha=INF, num_classes=10),
])  # fmt: skip
def test_nan_and_infinite_parameters_are_refused(make):
    with pytest.raises(ValueError, match=r"must be (a finite number|a probability)"):
        make()


@pytest.mark.parametrize("name", ["ColorJitter", "RandomGrayscale"])
def test_colour_modules_need_three_channels(name):
    with pytest.raises(
        ValueError, match=rf"{name} works on RGB images \(3 channels\), got 1 channels"
    ):
        MODULES[name]()(images()[:, :1])


@pytest.mark.parametrize("name", [n for n in MODULES if n not in ("CenterCrop", "Resize")])
def test_each_sample_draws_its_own_parameters_unless_same_on_batch(name):
    module = MODULES[name]()
    shape, device = torch.Size((64, 3, 40, 56)), torch.device("cpu")
    params = module.sample_params(shape, device)
    # Coin flips vary only when 0 < p < 1; every drawn value varies.
    varying = [
        v
        for v in params.values()
        if v.shape[:1] == (64,) and (v.dtype != torch.bool or 0 < module.p < 1)
    ]
    assert varying and all(len(set(v.tolist())) > 1 for v in varying)
    module.same_on_batch = True
    params = module.sample_params(shape, device)
    assert all(len(set(v.tolist())) == 1 for v in params.values() if v.shape[:1] == (64,))


@pytest.mark.parametrize("name", MODULES)
def test_a_generator_makes_results_reproducible(name):
    batch = images()

    def run(seed):
        module = MODULES[name]()
        module.generator = torch.Generator().manual_seed(seed)
        return module(batch)

    assert torch.equal(run(1), run(1))
    if name not in ("CenterCrop", "Resize"):
        assert not torch.equal(run(1), run(2))


def test_float32_maths_under_autocast():
    batch = images(dtype=torch.float32)
    module = gpu.ColorJitter(0.4, 0.4, 0.4, 0.1)
    params = module.sample_params(batch.shape, batch.device)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module(batch, params=params)
    assert out.dtype == torch.float32 and torch.equal(out, module(batch, params=params))


# --- parity with torchvision.transforms.v2.functional, image by image ----------------------

FLOAT_TOL = {"rtol": 0, "atol": 1e-5}


def assert_parity(ours, reference, dtype, *, uint8_max=1, uint8_mean=0.75):
    if dtype == torch.uint8:
        difference = (ours.int() - reference.int()).abs()
        assert difference.max() <= uint8_max and difference.float().mean() <= uint8_mean
    else:
        torch.testing.assert_close(ours, reference, **FLOAT_TOL)


def per_image(batch, fn):
    return torch.stack([fn(i, image) for i, image in enumerate(batch)])


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_flips_equal_torchvision(dtype):
    batch = images(dtype=dtype)
    for module, kernel in [
        (gpu.RandomHorizontalFlip(), TF.horizontal_flip),
        (gpu.RandomVerticalFlip(), TF.vertical_flip),
    ]:
        params = module.sample_params(batch.shape, batch.device)
        flipped = [kernel(x) if params["apply"][i] else x for i, x in enumerate(batch)]
        assert torch.equal(module(batch, params=params), torch.stack(flipped))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("padding_mode", ["constant", "edge", "reflect"])
def test_random_crop_equals_torchvision_exactly(dtype, padding_mode):
    batch = images(dtype=dtype)
    module = gpu.RandomCrop(
        24, padding=(3, 5), fill=7 if dtype == torch.uint8 else 0.5, padding_mode=padding_mode
    )
    params = module.sample_params(batch.shape, batch.device)
    reference = per_image(
        batch,
        lambda i, x: TF.crop(
            TF.pad(x, [3, 5], fill=module.fill, padding_mode=padding_mode),
            int(params["top"][i]),
            int(params["left"][i]),
            24,
            24,
        ),
    )
    assert torch.equal(module(batch, params=params), reference)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("size", [24, 70, (30, 60)])
def test_center_crop_equals_torchvision(dtype, size):
    batch = images(dtype=dtype)
    assert torch.equal(
        gpu.CenterCrop(size)(batch),
        TF.center_crop(batch, size if isinstance(size, tuple) else [size]),
    )


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("size", [20, (24, 30), 80])
def test_resize_equals_torchvision(dtype, size):
    batch = images(dtype=dtype)
    assert_parity(
        gpu.Resize(size)(batch),
        TF.resize(batch, size, antialias=True),
        dtype,
    )


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_random_resized_crop_matches_torchvision(dtype):
    batch = images(n=16, dtype=dtype)
    module = gpu.RandomResizedCrop((24, 32), scale=(0.2, 1.0))
    params = module.sample_params(batch.shape, batch.device)
    reference = per_image(
        batch,
        lambda i, x: TF.resized_crop(
            x,
            int(params["top"][i]),
            int(params["left"][i]),
            int(params["height"][i]),
            int(params["width"][i]),
            [24, 32],
            antialias=True,
        ),
    )
    difference = (module(batch, params=params).double() - reference.double()).abs() / (
        255 if dtype == torch.uint8 else 1
    )
    assert difference.mean() < 3e-3 and difference.max() < 0.08


def colour_reference(module, params, batch):
    kernels = {
        "brightness": TF.adjust_brightness,
        "contrast": TF.adjust_contrast,
        "saturation": TF.adjust_saturation,
        "hue": TF.adjust_hue,
    }

    def one(i, image):
        if not params["apply"][i]:
            return image
        for index in params["order"].tolist():
            name = module.OPERATIONS[index]
            if name in params:
                image = kernels[name](image, params[name][i].item())
        return image

    return per_image(batch, one)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("only", ["brightness", "contrast", "saturation", "hue", None])
def test_color_jitter_matches_torchvision(dtype, only):
    batch = images(dtype=dtype)
    kwargs = {"brightness": 0.5, "contrast": 0.5, "saturation": 0.5, "hue": 0.2}
    module = gpu.ColorJitter(**({only: kwargs[only]} if only else kwargs), p=0.8)
    params = module.sample_params(batch.shape, batch.device)
    ours, reference = module(batch, params=params), colour_reference(module, params, batch)
    assert_parity(ours, reference, dtype, uint8_max=8 if only is None else 2, uint8_mean=2.0)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_grayscale_matches_torchvision(dtype):
    batch = images(dtype=dtype)
    module = gpu.RandomGrayscale(p=0.5)
    params = module.sample_params(batch.shape, batch.device)
    reference = per_image(
        batch, lambda i, x: TF.rgb_to_grayscale(x, 3) if params["apply"][i] else x
    )
    assert_parity(module(batch, params=params), reference, dtype)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("kernel_size", [3, (5, 9)])
def test_gaussian_blur_matches_torchvision(dtype, kernel_size):
    batch = images(dtype=dtype)
    module = gpu.GaussianBlur(kernel_size, sigma=(0.3, 3.0))
    params = module.sample_params(batch.shape, batch.device)
    sizes = [kernel_size] * 2 if isinstance(kernel_size, int) else list(kernel_size)
    reference = per_image(
        batch, lambda i, x: TF.gaussian_blur(x, sizes, [params["sigma"][i].item()] * 2)
    )
    assert_parity(module(batch, params=params), reference, dtype)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_random_erasing_equals_torchvision_erase(dtype):
    batch = images(n=16, dtype=dtype)
    module = gpu.RandomErasing(p=0.7, value=(9, 8, 7) if dtype == torch.uint8 else (0.1, 0.2, 0.3))
    params = module.sample_params(batch.shape, batch.device)
    fill = torch.tensor(module.value).view(3, 1, 1).to(dtype)

    def one(i, x):
        if not params["apply"][i]:
            return x
        top, left, height, width = (int(params[k][i]) for k in ("top", "left", "height", "width"))
        return TF.erase(x, top, left, height, width, fill)

    assert torch.equal(module(batch, params=params), per_image(batch, one))


def test_normalize_and_to_dtype_equal_torchvision():
    batch = images()
    as_float = gpu.ToDtype(torch.float32, scale=True)(batch)
    torch.testing.assert_close(as_float, TF.to_dtype(batch, torch.float32, scale=True))
    module = FLOAT_ONLY["Normalize"]()
    torch.testing.assert_close(
        module(as_float), TF.normalize(as_float, list(module.mean), list(module.std))
    )
    with pytest.raises(
        TypeError,
        match=r"Normalize expects floating images, got torch\.uint8; convert with ToDtype first",
    ):
        module(batch)
    with pytest.raises(ValueError, match="Normalize has mean/std for 3 channels, images have 1"):
        module(as_float[:, :1])


# --- parameter properties ------------------------------------------------------------------


@given(
    height=st.integers(8, 200),
    width=st.integers(8, 200),
    scale=st.tuples(st.floats(0.01, 1.0), st.floats(0.01, 1.0)).map(sorted),
    ratio=st.tuples(st.floats(0.2, 5.0), st.floats(0.2, 5.0)).map(sorted),
    seed=st.integers(0, 2**16),
)
def test_resized_crop_boxes_always_lie_inside_the_image(height, width, scale, ratio, seed):
    module = gpu.RandomResizedCrop(
        16, scale=scale, ratio=ratio, generator=torch.Generator().manual_seed(seed)
    )
    params = module.sample_params(torch.Size((32, 3, height, width)), torch.device("cpu"))
    assert (params["height"] >= 1).all() and (params["width"] >= 1).all()
    assert (params["top"] >= 0).all() and (params["left"] >= 0).all()
    assert (params["top"] + params["height"] <= height).all()
    assert (params["left"] + params["width"] <= width).all()


@given(
    shape=st.tuples(st.integers(1, 4), st.integers(12, 40), st.integers(12, 40)),
    dtype=st.sampled_from([torch.uint8, torch.float32, torch.float64, torch.bfloat16]),
    brightness=st.floats(0, 1),
    hue=st.floats(0, 0.5),
)
def test_color_jitter_keeps_shape_dtype_and_range(shape, dtype, brightness, hue):
    n, height, width = shape
    batch = images(n, height, width, dtype=dtype)
    out = gpu.ColorJitter(brightness=brightness, contrast=0.3, saturation=0.3, hue=hue)(batch)
    assert out.shape == batch.shape and out.dtype == dtype
    assert out.min() >= 0 and out.max() <= (255 if dtype == torch.uint8 else 1.0 + 1e-2)


@given(
    size=st.tuples(st.integers(1, 30), st.integers(1, 30)),
    padding=st.integers(0, 6),
    dtype=st.sampled_from([torch.uint8, torch.float32]),
)
def test_random_crop_output_size(size, padding, dtype):
    batch = images(2, 24, 24, dtype=dtype)
    out = gpu.RandomCrop(size, padding=padding, pad_if_needed=True)(batch)
    assert out.shape == (2, 3, *size) and out.dtype == dtype


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: gpu.RandomHorizontalFlip(p=1.5), r"p must be a probability in \[0, 1\], got 1.5"),
        (lambda: gpu.ColorJitter(brightness=-1), "brightness must be non-negative"),
        (lambda: gpu.ColorJitter(hue=0.7), r"hue values must lie in \[-0.5, 0.5\]"),
        (lambda: gpu.GaussianBlur(4), "kernel_size must be odd and positive"),
        (lambda: gpu.RandomCrop(8, padding_mode="symmetric"), "padding_mode must be one of"),
        (lambda: gpu.RandomResizedCrop(0), r"size must be a positive int or \(h, w\)"),
        (
            lambda: gpu.RandomErasing(scale=(0.5, 0.1)),
            r"scale must be \(min, max\) with min <= max",
        ),
        (lambda: gpu.Normalize((0.5,), (0.0,)), "std must be positive"),
        (lambda: gpu.MixUp(alpha=0, num_classes=3), "alpha must be positive"),
    ],
)
def test_bad_arguments_are_rejected(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_crop_larger_than_the_image_is_an_error():
    with pytest.raises(
        ValueError, match=r"crop size \(50, 50\) is larger than the \(padded\) image \(40, 56\)"
    ):
        gpu.RandomCrop(50)(images())


# --- batch mixing ----------------------------------------------------------------------------


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


# --- in the pipeline and on CUDA -----------------------------------------------------------


def test_as_the_transform_of_a_data_prefetcher():
    augment = nn.Sequential(
        gpu.RandomResizedCrop(24), gpu.RandomHorizontalFlip(), gpu.ColorJitter(0.2, 0.2)
    )
    batches = [(images(seed=i), torch.arange(6)) for i in range(3)]
    out = list(DataPrefetcher(batches, "cpu", transform=augment, mean=(0.5,) * 3, std=(0.25,) * 3))
    assert [tuple(x.shape) for x, _ in out] == [(6, 3, 24, 24)] * 3
    assert all(x.dtype == torch.float32 and x.abs().max() <= 2.0 + 1e-5 for x, _ in out)


@pytest.mark.needs_cuda
@pytest.mark.parametrize("name", MODULES)
def test_cuda_equals_cpu_for_the_same_parameters(name):
    batch = images(dtype=torch.float32)
    module = MODULES[name]()
    params = module.sample_params(batch.shape, batch.device)
    on_cpu = module(batch, params=params)
    on_cuda = module(
        batch.cuda(), params={k: v.cuda() if k != "order" else v for k, v in params.items()}
    )
    torch.testing.assert_close(on_cuda.cpu(), on_cpu, rtol=0, atol=1e-4)


def test_module_apply_still_walks_a_model_that_holds_them():
    seen = []
    model = nn.Sequential(*(make() for make in (MODULES | FLOAT_ONLY).values()), nn.Conv2d(3, 3, 1))
    model.apply(lambda module: seen.append(type(module).__name__))  # weight init does this
    assert seen[-1] == "Sequential" and len(seen) == len(MODULES) + len(FLOAT_ONLY) + 2
