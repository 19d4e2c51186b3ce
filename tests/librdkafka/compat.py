"""Runs librdkafka's own integration tests (its `tests/` folder, built by build.sh) against a
fresh single-node Strand, one `test-runner` process per entry of runs.tsv, and compares each
outcome with the expectation recorded there.

Why one process per entry: the runner ends itself with SIGKILL when any test times out, so
one hang would end a shared run; and a test's leaked client handles abort the process after
its summary, which must count against that test alone.

An entry passes when its process exits 0 and its JSON report has no FAILED test; `xfail`
entries must fail (an entry that passes while marked xfail is an error too: the list only
shrinks, so its line must go). Entries whose every test SKIPPED are reported as such (the
runner skips tests for features the broker version or the build lack).

Entries may run side by side (--jobs N, each its own test-runner process against the one
broker): librdkafka's tests name their topics and groups with random suffixes, and most of
their time is spent waiting on timeouts, not CPU.

With --cluster the entries run against three Strand nodes (replication factor 3, through
the test harness's fault proxy, no faults injected), as librdkafka's own CI runs against a
3-broker cluster; the `cluster` set lists the entries that make sense there.

Usage: compat.py --runner DIR/test-runner --set quick|full|cluster [--only ID,ID] [--out DIR]
                 [--jobs N] [--cluster]
Env: STRAND_BIN (the broker), CI (passed on: the runner then raises its timeouts).
Exit status 0 when every entry met its expectation and the broker never crashed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "kafka"))
from cluster_harness import Cluster  # noqa: E402
from strand_harness import Broker, tail  # noqa: E402

# librdkafka gates tests on the broker version it is told; Strand speaks Kafka 4.0's floors
# (Produce >= 3, Fetch >= 4: KIP-896).
KAFKA_VERSION = "4.0.0"
# The runner's own per-test timeouts, scaled (2 CPUs shared with the broker).
TIMEOUT_MULTIPLIER = 3
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A guard above the runner's own timeouts: a process still running then is killed.
PROCESS_TIMEOUT_S = 900


@dataclass
class Run:
    id: str
    sets: set[str]
    tests: str
    subtests: str
    args: list[str]
    expect: str
    reason: str


def load_runs(path: Path) -> list[Run]:
    runs = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) != 7:
            raise SystemExit(f"{path}:{n}: 7 tab-separated columns expected, got {len(cols)}")
        id_, sets, tests, subtests, args, expect, reason = (c.strip() for c in cols)
        if expect not in ("pass", "xfail"):
            raise SystemExit(f"{path}:{n}: expect must be pass or xfail, not {expect!r}")
        runs.append(Run(id_, set(sets.split(",")), tests, "" if subtests == "-" else subtests,
                        [] if args == "-" else args.split(), expect, reason))
    return runs


# What every broker of a run is started with: 4 partitions per auto-created topic (as
# librdkafka's default test scenario expects), a short initial rebalance delay, and an
# authorizer that allows what no ACL names (librdkafka's test clusters run Kafka with an
# authorizer: its Admin API tests create, describe and delete ACLs).
BROKER_ARGS = ["--group-initial-rebalance-delay-ms", "100", "--authorizer-enabled", "true",
               "--allow-everyone-if-no-acl-found", "true"]
# The suite creates topics and never deletes them: three nodes of one shard each run out of
# the default 1000 partition replicas per shard before its end. The nodes' own requests
# (transaction markers) come unauthenticated over the PLAINTEXT inter-broker listener, which
# the authorizer then needs to allow (the node refuses to start otherwise).
CLUSTER_ARGS = ["--topic-partitions-per-shard", "4000", "--super-users", "User:ANONYMOUS"]


class SingleNode:
    """One fresh Strand, 2 shards."""

    def __init__(self):
        self.broker = Broker("librdkafka-compat", smp=2, num_partitions=4, extra_args=BROKER_ARGS)

    def start(self) -> str:
        self.broker.start()
        return self.broker.bootstrap

    def running(self) -> bool:
        return self.broker.running()

    def stop(self) -> None:
        if self.broker.running():
            self.broker.stop()

    def logs(self) -> list[Path]:
        return [self.broker.stderr_path]

    def crash_reports(self) -> list[Path]:
        return [self.broker.data_dir / "crash-report.txt"]


class ThreeNodes:
    """Three fresh Strand nodes, replication factor 3."""

    def __init__(self):
        self.cluster = Cluster("librdkafka-compat", smp=1,
                               extra_args=["--num-partitions", "4", *BROKER_ARGS,
                                           *CLUSTER_ARGS])

    def start(self) -> str:
        self.cluster.start()
        return self.cluster.bootstrap()

    def running(self) -> bool:
        return len(self.cluster.running()) == len(self.cluster.nodes)

    def stop(self) -> None:
        self.cluster.close()

    def logs(self) -> list[Path]:
        return [p for n in self.cluster.nodes.values() for p in n.stderr_paths]

    def crash_reports(self) -> list[Path]:
        return [n.data_dir / "crash-report.txt" for n in self.cluster.nodes.values()]


def keep_broker_logs(target, out: Path) -> None:
    """Copies the brokers' logs beside the runs' logs: a failure seen later can then be
    read against the broker's side (the Python harness removes the data directories of
    finished runs, logs included, when the next pytest session starts)."""
    for i, p in enumerate(target.logs()):
        if p.exists():
            shutil.copyfile(p, out / f"broker-{i}-{p.name}")


def write_conf(path: Path, bootstrap: str) -> None:
    path.write_text(
        f"bootstrap.servers={bootstrap}\n"
        "broker.address.family=v4\n"
        f"test.timeout.multiplier={TIMEOUT_MULTIPLIER}\n")


def run_one(run: Run, runner: Path, conf: Path, out: Path) -> dict:
    report = out / f"{run.id}.json"
    log = out / f"{run.id}.log"
    env = dict(os.environ)
    env.update({"TESTS": run.tests, "TEST_KAFKA_VERSION": KAFKA_VERSION,
                "RDKAFKA_TEST_CONF": str(conf), "TEST_REPORT": str(report)})
    if run.subtests:
        env["SUBTESTS"] = run.subtests
    else:
        env.pop("SUBTESTS", None)
    # -p1: one test at a time; -L: not librdkafka's broker-less tests (they test only it).
    cmd = [str(runner), "-p1", "-L", *run.args]
    started = time.monotonic()
    with open(log, "wb") as f:
        try:
            rc = subprocess.run(cmd, cwd=runner.parent, env=env, stdout=f, stderr=subprocess.STDOUT,
                                timeout=PROCESS_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    took = time.monotonic() - started
    states: dict[str, str] = {}
    if report.exists():
        try:
            for name, t in json.loads(report.read_text()).get("tests", {}).items():
                states[name] = t.get("state", "?")
        except json.JSONDecodeError:
            pass
    failed = [n for n, s in states.items() if s not in ("PASSED", "SKIPPED")]
    ran = [n for n, s in states.items() if s == "PASSED"]
    if rc == 0 and not failed and ran:
        outcome = "pass"
    elif rc == 0 and not failed and states:
        outcome = "skipped"
    else:
        outcome = "fail"
    first_failure = ""
    if outcome == "fail":
        lines = _ANSI.sub("", log.read_text(errors="replace")).splitlines()
        for i, line in enumerate(lines):
            if line.startswith("### Test") and "failed" in line:
                # The line after it says what was wrong.
                first_failure = " ".join(lines[i:i + 2]).strip()[:400]
                break
        if not first_failure:
            first_failure = f"exit {rc}; states {states or 'none (no report)'}"
    return {"id": run.id, "outcome": outcome, "expect": run.expect, "rc": rc,
            "seconds": round(took, 1), "states": states, "first_failure": first_failure,
            "reason": run.reason}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", required=True, type=lambda p: Path(p).resolve())
    ap.add_argument("--set", default="quick")
    ap.add_argument("--only", default="")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--cluster", action="store_true")
    a = ap.parse_args()

    runs = [r for r in load_runs(HERE / "runs.tsv") if a.set in r.sets]
    if a.only:
        wanted = set(a.only.split(","))
        runs = [r for r in runs if r.id in wanted]
    if not runs:
        raise SystemExit(f"no runs.tsv entry in set {a.set!r}")
    out = a.out or (HERE.parent.parent / "target" / "librdkafka-compat" / "runs"
                    / time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    conf = out / "test.conf"

    target = ThreeNodes() if a.cluster else SingleNode()
    bootstrap = target.start()
    write_conf(conf, bootstrap)
    print(f"librdkafka compat: {len(runs)} runs ({a.set}) against strand at {bootstrap}; "
          f"logs in {out}", flush=True)
    started = time.monotonic()
    results = []
    lock = threading.Lock()
    died: list[str] = []

    def one(run: Run) -> None:
        if died:
            return
        r = run_one(run, a.runner, conf, out)
        met = (r["outcome"] != "fail") == (run.expect == "pass")
        mark = {True: "ok", False: "UNEXPECTED"}[met]
        with lock:
            results.append(r)
            print(f"  {run.id:<28} {r['outcome']:<8} (expected {run.expect}) {r['seconds']:>6.1f} s"
                  f"  {mark}" + (f"  {r['first_failure']}" if r["outcome"] == "fail" else ""),
                  flush=True)
            if not target.running() and not died:
                died.append(run.id)

    try:
        with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
            list(pool.map(one, runs))
        if died:
            print(f"a broker died during {died[0]}:\n" + "\n".join(tail(p, 80) for p in target.logs()))
            return 1
    finally:
        target.stop()
        keep_broker_logs(target, out)
    (out / "summary.json").write_text(json.dumps(results, indent=1))
    crashed = (any(b"panicked at" in p.read_bytes() for p in target.logs() if p.exists())
               or any(p.exists() for p in target.crash_reports()))
    unexpected = [r for r in results if (r["outcome"] != "fail") != (r["expect"] == "pass")]
    passed = sum(r["outcome"] == "pass" for r in results)
    xfailed = sum(r["outcome"] == "fail" and r["expect"] == "xfail" for r in results)
    skipped = sum(r["outcome"] == "skipped" for r in results)
    total_s = sum(r["seconds"] for r in results)
    print(f"librdkafka compat: {passed} passed, {xfailed} failed as expected, {skipped} skipped, "
          f"{len(unexpected)} unexpected, in {total_s:.0f} s of runs "
          f"({time.monotonic() - started:.0f} s wall, {a.jobs} at a time)")
    for r in unexpected:
        if r["outcome"] == "fail":
            print(f"  {r['id']} FAILED: {r['first_failure']}\n    log: {out / (r['id'] + '.log')}")
        else:
            print(f"  {r['id']} passed but is listed as xfail ({r['reason']}): "
                  "remove the xfail from tests/librdkafka/runs.tsv")
    if crashed:
        print("a broker panicked or crashed:\n" + "\n".join(tail(p, 80) for p in target.logs()))
    return 1 if unexpected or crashed else 0


if __name__ == "__main__":
    sys.exit(main())
