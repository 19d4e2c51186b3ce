#!/usr/bin/env bash
# Puts the Apache Kafka broker (the reference the tests compare Strand with) where
# start_kafka.sh finds it: the jars listed in kafka-jars.tsv beside this script, from Maven
# Central, into target/reference/kafka-<version>/libs/, each checked against its pinned
# SHA-256. Needs only bash, curl and coreutils (no Maven): the list was resolved once with
# Maven and pinned.
# Env: MAVEN_CENTRAL, the repository to download from (default Maven Central itself).
# Output: the absolute path of the libs directory, alone on stdout (progress goes to stderr),
# so that `libs=$(tests/reference/fetch_kafka.sh)` works.
# Idempotent: a jar already there with the right SHA-256 is not downloaded again, and once
# the whole set is verified a stamp makes later runs return at once. Jars in libs/ that the
# list does not name are removed, so that libs/* is exactly the pinned classpath.
set -euo pipefail

MAVEN_CENTRAL=${MAVEN_CENTRAL:-https://repo.maven.apache.org/maven2}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
list="$here/kafka-jars.tsv"

# group artifact version sha256, without the comments.
entries=()
while IFS=$'\t' read -r group artifact version sum; do
  [[ -z "$group" || "$group" == \#* ]] && continue
  entries+=("$group $artifact $version $sum")
  if [[ "$group:$artifact" == org.apache.kafka:kafka_2.13 ]]; then kafka_version=$version; fi
done <"$list"
[[ -n "${kafka_version:-}" ]] || { echo "$list names no org.apache.kafka:kafka_2.13" >&2; exit 1; }

libs="$repo_root/target/reference/kafka-$kafka_version/libs"
stamp="$libs/.stamp-$(sha256sum "$list" | cut -c1-16)"
if [[ -f "$stamp" ]]; then
  echo "$libs"
  exit 0
fi

mkdir -p "$libs"
rm -f "$libs"/.stamp-*
declare -A wanted=()
sums=()      # "sha256  file" lines for sha256sum --check
config=()    # curl --config lines for the jars still to download
for entry in "${entries[@]}"; do
  read -r group artifact version sum <<<"$entry"
  jar="$artifact-$version.jar"
  wanted[$jar]=1
  sums+=("$sum  $jar")
  if [[ -f "$libs/$jar" ]] && echo "$sum  $libs/$jar" | sha256sum --check --quiet --status; then
    continue
  fi
  config+=("url = \"$MAVEN_CENTRAL/${group//.//}/$artifact/$version/$jar\"" "output = \"$libs/$jar.part\"")
done

for f in "$libs"/*; do
  [[ -e "$f" ]] || continue
  [[ -n "${wanted[$(basename "$f")]:-}" ]] || rm -rf "$f"
done

if ((${#config[@]} > 0)); then
  echo "fetch_kafka: downloading $((${#config[@]} / 2)) jars of Kafka $kafka_version from $MAVEN_CENTRAL" >&2
  # One curl for all, several transfers at once; each .part is renamed once its hash is right.
  printf '%s\n' "${config[@]}" |
    curl -sSfL --no-progress-meter --retry 3 --parallel --parallel-max 6 --config -
  for ((i = 1; i < ${#config[@]}; i += 2)); do
    part=${config[i]#output = \"}
    part=${part%\"}
    mv -f "$part" "${part%.part}"
  done
fi

if ! (cd "$libs" && printf '%s\n' "${sums[@]}" | sha256sum --check --quiet >&2); then
  echo "fetch_kafka: SHA-256 mismatch in $libs; the bad jars are removed, run again" >&2
  (cd "$libs" && printf '%s\n' "${sums[@]}" | sha256sum --check 2>/dev/null | sed -n 's/: FAILED.*//p' | xargs -r rm -f)
  exit 1
fi
touch "$stamp"
echo "$libs"
