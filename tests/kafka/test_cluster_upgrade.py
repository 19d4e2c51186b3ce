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


def test_an_upgraded_topic_moves_to_nodes_that_joined_later(ck):
    """A partition written by a single node before the cluster (its log starts with
    records of leader epoch 0) moves like any other (AlterPartitionReassignments): one
    partition off the original node onto two joined nodes, the other from one replica to
    three. Every record keeps its offset on the new replicas; new records continue the
    offsets; a consumer that read the pre-cluster records from the original node goes on
    reading from the new leader without a reset (OffsetForLeaderEpoch answers for epoch 0
    on every replica alike)."""
    from cluster_harness import Cluster

    kadmin = need_module("kafka.admin")
    kafka = need_module("kafka")
    admin = need_module("confluent_kafka.admin")
    c = Cluster("upgrade-move", node_ids=(1,), replication_factor=1)
    single = Broker("upgrade-move-single", smp=1, num_partitions=PARTITIONS)
    single.data_dir = c[1].data_dir
    reader = None
    try:
        single.start()
        topic = f"upm-{uuid.uuid4().hex[:8]}"
        a = admin.AdminClient({"bootstrap.servers": single.bootstrap})
        a.create_topics([admin.NewTopic(topic, num_partitions=PARTITIONS,
                                        replication_factor=1)])[topic].result(20)
        acked = produce(ck, single.bootstrap, topic, [f"v{i}".encode() for i in range(RECORDS)])
        assert single.stop() == 0

        c.start([1])
        c.wait_leader(topic, 0, timeout=40)
        # A consumer reads the pre-cluster records from node 1 (positions it validates
        # with epoch 0 once the leader changes); a reset would raise an error.
        reader = ck.Consumer({"bootstrap.servers": c.bootstrap(), "group.id": "r-upm",
                              "enable.auto.commit": False, "auto.offset.reset": "error"})
        reader.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        got: dict[bytes, tuple[int, int]] = {}
        errors: list[str] = []

        def read_until(n: int):
            def done():
                m = reader.poll(0.2)
                if m is not None:
                    if m.error():
                        errors.append(str(m.error()))
                    else:
                        seen[m.partition()].append(m.offset())
                        got[m.value()] = (m.partition(), m.offset())
                assert not errors, errors[:3]
                return len(got) >= n
            wait_until(done, 60, f"{n} records of {topic} read in order", interval=0)

        # Nothing newer: the reader's last records are of epoch 0 when the leader changes.
        read_until(RECORDS)

        c.add_joiner(2)
        c.add_joiner(3)
        everyone = [1, 2, 3]
        wait_until(lambda: all(sorted(c.metadata(n).brokers) == everyone for n in everyone),
                   30, "every node listing brokers 1..3")
        targets = {0: [2, 3], 1: [1, 2, 3]}
        ka = kadmin.KafkaAdminClient(bootstrap_servers=c.bootstrap(), request_timeout_ms=30000)
        TP = kafka.TopicPartition
        try:
            result = ka.alter_partition_reassignments(
                {TP(topic, p): t for p, t in targets.items()})
            assert result == {TP(topic, p): None for p in targets}, result

            def moved():
                if ka.list_partition_reassignments():
                    return None
                return all(c.metadata(n).topics[topic][p].replicas == t
                           for n in everyone for p, t in targets.items()) or None

            wait_until(moved, 90, f"replicas {targets} on every node")
        finally:
            ka.close()
        part0 = c[1].data_dir / f"{topic}-0"
        wait_until(lambda: not part0.exists(), 30, f"node 1 deleting its copy of {topic}/0")
        assert c.wait_leader(topic, 0, timeout=40) in (2, 3)

        acked.update(produce(ck, c.bootstrap(), topic,
                             [f"w{i}".encode() for i in range(RECORDS)]))
        read_until(2 * RECORDS)
        for p, offsets in seen.items():
            assert offsets == list(range(len(offsets))), f"partition {p} read {offsets}"
        for v, at in acked.items():
            assert got.get(v) == at, f"{v!r}: read at {got.get(v)}, acknowledged at {at}"
        # The moved partition's records come from the joined nodes alone.
        fresh = read_all(ck, c.bootstrap([2, 3]), topic, 2 * RECORDS)
        for v, at in acked.items():
            assert fresh.get(v) == at, f"{v!r}: {fresh.get(v)} on nodes 2, 3, acknowledged at {at}"
    finally:
        if reader is not None:
            reader.close()
        if single.running():
            single.kill9()
        rcs = c.close()
    assert all(rc == 0 for rc in rcs.values()), f"exit codes {rcs}:\n{c.log_tails()}"
    c.cleanup()


def test_an_upgraded_partition_whose_old_records_retention_deleted_moves_too(ck):
    """Retention deleted a single node's oldest segments before the upgrade (its log
    starts past offset 0 and no Raft state says at which term); the partition still moves
    to two joined nodes: they start at its log start and hold every later record at its
    offset. The stop may come between retention persisting the log start and deleting
    the segments below it: the snapshot then starts below the log start, and the log
    start entry the upgrade appends moves the new replicas' start to it."""
    from cluster_harness import Cluster

    kadmin = need_module("kafka.admin")
    kafka = need_module("kafka")
    admin = need_module("confluent_kafka.admin")
    c = Cluster("upgrade-retained", node_ids=(1,), replication_factor=1)
    single = Broker("upgrade-retained-single", smp=1, num_partitions=1,
                    extra_args=["--retention-check-interval-ms", "200"])
    single.data_dir = c[1].data_dir
    topic = f"upr-{uuid.uuid4().hex[:8]}"
    try:
        single.start()
        a = admin.AdminClient({"bootstrap.servers": single.bootstrap})
        a.create_topics([admin.NewTopic(topic, num_partitions=1, replication_factor=1,
                                        config={"segment.bytes": "4096",
                                                "retention.bytes": "16384"})])[topic].result(20)
        p = ck.Producer({"bootstrap.servers": single.bootstrap, "acks": "all",
                         "linger.ms": 0, "batch.num.messages": 1})
        acked: dict[bytes, int] = {}

        def on_delivery(err, msg):
            assert err is None, err
            acked[msg.value()] = msg.offset()

        for i in range(120):
            p.produce(topic, value=f"{i:06d}".encode().ljust(1000, b"."), partition=0,
                      on_delivery=on_delivery)
            p.poll(0)
        assert p.flush(40) == 0 and len(acked) == 120
        tp = ck.TopicPartition(topic, 0)

        def low(bootstrap: str) -> int:
            con = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
            try:
                return con.get_watermark_offsets(tp, timeout=5, cached=False)[0]
            finally:
                con.close()

        wait_until(lambda: low(single.bootstrap) >= 40, 30, "retention moving the log start")
        start = low(single.bootstrap)
        assert single.stop() == 0

        c.start([1])
        c.add_joiner(2)
        c.add_joiner(3)
        wait_until(lambda: all(sorted(c.metadata(n).brokers) == [1, 2, 3] for n in (1, 2, 3)),
                   30, "every node listing brokers 1..3")
        ka = kadmin.KafkaAdminClient(bootstrap_servers=c.bootstrap(), request_timeout_ms=30000)
        try:
            moved = ka.alter_partition_reassignments({kafka.TopicPartition(topic, 0): [2, 3]})
            assert moved == {kafka.TopicPartition(topic, 0): None}, moved
            wait_until(lambda: (not ka.list_partition_reassignments()
                                and all(c.metadata(n).topics[topic][0].replicas == [2, 3]
                                        for n in (1, 2, 3))) or None,
                       90, f"{topic}/0 on nodes 2 and 3")
        finally:
            ka.close()
        part0 = c[1].data_dir / f"{topic}-0"
        wait_until(lambda: not part0.exists(), 30, f"node 1 deleting its copy of {topic}/0")
        assert low(c.bootstrap([2, 3])) == start
        reader = ck.Consumer({"bootstrap.servers": c.bootstrap([2, 3]), "group.id": "r-upr",
                              "enable.auto.commit": False, "auto.offset.reset": "error"})
        got: dict[bytes, int] = {}
        try:
            reader.assign([ck.TopicPartition(topic, 0, start)])

            def done():
                m = reader.poll(0.2)
                if m is not None:
                    assert not m.error(), m.error()
                    got[m.value()] = m.offset()
                return len(got) >= 120 - start
            wait_until(done, 40, f"records {start}..119 from nodes 2 and 3", interval=0)
        finally:
            reader.close()
        assert got == {v: o for v, o in acked.items() if o >= start}
    finally:
        if single.running():
            single.kill9()
        rcs = c.close()
    assert all(rc == 0 for rc in rcs.values()), f"exit codes {rcs}:\n{c.log_tails()}"
    c.cleanup()
