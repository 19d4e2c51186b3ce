"""Consumer groups on a three-node cluster.

A group's coordinator is the node leading the group's `__consumer_offsets` partition
(FindCoordinator names it). Every other node answers the group's requests with
NOT_COORDINATOR, as a Kafka broker does: a follower's copy of the groups is stale, and a
node that lost the leadership must not keep a second copy of a group alive beside the
new coordinator (two generations consuming the same partitions). Clients look the
coordinator up again on that error.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest

from cluster_harness import NODE_IDS, _Reader
from strand_harness import frame, need, need_module, recv_response, wait_until
from test_cluster import ck, cluster, producer_config  # noqa: F401 (fixtures)
from test_strandctl import ctl, strandctl_bin

NOT_COORDINATOR = 16
UNKNOWN_MEMBER_ID = 25
DEADLINE_S = 60.0
FIND_COORDINATOR, HEARTBEAT, OFFSET_FETCH = 10, 12, 9


def kstr(v: str) -> bytes:
    b = v.encode()
    return struct.pack(">h", len(b)) + b


def request(node, api_key: int, version: int, body: bytes) -> _Reader:
    """One request on a fresh connection to `node`; the response body after the header."""
    host, port = node.bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(frame(api_key, version, 1, body))
        r = _Reader(recv_response(s))
    assert r.take("i") == 1, "correlation id"
    return r


def find_coordinator(node, group: str) -> int | None:
    """FindCoordinator v0 through `node`: the coordinator's node id, None on an error."""
    r = request(node, FIND_COORDINATOR, 0, kstr(group))
    error, node_id = r.take("hi")
    return node_id if error == 0 else None


def heartbeat_error(node, group: str) -> int:
    """Heartbeat v0 for a member that never joined."""
    r = request(node, HEARTBEAT, 0, kstr(group) + struct.pack(">i", 1) + kstr("nobody"))
    return r.take("h")


def offset_fetch_error(node, group: str, topic: str) -> int:
    """OffsetFetch v1 of partition 0 of `topic`: the partition's error code."""
    body = kstr(group) + struct.pack(">i", 1) + kstr(topic) + struct.pack(">ii", 1, 0)
    r = request(node, OFFSET_FETCH, 1, body)
    assert r.take("i") == 1, "one topic"
    r.string()
    assert r.take("i") == 1, "one partition"
    _partition, _offset = r.take("iq")
    r.string()
    return r.take("h")


def coordinator_of(cluster, group: str, nodes=NODE_IDS) -> int | None:
    """The coordinator every node in `nodes` names, None while they disagree or have none."""
    named = {find_coordinator(cluster[n], group) for n in nodes}
    return named.pop() if len(named) == 1 and None not in named else None


def test_only_the_coordinator_answers_a_groups_requests(cluster):
    group = f"g-{uuid.uuid4().hex[:8]}"

    def settled() -> int | None:
        # Right after an election (or a hand-back to the preferred replica) the named node
        # is not serving yet and refuses too; clients then look it up again.
        c = coordinator_of(cluster, group)
        return c if c is not None and heartbeat_error(cluster[c], group) != NOT_COORDINATOR else None

    coord = wait_until(settled, DEADLINE_S, f"every node to name one serving coordinator of {group}")
    for n in NODE_IDS:
        hb = heartbeat_error(cluster[n], group)
        fetch = offset_fetch_error(cluster[n], group, "any-topic")
        if n == coord:
            assert hb == UNKNOWN_MEMBER_ID, (n, hb)
            assert fetch == 0, (n, fetch)
        else:
            assert hb == NOT_COORDINATOR, (n, hb)
            assert fetch == NOT_COORDINATOR, (n, fetch)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_consumer_of_a_cut_off_coordinator_joins_the_new_one(ck, cluster, protocol):
    """The coordinator is cut off from its peers until another node coordinates the group
    (its leadership of the offsets partition ended: check quorum). Its consumer follows the
    group to the new coordinator, which replayed the group from the offsets partition, and
    rebalances with a consumer that joined there: the partitions end up split between the
    two, never held by both. (The hand-back to the preferred replica may move the group once
    more meanwhile; that the old coordinator refuses the group is the previous test's.)
    With both group protocols: a KIP-848 member goes on at its epoch with the coordinator
    that replayed the group's state (the default 5 s heartbeat interval paces it)."""
    admin = need_module("confluent_kafka.admin")
    topic, group = f"grouped-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:8]}"
    a = admin.AdminClient({"bootstrap.servers": cluster.bootstrap()})
    a.create_topics([admin.NewTopic(topic, num_partitions=2, replication_factor=3)])[topic].result(30)
    p = ck.Producer(producer_config(cluster.bootstrap()))
    for i in range(20):
        p.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert p.flush(60) == 0

    coord = wait_until(lambda: coordinator_of(cluster, group), DEADLINE_S,
                       f"every node to name one coordinator of {group}")
    others = [n for n in NODE_IDS if n != coord]
    conf = {"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000}
    if protocol == "classic":
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    else:
        conf["group.protocol"] = protocol
    first = ck.Consumer({**conf, "bootstrap.servers": cluster.bootstrap()})
    second = None
    try:
        first.subscribe([topic])

        def owned(c) -> set[int]:
            c.poll(0.1)
            return {tp.partition for tp in c.assignment()}

        wait_until(lambda: owned(first) == {0, 1}, DEADLINE_S, "the first consumer to own both")

        cluster.cut(coord)
        wait_until(lambda: coordinator_of(cluster, group, others) in others, DEADLINE_S,
                   "the other nodes to name a new coordinator")
        # Healed at once: the old coordinator, a follower now, is reachable by every client
        # and must refuse the group it held. (While cut off it knows no coordinator, and
        # librdkafka keeps asking it, the idlest connection, FindCoordinator: a node that
        # lost its peers is not hidden from Metadata as a fenced Kafka broker would be.)
        cluster.heal(coord)
        second = ck.Consumer({**conf, "bootstrap.servers": cluster.bootstrap(others)})
        second.subscribe([topic])

        seen = []

        def split() -> bool:
            mine, theirs = owned(first), owned(second)
            seen.append((round(time.monotonic(), 1), sorted(mine), sorted(theirs)))
            return len(mine) == 1 and len(theirs) == 1 and not mine & theirs

        try:
            wait_until(split, DEADLINE_S,
                       "both consumers in one generation of the new coordinator, one partition each")
        finally:
            changes = [s for i, s in enumerate(seen) if i == 0 or s[1:] != seen[i - 1][1:]]
            print(f"assignments (time, first, second) as they changed: {changes}")
        # strandctl lists the groups of every node, whichever node it is pointed at.
        need(strandctl_bin().exists(), f"strandctl not found at {strandctl_bin()}")
        for n in NODE_IDS:
            out = ctl(cluster[n], "group", "list").stdout
            assert group in out, (n, out)
    finally:
        cluster.heal(coord)
        first.close()
        if second is not None:
            second.close()


CHECKPOINT_FILE = "partition-state.checkpoint"
CHECKPOINT_INTERVAL_BYTES = 16 << 20


def test_commits_survive_a_coordinator_kill_after_the_offsets_checkpoint_moved(ck, cluster):
    """Commits with large metadata until every replica of the group's offsets partition has
    moved its partition-state checkpoint (every 16 MiB of appended data, on followers too);
    then the coordinator is killed with SIGKILL. The new coordinator rebuilds the group from
    its checkpoint (the offsets partition's records as compaction keeps them) and the log
    after it: the last commit of every partition, metadata included, is there."""
    admin = need_module("confluent_kafka.admin")
    topic, group = f"committed-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:8]}"
    partitions = 8
    a = admin.AdminClient({"bootstrap.servers": cluster.bootstrap()})
    a.create_topics([admin.NewTopic(topic, num_partitions=partitions,
                                    replication_factor=3)])[topic].result(30)
    coord = wait_until(lambda: coordinator_of(cluster, group), DEADLINE_S,
                       f"every node to name one coordinator of {group}")

    def checkpoints() -> list[int]:
        return [n for n in NODE_IDS
                if any(cluster[n].data_dir.glob(f"**/__consumer_offsets-*/{CHECKPOINT_FILE}"))]

    assert checkpoints() == [], "no offsets partition has 16 MiB yet"
    meta = "m" * 4000
    conf = {"bootstrap.servers": cluster.bootstrap(), "group.id": group,
            "enable.auto.commit": False}
    c = ck.Consumer(conf)
    last: list = []
    try:
        rounds = CHECKPOINT_INTERVAL_BYTES // (partitions * len(meta)) + 64
        for r in range(rounds):
            last = [ck.TopicPartition(topic, p, r * partitions + p, meta) for p in range(partitions)]
            c.commit(offsets=last, asynchronous=False)
    finally:
        c.close()
    wait_until(lambda: checkpoints() == list(NODE_IDS), DEADLINE_S,
               "every replica of the offsets partition to save a checkpoint")

    cluster.kill9(coord)
    others = [n for n in NODE_IDS if n != coord]
    wait_until(lambda: coordinator_of(cluster, group, others) in others, DEADLINE_S,
               "the other nodes to name a new coordinator")
    fresh = ck.Consumer({**conf, "bootstrap.servers": cluster.bootstrap(others)})
    try:
        got = wait_until(lambda: fresh.committed([ck.TopicPartition(topic, p)
                                                  for p in range(partitions)], timeout=10),
                         DEADLINE_S, "the new coordinator to answer OffsetFetch")
    finally:
        fresh.close()
    assert [(tp.partition, tp.offset, tp.metadata) for tp in got] == \
        [(tp.partition, tp.offset, tp.metadata) for tp in last]
