"""A Kafka Streams 4.x application against strand (log compaction, issue 21): a KTable
count() per key, at-least-once, in an in-memory store, so every start restores the whole
store from its changelog, a compacted topic Streams creates with `segment.ms` 500
(`StreamsConfig.topicPrefix`). The program is tests/kafka/java/StreamsCheck.java.

Run 1 counts N records and stops; strand compacts the changelog (checked by reading it: gaps,
and the latest count of every key kept); run 2 restores from the compacted changelog and
counts M more. The output topic's last count of every key must be its number of input
records.

A second test runs the same application with processing.guarantee=exactly_once_v2
(transactions, issue 22) while the broker is killed -9 twice: every key's counts in the
output, read committed, are exactly 1..n."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections import Counter

import pytest

from strand_harness import java_classpath, need_module, read_partition, wait_until

pytestmark = pytest.mark.apps

CLEANER_ARGS = ["--log-cleaner-backoff-ms", "200"]
KEYS = 20
N = 2000  # run 1, in 4 bursts 600 ms apart: the changelog spans several segments
M = 600  # run 2
PARTITIONS = 2


def end_offset(ck, bootstrap, topic, partition):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "strand-tests-unused"})
    try:
        return c.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=10)[1]
    finally:
        c.close()


def cleaner_passes(broker) -> int:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{broker.admin_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(int(float(line.split()[-1])) for line in text.splitlines()
               if line.startswith("strand_cleaner_passes_total"))


def test_streams_count_restores_from_a_compacted_changelog(strand, tmp_path):
    ck = need_module("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    java, cp = java_classpath("java4.1-apps", "StreamsCheck")
    broker = strand(name="s", extra_args=CLEANER_ARGS)
    run = uuid.uuid4().hex[:8]
    app, source, sink = f"counts-{run}", f"words-{run}", f"word-counts-{run}"
    changelog = f"{app}-counts-changelog"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for t, fut in admin.create_topics([NewTopic(source, PARTITIONS, 1),
                                       NewTopic(sink, PARTITIONS, 1)]).items():
        fut.result(15)

    def streams_run(start: int, stop: int, bursts: int) -> dict:
        cmd = [java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Xmx512m",
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp, "StreamsCheck",
               broker.bootstrap, app, source, sink, str(tmp_path / "state"), str(KEYS),
               str(start), str(stop), str(bursts)]
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=100)
        out = r.stdout.strip().splitlines()
        assert r.returncode == 0 and out, (
            f"StreamsCheck {start}..{stop} exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\n"
            f"stderr:\n{r.stderr[-8000:]}")
        print(f"StreamsCheck {start}..{stop}: {time.monotonic() - t0:.1f}s {out[-1]}")
        return json.loads(out[-1])

    def truth(upto: int) -> dict[bytes, int]:
        return dict(Counter(f"k{i % KEYS}".encode() for i in range(upto)))

    first = streams_run(0, N, 4)
    assert first == {"restored": 0, "processed": N}

    # One changelog record per input record (no record cache): N in all, until compacted.
    assert sum(end_offset(ck, broker.bootstrap, changelog, p) for p in range(PARTITIONS)) == N
    records: dict[int, list] = {}

    def compacted():
        for p in range(PARTITIONS):
            records[p] = read_partition(ck, broker.bootstrap, changelog, p)
        return all(len(records[p]) < end_offset(ck, broker.bootstrap, changelog, p)
                   for p in range(PARTITIONS))

    wait_until(compacted, 30, f"{changelog} to be compacted (records read: "
               f"{ {p: len(r) for p, r in records.items()} })", 0.3)
    assert cleaner_passes(broker) > 0
    latest = {}
    for p in range(PARTITIONS):
        offsets = [o for o, _, _ in records[p]]
        assert offsets == sorted(set(offsets)), f"partition {p}: offsets not increasing"
        for _, k, v in records[p]:
            assert v is not None and len(v) == 8, (k, v)
            latest[k] = int.from_bytes(v, "big")
    # Compaction kept the latest count of every key.
    assert latest == truth(N)
    kept = sum(len(r) for r in records.values())

    second = streams_run(N, N + M, 2)
    assert second["processed"] == M
    # Run 2 restored every key from the compacted changelog (what was left of it, or less
    # if the cleaner ran again in between).
    assert KEYS <= second["restored"] <= kept < N, (second, kept)

    inputs = Counter()
    for p in range(PARTITIONS):
        inputs.update(k for _, k, _ in read_partition(ck, broker.bootstrap, source, p))
    assert dict(inputs) == truth(N + M)
    last = {}
    for p in range(PARTITIONS):
        for _, k, v in read_partition(ck, broker.bootstrap, sink, p):
            last[k] = int(v)
    assert last == dict(inputs), "the last count of every key is its number of input records"


def test_streams_exactly_once_v2_counts_exactly_across_broker_kills(strand, tmp_path):
    """The same count() application with processing.guarantee=exactly_once_v2 (issue 22):
    the broker is killed -9 twice while it processes. Read committed, each key's counts in
    the output are exactly 1, 2, ..., its number of inputs: no count repeated (a batch
    processed twice) and none missing."""
    ck = need_module("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    java, cp = java_classpath("java4.1-apps", "StreamsCheck")
    broker = strand(name="eos")
    run = uuid.uuid4().hex[:8]
    app, source, sink = f"eos-{run}", f"eos-words-{run}", f"eos-counts-{run}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for t, fut in admin.create_topics([NewTopic(source, PARTITIONS, 1),
                                       NewTopic(sink, PARTITIONS, 1)]).items():
        fut.result(15)
    n = 3000
    cmd = [java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Xmx512m",
           "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp, "StreamsCheck",
           broker.bootstrap, app, source, sink, str(tmp_path / "state"), str(KEYS),
           "0", str(n), "10", "exactly_once_v2"]
    out_path, err_path = tmp_path / "streams.out", tmp_path / "streams.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        try:
            for kill in (1, 2):
                wait_until(lambda: sum(end_offset(ck, broker.bootstrap, sink, p)
                                       for p in range(PARTITIONS)) >= kill * n // 4,
                           90, f"output before kill {kill}", 0.2)
                broker.kill9_and_restart(same_port=True)
            rc = proc.wait(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert rc == 0, (f"StreamsCheck exit {rc}\nstdout:\n{out_path.read_text()[-3000:]}\n"
                     f"stderr:\n{err_path.read_text()[-8000:]}")
    counts: dict[bytes, list[int]] = {}
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "check-" + run,
                     "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition(sink, p, 0) for p in range(PARTITIONS)])
    idle = time.monotonic()
    while time.monotonic() - idle < 3:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        counts.setdefault(m.key(), []).append(int(m.value()))
        idle = time.monotonic()
    c.close()
    want = Counter(f"k{i % KEYS}".encode() for i in range(n))
    for k, seq in counts.items():
        assert seq == list(range(1, len(seq) + 1)), f"{k}: counts {seq[:10]}... not 1..n once each"
    assert {k: len(v) for k, v in counts.items()} == dict(want)
