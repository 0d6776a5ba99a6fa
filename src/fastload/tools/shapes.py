"""The old home of :mod:`fastload.testing.shapes`, kept for one release."""

import warnings

from fastload.testing.shapes import *  # noqa: F403
from fastload.testing.shapes import __all__  # noqa: F401

warnings.warn(
    "fastload.tools.shapes moved to fastload.testing.shapes; the old name goes in the next release",
    FutureWarning,
    stacklevel=2,
)
