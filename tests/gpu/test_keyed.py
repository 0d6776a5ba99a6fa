"""gpu.sample_seeds: inside it, each sample's parameters come from its own seed, so a
sample is augmented alike whatever batch it is in; draws are uniform and reproducible."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from common_utils import cpu_and_cuda
from fastload import gpu
from fastload.seeds import keyed_normal, keyed_uniform
from gpu_cases import MODULES, images

#: What is drawn once per batch: ColorJitter's order of operations, AugMix's Dirichlet
#: weights (no keyed Gamma draws). They are reproducible, but the batch's.
PER_BATCH = {"ColorJitter", "AugMix"}
PER_SAMPLE = sorted(set(MODULES) - PER_BATCH)


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("name", PER_SAMPLE)
def test_a_sample_is_augmented_alike_in_any_batch(name, device):
    batch = images(6, device=device)
    seeds = torch.tensor([11, 12, 13, 14, 15, 16])
    module = MODULES[name]()
    with gpu.sample_seeds(seeds):
        whole = module(batch)
    pick = [4, 1]
    with gpu.sample_seeds(seeds[pick]):
        part = module(batch[pick])
    torch.testing.assert_close(part, whole[pick], atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", sorted(PER_BATCH))
def test_per_batch_draws_are_reproducible_and_leave_the_generators_alone(name):
    batch, seeds = images(4), [3, 1, 4, 1]
    module = MODULES[name]()
    torch.manual_seed(0)
    with gpu.sample_seeds(seeds):
        first = module(batch)
    after = torch.rand(1)
    torch.manual_seed(0)
    with gpu.sample_seeds(seeds):
        again = module(batch)
    assert torch.equal(first, again) and torch.equal(torch.rand(1), after)


def test_a_module_with_its_own_generator_keeps_drawing_from_it():
    batch = images(4)
    flip = gpu.RandomHorizontalFlip(generator=torch.Generator().manual_seed(1))
    with gpu.sample_seeds([1, 2, 3, 4]):
        inside = flip(batch)
    flip.generator.manual_seed(1)
    assert torch.equal(flip(batch), inside)


def test_the_seed_count_must_match_the_batch():
    with (
        gpu.sample_seeds([1, 2, 3]),
        pytest.raises(ValueError, match="sample_seeds has 3 seeds for a batch of 4 images"),
    ):
        gpu.RandomHorizontalFlip()(images(4))


def test_outside_the_block_draws_are_the_usual_ones():
    assert keyed_uniform(2, (3,), torch.device("cpu")) is None
    torch.manual_seed(5)
    plain = gpu.RandomErasing(p=0.5)(images(4))
    torch.manual_seed(5)
    with gpu.sample_seeds([1, 2, 3, 4]):
        pass
    assert torch.equal(gpu.RandomErasing(p=0.5)(images(4)), plain)


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_keyed_draws_are_uniform_and_normal(device):
    seeds = torch.arange(4000) * 7919
    with gpu.sample_seeds(seeds):
        uniform = keyed_uniform(4000, (8,), torch.device(device))
        normal = keyed_normal(4000, (8,), torch.device(device))
    assert uniform.shape == (4000, 8) and uniform.min() >= 0 and uniform.max() < 1
    histogram = torch.histc(uniform.cpu(), bins=10, min=0, max=1) / uniform.numel()
    assert (histogram - 0.1).abs().max() < 0.01  # 32,000 draws: 3.5 standard errors
    assert abs(float(normal.mean())) < 0.03 and abs(float(normal.std()) - 1) < 0.03
    rows = uniform.cpu().numpy()
    assert abs(float(torch.corrcoef(torch.from_numpy(rows[:, :2]).T)[0, 1])) < 0.05


@settings(max_examples=25, deadline=None)
@given(seeds=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=8, unique=True))
def test_each_row_depends_on_its_seed_alone(seeds):
    with gpu.sample_seeds(seeds):
        together = keyed_uniform(len(seeds), (5,), torch.device("cpu"))
    for row, seed in enumerate(seeds):
        with gpu.sample_seeds([seed]):
            alone = keyed_uniform(1, (5,), torch.device("cpu"))
        assert torch.equal(alone[0], together[row])


@given(values=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=16))
def test_the_device_hash_is_splitmix64(values):
    from fastload.seeds import _mix, _signed, splitmix64

    mixed = _mix(torch.tensor([_signed(v) for v in values], dtype=torch.int64))
    assert mixed.tolist() == [_signed(splitmix64(v)) for v in values]
