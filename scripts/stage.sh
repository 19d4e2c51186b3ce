#!/usr/bin/env bash
# Times one stage of `make test` and keeps the time for the summary.
#
#   scripts/stage.sh <name> <command...>   runs the command, prints and records how long it
#                                          took (also when it fails), exits with its status
#   scripts/stage.sh --start               forgets the times of an earlier run
#   scripts/stage.sh --report              prints every recorded stage and the total
#
# The times go to target/make-test-stages.tsv (name, seconds, exit status).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
file="$root/target/make-test-stages.tsv"

case "${1:-}" in
  --start)
    mkdir -p "$root/target"
    : > "$file"
    exit 0
    ;;
  --report)
    awk -F'\t' '
      { printf "make test: %-12s %7.1f s%s\n", $1, $2, ($3 == 0 ? "" : "  (failed)"); total += $2 }
      END { printf "make test: %-12s %7.1f s (%.1f min)\n", "total", total, total / 60 }
    ' "$file"
    exit 0
    ;;
esac

name=$1
shift
start=$(date +%s.%N)
"$@"
status=$?
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
mkdir -p "$root/target"
printf '%s\t%s\t%d\n' "$name" "$secs" "$status" >> "$file"
printf 'make test: stage %s took %s s (exit %d)\n' "$name" "$secs" "$status" >&2
exit "$status"
