"""Every fastload.gpu module keeps one contract (Kornia's CommonTests, torchvision's
device parametrisation), in the pipeline and on CUDA too.
"""

from __future__ import annotations

import pickle

import pytest
import torch
from torch import nn

from common_utils import cpu_and_cuda
from fastload import DataPrefetcher, gpu
from gpu_cases import (
    FLOAT_ONLY,
    MODULES,
    OUTPUT_SHAPE,
    OUTSIDE_THE_CONTRACT,
    PROBABILISTIC,
    images,
)


def test_every_public_module_is_enrolled_in_the_contract_or_says_why_not():
    enrolled = set(MODULES) | set(FLOAT_ONLY) | set(OUTSIDE_THE_CONTRACT)
    assert set(gpu.__all__) == enrolled


NAN = float("nan")


INF = float("inf")


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
    # a module's repr names its class (gpu.RandomResizedCrop is BatchRandomResizedCrop)
    assert repr(module).startswith(type(module).__name__ + "(") and getattr(gpu, name) is type(
        module
    )


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
    lambda: gpu.RandomSolarize(threshold=NAN),
    lambda: gpu.RandomAdjustSharpness(sharpness_factor=INF),
    lambda: gpu.GaussianNoise(sigma=NAN),
    lambda: gpu.GaussianNoise(mean=INF),
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
    # Seeded: unseeded, all 64 coin flips at p=0.9 agree once in about 850 runs.
    torch.manual_seed(0)
    module = MODULES[name]()
    shape, device = torch.Size((64, 3, 40, 56)), torch.device("cpu")
    params = module.sample_params(shape, device)
    # Coin flips vary only when 0 < p < 1; every drawn value varies.
    varying = [
        v
        for v in params.values()
        if v.shape[:1] == (64,) and (v.dtype != torch.bool or 0 < module.p < 1)
    ]
    assert varying and all(distinct_samples(v) > 1 for v in varying)
    module.same_on_batch = True
    params = module.sample_params(shape, device)
    assert all(distinct_samples(v) == 1 for v in params.values() if v.shape[:1] == (64,))


def distinct_samples(values: torch.Tensor) -> int:
    """How many different per-sample values (scalars or whole tensors) a batch holds."""
    return len({tuple(row) for row in values.reshape(len(values), -1).tolist()})


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
