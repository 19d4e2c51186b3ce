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
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

RECORD = b"s" * 100
# The load runs below the broker's priority. Eight load processes that are always runnable
# outweigh the broker's two shard threads with the kernel's fair scheduler (about a fifth of
# the machine left to the broker): its group commit then waited ~40-70 ms for CPU, the
# report producer's round trips grew to 10 s and past librdkafka's 30 s request timeout.
LOAD_NICE = 10


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
            # Every 10 s a line of librdkafka's own view of each broker connection (the
            # timeline that tells a slow broker from requests queued in the client).
            "statistics.interval.ms": 10_000,
            "stats_cb": _stats_line,
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


def _stats_line(stats_json: str) -> None:
    """Prints librdkafka's per-broker queue depths and round-trip times: requests waiting
    in its output queue (not yet on the socket), requests sent and awaiting a response,
    and the broker's response times (p50/p99/max, ms) over the last interval."""
    s = json.loads(stats_json)
    parts = [f"msgs={s.get('msg_cnt', 0)}"]
    for b in s.get("brokers", {}).values():
        if b.get("nodeid", -1) < 0:
            continue
        rtt = b.get("rtt", {})
        parts.append(
            f"node{b['nodeid']}:{b.get('state')} outbuf={b.get('outbuf_cnt')}"
            f"/{b.get('outbuf_msg_cnt')} waitresp={b.get('waitresp_cnt')}"
            f"/{b.get('waitresp_msg_cnt')} tx={b.get('tx')} req_timeouts={b.get('req_timeouts')}"
            f" rtt_ms={rtt.get('p50', 0) / 1000:.1f}/{rtt.get('p99', 0) / 1000:.1f}"
            f"/{rtt.get('max', 0) / 1000:.1f}")
    print(time.strftime("%H:%M:%S"), "stats", " ".join(parts), flush=True)


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
    os.nice(LOAD_NICE)
    result = consume(a) if a.consume else produce(a)
    with open(a.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
