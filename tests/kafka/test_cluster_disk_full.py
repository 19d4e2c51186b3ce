"""A full disk on one node of a three-node cluster, the partition's leader (ARCHITECTURE.md,
Bad input, limits, faults: "Disk full: produce gets an error, nothing acknowledged is
lost"; Replication). A failed log write fences that node's Raft group (the data on its
disk is not what the group thinks: `raft/src/group.rs`), so the other two elect a leader
and acks=all produces go on there; nothing acknowledged is lost; once space returns and
the node restarts, its replica catches up. A Kafka broker takes a log directory that
failed a write offline until it restarts, the same way.

Node 3's data directory is a small ext4 image, loop-mounted (`loop_mounted_disk`)."""

from __future__ import annotations

import uuid


from strand_harness import (free_filler, loop_mounted_disk, need_module, read_partition,
                            wait_until, write_filler)
from test_cluster import ck, gauge, owned_cluster, producer_config  # noqa: F401 (ck: fixture)

IMAGE_BYTES = 96 * 1024 * 1024
FILLER_BYTES = 32 * 1024 * 1024
RECORD_BYTES = 32 * 1024
# The node with the small disk; the partition's replicas, it first (its preferred leader).
FULL_NODE = 3
REPLICAS = [FULL_NODE, 1, 2]
# Records acknowledged after the node's disk filled: the others carry the partition.
RECORDS_AFTER_FULL = 200
# Safety bound: the small disk is full long before this (three times the image).
RECORDS_MAX = 3 * IMAGE_BYTES // RECORD_BYTES


def _fenced_groups(cluster, node: int) -> float:
    try:
        return gauge(cluster, node, "strand_raft_fenced_groups")
    except OSError:
        return 0.0


def test_a_leader_whose_disk_fills_hands_over_and_catches_up_after(request, ck):
    with loop_mounted_disk("cluster-disk-full", IMAGE_BYTES) as disk, \
            owned_cluster(request, start=False) as cluster:
        filler = disk / "filler"
        write_filler(filler, FILLER_BYTES)
        cluster[FULL_NODE].data_dir = disk / "data"
        cluster.start()
        admin = need_module("confluent_kafka.admin")
        a = admin.AdminClient({"bootstrap.servers": cluster.bootstrap()})
        topic = f"full-{uuid.uuid4().hex[:8]}"
        a.create_topics([admin.NewTopic(topic, num_partitions=1, replica_assignment=[REPLICAS])])[topic] \
            .result(30)
        assert cluster.wait_preferred_leader(topic, 0) == FULL_NODE

        acked: list[tuple[int, bytes]] = []
        failed: list = []

        def report(err, msg):
            if err is None:
                acked.append((msg.offset(), msg.value()))
            else:
                failed.append(err)

        p = ck.Producer(producer_config(cluster.bootstrap()))
        sent = 0
        full_at = None
        while full_at is None or sent < full_at + RECORDS_AFTER_FULL:
            assert sent < RECORDS_MAX, f"{sent} records and node {FULL_NODE}'s group not fenced"
            for _ in range(32):
                value = f"{sent:08d}".encode().ljust(RECORD_BYTES, b".")
                p.produce(topic, value, partition=0, on_delivery=report)
                sent += 1
            assert p.flush(120) == 0, "undelivered records"
            # Free blocks run out first into the log's preallocation; the write past it
            # fails and fences the group.
            if full_at is None and _fenced_groups(cluster, FULL_NODE) > 0:
                full_at = sent
        assert not failed, [str(e) for e in failed[:5]]

        leader = cluster.wait_leader(topic, 0, exclude={FULL_NODE})
        values = [v for _, v in sorted(acked)]
        got = [v for _, _, v in read_partition(ck, cluster.bootstrap([leader]), topic, 0,
                                               timeout_s=60)]
        assert got == values, f"{len(values)} acknowledged, {len(got)} read from node {leader}"

        # Space returns; the node restarts (its group stays fenced until then) and catches up.
        free_filler(filler)
        cluster.kill9(FULL_NODE)
        cluster.restart(FULL_NODE)
        end = cluster[leader].log_end(topic, 0)
        wait_until(lambda: cluster[FULL_NODE].log_end(topic, 0) == end, 60,
                   f"node {FULL_NODE}'s replica at the leader's log end {end}")
        print(f"node {FULL_NODE}'s disk full after {full_at} records of {RECORD_BYTES} B; "
              f"{len(values)} acknowledged, led by node {leader} after")
