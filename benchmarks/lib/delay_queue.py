"""A fixed delay on the packets a firewall rule hands to an NFQUEUE: each packet is held
``--delay-ms`` from its arrival, then let through, in the order it came. The shaped link
of ``benchmarks/object_storage.py`` (:mod:`benchmarks.lib.shaped_link`) runs one in each
network namespace, on the packets it *receives* (PREROUTING): delaying a sender's own
packets instead throttles TCP through TCP Small Queues, and ``netem``, which would do
this in the kernel, is not in every kernel.

It speaks nfnetlink_queue itself, over a netlink socket (no library: the messages are
a few fixed structs). Its cost is per packet, and a link carries tens of thousands a
second, so it asks for the packets' metadata only, never their bytes; has a
segmentation-offloaded packet (up to 64 KiB) queued whole, not cut to the MTU first;
reads the queue every half millisecond while it holds packets, not at each one; and
lets every due packet through with one batch verdict. Run as root, in the namespace::

    ip netns exec NS python benchmarks/lib/delay_queue.py --queue 7 --delay-ms 20

It prints ``ready`` once bound, and runs until it is signalled (SIGTERM or SIGINT): the
packets it holds then are let through at once.
"""

from __future__ import annotations

import argparse
import collections
import errno
import os
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Iterator

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = NFNL_SUBSYS_QUEUE << 8 | 0
NFQNL_MSG_CONFIG = NFNL_SUBSYS_QUEUE << 8 | 2
NFQNL_MSG_VERDICT_BATCH = NFNL_SUBSYS_QUEUE << 8 | 3
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQA_CFG_MASK, NFQA_CFG_FLAGS = 4, 5
NFQA_CFG_F_GSO = 1 << 2
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NF_ACCEPT = 1
#: Packets the kernel may hold for the queue: a 1 Gbit/s link 20 ms deep holds ~1,700
#: full-size packets; past the limit the kernel drops them (TCP then resends).
QUEUE_LENGTH = 1 << 16
#: How often a queue holding packets is read: each packet's delay 0.5 ms longer at most.
TICK = 0.0005


def _attribute(kind: int, payload: bytes) -> bytes:
    """A netlink attribute: its length, its type, the payload, padded to 4 bytes."""
    data = struct.pack("=HH", 4 + len(payload), kind) + payload
    return data + b"\0" * (-len(data) % 4)


def message(kind: int, queue: int, attributes: bytes, *, sequence: int, ack: bool) -> bytes:
    """An nfnetlink message to queue ``queue``: the netlink header, the nfnetlink header
    (family unspecified, version 0, the queue number big-endian), the attributes."""
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attributes
    flags = NLM_F_REQUEST | (NLM_F_ACK if ack else 0)
    return struct.pack("=IHHII", 16 + len(body), kind, flags, sequence, 0) + body


def bind_messages(queue: int, length: int = QUEUE_LENGTH) -> list[bytes]:
    """The configuration that binds this socket to ``queue``, asks for metadata only
    (no packet bytes are copied), and lets the kernel hold ``length`` packets."""
    return [
        message(NFQNL_MSG_CONFIG, queue,
                _attribute(NFQA_CFG_CMD, struct.pack(">BxH", NFQNL_CFG_CMD_BIND, 0)),
                sequence=1, ack=True),
        message(NFQNL_MSG_CONFIG, queue,
                _attribute(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META))
                + _attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", length))
                + _attribute(NFQA_CFG_FLAGS, struct.pack(">I", NFQA_CFG_F_GSO))
                + _attribute(NFQA_CFG_MASK, struct.pack(">I", NFQA_CFG_F_GSO)),
                sequence=2, ack=True),
    ]  # fmt: skip


def accept_up_to(queue: int, packet: int) -> bytes:
    """One verdict letting through every packet of ``queue`` numbered up to ``packet``."""
    verdict = _attribute(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, packet))
    return message(NFQNL_MSG_VERDICT_BATCH, queue, verdict, sequence=0, ack=False)


def messages(data: bytes) -> Iterator[tuple[int, bytes]]:
    """The (type, payload after the netlink header) of each message in ``data``."""
    offset = 0
    while offset + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < 16:
            return
        yield kind, data[offset + 16 : offset + length]
        offset += length + (-length % 4)


def packet_number(payload: bytes) -> int | None:
    """The packet number of a queued packet's message (its NFQA_PACKET_HDR)."""
    offset = 4  # the nfnetlink header
    while offset + 4 <= len(payload):
        length, kind = struct.unpack_from("=HH", payload, offset)
        if length < 4:
            return None
        if kind & 0x7FFF == NFQA_PACKET_HDR:
            return int(struct.unpack_from(">I", payload, offset + 4)[0])
        offset += length + (-length % 4)
    return None


def error_of(payload: bytes) -> int:
    """The error code an NLMSG_ERROR carries (0: an acknowledgement)."""
    return -int(struct.unpack_from("=i", payload)[0])


class DelayQueue:
    """Holds each packet of NFQUEUE ``queue`` for ``delay_s``, then lets it through."""

    def __init__(self, queue: int, delay_s: float) -> None:
        self.queue, self.delay_s = queue, delay_s
        self.socket = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:  # room for a burst of packet messages (root may pass the system's cap)
            self.socket.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
        except OSError:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
        self.socket.bind((0, 0))
        for request in bind_messages(queue):
            self.socket.send(request)
            for kind, payload in messages(self.socket.recv(65536)):
                if kind == NLMSG_ERROR and error_of(payload):
                    code = error_of(payload)
                    raise OSError(code, f"NFQUEUE {queue}: {os.strerror(code)}")
        self.held: collections.deque[tuple[float, int]] = collections.deque()
        self.stopped = False

    def run(self) -> None:
        """Until :meth:`stop`: take packets as they come, let each through when due.
        While packets are held, the queue is read every :data:`TICK` seconds rather
        than at each packet: a wake-up costs more than the packets it reads. A packet is
        so held for the delay at least, and a tick longer at most."""
        while not self.stopped:
            if self.held:
                time.sleep(max(0.0, min(TICK, self.held[0][0] - time.monotonic())))
                self._take()
            elif select.select([self.socket], [], [], 0.2)[0]:
                self._take()
            self._release(time.monotonic())
        self._release(float("inf"))

    def stop(self, *_: object) -> None:
        self.stopped = True

    def _take(self) -> None:
        """Every packet message waiting on the socket, held as one entry: they came
        within a tick, and one batch verdict lets them all through."""
        last = None
        while True:
            try:
                data = self.socket.recv(65536, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as error:  # ENOBUFS: the kernel dropped messages, and packets
                if error.errno != errno.ENOBUFS:
                    raise
                continue
            for kind, payload in messages(data):
                if kind == NFQNL_MSG_PACKET and (number := packet_number(payload)) is not None:
                    last = number
        if last is not None:
            self.held.append((time.monotonic() + self.delay_s, last))

    def _release(self, now: float) -> None:
        last = None
        while self.held and self.held[0][0] <= now:
            last = self.held.popleft()[1]
        if last is not None:
            self.socket.send(accept_up_to(self.queue, last))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", type=int, required=True, help="the NFQUEUE number")
    parser.add_argument("--delay-ms", type=float, required=True, help="each packet's delay")
    args = parser.parse_args()
    delay = DelayQueue(args.queue, args.delay_ms / 1000)
    signal.signal(signal.SIGTERM, delay.stop)
    signal.signal(signal.SIGINT, delay.stop)
    print("ready", flush=True)
    delay.run()


if __name__ == "__main__":
    sys.exit(main())
