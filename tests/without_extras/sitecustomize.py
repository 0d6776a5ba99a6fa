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
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


if BLOCKED:
    sys.meta_path.insert(0, _NotInstalled())
