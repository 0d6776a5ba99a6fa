"""A training run checkpointed at step k and killed with SIGKILL at step k+3 resumes from
the checkpoint and goes on exactly as the run that was never interrupted: the same
(sample index, hash of the augmented sample) from step k+1 on, the same final weights.
Alone with 0 and 2 workers, and as 2 processes on gloo under torchrun."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("resume_run.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def run(tmp_path: Path, name: str, *args: str, launcher=(sys.executable,)) -> int:
    completed = subprocess.run(
        [*launcher, str(SCRIPT), str(tmp_path / name), str(tmp_path / "checkpoint"), *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if completed.returncode not in (0, -signal.SIGKILL) and "--kill-at" not in args:
        raise AssertionError(completed.stderr[-3000:])
    return completed.returncode


def steps(path: Path) -> dict[int, list[str]]:
    """Each step's lines (epoch, index, hash), and the final weights under step -1."""
    found: dict[int, list[str]] = {}
    for line in path.read_text().splitlines():
        key, rest = line.split(" ", 1)
        found.setdefault(-1 if key == "weights" else int(key), []).append(rest)
    return found


@pytest.mark.slow
@pytest.mark.parametrize(
    ("workers", "save_at", "ranks"),
    [(0, 5, 1), (2, 14, 1), (2, 9, 2)],
    ids=["0 workers, epoch 1", "2 workers, epoch 2", "torchrun gloo x2"],
)
def test_a_run_killed_after_its_checkpoint_resumes_exactly(tmp_path, workers, save_at, ranks):
    launcher = TORCHRUN if ranks > 1 else [sys.executable]
    common = ["--workers", str(workers)]
    run(tmp_path, "whole", *common, launcher=launcher)
    killed = run(tmp_path, "killed", *common, "--save-at", str(save_at),
                 "--kill-at", str(save_at + 3), launcher=launcher)  # fmt: skip
    assert killed != 0  # SIGKILL: -9 alone; torchrun reports its worker's death
    run(tmp_path, "resumed", *common, "--resume", launcher=launcher)

    for rank in range(ranks):
        whole = steps(tmp_path / f"whole.rank{rank}")
        killed_log = steps(tmp_path / f"killed.rank{rank}")
        resumed = steps(tmp_path / f"resumed.rank{rank}")
        assert max(killed_log) == save_at + 3 and -1 not in killed_log  # it died there
        assert sorted(resumed) == [-1, *range(save_at + 1, max(whole) + 1)]
        for step, lines in resumed.items():
            assert lines == whole[step], f"rank {rank} step {step}"
        first_epoch = [int(line.split()[1]) for step, lines in whole.items() if step > 0
                       for line in lines if line.startswith("0 ")]  # fmt: skip
        assert len(first_epoch) == 48 // ranks == len(set(first_epoch))  # each sample once
