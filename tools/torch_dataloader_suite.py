"""PyTorch's own DataLoader tests, run with DataLoader and again with FastLoader in its place.

PyTorch's ``test/test_dataloader.py`` says what DataLoader promises: where an error surfaces,
which worker loads which batch, ``get_worker_info()``, the workers' seeds, ``in_order``. This
script runs that file under pytest twice, in subprocesses one after the other: once as it is,
once with ``fastload.FastLoader`` (its defaults left on) patched in for
``torch.utils.data.DataLoader``. It prints each run's counts and the tests that fail only with
FastLoader.

Usage:
    python tools/torch_dataloader_suite.py PATH/test_dataloader.py
    python tools/torch_dataloader_suite.py PATH/test_dataloader.py -k "TestOutOfOrderDataLoader"
    python tools/torch_dataloader_suite.py PATH/test_dataloader.py --json runs.json
    python tools/torch_dataloader_suite.py PATH/test_dataloader.py --baseline runs.json
    python tools/torch_dataloader_suite.py PATH/test_dataloader.py -- -v  # more pytest options
    make torch-suite TORCH_TEST_FILE=PATH/test_dataloader.py [TORCH_SUITE_K="..."]

The test file is PyTorch's (``test/test_dataloader.py`` of the torch you target, kept outside
this repository). It keeps its name: it imports itself as ``test_dataloader``. Its tests are
slow (workers, spawned processes): ``-k`` selects some. ``--baseline`` reuses the DataLoader
run of an earlier ``--json`` instead of running it again; ``--keep DIR`` keeps pytest's logs.
``@slowTest`` tests stay skipped unless ``PYTORCH_TEST_WITH_SLOW=1`` is set. The FastLoader
tested is the one the Python running this script imports (``PYTHONPATH=OTHER/src`` tests
another checkout). Order matters in the file: ``test_worker_init_fn_forkserver`` sets the
process's start method to forkserver for every test after it, so a test can fail in a full
run and pass alone.

Exit status: 0 when no test fails only with FastLoader, 1 when one does, 2 when a run could not
be made (pytest did not start or collected nothing, the patch did not take).

How it runs:
1. A scratch folder goes first on the subprocesses' ``PYTHONPATH``, with a ``sitecustomize``
   module that runs at the start of every Python process of a run (spawned DataLoader workers
   and the file's ``ErrorTrackingProcess`` children too). There it
   - fills in names a newer test file imports from ``torch.testing._internal`` that the
     installed torch lacks (``HardwareClassification``, new in torch 2.15), as the module loads;
   - in the FastLoader run, sets ``torch.utils.data.DataLoader`` and
     ``torch.utils.data.dataloader.DataLoader`` to FastLoader, before the test module's
     ``from torch.utils.data import DataLoader``.
   A stand-in ``expecttest`` goes in the folder when that package is not installed (torch's
   test helpers import it; only their ``assertExpectedInline`` uses it).
2. A pytest plugin from the folder (``-p``) notes each test's outcome in a JSON-lines file as
   it ends, and stops a test at its time limit (SIGALRM raises ``TimeoutError`` in it): in the
   DataLoader run ``--timeout``; in the FastLoader run ``SLOWER_BY`` times what the test took
   with DataLoader, at least ``MIN_LIMIT_S`` and at most ``--timeout``, so that a test that
   hangs with FastLoader costs minutes, not ``--timeout``. A test that does not end even then
   is killed, with its process group, ``GRACE_S`` later, and pytest starts again after it.
3. The two runs' outcomes are compared.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: The two runs: the name of the class that ``torch.utils.data.DataLoader`` is in each.
MODES = ("DataLoader", "FastLoader")
#: Outcomes that count as a failure.
FAILING = frozenset({"failed", "error", "timeout", "killed"})
#: In the FastLoader run, a test may take this many times what it took with DataLoader...
SLOWER_BY = 5.0
#: ... and at least this long (seconds).
MIN_LIMIT_S = 120.0
#: How long past its limit a test that ignores the alarm may run before it is killed.
GRACE_S = 60.0
#: How many times pytest is started again after a killed or crashed test, per run.
MAX_RESTARTS = 10
#: How often the progress line is printed while a run goes on.
PROGRESS_EVERY_S = 60.0

SITECUSTOMIZE = '''\
"""Written by fastload's tools/torch_dataloader_suite.py: runs in every process of a run."""

import importlib.machinery
import importlib.util
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_EVENTS = os.environ.get("FASTLOAD_SUITE_EVENTS")


def _note(**event):
    if _EVENTS:
        with open(_EVENTS, "a") as f:
            f.write(json.dumps(event) + "\\n")


class _AnyMember(type):
    def __getattr__(cls, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return name


class HardwareClassification(metaclass=_AnyMember):
    """Stand-in for torch 2.15's tag of a test class's hardware: a member is its own name."""


#: Names a newer test file imports that an older torch lacks, by module.
_MISSING = {
    "torch.testing._internal.common_utils": {
        "HardwareClassification": HardwareClassification,
    },
}


class _FillMissing:
    """Adds the names above to their module once the module has run."""

    def find_spec(self, name, path, target=None):
        if name not in _MISSING:
            return None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        else:
            return None
        if spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            for attr, value in _MISSING[name].items():
                if not hasattr(module, attr):
                    setattr(module, attr, value)
                    _note(event="shim", name=f"{name}.{attr}")

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _FillMissing())

if os.environ.get("FASTLOAD_SUITE_LOADER") == "FastLoader":
    import torch.utils.data
    import torch.utils.data.dataloader

    from fastload import FastLoader

    torch.utils.data.DataLoader = FastLoader
    torch.utils.data.dataloader.DataLoader = FastLoader

# the sitecustomize this one hides, if there is one
_others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _others)
if _spec is not None and _spec.loader is not None:
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
'''

PLUGIN = '''\
"""Written by fastload's tools/torch_dataloader_suite.py: notes outcomes, times tests out."""

import json
import os
import signal
import sys
import time

import pytest

_EVENTS = os.environ["FASTLOAD_SUITE_EVENTS"]
_TIMEOUT = float(os.environ["FASTLOAD_SUITE_TIMEOUT"])
with open(os.environ["FASTLOAD_SUITE_LIMITS"]) as f:
    _LIMITS = json.load(f)  # a test's time limit, where it is not _TIMEOUT
_DONE = os.environ["FASTLOAD_SUITE_DONE"]


def _note(**event):
    with open(_EVENTS, "a") as f:
        f.write(json.dumps(event) + "\\n")


def pytest_configure(config):
    import torch
    import torch.utils.data

    loader = torch.utils.data.DataLoader
    _note(
        event="loader",
        name=f"{loader.__module__}.{loader.__qualname__}",
        origin=sys.modules[loader.__module__].__file__,
        torch=torch.__version__,
    )


def pytest_collection_modifyitems(config, items):
    if not os.path.exists(_DONE):
        return
    with open(_DONE) as f:
        done = set(f.read().splitlines())
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid in done])
    items[:] = [item for item in items if item.nodeid not in done]


def pytest_collection_finish(session):
    _note(event="collected", count=len(session.items))


def pytest_runtest_logstart(nodeid, location):
    _note(event="start", nodeid=nodeid, time=time.time())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    limit = _LIMITS.get(item.nodeid, _TIMEOUT)

    def alarm(signum, frame):
        raise TimeoutError(f"the test ran past {limit:g} s (torch_dataloader_suite's limit)")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return (yield)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def pytest_runtest_logreport(report):
    if report.skipped and isinstance(report.longrepr, tuple):
        text = str(report.longrepr[2])
    else:
        text = report.longreprtext if report.failed else ""
    _note(
        event="report",
        nodeid=report.nodeid,
        when=report.when,
        outcome=report.outcome,
        duration=report.duration,
        text=text,
    )
'''

EXPECTTEST_STUB = '''\
"""Written by fastload's tools/torch_dataloader_suite.py: expecttest is not installed, and
torch's test helpers import it; only their assertExpectedInline uses it."""

import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, actual, expect, skip=0):
        raise unittest.SkipTest("expecttest is not installed")
'''


@dataclasses.dataclass
class Outcome:
    """One test's result in one run."""

    outcome: str  # passed, failed, error, timeout, killed, skipped
    duration: float = 0.0
    text: str = ""


@dataclasses.dataclass
class Run:
    """One pytest run of the file (possibly started again after a killed test)."""

    mode: str
    outcomes: dict[str, Outcome] = dataclasses.field(default_factory=dict)
    shims: set[str] = dataclasses.field(default_factory=set)
    loader: str = ""
    origin: str = ""  # the file that defines the loader
    torch: str = ""
    collected: int = 0
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        """Passed, failed (timeouts and kills included) and skipped tests."""
        found = [o.outcome for o in self.outcomes.values()]
        return {
            "passed": found.count("passed"),
            "failed": sum(o in FAILING for o in found),
            "skipped": found.count("skipped"),
            "timed out or killed": sum(o in ("timeout", "killed") for o in found),
        }


def note_report(run: Run, event: dict[str, Any]) -> None:
    """Folds one phase's report into the test's outcome: a failed setup or teardown is an
    error, a failed call a failure (a timeout when the alarm ended it), a skip a skip."""
    nodeid, outcome, when = event["nodeid"], event["outcome"], event["when"]
    seen = run.outcomes.get(nodeid)
    if outcome == "failed":
        if when != "call":
            found = "error"
        elif "TimeoutError: the test ran past" in event["text"]:
            found = "timeout"
        else:
            found = "failed"
        if seen is None or seen.outcome not in FAILING:  # the first failure is the cause
            run.outcomes[nodeid] = Outcome(found, event["duration"], event["text"])
    elif outcome == "skipped":
        run.outcomes[nodeid] = Outcome("skipped", event["duration"], event["text"])
    elif when == "call":
        run.outcomes[nodeid] = Outcome("passed", event["duration"])


def short(nodeid: str) -> str:
    """``TestDataLoader::test_error`` for ``test_dataloader.py::TestDataLoader::test_error``."""
    return nodeid.split("::", 1)[-1]


def write_scratch(scratch: Path) -> None:
    """The sitecustomize, the plugin and, where expecttest is missing, its stand-in."""
    (scratch / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (scratch / "_fastload_suite_plugin.py").write_text(PLUGIN)
    (scratch / "pytest.ini").write_text("[pytest]\n")
    if importlib.util.find_spec("expecttest") is None:
        (scratch / "expecttest.py").write_text(EXPECTTEST_STUB)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Ends the pytest process this script started and every process it started."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_file(
    mode: str, test_file: Path, args: argparse.Namespace, scratch: Path, limits: dict[str, float]
) -> Run:
    """Runs the test file under pytest with ``mode`` as ``torch.utils.data.DataLoader``, each
    test within its limit (``--timeout`` where ``limits`` has none), starting pytest again
    after a test that had to be killed."""
    events, done = scratch / f"{mode}.jsonl", scratch / f"{mode}.done"
    (scratch / f"{mode}.limits.json").write_text(json.dumps(limits))
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(scratch), env.get("PYTHONPATH")])),
        PYTHONDONTWRITEBYTECODE="1",
        PYTORCH_PRINT_REPRO_ON_FAILURE="0",  # no "To execute this test, run ..." in messages
        FASTLOAD_SUITE_LOADER=mode,
        FASTLOAD_SUITE_EVENTS=str(events),
        FASTLOAD_SUITE_DONE=str(done),
        FASTLOAD_SUITE_TIMEOUT=str(args.timeout),
        FASTLOAD_SUITE_LIMITS=str(scratch / f"{mode}.limits.json"),
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(test_file),
        "-q",
        "--tb=short",
        "-p",
        "no:cacheprovider",
        "-p",
        "_fastload_suite_plugin",
        "-c",
        str(scratch / "pytest.ini"),
        "--rootdir",
        str(test_file.parent),
        "--confcutdir",
        str(test_file.parent),
        *(["-k", args.k] if args.k else []),
        *args.pytest_args,
    ]
    run, offset, started = Run(mode), 0, time.monotonic()

    def limit(nodeid: str) -> float:
        return limits.get(nodeid, float(args.timeout))

    print(f"\n== {mode}: pytest {test_file.name} (log: {scratch / f'{mode}.log'})", flush=True)
    for _ in range(MAX_RESTARTS + 1):
        with open(scratch / f"{mode}.log", "ab") as log:
            proc = subprocess.Popen(
                command,
                cwd=test_file.parent,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        in_flight: tuple[str, float] | None = None
        killed = False
        last_progress = time.monotonic()
        while True:
            ended = proc.poll() is not None
            offset, in_flight = read_events(run, events, offset, in_flight)
            if ended:
                break
            if in_flight and time.time() - in_flight[1] > limit(in_flight[0]) + GRACE_S:
                killed = True
                kill_group(proc)
                break
            if time.monotonic() - last_progress > PROGRESS_EVERY_S:
                last_progress = time.monotonic()
                counts = run.counts()
                now = f", now {short(in_flight[0])}" if in_flight else ""
                print(
                    f"   {len(run.outcomes)}/{run.collected} done, {counts['failed']} failed{now}",
                    flush=True,
                )
            time.sleep(0.5)
        kill_group(proc)  # workers left behind
        if in_flight is None or (not killed and proc.returncode in (0, 1)):
            break
        nodeid, since = in_flight
        if killed:
            text = f"still running {GRACE_S:g} s past its limit of {limit(nodeid):g} s: killed"
        else:  # pytest itself died: a segfault, the OOM killer
            text = f"pytest died while it ran (exit status {proc.returncode})"
        run.outcomes[nodeid] = Outcome("killed", time.time() - since, text)
        print(f"   KILLED   {short(nodeid)}: {text}", flush=True)
        done.write_text("".join(f"{nodeid}\n" for nodeid in run.outcomes))
    run.seconds = time.monotonic() - started
    if proc.returncode not in (0, 1):
        print(f"   pytest exited {proc.returncode}: see the log", flush=True)
    return run


def read_events(
    run: Run, events: Path, offset: int, in_flight: tuple[str, float] | None
) -> tuple[int, tuple[str, float] | None]:
    """Folds the plugin's new lines into ``run``; returns the new offset and the test under
    way, if any, with the time it started."""
    if not events.exists():
        return offset, in_flight
    with open(events, "rb") as f:
        f.seek(offset)
        data = f.read()
    lines = data.split(b"\n")
    offset += len(data) - len(lines[-1])  # a line still being written waits for next time
    for line in lines[:-1]:
        event = json.loads(line)
        kind = event["event"]
        if kind == "shim":
            run.shims.add(event["name"])
        elif kind == "loader":
            run.loader, run.origin, run.torch = event["name"], event["origin"], event["torch"]
        elif kind == "collected":
            run.collected = max(run.collected, event["count"] + len(run.outcomes))
        elif kind == "start":
            in_flight = (event["nodeid"], event["time"])
        elif kind == "report":
            note_report(run, event)
            if event["when"] == "teardown":
                in_flight = None
                found = run.outcomes.get(event["nodeid"])
                if found is not None and found.outcome in FAILING:
                    print(f"   {found.outcome.upper():8} {short(event['nodeid'])}", flush=True)
    return offset, in_flight


def failure_tail(text: str, test_file: str, lines: int = 8) -> list[str]:
    """The last place in ``test_file`` a failure passed through, the statement there and the
    exception's lines (``E   ...``), from the last exception of a chain; the last lines where
    pytest's traceback has no exception lines."""
    last = re.split(r"\n(?:During handling of the above|The above) exception.*\n", text)[-1]
    rows = last.splitlines()
    raised = [row[1:].strip() for row in rows if row.startswith("E") and row[1:].strip()]
    if not raised:
        return [row[:160] for row in rows[-lines:]]
    at = [i for i, row in enumerate(rows) if row.startswith(f"{test_file}:")]
    where = [rows[at[-1]], rows[at[-1] + 1].strip()] if at and at[-1] + 1 < len(rows) else []
    return [row if len(row) <= 160 else row[:157] + "..." for row in where + raised[:lines]]


def summary(runs: dict[str, Run]) -> list[str]:
    """The tests that fail only with FastLoader."""
    base, fast = runs["DataLoader"].outcomes, runs["FastLoader"].outcomes
    return sorted(
        nodeid
        for nodeid, found in fast.items()
        if found.outcome in FAILING and base.get(nodeid, Outcome("absent")).outcome == "passed"
    )


def report(runs: dict[str, Run], only_fast: list[str]) -> None:
    """Prints each run's counts, then the tests that fail only with FastLoader."""
    print()
    for mode, run in runs.items():
        counts = ", ".join(f"{n} {what}" for what, n in run.counts().items())
        print(f"{mode}: {len(run.outcomes)} tests: {counts} ({run.seconds:.0f} s)")
        print(f"    {run.loader} from {run.origin}, torch {run.torch}")
    shims = sorted(set().union(*(run.shims for run in runs.values())))
    if shims:
        print(f"names the installed torch lacks, filled in at run time: {', '.join(shims)}")
    base, fast = runs["DataLoader"].outcomes, runs["FastLoader"].outcomes
    fails_with = {n for n in base if base[n].outcome in FAILING}
    both = sorted(n for n in fast if fast[n].outcome in FAILING and n in fails_with)
    fixed = sorted(n for n in fast if fast[n].outcome == "passed" and n in fails_with)
    if both:
        print(f"failing with both ({len(both)}): {', '.join(short(n) for n in both)}")
    if fixed:
        print(f"failing with DataLoader only ({len(fixed)}): {', '.join(short(n) for n in fixed)}")
    print(f"\nfailing with FastLoader only: {len(only_fast)}")
    for nodeid in only_fast:
        found = fast[nodeid]
        print(f"- {short(nodeid)} [{found.outcome}, {found.duration:.1f} s]")
        for row in failure_tail(found.text, nodeid.split("::")[0]):
            print(f"    {row}")


def limits(runs: dict[str, Run], timeout: float) -> dict[str, float]:
    """Each test's time limit in the FastLoader run, from its time in the DataLoader run (none
    before that run)."""
    if "DataLoader" not in runs:
        return {}
    return {
        nodeid: min(timeout, max(MIN_LIMIT_S, SLOWER_BY * found.duration))
        for nodeid, found in runs["DataLoader"].outcomes.items()
        if found.outcome == "passed"
    }


def load_baseline(path: Path) -> Run:
    """The DataLoader run of an earlier ``--json``."""
    saved = json.loads(path.read_text())["runs"]["DataLoader"]
    run = Run("DataLoader", loader=saved["loader"], origin=saved["origin"], torch=saved["torch"])
    run.outcomes = {nodeid: Outcome(**found) for nodeid, found in saved["outcomes"].items()}
    run.shims, run.seconds = set(saved["shims"]), saved["seconds"]
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("test_file", type=Path, help="PyTorch's test/test_dataloader.py")
    parser.add_argument("pytest_args", nargs="*", help="more pytest options, after --")
    parser.add_argument("-k", help="pytest's -k: which tests to run")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds a test may run, at most"
    )
    parser.add_argument("--json", type=Path, help="write both runs' outcomes here")
    parser.add_argument("--baseline", type=Path, help="the DataLoader run of an earlier --json")
    parser.add_argument("--keep", type=Path, help="keep the logs and scratch files here")
    args = parser.parse_args(argv)
    test_file = args.test_file.resolve()
    if not test_file.is_file():
        parser.error(f"no file {test_file}")
    scratch = Path(tempfile.mkdtemp(prefix="torch_suite_")) if args.keep is None else args.keep
    scratch.mkdir(parents=True, exist_ok=True)
    write_scratch(scratch)
    try:
        runs: dict[str, Run] = {}
        if args.baseline is not None:
            runs["DataLoader"] = load_baseline(args.baseline)
        for mode in MODES:
            if mode not in runs:
                runs[mode] = run_file(mode, test_file, args, scratch, limits(runs, args.timeout))
            loader = runs[mode].loader or "never seen"
            if not loader.endswith(f".{mode}") or not runs[mode].outcomes:
                print(
                    f"the {mode} run ran {len(runs[mode].outcomes)} tests with {loader} as "
                    f"torch.utils.data.DataLoader: see {scratch}"
                )
                args.keep = scratch
                return 2
        only_fast = summary(runs)
        report(runs, only_fast)
        if args.json is not None:
            saved = {
                mode: {**dataclasses.asdict(run), "shims": sorted(run.shims)}
                for mode, run in runs.items()
            }
            args.json.write_text(
                json.dumps({"runs": saved, "fastloader_only": only_fast}, indent=1) + "\n"
            )
        return 1 if only_fast else 0
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
