"""An Azure Blob Storage server on 127.0.0.1 for tests and benchmarks: Microsoft's
emulator Azurite (npm package ``azurite``: ``make test`` installs it into ``.venv``
where npm is found; ``npm install azurite`` anywhere on ``PATH`` does too), its data in
a temporary folder, requests signed with the emulator's well-known account key as
Azure checks them. Containers are made with Azure's own SDK (``azure-storage-blob``,
``pip install '.[testing]'``). Given a ``host`` and a ``launch`` (a shaped link's
address and its ``inside``), it serves from another network namespace, across a link
with a cloud's latency.

Example::

    with LocalAzurite() as server:
        server.create_container("data")
        ShardedDataset("az://data/train", storage_options=server.options())
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastload.testing.processes import free_port, stop, wait_until_it_answers

__all__ = ["ACCOUNT", "KEY", "LocalAzurite", "azurite_binary"]

#: The emulator's account and key, the same on every machine (Microsoft's documentation).
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_binary() -> Path | None:
    """``azurite-blob``: ``$FASTLOAD_AZURITE``, else the one npm installed beside this
    Python (``npm install --prefix .venv azurite``), else the one on ``PATH``."""
    candidates = [os.environ.get("FASTLOAD_AZURITE"),
                  str(Path(sys.prefix) / "node_modules" / ".bin" / "azurite-blob"),
                  shutil.which("azurite-blob")]  # fmt: skip
    return next((Path(c) for c in candidates if c and Path(c).exists()), None)


def sdk_installed() -> bool:
    try:
        import azure.storage.blob  # noqa: F401
    except ImportError:
        return False
    return True


class LocalAzurite:
    """Azurite's blob service on a free port of ``host``; ``endpoint`` is its account's
    URL. Its command goes through ``launch`` first (None: run as it is), as a shaped
    link's ``inside``. Stopped and its folder removed on exit."""

    def __init__(
        self, *, host: str = "127.0.0.1", launch: Callable[[list[str]], list[str]] | None = None
    ) -> None:
        binary = azurite_binary()
        if binary is None or not sdk_installed():
            raise RuntimeError(
                "the local Azure server needs Azurite (npm install --prefix .venv azurite) "
                "and azure-storage-blob (pip install '.[testing]')"
            )
        self.binary, self.host, self.port = binary, host, free_port()
        self._launch = launch or list
        self.root = Path(tempfile.mkdtemp(prefix="fastload-azurite-"))
        self.endpoint = f"http://{host}:{self.port}/{ACCOUNT}"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pids(self) -> list[int]:
        """The ID of Azurite's process, while it runs."""
        return [] if self._process is None else [self._process.pid]

    def __enter__(self) -> LocalAzurite:
        command = [str(self.binary), "--blobHost", self.host, "--blobPort", str(self.port),
                   "--location", str(self.root), "--silent", "--skipApiVersionCheck",
                   "--loose", "--disableTelemetry"]  # fmt: skip
        with open(self.root / "azurite.log", "wb") as log:
            self._process = subprocess.Popen(self._launch(command), stdout=log,
                                             stderr=subprocess.STDOUT)  # fmt: skip
        try:
            self._wait_until_it_listens()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_until_it_listens(self) -> None:
        assert self._process is not None
        wait_until_it_answers(
            lambda: socket.create_connection((self.host, self.port), timeout=1).close(),
            [self._process], "Azurite", logs=self.root,
        )  # fmt: skip

    def connection_string(self) -> str:
        return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
                f"BlobEndpoint={self.endpoint};")  # fmt: skip

    def create_container(self, name: str) -> None:
        from azure.storage.blob import BlobServiceClient

        BlobServiceClient.from_connection_string(self.connection_string()).create_container(name)

    def options(self, endpoint: str | None = None) -> dict[str, Any]:
        """The storage options that reach it (through ``endpoint``, a proxy in front of
        it, if given)."""
        base = f"{endpoint}/{ACCOUNT}" if endpoint else self.endpoint
        return {"account_name": ACCOUNT, "account_key": KEY, "endpoint": base}

    def environment(self) -> dict[str, str]:
        """The usual Azure variables for it."""
        return {"AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": KEY,
                "AZURE_STORAGE_ENDPOINT": self.endpoint}  # fmt: skip

    def stop(self) -> None:
        if self._process is not None:
            stop([self._process])
            self._process = None
        shutil.rmtree(self.root, ignore_errors=True)
