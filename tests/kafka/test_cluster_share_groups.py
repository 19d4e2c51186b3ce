"""Share groups (KIP-932) on a three-node cluster (replication factor 3), with the Kafka
4.1 Java client's `KafkaShareConsumer` (tests/kafka/java/ShareCheck.java). A share
partition's delivery state lives on the leader of its data partition, and is persisted on
the leader of its `__share_group_state` partition: when those are different nodes, the
data partition's leader reads and writes it there with ReadShareGroupState and
WriteShareGroupState (Kafka's share-coordinator requests). The test picks a group whose
state partition is led by another node than its data partition, then kills -9 the data
partition's leader and later the state partition's leader: no acknowledged record is ever
delivered again, and every record is accepted exactly once. Deleting the group then
forgets its state on every node (DeleteShareGroupState between nodes), wherever its
coordinator moved meanwhile (the membership is persisted in `__consumer_offsets` and
replayed by the new coordinator).
"""

from __future__ import annotations

import re
import urllib.request
import uuid

import pytest

from strand_harness import java_classpath, need_module
from test_cluster import owned_cluster
from test_share_groups import (
    SHARE_ARGS,
    _delete_group,
    _only_new_records_come,
    _run,
    _set_earliest,
    _setup,
    _strandctl_counts,
    _twice_and_missing,
)

STATE_TOPIC = "__share_group_state"
# Kafka's default, and strand's.
STATE_PARTITIONS = 50


class _Bootstrap:
    """What the share-group helpers use of a broker: its bootstrap servers."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap


def state_partition(group: str, topic: str, partition: int) -> int:
    """The `__share_group_state` partition of a share partition (strand's key
    "group:topic:partition", ASCII here): Java's String.hashCode, its sign bit cleared,
    modulo the partition count."""
    h = 0
    for c in f"{group}:{topic}:{partition}":
        h = (31 * h + ord(c)) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % STATE_PARTITIONS


@pytest.fixture
def ck():
    return need_module("confluent_kafka")


@pytest.fixture
def share_check() -> list[str]:
    java, cp = java_classpath("java4.1", "ShareCheck")
    return [java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", cp, "ShareCheck"]


@pytest.fixture
def three(request):
    with owned_cluster(request, extra_args=[*SHARE_ARGS, "--group-initial-rebalance-delay-ms",
                                            "0"]) as c:
        yield c


def _requests_served(node, api: str) -> int:
    """How many `api` requests `node` served since it started (every shard's)."""
    url = f"http://127.0.0.1:{node.admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    pattern = rf'^strand_kafka_requests_total{{shard="\d+",api="{api}"}} (\d+)$'
    return sum(int(n) for n in re.findall(pattern, text, flags=re.M))


def _group_stored_elsewhere(three, topic: str, data_leader: int) -> tuple[str, int]:
    """A group name whose share partition of `topic`-0 has its state on a
    `__share_group_state` partition led by another node than `data_leader`."""
    for i in range(200):
        group = f"grp-share-c-{uuid.uuid4().hex[:6]}-{i}"
        p = state_partition(group, topic, 0)
        leader = three.leader_of(STATE_TOPIC, p)
        if leader is not None and leader != data_leader:
            return group, p
    raise AssertionError(f"no group name among 200 whose state is off node {data_leader}")


def test_acknowledgements_hold_across_kill9_of_the_leader_and_of_the_state_leader(
        ck, three, share_check):
    b = _Bootstrap(three.bootstrap())
    count, k1, k2 = 60, 20, 15
    topic, warmup = _setup(ck, b, "cluster", count)
    # A first group's first heartbeat creates __share_group_state; its state partitions
    # then have leaders to choose from.
    assert _run(share_check, b, topic, warmup, "drain", 1, 40)["accepted"]
    data_leader = three.leader_of(topic, 0)
    assert data_leader is not None, "the topic has no leader"
    group, p = _group_stored_elsewhere(three, topic, data_leader)
    _set_earliest(b.bootstrap, group)

    first = _run(share_check, b, topic, group, "accept-some", k1)["accepted"]
    assert len(first) == len(set(first)) == k1, first
    # The acknowledgements went to the other node that keeps the state.
    keeper = three.leader_of(STATE_TOPIC, p)
    assert keeper is not None and keeper != data_leader, (keeper, data_leader)
    writes = _requests_served(three[keeper], "write_share_group_state")
    assert writes > 0, f"node {keeper}, keeping the state, served no WriteShareGroupState"

    three.kill9(data_leader)
    three.restart(data_leader)
    second = _run(share_check, b, topic, group, "drain", k2, 60)["accepted"]
    again = sorted(set(second) & set(first))
    assert not again, f"accepted before the leader's kill -9, delivered again: {again}"

    state_leader = three.leader_of(STATE_TOPIC, p)
    assert state_leader is not None, f"{STATE_TOPIC}-{p} has no leader"
    three.kill9(state_leader)
    three.restart(state_leader)
    done = set(first) | set(second)
    rest = set(range(count)) - done
    third = _run(share_check, b, topic, group, "drain", len(rest), 60)["accepted"]
    again = sorted(set(third) & done)
    assert not again, f"accepted before the state leader's kill -9, delivered again: {again}"
    twice, missing = _twice_and_missing(first + second + third, set(range(count)))
    assert not twice and not missing, f"accepted twice: {twice}; never: {missing}"
    # Admin.listShareGroupOffsets at the group's coordinator reads the state where it is.
    offsets = _run(share_check, b, topic, group, "offsets")["start_offsets"]
    assert offsets == {"0": count}, offsets
    # The counts strandctl shows are the leader's: a leader that took the partition over
    # since its last fetch has none yet. Leadership returns to the preferred replica a few
    # seconds after the restarts above; wait for that before the fetch that loads them.
    leader = three.wait_preferred_leader(topic, 0)
    _only_new_records_come(ck, share_check, b, topic, group, count)
    # strandctl asked through a node that does not lead the partition still shows its
    # counts: it reads them from the leader's /metrics (found through /v1/nodes).
    assert three.leader_of(topic, 0) == leader, "the partition's leader moved again"
    other = next(n for n in (1, 2, 3) if n != leader)
    shown = _strandctl_counts(three[other], group, topic)
    assert (shown["START-OFFSET"], shown["LAG"], shown["IN-FLIGHT-ACQUIRED"]) == (
        str(count + 1), "0", "0"), (leader, other, shown)
    # Deleting the group forgets its state on every node: the same group id starts over.
    deleted = _delete_group(share_check, b, topic, group)
    assert deleted["deleted"] is True, deleted
    again = _run(share_check, b, topic, group, "drain", count + 1, 60)["accepted"]
    twice, missing = _twice_and_missing(again, set(range(count + 1)))
    assert not twice and not missing, f"after the delete, twice: {twice}; never: {missing}"
