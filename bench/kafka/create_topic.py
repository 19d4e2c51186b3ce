"""Creates a topic through the Kafka CreateTopics API and waits (with a deadline)
until Metadata shows every partition with a leader. Usage:
    create_topic.py BOOTSTRAP TOPIC PARTITIONS
Needs confluent-kafka (the Python client on librdkafka)."""

import sys
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

DEADLINE_S = 30.0


def main() -> int:
    bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        operation_timeout=10, request_timeout=15)
    try:
        futures[topic].result(timeout=DEADLINE_S)
    except KafkaException as e:
        print(f"create_topic: CreateTopics {topic} on {bootstrap} failed: {e}", file=sys.stderr)
        return 1
    deadline = time.monotonic() + DEADLINE_S
    while True:
        md = admin.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            print(f"create_topic: {topic} has {partitions} partitions with leaders")
            return 0
        if time.monotonic() >= deadline:
            print(f"create_topic: {topic} not ready within {DEADLINE_S}s: {t}", file=sys.stderr)
            return 1
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
