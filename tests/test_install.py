"""What `make demo` and `make test` do on a fresh machine, read from the Makefile."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def install_commands(target: str, *variables: str) -> list[str]:
    """The commands `make` would run to install ``target``'s packages (`-n`: none is run)."""
    out = subprocess.run(
        ["make", "-n", "-W", "pyproject.toml", target, *variables],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [line for line in out.splitlines() if "pip install" in line]


def test_the_first_install_shows_pips_progress():
    (install,) = install_commands(".venv/.dev-installed")
    assert " -q" not in install and "--progress-bar on" in install


def test_the_demo_installs_what_it_needs_and_the_tests_the_toolchain():
    (demo,) = install_commands(".venv/.demo-installed")
    assert demo.endswith("-c constraints.txt -e '.[demo]'")
    (tests,) = install_commands(".venv/.dev-installed")
    assert tests.endswith("-c constraints.txt -e '.[dev,docs]'")
    targets = subprocess.run(["make", "-n", "-p"], cwd=ROOT, capture_output=True, text=True)
    rules = dict(
        line.split(":", 1) for line in targets.stdout.splitlines()
        if line.startswith(("demo:", "test:", "docs:", "lint:", "bench:"))
    )  # fmt: skip
    assert rules["demo"].split() == [".venv/.demo-installed"]
    assert all(rules[name].split() == [".venv/.dev-installed"] for name in ("test", "lint"))


def test_the_docs_install_the_docs_toolchain_alone_or_reuse_the_tests_venv():
    import shlex
    import sys
    import tomllib

    out = subprocess.run(["make", "-n", "-W", "pyproject.toml", ".venv/.docs-installed"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout  # fmt: skip
    listing, install = [line for line in out.splitlines() if line.startswith(".venv/bin/python")]
    assert install.endswith("pip install --progress-bar on -c constraints.txt -r "
                            ".venv/docs-requirements.txt")  # fmt: skip
    program = shlex.split(listing.split(">")[0])[2]  # what writes the requirements
    listed = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.splitlines()  # fmt: skip
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]  # fmt: skip
    assert listed == extras["docs"]  # mkdocs and its plugins: not fastload, torch or the tests
    targets = subprocess.run(["make", "-n", "-p"], cwd=ROOT, capture_output=True, text=True)
    rules = dict(
        line.split(":", 1) for line in targets.stdout.splitlines()
        if line.startswith(("docs:", "docs-serve:"))
    )  # fmt: skip
    assert rules["docs"].split() == rules["docs-serve"].split() == [".venv/.docs-installed"]
    # `make test` marks the docs' install done too: CI's `make docs` after it installs nothing
    dev = subprocess.run(["make", "-n", "-W", "pyproject.toml", ".venv/.dev-installed"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout  # fmt: skip
    (touch,) = [line for line in dev.splitlines() if line.startswith("touch ")]
    assert ".venv/.docs-installed" in touch.split() and ".venv/.demo-installed" in touch.split()


def test_torch_index_installs_torch_from_it_first_within_the_pins():
    torch_first, package = install_commands(
        ".venv/.dev-installed", "TORCH_INDEX=https://download.pytorch.org/whl/cpu"
    )
    assert "--index-url https://download.pytorch.org/whl/cpu torch torchvision" in torch_first
    assert "-c constraints.txt" in torch_first and "-e '.[dev,docs]'" in package


def install_hints() -> list[tuple[str, str]]:
    """Every ``pip install`` of fastload's extras that the package, docs, README and
    examples tell a user to run, with the file it is in."""
    import re

    files = [ROOT / "README.md", ROOT / "Makefile"]
    for folder, pattern in [("src", "*.py"), ("docs", "*.md"), ("examples", "*.py"),
                            ("benchmarks", "*.py"), ("tests", "*.py")]:  # fmt: skip
        files += sorted((ROOT / folder).rglob(pattern))
    hint = re.compile(r"pip install\s+['\"]?([\w.-]*)\[([\w,-]+)\]")
    return [
        (f"{path.relative_to(ROOT)}: pip install {target}[{extras}]", extras)
        for path in files
        for target, extras in hint.findall(path.read_text(errors="replace"))
        if path != Path(__file__) and target in (".", "fastload")  # not another package's
    ] + [
        (f"{path.relative_to(ROOT)}: pip install fastload", "")
        for path in files
        if path != Path(__file__) and re.search(r"pip install\s+fastload\b", path.read_text())
    ]


def test_every_install_hint_installs_from_the_clone_an_extra_that_exists():
    """`pip install 'fastload[x]'` installs the unrelated `fastload` on PyPI (the README
    warns of it): a hint says `pip install '.[x]'`, with an extra pyproject.toml has."""
    import tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"])  # fmt: skip
    hints = install_hints()
    assert len(hints) >= 10  # the search finds the hints at all
    wrong = [where for where, _ in hints if ": pip install .[" not in where]
    assert wrong == []
    unknown = [where for where, named in hints if not set(named.split(",")) <= extras]
    assert unknown == []
