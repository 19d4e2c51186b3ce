"""kafka-python against strand: produce (no idempotence: InitProducerId is not
implemented), assign/seek consume, beginning/end offsets, MESSAGE_TOO_LARGE."""

from __future__ import annotations

import time

import pytest

from strand_harness import need_module


@pytest.fixture
def kp():
    return need_module("kafka")


def make_producer(kp, broker, **kw):
    conf = dict(bootstrap_servers=broker.bootstrap, enable_idempotence=False, acks="all",
                linger_ms=5, request_timeout_ms=15000, max_block_ms=15000)
    conf.update(kw)
    return kp.KafkaProducer(**conf)


def make_consumer(kp, broker, **kw):
    conf = dict(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                consumer_timeout_ms=1000, request_timeout_ms=15000)
    conf.update(kw)
    return kp.KafkaConsumer(**conf)


def read(consumer, count, timeout=30.0):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        assert time.monotonic() < deadline, f"got {len(out)} of {count} records in {timeout}s"
        for recs in consumer.poll(timeout_ms=500).values():
            out.extend(recs)
    return out


def test_produce_then_assign_seek_consume_and_offsets(broker, kp, topic):
    p = make_producer(kp, broker)
    n = 300
    futures = [p.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0)
               for i in range(n)]
    p.flush(timeout=30)
    metas = [f.get(timeout=30) for f in futures]
    assert [m.offset for m in metas] == list(range(n))
    assert {m.partition for m in metas} == {0}
    p.close(timeout=10)

    tp = kp.TopicPartition(topic, 0)
    c = make_consumer(kp, broker)
    try:
        c.assign([tp])
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: n}
        c.seek(tp, 0)
        got = read(c, n)
        assert [(r.offset, r.key, r.value) for r in got] == [
            (i, f"k{i}".encode(), f"v{i}".encode()) for i in range(n)]
        # Seek into the middle: a fetch inside a batch starts at the asked offset.
        c.seek(tp, 123)
        got = read(c, n - 123)
        assert got[0].offset == 123 and got[-1].offset == n - 1
        assert [r.value for r in got] == [f"v{i}".encode() for i in range(123, n)]
        c.seek_to_end(tp)
        assert c.position(tp) == n
    finally:
        c.close()


def test_record_bigger_than_message_max_bytes_gets_message_too_large(broker, kp, topic):
    # The broker default message.max.bytes is 1,048,588; raise the client's own limits so
    # that the broker, not the client, refuses the batch.
    p = make_producer(kp, broker, max_request_size=4 * 1024 * 1024, batch_size=16384,
                      retries=0)
    try:
        ok = p.send(topic, value=b"small", partition=0).get(timeout=30)
        assert ok.offset == 0
        big = b"x" * (2 * 1024 * 1024)
        fut = p.send(topic, value=big, partition=0)  # no client-side error: it is sent
        with pytest.raises(kp.errors.MessageSizeTooLargeError) as ei:
            fut.get(timeout=30)
        assert ei.value.errno == 10
        # Nothing of the refused batch landed; the next record takes the next offset.
        after = p.send(topic, value=b"after", partition=0).get(timeout=30)
        assert after.offset == 1
    finally:
        p.close(timeout=10)
    tp = kp.TopicPartition(topic, 0)
    c = make_consumer(kp, broker)
    try:
        c.assign([tp])
        assert c.end_offsets([tp]) == {tp: 2}
        c.seek(tp, 0)
        assert [r.value for r in read(c, 2)] == [b"small", b"after"]
    finally:
        c.close()
