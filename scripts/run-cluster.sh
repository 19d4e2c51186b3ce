#!/usr/bin/env bash
# Builds release strand and starts a three-node cluster on this machine (`make run-cluster`).
#
#   node  kafka  admin  native  rpc (shard s: rpc + s)
#   n1    9092   9644   9093    33145
#   n2    9192   9744   9193    33155
#   n3    9292   9844   9293    33165
#
# Nodes are spread over the CPUs (taskset): node n runs on CPUs (n-1)*SMP .. n*SMP-1, modulo
# the CPU count. Every node is a controller voter (--seeds lists all three); new topics get replication
# factor 3. Data in $DATA_DIR/n1..n3 (default data/cluster, git-ignored). Each output line
# is prefixed with its node's name. Ctrl-C (or SIGTERM) stops all three cleanly. A node that
# exits on its own is reported and the others keep running, so kill -9 of one node shows a
# failover; the script ends when all three have exited.
#
# Env: CARGO (default cargo), DATA_DIR (default data/cluster), SMP (shards per node,
#      default 1, at most 10: the RPC ports of two nodes are 10 apart),
#      STRAND_BIN (use this binary instead of building target/release/strand),
#      TLS_DIR (certificates of tools/certs.sh: each node also serves SASL_SSL on its
#      kafka port + 2, advertised as localhost, and the nodes talk over mutual TLS).
# Extra arguments go to every node, e.g. `scripts/run-cluster.sh --log-level debug`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
say() { echo "run-cluster: $*" >&2; }

data_dir=${DATA_DIR:-data/cluster}
smp=${SMP:-1}
if ! [[ "$smp" =~ ^[0-9]+$ ]] || (( smp < 1 || smp > 10 )); then
  say "SMP=$smp: want 1..10 (each node has 10 RPC ports)"
  exit 2
fi

if [[ -z "${STRAND_BIN:-}" ]]; then
  "${CARGO:-cargo}" build --release -p strand-broker
  bin=target/release/strand
else
  bin=$STRAND_BIN
fi

ids=(1 2 3)
kafka_port() { echo $((9092 + ($1 - 1) * 100)); }
admin_port() { echo $((9644 + ($1 - 1) * 100)); }
native_port() { echo $((9093 + ($1 - 1) * 100)); }
rpc_port() { echo $((33145 + ($1 - 1) * 10)); }
seeds=$(for n in "${ids[@]}"; do printf '%s@127.0.0.1:%s,' "$n" "$(rpc_port "$n")"; done)
seeds=${seeds%,}

declare -A pids=()
stopping=0
signal_nodes() { for n in "${!pids[@]}"; do kill -"$1" "${pids[$n]}" 2>/dev/null || true; done; }
on_signal() {  # the first Ctrl-C stops the nodes cleanly, a second one kills them
  if (( stopping )); then signal_nodes KILL; else stopping=1; signal_nodes TERM; fi
}
on_exit() {  # an error in this script: stop what was started
  (( stopping )) || signal_nodes TERM
  wait
}
trap on_signal INT TERM
trap on_exit EXIT

# One node, in the background: setsid so that Ctrl-C reaches this script only (which sends
# each node one SIGTERM); the prefixing sed ignores SIGINT so the nodes' last lines still
# show. exec keeps the node's pid as $!.
# The Kafka listeners of node $1 (and, with TLS_DIR, the TLS settings).
listener_args() {
  local n=$1 kafka
  kafka=$(kafka_port "$n")
  if [[ -z "${TLS_DIR:-}" ]]; then
    echo "--kafka-addr 127.0.0.1:$kafka"
    return
  fi
  echo "--listeners PLAINTEXT://127.0.0.1:$kafka,SASL_SSL://127.0.0.1:$((kafka + 2))" \
    "--advertised-listeners PLAINTEXT://127.0.0.1:$kafka,SASL_SSL://localhost:$((kafka + 2))" \
    "--ssl-certificate-location $TLS_DIR/node.pem --ssl-key-location $TLS_DIR/node.key" \
    "--rpc-tls-certificate-location $TLS_DIR/node.pem --rpc-tls-key-location $TLS_DIR/node.key" \
    "--rpc-tls-ca-location $TLS_DIR/ca.pem"
}

run_node() {
  local n=$1
  shift
  # shellcheck disable=SC2046 # listener_args is words by design (paths without spaces)
  exec setsid "${pin[@]}" "$bin" \
    --node-id "$n" \
    --data-dir "$data_dir/n$n" \
    $(listener_args "$n") \
    --admin-addr "127.0.0.1:$(admin_port "$n")" \
    --native-addr "127.0.0.1:$(native_port "$n")" \
    --native-shard-base-port 0 \
    --rpc-addr "127.0.0.1:$(rpc_port "$n")" \
    --seeds "$seeds" \
    --default-replication-factor 3 \
    --smp "$smp" \
    --group-initial-rebalance-delay-ms 100 \
    "$@" \
    > >(trap '' INT; exec sed -u "s/^/[n$n] /") 2>&1
}

# Each node pins its shards to the first CPUs it may use: left alone, all three nodes would
# share the same first CPUs. Node n gets the next $smp CPUs, round robin over this machine's.
ncpu=$(nproc)
cpus_of() {
  local n=$1 k list=""
  for ((k = 0; k < smp; k++)); do list+="$(( ((n - 1) * smp + k) % ncpu )),"; done
  echo "${list%,}"
}

for n in "${ids[@]}"; do
  mkdir -p "$data_dir/n$n"
  pin=()
  if command -v taskset >/dev/null; then pin=(taskset -c "$(cpus_of "$n")"); fi
  run_node "$n" "$@" &
  pids[$n]=$!
done
say "started$(for n in "${ids[@]}"; do printf ' n%s (pid %s)' "$n" "${pids[$n]}"; done); bootstrap" \
  "127.0.0.1:$(kafka_port 1),127.0.0.1:$(kafka_port 2),127.0.0.1:$(kafka_port 3); Ctrl-C stops all"
say "group.initial.rebalance.delay.ms is 100 here for development (Kafka and strand default: 3000)"

status=0
while (( ${#pids[@]} > 0 )); do
  done_pid=""
  rc=0
  wait -n -p done_pid "${pids[@]}" || rc=$?  # -p: bash 5.1
  [[ -n "${done_pid:-}" ]] || continue  # a signal ended the wait; its trap has run
  for n in "${!pids[@]}"; do
    if [[ "${pids[$n]}" == "$done_pid" ]]; then
      say "n$n exited with $rc"
      (( rc == 0 )) || status=$rc
      unset "pids[$n]"
    fi
  done
done
trap - EXIT
exit "$status"
