"""Disk full under the real broker, driven by a Kafka client (ARCHITECTURE.md, Bad input,
limits, faults: "produce gets an error, nothing acknowledged is lost, the broker recovers
when space returns"). `tests/tests/enospc.rs` checks the storage log alone; this checks what
a producer sees: the broker keeps serving, answers KAFKA_STORAGE_ERROR (retriable, as a
Kafka broker's offline log directory does) instead of acknowledging, accepts writes again
once space returns, and after kill -9 every acknowledged record is there.

The data directory is a small ext4 image, loop-mounted (`loop_mounted_disk`)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from strand_harness import (Broker, free_filler, loop_mounted_disk, need_module, read_partition,
                            wait_until, write_filler)

IMAGE_BYTES = 96 * 1024 * 1024
# Deleting it is what "space returns" means: more than the records refused while full,
# which stay pending and take the freed space first.
FILLER_BYTES = 32 * 1024 * 1024
RECORD_BYTES = 32 * 1024
# The disk is full long before this much was acknowledged (three times the image).
PRODUCED_BYTES_MAX = 3 * IMAGE_BYTES
# Records acknowledged after space returns.
RECORDS_AFTER = 50
# How long a record may wait for its acknowledgement (retries of KAFKA_STORAGE_ERROR
# included) before librdkafka fails it.
MESSAGE_TIMEOUT_MS = 6000


@pytest.fixture
def small_disk():
    with loop_mounted_disk("disk-full", IMAGE_BYTES) as point:
        yield point


def _fill(ck, bootstrap: str, topic: str) -> tuple[list[bytes], list]:
    """Produces RECORD_BYTES records (idempotent, acks=all) until some are refused; returns
    the acknowledged values in offset order and the errors of the refused ones, each a
    KAFKA_STORAGE_ERROR or a timeout retrying it."""
    acked: list[tuple[int, bytes]] = []
    errors: list = []

    def report(err, msg):
        if err is None:
            acked.append((msg.offset(), msg.value()))
        else:
            errors.append(err)

    p = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                     "acks": "all", "linger.ms": 5,
                     "message.timeout.ms": MESSAGE_TIMEOUT_MS})
    produced = 0
    while not errors and produced < PRODUCED_BYTES_MAX:
        for _ in range(32):
            value = f"{produced // RECORD_BYTES:08d}".encode().ljust(RECORD_BYTES, b".")
            p.produce(topic, value, partition=0, on_delivery=report)
            produced += RECORD_BYTES
        assert p.flush(MESSAGE_TIMEOUT_MS / 1000 + 30) == 0, "undelivered records"
    assert errors, f"{produced} bytes acknowledged on a {IMAGE_BYTES}-byte disk"
    codes = {e.code() for e in errors}
    assert codes <= {ck.KafkaError.KAFKA_STORAGE_ERROR, ck.KafkaError._MSG_TIMED_OUT}, \
        [str(e) for e in errors]
    return [v for _, v in sorted(acked)], errors


def _one_error(ck, bootstrap: str, topic: str, acks="all"):
    """The broker's own answer to one more record (no retries): the error code a client
    sees while the disk is full."""
    errors = []
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": acks, "retries": 0,
                     "enable.idempotence": False, "message.timeout.ms": 20000})
    p.produce(topic, b"while full", partition=0, on_delivery=lambda e, m: errors.append(e))
    p.flush(30)
    assert errors, "no delivery report"
    return errors[0]


def _read_values(ck, broker: Broker, topic: str) -> list[bytes]:
    return [v for _, _, v in read_partition(ck, broker.bootstrap, topic, 0)]


def test_a_full_disk_refuses_produce_loses_nothing_and_heals(small_disk: Path):
    """Fill the disk with acks=all records: the refused ones get KAFKA_STORAGE_ERROR (or
    time out retrying it); what was acknowledged reads back, also after kill -9 and a
    restart on the full disk; acks=1 is refused as well; what the refused batches left
    pending becomes readable once space returns with nothing else written; then produce
    works again and survives kill -9."""
    ck = need_module("confluent_kafka")
    filler = small_disk / "filler"
    write_filler(filler, FILLER_BYTES)
    broker = Broker(name="disk-full", smp=1)
    broker.data_dir = small_disk / "data"
    broker.start()
    try:
        topic = f"full-{uuid.uuid4().hex[:8]}"
        acked, errors = _fill(ck, broker.bootstrap, topic)
        err = _one_error(ck, broker.bootstrap, topic)
        assert err is not None and err.code() == ck.KafkaError.KAFKA_STORAGE_ERROR, str(err)
        assert _subsequence(acked, _read_values(ck, broker, topic)), \
            "an acknowledged record is missing while the disk is full"

        # A restart on the full disk: it starts, and what was acknowledged is there.
        broker.kill9_and_restart()
        assert _subsequence(acked, _read_values(ck, broker, topic)), \
            "an acknowledged record is missing after kill -9 on the full disk"
        # What was pending is gone, and with it its claim on the segment's preallocated
        # space: fill what that left.
        more, _ = _fill(ck, broker.bootstrap, topic)
        acked += more

        # acks=1 is refused too while the disk is full, as a Kafka broker refuses writes
        # to a log directory that failed: nothing piles up in memory meanwhile.
        err = _one_error(ck, broker.bootstrap, topic, acks=1)
        assert err is not None and err.code() == ck.KafkaError.KAFKA_STORAGE_ERROR, str(err)
        readable = len(_read_values(ck, broker, topic))

        free_filler(filler)
        # The refused batches whose flush failed stay pending; with nothing else written,
        # the broker's own retry makes them durable and readable.
        wait_until(lambda: len(_read_values(ck, broker, topic)) > readable, 30,
                   "the records left pending by the full disk readable once space returned")

        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "enable.idempotence": True})
        after = [f"after-{i:04d}".encode() for i in range(RECORDS_AFTER)]
        for v in after:
            p.produce(topic, v, partition=0)
        assert p.flush(30) == 0, "undelivered records after space returned"

        broker.kill9_and_restart()
        got = _read_values(ck, broker, topic)
        assert _subsequence(acked + after, got), \
            f"acknowledged records lost across kill -9: {len(got)} read"
        print(f"disk full after {len(acked)} records of {RECORD_BYTES} B acknowledged "
              f"({len(errors)} refused); {len(got)} records after healing")
    finally:
        broker.stop()
        broker.cleanup()


def _subsequence(want: list[bytes], got: list[bytes]) -> bool:
    """Whether `want` appears in `got` in order (records that failed may be there too:
    an append refused for its flush stays pending and becomes durable with a later one)."""
    it = iter(got)
    return all(any(g == w for g in it) for w in want)
