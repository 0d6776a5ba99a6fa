"""The guides' whole scripts, run as a reader runs them: pasted into a file of their own and
started with ``python file.py`` in an empty folder. (Every block also runs in the
Markdown collector, where ``__name__`` is not ``"__main__"``: the part of a script behind
that guard, its training, runs only here.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
#: Guide -> the modules its scripts need (a guide whose framework is missing is skipped).
GUIDES = {"docs/guides/frameworks.md": ("lightning", "accelerate")}


def scripts(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL)


@pytest.mark.parametrize(
    ("page", "index"),
    [(page, index) for page in GUIDES for index in range(len(scripts(ROOT / page)))],
)
def test_a_guides_script_runs_from_a_file_of_its_own(page, index, tmp_path):
    for module in GUIDES[page]:
        pytest.importorskip(module, reason=f"{page} needs {module}")
    script = tmp_path / "train.py"
    script.write_text(scripts(ROOT / page)[index])
    environment = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
