"""Record content through strand with confluent-kafka: every compression codec, headers,
null keys and values, CreateTime timestamps, a ~1 MiB record, and a fetch from the middle
of a batch (the client drops the records before the requested offset)."""

from __future__ import annotations

import pytest

from strand_harness import need_module


@pytest.fixture
def ck():
    return need_module("confluent_kafka")


def consume(ck, broker, topic, partition, offset, n, timeout_s=20.0):
    import time

    c = ck.Consumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": "strand-tests-unused",
        "enable.auto.commit": False,
        "fetch.message.max.bytes": 4 * 1024 * 1024,
    })
    c.assign([ck.TopicPartition(topic, partition, offset)])
    out = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append(m)
    c.close()
    assert len(out) == n, f"consumed {len(out)} of {n}"
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_codecs_headers_nulls_and_timestamps_round_trip(ck, broker, topic, codec):
    p = ck.Producer({
        "bootstrap.servers": broker.bootstrap,
        "compression.type": codec,
        "linger.ms": 20,
        "acks": "all",
        "enable.idempotence": False,
    })
    base_ts = 1_700_000_000_000
    sent = []
    for i in range(50):
        key = None if i % 7 == 0 else f"k{i}".encode()
        value = None if i % 11 == 0 else (f"value-{i}-" * 20).encode()
        headers = [("h", f"{i}".encode()), ("empty", b""), ("none", None)]
        p.produce(topic, key=key, value=value, headers=headers, partition=0, timestamp=base_ts + i)
        sent.append((key, value, base_ts + i, i))
    assert p.flush(20) == 0
    got = consume(ck, broker, topic, 0, 0, len(sent))
    for m, (key, value, ts, i) in zip(got, sent):
        assert m.offset() == i
        assert m.key() == key
        assert m.value() == value
        assert m.timestamp() == (ck.TIMESTAMP_CREATE_TIME, ts)
        assert m.headers() == [("h", f"{i}".encode()), ("empty", b""), ("none", None)]
    # From the middle of a (compressed) batch: the first record returned is the one asked.
    mid = consume(ck, broker, topic, 0, 23, 5)
    assert [m.offset() for m in mid] == [23, 24, 25, 26, 27]


def test_one_mib_record_round_trips(ck, broker, topic):
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                     "enable.idempotence": False, "message.max.bytes": 2 * 1024 * 1024})
    value = bytes(range(256)) * (1_000_000 // 256)
    p.produce(topic, value=value, partition=0)
    assert p.flush(20) == 0
    [m] = consume(ck, broker, topic, 0, 0, 1)
    assert m.value() == value
