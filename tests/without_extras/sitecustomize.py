"""Imported at start-up by any Python whose path holds this folder: the modules named in
``FASTLOAD_WITHOUT`` (comma-separated top-level names) then fail to import, as if they
were not installed. tests/test_optional_extras.py runs the suite this way, subprocesses
included, to check that a missing optional extra skips its tests instead of aborting."""

from __future__ import annotations

import importlib.abc
import os
import sys

BLOCKED = frozenset(filter(None, os.environ.get("FASTLOAD_WITHOUT", "").split(",")))


class _NotInstalled(importlib.abc.MetaPathFinder):
    """The finders Python had, blind to the blocked modules: ``import`` of one raises
    ModuleNotFoundError and ``importlib.util.find_spec`` gives None, as for a module that
    is not installed (torch probes optional modules so, and takes an error for a bug)."""

    def __init__(self, finders):
        self.finders = finders

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            return None
        for finder in self.finders:
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                return spec
        return None

    def find_distributions(self, *args, **kwargs):  # importlib.metadata's: every package
        for finder in self.finders:
            if hasattr(finder, "find_distributions"):
                yield from finder.find_distributions(*args, **kwargs)

    def invalidate_caches(self):
        for finder in self.finders:
            if hasattr(finder, "invalidate_caches"):
                finder.invalidate_caches()


if BLOCKED:
    sys.meta_path[:] = [_NotInstalled(list(sys.meta_path))]
