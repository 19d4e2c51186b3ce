#!/usr/bin/env bash
# Puts the Apache Kafka Java client (kafka-clients 3.9.1) and its runtime dependencies in
# target/kafka-tests/java-lib/. Maven Central is not reachable here; the jars come from the
# PyPI wheel shigawire-apache-flink-libraries, which ships them under pyflink/lib/.
# Idempotent: does nothing when the jars for this wheel version are already there.
set -euo pipefail

WHEEL_NAME=shigawire-apache-flink-libraries
WHEEL_VERSION=2.0.0.post1
JARS=(kafka-clients slf4j-api lz4-java snappy-java zstd-jni)

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest="$repo_root/target/kafka-tests/java-lib"
stamp="$dest/.stamp-$WHEEL_NAME-$WHEEL_VERSION"

if [[ -f "$stamp" ]]; then
  exit 0
fi

python=${PYTHON:-}
if [[ -z "$python" ]]; then
  if [[ -x "$repo_root/.venv/bin/python" ]]; then python="$repo_root/.venv/bin/python"; else python=python3; fi
fi
python=$(command -v "$python")  # absolute: the script changes directory below

mkdir -p "$repo_root/target"
dl=$(mktemp -d "$repo_root/target/kafka-java-dl.XXXXXX")
trap 'rm -rf "$dl"' EXIT
"$python" -m pip download --quiet --no-deps --disable-pip-version-check \
  "$WHEEL_NAME==$WHEEL_VERSION" -d "$dl"
wheel=$(ls "$dl"/*.whl)

rm -rf "$dest"
mkdir -p "$dest"
members=()
for j in "${JARS[@]}"; do members+=("pyflink/lib/$j.jar"); done
# A wheel is a zip; Python's zipfile avoids needing `unzip` on the machine.
"$python" - "$wheel" "$dest" "${members[@]}" <<'PY'
import sys, zipfile, os
wheel, dest, *members = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    names = set(z.namelist())
    for m in members:
        if m not in names:
            sys.exit(f"{m} is not in {os.path.basename(wheel)}")
        with z.open(m) as src, open(os.path.join(dest, os.path.basename(m)), "wb") as out:
            out.write(src.read())
PY
version=$(cd "$dest" && "$python" -c "import zipfile; print(zipfile.ZipFile('kafka-clients.jar').read('kafka/kafka-version.properties').decode())" | sed -n 's/^version=//p')
echo "kafka-clients $version in $dest"
touch "$stamp"
