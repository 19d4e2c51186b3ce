"""Hostile or broken bytes on the Kafka port: only the offending connection is closed,
nothing is allocated for an absurd length, and ApiVersions at an unknown version is
answered (KAFKA-NOTES.md, Framing and negotiation)."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest

from strand_harness import (api_versions_v0, closed_by_peer, frame, parse_api_versions_v0,
                            recv_response)


def connect(broker) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    s.settimeout(10)
    return s


def assert_serves(broker, sock: socket.socket | None = None):
    """ApiVersions v0 is answered with the advertised ranges (on `sock` or a new one)."""
    own = sock is None
    s = connect(broker) if own else sock
    try:
        err, ranges = api_versions_v0(s, correlation_id=4242)
        assert err == 0
        apis = {r[0] for r in ranges}
        assert {0, 1, 2, 3, 18}.issubset(apis), (
            f"Produce/Fetch/ListOffsets/Metadata/ApiVersions missing: {ranges}")
    finally:
        if own:
            s.close()


@pytest.mark.parametrize("length", [2**31 - 1, -1, -(2**31), 100 * 1024 * 1024 + 1])
def test_absurd_length_prefix_closes_only_that_connection(broker, length):
    bystander = connect(broker)
    assert_serves(broker, bystander)
    s = connect(broker)
    s.sendall(struct.pack(">i", length) + b"\x00\x12\x00\x00")
    assert closed_by_peer(s), f"length {length}: connection not closed"
    s.close()
    # The broker process is still up, serves new connections and the old ones.
    assert broker.running()
    assert_serves(broker)
    assert_serves(broker, bystander)
    bystander.close()


def test_zero_length_frame_closes_the_connection(broker):
    s = connect(broker)
    s.sendall(struct.pack(">i", 0))
    assert closed_by_peer(s)
    s.close()
    assert_serves(broker)


def test_api_versions_v127_is_answered_with_unsupported_version_and_v0_ranges(broker):
    s = connect(broker)
    try:
        # A future client sends ApiVersions at a version we cannot parse; its header would
        # be flexible (v2), but the broker must answer from the fixed part alone.
        s.sendall(frame(18, 127, 99, body=os.urandom(17), flexible=True))
        resp = recv_response(s)
        err, ranges = parse_api_versions_v0(resp, 99)
        assert err == 35, f"error code {err}, expected UNSUPPORTED_VERSION (35)"
        by_api = {api: (lo, hi) for api, lo, hi in ranges}
        assert 18 in by_api and by_api[18][0] == 0 and by_api[18][1] >= 3, by_api
        for api in (0, 1, 2, 3):
            assert api in by_api, f"api {api} missing from {by_api}"
            lo, hi = by_api[api]
            assert 0 <= lo <= hi, (api, lo, hi)
        # The connection stays usable: the client retries at a version both know.
        assert_serves(broker, s)
    finally:
        s.close()


@pytest.mark.parametrize("payload", [
    pytest.param(b"\xff\xff\x00\x00\x00\x00\x00\x01" + b"garbage!" * 4, id="unknown-api-key"),
    pytest.param(b"\x00\x03\x7f\x00\x00\x00\x00\x01\x00\x00", id="metadata-v32512"),
    pytest.param(os.urandom(3), id="shorter-than-header"),
    pytest.param(bytes(range(256)) * 4, id="noise"),
])
def test_garbage_frame_closes_only_that_connection(broker, payload):
    bystander = connect(broker)
    assert_serves(broker, bystander)
    s = connect(broker)
    s.sendall(struct.pack(">i", len(payload)) + payload)
    assert closed_by_peer(s), "a garbage frame should close its connection"
    s.close()
    assert broker.running()
    assert_serves(broker, bystander)
    assert_serves(broker)
    bystander.close()


def test_huge_array_count_in_small_frame_is_refused_without_allocating(strand):
    """Metadata v4 whose topics array claims 2^31-1 entries in a 30-byte frame.
    (Its own broker: a broker that aborts here must not take the other tests with it.)"""
    broker = strand(smp=1)
    body = struct.pack(">i", 2**31 - 1) + b"\x00\x04abcd" + b"\x01"
    s = connect(broker)
    s.sendall(frame(3, 4, 5, body=body))
    assert closed_by_peer(s), "a frame that cannot hold its array should close the connection"
    s.close()
    assert broker.running()
    assert_serves(broker)


def test_truncated_frame_then_disconnect_does_not_hurt_the_broker(broker):
    s = connect(broker)
    s.sendall(struct.pack(">i", 1000) + b"\x00\x12\x00\x00")  # 8 of 1000 bytes, then gone
    s.close()
    assert_serves(broker)


def test_a_client_that_stops_reading_leaves_a_late_response_warning(broker):
    """A client that keeps sending but stops reading holds the broker's response writes
    (responses go out in request order). Nothing is lost: every answer arrives, in order,
    once it reads again, and the broker logs that responses reached the socket late, the
    evidence a stalled connection leaves (issue 28's soak lost a producer's requests to a
    30 s stall that no handler-side warning saw)."""
    count = 40_000  # ~10 MB of answers: more than the socket buffers hold (tcp_wmem max 4 MiB)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: writes block
    s.settimeout(30)
    s.connect(("127.0.0.1", broker.port))
    requests = b"".join(frame(18, 0, i) for i in range(count))
    sender = threading.Thread(target=s.sendall, args=(requests,), daemon=True)
    sender.start()
    time.sleep(6.5)  # past SLOW_REQUEST_WARN (5 s) with the broker's writes blocked
    for i in range(count):
        resp = recv_response(s)
        assert struct.unpack(">i", resp[:4])[0] == i
    sender.join(10)
    s.close()
    log = broker.stderr_path
    deadline = time.monotonic() + 10
    while "a Kafka response reached the socket late" not in log.read_text():
        assert time.monotonic() < deadline, "no late-response warning in the broker log"
        time.sleep(0.1)
    text = log.read_text()
    assert 'api="api_versions"' in text, text[-2000:]
    assert_serves(broker)
