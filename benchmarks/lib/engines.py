"""The GPU's JPEG engines (NVJPG) and video decoder at work: nvidia-smi sampling their
utilisation every 100 ms while a block of code runs.

    with EngineSampler() as engines:
        decode_a_lot()
    engines.summary()  # "JPEG engines mean 31%, peak 42%; video decoder peak 0%"
    engines.stats()    # the same as numbers, for runs to be combined
"""

from __future__ import annotations

import subprocess
import time
from types import TracebackType

QUERY = "utilization.jpeg,utilization.decoder"


def parse_samples(output: str) -> list[tuple[float, float]]:
    """nvidia-smi's CSV lines (``--query-gpu=QUERY --format=csv,noheader,nounits``) as
    (JPEG, video decoder) percentages; a ValueError naming the first line that is not."""
    samples = []
    for line in output.splitlines():
        fields = [field.strip() for field in line.split(",")]
        try:
            jpeg, video = (float(field) for field in fields)
        except ValueError:
            raise ValueError(f"nvidia-smi: {line.strip()[:120]}") from None
        samples.append((jpeg, video))
    return samples


def statistics(samples: list[tuple[float, float]]) -> dict[str, float]:
    """The JPEG engines' mean and peak, the video decoder's peak, and how many samples."""
    jpeg = [sample[0] for sample in samples]
    return {
        "jpeg_mean": sum(jpeg) / len(jpeg),
        "jpeg_peak": max(jpeg),
        "video_peak": max(sample[1] for sample in samples),
        "samples": len(samples),
    }


def combined(parts: list[dict[str, float]]) -> dict[str, float]:
    """:func:`statistics` of several runs as one: means weighted by their samples."""
    count = sum(part["samples"] for part in parts)
    return {
        "jpeg_mean": sum(part["jpeg_mean"] * part["samples"] for part in parts) / count,
        "jpeg_peak": max(part["jpeg_peak"] for part in parts),
        "video_peak": max(part["video_peak"] for part in parts),
        "samples": count,
    }


def describe(stats: dict[str, float] | None) -> str:
    """:func:`statistics` in words."""
    if not stats:
        return "unknown (no sample)"
    return (
        f"JPEG engines mean {stats['jpeg_mean']:.0f}%, peak {stats['jpeg_peak']:.0f}%; "
        f"video decoder peak {stats['video_peak']:.0f}%"
    )


class EngineSampler:
    """nvidia-smi sampling the engines for as long as the ``with`` block runs:
    ``samples`` afterwards, or ``error`` (one line) where they could not be read."""

    def __init__(self, period_ms: int = 100) -> None:
        self.period_ms = period_ms
        self.samples: list[tuple[float, float]] = []
        self.error: str | None = None
        self._monitor: subprocess.Popen[str] | None = None

    def __enter__(self) -> EngineSampler:
        try:
            self._monitor = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                 "-lms", str(self.period_ms)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
        except OSError as error:
            self.error = f"nvidia-smi: {error}"
            return self
        time.sleep(0.3)  # its first sample comes before the block's work
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._monitor is None:
            return
        self._monitor.terminate()
        output = self._monitor.communicate(timeout=30)[0]
        try:
            self.samples = parse_samples(output)
        except ValueError as error:
            self.error = str(error)

    def stats(self) -> dict[str, float] | str:
        """:func:`statistics` of the samples, or why there are none."""
        if self.error:
            return f"unknown ({self.error})"
        return statistics(self.samples) if self.samples else "unknown (no sample)"

    def summary(self) -> str:
        stats = self.stats()
        return stats if isinstance(stats, str) else describe(stats)
