"""kafka-python, aiokafka and kafkajs over the SASL_PLAINTEXT listener (issue 23), with
SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN against credentials made with
AlterUserScramCredentials: each produces and reads back; a wrong password is refused.
(confluent-kafka and the Java clients: test_scram_credentials.py.)"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from strand_harness import Broker, free_port, need, need_module

HERE = Path(__file__).resolve().parent
USER, PASSWORD = "dora", "explorer pw"
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]


@pytest.fixture(scope="module")
def sasl_broker():
    """A broker with a SASL_PLAINTEXT listener and user dora with both SCRAM mechanisms:
    (broker, SASL bootstrap)."""
    adm = need_module("confluent_kafka.admin")
    port = free_port()
    b = Broker(name="sasl-clients", smp=2,
               extra_listeners=[f"SASL_PLAINTEXT://127.0.0.1:{port}"])
    b.start()
    admin = adm.AdminClient({"bootstrap.servers": b.bootstrap})
    changes = [adm.UserScramCredentialUpsertion(USER, adm.ScramCredentialInfo(m, 4096),
                                                PASSWORD.encode(), b"salt-" + bytes([i]))
               for i, m in enumerate([adm.ScramMechanism.SCRAM_SHA_256,
                                      adm.ScramMechanism.SCRAM_SHA_512])]
    for f in admin.alter_user_scram_credentials(changes, request_timeout=15).values():
        f.result(timeout=20)
    yield b, f"127.0.0.1:{port}"
    rc = b.stop()
    if rc == 0:
        b.cleanup()
    assert rc == 0, f"strand exited with {rc} after SIGTERM:\n{b.log_tails()}"


def python_auth(mechanism):
    """kafka-python's and aiokafka's SASL settings (the same names in both)."""
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": USER, "sasl_plain_password": PASSWORD}


def create(b, topic):
    adm = need_module("confluent_kafka.admin")
    admin = adm.AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([adm.NewTopic(topic, num_partitions=1,
                                      replication_factor=1)])[topic].result(20)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_over_sasl(sasl_broker, topic, mechanism):
    kafka = need_module("kafka")
    b, bootstrap = sasl_broker
    create(b, topic)
    auth = python_auth(mechanism)
    p = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all", **auth)
    for i in range(10):
        p.send(topic, value=f"v{i}".encode(), partition=0)
    p.flush(30)
    p.close()
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                            enable_auto_commit=False, consumer_timeout_ms=10000, **auth)
    tp = kafka.TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got = [m.value.decode() for _, m in zip(range(10), c)]
    c.close()
    assert got == [f"v{i}" for i in range(10)]
    bad = {**auth, "sasl_plain_password": "wrong"}
    with pytest.raises(Exception):  # noqa: B017 - kafka-python raises per version
        kafka.KafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=5000,
                            max_block_ms=5000, **bad).send(topic, b"x").get(10)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_over_sasl(sasl_broker, topic, mechanism):
    aiokafka = need_module("aiokafka")
    b, bootstrap = sasl_broker
    create(b, topic)
    auth = python_auth(mechanism)

    async def run():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **auth)
        await p.start()
        try:
            for i in range(10):
                await p.send_and_wait(topic, value=f"v{i}".encode(), partition=0)
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                      enable_auto_commit=False, **auth)
        await c.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            got = []
            while len(got) < 10:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=500), 30)
                got += [r.value.decode() for recs in batch.values() for r in recs]
            return got
        finally:
            await c.stop()

    assert asyncio.run(run()) == [f"v{i}" for i in range(10)]

    async def wrong():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=5000,
                                      **{**auth, "sasl_plain_password": "wrong"})
        try:
            await p.start()
        finally:
            await p.stop()

    with pytest.raises(Exception):  # noqa: B017 - aiokafka's error type varies
        asyncio.run(wrong())


@pytest.mark.parametrize("mechanism", ["scram-sha-256", "scram-sha-512", "plain"])
def test_kafkajs_over_sasl(sasl_broker, topic, mechanism):
    node = shutil.which("node")
    need(node is not None, "node is not installed (Debian: nodejs)")
    js = HERE / "js"
    need((js / "node_modules" / "kafkajs" / "package.json").exists(),
         f"kafkajs is not installed: run `npm ci` in {js}")
    b, bootstrap = sasl_broker
    create(b, topic)
    env = dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1")

    def run(password):
        return subprocess.run([node, str(js / "sasl.js"), bootstrap, topic, "7", mechanism,
                               USER, password], capture_output=True, text=True, timeout=90,
                              env=env)
    r = run(PASSWORD)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr[-4000:]}"
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"high": "7"}
    r = run("wrong")
    assert r.returncode != 0 and "SASL" in r.stderr, r.stderr[-2000:]
