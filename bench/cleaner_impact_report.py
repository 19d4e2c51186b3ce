#!/usr/bin/env python3
"""The report of bench/cleaner-impact.sh: produce latency of each run with and without the
cleaner, the medians and their ratio, and the cleaner's throughput against the disk.

Usage: cleaner_impact_report.py OUT_DIR RUNS
"""
import json
import re
import statistics
import sys
from pathlib import Path

out, runs = Path(sys.argv[1]), int(sys.argv[2])
phys = json.loads((out / "physics.json").read_text())
sync = [s["latency"]["p99_us"] for s in phys["sync"][:1]]
if phys.get("sync_zeroed"):
    sync.append(phys["sync_zeroed"]["latency"]["p99_us"])
floor_us = min(sync) + phys["rtt"]["p99_us"]


def metric(path, name):
    """Sum of every series of counter `name` in a /metrics text (0 when absent)."""
    total = 0.0
    if not path.exists():
        return total
    for line in path.read_text().splitlines():
        m = re.match(rf"{name}(?:\{{[^}}]*\}})? (\S+)$", line)
        if m:
            total += float(m.group(1))
    return total


def row(mode, i):
    r = json.loads((out / f"{mode}-{i}.json").read_text())
    m = out / f"{mode}-{i}.metrics.txt"
    busy_s = metric(m, "strand_cleaner_pass_seconds_total")
    read = metric(m, "strand_cleaner_bytes_read_total")
    written = metric(m, "strand_cleaner_bytes_written_total")
    return {
        "p50": r["produce_latency"]["p50_us"],
        "p99": r["produce_latency"]["p99_us"],
        "p999": r["produce_latency"]["p999_us"],
        "p99_unc": r["produce_latency_uncorrected"]["p99_us"],
        "lag_p99": r["send_lag"]["p99_us"] if r.get("send_lag") else 0,
        "rate": r["produced_records_per_s"],
        "busy_s": busy_s,
        "read_mib": read / 2**20,
        "written_mib": written / 2**20,
        "measured_s": r["measured_s"],
    }


rows = {mode: [row(mode, i) for i in range(1, runs + 1)] for mode in ("on", "off")}
print("# Produce latency with and without the log cleaner at work\n")
print(f"physics: O_DIRECT write {phys['write_mib_s']:.1f} MiB/s, read "
      f"{phys['read_mib_s']:.1f} MiB/s; write+fdatasync p99 {min(sync)} µs + loopback RTT "
      f"p99 {phys['rtt']['p99_us']} µs = {floor_us} µs\n")
print("| run | cleaner | p50 µs | p99 µs | p99.9 µs | p99 uncorrected µs | send lag p99 µs "
      "| records/s | cleaner busy s | cleaner read MiB | written MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for i in range(runs):
    for mode in ("on", "off"):
        r = rows[mode][i]
        print(f"| {i + 1} | {mode} | {r['p50']} | {r['p99']} | {r['p999']} | {r['p99_unc']} | "
              f"{r['lag_p99']} | {r['rate']:.0f} | {r['busy_s']:.1f} | {r['read_mib']:.0f} | "
              f"{r['written_mib']:.0f} |")


def med(mode, k):
    return statistics.median(r[k] for r in rows[mode])


print()
for k, name in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("p99_unc", "p99 uncorrected")):
    on, off = med("on", k), med("off", k)
    print(f"- median {name}: cleaner on {on} µs, off {off} µs: on/off {on / max(off, 1):.2f}; "
          f"on/physics {on / floor_us:.1f}, off/physics {off / floor_us:.1f}")
busy = sum(r["busy_s"] for r in rows["on"])
if busy > 0:
    rd = sum(r["read_mib"] for r in rows["on"]) / busy
    wr = sum(r["written_mib"] for r in rows["on"]) / busy
    print(f"- cleaner while busy: read {rd:.1f} MiB/s ({rd / phys['read_mib_s']:.2f}× O_DIRECT "
          f"read), wrote {wr:.1f} MiB/s ({wr / phys['write_mib_s']:.2f}× O_DIRECT write); busy "
          f"{busy / sum(r['measured_s'] for r in rows['on']):.0%} of the measured time "
          "(it started at the broker's start, before the warm-up)")
