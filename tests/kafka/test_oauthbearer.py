"""SASL/OAUTHBEARER (issue 23): tokens are JWTs signed RS256 by a test identity provider
(keys made with openssl) and verified by the broker against a JWK set file, with Kafka's
claim checks (exp, iat, audience, issuer); the principal is the token's subject, so ACLs
name it. confluent-kafka (oauth_cb) and the Java clients (a token file through the stock
OAuthBearerLoginCallbackHandler) produce and consume; tokens that must be refused are
(foreign key, expired, wrong audience or issuer, unsigned); a key added to the JWK set is
honoured without a restart."""

from __future__ import annotations

import base64
import json
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from strand_harness import Broker, free_port, need, need_module, produce_one_error

ISSUER, AUDIENCE = "https://idp.test", "kafka"
SUBJECT = "svc-orders"
COUNT = 20


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def rsa_key(path: Path) -> dict:
    """A new RSA key at `path`: its public JWK (without kid)."""
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt",
                    "rsa_keygen_bits:2048", "-out", str(path)], check=True, capture_output=True)
    out = subprocess.run(["openssl", "rsa", "-in", str(path), "-noout", "-modulus"],
                         check=True, capture_output=True, text=True).stdout
    modulus = bytes.fromhex(out.strip().split("=", 1)[1])
    return {"kty": "RSA", "use": "sig", "alg": "RS256", "n": b64(modulus), "e": "AQAB"}


def sign(key: Path, kid: str, claims: dict, alg: str = "RS256") -> str:
    header = {"alg": alg, "typ": "JWT", "kid": kid}
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    if alg == "none":
        return signing_input + "."
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(key)],
                         input=signing_input.encode(), check=True, capture_output=True).stdout
    return f"{signing_input}.{b64(sig)}"


def claims(sub: str = SUBJECT, lifetime_s: int = 600, **over) -> dict:
    now = int(time.time())
    c = {"sub": sub, "iss": ISSUER, "aud": [AUDIENCE], "iat": now, "exp": now + lifetime_s,
         "scope": "kafka"}
    c.update(over)
    return c


class OAuth:
    def __init__(self, root: Path):
        self.root = root
        self.key = root / "idp.key"
        self.jwks_path = root / "jwks.json"
        self.jwk = {**rsa_key(self.key), "kid": "idp-1"}
        self.jwks_path.write_text(json.dumps({"keys": [self.jwk]}))
        self.broker: Broker | None = None
        self.port = 0

    def token(self, **over) -> str:
        return sign(self.key, "idp-1", claims(**over))

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def oauth(tmp_path_factory):
    """A broker with a SASL_PLAINTEXT listener offering OAUTHBEARER, the authorizer on
    (the PLAINTEXT listener's User:ANONYMOUS a super user) and ACLs for User:svc-orders."""
    need(subprocess.run(["which", "openssl"], capture_output=True).returncode == 0,
         "openssl is not installed")
    adm = need_module("confluent_kafka.admin")
    o = OAuth(tmp_path_factory.mktemp("oauth"))
    o.port = free_port()
    b = Broker(name="oauthbearer", smp=2,
               extra_listeners=[f"SASL_PLAINTEXT://127.0.0.1:{o.port}"],
               extra_args=["--sasl-oauthbearer-jwks-endpoint-url", f"file://{o.jwks_path}",
                           "--sasl-oauthbearer-expected-audience", AUDIENCE,
                           "--sasl-oauthbearer-expected-issuer", ISSUER,
                           "--authorizer-enabled", "true", "--super-users", "User:ANONYMOUS"])
    b.start()
    o.broker = b
    admin = adm.AdminClient({"bootstrap.servers": b.bootstrap})
    acls = [adm.AclBinding(rtype, name, adm.ResourcePatternType.PREFIXED,
                           f"User:{SUBJECT}", "*", adm.AclOperation.ALL,
                           adm.AclPermissionType.ALLOW)
            for rtype, name in [(adm.ResourceType.TOPIC, "oauth-"),
                                (adm.ResourceType.GROUP, "oauth-")]]
    for f in admin.create_acls(acls, request_timeout=15).values():
        f.result(timeout=20)
    yield o
    rc = b.stop()
    if rc == 0:
        b.cleanup()
    assert rc == 0, f"strand exited with {rc} after SIGTERM:\n{b.log_tails()}"


@pytest.fixture
def otopic(oauth, topic):
    """A topic the ACLs give svc-orders."""
    adm = need_module("confluent_kafka.admin")
    name = f"oauth-{topic}"[:200]
    admin = adm.AdminClient({"bootstrap.servers": oauth.broker.bootstrap})
    admin.create_topics([adm.NewTopic(name, num_partitions=1)])[name].result(20)
    return name


def confluent_conf(oauth: OAuth, **token_over) -> dict:
    def cb(_config: str):
        c = claims(**token_over)
        return sign(oauth.key, "idp-1", c), float(c["exp"])
    return {"bootstrap.servers": oauth.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": cb}


def test_confluent_kafka_produces_and_consumes_in_a_group_with_a_token(oauth, otopic):
    ck = need_module("confluent_kafka")
    conf = confluent_conf(oauth)
    p = ck.Producer({**conf, "acks": "all"})
    failed = []
    for i in range(COUNT):
        p.produce(otopic, f"v{i}".encode(), on_delivery=lambda e, m: e and failed.append(e))
    assert p.flush(30) == 0 and not failed, failed
    c = ck.Consumer({**conf, "group.id": otopic, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    c.subscribe([otopic])
    got, deadline = [], time.monotonic() + 60
    while len(got) < COUNT and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
    c.commit(asynchronous=False)
    committed = c.committed([ck.TopicPartition(otopic, 0)], timeout=20)
    c.close()
    assert got == [f"v{i}" for i in range(COUNT)]
    assert committed[0].offset == COUNT


def test_the_principal_is_the_token_subject(oauth, otopic):
    """A valid token of another subject authenticates, but the ACLs name svc-orders only:
    its produce is refused with TOPIC_AUTHORIZATION_FAILED."""
    ck = need_module("confluent_kafka")
    p = ck.Producer({**confluent_conf(oauth, sub="svc-billing"), "acks": "all",
                     "message.timeout.ms": 10000})
    error = produce_one_error(p, otopic)
    assert error is not None and error.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, error


def sasl_request(sock, api_key: int, version: int, corr: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, corr, 4) + b"test"
    msg = header + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    resp = recv_exact(sock, size)
    assert struct.unpack(">i", resp[:4])[0] == corr
    return resp[4:]


def recv_exact(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def authenticate(oauth: OAuth, token: str) -> tuple[int, str, list[str]]:
    """SaslHandshake v1 (OAUTHBEARER) then SaslAuthenticate v1 with `token`: (error code,
    error message, the mechanisms the handshake listed)."""
    with socket.create_connection(("127.0.0.1", oauth.port), timeout=10) as s:
        mech = b"OAUTHBEARER"
        r = sasl_request(s, 17, 1, 1, struct.pack(">h", len(mech)) + mech)
        err, n = struct.unpack(">hi", r[:6])
        mechanisms, at = [], 6
        for _ in range(n):
            ln = struct.unpack(">h", r[at:at + 2])[0]
            mechanisms.append(r[at + 2:at + 2 + ln].decode())
            at += 2 + ln
        assert err == 0, err
        msg = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
        r = sasl_request(s, 36, 1, 2, struct.pack(">i", len(msg)) + msg)
        code, ln = struct.unpack(">hh", r[:4])
        text = r[4:4 + ln].decode() if ln >= 0 else ""
        return code, text, mechanisms


def test_tokens_that_must_be_refused_are(oauth, tmp_path):
    code, _, mechanisms = authenticate(oauth, oauth.token())
    assert code == 0 and "OAUTHBEARER" in mechanisms, mechanisms
    foreign_key = tmp_path / "foreign.key"
    rsa_key(foreign_key)
    refused = {
        "a key the JWK set does not hold": sign(foreign_key, "idp-1", claims()),
        "expired": oauth.token(lifetime_s=-120),
        "another audience": oauth.token(aud=["billing"]),
        "another issuer": oauth.token(iss="https://evil.test"),
        "no subject": oauth.token(sub=""),
        "unsigned": sign(oauth.key, "idp-1", claims(), alg="none"),
        "not a JWT": "garbage",
    }
    for what, token in refused.items():
        code, text, _ = authenticate(oauth, token)
        assert code == 58, f"{what}: {code} {text}"  # SASL_AUTHENTICATION_FAILED


def test_a_key_added_to_the_jwk_set_is_honoured_without_a_restart(oauth, tmp_path):
    new_key = tmp_path / "idp-2.key"
    jwk = {**rsa_key(new_key), "kid": "idp-2"}
    token = sign(new_key, "idp-2", claims())
    assert authenticate(oauth, token)[0] == 58
    oauth.jwks_path.write_text(json.dumps({"keys": [oauth.jwk, jwk]}))
    deadline = time.monotonic() + 15
    while authenticate(oauth, token)[0] != 0:
        assert time.monotonic() < deadline, "the new key was not taken up"
        time.sleep(0.3)
    # The old key still works (both shards may serve the connection).
    assert all(authenticate(oauth, oauth.token())[0] == 0 for _ in range(4))


@pytest.mark.parametrize("client", ["java3.9", "java4.1"])
def test_java_clients_use_a_token_file(oauth, otopic, client, tmp_path):
    """The stock OAuthBearerLoginCallbackHandler with a file token endpoint (Kafka 3.1+)."""
    from strand_harness import KAFKA_TESTS_DIR, java_classpath
    java, cp = java_classpath(client, "KafkaCheck")
    # The clients' OAuth login parses the token with Jackson and (4.x) jose4j, optional
    # dependencies of kafka-clients: the Maven jars the Streams and Connect tests use.
    apps = KAFKA_TESTS_DIR / "java4-apps-lib"
    extra = [j for pattern in ["jackson-core-*", "jackson-databind-*", "jackson-annotations-*",
                               "jose4j-*"] for j in sorted(apps.glob(pattern + ".jar"))]
    need(len(extra) == 4, f"no Jackson or jose4j jars in {apps}: "
         "run tests/kafka/fetch_java_clients.sh")
    cp = ":".join([cp] + [str(j) for j in extra])
    token_file = tmp_path / "token.jwt"
    token_file.write_text(oauth.token())
    url = f"file://{token_file}"
    handler = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
    r = subprocess.run([java, "-Xshare:auto", "-XX:TieredStopAtLevel=1",
                        f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={url}", "-cp", cp,
                        "KafkaCheck", oauth.bootstrap, otopic, str(COUNT),
                        "security.protocol=SASL_PLAINTEXT", "sasl.mechanism=OAUTHBEARER",
                        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer."
                        "OAuthBearerLoginModule required;",
                        f"sasl.login.callback.handler.class={handler}",
                        f"sasl.oauthbearer.token.endpoint.url={url}"],
                       capture_output=True, text=True, timeout=120)
    out = r.stdout.strip().splitlines()
    assert r.returncode == 0 and out and out[-1] == f"OK produced={COUNT} consumed={COUNT}", (
        f"exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-5000:]}")
