"""A real S3-compatible server on 127.0.0.1 for tests and benchmarks: OpenStack Swift
(``pip install '.[testing]'``) with its S3 API (``s3api`` and ``tempauth`` in the proxy's
pipeline, ``slo`` for multipart uploads), every server in one process (``workers = 0``),
its data in a temporary folder. It checks request signatures and serves range reads, as
S3 does. Given a ``host`` and a ``launch`` (a shaped link's address and its ``inside``),
it serves from another network namespace, across a link with a cloud's latency.

Example::

    with LocalS3() as server:
        client = boto3.client("s3", **server.client_options())
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastload.testing.processes import free_port, stop, wait_until_it_answers

__all__ = ["LocalS3", "swift_installed"]

ACCESS_KEY, SECRET_KEY = "test:tester", "testing"
_SERVERS = {"object": 0, "container": 1, "account": 2}


def _bin(name: str) -> Path:
    return Path(sys.executable).parent / name


def swift_installed() -> bool:
    try:
        import swift  # noqa: F401
    except ImportError:
        return False
    return _bin("swift-proxy-server").exists() and _bin("swift-ring-builder").exists()


def _server_conf(root: Path, kind: str, port: int) -> str:
    return f"""[DEFAULT]
devices = {root / "node"}
mount_check = false
bind_ip = 127.0.0.1
bind_port = {port}
workers = 0
swift_dir = {root / "etc"}
log_level = ERROR
[pipeline:main]
pipeline = {kind}-server
[app:{kind}-server]
use = egg:swift#{kind}
"""


def _proxy_conf(root: Path, host: str, port: int) -> str:
    return f"""[DEFAULT]
bind_ip = {host}
bind_port = {port}
workers = 0
swift_dir = {root / "etc"}
log_level = ERROR
[pipeline:main]
pipeline = catch_errors proxy-logging cache listing_formats s3api tempauth copy slo dlo
    proxy-logging proxy-server
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
[filter:catch_errors]
use = egg:swift#catch_errors
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:cache]
use = egg:swift#memcache
[filter:s3api]
use = egg:swift#s3api
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = {SECRET_KEY} .admin
"""


class LocalS3:
    """Start Swift's four servers on free ports; ``endpoint`` is the S3 endpoint, on
    ``host``. Each server's command goes through ``launch`` first (None: run as it is).
    Stopped and its folder removed on exit."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        launch: Callable[[list[str]], list[str]] | None = None,
    ) -> None:
        if not swift_installed():
            raise RuntimeError(
                "the local S3 server needs OpenStack Swift: pip install '.[testing]'"
            )
        self.root = Path(tempfile.mkdtemp(prefix="fastload-s3-"))
        self.host, self.port = host, free_port()
        self.endpoint = f"http://{host}:{self.port}"
        self._launch = launch or list
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> list[int]:
        """The IDs of its processes (Swift's proxy and storage servers), while it runs."""
        return [process.pid for process in self._processes]

    def client_options(self) -> dict[str, Any]:
        """What ``boto3.client("s3", ...)`` needs to reach it."""
        return {
            "endpoint_url": self.endpoint, "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY, "region_name": "us-east-1",
        }  # fmt: skip

    def environment(self) -> dict[str, str]:
        """The usual AWS variables for it."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1",
        }  # fmt: skip

    def __enter__(self) -> LocalS3:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self) -> None:
        etc, node = self.root / "etc", self.root / "node" / "sdb1"
        etc.mkdir()
        node.mkdir(parents=True)
        (etc / "swift.conf").write_text(
            "[swift-hash]\nswift_hash_path_suffix = fastload\nswift_hash_path_prefix = fastload\n"
            "[storage-policy:0]\nname = gold\ndefault = yes\n"
        )
        builder = str(_bin("swift-ring-builder"))
        for kind in _SERVERS:
            port = free_port()
            ring = str(etc / f"{kind}.builder")
            steps = (["create", "4", "1", "1"], ["add", f"r1z1-127.0.0.1:{port}/sdb1", "1"],
                     ["rebalance"])  # fmt: skip
            for arguments in steps:
                subprocess.run([builder, ring, *arguments], check=True, capture_output=True)
            (etc / f"{kind}-server.conf").write_text(_server_conf(self.root, kind, port))
        (etc / "proxy-server.conf").write_text(_proxy_conf(self.root, self.host, self.port))
        for kind in (*_SERVERS, "proxy"):
            command = self._launch(
                [str(_bin(f"swift-{kind}-server")), str(etc / f"{kind}-server.conf")]
            )
            with open(self.root / f"{kind}.log", "wb") as log:  # the server keeps its own copy
                self._processes.append(
                    subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
                )
        self._wait_until_it_answers()

    def _wait_until_it_answers(self) -> None:
        import boto3

        client = boto3.client("s3", **self.client_options())
        wait_until_it_answers(client.list_buckets, self._processes, "the local S3 server",
                              logs=self.root)  # fmt: skip

    def kill_endpoint(self) -> None:
        """Kill the S3 endpoint (Swift's proxy) with SIGKILL, as a crash would: requests
        are refused until :meth:`restart_endpoint`; the stored objects stay."""
        proxy = self._processes.pop()
        proxy.kill()
        proxy.wait()

    def restart_endpoint(self) -> None:
        """Start the S3 endpoint again on its port, and wait until it answers."""
        etc = self.root / "etc"
        command = self._launch([str(_bin("swift-proxy-server")), str(etc / "proxy-server.conf")])
        with open(self.root / "proxy.log", "ab") as log:
            self._processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
        self._wait_until_it_answers()

    def stop(self) -> None:
        stop(self._processes)
        self._processes.clear()
        shutil.rmtree(self.root, ignore_errors=True)
