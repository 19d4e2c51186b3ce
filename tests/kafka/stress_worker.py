"""One load process of the cross-shard stress test (test_stress.py): a librdkafka producer
(linger.ms=0, acks as given) sending 100-byte records open-loop at a fixed rate to every
partition of a topic, replaced by a new producer (a new connection) every `churn_s`
seconds; or, with `--consume`, a consumer long-polling every partition from the start and
reconnecting at the same interval. Writes what it saw as JSON to `--out`: producers
{"acked": {partition: [count, max, sum, sum of squares]}, "failed": n}, consumers
{"read": n}. A producer keeps, per partition, the count, maximum, sum and sum of squares of its
acknowledged offsets rather than the offsets (an hour at 10,000/s is 36 million of them:
as Python lists they took 4 GiB and garbage-collection pauses long enough to time out
librdkafka's requests)."""

from __future__ import annotations

import argparse
import json
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

RECORD = b"s" * 100


def produce(a) -> dict:
    # partition -> [count, max offset, sum of offsets, sum of squares]
    acked: dict[int, list[int]] = {}
    failed = [0]

    def on_delivery(err, msg):
        if err is None:
            o = msg.offset()
            m = acked.setdefault(msg.partition(), [0, -1, 0, 0])
            m[0] += 1
            m[1] = max(m[1], o)
            m[2] += o
            m[3] += o * o
        else:
            failed[0] += 1

    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < a.secs:
        p = Producer({
            "bootstrap.servers": a.bootstrap,
            "acks": a.acks,
            "linger.ms": 0,
            "batch.size": 65536,
            "enable.idempotence": False,
            "message.timeout.ms": 30000,
            "queue.buffering.max.messages": 1_000_000,
        })
        leg_end = min(time.monotonic() + a.churn_s, start + a.secs)
        while time.monotonic() < leg_end:
            due = int((time.monotonic() - start) * a.rate)
            while sent < due:
                try:
                    part = a.only_partition if a.only_partition >= 0 else sent % a.partitions
                    p.produce(a.topic, RECORD, partition=part, on_delivery=on_delivery)
                    sent += 1
                except BufferError:
                    p.poll(0.001)
            p.poll(0.0005)
        left = p.flush(60)
        failed[0] += left
    return {"acked": {str(p): m for p, m in acked.items()}, "failed": failed[0], "sent": sent}


def consume(a) -> dict:
    read = 0
    start = time.monotonic()
    while time.monotonic() - start < a.secs:
        c = Consumer({
            "bootstrap.servers": a.bootstrap,
            "group.id": "strand-stress-unused",
            "enable.auto.commit": False,
            # Long polls: each fetch waits for 1 MiB or 500 ms on partitions being written.
            "fetch.wait.max.ms": 500,
            "fetch.min.bytes": 1 << 20,
        })
        c.assign([TopicPartition(a.topic, p, 0) for p in range(a.partitions)])
        leg_end = min(time.monotonic() + a.churn_s, start + a.secs)
        while time.monotonic() < leg_end:
            for m in c.consume(1000, 0.2):
                if m.error() is None:
                    read += 1
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(str(m.error()))
        c.close()
    return {"read": read}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--secs", type=float, required=True)
    ap.add_argument("--rate", type=int, default=2500)
    ap.add_argument("--acks", default="all")
    ap.add_argument("--churn-s", type=float, default=3.0)
    ap.add_argument("--only-partition", type=int, default=-1)
    ap.add_argument("--consume", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    result = consume(a) if a.consume else produce(a)
    with open(a.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
