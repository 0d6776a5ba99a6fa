"""Every Python block of the README and docs/, run as a reader runs it: pasted into a file
of its own and started with ``python`` in a fresh process, nothing injected.

A page's blocks run in order, in one fresh folder per page: a block may read what a block
shown before it on the page wrote (say, the small image folder the page's first block
makes), never anything else. A fence that says ``run:torchrun`` is started as the page
says to start it, ``torchrun --nproc_per_node 1``. A block that needs an optional extra
which is not installed is skipped, with the extra's name (``tests/test_optional_extras.py``
runs the suite so).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

#: The packages of the optional extras and of the peers some pages show beside fastload.
OPTIONAL = {
    "pycocotools", "albumentations", "timm", "kornia", "skimage", "torchcodec", "nvidia",
    "boto3", "swift", "ray", "lightning", "accelerate", "webdataset", "datasets",
}  # fmt: skip
MISSING = re.compile(r"No module named '([\w.]+)'")
HINT = re.compile(r"pip install '\.\[([\w,-]+)\]'")


def python_blocks(text: str) -> Iterator[tuple[int, str, str]]:
    """``(line, options, code)`` of each ```` ```python ```` block, the blocks shown
    inside a longer fence (an example of Markdown) left out."""
    lines = text.splitlines()
    outer: str | None = None  # the fence of a block that shows Markdown
    index = 0
    while index < len(lines):
        line = lines[index]
        if outer is not None:
            outer = None if line.strip() == outer else outer
        elif line.startswith("````"):
            outer = line[: len(line) - len(line.lstrip("`"))]
        elif line.startswith("```python"):
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            yield index + 1, line[len("```python") :].strip(), "\n".join(lines[index + 1 : end])
            index = end
        index += 1


class MarkdownPage(pytest.File):
    """A page of the docs: its Python blocks, in order."""

    folder: Path | None = None

    def collect(self) -> Iterator[pytest.Item]:
        for number, (line, options, code) in enumerate(python_blocks(self.path.read_text())):
            yield CodeBlock.from_parent(
                self, name=f"block {number + 1} (line {line})", line=line,
                options=options.split(), code=code,
            )  # fmt: skip

    def working_folder(self) -> Path:
        if self.folder is None:
            factory = self.config._tmp_path_factory  # type: ignore[attr-defined]
            self.folder = factory.mktemp(self.path.stem)
        return self.folder


class CodeBlock(pytest.Item):
    def __init__(self, *, line: int, options: list[str], code: str, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.line, self.options, self.code = line, options, code

    def runtest(self) -> None:
        page = self.parent
        assert isinstance(page, MarkdownPage)
        folder = page.working_folder()
        script = folder / f"block_{self.line}.py"
        script.write_text(self.code + "\n")
        command = [sys.executable, script.name]
        if "run:torchrun" in self.options:
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                       "--nproc_per_node", "1", script.name]  # fmt: skip
        environment = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        done = subprocess.run(command, cwd=folder, env=environment, capture_output=True,
                              text=True, timeout=600)  # fmt: skip
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [""])[-1]
            missing, hint = MISSING.search(last), HINT.search(last)
            if missing and missing.group(1).split(".")[0] in OPTIONAL:
                pytest.skip(f"{self.path.name}:{self.line} needs {missing.group(1)}")
            if hint:
                pytest.skip(f"{self.path.name}:{self.line} needs the {hint.group(1)} extra")
            raise BlockFailed(done.stderr[-4000:] or done.stdout[-4000:])

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str:
        if isinstance(excinfo.value, BlockFailed):
            return f"{self.path.name}, the block at line {self.line}, failed:\n{excinfo.value}"
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.line - 1, f"{self.path.name}: {self.name}"


class BlockFailed(Exception):
    """A block's process ended with an error: its output is the message."""
