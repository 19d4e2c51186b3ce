"""SCRAM credential administration (KIP-554, issue 23) with confluent-kafka's admin
client, as against Kafka: AlterUserScramCredentials upserts and deletes a user's
credential per mechanism, DescribeUserScramCredentials lists mechanisms and iterations
(never a key), Kafka's errors for what it refuses, and the credentials survive a kill -9
(they are controller commands).
"""

from __future__ import annotations

import pytest

from strand_harness import need_module


@pytest.fixture(scope="module")
def adm():
    return need_module("confluent_kafka.admin")


def alter(adm, b, upsert=(), delete=()):
    """{user: error code or 0} of one AlterUserScramCredentials."""
    admin = adm.AdminClient({"bootstrap.servers": b.bootstrap})
    changes = [adm.UserScramCredentialUpsertion(user, adm.ScramCredentialInfo(mech, iters),
                                                password, b"salt-" + user.encode())
               for user, mech, iters, password in upsert]
    changes += [adm.UserScramCredentialDeletion(user, mech) for user, mech in delete]
    out = {}
    for user, f in admin.alter_user_scram_credentials(changes, request_timeout=15).items():
        try:
            f.result(timeout=20)
            out[user] = 0
        except Exception as e:  # noqa: BLE001 - KafkaException carries the code
            out[user] = e.args[0].code()
    return out


def describe(adm, b, users=None):
    """{user: sorted [(mechanism name, iterations)] or error code}."""
    admin = adm.AdminClient({"bootstrap.servers": b.bootstrap})
    if users is None:
        got = admin.describe_user_scram_credentials(request_timeout=15).result(timeout=20)
        return {u: sorted((i.mechanism.name, i.iterations) for i in d.scram_credential_infos)
                for u, d in got.items()}
    out = {}
    for user, f in admin.describe_user_scram_credentials(users, request_timeout=15).items():
        try:
            d = f.result(timeout=20)
            out[user] = sorted((i.mechanism.name, i.iterations) for i in d.scram_credential_infos)
        except Exception as e:  # noqa: BLE001
            out[user] = e.args[0].code()
    return out


def test_scram_credentials_are_altered_described_and_kept(adm, strand):
    from confluent_kafka import KafkaError
    b = strand()
    sha256, sha512 = adm.ScramMechanism.SCRAM_SHA_256, adm.ScramMechanism.SCRAM_SHA_512
    assert alter(adm, b, upsert=[("alice", sha256, 8192, b"wonderland"),
                                 ("alice", sha512, 4096, b"wonderland"),
                                 ("bob", sha512, 4096, b"builder")]) == {"alice": 0, "bob": 0}
    assert describe(adm, b, ["alice"]) == {
        "alice": [("SCRAM_SHA_256", 8192), ("SCRAM_SHA_512", 4096)]}
    assert describe(adm, b) == {"alice": [("SCRAM_SHA_256", 8192), ("SCRAM_SHA_512", 4096)],
                                "bob": [("SCRAM_SHA_512", 4096)]}
    # Kafka's refusals: too few iterations, too many, a credential that is not there.
    assert alter(adm, b, upsert=[("carol", sha256, 100, b"x")]) == {
        "carol": KafkaError.UNACCEPTABLE_CREDENTIAL}
    assert alter(adm, b, upsert=[("carol", sha256, 16385, b"x")]) == {
        "carol": KafkaError.UNACCEPTABLE_CREDENTIAL}
    assert alter(adm, b, delete=[("carol", sha256)]) == {"carol": KafkaError.RESOURCE_NOT_FOUND}
    assert describe(adm, b, ["carol"]) == {"carol": KafkaError.RESOURCE_NOT_FOUND}
    # A user whose changes are not all acceptable gets none of them.
    assert alter(adm, b, upsert=[("bob", sha256, 4096, b"builder")],
                 delete=[("bob", sha256)]) == {"bob": KafkaError.DUPLICATE_RESOURCE}
    assert describe(adm, b, ["bob"]) == {"bob": [("SCRAM_SHA_512", 4096)]}
    assert alter(adm, b, delete=[("alice", sha256)]) == {"alice": 0}
    b.kill9_and_restart()
    assert describe(adm, b) == {"alice": [("SCRAM_SHA_512", 4096)],
                                "bob": [("SCRAM_SHA_512", 4096)]}


def sasl_conf(b, port, mechanism, user, password):
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def test_sasl_clients_authenticate_with_scram_and_plain(adm, strand, topic):
    """A SASL_PLAINTEXT listener (`listeners`): confluent-kafka producers and
    consumers authenticate with SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN against the
    credentials of AlterUserScramCredentials, and are told that listener's port in
    metadata; a wrong password, an unknown user and a mechanism the user has no
    credential for fail (counted in /metrics), as does any request before
    authentication."""
    import socket
    import struct

    import time

    from confluent_kafka import Consumer, Producer, TopicPartition
    from strand_harness import free_port
    port = free_port()
    b = strand(extra_listeners=[f"SASL_PLAINTEXT://127.0.0.1:{port}"])
    sha256, sha512 = adm.ScramMechanism.SCRAM_SHA_256, adm.ScramMechanism.SCRAM_SHA_512
    assert alter(adm, b, upsert=[("alice", sha256, 4096, b"wonderland"),
                                 ("bob", sha512, 8192, b"builder")]) == {"alice": 0, "bob": 0}
    admin = adm.AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([adm.NewTopic(topic, num_partitions=1,
                                      replication_factor=1)])[topic].result(20)
    for i, (mech, user, pw) in enumerate([("SCRAM-SHA-256", "alice", "wonderland"),
                                          ("SCRAM-SHA-512", "bob", "builder"),
                                          ("PLAIN", "alice", "wonderland"),
                                          ("PLAIN", "bob", "builder")]):
        p = Producer(sasl_conf(b, port, mech, user, pw))
        errors = []
        p.produce(topic, value=f"{mech}-{user}".encode(), partition=0,
                  on_delivery=lambda err, msg: errors.append(err))
        assert p.flush(30) == 0 and errors == [None], (mech, user, errors)
        md = p.list_topics(topic, timeout=10)
        assert [br.port for br in md.brokers.values()] == [port], "the SASL listener's port"
    c = Consumer({**sasl_conf(b, port, "SCRAM-SHA-512", "bob", "builder"),
                  "group.id": "g-" + topic, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 4 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
    c.close()
    assert got == ["SCRAM-SHA-256-alice", "SCRAM-SHA-512-bob", "PLAIN-alice", "PLAIN-bob"]
    # Refused: wrong password, unknown user, a mechanism alice has no credential for.
    for mech, user, pw in [("SCRAM-SHA-256", "alice", "looking-glass"),
                           ("PLAIN", "alice", "looking-glass"),
                           ("SCRAM-SHA-256", "mallory", "x"),
                           ("SCRAM-SHA-512", "alice", "wonderland")]:
        p = Producer({**sasl_conf(b, port, mech, user, pw), "message.timeout.ms": 5000})
        errors = []
        p.produce(topic, value=b"no", partition=0, on_delivery=lambda err, msg: errors.append(err))
        p.flush(10)
        assert errors and errors[0] is not None, (mech, user)
        md_err = None
        try:
            p.list_topics(topic, timeout=3)
        except Exception as e:  # noqa: BLE001
            md_err = e
        assert md_err is not None, (mech, user, "metadata without authentication")
    # A request other than ApiVersions or SASL before authentication closes the connection.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        metadata_v1 = struct.pack(">hhih", 3, 1, 7, -1) + struct.pack(">i", -1)
        s.sendall(struct.pack(">i", len(metadata_v1)) + metadata_v1)
        s.settimeout(5)
        assert s.recv(4) == b"", "closed without an answer"
    from test_metrics import scrape, total
    name = "strand_kafka_sasl_authentication_failures"
    assert total(scrape(b), name, name + "_total") >= 4


@pytest.mark.parametrize("client", ["java3.9", "java4.1"])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_java_clients_authenticate(adm, strand, topic, client, mechanism):
    """The Apache Kafka Java clients produce and read back over the SASL_PLAINTEXT listener
    with their stock SCRAM and PLAIN login modules (tests/kafka/java/KafkaCheck.java)."""
    import subprocess

    from strand_harness import free_port, java_classpath
    java, cp = java_classpath(client, "KafkaCheck")
    port = free_port()
    b = strand(extra_listeners=[f"SASL_PLAINTEXT://127.0.0.1:{port}"])
    sha512 = adm.ScramMechanism.SCRAM_SHA_512
    assert alter(adm, b, upsert=[("carol", sha512, 4096, b"s3cr3t pw")]) == {"carol": 0}
    admin = adm.AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([adm.NewTopic(topic, num_partitions=1,
                                      replication_factor=1)])[topic].result(20)
    module = ("org.apache.kafka.common.security.scram.ScramLoginModule"
              if mechanism.startswith("SCRAM") else
              "org.apache.kafka.common.security.plain.PlainLoginModule")
    jaas = f'{module} required username="carol" password="s3cr3t pw";'
    r = subprocess.run([java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", cp,
                        "KafkaCheck", f"127.0.0.1:{port}", topic, "20",
                        "security.protocol=SASL_PLAINTEXT", f"sasl.mechanism={mechanism}",
                        f"sasl.jaas.config={jaas}"],
                       capture_output=True, text=True, timeout=120)
    out = r.stdout.strip().splitlines()
    assert r.returncode == 0 and out and out[-1] == "OK produced=20 consumed=20", (
        f"exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-5000:]}")


def test_sasl_handshake_v0_takes_bare_tokens(adm, strand):
    """SaslHandshake v0 (clients before SaslAuthenticate): after it the client sends the
    SASL token bare, with a 4-byte length and no Kafka header, and gets the answer the same
    way; then the connection is served. A wrong password closes it."""
    import socket
    import struct

    from strand_harness import free_port
    port = free_port()
    b = strand(extra_listeners=[f"SASL_PLAINTEXT://127.0.0.1:{port}"])
    sha256 = adm.ScramMechanism.SCRAM_SHA_256
    assert alter(adm, b, upsert=[("erin", sha256, 4096, b"pw-erin")]) == {"erin": 0}

    def request(api, version, corr, body):
        payload = struct.pack(">hhih", api, version, corr, -1) + body
        return struct.pack(">i", len(payload)) + payload

    def read(s):
        n = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        return s.recv(n, socket.MSG_WAITALL)

    def handshake(s):
        mech = b"PLAIN"
        s.sendall(request(17, 0, 1, struct.pack(">h", len(mech)) + mech))
        resp = read(s)
        corr, err = struct.unpack_from(">ih", resp, 0)
        assert (corr, err) == (1, 0), resp

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        handshake(s)
        token = b"\0erin\0pw-erin"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert read(s) == b"", "PLAIN answers an empty token"
        # Served now: Metadata v1 for no topics (an empty array).
        s.sendall(request(3, 1, 2, struct.pack(">i", 0)))
        resp = read(s)
        assert struct.unpack_from(">i", resp, 0)[0] == 2
        nbrokers, = struct.unpack_from(">i", resp, 4)
        assert nbrokers == 1
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        handshake(s)
        token = b"\0erin\0wrong"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert s.recv(4) == b"", "closed after a failed authentication"


def test_strandctl_user_sets_lists_and_deletes_a_credential(adm, strand, topic):
    """`strandctl user set` (password on stdin, salted and PBKDF2'd by strandctl) makes a
    credential a SASL client then logs in with; `list`/`describe` show it; `delete` removes
    it; out-of-range iterations are refused before anything is sent."""
    from confluent_kafka import Producer
    from strand_harness import free_port, need
    from test_strandctl import ctl, strandctl_bin
    need(strandctl_bin().exists(), f"strandctl not found at {strandctl_bin()}")
    port = free_port()
    b = strand(extra_listeners=[f"SASL_PLAINTEXT://127.0.0.1:{port}"])
    ctl(b, "user", "set", "frank", "--mechanism", "SCRAM-SHA-256", "--iterations", "4096",
        input="fr4nk pw\n")
    rows = [line.split() for line in ctl(b, "user", "list").stdout.splitlines()[1:]]
    assert rows == [["frank", "SCRAM-SHA-256", "4096"]], rows
    assert describe(adm, b, ["frank"]) == {"frank": [("SCRAM_SHA_256", 4096)]}
    admin = adm.AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([adm.NewTopic(topic, num_partitions=1,
                                      replication_factor=1)])[topic].result(20)
    p = Producer(sasl_conf(b, port, "SCRAM-SHA-256", "frank", "fr4nk pw"))
    errors = []
    p.produce(topic, value=b"hello", on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0 and errors == [None], errors
    ctl(b, "user", "delete", "frank", "--mechanism", "SCRAM-SHA-256")
    r = ctl(b, "user", "describe", "frank", expect_rc=None)
    assert r.returncode != 0 and "91" in r.stderr, r.stderr
    r = ctl(b, "user", "set", "gina", "--iterations", "100", input="pw\n", expect_rc=None)
    assert r.returncode != 0 and "iterations" in r.stderr, r.stderr


def test_sessions_end_unless_reauthenticated_as_the_same_user(adm, strand):
    """KIP-368 (`connections_max_reauth_ms`): SaslAuthenticate v1 tells the session
    lifetime; re-authenticating in place as the same user keeps the connection, as another
    user is refused, and a request after the session ended closes the connection."""
    import socket
    import struct
    import time

    from strand_harness import free_port
    port = free_port()
    b = strand(extra_listeners=[f"SASL_PLAINTEXT://127.0.0.1:{port}"],
               extra_args=["--connections-max-reauth-ms", "2000"])
    sha256 = adm.ScramMechanism.SCRAM_SHA_256
    assert alter(adm, b, upsert=[("gail", sha256, 4096, b"pw-gail"),
                                 ("hank", sha256, 4096, b"pw-hank")]) == {"gail": 0, "hank": 0}

    corr = iter(range(1, 1000))

    def request(api, version, body):
        payload = struct.pack(">hhih", api, version, next(corr), -1) + body
        return struct.pack(">i", len(payload)) + payload

    def read(s):
        head = s.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            return None
        n = struct.unpack(">i", head)[0]
        return s.recv(n, socket.MSG_WAITALL)

    def login(s, user, pw):
        """SaslHandshake v1 PLAIN, SaslAuthenticate v1: (error, session lifetime ms)."""
        mech = b"PLAIN"
        s.sendall(request(17, 1, struct.pack(">h", len(mech)) + mech))
        assert struct.unpack_from(">h", read(s), 4)[0] == 0
        token = b"\0" + user + b"\0" + pw
        s.sendall(request(36, 1, struct.pack(">i", len(token)) + token))
        resp = read(s)
        if resp is None:
            return None, None
        err, msg_len = struct.unpack_from(">hh", resp, 4)
        off = 8 + max(msg_len, 0)
        auth_len = struct.unpack_from(">i", resp, off)[0]
        lifetime = struct.unpack_from(">q", resp, off + 4 + max(auth_len, 0))[0]
        return err, lifetime

    def metadata_ok(s):
        s.sendall(request(3, 1, struct.pack(">i", 0)))
        return read(s) is not None

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        assert login(s, b"gail", b"pw-gail") == (0, 2000)
        assert metadata_ok(s)
        time.sleep(1.2)
        assert login(s, b"gail", b"pw-gail") == (0, 2000), "re-authenticated in place"
        time.sleep(1.2)
        assert metadata_ok(s), "the new session is 2 s from the re-authentication"
        time.sleep(1.2)
        assert not metadata_ok(s), "closed: the session ended"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        assert login(s, b"gail", b"pw-gail") == (0, 2000)
        err, _ = login(s, b"hank", b"pw-hank")
        assert err not in (0, None) or err is None, "another user is refused"
        assert not metadata_ok(s)


def test_a_client_reauthenticates_and_keeps_producing(adm, strand, topic):
    """librdkafka (confluent-kafka) re-authenticates on its own when the session lifetime
    says so (KIP-368): one record every 50 ms across four 2 s sessions, all acknowledged
    on the connection it kept."""
    import time

    from confluent_kafka import Producer
    from strand_harness import free_port
    port = free_port()
    b = strand(extra_listeners=[f"SASL_PLAINTEXT://127.0.0.1:{port}"],
               extra_args=["--connections-max-reauth-ms", "2000"])
    sha512 = adm.ScramMechanism.SCRAM_SHA_512
    assert alter(adm, b, upsert=[("ivy", sha512, 4096, b"pw-ivy")]) == {"ivy": 0}
    from test_metrics import scrape, total
    name = "strand_kafka_connections_accepted"
    before = total(scrape(b), name, name + "_total")
    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "ivy",
                  "sasl.password": "pw-ivy", "acks": "all", "linger.ms": 0})
    acked, failed = [], []
    start = time.monotonic()
    while time.monotonic() - start < 8:
        p.produce(topic, b"v", on_delivery=lambda e, m: (failed if e else acked).append(e))
        p.poll(0.05)
    assert p.flush(30) == 0
    assert not failed and len(acked) >= 100, (len(acked), failed[:3])
    # Its connections (bootstrap, then the broker's) were kept, not remade per session.
    assert total(scrape(b), name, name + "_total") - before <= 2
