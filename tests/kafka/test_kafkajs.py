"""kafkajs (npm) against strand, through tests/kafka/js/check.js: admin createTopics (and
TOPIC_ALREADY_EXISTS), fetchTopicMetadata, fetchTopicOffsets(+ByTimestamp), producer with
acks=-1. kafkajs cannot consume without a consumer group (its Consumer always joins one),
and strand has no group coordinator yet, so the records are read back with confluent-kafka.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from strand_harness import need, need_module

JS = Path(__file__).resolve().parent / "js"
COUNT = 100


@pytest.fixture(scope="module")
def node():
    path = shutil.which("node")
    need(path is not None, "node is not installed (Debian: nodejs)")
    need((JS / "node_modules" / "kafkajs" / "package.json").exists(),
         f"kafkajs is not installed: run `npm ci` in {JS}")
    return path


def test_kafkajs_admin_and_producer(node, broker, topic):
    env = dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1")
    r = subprocess.run([node, str(JS / "check.js"), broker.bootstrap, topic, str(COUNT)],
                       capture_output=True, text=True, timeout=120, cwd=JS, env=env)
    assert r.returncode == 0, (
        f"check.js exit {r.returncode}\n{r.stderr[-5000:]}\n{r.stdout[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])

    assert out["created"] is True
    assert out["createdAgain"] is False, "CreateTopics on an existing name should fail"
    assert out["metadata"] == [{"name": topic, "partitions": [
        {"partition": 0, "leader": 0, "error": 0}, {"partition": 1, "leader": 0, "error": 0}]}]
    half = COUNT // 2
    assert out["sends"] == [
        [{"partition": p, "error": 0, "baseOffset": base} for p in (0, 1)]
        for base in (0, half // 2)
    ]
    assert out["offsets"] == [{"partition": 0, "low": 0, "high": half},
                              {"partition": 1, "low": 0, "high": half}]
    assert out["byTimestamp"] == [{"partition": 0, "offset": COUNT // 4},
                                  {"partition": 1, "offset": COUNT // 4}]

    # Read back what kafkajs wrote.
    ck = need_module("confluent_kafka", " (used to read back the kafkajs records)")
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "strand-tests-unused",
                     "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(topic, p, 0) for p in (0, 1)])
        got = {0: [], 1: []}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < COUNT:
            assert time.monotonic() < deadline, f"read back {got}"
            for m in c.consume(200, 0.5):
                assert not m.error(), m.error()
                got[m.partition()].append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    for p in (0, 1):
        want = [(j, f"k{i}".encode(), f"v{i}".encode())
                for j, i in enumerate(range(p, COUNT, 2))]
        assert got[p] == want, f"partition {p}"
