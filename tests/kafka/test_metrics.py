"""Operations surface of the broker (issue 8): `/metrics` parsed with the `prometheus_client`
package's OpenMetrics parser after real traffic, consumer group lag against the high
watermark, the health endpoints, `/v1/status`, a runtime log level change through the
admin API, and `strand --check` on good and deliberately bad data directories."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from strand_harness import free_port, need_module, strand_bin, wait_until

MESSAGES = 50


def admin_token(broker) -> str:
    """The admin API's bearer token: the broker writes it to admin-token in its data dir."""
    return (broker.data_dir / "admin-token").read_text().strip()


def admin(broker, path: str, method: str = "GET", body: bytes | None = None,
          token: str | None = None):
    """(status, body text) of an admin HTTP request; a PUT carries the broker's admin
    token unless `token` names another ("" for none)."""
    if token is None:
        token = admin_token(broker) if method != "GET" else ""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(f"http://127.0.0.1:{broker.admin_port}{path}", data=body,
                                 method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(broker) -> dict:
    """Metric families by name, parsed by prometheus_client's OpenMetrics parser."""
    parser = need_module("prometheus_client.openmetrics.parser")
    status, text = admin(broker, "/metrics")
    assert status == 200, text
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


def total(families: dict, family: str, sample: str, **labels) -> float:
    """Sum of `sample` values of `family` whose labels include `labels`."""
    return sum(s.value for s in families[family].samples
               if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()))


def produce(broker, topic: str, n: int):
    ck = need_module("confluent_kafka")
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(n):
        p.produce(topic, key=b"k", value=f"v{i}".encode())
    assert p.flush(30) == 0


def consume(broker, topic: str, group: str, n: int, commit: bool):
    """Reads `n` messages as `group`; with `commit`, commits the offset after the n-th."""
    ck = need_module("confluent_kafka")
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    try:
        wait_until(lambda: _poll_into(c, got, n), 60, f"{n} messages from {topic}")
        last = got[n - 1]
        if commit:
            tp = ck.TopicPartition(topic, last.partition(), last.offset() + 1)
            c.commit(offsets=[tp], asynchronous=False)
        low, high = c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()
    return got[:n], high


def _poll_into(c, got: list, n: int) -> bool:
    m = c.poll(0.5)
    if m is not None and m.error() is None:
        got.append(m)
    return len(got) >= n


def test_counters_and_histograms_move_after_traffic(broker, topic):
    before = scrape(broker)
    produce(broker, topic, MESSAGES)
    consume(broker, topic, f"{topic}-g", MESSAGES, commit=False)
    after = scrape(broker)

    def moved(family, sample, **labels):
        return total(after, family, sample, **labels) - total(before, family, sample, **labels)

    assert moved("strand_kafka_produce_records", "strand_kafka_produce_records_total") >= MESSAGES
    assert moved("strand_kafka_produce_bytes", "strand_kafka_produce_bytes_total") > 0
    assert moved("strand_kafka_fetch_records", "strand_kafka_fetch_records_total") >= MESSAGES
    assert moved("strand_kafka_fetch_bytes", "strand_kafka_fetch_bytes_total") > 0
    assert moved("strand_storage_fdatasync", "strand_storage_fdatasync_total") > 0
    assert moved("strand_kafka_connections_accepted",
                 "strand_kafka_connections_accepted_total") > 0
    assert moved("strand_batch_cache_hits", "strand_batch_cache_hits_total") \
        + moved("strand_batch_cache_misses", "strand_batch_cache_misses_total") > 0

    req = after["strand_kafka_request_seconds"]
    assert req.type == "histogram"
    produce_buckets = [s for s in req.samples
                       if s.name == "strand_kafka_request_seconds_bucket"
                       and s.labels["api"] == "produce"]
    assert len(produce_buckets) >= 20 * 1, produce_buckets  # 19 bounds + Inf, per shard
    assert any(s.labels["le"] == "+Inf" and s.value > 0 for s in produce_buckets)
    assert total(after, "strand_kafka_request_seconds", "strand_kafka_request_seconds_count",
                 api="fetch") > 0
    for stage in ("queue_wait", "append", "flush", "network_write"):
        n = total(after, "strand_produce_stage_seconds", "strand_produce_stage_seconds_count",
                  stage=stage)
        assert n >= 1, (stage, n)  # acks=all: the producer waited for the flush
    stages = {s.labels["stage"] for s in after["strand_produce_stage_seconds"].samples}
    assert "replication" not in stages, "no replication stage until Raft exists"
    assert moved("strand_storage_flush_seconds", "strand_storage_flush_seconds_count") > 0
    assert moved("strand_storage_append_seconds", "strand_storage_append_seconds_count") > 0


def test_a_reopened_partition_counts_the_log_it_replays(strand):
    """A restart rebuilds each partition's producer state from its checkpoint (none yet:
    less than 16 MiB was written) and the log after it; the bytes read are counted."""
    b = strand()
    produce(b, "replayed", MESSAGES)
    assert b.stop() == 0
    b.restart()
    replayed = total(scrape(b), "strand_partition_state_replay_bytes",
                     "strand_partition_state_replay_bytes_total")
    assert replayed > 0


def test_health_gauges_single_node(broker, topic):
    produce(broker, topic, 1)
    m = scrape(broker)
    value = lambda name: total(m, name, name)  # noqa: E731
    assert value("strand_under_replicated_partitions") == 0
    assert value("strand_leaderless_partitions") == 0
    assert value("strand_active_controller_count") == 1
    assert value("strand_raft_fenced_groups") == 0


def test_group_lag_is_high_watermark_minus_committed(broker, topic):
    produce(broker, topic, 10)
    group = f"{topic}-lag"
    got, high = consume(broker, topic, group, 4, commit=True)
    assert high == 10 and got[3].offset() == 3
    m = scrape(broker)
    lag = [s for s in m["strand_consumer_group_lag"].samples
           if s.labels.get("group") == group]
    assert [(s.labels["topic"], s.labels["partition"], s.value) for s in lag] == \
        [(topic, "0", 6.0)]
    produce(broker, topic, 5)  # the high watermark moves, the commit does not
    wait_until(lambda: [s.value for s in scrape(broker)["strand_consumer_group_lag"].samples
                        if s.labels.get("group") == group] == [11.0], 10, "lag 11")


def test_health_endpoints(broker):
    for path, body in [("/v1/health/live", "live"), ("/v1/health/ready", "ready"),
                       ("/v1/health", "ready")]:
        status, text = admin(broker, path)
        assert (status, text.strip()) == (200, body), path
    assert admin(broker, "/v1/nope")[0] == 404


def test_status_reports_partitions_leaders_disk_and_config(broker, topic):
    produce(broker, topic, 3)
    status, text = admin(broker, "/v1/status")
    assert status == 200, text
    s = json.loads(text)
    assert s["node_id"] == 0 and s["cluster_id"]
    assert s["shard_count"] == 2 == len(s["shards"])
    rows = [p for sh in s["shards"] for p in sh["partitions"] if p["topic"] == topic]
    assert len(rows) == 1 and rows[0]["high_watermark"] == 3 and rows[0]["size_bytes"] > 0
    assert sum(sh["partition_count"] for sh in s["shards"]) == \
        sum(len(sh["partitions"]) for sh in s["shards"])
    leaders = [l for l in s["leaders"] if l["topic"] == topic]
    assert leaders == [{"topic": topic, "partition": 0, "leader": 0,
                        "shard": leaders[0]["shard"]}]
    disk = s["disk"]
    assert disk["partitions_bytes_total"] >= rows[0]["size_bytes"]
    assert disk["filesystem"]["available_bytes"] > 0
    assert disk["filesystem"]["total_bytes"] >= disk["filesystem"]["available_bytes"]
    cfg = s["config"]
    assert Path(cfg["data_dir"]) == Path(broker.data_dir)
    assert cfg["kafka_addr"] == broker.bootstrap
    assert cfg["smp"] == 2 and cfg["log_format"] == "text"
    assert s["health"] == {"live": True, "ready": True, "under_replicated_partitions": 0,
                           "leaderless_partitions": 0, "fenced_raft_groups": 0,
                           "active_controller_count": 1}


def _bad_frame(broker):
    """A request length past the limit: the broker closes the connection and logs it at
    debug level ("request length outside limits")."""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
        s.sendall(b"\x7f\xff\xff\xff")
        s.settimeout(5)
        try:
            s.recv(1)
        except OSError:
            pass


def test_changing_the_log_level_needs_the_admin_token(broker):
    """PUT /v1/log-level (the admin API's one change) is refused 401 without the bearer
    token the broker wrote, private to its user, in its data directory; reading is open."""
    import stat
    mode = stat.S_IMODE((broker.data_dir / "admin-token").stat().st_mode)
    assert mode == 0o600, oct(mode)
    assert len(admin_token(broker)) == 64
    before = json.loads(admin(broker, "/v1/log-level")[1])
    for token in ("", "0" * 64, admin_token(broker)[:-1]):
        status, text = admin(broker, "/v1/log-level", "PUT", b"strand=debug", token=token)
        assert status == 401 and "Authorization: Bearer" in text, (status, text)
    assert json.loads(admin(broker, "/v1/log-level")[1]) == before, "nothing changed"


def test_log_level_changes_at_runtime(broker):
    marker = b"request length outside limits"
    log = lambda: broker.stderr_path.read_bytes()  # noqa: E731
    _bad_frame(broker)
    assert marker not in log(), "debug lines are off at the default level"
    status, text = admin(broker, "/v1/log-level", "PUT", b"strand=debug,info")
    assert status == 200 and json.loads(text) == {"log_level": "strand=debug,info"}, text
    assert json.loads(admin(broker, "/v1/log-level")[1]) == {"log_level": "strand=debug,info"}
    try:
        _bad_frame(broker)
        wait_until(lambda: marker in log(), 10, "the debug line after the level change")
        status, text = admin(broker, "/v1/log-level", "PUT", b"strand=loudest")
        assert status == 400 and "invalid log filter" in text, text
    finally:
        assert admin(broker, "/v1/log-level", "PUT", b"info")[0] == 200
    n = log().count(marker)
    _bad_frame(broker)
    wait_until(lambda: b"log level changed" in log(), 10, "the change logged")
    assert log().count(marker) == n, "back at info, debug lines stop"


# -- strand --check -------------------------------------------------------------------------

def run_check(data_dir, *extra, kafka_port: int | None = None) -> subprocess.CompletedProcess:
    args = [str(strand_bin()), "--check", "--data-dir", str(data_dir),
            "--kafka-addr", f"127.0.0.1:{kafka_port or free_port()}",
            "--admin-addr", f"127.0.0.1:{free_port()}", "--smp", "1", *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def test_check_passes_on_a_good_data_dir(tmp_path):
    r = run_check(tmp_path / "data")
    assert r.returncode == 0, r.stdout + r.stderr
    for check in ("data directory", "O_DIRECT", "locked memory", "io_uring", "listen addresses"):
        assert f"ok    {check}:" in r.stdout, r.stdout
    assert "all checks passed" in r.stdout


def test_check_reports_a_data_dir_that_is_a_file(tmp_path):
    f = tmp_path / "not-a-dir"
    f.write_text("x")
    r = run_check(f)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL  data directory: cannot create data directory" in r.stdout, r.stdout
    assert "fix: point --data-dir" in r.stdout, r.stdout
    assert "ok    listen addresses" in r.stdout, "later checks still run"


def test_check_reports_tmpfs_without_buffered_io(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm tmpfs on this machine")
    d = Path(tempfile.mkdtemp(dir=shm))
    try:
        r = run_check(d)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "FAIL  O_DIRECT:" in r.stdout and "--allow-buffered-io" in r.stdout, r.stdout
        r = run_check(d, "--allow-buffered-io", "true")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "warn  O_DIRECT:" in r.stdout, r.stdout
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_check_reports_a_port_in_use(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)  # room for every probe connection: a full backlog drops SYNs, like no listener
    try:
        r = run_check(tmp_path / "data", kafka_port=s.getsockname()[1])
        assert r.returncode == 1, r.stdout + r.stderr
        assert "FAIL  listen addresses" in r.stdout and "--kafka-addr" in r.stdout, r.stdout
    finally:
        s.close()


def test_json_log_format(strand):
    b = strand(extra_args=["--log-format", "json", "--log-level", "info"])
    wait_until(lambda: b"strand starting" in b.stderr_path.read_bytes(), 10, "the start line")
    lines = [l for l in b.stderr_path.read_text().splitlines() if l.strip()]
    events = [json.loads(l) for l in lines]  # every line is one JSON object
    start = [e for e in events if e.get("fields", {}).get("message") == "strand starting"]
    assert start and start[0]["level"] == "INFO" and start[0]["fields"]["shards"] == 2, start


def test_grafana_dashboard_uses_only_exported_metrics(broker, topic):
    import re

    from strand_harness import REPO_ROOT

    produce(broker, topic, 1)  # so every request/lag family has samples to look at
    dash = json.loads((REPO_ROOT / "deploy" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    names = {n for e in exprs for n in re.findall(r"\bstrand_[a-z_]+", e)}
    families = scrape(broker)
    for n in sorted(names):
        base = re.sub(r"_(bucket|total|sum|count)$", "", n)
        assert n in families or base in families, \
            f"dashboard uses {n}, which /metrics does not export"
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for topic_ in ("p99 by api", "stage", "throughput", "fdatasync", "hit ratio",
                   "backpressure", "lag", "under-replicated", "leaderless", "controllers",
                   "fenced"):
        assert topic_ in titles, topic_
