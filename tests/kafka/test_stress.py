"""Cross-shard stress (issue 28): the workload that crashed the broker, driven hard. One
producer is the report's own (librdkafka, 100-byte records open-loop at 10,000/s,
acks=all, linger.ms=0, one partition, one connection for the whole run); beside it more
producers (linger.ms=0, acks=all and acks=1 alternating) send to partitions on every shard,
so most requests cross shards, each replaced by a new connection every few seconds; and
consumers long-poll the same partitions and reconnect too. The broker
must still run at the end, with no crash report, and every acknowledged record must be
below the high watermark, no offset acknowledged twice.

On the broker built with glommio 0.9.0's foreign-waker race (PATCHED.md in
third_party/glommio) this workload crashed it (SIGSEGV in `RawTask::do_wake`).

`STRAND_STRESS_SECS` (default 20) sets the duration; `make soak` runs it for an hour.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from strand_harness import need_module, tail

PARTITIONS = 8
PRODUCERS = 6
CONSUMERS = 2
# Producer 0: the report's workload; the others share the rest.
REPORT_RATE = 10_000
RATE_PER_PRODUCER = 2000
CHURN_S = 3.0
WORKER = Path(__file__).with_name("stress_worker.py")


def _secs() -> float:
    return float(os.environ.get("STRAND_STRESS_SECS", "20"))


def _watermarks(ck, bootstrap, topic) -> list[int]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "strand-stress-unused"})
    try:
        return [c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)]
    finally:
        c.close()


def _metric_total(b, name: str) -> float:
    """A counter of the broker's /metrics summed over shards (-1 without an admin port):
    `strand_shard_wakes_recovered_total` (waits a timed poll found done, their wake lost),
    `strand_kafka_pipeline_full_events_total` (requests read only after waiting for room in
    their connection's pipeline: clients outrunning their answers)."""
    if b.admin_port is None:
        return -1
    url = f"http://127.0.0.1:{b.admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name))


def _warnings(b) -> str:
    """The broker's WARN and ERROR lines (the last 40)."""
    lines = [line for line in Path(b.stderr_path).read_text(errors="replace").splitlines()
             if " WARN " in line or " ERROR " in line]
    return "\n".join(lines[-40:])


def _record_metrics(b, path: Path, stop: threading.Event, every_s: float = 10.0) -> None:
    """Appends the broker's /metrics (without histogram buckets) to `path` every `every_s`
    seconds, each scrape headed by the wall-clock time: the broker's side of the timeline
    that the producers' librdkafka statistics lines give from the client's side."""
    if b.admin_port is None:
        return
    url = f"http://127.0.0.1:{b.admin_port}/metrics"
    with open(path, "a") as out:
        while not stop.wait(every_s):
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    text = r.read().decode()
            except OSError as e:
                out.write(f"# {time.strftime('%H:%M:%S')} scrape failed: {e}\n")
                continue
            out.write(f"# {time.strftime('%H:%M:%S')}\n")
            out.writelines(line + "\n" for line in text.splitlines()
                           if line and not line.startswith("#") and "_bucket" not in line)
            out.flush()


def _create(ck_admin, bootstrap, topic):
    a = ck_admin.AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([ck_admin.NewTopic(topic, PARTITIONS, 1)])[topic].result(30)


def test_cross_shard_produce_fetch_and_churn_never_crash_the_broker(strand, topic, tmp_path):
    ck = need_module("confluent_kafka")
    admin = need_module("confluent_kafka.admin")
    b = strand(smp=2)
    _create(admin, b.bootstrap, topic)
    secs = _secs()
    workers = []
    for i in range(PRODUCERS + CONSUMERS):
        out = tmp_path / f"worker-{i}.json"
        args = [sys.executable, str(WORKER), "--bootstrap", b.bootstrap, "--topic", topic,
                "--partitions", str(PARTITIONS), "--secs", str(secs), "--out", str(out)]
        if i == 0:
            args += ["--rate", str(REPORT_RATE), "--acks", "all", "--churn-s", str(secs + 1),
                     "--only-partition", "0"]
        else:
            args += ["--rate", str(RATE_PER_PRODUCER), "--acks", "all" if i % 2 == 0 else "1",
                     "--churn-s", str(CHURN_S)]
        if i >= PRODUCERS:
            args.append("--consume")
        log = open(tmp_path / f"worker-{i}.log", "wb")
        workers.append((subprocess.Popen(args, stdout=log, stderr=log), out, log))
    stop_metrics = threading.Event()
    threading.Thread(target=_record_metrics, args=(b, tmp_path / "metrics.log", stop_metrics),
                     daemon=True).start()
    deadline = time.monotonic() + secs + 120
    for proc, _, log in workers:
        while proc.poll() is None:
            assert b.running(), f"the broker died under load:\n{tail(b.stderr_path, 120)}"
            assert time.monotonic() < deadline, "a load process did not finish"
            time.sleep(0.2)
        log.close()
    stop_metrics.set()
    # The broker's log stays with the timeline (the broker's own folder is removed when the
    # test passes): a recovered lost wake is logged there with what was waited for.
    shutil.copyfile(b.stderr_path, tmp_path / "broker.log")
    assert b.running(), f"the broker died under load:\n{tail(b.stderr_path, 120)}"
    assert not (b.data_dir / "crash-report.txt").exists()
    for i, (proc, _, _) in enumerate(workers):
        assert proc.returncode == 0, (tmp_path / f"worker-{i}.log").read_text()[-3000:]

    results = [json.loads(out.read_text()) for _, out, _ in workers]
    # Per partition: count, max, sum and sum of squares of the acknowledged offsets.
    moments = {p: [0, -1, 0, 0] for p in range(PARTITIONS)}
    for r in results[:PRODUCERS]:
        for p, (n, top, total, squares) in r["acked"].items():
            m = moments[int(p)]
            m[0] += n
            m[1] = max(m[1], top)
            m[2] += total
            m[3] += squares
    acked = sum(m[0] for m in moments.values())
    failed = sum(r["failed"] for r in results[:PRODUCERS])
    wakes = _metric_total(b, "strand_shard_wakes_recovered_total")
    pipeline_full = _metric_total(b, "strand_kafka_pipeline_full_events_total")
    read = sum(r["read"] for r in results[PRODUCERS:])
    hw = _watermarks(ck, b.bootstrap, topic)
    target = secs * (REPORT_RATE + (PRODUCERS - 1) * RATE_PER_PRODUCER)
    assert acked > target * 0.5, (acked, failed)
    assert failed == 0, (f"{failed} records failed ({wakes} lost wakes recovered, "
                         f"{pipeline_full} requests waited for pipeline room; timeline in "
                         f"{tmp_path}/metrics.log and worker-*.log):\n{_warnings(b)}")
    for p, (n, top, total, squares) in moments.items():
        assert n <= hw[p] and top < hw[p], f"p{p}: {n} acks, max {top}, HW {hw[p]}"
        if n == hw[p]:
            # Every offset below the HW acknowledged: each exactly once (the offsets are a
            # permutation of 0..HW-1, whose sum and sum of squares these must be).
            assert total == n * (n - 1) // 2, f"p{p}: two acknowledgements name one offset"
            assert squares == (n - 1) * n * (2 * n - 1) // 6, f"p{p}: offsets repeat"
    assert read > 0
    print(f"\nstress: {acked} records acknowledged in {secs:.0f} s "
          f"({acked / secs:.0f}/s), {read} read by long-polling consumers, "
          f"high watermarks {hw}, {wakes} lost wakes recovered, "
          f"{pipeline_full} requests waited for pipeline room")
