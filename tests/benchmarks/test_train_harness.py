"""benchmarks/train_harness.py, the end-to-end benchmarks' training script: each pipeline
(fastload's decodes, the torchvision baseline, DALI) trains, and it speaks to people."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from common_utils import run_script

HARNESS = Path(__file__).resolve().parents[2] / "benchmarks" / "train_harness.py"


@pytest.mark.parametrize(
    "variant",
    [
        [],
        ["--baseline"],
        ["--decode", "gpu", "--augment", "gpu"],
        ["--decode", "gpu-fused", "--dtype", "bfloat16"],
        ["--dali", "--dtype", "float16"],
    ],
)
def test_the_harness_runs_each_pipeline(tmp_path, variant):
    from fastload import make_image_folder

    if "--dali" in variant:
        pytest.importorskip(
            "nvidia.dali", reason="NVIDIA DALI, a peer: benchmarks/install_peers.sh"
        )
    root = make_image_folder(tmp_path, num_classes=2, images_per_class=8, size=(64, 48))
    options = [
        *("--epochs", "2", "--batch-size", "4", "--image-size", "32"),
        *("--steps", "2", "--workers", "0", "--json"),
    ]
    out = run_script(HARNESS, str(root), *options, *variant)
    epochs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [e["epoch"] for e in epochs] == [0, 1]
    assert all(
        e["images_per_second"] > 0 and e["loss"] is not None and 0 <= e["data_wait_fraction"] <= 1
        for e in epochs
    )
    expected = {"--baseline": "baseline", "--dali": "NVIDIA DALI"}.get(
        variant[0] if variant else ""
    )
    assert epochs[0]["pipeline"].startswith(expected or "fastload")


def test_the_harness_talks_to_people_without_warnings(tmp_path):
    from fastload import make_image_folder

    script = HARNESS
    help_text = run_script(script, "--help")
    assert "torchrun --nproc-per-node 8 benchmarks/train_harness.py train.lmdb" in help_text
    root = make_image_folder(tmp_path, num_classes=2, images_per_class=4, size=(64, 48))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        out = run_script(script, str(root), "--epochs", "1", "--batch-size", "4", "--image-size",
                         "32", "--workers", "0", "--model", "squeezenet1_1")  # fmt: skip
    # With CUDA the harness augments on the GPU by default; it decodes on the CPU.
    where = (
        "cpu decode, gpu augmentation\\) on cuda:0"
        if torch.cuda.is_available()
        else ("cpu decode, cpu augmentation\\) on cpu")
    )
    assert re.fullmatch(
        r"epoch 0: [\d,]+ images/s, data wait [\d.]+%, [\d.]+ CPU ms/image, loss [\d.]+ "
        rf"\(fastload \({where}\)\n",
        out,
    ), out


def served_options() -> list[str]:
    return [*("--batch-size", "4", "--image-size", "32", "--steps", "2", "--workers", "0"),
            *("--model", "squeezenet1_1")]  # fmt: skip


def test_served_rounds_run_in_one_process_and_count_epochs_on(tmp_path):
    from benchmarks.end_to_end import Served
    from fastload import make_image_folder

    root = make_image_folder(tmp_path, num_classes=2, images_per_class=4, size=(64, 48))
    variant = Served(root, served_options())
    try:
        first = variant.epochs(2, timeout=300)
        pid = variant.process.pid
        second = variant.epochs(3, timeout=300)
        assert variant.process.pid == pid and variant.process.poll() is None
    finally:
        variant.close()
    assert [e["epoch"] for e in first] == [0, 1]
    assert [e["epoch"] for e in second] == [2, 3, 4]
    assert all(e["images_per_second"] > 0 and e["loss"] is not None for e in first + second)
    assert variant.process.returncode == 0  # its input's end ended it


def test_a_served_variant_that_fails_says_why_and_one_over_its_time_is_stopped(tmp_path):
    from benchmarks.end_to_end import Served
    from fastload import make_image_folder

    broken = Served(tmp_path / "missing", served_options())
    with pytest.raises(RuntimeError, match="missing"):
        broken.epochs(1, timeout=300)
    assert broken.process.returncode not in (0, None)

    root = make_image_folder(tmp_path / "data", num_classes=2, images_per_class=4, size=(64, 48))
    slow = Served(root, served_options())
    with pytest.raises(RuntimeError, match=r"^stopped after 0 s, the time budget$"):
        slow.epochs(1, timeout=0.01)  # it cannot even start in that time
    assert slow.process.returncode is not None  # killed, not left running


def test_serving_is_refused_under_torchrun(tmp_path):
    completed = subprocess.run(
        [sys.executable, str(HARNESS), str(tmp_path), "--serve"],
        capture_output=True, text=True, timeout=120, env=os.environ | {"RANK": "0"},
    )  # fmt: skip
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines()[-1] == (
        "train_harness.py: error: --serve runs alone: under torchrun each rank would wait on "
        "its own input"
    )


def test_a_round_is_judged_by_its_epochs_and_a_new_process_by_its_start_too():
    from benchmarks.end_to_end import expected_round

    took = {"baseline": 11.0, "the step alone": 1.8}
    assert expected_round("baseline", took, [8.0, 5.0]) == 11.0  # started: its epochs only
    assert expected_round("DALI", took, [8.0, 5.0]) == 19.0  # not yet: longest round + start
    assert expected_round("baseline", {}, []) == 0.0


def test_cpu_by_thread_is_the_median_per_label_native_threads_apart():
    from benchmarks.end_to_end import by_thread

    epochs = [
        {"thread_cpu_ms_per_image": {"MainThread": 0.03, "fastload-producer-device": 0.1,
                                     "python (native)": 0.2, "cuda-EvtHandlr (native)": 0.1,
                                     "Thread-1 (_pin_memory_loop)": 0.01}},
        {"thread_cpu_ms_per_image": {"MainThread": 0.05, "fastload-producer-device": 0.3,
                                     "python (native)": 0.1}},
        {"thread_cpu_ms_per_image": {"MainThread": 0.04, "fastload-producer-device": 0.2,
                                     "python (native)": 0.4}},
    ]  # fmt: skip
    # native: 0.3, 0.1 and 0.4 an epoch (two native threads in the first, summed)
    assert by_thread(epochs) == "loop 0.04, device 0.20, native 0.30, other 0.01"
    assert by_thread([{}]) == "-"


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_the_harness_counts_the_threads_python_did_not_start():
    from benchmarks.lib.common import thread_cpu

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.ones(4_000_000).sum()  # torch's second intra-op thread: not Python's
        found = thread_cpu()
    finally:
        torch.set_num_threads(threads)
    assert "MainThread" in found and all(cpu >= 0 for cpu in found.values())
    assert any(name.endswith(" (native)") for name in found)
