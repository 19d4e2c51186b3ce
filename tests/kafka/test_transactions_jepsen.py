"""Transactions under kill -9, checked like Jepsen (jepsen_txn_check.py).

Two transactional producers (confluent-kafka, each its own transactional.id) write
transactions of 2-4 records over the 3 partitions of each of 2 topics for WORKLOAD_S,
aborting about one in three (after delivering their records, so that aborted records are in
the log), while the broker is killed -9 and restarted on its port twice, each time while a
producer is in commit_transaction if one is within a second. A thread samples every
partition's last stable offset (get_watermark_offsets of a read_committed consumer) every
SAMPLE_EVERY_S, and a read_committed consumer tails the partitions. When the producers are
done, every transactional.id is initialised once more (which ends what a failed producer
left open), and a fresh read_committed consumer reads everything. jepsen_txn_check.py then
checks the history: no record of an aborted or never-committed transaction read, none read
before its commit was called, every committed transaction entirely visible, every unknown
one all or nothing, no value twice, offsets increasing, LSOs never moving back (across the
restarts too) nor behind what was read.

A producer whose commit fails records the transaction `unknown`, aborts and carries on, or
starts a new producer (new Producer + init_transactions) when the error is fatal or the
abort fails. Every call has a timeout; a producer stuck in one for STUCK_S anyway
(librdkafka 2.x can hang after a coordinator restart: confluentinc/librdkafka#5456) is
abandoned in its thread, its transaction left `unknown`, and a new thread takes over its
transactional.id. send_offsets_to_transaction is not used.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

from jepsen_txn_check import ABORT, COMMIT, UNKNOWN, Lso, Read, Txn, check
from strand_harness import need_module, wait_until
from test_transactions import create_topics

PRODUCERS = 2
PARTITIONS = 3
WORKLOAD_S = 15.0
# kill -9 and restart at these times into the workload, each as soon as the impatient
# producer (the last, see COMMIT_TIMEOUT_S) is in commit_transaction, or KILL_WAIT_S later.
KILLS_AT_S = (5.0, 10.0)
KILL_WAIT_S = 1.0
RECORDS_PER_TXN = (2, 4)
ABORT_FRACTION = 1 / 3
# A pause between one producer's transactions, so that two producers, the sampler, the
# tailing consumer and a debug broker share 2 cores with the rest of the suite.
TXN_PAUSE_S = 0.02
SAMPLE_EVERY_S = 0.1
# Every producer call's timeout, and how long past its start a call counts as hung.
CALL_TIMEOUT_S = 10.0
# Each producer's commit_transaction timeout: the first rides through a restart, the second
# gives up on a commit the broker does not answer within a second, so that the history has
# commits of unknown outcome, which its new producer's init_transactions then completes or
# aborts.
COMMIT_TIMEOUT_S = (CALL_TIMEOUT_S, 1.0)
STUCK_S = 30.0
# Short, so the coordinator also aborts what a failed producer leaves open.
TRANSACTION_TIMEOUT_MS = 10_000
SETTLE_DEADLINE_S = 40.0
READ_DEADLINE_S = 60.0


class Abandoned(Exception):
    """The watchdog gave up on this writer while it was in a call: it stops at once."""


class History:
    """The transactions of every writer, as jepsen_txn_check.Txn fields. A writer's updates
    and its abandonment are serialised by one lock, so nothing an abandoned writer does
    later changes the history."""

    def __init__(self):
        self.lock = threading.Lock()
        self.txns: dict[str, dict] = {}
        self.commit_times: list[float] = []

    def begin(self, w: "Writer", txn_id: str):
        with self.lock:
            self._live(w)
            self.txns[txn_id] = {"outcome": UNKNOWN, "writes": [], "commit_at": None,
                                 "commit_called": False}

    def wrote(self, w: "Writer", txn_id: str, topic: str, partition: int, value: str):
        with self.lock:
            self._live(w)
            self.txns[txn_id]["writes"].append((topic, partition, value))

    def committing(self, w: "Writer", txn_id: str):
        with self.lock:
            self._live(w)
            t = self.txns[txn_id]
            t["commit_called"], t["commit_at"] = True, time.monotonic()

    def end(self, w: "Writer", txn_id: str, outcome: str):
        with self.lock:
            self._live(w)
            self.txns[txn_id]["outcome"] = outcome
            if outcome == COMMIT:
                self.commit_times.append(time.monotonic())

    def abandon(self, w: "Writer"):
        with self.lock:
            w.abandoned = True

    @staticmethod
    def _live(w: "Writer"):
        if w.abandoned:
            raise Abandoned(w.name)

    def history(self) -> list[Txn]:
        with self.lock:
            return [Txn(i, t["outcome"], t["writes"], t["commit_at"], t["commit_called"])
                    for i, t in self.txns.items()]


class Writer:
    """A thread running transactions with one transactional.id until stopped."""

    def __init__(self, ck, bootstrap: str, tid: str, index: int, gen: int, history: History,
                 parts: list[tuple[str, int]]):
        self.ck, self.bootstrap, self.tid, self.index, self.gen = ck, bootstrap, tid, index, gen
        self.commit_timeout_s = COMMIT_TIMEOUT_S[index]
        # Transaction ids and values are "p<index>.<gen>.<n>[:<k>]".
        self.name = f"p{index}.{gen}"
        self.history = history
        self.parts = parts
        self.rng = random.Random(self.name)
        self.producer = None
        self.producers = 0
        self.errors: Counter = Counter()
        self.call: tuple[str, float] | None = None
        self.abandoned = False
        self.exc: BaseException | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"writer-{self.name}",
                                       daemon=True)

    def start(self) -> "Writer":
        self.thread.start()
        return self

    def stuck_for(self) -> float:
        call = self.call
        return time.monotonic() - call[1] if call else 0.0

    def committing(self) -> bool:
        call = self.call
        return call is not None and call[0] == "commit_transaction"

    def _call(self, name: str, fn, *args, **kw):
        self.call = (name, time.monotonic())
        try:
            return fn(*args, **kw)
        finally:
            self.call = None
            if self.abandoned:
                raise Abandoned(f"{self.name} in {name}")

    def _note(self, what: str, e: BaseException):
        err = e.args[0] if e.args else e
        name = err.name() if hasattr(err, "name") else type(e).__name__
        self.errors[f"{what}:{name}"] += 1

    def _on_error(self, err):
        self.errors[f"error_cb:{err.name()}"] += 1

    def _run(self):
        try:
            n = 0
            while not self.stop.is_set():
                if self.producer is None:
                    self._new_producer()
                    continue
                n += 1
                if not self._one_txn(f"{self.name}.{n}"):
                    self._drop_producer()
                self.stop.wait(TXN_PAUSE_S)
        except Abandoned:
            pass
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.exc = e

    def _new_producer(self):
        self.producer = self.ck.Producer({
            "bootstrap.servers": self.bootstrap,
            "transactional.id": self.tid,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "message.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "linger.ms": 5,
            "reconnect.backoff.max.ms": 500,
            "error_cb": self._on_error,
        })
        self.producers += 1
        ok = False
        try:
            self._call("init_transactions", self.producer.init_transactions, CALL_TIMEOUT_S)
            ok = True
        except self.ck.KafkaException as e:
            self._note("init_transactions", e)
        if not ok:  # outside the except: its traceback would keep the producer alive
            self._drop_producer()
            self.stop.wait(0.2)

    def _drop_producer(self):
        """Forgets the producer; its destruction is a call like any other."""
        holder = [self.producer]
        self.producer = None
        self._call("destroy", holder.clear)

    def _one_txn(self, txn_id: str) -> bool:
        """One transaction; False when the producer must be replaced."""
        p = self.producer
        self.history.begin(self, txn_id)
        committing = False
        try:
            self._call("begin_transaction", p.begin_transaction)
            for k in range(self.rng.randint(*RECORDS_PER_TXN)):
                topic, part = self.rng.choice(self.parts)
                value = f"{txn_id}:{k}"
                self.history.wrote(self, txn_id, topic, part, value)
                self._call("produce", p.produce, topic, value=value.encode(), partition=part)
            if self.rng.random() < ABORT_FRACTION:
                # Delivered first: abort_transaction drops what is still queued, and the
                # broker's read_committed filtering is only tested by aborted records in
                # the log.
                self._call("flush", p.flush, CALL_TIMEOUT_S)
                self._call("abort_transaction", p.abort_transaction, CALL_TIMEOUT_S)
                self.history.end(self, txn_id, ABORT)
                return True
            committing = True
            self.history.committing(self, txn_id)
            self._call("commit_transaction", p.commit_transaction, self.commit_timeout_s)
            self.history.end(self, txn_id, COMMIT)
            return True
        except self.ck.KafkaException as e:
            self._note("commit" if committing else "txn", e)
            if e.args[0].fatal():
                return False
        except BufferError as e:
            self._note("produce", e)
        # Abortable or retriable: abort what is left. The outcome is `abort` only if commit
        # was never called; a failed commit stays `unknown`.
        ok = False
        try:
            self._call("abort_transaction", p.abort_transaction, CALL_TIMEOUT_S)
            ok = True
        except self.ck.KafkaException as e:
            self._note("abort", e)
        if ok and not committing:
            self.history.end(self, txn_id, ABORT)
        return ok


class Background:
    """A thread calling `step()` until stopped; an exception is kept for the test."""

    def __init__(self, name: str):
        self.stop = threading.Event()
        self.exc: BaseException | None = None
        self.errors: Counter = Counter()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def finish(self, deadline_s: float = 20.0):
        self.stop.set()
        self.thread.join(deadline_s)
        assert not self.thread.is_alive(), f"{self.thread.name} did not stop"
        if self.exc is not None:
            raise self.exc

    def _run(self):
        try:
            while not self.stop.is_set():
                self.step()
        except BaseException as e:  # noqa: BLE001 - re-raised by finish()
            self.exc = e
        finally:
            self.close()

    def step(self):
        raise NotImplementedError

    def close(self):
        pass


class LsoSampler(Background):
    """Every partition's LSO every SAMPLE_EVERY_S, as (topic, partition, lso, at)."""

    def __init__(self, ck, bootstrap: str, parts: list[tuple[str, int]]):
        super().__init__("lso-sampler")
        self.ck, self.parts = ck, parts
        self.samples: list[Lso] = []
        self.c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "lso-sampler",
                              "enable.auto.commit": False, "isolation.level": "read_committed",
                              "error_cb": lambda e: self.errors.update([e.name()])})

    def step(self):
        for topic, part in self.parts:
            at = time.monotonic()
            try:
                got = self.c.get_watermark_offsets(self.ck.TopicPartition(topic, part),
                                                   timeout=1.0, cached=False)
            except self.ck.KafkaException as e:
                self.errors[e.args[0].name()] += 1
                continue
            if got is None:
                self.errors["timeout"] += 1
                continue
            self.samples.append(Lso(topic, part, got[1], at))
        self.stop.wait(SAMPLE_EVERY_S)

    def close(self):
        self.c.close()


class Tail(Background):
    """A read_committed consumer reading every partition from offset 0 as records come.
    Were a partition's log to shrink under it, "earliest" would read it again from 0, which
    the checker reports (nonmonotonic, duplicate)."""

    def __init__(self, ck, bootstrap: str, parts: list[tuple[str, int]]):
        super().__init__("tail")
        self.records: list[Read] = []
        self.c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "tail",
                              "enable.auto.commit": False, "auto.offset.reset": "earliest",
                              "isolation.level": "read_committed",
                              "error_cb": lambda e: self.errors.update([e.name()])})
        self.c.assign([ck.TopicPartition(t, p, 0) for t, p in parts])

    def step(self):
        m = self.c.poll(0.2)
        if m is None:
            return
        if m.error() is not None:
            self.errors[m.error().name()] += 1
            return
        self.records.append(Read(m.topic(), m.partition(), m.offset(), m.value().decode(),
                                 time.monotonic()))

    def close(self):
        self.c.close()


def read_committed_to_end(ck, bootstrap: str, parts: list[tuple[str, int]]) -> list[Read]:
    """Every record of the partitions a fresh read_committed consumer returns up to their
    ends (the LSOs), in delivery order."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "final-read",
                     "enable.auto.commit": False, "auto.offset.reset": "error",
                     "enable.partition.eof": True, "isolation.level": "read_committed"})
    c.assign([ck.TopicPartition(t, p, 0) for t, p in parts])
    out: list[Read] = []
    at_end: set = set()
    deadline = time.monotonic() + READ_DEADLINE_S
    try:
        while len(at_end) < len(parts):
            assert time.monotonic() < deadline, (
                f"the final read reached the end of {sorted(at_end)} only; {len(out)} read")
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
                at_end.add((m.topic(), m.partition()))
                continue
            out.append(Read(m.topic(), m.partition(), m.offset(), m.value().decode(),
                            time.monotonic()))
    finally:
        c.close()
    return out


def settle(ck, bootstrap: str, tids: list[str], parts: list[tuple[str, int]]):
    """Initialises each transactional.id once more, which aborts (or completes) what its
    last producer left open, then waits until every partition's LSO is its high watermark:
    no transaction is open (a hanging one fails the test here)."""
    conf = {"bootstrap.servers": bootstrap, "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS}
    for tid in tids:
        def init(tid=tid):
            p = ck.Producer({**conf, "transactional.id": tid})
            p.init_transactions(CALL_TIMEOUT_S)
            return True
        wait_until(init, SETTLE_DEADLINE_S, f"init_transactions of {tid} after the workload")
    committed = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "settle",
                             "isolation.level": "read_committed"})
    uncommitted = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "settle",
                               "isolation.level": "read_uncommitted"})
    try:
        for t, q in parts:
            tp = ck.TopicPartition(t, q)

            def stable(tp=tp):
                lso = committed.get_watermark_offsets(tp, timeout=5, cached=False)
                hw = uncommitted.get_watermark_offsets(tp, timeout=5, cached=False)
                return lso is not None and hw is not None and lso[1] == hw[1]
            wait_until(stable, SETTLE_DEADLINE_S, f"the LSO of {t}/{q} at its high watermark",
                       interval=0.2)
    finally:
        committed.close()
        uncommitted.close()


def test_transactions_under_kill9_are_atomic_and_isolated(strand, topic):
    ck = need_module("confluent_kafka")
    ck_admin = need_module("confluent_kafka.admin")
    started = time.monotonic()
    b = strand(name="txn-jepsen", smp=2)
    topics = [topic + "-a", topic + "-b"]
    create_topics(ck_admin, b, topics, PARTITIONS)
    parts = [(t, q) for t in topics for q in range(PARTITIONS)]
    tids = [f"tid-{topic}-{i}" for i in range(PRODUCERS)]

    history = History()
    sampler = LsoSampler(ck, b.bootstrap, parts).start()
    tail = Tail(ck, b.bootstrap, parts).start()
    active = {tid: Writer(ck, b.bootstrap, tid, i, 0, history, parts).start()
              for i, tid in enumerate(tids)}
    writers = list(active.values())
    abandoned: list[str] = []
    kills, in_commit, last_restart, downtimes = 0, 0, 0.0, []
    tick = threading.Event()
    try:
        t0 = time.monotonic()
        kill_times = [t0 + s for s in KILLS_AT_S]
        while time.monotonic() < t0 + WORKLOAD_S:
            for tid, w in list(active.items()):
                # A hung producer is left in its thread; a new one takes over its id.
                if w.stuck_for() > STUCK_S:
                    history.abandon(w)
                    abandoned.append(f"{w.name} in {w.call[0] if w.call else '?'}")
                    active[tid] = Writer(ck, b.bootstrap, tid, w.index, w.gen + 1, history,
                                         parts).start()
                    writers.append(active[tid])
            if kill_times and time.monotonic() >= kill_times[0]:
                impatient = active[tids[-1]]
                if not impatient.committing() and time.monotonic() < kill_times[0] + KILL_WAIT_S:
                    tick.wait(0.001)
                    continue
                kill_times.pop(0)
                in_commit += impatient.committing()
                down = time.monotonic()
                b.kill9_and_restart(same_port=True)
                kills += 1
                last_restart = time.monotonic()
                downtimes.append(last_restart - down)
            tick.wait(0.1)
        for w in active.values():
            w.stop.set()
        deadline = time.monotonic() + STUCK_S
        for w in active.values():
            w.thread.join(max(0.0, deadline - time.monotonic()))
            if w.thread.is_alive():
                history.abandon(w)
                abandoned.append(f"{w.name} in {w.call[0] if w.call else '?'} at the end")
        for w in writers:
            assert w.exc is None, f"writer {w.name} failed: {w.exc!r}"
        settle(ck, b.bootstrap, tids, parts)
        tail.finish()
        final = read_committed_to_end(ck, b.bootstrap, parts)
        sampler.finish()
    finally:
        for w in writers:
            w.stop.set()
        tail.stop.set()
        sampler.stop.set()

    txns = history.history()
    report = check(txns, [tail.records, final], sampler.samples)
    errors = Counter()
    for w in writers:
        errors.update(w.errors)
    outcomes = Counter(t.outcome for t in txns)
    print(f"\ntxn jepsen: {outcomes[COMMIT]} committed, {outcomes[ABORT]} aborted, "
          f"{outcomes[UNKNOWN]} unknown ({len(report.unknown_committed)} visible), "
          f"{len(final)} records read ({len(tail.records)} while tailing), "
          f"{len(sampler.samples)} LSO samples, {kills} kills ({in_commit} in a commit, "
          f"{', '.join(f'{d:.1f}' for d in downtimes)}s down), "
          f"{sum(w.producers for w in writers)} producers, {len(abandoned)} abandoned; "
          f"{report.summary().split(':')[0]} in {time.monotonic() - started:.1f}s")
    print(f"errors: {dict(errors)}; sampler {dict(sampler.errors)}; tail {dict(tail.errors)}"
          + (f"; abandoned {abandoned}" if abandoned else ""))
    valid = report.valid  # not report.valid in the assert: pytest would print all of it
    assert valid, str(report)
    # The history must say something: transactions of both kinds, and commits after the
    # last restart (a broker that stops committing would otherwise pass).
    assert outcomes[COMMIT] >= 20 and outcomes[ABORT] >= 5, outcomes
    assert any(t > last_restart for t in history.commit_times), (
        f"no transaction committed after the last restart; errors {dict(errors)}")
