"""What the Ray fault tests hand to Ray's workers (pickled by value: a worker cannot
import the tests)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from fastload import ImageFolder


class KillsItsWorker(ImageFolder):
    """An image folder whose item ``at`` kills the process reading it (a Ray worker dying
    in the middle of a part) until the file ``healed`` exists; ``once``: the dying reader
    creates it, so a retry goes through."""

    def __init__(self, root: Path, at: int, healed: Path, *, once: bool) -> None:
        super().__init__(root, decode="numpy")
        self.at, self.healed, self.once = at, healed, once

    def __getitem__(self, index: int):
        if index == self.at and not self.healed.exists():
            if self.once:
                self.healed.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(index)
