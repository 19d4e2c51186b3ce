"""Client quotas (issue 23): DescribeClientQuotas and AlterClientQuotas through `strandctl
quota`, and their enforcement as Kafka does it: a producer (confluent-kafka) with a
`producer_byte_rate` quota on its client id writes at that rate (within 10%, measured
after the window's first burst) and sees throttle_time_ms in its statistics; a consumer
with a `consumer_byte_rate` quota reads at its rate; another client id is not slowed; a
client with a `request_percentage` quota is throttled once its requests took more of the
shard's time than that, and told so in its answers.
The broker measures over 4 windows of 1 s (`--quota-window-num 4`) so that the test is
short; Kafka's default is 11."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from strand_harness import need, need_module

RATE = 300_000  # bytes per second
VALUE = b"x" * 10_000


@pytest.fixture
def quota_broker(strand):
    from test_strandctl import strandctl_bin
    need(strandctl_bin().exists(), f"strandctl not found at {strandctl_bin()}")
    return strand(extra_args=["--quota-window-num", "4", "--quota-window-size-seconds", "1"])


def produce_for(b, topic: str, client_id: str, seconds: float):
    """Produces VALUE as fast as the broker lets it for `seconds`: (acked bytes per
    second after the first 4 s, the largest throttle time the client reported)."""
    ck = need_module("confluent_kafka")
    throttles = []

    def stats(s):
        for br in json.loads(s).get("brokers", {}).values():
            throttles.append(br.get("throttle", {}).get("max", 0))

    acked = []
    # Requests of at most 64 KiB: a quota is measured per request, so one request much
    # larger than a second's quota would make the measure coarse (as with Kafka).
    p = ck.Producer({"bootstrap.servers": b.bootstrap, "client.id": client_id, "acks": 1,
                     "linger.ms": 5, "batch.size": 65536,
                     "queue.buffering.max.kbytes": 1024,
                     "statistics.interval.ms": 500, "stats_cb": stats})
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            p.produce(topic, VALUE, partition=0,
                      on_delivery=lambda e, m: e is None and acked.append(time.monotonic()))
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.flush(30)
    steady = [t for t in acked if start + 4 <= t <= start + seconds]
    rate = len(steady) * len(VALUE) / (seconds - 4)
    return rate, max(throttles, default=0)


def test_a_producer_is_held_to_its_quota_and_told_its_throttle_time(quota_broker, topic):
    from test_strandctl import ctl
    b = quota_broker
    ctl(b, "quota", "set", "--client-id", "throttled", "--producer-byte-rate", str(RATE))
    ctl(b, "quota", "set", "--default-user", "--consumer-byte-rate", "5000000")
    out = ctl(b, "quota", "list").stdout
    assert "throttled" in out and "producer_byte_rate" in out and "<default>" in out, out
    out = ctl(b, "quota", "list", "--client-id", "throttled").stdout
    assert "consumer_byte_rate" not in out, out
    rate, throttle = produce_for(b, topic, "throttled", 12)
    assert abs(rate - RATE) <= 0.1 * RATE, f"{rate:.0f} B/s against a quota of {RATE}"
    assert throttle > 0, "the client saw no throttle time"
    # Another client id is not held to it.
    free_rate, _ = produce_for(b, topic, "free", 6)
    assert free_rate > 2 * RATE, free_rate
    ctl(b, "quota", "remove", "--client-id", "throttled", "--key", "producer_byte_rate")
    assert "throttled" not in ctl(b, "quota", "list").stdout


def test_a_consumer_is_held_to_its_quota(quota_broker, topic):
    ck = need_module("confluent_kafka")
    from test_strandctl import ctl
    b = quota_broker
    p = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "batch.size": 65536})
    for _ in range(600):  # 6 MB
        p.produce(topic, VALUE, partition=0)
        p.poll(0)
    assert p.flush(60) == 0
    ctl(b, "quota", "set", "--client-id", "slow-reader", "--consumer-byte-rate", str(RATE))
    c = ck.Consumer({"bootstrap.servers": b.bootstrap, "client.id": "slow-reader",
                     "group.id": topic, "max.partition.fetch.bytes": 65536})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    start, got = time.monotonic(), []
    while time.monotonic() - start < 12:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append(time.monotonic())
    c.close()
    steady = [t for t in got if start + 4 <= t <= start + 12]
    rate = len(steady) * len(VALUE) / 8
    assert abs(rate - RATE) <= 0.1 * RATE, f"{rate:.0f} B/s against a quota of {RATE}"


def test_bad_quotas_are_refused(quota_broker):
    from test_strandctl import ctl
    b = quota_broker
    r = ctl(b, "quota", "set", "--client-id", "c", "--producer-byte-rate", "0", expect_rc=None)
    assert r.returncode != 0 and "positive" in r.stderr
    r = ctl(b, "quota", "remove", "--client-id", "c", "--key", "controller_mutation_rate",
            expect_rc=None)
    assert r.returncode != 0 and "not supported" in r.stderr, r.stderr


def metadata_requests(b, client_id: str, seconds: float) -> tuple[int, int]:
    """Sends Metadata v9 requests (all topics) one after another for `seconds` on one
    connection: (requests answered, the largest throttle_time_ms answered)."""
    import socket
    import struct
    cid = client_id.encode()
    # Header v2 (flexible): key, version, correlation id, client id, no tagged fields;
    # body: topics null, allow_auto_topic_creation, two include_* flags, no tagged fields.
    count, most, start = 0, 0, time.monotonic()
    with socket.create_connection(("127.0.0.1", b.port), timeout=10) as s:
        while time.monotonic() - start < seconds:
            msg = (struct.pack(">hhih", 3, 9, count, len(cid)) + cid + b"\0"
                   + b"\0" + b"\0" + b"\0" + b"\0" + b"\0")
            s.sendall(struct.pack(">i", len(msg)) + msg)
            head = b""
            while len(head) < 4:
                head += s.recv(4 - len(head))
            size = struct.unpack(">i", head)[0]
            resp = b""
            while len(resp) < size:
                resp += s.recv(size - len(resp))
            # Correlation id, header tagged fields (one 0 byte), then throttle_time_ms.
            assert struct.unpack(">i", resp[:4])[0] == count
            most = max(most, struct.unpack(">i", resp[5:9])[0])
            count += 1
    return count, most


def test_a_client_over_its_request_percentage_is_throttled(quota_broker):
    """`request_percentage` 1 (1% of a shard's time, 10 ms per second): a client sending
    Metadata requests back to back is throttled and told so in throttle_time_ms; a client
    id without the quota is not."""
    from test_strandctl import ctl
    b = quota_broker
    ctl(b, "quota", "set", "--client-id", "chatty", "--request-percentage", "1")
    assert "request_percentage" in ctl(b, "quota", "list").stdout
    # Both at once, so that the machine's load (other tests, CI neighbours) is the same for
    # both: measured one after the other, a busier first half made the ratio fail.
    with ThreadPoolExecutor(max_workers=2) as pool:
        quiet = pool.submit(metadata_requests, b, "quiet", 3)
        chatty = pool.submit(metadata_requests, b, "chatty", 3)
        (free, free_throttle), (held, held_throttle) = quiet.result(), chatty.result()
    assert free_throttle == 0, free_throttle
    assert held_throttle > 0, "no throttle time answered"
    assert held < free / 3, f"{held} requests throttled against {free} free"
