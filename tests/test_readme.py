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


def bash_lines() -> list[str]:
    """Every command of the README's and the docs' bash blocks, comments dropped."""
    fence = re.compile(r"```bash\n(.*?)```", re.DOTALL)
    blocks = [block for page in PAGES for block in fence.findall(page.read_text())]
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
