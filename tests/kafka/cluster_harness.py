"""Three `strand` nodes on loopback for the cluster tests (test_cluster.py), and a
fault-injecting TCP proxy between them.

Node N runs with
    --node-id N --kafka-addr/--admin-addr/--native-addr 127.0.0.1:<free port>
    --native-shard-base-port 0 --rpc-addr 127.0.0.1:RP_N
    --seeds "1@..,2@..,3@.." --default-replication-factor 3 --smp S
where its own seed entry is its real RPC address and every peer's entry is a proxy
listener that forwards to that peer's real RPC address. Peers therefore reach each other
only through the proxy, and `cut(n)` / `heal(n)` isolate a node without root or network
namespaces. `direct_rpc_connections()` checks that no node dials a peer's real RPC port
(which would bypass the proxy and make a cut a no-op).

Readiness: GET /v1/health/ready on the admin port answers 200 (the node is registered
with the controller and serving) and a Kafka ApiVersions request is answered. Nodes start
together, since none is ready before the controller has a quorum.

As in strand_harness.py, every wait has a deadline, each node's stderr goes to a file
whose tail a failing test's report shows, and data dirs live under target/kafka-tests
(not /tmp, which may be tmpfs: strand needs O_DIRECT).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from strand_harness import (
    RUN_ROOT,
    START_DEADLINE_S,
    STOP_DEADLINE_S,
    BrokerStartError,
    StartupPanic,
    _child_env,
    api_versions_v0,
    frame,
    free_port,
    kill9_process,
    recv_response,
    strand_bin,
    supports_flag,
    tail,
    wait_until,
    wait_exit,
)

NODE_IDS = (1, 2, 3)
# Three nodes start at once on a 2-core CI box that may still be compiling.
CLUSTER_START_DEADLINE_S = 2 * START_DEADLINE_S
# A node's shard s listens for RPC on its base port + s.
SMP_MAX = 10
# Attempts at a start that lost a race for one of its ports to another process.
PORT_ATTEMPTS = 3
# One Kafka request to one node: Metadata, ApiVersions.
REQUEST_TIMEOUT_S = 2.0
# Bytes a proxy pump reads at once.
PROXY_CHUNK_BYTES = 64 * 1024
# How often blocked proxy threads look at the shutdown flag.
PROXY_POLL_S = 0.1

CUT_RESET = "reset"          # close existing connections, refuse (RST) new ones
CUT_BLACKHOLE = "blackhole"  # keep connections, forward nothing until healed
CUT_MODES = (CUT_RESET, CUT_BLACKHOLE)


# -- ports ------------------------------------------------------------------------------

class PortAllocator:
    """Free loopback ports, never the same one twice in one cluster (two free_port() calls
    may return one port: the kernel does not promise otherwise)."""

    def __init__(self):
        self.handed_out: set[int] = set()

    def one(self) -> int:
        return self.block(1)

    def block(self, count: int) -> int:
        """A base port such that base..base+count-1 are all free now."""
        for _ in range(200):
            base = free_port()
            ports = range(base, base + count)
            if base + count > 65536 or any(p in self.handed_out for p in ports):
                continue
            if all(_bindable(p) for p in ports[1:]):
                self.handed_out.update(ports)
                return base
        raise RuntimeError(f"no block of {count} free ports found")

    def bind_block(self, count: int) -> list[socket.socket]:
        """Listening sockets on base..base+count-1 (kept: the proxy's own ports)."""
        for _ in range(200):
            socks: list[socket.socket] = []
            try:
                first = _listener(0)
                socks.append(first)
                base = first.getsockname()[1]
                if any(p in self.handed_out for p in range(base, base + count)):
                    raise OSError("port handed out before")
                for p in range(base + 1, base + count):
                    socks.append(_listener(p))
                self.handed_out.update(range(base, base + count))
                return socks
            except OSError:
                for s in socks:
                    s.close()
        raise RuntimeError(f"no block of {count} free ports to listen on")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _listener(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(64)
        s.settimeout(PROXY_POLL_S)
    except OSError:
        s.close()
        raise
    return s


# -- the fault-injecting proxy ----------------------------------------------------------

def _abort(sock: socket.socket | None):
    """Wakes every thread blocked on `sock` and makes its close send RST, not FIN."""
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Conn:
    """One proxied connection: `down` was accepted from the dialling node, `up` dials the
    target. Two pump threads; the last to finish closes both sockets."""

    def __init__(self, link: "_Link", down: socket.socket):
        self.link = link
        self.down = down
        self.up: socket.socket | None = None
        self.aborted = False
        self._lock = threading.Lock()
        self._pumps = 1  # the serving thread is the down->up pump

    def abort(self):
        with self._lock:
            self.aborted = True
            _abort(self.down)
            _abort(self.up)

    def pump_started(self):
        with self._lock:
            self._pumps += 1

    def pump_done(self):
        with self._lock:
            self._pumps -= 1
            if self._pumps > 0:
                # The other direction may still be blocked in recv: wake it.
                _abort(self.down)
                _abort(self.up)
                return
        for s in (self.down, self.up):
            if s is not None:
                s.close()
        self.link.forget(self)


@dataclass
class LinkStats:
    accepted: int = 0
    refused: int = 0
    forwarded_bytes: int = 0
    active: int = 0


@dataclass
class _Link:
    """Traffic that node `src` sends to node `dst`: proxy listeners on base..base+smp-1
    forward to dst's RPC ports target..target+smp-1."""

    src: int
    dst: int
    listeners: list
    target_port: int
    state: str = "open"  # "open" or one of CUT_MODES
    flowing: threading.Event = field(default_factory=threading.Event)
    conns: set = field(default_factory=set)
    stats: LinkStats = field(default_factory=LinkStats)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def port(self) -> int:
        return self.listeners[0].getsockname()[1]

    def forget(self, conn: _Conn):
        with self.lock:
            self.conns.discard(conn)
            self.stats.active = len(self.conns)


class FaultProxy:
    """A TCP proxy per ordered pair of nodes (src, dst), with one listener per shard.

    cut(n, reset): every connection of a link that involves n is aborted (RST both ways)
      and new ones are accepted and reset at once, so both sides see the loss at once.
    cut(n, blackhole): connections stay open but nothing is forwarded either way and new
      connections are held unconnected, as when packets are dropped; the kernel buffers
      fill up behind. heal() forwards what was held, as TCP retransmission would.
    heal(n): the links of n forward again (a link stays cut while either end is cut).
    """

    def __init__(self, ports: PortAllocator):
        self._ports = ports
        self._links: dict[tuple[int, int], _Link] = {}
        self._cut: dict[int, str] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []

    def add_link(self, src: int, dst: int, target_port: int, smp: int) -> int:
        """Listens for src's connections to dst; returns the base port for src's seeds."""
        assert (src, dst) not in self._links, f"link {src}->{dst} exists"
        link = _Link(src, dst, self._ports.bind_block(smp), target_port)
        link.flowing.set()
        self._links[(src, dst)] = link
        for shard, lsock in enumerate(link.listeners):
            t = threading.Thread(target=self._accept_loop, args=(link, shard, lsock),
                                 name=f"proxy-{src}-{dst}-{shard}", daemon=True)
            t.start()
            self._threads.append(t)
        return link.port

    def port(self, src: int, dst: int) -> int:
        return self._links[(src, dst)].port

    def retarget(self, dst: int, target_port: int):
        """dst's RPC ports moved (restarted on new ports): new connections go there."""
        for link in self._links.values():
            if link.dst == dst:
                link.target_port = target_port

    def cut(self, node: int, mode: str = CUT_RESET):
        assert mode in CUT_MODES, f"cut mode {mode!r} not in {CUT_MODES}"
        with self._lock:
            self._cut[node] = mode
            self._apply()

    def heal(self, node: int | None = None):
        with self._lock:
            if node is None:
                self._cut.clear()
            else:
                self._cut.pop(node, None)
            self._apply()

    def cut_nodes(self) -> set[int]:
        with self._lock:
            return set(self._cut)

    def stats(self) -> dict[tuple[int, int], LinkStats]:
        return {k: LinkStats(**vars(v.stats)) for k, v in self._links.items()}

    def close(self):
        self._closed.set()
        for link in self._links.values():
            link.flowing.set()
            with link.lock:
                conns = list(link.conns)
            for c in conns:
                c.abort()
        for t in self._threads:
            t.join(timeout=5)
        for link in self._links.values():
            for s in link.listeners:
                s.close()

    # -- internals ------------------------------------------------------------------

    def _apply(self):
        """Derives each link's state from the cut nodes (caller holds self._lock)."""
        for link in self._links.values():
            modes = {self._cut[n] for n in (link.src, link.dst) if n in self._cut}
            state = CUT_RESET if CUT_RESET in modes else (modes.pop() if modes else "open")
            # Under link.lock: a connection is either accepted before this and aborted
            # here, or sees the new state in _accept_loop.
            with link.lock:
                link.state = state
                conns = list(link.conns) if state == CUT_RESET else []
            if state == CUT_BLACKHOLE:
                link.flowing.clear()
            else:
                link.flowing.set()
            for c in conns:
                c.abort()

    def _accept_loop(self, link: _Link, shard: int, lsock: socket.socket):
        while not self._closed.is_set():
            try:
                down, _ = lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            down.settimeout(None)
            conn = _Conn(link, down)
            with link.lock:
                refuse = link.state == CUT_RESET
                if refuse:
                    link.stats.refused += 1
                else:
                    link.conns.add(conn)
                    link.stats.accepted += 1
                    link.stats.active = len(link.conns)
            if refuse:
                _abort(down)
                down.close()
                continue
            threading.Thread(target=self._serve, args=(conn, shard), daemon=True,
                             name=f"proxy-{link.src}-{link.dst}-{shard}-conn").start()

    def _wait_flowing(self, conn: _Conn) -> bool:
        while not conn.link.flowing.wait(PROXY_POLL_S):
            if self._closed.is_set() or conn.aborted:
                return False
        return not (self._closed.is_set() or conn.aborted)

    def _serve(self, conn: _Conn, shard: int):
        link = conn.link
        try:
            # A connection accepted during a blackhole is held until the heal.
            if not self._wait_flowing(conn):
                return
            try:
                up = socket.create_connection(("127.0.0.1", link.target_port + shard),
                                              timeout=REQUEST_TIMEOUT_S)
            except OSError:
                return  # target down: the dialling node sees its connection reset
            up.settimeout(None)
            with conn._lock:
                conn.up = up
                if conn.aborted:  # a cut raced with the connect
                    _abort(up)
                    return
            conn.pump_started()
            threading.Thread(target=self._pump, args=(conn, up, conn.down), daemon=True,
                             name=f"proxy-{link.src}-{link.dst}-{shard}-up").start()
            self._pump_loop(conn, conn.down, up)
        finally:
            if conn.up is None:
                _abort(conn.down)
            conn.pump_done()

    def _pump(self, conn: _Conn, src: socket.socket, dst: socket.socket):
        try:
            self._pump_loop(conn, src, dst)
        finally:
            conn.pump_done()

    def _pump_loop(self, conn: _Conn, src: socket.socket, dst: socket.socket):
        while True:
            try:
                data = src.recv(PROXY_CHUNK_BYTES)
            except OSError:
                return
            if not data:
                return
            # Read during a blackhole: held, and delivered after the heal.
            if not self._wait_flowing(conn):
                return
            try:
                dst.sendall(data)
            except OSError:
                return
            conn.link.stats.forwarded_bytes += len(data)  # approximate: no lock, for reports


# -- Kafka Metadata v1, hand-encoded ------------------------------------------------------

@dataclass
class PartitionMeta:
    partition: int
    error: int
    leader: int
    replicas: list[int]
    isr: list[int]


@dataclass
class Metadata:
    """One node's answer to Metadata v1 for all topics."""

    brokers: dict[int, tuple[str, int]]
    controller: int
    topics: dict[str, dict[int, PartitionMeta]]
    topic_errors: dict[str, int]


class _Reader:
    def __init__(self, buf: bytes):
        self.buf = buf
        self.off = 0

    def take(self, fmt: str):
        v = struct.unpack_from(">" + fmt, self.buf, self.off)
        self.off += struct.calcsize(">" + fmt)
        return v if len(v) > 1 else v[0]

    def string(self) -> str | None:
        n = self.take("h")
        if n < 0:
            return None
        s = self.buf[self.off:self.off + n].decode()
        self.off += n
        return s

    def int32s(self) -> list[int]:
        n = self.take("i")
        return [self.take("i") for _ in range(max(n, 0))]


def parse_metadata_v1(resp: bytes, correlation_id: int) -> Metadata:
    r = _Reader(resp)
    corr = r.take("i")
    assert corr == correlation_id, f"correlation id {corr} != {correlation_id}"
    brokers = {}
    for _ in range(r.take("i")):
        node_id = r.take("i")
        host = r.string()
        port = r.take("i")
        r.string()  # rack
        brokers[node_id] = (host, port)
    controller = r.take("i")
    topics: dict[str, dict[int, PartitionMeta]] = {}
    topic_errors = {}
    for _ in range(r.take("i")):
        err = r.take("h")
        name = r.string()
        r.take("b")  # is_internal
        parts = {}
        for _ in range(r.take("i")):
            perr = r.take("h")
            index = r.take("i")
            leader = r.take("i")
            parts[index] = PartitionMeta(index, perr, leader, r.int32s(), r.int32s())
        topics[name] = parts
        topic_errors[name] = err
    assert r.off == len(resp), f"{len(resp) - r.off} trailing bytes after Metadata v1"
    return Metadata(brokers, controller, topics, topic_errors)


_CORRELATION = iter(range(1, 1 << 31))


def metadata_v1(port: int, timeout: float = REQUEST_TIMEOUT_S) -> Metadata:
    """Metadata v1 for all topics (a null topic list: asking for a named topic could
    auto-create it) from the node listening on `port`, over a fresh connection."""
    corr = next(_CORRELATION)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(frame(3, 1, corr, body=struct.pack(">i", -1)))
        return parse_metadata_v1(recv_response(s), corr)


# -- nodes ------------------------------------------------------------------------------

class NodeExited(BrokerStartError):
    def __init__(self, node: "Node", rc: int, log: str):
        super().__init__(f"{node.name} exited with {rc} during start-up:\n{log}")
        self.port_taken = "Address already in use" in log or "another process uses" in log


class Node:
    """One `strand` process of a Cluster. Has the `name`, `root` and `log_tails()` that
    conftest.py uses to attach logs to a failing test's report."""

    def __init__(self, cluster: "Cluster", node_id: int):
        self.cluster = cluster
        self.node_id = node_id
        self.name = f"{cluster.name}-n{node_id}"
        self.root = cluster.root / f"n{node_id}"
        self.root.mkdir(parents=True)
        self.data_dir = self.root / "data"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.stderr_path = self.root / "stderr-0.log"
        self.stderr_paths: list[Path] = []
        # A joiner is not a seed: started without --node-id, it asks the seeds for one
        # (`node_id` is the id it is expected to get).
        self.joiner = False
        # Flags of this node only, after the cluster's `extra_args`.
        self.extra_args: list[str] = []
        self.pick_ports()

    def pick_ports(self):
        ports = self.cluster.ports
        self.kafka_port = ports.one()
        self.admin_port = ports.one()
        self.native_port = ports.one()
        self.rpc_port = ports.block(self.cluster.smp)
        # The port of each of the cluster's extra listeners (by name), beside PLAINTEXT.
        self.listener_ports = {name: ports.one() for name in self.cluster.extra_listeners}

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def rpc_ports(self) -> range:
        return range(self.rpc_port, self.rpc_port + self.cluster.smp)

    def args(self, binary: Path) -> list[str]:
        c = self.cluster
        who = [] if self.joiner else ["--node-id", str(self.node_id)]
        seeds = c.direct_seeds() if self.joiner else c.seeds_for(self.node_id)
        return [str(binary)] + who + [
            "--data-dir", str(self.data_dir),
        ] + self.listener_args() + [
            "--admin-addr", f"127.0.0.1:{self.admin_port}",
            "--native-addr", f"127.0.0.1:{self.native_port}",
            "--native-shard-base-port", "0",
            "--rpc-addr", f"127.0.0.1:{self.rpc_port}",
            "--seeds", seeds,
            "--default-replication-factor", str(c.replication_factor),
            "--smp", str(c.smp),
        ] + c.extra_args + self.extra_args

    def listener_args(self) -> list[str]:
        if not self.listener_ports:
            return ["--kafka-addr", f"127.0.0.1:{self.kafka_port}"]
        listeners = [f"PLAINTEXT://127.0.0.1:{self.kafka_port}"] + [
            f"{name}://127.0.0.1:{port}" for name, port in self.listener_ports.items()]
        return ["--listeners", ",".join(listeners)]

    def spawn(self, binary: Path):
        assert not self.running(), f"{self.name} is running"
        self.stderr_path = self.root / f"stderr-{self.starts}.log"
        self.stderr_paths.append(self.stderr_path)
        self.starts += 1
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(self.pinned(self.args(binary)), stdin=subprocess.DEVNULL,
                                         stdout=err, stderr=err, env=_child_env(),
                                         cwd=self.root)

    def pinned(self, argv: list[str]) -> list[str]:
        """`argv` under taskset on this node's CPUs, as scripts/run-cluster.sh does: each
        node pins its shards to the first CPUs it may use, so unpinned nodes would all
        share the first ones."""
        taskset = shutil.which("taskset")
        if taskset is None:
            return argv
        cpus = sorted(os.sched_getaffinity(0))
        smp = self.cluster.smp
        mine = sorted({cpus[((self.node_id - 1) * smp + k) % len(cpus)] for k in range(smp)})
        return [taskset, "-c", ",".join(map(str, mine))] + argv

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self):
        """Raises when the process exited or a shard panicked."""
        assert self.proc is not None, f"{self.name} was not started"
        rc = self.proc.poll()
        if rc is not None:
            self.proc = None
            raise NodeExited(self, rc, tail(self.stderr_path))
        if b"panicked at" in self.stderr_path.read_bytes():
            self.kill9()
            raise StartupPanic(f"{self.name}:\n{tail(self.stderr_path, 200)}")

    def status(self) -> dict | None:
        """GET /v1/status, or None when the node does not answer."""
        try:
            url = f"http://127.0.0.1:{self.admin_port}/v1/status"
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def log_end(self, topic: str, partition: int) -> int | None:
        """This replica's own log end offset of the partition (GET /v1/status), or None
        when the node does not answer or does not host it."""
        status = self.status() or {}
        for shard in status.get("shards", []):
            for p in shard.get("partitions", []):
                if p.get("topic") == topic and p.get("partition") == partition:
                    return p.get("log_end_offset")
        return None

    def ready(self) -> bool:
        """GET /v1/health/ready answers 200 and the Kafka listener answers ApiVersions."""
        try:
            url = f"http://127.0.0.1:{self.admin_port}/v1/health/ready"
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status != 200:
                    return False
        except (urllib.error.URLError, OSError):
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.kafka_port), timeout=1) as s:
                s.settimeout(REQUEST_TIMEOUT_S)
                err, _ = api_versions_v0(s)
                return err == 0
        except (OSError, ConnectionError, AssertionError, struct.error):
            return False

    def terminate(self):
        if self.running():
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, deadline_s: float = STOP_DEADLINE_S) -> int:
        """Waits for an exit after terminate(); a hang past the deadline is killed and
        reported as an error."""
        proc, self.proc = self.proc, None
        return wait_exit(proc, self.name, self.stderr_path, deadline_s)

    def kill9(self):
        """SIGKILL: no shutdown path runs, unsynced state is lost."""
        proc, self.proc = self.proc, None
        kill9_process(proc)

    def log_tails(self, lines: int = 60) -> str:
        return "\n".join(f"--- {p} (last {lines} lines) ---\n{tail(p, lines)}"
                         for p in self.stderr_paths)


# -- the cluster ------------------------------------------------------------------------

class Cluster:
    """Three strand nodes (ids 1..3, all controller voters) wired through a FaultProxy."""

    _seq = 0

    def __init__(self, name: str = "cluster", smp: int = 1, replication_factor: int = 3,
                 extra_args: list[str] | None = None, node_ids=NODE_IDS,
                 extra_listeners: list[str] | None = None):
        """`extra_listeners`: names of Kafka listeners (`SASL_SSL`) each node serves on a
        port of its own (`Node.listener_ports`) beside PLAINTEXT (the inter-broker one)."""
        assert 1 <= smp <= SMP_MAX, f"smp {smp} outside 1..{SMP_MAX}"
        Cluster._seq += 1
        self.name = name
        self.root = RUN_ROOT / f"{os.getpid()}-c{Cluster._seq}-{name}"
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        self.smp = smp
        self.replication_factor = replication_factor
        self.extra_args = list(extra_args or [])
        self.extra_listeners = list(extra_listeners or [])
        self.ports = PortAllocator()
        self.proxy = FaultProxy(self.ports)
        self.nodes: dict[int, Node] = {n: Node(self, n) for n in node_ids}
        for src in node_ids:
            for dst in node_ids:
                if src != dst:
                    self.proxy.add_link(src, dst, self.nodes[dst].rpc_port, smp)

    def __getitem__(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def seeds_for(self, node_id: int) -> str:
        """`--seeds` of one node: itself at its real RPC address, peers at the proxy."""
        parts = []
        for n, node in sorted(self.nodes.items()):
            if node.joiner:  # not a seed: a restarted seed must not name it
                continue
            port = node.rpc_port if n == node_id else self.proxy.port(node_id, n)
            parts.append(f"{n}@127.0.0.1:{port}")
        return ",".join(parts)

    def direct_seeds(self) -> str:
        """`--seeds` naming every seed at its real RPC address (a joiner's: no proxy)."""
        return ",".join(f"{n}@127.0.0.1:{node.rpc_port}"
                        for n, node in sorted(self.nodes.items()) if not node.joiner)

    def add_joiner(self, expected_id: int, extra_args: list[str] | None = None,
                   wait: bool = True) -> Node:
        """A node outside the seeds that joins through them (with its own `extra_args`),
        started, and ready unless `wait` is false (one expected to be refused)."""
        assert expected_id not in self.nodes, f"node {expected_id} exists"
        node = Node(self, expected_id)
        node.joiner = True
        node.extra_args = list(extra_args or [])
        self.nodes[expected_id] = node
        if wait:
            self.start([expected_id])
        else:
            node.spawn(strand_bin())
        return node

    def bootstrap(self, node_ids=None) -> str:
        ids = sorted(self.nodes) if node_ids is None else node_ids
        return ",".join(self.nodes[n].bootstrap for n in ids)

    def running(self) -> list[int]:
        return [n for n, node in sorted(self.nodes.items()) if node.running()]

    def reachable(self) -> list[int]:
        """Running nodes that are not cut off."""
        cut = self.proxy.cut_nodes()
        return [n for n in self.running() if n not in cut]

    # -- life cycle -----------------------------------------------------------------

    def start(self, node_ids=None, deadline_s: float = CLUSTER_START_DEADLINE_S,
              while_starting=None) -> "Cluster":
        """Starts these nodes (default: all) together and waits until each is ready. A node
        that lost a race for a port starts again on new ports (the proxy hides the move of
        its RPC port from its peers). `while_starting()`, if given, is called between
        readiness checks (to watch what the nodes answer during start-up)."""
        binary = strand_bin()
        if not binary.exists():
            raise FileNotFoundError(
                f"strand binary not found at {binary}: build it with "
                "`cargo build -p strand-broker -j 1` or set STRAND_BIN")
        if not supports_flag(binary, "--seeds"):
            raise BrokerStartError(f"{binary} has no --seeds flag: it cannot form a cluster "
                                   "(the Raft replication change has not landed in it)")
        ids = sorted(self.nodes) if node_ids is None else list(node_ids)
        for n in ids:
            self.nodes[n].spawn(binary)
        self._wait_ready(binary, ids, deadline_s, while_starting)
        return self

    def _wait_ready(self, binary: Path, ids: list[int], deadline_s: float,
                    while_starting=None):
        deadline = time.monotonic() + deadline_s
        attempts = {n: 1 for n in ids}
        waiting = set(ids)
        while waiting:
            for n in sorted(waiting):
                node = self.nodes[n]
                try:
                    node.check_alive()
                except NodeExited as e:
                    if not e.port_taken or attempts[n] >= PORT_ATTEMPTS:
                        raise
                    attempts[n] += 1
                    node.pick_ports()
                    self.proxy.retarget(n, node.rpc_port)
                    node.spawn(binary)
                    continue
                if node.ready():
                    waiting.discard(n)
            if not waiting:
                return
            if time.monotonic() >= deadline:
                tails = "\n".join(self.nodes[n].log_tails(40) for n in sorted(waiting))
                raise BrokerStartError(
                    f"nodes {sorted(waiting)} not ready within {deadline_s}s "
                    f"(GET /v1/health/ready + ApiVersions):\n{tails}")
            if while_starting is not None:
                while_starting()
            else:
                time.sleep(0.05)

    def stop(self, node_ids=None, deadline_s: float = STOP_DEADLINE_S) -> dict[int, int]:
        """SIGTERM to these nodes (default: all) at once, then waits; returns exit codes."""
        ids = sorted(self.nodes) if node_ids is None else list(node_ids)
        for n in ids:
            self.nodes[n].terminate()
        return {n: self.nodes[n].wait(deadline_s) for n in ids}

    def kill9(self, node_id: int):
        self.nodes[node_id].kill9()

    def restart(self, node_id: int, deadline_s: float = START_DEADLINE_S) -> Node:
        """Starts a stopped or killed node again on its data dir and ports."""
        assert not self.nodes[node_id].running(), f"node {node_id} is running"
        self.start([node_id], deadline_s)
        return self.nodes[node_id]

    def restart_all(self, deadline_s: float = CLUSTER_START_DEADLINE_S) -> dict[int, int]:
        """SIGTERM all, then start all; returns the exit codes of the stop."""
        rcs = self.stop()
        self.start(deadline_s=deadline_s)
        return rcs

    def cut(self, node_id: int, mode: str = CUT_RESET):
        """Isolates a node from its peers (its Kafka listener stays reachable)."""
        self.proxy.cut(node_id, mode)

    def heal(self, node_id: int | None = None):
        self.proxy.heal(node_id)

    def close(self) -> dict[int, int]:
        """Heals, stops every node and the proxy; returns the exit codes."""
        self.heal()
        try:
            return self.stop()
        finally:
            self.proxy.close()

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tails(self, lines: int = 60) -> str:
        return "\n".join(node.log_tails(lines) for node in self.nodes.values())

    # -- what the nodes say ---------------------------------------------------------

    def metadata(self, node_id: int) -> Metadata:
        return metadata_v1(self.nodes[node_id].kafka_port)

    def leader_views(self, topic: str, partition: int, nodes=None) -> dict[int, int | None]:
        """Each node's Metadata leader for the partition: a node id, -1 for none, None
        when the node did not answer or does not know the partition."""
        views: dict[int, int | None] = {}
        for n in self.reachable() if nodes is None else nodes:
            try:
                part = self.metadata(n).topics.get(topic, {}).get(partition)
            except (OSError, ConnectionError, AssertionError, struct.error):
                part = None
            views[n] = None if part is None else part.leader
        return views

    def leader_of(self, topic: str, partition: int, nodes=None,
                  agree: str = "majority") -> int | None:
        """The partition's leader as the nodes (default: running and not cut) report it,
        or None. A leader counts only when it names itself; with agree="majority" more
        than half of the nodes that answered must also name it, with agree="any" one is
        enough (what a client asking that node would be told)."""
        assert agree in ("majority", "any"), agree
        views = self.leader_views(topic, partition, nodes)
        answered = [v for v in views.values() if v is not None]
        for leader in sorted({v for v in answered if v >= 0}):
            if views.get(leader) != leader:
                continue
            votes = sum(1 for v in answered if v == leader)
            if agree == "any" or 2 * votes > len(answered):
                return leader
        return None

    def wait_leader(self, topic: str, partition: int, nodes=None, exclude=(),
                    timeout: float = 30.0, agree: str = "majority") -> int:
        """Waits until leader_of() names a node not in `exclude`."""
        def new_leader():
            leader = self.leader_of(topic, partition, nodes, agree)
            return leader if leader is not None and leader not in exclude else None
        what = f"a leader of {topic}/{partition} not in {sorted(exclude)} (agree={agree})"
        try:
            return wait_until(new_leader, timeout, what, interval=0.02)
        except TimeoutError as e:
            views = self.leader_views(topic, partition, nodes)
            raise TimeoutError(f"{e}; each node's leader at the end: {views}") from None

    def wait_preferred_leader(self, topic: str, partition: int, timeout: float = 60.0) -> int:
        """Waits until the partition is led by its preferred (first) replica, where the
        nodes' leader balancing hands it back after a failover (every few seconds, so a
        test that needs its leader to stay put waits for this first); returns that node."""
        def preferred() -> int | None:
            for n in self.reachable():
                try:
                    part = self.metadata(n).topics.get(topic, {}).get(partition)
                except (OSError, ConnectionError, AssertionError, struct.error):
                    continue
                if part is not None and part.replicas:
                    return part.replicas[0]
            return None

        def settled():
            first = preferred()
            return first if first is not None and self.leader_of(topic, partition) == first \
                else None
        try:
            return wait_until(settled, timeout, f"{topic}/{partition} led by its preferred "
                              "replica", interval=0.2)
        except TimeoutError as e:
            views = self.leader_views(topic, partition)
            raise TimeoutError(f"{e}; preferred {preferred()}, each node's leader at the "
                               f"end: {views}") from None

    # -- is the proxy really in the way? ----------------------------------------------

    def direct_rpc_connections(self) -> list[tuple[int, int, int]]:
        """(node, peer, port) for every TCP connection a node holds to a peer's real RPC
        port, read from /proc. Empty when all node-to-node traffic goes through the
        proxy; otherwise a cut would not isolate anything (e.g. the nodes dial the RPC
        address a peer registered with the controller instead of the --seeds address)."""
        owner_of_port = {p: n for n, node in self.nodes.items() for p in node.rpc_ports}
        remote_ports = _tcp_remote_ports_by_inode()
        found = []
        for n, node in sorted(self.nodes.items()):
            if not node.running():
                continue
            for inode in _socket_inodes(node.proc.pid):
                port = remote_ports.get(inode)
                peer = owner_of_port.get(port)
                if peer is not None and peer != n:
                    found.append((n, peer, port))
        return found


def _socket_inodes(pid: int) -> set[int]:
    out = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        entries = list(fd_dir.iterdir())
    except OSError:
        return out
    for fd in entries:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[len("socket:["):-1]))
    return out


def _tcp_remote_ports_by_inode() -> dict[int, int]:
    """inode -> remote port of every established or connecting TCP socket."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if len(cols) < 10 or cols[3] not in ("01", "02"):  # ESTABLISHED, SYN_SENT
                continue
            out[int(cols[9])] = int(cols[2].rsplit(":", 1)[1], 16)
    return out


def partition_watermarks(ck, c, topic: str, p: int) -> tuple[int, int]:
    """The partition's watermarks. A failure asks for the topic's metadata before it is
    raised (for the caller to retry): librdkafka keeps a partition whose last Metadata
    showed no leader (a Raft election under way) as unknown and does not ask again by
    itself — a CI run once failed with _UNKNOWN_PARTITION for 30 s that way."""
    try:
        return c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=5, cached=False)
    except ck.KafkaException:
        try:
            c.list_topics(topic, timeout=5)
        except ck.KafkaException:
            pass
        raise
