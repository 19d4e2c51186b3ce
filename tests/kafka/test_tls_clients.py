"""TLS listeners (issue 23): confluent-kafka, kafka-python, aiokafka, kafkajs and the Java
clients (3.9 and 4.1) produce, consume in a group and commit over SASL_SSL with
SCRAM-SHA-512, over SASL_SSL with PLAIN, and over mutual TLS (an SSL listener requiring a
client certificate), each with its stock settings and the CA made by tools/certs.sh.
Refused: a wrong password, no client certificate, a certificate of a foreign CA, an
expired one, and one whose subject no `ssl_principal_mapping_rules` rule maps; every
refusal is counted. A renewed node certificate is served without a restart."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import pytest

from strand_harness import (Broker, api_versions_v0, free_port, java_classpath, need,
                            need_module)

HERE = Path(__file__).resolve().parent
CERTS_SH = HERE.parent.parent / "tools" / "certs.sh"
USER, PASSWORD = "alice", "tls and sasl pw"
COUNT = 20
MODES = ["sasl_ssl-SCRAM-SHA-512", "sasl_ssl-PLAIN", "mtls"]
# alice (and the expired "old") map to a principal; bob's certificate is valid but maps to
# none, so his connections are refused.
MAPPING_RULES = "RULE:^CN=(alice|old),OU=clients,O=Strand$/$1/L"


def certs(dir: Path, *clients: str, days: int | None = None):
    need(shutil.which("openssl") is not None, "openssl is not installed")
    env = dict(os.environ)
    if days is not None:
        env["STRAND_CERT_DAYS"] = str(days)
    r = subprocess.run(["bash", str(CERTS_SH), str(dir), *clients], capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr


def tls_args(d: Path) -> list[str]:
    return ["--ssl-certificate-location", str(d / "node.pem"),
            "--ssl-key-location", str(d / "node.key"),
            "--ssl-ca-location", str(d / "ca.pem"),
            "--ssl-client-auth", "required",
            "--ssl-principal-mapping-rules", MAPPING_RULES]


class Secured:
    """A broker with PLAINTEXT, SASL_SSL and SSL (client certificate required) listeners."""

    def __init__(self, broker: Broker, dir: Path, sasl_port: int, ssl_port: int):
        self.broker, self.dir = broker, dir
        self.sasl_port, self.ssl_port = sasl_port, ssl_port

    def port(self, mode: str) -> int:
        return self.ssl_port if mode == "mtls" else self.sasl_port

    def bootstrap(self, mode: str) -> str:
        return f"localhost:{self.port(mode)}"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    adm = need_module("confluent_kafka.admin")
    d = tmp_path_factory.mktemp("certs")
    certs(d, "alice", "bob")
    certs(d, "old", days=-1)
    certs(d / "foreign", "alice")
    sasl_port, ssl_port = free_port(), free_port()
    b = Broker(name="tls-clients", smp=2, extra_args=tls_args(d),
               extra_listeners=[f"SASL_SSL://127.0.0.1:{sasl_port}",
                                f"SSL://127.0.0.1:{ssl_port}"])
    b.start()
    admin = adm.AdminClient({"bootstrap.servers": b.bootstrap})
    change = adm.UserScramCredentialUpsertion(
        USER, adm.ScramCredentialInfo(adm.ScramMechanism.SCRAM_SHA_512, 4096),
        PASSWORD.encode(), b"tls-salt")
    for f in admin.alter_user_scram_credentials([change], request_timeout=15).values():
        f.result(timeout=20)
    yield Secured(b, d, sasl_port, ssl_port)
    rc = b.stop()
    if rc == 0:
        b.cleanup()
    assert rc == 0, f"strand exited with {rc} after SIGTERM:\n{b.log_tails()}"


def create(s: Secured, topic: str):
    adm = need_module("confluent_kafka.admin")
    admin = adm.AdminClient({"bootstrap.servers": s.broker.bootstrap})
    admin.create_topics([adm.NewTopic(topic, num_partitions=1,
                                      replication_factor=1)])[topic].result(20)


def mechanism(mode: str) -> str | None:
    return mode.split("-", 1)[1] if mode.startswith("sasl_ssl") else None


@pytest.mark.parametrize("mode", MODES)
def test_confluent_kafka_over_tls(secured, topic, mode):
    ck = need_module("confluent_kafka")
    create(secured, topic)
    d = secured.dir
    conf = {"bootstrap.servers": secured.bootstrap(mode), "ssl.ca.location": str(d / "ca.pem")}
    if mode == "mtls":
        conf.update({"security.protocol": "SSL",
                     "ssl.certificate.location": str(d / "alice.pem"),
                     "ssl.key.location": str(d / "alice.key")})
    else:
        conf.update({"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism(mode),
                     "sasl.username": USER, "sasl.password": PASSWORD})
    p = ck.Producer({**conf, "acks": "all"})
    failed = []
    for i in range(COUNT):
        p.produce(topic, f"v{i}".encode(), partition=0,
                  on_delivery=lambda e, m: e and failed.append(e))
    assert p.flush(30) == 0 and not failed, failed
    c = ck.Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 60
    while len(got) < COUNT and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
    assert got == [f"v{i}" for i in range(COUNT)]
    c.commit(asynchronous=False)
    [tp] = c.committed([ck.TopicPartition(topic, 0)], timeout=20)
    c.close()
    assert tp.offset == COUNT


@pytest.mark.parametrize("mode", MODES)
def test_kafka_python_over_tls(secured, topic, mode):
    kafka = need_module("kafka")
    create(secured, topic)
    d = secured.dir
    conf = {"bootstrap_servers": secured.bootstrap(mode), "ssl_cafile": str(d / "ca.pem")}
    if mode == "mtls":
        conf.update({"security_protocol": "SSL", "ssl_certfile": str(d / "alice.pem"),
                     "ssl_keyfile": str(d / "alice.key")})
    else:
        conf.update({"security_protocol": "SASL_SSL", "sasl_mechanism": mechanism(mode),
                     "sasl_plain_username": USER, "sasl_plain_password": PASSWORD})
    p = kafka.KafkaProducer(acks="all", **conf)
    for i in range(COUNT):
        p.send(topic, value=f"v{i}".encode(), partition=0)
    p.flush(30)
    p.close()
    c = kafka.KafkaConsumer(topic, group_id=topic, auto_offset_reset="earliest",
                            enable_auto_commit=False, consumer_timeout_ms=30000, **conf)
    got = [m.value.decode() for _, m in zip(range(COUNT), c)]
    assert got == [f"v{i}" for i in range(COUNT)]
    c.commit()
    assert c.committed(kafka.TopicPartition(topic, 0)) == COUNT
    c.close()


@pytest.mark.parametrize("mode", MODES)
def test_aiokafka_over_tls(secured, topic, mode):
    aiokafka = need_module("aiokafka")
    helpers = need_module("aiokafka.helpers")
    create(secured, topic)
    d = secured.dir

    def conf():
        if mode == "mtls":
            context = helpers.create_ssl_context(cafile=str(d / "ca.pem"),
                                                 certfile=str(d / "alice.pem"),
                                                 keyfile=str(d / "alice.key"))
            return {"security_protocol": "SSL", "ssl_context": context}
        return {"security_protocol": "SASL_SSL", "sasl_mechanism": mechanism(mode),
                "sasl_plain_username": USER, "sasl_plain_password": PASSWORD,
                "ssl_context": helpers.create_ssl_context(cafile=str(d / "ca.pem"))}

    async def run():
        bootstrap = secured.bootstrap(mode)
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **conf())
        await p.start()
        try:
            for i in range(COUNT):
                await p.send_and_wait(topic, value=f"v{i}".encode(), partition=0)
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=topic,
                                      auto_offset_reset="earliest",
                                      enable_auto_commit=False, **conf())
        await c.start()
        try:
            got = []
            while len(got) < COUNT:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=500), 60)
                got += [r.value.decode() for recs in batch.values() for r in recs]
            await c.commit()
            return got, await c.committed(aiokafka.TopicPartition(topic, 0))
        finally:
            await c.stop()

    got, committed = asyncio.run(run())
    assert got == [f"v{i}" for i in range(COUNT)]
    assert committed == COUNT


@pytest.mark.parametrize("mode", MODES)
def test_kafkajs_over_tls(secured, topic, mode):
    node = shutil.which("node")
    need(node is not None, "node is not installed (Debian: nodejs)")
    js = HERE / "js"
    need((js / "node_modules" / "kafkajs" / "package.json").exists(),
         f"kafkajs is not installed: run `npm ci` in {js}")
    create(secured, topic)
    d = secured.dir
    settings = {"ca": str(d / "ca.pem")}
    if mode == "mtls":
        settings.update({"cert": str(d / "alice.pem"), "key": str(d / "alice.key")})
    else:
        settings["sasl"] = {"mechanism": mechanism(mode).lower(), "username": USER,
                            "password": PASSWORD}
    r = subprocess.run([node, str(js / "secure.js"), secured.bootstrap(mode), topic, topic,
                        str(COUNT), json.dumps(settings)], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1"))
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr[-4000:]}"
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"consumed": COUNT,
                                                             "committed": str(COUNT)}


@pytest.mark.parametrize("client", ["java3.9", "java4.1"])
@pytest.mark.parametrize("mode", MODES)
def test_java_clients_over_tls(secured, topic, client, mode):
    java, cp = java_classpath(client, "SecureCheck")
    create(secured, topic)
    d = secured.dir
    props = ["ssl.truststore.type=PEM", f"ssl.truststore.location={d / 'ca.pem'}"]
    if mode == "mtls":
        props += ["security.protocol=SSL", "ssl.keystore.type=PEM",
                  f"ssl.keystore.location={d / 'alice.keystore.pem'}"]
    else:
        module = ("org.apache.kafka.common.security.scram.ScramLoginModule"
                  if mechanism(mode).startswith("SCRAM") else
                  "org.apache.kafka.common.security.plain.PlainLoginModule")
        props += ["security.protocol=SASL_SSL", f"sasl.mechanism={mechanism(mode)}",
                  f'sasl.jaas.config={module} required username="{USER}" '
                  f'password="{PASSWORD}";']
    r = subprocess.run([java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", cp,
                        "SecureCheck", secured.bootstrap(mode), topic, topic, str(COUNT),
                        *props], capture_output=True, text=True, timeout=180)
    out = r.stdout.strip().splitlines()
    assert r.returncode == 0 and out and out[-1] == (
        f"OK produced={COUNT} consumed={COUNT} committed={COUNT}"), (
        f"exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-5000:]}")


def served(port: int, ca: Path, cert: Path | None = None, key: Path | None = None) -> bool:
    """Whether a TLS connection trusting `ca` (presenting `cert`) gets ApiVersions
    answered; a refusal in the handshake, or a close right after it, is False."""
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as s:
                err, _ = api_versions_v0(s)
                return err == 0
    except (OSError, ssl.SSLError, struct.error, AssertionError):
        return False


def tls_failures(b: Broker) -> float:
    from test_metrics import scrape, total
    name = "strand_kafka_tls_handshake_failures"
    return total(scrape(b), name, name + "_total")


def test_certificates_that_must_be_refused_are(secured):
    d = secured.dir
    before = tls_failures(secured.broker)
    port = secured.ssl_port
    assert served(port, d / "ca.pem", d / "alice.pem", d / "alice.key")
    assert not served(port, d / "ca.pem"), "no client certificate"
    assert not served(port, d / "ca.pem", d / "foreign" / "alice.pem",
                      d / "foreign" / "alice.key"), "a foreign CA's certificate"
    assert not served(port, d / "ca.pem", d / "old.pem", d / "old.key"), "an expired one"
    assert not served(port, d / "ca.pem", d / "bob.pem", d / "bob.key"), "no rule maps bob"
    # A client that does not trust the broker's CA refuses it.
    assert not served(port, d / "foreign" / "ca.pem", d / "alice.pem", d / "alice.key")
    # SASL_SSL asks for no client certificate: the handshake is served, SASL follows.
    assert served(secured.sasl_port, d / "ca.pem")
    # Four refusals were the broker's; the client that did not trust it counts too.
    assert tls_failures(secured.broker) >= before + 5


def test_a_wrong_password_over_sasl_ssl_is_refused(secured):
    ck = need_module("confluent_kafka")
    p = ck.Producer({"bootstrap.servers": secured.bootstrap("sasl_ssl"),
                     "security.protocol": "SASL_SSL",
                     "ssl.ca.location": str(secured.dir / "ca.pem"),
                     "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
                     "sasl.password": "wrong"})
    with pytest.raises(ck.KafkaException):
        p.list_topics(timeout=5)


def peer_serial(port: int, ca: Path) -> int:
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as s:
            return int(s.getpeercert()["serialNumber"], 16)


def test_a_renewed_certificate_is_served_without_a_restart(strand, tmp_path):
    d = tmp_path / "certs"
    certs(d)
    port = free_port()
    b = strand(extra_args=["--ssl-certificate-location", str(d / "node.pem"),
                           "--ssl-key-location", str(d / "node.key")],
               extra_listeners=[f"SSL://127.0.0.1:{port}"])
    first = peer_serial(port, d / "ca.pem")
    (d / "node.pem").unlink()
    certs(d)
    deadline = time.monotonic() + 10
    while peer_serial(port, d / "ca.pem") == first:
        assert time.monotonic() < deadline, "the renewed certificate was not served"
        time.sleep(0.2)
    assert served(port, d / "ca.pem")
    # A broken renewal (a key that does not match) leaves the last good one in service.
    shutil.copy(d / "ca.key", d / "node.key")
    time.sleep(2.5)
    assert served(port, d / "ca.pem")
    assert "do not load" in b.stderr_path.read_text(errors="replace")


def test_a_sasl_ssl_cluster_serves_a_stock_client(request, tmp_path, topic):
    """Three nodes with a SASL_SSL listener each beside the PLAINTEXT inter-broker one: a
    client that knows only the SASL_SSL bootstrap is told every node's SASL_SSL endpoint,
    produces to partitions led by every node, consumes in a group and commits."""
    ck = need_module("confluent_kafka")
    adm = need_module("confluent_kafka.admin")
    from test_cluster import owned_cluster
    d = tmp_path / "certs"
    certs(d)
    tls = ["--ssl-certificate-location", str(d / "node.pem"),
           "--ssl-key-location", str(d / "node.key")]
    with owned_cluster(request, extra_args=tls, extra_listeners=["SASL_SSL"]) as c:
        admin = adm.AdminClient({"bootstrap.servers": c.bootstrap()})
        change = adm.UserScramCredentialUpsertion(
            USER, adm.ScramCredentialInfo(adm.ScramMechanism.SCRAM_SHA_512, 4096),
            PASSWORD.encode(), b"cluster-salt")
        for f in admin.alter_user_scram_credentials([change], request_timeout=15).values():
            f.result(timeout=30)
        admin.create_topics([adm.NewTopic(topic, num_partitions=3)])[topic].result(30)
        sasl_ports = {n.node_id: n.listener_ports["SASL_SSL"] for n in c.nodes.values()}
        conf = {"bootstrap.servers": f"localhost:{sasl_ports[1]}",
                "security.protocol": "SASL_SSL", "ssl.ca.location": str(d / "ca.pem"),
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
                "sasl.password": PASSWORD}
        md = adm.AdminClient(conf).list_topics(timeout=30)
        assert {b.id: b.port for b in md.brokers.values()} == sasl_ports
        p = ck.Producer({**conf, "acks": "all"})
        failed = []
        for i in range(3 * COUNT):
            p.produce(topic, f"v{i}".encode(), partition=i % 3,
                      on_delivery=lambda e, m: e and failed.append(e))
        assert p.flush(60) == 0 and not failed, failed
        cons = ck.Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest",
                            "enable.auto.commit": False})
        cons.subscribe([topic])
        got = poll_values(cons, 3 * COUNT, 90)
        assert got == {f"v{i}" for i in range(3 * COUNT)}
        cons.commit(asynchronous=False)
        committed = cons.committed([ck.TopicPartition(topic, i) for i in range(3)], timeout=30)
        cons.close()
        assert [tp.offset for tp in committed] == [COUNT] * 3


def test_the_admin_api_serves_https_and_takes_a_client_certificate(strand, tmp_path):
    """`admin_tls`: the admin API answers over HTTPS with the listeners' certificate; its
    mutating endpoint takes the bearer token or a client certificate of the CA, and refuses
    a caller with neither; plain HTTP gets nothing."""
    import http.client

    d = tmp_path / "certs"
    certs(d, "ops")
    b = strand(extra_args=["--admin-tls", "true",
                           "--ssl-certificate-location", str(d / "node.pem"),
                           "--ssl-key-location", str(d / "node.key"),
                           "--ssl-ca-location", str(d / "ca.pem")])

    def call(method, path, body=None, cert=False, token=None):
        context = ssl.create_default_context(cafile=str(d / "ca.pem"))
        if cert:
            context.load_cert_chain(str(d / "ops.pem"), str(d / "ops.key"))
        c = http.client.HTTPSConnection("localhost", b.admin_port, context=context, timeout=10)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.read().decode()

    assert call("GET", "/v1/health/live") == (200, "live\n")
    status, _ = call("PUT", "/v1/log-level", body="debug")
    assert status == 401
    assert call("PUT", "/v1/log-level", body="info", cert=True)[0] == 200
    token = (b.data_dir / "admin-token").read_text().strip()
    assert call("PUT", "/v1/log-level", body="info", token=token)[0] == 200
    plain = http.client.HTTPConnection("127.0.0.1", b.admin_port, timeout=5)
    with pytest.raises(Exception):
        plain.request("GET", "/v1/health/live")
        plain.getresponse().read()


def test_strandctl_takes_the_client_security_settings(secured, tmp_path, topic):
    """`strandctl --command-config FILE` (Kafka's client properties): over SASL_SSL with
    SCRAM-SHA-512 (the Java tools' sasl.jaas.config form) and PLAIN, and over mutual TLS;
    a wrong password fails the command, naming the authentication."""
    from test_strandctl import ctl
    d = secured.dir
    create(secured, topic)

    def config(name, text):
        f = tmp_path / name
        f.write_text(text)
        return str(f)

    scram = config("scram.properties", f"""# Java tools' form
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="{USER}" password="{PASSWORD}";
ssl.truststore.type=PEM
ssl.truststore.location={d / 'ca.pem'}
""")
    plain = config("plain.properties", f"""security.protocol=SASL_SSL
sasl.mechanism=PLAIN
sasl.username={USER}
sasl.password={PASSWORD}
ssl.ca.location={d / 'ca.pem'}
""")
    mtls = config("mtls.properties", f"""security.protocol=SSL
ssl.ca.location={d / 'ca.pem'}
ssl.certificate.location={d / 'alice.pem'}
ssl.key.location={d / 'alice.key'}
""")
    wrong = config("wrong.properties", f"""security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.username={USER}
sasl.password=nope
ssl.ca.location={d / 'ca.pem'}
""")
    for cfg, port in [(scram, secured.sasl_port), (plain, secured.sasl_port),
                      (mtls, secured.ssl_port)]:
        out = ctl(None, "--brokers", f"localhost:{port}", "--command-config", cfg,
                  "topic", "list").stdout
        assert topic in out, out
    r = ctl(None, "--brokers", f"localhost:{secured.sasl_port}", "--command-config", wrong,
            "topic", "list", expect_rc=None)
    assert r.returncode != 0 and "SaslAuthenticate" in r.stderr, r.stderr


def poll_values(consumer, want: int, timeout_s: float) -> set[str]:
    """The values `consumer` reads until it has `want` distinct ones or `timeout_s` passed."""
    got, deadline = set(), time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.add(m.value().decode())
    return got


def rpc_tls_args(d: Path) -> list[str]:
    return ["--rpc-tls-certificate-location", str(d / "node.pem"),
            "--rpc-tls-key-location", str(d / "node.key"),
            "--rpc-tls-ca-location", str(d / "ca.pem")]


def rpc_tls_refused(node) -> float:
    from test_metrics import scrape, total
    name = "strand_raft_rpc_tls_refused"
    return total(scrape(node), name, name + "_total")


def test_nodes_speak_mutual_tls_and_a_node_of_another_ca_is_refused(request, tmp_path, topic):
    """`rpc_tls_*`: three nodes replicate over mutual TLS (acks=all on RF 3 round-trips);
    the RPC port refuses a plaintext peer; a node whose certificate is of another CA cannot
    join (the seeds refuse its handshake and it is never admitted), and one with a
    certificate of the cluster CA joins."""
    ck = need_module("confluent_kafka")
    adm = need_module("confluent_kafka.admin")
    from test_cluster import owned_cluster
    from strand_harness import wait_until
    d, foreign = tmp_path / "certs", tmp_path / "foreign"
    certs(d)
    certs(foreign)
    with owned_cluster(request, start=False) as c:
        for n in c.nodes.values():
            n.extra_args = rpc_tls_args(d)
        c.start()
        admin = adm.AdminClient({"bootstrap.servers": c.bootstrap()})
        admin.create_topics([adm.NewTopic(topic, num_partitions=3,
                                          replication_factor=3)])[topic].result(30)
        p = ck.Producer({"bootstrap.servers": c.bootstrap(), "acks": "all"})
        failed = []
        for i in range(3 * COUNT):
            p.produce(topic, f"v{i}".encode(), partition=i % 3,
                      on_delivery=lambda e, m: e and failed.append(e))
        assert p.flush(60) == 0 and not failed, failed

        # A peer speaking plain RPC gets nothing: its bytes are not a TLS ClientHello.
        n1 = c.nodes[1]
        before = rpc_tls_refused(n1)
        with socket.create_connection(("127.0.0.1", n1.rpc_port), timeout=5) as s:
            s.sendall(struct.pack(">I", 24) + b"\0" * 24)
            s.settimeout(5)
            try:
                assert s.recv(4096)[:1] != b"\0", "plaintext RPC answered"
            except (ConnectionResetError, socket.timeout):
                pass
        wait_until(lambda: rpc_tls_refused(n1) > before, 10, "the plaintext peer counted")

        # A node of another CA asks the seeds to join: refused, never admitted.
        before = sum(rpc_tls_refused(n) for n in list(c.nodes.values()))
        rogue = c.add_joiner(4, extra_args=rpc_tls_args(foreign), wait=False)
        wait_until(lambda: b"join through seed failed" in rogue.stderr_path.read_bytes(), 30,
                   "the rogue node's join attempts to fail")
        wait_until(lambda: sum(rpc_tls_refused(c.nodes[n]) for n in (1, 2, 3)) > before, 10,
                   "the seeds to count the refused handshake")
        log = rogue.stderr_path.read_text(errors="replace")
        assert "TLS to the seed" in log, log[-2000:]
        rogue.kill9()
        del c.nodes[4]
        assert not (rogue.data_dir / "node-id").exists()
        rogue.root.rename(rogue.root.with_name("n4-refused"))
        assert sorted(c.metadata(1).brokers) == [1, 2, 3]

        # A node of the cluster CA joins over TLS and is listed by every node.
        c.add_joiner(4, extra_args=rpc_tls_args(d))
        wait_until(lambda: all(sorted(c.metadata(n).brokers) == [1, 2, 3, 4]
                               for n in (1, 2, 3, 4)), 30, "every node listing node 4")
        cons = ck.Consumer({"bootstrap.servers": c.nodes[4].bootstrap, "group.id": topic,
                            "auto.offset.reset": "earliest"})
        cons.subscribe([topic])
        got = poll_values(cons, 3 * COUNT, 60)
        cons.close()
        assert got == {f"v{i}" for i in range(3 * COUNT)}


def test_an_ssl_inter_broker_listener_carries_transaction_markers(request, tmp_path, topic):
    """The inter-broker listener is SSL with client certificates required: the nodes reach
    each other's with their node certificates (rpc_tls_*), so a transaction over partitions
    led by every node commits (its markers cross nodes over TLS) and a read_committed
    consumer sees it whole."""
    ck = need_module("confluent_kafka")
    adm = need_module("confluent_kafka.admin")
    from test_cluster import owned_cluster
    d = tmp_path / "certs"
    certs(d)
    args = rpc_tls_args(d) + [
        "--ssl-certificate-location", str(d / "node.pem"),
        "--ssl-key-location", str(d / "node.key"),
        "--ssl-ca-location", str(d / "ca.pem"), "--ssl-client-auth", "required",
        "--inter-broker-listener-name", "SSL"]
    with owned_cluster(request, extra_args=args, extra_listeners=["SSL"]) as c:
        admin = adm.AdminClient({"bootstrap.servers": c.bootstrap()})
        admin.create_topics([adm.NewTopic(topic, num_partitions=3,
                                          replication_factor=3)])[topic].result(30)
        from strand_harness import wait_until

        def leaders() -> set[int]:
            parts = admin.list_topics(topic, timeout=20).topics[topic].partitions
            return {p.leader for p in parts.values() if p.leader >= 1}

        # Elections of a new topic settle, then preferred leaders are restored: leaders end
        # up on more than one node, so the markers cross nodes.
        wait_until(lambda: len(leaders()) >= 2, 60, "leaders on two nodes or more")
        p = ck.Producer({"bootstrap.servers": c.bootstrap(), "transactional.id": topic,
                         "transaction.timeout.ms": 60000})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(3 * COUNT):
            p.produce(topic, f"t{i}".encode(), partition=i % 3)
        p.commit_transaction(60)
        cons = ck.Consumer({"bootstrap.servers": c.bootstrap(), "group.id": topic,
                            "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed"})
        cons.subscribe([topic])
        got = poll_values(cons, 3 * COUNT, 60)
        cons.close()
        assert got == {f"t{i}" for i in range(3 * COUNT)}
