#!/usr/bin/env bash
# Runs fuzz targets one after another for SECS seconds each (default 1200: issue 24's
# 20-minute campaigns) and prints, per target, libFuzzer's run count, rate and corpus size.
# New inputs go to a scratch directory (target/fuzz-campaign/<target>), never into the
# committed corpus; a crash stops that target and its input lands in <crate>/fuzz/artifacts/.
#   scripts/fuzz-campaign.sh [SECS] [crate:target ...]   (needs nightly and cargo-fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-1200}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(wire:record_batch wire:native_frame wire:kafka_request raft:rpc_frame
           storage:frame_scan storage:segment_recovery
           broker:checkpoint broker:meta_commands broker:admin_http)
fi
out=target/fuzz-campaign
mkdir -p "$out"
for t in "${targets[@]}"; do
  crate=${t%%:*}
  name=${t#*:}
  scratch="$PWD/$out/$name"
  mkdir -p "$scratch"
  log="$PWD/$out/$name.log"
  echo "== $crate/$name for ${secs}s (log $log)"
  status=0
  (cd "$crate/fuzz" && cargo +nightly fuzz run "$name" "$scratch" "corpus/$name" -- \
      -max_total_time="$secs" -print_final_stats=1) >"$log" 2>&1 || status=$?
  runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || true)
  rate=$(grep -Eo 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || true)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 || true)
  echo "$crate/$name: exit $status, ${runs:-?} runs, ${rate:-?} exec/s, $cov, $(ls "$scratch" | wc -l) new inputs"
done
