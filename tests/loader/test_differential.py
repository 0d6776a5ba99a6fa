"""FastLoader is DataLoader: generated loader configurations (tests/differential.py)
run through DataLoader, FastLoader with its defaults, and FastLoader behind a
DataPrefetcher give the same batches (values, types, order), the same errors at the same
steps (FastLoader's naming the sample), and a resume gives exactly the rest.

Three sizes: a fast one in the default suite (no workers), a larger one with workers in
CI (``slow``), and ``make fuzz`` for long runs (``FASTLOAD_FUZZ_EXAMPLES``, 10,000 there).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, example, given, settings

from common_utils import deadline
from differential import Config, configs, differences, resumed, run, unnamed_failures

FUZZ_EXAMPLES = int(os.environ.get("FASTLOAD_FUZZ_EXAMPLES", "0"))
SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]


def check(config: Config) -> None:
    with deadline(120):  # a hang is a divergence too: DataLoader never hangs here
        compare(config)


def compare(config: Config) -> None:
    reference = run(config, "dataloader")
    for pipeline in ("fastloader", "prefetcher"):
        ours = run(config, pipeline)
        assert not differences(ours, reference), (pipeline, differences(ours, reference))
        if config.dataset != "iterable":  # a stream's samples have no index to name
            assert not unnamed_failures(ours), (pipeline, unnamed_failures(ours))
        built = not (reference[0] and (reference[0][0].error or "").startswith("at construction"))
        if built and config.resume_at is not None and config.resume_at < len(reference[0]):
            rest, again = resumed(config, pipeline)
            assert rest == reference[0][config.resume_at :], pipeline
            assert again == rest, (pipeline, "the resume differs from the run it resumes")


# Divergences the fuzzer found, kept as fixed examples (the bugs among them).
FOUND = [
    # a collate set after construction on the in-memory path (bug 2)
    Config(
        "tensor",
        10,
        "tuple",
        frozenset(),
        False,
        "sequential",
        "lists",
        0,
        3,
        False,
        "tuple",
        True,
        0,
        None,
        1,
        None,
    ),
    # an empty batch from a batch sampler (bug 3)
    Config(
        "map",
        9,
        "tuple",
        frozenset(),
        False,
        "batch_sampler",
        "with_empty",
        0,
        4,
        False,
        "default",
        False,
        0,
        None,
        1,
        1,
    ),
    # one refilled list (bug 7) and generators (bug 12), in memory and not
    Config(
        "tensor",
        12,
        "tuple",
        frozenset(),
        False,
        "batch_sampler",
        "refilled",
        0,
        3,
        False,
        "default",
        False,
        0,
        None,
        1,
        2,
    ),
    Config(
        "subset",
        12,
        "tuple",
        frozenset(),
        False,
        "batch_sampler",
        "generators",
        0,
        5,
        False,
        "default",
        False,
        0,
        None,
        1,
        1,
    ),
    # negative indices in memory (bug 11), data replaced between epochs (bug 9)
    Config(
        "subset",
        11,
        "tuple",
        frozenset(),
        True,
        "batch_sampler",
        "negative",
        0,
        4,
        True,
        "default",
        False,
        0,
        None,
        2,
        None,
    ),
    Config(
        "tensor",
        8,
        "tuple",
        frozenset(),
        True,
        "shuffle",
        "lists",
        0,
        3,
        False,
        "default",
        False,
        None,
        None,
        2,
        None,
    ),
    # a Subset subclass that changes its rows (bug 8)
    Config(
        "subset_subclass",
        9,
        "tuple",
        frozenset(),
        False,
        "sequential",
        "lists",
        0,
        2,
        False,
        "default",
        False,
        0,
        None,
        1,
        None,
    ),
    # a failing sample, the loop skipping its batch, and a resume after it (bugs 4-6)
    Config(
        "map",
        40,
        "dict",
        frozenset({13}),
        False,
        "shuffle",
        "lists",
        0,
        4,
        False,
        "default",
        False,
        0,
        None,
        2,
        4,
    ),
]


@pytest.mark.parametrize("config", FOUND, ids=range(len(FOUND)))
def test_divergences_found_stay_fixed(config):
    check(config)


@settings(
    max_examples=FUZZ_EXAMPLES or 30,
    deadline=None,
    suppress_health_check=SLOW,
    derandomize=not FUZZ_EXAMPLES,
)
@given(configs(workers=(0,)))
def test_in_the_main_process_fastloader_is_dataloader(config):
    check(config)


@pytest.mark.slow
@settings(
    max_examples=FUZZ_EXAMPLES or 60,
    deadline=None,
    suppress_health_check=SLOW,
    derandomize=not FUZZ_EXAMPLES,  # a long run draws new configurations each time
)
@given(configs(workers=(None, 0, 1, 2)))
@example(
    Config(
        "map",
        30,
        "tuple",
        frozenset({5}),
        True,
        "shuffle",
        "lists",
        0,
        3,
        False,
        "default",
        False,
        2,
        None,
        2,
        3,
    )
)
def test_from_workers_fastloader_is_dataloader(config):
    check(config)
