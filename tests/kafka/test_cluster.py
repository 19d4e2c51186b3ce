"""A three-node cluster (ARCHITECTURE.md, Replication) under faults, checked like Jepsen.

Each test starts three strand nodes (cluster_harness.py; all three are controller voters,
peers talk through a fault-injecting proxy) and a topic with 3 partitions and replication
factor 3. A producer thread (acks=all, idempotent) writes unique values round-robin over
the partitions while a fault is applied: kill -9 of a partition leader, a cut of a
follower, a cut of a leader, a restart of every node. Then each partition is read from
offset 0 once through every node's listener, and jepsen_check.py checks the history: no
acknowledged write lost, no value at two offsets, no offset with two values or another
value than acknowledged, offsets increasing.

A delivery error is an `unknown` outcome (librdkafka cannot tell us whether a timed-out or
purged batch was appended), so only `ok` writes can be lost. With message.timeout.ms at a
minute there should be none.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import signal
import socket
import struct
import threading
import time
from collections import Counter, deque

import pytest

from cluster_harness import Cluster, NODE_IDS, metadata_v1, strand_bin, partition_watermarks
from jepsen_check import OK, UNKNOWN, Write, check
from strand_harness import (admin_outcomes, frame, need_module, produce_one_error, recv_response,
                            wait_until)

try:  # conftest.py attaches the stderr tail of the brokers it knows to a failing report
    from conftest import _BROKERS_OF_TEST
except ImportError:  # pragma: no cover - run outside tests/kafka
    _BROKERS_OF_TEST = {}

PARTITIONS = 3
REPLICATION_FACTOR = 3
# The producer thread's target rate; a 2-core CI box also runs three brokers.
RATE_PER_S = 400
# Length of each fault test's workload and when its fault starts and ends.
WORKLOAD_S = 10.0
FAULT_AT_S = 2.0
FAULT_FOR_S = 3.0
# Acknowledgements wanted before a fault, so that it lands mid-stream.
ACKS_BEFORE_FAULT = 100
# kill -9 of a leader until Metadata names another one. The target is 2 s; the bound is
# loose so a loaded CI box does not fail on timing, which bench and the sim measure.
FAILOVER_TARGET_S = 2.0
FAILOVER_BOUND_S = 10.0
# A new leader after a cut: election timeout plus a loaded box.
ELECTION_DEADLINE_S = 15.0
# Writes acknowledged again after a fault.
PROGRESS_DEADLINE_S = 30.0
# librdkafka retries a message this long (through failovers) before giving up on it.
MESSAGE_TIMEOUT_MS = 60_000
FLUSH_DEADLINE_S = 90.0
READ_DEADLINE_S = 60.0
LEADERS_DEADLINE_S = 30.0


# -- fixtures -------------------------------------------------------------------------

def _failed(node) -> bool:
    return any(getattr(node, f"rep_{w}", None) is not None and getattr(node, f"rep_{w}").failed
               for w in ("setup", "call"))


@contextlib.contextmanager
def owned_cluster(request, start: bool = True, **cluster_args):
    """Three nodes (`Cluster(**cluster_args)`), started unless `start` is false, owned by
    the test; SIGTERMed at the end, which asserts exit code 0 for each."""
    c = Cluster(name=request.node.name[:40], **cluster_args)
    _BROKERS_OF_TEST[request.node.nodeid] = list(c.nodes.values())
    try:
        if start:
            c.start()
        yield c
    finally:
        rcs = c.close()
        bad = {n: rc for n, rc in rcs.items() if rc != 0}
        if not bad and not _failed(request.node) and not os.environ.get("STRAND_KEEP_DIRS"):
            c.cleanup()
        else:
            print(f"\nkept data dirs of {c.name}: {c.root}")
    assert not bad, f"nodes exited with {bad} after SIGTERM:\n{c.log_tails()}"


@pytest.fixture
def cluster(request):
    """Three started nodes, owned by this test (see `owned_cluster`); a test marked
    `cluster_args(...)` has them passed to `Cluster`."""
    marker = request.node.get_closest_marker("cluster_args")
    with owned_cluster(request, **(marker.kwargs if marker else {})) as c:
        yield c


@pytest.fixture
def ck():
    return need_module("confluent_kafka")


@pytest.fixture
def workload(ck, cluster):
    """Factory: `workload(topic)` starts a Workload; teardown aborts any still running so
    a failed test leaves no producer behind."""
    made: list[Workload] = []

    def make(topic: str) -> Workload:
        w = Workload(ck, cluster.bootstrap(), topic).start()
        made.append(w)
        return w

    yield make
    for w in made:
        w.abort()


@pytest.fixture
def rf3_topic(ck, cluster, topic):
    """`topic` created with 3 partitions and replication factor 3, every partition led and
    every replica reached by its leader. Tests kill nodes right after: a replica its leader
    has not reached yet is blank (no Raft state), and a blank replica whose data directory
    the controller cannot vouch for votes for no candidate holding entries it lacks (see
    raft/src/group.rs and cluster::incarnation), so a leader killed before it reached both
    followers could leave its partition without a leader until it returned."""
    admin = need_module("confluent_kafka.admin")
    a = admin.AdminClient({"bootstrap.servers": cluster.bootstrap()})
    new = admin.NewTopic(topic, num_partitions=PARTITIONS, replication_factor=REPLICATION_FACTOR)
    a.create_topics([new])[topic].result(30)
    wait_leaders(cluster, topic)
    # Metadata's ISR starts full (as Kafka's does), so it does not show that; a voter
    # lagging behind the commit index makes its partition under-replicated on the leader.
    wait_until(lambda: all(gauge(cluster, n, "strand_under_replicated_partitions") == 0
                           for n in NODE_IDS),
               LEADERS_DEADLINE_S, f"every replica of {topic} reached by its leader")
    return topic


# -- helpers ---------------------------------------------------------------------------

def wait_leaders(cluster: Cluster, topic: str) -> dict[int, int]:
    """Waits until each partition has a leader the reachable nodes agree on."""
    return {p: cluster.wait_leader(topic, p, timeout=LEADERS_DEADLINE_S)
            for p in range(PARTITIONS)}


def one_leader_view(cluster: Cluster, topic: str, partition: int) -> dict | None:
    """Every node's view of the partition's leader, when all name the same node."""
    views = cluster.leader_views(topic, partition)
    leaders = set(views.values())
    return views if len(leaders) == 1 and leaders.pop() in NODE_IDS else None


def replicas_of(cluster: Cluster, topic: str, partition: int, node_id: int) -> list[int]:
    return cluster.metadata(node_id).topics[topic][partition].replicas


def producer_config(bootstrap: str, **extra) -> dict:
    conf = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.timeout.ms": MESSAGE_TIMEOUT_MS,
        # A produce to a leader that lost its quorum times out on the broker after this
        # and is retried (same sequence numbers) wherever Metadata points next.
        "request.timeout.ms": 5000,
        "socket.timeout.ms": 10000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "retry.backoff.ms": 50,
        "retry.backoff.max.ms": 500,
        "topic.metadata.refresh.interval.ms": 2000,
    }
    conf.update(extra)
    return conf


# The producer's own log (librdkafka debug contexts) kept for a failing test to show where
# the client waited; the last CLIENT_LOG_LINES lines.
CLIENT_DEBUG = "broker,topic,msg,eos"
CLIENT_LOG_LINES = 20_000
_workload_ids = itertools.count()


class _RingHandler(logging.Handler):
    """Keeps the last `n` formatted log lines."""

    def __init__(self, n: int):
        super().__init__()
        self.lines: deque[str] = deque(maxlen=n)

    def emit(self, record):
        self.lines.append(f"{time.strftime('%H:%M:%S')}.{int(record.created * 1000) % 1000:03d} "
                          f"{record.getMessage()}")


class Workload:
    """A thread producing unique values `<topic>:<i>` to partition i % PARTITIONS at
    RATE_PER_S, recording each write's outcome for jepsen_check. The producer's debug log
    is kept (`client_log`) for a failing test to print."""

    def __init__(self, ck, bootstrap: str, topic: str, rate_per_s: float = RATE_PER_S):
        self.ck = ck
        self.topic = topic
        self.rate_per_s = rate_per_s
        self._log = _RingHandler(CLIENT_LOG_LINES)
        logger = logging.getLogger(f"strand.workload.{next(_workload_ids)}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(self._log)
        self.conf = producer_config(bootstrap, error_cb=self._on_error, logger=logger,
                                    debug=CLIENT_DEBUG)
        self._lock = threading.Lock()
        self.partition_of: dict[bytes, int] = {}
        self.outcome: dict[bytes, tuple[str, int, int | None]] = {}
        self.ack_times: list[tuple[float, int]] = []  # (monotonic time, partition) per ok
        self.delivery_errors: Counter = Counter()
        self.fatal: list[str] = []
        self.unflushed = 0
        self.exc: BaseException | None = None
        self._stop = threading.Event()
        self._abort = threading.Event()
        self._thread = threading.Thread(target=self._run, name="workload", daemon=True)
        self.started_at = 0.0

    def start(self) -> "Workload":
        self.started_at = time.monotonic()
        self._thread.start()
        return self

    def stop(self):
        """Stops producing, waits for every outstanding acknowledgement (or its failure)."""
        self._stop.set()
        self._thread.join(FLUSH_DEADLINE_S + 30)
        assert not self._thread.is_alive(), "the producer thread did not finish"
        if self.exc is not None:
            raise self.exc

    def abort(self):
        """Stops at once, dropping what is not acknowledged (a failed test's teardown)."""
        self._abort.set()
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def _on_error(self, err):
        if err.fatal():
            with self._lock:
                self.fatal.append(str(err))

    def _on_delivery(self, err, msg):
        v = msg.value()
        with self._lock:
            if err is None:
                self.outcome[v] = (OK, msg.partition(), msg.offset())
                self.ack_times.append((time.monotonic(), msg.partition()))
            else:
                self.outcome[v] = (UNKNOWN, self.partition_of[v], None)
                self.delivery_errors[err.name()] += 1

    def _run(self):
        try:
            p = self.ck.Producer(self.conf)
            i = 0
            while not self._stop.is_set():
                due = self.started_at + i / self.rate_per_s
                now = time.monotonic()
                if now < due:
                    p.poll(min(due - now, 0.05))
                    continue
                value = f"{self.topic}:{i}".encode()
                part = i % PARTITIONS
                with self._lock:
                    self.partition_of[value] = part
                try:
                    p.produce(self.topic, value=value, partition=part,
                              on_delivery=self._on_delivery)
                except BufferError:
                    with self._lock:
                        del self.partition_of[value]
                    p.poll(0.05)
                    continue
                i += 1
                p.poll(0)
            deadline = time.monotonic() + FLUSH_DEADLINE_S
            left = p.flush(0.5)
            while left and time.monotonic() < deadline and not self._abort.is_set():
                left = p.flush(0.5)
            self.unflushed = left
            if left:
                p.purge()
                p.flush(5)
        except BaseException as e:  # noqa: BLE001 - re-raised by stop()
            self.exc = e

    def client_log(self, last: int = 400) -> str:
        """The producer's last `last` log lines (librdkafka debug)."""
        lines = list(self._log.lines)[-last:]
        return "\n".join(lines)

    def acks(self, partition: int | None = None, since: float = 0.0) -> int:
        with self._lock:
            return sum(1 for t, p in self.ack_times
                       if t >= since and (partition is None or p == partition))

    def wait_acks(self, n: int, partition: int | None = None, since: float = 0.0,
                  timeout: float = PROGRESS_DEADLINE_S, what: str = ""):
        wait_until(lambda: self.acks(partition, since) >= n, timeout,
                   f"{n} acknowledgements (partition {partition}) {what}".strip(), interval=0.05)

    def history(self) -> list[Write]:
        """Every attempted write; one that never got a callback is `unknown`."""
        with self._lock:
            out = []
            for value, part in self.partition_of.items():
                outcome, p, offset = self.outcome.get(value, (UNKNOWN, part, None))
                out.append(Write(value, outcome, p, offset))
            return out

    def summary(self) -> str:
        with self._lock:
            ok = sum(1 for o in self.outcome.values() if o[0] == OK)
            return (f"{len(self.partition_of)} writes, {ok} ok, delivery errors "
                    f"{dict(self.delivery_errors)}, unflushed {self.unflushed}, "
                    f"fatal {self.fatal}")


def produce_all(ck, cluster: Cluster, topic: str, indexes,
                **extra) -> dict[bytes, tuple[int, int]]:
    """Produces `<topic>:<i>` to partition i % PARTITIONS for each index (acks=all unless
    `extra` says otherwise) and returns value -> acknowledged (partition, offset); every
    write must succeed."""
    p = ck.Producer(producer_config(cluster.bootstrap(), **extra))
    acked: dict[bytes, tuple[int, int]] = {}
    errors = []

    def on_delivery(err, msg):
        if err is None:
            acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            errors.append(str(err))

    values = [f"{topic}:{i}".encode() for i in indexes]
    for i, v in zip(indexes, values):
        p.produce(topic, value=v, partition=i % PARTITIONS, on_delivery=on_delivery)
    assert p.flush(MESSAGE_TIMEOUT_MS / 1000 + 10) == 0, "undelivered messages remain"
    assert not errors, errors[:5]
    assert sorted(acked) == sorted(values)
    return acked


def read_pass(ck, bootstrap: str, topic: str, deadline_s: float = READ_DEADLINE_S) -> list:
    """Every record of every partition from offset 0 up to its high watermark, in the order
    the consumer delivered them, as (partition, offset, value)."""
    log = _RingHandler(CLIENT_LOG_LINES)
    logger = logging.getLogger(f"strand.read_pass.{next(_workload_ids)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(log)
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "strand-tests-unused",
                     "enable.auto.commit": False, "auto.offset.reset": "error",
                     "logger": logger, "debug": "broker,topic,metadata"})
    try:
        high = {}
        for p in range(PARTITIONS):
            try:
                lo, hi = wait_until(
                    lambda p=p: partition_watermarks(ck, c, topic, p),
                    LEADERS_DEADLINE_S, f"watermarks of {topic}/{p} via {bootstrap}")
            except TimeoutError:
                # What the bootstrap node tells clients, and where the client waited (a CI
                # failure once: _UNKNOWN_PARTITION for 30 s while a node led the partition).
                try:
                    md = metadata_v1(int(bootstrap.rsplit(":", 1)[1]))
                    told = f"brokers {sorted(md.brokers)}, leaders {md.topics.get(topic)}"
                except (OSError, AssertionError, struct.error) as e:
                    told = f"no Metadata: {e!r}"
                print(f"Metadata via {bootstrap}: {told}")
                print("consumer log (last lines):\n" + "\n".join(list(log.lines)[-300:]))
                raise
            assert lo == 0, f"{topic}/{p}: log start offset {lo}, nothing was deleted"
            high[p] = hi
        c.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out = []
        next_offset = {p: 0 for p in range(PARTITIONS)}
        errors = []
        deadline = time.monotonic() + deadline_s
        while any(next_offset[p] < high[p] for p in range(PARTITIONS)):
            assert time.monotonic() < deadline, (
                f"read via {bootstrap}: at {next_offset} of high watermarks {high} after "
                f"{deadline_s}s; errors {errors[:5]}")
            for m in c.consume(500, 0.5):
                if m.error():
                    assert not m.error().fatal(), m.error()
                    errors.append(str(m.error()))
                    continue
                out.append((m.partition(), m.offset(), m.value()))
                next_offset[m.partition()] = max(next_offset[m.partition()], m.offset() + 1)
        return out
    finally:
        c.close()


def read_everywhere(ck, cluster: Cluster, topic: str) -> list[list]:
    """One read pass bootstrapped through each node's Kafka listener."""
    return [read_pass(ck, cluster[n].bootstrap, topic) for n in sorted(cluster.nodes)]


def assert_consistent(workload_or_writes, passes, min_ok: int):
    writes = (workload_or_writes.history() if isinstance(workload_or_writes, Workload)
              else workload_or_writes)
    report = check(writes, passes)
    print(report)
    counts = report.counts()
    for anomaly in ("lost", "duplicate", "inconsistent_offset", "nonmonotonic",
                    "failed_read", "unexpected"):
        assert counts[anomaly] == 0, str(report)
    assert report.writes[OK] >= min_ok, f"only {report.writes[OK]} ok writes: {report}"
    return report


def show(capsys, line: str):
    """Prints past pytest's capture: timings worth seeing in passing runs too."""
    with capsys.disabled():
        print(f"\n{line}")


def sleep_until(t: float):
    """The fault schedule: a fault starts and ends at fixed times of the workload. This is
    not a wait for a condition (those use wait_until with a deadline)."""
    time.sleep(max(0.0, t - time.monotonic()))


def finish(workload: Workload):
    sleep_until(workload.started_at + WORKLOAD_S)
    workload.stop()
    print(workload.summary())
    assert not workload.fatal, f"the idempotent producer hit a fatal error: {workload.fatal}"


# -- a. the cluster forms and replicates -----------------------------------------------

def test_three_nodes_form_a_cluster_and_replicate_a_topic(ck, cluster, rf3_topic):
    admin = need_module("confluent_kafka.admin")
    topic = rf3_topic
    md = admin.AdminClient({"bootstrap.servers": cluster.bootstrap()}).list_topics(timeout=10)
    assert sorted(md.brokers) == list(NODE_IDS), f"brokers {md.brokers}"
    for b in md.brokers.values():
        assert (b.host, b.port) == ("127.0.0.1", cluster[b.id].kafka_port), b
    parts = md.topics[topic].partitions
    assert sorted(parts) == list(range(PARTITIONS))
    for p, pm in parts.items():
        assert sorted(pm.replicas) == list(NODE_IDS), f"{topic}/{p} replicas {pm.replicas}"
        assert pm.leader in NODE_IDS, f"{topic}/{p} leader {pm.leader}"
    # Every node's own Metadata agrees on brokers and replicas.
    for n in NODE_IDS:
        raw = cluster.metadata(n)
        assert sorted(raw.brokers) == list(NODE_IDS), f"node {n}: brokers {raw.brokers}"
        assert raw.controller in NODE_IDS, f"node {n}: controller {raw.controller}"
        for p in range(PARTITIONS):
            assert sorted(raw.topics[topic][p].replicas) == list(NODE_IDS), (n, p, raw.topics)

    # Exactly one node reports itself the active controller, and nothing is leaderless.
    wait_until(lambda: sum(gauge(cluster, n, "strand_active_controller_count")
                           for n in NODE_IDS) == 1,
               timeout=15, what="exactly one active controller in /metrics")
    wait_until(lambda: all(gauge(cluster, n, "strand_leaderless_partitions") == 0
                           for n in NODE_IDS),
               timeout=15, what="no leaderless partition in /metrics")

    # acks=all, then acks=1 (answered once the leader appended; replicated all the same).
    n = 200
    acked = produce_all(ck, cluster, topic, range(n))
    acked.update(produce_all(ck, cluster, topic, range(n, 2 * n),
                             **{"acks": "1", "enable.idempotence": False}))
    writes = [Write(v, OK, part, off) for v, (part, off) in acked.items()]
    passes = read_everywhere(ck, cluster, topic)
    assert [len(x) for x in passes] == [2 * n] * len(NODE_IDS)
    assert_consistent(writes, passes, min_ok=2 * n)
    # Each partition's leader timed both followers' acknowledgements of its appends.
    acks = sum(gauge(cluster, node, "strand_raft_append_ack_seconds_count") for node in NODE_IDS)
    assert acks >= 2 * PARTITIONS, f"{acks} follower acknowledgements timed"


def test_every_metadata_answer_lists_the_controller_it_names(request):
    """From a node's first Metadata answer on, the controller it names is itself (it
    forwards controller requests, as a KRaft broker names a live broker), a broker it lists.
    librdkafka's admin requests wait for the controller Metadata names and do not ask again:
    a node that named the controller group's leader before it applied that leader's
    registration (about a second into start-up) named a broker it did not list, and a
    create_topics sent to it hung until its timeout (CI failed on that 2 runs in 5); one
    that named a leader which had just stopped left the request waiting the same way."""
    answers: list[tuple[int, int, list[int]]] = []

    def watch():
        for n in NODE_IDS:
            with contextlib.suppress(OSError, AssertionError, struct.error):
                md = cluster.metadata(n)
                answers.append((n, md.controller, sorted(md.brokers)))

    with owned_cluster(request, start=False) as cluster:
        cluster.start(while_starting=watch)
        settle = time.monotonic() + 1.0
        while time.monotonic() < settle:
            watch()
    assert len(answers) >= 10, f"too few Metadata answers during start-up: {answers}"
    wrong = [a for a in answers if a[1] != a[0] or a[1] not in a[2]]
    assert not wrong, f"(node, controller, brokers) not naming itself, listed: {wrong[:5]}"


def test_metadata_reports_the_in_sync_replicas(ck, cluster, rf3_topic):
    """Metadata's isr_nodes is the leader's in-sync set, on every node: a killed follower
    leaves it (silent for an election timeout), and returns once restarted and caught up.
    An acks=all produce gets NOT_ENOUGH_REPLICAS while fewer are in sync than the topic's
    min.insync.replicas."""
    topic = rf3_topic
    leader = cluster.wait_leader(topic, 0)
    follower, other = [n for n in NODE_IDS if n != leader]

    def isr_views(nodes) -> set:
        return {tuple(sorted(cluster.metadata(n).topics[topic][0].isr)) for n in nodes}

    everyone = (tuple(NODE_IDS),)
    wait_until(lambda: isr_views(NODE_IDS) == set(everyone), LEADERS_DEADLINE_S,
               "every node to report all three replicas in sync")
    cluster.kill9(follower)
    without = tuple(sorted((leader, other)))
    wait_until(lambda: isr_views((leader, other)) == {without}, LEADERS_DEADLINE_S,
               f"node {follower} out of the in-sync replicas on the live nodes")
    # min.insync.replicas: acks=all needs that many in sync (NOT_ENOUGH_REPLICAS, as Kafka
    # answers); acks=1 does not.
    set_min_insync(cluster, topic, 3)
    # No retries: the broker's answer is the delivery error (a retried one ends timed out).
    strict = ck.Producer(producer_config(cluster.bootstrap(),
                                         **{"enable.idempotence": False, "retries": 0}))
    err = produce_one_error(strict, topic, partition=0)
    assert err is not None and err.code() == ck.KafkaError.NOT_ENOUGH_REPLICAS, err
    relaxed = producer_config(cluster.bootstrap(), acks=1, **{"enable.idempotence": False})
    assert produce_one_error(ck.Producer(relaxed), topic, partition=0) is None
    set_min_insync(cluster, topic, 2)
    # Writes it misses while down; it rejoins the set only once it has them.
    produce_all(ck, cluster, topic, range(50))
    cluster.restart(follower)
    wait_until(lambda: isr_views(NODE_IDS) == set(everyone), LEADERS_DEADLINE_S,
               f"node {follower} back in the in-sync replicas on every node")
    assert cluster.wait_leader(topic, 0) == leader
    set_min_insync(cluster, topic, 3)
    assert produce_one_error(strict, topic, partition=0) is None


def test_a_stopping_node_hands_its_leaderships_away_first(ck, cluster, rf3_topic):
    """SIGTERM stops a node as Kafka's controlled shutdown does: before it exits it hands
    the leadership of its partitions to in-sync replicas, so when it has exited the other
    nodes already name new leaders (after a crash they would wait an election timeout, 0.5
    s or more, to elect one), and acks=all writes go on. Restarted, it leads again."""
    topic = rf3_topic
    node = replicas_of(cluster, topic, 0, NODE_IDS[0])[0]
    wait_until(lambda: cluster.leader_of(topic, 0) == node, LEADERS_DEADLINE_S,
               f"node {node}, the preferred replica, to lead partition 0")
    leaders = wait_leaders(cluster, topic)
    led = sorted(p for p, n in leaders.items() if n == node)
    assert 0 in led, leaders
    others = [n for n in NODE_IDS if n != node]
    cluster[node].terminate()
    assert cluster[node].wait() == 0
    for p in led:
        views = cluster.leader_views(topic, p, nodes=others)
        assert all(v in others for v in views.values()), \
            f"partition {p} at node {node}'s exit: {views}\n{cluster.log_tails()}"
    produce_all(ck, cluster, topic, range(30))
    cluster.restart(node)
    # Preferred-leader balancing hands partition 0 back.
    wait_until(lambda: cluster.leader_of(topic, 0) == node, LEADERS_DEADLINE_S,
               f"node {node} to lead partition 0 again")


def test_a_draining_node_is_not_ready_while_it_still_serves(ck, cluster, rf3_topic):
    """From the moment SIGTERM begins the controlled shutdown, /v1/health/ready answers 503
    while the node still hands its leaderships away and answers clients (liveness 200, its
    Kafka listener serving): a load balancer sends new clients elsewhere during the drain,
    not only once the listeners close. The two other nodes are paused (SIGSTOP) so that the
    handover cannot finish and the drain lasts until raft gives it up (an election timeout,
    0.5 s); 0.1 s into it the node must already say so. Before, it said ready until it
    stopped."""
    from strand_harness import api_versions_v0
    from test_metrics import admin

    topic = rf3_topic
    node = replicas_of(cluster, topic, 0, NODE_IDS[0])[0]
    wait_until(lambda: cluster.leader_of(topic, 0) == node, LEADERS_DEADLINE_S,
               f"node {node}, the preferred replica, to lead partition 0")
    assert admin(cluster[node], "/v1/health/ready")[0] == 200
    others = [n for n in NODE_IDS if n != node]
    for n in others:
        os.kill(cluster[n].proc.pid, signal.SIGSTOP)
    try:
        cluster[node].terminate()
        time.sleep(0.1)
        ready = admin(cluster[node], "/v1/health/ready")[0]
        live = admin(cluster[node], "/v1/health/live")[0]
        with socket.create_connection(("127.0.0.1", cluster[node].kafka_port), timeout=2) as s:
            s.settimeout(2)
            err, _ = api_versions_v0(s)
        assert (ready, live, err) == (503, 200, 0), \
            f"0.1 s into the drain: ready {ready}, live {live}, ApiVersions error {err}"
    finally:
        for n in others:
            os.kill(cluster[n].proc.pid, signal.SIGCONT)
    assert cluster[node].wait() == 0


def set_min_insync(cluster: Cluster, topic: str, n: int):
    """Sets the topic's min.insync.replicas and waits until every node took it."""
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, ResourceType)

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    r = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.insync.replicas", str(n), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([r])[r].result(30)

    def described() -> bool:
        d = ConfigResource(ResourceType.TOPIC, topic)
        return admin.describe_configs([d])[d].result(30)["min.insync.replicas"].value == str(n)

    wait_until(described, LEADERS_DEADLINE_S, f"min.insync.replicas {n} on {topic}")


def test_status_names_a_node_leader_only_of_the_partitions_it_leads(cluster, rf3_topic):
    """/v1/status lists each hosted partition with this node as leader only where it leads
    (every node hosts every replica here); it used to name itself for all of them."""
    topic = rf3_topic
    seen = {}

    def status_leaders(n: int) -> dict[int, int | None]:
        rows = (cluster[n].status() or {}).get("leaders", [])
        return {r["partition"]: r["leader"] for r in rows if r["topic"] == topic}

    def agree() -> bool:
        # Leaders may still move to their preferred replicas: compare with the current ones.
        leaders = {p: cluster.leader_of(topic, p) for p in range(PARTITIONS)}
        seen["metadata"] = leaders
        seen["status"] = {n: status_leaders(n) for n in NODE_IDS}
        return None not in leaders.values() and all(
            seen["status"][n] == {p: (n if leader == n else None) for p, leader in leaders.items()}
            for n in NODE_IDS)

    try:
        wait_until(agree, LEADERS_DEADLINE_S,
                   "each node's /v1/status to name it leader only of what it leads")
    except TimeoutError as e:
        raise AssertionError(f"{e}; last seen: {seen}") from None


def _uvarint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


class _Flexible:
    """Reads a flexible (compact, tagged) Kafka response body."""

    def __init__(self, buf: bytes):
        self.buf, self.off = buf, 0

    def take(self, fmt: str):
        v = struct.unpack_from(">" + fmt, self.buf, self.off)
        self.off += struct.calcsize(">" + fmt)
        return v if len(v) > 1 else v[0]

    def uvarint(self) -> int:
        n, shift = 0, 0
        while True:
            b = self.buf[self.off]
            self.off += 1
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7

    def string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.buf[self.off:self.off + n].decode()
        self.off += n
        return s

    def tags(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            out[tag] = self.buf[self.off:self.off + size]
            self.off += size
        return out


def _flexible_call(bootstrap: str, api_key: int, version: int, body: bytes) -> _Flexible:
    """One flexible request on a new connection; its response body, past the header."""
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(frame(api_key, version, 7, body, flexible=True))
        r = _Flexible(recv_response(s))
    assert r.take("i") == 7, "correlation id"
    r.tags()
    return r


def produce_v10(bootstrap: str, topic: str, partition: int, batch: bytes):
    """Produce v10 (KIP-951), acks=all, one batch: (error code, current leader (id, epoch)
    or None, {node id: (host, port)} of the response's NodeEndpoints)."""
    name = topic.encode()
    body = (b"\x00" + struct.pack(">hi", -1, 30000)          # no transactional id
            + _uvarint(2) + _uvarint(len(name) + 1) + name   # one topic
            + _uvarint(2) + struct.pack(">i", partition)     # one partition
            + _uvarint(len(batch) + 1) + batch + b"\x00"     # records, no tags
            + b"\x00" + b"\x00")                            # topic tags, request tags
    r = _flexible_call(bootstrap, 0, 10, body)
    assert r.uvarint() - 1 == 1, "one topic"
    r.string()
    assert r.uvarint() - 1 == 1, "one partition"
    _index, error, _base, _append, _start = r.take("ihqqq")
    for _ in range(r.uvarint() - 1):  # record errors
        r.take("i")
        r.string()
        r.tags()
    r.string()  # error message
    partition_tags = r.tags()
    r.tags()  # topic
    r.take("i")  # throttle
    leader, endpoints = _leader_hint_and_endpoints(r, partition_tags, leader_tag=0)
    return error, leader, endpoints


def _leader_hint_and_endpoints(r: _Flexible, partition_tags: dict[int, bytes], leader_tag: int):
    """A KIP-951 partition's CurrentLeader (tag `leader_tag` of its tagged fields), then
    the response's NodeEndpoints (tag 0 of its top-level tagged fields, read from `r`)."""
    leader = None
    if leader_tag in partition_tags:
        leader = struct.unpack(">ii", partition_tags[leader_tag][:8])
    endpoints = {}
    tags = r.tags()
    if 0 in tags:
        e = _Flexible(tags[0])
        for _ in range(e.uvarint() - 1):
            node = e.take("i")
            ep_host = e.string()
            endpoints[node] = (ep_host, e.take("i"))
            e.string()  # rack
            e.tags()
    return leader, endpoints


def fetch_v16(bootstrap: str, topic_id: bytes, partition: int):
    """Fetch v16 (KIP-951) of one partition from offset 0, no wait: (error code, current
    leader (id, epoch) or None, {node id: (host, port)} of the response's NodeEndpoints)."""
    body = (struct.pack(">iiibii", 0, 1, 1 << 20, 0, 0, -1)  # wait, min/max bytes, read
            #                                                  uncommitted, no session
            + _uvarint(2) + topic_id                           # one topic, by id
            + _uvarint(2) + struct.pack(">iiqiqi", partition, -1, 0, -1, -1, 1 << 20)
            + b"\x00" + b"\x00"                                # partition tags, topic tags
            + _uvarint(1) + _uvarint(1)                        # no forgotten topics, no rack
            + b"\x00")                                         # request tags
    r = _flexible_call(bootstrap, 1, 16, body)
    _throttle, top_error, _session = r.take("ihi")
    assert top_error == 0, top_error
    assert r.uvarint() - 1 == 1, "one topic"
    assert r.buf[r.off:r.off + 16] == topic_id, "the topic asked"
    r.off += 16
    assert r.uvarint() - 1 == 1, "one partition"
    _index, error, _hw, _lso, _start = r.take("ihqqq")
    for _ in range(max(r.uvarint() - 1, 0)):  # aborted transactions
        r.take("qq")
        r.tags()
    r.take("i")  # preferred read replica
    n = r.uvarint() - 1  # records
    r.off += max(n, 0)
    partition_tags = r.tags()
    r.tags()  # topic
    leader, endpoints = _leader_hint_and_endpoints(r, partition_tags, leader_tag=1)
    return error, leader, endpoints


def test_a_produce_to_a_follower_names_the_leader_kip_951(cluster, rf3_topic):
    """KIP-951: a Produce v10+ (and a Fetch v16+) a follower answers NOT_LEADER_OR_FOLLOWER
    carries the leader it knows (id and epoch) and that leader's endpoint, so a client (the
    Java client from 3.7) sends there without asking Metadata first."""
    records = need_module("kafka.record.default_records")
    topic = rf3_topic
    b = records.DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                          producer_id=-1, producer_epoch=-1,
                                          base_sequence=-1, batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000), key=None, value=b"v", headers=[])
    batch = bytes(b.build())
    seen = {}

    def answers(to_leader: bool) -> bool:
        # Leaders may still move to their preferred replicas: ask the current ones.
        leader = cluster.leader_of(topic, 0)
        if leader is None:
            return False
        node = leader if to_leader else next(n for n in NODE_IDS if n != leader)
        error, hint, endpoints = produce_v10(cluster[node].bootstrap, topic, 0, batch)
        seen["last"] = dict(leader=leader, asked=node, error=error, hint=hint,
                            endpoints=endpoints)
        if to_leader:
            # The leader writes the batch and names nobody.
            return (error, hint, endpoints) == (0, None, {})
        return (error == 6 and hint is not None and hint[0] == leader and hint[1] >= 1
                and endpoints == {leader: ("127.0.0.1", cluster[leader].kafka_port)})

    for to_leader, what in ((False, "a follower's NOT_LEADER_OR_FOLLOWER to name the leader"),
                            (True, "the leader to write the batch")):
        try:
            wait_until(lambda: answers(to_leader), LEADERS_DEADLINE_S, what)
        except TimeoutError as e:
            raise AssertionError(f"{e}; last answer: {seen.get('last')}") from None

    # Fetch v16 the same way (by topic id): a follower names the leader, the leader serves.
    admin = need_module("confluent_kafka.admin")
    ck = need_module("confluent_kafka")
    a = admin.AdminClient({"bootstrap.servers": cluster.bootstrap()})
    desc = a.describe_topics(ck.TopicCollection([topic]))[topic].result(30)
    topic_id = struct.pack(">qq", desc.topic_id.get_most_significant_bits(),
                           desc.topic_id.get_least_significant_bits())

    def fetched(from_leader: bool) -> bool:
        leader = cluster.leader_of(topic, 0)
        if leader is None:
            return False
        node = leader if from_leader else next(n for n in NODE_IDS if n != leader)
        error, hint, endpoints = fetch_v16(cluster[node].bootstrap, topic_id, 0)
        seen["last"] = dict(leader=leader, asked=node, error=error, hint=hint,
                            endpoints=endpoints)
        if from_leader:
            return (error, hint, endpoints) == (0, None, {})
        return (error == 6 and hint is not None and hint[0] == leader and hint[1] >= 1
                and endpoints == {leader: ("127.0.0.1", cluster[leader].kafka_port)})

    for from_leader, what in ((False, "a follower's Fetch NOT_LEADER_OR_FOLLOWER to name "
                               "the leader"), (True, "the leader to serve the fetch")):
        try:
            wait_until(lambda: fetched(from_leader), LEADERS_DEADLINE_S, what)
        except TimeoutError as e:
            raise AssertionError(f"{e}; last answer: {seen.get('last')}") from None


def test_a_restarted_node_names_the_leaders_of_partitions_it_does_not_host(ck, cluster, topic):
    """A node learns who leads the partitions it hosts no replica of only from the nodes
    leading them. A node that restarted used to wait for their next periodic announcement
    (every 5 s) and meanwhile answered Metadata with no leader for them, so a client that
    asked it first (librdkafka picks any broker) waited too: a read_committed reader in the
    transactions cluster test saw nothing of a partition within its 3 s and failed. A node
    now announces every group it leads to a peer as soon as that peer connects."""
    admin = need_module("confluent_kafka.admin")
    a = admin.AdminClient({"bootstrap.servers": cluster.bootstrap()})
    a.create_topics([admin.NewTopic(topic, num_partitions=PARTITIONS,
                                    replication_factor=1)])[topic].result(30)
    leaders = wait_leaders(cluster, topic)
    node = next(n for n in NODE_IDS if any(leader != n for leader in leaders.values()))
    cluster.kill9(node)
    cluster.restart(node)
    ready_at = time.monotonic()

    def named():
        parts = cluster.metadata(node).topics.get(topic, {})
        return all(p in parts and parts[p].leader == leaders[p] for p in leaders)
    wait_until(named, LEADERS_DEADLINE_S, f"node {node} naming every leader of {topic}",
               interval=0.02)
    took_s = time.monotonic() - ready_at
    print(f"node {node} named every leader {took_s:.2f} s after it was ready")
    # 0.5-1.3 s here through the test proxy (which accepts a connection before it reaches
    # the node); without the announcement on connect up to the 5 s periodic interval
    # (2.9-3.2 s in this sequence).
    assert took_s < 2.5, f"node {node} named the leaders only after {took_s:.2f} s"


def gauge(cluster: Cluster, node: int, name: str) -> float:
    """A gauge of one node's /metrics (summed over its label sets)."""
    import urllib.request
    url = f"http://127.0.0.1:{cluster[node].admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#")
               and (line[len(name)] in " {"))


# -- b. kill -9 of a leader ------------------------------------------------------------

def test_kill9_of_a_leader_loses_no_acknowledged_write(ck, cluster, rf3_topic, workload, capsys):
    kill9_of_a_leader(ck, cluster, rf3_topic, workload, capsys)


@pytest.mark.cluster_args(extra_args=["--group-commit-min-interval-us", "2000"])
def test_kill9_of_a_leader_loses_nothing_with_paced_group_commit(ck, cluster, rf3_topic,
                                                                workload, capsys):
    """Group commit pacing (each Raft group's store writes begin at most every 2 ms on every
    node; `raft/tests/driver.rs` checks the pacing itself): the same failover, nothing
    acknowledged lost."""
    kill9_of_a_leader(ck, cluster, rf3_topic, workload, capsys)


@pytest.mark.cluster_args(extra_args=["--group-commit-min-interval-us", "100000",
                                      "--produce-slow-log-ms", "30"])
def test_a_slow_replicated_produce_is_logged_with_its_timeline(ck, cluster, rf3_topic):
    """The slow-produce log on a replicated partition: with each Raft group's writes paced
    at 100 ms, concurrent acks=all producers wait for the group, and the leader logs such a
    request with its timeline, naming the Raft group's answer."""
    topic = rf3_topic
    leader = cluster.wait_leader(topic, 0)
    producers = [ck.Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all",
                              "linger.ms": 0}) for _ in range(4)]
    failed = []

    def report(err, _msg):
        if err is not None:
            failed.append(err)

    for i in range(5):
        for p in producers:
            p.produce(topic, f"v{i}".encode(), partition=0, on_delivery=report)
        for p in producers:
            assert p.flush(30) == 0, "undelivered records"
    assert not failed, failed

    def slow_line():
        text = cluster[leader].stderr_path.read_text(errors="replace")
        return next((line for line in text.splitlines()
                     if "slow produce" in line and "answered by its Raft group" in line), None)

    wait_until(lambda: slow_line() is not None, 10,
               f"node {leader} logging a slow produce of {topic}/0")
    line = slow_line()
    assert f"{topic}-0 on shard " in line and "all partitions answered " in line, line


def kill9_of_a_leader(ck, cluster, rf3_topic, workload, capsys):
    topic = rf3_topic
    old = cluster.wait_leader(topic, 0)
    survivors = [n for n in NODE_IDS if n != old]
    w = workload(topic)
    w.wait_acks(ACKS_BEFORE_FAULT, what="before the kill")
    sleep_until(w.started_at + FAULT_AT_S)

    dropped = "strand_raft_rpc_dropped_frames_total"
    dropped_before = gauge(cluster, survivors[0], dropped)
    killed_at = time.monotonic()
    cluster.kill9(old)
    new = cluster.wait_leader(topic, 0, nodes=survivors, exclude={old},
                              timeout=FAILOVER_BOUND_S, agree="any")
    failover_s = time.monotonic() - killed_at
    show(capsys, f"failover of {topic}/0: leader {old} killed, node {new} named leader "
                 f"after {failover_s:.3f}s (target < {FAILOVER_TARGET_S}s)")
    assert new in survivors
    # What a survivor cannot deliver to the dead node is dropped, and counted.
    wait_until(lambda: gauge(cluster, survivors[0], dropped) > dropped_before,
               FAULT_FOR_S, f"node {survivors[0]} counting the RPC frames it drops for node {old}")

    sleep_until(killed_at + FAULT_FOR_S)
    cluster.restart(old)
    w.wait_acks(1, partition=0, since=killed_at, what="on partition 0 after the kill")
    finish(w)
    wait_leaders(cluster, topic)
    assert_consistent(w, read_everywhere(ck, cluster, topic), min_ok=ACKS_BEFORE_FAULT)
    assert failover_s < FAILOVER_BOUND_S


# -- c. network cuts -------------------------------------------------------------------

def _assert_through_proxy(cluster: Cluster):
    direct = cluster.direct_rpc_connections()
    assert not direct, (
        f"nodes talk to peers' real RPC ports, not to the --seeds (proxy) addresses: "
        f"(node, peer, port) {direct}; a cut would not isolate anything")


def test_a_cut_follower_loses_no_acknowledged_write(ck, cluster, rf3_topic, workload):
    topic = rf3_topic
    leader = cluster.wait_leader(topic, 0)
    follower = next(n for n in replicas_of(cluster, topic, 0, leader) if n != leader)
    w = workload(topic)
    w.wait_acks(ACKS_BEFORE_FAULT, what="before the cut")
    _assert_through_proxy(cluster)
    sleep_until(w.started_at + FAULT_AT_S)

    cut_at = time.monotonic()
    cluster.cut(follower)
    # The leader and the other follower are a majority: partition 0 keeps committing.
    w.wait_acks(ACKS_BEFORE_FAULT // PARTITIONS, partition=0, since=cut_at,
                what=f"on partition 0 with follower {follower} cut off")
    # The leader sees the cut follower out of sync.
    wait_until(lambda: gauge(cluster, leader, "strand_under_replicated_partitions") >= 1,
               timeout=15, what=f"node {leader} reporting under-replicated partitions")
    sleep_until(cut_at + FAULT_FOR_S)
    cluster.heal(follower)
    healed_at = time.monotonic()
    w.wait_acks(1, since=healed_at, what="after the heal")
    finish(w)
    wait_leaders(cluster, topic)
    assert_consistent(w, read_everywhere(ck, cluster, topic), min_ok=ACKS_BEFORE_FAULT)


def test_a_cut_leader_is_replaced_and_writes_continue(ck, cluster, rf3_topic, workload, capsys):
    topic = rf3_topic
    old = cluster.wait_leader(topic, 0)
    others = [n for n in NODE_IDS if n != old]
    w = workload(topic)
    w.wait_acks(ACKS_BEFORE_FAULT, what="before the cut")
    _assert_through_proxy(cluster)
    sleep_until(w.started_at + FAULT_AT_S)

    cut_at = time.monotonic()
    cluster.cut(old)
    new = cluster.wait_leader(topic, 0, nodes=others, exclude={old},
                              timeout=ELECTION_DEADLINE_S)
    elected_at = time.monotonic()
    show(capsys, f"{topic}/0: leader {old} cut off, node {new} elected after "
                 f"{elected_at - cut_at:.3f}s")
    assert new in others
    # Writes continue on the majority side (the client finds the new leader by itself).
    try:
        w.wait_acks(ACKS_BEFORE_FAULT // PARTITIONS, partition=0, since=elected_at,
                    what=f"on partition 0 from new leader {new}")
    except TimeoutError as e:
        # What a client asking each node (the cut one answers clients too) is told, and
        # what the producer saw: the next failure says where the client was stuck.
        views = cluster.leader_views(topic, 0, nodes=NODE_IDS)
        with w._lock:
            errors = dict(w.delivery_errors)
            fatal = list(w.fatal)
        acks = {p: w.acks(p, since=elected_at) for p in range(PARTITIONS)}
        print(f"producer log (last lines):\n{w.client_log()}")
        raise AssertionError(f"{e}; leader of {topic}/0 per node (Metadata): {views}; acks "
                             f"per partition since the election: {acks}; delivery errors: "
                             f"{errors}; fatal: {fatal}") from e
    sleep_until(cut_at + FAULT_FOR_S)
    cluster.heal(old)
    finish(w)
    # After the heal the old leader learns the new term: all three name one leader.
    views = wait_until(lambda: one_leader_view(cluster, topic, 0), LEADERS_DEADLINE_S,
                       f"all nodes naming one leader of {topic}/0")
    print(f"leader views of {topic}/0 after the heal: {views}")
    wait_leaders(cluster, topic)
    assert_consistent(w, read_everywhere(ck, cluster, topic), min_ok=ACKS_BEFORE_FAULT)


def test_a_client_that_knows_only_the_cut_leader_finds_the_new_one(ck, cluster, topic):
    """A producer that bootstrapped from a partition's leader and writes only there talks to
    that node alone (librdkafka connects to the brokers it needs and asks Metadata of the
    one it used last). Cut off, the old leader knows no leader: it answered Metadata with
    none, so the producer never asked anyone else and stalled for as long as the cut lasted
    (CI on 14914fa: a cut leader of every partition left the workload without a write for
    30 s). As Redpanda does, a node that lost its leadership without learning its successor,
    or hears from no peer, names another replica (LEADER_NOT_AVAILABLE, its last epoch):
    the client goes there and finds the new leader."""
    admin = need_module("confluent_kafka.admin")
    a = admin.AdminClient({"bootstrap.servers": cluster.bootstrap()})
    new = admin.NewTopic(topic, num_partitions=1, replication_factor=REPLICATION_FACTOR)
    a.create_topics([new])[topic].result(30)
    old = cluster.wait_leader(topic, 0, timeout=LEADERS_DEADLINE_S)
    wait_until(lambda: all(gauge(cluster, n, "strand_under_replicated_partitions") == 0
                           for n in NODE_IDS),
               LEADERS_DEADLINE_S, f"every replica of {topic} reached by its leader")
    acked: list[float] = []

    def on_delivery(err, _msg):
        if err is None:
            acked.append(time.monotonic())

    p = ck.Producer({"bootstrap.servers": cluster[old].bootstrap, "acks": "all",
                     "linger.ms": 0, "message.timeout.ms": MESSAGE_TIMEOUT_MS})
    try:
        p.produce(topic, b"before", on_delivery=on_delivery)
        assert p.flush(30) == 0 and len(acked) == 1, "the first write was not acknowledged"
        cluster.cut(old)
        cut_at = time.monotonic()
        new_leader = cluster.wait_leader(topic, 0, nodes=[n for n in NODE_IDS if n != old],
                                         timeout=ELECTION_DEADLINE_S)

        def written_after_the_cut():
            p.produce(topic, b"after", on_delivery=on_delivery)
            p.poll(0.1)
            return any(t > cut_at for t in acked)

        try:
            wait_until(written_after_the_cut, PROGRESS_DEADLINE_S,
                       f"a write acknowledged after node {old} was cut off", interval=0.1)
        except TimeoutError as e:
            views = cluster.leader_views(topic, 0, nodes=NODE_IDS)
            raise AssertionError(f"{e}; leader of {topic}/0 per node: {views}") from None
        print(f"node {old} cut off; new leader {new_leader}; first write acknowledged "
              f"{min(t for t in acked if t > cut_at) - cut_at:.3f}s after the cut")
    finally:
        p.flush(5)
        cluster.heal(old)


def test_a_topic_created_through_one_node_is_altered_at_once_through_another(ck, cluster, topic):
    """Kafka forwards topic changes to its active controller, so a topic whose creation was
    answered can be grown, reconfigured or deleted through any broker at once (librdkafka's
    0081 test creates topics and grows them the next millisecond, through whichever broker
    its last Metadata came from). A node that has not applied the creation yet from the
    controller log must catch up before it calls the topic unknown."""
    admin = need_module("confluent_kafka.admin")
    through = {n: admin.AdminClient({"bootstrap.servers": cluster[n].bootstrap})
               for n in NODE_IDS}
    for n in NODE_IDS:  # every client connected, so the timing below is the brokers' own
        through[n].list_topics(timeout=10)
    for i in range(8):
        name = f"{topic}-{i}"
        creator, grower, configurer = NODE_IDS[i % 3], NODE_IDS[(i + 1) % 3], NODE_IDS[(i + 2) % 3]
        through[creator].create_topics([admin.NewTopic(name, num_partitions=1,
                                                        replication_factor=3)])[name].result(30)
        grown = through[grower].create_partitions([admin.NewPartitions(name, 2)])
        altered = through[configurer].incremental_alter_configs([admin.ConfigResource(
            admin.ResourceType.TOPIC, name, incremental_configs=[admin.ConfigEntry(
                "retention.ms", "3600000",
                incremental_operation=admin.AlterConfigOpType.SET)])])
        try:
            grown[name].result(30)
            for f in altered.values():
                f.result(30)
        except ck.KafkaException as e:
            raise AssertionError(f"{name}: created through node {creator}, grown through node "
                                 f"{grower}, configured through node {configurer}: {e}") from None
    # A topic nobody created is still unknown (once the node caught up).
    started = time.monotonic()
    missing = f"{topic}-never-created"
    with pytest.raises(ck.KafkaException) as refused:
        through[2].create_partitions([admin.NewPartitions(missing, 2)])[missing].result(30)
    assert refused.value.args[0].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART, refused.value
    print(f"an unknown topic refused after {time.monotonic() - started:.3f}s")


def test_a_dynamic_broker_default_set_through_one_node_reaches_every_node(ck, cluster, topic):
    """`kafka-configs.sh --entity-type brokers --entity-default` through any broker: the
    value goes through the controller log, so every node describes it as the cluster
    default and runs its topics with it; a node's own value is that node's alone."""
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, ConfigSource, NewTopic, ResourceType)

    from strand_harness import alter_default

    through = {n: AdminClient({"bootstrap.servers": cluster[n].bootstrap}) for n in NODE_IDS}
    through[1].create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    assert alter_default(cluster[1].bootstrap, ("log.retention.ms", "SET", "3600000")) == (0, None)
    own = ConfigResource(ResourceType.BROKER, "3", incremental_configs=[ConfigEntry(
        "log.retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    through[3].incremental_alter_configs([own])[own].result(30)
    want = {1: ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
            2: ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
            3: ("7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)}

    def described(n):
        r = ConfigResource(ResourceType.BROKER, str(n))
        c = through[n].describe_configs([r])[r].result(30)["log.retention.ms"]
        t = ConfigResource(ResourceType.TOPIC, topic)
        tc = through[n].describe_configs([t])[t].result(30)["retention.ms"]
        return (c.value, c.source), (tc.value, tc.source)

    for n in NODE_IDS:
        wait_until(lambda n=n: described(n)[0] == want[n], 10,
                   f"node {n} describing its log.retention.ms as {want[n]}")
    # A topic described through a node shows the default that node runs it with.
    assert described(1)[1] == want[1]


def test_one_topic_created_grown_or_deleted_through_every_node_at_once_changes_once(
        ck, cluster, topic):
    """Two clients creating the same topic at the same time through different brokers: Kafka's
    controller takes one creation and answers the other TOPIC_ALREADY_EXISTS (applications
    such as Kafka Streams tell "I created it" from "it was there"). Here each node checks a
    creation against the metadata it applied and proposes it to the controller log, whose
    apply refuses the second: that node must not answer success when it sees the topic."""
    admin = need_module("confluent_kafka.admin")
    through = [admin.AdminClient({"bootstrap.servers": cluster[n].bootstrap}) for n in NODE_IDS]
    for a in through:  # every client connected, so the requests leave together
        a.list_topics(timeout=10)
    for i in range(10):
        name = f"{topic}-{i}"
        futures = [a.create_topics([admin.NewTopic(name, num_partitions=1,
                                                   replication_factor=3)])[name]
                   for a in through]
        outcomes = admin_outcomes(ck, futures, "created")
        assert outcomes.count("created") == 1, f"{name}: {outcomes}"
        assert outcomes.count(ck.KafkaError.TOPIC_ALREADY_EXISTS) == 2, f"{name}: {outcomes}"
    # Grown to one count through every node at once: grown once, the others told
    # INVALID_PARTITIONS (a node whose request lost the race in the controller log tells it
    # by the request's token, not by the count it sees).
    for i in range(10):
        name = f"{topic}-{i}"
        futures = [a.create_partitions([admin.NewPartitions(name, 3)])[name] for a in through]
        outcomes = admin_outcomes(ck, futures, "grown")
        assert outcomes.count("grown") == 1, f"{name}: {outcomes}"
        assert outcomes.count(ck.KafkaError.INVALID_PARTITIONS) == 2, f"{name}: {outcomes}"
        wait_until(lambda: {len(a.list_topics(name, timeout=10).topics[name].partitions)
                            for a in through} == {3}, 10, f"{name} to have 3 partitions")
    # Deleted through every node at once: deleted once, the others told
    # UNKNOWN_TOPIC_OR_PARTITION, as Kafka's controller answers the second deletion.
    for i in range(10):
        name = f"{topic}-{i}"
        futures = [a.delete_topics([name])[name] for a in through]
        outcomes = admin_outcomes(ck, futures, "deleted")
        assert outcomes.count("deleted") == 1, f"{name}: {outcomes}"
        assert outcomes.count(ck.KafkaError.UNKNOWN_TOPIC_OR_PART) == 2, f"{name}: {outcomes}"


def test_a_created_topic_has_a_leader_for_every_partition_when_the_creation_is_answered(
        ck, cluster, topic):
    """Kafka's controller names each partition's leader in the record that creates the topic,
    so a client that created one (or a Metadata that auto-created it) finds every partition
    led. Here each partition's Raft group elects its first leader once started, and the node
    that answered a creation may not even have published the topic to the shard serving the
    client's next request. CreateTopics and CreatePartitions now answer once the serving
    shard knows the new partitions and a leader for each (within the request's timeout, at
    most 5 s), and a Metadata that auto-creates a topic waits the same way (at most 2 s).
    (librdkafka's 0054 on three nodes still meets a leaderless partition of a topic
    auto-created a moment before, asking another node than the one that created it.)"""
    admin = need_module("confluent_kafka.admin")
    for n in NODE_IDS:
        a = admin.AdminClient({"bootstrap.servers": cluster[n].bootstrap})
        name = f"{topic}-{n}"
        a.create_topics([admin.NewTopic(name, num_partitions=6, replication_factor=3)],
                        operation_timeout=30)[name].result(30)
        leaders = {p: cluster.leader_views(name, p, nodes=[n])[n] for p in range(6)}
        assert all(v is not None and v >= 0 for v in leaders.values()), \
            f"{name} created through node {n}; its leaders there: {leaders}"
        a.create_partitions([admin.NewPartitions(name, 9)], operation_timeout=30)[name].result(30)
        leaders = {p: cluster.leader_views(name, p, nodes=[n])[n] for p in range(9)}
        assert all(v is not None and v >= 0 for v in leaders.values()), \
            f"{name} grown through node {n}; its leaders there: {leaders}"


def test_a_new_topic_is_led_on_every_node_well_within_an_election_timeout(ck, cluster, topic):
    """Each new partition's preferred replica campaigns at once, but its vote requests can
    reach peers that have not applied the topic yet (they drop messages of groups they do
    not host): the first election then waited out an election timeout (0.5-1 s), and every
    node answered LEADER_NOT_AVAILABLE for that partition meanwhile (librdkafka's 0054 on
    three nodes: about one topic in three). The preferred replica now campaigns again every
    50 ms until a leader is known. Measured from the creation's answer until every node
    names a leader for every partition: 0.86-1.1 s for one topic in three before, under
    0.2 s after."""
    admin = need_module("confluent_kafka.admin")
    a = admin.AdminClient({"bootstrap.servers": cluster.bootstrap()})
    a.list_topics(timeout=10)
    slowest = 0.0
    for i in range(8):
        name = f"{topic}-{i}"
        a.create_topics([admin.NewTopic(name, num_partitions=4, replication_factor=3)],
                        operation_timeout=0)[name].result(30)
        created = time.monotonic()
        while True:
            views = [cluster.leader_views(name, p) for p in range(4)]
            if all(v is not None and v >= 0 for view in views for v in view.values()):
                break
            assert time.monotonic() - created < 10, f"{name}: {views}"
            time.sleep(0.01)
        slowest = max(slowest, time.monotonic() - created)
    print(f"slowest topic led on every node {slowest:.3f}s after its creation was answered")
    assert slowest < 0.7, f"a new topic waited {slowest:.3f}s for leaders known to every node"


# -- d. restart of every node ------------------------------------------------------------

def test_topics_and_data_survive_a_restart_of_every_node(ck, cluster, rf3_topic):
    admin = need_module("confluent_kafka.admin")
    topic = rf3_topic
    before = produce_all(ck, cluster, topic, range(300))
    rcs = cluster.restart_all()
    assert rcs == {n: 0 for n in NODE_IDS}, f"exit codes after SIGTERM: {rcs}"

    a = admin.AdminClient({"bootstrap.servers": cluster.bootstrap()})

    def listed():
        m = a.list_topics(timeout=5)
        return m if topic in m.topics else None

    md = wait_until(listed, LEADERS_DEADLINE_S, f"{topic} in Metadata after the restart (lost?)")
    parts = md.topics[topic].partitions
    assert sorted(parts) == list(range(PARTITIONS))
    for p, pm in parts.items():
        assert sorted(pm.replicas) == list(NODE_IDS), f"{topic}/{p} replicas {pm.replicas}"
    wait_leaders(cluster, topic)

    # Offsets continue after the restart; none is handed out again.
    after = produce_all(ck, cluster, topic, range(300, 330))
    last_before = {p: max(o for (pp, o) in before.values() if pp == p) for p in range(PARTITIONS)}
    for p, o in after.values():
        assert o > last_before[p], f"{topic}/{p}: offset {o} reused (last before {last_before[p]})"
    writes = [Write(v, OK, p, o) for v, (p, o) in {**before, **after}.items()]
    assert_consistent(writes, read_everywhere(ck, cluster, topic), min_ok=330)

    # Leadership goes back to each partition's preferred (first) replica, which placement
    # spreads over the nodes, whoever won the elections after the restart.
    preferred = {p: pm.replicas[0] for p, pm in parts.items()}
    for p in range(PARTITIONS):
        assert cluster.wait_preferred_leader(topic, p) == preferred[p], (p, preferred)


# -- f. a node joins through the seeds -----------------------------------------------------

def test_a_node_joins_through_the_seeds_and_takes_replicas(ck, cluster, topic):
    """A fourth node started with the seeds but no --node-id gets id 4 from the controller,
    appears in every node's Metadata, hosts replicas of a new topic and keeps its id across
    a restart. Every node names the leader of every partition, hosted there or not (RF 3
    on 4 nodes: each node lacks some partition)."""
    n4 = cluster.add_joiner(4)
    id_file = n4.data_dir / "node-id"
    assert id_file.read_text().strip() == "4"
    everyone = [1, 2, 3, 4]

    def four_brokers():
        return all(sorted(cluster.metadata(n).brokers) == everyone for n in everyone)

    wait_until(four_brokers, 30, "every node listing brokers 1..4")
    admin = need_module("confluent_kafka.admin")
    a = admin.AdminClient({"bootstrap.servers": n4.bootstrap})
    new = admin.NewTopic(topic, num_partitions=PARTITIONS, replication_factor=REPLICATION_FACTOR)
    a.create_topics([new])[topic].result(30)
    # CreateTopics answered once the controller committed it; node 1 lists the topic once it
    # applied it too (a Kafka client waits for its metadata the same way).
    wait_until(lambda: len(cluster.metadata(1).topics.get(topic, {})) == PARTITIONS, 30,
               f"node 1 to list the {PARTITIONS} partitions of {topic}")
    replicas = {p: replicas_of(cluster, topic, p, 1) for p in range(PARTITIONS)}
    assert any(4 in r for r in replicas.values()), f"no replica on the joined node: {replicas}"
    assert all(len(r) == REPLICATION_FACTOR for r in replicas.values()), replicas

    last_views: dict = {}

    def agreed_leaders():
        views = {p: cluster.leader_views(topic, p, nodes=everyone) for p in range(PARTITIONS)}
        last_views.update(views)
        ok = all(len(set(v.values())) == 1 and next(iter(v.values())) in replicas[p]
                 for p, v in views.items())
        if not ok:
            raise AssertionError(f"leader views (partition -> node -> leader): {views}")
        return views

    wait_until(agreed_leaders, LEADERS_DEADLINE_S,
               f"all four nodes naming the same leader of every partition of {topic}")
    n = 150
    acked = produce_all(ck, cluster, topic, range(n))
    writes = [Write(v, OK, part, off) for v, (part, off) in acked.items()]
    assert_consistent(writes, read_everywhere(ck, cluster, topic), min_ok=n)

    # Restarted, it keeps its id (from its data directory) and its place.
    assert cluster.stop([4]) == {4: 0}
    cluster.start([4])
    assert id_file.read_text().strip() == "4"
    wait_until(four_brokers, 30, "every node listing brokers 1..4 after the restart")
    wait_until(agreed_leaders, LEADERS_DEADLINE_S, "leaders agreed after the restart")


# -- g. partition moves (reassignment) ----------------------------------------------------

def test_partitions_move_to_a_joined_node_under_writes(ck, cluster, topic, workload, capsys):
    """Kafka's partition reassignment (kafka-python's admin client: AlterPartitionReassignments
    and ListPartitionReassignments). With a fourth node joined and writes running,
    partition 0 moves its leader's replica to node 4, partition 1 shrinks to two
    replicas, dropping that same node, and partition 2 swaps a follower for node 4 (a joint
    configuration); all end on exactly their targets on every node,
    every node names their leaders (the restarted one too), the removed replicas delete
    their copies, nothing acknowledged is lost, and partition 0 keeps taking writes with
    its old leader killed. Bad requests get Kafka's error codes."""
    kadmin = need_module("kafka.admin")
    kafka = need_module("kafka")
    errors = need_module("kafka.errors")
    admin = need_module("confluent_kafka.admin")
    a = admin.AdminClient({"bootstrap.servers": cluster.bootstrap()})
    new = admin.NewTopic(topic, num_partitions=PARTITIONS, replication_factor=REPLICATION_FACTOR)
    a.create_topics([new])[topic].result(30)
    leaders = wait_leaders(cluster, topic)
    cluster.add_joiner(4)
    everyone = [1, 2, 3, 4]
    wait_until(lambda: all(sorted(cluster.metadata(n).brokers) == everyone for n in everyone),
               30, "every node listing brokers 1..4")

    r0, r1 = (replicas_of(cluster, topic, p, 1) for p in (0, 1))
    target0 = [4] + [n for n in r0 if n != leaders[0]]
    # Partition 1 drops the replica on partition 0's old leader (killed below), so both
    # keep a majority through the kill.
    target1 = [n for n in r1 if n != leaders[0]]
    dropped1 = leaders[0]
    # Partition 2 swaps a follower (not partition 0's old leader) for node 4: two changes
    # at once, so a joint configuration.
    r2 = replicas_of(cluster, topic, 2, 1)
    swapped2 = next(n for n in r2 if n not in (leaders[2], leaders[0]))
    target2 = [4 if n == swapped2 else n for n in r2]
    w = workload(topic)
    w.wait_acks(ACKS_BEFORE_FAULT, what="before the moves")

    ka = kadmin.KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=30000)
    try:
        TP = kafka.TopicPartition
        started = time.monotonic()
        targets = [target0, target1, target2]
        result = ka.alter_partition_reassignments(
            {TP(topic, p): t for p, t in enumerate(targets)})
        assert result == {TP(topic, p): None for p in range(PARTITIONS)}, result

        def moved():
            if ka.list_partition_reassignments():
                return None
            views = {n: [replicas_of(cluster, topic, p, n) for p in range(PARTITIONS)]
                     for n in everyone}
            return all(v == targets for v in views.values()) or None

        wait_until(moved, 60, f"replicas {targets} on every node")
        show(capsys, f"moves of {topic}: {[r0, r1, r2]} -> {targets} finished after "
                     f"{time.monotonic() - started:.1f}s under writes")
        for n, p in ((leaders[0], 0), (dropped1, 1), (swapped2, 2)):
            part_dir = cluster[n].data_dir / f"{topic}-{p}"
            wait_until(lambda d=part_dir: not d.exists(), 30,
                       f"node {n} deleting its copy of {topic}/{p}")

        bad = ka.alter_partition_reassignments({
            TP(topic, 2): [1, 99],           # not a node (and no move running to cancel)
            TP(topic, 0): None,              # nothing to cancel
            TP(topic + "-none", 0): [1],     # no such topic
        })
        assert bad[TP(topic, 2)] is errors.InvalidReplicationAssignmentError, bad
        assert bad[TP(topic, 0)] is errors.NoReassignmentInProgressError, bad
        assert bad[TP(topic + "-none", 0)] is errors.UnknownTopicOrPartitionError, bad
    finally:
        ka.close()

    # Partition 0 no longer needs its old leader.
    killed_at = time.monotonic()
    cluster.kill9(leaders[0])
    w.wait_acks(1, partition=0, since=killed_at, what="on partition 0 without its old leader")
    finish(w)
    cluster.restart(leaders[0])

    def agreed_leaders():
        views = {p: cluster.leader_views(topic, p, nodes=everyone) for p in range(PARTITIONS)}
        if not all(len(set(v.values())) == 1 and next(iter(v.values())) in everyone
                   for v in views.values()):
            raise AssertionError(f"leader views (partition -> node -> leader): {views}")
        return True

    wait_until(agreed_leaders, LEADERS_DEADLINE_S,
               "every node naming the same leader of each partition")
    passes = [read_pass(ck, cluster[n].bootstrap, topic) for n in everyone]
    assert_consistent(w, passes, min_ok=ACKS_BEFORE_FAULT)


# -- h. a node leaves the cluster -----------------------------------------------------------

def _strandctl(cluster: Cluster, *args: str) -> "subprocess.CompletedProcess":
    import os
    import subprocess
    from pathlib import Path
    binary = Path(os.environ.get("STRANDCTL_BIN", "target/debug/strandctl"))
    if not binary.is_absolute():
        binary = Path(__file__).resolve().parents[2] / binary
    r = subprocess.run([str(binary), "--brokers", cluster.bootstrap([1]), *args],
                       capture_output=True, text=True, timeout=60)
    assert "panicked" not in r.stderr, r.stderr
    return r


def test_strandctl_produce_and_consume_go_to_each_partitions_leader(ck, cluster, rf3_topic):
    """`strandctl produce` through one node sends each partition's batches to that
    partition's leader (a node that leads none of them answers NOT_LEADER_OR_FOLLOWER):
    every record lands once, in its key's partition; `strandctl consume` through the same
    node reads every record back, each partition from its leader."""
    import os
    import subprocess
    from pathlib import Path
    topic = rf3_topic
    leaders = wait_leaders(cluster, topic)
    # Through the node that leads the fewest partitions: some batches must go elsewhere.
    via = min(NODE_IDS, key=lambda n: sum(1 for l in leaders.values() if l == n))
    assert any(l != via for l in leaders.values())
    binary = Path(os.environ.get("STRANDCTL_BIN", "target/debug/strandctl"))
    if not binary.is_absolute():
        binary = Path(__file__).resolve().parents[2] / binary
    count = 300
    lines = "".join(f"k{i}:v{i}\n" for i in range(count))
    r = subprocess.run([str(binary), "--brokers", cluster.bootstrap([via]), "produce",
                        topic, "--key-separator", ":", "--batch-records", "20"],
                       input=lines, capture_output=True, text=True, timeout=60)
    assert "panicked" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stderr
    assert f"produced {count} records to {topic}" in r.stdout, r.stdout
    got = read_pass(ck, cluster.bootstrap(), topic)
    assert sorted(v.decode() for _, _, v in got) == sorted(f"v{i}" for i in range(count))
    assert len({(p, o) for p, o, _ in got}) == count, "an offset holds two records"
    # `strandctl consume` through the same node fetches each partition from its leader.
    r = subprocess.run([str(binary), "--brokers", cluster.bootstrap([via]), "consume", topic,
                        "--num", str(count), "--timeout-ms", "10000", "--format", "json"],
                       capture_output=True, text=True, timeout=60)
    assert "panicked" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stderr
    import json
    read = [json.loads(line) for line in r.stdout.splitlines()]
    assert sorted((x["partition"], x["offset"], x["value"]) for x in read) == \
        sorted((p, o, v.decode()) for p, o, v in got)


def test_a_node_leaves_once_its_replicas_moved_away(ck, cluster, rf3_topic):
    """UnregisterBroker (`strandctl cluster remove-node`): a joined node holding a replica
    is refused (move it first), a seed (controller voter) and an unknown id too; once its
    replica moved away it leaves, and every node's Metadata and DescribeCluster list the
    three others. The cluster keeps serving."""
    topic = rf3_topic
    kadmin = need_module("kafka.admin")
    kafka = need_module("kafka")
    admin = need_module("confluent_kafka.admin")
    n4 = cluster.add_joiner(4)
    everyone = [1, 2, 3, 4]
    wait_until(lambda: all(sorted(cluster.metadata(n).brokers) == everyone for n in everyone),
               30, "every node listing brokers 1..4")
    a4 = admin.AdminClient({"bootstrap.servers": n4.bootstrap})  # alive until answered
    described = a4.describe_cluster(request_timeout=10).result(15)
    assert sorted(n.id for n in described.nodes) == everyone, described
    # The controller a node names is itself (it forwards, as KRaft brokers do).
    assert described.controller is not None and described.controller.id == 4, described

    r0 = replicas_of(cluster, topic, 0, 1)
    ka = kadmin.KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=30000)
    TP = kafka.TopicPartition

    def move(target):
        assert ka.alter_partition_reassignments({TP(topic, 0): target}) == {TP(topic, 0): None}
        wait_until(lambda: (not ka.list_partition_reassignments()
                            and all(replicas_of(cluster, topic, 0, n) == target
                                    for n in everyone)),
                   60, f"{topic}/0 on {target}")

    try:
        move([4] + r0[1:])
        r = _strandctl(cluster, "cluster", "remove-node", "4")
        assert r.returncode != 0 and "move them first" in r.stderr, (r.returncode, r.stderr)
        for refused, why in (("1", "controller voter"), ("9", "not registered")):
            r = _strandctl(cluster, "cluster", "remove-node", refused)
            assert r.returncode != 0 and why in r.stderr, (refused, r.returncode, r.stderr)
        move(r0)
    finally:
        ka.close()
    r = _strandctl(cluster, "cluster", "remove-node", "4")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    wait_until(lambda: all(sorted(cluster.metadata(n).brokers) == list(NODE_IDS)
                           for n in NODE_IDS), 30, "nodes 1..3 listing brokers 1..3")
    for n in NODE_IDS:
        an = admin.AdminClient({"bootstrap.servers": cluster[n].bootstrap})
        d = an.describe_cluster(request_timeout=10).result(15)
        assert sorted(b.id for b in d.nodes) == list(NODE_IDS), (n, d)
    assert cluster.stop([4]) == {4: 0}
    del cluster.nodes[4]
    n = 60
    acked = produce_all(ck, cluster, topic, range(n))
    writes = [Write(v, OK, part, off) for v, (part, off) in acked.items()]
    assert_consistent(writes, read_everywhere(ck, cluster, topic), min_ok=n)


def test_a_drained_node_holds_no_replicas_and_leaves(ck, cluster, topic):
    """`strandctl cluster drain` moves every replica off a node (each to the listed node
    with the fewest replicas that lacks the partition) and with --wait-s returns once no
    partition names it; the node can then leave. Where no node can take a replica (RF 3 on
    three nodes) it moves nothing and exits 3."""
    admin = need_module("confluent_kafka.admin")
    # The replicas node 3 holds at first are those of __consumer_offsets, which the
    # controller creates after start-up: wait until every node lists them.
    wait_until(lambda: all(any(3 in pm.replicas for pm in
                               cluster.metadata(n).topics.get("__consumer_offsets", {}).values())
                           for n in NODE_IDS),
               30, "every node listing replicas of __consumer_offsets on node 3")
    r = _strandctl(cluster, "cluster", "drain", "3")
    assert r.returncode == 3 and "no other node can take the replica" in r.stdout, (
        r.returncode, r.stdout, r.stderr)
    assert "moving" not in r.stdout, r.stdout

    cluster.add_joiner(4)
    everyone = [1, 2, 3, 4]
    wait_until(lambda: all(sorted(cluster.metadata(n).brokers) == everyone for n in everyone),
               30, "every node listing brokers 1..4")
    a = admin.AdminClient({"bootstrap.servers": cluster.bootstrap()})
    a.create_topics([admin.NewTopic(topic, num_partitions=PARTITIONS,
                                    replication_factor=REPLICATION_FACTOR)])[topic].result(30)
    wait_leaders(cluster, topic)
    on_4 = [p for p in range(PARTITIONS) if 4 in replicas_of(cluster, topic, p, 1)]
    assert on_4, "placement over four nodes put no replica on node 4"
    n = 90
    acked = produce_all(ck, cluster, topic, range(n))

    r = _strandctl(cluster, "cluster", "drain", "4", "--wait-s", "45")
    print(r.stdout)
    assert r.returncode == 0 and "holds no replicas now" in r.stdout, (
        r.returncode, r.stdout, r.stderr)
    for node in everyone:
        md = cluster.metadata(node)
        named = [(t, p) for t, parts in md.topics.items() for p, pm in parts.items()
                 if 4 in pm.replicas]
        assert not named, f"node {node}'s Metadata still places replicas on 4: {named}"
    r = _strandctl(cluster, "cluster", "drain", "4")
    assert r.returncode == 0 and "holds no replicas" in r.stdout, (r.returncode, r.stdout)
    r = _strandctl(cluster, "cluster", "remove-node", "4")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert cluster.stop([4]) == {4: 0}
    del cluster.nodes[4]
    writes = [Write(v, OK, part, off) for v, (part, off) in acked.items()]
    assert_consistent(writes, read_everywhere(ck, cluster, topic), min_ok=n)


def test_a_node_whose_data_directory_was_wiped_takes_no_part_and_does_not_crash(ck, cluster,
                                                                                  rf3_topic):
    """A node restarted on an empty data directory under the same id (a wiped or replaced
    disk) lacks entries it acknowledged. The leader's first heartbeat shows it (it counts the
    node through them); raft-rs panics on that. The node fences those groups instead: it
    logs why, votes and acknowledges nothing for them, keeps running, and the cluster goes on
    with the replicas that hold the data (acks=all writes still succeed, nothing is lost)."""
    topic = rf3_topic
    first = produce_all(ck, cluster, topic, range(60))
    cluster.kill9(3)
    shutil.rmtree(cluster[3].data_dir)
    cluster[3].spawn(strand_bin())
    wait_until(lambda: b"lacks entries it acknowledged" in cluster[3].stderr_path.read_bytes(),
               30, "node 3 reporting the lost entries")
    time.sleep(1.0)
    cluster[3].check_alive()  # raises on an exit or a panic
    assert gauge(cluster, 3, "strand_raft_fenced_groups") >= 1
    assert all(gauge(cluster, n, "strand_raft_fenced_groups") == 0 for n in (1, 2))
    more = produce_all(ck, cluster, topic, range(60, 120))
    acked = {**first, **more}
    writes = [Write(v, OK, part, off) for v, (part, off) in acked.items()]
    passes = [read_pass(ck, cluster[n].bootstrap, topic) for n in (1, 2)]
    assert_consistent(writes, passes, min_ok=120)


def test_a_wiped_node_does_not_help_a_stale_node_win(ck, cluster, rf3_topic):
    """Writes commit on nodes 1 and 3 while node 2 is down. Then node 1 is down, node 3
    comes back with a wiped data directory and node 2 comes back without those writes. With
    node 3's vote node 2 would win every group, controller included, and node 1's copy of
    the writes would be truncated when it returned: acknowledged writes lost. A replica
    that holds no Raft state votes for a candidate holding entries it lacks only after a
    leader has reached it, so nothing is elected until node 1 is back, and nothing
    acknowledged is lost."""
    topic = rf3_topic
    first = produce_all(ck, cluster, topic, range(60))
    cluster.kill9(2)
    while_2_down = produce_all(ck, cluster, topic, range(60, 120))
    cluster.kill9(1)
    cluster.kill9(3)
    shutil.rmtree(cluster[3].data_dir)
    cluster[3].spawn(strand_bin())
    cluster[2].spawn(strand_bin())
    wait_until(lambda: b"holds no Raft state" in cluster[3].stderr_path.read_bytes(),
               30, "node 3 refusing its vote to node 2")
    time.sleep(6.0)  # several election timeouts: node 2 keeps asking, node 3 keeps refusing
    cluster[2].check_alive()
    cluster[3].check_alive()
    cluster.restart(1)
    wait_leaders(cluster, topic)
    acked = {**first, **while_2_down}
    writes = [Write(v, OK, part, off) for v, (part, off) in acked.items()]
    passes = [read_pass(ck, cluster[n].bootstrap, topic) for n in (1, 2)]
    assert_consistent(writes, passes, min_ok=120)


def test_a_controller_voter_that_never_arrives_does_not_keep_joined_nodes_out(cluster):
    """AddRaftVoter for a node that is down waits for it (and times out); meanwhile the
    controller still admits newly joined nodes as learners, so they get the metadata and
    serve. RemoveRaftVoter of the absent node ends the wait."""
    cluster.add_joiner(4)
    cluster.kill9(4)
    r = _strandctl(cluster, "--request-timeout-ms", "3000", "cluster", "add-controller", "4")
    assert r.returncode != 0, (r.returncode, r.stdout, r.stderr)
    cluster.add_joiner(5)  # ready only once it follows the controller's log
    r = _strandctl(cluster, "--request-timeout-ms", "30000", "cluster", "remove-controller", "4")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    r = _strandctl(cluster, "cluster", "quorum")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    roles = {int(line.split()[0]): line.split()[1] for line in r.stdout.splitlines()
             if line[:1].isdigit()}
    assert roles.get(5) == "observer" and all(roles.get(n) == "voter" for n in (1, 2, 3)), \
        r.stdout


def test_a_seed_is_replaced_by_a_joined_node(ck, cluster, rf3_topic):
    """Replacing a seed (a controller voter) whose machine is going away: a joined node 4
    becomes a voter (AddRaftVoter, `strandctl cluster add-controller`), seed 3 stops being
    one (RemoveRaftVoter), is drained and leaves. The controller then needs node 4: with
    node 2 down too, nodes 1 and 4 still commit metadata (a topic is created), also after
    node 1 restarts (the new voters are in the controller log, not in --seeds). Nothing
    acknowledged is lost."""
    topic = rf3_topic
    admin = need_module("confluent_kafka.admin")
    acked = produce_all(ck, cluster, topic, range(60))
    r = _strandctl(cluster, "cluster", "remove-controller", "4")
    assert r.returncode != 0 and "not a controller voter" in r.stderr, (r.returncode, r.stderr)
    cluster.add_joiner(4)
    r = _strandctl(cluster, "--request-timeout-ms", "90000", "cluster", "add-controller", "4")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    r = _strandctl(cluster, "cluster", "add-controller", "4")
    assert r.returncode != 0 and "controller voter already" in r.stderr, (r.returncode, r.stderr)
    r = _strandctl(cluster, "--request-timeout-ms", "90000", "cluster", "remove-controller", "3")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    r = _strandctl(cluster, "cluster", "quorum")  # DescribeQuorum
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    roles = {int(line.split()[0]): line.split()[1] for line in r.stdout.splitlines()
             if line[:1].isdigit()}
    assert roles == {1: "voter", 2: "voter", 4: "voter", 3: "observer"}, r.stdout
    r = _strandctl(cluster, "cluster", "remove-node", "4")
    assert r.returncode != 0 and "controller voter" in r.stderr, (r.returncode, r.stderr)

    r = _strandctl(cluster, "cluster", "drain", "3", "--wait-s", "50")
    assert r.returncode == 0, (r.returncode, r.stdout[-3000:], r.stderr)
    r = _strandctl(cluster, "cluster", "remove-node", "3")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    # Node 3 stays in the others' --seeds (an operator need not edit them): it is gone.
    assert cluster.stop([3]) == {3: 0}

    assert cluster.stop([2]) == {2: 0}
    for step in ("node 2 down", "node 1 restarted"):
        name = f"{topic}-{len(step)}"
        a = admin.AdminClient({"bootstrap.servers": cluster.bootstrap([1, 4])})
        a.create_topics([admin.NewTopic(name, num_partitions=1, replication_factor=2)])[
            name].result(40)
        if step == "node 2 down":
            assert cluster.stop([1]) == {1: 0}
            cluster.restart(1)
    cluster.restart(2)
    t0 = time.monotonic()
    wait_leaders(cluster, topic)
    print(f"leaders after the restarts in {time.monotonic() - t0:.1f}s")
    writes = [Write(v, OK, part, off) for v, (part, off) in acked.items()]
    passes = [read_pass(ck, cluster[n].bootstrap, topic) for n in (1, 2, 4)]
    assert_consistent(writes, passes, min_ok=60)


# -- i. a node the cluster cannot reach is fenced ---------------------------------------------

def test_a_new_partition_elects_without_its_dead_leader_when_a_follower_was_never_reached(
        ck, cluster, topic):
    """Kafka elects a new leader from a new partition's ISR, which starts with every
    replica. Here node 3 is cut off while the topic is created, so the leader never reaches
    its replica: that replica opens blank (no Raft state). The leader dies after a write
    the other follower holds; node 3 comes back. A blank replica cannot tell a new group
    from a wiped data directory unless the controller recorded, at creation, the
    incarnation of the data directory it still has (cluster::incarnation): it does, so
    node 3 votes and the follower holding the write leads. Before that, the partition had
    no leader until the dead node returned."""
    admin = need_module("confluent_kafka.admin")
    cluster.cut(3)
    a = admin.AdminClient({"bootstrap.servers": cluster[1].bootstrap})
    new = admin.NewTopic(topic, num_partitions=PARTITIONS, replication_factor=REPLICATION_FACTOR)
    a.create_topics([new])[topic].result(30)
    leaders = {p: cluster.wait_leader(topic, p, nodes=[1, 2], timeout=LEADERS_DEADLINE_S)
               for p in range(PARTITIONS)}
    acked = produce_all(ck, cluster, topic, range(PARTITIONS))
    dead = leaders[0]
    cluster.kill9(dead)
    cluster.heal(3)
    survivor = 3 - dead  # of nodes 1 and 2
    for p in range(PARTITIONS):
        cluster.wait_leader(topic, p, nodes=[survivor, 3], exclude=(dead,),
                            timeout=LEADERS_DEADLINE_S)
    got = {v: (p, o) for p, o, v in read_pass(ck, cluster[survivor].bootstrap, topic)}
    assert got == acked, f"acknowledged {acked}, read {got}"


def test_a_cut_off_node_is_fenced_from_metadata_and_returns(cluster, capsys):
    """Kafka leaves a fenced broker (one the controller has not heard from for
    broker.session.timeout.ms, 9 s) out of Metadata, so clients stop sending it requests it
    cannot serve (FindCoordinator, produce). Node 3 is cut off from its peers (clients can
    still reach it): nodes 1 and 2 drop it from Metadata and DescribeCluster, node 3 still
    lists itself; once the cut heals every node lists all three again."""
    admin = need_module("confluent_kafka.admin")
    wait_until(lambda: all(sorted(cluster.metadata(n).brokers) == list(NODE_IDS)
                           for n in NODE_IDS), 30, "every node listing brokers 1..3")
    cut_at = time.monotonic()
    cluster.cut(3)
    wait_until(lambda: all(sorted(cluster.metadata(n).brokers) == [1, 2] for n in (1, 2)),
               40, "nodes 1 and 2 leaving node 3 out of Metadata")
    show(capsys, f"node 3 fenced from Metadata {time.monotonic() - cut_at:.1f}s after the cut "
                 f"(broker session 9s)")
    a1 = admin.AdminClient({"bootstrap.servers": cluster[1].bootstrap})
    d = a1.describe_cluster(request_timeout=10).result(15)
    assert sorted(b.id for b in d.nodes) == [1, 2], d
    assert 3 in cluster.metadata(3).brokers, "a node always lists itself"
    cluster.heal(3)
    wait_until(lambda: all(sorted(cluster.metadata(n).brokers) == list(NODE_IDS)
                           for n in NODE_IDS), 40, "every node listing node 3 again")
