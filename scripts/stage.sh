#!/usr/bin/env bash
# Times one stage of `make test` and keeps the time for the summary.
#
#   scripts/stage.sh <name> <command...>   runs the command, prints and records how long it
#                                          took (also when it fails), exits with its status
#   scripts/stage.sh --start               forgets the times of an earlier run and refuses
#                                          to start without the disk space a run needs
#   scripts/stage.sh --report              prints every recorded stage and the total
#
# The times go to target/make-test-stages.tsv (name, seconds, exit status).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
file="$root/target/make-test-stages.tsv"

# What a run from a fresh clone leaves under the checkout (target/ about 5.5 GiB, the venv,
# the Java and Go clients) plus the brokers' data at their peak, with room to spare. A run
# that ran out of space failed in whichever test wrote next (ENOSPC in a fixture), which
# reads like a broker bug; refusing up front names the cause.
DISK_FREE_MIN_GIB=${STRAND_TEST_DISK_FREE_MIN_GIB:-8}

free_gib() {
  df -Pk "$root" | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }'
}

case "${1:-}" in
  --start)
    mkdir -p "$root/target"
    : > "$file"
    free=$(free_gib)
    echo "make test: $free GiB free on the disk of $root (needs about $DISK_FREE_MIN_GIB)"
    if awk -v f="$free" -v m="$DISK_FREE_MIN_GIB" 'BEGIN { exit !(f < m) }'; then
      echo "make test: not enough disk space: free some (old data directories, target/ of" \
        "other checkouts) or set STRAND_TEST_DISK_FREE_MIN_GIB if you know the run fits" >&2
      exit 1
    fi
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
if [ "$status" -ne 0 ]; then
  printf 'make test: %s GiB free on the disk now\n' "$(free_gib)" >&2
fi
exit "$status"
