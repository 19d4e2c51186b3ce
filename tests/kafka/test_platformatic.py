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

from strand_harness import need

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
    # One record per send to partition i % 2: offsets count up per partition.
    assert out["sent"] == [{"partition": i % 2, "offset": i // 2} for i in range(COUNT)]

    def keyed(records):
        return {(m["partition"], m["offset"]): (m["key"], m["value"]) for m in records}

    first, second = keyed(out["first"]), keyed(out["second"])
    assert len(first) == len(out["first"]) == COUNT // 2, "no record twice in one run"
    assert len(second) == len(out["second"]) == COUNT - COUNT // 2
    assert not first.keys() & second.keys(), "the second run resumed after the commits"
    want = {(i % 2, i // 2): (f"k{i}", f"v{i}") for i in range(COUNT)}
    assert first | second == want
