"""The process that talks to object storage for another: obstore's runtime is not safe
across ``fork`` (a child of a process that used it hangs on its first request: obstore
and tokio both say so), and DataLoader workers are forked. So no fastload process
starts obstore itself; each starts this one, with ``spawn`` semantics (a fresh
interpreter running this file, importing only the standard library and obstore), and
asks it over its pipes. A shard's ranged GETs run in parallel here, hedged
(:mod:`~fastload.shards.stores.hedging`), and are written straight into the cache's part file,
hashed on the way: its bytes never cross the pipe.

Messages, both ways: a 4-byte length, a JSON header, then ``size`` bytes of payload.
Requests: ``{"op": "open", "url", "options", "parallel"}`` once, then
``read``, ``download`` (a shard, and its member table with it), ``listing``, ``names``,
``head``, ``write``, ``delete``,
``counts`` (the hedged reads'). Answers:
``{"ok": true, ...}`` or ``{"ok": false, "kind": "missing" | "refused" | "cut" | "other",
"message"}``.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import IO, Any, TypeVar

if __package__:
    from fastload.shards.stores.hedging import Hedged
else:  # run as a script (see ObstoreBucket): the module beside it, not the whole package
    sys.path.insert(0, str(Path(__file__).parent))
    from hedging import Hedged  # type: ignore[no-redef]

T = TypeVar("T")
BODY_ATTEMPTS = 5
PIECE = 256 << 10  # bytes of a body at a time: each tells the hedging that bytes still come
_LENGTH = struct.Struct("<I")


def send(stream: IO[bytes], header: dict[str, Any], payload: bytes = b"") -> None:
    data = json.dumps({**header, "size": len(payload)}).encode()
    stream.write(_LENGTH.pack(len(data)) + data)
    if payload:
        stream.write(payload)
    stream.flush()


def receive(stream: IO[bytes]) -> tuple[dict[str, Any], bytes] | None:
    """The next message, or None at the end of the stream."""
    prefix = stream.read(_LENGTH.size)
    if len(prefix) < _LENGTH.size:
        return None
    header = json.loads(stream.read(_LENGTH.unpack(prefix)[0]))
    return header, stream.read(header["size"]) if header["size"] else b""


class CutShort(Exception):
    """A ranged answer with fewer bytes than asked for."""


def kind(error: BaseException) -> str:
    """What an error means to the asking process."""
    from obstore.exceptions import (
        NotFoundError,
        PermissionDeniedError,
        UnauthenticatedError,
    )

    # a listing of a bucket that is not there comes as a generic error with its 404
    if isinstance(error, NotFoundError | FileNotFoundError) or "status code: 404" in str(error):
        return "missing"
    if isinstance(error, PermissionDeniedError | UnauthenticatedError | PermissionError):
        return "refused"
    return "cut" if isinstance(error, CutShort) else "other"


def again_if_cut(read: Callable[[], T]) -> T:
    """``read()`` (bytes, or obstore's buffers of them, not copied), again with backoff
    doubling from 0.1 s while the answer is cut short or fails on the way (obstore
    retries a request, not a body read half-way); an answer the store gave (missing,
    refused) is not asked again."""
    for attempt in range(BODY_ATTEMPTS):
        try:
            return read()
        except Exception as error:
            if kind(error) in ("missing", "refused") or attempt == BODY_ATTEMPTS - 1:
                raise
            time.sleep(0.1 * 2**attempt)
    raise AssertionError("unreachable")


def options_for_obstore(options: dict[str, Any]) -> dict[str, Any]:
    """The JSON-carried options with their durations (seconds) as timedeltas."""

    def durations(settings: dict[str, Any]) -> dict[str, Any]:
        return {key: timedelta(seconds=value) if key.endswith(("timeout", "backoff"))
                and isinstance(value, int | float) else value
                for key, value in settings.items()}  # fmt: skip

    retry = durations(options.get("retry_config", {}))
    if "backoff" in retry:
        retry["backoff"] = durations(retry["backoff"])
    client = durations(options.get("client_options", {}))
    return {**options, "client_options": client, "retry_config": retry}


class Server:
    """One store, its requests answered in order."""

    def __init__(self, url: str, options: dict[str, Any], parallel: int) -> None:
        from obstore.store import from_url

        self.store = from_url(url, **options_for_obstore(options))
        self.pool = ThreadPoolExecutor(parallel, thread_name_prefix="fastload-get")
        self.hedged = Hedged(parallel)

    def read(self, name: str) -> Any:
        import obstore

        return again_if_cut(lambda: obstore.get(self.store, name).bytes())

    def ranged(self, name: str, first: int, last: int, heard: Callable[[], None]) -> list[Any]:
        """Bytes ``first`` to ``last`` of ``name``, in pieces (obstore's buffers, not
        copied), ``heard()`` as each arrives."""
        import obstore

        def one() -> list[Any]:
            answer = obstore.get(self.store, name, options={"range": (first, last + 1)})
            heard()
            pieces = []
            for piece in answer.stream(min_chunk_size=PIECE):
                heard()
                pieces.append(piece)
            if sum(map(len, pieces)) != last - first + 1:
                raise CutShort(f"bytes {first}-{last} cut short {BODY_ATTEMPTS} times")
            return pieces

        return again_if_cut(one)

    def download(self, name: str, spans: list[list[int]], path: str) -> str:
        """The spans, in parallel, written in order into ``path``; their SHA-256."""
        digest = hashlib.sha256()
        with open(path, "wb") as file:
            hedged = self.pool.map(
                lambda span: self.hedged.call(
                    lambda heard: self.ranged(name, span[0], span[1], heard)
                ),
                spans,
            )
            for pieces in hedged:
                for piece in pieces:
                    digest.update(piece)
                    file.write(piece)
        return digest.hexdigest()

    def download_with(self, header: dict[str, Any]) -> dict[str, Any]:
        """A shard's download (``name``, ``spans`` into ``path``) and, with ``table``
        (its name and a path), that object whole, fetched meanwhile: their SHA-256s
        (the table's None where it failed: the asking process fetches it again)."""
        beside = None
        if "table" in header:
            table_name, table_path = header["table"]
            beside = self.pool.submit(self.read, table_name)
        reply: dict[str, Any] = {
            "sha256": self.download(header["name"], header["spans"], header["path"])
        }
        if beside is not None:
            try:
                data = beside.result()
                Path(table_path).write_bytes(data)
                reply["table_sha256"] = hashlib.sha256(data).hexdigest()
            except Exception:
                reply["table_sha256"] = None
        return reply

    def answer(self, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        import obstore

        op, name = header["op"], header.get("name", "")
        if op == "read":
            return {}, self.read(name)
        if op == "download":
            self.hedged.enabled = header["hedging"]  # the asking process's setting, now
            return self.download_with(header), b""
        if op == "listing":
            found = obstore.list_with_delimiter(self.store)
            return {"objects": {o["path"]: int(o["size"]) for o in found["objects"]}}, b""
        if op == "names":  # obstore's prefix is whole path segments: a name's start here
            batches = obstore.list(self.store)
            paths = (o["path"] for batch in batches for o in batch)
            return {"names": sorted(p for p in paths if p.startswith(header["prefix"]))}, b""
        if op == "head":
            try:
                meta = obstore.head(self.store, name)
            except Exception as error:
                if kind(error) != "missing":
                    raise
                return {"version": None}, b""
            return {"version": [meta["e_tag"], meta["last_modified"].isoformat()]}, b""
        if op == "write":
            data = open(header["path"], "rb") if "path" in header else payload  # noqa: SIM115
            try:
                obstore.put(self.store, name, data, use_multipart=header["multipart"])
            finally:
                if not isinstance(data, bytes):
                    data.close()
            return {}, b""
        if op == "counts":
            return {"counts": self.hedged.counts}, b""
        if op == "delete":
            obstore.delete(self.store, name)
            return {}, b""
        raise ValueError(f"unknown request {op!r}")


def first_line(error: BaseException) -> str:
    """obstore's message without its debug dump."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    opened = receive(requests)
    if opened is None:
        return
    header, _ = opened
    try:
        server = Server(header["url"], header["options"], header["parallel"])
    except Exception as error:
        send(answers, {"ok": False, "kind": "other",
                       "message": f"{type(error).__name__}: {first_line(error)}"})  # fmt: skip
        return
    send(answers, {"ok": True})
    while (message := receive(requests)) is not None:
        try:
            reply, payload = server.answer(*message)
        except Exception as error:
            send(answers, {"ok": False, "kind": kind(error),
                           "message": f"{type(error).__name__}: {first_line(error)}"})  # fmt: skip
        else:
            send(answers, {"ok": True, **reply}, payload)


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
