"""benchmarks/gpu_decode.py: the CPU each thread used, read from the passes."""

from __future__ import annotations

from benchmarks.gpu_decode import by_thread


def test_threads_are_the_medians_over_passes_pools_together_most_first():
    passes = [
        {"threads": {"MainThread": 0.5, "opencv-decode_0": 0.2, "opencv-decode_1": 0.2,
                     "python (native)": 0.1, "cuda-EvtHandlr (native)": 0.01}},
        {"threads": {"MainThread": 0.3, "opencv-decode_0": 0.6, "python (native)": 0.3}},
        {"threads": {"MainThread": 0.4, "opencv-decode_0": 0.5, "python (native)": 0.2}},
    ]  # fmt: skip
    # opencv-decode: 0.4, 0.6, 0.5 a pass; MainThread 0.4; python (native) 0.2
    assert by_thread(passes, 1000) == "opencv-decode 0.50, MainThread 0.40, python (native) 0.20"
    assert by_thread(passes, 1000, shown=1) == "opencv-decode 0.50"


def test_no_thread_read_is_a_dash():
    assert by_thread([{"seconds": 1.0}], 100) == "-"
    assert by_thread([{"threads": {"MainThread": 0.0}}], 100) == "-"
