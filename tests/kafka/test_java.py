"""The Apache Kafka Java clients (kafka-clients 3.9.1 and 4.1.1) against strand: 100
records with acks=all and enable.idempotence=false, read back with assign(). The program
is tests/kafka/java/KafkaCheck.java, compiled per client into
target/kafka-tests/<client>-classes; the jars come from tests/kafka/fetch_java_clients.sh."""

from __future__ import annotations

import subprocess

import pytest

from strand_harness import JAVA_CLIENTS, java_classpath as java_classpath_of


@pytest.fixture(scope="module", params=sorted(JAVA_CLIENTS))
def java_classpath(request):
    return java_classpath_of(request.param, "KafkaCheck")


def test_java_client_produce_and_assign_consume(java_classpath, broker, topic):
    java, cp = java_classpath
    r = subprocess.run([java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", cp,
                        "KafkaCheck", broker.bootstrap, topic, "100"],
                       capture_output=True, text=True, timeout=120)
    out = r.stdout.strip().splitlines()
    assert r.returncode == 0 and out and out[-1].startswith("OK"), (
        f"KafkaCheck exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-5000:]}")
    assert out[-1] == "OK produced=100 consumed=100"
