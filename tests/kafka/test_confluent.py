"""confluent-kafka (librdkafka) against strand: admin, produce with every acks, assign()
consume, watermarks, offsets_for_times, topic create/delete errors, auto-create."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from strand_harness import admin_outcomes, need_module, wait_until


@pytest.fixture
def confluent():
    return need_module("confluent_kafka")


@pytest.fixture
def admin_cls():
    return need_module("confluent_kafka.admin")


def producer(ck, broker, **conf):
    base = {
        "bootstrap.servers": broker.bootstrap,
        "enable.idempotence": False,
        "linger.ms": 5,
        "message.timeout.ms": 30000,
    }
    base.update(conf)
    return ck.Producer(base)


def consumer(ck, broker, **conf):
    base = {
        "bootstrap.servers": broker.bootstrap,
        # A group.id is mandatory for librdkafka consumers; with assign() and no commits
        # no group coordinator request is made.
        "group.id": "strand-tests-unused",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
    }
    base.update(conf)
    return ck.Consumer(base)


def create_topic(ck_admin, broker, name, partitions):
    admin = ck_admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    fs = admin.create_topics([ck_admin.NewTopic(name, num_partitions=partitions,
                                                replication_factor=1)],
                             operation_timeout=10, request_timeout=15)
    fs[name].result(timeout=20)
    return admin


def produce_all(ck, p, topic, records, partition=None, timestamps=None):
    """Produces (key, value) records; returns delivery reports in callback order as
    (key, value, partition, offset, error)."""
    reports = []

    def cb(err, msg):
        reports.append((msg.key(), msg.value(), msg.partition(), msg.offset(), err))

    for i, (k, v) in enumerate(records):
        kw = {}
        if partition is not None:
            kw["partition"] = partition
        if timestamps is not None:
            kw["timestamp"] = timestamps[i]
        while True:
            try:
                p.produce(topic, key=k, value=v, on_delivery=cb, **kw)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    remaining = p.flush(30)
    assert remaining == 0, f"{remaining} records still queued after flush(30)"
    assert len(reports) == len(records), (len(reports), len(records))
    return reports


def consume_partition(ck, broker, topic, partition, count, start=0, timeout=30.0):
    """Reads `count` records of one partition from `start` with assign()."""
    c = consumer(ck, broker)
    try:
        c.assign([ck.TopicPartition(topic, partition, start)])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            assert time.monotonic() < deadline, (
                f"{topic}[{partition}]: got {len(out)} of {count} records in {timeout}s")
            msgs = c.consume(num_messages=500, timeout=0.5)
            for m in msgs:
                if m.error():
                    if m.error().code() == ck.KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consume error: {m.error()}")
                out.append(m)
        return out
    finally:
        c.close()


def test_admin_create_produce_1000_keyed_acks_all_and_consume_with_assign(
        broker, confluent, admin_cls, topic):
    ck = confluent
    create_topic(admin_cls, broker, topic, 3)
    p = producer(ck, broker, acks="all")
    records = [(f"key-{i % 97}".encode(), f"value-{i}".encode()) for i in range(1000)]
    reports = produce_all(ck, p, topic, records)

    errors = [r for r in reports if r[4] is not None]
    assert not errors, f"{len(errors)} failed deliveries, first: {errors[0]}"

    by_part = defaultdict(list)
    for key, value, part, off, _ in reports:
        by_part[part].append((off, key, value))
    assert set(by_part) <= {0, 1, 2}
    assert len(by_part) > 1, "keyed records should spread over the partitions"
    key_part = {}
    for part, rows in by_part.items():
        offsets = sorted(o for o, _, _ in rows)
        assert offsets == list(range(len(rows))), (
            f"partition {part}: offsets not dense from 0: {offsets[:10]}...")
        for _, key, _ in rows:
            assert key_part.setdefault(key, part) == part, f"key {key} in two partitions"

    # Values are numbered in produce order; per partition, offset order = produce order.
    for part, rows in by_part.items():
        rows.sort()
        got = consume_partition(ck, broker, topic, part, len(rows))
        assert [(m.offset(), m.key(), m.value()) for m in got] == rows, f"partition {part}"
        seq = [int(v.split(b"-")[1]) for _, _, v in rows]
        assert seq == sorted(seq), f"partition {part}: order differs from produce order"

    c = consumer(ck, broker)
    try:
        for part, rows in by_part.items():
            lo, hi = c.get_watermark_offsets(ck.TopicPartition(topic, part), timeout=10)
            assert (lo, hi) == (0, len(rows)), f"partition {part} watermarks"
    finally:
        c.close()


def test_offsets_for_times_returns_first_offset_at_or_after_timestamp(
        broker, confluent, admin_cls, topic):
    ck = confluent
    create_topic(admin_cls, broker, topic, 1)
    p = producer(ck, broker, acks="all")
    base = int(time.time() * 1000) - 60_000
    # Two records per timestamp, timestamps 1000 ms apart: base, base, base+1000, ...
    timestamps = [base + (i // 2) * 1000 for i in range(20)]
    reports = produce_all(ck, p, topic, [(None, f"v{i}".encode()) for i in range(20)],
                          partition=0, timestamps=timestamps)
    assert all(r[4] is None for r in reports)
    c = consumer(ck, broker)
    try:
        cases = {
            base - 5000: 0,            # before everything: the first record
            base: 0,                   # exact match: first of the two
            base + 1: 2,               # between: the next timestamp's first record
            base + 3000: 6,
            base + 3500: 8,
            base + 9000: 18,           # the last timestamp
            base + 9001: -1,           # after everything: none (-1 / OFFSET_END)
        }
        for ts, want in cases.items():
            got = c.offsets_for_times([ck.TopicPartition(topic, 0, ts)], timeout=10)
            assert got[0].error is None, got[0].error
            assert got[0].offset == want, f"timestamp base{ts - base:+d}: {got[0].offset} != {want}"
        # The consumed timestamps are the ones produced (CreateTime).
        msgs = consume_partition(ck, broker, topic, 0, 20)
        assert [m.timestamp() for m in msgs] == [(ck.TIMESTAMP_CREATE_TIME, t) for t in timestamps]
    finally:
        c.close()


@pytest.mark.parametrize("acks", [0, 1])
def test_acks_0_and_1_produce_lands(broker, confluent, admin_cls, topic, acks):
    ck = confluent
    create_topic(admin_cls, broker, topic, 1)
    p = producer(ck, broker, acks=str(acks))
    n = 200
    reports = produce_all(ck, p, topic, [(b"k", f"acks{acks}-{i}".encode()) for i in range(n)],
                          partition=0)
    assert all(r[4] is None for r in reports), [r for r in reports if r[4]][:3]
    if acks == 1:
        assert sorted(r[3] for r in reports) == list(range(n))
    # acks=0 has no response, so no offsets; the records must land all the same.
    c = consumer(ck, broker)
    try:
        wait_until(lambda: c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=5)[1] == n,
                   10, f"high watermark {n} after acks={acks}")
    finally:
        c.close()
    msgs = consume_partition(ck, broker, topic, 0, n)
    assert [m.value() for m in msgs] == [f"acks{acks}-{i}".encode() for i in range(n)]


def test_create_existing_topic_is_topic_already_exists(broker, confluent, admin_cls, topic):
    ck = confluent
    admin = create_topic(admin_cls, broker, topic, 2)
    fs = admin.create_topics([admin_cls.NewTopic(topic, num_partitions=2, replication_factor=1)],
                             request_timeout=15)
    with pytest.raises(ck.KafkaException) as ei:
        fs[topic].result(timeout=20)
    assert ei.value.args[0].code() == ck.KafkaError.TOPIC_ALREADY_EXISTS, ei.value


def test_growing_a_topic_to_one_count_twice_at_once_grows_it_once(broker, confluent, admin_cls,
                                                                  topic):
    """CreatePartitions names the count a topic grows to: two clients asking for 4 at the same
    time get 4 partitions, one success and one INVALID_PARTITIONS (as Kafka answers); the
    second must not add two more partitions on top of the first's."""
    ck = confluent
    create_topic(admin_cls, broker, topic, 2)
    admins = [admin_cls.AdminClient({"bootstrap.servers": broker.bootstrap}) for _ in range(3)]
    for a in admins:  # connected, so the requests leave together
        a.list_topics(timeout=10)
    for count in (4, 6, 8):
        futures = [a.create_partitions([admin_cls.NewPartitions(topic, count)])[topic]
                   for a in admins]
        outcomes = admin_outcomes(ck, futures, "grown")
        assert sorted(outcomes, key=str) == sorted(
            ["grown", ck.KafkaError.INVALID_PARTITIONS, ck.KafkaError.INVALID_PARTITIONS],
            key=str), f"to {count}: {outcomes}"
        got = len(admins[0].list_topics(topic, timeout=10).topics[topic].partitions)
        assert got == count, f"asked {count} three times at once, got {got}"


def test_delete_topic_leaves_metadata_promptly(broker, confluent, admin_cls, topic):
    ck = confluent
    admin = create_topic(admin_cls, broker, topic, 2)
    p = producer(ck, broker, acks="all")
    produce_all(ck, p, topic, [(None, b"x")] * 10, partition=1)
    assert topic in admin.list_topics(timeout=10).topics
    admin.delete_topics([topic], operation_timeout=10, request_timeout=15)[topic].result(timeout=20)
    wait_until(lambda: topic not in admin.list_topics(timeout=5).topics, 5,
               f"{topic} gone from Metadata after DeleteTopics")
    # Deleting again: UNKNOWN_TOPIC_OR_PART.
    with pytest.raises(ck.KafkaException) as ei:
        admin.delete_topics([topic], request_timeout=15)[topic].result(timeout=20)
    assert ei.value.args[0].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART, ei.value


def test_produce_to_fresh_name_auto_creates_it(broker, confluent, admin_cls, topic):
    ck = confluent
    admin = admin_cls.AdminClient({"bootstrap.servers": broker.bootstrap})
    assert topic not in admin.list_topics(timeout=10).topics
    p = producer(ck, broker, acks="all")
    reports = produce_all(ck, p, topic, [(b"a", b"first"), (b"b", b"second")])
    assert [(r[2], r[3], r[4]) for r in reports] == [(0, 0, None), (0, 1, None)], reports
    md = admin.list_topics(timeout=10).topics
    assert topic in md
    assert len(md[topic].partitions) == broker.num_partitions
    msgs = consume_partition(ck, broker, topic, 0, 2)
    assert [m.value() for m in msgs] == [b"first", b"second"]
