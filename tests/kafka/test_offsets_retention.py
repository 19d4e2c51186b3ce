"""Committed offsets expire as in Kafka (KIP-211; issue 21), and `__consumer_offsets` is a
compacted topic whose cleaning keeps every group's offsets, with confluent-kafka:

- offsets committed outside group management expire `offsets.retention.minutes` after
  their commit, and the group goes with them;
- a consumer group's offsets stay while it is active (even past the retention), and expire
  once it has been empty that long; the expiry survives a restart;
- `__consumer_offsets` is described as `cleanup.policy=compact`; with short segments its
  partitions are cleaned, and after a restart every group still reads its last commit.

The broker keeps offsets 3 s (`--offsets-retention-ms`) and checks every 200 ms."""

from __future__ import annotations

import time

import pytest

from strand_harness import need_module, wait_until

RETENTION_MS = 3000
ARGS = ["--offsets-retention-ms", str(RETENTION_MS),
        "--offsets-retention-check-interval-ms", "200",
        "--offsets-topic-num-partitions", "2",
        "--log-cleaner-backoff-ms", "200",
        "--group-initial-rebalance-delay-ms", "0"]
INVALID = -1001  # librdkafka's OFFSET_INVALID: no committed offset


@pytest.fixture
def ck():
    return need_module("confluent_kafka")


@pytest.fixture
def rbroker(strand):
    return strand(name="r", extra_args=ARGS)


def produce(ck, broker, topic, n):
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=b"v", partition=0)
    assert p.flush(20) == 0


def consumer(ck, broker, group, **extra):
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
    conf.update(extra)
    return ck.Consumer(conf)


def committed(ck, broker, group, topic):
    c = consumer(ck, broker, group)
    try:
        return c.committed([ck.TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        c.close()


def groups(ck, broker):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    return {g.group_id for g in admin.list_consumer_groups().result(10).valid}


def test_offsets_committed_outside_a_group_expire_after_their_commit(ck, rbroker, topic):
    produce(ck, rbroker, topic, 5)
    group = f"{topic}-simple"
    c = consumer(ck, rbroker, group)
    c.commit(offsets=[ck.TopicPartition(topic, 0, 3)], asynchronous=False)
    c.close()
    committed_at = time.monotonic()
    assert committed(ck, rbroker, group, topic) == 3
    assert group in groups(ck, rbroker)
    wait_until(lambda: committed(ck, rbroker, group, topic) == INVALID, 15,
               "the offset to expire", 0.2)
    assert time.monotonic() - committed_at >= RETENTION_MS / 1000 - 0.8, "expired early"
    assert group not in groups(ck, rbroker)


def test_a_group_keeps_its_offsets_while_active_and_loses_them_once_empty(ck, rbroker, topic):
    produce(ck, rbroker, topic, 10)
    group = f"{topic}-active"
    c = consumer(ck, rbroker, group)
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 20
    while got < 10 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
    assert got == 10
    c.commit(asynchronous=False)
    # Active (Stable, subscribed to the topic) past the retention: nothing expires.
    until = time.monotonic() + RETENTION_MS / 1000 + 1.5
    while time.monotonic() < until:
        c.poll(0.2)
    assert c.committed([ck.TopicPartition(topic, 0)], timeout=10)[0].offset == 10
    c.close()
    emptied_at = time.monotonic()
    assert committed(ck, rbroker, group, topic) == 10
    wait_until(lambda: committed(ck, rbroker, group, topic) == INVALID, 15,
               "the empty group's offsets to expire", 0.2)
    assert time.monotonic() - emptied_at >= RETENTION_MS / 1000 - 0.8, "expired early"
    wait_until(lambda: group not in groups(ck, rbroker), 5, "the group to be deleted", 0.2)
    rbroker.kill9_and_restart()
    assert committed(ck, rbroker, group, topic) == INVALID
    assert group not in groups(ck, rbroker)


def test_consumer_offsets_is_compacted_and_cleaning_keeps_every_group(ck, strand, topic):
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, ResourceType)

    b = strand(name="o", extra_args=["--offsets-topic-num-partitions", "2",
                                     "--log-cleaner-backoff-ms", "200"])
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    r = ConfigResource(ResourceType.TOPIC, "__consumer_offsets")
    assert admin.describe_configs([r])[r].result(10)["cleanup.policy"].value == "compact"
    r = ConfigResource(ResourceType.TOPIC, "__consumer_offsets", incremental_configs=[
        ConfigEntry("segment.ms", "300", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([r])[r].result(10)
    produce(ck, b, topic, 300)
    want = {}
    for g in range(4):
        c = consumer(ck, b, f"{topic}-g{g}")
        for offset in range(1, 300, 7):
            c.commit(offsets=[ck.TopicPartition(topic, 0, offset + g)], asynchronous=False)
        want[f"{topic}-g{g}"] = offset + g
        c.close()

    def removed():
        import urllib.request
        text = urllib.request.urlopen(f"http://127.0.0.1:{b.admin_port}/metrics", timeout=5).read()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.decode().splitlines()
                   if line.startswith("strand_cleaner_records_removed_total"))

    wait_until(lambda: removed() > 100, 30, "the offsets partitions to be cleaned", 0.3)
    for group, offset in want.items():
        assert committed(ck, b, group, topic) == offset, group
    b.kill9_and_restart()
    for group, offset in want.items():
        assert committed(ck, b, group, topic) == offset, group
