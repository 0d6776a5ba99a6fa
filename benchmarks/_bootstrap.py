"""Lets ``python benchmarks/X.py`` import the ``benchmarks`` package as ``python -m
benchmarks.X`` does. Run as a file, a script has its own folder first on ``sys.path``;
a script imports this first (``if not __package__: import _bootstrap``), and it puts
the repository root there instead, so that ``benchmarks.lib`` resolves and no script's
name can shadow an installed module (``streaming.py`` once hid MosaicML's ``streaming``).
"""

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_ROOT = str(_HERE.parent)
sys.path[:] = [_ROOT if Path(entry or ".").resolve() == _HERE else entry for entry in sys.path]
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
