"""The README's code is what a newcomer copies first: it must run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from common_utils import run_script

README = Path(__file__).resolve().parent.parent / "README.md"


def python_block(after_heading: str) -> str:
    text = README.read_text()
    section = text[text.index(after_heading) :]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


@pytest.mark.slow
def test_the_before_and_after_script_runs_verbatim(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text(python_block("## Before and after"))
    monkeypatch.chdir(tmp_path)
    run_script(script)  # as `python train.py` runs it, in this process
    assert len(list((tmp_path / "data" / "train").rglob("*.jpg"))) == 40
