"""Lazy exports for a package's ``__init__``: a name is imported from its module on first
use, so ``import fastload`` stays quick (PEP 562)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str,
    exports: Mapping[str, str],
    namespace: dict[str, Any],
    listed: Iterable[str],
    submodules: Iterable[str] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``: ``exports`` maps a
    name to the module it is imported from, once, into ``namespace``; a name among
    ``submodules`` is that module of the package (``fastload.gpu`` after ``import
    fastload``, as ``import fastload.gpu`` gives it); ``dir()`` lists ``listed`` and the
    exports."""
    modules = frozenset(submodules)

    def __getattr__(name: str) -> Any:
        if name in modules:
            return importlib.import_module(f"{package}.{name}")
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*listed, *exports})

    return __getattr__, __dir__
