"""A history checker for Kafka transactions, in Jepsen's vocabulary: the transactional
sibling of jepsen_check.py (which checks plain appends).

Pure Python, no broker: test_transactions_jepsen.py records a history and hands it here;
test_jepsen_txn_check.py checks the checker on crafted histories.

Input
- txns: every transaction a producer attempted, each with a unique id, the records it
  wrote as (topic, partition, value) (values unique across the whole history) and its
  outcome as the client saw it: `commit` (commit_transaction returned), `abort`
  (abort_transaction returned, and commit_transaction was never called) or `unknown`
  (indeterminate: a call failed or hung, the broker was killed; Jepsen's `:info`).
  Optionally `commit_at`, the time.monotonic() at which commit_transaction was called,
  and `commit_called=False` for an `unknown` transaction whose producer failed or was
  abandoned before calling it (such a transaction can never commit).
- reads: one list per read pass of read_committed consumers, each a list of (topic,
  partition, offset, value[, at]) in the order the consumer delivered them; `at` is the
  time.monotonic() at which the consumer returned the record (optional). Passes are kept
  apart because each starts again at offset 0. With `final=True` (the default) the last
  pass is a full read made after every transaction ended: every committed record must be
  in it. Earlier passes may be partial, e.g. a consumer tailing the partitions while the
  transactions run.
- lso: samples of partitions' last stable offsets (the read_committed high watermark), as
  (topic, partition, lso[, at]) in the order they were taken; `at` is the
  time.monotonic() just before the request was sent (optional). Samples from before and
  after broker restarts belong in one list: the LSO must not move back across them either.

Anomalies (each reported with examples; `anomalies` lists them all, flat)
- aborted_read: a record of an `abort` transaction was read (G1a in Adya's terms).
- intermediate_read: a record of a transaction read while it was still open: read before
  its commit_transaction was called (`at` < `commit_at`), or of an `unknown` transaction
  whose commit was never called (a dirty read; read_committed must never return one).
- incomplete_commit: a `commit` transaction with a record missing from the final read.
- partial_unknown: an `unknown` transaction that is partly visible: some of its records were
  read (in any pass, so it committed) and some are missing from the final read. Unknown
  transactions are all or nothing.
- duplicate: one value read at two positions, or twice within one pass.
- divergent: one (topic, partition, offset) read with two values.
- nonmonotonic: within one pass, a partition's offsets not strictly increasing.
- unexpected: a value read that no transaction wrote, or read in another (topic,
  partition) than the one it was written to.
- lso_backwards: a partition's LSO lower than in the sample before it.
- lso_behind_read: an LSO sample taken after a record was read (both with times) that is
  not past the record's offset: read_committed returned the record, so the LSO was beyond
  it, and it cannot have moved back since.

Reported but allowed: unknown_committed and unknown_invisible (how the indeterminate
transactions turned out), and the totals.

`valid` is true when every anomaly is absent (`anomalies` is empty).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Sequence

COMMIT = "commit"
ABORT = "abort"
UNKNOWN = "unknown"
OUTCOMES = (COMMIT, ABORT, UNKNOWN)

# The anomalies that make a history invalid, in report order.
ANOMALIES = ("aborted_read", "intermediate_read", "incomplete_commit", "partial_unknown",
             "duplicate", "divergent", "nonmonotonic", "unexpected", "lso_backwards",
             "lso_behind_read")
# Reported, but allowed.
ALLOWED = ("unknown_committed", "unknown_invisible")

# Examples kept per anomaly in str(report); the lists themselves are complete.
EXAMPLES_SHOWN = 5


@dataclass(frozen=True)
class Txn:
    """One attempted transaction. `writes`: ((topic, partition, value), ...)."""

    id: Hashable
    outcome: str
    writes: tuple = ()
    commit_at: float | None = None
    commit_called: bool = True

    def __post_init__(self):
        assert self.outcome in OUTCOMES, f"outcome {self.outcome!r} not in {OUTCOMES}"
        object.__setattr__(self, "writes", tuple(tuple(w) for w in self.writes))
        for w in self.writes:
            assert len(w) == 3, (
                f"transaction {self.id!r}: write {w!r} is not (topic, partition, value)")
        if self.outcome == COMMIT:
            assert self.commit_called, f"committed transaction {self.id!r} without a commit call"
        if not self.commit_called:
            assert self.commit_at is None, f"transaction {self.id!r}: commit_at without a commit"


@dataclass(frozen=True)
class Read:
    """One record a read_committed consumer delivered."""

    topic: str
    partition: int
    offset: int
    value: Hashable
    at: float | None = None


@dataclass(frozen=True)
class Lso:
    """One sample of a partition's last stable offset."""

    topic: str
    partition: int
    lso: int
    at: float | None = None


@dataclass
class Report:
    aborted_read: list = field(default_factory=list)
    intermediate_read: list = field(default_factory=list)
    incomplete_commit: list = field(default_factory=list)
    partial_unknown: list = field(default_factory=list)
    duplicate: list = field(default_factory=list)
    divergent: list = field(default_factory=list)
    nonmonotonic: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)
    lso_backwards: list = field(default_factory=list)
    lso_behind_read: list = field(default_factory=list)
    unknown_committed: list = field(default_factory=list)
    unknown_invisible: list = field(default_factory=list)
    # Totals for context.
    txns: dict = field(default_factory=dict)
    records_written: int = 0
    records_read: int = 0
    passes: int = 0
    lso_samples: int = 0

    @property
    def anomalies(self) -> list[dict]:
        """Every anomaly, flat, each a dict naming its kind under "anomaly"."""
        return [{"anomaly": name, **x} for name in ANOMALIES for x in getattr(self, name)]

    @property
    def valid(self) -> bool:
        return not self.anomalies

    def counts(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in ANOMALIES + ALLOWED}

    def summary(self) -> str:
        return (f"{'valid' if self.valid else 'INVALID'}: transactions {self.txns}, "
                f"{self.records_written} records written, {self.records_read} read in "
                f"{self.passes} passes, {self.lso_samples} LSO samples")

    def __str__(self) -> str:
        lines = [self.summary(),
                 "counts: " + ", ".join(f"{k}={v}" for k, v in self.counts().items())]
        for name in ANOMALIES + ALLOWED:
            items = getattr(self, name)
            if items:
                shown = ", ".join(repr(x) for x in items[:EXAMPLES_SHOWN])
                hidden = len(items) - EXAMPLES_SHOWN
                more = f" (+{hidden} more)" if hidden > 0 else ""
                lines.append(f"  {name}: {shown}{more}")
        return "\n".join(lines)


def _as(cls, x):
    return x if isinstance(x, cls) else cls(*x)


def check(txns: Iterable[Txn | tuple], reads: Sequence[Iterable[Read | tuple]],
          lso: Iterable[Lso | tuple] = (), final: bool = True) -> Report:
    """Checks a history; see the module doc. Tuples are accepted in the field order of Txn
    (id, outcome, writes, commit_at, commit_called), Read (topic, partition, offset, value,
    at) and Lso (topic, partition, lso, at)."""
    ts = [_as(Txn, t) for t in txns]
    assert not isinstance(reads, (str, bytes)), "reads is a list of passes"
    passes = [[_as(Read, r) for r in p] for p in reads]
    samples = [_as(Lso, s) for s in lso]
    assert not (final and not passes), "final=True needs a final read pass"
    rep = Report(passes=len(passes), records_read=sum(map(len, passes)),
                 lso_samples=len(samples))
    rep.txns = {o: sum(1 for t in ts if t.outcome == o) for o in OUTCOMES}

    # value -> (transaction, (topic, partition) it was written to)
    writer: dict = {}
    ids = set()
    for t in ts:
        assert t.id not in ids, f"transaction id {t.id!r} used twice"
        ids.add(t.id)
        for topic, part, value in t.writes:
            assert value not in writer, f"value {value!r} written twice: values must be unique"
            writer[value] = (t, (topic, part))
    rep.records_written = len(writer)

    # Every position each value was read at, and every value each position held.
    positions_of: dict = defaultdict(set)
    values_at: dict = defaultdict(set)
    for p in passes:
        for r in p:
            positions_of[r.value].add((r.topic, r.partition, r.offset))
            values_at[(r.topic, r.partition, r.offset)].add(r.value)

    _check_reads(rep, passes, writer, positions_of, values_at)
    _check_visibility(rep, ts, passes, positions_of, final)
    _check_lso(rep, passes, samples)
    return rep


def _check_reads(rep: Report, passes: list[list[Read]], writer: dict, positions_of,
                 values_at):
    for value, at in positions_of.items():
        if len(at) > 1:
            rep.duplicate.append({"value": value, "read_at": sorted(at)})
        w = writer.get(value)
        if w is None:
            rep.unexpected.append({"value": value, "read_at": sorted(at)})
        else:
            elsewhere = sorted(pos for pos in at if pos[:2] != w[1])
            if elsewhere:
                rep.unexpected.append({"value": value, "txn": w[0].id, "written_to": w[1],
                                       "read_at": elsewhere})
    for pos, vals in values_at.items():
        if len(vals) > 1:
            rep.divergent.append({"at": pos, "read": sorted(vals, key=repr)})
    for i, p in enumerate(passes):
        seen: dict = {}
        last: dict = {}
        for r in p:
            if r.value in seen and len(positions_of[r.value]) == 1:
                # Read twice in this pass at one position (two positions are reported above).
                rep.duplicate.append({"value": r.value, "pass": i,
                                      "read_at": [seen[r.value]] * 2})
            seen[r.value] = (r.topic, r.partition, r.offset)
            key = (r.topic, r.partition)
            prev = last.get(key)
            if prev is not None and r.offset <= prev:
                rep.nonmonotonic.append({"pass": i, "topic": r.topic, "partition": r.partition,
                                         "offset": r.offset, "after": prev})
            last[key] = r.offset


def _check_visibility(rep: Report, ts: list[Txn], passes: list[list[Read]], positions_of,
                      final: bool):
    first_read: dict = {}  # value -> the earliest `at` it was read (None: no time known)
    for p in passes:
        for r in p:
            if r.value not in first_read or (
                    r.at is not None and (first_read[r.value] is None
                                          or r.at < first_read[r.value])):
                first_read[r.value] = r.at
    final_values = {r.value for r in passes[-1]} if final else set()

    for t in ts:
        read = [w for w in t.writes if w[2] in positions_of]
        if t.outcome == ABORT:
            for topic, part, value in read:
                rep.aborted_read.append({"txn": t.id, "value": value,
                                         "read_at": sorted(positions_of[value])})
            continue
        for topic, part, value in read:
            at = first_read[value]
            if not t.commit_called:
                rep.intermediate_read.append({"txn": t.id, "value": value,
                                              "read_at": sorted(positions_of[value]),
                                              "why": "commit never called"})
            elif at is not None and t.commit_at is not None and at < t.commit_at:
                rep.intermediate_read.append({"txn": t.id, "value": value,
                                              "read_at": sorted(positions_of[value]),
                                              "why": f"read {t.commit_at - at:.3f}s before "
                                                     "commit was called"})
        if not final:
            continue
        missing = [w for w in t.writes if w[2] not in final_values]
        if t.outcome == COMMIT:
            if missing:
                rep.incomplete_commit.append({"txn": t.id, "missing": missing,
                                              "of": len(t.writes)})
        elif read:
            if missing:
                rep.partial_unknown.append({"txn": t.id, "missing": missing,
                                            "read": [w[2] for w in read],
                                            "of": len(t.writes)})
            else:
                rep.unknown_committed.append(t.id)
        else:
            rep.unknown_invisible.append(t.id)


def _check_lso(rep: Report, passes: list[list[Read]], samples: list[Lso]):
    by_part: dict = defaultdict(list)
    for i, s in enumerate(samples):
        by_part[(s.topic, s.partition)].append((i, s))
    for (topic, part), ss in by_part.items():
        for (_, a), (i, b) in zip(ss, ss[1:]):
            if b.lso < a.lso:
                rep.lso_backwards.append({"topic": topic, "partition": part, "lso": b.lso,
                                          "after": a.lso, "sample": i})

    # The highest offset read by each time, per partition, against later samples.
    reads_by_part: dict = defaultdict(list)
    for p in passes:
        for r in p:
            if r.at is not None:
                reads_by_part[(r.topic, r.partition)].append((r.at, r.offset))
    for key, ss in by_part.items():
        rs = sorted(reads_by_part.get(key, ()))
        timed = sorted(((s.at, i, s) for i, s in ss if s.at is not None), key=lambda x: x[:2])
        j, high = 0, -1
        for at, i, s in timed:
            while j < len(rs) and rs[j][0] < at:
                high = max(high, rs[j][1])
                j += 1
            if high >= 0 and s.lso <= high:
                rep.lso_behind_read.append({"topic": key[0], "partition": key[1],
                                            "lso": s.lso, "read_offset": high, "sample": i})
