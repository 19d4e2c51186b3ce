"""The native protocol with real Kafka clients on the same logs: records produced with the
native client (`strand-client`'s example binaries) are consumed by confluent-kafka and
kcat, records produced by confluent-kafka are consumed natively, and keyed records land on
the same partitions as with librdkafka's murmur2 partitioner (Kafka's Java default)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from strand_harness import REPO_ROOT, need_module, _skip_or_fail

EXAMPLES = Path(os.environ.get("STRAND_EXAMPLES_DIR", REPO_ROOT / "target" / "debug" / "examples"))


def example(name: str) -> Path:
    p = EXAMPLES / name
    if not p.exists():
        _skip_or_fail(f"{p} not built (cargo build -p strand-client --examples)")
    return p


def native(broker) -> str:
    port = getattr(broker, "native_port", None)
    if port is None:
        _skip_or_fail("this strand binary has no native listener")
    return f"127.0.0.1:{port}"


def run(args, stdin: str = "", timeout: float = 60) -> list[dict]:
    r = subprocess.run([str(a) for a in args], input=stdin, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"{args[0]} exited {r.returncode}: {r.stderr}"
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


@pytest.fixture
def ck():
    return need_module("confluent_kafka")


def create(ck, broker, topic: str, partitions: int):
    admin = need_module("confluent_kafka.admin").AdminClient(
        {"bootstrap.servers": broker.bootstrap})
    fs = admin.create_topics([need_module("confluent_kafka.admin").NewTopic(
        topic, num_partitions=partitions, replication_factor=1)])
    fs[topic].result(30)


def consume_confluent(ck, broker, topic: str, count: int) -> list:
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out = []
    try:
        for _ in range(300):
            m = c.poll(0.2)
            if m is None:
                if len(out) >= count:
                    break
                continue
            assert m.error() is None, m.error()
            out.append(m)
    finally:
        c.close()
    return out


def test_native_to_kafka(ck, broker, topic):
    create(ck, broker, topic, 4)
    lines = "".join(f"key-{i}:value-{i}\n" for i in range(50))
    written = run([example("producer"), native(broker), topic, ":"], stdin=lines)
    assert len(written) == 50
    got = consume_confluent(ck, broker, topic, 50)
    assert len(got) == 50
    by_key = {m.key().decode(): m for m in got}
    for i, w in enumerate(written):
        m = by_key[f"key-{i}"]
        assert m.value() == f"value-{i}".encode()
        assert (m.partition(), m.offset()) == (w["partition"], w["offset"])


def test_kafka_to_native_with_headers(ck, broker, topic):
    create(ck, broker, topic, 3)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                     "partitioner": "murmur2_random", "compression.type": "zstd"})
    for i in range(30):
        p.produce(topic, key=f"k{i}", value=f"v{i}", headers=[("trace", f"t{i}".encode())])
    assert p.flush(30) == 0
    got = run([example("consumer"), native(broker), topic, "30"])
    assert len(got) == 30
    for r in got:
        i = int(r["key"][1:])
        assert r["value"] == f"v{i}"
        assert r["headers"] == [["trace", f"t{i}"]]
    # Same key, same partition: the native producer's murmur2 matches librdkafka's.
    native_written = run([example("producer"), native(broker), topic, ":"],
                         stdin="".join(f"k{i}:again\n" for i in range(30)))
    kafka_partition = {r["key"]: r["partition"] for r in got}
    for i, w in enumerate(native_written):
        assert w["partition"] == kafka_partition[f"k{i}"], f"k{i}"


def test_kcat_reads_native_records(broker, topic):
    import shutil
    if shutil.which("kcat") is None:
        _skip_or_fail("kcat not installed")
    run([example("producer"), native(broker), topic], stdin="hello\nworld\n")
    r = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning",
                        "-e", "-q"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["hello", "world"]
