"""benchmarks/gpu_memory.py: growth is read after the allocator's warm-up, and a warm-up
that leaves no epoch to read is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.gpu_memory import growth

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_memory.py"


def test_growth_counts_from_the_end_of_the_warm_up():
    # reserved MiB after each epoch as an H200 run gave them: pools filled by epoch 3
    reserved = [1172.0, 1834.0, 1982.0] + [1982.0] * 17
    epochs = [{"reserved": value} for value in reserved]
    assert growth(epochs, "reserved", warmup=3) == 0.0
    assert growth(epochs, "reserved", warmup=1) == 810.0
    epochs[-1]["reserved"] = 2002.0  # a block more in the last epoch is growth
    assert growth(epochs, "reserved", warmup=3) == 20.0


def test_a_warm_up_as_long_as_the_run_is_refused_in_one_line():
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--epochs", "3", "--warmup", "3"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines()[-1] == (
        "gpu_memory.py: error: --warmup 3 must be at least 1 and below --epochs 3"
    )
