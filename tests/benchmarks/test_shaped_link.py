"""benchmarks/lib/shaped_link.py and its delay program: the messages it speaks to the
kernel, and, where this machine permits it (root, namespaces, tc, iptables), a real link:
a round trip no shorter than the delay asked for, a transfer no faster than the rate, and
nothing left behind once it is closed, a half-made one included."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time

import pytest

from benchmarks.lib import delay_queue
from benchmarks.lib.shaped_link import ShapedLink, parse_link, why_not


def test_the_bind_asks_for_the_queue_metadata_only_room_for_a_burst_and_whole_gso_packets():
    bind, params = delay_queue.bind_messages(7, length=4096)
    length, kind, flags = struct.unpack_from("=IHH", bind)
    assert (length, kind, flags) == (len(bind), 0x302, 1 | 4)  # config, a request acked
    assert struct.unpack_from(">H", bind, 18)[0] == 7  # the queue, big-endian
    assert bind[20:28] == struct.pack("=HH", 8, 1) + struct.pack(">BxH", 1, 0)  # BIND
    # copy mode META (no packet bytes), then the queue's length
    assert params[20:32] == struct.pack("=HH", 9, 2) + struct.pack(">IB", 0, 1) + b"\0" * 3
    assert params[32:40] == struct.pack("=HH", 8, 3) + struct.pack(">I", 4096)
    # a segmentation-offloaded packet queued whole, not cut into MTU-sized ones first
    assert params[40:56] == (struct.pack("=HH", 8, 5) + struct.pack(">I", 4)
                             + struct.pack("=HH", 8, 4) + struct.pack(">I", 4))  # fmt: skip
    assert len(params) == 56


def test_a_batch_verdict_accepts_every_packet_up_to_the_one_named():
    verdict = delay_queue.accept_up_to(7, 42)
    [(kind, payload)] = list(delay_queue.messages(verdict))
    assert kind == 0x303 and payload[4:] == struct.pack("=HH", 12, 2) + struct.pack(">II", 1, 42)


def test_a_queued_packets_number_is_read_from_its_header_among_other_attributes():
    header = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(7))
    other = struct.pack("=HH", 8, 9) + b"\0\0\0\5"  # an attribute before the header
    packet = struct.pack("=HH", 11, 1) + struct.pack(">IHB", 1234, 0x0800, 1) + b"\0"
    data = delay_queue.message(0x300, 7, other + packet, sequence=0, ack=False)
    [(kind, payload)] = list(delay_queue.messages(data))
    assert kind == 0x300 and delay_queue.packet_number(payload) == 1234
    assert header == payload[:4]


@pytest.mark.parametrize("text", ["40", "x,400mbit", "40,fast", "-1,1gbit", ",1gbit"])
def test_a_link_that_is_not_rtt_and_rate_is_refused_naming_it(text):
    with pytest.raises(ValueError, match=rf"--link '{text}': give RTT_MS,RATE"):
        parse_link(text)


ECHO = """
import socket, sys
server = socket.create_server((sys.argv[1], 0))
print(server.getsockname()[1], flush=True)
connection, _ = server.accept()
connection.sendall(connection.recv(1))  # a round trip
connection.sendall(b"x" * int(sys.argv[2]))  # then a transfer
connection.close()
"""


def leftovers(link: ShapedLink) -> list[str]:
    """What of ``link`` is still on the machine: its namespace, its veth, its rules."""
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    rules = subprocess.run(["iptables", "-t", "mangle", "-S"], capture_output=True, text=True)
    found = [link.namespace] if link.namespace in namespaces else []
    found += [f"{link.name}a"] if f"{link.name}a:" in links else []
    return found + [line for line in rules.stdout.splitlines() if f"{link.name}a" in line]


@pytest.mark.slow
@pytest.mark.skipif(why_not() is not None, reason=f"no shaped link here: {why_not()}")
def test_a_shaped_link_delays_each_way_limits_the_rate_and_leaves_nothing_behind():
    size = 500_000  # 4 Mbit: at least 1 s at 4 Mbit/s
    link = ShapedLink(rtt_ms=100, rate="4mbit")
    with link:
        command = link.inside([sys.executable, "-c", ECHO, link.server_address, str(size)])
        echo = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        port = int(echo.stdout.readline())
        with socket.create_connection((link.server_address, port), timeout=30) as connection:
            start = time.monotonic()
            connection.sendall(b"?")
            assert connection.recv(1) == b"?"
            round_trip = time.monotonic() - start
            received, start = 0, time.monotonic()
            while chunk := connection.recv(1 << 16):
                received += len(chunk)
            transfer = time.monotonic() - start
        echo.wait(timeout=30)
        assert link.delay_cpu_seconds() > 0
    # bounds only a slower machine can widen: never shorter than the delay, never faster
    # than the rate
    assert round_trip >= 0.1 and received == size
    assert transfer >= 0.9 * size * 8 / 4e6
    assert leftovers(link) == []


@pytest.mark.skipif(why_not() is not None, reason=f"no shaped link here: {why_not()}")
def test_a_set_up_that_fails_half_way_is_undone():
    link = ShapedLink(rtt_ms=10, rate="1zbit")  # tc refuses the rate after the veth is made
    with pytest.raises(subprocess.CalledProcessError), link:
        pass
    assert leftovers(link) == []


@pytest.mark.slow
@pytest.mark.skipif(why_not() is not None, reason=f"no shaped link here: {why_not()}")
def test_a_shard_set_is_read_exactly_from_s3_across_the_link(tmp_path, monkeypatch):
    boto3 = pytest.importorskip("boto3", reason="S3 needs boto3: pip install '.[s3]'")
    from fastload import FastLoader, ImageFolder, make_image_folder
    from fastload.shards import ShardedDataset, ShardShuffle, write_shards
    from fastload.testing.s3server import LocalS3, swift_installed

    if not swift_installed():
        pytest.skip("the local S3 server needs OpenStack Swift: pip install swift")
    folder = make_image_folder(tmp_path / "images", num_classes=2, images_per_class=6,
                               size=(32, 24))  # fmt: skip
    with ShapedLink(rtt_ms=40, rate="50mbit") as link:
        with LocalS3(host=link.server_address, launch=link.inside) as server:
            assert server.endpoint.startswith(f"http://{link.server_address}:")
            for name, value in server.environment().items():
                monkeypatch.setenv(name, value)
            boto3.client("s3", **server.client_options()).create_bucket(Bucket="data")
            write_shards(folder, "s3://data/set", shard_size=5_000)
            dataset = ShardedDataset("s3://data/set", cache_dir=tmp_path / "cache")
            sampler = ShardShuffle(dataset, global_batch_size=4, seed=0, window=2)
            loader = FastLoader(dataset, batch_size=4, sampler=sampler, num_workers=0)
            labels = [label for _, batch in loader for label in batch.tolist()]
        assert link.delay_cpu_seconds() > 0  # the requests crossed the delayed link
    reference = ImageFolder(folder)
    assert labels == [reference[index][1] for index in sampler.rank_order()]
    assert leftovers(link) == []
