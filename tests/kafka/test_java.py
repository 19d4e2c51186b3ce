"""The Apache Kafka Java client (kafka-clients 3.9.1) against strand: 100 records with
acks=all and enable.idempotence=false, read back with assign(). The program is
tests/kafka/java/KafkaCheck.java, compiled here into target/kafka-tests/java-classes; the
jars come from tests/kafka/fetch_java_clients.sh."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from strand_harness import KAFKA_TESTS_DIR, need

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "java" / "KafkaCheck.java"
LIB = KAFKA_TESTS_DIR / "java-lib"
CLASSES = KAFKA_TESTS_DIR / "java-classes"


@pytest.fixture(scope="module")
def java_classpath():
    java, javac = shutil.which("java"), shutil.which("javac")
    need(java is not None and javac is not None,
         "java/javac not found (Debian: openjdk-17-jdk-headless)")
    jars = sorted(LIB.glob("*.jar"))
    need(any(j.name == "kafka-clients.jar" for j in jars),
         f"kafka-clients.jar not in {LIB}: run tests/kafka/fetch_java_clients.sh")
    cp = ":".join(str(j) for j in jars)
    cls = CLASSES / "KafkaCheck.class"
    if not cls.exists() or cls.stat().st_mtime < SOURCE.stat().st_mtime:
        CLASSES.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([javac, "-Xlint:all", "-Werror", "-cp", cp, "-d", str(CLASSES),
                            str(SOURCE)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"javac failed:\n{r.stdout}\n{r.stderr}"
    return java, f"{cp}:{CLASSES}"


def test_java_client_produce_and_assign_consume(java_classpath, broker, topic):
    java, cp = java_classpath
    r = subprocess.run([java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", cp,
                        "KafkaCheck", broker.bootstrap, topic, "100"],
                       capture_output=True, text=True, timeout=120)
    out = r.stdout.strip().splitlines()
    assert r.returncode == 0 and out and out[-1].startswith("OK"), (
        f"KafkaCheck exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-5000:]}")
    assert out[-1] == "OK produced=100 consumed=100"
