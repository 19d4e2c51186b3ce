"""Transactions with real clients (issue 22): confluent-kafka's transactional producer
against a single node: a commit is visible to read_committed consumers and an abort is
not, both are to read_uncommitted ones with the markers skipped; a transaction over
several partitions and topics is atomic; sendOffsetsToTransaction commits a group's
offsets only with the transaction; a second producer with the same transactional.id
fences the first; a transaction that outlives transaction.timeout.ms is aborted by the
coordinator; and a consume-transform-produce loop keeps exactly-once across kill -9."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from strand_harness import need, need_module, wait_until


@pytest.fixture
def ck():
    return need_module("confluent_kafka")


@pytest.fixture
def ck_admin():
    return need_module("confluent_kafka.admin")


def create_topics(ck_admin, broker, names, partitions):
    admin = ck_admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    fs = admin.create_topics([ck_admin.NewTopic(n, num_partitions=partitions,
                                                replication_factor=1) for n in names],
                             operation_timeout=10, request_timeout=15)
    for n in names:
        fs[n].result(timeout=20)


def txn_producer(ck, broker, tid, **conf):
    base = {
        "bootstrap.servers": broker.bootstrap,
        "transactional.id": tid,
        "linger.ms": 5,
        "message.timeout.ms": 30000,
    }
    base.update(conf)
    p = ck.Producer(base)
    p.init_transactions(30)
    return p


def read_all(ck, broker, topics_partitions, isolation, idle_s=2.0, deadline_s=20.0):
    """Every record of the given (topic, partition)s from the start: (topic, partition,
    offset, value) sorted, after `idle_s` without a new one."""
    c = ck.Consumer({
        "bootstrap.servers": broker.bootstrap,
        "group.id": "reader-" + uuid.uuid4().hex,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": isolation,
    })
    c.assign([ck.TopicPartition(t, p, 0) for t, p in topics_partitions])
    out = []
    last = time.monotonic()
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and time.monotonic() - last < idle_s:
        m = c.poll(0.2)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append((m.topic(), m.partition(), m.offset(), m.value().decode()))
        last = time.monotonic()
    c.close()
    return sorted(out)


def values(records):
    return sorted(v for (_, _, _, v) in records)


def test_commit_is_visible_and_abort_is_not(ck, ck_admin, broker, topic):
    create_topics(ck_admin, broker, [topic], 2)
    p = txn_producer(ck, broker, "tid-" + topic)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=f"a{i}".encode(), partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"last", partition=0)
    p.commit_transaction(30)

    parts = [(topic, 0), (topic, 1)]
    committed = read_all(ck, broker, parts, "read_committed")
    assert values(committed) == sorted([f"c{i}" for i in range(6)] + ["last"])
    everything = read_all(ck, broker, parts, "read_uncommitted")
    assert values(everything) == sorted([f"c{i}" for i in range(6)]
                                        + [f"a{i}" for i in range(6)] + ["last"])
    # Each transaction's marker takes one offset per partition and is never returned.
    offsets0 = [o for (_, part, o, _) in everything if part == 0]
    assert offsets0 == [0, 1, 2, 4, 5, 6, 8], offsets0
    # The coordinator counted them (the module's broker is shared: at least these).
    ended = transactions_ended(broker)
    assert ended["commit"] >= 2 and ended["abort"] >= 1, ended


def transactions_ended(broker) -> dict[str, int]:
    """strand_transaction_duration_seconds_count summed by outcome, from /metrics."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{broker.admin_port}/metrics",
                                timeout=5) as r:
        text = r.read().decode()
    ended = {"commit": 0, "abort": 0}
    for line in text.splitlines():
        if line.startswith("strand_transaction_duration_seconds_count"):
            outcome = line.split('outcome="')[1].split('"')[0]
            ended[outcome] += int(float(line.split()[-1]))
    return ended


def test_an_open_transaction_holds_read_committed_consumers_back(ck, ck_admin, broker, topic):
    create_topics(ck_admin, broker, [topic], 1)
    p = txn_producer(ck, broker, "tid-" + topic)
    p.begin_transaction()
    p.produce(topic, value=b"before", partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    p.flush(30)
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-" + topic,
                     "isolation.level": "read_committed"})
    # The last stable offset stops at the open transaction's first record.
    low, high = c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)
    assert (low, high) == (0, 2), (low, high)
    assert values(read_all(ck, broker, [(topic, 0)], "read_committed", idle_s=1.0)) == ["before"]
    p.commit_transaction(30)
    low, high = c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)
    assert high == 4, high
    c.close()
    assert values(read_all(ck, broker, [(topic, 0)], "read_committed")) == ["before", "open"]


def test_multi_topic_transactions_are_atomic(ck, ck_admin, broker, topic):
    a, b = topic + "-a", topic + "-b"
    create_topics(ck_admin, broker, [a, b], 3)
    p = txn_producer(ck, broker, "tid-" + topic)
    for n in range(10):
        p.begin_transaction()
        for t in (a, b):
            for part in range(3):
                p.produce(t, value=f"{n}-{t[-1]}-{part}".encode(), partition=part)
        if n % 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    parts = [(t, q) for t in (a, b) for q in range(3)]
    got = values(read_all(ck, broker, parts, "read_committed"))
    want = sorted(f"{n}-{t[-1]}-{q}" for n in range(0, 10, 2) for t in (a, b) for q in range(3))
    assert got == want


def test_send_offsets_to_transaction_commits_with_it(ck, ck_admin, broker, topic):
    create_topics(ck_admin, broker, [topic], 1)
    group = "g-" + topic
    p = txn_producer(ck, broker, "tid-" + topic)
    tp = ck.TopicPartition

    def member(isolation):
        return ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                            "enable.auto.commit": False, "isolation.level": isolation})

    c = member("read_uncommitted")
    stable = member("read_committed")
    meta = c.consumer_group_metadata()

    def committed(consumer=c, timeout=10):
        return consumer.committed([tp(topic, 0)], timeout=timeout)[0].offset

    p.begin_transaction()
    p.produce(topic, value=b"x", partition=0)
    p.send_offsets_to_transaction([tp(topic, 0, 5)], meta, 30)
    # Pending until the transaction ends: not committed yet, and unstable to a
    # read_committed consumer (KIP-447: it asks with require_stable and is answered
    # UNSTABLE_OFFSET_COMMIT, which it retries until its timeout).
    assert committed() < 0
    with pytest.raises(ck.KafkaException):
        committed(stable, timeout=2)
    p.abort_transaction(30)
    assert committed() < 0, "an aborted transaction's offsets are dropped"
    assert committed(stable) < 0
    p.begin_transaction()
    p.produce(topic, value=b"y", partition=0)
    p.send_offsets_to_transaction([tp(topic, 0, 7)], meta, 30)
    p.commit_transaction(30)
    assert committed() == 7
    assert committed(stable) == 7
    c.close()
    stable.close()


def test_a_new_producer_fences_the_old_one(ck, ck_admin, broker, topic):
    create_topics(ck_admin, broker, [topic], 1)
    tid = "tid-" + topic
    old = txn_producer(ck, broker, tid)
    old.begin_transaction()
    old.produce(topic, value=b"zombie", partition=0)
    old.flush(30)
    # The new producer's InitProducerId aborts the old one's open transaction.
    new = txn_producer(ck, broker, tid)
    new.begin_transaction()
    new.produce(topic, value=b"fresh", partition=0)
    new.commit_transaction(30)
    with pytest.raises(ck.KafkaException) as e:
        old.produce(topic, value=b"late", partition=0)
        old.commit_transaction(30)
    err = e.value.args[0]
    assert err.fatal() or err.txn_requires_abort(), err
    assert values(read_all(ck, broker, [(topic, 0)], "read_committed")) == ["fresh"]


def test_a_timed_out_transaction_is_aborted(ck, ck_admin, strand, topic):
    b = strand(extra_args=["--transaction-abort-check-interval-ms", "200"])
    create_topics(ck_admin, b, [topic], 1)
    p = txn_producer(ck, b, "tid-" + topic,
                     **{"transaction.timeout.ms": 1500, "message.timeout.ms": 1500})
    p.begin_transaction()
    p.produce(topic, value=b"abandoned", partition=0)
    p.flush(30)
    c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g-" + topic,
                     "isolation.level": "read_committed"})
    # The coordinator aborts it: the abort marker moves the last stable offset past it.
    wait_until(lambda: c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=5)[1] == 2,
               timeout=20, what="the timed-out transaction aborted")
    c.close()
    assert values(read_all(ck, b, [(topic, 0)], "read_committed", idle_s=1.0)) == []
    with pytest.raises(ck.KafkaException):
        p.commit_transaction(10)


def test_an_idle_transactional_id_expires(ck, ck_admin, strand, topic):
    """An id with no transaction open and no change for `transactional_id_expiration_ms`
    (Kafka's `transactional.id.expiration.ms`) is forgotten by its coordinator with a
    tombstone in `__transaction_state`: it is no longer described (TRANSACTIONAL_ID_NOT_FOUND,
    also after a kill -9 and restart), and its next producer starts afresh, with a new
    producer id at epoch 0. An id with a transaction open is kept however old."""
    from test_strandctl import ctl, strandctl_bin
    need(strandctl_bin().exists(), f"strandctl not found at {strandctl_bin()}")
    b = strand(extra_args=["--transactional-id-expiration-ms", "2000",
                           "--transaction-expiry-check-interval-ms", "200"])
    create_topics(ck_admin, b, [topic], 2)
    tid, busy_tid = "tid-" + topic, "busy-" + topic

    def describe(t):
        r = ctl(b, "transactions", "describe", t, expect_rc=None)
        if r.returncode != 0:
            return r.stderr
        header, row = (line.split() for line in r.stdout.splitlines()[:2])
        return dict(zip(header, row))

    p = txn_producer(ck, b, tid)
    p.begin_transaction()
    p.produce(topic, value=b"committed", partition=0)
    p.commit_transaction(30)
    first = describe(tid)
    assert isinstance(first, dict) and first["STATE"] == "CompleteCommit", first
    # Another id keeps a transaction open past the expiration: it must stay.
    busy = txn_producer(ck, b, busy_tid, **{"transaction.timeout.ms": 60000})
    busy.begin_transaction()
    busy.produce(topic, value=b"open", partition=1)
    busy.flush(30)
    wait_until(lambda: "error code 105" in str(describe(tid)), timeout=30,
               what="the idle transactional id to expire")
    assert describe(busy_tid)["STATE"] == "Ongoing"
    b.kill9_and_restart()
    assert "error code 105" in str(describe(tid)), "the expiry is durable"
    fresh = txn_producer(ck, b, tid)
    again = describe(tid)
    assert again["PRODUCER_ID"] != first["PRODUCER_ID"] and again["PRODUCER_EPOCH"] == "0", (
        first, again)
    fresh.begin_transaction()
    fresh.produce(topic, value=b"after", partition=0)
    fresh.commit_transaction(30)
    assert values(read_all(ck, b, [(topic, 0)], "read_committed", idle_s=1.0)) == [
        "after", "committed"]


def test_a_transaction_timeout_above_the_maximum_is_refused(ck, broker, topic):
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tid-" + topic,
                     "transaction.timeout.ms": 900001})
    with pytest.raises(ck.KafkaException) as e:
        p.init_transactions(20)
    assert e.value.args[0].code() == ck.KafkaError.INVALID_TRANSACTION_TIMEOUT, e.value


def committed_total(ck, bootstrap, group, topic, partitions):
    """The sum of `group`'s committed offsets of `topic` (read_uncommitted: no waiting
    for open transactions); -1 when the broker does not answer."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "isolation.level": "read_uncommitted"})
    try:
        got = c.committed([ck.TopicPartition(topic, q) for q in range(partitions)], timeout=10)
        return sum(max(tp.offset, 0) for tp in got)
    except ck.KafkaException:
        return -1
    finally:
        c.close()


def test_consume_transform_produce_is_exactly_once_across_kill9(ck, ck_admin, strand, topic):
    """Every input appears in the output exactly once while the broker is killed -9 three
    times and the application once. The worker (eos_worker.py) is its own process; one that
    makes no progress for `stuck_s` is killed and replaced, as a supervisor would
    (librdkafka 2.x can hang in send_offsets_to_transaction after its group coordinator
    restarts, ignoring its timeout: confluentinc/librdkafka#5456, #5511)."""
    stuck_s = 15
    b = strand(smp=2)
    source, sink, group = topic + "-in", topic + "-out", "g-" + topic
    create_topics(ck_admin, b, [source, sink], 2)
    n = 3000
    p = ck.Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
    for i in range(n):
        p.produce(source, value=str(i).encode(), partition=i % 2)
    assert p.flush(30) == 0

    log = b.root / "eos-worker.log"
    args = [sys.executable, str(Path(__file__).with_name("eos_worker.py")), b.bootstrap,
            source, sink, group, "tid-" + topic]

    def start_worker():
        with open(log, "a") as out:
            return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)

    w = start_worker()
    workers_started, broker_kills, app_kills = 1, 0, 0
    progress, last_change = 0, time.monotonic()
    deadline = time.monotonic() + 240
    try:
        while progress < n:
            assert time.monotonic() < deadline, (
                f"{progress} of {n} inputs committed by the deadline; worker log:\n"
                + log.read_text()[-3000:])
            now = committed_total(ck, b.bootstrap, group, source, 2)
            if now != progress:
                progress, last_change = now, time.monotonic()
            if broker_kills < 3 and progress >= (broker_kills + 1) * n // 5:
                b.kill9_and_restart(same_port=True)
                broker_kills += 1
                last_change = time.monotonic()
            elif (app_kills == 0 and progress >= 4 * n // 5) or \
                    time.monotonic() - last_change > stuck_s:
                app_kills += progress >= 4 * n // 5
                w.kill()
                w.wait()
                w = start_worker()
                workers_started += 1
                last_change = time.monotonic()
            time.sleep(0.2)
    finally:
        w.kill()
        w.wait()
    print(f"{broker_kills} broker kills, {workers_started} worker processes")
    assert_exactly_once(ck, b, sink, n)


def assert_exactly_once(ck, broker, sink, n, idle_s=2.0):
    """The sink of eos_worker.py, read committed, holds "out-<i>" once for each input i."""
    out = read_all(ck, broker, [(sink, 0), (sink, 1)], "read_committed", idle_s=idle_s,
                   deadline_s=90)
    got = [v for (_, _, _, v) in out]
    counts: dict[str, int] = {}
    for v in got:
        counts[v] = counts.get(v, 0) + 1
    dupes = sorted(v for v, k in counts.items() if k > 1)
    missing = sorted(set(f"out-{i}" for i in range(n)) - set(counts))
    assert not dupes, f"{len(dupes)} outputs written twice, e.g. {dupes[:5]}"
    assert not missing, (f"{len(missing)} inputs never transformed, e.g. {missing[:5]}; "
                         f"per partition: {_ends(ck, broker, sink, [0, 1], out)}")
    assert len(got) == n


def _ends(ck, broker, topic, partitions, out):
    """What each partition holds, for a failure message: the records read, the high
    watermark and the last stable offset (ListOffsets read_uncommitted and read_committed
    latest) as the broker answers now."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    ends = {}
    for level in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        try:
            fs = a.list_offsets({TopicPartition(topic, q): OffsetSpec.latest()
                                 for q in partitions}, isolation_level=level,
                                request_timeout=10)
            ends[level.name] = {tp.partition: f.result(timeout=15).offset
                                for tp, f in fs.items()}
        except Exception as e:  # noqa: BLE001 -- a diagnostic, never the failure itself
            ends[level.name] = repr(e)
    read = {q: sum(1 for r in out if r[1] == q) for q in partitions}
    return f"read {read}, ends {ends}"


def test_strandctl_shows_and_aborts_an_open_transaction(ck, ck_admin, broker, topic):
    """`strandctl transactions list|describe|producers|abort` (kafka-transactions.sh's
    commands): an open transaction is listed and described at its coordinator, its
    partition names its producer and first offset, and `abort` at that offset ends it as a
    hanging transaction would be ended: read_committed consumers move past it."""
    from test_strandctl import ctl, strandctl_bin
    if not strandctl_bin().exists():
        pytest.skip(f"strandctl not found at {strandctl_bin()}")
    create_topics(ck_admin, broker, [topic], 1)
    tid = "tid-" + topic
    p = txn_producer(ck, broker, tid)
    p.begin_transaction()
    p.produce(topic, value=b"stuck", partition=0)
    p.flush(30)
    listed = ctl(broker, "transactions", "list").stdout
    assert any(line.split()[:1] == [tid] and line.split()[-1] == "Ongoing"
               for line in listed.splitlines()), listed
    described = ctl(broker, "transactions", "describe", tid).stdout
    assert "Ongoing" in described and f"{topic}-0" in described, described
    producers = ctl(broker, "transactions", "producers", topic, "0").stdout
    rows = [line.split() for line in producers.splitlines()[1:]]
    assert [r[3] for r in rows] == ["0"], producers
    ctl(broker, "transactions", "abort", topic, "0", "--start-offset", "5", expect_rc=4)
    ctl(broker, "transactions", "abort", topic, "0", "--start-offset", "0")
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-" + topic,
                     "isolation.level": "read_committed"})
    assert c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10) == (0, 2)
    c.close()
    assert values(read_all(ck, broker, [(topic, 0)], "read_committed", idle_s=1.0)) == []
