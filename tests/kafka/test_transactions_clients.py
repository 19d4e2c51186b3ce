"""Transactions with the Java client (kafka-clients 3.9.1 and 4.1.1) and kafkajs: what
test_transactions.py checks with confluent-kafka. A committed transaction is visible to
read_committed consumers and an aborted one is not, both are to read_uncommitted ones
with the markers skipped; a transaction over two topics and several partitions is atomic;
offsets sent to a transaction become the group's only when it commits.

Each test runs one scenario of the client's program, tests/kafka/java/TxnCheck.java or
tests/kafka/js/txn.js (their header says what a scenario writes), which creates the
topics, produces, reads back and prints one JSON line checked here. A record is
[topic, partition, offset, value].
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from strand_harness import JAVA_CLIENTS, java_classpath, need

HERE = Path(__file__).resolve().parent
JS = HERE / "js"


@pytest.fixture(scope="module", params=[*sorted(JAVA_CLIENTS), "kafkajs"])
def txn_check(request) -> list[str]:
    """The command running the client's program, to be followed by its arguments."""
    if request.param == "kafkajs":
        node = shutil.which("node")
        need(node is not None, "node is not installed (Debian: nodejs)")
        need((JS / "node_modules" / "kafkajs" / "package.json").exists(),
             f"kafkajs is not installed: run `npm ci` in {JS}")
        return [node, str(JS / "txn.js")]
    java, cp = java_classpath(request.param, "TxnCheck")
    return [java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", cp, "TxnCheck"]


def run(txn_check: list[str], broker, *args: str) -> dict:
    env = dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1")
    r = subprocess.run([*txn_check, broker.bootstrap, *args], capture_output=True, text=True,
                       timeout=120, cwd=HERE, env=env)
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0 and lines, (
        f"{args[0]} exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-5000:]}")
    return json.loads(lines[-1])


def records(got: list[list]) -> list[tuple]:
    return sorted(map(tuple, got))


def test_commit_is_visible_and_abort_is_not(txn_check, broker, topic):
    out = run(txn_check, broker, "visibility", topic)

    def six(prefix, first_offset):
        return [(topic, i % 2, first_offset + i // 2, f"{prefix}{i}") for i in range(6)]

    # Each transaction's marker takes one offset per partition and is never returned.
    ends = [(topic, p, 8, "end") for p in (0, 1)]
    assert records(out["read_committed"]) == sorted(six("c", 0) + ends)
    assert records(out["read_uncommitted"]) == sorted(six("c", 0) + six("a", 4) + ends)


def test_multi_topic_transactions_are_atomic(txn_check, broker, topic):
    a, b = topic + "-a", topic + "-b"
    out = run(txn_check, broker, "atomic", a, b)
    # In every partition, transaction n has its record at offset 2n and its marker at 2n+1.
    want = [(t, p, 2 * n, str(n)) for n in range(0, 10, 2) for t in (a, b) for p in range(3)]
    want += [(t, p, 20, "end") for t in (a, b) for p in range(3)]
    assert records(out["read_committed"]) == sorted(want)


def test_offsets_sent_to_a_transaction_commit_with_it(txn_check, broker, topic):
    out = run(txn_check, broker, "offsets", topic, "g-" + topic)
    assert out == {"after_abort": None, "after_commit": 7}


# Clients that use transaction version 2 (KIP-890 part 2) once the broker finalizes it:
# their EndTxn (v5) bumps the producer epoch at every transaction's end. Java 3.9 and
# kafkajs predate it and keep the epoch InitProducerId gave them.
TV2_CLIENTS = {"java4.1"}


def test_transaction_version_2_clients_bump_the_epoch_at_every_transaction(
        txn_check, broker, topic, request):
    """The `atomic` scenario runs 11 transactions (6 committed, 5 aborted) of one
    transactional id. With transaction version 2 each one ends at a new epoch (Kafka 4.x
    does the same), so the id's coordinator shows epoch 11; a version 1 client stays at
    epoch 0 — and both read back exactly the committed transactions."""
    from test_strandctl import ctl, strandctl_bin
    need(strandctl_bin().exists(), f"strandctl not found at {strandctl_bin()}")
    a, b = topic + "-a", topic + "-b"
    run(txn_check, broker, "atomic", a, b)
    described = ctl(broker, "transactions", "describe", "tid-" + a).stdout
    header, row = (line.split() for line in described.splitlines()[:2])
    got = dict(zip(header, row))
    client = request.node.callspec.params["txn_check"]
    assert got["PRODUCER_EPOCH"] == ("11" if client in TV2_CLIENTS else "0"), described
    assert got["STATE"] == "CompleteCommit", described
