#!/usr/bin/env bash
# Builds librdkafka's own integration-test runner (`tests/test-runner`, unoptimised: it
# builds in about half the time, and the tests wait on the broker) from the source the
# crates.io crate rdkafka-sys vendors (scripts/rdkafka_src.sh), with gzip and zstd (so the
# compression tests go through Strand) and RapidJSON (the statistics schema test), without
# TLS, Kerberos or libcurl (Strand has no TLS yet). Prints the path of the tests folder.
#
# Cached: the build folder carries a stamp of the version and flags, and a second run only
# prints the path. Needs gcc, g++, make, libzstd-dev, zlib1g-dev, rapidjson-dev (`make deps`).
# Env: JOBS (make -j, default 2), RDKAFKA_SYS_VERSION (default 4.10.0 = librdkafka 2.12.1).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="$ROOT/target/librdkafka-compat"
RDKAFKA_SYS_VERSION="${RDKAFKA_SYS_VERSION:-4.10.0}"
JOBS="${JOBS:-2}"
FLAGS="--disable-optimization --enable-zlib --enable-zstd --disable-lz4-ext --disable-ssl --disable-gssapi --disable-curl --disable-syslog"
say() { echo "librdkafka/build.sh: $*" >&2; }

WORK="$OUT/build"
STAMP="rdkafka-sys $RDKAFKA_SYS_VERSION; configure $FLAGS"
if [[ -x "$WORK/tests/test-runner" && "$(cat "$WORK/.strand-stamp" 2>/dev/null)" == "$STAMP" ]]; then
  echo "$WORK/tests"
  exit 0
fi

for tool in gcc g++ make; do
  command -v "$tool" >/dev/null || { say "'$tool' is missing (make deps)"; exit 1; }
done
for header in zstd.h zlib.h rapidjson/document.h; do
  echo "#include <$header>" | g++ -E -x c++ - >/dev/null 2>&1 ||
    { say "<$header> is missing (make deps installs libzstd-dev, zlib1g-dev, rapidjson-dev)"; exit 1; }
done

SRC="$(RDKAFKA_SYS_VERSION="$RDKAFKA_SYS_VERSION" RDKAFKA_FETCH_DIR="$OUT/rdkafka-sys-fetch" \
  "$ROOT/scripts/rdkafka_src.sh")"

# Out of a private copy: the registry cache stays pristine.
rm -rf "$WORK"
mkdir -p "$WORK"
cp -a "$SRC/." "$WORK/"
cd "$WORK"
say "configuring $(basename "$(dirname "$SRC")")"
# shellcheck disable=SC2086
./configure $FLAGS > "$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log" >&2; exit 1; }
say "building librdkafka and test-runner (make -j$JOBS; several minutes)"
{
  make -j"$JOBS" -C src librdkafka.a &&
  make -j"$JOBS" -C src-cpp librdkafka++.a &&
  make -j"$JOBS" -C tests build
} > "$OUT/make.log" 2>&1 || { tail -40 "$OUT/make.log" >&2; exit 1; }
echo "$STAMP" > "$WORK/.strand-stamp"
echo "$WORK/tests"
