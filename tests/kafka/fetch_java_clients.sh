#!/usr/bin/env bash
# Puts the Apache Kafka Java clients and their runtime dependencies where the tests find
# them:
# - kafka-clients 3.9.1 in target/kafka-tests/java-lib/, from the PyPI wheel
#   shigawire-apache-flink-libraries, which ships them under pyflink/lib/;
# - kafka-clients 4.x in target/kafka-tests/java4-lib/, from Maven Central, each jar checked
#   against the SHA-256 pinned below (fetched directly: Maven's dependency plugin took
#   minutes to download itself).
# Idempotent: does nothing for a set whose stamp is already there.
set -euo pipefail

MAVEN_CENTRAL=${MAVEN_CENTRAL:-https://repo.maven.apache.org/maven2}
# kafka-clients 4.1.1 and its runtime dependencies (its pom): path under Maven Central, SHA-256.
JAVA4_JARS=(
  "org/apache/kafka/kafka-clients/4.1.1/kafka-clients-4.1.1.jar 00247122a572c3d3ae4eb60a50192a5811bc0181f51923d13018600f892e821d"
  "org/lz4/lz4-java/1.8.0/lz4-java-1.8.0.jar d74a3334fb35195009b338a951f918203d6bbca3d1d359033dc33edd1cadc9ef"
  "org/slf4j/slf4j-api/1.7.36/slf4j-api-1.7.36.jar d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0"
  "org/xerial/snappy/snappy-java/1.1.10.7/snappy-java-1.1.10.7.jar 4c766cb3f855415ee734b2392949a0b6f12a60879334a74518deaf6270d32e36"
  "com/github/luben/zstd-jni/1.5.6-10/zstd-jni-1.5.6-10.jar b6c3237e24b8252a5a9c3a0e1ae30ef8f323412e74bd358548b7a9e527d676df"
)

WHEEL_NAME=shigawire-apache-flink-libraries
WHEEL_VERSION=2.0.0.post1
JARS=(kafka-clients slf4j-api lz4-java snappy-java zstd-jni)

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# The 4.x client from Maven Central.
dest4="$repo_root/target/kafka-tests/java4-lib"
stamp4="$dest4/.stamp-$(printf '%s\n' "${JAVA4_JARS[@]}" | sha256sum | cut -c1-16)"
if [[ ! -f "$stamp4" ]]; then
  rm -rf "$dest4"
  mkdir -p "$dest4"
  for entry in "${JAVA4_JARS[@]}"; do
    read -r path sum <<<"$entry"
    jar="$dest4/$(basename "$path")"
    curl -sSfL --retry 3 -o "$jar" "$MAVEN_CENTRAL/$path"
    echo "$sum  $jar" | sha256sum --check --quiet || { rm -f "$jar"; exit 1; }
  done
  echo "kafka-clients 4.x in $dest4"
  touch "$stamp4"
fi

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
