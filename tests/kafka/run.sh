#!/usr/bin/env bash
# Runs the Kafka client integration tests (tests/kafka) against the real strand binary.
#
# Installs what the tests need, skipping each step that is already done: the Python venv
# at .venv (tests/kafka/requirements.txt), kafkajs (tests/kafka/js, `npm ci`), the Java
# client jars (fetch_java_clients.sh). Builds strand unless STRAND_BIN is set.
# Extra arguments go to pytest, e.g. `tests/kafka/run.sh -k confluent -x`, or
# `tests/kafka/run.sh tests/kafka/test_quotas.py` (then only those files run).
# Exit code: pytest's.
#
# Env: STRAND_BIN (broker binary; default: build target/debug/strand),
#      STRAND_REQUIRE_CLIENTS=1 (a missing client fails instead of skipping),
#      STRAND_KEEP_DIRS=1 (a cluster test keeps its data dirs and logs even when it passes),
#      PYTHON (interpreter for a new venv; default python3).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
here=tests/kafka
say() { echo "tests/kafka/run.sh: $*" >&2; }

# Python venv (scripts/venv.sh).
scripts/venv.sh > /dev/null

# kafkajs.
if command -v npm >/dev/null && command -v node >/dev/null; then
  js="$here/js"
  lock_hash=$(sha256sum "$js/package-lock.json" | cut -d' ' -f1)
  if [[ "$(cat "$js/node_modules/.strand-lock.sha256" 2>/dev/null || true)" != "$lock_hash" ]]; then
    say "npm ci in $js"
    (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$lock_hash" > "$js/node_modules/.strand-lock.sha256"
  fi
else
  say "node/npm not found: the kafkajs test will skip (fail with STRAND_REQUIRE_CLIENTS=1)"
fi

# Java client jars.
if command -v javac >/dev/null; then
  PYTHON="$root/.venv/bin/python" "$here/fetch_java_clients.sh"
else
  say "javac not found: the Java client test will skip (fail with STRAND_REQUIRE_CLIENTS=1)"
fi

if ! command -v kcat >/dev/null; then
  say "kcat not found: the kcat tests will skip (fail with STRAND_REQUIRE_CLIENTS=1)"
fi

# The broker.
if [[ -z "${STRAND_BIN:-}" ]]; then
  say "building strand (cargo build -p strand-broker)"
  cargo build --quiet -p strand-broker -j 1
fi

# Test files or node ids among the arguments (tests/kafka/test_x.py[::test]) are what
# runs; without any, the whole directory.
targets=("$here")
for a in "$@"; do
  if [[ "$a" == *.py || "$a" == *.py::* ]]; then
    targets=()
    break
  fi
done

set +e
.venv/bin/python -m pytest -q "${targets[@]}" "$@"
exit $?
