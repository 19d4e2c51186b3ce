#!/usr/bin/env bash
# Prints the path of librdkafka's C source as the crates.io crate `rdkafka-sys` vendors it,
# fetched with the ordinary cargo client into cargo's registry cache (nothing else is
# reachable here: crates.io's web API is not, its registry is). The source there must stay
# pristine: callers build from a copy.
#
# Env: RDKAFKA_SYS_VERSION (default 4.10.0, which vendors librdkafka 2.12.1),
#      RDKAFKA_FETCH_DIR (the throwaway cargo project; default target/rdkafka-sys-fetch).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RDKAFKA_SYS_VERSION="${RDKAFKA_SYS_VERSION:-4.10.0}"
FETCH="${RDKAFKA_FETCH_DIR:-$ROOT/target/rdkafka-sys-fetch}"

# A throwaway cargo project whose only dependency is rdkafka-sys; `cargo fetch` unpacks the
# .crate (checked against the index's SHA-256) into the registry cache.
mkdir -p "$FETCH/src"
cat > "$FETCH/Cargo.toml" <<TOML
[package]
name = "rdkafka-sys-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
rdkafka-sys = { version = "=$RDKAFKA_SYS_VERSION", default-features = false }

# Not a member of the strand workspace above it.
[workspace]
TOML
: > "$FETCH/src/lib.rs"
(cd "$FETCH" && cargo fetch -q)

# Where cargo unpacked it, from cargo's own metadata (no guessing of CARGO_HOME).
MANIFEST="$(cd "$FETCH" && cargo metadata --format-version 1 --offline |
  python3 -c 'import json,sys
m=json.load(sys.stdin)
print(next(p["manifest_path"] for p in m["packages"] if p["name"]=="rdkafka-sys"))')"
SRC="$(dirname "$MANIFEST")/librdkafka"
[[ -x "$SRC/configure" ]] || { echo "rdkafka_src: no librdkafka source at $SRC" >&2; exit 1; }
echo "$SRC"
