"""The two main Go clients against strand, through tests/kafka/go (one module, modules from
the Go module proxy, pinned by go.sum): franz-go (with kadm) and IBM Sarama (at its default
protocol version). Each creates a topic, produces with its idempotent producer (acks=all)
to partition i % 2, and consumes in a group in two runs: the first reads half the records
and commits them, the second (same group) resumes after the commit (issue 26).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from strand_harness import KAFKA_TESTS_DIR, check_group_resume, need

GO = Path(__file__).resolve().parent / "go"
BIN = KAFKA_TESTS_DIR / "go-bin"
COUNT = 40
CLIENTS = ["franz", "sarama"]


@pytest.fixture(scope="module")
def go_binaries():
    go = shutil.which("go")
    need(go is not None, "go is not installed (go.mod needs Go 1.26: https://go.dev/dl, not Debian 12 golang-go)")
    BIN.mkdir(parents=True, exist_ok=True)
    # Go's build cache makes a rebuild of unchanged sources quick.
    env = dict(os.environ, GOFLAGS="-mod=readonly")
    r = subprocess.run([go, "build", "-o", str(BIN) + "/", "./..."], cwd=GO, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"go build failed:\n{r.stdout}\n{r.stderr}"
    return {c: BIN / c for c in CLIENTS}


@pytest.mark.parametrize("client", CLIENTS)
def test_go_client_produce_and_group_consume_with_resume(go_binaries, client, broker, topic):
    group = f"{topic}-group"
    r = subprocess.run([str(go_binaries[client]), broker.bootstrap, topic, group, str(COUNT)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, (
        f"{client} exit {r.returncode}\n{r.stderr[-5000:]}\n{r.stdout[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])

    if client == "franz":
        assert out["created_partitions"] == 2
    check_group_resume(out, COUNT)


def test_franz_go_transactions_on_protocol_version_2(go_binaries, broker, topic):
    """franz-go's transactional producer (go/franztxn): six transactions over two
    partitions, the odd ones aborted; a read_committed franz-go consumer reads exactly the
    committed ones. franz-go switches to transaction protocol version 2 when the broker
    finalizes `transaction.version` 2 (Produce v12 adds the partitions, EndTxn v5 bumps
    the epoch), so the id's coordinator shows epoch 6 afterwards — version 1 would stay
    at 0."""
    from test_strandctl import ctl, strandctl_bin
    need(strandctl_bin().exists(), f"strandctl not found at {strandctl_bin()}")
    tid = "tid-" + topic
    r = subprocess.run([str(BIN / "franztxn"), broker.bootstrap, topic, tid],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"franztxn exit {r.returncode}\n{r.stderr[-5000:]}\n{r.stdout[-2000:]}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert sorted(out["read_committed"]) == sorted(f"{n}-{p}" for n in (0, 2, 4) for p in (0, 1))
    described = ctl(broker, "transactions", "describe", tid).stdout
    header, row = (line.split() for line in described.splitlines()[:2])
    got = dict(zip(header, row))
    assert (got["PRODUCER_EPOCH"], got["STATE"]) == ("6", "CompleteAbort"), described
