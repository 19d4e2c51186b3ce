#!/usr/bin/env bash
# librdkafka's own integration tests against a fresh single-node Strand: builds test-runner
# (build.sh, cached under target/librdkafka-compat) and runs the entries of runs.tsv in the
# set COMPAT_SET (quick: the `make test` subset; full: `make compat`) with compat.py.
# Extra arguments go to compat.py (e.g. --only 0001-quick,0012-quick).
#
# Env: STRAND_BIN (the broker; default target/debug/strand), COMPAT_SET (default quick).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here="$root/tests/librdkafka"
export STRAND_BIN="${STRAND_BIN:-$root/target/debug/strand}"
[[ -x "$STRAND_BIN" ]] || { echo "librdkafka/run.sh: no broker at $STRAND_BIN (cargo build -p strand-broker)" >&2; exit 1; }
tests_dir=$("$here/build.sh")
python=$("$root/scripts/venv.sh")
exec "$python" "$here/compat.py" --runner "$tests_dir/test-runner" --set "${COMPAT_SET:-quick}" "$@"
