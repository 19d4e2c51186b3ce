"""Upgrade of a single-node data directory into a cluster (issue 5, Controller): a broker
that ran without replication restarts as the only seed of a new cluster and keeps its
topics, its records and offsets, its consumer groups' committed offsets and its cluster
id; new records continue the offsets; a second restart adopts nothing twice.

Runs the real `strand` binary with confluent-kafka (librdkafka)."""

from __future__ import annotations

import uuid

import pytest

from strand_harness import Broker, free_port, need_module, wait_until

PARTITIONS = 2
RECORDS = 40


@pytest.fixture
def ck():
    return need_module("confluent_kafka")


def produce(ck, bootstrap: str, topic: str, values: list[bytes]) -> dict[bytes, tuple[int, int]]:
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                     "enable.idempotence": True, "message.timeout.ms": 30000})
    acked: dict[bytes, tuple[int, int]] = {}
    errors = []

    def on_delivery(err, msg):
        if err is None:
            acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            errors.append(str(err))

    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % PARTITIONS, on_delivery=on_delivery)
    assert p.flush(40) == 0
    assert not errors, errors[:3]
    return acked


def read_all(ck, bootstrap: str, topic: str, n: int) -> dict[bytes, tuple[int, int]]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: dict[bytes, tuple[int, int]] = {}
    try:
        c.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])

        def done():
            m = c.poll(0.2)
            if m is not None and not m.error():
                got[m.value()] = (m.partition(), m.offset())
            return len(got) >= n

        wait_until(done, 40, f"{n} records of {topic}", interval=0)
    finally:
        c.close()
    return got


def cluster_id(ck, bootstrap: str) -> str:
    admin = need_module("confluent_kafka.admin").AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_cluster(request_timeout=10).result(15).cluster_id


def test_a_single_node_data_directory_upgrades_into_a_cluster(ck):
    b = Broker("upgrade", smp=1, num_partitions=PARTITIONS)
    try:
        b.start()
        topic, group = f"up-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
        admin = need_module("confluent_kafka.admin")
        a = admin.AdminClient({"bootstrap.servers": b.bootstrap})
        a.create_topics([admin.NewTopic(topic, num_partitions=PARTITIONS,
                                        replication_factor=1)])[topic].result(20)
        before = produce(ck, b.bootstrap, topic, [f"v{i}".encode() for i in range(RECORDS)])
        committed_at = {0: 7, 1: 5}
        c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
        c.commit(offsets=[ck.TopicPartition(topic, p, o) for p, o in committed_at.items()],
                 asynchronous=False)
        c.close()
        old_cluster_id = cluster_id(ck, b.bootstrap)
        assert b.stop() == 0

        # The same data directory, now the only seed of a cluster.
        rpc = free_port()
        b.extra_args += ["--node-id", "1", "--rpc-addr", f"127.0.0.1:{rpc}",
                         "--seeds", f"1@127.0.0.1:{rpc}"]
        for start in range(2):
            b.restart()
            md = wait_until(lambda: (lambda m: m if topic in m.topics and all(
                p.leader == 1 for p in m.topics[topic].partitions.values()) else None)(
                admin.AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=5)),
                40, f"{topic} led by node 1 in the cluster (start {start})")
            assert sorted(md.topics[topic].partitions) == list(range(PARTITIONS))
            assert cluster_id(ck, b.bootstrap) == old_cluster_id
            got = read_all(ck, b.bootstrap, topic, RECORDS * (start + 1))
            for v, at in before.items():
                assert got.get(v) == at, f"{v!r}: {got.get(v)} after the upgrade, {at} before"
            c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                             "enable.auto.commit": False})
            try:
                offs = c.committed([ck.TopicPartition(topic, p) for p in range(PARTITIONS)],
                                   timeout=20)
            finally:
                c.close()
            assert {tp.partition: tp.offset for tp in offs} == committed_at
            # New records continue each partition's offsets.
            more = produce(ck, b.bootstrap, topic,
                           [f"w{start}-{i}".encode() for i in range(RECORDS)])
            for v, (p, o) in more.items():
                last = max(oo for (pp, oo) in before.values() if pp == p)
                assert o > last, f"{v!r} got offset {o} at or below {last}"
            before.update(more)
            assert b.stop() == 0
        assert (b.data_dir / "__strand_metadata.adopted").exists()
    finally:
        if b.running():
            b.kill9()
