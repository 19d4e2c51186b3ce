"""A three-node cluster soak (issue 24): mixed load for STRAND_CLUSTER_SOAK_SECS (a short
run in `make test`, an hour in `make soak`) while nodes 2 and 3 are killed with kill -9 in
turn and restarted; node 1 stays up the whole time and its RSS is sampled. At the end every
partition is read through every node and checked like test_cluster.py's faults (nothing
acknowledged lost, no duplicates, offsets consistent), and, for a run of at least
`RSS_CHECK_MIN_S`, node 1's RSS must be flat: its peak over the last quarter of the run at
most `RSS_GROWTH_MAX_BYTES` above its peak over the second quarter (the first is warm-up).

Load: the idempotent acks=all producer of test_cluster.py at `RATE_PER_S`, and a consumer
group reading the topic the whole time (fetch long polls, offset commits, rebalances when a
killed node led a partition or coordinated the group).
"""

from __future__ import annotations

import os
import random
import threading
import time

from strand_harness import need_module
from test_cluster import (Workload, assert_consistent, owned_cluster, read_everywhere,
                          sleep_until, wait_leaders, PARTITIONS, REPLICATION_FACTOR)

SOAK_S = float(os.environ.get("STRAND_CLUSTER_SOAK_SECS", "40"))
# One node killed every this often, down for KILL_FOR_S, alternating between nodes 2 and 3.
KILL_EVERY_S = float(os.environ.get("STRAND_CLUSTER_SOAK_KILL_EVERY_SECS", "15"))
KILL_FOR_S = 4.0
RATE_PER_S = 200
RSS_SAMPLE_S = 5.0
RSS_CHECK_MIN_S = 1200.0
RSS_GROWTH_MAX_BYTES = 64 * 1024 * 1024
SEED = int(os.environ.get("STRAND_CLUSTER_SOAK_SEED", "24"))


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


class GroupReader:
    """A consumer group member reading the topic until stopped; counts what it reads."""

    def __init__(self, ck, bootstrap: str, topic: str):
        self.read = 0
        self.errors = 0
        self._stop = threading.Event()
        self._consumer = ck.Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"soak-{topic}",
            "auto.offset.reset": "earliest", "enable.auto.commit": True,
            "auto.commit.interval.ms": 1000, "session.timeout.ms": 10_000,
        })
        self._consumer.subscribe([topic])
        self._thread = threading.Thread(target=self._run, name="group-reader", daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            for m in self._consumer.consume(500, 0.5):
                if m.error():
                    self.errors += 1
                else:
                    self.read += 1

    def stop(self):
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()


def test_kill9_soak_keeps_rss_flat_and_loses_nothing(request, capsys):
    ck = need_module("confluent_kafka")
    admin = need_module("confluent_kafka.admin")
    rng = random.Random(SEED)
    with owned_cluster(request) as cluster:
        topic = f"soak-{SEED}"
        a = admin.AdminClient({"bootstrap.servers": cluster.bootstrap()})
        new = admin.NewTopic(topic, num_partitions=PARTITIONS,
                             replication_factor=REPLICATION_FACTOR)
        a.create_topics([new])[topic].result(30)
        wait_leaders(cluster, topic)
        w = Workload(ck, cluster.bootstrap(), topic, rate_per_s=RATE_PER_S).start()
        reader = GroupReader(ck, cluster[1].bootstrap, topic)
        pid = cluster[1].proc.pid
        samples: list[tuple[float, int]] = []
        kills = 0
        try:
            start = time.monotonic()
            next_kill = start + KILL_EVERY_S
            while time.monotonic() < start + SOAK_S:
                samples.append((time.monotonic() - start, rss_bytes(pid)))
                if time.monotonic() >= next_kill:
                    victim = 2 + kills % 2 if rng.random() < 0.8 else rng.choice([2, 3])
                    cluster.kill9(victim)
                    kills += 1
                    sleep_until(time.monotonic() + KILL_FOR_S)
                    cluster.restart(victim)
                    next_kill = time.monotonic() + KILL_EVERY_S
                time.sleep(RSS_SAMPLE_S if SOAK_S >= RSS_CHECK_MIN_S else 1.0)
            cluster[1].check_alive()
        finally:
            w.stop()
            reader.stop()
        wait_leaders(cluster, topic)
        report = assert_consistent(w, read_everywhere(ck, cluster, topic), min_ok=RATE_PER_S)
        quarter = SOAK_S / 4
        second = max((r for t, r in samples if quarter <= t < 2 * quarter), default=0)
        last = max((r for t, r in samples if t >= 3 * quarter), default=0)
        with capsys.disabled():
            print(f"\ncluster soak {SOAK_S:.0f}s: {kills} kill -9s, {w.summary()}, group read "
                  f"{reader.read} ({reader.errors} errors); node 1 RSS second quarter peak "
                  f"{second / 2**20:.1f} MiB, last quarter peak {last / 2**20:.1f} MiB; "
                  f"{report.counts()}")
        assert kills >= 1
        if SOAK_S >= RSS_CHECK_MIN_S:
            assert last <= second + RSS_GROWTH_MAX_BYTES, (
                f"node 1 RSS grew from {second} to {last} bytes over the run")
