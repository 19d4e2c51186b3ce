"""`strandctl` (tools/) against a real strand (issue 8): topic create/list/describe/
alter-config/add-partitions/delete, produce -> consume round trips (text and JSON, keys and
headers), group describe and reset-offsets against a confluent-kafka consumer group, broker
alter-config/describe-config (dynamic broker configs),
cluster info/health, tune check, config validate, self-test, and the error for a broker
that is not there.

Results that strandctl reports are cross-checked with confluent-kafka where it can see
them (partition counts, record keys and headers, committed offsets), so strandctl cannot
pass by agreeing with itself.

The binary is $STRANDCTL_BIN (default target/debug/strandctl, which `make test` builds with
`cargo build --workspace --bins`); when it is missing the tests skip, or fail with
STRAND_REQUIRE_CLIENTS=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from strand_harness import REPO_ROOT, TARGET_DIR, Broker, need, need_module, wait_until

CTL_TIMEOUT_S = 60


def strandctl_bin() -> Path:
    p = Path(os.environ.get("STRANDCTL_BIN", "target/debug/strandctl"))
    return p if p.is_absolute() else REPO_ROOT / p


@pytest.fixture(scope="module")
def ctl_broker(request):
    """A broker whose groups rebalance without the initial delay (fast group tests)."""
    need(strandctl_bin().exists(),
         f"strandctl not found at {strandctl_bin()}: build it with `cargo build -p strandctl` "
         "or set STRANDCTL_BIN")
    b = Broker(name="strandctl", smp=2, extra_args=[
        "--group-initial-rebalance-delay-ms", "0", "--offsets-topic-num-partitions", "4"])
    b.start()
    yield b
    rc = b.stop()
    if rc == 0:
        b.cleanup()
    assert rc == 0, f"strand exited with {rc} after SIGTERM:\n{b.log_tails()}"


def ctl(broker: Broker | None, *args: str, input: str | None = None,
        expect_rc: int | tuple[int, ...] | None = 0) -> subprocess.CompletedProcess:
    """Runs strandctl against `broker`; checks the exit code (None: any)."""
    cmd = [str(strandctl_bin())]
    if broker is not None:
        cmd += ["--brokers", broker.bootstrap]
        if broker.admin_port is not None:
            cmd += ["--admin", f"127.0.0.1:{broker.admin_port}"]
    cmd += list(args)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRANDCTL_")}
    r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=CTL_TIMEOUT_S,
                       env=env)
    assert "panicked" not in r.stderr, f"{cmd} panicked:\n{r.stderr}"
    if expect_rc is not None:
        ok = r.returncode in (expect_rc if isinstance(expect_rc, tuple) else (expect_rc,))
        assert ok, (f"{' '.join(cmd)} exited {r.returncode}, expected {expect_rc}\n"
                    f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r


def table(text: str, first_column: str) -> list[dict[str, str]]:
    """The rows of the whitespace-aligned table whose header starts with `first_column`."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.split()[:1] == [first_column])
    header = lines[start].split()
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows.append(dict(zip(header, line.split())))
    return rows


def block(text: str, first_column: str) -> list[str]:
    """The data lines of the table whose header starts with `first_column` (for tables
    whose cells contain spaces)."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.split()[:1] == [first_column])
    out = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        out.append(line)
    return out


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_topic_lifecycle(ctl_broker):
    ck = need_module("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    t = name("ctl-topic")
    ctl(ctl_broker, "topic", "create", t, "--partitions", "3", "-c", "retention.ms=3600000")
    r = ctl(ctl_broker, "topic", "create", t, expect_rc=4)
    assert "already exists" in r.stderr.lower() or "TopicAlreadyExists" in r.stderr, r.stderr

    rows = table(ctl(ctl_broker, "topic", "list").stdout, "TOPIC")
    assert {"TOPIC": t, "PARTITIONS": "3", "REPLICAS": "1", "INTERNAL": "false"} in rows

    out = ctl(ctl_broker, "topic", "describe", t).stdout
    assert [p["PARTITION"] for p in table(out, "PARTITION")] == ["0", "1", "2"]
    assert {"CONFIG": "retention.ms", "VALUE": "3600000", "SOURCE": "TOPIC"} in table(out, "CONFIG")

    ctl(ctl_broker, "topic", "alter-config", t, "--set", "segment.bytes=1048576",
        "--delete", "retention.ms")
    configs = table(ctl(ctl_broker, "topic", "describe", t).stdout, "CONFIG")
    assert {"CONFIG": "segment.bytes", "VALUE": "1048576", "SOURCE": "TOPIC"} in configs
    assert all(c["CONFIG"] != "retention.ms" for c in configs), configs

    ctl(ctl_broker, "topic", "add-partitions", t, "--total", "5")
    admin = AdminClient({"bootstrap.servers": ctl_broker.bootstrap})
    md = admin.list_topics(topic=t, timeout=10)
    assert len(md.topics[t].partitions) == 5

    ctl(ctl_broker, "topic", "delete", t)
    rows = table(ctl(ctl_broker, "topic", "list").stdout, "TOPIC")
    assert all(r["TOPIC"] != t for r in rows), rows
    r = ctl(ctl_broker, "topic", "describe", t, expect_rc=4)
    assert "UnknownTopicOrPartition" in r.stderr or "UNKNOWN_TOPIC" in r.stderr, r.stderr
    del ck


def test_produce_consume_round_trip(ctl_broker):
    ck = need_module("confluent_kafka")
    t = name("ctl-records")
    ctl(ctl_broker, "topic", "create", t, "--partitions", "2")
    lines = [f"key-{i}:value {i} with: colon" for i in range(10)] + ["no separator here"]
    r = ctl(ctl_broker, "produce", t, "--key-separator", ":", "--header", "source=ctl",
            "--header", "trace=a=b", input="\n".join(lines) + "\n")
    assert "produced 11 records" in r.stdout, r.stdout

    r = ctl(ctl_broker, "consume", t, "--format", "json", "--timeout-ms", "2000")
    got = [json.loads(l) for l in r.stdout.splitlines()]
    assert len(got) == 11, r.stdout
    by_value = {g["value"]: g for g in got}
    for i in range(10):
        g = by_value[f"value {i} with: colon"]
        assert g["key"] == f"key-{i}" and g["topic"] == t
        assert g["headers"] == {"source": "ctl", "trace": "a=b"}
    assert by_value["no separator here"]["key"] is None
    assert by_value["no separator here"]["partition"] == 0
    # Keyed records land where Kafka's default partitioner (murmur2) puts them; check
    # with librdkafka's murmur2_random partitioner.
    p = ck.Producer({"bootstrap.servers": ctl_broker.bootstrap, "partitioner": "murmur2_random"})
    delivered = {}
    for i in range(10):
        p.produce(t, key=f"key-{i}", value=b"check",
                  on_delivery=lambda err, msg: delivered.__setitem__(msg.key().decode(), msg.partition()))
    p.flush(10)
    for i in range(10):
        assert by_value[f"value {i} with: colon"]["partition"] == delivered[f"key-{i}"], i

    # Text format: one partition, exact count, key and headers printed.
    r = ctl(ctl_broker, "consume", t, "--partition", "0", "--offset", "earliest",
            "--print-key", "--print-headers", "--key-separator", "=>", "--timeout-ms", "1000")
    text_lines = r.stdout.splitlines()
    assert "source=ctl,trace=a=b\t=>no separator here" in text_lines, text_lines
    assert sum(1 for l in text_lines if "=>check" not in l) == sum(
        1 for g in got if g["partition"] == 0)
    r = ctl(ctl_broker, "consume", t, "--num", "3", "--timeout-ms", "2000")
    assert len(r.stdout.splitlines()) == 3

    # An independent client sees the same key and headers.
    c = ck.Consumer({"bootstrap.servers": ctl_broker.bootstrap, "group.id": name("check"),
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([t])
    seen = {}
    deadline = time.monotonic() + 30
    while len(seen) < 11 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error() or m.value() == b"check":
            continue
        seen[m.value().decode()] = (m.key(), m.headers())
    c.close()
    assert seen["value 3 with: colon"] == (b"key-3", [("source", b"ctl"), ("trace", b"a=b")])
    assert seen["no separator here"][0] is None


def _consume_and_commit(ck, bootstrap: str, topic: str, group: str, n: int,
                        protocol: str = "classic"):
    """A subscribed consumer that read `n` records and committed after them (still open)."""
    conf = {"bootstrap.servers": bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    if protocol == "classic":
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    else:
        conf["group.protocol"] = protocol
    c = ck.Consumer(conf)
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    last = None
    while got < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got += 1
        last = m
    assert got == n, f"consumed {got} of {n}"
    c.commit(message=last, asynchronous=False)
    return c


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_describe_and_reset_offsets(ctl_broker, protocol):
    """Both group protocols: a KIP-848 group is described with ConsumerGroupDescribe."""
    ck = need_module("confluent_kafka")
    t, g = name("ctl-group"), name("ctl-g")
    ctl(ctl_broker, "topic", "create", t, "--partitions", "1")
    ctl(ctl_broker, "produce", t, input="".join(f"r{i}\n" for i in range(10)))
    c = _consume_and_commit(ck, ctl_broker.bootstrap, t, g, 6, protocol)
    tp = ck.TopicPartition(t, 0)
    try:
        assert c.committed([tp], timeout=10)[0].offset == 6
        rows = table(ctl(ctl_broker, "group", "describe", g).stdout, "GROUP")
        assert len(rows) == 1, rows
        row = rows[0]
        assert (row["TOPIC"], row["PARTITION"], row["CURRENT-OFFSET"], row["LOG-END-OFFSET"],
                row["LAG"]) == (t, "0", "6", "10", "4"), row
        assert row["CONSUMER-ID"] != "-" and row["CLIENT-ID"] == "rdkafka", row
        groups = table(ctl(ctl_broker, "group", "list").stdout, "GROUP")
        assert any(x["GROUP"] == g for x in groups), groups

        # Active member: the dry run works, --execute is refused (exit 4) and changes nothing.
        r = ctl(ctl_broker, "group", "reset-offsets", g, "--to-earliest")
        assert "dry run" in r.stdout
        plan = table(r.stdout, "GROUP")
        assert (plan[0]["CURRENT-OFFSET"], plan[0]["NEW-OFFSET"]) == ("6", "0"), plan
        r = ctl(ctl_broker, "group", "reset-offsets", g, "--to-earliest", "--execute",
                expect_rc=4)
        assert "active member" in r.stderr, r.stderr
        assert c.committed([tp], timeout=10)[0].offset == 6
    finally:
        c.close()

    # Inactive: the dry run still changes nothing; --execute moves the committed offset.
    wait_until(lambda: table(ctl(ctl_broker, "group", "describe", g).stdout, "GROUP")[0]
               ["CONSUMER-ID"] == "-", 30, "the group to have no members after close()")
    ctl(ctl_broker, "group", "reset-offsets", g, "--to-offset", "2")
    checker = ck.Consumer({"bootstrap.servers": ctl_broker.bootstrap, "group.id": g})
    try:
        assert checker.committed([tp], timeout=10)[0].offset == 6
        r = ctl(ctl_broker, "group", "reset-offsets", g, "--to-earliest", "--execute")
        assert "committed 1 offsets" in r.stdout, r.stdout
        assert checker.committed([tp], timeout=10)[0].offset == 0
        ctl(ctl_broker, "group", "reset-offsets", g, "--topic", t, "--to-offset", "7", "--execute")
        assert checker.committed([tp], timeout=10)[0].offset == 7
        row = table(ctl(ctl_broker, "group", "describe", g).stdout, "GROUP")[0]
        assert (row["CURRENT-OFFSET"], row["LAG"]) == ("7", "3"), row
    finally:
        checker.close()

    # consume --group starts at the committed offset and commits what it printed.
    r = ctl(ctl_broker, "consume", t, "--group", g, "--timeout-ms", "1000")
    assert r.stdout.splitlines() == ["r7", "r8", "r9"], r.stdout
    row = table(ctl(ctl_broker, "group", "describe", g).stdout, "GROUP")[0]
    assert (row["CURRENT-OFFSET"], row["LAG"]) == ("10", "0"), row

    ctl(ctl_broker, "group", "delete", g)
    groups = table(ctl(ctl_broker, "group", "list").stdout, "GROUP")
    assert all(x["GROUP"] != g for x in groups), groups


def test_cluster_info_and_health(ctl_broker):
    out = ctl(ctl_broker, "cluster", "info").stdout
    brokers = table(out, "BROKER")
    assert brokers and brokers[0]["PORT"] == str(ctl_broker.port), out
    assert "CLUSTER-ID" in out
    need(ctl_broker.admin_port is not None, "this strand binary has no --admin-addr")
    r = ctl(ctl_broker, "cluster", "health")
    assert "ready  true" in r.stdout, r.stdout
    shards = table(r.stdout, "SHARD")
    assert [s["SHARD"] for s in shards] == ["0", "1"], r.stdout


def test_broker_configs_of_a_node_and_the_cluster_default(strand):
    """`strandctl broker alter-config/describe-config` (kafka-configs.sh --entity-type
    brokers): the cluster default and a node's own value, cross-checked with what
    confluent-kafka's DescribeConfigs says a topic runs with; a config that cannot change
    while the broker runs is refused (exit 4)."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    b = strand(name="brokercfg")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    [node] = [str(n) for n in admin.list_topics(timeout=10).brokers]
    ctl(b, "broker", "alter-config", "--default", "--set", "log.retention.ms=86400000")
    ctl(b, "broker", "alter-config", "--id", node, "--set", "log.segment.bytes=2097152")
    assert table(ctl(b, "broker", "describe-config", "--default").stdout, "CONFIG") == [
        {"CONFIG": "log.retention.ms", "VALUE": "86400000", "SOURCE": "DYNAMIC_DEFAULT_BROKER",
         "DYNAMIC": "yes"}]
    mine = table(ctl(b, "broker", "describe-config", "--id", node).stdout, "CONFIG")
    assert {"CONFIG": "log.segment.bytes", "VALUE": "2097152", "SOURCE": "DYNAMIC_BROKER",
            "DYNAMIC": "yes"} in mine, mine
    every = table(ctl(b, "broker", "describe-config", "--id", node, "--all").stdout, "CONFIG")
    assert {"CONFIG": "broker.id", "VALUE": node, "SOURCE": "STATIC_BROKER",
            "DYNAMIC": "no"} in every, every

    t = name("brokercfg")
    ctl(b, "topic", "create", t)
    r = ConfigResource(ResourceType.TOPIC, t)
    configs = admin.describe_configs([r])[r].result(15)
    assert (configs["retention.ms"].value, configs["segment.bytes"].value) == \
        ("86400000", "2097152")

    refused = ctl(b, "broker", "alter-config", "--id", node, "--set", "broker.id=7", expect_rc=4)
    assert "cannot be updated dynamically" in refused.stderr, refused.stderr
    ctl(b, "broker", "alter-config", "--default", "--delete", "log.retention.ms")
    assert "no dynamic configs" in ctl(b, "broker", "describe-config", "--default").stdout
    configs = admin.describe_configs([r])[r].result(15)
    assert configs["retention.ms"].value == "604800000"


def test_unreachable_broker_is_a_clear_error(ctl_broker):
    del ctl_broker
    r = subprocess.run([str(strandctl_bin()), "--brokers", "127.0.0.1:1", "topic", "list"],
                       capture_output=True, text=True, timeout=CTL_TIMEOUT_S)
    assert r.returncode == 1, r
    assert "cannot connect to 127.0.0.1:1" in r.stderr and "is strand running" in r.stderr
    r = subprocess.run([str(strandctl_bin()), "topic", "create"], capture_output=True,
                       text=True, timeout=CTL_TIMEOUT_S)
    assert r.returncode == 2, r


def test_tune_check_reports_without_writing(ctl_broker):
    del ctl_broker
    r = ctl(None, "tune", "check", "--data-dir", str(TARGET_DIR), expect_rc=(0, 3))
    rows = block(r.stdout, "SETTING")
    settings = "\n".join(rows)
    for s in ("governor", "fs.aio-max-nr", "io_uring_disabled", "RLIMIT_MEMLOCK", "scheduler",
              "hugepages", "isolation", "shards", "group commit pacing",
              "kernel memory monitor"):
        assert s in settings, r.stdout
    statuses = {line.split()[-1] for line in rows}
    assert statuses <= {"OK", "CHANGE", "UNKNOWN", "ADVICE"}, r.stdout
    assert (r.returncode == 3) == ("CHANGE" in statuses), r.stdout


def test_tune_apply_without_a_terminal_asks_for_yes(ctl_broker):
    """Without a terminal to ask on and without --yes, apply refuses before writing."""
    del ctl_broker
    r = ctl(None, "tune", "apply", "--data-dir", str(TARGET_DIR), input="", expect_rc=(0, 1))
    changes = any(line.split()[-1] == "CHANGE" for line in block(r.stdout, "SETTING"))
    if changes:
        assert r.returncode == 1 and "pass --yes" in r.stderr, r
    else:
        assert r.returncode == 0 and "nothing to change" in r.stdout, r


def test_config_validate(ctl_broker):
    del ctl_broker
    d = TARGET_DIR / "kafka-tests" / name("ctl-config")
    d.mkdir(parents=True)
    try:
        good = d / "good.toml"
        good.write_text('num_partitions = 3\nkafka_addr = "0.0.0.0:9092"\nallow_buffered_io = false\n')
        r = ctl(None, "config", "validate", str(good))
        assert r.stdout.strip().endswith(": ok"), r.stdout
        bad = d / "bad.toml"
        bad.write_text('num_partitions = 0\nlog_retention = 5\nkafka_addr = "localhost"\n')
        r = ctl(None, "config", "validate", str(bad), expect_rc=3)
        for key in ("num_partitions", "log_retention", "kafka_addr"):
            assert f": {key}: " in r.stdout, r.stdout
        r = ctl(None, "config", "validate", str(d / "missing.toml"), expect_rc=1)
        assert "cannot read" in r.stderr
    finally:
        for f in d.iterdir():
            f.unlink()
        d.rmdir()


def test_self_test_small(ctl_broker):
    d = TARGET_DIR / "kafka-tests" / name("ctl-selftest")
    d.mkdir(parents=True)
    try:
        start = time.monotonic()
        r = ctl(ctl_broker, "self-test", "--dir", str(d), "--disk-bytes", str(4 << 20),
                "--block-bytes", str(1 << 20), "--sync-samples", "20", "--rtt-samples", "50",
                "--produce-bytes", str(2 << 20))
        assert time.monotonic() - start < 10, "self-test with small sizes took too long"
        rows = block(r.stdout, "CHECK")
        names = "\n".join(rows)
        for n in ("write", "read", "fdatasync", "round", "produce"):
            assert n in names, r.stdout
        assert all((" PASS" in line) or (" WARN" in line) for line in rows), r.stdout
        assert list(d.iterdir()) == [], "self-test left files behind"
        topics = table(ctl(ctl_broker, "topic", "list").stdout, "TOPIC")
        assert not any("self-test" in t["TOPIC"] for t in topics), topics
    finally:
        for f in d.iterdir():
            f.unlink()
        d.rmdir()


def test_self_test_between_two_nodes(ctl_broker, strand):
    """Node-to-node network figures: the node at --admin measures the peer's admin API."""
    need(ctl_broker.admin_port is not None, "this strand binary has no --admin-addr")
    peer = strand(name="peer", smp=1)
    r = ctl(ctl_broker, "self-test", "--skip-disk", "--skip-network",
            "--peer-admin", f"127.0.0.1:{peer.admin_port}",
            "--peer-rounds", "20", "--peer-bytes", str(4 << 20))
    rows = block(r.stdout, "CHECK")
    peer_rows = [line for line in rows if f"127.0.0.1:{peer.admin_port}" in line]
    assert len(peer_rows) == 2, r.stdout
    assert any("round trip p99" in line for line in peer_rows), r.stdout
    assert any("transfer" in line for line in peer_rows), r.stdout
    # A peer that is not there is an error that names it, not a figure.
    bad = ctl(ctl_broker, "self-test", "--skip-disk", "--skip-network",
              "--peer-admin", "127.0.0.1:1", expect_rc=1)
    assert "127.0.0.1:1" in bad.stderr, bad.stderr
