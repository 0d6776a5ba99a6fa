"""A link with a cloud's latency and bandwidth between this process and a server on the
same machine: the server runs in a network namespace of the benchmark's own, reached
over a veth pair on a private /30 used by nothing else; each end's egress is limited to
the rate (an HTB qdisc) and each end delays the packets it receives by half the round
trip (:mod:`benchmarks.lib.delay_queue` on an NFQUEUE of its PREROUTING). Only the
namespace's /30 is ever shaped; nothing else on the machine is touched.

    with ShapedLink(rtt_ms=40, rate="400mbit") as link:
        server = subprocess.Popen(link.inside(["python", "-m", "http.server", "--bind",
                                               link.server_address, "8000"]))

Every step of the set-up is undone in reverse on leaving, on an error half-way through
included, each undo tolerating what was never made. :func:`why_not` says, in a line, why
shaping is not permitted here (not root, no ``ip``/``tc``/``iptables``, no namespaces, no
NFQUEUE), or None.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ShapedLink", "parse_link", "rate_bits", "why_not"]

DELAY_SCRIPT = Path(__file__).with_name("delay_queue.py")
#: The /30 between the two namespaces: link-local space, never routed off the machine.
SUBNET = "169.254.173.{}"
TOOLS = ("ip", "tc", "iptables")


def parse_link(text: str) -> tuple[float, str]:
    """``"40,400mbit"`` -> ``(40.0, "400mbit")``: the round trip in ms, the rate as tc
    takes it.

    Example:
        >>> parse_link("20,1gbit")
        (20.0, '1gbit')
    """
    rtt, _, rate = text.partition(",")
    try:
        milliseconds = float(rtt)
    except ValueError:
        milliseconds = -1.0
    if milliseconds < 0 or not rate or not rate.rstrip("bitps").rstrip("kmg").isdigit():
        raise ValueError(f"--link {text!r}: give RTT_MS,RATE, e.g. 40,400mbit")
    return milliseconds, rate


def rate_bits(rate: str) -> float:
    """A tc rate in bits per second.

    Example:
        >>> rate_bits("400mbit"), rate_bits("1gbit")
        (400000000.0, 1000000000.0)
    """
    number = rate.rstrip("bitps")
    scale = {"k": 1e3, "m": 1e6, "g": 1e9}.get(number[-1:].lower(), 1.0)
    return float(number.rstrip("kmgKMG")) * scale


def why_not() -> str | None:
    """Why a shaped link cannot be made here, in a line; None where it can."""
    if sys.platform != "linux":
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "shaping needs root (network namespaces, tc, iptables)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install iproute2 iptables)"
    probe = f"fastload-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"no network namespaces here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass
class ShapedLink:
    """The link (see the module): ``rtt_ms`` round trip, ``rate`` each way (``400mbit``)."""

    rtt_ms: float
    rate: str
    name: str = field(default_factory=lambda: f"fl{os.getpid() % 100000}")
    client_address: str = SUBNET.format(1)
    server_address: str = SUBNET.format(2)
    _undo: list[list[str]] = field(default_factory=list)
    _delays: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return f"{self.name}-ns"

    def inside(self, command: list[str]) -> list[str]:
        """``command`` run in the server's namespace."""
        return ["ip", "netns", "exec", self.namespace, *command]

    def __enter__(self) -> ShapedLink:
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _run(self, command: list[str], undo: list[str] | None = None) -> None:
        subprocess.run(command, check=True, capture_output=True, text=True)
        if undo is not None:
            self._undo.append(undo)

    def _make(self) -> None:
        outer, inner, ns = f"{self.name}a", f"{self.name}b", self.namespace
        self._run(["ip", "netns", "add", ns], undo=["ip", "netns", "del", ns])
        # deleting one end of a veth pair deletes both
        self._run(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner],
                  undo=["ip", "link", "del", outer])  # fmt: skip
        self._run(["ip", "link", "set", inner, "netns", ns])
        self._run(["ip", "addr", "add", f"{self.client_address}/30", "dev", outer])
        self._run(["ip", "link", "set", outer, "up"])
        self._run(self.inside(["ip", "addr", "add", f"{self.server_address}/30", "dev", inner]))
        self._run(self.inside(["ip", "link", "set", inner, "up"]))
        self._run(self.inside(["ip", "link", "set", "lo", "up"]))
        queue = 17000 + os.getpid() % 10000  # a queue number of this run's own
        for device, wrap in ((outer, list), (inner, self.inside)):
            # the rate: an HTB class every packet leaving this end goes through
            self._run(wrap(["tc", "qdisc", "add", "dev", device, "root", "handle", "1:", "htb",
                            "default", "1"]))  # fmt: skip
            self._run(wrap(["tc", "class", "add", "dev", device, "parent", "1:", "classid",
                            "1:1", "htb", "rate", self.rate, "ceil", self.rate]))  # fmt: skip
            # the delay: what this end receives waits in a queue of the delay program
            rule = ["PREROUTING", "-i", device, "-j", "NFQUEUE", "--queue-num", str(queue)]
            self._run(wrap(["iptables", "-t", "mangle", "-A", *rule]),
                      undo=wrap(["iptables", "-t", "mangle", "-D", *rule]))  # fmt: skip
            self._start_delay(wrap([sys.executable, str(DELAY_SCRIPT), "--queue", str(queue),
                                    "--delay-ms", str(self.rtt_ms / 2)]))  # fmt: skip
            queue += 1

    def _start_delay(self, command: list[str]) -> None:
        delay = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)  # fmt: skip
        self._delays.append(delay)
        assert delay.stdout is not None and delay.stderr is not None
        if delay.stdout.readline().strip() != "ready":
            delay.wait(timeout=10)
            raise OSError(f"the delay program did not start: {delay.stderr.read().strip()}")

    def delay_cpu_seconds(self) -> float:
        """CPU seconds the delay programs have used so far (both ends)."""
        total = 0.0
        for delay in self._delays:
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{delay.pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def close(self) -> None:
        """Every step undone, last first, each tolerating what was never made."""
        for delay in self._delays:
            delay.terminate()
        for delay in self._delays:
            try:
                delay.wait(timeout=5)
            except subprocess.TimeoutExpired:
                delay.kill()
                delay.wait()
        self._delays.clear()
        while self._undo:
            subprocess.run(self._undo.pop(), capture_output=True)
