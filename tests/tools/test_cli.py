from __future__ import annotations

import json
import re

import pytest

from fastload.tools.cli import main
from fastload.tools.demo import compare_loaders
from fastload.tools.measure import format_table, measure
from fastload.tools.synthetic import make_image_folder


def test_demo_prints_a_before_after_table_part_by_part_and_a_plot(capsys, tmp_path):
    plot = tmp_path / "demo.png"
    main(["demo", "--images-per-class", "2", "--repeats", "1", "--plot", str(plot)])
    out = capsys.readouterr().out
    assert "16 JPEGs of 500x375" in out
    assert out.index("measuring...") < out.index("| DataLoader")  # said before measured
    assert out.rstrip().endswith(f"wrote {plot}") and plot.stat().st_size > 1000
    assert "2. fastload.diagnose on a ResNet-18 training loop" in out
    assert "real loop: waiting for data" in out and "Recommendations:" in out
    rows = [
        line
        for line in out.splitlines()
        if line.startswith("| DataLoader") or line.startswith("| FastLoader")
    ]
    assert len(rows) == 2
    assert "num_workers=0" in rows[0]
    assert re.search(r"\| 1\.00x +\|$", rows[0])


def test_compare_loaders_reads_every_image_with_each_loader(tmp_path):
    root = make_image_folder(tmp_path, num_classes=2, images_per_class=3, size=(64, 48))
    runs = compare_loaders(root, batch_size=4, image_size=32, repeats=2)
    assert [run.name for run in runs] == ["DataLoader", "FastLoader"]
    assert all(run.images == 6 and len(run.measurement.seconds) == 2 for run in runs)


def test_unknown_command_exits_with_usage(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["nope"])
    assert caught.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_measure_counts_runs_and_rejects_bad_counts():
    calls = []
    result = measure(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(calls) == 5 and len(result.seconds) == 3
    with pytest.raises(ValueError, match="need repeats >= 1"):
        measure(lambda: None, repeats=0)


def test_format_table_lines_up_columns():
    assert format_table(["a", "bb"], [[1, 2], ["xyz", 3]]).splitlines() == [
        "| a   | bb |",
        "|-----|----|",
        "| 1   | 2  |",
        "| xyz | 3  |",
    ]


@pytest.fixture(scope="module")
def small_folder(tmp_path_factory):
    return make_image_folder(
        tmp_path_factory.mktemp("cli"), num_classes=2, images_per_class=8, size=(64, 48)
    )


def test_diagnose_prints_a_json_report_and_a_timeline(small_folder, tmp_path, capsys):
    plot = tmp_path / "timeline.png"
    options = "--batch-size 4 --image-size 32 --batches 3 --warmup 1 --workers 0 --model resnet18"
    main(["diagnose", str(small_folder), *options.split(), "--json", "--plot", str(plot)])
    out = capsys.readouterr().out
    report = json.loads(out[: out.rindex("}") + 1])
    assert report["num_workers"] == 0 and report["batch_size"] == 4 and report["storage"] == "files"
    assert report["step_seconds"] > 0 and 0 <= report["wait_fraction"] <= 1
    assert report["recommendations"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_sweeps_workers_and_names_the_best(small_folder, tmp_path, capsys):
    plot = tmp_path / "workers.png"
    options = "--batch-size 4 --image-size 32 --batches 2 --workers 0,1 --prefetch 2"
    main(["bench", str(small_folder), *options.split(), "--plot", str(plot)])
    out = capsys.readouterr().out
    assert [
        line.split("|")[1].strip()
        for line in out.splitlines()
        if line.startswith("| ") and "num_workers" not in line
    ] == ["0", "1"]
    assert re.search(r"best: FastLoader\(num_workers=[01], prefetch_factor=2\)", out)
    assert plot.exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["diagnose", "data", "--model", "resnet999"],
     "fastload diagnose: error: argument --model: 'resnet999' is not a torchvision"),
    (["diagnose", "data", "--image-size", "0"],
     "fastload diagnose: error: argument --image-size: must be a positive integer, got 0"),
    (["diagnose", "data", "--workers", "-1"],
     "fastload diagnose: error: argument --workers: must be >= 0, auto or tune, got -1"),
    (["bench", "data", "--prefetch", "2,x"],
     "fastload bench: error: argument --prefetch: must be comma-separated integers, got '2,x'"),
    (["convert", "a", "b", "--resize", "0"],
     "fastload convert: error: argument --resize: must be a positive integer, got 0"),
])  # fmt: skip
def test_bad_arguments_are_one_line_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1
