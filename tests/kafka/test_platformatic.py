"""@platformatic/kafka (npm) against strand, through tests/kafka/js/platformatic.mjs: it
creates a topic, produces with its idempotent producer (acks=all), and consumes in a group
in two runs: the first reads half the records and commits each, the second (same group)
resumes after the commit. Its consumer names topics by id (Fetch v13+) once the broker
offers it: on Fetch v12 it sends the topic id where v12 has the topic name, which a Kafka
broker answers UNKNOWN_TOPIC_OR_PARTITION too (issue 26).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from strand_harness import check_group_resume, need

JS = Path(__file__).resolve().parent / "js"
COUNT = 40
# The client's own floor (its package.json engines).
NODE_MIN = (20, 19, 4)


@pytest.fixture(scope="module")
def node():
    path = shutil.which("node")
    need(path is not None, "node is not installed (Debian: nodejs)")
    version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    m = re.match(r"v(\d+)\.(\d+)\.(\d+)", version.strip())
    need(m is not None and tuple(map(int, m.groups())) >= NODE_MIN,
         f"@platformatic/kafka needs node >= {'.'.join(map(str, NODE_MIN))}, found {version}")
    need((JS / "node_modules" / "@platformatic" / "kafka" / "package.json").exists(),
         f"@platformatic/kafka is not installed: run `npm ci` in {JS}")
    return path


def test_platformatic_produce_and_group_consume_with_resume(node, broker, topic):
    group = f"{topic}-group"
    r = subprocess.run([node, str(JS / "platformatic.mjs"), broker.bootstrap, topic, group,
                        str(COUNT)], capture_output=True, text=True, timeout=180, cwd=JS)
    assert r.returncode == 0, (
        f"platformatic.mjs exit {r.returncode}\n{r.stderr[-5000:]}\n{r.stdout[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])

    assert out["created"] == [{"name": topic, "partitions": 2}]
    check_group_resume(out, COUNT)
