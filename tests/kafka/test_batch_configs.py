"""Topic configs that change what a produced batch becomes, with confluent-kafka and the
wire: `message.timestamp.type=LogAppendTime` (the broker's append time replaces the
producer's timestamps, in the produce answer and in what consumers read) and
`compression.type` (the stored batch carries the topic's codec, whatever the producer
used, and every record reads back the same). Both apply when altered on a live topic.
`min.insync.replicas` above the in-sync replicas (one, on one node) refuses acks=all
produces with NOT_ENOUGH_REPLICAS and leaves acks=1 alone (the cluster case is in
test_cluster.py)."""

from __future__ import annotations

import time

import pytest

from strand_harness import need_module, stored_batches

CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.fixture
def ck():
    return need_module("confluent_kafka")


def create(ck, broker, topic, configs):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(15)
    return admin


def alter(admin, topic, name, value):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    r = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([r])[r].result(15)


def produce(ck, broker, topic, records, codec="none", acks="all"):
    """Sends `records` (key, value, headers, timestamp) as one batch; the delivery reports."""
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": acks,
                     "compression.type": codec, "linger.ms": 100})
    reports = []
    for key, value, headers, ts in records:
        p.produce(topic, key=key, value=value, headers=headers, timestamp=ts, partition=0,
                  on_delivery=lambda err, m: reports.append((err, m)))
    assert p.flush(20) == 0
    assert all(err is None for err, _ in reports), reports
    return [m for _, m in reports]


def consume(ck, broker, topic, offset, n, timeout_s=20.0):
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "strand-tests-unused",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, offset)])
    out = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None:
            assert m.error() is None, m.error()
            out.append(m)
    c.close()
    assert len(out) == n, f"consumed {len(out)} of {n}"
    return out


def stored_batch_attributes(broker, topic, offset):
    """The attributes of the stored batch holding `offset`, from a raw Fetch v4."""
    batches = stored_batches(broker.bootstrap, topic, offset)
    assert batches, f"no batch at {offset}"
    return batches[0][1]


def records(n, ts):
    return [(None if i % 5 == 0 else f"k{i}".encode(), (f"value-{i}-" * 30).encode(),
             [("h", f"{i}".encode())], ts + i) for i in range(n)]


def test_log_append_time_replaces_the_producers_timestamps(ck, broker, topic):
    admin = create(ck, broker, topic, {"message.timestamp.type": "LogAppendTime"})
    old_ms = 1_600_000_000_000
    before_ms = int(time.time() * 1000)
    reports = produce(ck, broker, topic, records(20, old_ms))
    after_ms = int(time.time() * 1000)
    stamped = {m.timestamp() for m in reports}
    assert len(stamped) == 1, stamped
    kind, append_ms = stamped.pop()
    assert kind == ck.TIMESTAMP_LOG_APPEND_TIME
    assert before_ms <= append_ms <= after_ms, (before_ms, append_ms, after_ms)
    got = consume(ck, broker, topic, 0, 20)
    assert {m.timestamp() for m in got} == {(ck.TIMESTAMP_LOG_APPEND_TIME, append_ms)}
    assert [m.value() for m in got] == [r[1] for r in records(20, old_ms)]
    assert stored_batch_attributes(broker, topic, 0) & 0x08, "LogAppendTime bit"
    # Switched back on the live topic: the producer's timestamps are kept again.
    alter(admin, topic, "message.timestamp.type", "CreateTime")
    produce(ck, broker, topic, records(3, old_ms))
    got = consume(ck, broker, topic, 20, 3)
    assert [m.timestamp() for m in got] == [(ck.TIMESTAMP_CREATE_TIME, old_ms + i)
                                           for i in range(3)]


@pytest.mark.parametrize("topic_codec,producer_codec", [
    ("zstd", "lz4"), ("uncompressed", "snappy"), ("gzip", "none"), ("lz4", "zstd")])
def test_compression_type_stores_the_topics_codec(ck, broker, topic, topic_codec,
                                                   producer_codec):
    admin = create(ck, broker, topic, {"compression.type": topic_codec})
    sent = records(40, 1_700_000_000_000)
    produce(ck, broker, topic, sent, codec=producer_codec)
    assert stored_batch_attributes(broker, topic, 0) & 0x07 == CODECS[topic_codec]
    got = consume(ck, broker, topic, 0, len(sent))
    assert [(m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in got] == \
        [(k, v, h, ts) for k, v, h, ts in sent]
    assert {m.timestamp()[0] for m in got} == {ck.TIMESTAMP_CREATE_TIME}
    # `producer` on the live topic: the producer's codec is stored as sent.
    alter(admin, topic, "compression.type", "producer")
    produce(ck, broker, topic, sent[:5], codec=producer_codec)
    want = CODECS["uncompressed" if producer_codec == "none" else producer_codec]
    assert stored_batch_attributes(broker, topic, len(sent)) & 0x07 == want
    assert [m.value() for m in consume(ck, broker, topic, len(sent), 5)] == \
        [v for _, v, _, _ in sent[:5]]


def test_kafka_python_reads_the_append_time(ck, broker, topic):
    kafka = need_module("kafka")
    create(ck, broker, topic, {"message.timestamp.type": "LogAppendTime",
                               "compression.type": "gzip"})
    before_ms = int(time.time() * 1000)
    p = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    meta = p.send(topic, key=b"k", value=b"v", partition=0, timestamp_ms=1_600_000_000_000)
    sent = meta.get(timeout=20)
    p.close()
    assert before_ms <= sent.timestamp <= int(time.time() * 1000), sent
    c = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                            consumer_timeout_ms=10_000)
    c.assign([kafka.TopicPartition(topic, 0)])
    c.seek(kafka.TopicPartition(topic, 0), 0)
    [r] = [next(c)]
    c.close()
    assert (r.key, r.value, r.timestamp_type, r.timestamp) == (b"k", b"v", 1, sent.timestamp)
    assert stored_batch_attributes(broker, topic, 0) & 0x0f == 0x08 | CODECS["gzip"]


def test_min_insync_replicas_above_the_replicas_refuses_acks_all(ck, broker, topic):
    from strand_harness import produce_one_error

    admin = create(ck, broker, topic, {"min.insync.replicas": "2"})
    strict = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0})
    err = produce_one_error(strict, topic, partition=0)
    assert err is not None and err.code() == ck.KafkaError.NOT_ENOUGH_REPLICAS, err
    relaxed = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": 1})
    assert produce_one_error(relaxed, topic, partition=0) is None
    alter(admin, topic, "min.insync.replicas", "1")
    assert produce_one_error(strict, topic, partition=0) is None
    assert [m.offset() for m in consume(ck, broker, topic, 0, 2)] == [0, 1]
    from confluent_kafka.admin import AdminClient, NewTopic

    bad = AdminClient({"bootstrap.servers": broker.bootstrap})
    fut = bad.create_topics([NewTopic(f"{topic}-bad", 1, 1,
                                      config={"min.insync.replicas": "0"})])[f"{topic}-bad"]
    with pytest.raises(ck.KafkaException) as e:
        fut.result(15)
    assert e.value.args[0].code() == ck.KafkaError.INVALID_CONFIG


def test_the_broker_sets_the_defaults_of_topics_that_set_none(ck, strand, topic):
    """`--compression-type`, `--log-message-timestamp-type` and `--min-insync-replicas`
    (Kafka's broker configs of those names) apply to every topic that does not set its
    own, and DescribeConfigs names the broker as their source, as Kafka does."""
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    from strand_harness import produce_one_error

    broker = strand(name="defaults", extra_args=[
        "--compression-type", "zstd", "--log-message-timestamp-type", "LogAppendTime",
        "--min-insync-replicas", "2"])
    admin = create(ck, broker, topic, {})
    r = ConfigResource(ResourceType.TOPIC, topic)
    described = admin.describe_configs([r])[r].result(15)
    static = ConfigSource.STATIC_BROKER_CONFIG.value
    for name, value in [("compression.type", "zstd"), ("message.timestamp.type", "LogAppendTime"),
                        ("min.insync.replicas", "2")]:
        assert (described[name].value, described[name].source) == (value, static), name
    strict = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0})
    err = produce_one_error(strict, topic, partition=0)
    assert err is not None and err.code() == ck.KafkaError.NOT_ENOUGH_REPLICAS, err
    [m] = produce(ck, broker, topic, records(1, 1_600_000_000_000), acks=1)
    assert m.timestamp()[0] == ck.TIMESTAMP_LOG_APPEND_TIME
    assert stored_batch_attributes(broker, topic, 0) & 0x0f == 0x08 | CODECS["zstd"]
    # A topic's own value wins over the broker's.
    alter(admin, topic, "min.insync.replicas", "1")
    assert produce_one_error(strict, topic, partition=0) is None
