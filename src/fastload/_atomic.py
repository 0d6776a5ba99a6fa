"""Files written whole or not at all: the content goes into a temporary file of the
writer's own beside the target, which is synced to the disk and renamed over it, and
the folder is synced after, so that neither a crash nor a power cut leaves a file cut
short or empty under the target's name.

A file made so gets the permissions of any file the process creates (``0o666`` less the
umask, and a folder's default ACL), as the shards beside it: :func:`tempfile.mkstemp`'s
``0o600`` would hide an index from the other accounts, or the web server, that read the
set.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["rename_durably", "replacing", "temporary_names", "write_whole"]

_LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789_"  # mkstemp's: older leftovers match too
_TRIES = 100
#: What syncing a folder raises on a file system that cannot (some network ones): the
#: file itself is already renamed and synced, and there is nothing more to do.
_CANNOT_SYNC = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES})


def temporary_names(target: str) -> re.Pattern[str]:
    """The names :func:`replacing` gives its temporary files for a target whose name
    matches the regular expression ``target``: ``.NAME.`` 8 letters ``.tmp``."""
    return re.compile(rf"\.(?:{target})\.[{_LETTERS}]{{8}}\.tmp")


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[BinaryIO]:
    """A new file to write ``path``'s content into, which replaces ``path`` whole when the
    block ends without an exception; on one it is removed and ``path`` left as it was.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "notes.txt"
        >>> with replacing(path) as file:
        ...     _ = file.write(b"whole")
        >>> path.read_bytes()
        b'whole'
    """
    temporary, descriptor = _create_beside(path)
    try:
        with os.fdopen(descriptor, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())  # the content on the disk before the name points at it
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)  # the rename itself, past a power cut


def write_whole(path: Path, data: bytes) -> None:
    """``data`` into ``path`` whole or not at all (see :func:`replacing`)."""
    with replacing(path) as file:
        file.write(data)


def rename_durably(source: Path, target: Path) -> None:
    """The complete file ``source`` renamed to ``target`` in the same folder, past a power
    cut: its content synced to the disk before the rename, the folder after."""
    descriptor = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(source, target)
    _sync_folder(target.parent)


def _create_beside(path: Path) -> tuple[Path, int]:
    """A new temporary file in ``path``'s folder, of this writer's own (writers of one
    folder at once never share one), created with mode ``0o666`` for the umask to
    narrow, as :func:`open` creates files."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for _ in range(_TRIES):
        letters = "".join(secrets.choice(_LETTERS) for _ in range(8))
        temporary = path.with_name(f".{path.name}.{letters}.tmp")
        try:
            return temporary, os.open(temporary, flags, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name}")


def _sync_folder(folder: Path) -> None:
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as error:
        if error.errno in _CANNOT_SYNC:
            return
        raise
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in _CANNOT_SYNC:
            raise
    finally:
        os.close(descriptor)
