"""`make gpu-check` must work the first minute it meets a GPU: its plan runs here at smoke
sizes, fits one device call, keeps what a part measured when time runs out, and the
device call's script and the staging of DALI's wheels give back the wheels they took."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks import cuda_tests, docs_page, gpu_check, gpu_prepare
from benchmarks.lib import common, parts

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"

MACHINE_KEYS = {"device", "driver", "cuda", "torch", "torchvision", "cpus"}
#: A dev machine may have run benchmarks/install_peers.sh (DALI's CPU operators); CI has not.
DALI_HERE = importlib.util.find_spec("nvidia") is not None and (
    importlib.util.find_spec("nvidia.dali") is not None
)


@pytest.fixture(scope="module")
def smoke_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plan as `make gpu-check` runs it on a machine without CUDA."""
    out = tmp_path_factory.mktemp("gpu-check")
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_check.py"), "--out", str(out)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    # kept: a variant that failed prints its process's error there, not in the JSON's note
    (out / "stderr.txt").write_text(completed.stderr)
    return out


@pytest.mark.slow
def test_without_cuda_the_whole_plan_runs_at_smoke_sizes_part_by_part(smoke_plan: Path):
    summary = json.loads((smoke_plan / "check.json").read_text())
    assert summary["smoke"] is True and summary["budget_s"] == 540
    assert [part["part"] for part in summary["parts"]] == [part.name for part in gpu_check.PLAN]
    assert {part["status"] for part in summary["parts"]} == {"ok"}
    for part in summary["parts"]:
        data = json.loads((smoke_plan / part["result"]).read_text())
        assert set(data["machine"]) >= MACHINE_KEYS, part["part"]
        assert data["cut_short"] is None, part["part"]
        assert (smoke_plan / part["result"]).with_suffix(".png").stat().st_size > 1000
    assert summary["installed"]["nvidia.dali"] is DALI_HERE  # said, not silently dropped


@pytest.mark.slow
def test_the_smoke_plan_selects_the_cuda_tests_and_every_variant(smoke_plan: Path):
    new = json.loads((smoke_plan / "cuda_tests_new.json").read_text())
    rest = json.loads((smoke_plan / "cuda_tests_rest.json").read_text())
    # without CUDA every selected test is a skipped CUDA test, none of them in both parts
    assert new["counts"]["skipped"] >= 3 and rest["counts"]["skipped"] >= 270
    assert new["counts"]["passed"] == rest["counts"]["passed"] == 0
    assert all(f"--ignore={path}" in rest["settings"]["command"] for path in cuda_tests.NEW_ON_CUDA)
    for name in ("end_to_end_resnet18", "end_to_end"):
        rows = {
            row["name"]: row
            for row in json.loads((smoke_plan / f"{name}.json").read_text())["rows"]
        }
        dali = rows.pop("NVIDIA DALI, CPU decode")
        assert DALI_HERE or dali["note"].startswith("not installed")
        failed = {row["name"]: row["note"] for row in rows.values() if row["per_second"] is None}
        assert not failed, f"{name}: {failed}\n" + (smoke_plan / "stderr.txt").read_text()[-4000:]
        assert all(row["per_second"] > 0 for row in rows.values()), name
        # two rounds of one warm-up and one timed epoch each, from one process a variant
        assert all(len(row["seconds"]) == 2 for row in rows.values()), name
        assert "the step alone: one cached batch" in rows
    small = json.loads((smoke_plan / "small_batches.json").read_text())["rows"]
    loaders = ("DataLoader", "FastLoader", "FastLoader + DataPrefetcher", "the step alone")
    assert [row["name"] for row in small] == [
        f"in memory, batch {size}: {loader}" for size in (8, 64) for loader in loaders
    ]
    assert all(row["per_second"] > 0 for row in small)
    timm = {row["name"]: row for row in
            json.loads((smoke_plan / "timm_loader.json").read_text())["rows"]}  # fmt: skip
    assert sorted(timm) == sorted(
        [f"{library} create_loader, 224px{suffix}" for library in ("timm", "fastload")
         for suffix in ("", ", inc1")] + ["the step alone, 224px"]
    )  # fmt: skip
    assert timm["fastload create_loader, 224px"]["per_second"] > 0
    assert timm["the step alone, 224px"]["of the step alone"] == "100%"
    memory = json.loads((smoke_plan / "gpu_memory.json").read_text())
    assert [len(epochs) for epochs in memory["summary"]["per_epoch"].values()] == [3, 3]


def test_the_plan_fits_one_device_call_in_the_order_that_matters():
    assert [part.name for part in gpu_check.PLAN] == [
        "end_to_end_r18", "end_to_end_r50", "decode", "memory", "small_batches", "cuda_new",
        "timm_loader", "cuda_rest",
    ]  # fmt: skip
    budgets = {part.name: part.budget_s for part in gpu_check.PLAN}
    assert budgets == {"end_to_end_r18": 185, "end_to_end_r50": 140, "decode": 45,
                       "memory": 40, "small_batches": 60, "cuda_new": 45,
                       "timm_loader": None, "cuda_rest": None}  # fmt: skip
    assert sum(budget or 0 for budget in budgets.values()) <= gpu_prepare.PLAN_S == 540
    documented = {part: budget for part, budget, _ in docs_page.CHECK_PARTS}
    assert documented == {name: f"{budget} s" if budget else "what is left"
                          for name, budget in budgets.items()}  # fmt: skip
    results = [part.result_name for part in gpu_check.PLAN]
    assert len(set(results)) == len(results)  # no part overwrites another's JSON


class FakeClock:
    """time.perf_counter for a benchmark whose every run takes ``step`` seconds."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        return self.now

    def run(self) -> float:
        self.now += self.step
        return self.now


def test_interleaved_keeps_the_rounds_done_when_its_budget_runs_out(monkeypatch):
    clock = FakeClock(step=10.0)
    monkeypatch.setattr(common.time, "perf_counter", clock)
    budget = common.Budget(55.0)  # each run 10 s, and one starts only with 12 s left
    results = common.interleaved({"a": clock.run, "b": clock.run}, rounds=3, budget=budget)
    assert results == {"a": [30.0, 50.0], "b": [40.0]}  # b's round 2 would end at 60 s
    assert budget.cut_short == "cut short by its 55 s budget before round 2 of 3"


def test_with_no_time_nothing_runs_and_every_variant_says_why():
    ran = []
    results = common.interleaved({"a": lambda: ran.append(1)}, rounds=2, budget=common.Budget(-1))
    assert ran == [] and results == {
        "a": "not run: cut short by its -1 s budget before the warm-up"
    }


def test_a_report_cut_short_says_so_under_its_table_and_in_its_json(tmp_path):
    from fastload.tools.measure import Measurement

    rows = [common.Row("a", Measurement((1.0, 1.0)), 10)]
    path = common.report("demo", rows, baseline="a", unit="images", settings={}, out=tmp_path,
                         cut_short="cut short by its 60 s budget before round 3 of 3")  # fmt: skip
    data = json.loads(path.read_text())
    assert data["cut_short"] == "cut short by its 60 s budget before round 3 of 3"
    assert data["table"].endswith(
        "\n\nCut short by its 60 s budget before round 3 of 3: "
        "the rounds measured before it are kept."
    )


def test_a_part_that_stops_itself_in_time_is_recorded_as_cut_short(tmp_path):
    script = tmp_path / "measures_half.py"
    script.write_text(
        textwrap.dedent("""
        import json, sys
        out = sys.argv[sys.argv.index("--out") + 1]
        budget = sys.argv[sys.argv.index("--budget-s") + 1]
        json.dump({"cut_short": f"cut short by its {budget} s budget before round 2 of 3"},
                  open(f"{out}/measures_half.json", "w"))
    """)
    )
    part = parts.Part("half", str(script), [], 40)
    record = parts.run_part(part, tmp_path, smoke=False, timeout=40)
    assert record["status"] == "cut short by its 25 s budget before round 2 of 3"
    assert record["result"] == "measures_half.json" and parts.finished(record)


def test_the_summary_names_the_part_a_killed_run_stopped_in(tmp_path):
    path = tmp_path / "check.json"
    first = {"part": "end_to_end_r18", "status": "ok", "seconds": 180.0,
             "result": "end_to_end_resnet18.json"}  # fmt: skip
    args = argparse.Namespace(smoke=False, budget_s=540)
    gpu_check.write_summary(path, args, [first], running="end_to_end_r50")
    statuses = [part["status"] for part in json.loads(path.read_text())["parts"]]
    assert statuses == ["ok", "running (left so, the run was stopped during it)",
                        *["not started: not run yet"] * 6]  # fmt: skip


def test_a_rerun_of_some_parts_keeps_the_other_parts_outcomes(tmp_path):
    path = tmp_path / "check.json"
    args = argparse.Namespace(smoke=False, budget_s=540)
    decode = {"part": "decode", "status": "ok", "seconds": 26.0, "result": "gpu_decode.json"}
    gpu_check.write_summary(path, args, [decode])
    earlier = {part["part"]: part for part in json.loads(path.read_text())["parts"]}
    rerun = {"part": "cuda_new", "status": "ok", "seconds": 81.0, "result": "cuda_tests_new.json"}
    gpu_check.write_summary(path, args, [rerun], running="cuda_rest", earlier=earlier)
    statuses = {part["part"]: part["status"] for part in json.loads(path.read_text())["parts"]}
    assert statuses == {
        "cuda_new": "ok", "decode": "ok", "end_to_end_r18": "not started: not run yet",
        "end_to_end_r50": "not started: not run yet", "memory": "not started: not run yet",
        "small_batches": "not started: not run yet", "timm_loader": "not started: not run yet",
        "cuda_rest": "running (left so, the run was stopped during it)",
    }  # fmt: skip


def test_an_unknown_part_is_refused_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_check.py"), "--out", str(tmp_path),
         "--parts", "decode,end_to_end"], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr == (
        "gpu_check.py: unknown part(s) end_to_end; choose from end_to_end_r18, "
        "end_to_end_r50, decode, memory, small_batches, cuda_new, timm_loader, cuda_rest\n"
    )
    assert list(tmp_path.iterdir()) == []  # nothing run, nothing written


def test_outcomes_are_logged_as_they_happen_and_survive_a_killed_run(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        textwrap.dedent("""
        import os
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture broke")

        def test_ok():
            pass

        def test_bad():
            assert 1 == 2

        def test_skipped():
            pytest.skip("needs CUDA")

        def test_setup(broken):
            pass

        def test_killed():
            os._exit(9)  # as a run stopped at its time limit

        def test_never_reached():
            pass
    """)
    )
    (tmp_path / "test_not_importable.py").write_text("import no_such_module\n")
    log = tmp_path / "outcomes.jsonl"
    environment = {**os.environ, "FASTLOAD_OUTCOME_LOG": str(log), "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "benchmarks.lib.outcome_log", "-o", "addopts=", "--continue-on-collection-errors",
         "test_not_importable.py", "test_sample.py"],
        cwd=tmp_path, env=environment, capture_output=True, timeout=120,
    )  # fmt: skip
    counts, failures = cuda_tests.outcomes(log)
    assert counts == {"passed": 1, "failed": 1, "errors": 2, "skipped": 1}
    assert failures == [
        {"test": "test_not_importable.py", "outcome": "errors",
         "message": "ModuleNotFoundError: No module named 'no_such_module'"},
        {"test": "test_sample.py::test_bad", "outcome": "failed", "message": "assert 1 == 2"},
        {"test": "test_sample.py::test_setup", "outcome": "errors",
         "message": "RuntimeError: fixture broke"},
    ]  # fmt: skip


def fake_wheels(folder: Path, sizes: list[int]) -> list[Path]:
    folder.mkdir()
    generator = random.Random(0)
    wheels = []
    for index, size in enumerate(sizes):
        wheel = folder / f"package{index}-1.0-py3-none-any.whl"
        wheel.write_bytes(generator.randbytes(size))
        wheels.append(wheel)
    return wheels


def test_staged_wheels_fit_each_call_and_the_device_script_rejoins_them(tmp_path):
    mib = gpu_prepare.MIB
    wheels = fake_wheels(tmp_path / "big", [int(2.5 * mib), mib // 3, int(1.1 * mib), 1000])
    folders = gpu_prepare.stage(wheels, tmp_path / "stage", room_mib=1.0)
    assert [f.name for f in folders] == ["1", "2", "3", "4"]  # 3.9 MiB in 1-MiB calls
    assert all(gpu_prepare.size_mib([folder]) <= 1.0 for folder in folders)

    # the staging calls copy every folder to one place; the device call rejoins and installs
    staged = tmp_path / "on-the-gpu-machine"
    staged.mkdir()
    for part in (f for folder in folders for f in folder.iterdir()):
        (staged / part.name).write_bytes(part.read_bytes())
    shim = tmp_path / "bin"
    shim.mkdir()
    python3 = shim / "python3"  # records what it is asked to do instead of doing it
    python3.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "python3.log"}\n')
    python3.chmod(python3.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "out"
    environment = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "OUT": str(out),
                   "STAGE": str(staged)}  # fmt: skip
    done = subprocess.run(["bash", str(BENCHMARKS / "gpu_check.sh")], env=environment,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for wheel in wheels:
        assert (staged / wheel.name).read_bytes() == wheel.read_bytes()
    assert not list(staged.glob("*.part-*"))
    calls = (tmp_path / "python3.log").read_text().splitlines()
    assert calls[0].startswith("-m pip install -q --no-index --no-deps")
    assert all(str(staged / wheel.name) in calls[0] for wheel in wheels)
    assert calls[1] in (f"benchmarks/gpu_check.py --budget-s {s}" for s in (540, 539, 538))
    assert calls[2:] == ["benchmarks/docs_page.py"]
    assert (out / "gpu-results.tgz").stat().st_size > 0


#: What only this project's lent GPU windows have: its help, not the contributing page, says it.
LENT_WINDOW = ("64 MiB", "15 minutes", "device tool", "give_back", "staging calls")


def test_the_contributing_page_runs_the_check_on_any_gpu_machine(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    page = (ROOT / "docs" / "contributing.md").read_text()
    section = page.split("## Measuring on a GPU: `make gpu-check`", 1)[1].split("\n## ", 1)[0]
    assert "make test        # once" in section and "make gpu-check   # the plan" in section
    assert [words for words in LENT_WINDOW if words in section] == []
    monkeypatch.setattr(sys, "argv", ["gpu_prepare.py", "--help"])
    with pytest.raises(SystemExit):
        gpu_prepare.main()
    usage = capsys.readouterr().out
    assert [words for words in LENT_WINDOW if words not in usage] == []
    assert "bash benchmarks/gpu_check.sh" in usage
