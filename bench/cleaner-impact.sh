#!/usr/bin/env bash
# Produce tail latency with and without the log cleaner at work (issue 21), and the
# cleaner's throughput against the disk's O_DIRECT bandwidth.
#
# Each run starts from an empty data directory: a compacted topic `bulk` is filled at full
# speed with the cleaner off (--key-space KEYS keys, so most records are superseded), the
# broker restarts with the cleaner on or off, and a fixed-rate producer (`probe`, its own
# topic, acks=all) measures latency while the cleaner works through `bulk`. Runs alternate
# on/off. The broker gets CPU 0 (--smp 1) and the load generator CPU 1, so they do not
# compete for a core.
#
#   bench/cleaner-impact.sh                # 5 runs each, about 10 minutes
#   RUNS=1 FILL_S=2 DURATION_S=60 bench/cleaner-impact.sh
#
# The measured window should hold a whole pass, the rewriting of segments included: the
# report's "cleaner busy s" (time in finished passes) and "written MiB" are 0 when it did
# not. While the probe produces, the cleaner keeps to --log-cleaner-io-busy-max-bytes-per-
# second (32 MiB/s by default), so one second of filling (about 480 MiB here) takes about
# 30 s to clean.
#
# Knobs (environment): RUNS (5), FILL_S (1: seconds of filling), KEYS (200000),
# RATE (2000 records/s of the probe), RECORD_BYTES (1024), DURATION_S (40), WARMUP_S (2),
# CLEANER_ARGS (extra broker flags for the cleaner-on runs), OUT_DIR
# (target/cleaner-impact/<time>), BENCH_DATA_DIR (data/cleaner-impact; O_DIRECT capable),
# STRAND_BIN, STRAND_BENCH_BIN (default: the dev-profile builds, which are optimized).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUNS="${RUNS:-5}"
FILL_S="${FILL_S:-1}"
KEYS="${KEYS:-200000}"
RATE="${RATE:-2000}"
RECORD_BYTES="${RECORD_BYTES:-1024}"
DURATION_S="${DURATION_S:-40}"
WARMUP_S="${WARMUP_S:-2}"
read -r -a EXTRA <<< "${CLEANER_ARGS:-}"
OUT_DIR="${OUT_DIR:-$ROOT/target/cleaner-impact/$(date +%Y%m%d-%H%M%S)}"
DATA="${BENCH_DATA_DIR:-$ROOT/data/cleaner-impact}"
BROKER_BIN="${STRAND_BIN:-$ROOT/target/debug/strand}"
BENCH_BIN="${STRAND_BENCH_BIN:-$ROOT/target/debug/strand-bench}"
for v in $(compgen -e | grep '^STRAND_' || true); do export -n "$v"; done

say() { echo "cleaner-impact: $*" >&2; }
die() { say "error: $*"; exit 1; }
[[ -x "$BROKER_BIN" && -x "$BENCH_BIN" ]] || die "build first: cargo build --bins"
(( $(nproc) >= 2 )) || die "needs two CPUs (broker and load generator apart)"
mkdir -p "$OUT_DIR"

PID=""
stop_broker() {
  [[ -n "$PID" ]] || return 0
  kill -TERM "$PID" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  PID=""
}
trap 'stop_broker; rm -rf "$DATA"' EXIT
trap 'exit 130' INT TERM

# start_broker LOG BACKOFF_MS [FLAGS...]
start_broker() {
  local log="$1" backoff="$2"
  shift 2
  NO_COLOR=1 taskset -c 0 "$BROKER_BIN" --smp 1 --data-dir "$DATA/strand" \
    --log-cleaner-backoff-ms "$backoff" "$@" < /dev/null >> "$log" 2>&1 &
  PID=$!
  local deadline=$(( $(date +%s) + 60 ))
  until (exec 3<>/dev/tcp/127.0.0.1/9092) 2>/dev/null; do
    kill -0 "$PID" 2>/dev/null || die "the broker exited during start-up ($log)"
    (( $(date +%s) < deadline )) || die "the broker not ready after 60 s ($log)"
    sleep 0.1
  done
}

bench() { taskset -c 1 "$BENCH_BIN" "$@"; }

say "physics of $DATA"
rm -rf "$DATA"
mkdir -p "$DATA"
bench physics --dir "$DATA/physics" --out "$OUT_DIR/physics.json" > "$OUT_DIR/physics.txt"
cat "$OUT_DIR/physics.txt" >&2

OFF_MS=86400000
for i in $(seq "$RUNS"); do
  for mode in on off; do
    rm -rf "$DATA/strand"
    log="$OUT_DIR/$mode-$i.broker.log"
    start_broker "$log" "$OFF_MS"
    bench produce --topic bulk --keys random --key-space "$KEYS" \
      --topic-config cleanup.policy=compact --topic-config segment.bytes=33554432 \
      --topic-config min.cleanable.dirty.ratio=0.01 --record-bytes "$RECORD_BYTES" \
      --acks 1 --rate max --warmup-s 0 --duration-s "$FILL_S" --no-physics \
      > "$OUT_DIR/$mode-$i.fill.txt"
    stop_broker
    if [[ "$mode" == on ]]; then
      start_broker "$log" 500 "${EXTRA[@]}"
    else
      start_broker "$log" "$OFF_MS"
    fi
    curl -s http://127.0.0.1:9644/metrics > "$OUT_DIR/$mode-$i.metrics-before.txt"
    bench produce --topic probe --record-bytes "$RECORD_BYTES" --acks all \
      --rate "$RATE" --warmup-s "$WARMUP_S" --duration-s "$DURATION_S" \
      --physics "$OUT_DIR/physics.json" --label "cleaner-$mode-$i" \
      --out "$OUT_DIR/$mode-$i.json" > "$OUT_DIR/$mode-$i.txt"
    curl -s http://127.0.0.1:9644/metrics > "$OUT_DIR/$mode-$i.metrics.txt"
    stop_broker
    say "run $i cleaner $mode: $(grep -m1 -i 'p99' "$OUT_DIR/$mode-$i.txt" || true)"
  done
done

python3 "$ROOT/bench/cleaner_impact_report.py" "$OUT_DIR" "$RUNS" | tee "$OUT_DIR/report.md"
