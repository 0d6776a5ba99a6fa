"""The site's build hooks (mkdocs_hooks.py): what they change in a page's Markdown."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hooks():
    pytest.importorskip("mkdocs", reason="the docs need the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("griffe", reason="the docs need the docs extra: pip install -e '.[docs]'")
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def build(hooks):
    """A page at docs/guides/page.md of the repository, its config and its files."""
    from mkdocs.config import load_config
    from mkdocs.structure.files import Files

    config = load_config(str(ROOT / "mkdocs.yml"))
    page = SimpleNamespace(file=SimpleNamespace(src_uri="guides/page.md"))
    return config, page, Files([])


def test_a_link_outside_docs_points_at_a_copy_in_the_site(hooks, build):
    config, page, files = build
    markdown = (
        "![plot](../../benchmarks/results/cpu/lmdb_vs_files.png)\n"
        '[script](../../benchmarks/lmdb_vs_files.py#L1 "title")\n'
        "[page](loader.md#top) [web](https://example.com/x.png) [missing](../../nothing.png)\n"
    )
    out = hooks.on_page_markdown(markdown, page=page, config=config, files=files)
    assert out == (
        "![plot](../benchmarks/results/cpu/lmdb_vs_files.png)\n"
        '[script](../benchmarks/lmdb_vs_files.py#L1 "title")\n'
        "[page](loader.md#top) [web](https://example.com/x.png) [missing](../../nothing.png)\n"
    )
    copies = {file.src_uri: file.abs_src_path for file in files}
    plot = "benchmarks/results/cpu/lmdb_vs_files.png"
    assert copies == {
        plot: str(ROOT / plot),
        "benchmarks/lmdb_vs_files.py": str(ROOT / "benchmarks/lmdb_vs_files.py"),
    }


def test_code_blocks_are_left_alone_but_lose_the_tests_options(hooks, build):
    config, page, files = build
    markdown = (
        "```python run:torchrun\n"
        'x = "![plot](../../benchmarks/results/cpu/lmdb_vs_files.png)"\n'
        "```\n"
        "````markdown\n```python run:torchrun\n```\n````\n"
    )
    out = hooks.on_page_markdown(markdown, page=page, config=config, files=files)
    assert out == (
        "```python\n"
        'x = "![plot](../../benchmarks/results/cpu/lmdb_vs_files.png)"\n'
        "```\n"
        "````markdown\n```python run:torchrun\n```\n````\n"
    )
    assert not list(files)
