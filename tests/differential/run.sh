#!/usr/bin/env bash
# Differential test (issue 26): starts Apache Kafka (tests/reference/start_kafka.sh) and
# Strand on free loopback ports with fresh data dirs under target/differential/run-PID/,
# waits until both answer ApiVersions, runs strand-diff against them, stops both.
# Usage: tests/differential/run.sh [strand-diff args, e.g. --quick, --only fetch, --raw]
# Env: STRAND_BIN (broker; default target/debug/strand, built if missing),
#      STRAND_DIFF_BIN (the tool; default: cargo build -p strand-differential, into
#      $CARGO_TARGET_DIR if set), KAFKA_LIBS/JAVA (see start_kafka.sh),
#      KEEP_DIFF_RUN=1 (keep the run's data dirs and logs even when it passes).
# Both brokers get the same settings where a test depends on them: one partition per
# auto-created topic, auto-creation on, no initial rebalance delay (start_kafka.sh sets
# group.initial.rebalance.delay.ms=0; Strand's default is Kafka's 3 s).
# Exit code: strand-diff's (0 same or accepted, 1 differences, 2 could not run).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
say() { echo "tests/differential/run.sh: $*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

target=${CARGO_TARGET_DIR:-$root/target}
if [[ -z "${STRAND_DIFF_BIN:-}" ]]; then
  say "building strand-diff"
  cargo build --quiet -p strand-differential -j 1
  STRAND_DIFF_BIN=$target/debug/strand-diff
fi
strand_bin=${STRAND_BIN:-$root/target/debug/strand}
if [[ ! -x "$strand_bin" ]]; then
  say "building strand (cargo build -p strand-broker)"
  cargo build --quiet -p strand-broker -j 1
  strand_bin=$target/debug/strand
fi

run_dir=$root/target/differential/run-$$
rm -rf "$run_dir"
mkdir -p "$run_dir"
kafka_port=$(free_port)
kafka_cport=$(free_port)
strand_port=$(free_port)

kafka_pid=
strand_pid=
stop() {
  # Only the two processes this script started, by pid.
  for pid in $strand_pid $kafka_pid; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in $strand_pid $kafka_pid; do
    for _ in $(seq 300); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
}
trap stop EXIT

"$root/tests/reference/start_kafka.sh" "$run_dir/kafka" "$kafka_port" "$kafka_cport" \
  >"$run_dir/kafka.out" 2>&1 &
kafka_pid=$!
"$strand_bin" --data-dir "$run_dir/strand" --kafka-addr "127.0.0.1:$strand_port" --smp 2 \
  --num-partitions 1 --auto-create-topics true --group-initial-rebalance-delay-ms 0 \
  --admin-addr "127.0.0.1:$(free_port)" --native-addr "127.0.0.1:$(free_port)" \
  --native-shard-base-port 0 >"$run_dir/strand.log" 2>&1 &
strand_pid=$!
say "kafka 127.0.0.1:$kafka_port (pid $kafka_pid), strand 127.0.0.1:$strand_port (pid $strand_pid), logs in $run_dir"

set +e
"$STRAND_DIFF_BIN" --strand "127.0.0.1:$strand_port" --kafka "127.0.0.1:$kafka_port" \
  --wait-ready-s 120 "$@"
status=$?
set -e
if ((status == 0)) && [[ -z "${KEEP_DIFF_RUN:-}" ]]; then
  stop
  trap - EXIT
  rm -rf "$run_dir"
else
  say "exit $status; broker logs kept in $run_dir"
fi
exit $status
