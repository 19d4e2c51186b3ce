"""aiokafka against strand: produce, then consume with a manual assignment (no group)."""

from __future__ import annotations

import asyncio

import pytest

from strand_harness import need_module


@pytest.fixture
def aiokafka():
    return need_module("aiokafka")


async def _produce_and_consume(aiokafka, bootstrap, topic, n):
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                         enable_idempotence=False, linger_ms=5,
                                         request_timeout_ms=10000)
    await producer.start()
    try:
        futs = [await producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode(),
                                    partition=i % 2)
                for i in range(n)]
        metas = await asyncio.gather(*futs)
        single = await producer.send_and_wait(topic, value=b"last", partition=0)
    finally:
        await producer.stop()
    per_part = {0: [], 1: []}
    for i, m in enumerate(metas):
        per_part[m.partition].append((m.offset, f"v{i}".encode()))
    for part, rows in per_part.items():
        assert [o for o, _ in rows] == list(range(len(rows))), f"partition {part}"
    assert single.offset == len(per_part[0])
    per_part[0].append((single.offset, b"last"))

    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                         enable_auto_commit=False,
                                         request_timeout_ms=10000)
    await consumer.start()
    try:
        tps = [aiokafka.TopicPartition(topic, p) for p in (0, 1)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        assert end == {tp: len(per_part[tp.partition]) for tp in tps}
        got = {0: [], 1: []}
        want = sum(len(v) for v in per_part.values())

        async def drain():
            while sum(len(v) for v in got.values()) < want:
                batch = await consumer.getmany(timeout_ms=500)
                for tp, recs in batch.items():
                    got[tp.partition].extend((r.offset, r.value) for r in recs)

        await asyncio.wait_for(drain(), timeout=30)
        assert got == per_part
    finally:
        await consumer.stop()


def test_produce_and_consume_with_manual_assignment(strand, aiokafka, topic):
    # Two partitions per auto-created topic for this test's own broker.
    b = strand(num_partitions=2)
    asyncio.run(asyncio.wait_for(_produce_and_consume(aiokafka, b.bootstrap, topic, 400), 60))
