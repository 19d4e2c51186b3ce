"""The fault-injecting proxy of cluster_harness.py against a local echo server, no broker:
it forwards per shard port, a reset cut closes connections and refuses new ones, a
blackhole cut forwards nothing until the heal and then delivers what it held, and a link
stays cut while either end is. Also the hand-encoded Metadata v1 parser."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from cluster_harness import (
    CUT_BLACKHOLE,
    CUT_RESET,
    FaultProxy,
    PortAllocator,
    parse_metadata_v1,
)
from strand_harness import wait_until

SMP = 2


class EchoServer:
    """Echoes on SMP consecutive ports, prefixing each reply with its shard number."""

    def __init__(self, ports: PortAllocator):
        self.socks = ports.bind_block(SMP)
        self.port = self.socks[0].getsockname()[1]
        self.stop = threading.Event()
        for shard, s in enumerate(self.socks):
            threading.Thread(target=self._accept, args=(s, shard), daemon=True).start()

    def _accept(self, lsock, shard):
        while not self.stop.is_set():
            try:
                c, _ = lsock.accept()
            except (socket.timeout, OSError):
                continue
            c.settimeout(None)
            threading.Thread(target=self._echo, args=(c, shard), daemon=True).start()

    @staticmethod
    def _echo(c, shard):
        with c:
            while True:
                try:
                    data = c.recv(4096)
                except OSError:
                    return
                if not data:
                    return
                c.sendall(bytes([shard]) + data)

    def close(self):
        self.stop.set()
        for s in self.socks:
            s.close()


@pytest.fixture
def net():
    ports = PortAllocator()
    echo = EchoServer(ports)
    proxy = FaultProxy(ports)
    # Node 1 -> node 2 (the echo server) and node 3 -> node 2.
    p12 = proxy.add_link(1, 2, echo.port, SMP)
    p32 = proxy.add_link(3, 2, echo.port, SMP)
    yield proxy, p12, p32
    proxy.close()
    echo.close()


def dial(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(5)
    return s


def roundtrip(s: socket.socket, payload: bytes) -> bytes:
    s.sendall(payload)
    want = len(payload) + 1
    got = b""
    while len(got) < want:
        chunk = s.recv(want - len(got))
        if not chunk:
            raise ConnectionError(f"closed after {got!r}")
        got += chunk
    return got


def refused(port: int) -> bool:
    """A connection is reset at once: the connect itself may fail, or the first read."""
    try:
        s = dial(port)
    except OSError:
        return True
    with s:
        return closed(s)


def closed(s: socket.socket, timeout: float = 5) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_each_shard_port_forwards_to_the_same_shard_of_the_target(net):
    proxy, p12, _ = net
    for shard in range(SMP):
        with dial(p12 + shard) as s:
            assert roundtrip(s, b"hello") == bytes([shard]) + b"hello"
    stats = proxy.stats()[(1, 2)]
    assert stats.accepted == SMP and stats.refused == 0
    # The proxy counts a chunk after sending it, so the reply may arrive first.
    wait_until(lambda: proxy.stats()[(1, 2)].forwarded_bytes == SMP * (5 + 6), 5,
               "both request and reply bytes counted")


def test_a_reset_cut_closes_connections_refuses_new_ones_until_the_heal(net):
    proxy, p12, p32 = net
    s = dial(p12)
    assert roundtrip(s, b"a") == b"\x00a"
    other = dial(p32)
    proxy.cut(1, CUT_RESET)
    assert closed(s), "the cut left a connection of node 1 open"
    s.close()
    assert refused(p12)  # the kernel accepts; the proxy resets at once
    # Node 3 -> node 2 does not involve node 1.
    assert roundtrip(other, b"b") == b"\x00b"
    assert proxy.stats()[(1, 2)].refused == 1
    proxy.heal(1)
    with dial(p12) as s3:
        assert roundtrip(s3, b"c") == b"\x00c"
    other.close()


def test_cutting_the_target_cuts_every_link_towards_it(net):
    proxy, p12, p32 = net
    a, b = dial(p12), dial(p32)
    proxy.cut(2)
    assert closed(a) and closed(b)
    a.close()
    b.close()
    proxy.heal()
    with dial(p32) as s:
        assert roundtrip(s, b"x") == b"\x00x"


def test_a_blackhole_holds_traffic_and_delivers_it_after_the_heal(net):
    proxy, p12, _ = net
    s = dial(p12)
    assert roundtrip(s, b"before") == b"\x00before"
    proxy.cut(1, CUT_BLACKHOLE)
    s.sendall(b"during")
    s.settimeout(0.5)
    with pytest.raises(socket.timeout):
        s.recv(16)
    late = dial(p12)  # accepted and held, not connected upstream
    late.sendall(b"held")
    proxy.heal(1)
    s.settimeout(5)
    assert s.recv(16) == b"\x00during"
    assert late.recv(16) == b"\x00held"
    s.close()
    late.close()


def test_a_link_stays_cut_while_either_end_is(net):
    proxy, p12, _ = net
    proxy.cut(1)
    proxy.cut(2)
    proxy.heal(1)
    assert refused(p12), "2 is still cut"
    proxy.heal(2)
    with dial(p12) as s:
        assert roundtrip(s, b"ok") == b"\x00ok"


def test_close_ends_every_connection(net):
    proxy, p12, _ = net
    s = dial(p12)
    assert roundtrip(s, b"z") == b"\x00z"
    proxy.close()
    assert closed(s)
    s.close()
    wait_until(lambda: proxy.stats()[(1, 2)].active == 0, 5, "no active connection")


def test_a_retargeted_link_dials_the_new_port(net):
    proxy, p12, _ = net
    ports = PortAllocator()
    moved = EchoServer(ports)
    try:
        proxy.retarget(2, moved.port)
        with dial(p12 + 1) as s:
            assert roundtrip(s, b"m") == b"\x01m"
    finally:
        moved.close()


def _str(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(s)) + s.encode()


def test_metadata_v1_parser_reads_brokers_controller_leaders_replicas_isr():
    body = struct.pack(">i", 77)  # correlation id
    body += struct.pack(">i", 2)
    body += struct.pack(">i", 1) + _str("127.0.0.1") + struct.pack(">i", 9092) + _str(None)
    body += struct.pack(">i", 3) + _str("127.0.0.1") + struct.pack(">i", 9292) + _str("r1")
    body += struct.pack(">i", 3)  # controller
    body += struct.pack(">i", 1)
    body += struct.pack(">h", 0) + _str("t") + struct.pack(">b", 0) + struct.pack(">i", 2)
    body += struct.pack(">hii", 0, 0, 3)  # error, partition 0, leader 3
    body += struct.pack(">iiii", 3, 1, 2, 3) + struct.pack(">iii", 2, 1, 3)  # replicas, isr
    body += struct.pack(">hii", 5, 1, -1) + struct.pack(">i", 0) + struct.pack(">i", 0)
    md = parse_metadata_v1(body, 77)
    assert md.brokers == {1: ("127.0.0.1", 9092), 3: ("127.0.0.1", 9292)}
    assert md.controller == 3
    p0, p1 = md.topics["t"][0], md.topics["t"][1]
    assert (p0.leader, p0.replicas, p0.isr) == (3, [1, 2, 3], [1, 3])
    assert (p1.error, p1.leader, p1.replicas) == (5, -1, [])
    with pytest.raises(AssertionError):
        parse_metadata_v1(body + b"\x00", 77)
