"""timm train.py's recipes through fastload's create_loader, against timm's own
transforms: ``--train-crop-mode rkrc/rkrr``, ``--aa 3a`` (DeiT-III) and its RandAugment
sets, ``--aug-splits`` (AugMix and the JSD loss)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, ImageFilter

import fastload
from fastload.gpu.color import ColorJitter
from fastload.integrations.timm import TimmAutoAugment, augment_from_string, create_loader
from fastload.integrations.timm.pipeline import device_augment
from fastload.integrations.timm.splits import SplitAugment
from fastload.integrations.timm.transforms import KeepRatioCrop, train_crop

timm_data = pytest.importorskip("timm.data")
timm_augment = pytest.importorskip("timm.data.auto_augment")

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _image(height: int, width: int, seed: int = 0) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def _chw(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("recipes") / "train"
    return fastload.make_image_folder(root, num_classes=3, images_per_class=4, size=(48, 48))


# --- --train-crop-mode rkrc / rkrr ----------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    mode=st.sampled_from(["rkrc", "rkrr"]),
    interpolation=st.sampled_from(["bilinear", "bicubic", "random"]),
    height=st.integers(20, 90),
    width=st.integers(20, 90),
    out=st.tuples(st.integers(16, 40), st.integers(16, 40)),
    seed=st.integers(0, 2**16),
)
def test_keep_ratio_crops_equal_timms_for_the_same_seed(
    mode, interpolation, height, width, out, seed
):
    timm_tf = timm_data.create_transform(
        (3, *out), is_training=True, train_crop_mode=mode, interpolation=interpolation,
        hflip=0.0, color_jitter=None, use_prefetcher=True,
    )  # fmt: skip
    ours = train_crop(out, mode, None, None, interpolation)
    assert isinstance(ours, KeepRatioCrop) and ours.random == (mode == "rkrr")
    image = _image(height, width, seed)
    random.seed(seed)
    expected = torch.as_tensor(timm_tf(image))
    random.seed(seed)
    got = ours(image)
    assert got.dtype == torch.uint8 and torch.equal(got, expected)


def test_keep_ratio_crop_of_arrays_draws_timms_sizes(folder):
    """An array (fastload's datasets) takes timm's draws too; only the resampling
    differs from PIL's."""
    image = _image(50, 70, seed=3)
    timm_tf = timm_data.create_transform(
        (3, 32, 32), is_training=True, train_crop_mode="rkrr", hflip=0.0, color_jitter=None,
        use_prefetcher=True,
    )  # fmt: skip
    ours = train_crop((32, 32), "rkrr", None, None, "bilinear")
    for seed in range(10):
        random.seed(seed)
        expected = torch.as_tensor(timm_tf(image)).float()
        random.seed(seed)
        got = ours(np.array(image))
        assert got.shape == (3, 32, 32)
        assert (got.float() - expected).abs().mean() < 8


def test_train_crop_mode_reaches_the_loader_and_bad_modes_are_named(folder):
    dataset = fastload.ImageFolder(folder)
    loader = create_loader(
        dataset, (3, 24, 32), batch_size=4, is_training=True, train_crop_mode="rkrc",
        num_workers=0, device="cpu",
    )  # fmt: skip
    assert isinstance(dataset.transform, KeepRatioCrop) and not dataset.transform.random
    assert dataset.transform.scale == (0.8, 1.0)  # timm's defaults for rkr crops
    images, _ = next(iter(loader))
    assert images.shape == (4, 3, 24, 32)
    with pytest.raises(ValueError, match=r"train_crop_mode.*'rkx'"):
        create_loader(dataset, 32, 2, is_training=True, train_crop_mode="rkx", device="cpu")


# --- --aa 3a (DeiT-III) and the t3a / t3aw RandAugment sets ---------------------------------


def _apply(augment, images, op, level, radius=None):
    """``augment`` with every sample given ``op`` at ``level`` (and blur draw ``radius``)."""
    n = len(images)
    params = augment.sample_params(images.shape, images.device)
    params["ops"] = torch.full((n, 1), augment.op_names.index(op))
    params["levels"] = torch.full((n, 1), float(level))
    if radius is not None:
        params["radii"] = torch.full((n, 1), float(radius))
    return augment(images, params=params)


def test_3a_is_timms_policy_and_keeps_colour_jitter():
    augment = augment_from_string("3a", image_size=32, mean=MEAN)
    timm_policy = timm_augment.auto_augment_policy("3a", hparams={})
    assert isinstance(augment, TimmAutoAugment)
    assert augment.sub_policies == [
        [(op.name, op.prob, op.magnitude) for op in sub] for sub in timm_policy
    ]
    modules = device_augment(
        (32, 32), augmenting=True, hflip=0.5, vflip=0.0, color_jitter=0.3,
        color_jitter_prob=None, grayscale_prob=0.0, gaussian_blur_prob=0.0,
        auto_augment="3a", interpolation="bicubic", mean=MEAN,
    )  # fmt: skip
    assert any(isinstance(m, ColorJitter) for m in modules)  # as timm: 3a keeps the jitter


def test_3a_operations_match_timms_pil_operations():
    image = _image(32, 32, seed=1)
    images = _chw(image)[None].repeat(2, 1, 1, 1)
    augment = augment_from_string("3a", image_size=32, mean=MEAN)
    solarized = _apply(augment, images, "Solarize", 5)
    assert torch.equal(solarized[0], _chw(timm_augment.solarize(image, 128)))
    grey = _apply(augment, images, "Desaturate", 10)
    expected = _chw(timm_augment.desaturate(image, 1.0)).int()
    assert (grey[0].int() - expected).abs().max() <= 1  # PIL rounds its grey once more
    # timm: a radius uniform in [0.1, 2 * level / 10]; a draw of 0.5 at level 10 is 1.05
    blurred = _apply(augment, images, "GaussianBlurRand", 10, radius=0.5)
    pil = _chw(image.filter(ImageFilter.GaussianBlur(radius=1.05))).float()
    inner = (slice(None), slice(4, -4), slice(4, -4))  # PIL extends the edge, we reflect
    error = (blurred[0].float() - pil)[inner].abs().mean()
    assert error < 2.0 < (images[0].float() - pil)[inner].abs().mean()


def test_3a_gives_each_image_one_of_three_operations():
    augment = augment_from_string("3a", image_size=32, mean=MEAN)
    augment.generator = torch.Generator().manual_seed(0)
    params = augment.sample_params(torch.Size([3000, 3, 8, 8]), torch.device("cpu"))
    counts = torch.bincount(params["ops"][:, 0], minlength=3)
    assert (params["ops"] >= 0).all()  # every sub-policy applies with probability 1
    assert ((counts - 1000).abs() < 100).all()
    assert params["radii"].min() >= 0 and params["radii"].max() <= 1


@pytest.mark.parametrize("config", ["rand-m9-mstd0.5-inc1-t3a", "rand-m9-n2-t3aw"])
def test_3a_rand_augment_sets_are_timms(config):
    augment = augment_from_string(config, image_size=32, mean=MEAN)
    choice = config.split("-t")[-1]
    chosen = timm_augment.rand_augment_choices(choice, increasing=True)
    assert list(augment.op_names) == list(chosen)
    if isinstance(chosen, dict):
        assert list(augment.weights) == [float(w) for w in chosen.values()]
    images = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    out = augment(images)
    assert out.shape == images.shape and out.dtype == torch.uint8


def test_3a_rand_blur_matches_timms_radius():
    image = _image(32, 32, seed=2)
    images = _chw(image)[None]
    augment = augment_from_string("rand-m9-t3a", image_size=32, mean=MEAN)
    blurred = _apply(augment, images, "GaussianBlur", 5)  # timm: radius 0.1 + 1.9 * 0.5
    pil = _chw(timm_augment.gaussian_blur(image, 1.05)).float()
    inner = (slice(None), slice(4, -4), slice(4, -4))
    assert (blurred[0].float() - pil)[inner].abs().mean() < 2.0


# --- --aug-splits (AugMix, the JSD loss) ----------------------------------------------------


def _split_loader(dataset, **kwargs):
    options = dict(
        input_size=(3, 32, 32), batch_size=4, is_training=True, scale=(1.0, 1.0),
        ratio=(1.0, 1.0), hflip=0.0, color_jitter=None, auto_augment="augmix-m3-w3",
        num_workers=0, device="cpu",
    )  # fmt: skip
    return create_loader(dataset, **{**options, **kwargs})


def _normalise(images: torch.Tensor) -> torch.Tensor:
    mean, std = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
    return (images.float() / 255 - mean) / std


def test_aug_splits_build_timms_split_batches(folder):
    """train.py wraps the data in AugMixDataset: the batch is [clean; aug; aug], the
    targets repeated, as timm's fast_collate orders them."""
    dataset = timm_data.AugMixDataset(timm_data.create_dataset("", root=str(folder)), 3)
    loader = _split_loader(dataset, num_aug_splits=3)
    assert loader.dataset is dataset and len(loader) == 3
    inner, raw = dataset.dataset, timm_data.create_dataset("", root=str(folder))
    images, target = next(iter(loader))
    assert images.shape == (12, 3, 32, 32) and target.shape == (12,)
    assert torch.equal(target, target[:4].repeat(3))
    clean, first, second = images.split(4)
    # the whole square image resized (scale and ratio 1): the clean split is the crop alone
    crops = {inner.transform(image).numpy().tobytes(): label for image, label in raw}
    assert len(crops) == len(raw)
    restored = (clean * torch.tensor(STD).view(3, 1, 1) + torch.tensor(MEAN).view(3, 1, 1)) * 255
    for row, label in zip(restored.round().to(torch.uint8), target[:4].tolist(), strict=True):
        assert crops[row.numpy().tobytes()] == label
    assert not torch.allclose(first, clean) and not torch.allclose(second, clean)
    assert not torch.allclose(first, second)  # each split draws its own augmentation
    jsd = timm_loss().JsdCrossEntropy(num_splits=3)
    logits = torch.nn.Linear(3 * 32 * 32, 3)(images.flatten(1))
    assert torch.isfinite(jsd(logits, target))


def timm_loss():
    return pytest.importorskip("timm.loss")


def test_aug_splits_keep_the_flip_shared_and_erase_past_the_clean_split(folder):
    dataset = fastload.ImageFolder(folder)
    loader = _split_loader(
        dataset, num_aug_splits=2, hflip=1.0, auto_augment=None, re_prob=1.0, re_split=True
    )
    images, target = next(iter(loader))
    clean, erased = images.split(4)
    assert torch.equal(target[:4], target[4:])
    # no augmentation: the second split is the flipped crop again, then erased
    # a flip of its own would leave about no pixel in place; erasing takes under a third
    same = (clean == erased).flatten(1).float().mean(dim=1)
    assert ((same > 0.5) & (same < 1)).all()
    assert isinstance(loader.prefetcher.transform[0], SplitAugment)


@pytest.mark.slow
def test_aug_splits_in_cpu_workers_split_the_batch_there(folder):
    dataset = timm_data.AugMixDataset(timm_data.create_dataset("", root=str(folder)), 2)
    loader = _split_loader(dataset, num_workers=2)
    shapes = [(tuple(images.shape), tuple(target.shape)) for images, target in loader]
    assert shapes == [((8, 3, 32, 32), (8,))] * 3


def test_aug_splits_refusals_name_the_argument(folder):
    dataset = fastload.ImageFolder(folder)
    with pytest.raises(ValueError, match="num_aug_splits must be 0 or >= 2, got 1"):
        _split_loader(dataset, num_aug_splits=1)
    wrapped = timm_data.AugMixDataset(timm_data.create_dataset("", root=str(folder)), 3)
    with pytest.raises(ValueError, match="num_aug_splits=2 but the AugMixDataset"):
        _split_loader(wrapped, num_aug_splits=2)
    mixup = timm_data.FastCollateMixup(mixup_alpha=0.8, num_classes=3)
    with pytest.raises(ValueError, match="num_aug_splits with a FastCollateMixup"):
        _split_loader(dataset, num_aug_splits=2, collate_fn=mixup)


# --- --train-img-sizes (scheduled resolutions) ----------------------------------------------

SCHEDULE = dict(
    input_size=(3, 32, 32), batch_size=4, input_size_choices=(16, 32), batch_size_choices=(4, 2),
    batch_choice_weights=(0.5, 0.5), batch_choice_seed=1, is_training=True,
)  # fmt: skip


def _batches(loader, seed=0):
    torch.manual_seed(seed)  # the order of RandomSampler, timm's and ours
    return [(images, target) for images, target in loader]


def test_scheduled_sizes_follow_timms_schedule(folder):
    """train.py's --train-img-sizes: timm's batch sizes and resolutions, batch for
    batch, and the same samples in them."""
    options = dict(SCHEDULE, no_aug=True, use_prefetcher=False, num_workers=0)
    theirs = timm_data.create_loader(
        timm_data.create_dataset("", root=str(folder)), **options, persistent_workers=False
    )
    ours = create_loader(timm_data.create_dataset("", root=str(folder)), **options, device="cpu")
    expected, got = _batches(theirs), _batches(ours)
    assert len(ours) == len(theirs) == len(got) == len(expected)
    assert [tuple(i.shape) for i, _ in got] == [tuple(i.shape) for i, _ in expected]
    assert {tuple(i.shape) for i, _ in got} == {(4, 3, 16, 16), (2, 3, 32, 32)}
    for (images, target), (timm_images, timm_target) in zip(got, expected, strict=True):
        assert torch.equal(target, timm_target)
        assert (images - timm_images).abs().mean() < 0.1  # PIL and torch resample apart
    # what train.py reads and calls
    sampler = ours.batch_sampler
    assert sampler.batch_sizes == theirs.batch_sampler.batch_sizes
    assert sampler.average_batch_size == theirs.batch_sampler.average_batch_size == 3
    sampler.set_epoch(1)
    theirs.batch_sampler.set_epoch(1)
    assert [tuple(i.shape) for i, _ in _batches(ours, 1)] == [
        tuple(i.shape) for i, _ in _batches(theirs, 1)
    ]


def test_scheduled_sizes_augment_each_size_as_timm(folder):
    loader = create_loader(
        fastload.ImageFolder(folder), **SCHEDULE, auto_augment="rand-m9-mstd0.5-inc1",
        num_workers=0, device="cpu",
    )  # fmt: skip
    by_size = loader.prefetcher.transform[0]
    policies = {key: modules[1] for key, modules in by_size.sizes.items()}  # after the flip
    assert {key: p.translate_const for key, p in policies.items()} == {
        "16x16": int(16 * 0.45), "32x32": int(32 * 0.45),
    }  # fmt: skip
    shapes = {tuple(images.shape) for images, _ in loader}
    assert shapes == {(4, 3, 16, 16), (2, 3, 32, 32)}


@pytest.mark.slow
def test_scheduled_sizes_in_cpu_workers(folder):
    loader = create_loader(
        fastload.ImageFolder(folder), **SCHEDULE, auto_augment="3a", num_workers=2, device="cpu"
    )
    sizes = {tuple(images.shape): tuple(target.shape) for images, target in loader}
    assert sizes == {(4, 3, 16, 16): (4,), (2, 3, 32, 32): (2,)}


def test_scheduled_sizes_refusals_name_the_argument(folder):
    dataset = fastload.ImageFolder(folder)
    for kwargs, message in [
        ({"is_training": False}, "only for training"),
        ({"num_aug_splits": 2}, "num_aug_splits with input_size_choices"),
        ({"input_size_choices": (16, (4, 16, 16))}, r"\(4, 16, 16\) is not an int"),
        ({"input_size_choices": (16, 0)}, "0 is not an int"),
        ({"input_size_choices": ()}, "at least one size"),
        ({"batch_size_choices": (4,)}, "batch_size_choices and input_size_choices"),
        ({"batch_choice_weights": (1.0,)}, "batch_choice_weights and input_size_choices"),
    ]:
        with pytest.raises(ValueError, match=message):
            create_loader(dataset, **{**SCHEDULE, **kwargs}, num_workers=0, device="cpu")
