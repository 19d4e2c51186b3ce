"""Reads one bench/kafka/run.sh run directory and prints the comparison table.

Throughput figures are rdkafka_performance's own final summary lines (MB/s there is
10^6 bytes per second of message payload). Request round trips come from librdkafka's
statistics (-T 1000): per-broker `rtt` windows, in microseconds. Exit status 1 when a
case failed (missing figures, wrong counts, errors from the client or the broker)."""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

BROKERS = ("strand", "tansu", "kafka", "kafka_fsync")
LABEL = {"strand": "Strand", "tansu": "Tansu", "kafka": "Kafka", "kafka_fsync": "Kafka fsync"}
CASES = [("produce", 100), ("produce", 1024), ("consume", 100), ("consume", 1024)]

PRODUCE_RE = re.compile(
    r"^% (\d+) messages produced \((\d+) bytes\), (\d+) delivered \(offset (-?\d+), (\d+) failed\) "
    r"in (\d+)ms: (\d+) msgs/s and ([\d.]+) MB/s, (\d+) produce failures, (\d+) in queue")
CONSUME_RE = re.compile(
    r"^% (\d+) messages \((\d+) bytes\) consumed in (\d+)ms: (\d+) msgs/s \(([\d.]+) MB/s\)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def read_meta(path: Path) -> dict:
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                out[k.strip()] = v.strip()
    return out


def parse_output(path: Path, mode: str) -> dict | None:
    """The final summary line plus per-interval rates (from the cumulative lines)."""
    if not path.exists():
        return None
    rows = []  # (elapsed_ms, count)
    final = None
    errors = []
    for line in path.read_text(errors="replace").splitlines():
        if mode == "produce":
            m = PRODUCE_RE.match(line)
            if m:
                g = m.groups()
                final = {"msgs": int(g[0]), "bytes": int(g[1]), "done": int(g[2]),
                         "failed": int(g[4]), "ms": int(g[5]), "msgs_s": int(g[6]),
                         "mb_s": float(g[7]), "backpressure": int(g[8]), "in_queue": int(g[9])}
                rows.append((int(g[5]), int(g[2])))
                continue
        else:
            m = CONSUME_RE.match(line)
            if m:
                g = m.groups()
                final = {"msgs": int(g[0]), "bytes": int(g[1]), "done": int(g[0]), "failed": 0,
                         "ms": int(g[2]), "msgs_s": int(g[3]), "mb_s": float(g[4])}
                rows.append((int(g[2]), int(g[0])))
                continue
        if (line.startswith("%3|") or line.startswith("%2|") or "Consume error" in line
                or line.startswith("% Error") or "produce error" in line
                or "delivery failed" in line.lower() or "Message delivery failed" in line):
            errors.append(line.strip())
    if final is None:
        return {"errors": errors}
    final["errors"] = errors
    # Per-interval rates between consecutive cumulative reports (the last row, the final
    # summary, may repeat an interval row's time: skip zero-length intervals).
    rates = []
    for (t0, n0), (t1, n1) in zip(rows, rows[1:]):
        if t1 - t0 >= 500 and n0 > 0:
            rates.append((n1 - n0) * 1000.0 / (t1 - t0))
    final["interval_rates"] = rates
    return final


def parse_stats(path: Path) -> dict:
    """Request round trips to the data broker(s), from librdkafka's statistics windows."""
    p50s, p99s, maxs, counters = [], [], [], {}
    if not path.exists():
        return {}
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            st = json.loads(line)
        except json.JSONDecodeError:
            continue
        for b in st.get("brokers", {}).values():
            if b.get("nodeid", -1) < 0:
                continue  # the bootstrap connection
            rtt = b.get("rtt", {})
            if rtt.get("cnt", 0) > 0:
                p50s.append(rtt["p50"])
                p99s.append(rtt["p99"])
                maxs.append(rtt["max"])
            for k in ("txerrs", "rxerrs", "req_timeouts", "txretries", "connects", "disconnects"):
                counters[k] = max(counters.get(k, 0), b.get(k, 0))
    if not p50s:
        return {"counters": counters}
    return {"rtt_p50_ms": statistics.median(p50s) / 1000.0, "rtt_p99_ms": max(p99s) / 1000.0,
            "rtt_max_ms": max(maxs) / 1000.0, "counters": counters}


def partition_progress(path: Path) -> list[str]:
    """From the last complete statistics line: partitions that did not reach their high
    watermark (what a stuck consumer looks like)."""
    last = None
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            try:
                last = json.loads(line)
            except json.JSONDecodeError:
                continue
    out = []
    for tname, t in (last or {}).get("topics", {}).items():
        for pid, pp in sorted(t.get("partitions", {}).items(), key=lambda kv: int(kv[0])):
            if int(pid) < 0:
                continue
            hi, nxt = pp.get("hi_offset", -1), pp.get("next_offset", -1)
            if hi > 0 and nxt < hi:
                out.append(f"{tname}[{pid}] consumed {pp.get('rxmsgs', 0)}, next offset {nxt},"
                           f" high watermark {hi}")
    return out


# Warnings every healthy start of a broker logs (Kafka formatting a new KRaft log).
BENIGN = re.compile(r"Performing controller activation. The metadata log appears to be empty")


def broker_log_findings(run: Path, broker: str) -> list[str]:
    lines = []
    for log in sorted(run.glob(f"{broker}-broker*.log")):
        for line in log.read_text(errors="replace").splitlines():
            s = ANSI.sub("", line)
            if BENIGN.search(s):
                continue
            if re.search(r"\b(WARN|ERROR)\b|panicked at|\bwarn\b|\berror\b", s):
                lines.append(f"{log.name}: {s.strip()}")
    return lines


def fmt_int(n: float) -> str:
    return f"{n:,.0f}"


def main() -> int:
    run = Path(sys.argv[1])
    meta = read_meta(run / "meta.txt")
    # Apache Kafka is in the run unless KAFKA=0 (then meta.txt names no kafka).
    brokers = [b for b in BROKERS if not b.startswith("kafka") or "kafka" in meta]
    # The message sizes the run measured (SIZES; both unless meta.txt says otherwise).
    sizes = {int(s) for s in meta.get("sizes", "100,1024").split(",") if s}
    cases = [(mode, size) for mode, size in CASES if size in sizes]
    failed = False
    results = {}
    for broker in brokers:
        for mode, size in cases:
            base = run / f"{broker}-{mode}-{size}"
            m = read_meta(base.with_suffix(".meta"))
            r = parse_output(base.with_suffix(".out"), mode)
            if not m or r is None:
                results[(broker, mode, size)] = None
                failed = True
                continue
            r["stats"] = parse_stats(Path(str(base) + ".stats.jsonl"))
            r["stuck"] = (partition_progress(Path(str(base) + ".stats.jsonl"))
                          if mode == "consume" else [])
            r["meta"] = m
            count = int(m.get("count", "0"))
            problems = []
            if m.get("rc") not in ("0", None):
                problems.append(f"exit status {m.get('rc')}")
            if "done" not in r:
                problems.append("no summary line")
            else:
                if r["done"] != count:
                    problems.append(f"{r['done']} of {count} {'delivered' if mode == 'produce' else 'consumed'}")
                if r.get("failed"):
                    problems.append(f"{r['failed']} failed deliveries")
            if r["errors"]:
                problems.append(f"{len(r['errors'])} error lines")
            if m.get("broker_alive") == "no":
                problems.append("broker died")
            r["problems"] = problems
            if problems:
                failed = True
            results[(broker, mode, size)] = r

    print("=" * 96)
    print("Kafka-protocol throughput: " + " vs ".join(LABEL[b] for b in brokers)
          + ", one run on this machine (make bench-kafka)")
    print("=" * 96)
    for k in ("date", "cpu_model", "host_cpus", "kernel", "strand_commit", "strand_bin",
              "strand_bin_stale", "strand_smp", "tansu", "kafka",
              "librdkafka", "data_dir"):
        if k in meta:
            print(f"  {k:16} {meta[k]}")
    print()
    print("Machine physics (strand-bench disk --total-bytes 268435456 --engine-secs 1 --partitions 1):")
    phys = run / "physics.txt"
    for line in (phys.read_text().splitlines() if phys.exists() else ["  <missing>"]):
        print(f"  {line}")
    print()
    print(f"Load: rdkafka_performance (librdkafka {meta.get('librdkafka', '?')}), one client process,"
          f" loopback, topic of {meta.get('partitions', '?')} partitions, no compression.")
    print(f"  produce: -P -a -1 (acks=all) -X linger.ms={meta.get('linger_ms', '?')}"
          " -X enable.idempotence=false, keyless (librdkafka's sticky partitioner), a fixed message count")
    print("  consume: -C with -p 0..N-1 (the simple legacy consumer: no group, no commits),"
          " -o beginning, the same count back")
    print("  msgs/s and MB/s (10^6 B/s of payload) are rdkafka_performance's final summary figures")
    print()
    peers = [b for b in brokers if b != "strand"]
    hdr = f"{'case':30} |" + "".join(
        f" {LABEL[b] + ' msgs/s':>18} {'MB/s':>8} |" for b in brokers) + "".join(
        f" {'Strand/' + LABEL[b]:>18}" for b in peers)
    print(hdr)
    print("-" * len(hdr))
    for mode, size in cases:
        rs = {b: results.get((b, mode, size)) for b in brokers}
        count = None
        for r in rs.values():
            if r and "meta" in r:
                count = int(r["meta"]["count"])
        cnt = f"{count / 1e6:g}M" if count else "?"
        what = f"{mode} {size:>4} B x {cnt}" + (" acks=all" if mode == "produce" else "")

        def cell(r):
            if not r or "msgs_s" not in r:
                return f"{'FAILED':>18} {'-':>8}"
            mark = "*" if r["problems"] else ""
            return f"{fmt_int(r['msgs_s']) + mark:>18} {r['mb_s']:>8.2f}"

        def ratio(peer):
            s_, p_ = rs.get("strand"), rs.get(peer)
            if s_ and p_ and "msgs_s" in s_ and "msgs_s" in p_ and p_["msgs_s"] > 0:
                return f"{s_['msgs_s'] / p_['msgs_s']:.2f}x"
            return "-"
        print(f"{what:30} |" + "".join(f" {cell(rs[b])} |" for b in brokers)
              + "".join(f" {ratio(b):>18}" for b in peers))
    print()
    print("Durability is NOT the same: Strand answers an acks=all produce only after its batch is")
    print("written with O_DIRECT and fdatasync'ed (group commit: batches waiting together share one")
    print("fdatasync); Tansu runs with memory:// storage, never touches a disk and loses every")
    print("message at exit. The ratio compares unequal work, in Tansu's favour.")
    if "kafka" in meta:
        print("Kafka as it ships answers acks=all once its replicas (here: itself) have the batch in")
        print("the page cache, before any fsync; Kafka fsync (log.flush.interval.messages=1)")
        print("fsyncs every batch before answering: the durability Strand gives.")
    print()
    print("Details per case (wall = the whole client run; rtt = librdkafka's request round trip")
    print("to the data broker over 1 s windows: median of window p50s, worst window p99, max;")
    print("slowest 1 s = the lowest per-second rate as a share of the average, stalls = seconds")
    print("below 10% of it; CPU in cores over the case: the broker, the client, and other = the")
    print("rest of the machine's busy time, i.e. work that is not this benchmark's):")
    dh = (f"  {'broker':11} {'case':14} {'wall s':>7} {'rtt p50':>8} {'p99':>8} {'max ms':>8}"
          f" {'slowest 1s':>10} {'stalls':>6} {'broker':>6} {'client':>6} {'other':>6}  notes")
    print(dh)
    for broker in brokers:
        for mode, size in cases:
            r = results.get((broker, mode, size))
            name = f"{mode} {size}"
            if not r or "meta" not in r:
                print(f"  {LABEL[broker]:11} {name:14} no result")
                continue
            m = r["meta"]
            wall = int(m.get("wall_ms", 0)) / 1000.0
            cpu = int(m.get("broker_cpu_ticks", 0)) / int(m.get("clk_tck", 100)) / max(wall, 1e-9)
            client = int(m.get("client_cpu_ms", 0)) / 1000.0 / max(wall, 1e-9)
            ncpu = int(meta.get("host_cpus", "1"))
            tot = int(m.get("machine_total_ticks", 0))
            busy = ncpu * int(m.get("machine_busy_ticks", 0)) / tot if tot else 0.0
            other = f"{max(0.0, busy - cpu - client):.2f}" if tot else "-"
            st = r.get("stats", {})
            rtt = (f"{st['rtt_p50_ms']:>8.2f} {st['rtt_p99_ms']:>8.2f} {st['rtt_max_ms']:>8.1f}"
                   if "rtt_p50_ms" in st else f"{'-':>8} {'-':>8} {'-':>8}")
            rates = r.get("interval_rates", [])
            avg = r.get("msgs_s", 0)
            slow = f"{100 * min(rates) / avg:.0f}%" if rates and avg else "-"
            stalls = sum(1 for x in rates if avg and x < 0.1 * avg) if rates else 0
            notes = list(r.get("problems", []))
            if r.get("backpressure"):
                notes.append(f"{r['backpressure']} local queue-full retries")
            c = st.get("counters", {})
            for k in ("txerrs", "rxerrs", "req_timeouts", "txretries"):
                if c.get(k):
                    notes.append(f"{k}={c[k]}")
            if c.get("connects", 0) > 1:
                notes.append(f"connects={c['connects']}")
            print(f"  {LABEL[broker]:11} {name:14} {wall:>7.1f} {rtt} {slow:>10} {stalls:>6}"
                  f" {cpu:>6.2f} {client:>6.2f} {other:>6}  {'; '.join(notes)}")
            for e in r.get("errors", [])[:5]:
                print(f"         client: {e}")
            if r.get("problems"):
                for line in r.get("stuck", []):
                    print(f"         stuck: {line}")
                diag = Path(str(run / f"{broker}-{mode}-{size}") + ".diag.errors")
                if diag.exists():
                    for line in diag.read_text(errors="replace").splitlines()[:8]:
                        print(f"         librdkafka -d fetch: {line.strip()[:200]}")
    print()
    for broker in brokers:
        lines = broker_log_findings(run, broker)
        print(f"{LABEL[broker]} log: {len(lines)} warning/error lines" + (":" if lines else ""))
        seen = set()
        for line in lines:
            key = re.sub(r"\d", "", line)[:120]
            if key in seen:
                continue
            seen.add(key)
            print(f"  {line[:300]}")
            if len(seen) >= 10:
                print("  ...")
                break
    for line in (run / "meta.txt").read_text().splitlines():
        if "exit status" in line or line.startswith("runtime_s") or "died" in line:
            print(line)
    warns = (run / "warnings.txt").read_text().strip() if (run / "warnings.txt").exists() else ""
    if warns:
        print("\nWARNINGS:")
        for line in warns.splitlines():
            print(f"  {line}")
        # A start-up panic that a retry got past is reported, not counted as a failure.
        if any(w.startswith("strand") and "during start-up" not in w for w in warns.splitlines()):
            failed = True
    print(f"\nlogs: {run}")
    if failed:
        print("RESULT: some cases FAILED (marked FAILED or *, see notes above)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
