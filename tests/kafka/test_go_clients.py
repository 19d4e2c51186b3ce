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
