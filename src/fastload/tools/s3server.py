"""The old home of :mod:`fastload.testing.s3server`, kept for one release."""

import warnings

from fastload.testing.s3server import *  # noqa: F403
from fastload.testing.s3server import __all__  # noqa: F401

warnings.warn(
    "fastload.tools.s3server moved to fastload.testing.s3server; the old name goes in the next "
    "release",
    FutureWarning,
    stacklevel=2,
)
