"""Share groups (KIP-932) against strand, with the Kafka 4.1 Java client's
`KafkaShareConsumer` (tests/kafka/java/ShareCheck.java; its header says what each mode
does and prints). A share group hands the records of one partition to all its members:
each record is *acquired* by one consumer for the acquisition lock
(`group.share.record.lock.duration.ms`), which acknowledges it as ACCEPT (done), RELEASE
(available again at once) or REJECT (never delivered again); a record whose lock runs out
is available again. Each acquisition counts one delivery; a record released (or whose lock
ran out) after `group.share.delivery.count.limit` deliveries is archived instead.

- three consumers of one partition: every record is accepted exactly once, and the records
  are spread over the consumers (queue semantics, no partition ownership);
- a consumer that dies holding records without acknowledging them: its connection ends and
  another consumer gets them, their first delivery not counted;
- REJECTed and ACCEPTed records are never delivered again, to the same consumer or a new one;
- a record RELEASEd at every delivery is delivered `delivery count limit` times, then
  archived, while the records around it are accepted;
- acknowledgements committed before a kill -9 of the broker hold after the restart: a new
  consumer gets exactly the records not accepted before, none of the accepted ones; the
  group itself is still there after the restart (listed, deleted);
- an empty group's start offset moved forward and back (Admin, strandctl) and its state
  deleted; Kafka's refusals of a busy or unknown group;
- group configs: `share.isolation.level=read_committed` never delivers an aborted
  transaction's records, `share.auto.offset.reset=by_duration:PT1H` starts an hour back.

The broker runs with share groups on (`--group-share-enable true`, the default), a 2 s acquisition lock (Kafka's default
is 30 s) and a delivery count limit of 3 (Kafka's default is 5), so that the waits stay
short. A share group starts at the log end (`share.auto.offset.reset=latest`): each test
sets `earliest` on its group with IncrementalAlterConfigs before any consumer joins (as
`kafka-configs.sh --entity-type groups` does), then produces its records. The records of
each test go to a topic of one partition, in batches of five: Kafka acquires whole batches,
and the consumers ask for ten records per fetch (ShareFetch's MaxRecords), so a fetch does
not take the whole partition.

On a cluster: test_cluster_share_groups.py. A share group's membership is persisted in
`__consumer_offsets`, its delivery state in `__share_group_state`: both survive kill -9.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from strand_harness import Broker, api_versions_v0, java_classpath, need_module

try:  # conftest.py attaches the stderr tail of the brokers it knows to a failing report
    from conftest import _MODULE_BROKERS
except ImportError:  # pragma: no cover - run outside tests/kafka
    _MODULE_BROKERS = {}

HERE = Path(__file__).resolve().parent
LOCK_MS = 2000
DELIVERY_COUNT_LIMIT = 3
SHARE_ARGS = ["--group-share-enable", "true",
              "--group-share-record-lock-duration-ms", str(LOCK_MS),
              "--group-share-delivery-count-limit", str(DELIVERY_COUNT_LIMIT)]
# The share APIs KafkaShareConsumer 4.1 sends; it refuses brokers without their v1 (v0 was
# Kafka 4.0's early access).
SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 78, 79
# Records per produced batch (librdkafka's batch.num.messages).
BATCH_RECORDS = 5
# A ShareCheck run past this is killed (its own deadlines are 30 s, `share`'s 60 s).
PROGRAM_TIMEOUT_S = 100


def _uid() -> str:
    return uuid.uuid4().hex[:8]


def _advertised(b: Broker) -> dict[int, tuple[int, int]]:
    """ApiVersions v0 by hand (it lists every API, like later versions): {api: (min, max)}."""
    with socket.create_connection(("127.0.0.1", b.port), timeout=10) as s:
        s.settimeout(10)
        err, ranges = api_versions_v0(s)
    assert err == 0, f"ApiVersions error {err}"
    return {api: (lo, hi) for api, lo, hi in ranges}


@pytest.fixture(scope="module")
def broker(request):
    """The module's broker, with share groups enabled: it must advertise them."""
    b = Broker(name="share-groups", smp=2, num_partitions=1, extra_args=SHARE_ARGS)
    _MODULE_BROKERS[request.module.__name__] = b
    b.start()
    assert SHARE_FETCH in _advertised(b), (
        f"strand started with --group-share-enable true does not advertise ShareFetch "
        f"(API key {SHARE_FETCH})")
    yield b
    rc = b.stop()
    failed = any(getattr(i, f"rep_{w}", None) is not None and getattr(i, f"rep_{w}").failed
                 for i in request.session.items if i.module is request.module
                 for w in ("setup", "call"))
    if rc == 0 and not failed:
        b.cleanup()
    else:
        print(f"\nkept data dir of {b.name}: {b.root}")
    assert rc == 0, f"strand exited with {rc} after SIGTERM:\n{b.log_tails()}"


@pytest.fixture(scope="module")
def ck():
    return need_module("confluent_kafka")


@pytest.fixture(scope="module")
def share_check(broker) -> list[str]:
    """The command running ShareCheck, to be followed by its arguments (compiled against
    kafka-clients 4.1.1; skips when java or the jars are missing)."""
    java, cp = java_classpath("java4.1", "ShareCheck")
    return [java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", cp, "ShareCheck"]


def _run(share_check: list[str], b: Broker, topic: str, group: str, mode: str,
         *args: object) -> dict:
    """One ShareCheck run: its JSON line. A commit refused by the broker fails the test:
    every acknowledgement here is of a record the consumer holds, within its lock."""
    cmd = [*share_check, b.bootstrap, topic, group, mode, *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=PROGRAM_TIMEOUT_S,
                       cwd=HERE)
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0 and lines, (
        f"ShareCheck {mode} exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\n"
        f"stderr:\n{r.stderr[-5000:]}")
    out = json.loads(lines[-1])
    assert not out.get("commit_errors"), f"{mode}: commitSync reported {out['commit_errors']}"
    return out


def _produce(ck, bootstrap: str, topic: str, lo: int, hi: int):
    """Records lo..hi (value = index) in batches of BATCH_RECORDS; checks that record i
    landed at offset i (the topic held lo records before)."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 0, "batch.num.messages": BATCH_RECORDS,
                     "message.timeout.ms": 20000})
    offsets, errs = [], []

    def done(err, msg):
        if err is not None:
            errs.append(err)
        else:
            offsets.append(msg.offset())

    for i in range(lo, hi):
        p.produce(topic, value=str(i).encode(), on_delivery=done)
    assert p.flush(30) == 0, "records still queued after 30 s"
    assert not errs, errs[:3]
    assert sorted(offsets) == list(range(lo, hi)), f"offsets {sorted(offsets)[:10]}..."


def _set_earliest(bootstrap: str, group: str, **more: str):
    """share.auto.offset.reset=earliest on the group (and the `more` configs, `_` for `.`),
    dynamic group configs (Kafka keeps them even before the group exists). librdkafka sends
    ResourceType.GROUP as config resource type 32, Kafka's ConfigResource.Type.GROUP."""
    admin = need_module("confluent_kafka.admin")
    a = admin.AdminClient({"bootstrap.servers": bootstrap})
    configs = {"share.auto.offset.reset": "earliest",
               **{k.replace("_", "."): v for k, v in more.items()}}
    res = admin.ConfigResource(admin.ResourceType.GROUP, group, incremental_configs=[
        admin.ConfigEntry(k, v, incremental_operation=admin.AlterConfigOpType.SET)
        for k, v in configs.items()])
    a.incremental_alter_configs([res], request_timeout=15)[res].result(timeout=20)


def _setup(ck, b: Broker, tag: str, count: int, **configs: str) -> tuple[str, str]:
    """A topic of one partition holding records 0..count, and a share group reading it from
    the start (and the group `configs`, as `_set_earliest` takes them): (topic, group)."""
    topic, group = f"share-{tag}-{_uid()}", f"grp-share-{tag}-{_uid()}"
    admin = need_module("confluent_kafka.admin")
    a = admin.AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([admin.NewTopic(topic, num_partitions=1, replication_factor=-1)],
                    operation_timeout=10, request_timeout=15)[topic].result(timeout=20)
    _set_earliest(b.bootstrap, group, **configs)
    _produce(ck, b.bootstrap, topic, 0, count)
    return topic, group


def _counts(out: dict) -> dict[int, int]:
    return {int(k): v for k, v in out["delivery_counts"].items()}


def _twice_and_missing(accepted: list[int], want: set[int]) -> tuple[list[int], list[int]]:
    seen, twice = set(), []
    for o in accepted:
        if o in seen:
            twice.append(o)
        seen.add(o)
    return sorted(twice), sorted(want - seen)


def _only_new_records_come(ck, share_check, b: Broker, topic: str, group: str, next_: int):
    """Produces one record at offset `next_` and drains one record: a share partition
    hands out its lowest available offsets first, so any earlier record still deliverable
    would come before (or with) this one."""
    _produce(ck, b.bootstrap, topic, next_, next_ + 1)
    out = _run(share_check, b, topic, group, "drain", 1, 30)
    assert out["accepted"] == [next_], (
        f"a new consumer got {out['accepted']}, not only the new record {next_}")


def test_share_apis_are_advertised_at_the_versions_the_java_client_needs(broker):
    """KafkaShareConsumer 4.1 refuses a broker without ShareGroupHeartbeat, ShareFetch and
    ShareAcknowledge v1 ("introduced in Apache Kafka v4.1")."""
    apis = _advertised(broker)
    for key, name in ((SHARE_GROUP_HEARTBEAT, "ShareGroupHeartbeat"),
                      (SHARE_FETCH, "ShareFetch"), (SHARE_ACKNOWLEDGE, "ShareAcknowledge")):
        assert key in apis, f"{name} (API key {key}) is not advertised"
        lo, hi = apis[key]
        assert lo <= 1 <= hi, f"{name} versions {lo}..{hi} exclude v1"


def test_three_consumers_share_one_partition(broker, ck, share_check):
    """Kafka hands the records of one partition to every member of a share group, each
    record acquired by one of them at a time: with every record accepted, each offset is
    accepted exactly once overall, once delivered, and more than one consumer gets some."""
    count = 300
    topic, group = _setup(ck, broker, "three", count)
    out = _run(share_check, broker, topic, group, "share", 3, count)
    by = out["by_consumer"]
    assert len(by) == 3, by.keys()
    accepted = [o for offs in by.values() for o in offs]
    twice, missing = _twice_and_missing(accepted, set(range(count)))
    assert not twice and not missing, f"accepted twice: {twice}; never: {missing}"
    assert sorted(accepted) == list(range(count)), "an offset past the log"
    spread = {name: len(offs) for name, offs in by.items()}
    assert sum(1 for n in spread.values() if n) >= 2, f"records per consumer: {spread}"
    # No lock ran out (each record was accepted within ms of its delivery), so none was
    # delivered twice.
    counts = _counts(out)
    assert set(counts) == set(range(count)), sorted(set(range(count)) - set(counts))
    assert {o: n for o, n in counts.items() if n != 1} == {}, "delivery counts other than 1"
    # Everything accepted: no lag, nothing in flight, as /metrics shows it.
    labels = f'group="{group}",topic="{topic}",partition="0"'
    text = _metrics(broker)
    assert f"strand_share_group_lag{{{labels}}} 0" in text, _grep(text, "strand_share_group")
    for state in ("acquired", "available"):
        sample = f'strand_share_group_records_in_flight{{{labels},state="{state}"}} 0'
        assert sample in text, _grep(text, "strand_share_group")


def _metrics(b: Broker) -> str:
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{b.admin_port}/metrics", timeout=5) as r:
        return r.read().decode()


def _grep(text: str, prefix: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith(prefix))


def _when_empty(share_check: list[str], b, topic: str, group: str, *mode: str) -> dict:
    """A ShareCheck admin `mode` that needs the group empty, again while the group still
    has a member (a consumer whose leave did not arrive before its close ended stays until
    its session times out: GroupNotEmptyException, as from Kafka)."""
    deadline = time.monotonic() + 60
    while True:
        out = _run(share_check, b, topic, group, *mode)
        if out.get("error") != "GroupNotEmptyException" or time.monotonic() > deadline:
            return out
        time.sleep(1)


def _delete_group(share_check: list[str], b, topic: str, group: str) -> dict:
    """Admin.deleteShareGroups once the group is empty."""
    return _when_empty(share_check, b, topic, group, "delete")


def _strandctl_reset(b: Broker, group: str, topic: str, offset: int):
    """`strandctl group reset-offsets --execute` of a share group, again while it still has
    a member (exit 4) for up to 60 s."""
    from test_strandctl import ctl, strandctl_bin
    if not strandctl_bin().exists():
        pytest.skip(f"strandctl not found at {strandctl_bin()}")
    deadline = time.monotonic() + 60
    while True:
        r = ctl(b, "group", "reset-offsets", group, "--topic", topic, "--to-offset",
                str(offset), "--execute", expect_rc=(0, 4))
        if r.returncode == 0:
            assert "committed 1 offsets" in r.stdout, r.stdout
            return
        assert time.monotonic() < deadline, r.stderr
        time.sleep(1)


def _strandctl_counts(b: Broker, group: str, topic: str) -> dict[str, str]:
    """`strandctl group describe` of a share group: the row of `topic`-0 in its partitions
    table (LAG, IN-FLIGHT-AVAILABLE, IN-FLIGHT-ACQUIRED, ARCHIVED), and its member count."""
    from test_strandctl import ctl, strandctl_bin
    if not strandctl_bin().exists():
        pytest.skip(f"strandctl not found at {strandctl_bin()}")
    out = ctl(b, "group", "describe", group).stdout
    header = next((line.split() for line in out.splitlines() if line.startswith("TOPIC ")), None)
    assert header, out
    rows = [line.split() for line in out.splitlines() if line.split()[:2] == [topic, "0"]]
    assert len(rows) == 1, out
    counts = dict(zip(header, rows[0]))
    counts["members"] = out.split(" member(s)")[0].rsplit(", ", 1)[-1]
    return counts


def test_records_held_by_a_crashed_consumer_come_back(broker, ck, share_check):
    """A consumer that dies holding records (no acknowledgement, no close) loses them: its
    connection ends, and Kafka releases what its share session held, that delivery not
    counted (a consumer that hangs with its connection open keeps them until their locks
    run out, then they come back counted: tests/tests/broker_share_groups.rs). Another
    consumer gets every record, each once, the held ones at delivery count 1 again."""
    count = 20
    topic, group = _setup(ck, broker, "crash", count)
    held = _run(share_check, broker, topic, group, "crash-holder", count)["held"]
    assert held and set(held) <= set(range(count)), held
    out = _run(share_check, broker, topic, group, "drain", count, 30)
    twice, missing = _twice_and_missing(out["accepted"], set(range(count)))
    assert not twice and not missing, f"accepted twice: {twice}; never: {missing} (held {held})"
    counts = _counts(out)
    assert {o: counts[o] for o in held} == {o: 1 for o in held}, (
        f"held {held}; delivery counts {counts}")
    assert set(counts.values()) == {1}, counts


def test_records_held_by_a_stuck_consumer_come_back_after_the_lock(broker, ck, share_check):
    """A consumer that stops polling but stays connected (a stuck application) keeps the
    records it holds only until their acquisition locks run out; then Kafka hands them to
    another consumer, counted again (at delivery count 2, or 3 when the stuck client's
    background fetch, still running, acquired them once more in between: its application
    never sees them, and their lock runs out again), and not before."""
    count = 20
    # Longer than the module's lock: strandctl must see the records held before it runs
    # out (it counts a lock that ran out as given back), on a busy machine too.
    lock_ms = 5000
    topic, group = _setup(ck, broker, "stuck", count, share_record_lock_duration_ms=str(lock_ms))
    hold_s = 3 * lock_ms // 1000 + 10
    cmd = [*share_check, broker.bootstrap, topic, group, "hang-holder", str(hold_s)]
    holder = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=HERE)
    try:
        line = holder.stdout.readline() if holder.stdout else ""
        assert line.strip(), f"hang-holder printed nothing: {holder.stderr.read()[-3000:]}"
        held = json.loads(line)["held"]
        assert held and set(held) <= set(range(count)), held
        # strandctl shows the stuck member and what it holds.
        shown = _strandctl_counts(broker, group, topic)
        assert shown["members"] == "1", shown
        # It holds what poll returned and what its background fetch acquired beyond it.
        assert len(held) <= int(shown["IN-FLIGHT-ACQUIRED"]) <= count, (shown, held)
        out = _run(share_check, broker, topic, group, "drain", count, 30)
        assert holder.poll() is None, "the holder was still to be running, connected"
    finally:
        holder.kill()
        holder.wait(timeout=10)
    twice, missing = _twice_and_missing(out["accepted"], set(range(count)))
    assert not twice and not missing, f"accepted twice: {twice}; never: {missing} (held {held})"
    counts = _counts(out)
    # Above 1: the holder's acquisition ended (it never acknowledged, its connection stayed
    # open, so only its lock could end it). At most the limit: nothing was delivered more.
    assert all(2 <= counts[o] <= DELIVERY_COUNT_LIMIT for o in held), (
        f"held {held}; delivery counts {counts}")


def test_rejected_and_accepted_records_are_not_delivered_again(broker, ck, share_check):
    """REJECT archives a record (Kafka never delivers it again), as ACCEPT does: after one
    pass over every record, nothing comes back to the consumer for longer than the lock, nor
    to a new consumer of the group."""
    count = 20
    topic, group = _setup(ck, broker, "reject", count)
    out = _run(share_check, broker, topic, group, "reject-even", count)
    assert sorted(out["first"]) == list(range(count)), out["first"]
    assert out["again"] == [], f"delivered again: {out['again']}"
    _only_new_records_come(ck, share_check, broker, topic, group, count)
    # The group is Empty now (its consumers closed): its start offset still shows, as
    # Kafka's DescribeShareGroupOffsets without topics answers every partition that holds
    # a state, members or not.
    shown = _strandctl_counts(broker, group, topic)
    assert (shown["members"], shown["START-OFFSET"]) == ("0", str(count + 1)), shown


def test_a_poison_record_is_archived_after_the_delivery_count_limit(broker, ck, share_check):
    """A record RELEASEd at each delivery is available again at once, until its delivery
    count reaches `group.share.delivery.count.limit`: Kafka then archives it instead. It is
    delivered exactly `limit` times (counts 1, 2, 3), never again; the others are accepted."""
    count, poison = 10, 3
    topic, group = _setup(ck, broker, "poison", count)
    out = _run(share_check, broker, topic, group, "poison", poison, 6)
    assert out["poison_deliveries"] == list(range(1, DELIVERY_COUNT_LIMIT + 1)), out
    want = set(range(count)) - {poison}
    twice, missing = _twice_and_missing(out["accepted"], want)
    assert not twice and not missing, f"accepted twice: {twice}; never: {missing}"
    assert set(out["accepted"]) == want, out["accepted"]
    labels = f'group="{group}",topic="{topic}",partition="0"'
    archived = f"strand_share_group_records_archived_total{{{labels}}} 1"
    assert archived in _metrics(broker), _grep(_metrics(broker), "strand_share_group")
    shown = _strandctl_counts(broker, group, topic)
    assert (shown["ARCHIVED"], shown["IN-FLIGHT-ACQUIRED"]) == ("1", "0"), shown
    _only_new_records_come(ck, share_check, broker, topic, group, count)


def test_accepted_records_stay_accepted_across_broker_kill9(broker, ck, share_check, strand):
    """Kafka answers an acknowledgement after the share partition's state is persisted
    (the share coordinator's __share_group_state): after kill -9 and a restart on the same
    data dir and port, a new consumer gets exactly the records not accepted before, and no
    accepted one ever comes back. What the first consumer held unacknowledged went back to
    the group when it closed, and stays available across the restart."""
    b = strand(name="k9", smp=2, num_partitions=1, extra_args=SHARE_ARGS)
    count, k = 60, 25
    topic, group = _setup(ck, b, "k9", count)
    first = _run(share_check, b, topic, group, "accept-some", k)["accepted"]
    assert len(first) == len(set(first)) == k, first
    # Admin.listShareGroupOffsets: the start offset is the first record not accepted.
    start = {"0": min(set(range(count)) - set(first))}
    assert _run(share_check, b, topic, group, "offsets")["start_offsets"] == start

    b.kill9()
    b.restart(same_port=True)
    assert _run(share_check, b, topic, group, "offsets")["start_offsets"] == start
    rest = set(range(count)) - set(first)
    out = _run(share_check, b, topic, group, "drain", len(rest), 40)
    again = sorted(set(out["accepted"]) & set(first))
    assert not again, f"accepted before kill -9, delivered again: {again}"
    twice, missing = _twice_and_missing(out["accepted"], rest)
    assert not twice and not missing, f"accepted twice: {twice}; never: {missing}"
    _only_new_records_come(ck, share_check, b, topic, group, count)

    # The membership is persisted too (a snapshot in __consumer_offsets): after another
    # kill -9 the group is listed without any member joining, and deleting it deletes it
    # (a group forgotten by the restart would answer GroupIdNotFoundException).
    b.kill9()
    b.restart(same_port=True)
    from test_strandctl import ctl, table
    listed = table(ctl(b, "group", "list").stdout, "GROUP")
    assert any(x["GROUP"] == group for x in listed), listed
    assert _delete_group(share_check, b, topic, group)["deleted"] is True
    gone = _run(share_check, b, topic, group, "offsets")
    assert gone.get("error") == "GroupIdNotFoundException", gone


def test_a_deleted_share_group_starts_over(broker, ck, share_check):
    """Admin.deleteShareGroups (DeleteGroups) of a share group without members deletes its
    delivery state with it (Kafka's DeleteShareGroupState): its offsets are gone, and a
    new consumer of the same group id reads the partition from the start again (the
    group's share.auto.offset.reset=earliest config stays)."""
    count, k = 20, 10
    topic, group = _setup(ck, broker, "delete", count)
    first = _run(share_check, broker, topic, group, "accept-some", k)["accepted"]
    assert len(set(first)) == k, first
    assert _run(share_check, broker, topic, group, "offsets")["start_offsets"] == {"0": k}
    deleted = _delete_group(share_check, broker, topic, group)
    assert deleted["deleted"] is True, deleted
    gone = _run(share_check, broker, topic, group, "offsets")
    assert gone.get("error") == "GroupIdNotFoundException", gone
    out = _run(share_check, broker, topic, group, "drain", count, 30)
    twice, missing = _twice_and_missing(out["accepted"], set(range(count)))
    assert not twice and not missing, f"accepted twice: {twice}; never: {missing}"


def test_share_offsets_are_reset_and_deleted_while_the_group_is_empty(broker, ck, share_check):
    """Admin.alterShareGroupOffsets (AlterShareGroupOffsets) moves an empty share group's
    start offset forward or back, discarding what was in flight or acknowledged: the next
    consumer gets exactly the records from the new start. Admin.deleteShareGroupOffsets
    (DeleteShareGroupOffsets) deletes the group's state of a topic: the group starts over
    from share.auto.offset.reset. Kafka's refusals: a group with a member
    (GroupNotEmptyException), an unknown group (GroupIdNotFoundException), a topic with no
    state to delete (UnknownTopicOrPartitionException)."""
    count = 20
    topic, group = _setup(ck, broker, "reset", count)
    first = _run(share_check, broker, topic, group, "accept-some", 10)["accepted"]
    assert len(set(first)) == 10, first

    def drained(want: set[int]) -> None:
        out = _run(share_check, broker, topic, group, "drain", len(want), 30)
        twice, missing = _twice_and_missing(out["accepted"], want)
        extra = sorted(set(out["accepted"]) - want)
        assert not twice and not missing and not extra, (
            f"accepted twice: {twice}; never: {missing}; not expected: {extra}")

    # Forward past records never delivered: 15..19 only.
    def admin(*mode: str, when_empty: bool = True, group_id: str = group) -> dict:
        """An admin mode's outcome without ShareCheck's commit_errors (none are made)."""
        out = (_when_empty(share_check, broker, topic, group_id, *mode) if when_empty
               else _run(share_check, broker, topic, group_id, *mode))
        return {k: v for k, v in out.items() if k != "commit_errors"}

    assert admin("alter", "15") == {"altered": True}
    assert _run(share_check, broker, topic, group, "offsets")["start_offsets"] == {"0": 15}
    drained(set(range(15, count)))
    # Back over accepted records (with strandctl): they are delivered again.
    _strandctl_reset(broker, group, topic, 5)
    assert _run(share_check, broker, topic, group, "offsets")["start_offsets"] == {"0": 5}
    drained(set(range(5, count)))
    # Deleted: the state is gone, the group reads from the start again (earliest).
    assert admin("delete-offsets") == {"deleted": True}
    assert _run(share_check, broker, topic, group, "offsets")["start_offsets"] == {}
    drained(set(range(count)))
    assert admin("delete-offsets") == {"deleted": True}
    nothing = admin("delete-offsets", when_empty=False)
    assert nothing == {"deleted": False, "error": "UnknownTopicOrPartitionException"}, nothing

    unknown = admin("alter", "0", when_empty=False, group_id=f"grp-none-{_uid()}")
    assert unknown == {"altered": False, "error": "GroupIdNotFoundException"}, unknown
    # A member that halted without leaving stays until its session times out.
    held = _run(share_check, broker, topic, group, "crash-holder", count)["held"]
    assert held, held
    busy = admin("alter", "0", when_empty=False)
    assert busy == {"altered": False, "error": "GroupNotEmptyException"}, busy


def test_a_read_committed_share_group_never_gets_aborted_records(broker, ck, share_check):
    """share.isolation.level=read_committed (a group config, as in Kafka): the group reads
    up to the last stable offset and never gets the records of an aborted transaction;
    a read_uncommitted group of the same topic gets them all. Three transactions of five
    records (committed, aborted, committed): each marker takes one offset, so the data is
    at 0-4, 6-10 and 12-16."""
    topic = f"share-txn-{_uid()}"
    admin = need_module("confluent_kafka.admin")
    a = admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    a.create_topics([admin.NewTopic(topic, num_partitions=1, replication_factor=-1)],
                    operation_timeout=10, request_timeout=15)[topic].result(timeout=20)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap,
                     "transactional.id": f"share-txn-{_uid()}", "linger.ms": 0})
    p.init_transactions(20)
    for commit in (True, False, True):
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, value=str(i).encode())
        p.flush(20)
        (p.commit_transaction if commit else p.abort_transaction)(20)
    committed, aborted = set(range(0, 5)) | set(range(12, 17)), set(range(6, 11))
    for level, want in (("read_committed", committed),
                        ("read_uncommitted", committed | aborted)):
        group = f"grp-share-{level}-{_uid()}"
        _set_earliest(broker.bootstrap, group, share_isolation_level=level)
        out = _run(share_check, broker, topic, group, "drain", len(want), 30)
        twice, missing = _twice_and_missing(out["accepted"], want)
        extra = sorted(set(out["accepted"]) - want)
        assert not twice and not missing and not extra, (
            f"{level}: twice {twice}; never {missing}; not expected {extra}")


def test_a_share_group_can_start_a_duration_ago(broker, ck, share_check):
    """share.auto.offset.reset=by_duration:PT1H (Kafka's ISO-8601 form): a share group
    that never read a partition starts at its first record written at most an hour ago —
    not at the records of two hours ago, not at the log end."""
    topic = f"share-ago-{_uid()}"
    admin = need_module("confluent_kafka.admin")
    a = admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    a.create_topics([admin.NewTopic(topic, num_partitions=1, replication_factor=-1)],
                    operation_timeout=10, request_timeout=15)[topic].result(timeout=20)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    now_ms = int(time.time() * 1000)
    for i in range(10):
        at = now_ms - 2 * 3600 * 1000 if i < 5 else now_ms
        p.produce(topic, value=str(i).encode(), timestamp=at)
        p.flush(20)
    group = f"grp-share-ago-{_uid()}"
    _set_earliest(broker.bootstrap, group, share_auto_offset_reset="by_duration:PT1H")
    out = _run(share_check, broker, topic, group, "drain", 5, 30)
    assert sorted(out["accepted"]) == list(range(5, 10)), out["accepted"]
