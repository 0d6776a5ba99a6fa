"""The conversion's worker processes: each converts the items it is sent through its own
pipe, and the items come back in order. A worker that dies (the out-of-memory killer's
SIGKILL, a crash in a decoder) is seen through its process handle: the items before the
one it held are handed out, then :class:`Died` names that one. ``multiprocessing.Pool``
would replace the worker and wait forever for the lost item.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import multiprocessing
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

import cv2

from fastload.decode.opencv import ImageDecodeError
from fastload.records.sources import Encoding, Source
from fastload.records.targets import TargetError

__all__ = ["Died", "WorkerDiedError", "converted_items", "death"]

#: What a worker gives back for an item: (position, record, None), or (position, None,
#: the error) for bad input that ``skip_bad`` may skip.
_Loaded = tuple[int, "bytes | None", "Exception | None"]
_BAD_INPUT = (ImageDecodeError, TargetError, OSError)
_IN_FLIGHT = 2  # items sent ahead to each worker: the next is ready when one is done
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class WorkerDiedError(ChildProcessError):
    """A conversion worker process died (the out-of-memory killer, a crash in a decoder).

    It names the item it was converting; the records before it are kept. ``write_lmdb``
    raises it; ``resume=True`` goes on from that item.

    Example:
        >>> issubclass(WorkerDiedError, ChildProcessError)
        True
    """


class Died(Exception):
    """Internal: the worker converting ``position`` died with ``exitcode``."""

    def __init__(self, position: int, exitcode: int | None) -> None:
        super().__init__(position, exitcode)
        self.position, self.exitcode = position, exitcode


class _RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker, as its cause in this process."""

    def __str__(self) -> str:
        return "\n" + str(self.args[0])


def _load(source: Source, encoding: Encoding, position: int) -> _Loaded:
    try:
        return position, source.record(position, encoding), None
    except _BAD_INPUT as error:
        return position, None, error
    except Exception as error:  # a bug in a Dataset, say: raised, with the item it was at
        error.add_note(f"(converting {source.name(position)}, item {position} of the source)")
        raise


def _work(source: Source, encoding: Encoding, connection: Connection, parent: int) -> None:
    """A worker: converts the positions it is sent, one reply each, until its connection
    closes or the converting process is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent stops its workers
    if sys.platform == "linux":  # killed with the parent, even if stuck in an item
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    _one_thread()
    while True:
        while not connection.poll(1.0):
            if os.getppid() != parent:
                return
        try:
            position = connection.recv()
        except EOFError:
            return
        try:
            reply: tuple[Any, ...] = _load(source, encoding, position)
            if reply[2] is not None:
                reply = (position, None, _picklable(reply[2], ImageDecodeError))
        except Exception as error:  # not bad input: raised again in the parent, in order
            reply = (position, _picklable(error, RuntimeError), traceback.format_exc())
        connection.send(reply)


def _one_thread() -> None:
    """One thread for OpenCV and PyTorch in a worker, as DataLoader's workers do: the
    processes are the parallelism, and a thread pool the parent used before the fork
    (OpenMP's) would deadlock the child's first parallel operation."""
    cv2.setNumThreads(0)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _picklable(error: Exception, fallback: type[Exception]) -> Exception:
    """``error``, or (when it does not pickle) a ``fallback`` with its text."""
    try:
        pickle.dumps(error)
    except Exception:
        return fallback(f"{type(error).__name__}: {error}")
    return error


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    connection: Connection
    held: collections.deque[int] = field(default_factory=collections.deque)


def _ordered(workers: list[_Worker], positions: range) -> Iterator[_Loaded]:
    """The items at ``positions`` converted by ``workers``, in order. A dead worker
    raises ``Died`` at the position it held, after every item before it."""
    done: dict[int, _Loaded | Died | tuple[int, Exception, str]] = {}
    live = list(workers)
    sent = positions.start
    window = 4 * _IN_FLIGHT * len(workers)  # converted ahead of the one awaited, at most
    for position in positions:
        while position not in done:
            limit = min(positions.stop, position + window)
            for worker in live:
                while len(worker.held) < _IN_FLIGHT and sent < limit:
                    try:
                        worker.connection.send(sent)
                    except OSError:  # it has died: the wait below finds out how
                        break
                    worker.held.append(sent)
                    sent += 1
            if not live:  # every worker died between items
                done[position] = Died(position, None)
                break
            ready = set(wait([w.connection for w in live] + [w.process.sentinel for w in live]))
            for worker in list(live):
                if worker.connection not in ready and worker.process.sentinel not in ready:
                    continue
                try:
                    while worker.connection.poll():
                        reply = worker.connection.recv()
                        done[reply[0]] = reply
                        worker.held.popleft()
                except (EOFError, OSError):  # it died, perhaps part-way through a reply
                    pass
                if not worker.process.is_alive():
                    live.remove(worker)
                    if worker.held:
                        done[worker.held[0]] = Died(worker.held[0], worker.process.exitcode)
        reply = done.pop(position)
        if isinstance(reply, Died):
            raise reply
        if isinstance(reply[1], Exception):
            _, error, remote = reply
            raise error from _RemoteTraceback(remote)
        yield reply


@contextlib.contextmanager
def converted_items(
    source: Source, encoding: Encoding, start: int, workers: int
) -> Iterator[Iterator[_Loaded]]:
    """The loaded items from ``start`` on, in order. Leaving the block (a bad file, an
    interrupt, a dead worker) stops the workers there and then: none is left behind."""
    positions = range(start, len(source))
    if workers == 0:
        cv2.setNumThreads(0)
        yield (_load(source, encoding, position) for position in positions)
        return
    context = multiprocessing.get_context()
    started: list[_Worker] = []
    try:
        for _ in range(min(workers, max(len(positions), 1))):
            ours, theirs = context.Pipe()
            process = context.Process(
                target=_work, args=(source, encoding, theirs, os.getpid()), daemon=True,
                name="fastload-convert",
            )  # fmt: skip
            process.start()
            theirs.close()
            started.append(_Worker(process, ours))
        yield _ordered(started, positions)
    finally:
        for worker in started:
            worker.process.kill()
        for worker in started:
            worker.process.join()
            worker.connection.close()


def death(exitcode: int | None) -> str:
    """How a worker ended, in words."""
    if exitcode is None:
        return "died"
    if exitcode == -signal.SIGKILL:
        return "was killed by SIGKILL (as the out-of-memory killer does)"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"
