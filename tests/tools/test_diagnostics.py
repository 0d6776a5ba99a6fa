from __future__ import annotations

import json
import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import Dataset

from common_utils import FakeClock
from fastload import FastLoader
from fastload.loader.tuning import tune_workers, worker_candidates
from fastload.system import available_cpus
from fastload.tools.diagnostics import WaitSummary, diagnose, timed, waits
from fastload.tools.diagnostics import report as diagnose_module
from fastload.tools.diagnostics.facts import Facts
from fastload.tools.diagnostics.reliability import MIN_ITERATIONS, spread
from fastload.tools.diagnostics.rules import recommend


def test_timed_counts_iterations_and_sums_waits_exactly(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(waits.time, "perf_counter", clock)

    def slow_loader():
        for index in range(4):
            clock.advance(0.25 + index)  # loading batch i takes 0.25 + i seconds
            yield index

    loop = timed(list_like := _Replayable(slow_loader))
    seen = []
    for batch in loop:
        seen.append(batch)
        clock.advance(0.5)  # the step
    summary = loop.summary()
    assert seen == [0, 1, 2, 3] and summary.iterations == 4 and len(loop) == 4
    assert summary.waits == (0.25, 1.25, 2.25, 3.25)
    assert summary.computes == (0.5, 0.5, 0.5, 0.5)
    assert summary.wait_fraction == pytest.approx(7.0 / 9.0)
    assert list_like.size == 4  # attributes pass through
    assert loop.size == 4
    assert "4 iterations: waited 7.00 s for data (77.8% of the loop)" in str(summary)


class _Replayable:
    size = 4

    def __init__(self, make) -> None:
        self.make = make

    def __iter__(self):
        return self.make()

    def __len__(self) -> int:
        return 4


class Slow(Dataset):
    """Each sample takes ``seconds`` of the fake clock to load."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds

    def __len__(self) -> int:
        return 256

    def __getitem__(self, index: int):
        self.clock.advance(self.seconds)
        return torch.zeros(3, 8, 8), index


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    """Every clock reading in the diagnosis is the fake clock's: no wall-clock margins."""
    fake = FakeClock()
    monkeypatch.setattr(time, "perf_counter", fake)
    return fake


def test_a_slow_loader_is_reported_and_more_workers_recommended(clock):
    loader = FastLoader(Slow(clock, 0.003), batch_size=4, num_workers=0)
    step = lambda batch: clock.advance(0.001)  # noqa: E731
    report = diagnose(loader, step=step, batches=8, warmup=1, device="cpu")
    assert report.facts.wait_fraction == pytest.approx(12 / 13)  # 12 ms of loading a step
    assert report.facts.loader_seconds == pytest.approx(0.012)  # 4 samples x 3 ms
    assert report.facts.loop_over_step == pytest.approx(13.0)  # 12 ms waiting + the 1 ms step
    assert (report.facts.step_iterations, report.facts.loop_iterations) == (8, 8)
    assert report.facts.loader_iterations == 8 and report.reliable
    assert any(advice.startswith("more workers: 0 of") for advice in report.recommendations)
    assert "real loop: waiting for data" in str(report)


def test_an_instant_loader_is_compute_bound(clock):
    batches = [(torch.zeros(4, 3, 8, 8), torch.arange(4))] * 8
    report = diagnose(
        batches, step=lambda batch: clock.advance(0.01), batches=6, warmup=1, device="cpu"
    )
    assert report.facts.wait_fraction == 0.0
    assert report.facts.step_seconds == pytest.approx(0.01)
    assert report.recommendations[0].startswith("compute-bound")
    assert report.facts.loop_over_step == pytest.approx(1.0)
    assert "Measurements: reliable, each timed over at least 5 iterations after a warm-up " in (
        str(report)
    )
    payload = json.loads(report.to_json())
    assert payload["recommendations"] == report.recommendations and "step_seconds" in payload
    assert payload["reliable"] is True and payload["problems"] == []
    assert payload["step_iterations"] == payload["loop_iterations"] == 6


def facts(**overrides) -> Facts:
    values = dict(
        step_seconds=0.1,
        loader_seconds=0.3,
        wait_fraction=0.6,
        loop_seconds=0.3,
        num_workers=1,
        cpus=8,
        step_iterations=MIN_ITERATIONS,
        loader_iterations=MIN_ITERATIONS,
        loop_iterations=MIN_ITERATIONS,
        first_step_seconds=0.1,
        warmup=3,
    )
    return Facts(**(values | overrides))


@pytest.mark.parametrize(
    ("overrides", "expected", "absent"),
    [
        ({"wait_fraction": 0.02, "loop_seconds": 0.1}, "compute-bound", "more workers"),
        (
            {"wait_fraction": 0.02, "loop_seconds": 0.14},
            "the step runs 40% slower while the loader runs",
            "compute-bound",
        ),
        ({}, "more workers: 1 of 8 CPUs", "compute-bound"),
        ({"num_workers": 8}, None, "more workers"),
        ({"cuda": True, "pin_memory": False}, "pin_memory=True", None),
        ({"cuda": True, "pin_memory": True}, None, "pin_memory=True"),
        ({"cuda": True, "prefetcher": False}, "wrap the loader in DataPrefetcher", None),
        ({"cuda": True, "prefetcher": True}, None, "DataPrefetcher"),
        ({"storage": "files"}, "fastload convert", None),
        ({"storage": "lmdb"}, None, "fastload convert"),
        ({"image_side": 2000, "batch_side": 224}, "decode at reduced size", None),
        ({"image_side": 300, "batch_side": 224}, None, "reduced size"),
        (
            {"num_workers": 8, "worker_busy": (0.95,) * 8, "cuda": True},
            "the CPU is saturated (8 workers at 95%): move work to the GPU",
            None,
        ),
        ({"num_workers": 8, "worker_busy": (0.4,) * 8}, None, "saturated"),
        ({"batch_size": 8}, "batch size 8", None),
        ({"batch_size": 256}, None, "batch size"),
    ],
)
def test_each_rule(overrides, expected, absent):
    advice = recommend(facts(**overrides))
    if expected is not None:
        assert any(expected in line for line in advice), advice
    if absent is not None:
        assert not any(absent in line for line in advice), advice


def test_the_ratio_is_loop_time_over_step_time():
    report = diagnose_module.DiagnoseReport(facts(step_seconds=0.1, loop_seconds=0.25), [])
    assert report.facts.loop_over_step == pytest.approx(2.5)
    assert diagnose_module.DiagnoseReport(facts(step_seconds=0.0), []).facts.loop_over_step is None


def test_the_report_gives_the_loops_time_beside_the_step_alone_not_a_speed_up():
    """A loop that seldom waits can still run slower than its step alone (workers share
    the CPU): the table says what was measured, the advice says why."""
    measured = facts(step_seconds=0.1, loop_seconds=0.131, wait_fraction=0.003)
    report = diagnose_module.DiagnoseReport(measured, recommend(measured))
    text = str(report)
    assert "| real loop, per iteration        | 131.0 ms, mean of 5 (1.31x the step alone) " in text
    assert "| real loop: waiting for data     | 0.3%" in text and "speed-up" not in text
    assert (
        "| training step on a cached batch | 100.0 ms, median of 5 (first call 100.0 ms, " in text
    )
    assert "the workers compete with it for the CPU" in text


def report_of(**overrides) -> tuple[str, dict, list[str]]:
    """The text, the JSON and the problems of a report built from given measurements."""
    measured = facts(**overrides)
    report = diagnose_module.DiagnoseReport(measured, recommend(measured))
    payload = json.loads(report.to_json())
    assert payload["problems"] == report.problems and payload["reliable"] is report.reliable
    return str(report), payload, report.problems


def test_a_step_slower_than_the_loop_is_called_unreliable_not_clamped():
    """The issue's figures: a step on a cached batch of 7147.9 ms beside a loop of
    3734.0 ms per iteration, which holds one step; the ratio is printed as measured."""
    text, payload, problems = report_of(
        step_seconds=7.1479, loop_seconds=3.734, wait_fraction=0.01, first_step_seconds=7.5
    )
    assert "3734.0 ms, mean of 5 (0.52x the step alone: unreliable, see below)" in text
    assert "1.00x" not in text
    assert problems == [
        "the step alone (7147.9 ms, median) took longer than a whole iteration of the real "
        "loop (3734.0 ms), which holds one step: the step measurement is unreliable, and so "
        "is the ratio (0.52x); likely causes: one-off costs (compilation, memory allocation, "
        "cuDNN's algorithm search) outlasting a warm-up of 3, or other work on this machine "
        "while the step was timed; raise warmup (--warmup) and measure again on a quiet machine"
    ]
    assert f"Measurements: unreliable\n- {problems[0]}\n" in text
    assert payload["loop_over_step"] == pytest.approx(3.734 / 7.1479)
    assert payload["reliable"] is False and payload["min_iterations"] == MIN_ITERATIONS
    # no advice rests on the ratio: neither compute-bound nor contention
    assert payload["recommendations"] == []
    assert text.endswith("Recommendations:\n- none: measure again, as said above")


def test_a_first_call_far_slower_than_the_median_is_named_as_the_likely_cause():
    _, _, problems = report_of(step_seconds=0.3, loop_seconds=0.2, first_step_seconds=6.3)
    assert (
        "outlasting a warm-up of 3 (its first call took 6300.0 ms, 21.0x the median)"
        in (problems[0])
    )


def test_a_loop_within_the_noise_of_the_step_is_not_flagged_and_not_clamped():
    text, payload, problems = report_of(step_seconds=0.1, loop_seconds=0.098, wait_fraction=0.01)
    assert problems == [] and "(0.98x the step alone)" in text
    assert payload["loop_over_step"] == pytest.approx(0.98)
    assert payload["recommendations"][0].startswith("compute-bound")


def test_too_few_iterations_are_said_in_the_text_and_the_json():
    text, payload, problems = report_of(step_iterations=2, loop_iterations=1, loader_iterations=3)
    assert problems == [
        "the step on a cached batch was timed over 2 calls, fewer than 5: too few to trust; "
        "raise batches (--batches)",
        "the real loop was timed over 1 iteration, fewer than 5: too few to trust; raise "
        "batches (--batches)",
        "the loader alone was timed over 3 batches, fewer than 5: too few to trust; raise "
        "batches (--batches)",
    ]
    assert "100.0 ms, median of 2 (first call 100.0 ms, untimed)" in text
    assert "300.0 ms, mean of 1 (3.00x the step alone: unreliable, see below)" in text
    assert "| loader alone, per batch         | 300.0 ms, mean of 3 " in text
    assert (payload["step_iterations"], payload["loop_iterations"]) == (2, 1)
    assert payload["loader_iterations"] == 3 and payload["reliable"] is False


def test_too_few_loader_batches_leave_the_ratio_and_its_advice_standing():
    _, payload, problems = report_of(loader_iterations=1, wait_fraction=0.02, loop_seconds=0.1)
    assert problems == [
        "the loader alone was timed over 1 batch, fewer than 5: too few to trust; raise "
        "batches (--batches)"
    ]
    assert payload["recommendations"][0].startswith("compute-bound")


def test_an_unsteady_step_is_unreliable_and_says_why():
    text, _, problems = report_of(step_spread=0.6, wait_fraction=0.02, loop_seconds=0.2)
    assert problems == [
        "the step on a cached batch is unsteady: the middle half of its 5 timed calls spans "
        "60% of their median, more than 25%: other work on this machine, or more threads than "
        "CPU cores; measure again on a quiet machine"
    ]
    assert "the workers compete with it" not in text  # contention rests on the ratio


def test_without_a_warm_up_a_slow_first_call_is_among_the_timed_ones():
    text, _, problems = report_of(warmup=0, first_step_seconds=1.0, loop_seconds=0.12)
    assert problems == [
        "no warm-up: the step's one-off costs (compilation, memory allocation, cuDNN's "
        "algorithm search) are among its timed calls (its first call took 1000.0 ms, 10.0x "
        "the median); raise warmup (--warmup)"
    ]
    assert "(first call 1000.0 ms, among them)" in text
    assert report_of(warmup=1, first_step_seconds=1.0, loop_seconds=0.12)[2] == []


def test_without_a_step_only_the_counts_matter():
    text, payload, problems = report_of(step_seconds=0.0, step_iterations=0, loop_iterations=2)
    assert problems == [
        "the real loop was timed over 2 iterations, fewer than 5: too few to trust; raise "
        "batches (--batches)"
    ]
    assert "| training step on a cached batch | not measured " in text
    assert payload["loop_over_step"] is None and "x the step alone" not in text


@given(
    st.lists(st.floats(1e-6, 1e3), min_size=2, max_size=30),
    st.floats(1e-3, 1e3),
)
def test_spread_is_zero_for_equal_times_and_does_not_depend_on_the_unit(seconds, scale):
    assert spread([seconds[0]] * len(seconds)) == 0.0
    assert spread([scale * t for t in seconds]) == pytest.approx(spread(seconds), rel=1e-6)
    assert spread(seconds[:1]) == 0.0


def test_autotune_picks_the_best_of_a_throughput_curve():
    curve = {
        (0, 2): 10.0,
        (1, 2): 30.0,
        (1, 4): 31.0,
        (2, 2): 55.0,
        (2, 4): 52.0,
        (4, 2): 40.0,
        (4, 4): 41.0,
    }
    workers, prefetch, measured = tune_workers(
        lambda w, p: (w, p),
        workers=[0, 1, 2, 4],
        prefetch=(2, 4),
        throughput=lambda loader, batches: curve[loader],
    )
    assert (workers, prefetch) == (2, 2) and measured == curve


def test_autotune_prefers_fewer_workers_on_a_tie():
    workers, _, _ = tune_workers(
        lambda w, p: w, workers=[1, 2, 4], prefetch=(2,), throughput=lambda loader, b: 5.0
    )
    assert workers == 1


def test_worker_candidates():
    assert worker_candidates(1) == [0, 1]
    assert worker_candidates(2) == [0, 1, 2]
    assert worker_candidates(12) == [0, 1, 2, 4, 8, 12]


class Sleepy(Dataset):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, index: int):
        time.sleep(0.001)
        return torch.zeros(3, 8, 8), index


def test_fastloader_tune_measures_and_explains():
    loader = FastLoader(Sleepy(), batch_size=8, num_workers="tune")
    assert loader.num_workers in worker_candidates(available_cpus())
    assert "tuned, batches/s" in repr(loader)
    assert sum(len(labels) for _, labels in loader) == 256


def test_wait_summary_of_nothing():
    assert str(WaitSummary((), ())) == "no iterations"
    assert "p95 300.0 ms" in str(WaitSummary((0.1, 0.3), (0.0, 0.0)))  # not the minimum
    twenty = WaitSummary(tuple(i / 1000 for i in range(1, 21)), (0.0,) * 20)
    assert twenty.percentile(95) == 0.019 and twenty.percentile(100) == 0.020
    assert WaitSummary((), ()).wait_fraction == 0.0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [({"batches": 0}, "batches"), ({"warmup": -1}, "warmup"), ({"batches": 2.5}, "batches")],
)
def test_diagnose_refuses_bad_counts_by_name(arguments, message):
    with pytest.raises((ValueError, TypeError), match=message):
        diagnose([torch.zeros(2)] * 4, torch.sum, device="cpu", **arguments)


def test_diagnose_says_an_empty_loader_gave_nothing_to_time():
    with pytest.raises(ValueError, match="loader: it gave no batch"):
        diagnose([], torch.sum, batches=1, warmup=0, device="cpu")


def test_diagnose_stops_each_measurement_at_its_share_of_the_seconds_after_the_minimum(clock):
    calls = []

    def slow_step(batch):  # every call takes 50 ms of the fake clock
        calls.append(batch)
        clock.advance(0.05)

    loader = FastLoader(Slow(clock, 0.01), batch_size=4, num_workers=0)  # 40 ms a batch
    report = diagnose(loader, slow_step, batches=500, warmup=1, seconds=0.3, device="cpu")
    # each third is 0.1 s, over after two steps or three batches: the minimum is timed all
    # the same, after the warm-up, in each measurement
    assert report.facts.step_iterations == report.facts.loader_iterations == MIN_ITERATIONS
    assert report.timeline.iterations == report.facts.loop_iterations == MIN_ITERATIONS
    assert len(calls) == 2 * (1 + MIN_ITERATIONS)  # warm-up and timed, cached and in the loop
    assert report.facts.step_seconds == pytest.approx(0.05) and report.reliable


def test_diagnose_times_fewer_than_the_minimum_only_when_told_and_says_so(clock):
    calls = []

    def step(batch):  # each call outlasts the measurement's share of the time
        calls.append(batch)
        clock.advance(0.01)

    batches = [torch.zeros(2, 3, 4, 4)] * 10
    report = diagnose(batches, step, batches=2, warmup=0, seconds=0.001, device="cpu")
    assert len(calls) == 2 + 2 and report.facts.step_iterations == 2
    assert not report.reliable and "timed over 2 calls, fewer than 5" in report.problems[0]


def test_diagnose_names_a_step_that_ran_slower_alone_than_in_the_loop(clock):
    """A noisy machine while the step on the cached batch was timed, quiet after: the step
    alone comes out slower than the loop; the report says so instead of printing 1.00x."""
    cached_calls = 1 + MIN_ITERATIONS  # warm-up, then the timed calls on the cached batch
    calls = []

    def step(batch):
        calls.append(batch)
        clock.advance(0.4 if len(calls) == 1 else 0.2 if len(calls) <= cached_calls else 0.1)

    batches = [torch.zeros(2, 3, 4, 4)] * 20
    report = diagnose(batches, step, batches=MIN_ITERATIONS, warmup=1, device="cpu")
    assert report.facts.step_seconds == pytest.approx(0.2)
    assert report.facts.first_step_seconds == pytest.approx(0.4)
    assert report.facts.loop_seconds == pytest.approx(0.1)
    assert "(0.50x the step alone: unreliable, see below)" in str(report)
    payload = json.loads(report.to_json())
    assert payload["reliable"] is False and payload["loop_over_step"] == pytest.approx(0.5)
    assert "took longer than a whole iteration of the real loop" in payload["problems"][0]


def test_diagnose_times_each_step_call_so_a_slow_one_does_not_move_the_median(clock):
    calls = []

    def step(batch):
        calls.append(batch)
        clock.advance(2.0 if len(calls) == 3 else 0.01)  # one call slowed by other work

    report = diagnose([torch.zeros(2)] * 20, step, batches=7, warmup=1, device="cpu")
    assert report.facts.step_seconds == pytest.approx(0.01)  # their mean: 0.29 s
    assert report.facts.step_spread == pytest.approx(0.0, abs=1e-9)
    assert report.facts.step_iterations == 7


@pytest.mark.parametrize("seconds", [0, -1, float("nan")])
def test_diagnose_refuses_a_time_that_is_not_positive(seconds):
    with pytest.raises(ValueError, match=f"seconds: a positive time, got {seconds}"):
        diagnose([torch.zeros(2)] * 4, torch.sum, seconds=seconds, device="cpu")


def test_diagnose_warns_when_one_batch_holds_the_whole_data_set():
    from torch.utils.data import TensorDataset

    loader = FastLoader(TensorDataset(torch.zeros(10, 3, 4, 4)), batch_size=16, num_workers=0)
    with pytest.warns(UserWarning, match="a batch of 16 from a data set of 10: every batch is"):
        diagnose(loader, None, batches=2, warmup=0, device="cpu")
