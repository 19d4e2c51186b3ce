"""Starts and stops the real `strand` binary for the Kafka client tests.

Every wait here has a deadline (STYLE.md section 9): nothing sleeps for a fixed time and
hopes. A broker's stderr goes to a file whose tail is attached to a failing test's report.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TARGET_DIR = REPO_ROOT / "target"
# Data dirs live under target/, not /tmp: /tmp may be tmpfs and strand needs O_DIRECT.
KAFKA_TESTS_DIR = TARGET_DIR / "kafka-tests"
RUN_ROOT = KAFKA_TESTS_DIR / "runs"

START_DEADLINE_S = 30.0
STOP_DEADLINE_S = 20.0


def strand_bin() -> Path:
    p = Path(os.environ.get("STRAND_BIN", "target/debug/strand"))
    return p if p.is_absolute() else REPO_ROOT / p


_FLAGS_CACHE: dict[tuple[str, float], str] = {}


def supports_flag(binary: Path, flag: str) -> bool:
    """Whether `strand --help` lists `flag` (the suite runs against older binaries too)."""
    key = (str(binary), binary.stat().st_mtime)
    if key not in _FLAGS_CACHE:
        r = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=30,
                           env=_child_env())
        _FLAGS_CACHE[key] = r.stdout
    return flag in _FLAGS_CACHE[key]


def require_clients() -> bool:
    return os.environ.get("STRAND_REQUIRE_CLIENTS", "") not in ("", "0")


# Ports a broker binds when not told otherwise: the Raft RPC listener (33145 plus one per
# shard, bound by every single-node broker of the tests) lies inside Linux's ephemeral
# range, so a port the kernel hands out may be one of them.
BROKER_DEFAULT_PORTS = (range(9092, 9100), range(9644, 9645), range(33145, 33145 + 64))


# Ports handed to brokers come from below Linux's ephemeral range: a port taken there
# with bind(port 0) and released could be taken again by any connection's local end (a
# client's, or another test process's free port) before the broker binds it. Each test
# process (pytest-xdist worker gwN, or a process of its own) draws from its own slice.
_OWN_PORTS_LOW = 10000
_OWN_PORTS_SLICE = 2000


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _own_port_slice() -> range:
    slices = max(1, (_ephemeral_low() - _OWN_PORTS_LOW) // _OWN_PORTS_SLICE)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit() and int(worker[2:]) < slices // 2:
        index = int(worker[2:])
    else:
        # Processes outside pytest-xdist share the upper half of the slices by pid.
        index = slices // 2 + os.getpid() % max(1, slices - slices // 2)
    low = _OWN_PORTS_LOW + index * _OWN_PORTS_SLICE
    return range(low, low + _OWN_PORTS_SLICE)


_own_ports = _own_port_slice()
_next_own_port = _own_ports.start


def free_port() -> int:
    """A loopback port nobody listens on right now, below the ephemeral range (from this
    process's slice, in turn), and none a broker binds by default."""
    global _next_own_port
    for _ in range(len(_own_ports)):
        port = _next_own_port
        _next_own_port = port + 1 if port + 1 < _own_ports.stop else _own_ports.start
        if any(port in r for r in BROKER_DEFAULT_PORTS):
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {_own_ports}")


def read_partition(ck, bootstrap: str, topic: str, partition: int = 0, start: int = 0,
                   timeout_s: float = 20.0, isolation: str = "read_committed",
                   ) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of one partition from offset `start` to its end, with confluent-kafka
    (`ck`) at `isolation` (librdkafka's default, read_committed, unless told):
    [(offset, key, value)]. Fails on a fetch error or when the end is not reached in
    `timeout_s`."""
    # An out-of-range fetch fails the read instead of jumping to the end.
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "strand-tests-unused",
                     "enable.auto.commit": False, "enable.partition.eof": True,
                     "auto.offset.reset": "error", "isolation.level": isolation})
    c.assign([ck.TopicPartition(topic, partition, start)])
    out = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                return out
            out.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    raise AssertionError(f"no end of {topic}-{partition} via {bootstrap} within {timeout_s}s; "
                         f"read {len(out)}: {out[-3:]}")


def admin_outcomes(ck, futures, done: str, timeout: float = 30) -> list:
    """Each confluent-kafka admin future's outcome, in order: `done`, or the Kafka error
    code it failed with (for requests raced against each other)."""
    out = []
    for f in futures:
        try:
            f.result(timeout)
            out.append(done)
        except ck.KafkaException as e:
            out.append(e.args[0].code())
    return out


def wait_until(cond, timeout: float, what: str, interval: float = 0.02):
    """Polls `cond()` until it returns a truthy value or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - reported below if the deadline passes
            last_exc = e
        if time.monotonic() >= deadline:
            extra = f" (last error: {last_exc!r})" if last_exc else ""
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}{extra}")
        time.sleep(interval)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def wait_exit(proc: subprocess.Popen | None, name: str, stderr_path: Path,
              deadline_s: float = STOP_DEADLINE_S) -> int:
    """Waits for a signalled process; returns its exit code. A hang past the deadline is
    killed and reported as an error with the tail of its log."""
    if proc is None:
        return 0
    try:
        return proc.wait(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        raise AssertionError(f"{name} did not exit within {deadline_s}s of SIGTERM:\n"
                             f"{tail(stderr_path)}") from None


def kill9_process(proc: subprocess.Popen | None):
    """SIGKILL: no shutdown path runs, unsynced state is lost."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=STOP_DEADLINE_S)


# Log lines every start or roll writes, once per partition or segment: left out of the
# tails printed for a failure, where they pushed out the lines that explain it.
_ROUTINE = ("partition log opened", "segment rolled")


def tail(path: Path, lines: int = 60) -> str:
    """The last `lines` lines of a broker log that are not `_ROUTINE`."""
    try:
        data = path.read_bytes()
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    text = _ANSI.sub("", data[-256 * 1024 :].decode("utf-8", "replace"))
    kept = [line for line in text.splitlines() if not any(r in line for r in _ROUTINE)]
    left_out = len(text.splitlines()) - len(kept)
    note = [f"({left_out} routine lines left out: {', '.join(_ROUTINE)})"] if left_out else []
    return "\n".join(note + kept[-lines:])


def _child_env() -> dict:
    # STRAND_* variables are broker configuration (clap `env`): a stray one in the
    # caller's environment must not change the broker under test. STRAND_LOG is kept.
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRAND_")}
    if "STRAND_LOG" in os.environ:
        env["STRAND_LOG"] = os.environ["STRAND_LOG"]
    env["NO_COLOR"] = "1"
    return env


class Broker:
    """One `strand` process on 127.0.0.1 with its own data dir under target/kafka-tests."""

    _seq = 0

    def __init__(self, name: str = "broker", smp: int = 2, num_partitions: int = 1,
                 auto_create_topics: bool = True, extra_args: list[str] | None = None,
                 extra_listeners: list[str] | None = None):
        """`extra_listeners`: more Kafka listeners (`SASL_SSL://127.0.0.1:PORT`) beside the
        PLAINTEXT one on `port`, which the harness and most helpers use."""
        Broker._seq += 1
        self.name = name
        self.root = RUN_ROOT / f"{os.getpid()}-{Broker._seq}-{name}"
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        self.data_dir = self.root / "data"
        self.smp = smp
        self.num_partitions = num_partitions
        self.auto_create_topics = auto_create_topics
        self.extra_args = list(extra_args or [])
        self.extra_listeners = list(extra_listeners or [])
        self.port: int | None = None
        self.admin_port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.stderr_path = self.root / "stderr-0.log"
        self.stderr_paths: list[Path] = []

    # -- life cycle -------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, port: int | None = None, deadline_s: float = START_DEADLINE_S) -> "Broker":
        """Starts the broker and waits (with a deadline) until it accepts connections.

        `port=None` picks a free ephemeral port; a race with another process for it is
        retried on a new port. A shard panic during start-up fails at once (StartupPanic)
        instead of waiting for the deadline."""
        binary = strand_bin()
        if not binary.exists():
            raise FileNotFoundError(
                f"strand binary not found at {binary}: build it with "
                "`cargo build -p strand-broker -j 1` or set STRAND_BIN")
        attempts = 3
        for attempt in range(attempts):
            p = port if port is not None else free_port()
            try:
                self._spawn(binary, p, deadline_s)
                return self
            except _PortTaken:
                if port is not None or attempt + 1 == attempts:
                    raise
        raise AssertionError("unreachable")

    def _spawn(self, binary: Path, port: int, deadline_s: float):
        self.stderr_path = self.root / f"stderr-{self.starts}.log"
        self.stderr_paths.append(self.stderr_path)
        self.starts += 1
        args = [
            str(binary),
            "--data-dir", str(self.data_dir),
        ]
        if self.extra_listeners:
            listeners = [f"PLAINTEXT://127.0.0.1:{port}"] + self.extra_listeners
            args += ["--listeners", ",".join(listeners)]
        else:
            args += ["--kafka-addr", f"127.0.0.1:{port}"]
        args += [
            "--smp", str(self.smp),
            "--num-partitions", str(self.num_partitions),
            "--auto-create-topics", "true" if self.auto_create_topics else "false",
        ]
        if supports_flag(binary, "--admin-addr"):
            # The admin HTTP listener defaults to a fixed port (9644): give every broker
            # its own so that brokers of one run (and of other runs) can coexist.
            self.admin_port = free_port()
            args += ["--admin-addr", f"127.0.0.1:{self.admin_port}"]
        if supports_flag(binary, "--native-addr"):
            # Likewise the native listeners (9093, 9094 + shard): a free handshake port,
            # kept across restarts, and ephemeral shard ports announced by the handshake.
            if getattr(self, "native_port", None) is None:
                self.native_port = free_port()
            args += ["--native-addr", f"127.0.0.1:{self.native_port}",
                     "--native-shard-base-port", "0"]
        args += self.extra_args
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                         stdout=err, stderr=err, env=_child_env(),
                                         cwd=self.root)
        self.port = port
        deadline = time.monotonic() + deadline_s
        while True:
            rc = self.proc.poll()
            if rc is not None:
                log = tail(self.stderr_path)
                self.proc = None
                if "Address already in use" in log:
                    raise _PortTaken(log)
                raise BrokerStartError(
                    f"strand exited with {rc} during start-up on port {port}:\n{log}")
            if b"panicked at" in self.stderr_path.read_bytes():
                self.kill9()
                raise StartupPanic(tail(self.stderr_path, 200))
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                    # Accepting is not enough: a request must be answered.
                    s.settimeout(5)
                    api_versions_v0(s)
                if self.admin_port is not None:
                    # The admin listener binds on its own shard task, possibly after the
                    # Kafka one answers: a scrape right after start found it refused on a
                    # loaded machine.
                    socket.create_connection(("127.0.0.1", self.admin_port), timeout=0.5).close()
                if b"panicked at" in self.stderr_path.read_bytes():
                    self.kill9()
                    raise StartupPanic(tail(self.stderr_path, 200))
                return
            except (OSError, ConnectionError):
                pass
            if time.monotonic() >= deadline:
                self.kill9()
                raise BrokerStartError(
                    f"strand did not accept connections on {port} within {deadline_s}s:\n"
                    f"{tail(self.stderr_path)}")
            time.sleep(0.02)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, deadline_s: float = STOP_DEADLINE_S) -> int:
        """SIGTERM and wait; returns the exit code (a hang past the deadline is killed and
        reported as an error)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        proc, self.proc = self.proc, None
        return wait_exit(proc, "strand", self.stderr_path, deadline_s)

    def kill9(self):
        """SIGKILL: no shutdown path runs, unsynced state is lost."""
        proc, self.proc = self.proc, None
        kill9_process(proc)

    def restart(self, same_port: bool = True, deadline_s: float = START_DEADLINE_S) -> "Broker":
        """Starts again on the same data dir (after kill9() or stop())."""
        assert not self.running(), "restart() needs the broker stopped first"
        return self.start(port=self.port if same_port else None, deadline_s=deadline_s)

    def kill9_and_restart(self, same_port: bool = True) -> "Broker":
        self.kill9()
        return self.restart(same_port=same_port)

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tails(self, lines: int = 60) -> str:
        parts = []
        for p in self.stderr_paths:
            parts.append(f"--- {p} (last {lines} lines) ---\n{tail(p, lines)}")
        return "\n".join(parts)


class BrokerStartError(RuntimeError):
    pass


class _PortTaken(BrokerStartError):
    pass


class StartupPanic(BrokerStartError):
    """A shard panicked before the broker was ready."""

    def first_line(self) -> str:
        for line in str(self).splitlines():
            if "panicked at" in line or "called `Result::unwrap()`" in line:
                return line.strip()
        return str(self).splitlines()[0] if str(self) else ""


# -- raw Kafka protocol helpers (for the bad-input tests) -------------------------------

def frame(api_key: int, version: int, correlation_id: int, body: bytes = b"",
          client_id: bytes | None = b"strand-tests", flexible: bool = False) -> bytes:
    """A request frame: length prefix, header v1 (v2 with `flexible`), body."""
    if client_id is None:
        cid = struct.pack(">h", -1)
    else:
        cid = struct.pack(">h", len(client_id)) + client_id
    header = struct.pack(">hhi", api_key, version, correlation_id) + cid
    if flexible:
        header += b"\x00"  # empty tagged fields
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def recv_response(sock: socket.socket) -> bytes:
    (n,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, n)


def stored_batches(bootstrap: str, topic: str, offset: int = 0,
                   max_bytes: int = 1 << 20) -> list[tuple[int, int]]:
    """(base offset, attributes) of each whole batch a raw Fetch v4 (read_uncommitted,
    partition 0) returns from `offset`: the batches as stored, control batches included."""
    name = topic.encode()
    body = struct.pack(">iiiib", -1, 1000, 1, max_bytes, 0)
    body += struct.pack(">ih", 1, len(name)) + name
    body += struct.pack(">iiqi", 1, 0, offset, max_bytes)
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(frame(1, 4, 11, body))
        resp = recv_response(s)
    at = 4 + 4  # correlation id, throttle time
    (topics,) = struct.unpack_from(">i", resp, at)
    assert topics == 1
    (n,) = struct.unpack_from(">h", resp, at + 4)
    at += 4 + 2 + n
    (parts, _, error, _, _, aborted) = struct.unpack_from(">iihqqi", resp, at)
    assert (parts, error) == (1, 0), (parts, error)
    at += 4 + 4 + 2 + 8 + 8 + 4 + max(aborted, 0) * 16
    (size,) = struct.unpack_from(">i", resp, at)
    records = resp[at + 4: at + 4 + size]
    out, at = [], 0
    while at + 61 <= len(records):
        base, length = struct.unpack_from(">qi", records, at)
        if at + 12 + length > len(records):
            break
        (attributes,) = struct.unpack_from(">h", records, at + 21)
        out.append((base, attributes))
        at += 12 + length
    return out


def _kstr(v: str | None) -> bytes:
    if v is None:
        return struct.pack(">h", -1)
    b = v.encode()
    return struct.pack(">h", len(b)) + b


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, fmt: str):
        out = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return out if len(out) > 1 else out[0]

    def string(self):
        n = self.take(">h")
        if n < 0:
            return None
        v = self.data[self.at:self.at + n].decode()
        self.at += n
        return v


def _ask(bootstrap: str, api_key: int, version: int, body: bytes) -> _Reader:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frame(api_key, version, 21, body))
        r = _Reader(recv_response(sock))
    assert r.take(">i") == 21
    return r


def alter_default(bootstrap: str, *changes) -> tuple[int, str | None]:
    """IncrementalAlterConfigs v0 of the cluster default (the empty BROKER resource name,
    `kafka-configs.sh --entity-default`), on the wire: confluent-kafka and kafka-python
    refuse an empty broker name. `changes` are (name, SET|DELETE|APPEND|SUBTRACT, value).
    Returns (error code, message)."""
    body = struct.pack(">i", 1) + struct.pack(">b", 4) + _kstr("")
    body += struct.pack(">i", len(changes))
    for name, op, value in changes:
        body += _kstr(name) + struct.pack(">b", ["SET", "DELETE", "APPEND", "SUBTRACT"].index(op))
        body += _kstr(value)
    body += struct.pack(">?", False)
    r = _ask(bootstrap, 44, 0, body)
    r.take(">i")  # throttle
    assert r.take(">i") == 1
    code, message = r.take(">h"), r.string()
    assert (r.take(">b"), r.string()) == (4, "")
    return code, message


def describe_default(bootstrap: str) -> dict:
    """The cluster default's configs (name → (value, source)), DescribeConfigs v1."""
    body = struct.pack(">i", 1) + struct.pack(">b", 4) + _kstr("") + struct.pack(">i", -1)
    body += struct.pack(">?", False)
    r = _ask(bootstrap, 32, 1, body)
    r.take(">i")  # throttle
    assert r.take(">i") == 1
    code, _ = r.take(">h"), r.string()
    assert code == 0, code
    r.take(">b"), r.string()
    out = {}
    for _ in range(r.take(">i")):
        name, value = r.string(), r.string()
        _, source, _ = r.take(">?b?")
        assert r.take(">i") == 0  # synonyms
        out[name] = (value, source)
    return out


def closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True when the peer closes (EOF or reset) within `timeout`; False if data arrives or
    the connection stays open."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(4096)
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return data == b""


def api_versions_v0(sock: socket.socket, correlation_id: int = 7) -> tuple[int, list]:
    """Sends ApiVersions v0 and returns (error_code, [(api, min, max), ...])."""
    sock.sendall(frame(18, 0, correlation_id))
    resp = recv_response(sock)
    return parse_api_versions_v0(resp, correlation_id)


def parse_api_versions_v0(resp: bytes, correlation_id: int) -> tuple[int, list]:
    (corr,) = struct.unpack_from(">i", resp, 0)
    assert corr == correlation_id, f"correlation id {corr} != {correlation_id}"
    err, n = struct.unpack_from(">hi", resp, 4)
    off = 10
    ranges = []
    for _ in range(n):
        ranges.append(struct.unpack_from(">hhh", resp, off))
        off += 6
    assert off == len(resp), f"{len(resp) - off} trailing bytes after a v0 ApiVersions body"
    return err, ranges


# -- clients that may be missing --------------------------------------------------------

def _skip_or_fail(reason: str):
    if require_clients():
        pytest.fail(f"{reason} (STRAND_REQUIRE_CLIENTS=1: a missing client is a failure)",
                    pytrace=False)
    print(f"SKIP: {reason}")
    pytest.skip(reason)


def need_module(name: str, why: str = ""):
    """Imports a Python client or skips/fails the test."""
    try:
        mod = importlib.import_module(name)
    except ImportError as e:
        _skip_or_fail(f"python package {name!r} is not installed ({e}){why}")
    if name == "kafka":
        _finish_pending_joins(mod)
    return mod


def _finish_pending_joins(kafka) -> None:
    """Works around a kafka-python 3.0.x client bug so a group test tests the broker.

    `poll(timeout_ms=N)` leaves a JoinGroup+SyncGroup task in flight when N runs out, and
    the next poll re-awaits it only while `need_rejoin()` is true. A rejoin started because
    the member's metadata snapshot changed (not because the broker said so) stops being
    needed the moment the leader computes the assignment, so a task that outlives the poll
    is never collected: the member never takes its assignment, its heartbeats stay off and
    the broker expires it (seen in CI: "Elected group leader", then nothing for 30 s, then
    UNKNOWN_MEMBER_ID at LeaveGroup). The Java client rejoins while a join is needed *or
    pending* (`AbstractCoordinator.rejoinNeededOrPending`); this makes kafka-python do so."""
    from kafka.coordinator.base import BaseCoordinator  # noqa: PLC0415 - after the import
    need_rejoin = kafka.coordinator.consumer.ConsumerCoordinator.need_rejoin
    if getattr(need_rejoin, "strand_pending_joins", False) or not hasattr(
            BaseCoordinator, "join_group_async"):
        return

    def rejoin_needed_or_pending(self):
        return need_rejoin(self) or getattr(self, "_join_task", None) is not None

    rejoin_needed_or_pending.strand_pending_joins = True
    kafka.coordinator.consumer.ConsumerCoordinator.need_rejoin = rejoin_needed_or_pending


def need(condition: bool, reason: str):
    if not condition:
        _skip_or_fail(reason)



def produce_one_error(producer, topic: str, timeout_s: float = 20, **kwargs):
    """Produces one record with a confluent-kafka producer and returns its delivery error
    (None when delivered). librdkafka raises at once instead when an error for the topic
    (e.g. an authorization failure) already came in its metadata: that counts too."""
    import confluent_kafka as ck
    errors = []
    try:
        producer.produce(topic, b"x", on_delivery=lambda e, m: errors.append(e), **kwargs)
        producer.flush(timeout_s)
    except ck.KafkaException as e:
        errors.append(e.args[0])
    assert errors, f"no delivery report within {timeout_s} s"
    return errors[0]


# -- a small disk to fill ---------------------------------------------------------------------

def _run_quietly(*cmd: str) -> str | None:
    """None when `cmd` succeeded, else why not."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{cmd[0]}: {e}"
    return None if r.returncode == 0 else f"{' '.join(cmd)}: {r.stderr.strip()}"


@contextlib.contextmanager
def loop_mounted_disk(name: str, size_bytes: int):
    """An ext4 file system of `size_bytes` on a loop-mounted image under RUN_ROOT (no root
    reserve: full is full); yields its mount point, unmounted and removed after. Needs
    root, mkfs.ext4 and loop devices: skipped otherwise, failed when
    STRAND_REQUIRE_ROOT_TESTS=1 (CI)."""
    why = None
    if os.geteuid() != 0:
        why = "needs root to loop-mount an ext4 image"
    elif shutil.which("mkfs.ext4") is None or shutil.which("mount") is None:
        why = "needs mkfs.ext4 and mount (apt: e2fsprogs, mount)"
    root = RUN_ROOT / f"{os.getpid()}-{name}-{os.urandom(4).hex()}"
    image, point = root / "image.ext4", root / "mnt"
    if why is None:
        point.mkdir(parents=True)
        with open(image, "wb") as f:
            f.truncate(size_bytes)
        why = _run_quietly("mkfs.ext4", "-q", "-F", "-m", "0", "-b", "4096", str(image)) \
            or _run_quietly("mount", "-o", "loop", str(image), str(point))
    if why is not None:
        shutil.rmtree(root, ignore_errors=True)
        if os.environ.get("STRAND_REQUIRE_ROOT_TESTS") == "1":
            pytest.fail(f"{why} (and STRAND_REQUIRE_ROOT_TESTS=1)", pytrace=False)
        pytest.skip(why)
    try:
        yield point
    finally:
        if _run_quietly("umount", str(point)) is not None:
            # Busy (a process still holds a file): detach now, released at its last close.
            _run_quietly("umount", "-l", str(point))
        shutil.rmtree(root, ignore_errors=True)


def write_filler(path: Path, size_bytes: int):
    """A file of `size_bytes`, synced: deleting it (`free_filler`) is "space returns"."""
    path.write_bytes(b"\x5a" * size_bytes)
    os.sync()


def free_filler(path: Path):
    path.unlink()
    os.sync()


# -- the Apache Kafka Java clients ------------------------------------------------------------

# Each Java client version the tests run: its name in test ids, and the folder
# fetch_java_clients.sh fills with its jars.
JAVA_CLIENTS = {
    "java3.9": KAFKA_TESTS_DIR / "java-lib",
    "java4.1": KAFKA_TESTS_DIR / "java4-lib",
}
# Class paths of the Java applications (Kafka Streams, Kafka Connect) beside the clients:
# their folders, in order. Not in JAVA_CLIENTS, whose every entry the client tests run.
JAVA_APPS = {
    "java4.1-apps": (KAFKA_TESTS_DIR / "java4-lib", KAFKA_TESTS_DIR / "java4-apps-lib"),
}
JAVA_SOURCES = Path(__file__).resolve().parent / "java"


def java_classpath(client: str, program: str | None) -> tuple[str, str]:
    """(java, classpath) to run `program` (tests/kafka/java/<program>.java) on the Java
    client `client` (a key of JAVA_CLIENTS or JAVA_APPS), compiling it first when its class
    is missing or older than the source; `program=None` gives the jars alone (to run a
    class of theirs). Skips (fails under STRAND_REQUIRE_CLIENTS=1) when java or the
    client's jars are missing."""
    java, javac = shutil.which("java"), shutil.which("javac")
    need(java is not None and javac is not None,
         "java/javac not found (Debian: openjdk-17-jdk-headless)")
    libs = JAVA_APPS.get(client) or (JAVA_CLIENTS[client],)
    jars = []
    for lib in libs:
        found = sorted(lib.glob("*.jar"))
        need(bool(found), f"no jars in {lib}: run tests/kafka/fetch_java_clients.sh")
        jars += found
    need(any(j.name.startswith("kafka-clients") for j in jars),
         f"kafka-clients is not in {', '.join(map(str, libs))}: "
         "run tests/kafka/fetch_java_clients.sh")
    cp = ":".join(str(j) for j in jars)
    if program is None:
        return java, cp
    src = JAVA_SOURCES / f"{program}.java"
    classes = KAFKA_TESTS_DIR / f"{client}-classes"
    cls = classes / f"{program}.class"
    if not cls.exists() or cls.stat().st_mtime < src.stat().st_mtime:
        classes.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([javac, "-Xlint:all", "-Werror", "-cp", cp, "-d", str(classes),
                            str(src)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"javac failed:\n{r.stdout}\n{r.stderr}"
    return java, f"{cp}:{classes}"


def check_group_resume(out: dict, count: int):
    """Checks a client program's two-run group consume (tests/kafka/js/platformatic.mjs,
    tests/kafka/go): `sent` names partition i % 2 and that partition's next offset for
    record i (k<i>, v<i>); `first` read count // 2 records and committed them, `second`
    (the same group) resumed after the commit and read the rest. Each run reads each record
    once; together they read every record, none twice."""
    assert out["sent"] == [{"partition": i % 2, "offset": i // 2} for i in range(count)]

    def keyed(records):
        return {(m["partition"], m["offset"]): (m["key"], m["value"]) for m in records}

    first, second = keyed(out["first"]), keyed(out["second"])
    assert len(first) == len(out["first"]) == count // 2, "no record twice in one run"
    assert len(second) == len(out["second"]) == count - count // 2
    assert not first.keys() & second.keys(), "the second run resumed after the commits"
    assert first | second == {(i % 2, i // 2): (f"k{i}", f"v{i}") for i in range(count)}
