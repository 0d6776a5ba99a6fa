"""What `make demo` and `make test` do on a fresh machine, read from the Makefile."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def install_commands(*variables: str) -> list[str]:
    """The commands `make` would run to create the venv (`-n`: none is run)."""
    out = subprocess.run(
        ["make", "-n", "-W", "pyproject.toml", ".venv/bin/fastload", *variables],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [line for line in out.splitlines() if "pip install" in line]


def test_the_first_install_shows_pips_progress():
    (install,) = install_commands()
    assert " -q" not in install and "--progress-bar on" in install


def test_torch_index_installs_torch_from_it_first_within_the_pins():
    torch_first, package = install_commands("TORCH_INDEX=https://download.pytorch.org/whl/cpu")
    assert "--index-url https://download.pytorch.org/whl/cpu torch torchvision" in torch_first
    assert "-c constraints.txt" in torch_first and "-e '.[dev,docs]'" in package
