#!/usr/bin/env bash
# Runs Apache Kafka itself (the reference broker the tests compare Strand with) in the
# foreground: one KRaft node that is both broker and controller, plaintext on 127.0.0.1.
# Usage: start_kafka.sh DATA_DIR PORT [CONTROLLER_PORT]
# - DATA_DIR: created if missing; gets server.properties, log4j2.properties, server.log (the
#   broker's log at INFO; the console shows WARN and above on stderr) and logs/ (log.dirs,
#   also the KRaft metadata log). Formatted with a random cluster id the first time; a data
#   dir already formatted is started with its data (other ports are fine: the quorum is the
#   static controller.quorum.voters, so `--standalone` is not needed).
# - PORT: the PLAINTEXT listener, 127.0.0.1:PORT, advertised as such.
# - CONTROLLER_PORT: the CONTROLLER listener, 127.0.0.1:CONTROLLER_PORT; default: a free port
#   chosen by python3 if there is one, else PORT+1.
# Env: KAFKA_LIBS, a directory of the broker's jars (default: what fetch_kafka.sh fetches,
#   fetched now if missing); JAVA (default $JAVA_HOME/bin/java, else java; Kafka 4 needs
#   Java 17 or later); KAFKA_HEAP_OPTS (default -Xmx512m -Xms512m); KAFKA_JVM_OPTS, more JVM
#   options, after the defaults so that they win (the JIT is held at C1 by
#   -XX:TieredStopAtLevel=1, which halves start-up on a busy 2-core machine; add
#   -XX:TieredStopAtLevel=4 for full speed in throughput runs); KAFKA_CLUSTER_ID, to format
#   with that id instead of a random one; KAFKA_EXTRA_PROPERTIES, lines appended to
#   server.properties (a key given twice takes the later value).
# The script execs java, so its pid is the broker's: SIGTERM stops the broker cleanly.
# Main classes: kafka.tools.StorageTool (kafka-storage format), kafka.Kafka (the broker).
set -euo pipefail

if (($# < 2 || $# > 3)); then
  echo "usage: $0 DATA_DIR PORT [CONTROLLER_PORT]" >&2
  exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$1"
data=$(cd "$1" && pwd)
port=$2
cport=${3:-}
if [[ -z "$cport" ]]; then
  if command -v python3 >/dev/null; then
    cport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  else
    cport=$((port + 1))
  fi
fi

libs=${KAFKA_LIBS:-}
if [[ -z "$libs" ]]; then libs=$("$here/fetch_kafka.sh"); fi
if [[ -n "${JAVA:-}" ]]; then java=$JAVA
elif [[ -n "${JAVA_HOME:-}" ]]; then java=$JAVA_HOME/bin/java
else java=java; fi
java_major=$("$java" -version 2>&1 | sed -n 's/.* version "\(1\.\)\{0,1\}\([0-9]*\).*/\2/p' | head -1)
if [[ -z "$java_major" || "$java_major" -lt 17 ]]; then
  echo "start_kafka: Kafka 4 needs Java 17 or later; $java is ${java_major:-unknown}" >&2
  exit 1
fi

props="$data/server.properties"
cat >"$props" <<EOF
# Written by tests/reference/start_kafka.sh.
node.id=1
process.roles=broker,controller
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$data/logs
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
${KAFKA_EXTRA_PROPERTIES:-}
EOF

cat >"$data/log4j2.properties" <<EOF
# Written by tests/reference/start_kafka.sh: WARN and above to stderr, INFO to server.log.
appender.console.type=Console
appender.console.name=STDERR
appender.console.target=SYSTEM_ERR
appender.console.layout.type=PatternLayout
appender.console.layout.pattern=[%d] %p %m (%c)%n
appender.console.filter.threshold.type=ThresholdFilter
appender.console.filter.threshold.level=WARN
appender.file.type=File
appender.file.name=FILE
appender.file.fileName=$data/server.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=INFO
rootLogger.appenderRef.console.ref=STDERR
rootLogger.appenderRef.file.ref=FILE
EOF

jvm=(
  ${KAFKA_HEAP_OPTS:--Xmx512m -Xms512m}
  -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
  -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true -XX:TieredStopAtLevel=1
  "-Dlog4j2.configurationFile=$data/log4j2.properties"
  ${KAFKA_JVM_OPTS:-}
  -cp "$libs/*"
)

# Formatted already: meta.properties in the log dir.
if [[ ! -f "$data/logs/meta.properties" ]]; then
  cluster_id=${KAFKA_CLUSTER_ID:-}
  while [[ -z "$cluster_id" || "$cluster_id" == -* ]]; do
    # A Kafka Uuid as text: 16 random bytes in URL-safe base64 without padding.
    cluster_id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)
  done
  "$java" "${jvm[@]}" -Xmx256m -Xms64m kafka.tools.StorageTool format \
    --config "$props" --cluster-id "$cluster_id" >"$data/format.log" 2>&1 ||
    { cat "$data/format.log" >&2; exit 1; }
fi

exec "$java" "${jvm[@]}" kafka.Kafka "$props"
