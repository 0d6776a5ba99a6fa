from __future__ import annotations

import json
import time

import pytest
import torch
from torch.utils.data import Dataset

from fastload import FastLoader
from fastload.loader.tuning import tune_workers, worker_candidates
from fastload.system import available_cpus
from fastload.tools.diagnostics import WaitSummary, diagnose, timed, waits
from fastload.tools.diagnostics import report as diagnose_module
from fastload.tools.diagnostics.rules import Facts, recommend


class FakeClock:
    """perf_counter that only moves when told: exact timings in tests."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


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
    assert report.predicted_speedup > 5
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
    assert report.predicted_speedup == 1.0
    payload = json.loads(report.to_json())
    assert payload["recommendations"] == report.recommendations and "step_seconds" in payload


def facts(**overrides) -> Facts:
    values = dict(
        step_seconds=0.1,
        loader_seconds=0.3,
        wait_fraction=0.6,
        loop_seconds=0.3,
        num_workers=1,
        cpus=8,
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


def test_predicted_speedup_is_loop_time_over_step_time():
    report = diagnose_module.DiagnoseReport(facts(step_seconds=0.1, loop_seconds=0.25), [])
    assert report.predicted_speedup == pytest.approx(2.5)
    assert diagnose_module.DiagnoseReport(facts(step_seconds=0.0), []).predicted_speedup == 1.0


def test_the_report_gives_the_loops_time_beside_the_step_alone_not_a_speed_up():
    """A loop that seldom waits can still run slower than its step alone (workers share
    the CPU): the table says what was measured, the advice says why."""
    measured = facts(step_seconds=0.1, loop_seconds=0.131, wait_fraction=0.003)
    report = diagnose_module.DiagnoseReport(measured, recommend(measured))
    text = str(report)
    assert "| real loop, per iteration        | 131.0 ms (1.31x the step alone) |" in text
    assert "| real loop: waiting for data     | 0.3%" in text and "speed-up" not in text
    assert "the workers compete with it for the CPU" in text


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


def test_diagnose_stops_each_measurement_at_its_share_of_the_seconds():
    def slow_step(batch):  # every call takes at least 50 ms
        time.sleep(0.05)

    report = diagnose(
        [torch.zeros(2, 3, 4, 4)] * 1000, slow_step, batches=500, warmup=1, seconds=0.3,
        device="cpu",
    )  # fmt: skip
    # each third is 0.1 s: two timed steps have taken it, the least any measurement takes
    assert report.timeline.iterations == 2


@pytest.mark.parametrize("seconds", [0, -1, float("nan")])
def test_diagnose_refuses_a_time_that_is_not_positive(seconds):
    with pytest.raises(ValueError, match=f"seconds: a positive time, got {seconds}"):
        diagnose([torch.zeros(2)] * 4, torch.sum, seconds=seconds, device="cpu")


def test_diagnose_warns_when_one_batch_holds_the_whole_data_set():
    from torch.utils.data import TensorDataset

    loader = FastLoader(TensorDataset(torch.zeros(10, 3, 4, 4)), batch_size=16, num_workers=0)
    with pytest.warns(UserWarning, match="a batch of 16 from a data set of 10: every batch is"):
        diagnose(loader, None, batches=2, warmup=0, device="cpu")
