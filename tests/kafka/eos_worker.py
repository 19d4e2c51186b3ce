"""A consume-transform-produce worker with exactly-once semantics, as an application
writes it with librdkafka (run by test_transactions.py as its own process, so the test can
kill -9 it like a crashed application):

    eos_worker.py BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID

A read_committed consumer in GROUP; one transaction per batch carrying the transformed
records ("out-" + value, same key and partition) and the consumed offsets. An abortable
error aborts and rewinds to the committed offsets; a fatal one (fenced, or the producer's
state lost) starts a new producer, whose InitProducerId aborts what the old one left
open. Prints "committed N" after each transaction (N: records so far)."""

from __future__ import annotations

import sys

import confluent_kafka as ck


class Worker:
    def __init__(self, bootstrap, source, sink, group, tid):
        self.bootstrap, self.sink, self.tid = bootstrap, sink, tid
        self.consumer = ck.Consumer({
            "bootstrap.servers": bootstrap, "group.id": group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "isolation.level": "read_committed", "session.timeout.ms": 10000,
        })
        self.consumer.subscribe([source])
        self.producer = self._producer()

    def _producer(self):
        p = ck.Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.tid,
                         "transaction.timeout.ms": 20000, "message.timeout.ms": 20000})
        p.init_transactions(60)
        return p

    def _rewind(self):
        parts = self.consumer.assignment()
        if not parts:
            return
        for tp in self.consumer.committed(parts, timeout=30):
            self.consumer.seek(ck.TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))

    def step(self) -> int:
        """One batch: the records transformed and committed (0 if none)."""
        msgs = [m for m in self.consumer.consume(50, 0.5) if m.error() is None]
        if not msgs:
            return 0
        p = self.producer
        try:
            p.begin_transaction()
            for m in msgs:
                p.produce(self.sink, key=m.key(), value=b"out-" + m.value(),
                          partition=m.partition())
            p.send_offsets_to_transaction(self.consumer.position(self.consumer.assignment()),
                                          self.consumer.consumer_group_metadata(), 60)
            p.commit_transaction(60)
            return len(msgs)
        except ck.KafkaException as e:
            err = e.args[0]
            print(f"error {err}", flush=True)
            if err.txn_requires_abort():
                try:
                    p.abort_transaction(60)
                except ck.KafkaException as abort_err:
                    print(f"error abort: {abort_err}", flush=True)
                    self.producer = self._producer()
            else:
                self.producer = self._producer()
            self._rewind()
            return 0


def main():
    w = Worker(*sys.argv[1:6])
    done = 0
    while True:
        n = w.step()
        if n:
            done += n
            print(f"committed {done}", flush=True)


if __name__ == "__main__":
    main()
