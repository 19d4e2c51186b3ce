"""ACLs (issue 23): CreateAcls, DescribeAcls and DeleteAcls through confluent-kafka's admin
client, and what they allow: with `authorizer_enabled`, a SASL user may do what its ACLs
allow and nothing else (deny wins, prefixed patterns, the consumer group, Metadata hiding
what it may not describe); super users may do everything; without the authorizer the ACL
APIs answer SECURITY_DISABLED, as Kafka's. The per-API authorization matrix is
tests/tests/broker_acls.rs."""

from __future__ import annotations

import time

import pytest

from strand_harness import Broker, free_port, need_module, produce_one_error, wait_until

USERS = {"alice": "alice pw", "bob": "bob pw"}


@pytest.fixture(scope="module")
def guarded():
    """A broker with the authorizer on: its PLAINTEXT listener's principal
    (User:ANONYMOUS) is a super user for the test's administration; users alice and bob
    log in on a SASL_PLAINTEXT listener. (broker, SASL bootstrap)."""
    adm = need_module("confluent_kafka.admin")
    port = free_port()
    b = Broker(name="acls", smp=2, extra_listeners=[f"SASL_PLAINTEXT://127.0.0.1:{port}"],
               extra_args=["--authorizer-enabled", "true",
                           "--super-users", "User:ANONYMOUS"])
    b.start()
    admin = adm.AdminClient({"bootstrap.servers": b.bootstrap})
    changes = [adm.UserScramCredentialUpsertion(
        u, adm.ScramCredentialInfo(adm.ScramMechanism.SCRAM_SHA_256, 4096), pw.encode(),
        b"salt-" + u.encode()) for u, pw in USERS.items()]
    for f in admin.alter_user_scram_credentials(changes, request_timeout=15).values():
        f.result(timeout=20)
    yield b, f"127.0.0.1:{port}"
    rc = b.stop()
    if rc == 0:
        b.cleanup()
    assert rc == 0, f"strand exited with {rc} after SIGTERM:\n{b.log_tails()}"


def as_user(bootstrap: str, user: str, **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user,
            "sasl.password": USERS[user], **extra}


def binding(adm, rtype, name, pattern, principal, op, perm, host="*"):
    return adm.AclBinding(rtype, name, pattern, principal, host, op, perm)


def create_acls(admin, bindings):
    for f in admin.create_acls(bindings, request_timeout=15).values():
        f.result(timeout=20)


def test_acls_are_created_described_and_deleted(guarded, topic):
    adm = need_module("confluent_kafka.admin")
    b, _ = guarded
    admin = adm.AdminClient({"bootstrap.servers": b.bootstrap})
    R, P, O, A = adm.ResourceType, adm.ResourcePatternType, adm.AclOperation, \
        adm.AclPermissionType
    mine = [binding(adm, R.TOPIC, topic, P.LITERAL, "User:carol", O.READ, A.ALLOW),
            binding(adm, R.TOPIC, topic[:10], P.PREFIXED, "User:carol", O.WRITE, A.DENY,
                    host="10.1.2.3"),
            binding(adm, R.GROUP, topic, P.LITERAL, "User:carol", O.ALL, A.ALLOW)]
    create_acls(admin, mine)
    carol = adm.AclBindingFilter(R.ANY, None, P.ANY, "User:carol", None, O.ANY, A.ANY)
    got = admin.describe_acls(carol, request_timeout=15).result(timeout=20)
    assert sorted(map(str, got)) == sorted(map(str, mine))
    # MATCH: every ACL that applies to the topic (the literal and the prefixed one).
    match = adm.AclBindingFilter(R.TOPIC, topic, P.MATCH, None, None, O.ANY, A.ANY)
    got = admin.describe_acls(match, request_timeout=15).result(timeout=20)
    assert sorted(map(str, got)) == sorted(map(str, mine[:2]))
    # An ACL Kafka would refuse (an unknown operation) is refused, the others made.
    with pytest.raises(Exception):
        create_acls(admin, [binding(adm, R.TOPIC, topic, P.LITERAL, "carol", O.READ,
                                    A.ALLOW)])
    deleted = admin.delete_acls([carol], request_timeout=15)
    assert sorted(map(str, next(iter(deleted.values())).result(timeout=20))) == sorted(
        map(str, mine))
    assert admin.describe_acls(carol, request_timeout=15).result(timeout=20) == []


def test_a_principal_may_do_what_its_acls_allow_and_no_more(guarded, topic):
    ck = need_module("confluent_kafka")
    adm = need_module("confluent_kafka.admin")
    b, sasl = guarded
    admin = adm.AdminClient({"bootstrap.servers": b.bootstrap})
    secret = f"{topic}-secret"
    for t in (topic, secret):
        admin.create_topics([adm.NewTopic(t, num_partitions=1,
                                          replication_factor=1)])[t].result(20)
    R, P, O, A = adm.ResourceType, adm.ResourcePatternType, adm.AclOperation, \
        adm.AclPermissionType
    group = f"g-{topic}"
    create_acls(admin, [
        # alice: read and write every topic starting with the test's name...
        binding(adm, R.TOPIC, topic, P.PREFIXED, "User:alice", O.WRITE, A.ALLOW),
        binding(adm, R.TOPIC, topic, P.PREFIXED, "User:alice", O.READ, A.ALLOW),
        # ...but not read the secret one (deny wins),
        binding(adm, R.TOPIC, secret, P.LITERAL, "User:alice", O.READ, A.DENY),
        # and use her group.
        binding(adm, R.GROUP, group, P.LITERAL, "User:alice", O.READ, A.ALLOW),
    ])
    # alice produces, consumes in her group and commits.
    p = ck.Producer(as_user(sasl, "alice", acks="all"))
    failed = []
    for i in range(10):
        p.produce(topic, f"v{i}".encode(), on_delivery=lambda e, m: e and failed.append(e))
    assert p.flush(30) == 0 and not failed, failed
    c = ck.Consumer(as_user(sasl, "alice", **{"group.id": group,
                                              "auto.offset.reset": "earliest",
                                              "enable.auto.commit": False}))
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 60
    while len(got) < 10 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    assert len(got) == 10
    c.commit(asynchronous=False)
    c.close()
    # She may write the secret topic but not read it.
    c = ck.Consumer(as_user(sasl, "alice", **{"group.id": group,
                                              "auto.offset.reset": "earliest"}))
    c.assign([ck.TopicPartition(secret, 0, 0)])
    m = None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None:
            break
    c.close()
    assert m is not None and m.error() is not None
    assert m.error().code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED

    # bob: no ACL. Metadata hides every topic; producing is refused; his group too.
    bob_admin = adm.AdminClient(as_user(sasl, "bob"))
    md = bob_admin.list_topics(timeout=20)
    assert topic not in md.topics and secret not in md.topics
    md = bob_admin.list_topics(topic=topic, timeout=20)
    assert md.topics[topic].error.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    p = ck.Producer(as_user(sasl, "bob", **{"message.timeout.ms": 5000}))
    error = produce_one_error(p, topic, partition=0)
    assert error is not None and error.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    c = ck.Consumer(as_user(sasl, "bob", **{"group.id": group}))
    c.subscribe([topic])
    error, deadline = None, time.monotonic() + 30
    while error is None and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is not None:
            error = m.error()
    c.close()
    assert error is not None and error.code() == ck.KafkaError.GROUP_AUTHORIZATION_FAILED
    # bob may not manage ACLs; the super user may.
    with pytest.raises(Exception):
        create_acls(bob_admin, [binding(adm, R.TOPIC, topic, P.LITERAL, "User:bob", O.ALL,
                                        A.ALLOW)])


def test_without_the_authorizer_the_acl_apis_say_security_disabled(strand, topic):
    """(librdkafka ignores DescribeAcls' top-level error: kafka-python describes.)"""
    ck = need_module("confluent_kafka")
    adm = need_module("confluent_kafka.admin")
    kadmin = need_module("kafka.admin")
    kerrors = need_module("kafka.errors")
    b = strand()
    admin = adm.AdminClient({"bootstrap.servers": b.bootstrap})
    acl = adm.AclBinding(adm.ResourceType.TOPIC, topic, adm.ResourcePatternType.LITERAL,
                         "User:a", "*", adm.AclOperation.READ, adm.AclPermissionType.ALLOW)
    with pytest.raises(ck.KafkaException) as e:
        create_acls(admin, [acl])
    assert e.value.args[0].code() == ck.KafkaError.SECURITY_DISABLED
    k = kadmin.KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        everything = kadmin.ACLFilter(
            principal=None, host="*", operation=kadmin.ACLOperation.ANY,
            permission_type=kadmin.ACLPermissionType.ANY,
            resource_pattern=kadmin.ResourcePatternFilter(
                kadmin.ResourceType.ANY, None, kadmin.ACLResourcePatternType.ANY))
        with pytest.raises(kerrors.SecurityDisabledError):
            k.describe_acls(everything)
    finally:
        k.close()


def test_strandctl_acl_adds_lists_and_removes(guarded, topic):
    """`strandctl acl add|list|remove` (over the super user's PLAINTEXT listener)."""
    from strand_harness import need
    from test_strandctl import ctl, strandctl_bin
    need(strandctl_bin().exists(), f"strandctl not found at {strandctl_bin()}")
    b, _ = guarded
    ctl(b, "acl", "add", "--topic", topic, "--prefixed", "--principal", "User:dave",
        "--operation", "READ", "--operation", "describe")
    ctl(b, "acl", "add", "--group", topic, "--principal", "User:dave", "--operation", "ALL",
        "--deny", "--host", "10.0.0.1")
    out = ctl(b, "acl", "list", "--principal", "User:dave").stdout
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    assert sorted(rows) == sorted([
        ["TOPIC", topic, "PREFIXED", "User:dave", "*", "READ", "ALLOW"],
        ["TOPIC", topic, "PREFIXED", "User:dave", "*", "DESCRIBE", "ALLOW"],
        ["GROUP", topic, "LITERAL", "User:dave", "10.0.0.1", "ALL", "DENY"],
    ]), out
    assert "2 ACL(s) removed" in ctl(b, "acl", "remove", "--topic", topic, "--prefixed").stdout
    out = ctl(b, "acl", "list", "--principal", "User:dave").stdout
    assert [line for line in out.splitlines()[1:] if line.strip()] != [] and "TOPIC" not in out
    r = ctl(b, "acl", "add", "--topic", topic, "--principal", "User:dave", "--operation", "FLY",
            expect_rc=None)
    assert r.returncode != 0 and "unknown operation FLY" in r.stderr


def test_a_regex_subscription_takes_only_topics_its_principal_may_describe(guarded, topic):
    """KIP-848: the coordinator resolves a consumer's regex only to topics its principal
    may describe (Kafka's GroupMetadataManager filters the matches with the member's
    request context), so a member is never assigned, and its group never shows, a topic
    hidden from it. An ACL granted later brings the topic in at a next heartbeat."""
    ck = need_module("confluent_kafka")
    adm = need_module("confluent_kafka.admin")
    b, sasl = guarded
    admin = adm.AdminClient({"bootstrap.servers": b.bootstrap})
    shown, hidden = f"re-{topic}-shown", f"re-{topic}-hidden"
    for t in (shown, hidden):
        admin.create_topics([adm.NewTopic(t, num_partitions=1,
                                          replication_factor=1)])[t].result(20)
    R, P, O, A = adm.ResourceType, adm.ResourcePatternType, adm.AclOperation, \
        adm.AclPermissionType
    group = f"g-re-{topic}"
    create_acls(admin, [
        binding(adm, R.TOPIC, shown, P.LITERAL, "User:alice", O.READ, A.ALLOW),
        binding(adm, R.GROUP, group, P.LITERAL, "User:alice", O.READ, A.ALLOW),
    ])

    def assigned() -> set[str]:
        # The super user's view of the group (ConsumerGroupDescribe): the coordinator's
        # assignment, whatever the client made of it.
        d = admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
        return {tp.topic for m in d.members for tp in m.assignment.topic_partitions}

    c = ck.Consumer(as_user(sasl, "alice", **{"group.id": group, "group.protocol": "consumer",
                                              "auto.offset.reset": "earliest"}))
    c.subscribe([f"^re-{topic}-.*"])
    try:
        def settled(want):
            c.poll(0.1)
            return assigned() == want
        wait_until(lambda: settled({shown}), 30, f"alice's member to be assigned {shown}")
        # A few heartbeats later the hidden topic is still not hers.
        end = time.monotonic() + 3
        while time.monotonic() < end:
            c.poll(0.2)
            got = assigned()
            assert hidden not in got, f"{hidden} assigned to a principal that may not see it"
        create_acls(admin, [binding(adm, R.TOPIC, hidden, P.LITERAL, "User:alice", O.READ,
                                    A.ALLOW)])
        wait_until(lambda: settled({shown, hidden}), 30,
                   f"{hidden} in the assignment once alice may describe it")
    finally:
        c.close()
