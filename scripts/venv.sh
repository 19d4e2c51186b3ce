#!/usr/bin/env bash
# Makes sure the Python venv at .venv has tests/kafka/requirements.txt installed (skipped
# when the installed set's stamp matches the file). Prints the venv's python.
# Env: PYTHON (interpreter for a new venv; default python3).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
req=tests/kafka/requirements.txt
if [[ ! -x .venv/bin/python ]]; then
  echo "scripts/venv.sh: creating .venv" >&2
  "${PYTHON:-python3}" -m venv .venv
fi
stamp=.venv/.strand-kafka-requirements.sha256
hash=$(sha256sum "$req" | cut -d' ' -f1)
if [[ "$(cat "$stamp" 2>/dev/null || true)" != "$hash" ]]; then
  echo "scripts/venv.sh: installing $req" >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$req" >&2
  echo "$hash" > "$stamp"
fi
echo "$root/.venv/bin/python"
