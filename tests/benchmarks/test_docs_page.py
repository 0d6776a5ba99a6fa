"""The docs' benchmarks page is written from the result files and nothing else."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks import docs_page

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

RESULTS = BENCHMARKS / "results"
COMMITTED = sorted([*RESULTS.glob("*.json"), *RESULTS.glob("*/*.json")])


def test_the_committed_page_matches_the_committed_results():
    assert docs_page.PAGE.read_text() == docs_page.render(), (
        "docs/benchmarks.md is out of date: run python benchmarks/docs_page.py"
    )
    home = docs_page.HOME.read_text()
    assert home == docs_page.home(), "docs/index.md's headline table is out of date"
    table = home.split(docs_page.HOME_START, 1)[1].split(docs_page.HOME_END, 1)[0]
    assert table.count("](benchmarks.md#") == len(docs_page.headline_table(RESULTS)) - 2 >= 5


def test_every_result_has_its_section_table_and_plot():
    text = docs_page.PAGE.read_text()
    sections = re.findall(r"^## (.+)$", text, re.MULTILINE)
    names = [docs_page.key(path, RESULTS) for path in docs_page.result_files(RESULTS)]
    assert sorted(names) == [docs_page.key(path, RESULTS) for path in COMMITTED]
    # the results first, then how they are measured, then a section per result file
    assert sections == ["Results", "How these are measured"] + [
        docs_page.heading(name) for name in names
    ]
    for path in COMMITTED:
        data = json.loads(path.read_text())
        if "table" in data:
            assert data["table"] in text, path
        if path.with_suffix(".png").exists():
            assert f"../benchmarks/results/{path.relative_to(RESULTS).with_suffix('.png')})" in text


def test_results_are_one_tree_by_the_machine_that_measured_them():
    assert {path.parent.relative_to(RESULTS).as_posix() for path in COMMITTED} == {"cpu", "gpu"}
    for path in COMMITTED:
        machine = json.loads(path.read_text()).get("machine")
        if machine:  # cpu/: measured without a GPU; gpu/: with one
            without_gpu = machine["device"] == "no GPU (CPU only)"
            assert without_gpu == (path.parent.name == "cpu"), path


def test_anchors_are_the_file_stem_or_folder_and_stem():
    assert docs_page.heading("lmdb_vs_files") == "lmdb_vs_files"
    assert docs_page.heading("gpu/prefetch") == "gpu: prefetch"
    assert docs_page.anchor("gpu/prefetch") == "gpu-prefetch"


def test_every_link_on_the_page_reaches_a_file():
    for target in re.findall(r"\]\((\.\./[^)#]+)\)", docs_page.PAGE.read_text()):
        assert (docs_page.PAGE.parent / target).is_file(), target


def test_check_says_when_the_page_is_out_of_date(tmp_path: Path):
    results = tmp_path / "benchmarks" / "results"
    shutil.copytree(RESULTS / "gpu", results / "gpu")
    page = tmp_path / "docs" / "benchmarks.md"
    script = BENCHMARKS / "docs_page.py"

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(script), "--results", str(results), "--page", str(page),
             "--check"],
            capture_output=True, text=True,
        )  # fmt: skip

    assert check().returncode == 1  # no page yet
    assert docs_page.write(results, page)
    assert check().returncode == 0
    shutil.copytree(RESULTS / "cpu", results / "cpu")  # new results
    stale = check()
    assert stale.returncode == 1 and "out of date" in stale.stdout


def test_the_page_opens_with_the_headline_results_each_with_machine_date_and_section():
    text = docs_page.PAGE.read_text()
    results = text.split("## Results", 1)[1].split("## How these are measured", 1)[0]
    rows = [line for line in results.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0] == "| what | ratio | machine | date | details |"
    found = [(name, row) for name, row, _ in docs_page.HEADLINES
             if (RESULTS / f"{name}.json").exists()]  # fmt: skip
    assert len(rows) - 1 == len(found) >= 5
    for line, (name, row_name) in zip(rows[1:], found, strict=True):
        data = json.loads((RESULTS / f"{name}.json").read_text())
        (row,) = [row for row in data["rows"] if row["name"] == row_name]
        assert f"| **{row['speedup']:.2f}x** |" in line  # the ratio is the file's
        assert re.search(r"\| \d{4}-\d{2}-\d{2} \|", line)  # the date of its commit
        assert f"(#{docs_page.anchor(name)})" in line
