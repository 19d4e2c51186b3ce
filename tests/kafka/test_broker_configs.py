"""Dynamic broker configs, as `kafka-configs.sh --entity-type brokers` sets them, through
confluent-kafka's admin client: a log default set for the cluster (`--entity-default`, the
empty resource name) or for one node applies at once to every topic that does not set
its own (a produce above `message.max.bytes` is refused, acks=all waits for
`min.insync.replicas`), DescribeConfigs names its source as Kafka does, it survives kill -9,
and deleting it brings the static default back. What cannot change while the broker runs,
bad values and another node's resource are refused with Kafka's codes."""

from __future__ import annotations

import pytest

from strand_harness import alter_default, describe_default, need_module


@pytest.fixture
def ck():
    return need_module("confluent_kafka")


def admin_of(ck, broker):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def node_id(admin) -> str:
    [nid] = admin.list_topics(timeout=10).brokers
    return str(nid)


def alter_broker(ck, admin, name, *changes, validate_only=False):
    """IncrementalAlterConfigs of one BROKER resource: changes are (name, op, value)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(k, v, incremental_operation=getattr(AlterConfigOpType, op))
               for k, op, v in changes]
    r = ConfigResource(ResourceType.BROKER, name, incremental_configs=entries)
    return admin.incremental_alter_configs([r], validate_only=validate_only)[r].result(15)


def refusal(ck, admin, name, *changes):
    """The error code an alter of a BROKER resource is refused with."""
    with pytest.raises(ck.KafkaException) as e:
        alter_broker(ck, admin, name, *changes)
    return e.value.args[0].code()


def describe(admin, kind, name):
    from confluent_kafka.admin import ConfigResource, ResourceType

    r = ConfigResource(getattr(ResourceType, kind), name)
    return admin.describe_configs([r])[r].result(15)


def produce_error(ck, broker, topic, size, acks="all"):
    """The delivery error of one record of `size` bytes (None when delivered)."""
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "retries": 0})
    errors = []
    p.produce(topic, b"x" * size, partition=0, on_delivery=lambda e, m: errors.append(e))
    p.flush(20)
    assert errors, "no delivery report within 20 s"
    return errors[0]


def test_a_dynamic_log_default_applies_to_topics_that_set_none_and_survives_kill9(ck, strand,
                                                                                 topic):
    from confluent_kafka.admin import ConfigSource, NewTopic

    broker = strand(name="dyn")
    admin = admin_of(ck, broker)
    me = node_id(admin)
    plain, own = f"{topic}-plain", f"{topic}-own"
    for t, configs in [(plain, {}), (own, {"max.message.bytes": "100000"})]:
        admin.create_topics([NewTopic(t, 1, 1, config=configs)])[t].result(15)
    assert produce_error(ck, broker, plain, 5000) is None

    assert alter_default(broker.bootstrap, ("message.max.bytes", "SET", "2000")) == (0, None)
    alter_broker(ck, admin, me, ("min.insync.replicas", "SET", "2"))
    dyn_default = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    dyn_broker = ConfigSource.DYNAMIC_BROKER_CONFIG.value

    def check_applied():
        err = produce_error(ck, broker, plain, 5000, acks=1)
        assert err is not None and err.code() == ck.KafkaError.MSG_SIZE_TOO_LARGE, err
        assert produce_error(ck, broker, own, 5000, acks=1) is None
        err = produce_error(ck, broker, own, 10)
        assert err is not None and err.code() == ck.KafkaError.NOT_ENOUGH_REPLICAS, err
        topic_configs = describe(admin, "TOPIC", plain)
        assert (topic_configs["max.message.bytes"].value,
                topic_configs["max.message.bytes"].source) == ("2000", dyn_default)
        assert (topic_configs["min.insync.replicas"].value,
                topic_configs["min.insync.replicas"].source) == ("2", dyn_broker)
        assert describe(admin, "TOPIC", own)["max.message.bytes"].value == "100000"
        mine = describe(admin, "BROKER", me)
        assert (mine["message.max.bytes"].value, mine["message.max.bytes"].source,
                mine["message.max.bytes"].is_read_only) == ("2000", dyn_default, False)
        assert (mine["min.insync.replicas"].value,
                mine["min.insync.replicas"].source) == ("2", dyn_broker)
        assert mine["broker.id"].is_read_only
        assert describe_default(broker.bootstrap) == {"message.max.bytes": ("2000", dyn_default)}

    check_applied()
    broker.kill9_and_restart()
    admin = admin_of(ck, broker)
    check_applied()

    assert alter_default(broker.bootstrap, ("message.max.bytes", "DELETE", None)) == (0, None)
    alter_broker(ck, admin, me, ("min.insync.replicas", "DELETE", ""))
    assert produce_error(ck, broker, plain, 5000) is None
    assert describe_default(broker.bootstrap) == {}
    assert describe(admin, "TOPIC", plain)["max.message.bytes"].source == \
        ConfigSource.DEFAULT_CONFIG.value


def test_list_defaults_append_validate_only_changes_nothing_and_bad_changes_are_refused(
        ck, broker, topic):
    from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType

    admin = admin_of(ck, broker)
    me = node_id(admin)
    alter_broker(ck, admin, me, ("log.retention.ms", "SET", "1234"), validate_only=True)
    assert describe(admin, "BROKER", me)["log.retention.ms"].value == "604800000"

    # APPEND to a list config starts from what the node has (Kafka's default "delete").
    alter_broker(ck, admin, me, ("log.cleanup.policy", "APPEND", "compact"))
    assert describe(admin, "BROKER", me)["log.cleanup.policy"].value == "delete,compact"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    assert describe(admin, "TOPIC", topic)["cleanup.policy"].value == "delete,compact"
    alter_broker(ck, admin, me, ("log.cleanup.policy", "SUBTRACT", "compact"))
    assert describe(admin, "BROKER", me)["log.cleanup.policy"].value == "delete"
    alter_broker(ck, admin, me, ("log.cleanup.policy", "DELETE", ""))

    # The Kerberos login settings are kept (Kafka's tools and librdkafka's tests set them).
    alter_broker(ck, admin, me, ("sasl.kerberos.min.time.before.relogin", "SET", "58000"))
    assert describe(admin, "BROKER", me)["sasl.kerberos.min.time.before.relogin"].value == "58000"

    # AlterConfigs replaces the resource's dynamic configs with the ones it names.
    r = ConfigResource(ResourceType.BROKER, me, set_config={"log.retention.ms": "3600000"})
    admin.alter_configs([r])[r].result(15)
    mine = describe(admin, "BROKER", me)
    assert mine["log.retention.ms"].value == "3600000"
    assert mine["sasl.kerberos.min.time.before.relogin"].value == "60000"
    alter_broker(ck, admin, me, ("log.retention.ms", "DELETE", ""))

    codes = ck.KafkaError
    assert refusal(ck, admin, me, ("broker.id", "SET", "9")) == codes.INVALID_REQUEST
    assert refusal(ck, admin, me, ("num.partitions", "SET", "9")) == codes.INVALID_REQUEST
    assert refusal(ck, admin, me, ("log.retention.ms", "SET", "soon")) == codes.INVALID_CONFIG
    code, message = alter_default(broker.bootstrap, ("log.cleanup.policy", "SET", "shred"))
    assert code == codes.INVALID_CONFIG and "shred" in message, (code, message)
    assert refusal(ck, admin, me, ("log.retention.ms", "APPEND", "1")) == codes.INVALID_CONFIG
    assert describe_default(broker.bootstrap) == {}
    assert describe(admin, "BROKER", me)["log.retention.ms"].value == "604800000"


def test_flush_configs_are_taken_as_kafka_takes_them(ck, broker, topic):
    """`flush.ms` and `flush.messages` bound the time and records between fsyncs; Strand
    makes every batch durable as it writes it, which meets any value (librdkafka's admin
    tests set flush.ms)."""
    from confluent_kafka.admin import NewTopic

    admin = admin_of(ck, broker)
    admin.create_topics([NewTopic(topic, 1, 1, config={"flush.ms": "12345678"})])[topic].result(15)
    configs = describe(admin, "TOPIC", topic)
    assert (configs["flush.ms"].value, configs["flush.messages"].value) == \
        ("12345678", "9223372036854775807")
    bad = f"{topic}-bad"
    fut = admin.create_topics([NewTopic(bad, 1, 1, config={"flush.messages": "0"})])[bad]
    with pytest.raises(ck.KafkaException) as e:
        fut.result(15)
    assert e.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
