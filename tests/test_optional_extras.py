"""A missing optional extra skips the tests that need it, with its reason; it never
aborts the suite (the GPU machine's image has no pycocotools, albumentations or Kornia)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The extras (pyproject's optional dependencies) and the peers the benchmarks compare with.
OPTIONAL = ("pycocotools", "albumentations", "timm", "kornia", "skimage", "torchcodec")


def pytest_without_extras(*arguments: str) -> subprocess.CompletedProcess[str]:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT / "tests" / "without_extras"), environment.get("PYTHONPATH")])
    )
    environment["FASTLOAD_WITHOUT"] = ",".join(OPTIONAL)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", *arguments],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_the_blocker_makes_an_extra_look_uninstalled():
    completed = pytest_without_extras("--collect-only", "tests/test_system.py")
    assert completed.returncode == 0, completed.stdout[-2000:]
    probe = subprocess.run(
        [sys.executable, "-c", "import albumentations"],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "without_extras"),
                 FASTLOAD_WITHOUT="albumentations"),
        capture_output=True, text=True,
    )  # fmt: skip
    assert probe.returncode == 1
    assert "No module named 'albumentations'" in probe.stderr


@pytest.mark.slow
def test_the_whole_suite_collects_without_any_optional_extra():
    completed = pytest_without_extras("--collect-only")
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert "error" not in completed.stdout.lower().splitlines()[-1]


@pytest.mark.slow
def test_tests_needing_an_extra_are_skipped_with_its_name():
    completed = pytest_without_extras(
        "tests/test_albumentations.py", "tests/test_transforms.py", "tests/lmdb/test_annotations.py"
    )
    assert completed.returncode == 0, completed.stdout[-3000:]
    skips = [line for line in completed.stdout.splitlines() if line.startswith("SKIPPED")]
    assert any("albumentations" in line for line in skips), skips
    assert any("pycocotools" in line for line in skips), skips
    assert " passed" in completed.stdout.splitlines()[-1]  # the rest of the files still ran
