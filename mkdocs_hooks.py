"""The docs site's build hooks (mkdocs.yml ``hooks:``) and a Griffe extension for the API
reference (mkdocstrings ``extensions:``).

- A page's link to a file outside docs/ (a benchmark plot or result in
  benchmarks/results/, a script) points at the file where it is in the repository, so the
  page reads the same on GitHub. The build copies such a file into the site at the same
  path and points the link at the copy: nothing is duplicated in git, and a link to a file
  that does not exist still fails the strict build.
- A fence's test options (```` ```python run:torchrun ````, read by the tests' Markdown
  collector, ``tests/docs_blocks.py``) are dropped from the page the site renders: the
  highlighter takes only a language and its own options there, and would render the
  block as prose.
- docs/benchmarks.md must match benchmarks/results/ (benchmarks/docs_page.py writes it):
  a page out of date is a warning, so an error in ``mkdocs build --strict``.
- ``DocstringConventions``, for the reference: the docstrings' Sphinx roles
  (``:class:`X```, ``:func:`~a.b```) become links where the reference documents the
  object, and code where it does not; an ``Example:`` section (the project's name for it) is read as
  Google style's ``Examples:``, so its doctest renders as code.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import posixpath
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import griffe
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.fastload")

#: An inline link or image: ``[text](target "title")``, ``![alt](<target>)``.
LINK = re.compile(r"(?P<head>!?\[[^\]\n]*\]\()(?P<target><[^>\n]+>|[^)\s]+)(?P<tail>[^)\n]*\))")
#: A reference definition: ``[label]: target "title"``.
DEFINITION = re.compile(r"^(?P<head> {0,3}\[[^\]\n]+\]:[ \t]*)(?P<target>\S+)", re.MULTILINE)
FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})")
#: A test option on a fence's info line: ``run:HOW``.
FENCE_OPTION = re.compile(r"[ \t]+run:\S+")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def repository(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Warn when docs/benchmarks.md is not what benchmarks/docs_page.py writes."""
    script = repository(config) / "benchmarks" / "docs_page.py"
    spec = importlib.util.spec_from_file_location("docs_page", script)
    assert spec is not None and spec.loader is not None
    docs_page = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = docs_page  # its dataclass looks its module up there
    spec.loader.exec_module(docs_page)
    page = Path(config.docs_dir) / "benchmarks.md"
    results = repository(config) / "benchmarks" / "results"
    if not page.exists() or page.read_text() != docs_page.render(results, page):
        log.warning(
            "docs/benchmarks.md does not match benchmarks/results/: "
            "run `python benchmarks/docs_page.py` (make docs does)"
        )
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Point links to files outside docs/ at copies of them in the site, and drop the
    tests' options from fences."""

    def relink(match: re.Match[str]) -> str:
        target = match["target"]
        bracketed = target.startswith("<")
        new = outside_docs(target.strip("<>"), page, config, files)
        if new is None:
            return match[0]
        return match["head"] + (f"<{new}>" if bracketed else new) + match["tail"]

    def rewrite(text: str) -> str:
        return DEFINITION.sub(relink, LINK.sub(relink, text))

    return outside_fences(markdown, rewrite)


def outside_fences(markdown: str, rewrite: Any) -> str:
    """``rewrite`` applied to the Markdown outside fenced code blocks, and the tests'
    options dropped from the fences' info lines."""
    out: list[str] = []
    prose: list[str] = []
    fence: str | None = None
    for line in markdown.splitlines(keepends=True):
        opening = FENCE.match(line)
        if fence is None and opening:
            out.append(rewrite("".join(prose)))
            prose, fence = [], opening[1]
            out.append(FENCE_OPTION.sub("", line))
        elif fence is not None:
            out.append(line)
            stripped = line.strip()
            if stripped.startswith(fence) and stripped.strip(fence[0]) == "":
                fence = None
        else:
            prose.append(line)
    out.append(rewrite("".join(prose)))
    return "".join(out)


def outside_docs(target: str, page: Page, config: MkDocsConfig, files: Files) -> str | None:
    """The link to a site copy of ``target``, a file of the repository outside docs/ (added
    to the site's files); None for any other link, left to MkDocs to check."""
    if SCHEME.match(target) or target.startswith(("/", "#")):
        return None
    path, hash_mark, fragment = target.partition("#")
    docs = os.path.realpath(config.docs_dir)
    source = os.path.normpath(
        os.path.join(docs, posixpath.dirname(page.file.src_uri), unquote(path))
    )
    root = str(repository(config))
    if os.path.commonpath([source, docs]) == docs or os.path.commonpath([source, root]) != root:
        return None
    if not os.path.isfile(source) or source.endswith(".md"):
        return None
    uri = Path(os.path.relpath(source, root)).as_posix()
    if files.get_file_from_path(uri) is None:
        files.append(File(uri, root, config.site_dir, config.use_directory_urls))
    return posixpath.relpath(uri, posixpath.dirname(page.file.src_uri) or ".") + (
        hash_mark + fragment
    )


ROLE = re.compile(
    r":(?:py:)?(?:mod|class|func|meth|attr|data|exc|obj|const):`(?P<short>~?)(?P<target>[^`]+)`"
)


EXAMPLE = re.compile(r"^(?P<indent>[ \t]*)Example:[ \t]*$", re.MULTILINE)


class DocstringConventions(griffe.Extension):
    """fastload's docstrings as the reference renders them: Sphinx cross-reference roles
    rendered as mkdocstrings renders its own references (a link where the reference
    documents the object, code otherwise), and ``Example:`` sections read as
    ``Examples:`` (griffe takes the singular for an admonition, whose doctest would be
    read as Markdown)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in walk(pkg):
            if obj.docstring is not None:
                text = EXAMPLE.sub(r"\g<indent>Examples:", obj.docstring.value)
                obj.docstring.value = ROLE.sub(lambda match, obj=obj: reference(match, obj), text)


def walk(obj: griffe.Object) -> list[griffe.Object]:
    """``obj`` and every object defined in it (aliases, which are imports, left out)."""
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias:
            found += walk(member)  # type: ignore[arg-type]
    return found


def reference(match: re.Match[str], obj: griffe.Object) -> str:
    """A role's target, looked up as written, then from ``obj`` and each scope around it."""
    target = match["target"].strip()
    text = target.rsplit(".", 1)[-1] if match["short"] else target
    scopes = [obj, *parents(obj)]
    candidates = [target] + [f"{scope.path}.{target}" for scope in scopes]
    for candidate in candidates:
        try:
            found = obj.modules_collection[candidate]
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        return f'<autoref identifier="{found.path}" optional><code>{text}</code></autoref>'
    return f"`{text}`"


def parents(obj: griffe.Object) -> list[griffe.Object]:
    """The class, module and packages around ``obj``, innermost first."""
    found = []
    while obj.parent is not None:
        obj = obj.parent
        found.append(obj)
    return found
