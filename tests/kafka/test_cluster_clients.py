"""Every Kafka client of the suite against a three-node cluster: the consumer-group tests of
test_groups.py (confluent-kafka, kafka-python, aiokafka, kafkajs, the Java client; each
creates a 3-partition topic at the cluster's default replication factor, 3, produces with
acks=all, consumes in a group, commits, resumes after the commit, splits the partitions
between two members and hands them over on LeaveGroup), run with all three nodes as
bootstrap servers. On a cluster the clients also meet what one node never shows them:
partition leaders and group coordinators on different nodes, the controller named by
Metadata, requests forwarded to the controller.

One cluster serves every test of the module (initial rebalance delay 0, so the timings
printed as GROUP-TIMING are not comparable with the single-node ones).
"""

from __future__ import annotations

import pytest

from test_cluster import owned_cluster
from strand_harness import need_module, wait_until
from test_groups import (  # noqa: F401 (tests and fixtures collected here too)
    OFFSETS_PARTITIONS,
    PARTS,
    _uid,
    ck,
    create_topic,
    java_group_classpath,
    test_groups_aiokafka,
    test_groups_confluent,
    test_groups_java,
    test_groups_kafka_python,
    test_groups_kafkajs,
)


class _Bootstrap:
    """What the group tests use of a broker: its bootstrap servers."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap


@pytest.fixture(scope="module")
def three_nodes(request):
    with owned_cluster(request, extra_args=[
        "--offsets-topic-num-partitions", str(OFFSETS_PARTITIONS),
        "--num-partitions", str(PARTS),
        "--group-initial-rebalance-delay-ms", "0",
    ]) as c:
        yield c


@pytest.fixture
def slow(three_nodes):
    return _Bootstrap(three_nodes.bootstrap())


@pytest.fixture
def fast(three_nodes):
    return _Bootstrap(three_nodes.bootstrap())


def test_the_topics_of_these_tests_are_replicated_on_every_node(ck, three_nodes):
    """`create_topic` asks for the broker's default replication factor: 3 here, so the
    client tests above ran against replicated partitions led by different nodes."""
    admin = need_module("confluent_kafka.admin").AdminClient({"bootstrap.servers": three_nodes.bootstrap()})
    name = f"rf-{_uid()}"
    create_topic(ck, three_nodes.bootstrap(), name)
    # CreateTopics answers once the node that took it applied the topic; the others apply
    # it from the controller log a moment later (as Kafka's brokers do), and list_topics
    # may ask any of them.
    for p in range(PARTS):
        wait_until(lambda p=p: all(v is not None for v in three_nodes.leader_views(name, p).values()),
                   30, f"every node to know {name}/{p}")
    parts = admin.list_topics(name, timeout=10).topics[name].partitions
    assert sorted(parts) == list(range(PARTS))
    assert all(len(p.replicas) == 3 for p in parts.values()), parts
