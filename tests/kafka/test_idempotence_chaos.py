"""An idempotent confluent-kafka producer writes sequential values while the broker is
killed with SIGKILL and restarted on the same port several times: reading everything back
finds no duplicates, every acknowledged value, and per-partition order."""

from __future__ import annotations

import threading
import time

from strand_harness import need_module


def test_idempotent_producer_survives_kill9_without_duplicates(strand, topic):
    ck = need_module("confluent_kafka")
    admin = need_module("confluent_kafka.admin")
    b = strand(name="chaos", smp=2)
    a = admin.AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([admin.NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(10)
    acked: list[tuple[int, int]] = []
    errors: list[str] = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.partition(), int(msg.value())))

    p = ck.Producer({
        "bootstrap.servers": b.bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "message.timeout.ms": 120000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
    })
    total = 6000
    kills = 3
    stop = threading.Event()

    def chaos():
        for _ in range(kills):
            time.sleep(0.7)
            if stop.is_set():
                return
            b.kill9_and_restart(same_port=True)

    t = threading.Thread(target=chaos)
    t.start()
    for i in range(total):
        while True:
            try:
                p.produce(topic, key=str(i % 97).encode(), value=str(i).encode(), on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10 == 0:
            # Spread the writes over ~3 s so the kills land mid-stream.
            p.poll(0)
            time.sleep(0.005)
    kills_landed_mid_stream = not t.is_alive()
    t.join()
    stop.set()
    assert kills_landed_mid_stream, "the producer finished before the kills; slow it down"
    assert b.starts == kills + 1
    assert p.flush(120) == 0, "undelivered messages remain"
    assert not errors, errors[:5]
    assert len(acked) == total

    c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "strand-tests-unused",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, part, 0) for part in range(3)])
    seen: dict[int, list[int]] = {0: [], 1: [], 2: []}
    deadline = time.monotonic() + 60
    while sum(map(len, seen.values())) < total and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        seen[m.partition()].append(int(m.value()))
    c.close()
    values = [v for vs in seen.values() for v in vs]
    assert len(values) == len(set(values)), "duplicates found"
    assert set(values) >= {v for _, v in acked}, "acknowledged values missing"
    for part, vs in seen.items():
        assert vs == sorted(vs), f"partition {part} out of order"
