"""kcat (Debian's, librdkafka 2.0.2) against strand. librdkafka 2.0.x cannot parse a
non-empty tagged-field section in ApiVersions/Metadata responses, so these also check that
default-valued tagged fields are not written (KAFKA-NOTES.md)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from strand_harness import need


@pytest.fixture(scope="module")
def kcat():
    path = shutil.which("kcat") or shutil.which("kafkacat")
    need(path is not None, "kcat is not installed (Debian package `kcat`)")
    return path


def run(args, input_=None, timeout=30):
    r = subprocess.run(args, input=input_, capture_output=True, timeout=timeout)
    return r


def test_metadata_listing(kcat, broker, topic):
    r = run([kcat, "-b", broker.bootstrap, "-L", "-J", "-m", "10"])
    assert r.returncode == 0, r.stderr.decode()
    md = json.loads(r.stdout)
    assert [(br["id"], br["name"]) for br in md["brokers"]] == [(0, broker.bootstrap)]
    # A topic auto-created by kcat's producer shows up with its partitions.
    r = run([kcat, "-b", broker.bootstrap, "-P", "-t", topic], input_=b"one\n")
    assert r.returncode == 0, r.stderr.decode()
    r = run([kcat, "-b", broker.bootstrap, "-L", "-J", "-t", topic, "-m", "10"])
    assert r.returncode == 0, r.stderr.decode()
    md = json.loads(r.stdout)
    (t,) = [t for t in md["topics"] if t["topic"] == topic]
    assert "error" not in t or not t["error"], t
    assert [p["partition"] for p in t["partitions"]] == list(range(broker.num_partitions))
    assert all(p["leader"] == 0 for p in t["partitions"])


def test_produce_and_consume_round_trip(kcat, broker, topic):
    lines = [f"key{i}:value {i}" for i in range(100)]
    r = run([kcat, "-b", broker.bootstrap, "-P", "-t", topic, "-K", ":", "-p", "0",
             "-X", "acks=all"], input_=("\n".join(lines) + "\n").encode())
    assert r.returncode == 0, r.stderr.decode()
    r = run([kcat, "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning",
             "-e", "-f", "%o|%k|%s\\n", "-m", "10"])
    assert r.returncode == 0, f"kcat -C exit {r.returncode}: {r.stderr.decode()[-2000:]}"
    got = r.stdout.decode().splitlines()
    assert got == [f"{i}|key{i}|value {i}" for i in range(100)]
    # From the middle: a fetch inside a batch starts at the asked offset.
    r = run([kcat, "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "97", "-e",
             "-f", "%o|%s\\n", "-m", "10"])
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert r.stdout.decode().splitlines() == ["97|value 97", "98|value 98", "99|value 99"]
