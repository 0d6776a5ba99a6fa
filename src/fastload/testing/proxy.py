"""An HTTP proxy on 127.0.0.1 (or another of this machine's addresses) in front of an
object store's server, for the tests and benchmarks: the faults object stores show under
load, on a fixed schedule, and requests rewritten where a test server speaks another
dialect than the client (:mod:`fastload.testing.gcsserver`).

Example::

    with LocalS3() as server, FaultyProxy(server.endpoint, slow_down=4) as proxy:
        options = {**server.client_options(), "endpoint_url": proxy.endpoint}

:class:`ProxyProcess` runs the same proxy in a process of its own, for a measurement:
there its copying takes no turns of the measured process's interpreter lock.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["Answer", "FaultyProxy", "ProxyProcess", "Rewrite"]

#: The answer's headers and body -> the headers to send back.
Answer = Callable[[list[tuple[str, str]], bytes], list[tuple[str, str]]]
#: (method, path, headers) -> the request to send upstream instead, and what to change in
#: its answer's headers (None: nothing).
Rewrite = Callable[[str, str, dict[str, str]], tuple[str, str, dict[str, str], Answer | None]]


class FaultyProxy:
    """An HTTP proxy on ``host`` in front of ``upstream`` that misbehaves as object
    stores do under load, on a fixed schedule (request numbers, from 1): ``slow_down``
    every n-th request answered ``503 SlowDown``; ``truncate`` every n-th body cut in
    half (the connection closed early); ``corrupt`` every n-th body of a ranged GET with
    one byte changed (its length right: only a checksum sees it); ``stall`` every n-th answered
    only after ``stall_s`` seconds; ``rewrite`` changes each request before it goes
    upstream; ``keep_host=False`` names the upstream in each request's ``Host`` (a proxy
    that is the server's own front: a client's ``Host``, which S3 signs, kept otherwise).
    ``endpoint`` replaces the server's."""

    def __init__(
        self, upstream: str, *, slow_down: int = 0, truncate: int = 0, corrupt: int = 0,
        stall: int = 0, stall_s: float = 0.0, rewrite: Rewrite | None = None,
        host: str = "127.0.0.1", keep_host: bool = True,
    ) -> None:  # fmt: skip
        import http.server
        import threading
        import urllib.parse

        target = urllib.parse.urlparse(upstream)
        self.counts = {"requests": 0, "slow_down": 0, "truncate": 0, "corrupt": 0, "stall": 0}
        lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                return

            def _forward(self) -> None:
                import http.client

                with lock:
                    proxy.counts["requests"] += 1
                    number = proxy.counts["requests"]
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if slow_down and number % slow_down == 0:
                    proxy.counts["slow_down"] += 1
                    message = b"<Error><Code>SlowDown</Code><Message>slow down</Message></Error>"
                    self.send_response(503)
                    self.send_header("Content-Length", str(len(message)))
                    self.end_headers()
                    self.wfile.write(message)
                    return
                if stall and number % stall == 0:
                    proxy.counts["stall"] += 1
                    time.sleep(stall_s)
                connection = http.client.HTTPConnection(
                    target.hostname or "127.0.0.1", target.port, timeout=60
                )
                dropped = ("connection",) if keep_host else ("connection", "host")
                headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
                if not keep_host:
                    headers["Host"] = target.netloc
                method, path, answer = self.command, self.path, None
                if rewrite is not None:
                    method, path, headers, answer = rewrite(method, path, headers)
                connection.request(method, path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
                self.send_response(response.status)
                answered = response.getheaders()
                for name, value in answer(answered, data) if answer else answered:
                    if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(name, value)
                if self.command != "HEAD":  # the body read whole: its length, not chunks
                    self.send_header("Content-Length", str(len(data)))
                elif (declared := response.getheader("Content-Length")) is not None:
                    self.send_header("Content-Length", declared)
                self.end_headers()
                cut = (
                    truncate and number % truncate == 0 and self.command == "GET" and len(data) > 1
                )
                ranged = self.command == "GET" and "Range" in self.headers and data
                if corrupt and number % corrupt == 0 and ranged:  # shard bytes, not an index
                    proxy.counts["corrupt"] += 1
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                if cut:
                    proxy.counts["truncate"] += 1
                    self.wfile.write(data[: len(data) // 2])
                    self.close_connection = True
                else:
                    self.wfile.write(data)
                connection.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                if not isinstance(sys.exc_info()[1], ConnectionError):  # a client gave up
                    super().handle_error(request, client_address)

        self.server = Server((host, 0), Handler)
        self.endpoint = f"http://{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():  # shutdown() waits for a loop that was started
            self.server.shutdown()
        self.server.server_close()


class ProxyProcess:
    """A :class:`FaultyProxy` (the same arguments; ``rewrite`` a function a module
    defines) in a process of its own (``python -m fastload.testing.proxy``, through
    ``launch`` first where given, as a shaped link's ``inside``), started on entry and
    stopped on exit; ``counts`` are asked of it.

    Example::

        with LocalS3() as server, ProxyProcess(server.endpoint, stall=50, stall_s=2) as proxy:
            options = {**server.client_options(), "endpoint_url": proxy.endpoint}
    """

    def __init__(
        self, upstream: str, *, rewrite: Rewrite | None = None, host: str = "127.0.0.1",
        keep_host: bool = True, launch: Callable[[list[str]], list[str]] | None = None,
        **faults: Any,
    ) -> None:  # fmt: skip
        named = None if rewrite is None else f"{rewrite.__module__}:{rewrite.__qualname__}"
        self._settings = json.dumps({"upstream": upstream, "rewrite": named, "host": host,
                                     "keep_host": keep_host, "faults": faults})  # fmt: skip
        self._launch = launch or list
        self._process: subprocess.Popen[str] | None = None
        self.endpoint = ""

    def __enter__(self) -> ProxyProcess:
        package_root = str(Path(__file__).resolve().parents[2])  # where fastload imports from
        path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
        self._process = subprocess.Popen(
            self._launch([sys.executable, "-m", "fastload.testing.proxy", self._settings]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": path},
        )  # fmt: skip
        self.endpoint = self._answer("the proxy's process did not start")
        return self

    @property
    def pids(self) -> list[int]:
        """Its process's ID, while it runs (a benchmark counts its CPU)."""
        return [] if self._process is None else [self._process.pid]

    @property
    def counts(self) -> dict[str, int]:
        """The requests it forwarded, and the faults it made (see :class:`FaultyProxy`)."""
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write("counts\n")
        self._process.stdin.flush()
        return dict(json.loads(self._answer("the proxy's process ended")))

    def _answer(self, failure: str) -> str:
        assert self._process is not None and self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], 60)
        line = self._process.stdout.readline() if ready else ""
        if not line:
            self.__exit__()  # its output ended (it exits), or it never answered (killed)
            why = f"it exited with {self._process.returncode}" if ready else "no answer in 60 s"
            raise RuntimeError(f"{failure}: {why}")
        return line.strip()

    def __exit__(self, *exc: object) -> None:
        if self._process is None:  # never started
            return
        with contextlib.suppress(OSError):  # it ends at the end of its input
            self._process.stdin.close()  # type: ignore[union-attr]
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process.stdout.close()  # type: ignore[union-attr]


def _serve(settings: dict[str, Any]) -> None:
    """A ProxyProcess's own: the proxy, until its input ends; ``counts`` answered."""
    rewrite: Any = None
    if settings["rewrite"]:
        module, name = settings["rewrite"].split(":")
        rewrite = functools.reduce(getattr, name.split("."), importlib.import_module(module))
    with FaultyProxy(settings["upstream"], rewrite=rewrite, host=settings["host"],
                     keep_host=settings["keep_host"], **settings["faults"]) as proxy:  # fmt: skip
        print(proxy.endpoint, flush=True)
        for request in sys.stdin:
            if request.strip() == "counts":
                print(json.dumps(proxy.counts), flush=True)


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))
