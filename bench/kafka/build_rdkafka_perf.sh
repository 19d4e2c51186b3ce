#!/usr/bin/env bash
# Builds librdkafka's `rdkafka_performance` load tool from the C source that the
# crates.io crate `rdkafka-sys` vendors, fetched with the ordinary cargo client.
# The binary is cached at target/bench-kafka/bin/rdkafka_performance; a second run
# only prints its path. Needs gcc, make and bash only: every optional dependency
# (OpenSSL, SASL/GSSAPI, libcurl, zlib, zstd) is disabled and LZ4 is librdkafka's own.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="$ROOT/target/bench-kafka"
BIN="$OUT/bin/rdkafka_performance"
# rdkafka-sys 4.10.0 vendors librdkafka 2.12.1.
RDKAFKA_SYS_VERSION="${RDKAFKA_SYS_VERSION:-4.10.0}"
JOBS="${JOBS:-1}"

if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

for tool in gcc make; do
  command -v "$tool" >/dev/null || { echo "build_rdkafka_perf: '$tool' is missing (apt-get install build-essential)" >&2; exit 1; }
done

# 1. librdkafka's source as rdkafka-sys vendors it (scripts/rdkafka_src.sh).
SRC="$(RDKAFKA_SYS_VERSION="$RDKAFKA_SYS_VERSION" RDKAFKA_FETCH_DIR="$OUT/rdkafka-sys-fetch" \
  "$ROOT/scripts/rdkafka_src.sh")"
MANIFEST="$(dirname "$SRC")/Cargo.toml"

# 2. Build out of a private copy: the registry cache stays pristine.
VER="$(basename "$(dirname "$MANIFEST")")"
WORK="$OUT/build/$VER"
rm -rf "$WORK"
mkdir -p "$WORK"
cp -a "$SRC/." "$WORK/"
cd "$WORK"
echo "build_rdkafka_perf: configuring $VER" >&2
./configure --disable-ssl --disable-gssapi --disable-curl --disable-zlib \
  --disable-zstd --disable-lz4-ext --disable-regex-ext --disable-syslog \
  > "$OUT/build/configure.log" 2>&1 ||
  { tail -40 "$OUT/build/configure.log" >&2; exit 1; }
echo "build_rdkafka_perf: building librdkafka.a and rdkafka_performance (make -j$JOBS)" >&2
{
  make -j"$JOBS" -C src librdkafka.a &&
  make -j"$JOBS" -C examples rdkafka_performance
} > "$OUT/build/make.log" 2>&1 || { tail -40 "$OUT/build/make.log" >&2; exit 1; }

mkdir -p "$OUT/bin"
cp examples/rdkafka_performance "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
echo "$BIN"
