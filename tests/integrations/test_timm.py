"""fastload.integrations.timm against real timm: the PrefetchLoader contract, and the
distributions of what cannot match pixel for pixel (erasing, RandAugment, mixup)."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fastload
from fastload.integrations.timm import (
    AugmentedCollate,
    Mixup,
    RandomErasing,
    RepeatAugSampler,
    augment_from_string,
    create_loader,
)

timm_data = pytest.importorskip("timm.data")

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("timm") / "train"
    return fastload.make_image_folder(root, num_classes=3, images_per_class=6, size=(80, 60))


def test_import_fastload_does_not_import_timm():
    code = "import sys, fastload.integrations.timm; print('timm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("source", ["timm", "fastload"])
def test_train_loader_keeps_the_prefetch_loader_contract(folder, source, workers):
    dataset = (
        timm_data.create_dataset("", root=str(folder))
        if source == "timm"
        else fastload.ImageFolder(folder)
    )
    mixup = timm_data.FastCollateMixup(
        mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=3
    )
    loader = create_loader(
        dataset, (3, 32, 32), batch_size=4, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
        re_prob=0.25, re_mode="pixel", collate_fn=mixup, num_workers=workers, device="cpu",
        img_dtype=torch.bfloat16, channels_last=True,
    )  # fmt: skip
    # on a CPU, the workers augment the batches they make; the loop only mixes and erases
    in_workers = isinstance(loader.loader.collate_fn, AugmentedCollate)
    assert in_workers == (workers > 0) and (loader.prefetcher.transform is None) == in_workers
    assert len(loader) == 18 // 4 and loader.dataset is dataset
    assert isinstance(loader.sampler, torch.utils.data.RandomSampler)
    batches = list(loader)
    assert len(batches) == len(loader)
    images, target = batches[0]
    assert images.shape == (4, 3, 32, 32) and images.dtype == torch.bfloat16
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert target.shape == (4, 3) and torch.allclose(target.sum(1), torch.ones(4))
    assert -3 < images.float().mean() < 3  # normalised, not 0..255
    assert loader.mixup_enabled
    loader.mixup_enabled = False
    assert not mixup.mixup_enabled
    _, target = next(iter(loader))  # smoothed one-hot, as timm's collate gives
    assert sorted(set(target.flatten().tolist())) == pytest.approx([0.1 / 3, 0.9 + 0.1 / 3])


def test_eval_loader_matches_timm_crop_and_order(folder):
    ours = create_loader(
        timm_data.create_dataset("", root=str(folder)), 32, batch_size=5, num_workers=0,
        device="cpu", crop_pct=0.9, interpolation="bilinear",
    )  # fmt: skip
    theirs = timm_data.create_loader(
        timm_data.create_dataset("", root=str(folder)), 32, batch_size=5, num_workers=0,
        device=torch.device("cpu"), crop_pct=0.9, interpolation="bilinear",
    )  # fmt: skip
    assert len(ours) == len(theirs) == 4 and not ours.mixup_enabled
    for (a, ta), (b, tb) in zip(ours, theirs, strict=True):
        assert torch.equal(ta, tb)
        # the same crop; PIL and torch resample differently (about 5 levels of 255 here)
        assert (a - b).abs().mean() < 0.15


@pytest.mark.parametrize("mode", ["center", "squash", "border"])
def test_eval_crop_modes_give_timms_pixels(folder, mode):
    from PIL import Image

    from fastload.integrations.timm.transforms import EvalCrop

    image = Image.open(next(folder.rglob("*.jpg"))).convert("RGB")
    timm_tf = timm_data.transforms_factory.transforms_imagenet_eval(
        (40, 40), crop_pct=0.8, crop_mode=mode, use_prefetcher=True
    )
    expected = torch.as_tensor(np.asarray(timm_tf(image))).float()
    got = EvalCrop((40, 40), crop_pct=0.8, crop_mode=mode, fill=[124, 116, 104])(image)
    assert got.shape == expected.shape
    # the same box: PIL and torch antialias differently (about 5 levels of 255 here)
    assert (got.float() - expected).abs().mean() < 8


@pytest.mark.parametrize("input_size", [(3, 40, 40), 40])
def test_no_aug_training_crops_as_timm_given_a_tuple_or_an_int(folder, input_size):
    """timm's no-aug train transform: torchvision's Resize squashes to a tuple (what
    train.py passes) and resizes the shorter side to an int; then the centre crop."""
    from PIL import Image

    image = Image.open(next(folder.rglob("*.jpg"))).convert("RGB")  # 80x60: not square
    size = input_size[-2:] if isinstance(input_size, tuple) else input_size
    timm_tf = timm_data.transforms_factory.transforms_noaug_train(size, use_prefetcher=True)
    expected = torch.as_tensor(np.asarray(timm_tf(image))).float()
    loader = create_loader(
        fastload.ImageFolder(folder), input_size, batch_size=2, is_training=True, no_aug=True,
        num_workers=0, device="cpu",
    )  # fmt: skip
    got = loader.loader.dataset.transform(image).float()
    assert got.shape == expected.shape == (3, 40, 40)
    # the same box: PIL and torch antialias differently (a few levels of 255 here)
    assert (got - expected).abs().mean() < 8


def test_refusals_name_the_argument(folder):
    dataset = fastload.ImageFolder(folder)
    for kwargs, name in [
        ({"tf_preprocessing": True}, "tf_preprocessing"),
        ({"num_aug_repeats": 3}, "num_aug_repeats"),
    ]:
        with pytest.raises(NotImplementedError, match=name):
            create_loader(dataset, 32, batch_size=2, is_training=True, **kwargs)
    with pytest.raises(ValueError, match="'bogus'"):
        create_loader(dataset, 32, 2, is_training=True, auto_augment="bogus", device="cpu")
    with pytest.raises(ValueError, match="mode"):
        create_loader(dataset, 32, 2, is_training=True, re_prob=0.5, re_mode="x", device="cpu")


@pytest.mark.parametrize(
    "input_size", [32.5, (3, 32.5, 32), "32", (3, 0, 32), True, (32,), None], ids=repr
)
def test_an_input_size_that_is_not_sizes_is_refused_naming_it(folder, input_size):
    dataset = fastload.ImageFolder(folder)
    with pytest.raises(
        ValueError, match=r"input_size must be an int, \(H, W\) or \(C, H, W\), got"
    ):
        create_loader(dataset, input_size, batch_size=2, device="cpu", num_workers=0)


def test_a_negative_crop_border_is_refused_naming_it(folder):
    dataset = fastload.ImageFolder(folder)
    with pytest.raises(ValueError, match="crop_border_pixels must be an int >= 0, got -5"):
        create_loader(dataset, 32, batch_size=2, device="cpu", crop_border_pixels=-5)


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(0, 30),
    n=st.integers(0, 4),
    mstd=st.integers(0, 10000).map(lambda k: k / 100),
    inc=st.integers(0, 1),
)
def test_any_rand_string_parses_to_its_values(m, n, mstd, inc):
    augment = augment_from_string(f"rand-m{m}-n{n}-mstd{mstd}-inc{inc}", image_size=224, mean=MEAN)
    assert (augment.magnitude, augment.num_layers, augment.magnitude_std) == (m, n, mstd)
    assert ("PosterizeIncreasing" in augment.op_names) == bool(inc)


def test_rand_augment_draws_match_timms_op_count_and_magnitude_spread():
    augment = augment_from_string("rand-m9-n2-mstd0.5", image_size=224, mean=MEAN)
    torch.manual_seed(0)
    params = augment.sample_params(torch.Size([20000, 3, 8, 8]), torch.device("cpu"))
    applied = (params["ops"] >= 0).sum(1).float()
    assert applied.mean() == pytest.approx(2 * 0.5, abs=0.02)  # timm's p=0.5 per layer
    levels = params["levels"]
    assert levels.mean() == pytest.approx(9, abs=0.02)  # clipped at 10 from above
    random.seed(0)
    op = timm_data.auto_augment.AugmentOp("Rotate", prob=1.0, magnitude=9,
                                          hparams={"magnitude_std": 0.5})  # fmt: skip
    theirs = [min(10, max(0, random.gauss(op.magnitude, op.magnitude_std))) for _ in range(20000)]
    assert levels.std() == pytest.approx(np.std(theirs), abs=0.02)


def _timm_erasing_draws(mode, count, shape, draws):
    torch.manual_seed(0)
    random.seed(0)
    eraser = timm_data.random_erasing.RandomErasing(1.0, mode=mode, max_count=count, device="cpu")
    images = torch.full((draws, *shape), 7.0)
    erased = eraser(images) != 7.0
    return erased[:, 0].float().mean(dim=(1, 2))


@pytest.mark.parametrize("mode", ["const", "rand", "pixel"])
def test_erased_area_matches_timms_distribution(mode):
    shape, draws = (3, 32, 32), 1500
    theirs = _timm_erasing_draws(mode, 3, shape, draws)
    torch.manual_seed(1)
    ours = RandomErasing(p=1.0, mode=mode, max_count=3)(torch.full((draws, *shape), 7.0)) != 7.0
    ours = ours[:, 0].float().mean(dim=(1, 2))
    assert ours.mean() == pytest.approx(theirs.mean().item(), abs=0.01)
    assert ours.std() == pytest.approx(theirs.std().item(), abs=0.01)


def test_erasing_skips_the_first_split():
    erased = RandomErasing(p=1.0, num_splits=2)(torch.ones(8, 3, 16, 16)) != 1
    assert not erased[:4].any() and erased[4:].flatten(1).any(1).all()


@pytest.mark.parametrize("mode", ["batch", "pair", "elem"])
def test_mixup_lambda_distribution_matches_timm(mode):
    args = {"mixup_alpha": 0.8, "cutmix_alpha": 0.0, "mode": mode, "num_classes": 2,
            "label_smoothing": 0.0}  # fmt: skip
    labels = torch.tensor([0, 1] * 4)
    np.random.seed(0)
    theirs_mix = timm_data.Mixup(**args)
    theirs = [theirs_mix(torch.rand(8, 3, 4, 4), labels)[1][:, 0] for _ in range(800)]
    torch.manual_seed(0)
    ours_mix = Mixup(**args)
    ours = [ours_mix(torch.rand(8, 3, 4, 4), labels)[1][:, 0] for _ in range(800)]
    a, b = torch.stack(theirs), torch.stack(ours)
    assert b.mean() == pytest.approx(a.mean().item(), abs=0.02)
    assert b.std() == pytest.approx(a.std().item(), abs=0.02)
    if mode == "batch":  # one lambda for the whole batch
        assert torch.allclose(b[:, 0::2], b[:, :1].expand(-1, 4))


def test_cutmix_weighs_labels_by_the_area_pasted():
    mix = Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, mode="elem", num_classes=2, label_smoothing=0)
    images = torch.stack([torch.zeros(1, 16, 16), torch.ones(1, 16, 16)] * 2)
    mixed, soft = mix(images, torch.tensor([0, 1, 0, 1]))
    pasted = (mixed != images).float().mean(dim=(1, 2, 3))
    own = soft.gather(1, torch.tensor([[0], [1], [0], [1]])).squeeze(1)
    assert torch.allclose(1 - pasted, own)


def test_repeat_aug_sampler_matches_timm_exactly():
    dataset = list(range(600))
    for rank in range(2):
        ours = RepeatAugSampler(dataset, num_replicas=2, rank=rank, num_repeats=3)
        theirs = timm_data.distributed_sampler.RepeatAugSampler(
            dataset, num_replicas=2, rank=rank, num_repeats=3
        )
        ours.set_epoch(4)
        theirs.set_epoch(4)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)
    # as many ranks as repeats: each rank sees every selected sample once, so each
    # sample's three augmentations run on three different ranks
    ranks = [
        list(RepeatAugSampler(dataset, num_replicas=3, rank=r, num_repeats=3)) for r in range(3)
    ]
    assert ranks[0] == ranks[1] == ranks[2] and len(set(ranks[0])) == len(ranks[0]) == 512 // 3


def test_auto_augment_policies_read_timms_tables():
    for name in ("original", "originalr", "v0", "v0r"):
        augment = augment_from_string(name, image_size=32, mean=MEAN)
        images = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8)
        assert augment(images).shape == images.shape
    assert math.isinf(augment_from_string("rand-mstd101", image_size=8, mean=MEAN).magnitude_std)


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_mixing_the_whole_batch_equals_the_general_path_draw_for_draw(dtype):
    """timm's default mode takes a one-pass path: the same images as the per-row one."""
    from fastload.integrations.timm import Mixup

    images = (torch.rand(8, 3, 20, 24) * 255).to(dtype)
    batch = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=4, mode="batch")
    general = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=4, mode="elem")
    kinds = set()
    for seed in range(40):
        torch.manual_seed(seed)
        params = batch.sample_params(images.shape, images.device)
        kinds.add("cut" if bool(params["cut"][0]) else "blend" if params["lam"][0] < 1 else "")
        got = batch.apply_transform(images, params)
        want = general.apply_transform(images, params)
        if dtype.is_floating_point:  # the same sums, a float32 step apart at most
            torch.testing.assert_close(got, want, atol=0, rtol=1.2e-7)
        else:
            assert torch.equal(got, want)
    assert kinds == {"cut", "blend"}  # both kinds drawn (prob 1: never none)
