"""Is data loading what slows training, and by how much? Measure it, then say what to do.

The method of the articles in shared/seeds (002, 004): time the training step on one
cached batch (the compute-bound time), time the loader alone, and compare with the real
loop's per-iteration wait for data. ``waits`` (``fastload.timed``), ``procstats`` (/proc
sampling), ``rules`` (the facts and one rule per advice), ``reliability`` (whether the
measurements can carry the ratios), ``report`` (``fastload.diagnose``).
"""

from fastload.tools.diagnostics.report import DiagnoseReport, classifier_step, diagnose
from fastload.tools.diagnostics.waits import TimedLoader, WaitSummary, timed

__all__ = ["DiagnoseReport", "TimedLoader", "WaitSummary", "classifier_step", "diagnose", "timed"]
