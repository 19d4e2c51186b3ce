"""A Kafka Connect 4.x distributed worker (`ConnectDistributed`) against strand (log
compaction, issue 21). The worker creates its config, offset and status topics compacted
(replication factor 1; `segment.ms` 500, so that strand compacts them as the test goes) and
keeps its state in them. A FileStreamSource -> topic -> FileStreamSink pipeline, POSTed over
the worker's REST API, carries lines appended before and after a restart of the worker and a
kill -9 and restart of the broker. Every source line must reach the sink file (at least
once), `GET /connectors` must list both connectors, and the source's committed offset
(`GET /connectors/<name>/offsets`) must reach the end of the source file."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from strand_harness import free_port, java_classpath, need_module, tail, wait_until

pytestmark = pytest.mark.apps

CLEANER_ARGS = ["--log-cleaner-backoff-ms", "200"]
WORKER_START_S = 60.0
WORKER_STOP_S = 30.0


class Worker:
    """One `ConnectDistributed` JVM; stdout and stderr (slf4j-simple at WARN) go to a file
    per start under `root`."""

    def __init__(self, java: str, cp: str, root: Path, props: Path, port: int):
        self.java, self.cp, self.root, self.props, self.port = java, cp, root, props, port
        self.proc: subprocess.Popen | None = None
        self.logs: list[Path] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Worker":
        log = self.root / f"worker-{len(self.logs)}.log"
        self.logs.append(log)
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [self.java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Xmx512m",
                 "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                 "-Dorg.slf4j.simpleLogger.showDateTime=true",
                 "-cp", self.cp, "org.apache.kafka.connect.cli.ConnectDistributed",
                 str(self.props)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=self.root)
        wait_until(lambda: self._alive() and self.get("/connectors") is not None,
                   WORKER_START_S, f"the Connect worker's REST API on {self.url}", 0.2)
        return self

    def _alive(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise AssertionError(f"the Connect worker exited:\n{self.log_tails()}")
        return True

    def stop(self):
        """SIGTERM (the worker leaves its group and stops its tasks) and wait."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=WORKER_STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            raise AssertionError(f"the Connect worker did not stop within {WORKER_STOP_S}s of "
                                 f"SIGTERM:\n{self.log_tails()}") from None
        # The JVM exits 143 (128 + SIGTERM) after its shutdown hook ran.
        assert rc in (0, 143), f"the Connect worker exited with {rc}:\n{self.log_tails()}"

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def request(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")

    def get(self, path: str):
        """The JSON of a 200 answer, None for no answer or another status."""
        try:
            status, body = self.request("GET", path)
        except (OSError, urllib.error.HTTPError):
            return None
        return body if status == 200 else None

    def log_tails(self, lines: int = 80) -> str:
        return "\n".join(f"--- {p} (last {lines} lines) ---\n{tail(p, lines)}" for p in self.logs)


@pytest.fixture
def workers():
    """Connect workers made by the test, killed at teardown if still running."""
    made: list[Worker] = []
    yield made
    for w in made:
        w.kill()


@contextlib.contextmanager
def logs_on_failure(worker: Worker):
    """Adds the worker's logs to an exception raised inside."""
    try:
        yield
    except Exception as e:
        e.add_note(worker.log_tails())
        raise


def append(path: Path, lines: range):
    with open(path, "a") as f:
        f.writelines(f"line-{i}\n" for i in lines)
        f.flush()
        os.fsync(f.fileno())


def sink_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


def compacted(ck, bootstrap: str, topic: str) -> bool:
    """Whether the cleaner removed records of `topic`: it holds fewer records than its
    partitions' end offsets add up to."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "strand-tests-unused",
                     "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        end = sum(c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
                  for p in parts)
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in parts])
        at_end, n = set(), 0
        deadline = time.monotonic() + 20
        while len(at_end) < len(parts):
            assert time.monotonic() < deadline, f"no end of {topic} within 20s"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                at_end.add(m.partition())
                continue
            n += 1
        return n < end
    finally:
        c.close()


def test_connect_file_pipeline_survives_worker_and_broker_restarts(strand, workers, tmp_path):
    ck = need_module("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    java, cp = java_classpath("java4.1-apps", None)
    broker = strand(name="c", extra_args=CLEANER_ARGS)
    run = uuid.uuid4().hex[:8]
    storage = {"config": f"connect-configs-{run}", "offset": f"connect-offsets-{run}",
               "status": f"connect-status-{run}"}
    topic = f"connect-lines-{run}"
    source, sink = tmp_path / "source.txt", tmp_path / "sink.txt"
    source.touch()
    props = tmp_path / "worker.properties"
    port = free_port()
    props.write_text("\n".join([
        f"bootstrap.servers={broker.bootstrap}",
        f"group.id=connect-{run}",
        "key.converter=org.apache.kafka.connect.storage.StringConverter",
        "value.converter=org.apache.kafka.connect.storage.StringConverter",
        *(f"{k}.storage.topic={t}" for k, t in storage.items()),
        *(f"{k}.storage.replication.factor=1" for k in storage),
        # Topic configs of the storage topics (KIP-605): their segments roll every 500 ms,
        # so strand compacts them while the test runs, and the restarted worker reads them
        # compacted.
        *(f"{k}.storage.segment.ms=500" for k in storage),
        "offset.flush.interval.ms=500",
        f"listeners=http://127.0.0.1:{port}",
        "rest.advertised.host.name=127.0.0.1",
        # The file connectors are on the class path (connect-file): scan it, no plugin.path.
        "plugin.discovery=only_scan",
    ]) + "\n")
    worker = Worker(java, cp, tmp_path, props, port)
    workers.append(worker)

    connectors = {
        "file-source": {"connector.class": "FileStreamSource", "file": str(source),
                        "topic": topic, "tasks.max": "1"},
        "file-sink": {"connector.class": "FileStreamSink", "file": str(sink),
                      "topics": topic, "tasks.max": "1"},
    }
    written = range(0)

    def write(lines: range):
        nonlocal written
        append(source, lines)
        written = range(0, lines.stop)

    def all_in_sink(timeout_s: float, when: str):
        """Waits until every line written so far is in the sink (at least once), and
        checks that the sink holds no other line."""
        want = {f"line-{i}" for i in written}
        missing = set(want)

        def done():
            worker._alive()
            got = set(sink_lines(sink))
            assert not got - want, f"the sink has lines never written: {sorted(got - want)[:10]}"
            missing.clear()
            missing.update(want - got)
            return not missing

        try:
            wait_until(done, timeout_s, f"the {len(want)} source lines in the sink {when}", 0.2)
        except TimeoutError as e:
            raise AssertionError(f"{e}; missing {len(missing)}: {sorted(missing)[:20]}") from None

    def running():
        st = worker.get("/connectors?expand=status") or {}
        return all(st.get(n, {}).get("status", {}).get("connector", {}).get("state") == "RUNNING"
                   and [t["state"] for t in st[n]["status"]["tasks"]] == ["RUNNING"]
                   for n in connectors)

    with logs_on_failure(worker):
        t0 = time.monotonic()
        write(range(0, 20))
        worker.start()
        print(f"worker up in {time.monotonic() - t0:.1f}s")
        for name, config in connectors.items():
            status, body = worker.request("POST", "/connectors", {"name": name, "config": config})
            assert status == 201 and body["name"] == name, (status, body)
        wait_until(running, 30, "both connectors and their tasks RUNNING", 0.2)
        all_in_sink(30, "at first")
        write(range(20, 40))
        all_in_sink(30, "after the first append")

        # The storage topics, created by the worker: compacted, with Connect's partition counts.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        meta = admin.list_topics(timeout=10)
        for kind, name in storage.items():
            r = ConfigResource(ResourceType.TOPIC, name)
            configs = admin.describe_configs([r])[r].result(15)
            assert configs["cleanup.policy"].value == "compact", (name, configs["cleanup.policy"])
            assert len(meta.topics[name].partitions) == {"config": 1, "offset": 25, "status": 5}[kind]

        # The source's two offset commits (one per append) got compacted to its latest.
        wait_until(lambda: compacted(ck, broker.bootstrap, storage["offset"]), 30,
                   f"{storage['offset']} to be compacted", 0.3)

        # Restart the worker; lines written while it is down are read from the stored offset.
        worker.stop()
        write(range(40, 60))
        t1 = time.monotonic()
        worker.start()
        wait_until(running, 60, "both connectors RUNNING after the worker restart", 0.2)
        print(f"worker restarted, connectors running in {time.monotonic() - t1:.1f}s")
        all_in_sink(30, "after the worker restart")
        # The status topic (a record per state change of a connector or task, the restart
        # wrote them again) got compacted too.
        wait_until(lambda: compacted(ck, broker.bootstrap, storage["status"]), 30,
                   f"{storage['status']} to be compacted", 0.3)

        # kill -9 the broker and restart it; the worker reconnects.
        broker.kill9_and_restart()
        t2 = time.monotonic()
        write(range(60, 80))
        all_in_sink(60, "after the broker's kill -9 and restart")
        print(f"lines through after the broker restart in {time.monotonic() - t2:.1f}s")

        status, names = worker.request("GET", "/connectors")
        assert status == 200 and sorted(names) == sorted(connectors), names
        wait_until(running, 30, "both connectors RUNNING after the broker restart", 0.2)
        size = source.stat().st_size
        offsets = {}

        def source_offset_at_end():
            offsets.update(worker.get("/connectors/file-source/offsets") or {})
            return offsets.get("offsets") == [{"partition": {"filename": str(source)},
                                                "offset": {"position": size}}]

        wait_until(source_offset_at_end, 30,
                   f"the source's committed offset to be the file size {size} (last: {offsets})", 0.3)
        worker.stop()
        print(f"total {time.monotonic() - t0:.1f}s; sink lines {len(sink_lines(sink))} "
              f"for {len(written)} written")
