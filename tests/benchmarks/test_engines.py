"""benchmarks/lib/engines.py: the JPEG engines' use read from nvidia-smi's samples, a
missing or unhelpful nvidia-smi said in words, rounds combined by their samples."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from benchmarks.end_to_end import engine_use
from benchmarks.lib.engines import EngineSampler, combined, describe, parse_samples, statistics


def fake_nvidia_smi(folder: Path, output: str) -> None:
    """An nvidia-smi that prints ``output`` and ends: however late a busy machine runs it,
    its samples are all there when the sampler stops it."""
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '{output}'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_samples_are_read_and_summed_up():
    samples = parse_samples("31, 0\n42, 5\n 11 , 0\n")
    assert samples == [(31.0, 0.0), (42.0, 5.0), (11.0, 0.0)]
    stats = statistics(samples)
    assert stats == {"jpeg_mean": 28.0, "jpeg_peak": 42.0, "video_peak": 5.0, "samples": 3}
    assert describe(stats) == "JPEG engines mean 28%, peak 42%; video decoder peak 5%"
    assert describe(None) == "unknown (no sample)"


def test_a_line_that_is_not_a_sample_is_named():
    with pytest.raises(ValueError, match=r"^nvidia-smi: Field \"utilization.jpeg\" is not"):
        parse_samples('31, 0\nField "utilization.jpeg" is not a valid field to query.\n')


def test_rounds_combine_weighted_by_their_samples():
    first = {"jpeg_mean": 10.0, "jpeg_peak": 20.0, "video_peak": 0.0, "samples": 10}
    second = {"jpeg_mean": 40.0, "jpeg_peak": 55.0, "video_peak": 3.0, "samples": 30}
    assert combined([first, second]) == {
        "jpeg_mean": 32.5, "jpeg_peak": 55.0, "video_peak": 3.0, "samples": 40,
    }  # fmt: skip
    assert engine_use([first, second]) == "JPEG engines mean 32%, peak 55%; video decoder peak 3%"
    assert engine_use(["unknown (nvidia-smi: not found)"]) == "unknown (nvidia-smi: not found)"


def test_the_sampler_reads_nvidia_smi_while_the_block_runs(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, "12, 0\\n30, 0\\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with EngineSampler() as engines:
        pass
    assert engines.samples == [(12.0, 0.0), (30.0, 0.0)] and engines.error is None
    assert engines.summary() == "JPEG engines mean 21%, peak 30%; video decoder peak 0%"


def test_without_nvidia_smi_the_sampler_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a folder without it
    with EngineSampler() as engines:
        pass
    assert engines.stats() == engines.summary()
    assert engines.summary().startswith("unknown (nvidia-smi: [Errno 2] No such file")
