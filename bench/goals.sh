#!/usr/bin/env bash
# `make bench-goals`: every goal of issue 25 ("the data path at the physics") measured in
# one sitting on this machine, each peer in the same run, one load at a time:
#   1. the physics (O_DIRECT write/read bandwidth, write+fdatasync p99, loopback RTT);
#   2. the storage engine, 1 and 16 partitions, 1 KiB batches (`strand-bench disk`, on
#      one core): bandwidth over raw O_DIRECT write, 16-partition flush p99 over one
#      write+fdatasync p99;
#   3. produce and consume of 1 KiB messages, 6 partitions, acks=all, librdkafka's
#      rdkafka_performance against Strand, Tansu (memory), Apache Kafka as it ships and
#      with flush.messages=1 (bench/kafka/run.sh, SIZES=1024);
#   4. consume from disk with a cold cache: a topic of 6 partitions written, the broker
#      restarted (one shard on CPU 1, the consumer on CPU 0), then read from its start with
#      1 MiB per partition per fetch (`strand-bench consume`), over raw O_DIRECT read (of
#      step 1, and measured right before and after the consume);
#   5. open loop at 50% of each broker's own saturation, 16 partitions, acks=1 and all
#      (bench/suite.sh: Strand, Tansu, Kafka, Kafka with an fsync per batch), and each
#      peer again at the rate Strand carried at its 50% (`--peers-at-subject-rate`);
#   6. the native client's p99 against the Kafka gateway's at the same open-loop load
#      (NATIVE_RATE records/s, 16 partitions, acks=all), alternated NATIVE_PAIRS times;
#   7. three nodes, RF 3, acks=all against the replicated-write floor of the same run
#      (bench/cluster.sh, without the idle-partition part).
# Every tool's output is kept in OUT_DIR; summary.txt gathers the lines the goals read.
# Takes about 25 minutes. Run nothing else meanwhile (a build spoils the figures).
#
# Knobs: OUT_DIR (target/bench-goals/<time>), BENCH_DATA_DIR (data/bench-goals; O_DIRECT,
# not tmpfs), ENGINE_SECS (4), COLD_WRITE_S (15: seconds of produce for the cold read),
# NATIVE_RATE (50000), NATIVE_PAIRS (3), STEPS (default "1 2 3 4 5 6 7").
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT_DIR="${OUT_DIR:-$ROOT/target/bench-goals/$(date +%Y%m%d-%H%M%S)}"
BENCH_DATA_DIR="${BENCH_DATA_DIR:-$ROOT/data/bench-goals}"
ENGINE_SECS="${ENGINE_SECS:-4}"
COLD_WRITE_S="${COLD_WRITE_S:-15}"
NATIVE_RATE="${NATIVE_RATE:-50000}"
NATIVE_PAIRS="${NATIVE_PAIRS:-3}"
STEPS="${STEPS:-1 2 3 4 5 6 7}"
STRAND="$ROOT/target/release/strand"
BENCH="$ROOT/target/release/strand-bench"
for v in $(compgen -e | grep '^STRAND_' || true); do export -n "$v"; done

say() { echo "bench-goals: $*" >&2; }
die() { say "error: $*"; exit 1; }
step() { [[ " $STEPS " == *" $1 "* ]]; }
# summary TITLE FILE PATTERN: the lines of FILE that PATTERN selects, under TITLE.
summary() {
  { echo "## $1"; grep -E "$3" "$2" || echo "(no line matched: see $2)"; echo; } \
    >> "$OUT_DIR/summary.txt"
}

[[ -x "$STRAND" && -x "$BENCH" ]] ||
  die "no release build: cargo build --release -p strand-broker -p strand-bench -p strandctl"
mkdir -p "$OUT_DIR"
rm -rf "$BENCH_DATA_DIR"
mkdir -p "$BENCH_DATA_DIR"
: > "$OUT_DIR/summary.txt"
git rev-parse HEAD > "$OUT_DIR/commit.txt" 2>/dev/null || true
sync

BROKER=""
stop_broker() {
  [[ -n "$BROKER" ]] || return 0
  kill -TERM "$BROKER" 2>/dev/null || true
  wait "$BROKER" 2>/dev/null || true
  BROKER=""
}
trap 'stop_broker; rm -rf "$BENCH_DATA_DIR"' EXIT
trap 'exit 130' INT TERM

# start_broker LOG ARGS...: a release Strand on the ports below, ready to serve.
KAFKA_PORT=19392
ADMIN_PORT=19399
NATIVE_PORT=19393
start_broker() {
  local log="$1"
  shift
  NO_COLOR=1 "$@" --kafka-addr "127.0.0.1:$KAFKA_PORT" --admin-addr "127.0.0.1:$ADMIN_PORT" \
    --native-addr "127.0.0.1:$NATIVE_PORT" < /dev/null >> "$log" 2>&1 &
  BROKER=$!
  for _ in $(seq 1 300); do
    curl -fs "http://127.0.0.1:$ADMIN_PORT/v1/health/ready" > /dev/null 2>&1 && return 0
    kill -0 "$BROKER" 2>/dev/null || die "strand exited during start-up (log $log)"
    sleep 0.1
  done
  die "strand not ready after 30 s (log $log)"
}

if step 1; then
  say "1. physics"
  "$BENCH" physics --dir "$BENCH_DATA_DIR/physics" --out "$OUT_DIR/physics.json" \
    > "$OUT_DIR/physics.txt"
  summary "physics" "$OUT_DIR/physics.txt" "MiB/s|4 KiB|one fdatasync|O_DSYNC each|round trip|RTT"
fi

if step 2; then
  say "2. storage engine (1 core)"
  taskset -c 1 "$BENCH" disk --dir "$BENCH_DATA_DIR/disk" --partitions 1,16 \
    --batch-bytes 1024 --engine-secs "$ENGINE_SECS" > "$OUT_DIR/engine.txt" 2>&1
  summary "storage engine, 1 KiB batches" "$OUT_DIR/engine.txt" \
    "raw O_DIRECT|raw write\+fdatasync +4 KiB|one fdatasync|parts|KiB +(thruput|latency)"
fi

if step 3; then
  say "3. produce and consume, 1 KiB, 6 partitions: Strand, Tansu, Kafka, Kafka fsync"
  SIZES=1024 BENCH_DATA_DIR="$BENCH_DATA_DIR/kafka" bench/kafka/run.sh \
    > "$OUT_DIR/kafka.txt" 2>&1 || say "bench/kafka/run.sh failed (see $OUT_DIR/kafka.txt)"
  summary "rdkafka_performance, 1 KiB, 6 partitions" "$OUT_DIR/kafka.txt" \
    "^case|^(produce|consume) 1024|raw O_DIRECT|RESULT"
fi

# cold_raw WHEN: the raw O_DIRECT read bandwidth (1 GiB, on CPU 1 like the broker) just
# before or after the cold consume: the raw figure the consume ran beside.
cold_raw() {
  { echo "# $1"
    taskset -c 1 "$BENCH" disk --dir "$BENCH_DATA_DIR/raw" --bandwidth-only \
      --total-bytes 1073741824 2>&1 | grep "raw O_DIRECT"
  } >> "$OUT_DIR/cold-raw.txt"
}

if step 4; then
  say "4. consume from disk, cache cold"
  log="$OUT_DIR/cold-strand.log"
  start_broker "$log" taskset -c 1 "$STRAND" --smp 1 --data-dir "$BENCH_DATA_DIR/cold"
  taskset -c 0 "$BENCH" produce --bootstrap "127.0.0.1:$KAFKA_PORT" --topic cold \
    --partitions 6 --acks 1 --rate max --duration-s "$COLD_WRITE_S" --warmup-s 0 \
    --no-physics > "$OUT_DIR/cold-produce.txt" 2>&1
  stop_broker
  sync
  cold_raw before
  start_broker "$log" taskset -c 1 "$STRAND" --smp 1 --data-dir "$BENCH_DATA_DIR/cold"
  taskset -c 0 "$BENCH" consume --bootstrap "127.0.0.1:$KAFKA_PORT" --topic cold \
    --duration-s 3 --warmup-s 0 --no-physics > "$OUT_DIR/cold-consume.txt" 2>&1
  stop_broker
  cold_raw after
  rm -rf "$BENCH_DATA_DIR/cold"
  summary "cold consume (produce, restart, consume 3 s)" "$OUT_DIR/cold-consume.txt" \
    "MiB/s|rec/s|fetch"
  summary "raw O_DIRECT read right before and after the cold consume (CPU 1)" \
    "$OUT_DIR/cold-raw.txt" "^# (before|after)|raw O_DIRECT"
fi

if step 5; then
  say "5. open loop at 50% of saturation, 16 partitions"
  OUT_DIR="$OUT_DIR/suite" BENCH_DATA_DIR="$BENCH_DATA_DIR/suite" bench/suite.sh \
    --partition-counts 16 --levels 0.5 --peers-at-subject-rate > "$OUT_DIR/suite.txt" 2>&1 ||
    say "bench/suite.sh failed (see $OUT_DIR/suite.txt)"
  summary "open loop (suite report)" "$OUT_DIR/suite/report.md" "\|"
fi

if step 6; then
  say "6. native client against the Kafka gateway, $NATIVE_RATE rec/s, 16 partitions, acks=all"
  log="$OUT_DIR/native-strand.log"
  for pair in $(seq 1 "$NATIVE_PAIRS"); do
    for proto in native kafka; do
      rm -rf "$BENCH_DATA_DIR/native"
      start_broker "$log" "$STRAND" --data-dir "$BENCH_DATA_DIR/native"
      port=$KAFKA_PORT
      [[ "$proto" == native ]] && port=$NATIVE_PORT
      "$BENCH" produce --protocol "$proto" --bootstrap "127.0.0.1:$port" --topic n \
        --partitions 16 --acks all --rate "$NATIVE_RATE" --duration-s 10 --warmup-s 2 \
        --no-physics > "$OUT_DIR/native-$pair-$proto.txt" 2>&1
      stop_broker
      summary "pair $pair: $proto" "$OUT_DIR/native-$pair-$proto.txt" "^ *produce "
    done
  done
  rm -rf "$BENCH_DATA_DIR/native"
fi

if step 7; then
  say "7. three nodes, RF 3, acks=all, against the replicated-write floor"
  OUT_DIR="$OUT_DIR/cluster" BENCH_DATA_DIR="$BENCH_DATA_DIR/cluster" bench/cluster.sh > "$OUT_DIR/cluster.txt" 2>&1 ||
    say "bench/cluster.sh failed (see $OUT_DIR/cluster.txt)"
  summary "three nodes" "$OUT_DIR/cluster.txt" "floor|produce|CPU|^\\| [0-9]"
fi

say "done: $OUT_DIR/summary.txt"
cat "$OUT_DIR/summary.txt"
