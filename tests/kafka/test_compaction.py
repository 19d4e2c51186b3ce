"""Log compaction (issue 21) through confluent-kafka: the issue's fixture exactly, every
codec, keyless records refused, the compaction configs in DescribeConfigs with their
sources and validation, APPEND/SUBTRACT of `cleanup.policy`, and DeleteRecords refused
on a compact-only topic, as Kafka answers each."""

from __future__ import annotations

import time

import pytest

from strand_harness import need_module, read_partition, stored_batches, wait_until

# The cleaner looks every 200 ms (default 15 s), so a test waits about a second.
CLEANER_ARGS = ["--log-cleaner-backoff-ms", "200"]


@pytest.fixture
def ck():
    return need_module("confluent_kafka")


@pytest.fixture
def cbroker(strand):
    return strand(name="c", extra_args=CLEANER_ARGS)


def create(ck, broker, topic, configs):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fut = admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic]
    fut.result(15)
    return admin


def produce(ck, broker, topic, records, **extra):
    """Sends (key, value) pairs one batch each unless `extra` says otherwise; returns the
    offsets the delivery reports gave, in order."""
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "acks": "all",
        "linger.ms": 0,
        "batch.num.messages": 1,
        "enable.idempotence": False,
    }
    conf.update(extra)
    p = ck.Producer(conf)
    offsets = {}

    def report(err, msg, i):
        assert err is None, err
        offsets[i] = msg.offset()

    for i, (k, v) in enumerate(records):
        p.produce(topic, key=k, value=v, partition=0,
                  on_delivery=lambda err, msg, i=i: report(err, msg, i))
    assert p.flush(30) == 0
    return [offsets[i] for i in range(len(records))]


def read_all(ck, broker, topic, start=0):
    """Every record from `start` to the end of the partition: [(offset, key, value)]."""
    return read_partition(ck, broker.bootstrap, topic, 0, start)


def wait_for(ck, broker, topic, want, timeout_s=30.0):
    """Waits until the partition reads exactly `want` (offsets), returns its records."""
    seen = []

    def ok():
        seen[:] = [read_all(ck, broker, topic)]
        return [o for o, _, _ in seen[0]] == want

    wait_until(ok, timeout_s, f"{topic} to read offsets {want} (last read: {seen})", 0.2)
    return seen[0]


FIXTURE = [
    (b"u1", b"free"), (b"u2", b"free"), (b"u1", b"pro"), (b"u3", b"free"),
    (b"u2", b"pro"), (b"u1", b"enterprise"), (b"u3", None),
]


def test_the_issue_fixture_compacts_to_the_latest_values(ck, cbroker, topic):
    retention_ms = 6000
    create(ck, cbroker, topic, {"cleanup.policy": "compact", "segment.ms": "500",
                                "delete.retention.ms": str(retention_ms)})
    assert produce(ck, cbroker, topic, FIXTURE) == list(range(7))
    produced_at = time.monotonic()
    got = wait_for(ck, cbroker, topic, [4, 5, 6])
    # The first pass ran after the last produce, so the tombstone's horizon is at least
    # `delete.retention.ms` after it.
    assert time.monotonic() < produced_at + retention_ms / 1000, "the first pass came too late to check"
    assert got == [(4, b"u2", b"pro"), (5, b"u1", b"enterprise"), (6, b"u3", None)]
    # A fetch from a removed offset starts at the next kept record.
    assert read_all(ck, cbroker, topic, start=2)[0][0] == 4
    got = wait_for(ck, cbroker, topic, [4, 5])
    assert time.monotonic() >= produced_at + retention_ms / 1000 - 0.5, "tombstone removed early"
    assert got == [(4, b"u2", b"pro"), (5, b"u1", b"enterprise")]
    # A consumer reaches the end (offset 7) though the last batch lost its only record.
    assert read_all(ck, cbroker, topic, start=5) == [(5, b"u1", b"enterprise")]
    assert read_all(ck, cbroker, topic, start=6) == []


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_keep_the_latest_value_of_each_key(ck, cbroker, topic, codec):
    create(ck, cbroker, topic, {"cleanup.policy": "compact", "segment.ms": "500"})
    records = [(f"k{i % 40}".encode(), f"v{i}-{codec}".encode() * 8) for i in range(400)]
    offsets = produce(ck, cbroker, topic, records, **{
        "compression.type": codec, "batch.num.messages": 50, "linger.ms": 50})
    latest = {}
    for (k, v), o in zip(records, offsets):
        latest[k] = (o, v)
    want = sorted(o for o, _ in latest.values())
    got = wait_for(ck, cbroker, topic, want)
    assert {k: (o, v) for o, k, v in got} == latest


def test_keyless_records_are_refused_with_invalid_record(ck, cbroker, topic):
    create(ck, cbroker, topic, {"cleanup.policy": "compact"})
    # One record per batch: Kafka refuses the whole batch that holds a keyless record.
    p = ck.Producer({"bootstrap.servers": cbroker.bootstrap, "acks": "all",
                     "enable.idempotence": False, "retries": 0,
                     "batch.num.messages": 1, "linger.ms": 0})
    errors = []
    p.produce(topic, value=b"no key", partition=0,
              on_delivery=lambda err, msg: errors.append(err))
    p.produce(topic, key=b"k", value=b"keyed", partition=0,
              on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(20) == 0
    assert errors[0] is not None and errors[0].code() == ck.KafkaError.INVALID_RECORD, errors
    assert errors[1] is None, errors
    assert [(k, v) for _, k, v in read_all(ck, cbroker, topic)] == [(b"k", b"keyed")]


def describe(ck, admin, topic):
    from confluent_kafka.admin import ConfigResource, ResourceType

    r = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([r])[r].result(15)


def test_compaction_configs_are_described_and_validated(ck, cbroker, topic):
    from confluent_kafka.admin import ConfigSource, NewTopic

    admin = create(ck, cbroker, topic, {"cleanup.policy": "compact",
                                        "min.compaction.lag.ms": "1000",
                                        "message.timestamp.type": "CreateTime"})
    c = describe(ck, admin, topic)

    def seen(name):
        e = c[name]
        return e.value, getattr(e.source, "value", e.source)

    topic_source = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    default = ConfigSource.DEFAULT_CONFIG.value
    assert seen("cleanup.policy") == ("compact", topic_source)
    assert seen("min.compaction.lag.ms") == ("1000", topic_source)
    assert seen("delete.retention.ms") == ("86400000", default)
    assert seen("min.cleanable.dirty.ratio") == ("0.5", default)
    assert c["max.compaction.lag.ms"].value == str(2**63 - 1)
    bad = [
        {"cleanup.policy": "shred"},
        {"cleanup.policy": "compact,compact"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"},
        {"message.timestamp.type": "AppendTime"},
        {"compression.type": "brotli"},
        {"delete.retention.ms": "-1"},
    ]
    for i, configs in enumerate(bad):
        name = f"{topic}-bad{i}"
        fut = admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name]
        with pytest.raises(ck.KafkaException) as e:
            fut.result(15)
        assert e.value.args[0].code() == ck.KafkaError.INVALID_CONFIG, (configs, e.value)


def test_incremental_alter_appends_and_subtracts_the_policy(ck, cbroker, topic):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = create(ck, cbroker, topic, {})

    def alter(op, value):
        r = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("cleanup.policy", value, incremental_operation=op)])
        admin.incremental_alter_configs([r])[r].result(15)
        return describe(ck, admin, topic)["cleanup.policy"].value

    assert alter(AlterConfigOpType.APPEND, "compact") == "delete,compact"
    assert alter(AlterConfigOpType.APPEND, "compact") == "delete,compact"
    assert alter(AlterConfigOpType.SUBTRACT, "delete") == "compact"
    with pytest.raises(ck.KafkaException) as e:
        alter(AlterConfigOpType.SUBTRACT, "compact")
    assert e.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    r = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.APPEND)])
    with pytest.raises(ck.KafkaException) as e:
        admin.incremental_alter_configs([r])[r].result(15)
    assert e.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    # Now compacted: keyless records are refused.
    p = ck.Producer({"bootstrap.servers": cbroker.bootstrap, "retries": 0,
                     "enable.idempotence": False})
    errors = []
    p.produce(topic, value=b"x", partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(20) == 0
    assert errors[0] is not None and errors[0].code() == ck.KafkaError.INVALID_RECORD


def test_delete_records_is_refused_on_a_compact_only_topic(ck, cbroker, topic):
    admin = create(ck, cbroker, topic, {"cleanup.policy": "compact"})
    produce(ck, cbroker, topic, [(b"a", b"1"), (b"b", b"2")])
    fut = admin.delete_records([ck.TopicPartition(topic, 0, 1)])
    with pytest.raises(ck.KafkaException) as e:
        list(fut.values())[0].result(15)
    assert e.value.args[0].code() == ck.KafkaError.POLICY_VIOLATION
    assert [o for o, _, _ in read_all(ck, cbroker, topic)] == [0, 1]


def test_a_batch_with_a_keyless_record_names_it(ck, cbroker, topic):
    """Kafka refuses the whole batch and lists the records at fault (KIP-467, Produce v8+):
    librdkafka fails those with INVALID_RECORD and the rest with _INVALID_DIFFERENT_RECORD."""
    create(ck, cbroker, topic, {"cleanup.policy": "compact"})
    p = ck.Producer({"bootstrap.servers": cbroker.bootstrap, "acks": "all",
                     "enable.idempotence": False, "retries": 0, "linger.ms": 200})
    errors = {}
    for i in range(10):
        p.produce(topic, key=None if i in (3, 7) else f"k{i}".encode(), value=b"v", partition=0,
                  on_delivery=lambda err, msg, i=i: errors.__setitem__(i, err))
    assert p.flush(20) == 0
    codes = {i: e.code() if e is not None else None for i, e in errors.items()}
    different = ck.KafkaError._INVALID_DIFFERENT_RECORD
    assert codes == {i: ck.KafkaError.INVALID_RECORD if i in (3, 7) else different
                     for i in range(10)}, codes
    assert read_all(ck, cbroker, topic) == []


def test_an_aborted_write_never_removes_the_committed_value(ck, cbroker, topic):
    """A transaction that wrote key k and aborted does not shadow k's committed value when
    the cleaner runs, and the cleaner removes the aborted record (a read_uncommitted
    consumer stops seeing it), as Kafka's cleaner does; read_committed reads the committed
    values throughout."""
    create(ck, cbroker, topic, {"cleanup.policy": "compact", "segment.ms": "500"})
    p = ck.Producer({"bootstrap.servers": cbroker.bootstrap,
                     "transactional.id": f"{topic}-txn"})
    p.init_transactions(30)
    for writes, commit in [([(b"k", b"committed"), (b"j", b"j1")], True),
                           ([(b"k", b"aborted")], False),
                           ([(b"j", b"j2")], True)]:
        p.begin_transaction()
        for k, v in writes:
            p.produce(topic, key=k, value=v, partition=0)
        assert p.flush(30) == 0
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    def values(isolation):
        return [(k, v) for _, k, v in read_partition(ck, cbroker.bootstrap, topic,
                                                      isolation=isolation)]

    assert values("read_committed") == [(b"k", b"committed"), (b"j", b"j1"), (b"j", b"j2")]
    want = [(b"k", b"committed"), (b"j", b"j2")]
    wait_until(lambda: values("read_uncommitted") == want, 30,
               f"{topic} compacted to {want}", 0.3)
    assert values("read_committed") == want


def test_the_markers_of_emptied_transactions_go(ck, cbroker, topic):
    """Twenty transactions each set key k: compaction leaves the last one's record, and
    the commit markers of the nineteen it emptied go `delete.retention.ms` after a pass
    stamped them (Kafka's cleaner, KIP-534); the last marker stays (its producer's last
    entry). Consumers of either isolation read k's last value from the start."""
    import urllib.request

    create(ck, cbroker, topic, {"cleanup.policy": "compact", "segment.ms": "300",
                                "delete.retention.ms": "1000",
                                "min.cleanable.dirty.ratio": "0.01"})
    p = ck.Producer({"bootstrap.servers": cbroker.bootstrap,
                     "transactional.id": f"{topic}-txn"})
    p.init_transactions(30)
    for i in range(20):
        p.begin_transaction()
        p.produce(topic, key=b"k", value=f"v{i}".encode(), partition=0)
        p.commit_transaction(30)
    control = 0x20

    def markers():
        return [o for o, a in stored_batches(cbroker.bootstrap, topic) if a & control]

    assert len(markers()) == 20

    def removed():
        text = urllib.request.urlopen(f"http://127.0.0.1:{cbroker.admin_port}/metrics",
                                      timeout=5).read()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.decode().splitlines()
                   if line.startswith("strand_cleaner_markers_removed_total"))

    wait_until(lambda: len(markers()) == 1, 30, f"{topic}: one marker left", 0.3)
    assert markers() == [39], "the last transaction's marker"
    assert removed() == 19
    for isolation in ("read_committed", "read_uncommitted"):
        got = read_partition(ck, cbroker.bootstrap, topic, isolation=isolation)
        assert [(o, k, v) for o, k, v in got] == [(38, b"k", b"v19")], (isolation, got)
