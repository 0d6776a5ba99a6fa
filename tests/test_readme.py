"""The README's and the docs' code is what a newcomer copies first: it must run as
written (their Python blocks run as tests too, each as a file of its own: the root
conftest.py and tests/docs_blocks.py)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
CLI_PAGE = ROOT / "docs" / "guides" / "cli.md"


def bash_lines(pages: list[Path] = PAGES) -> list[str]:
    """Every command of the ``pages``' bash blocks (the README's and the docs'), in order,
    comments dropped."""
    fence = re.compile(r"```bash\n(.*?)```", re.DOTALL)
    blocks = [block for page in pages for block in fence.findall(page.read_text())]
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


@pytest.mark.parametrize(
    "command", [line for line in bash_lines() if line.startswith("fastload ")], ids=str
)
def test_every_fastload_command_in_the_pages_parses(command, tmp_path, monkeypatch):
    from fastload.tools.cli import build_parser

    monkeypatch.chdir(tmp_path)  # where --plot files would go
    build_parser().parse_args(shlex.split(command)[1:])  # exits 2 on an unknown option


def test_every_script_and_make_target_in_the_pages_exists():
    root = ROOT
    targets = set(re.findall(r"^([\w-]+):", (root / "Makefile").read_text(), re.MULTILINE))
    for line in bash_lines():
        words = shlex.split(line)
        if words[0] == "make":
            assert words[1] in targets, line
        if words[0] == "python":
            assert (root / words[1]).is_file(), line


def test_the_command_line_table_names_every_option():
    from fastload.tools.cli import build_parser

    table = CLI_PAGE.read_text().split("## Commands", 1)[1].split("\n\n", 2)[1]
    rows = {row.split("`")[1].split()[1]: row for row in table.splitlines()[2:]}
    commands = build_parser()._subparsers._group_actions[0].choices
    assert set(rows) == set(commands) and len(set(rows)) == 7
    for name, parser in commands.items():
        for action in parser._actions:
            flags = [flag for flag in action.option_strings if flag.startswith("--")]
            if flags and flags[0] != "--help":
                assert flags[0] in rows[name], f"`fastload {name}` row lacks {flags[0]}"


def after_make_demo() -> list[str]:
    """The README's commands a newcomer runs after `make demo`, in the order written."""
    lines = bash_lines([README])
    return lines[lines.index("make demo") + 1 :]


def test_the_readme_reaches_the_venvs_commands_after_make_demo():
    # `make demo` installs into .venv, whose bin/ is not on PATH: the README activates it
    # before the first command that is .venv's (or names it .venv/bin/...)
    commands = after_make_demo()
    programs = [shlex.split(line)[0] for line in commands]
    first = next(index for index, program in enumerate(programs)
                 if program in ("fastload", "python", "torchrun"))  # fmt: skip
    assert "source .venv/bin/activate" in commands[:first], commands
    assert "fastload" in programs  # the check above has a command to check
    assert set(programs) <= {"make", "source", "fastload", "python", "torchrun"}, programs


def installed_by(requirements: list[str]) -> set[str]:
    """The distributions installing ``requirements`` brings, as far as they are installed
    here: each, the requirements of each, and so on (canonical names)."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(Requirement(text), frozenset({""})) for text in requirements]
    while todo:
        requirement, extras = todo.pop()
        name, asked = canonicalize_name(requirement.name), frozenset(requirement.extras)
        marker = requirement.marker
        if (name, asked) in seen or (
            marker and not any(marker.evaluate({"extra": extra}) for extra in extras)
        ):
            continue
        seen.add((name, asked))
        try:
            wanted = distribution(name).requires or []
        except PackageNotFoundError:  # a dependency of another platform
            continue
        found.add(name)
        todo += [(Requirement(text), asked | {""}) for text in wanted]
    return found


def not_in_the_demo_install() -> set[str]:
    """The top-level modules installed here that `make demo` does not install: those of
    no distribution that fastload's dependencies and its ``demo`` extra bring."""
    import tomllib
    from importlib.metadata import packages_distributions

    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    demo = installed_by(project["dependencies"] + project["optional-dependencies"]["demo"])
    demo.add("fastload")
    return {
        module for module, names in packages_distributions().items()
        if module.isidentifier() and not {canonicalize_name(name) for name in names} & demo
    }  # fmt: skip


#: Appended to a README command to measure little (the last value of an option wins):
#: what it imports and needs is the same.
SMALLER = {"diagnose": "--batches 2 --warmup 0 --seconds 5 --workers 0", "bench": "--batches 1"}


@pytest.mark.slow
def test_the_readmes_commands_after_make_demo_need_only_what_make_demo_installs(tmp_path):
    """Each `fastload` command the README shows after `make demo` runs with only what
    `make demo` installs (every other installed module made to look missing), in a
    folder holding the `data/train` the README's script makes."""
    import os
    import subprocess
    import sys

    from fastload.testing.synthetic import make_image_folder

    make_image_folder(tmp_path / "data" / "train", num_classes=2, images_per_class=32,
                      size=(64, 48))  # fmt: skip
    blocked = not_in_the_demo_install()
    assert {"pytest", "timm", "ray"} <= blocked and "albumentations" not in blocked
    environment = dict(os.environ, FASTLOAD_WITHOUT=",".join(sorted(blocked)),
                       PYTHONPATH=str(ROOT / "tests" / "without_extras"))  # fmt: skip
    fastload = Path(sys.executable).with_name("fastload")  # the venv's, as the README runs it
    commands = [line for line in after_make_demo() if line.startswith("fastload ")]
    assert commands
    for command in commands:
        argv = shlex.split(command)[1:]
        argv += SMALLER.get(argv[0], "").split()
        ran = subprocess.run([str(fastload), *argv], cwd=tmp_path, env=environment,
                             capture_output=True, text=True, timeout=600)  # fmt: skip
        assert ran.returncode == 0, f"{command}: {ran.stderr[-2000:]}"


@pytest.mark.parametrize("page", [README, ROOT / "docs" / "index.md"], ids=lambda p: p.name)
def test_the_install_section_names_every_extra(page):
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]  # fmt: skip
    section = page.read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    named = {name for group in re.findall(r"\.\[([\w,-]+)\]", section)
             for name in group.split(",")} | set(re.findall(r"`([\w-]+)`", section))  # fmt: skip
    assert set(extras) - named == set()


def test_the_migration_pages_title_names_every_section():
    text = (ROOT / "docs" / "migration.md").read_text()
    title = text.splitlines()[0]
    sources = re.findall(r"^## From (.+)$", text, re.MULTILINE)
    names = [source.strip("`").rsplit(".", 1)[-1].removeprefix("NVIDIA ") for source in sources]
    assert len(names) >= 5 and [name for name in names if name not in title] == []


@pytest.mark.parametrize("page", [README, ROOT / "docs" / "index.md"], ids=lambda p: p.name)
def test_the_command_line_list_names_every_command(page):
    from fastload.tools.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    (listing,) = [part for part in page.read_text().split("\n\n") if "`fastload demo`" in part]
    assert [name for name in commands if not re.search(f"`(fastload )?{name}`", listing)] == []
