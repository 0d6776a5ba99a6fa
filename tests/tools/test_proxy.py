"""ProxyProcess: the test proxy in a process of its own, forwarding, injecting its
faults on schedule, counting them, and gone on exit."""

from __future__ import annotations

import functools
import http.server
import threading
import urllib.error
import urllib.request

import pytest

from fastload.testing.proxy import ProxyProcess


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def upstream(tmp_path):
    (tmp_path / "object").write_bytes(bytes(range(256)) * 40)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_proxy_in_its_own_process_forwards_injects_its_faults_and_counts_them(upstream):
    with ProxyProcess(upstream, slow_down=2) as proxy:
        endpoint = proxy.endpoint
        first = urllib.request.urlopen(f"{endpoint}/object", timeout=10).read()
        with pytest.raises(urllib.error.HTTPError) as refused:  # the 2nd request
            urllib.request.urlopen(f"{endpoint}/object", timeout=10)
        third = urllib.request.urlopen(f"{endpoint}/object", timeout=10).read()
        counts = proxy.counts
    assert first == third == bytes(range(256)) * 40
    assert refused.value.code == 503
    assert counts == {"requests": 3, "slow_down": 1, "truncate": 0, "corrupt": 0, "stall": 0}
    with pytest.raises(urllib.error.URLError):  # stopped with its process
        urllib.request.urlopen(f"{endpoint}/object", timeout=5)


def test_a_proxy_process_never_entered_exits_quietly(upstream):
    proxy = ProxyProcess(upstream)
    proxy.__exit__(None, None, None)
    assert proxy.endpoint == ""


def test_a_proxy_process_that_cannot_start_says_so(upstream):
    with pytest.raises(RuntimeError, match="the proxy's process did not start: it exited with 1"):
        ProxyProcess(upstream, no_such_fault=3).__enter__()


class HostEcho(http.server.BaseHTTPRequestHandler):
    """Answers each GET with the Host header it was sent."""

    def do_GET(self) -> None:
        body = self.headers["Host"].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("keep_host", [True, False])
def test_a_proxy_keeps_the_clients_host_unless_told_to_name_the_upstream(keep_host):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HostEcho)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    upstream = f"127.0.0.1:{server.server_address[1]}"
    try:
        with ProxyProcess(f"http://{upstream}", keep_host=keep_host) as proxy:
            host = urllib.request.urlopen(f"{proxy.endpoint}/x", timeout=10).read().decode()
            # the client names the proxy: S3 signs that name, and the server must see it
            assert host == (proxy.endpoint.removeprefix("http://") if keep_host else upstream)
    finally:
        server.shutdown()
        server.server_close()
