"""A pytest plugin (``-p benchmarks.lib.outcome_log``) that appends each test's outcome to
the JSON-lines file named by ``$FASTLOAD_OUTCOME_LOG`` as soon as it is known, so that a
run stopped at its time limit still says what it finished (a JUnit report is written only
at the end).

One line per outcome: ``{"test": nodeid, "outcome": "passed" | "failed" | "errors" |
"skipped", "message": first line of the failure or the skip reason}``; a test file that
does not import is one of the errors. Under pytest-xdist only the controller writes, once
per outcome.
"""

from __future__ import annotations

import json
import os

import pytest

ENVIRONMENT = "FASTLOAD_OUTCOME_LOG"


def _outcome(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    if isinstance(report, pytest.CollectReport):  # a test file that does not import
        return "errors" if report.failed else None
    if report.when == "call":
        return "passed" if report.passed else "failed" if report.failed else "skipped"
    if report.failed:  # a fixture's setup or teardown broke
        return "errors"
    if report.when == "setup" and report.skipped:
        return "skipped"
    return None


def _message(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(report, pytest.CollectReport):  # the error is the report's last line
        last = str(longrepr).strip().splitlines()[-1:] or [""]
        return last[0].removeprefix("E").strip()[:300]
    if isinstance(longrepr, tuple):  # a skip: (file, line, reason)
        text = str(longrepr[2])
    else:
        crash = getattr(longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(longrepr or "")
    lines = text.strip().splitlines()
    return lines[0][:300] if lines else ""


def _log(report: pytest.TestReport | pytest.CollectReport) -> None:
    path = os.environ.get(ENVIRONMENT)
    outcome = _outcome(report)
    if not path or outcome is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    line = {"test": report.nodeid, "outcome": outcome,
            "message": "" if outcome == "passed" else _message(report)}  # fmt: skip
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _log(report)


@pytest.hookimpl(trylast=True)
def pytest_collectreport(report: pytest.CollectReport) -> None:
    _log(report)
