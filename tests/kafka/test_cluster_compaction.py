"""Log compaction on a 3-node cluster (issue 21): every replica compacts its own copy of a
replication-factor-3 compacted topic, below what it applied (ARCHITECTURE.md, Replication;
storage/src/log_clean.rs). Writes go on across a leader kill; then leader kills make
the other nodes lead the partition, and each serves the latest acknowledged value of every
key, with offsets that only grow.
"""

from __future__ import annotations


import pytest

from cluster_harness import Cluster
from strand_harness import need_module, read_partition, stored_batches, wait_until
from test_cluster import ck, gauge, owned_cluster, producer_config  # noqa: F401 (ck: fixture)

TOPIC = "compacted-rf3"
KEYS = 20
DEADLINE_S = 60.0


@pytest.fixture
def cluster(request):
    with owned_cluster(request, extra_args=["--log-cleaner-backoff-ms", "200"]) as c:
        yield c


def create_topic(cluster: Cluster, **configs: str):
    admin = need_module("confluent_kafka.admin")
    a = admin.AdminClient({"bootstrap.servers": cluster.bootstrap()})
    new = admin.NewTopic(TOPIC, num_partitions=1, replication_factor=3,
                         config={"cleanup.policy": "compact", "segment.bytes": "4096",
                                 "segment.ms": "300", "min.cleanable.dirty.ratio": "0.01",
                                 **configs})
    a.create_topics([new])[TOPIC].result(30)
    wait_until(lambda: all(v is not None for v in cluster.leader_views(TOPIC, 0).values()),
               30, f"every node to know {TOPIC}/0")


def produce(ck, bootstrap: str, start: int, count: int, latest: dict[bytes, tuple[int, bytes]]):
    """`count` keyed values (key i % KEYS), one batch each, acks=all; records the
    acknowledged offset and value of each key in `latest`."""
    p = ck.Producer(producer_config(bootstrap, **{"linger.ms": 0, "batch.num.messages": 1}))
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        elif msg.key() not in latest or latest[msg.key()][0] < msg.offset():
            latest[msg.key()] = (msg.offset(), msg.value())

    for i in range(start, start + count):
        p.produce(TOPIC, key=f"k{i % KEYS}".encode(), value=f"{i:08d}".encode().ljust(200, b"."),
                  partition=0, on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(90) == 0, "undelivered messages remain"
    assert not errors, errors[:5]


def read_all(ck, bootstrap: str) -> list[tuple[int, bytes, bytes]]:
    return read_partition(ck, bootstrap, TOPIC, 0, 0, DEADLINE_S)


def check_served(records, latest):
    """Offsets grow and each key's last value is the acknowledged latest."""
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)), "offsets repeat or go back"
    last = {k: (o, v) for o, k, v in records}
    assert last == latest, "the latest acknowledged value of every key"


def served_after_election(ck, cluster: Cluster, node: int, latest):
    """Reads through `node` (just elected) until it serves every key's latest value.
    Once in CI (run of c8f5ec8) a read right after an election reached the end of the
    partition with no record at all; the re-read shows whether that state passes (it is
    printed) or stays (the test fails)."""
    reads = []

    def ok():
        records = read_all(ck, cluster[node].bootstrap)
        reads.append(len(records))
        if {k: (o, v) for o, k, v in records} != latest:
            return False
        check_served(records, latest)
        return True

    wait_until(ok, 20, f"node {node} to serve the latest value of every key (reads: {reads})",
               0.5)
    if len(reads) > 1:
        print(f"node {node} served the latest values at read {len(reads)}: records {reads}")


def kill_the_leader_once_every_node_counted(cluster: Cluster, counter: str) -> tuple[int, int]:
    """Waits until `counter` is above 0 on every node (each compacted its own replica),
    then kill -9s the partition's leader; returns it and the leader elected after it."""
    for n in sorted(cluster.nodes):
        wait_until(lambda n=n: gauge(cluster, n, counter) > 0, DEADLINE_S,
                   f"node {n} to count {counter}")
    first = cluster.wait_leader(TOPIC, 0)
    cluster.kill9(first)
    return first, cluster.wait_leader(TOPIC, 0, exclude=(first,), timeout=DEADLINE_S)


def test_every_replica_compacts_and_serves_the_latest_values(ck, cluster):
    create_topic(cluster)
    latest: dict[bytes, tuple[int, bytes]] = {}
    produce(ck, cluster.bootstrap(), 0, 150, latest)
    first, second = kill_the_leader_once_every_node_counted(
        cluster, "strand_cleaner_records_removed_total")
    produce(ck, cluster.bootstrap([n for n in cluster.nodes if n != first]), 150, 150, latest)
    records = read_all(ck, cluster[second].bootstrap)
    check_served(records, latest)
    assert len(records) < 300, "nothing was compacted"
    # Each node in turn leads and serves.
    cluster.restart(first)
    wait_until(lambda: gauge(cluster, second, "strand_under_replicated_partitions") == 0,
               DEADLINE_S, f"node {first} to catch up")
    # Elections choose the next leader: a few leader kills make the others lead.
    served = {second}
    for _ in range(4):
        if served == set(cluster.nodes):
            break
        leader = cluster.wait_leader(TOPIC, 0, timeout=DEADLINE_S)
        cluster.kill9(leader)
        now = cluster.wait_leader(TOPIC, 0, exclude=(leader,), timeout=DEADLINE_S)
        served_after_election(ck, cluster, now, latest)
        served.add(now)
        cluster.restart(leader)
        wait_until(lambda now=now: gauge(cluster, now, "strand_under_replicated_partitions") == 0,
                   DEADLINE_S, f"node {leader} to catch up")
    assert len(served) >= 2, served


def test_every_replica_removes_the_markers_of_emptied_transactions(ck, cluster):
    """Sixty transactions overwrite five keys: every replica removes the commit markers of
    the transactions compaction emptied (`delete.retention.ms` 500), and after a leader kill
    the new leader serves every key's latest committed value to read_committed consumers
    (its last stable offset not held back by a transaction left without its marker)."""
    create_topic(cluster, **{"delete.retention.ms": "500"})
    p = ck.Producer(producer_config(cluster.bootstrap(), **{"transactional.id": "markers-rf3"}))
    p.init_transactions(30)
    latest: dict[bytes, tuple[int, bytes]] = {}

    def on_delivery(err, msg):
        assert err is None, err
        latest[msg.key()] = (msg.offset(), msg.value())

    for i in range(60):
        p.begin_transaction()
        p.produce(TOPIC, key=f"k{i % 5}".encode(), value=f"{i:08d}".encode().ljust(200, b"."),
                  partition=0, on_delivery=on_delivery)
        p.commit_transaction(30)
    p.flush(30)
    assert len(latest) == 5
    _, second = kill_the_leader_once_every_node_counted(
        cluster, "strand_cleaner_markers_removed_total")
    served_after_election(ck, cluster, second, latest)
    control = 0x20
    markers = [o for o, a in stored_batches(cluster[second].bootstrap, TOPIC) if a & control]
    assert 0 < len(markers) < 60, markers
