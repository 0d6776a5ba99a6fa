"""The docs' benchmarks page is written from the result files and nothing else."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import docs_page

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

RESULTS = BENCHMARKS / "results"
COMMITTED = sorted([*RESULTS.glob("*.json"), *RESULTS.glob("*/*.json")])


def test_the_committed_page_matches_the_committed_results():
    assert docs_page.PAGE.read_text() == docs_page.render(), (
        "docs/benchmarks.md is out of date: run python benchmarks/docs_page.py"
    )
    for copy, to_page in docs_page.COPIES.items():
        assert copy.read_text() == docs_page.headline_copy(copy, to_page), (
            f"{copy.name}'s headline table is out of date: run python benchmarks/docs_page.py"
        )


def headline_rows(text: str) -> list[str]:
    """The headline table's rows in a page's text, the link to each section cut to its
    anchor (the README, the home page and the benchmarks page link from different
    folders)."""
    if docs_page.HEADLINE_START in text:
        text = text.split(docs_page.HEADLINE_START, 1)[1].split(docs_page.HEADLINE_END, 1)[0]
    else:
        text = text.split("## Results", 1)[1].split("## ", 1)[0]
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    return [re.sub(r"\]\([^)#]*#", "](#", row) for row in rows]


def test_the_readme_the_home_page_and_the_benchmarks_page_show_the_same_headline_table():
    page = headline_rows(docs_page.PAGE.read_text())
    assert len(page) - 1 == len(docs_page.HEADLINES) >= 10
    for copy, to_page in docs_page.COPIES.items():
        text = copy.read_text()
        assert headline_rows(text) == page, copy.name
        assert docs_page.HEADLINE_NOTE in text, copy.name
        for target in re.findall(r"\]\(([^)#]+)#", text.split(docs_page.HEADLINE_START)[1]):
            assert target == to_page and (copy.parent / target).is_file(), (copy.name, target)


def test_a_copy_without_its_markers_is_an_error_naming_it(tmp_path: Path):
    page = tmp_path / "index.md"
    page.write_text("# fastload\n\n## Measured\n")
    with pytest.raises(ValueError, match=r"index\.md: no <!-- headline"):
        docs_page.headline_copy(page, "benchmarks.md")


def test_every_result_has_its_section_table_and_plot():
    text = docs_page.PAGE.read_text()
    sections = re.findall(r"^## (.+)$", text, re.MULTILINE)
    names = [docs_page.key(path, RESULTS) for path in docs_page.result_files(RESULTS)]
    assert sorted(names) == [docs_page.key(path, RESULTS) for path in COMMITTED]
    # the results first, then how they are measured, then a section per benchmark, then
    # the test runs
    benchmarks = [docs_page.heading(name) for name in names if not docs_page.is_run(name)]
    runs = [docs_page.heading(name) for name in names if docs_page.is_run(name)]
    assert sections == ["Results", "How these are measured", *benchmarks, "Test runs", *runs]
    assert {"gpu: check", "gpu: suite", "gpu: cuda_tests"} <= set(runs)
    assert {"gpu: prefetch", "cpu: peers"} <= set(benchmarks)
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


def round_range(rows: dict[str, dict], name: str) -> str:
    """`` (low to high)``: the ratio of each interleaved round, read from the file; nothing
    where a part cut short timed the two in different numbers of rounds."""
    row = rows[name]
    baseline = rows[row["versus"]]
    if len(row["seconds"]) != len(baseline["seconds"]):
        return ""
    ratios = [
        (row["items"] / mine) / (baseline["items"] / theirs)
        for mine, theirs in zip(row["seconds"], baseline["seconds"], strict=True)
    ]
    return f" ({min(ratios):.2f} to {max(ratios):.2f})"


def test_the_page_opens_with_the_headline_results_each_with_range_machine_date_and_section():
    rows = headline_rows(docs_page.PAGE.read_text())
    assert (
        rows[0]
        == "| what, against what | fastload | best peer, same run | machine | date | details |"
    )
    assert len(rows) - 1 == len(docs_page.HEADLINES)  # every result named is committed
    for line, headline in zip(rows[1:], docs_page.HEADLINES, strict=True):
        data = json.loads((RESULTS / f"{headline.result}.json").read_text())
        by_name = {row["name"]: row for row in data["rows"]}
        what, ratio, peer, machine, date, details = line.strip("| ").split(" | ")
        assert what == headline.what
        # the file's ratio, then the lowest and highest of its rounds
        speedup = by_name[headline.row]["speedup"]
        assert ratio == f"**{speedup:.2f}x**" + round_range(by_name, headline.row)
        if headline.peer:
            label, name = headline.peer
            assert peer == f"{label} {by_name[name]['speedup']:.2f}x" + round_range(by_name, name)
        cpus = data["machine"]["cpus"]
        if data["machine"]["device"].startswith("no GPU"):
            assert machine == f"{cpus}-core CPU"
        else:
            assert machine == f"{data['machine']['device']}, {cpus} CPU cores"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date)  # the date of its commit
        assert details.endswith(f"(#{docs_page.anchor(headline.result)})")


def test_a_ratio_without_rounds_has_no_range():
    rows = {
        "base": {"name": "base", "items": 10, "seconds": [1.0, 2.0], "speedup": 1.0},
        "one": {"name": "one", "versus": "base", "items": 10, "seconds": [0.5], "speedup": 2.0},
        "two": {"name": "two", "versus": "base", "items": 10, "seconds": [0.5, 0.5],
                "speedup": 3.0},
    }  # fmt: skip
    assert docs_page.figure(rows["base"], rows) == "1.00x"  # the baseline itself
    assert docs_page.figure(rows["one"], rows) == "2.00x"  # not timed round by round
    assert docs_page.figure(rows["two"], rows, bold=True) == "**3.00x** (2.00 to 4.00)"


ROWS = [
    {"name": "baseline", "per_second": 100.0, "speedup": 1.0, "CPU ms/image": 2.0},
    {"name": "fastload: image folder", "per_second": 185.0, "speedup": 1.85,
     "CPU ms/image": 1.9},
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), [
    ("[[speedup fastload: image folder]] at [[cpu fastload: image folder]] ms",
     "1.85x at 1.90 ms"),
    ("[[over fastload: image folder | baseline]]", "1.85x"),
    ("[[cpu share fastload: image folder | baseline]] of its CPU", "95 % of its CPU"),
    ("[[cpu above baseline |\n  fastload: image folder]] ms more", "0.10 ms more"),
    ("no figure: 2.3x is a goal", "no figure: 2.3x is a goal"),
])  # fmt: skip
def test_a_figure_the_findings_quote_is_read_from_the_results_rows(text, expected):
    assert docs_page.quoted(text, ROWS, "cpu/peers") == expected


def test_a_figure_of_a_row_the_result_lacks_is_refused_naming_the_row():
    with pytest.raises(KeyError, match="cpu/peers: the findings quote the row 'FFCV'"):
        docs_page.quoted("[[speedup FFCV]]", ROWS, "cpu/peers")


def test_no_figure_is_written_into_the_findings_of_a_result_with_rows():
    """The findings of a result file with rows quote its figures through placeholders: a
    ratio written out (``1.87x``) would go stale when the result is measured again. A
    goal is a figure of its own (``the goal of 2.3x``)."""
    written = {
        name: re.findall(r"(?<!goal of )\b\d+\.\d+x\b", notes.findings)
        for name, notes in docs_page.NOTES.items()
        if notes.findings and name.startswith("cpu/")
    }
    assert {name: found for name, found in written.items() if found} == {}
