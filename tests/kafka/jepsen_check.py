"""A history checker for Kafka-style append workloads, in Jepsen's vocabulary.

Pure Python, no broker: the cluster tests (test_cluster.py) record a history and hand it
here; test_jepsen_check.py checks the checker on crafted histories. Transactions have their
own checker beside this one, jepsen_txn_check.py.

Input
- writes: every attempted write, one unique value each, with its outcome as the client saw
  it: `ok` (acknowledged, with the (partition, offset) the broker returned), `fail` (known
  not to have happened) or `unknown` (indeterminate: timed out, connection lost, purged;
  Jepsen's `:info`).
- reads: one list per read pass (a consumer that read the partitions from offset 0, e.g.
  once through each node), each a list of (partition, offset, value) in the order the
  consumer delivered them. Passes are kept apart because every pass starts again at
  offset 0: "offsets increase" holds within a pass, not across passes.

Anomalies (each reported with a count and examples)
- lost: an `ok` write whose value no pass read. Never allowed.
- duplicate: one value read at two different (partition, offset) positions.
- inconsistent_offset: an acknowledged position that holds another value (`overwritten`),
  an acknowledged value read at another position (`moved`), one position read with two
  values across or within passes (`divergent`), two `ok` writes acknowledged at the same
  position (`acked_twice`).
- nonmonotonic: within one pass, a partition's offsets not strictly increasing.
- failed_read: a write reported `fail` that was read anyway.
- unexpected: a value read that no write attempted.
- unknown_unseen: an `unknown` write that no pass read. Allowed (it may not have happened);
  reported so a run that loses everything indeterminate is visible. `unseen` is lost plus
  unknown_unseen, for Jepsen's summary line.

`valid` is true when every anomaly except unknown_unseen is zero.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Sequence

OK = "ok"
FAIL = "fail"
UNKNOWN = "unknown"
OUTCOMES = (OK, FAIL, UNKNOWN)

# The anomalies that make a history invalid, in report order.
ANOMALIES = ("lost", "duplicate", "inconsistent_offset", "nonmonotonic", "failed_read",
             "unexpected")
# Reported, but allowed.
ALLOWED = ("unknown_unseen",)

# Examples kept per anomaly in str(report); the lists themselves are complete.
EXAMPLES_SHOWN = 5


@dataclass(frozen=True)
class Write:
    """One attempted write. `partition`/`offset` are the acknowledged position (`ok` only;
    `partition` alone may be set for other outcomes, for the report)."""

    value: Hashable
    outcome: str
    partition: int | None = None
    offset: int | None = None

    def __post_init__(self):
        assert self.outcome in OUTCOMES, f"outcome {self.outcome!r} not in {OUTCOMES}"
        if self.outcome == OK:
            assert self.partition is not None and self.offset is not None, (
                f"ok write {self.value!r} without its acknowledged (partition, offset)")
            assert self.offset >= 0, f"ok write {self.value!r} acknowledged at {self.offset}"


@dataclass(frozen=True)
class Read:
    """One record a consumer delivered."""

    partition: int
    offset: int
    value: Hashable


@dataclass
class Report:
    lost: list = field(default_factory=list)
    duplicate: list = field(default_factory=list)
    inconsistent_offset: list = field(default_factory=list)
    nonmonotonic: list = field(default_factory=list)
    failed_read: list = field(default_factory=list)
    unexpected: list = field(default_factory=list)
    unknown_unseen: list = field(default_factory=list)
    # Totals for context.
    writes: dict = field(default_factory=dict)
    records_read: int = 0
    passes: int = 0

    @property
    def unseen(self) -> int:
        return len(self.lost) + len(self.unknown_unseen)

    @property
    def valid(self) -> bool:
        return all(not getattr(self, name) for name in ANOMALIES)

    def counts(self) -> dict[str, int]:
        c = {name: len(getattr(self, name)) for name in ANOMALIES + ALLOWED}
        c["unseen"] = self.unseen
        return c

    def __str__(self) -> str:
        head = (f"{'valid' if self.valid else 'INVALID'}: writes {self.writes}, "
                f"{self.records_read} records read in {self.passes} passes")
        lines = [head, "counts: " + ", ".join(f"{k}={v}" for k, v in self.counts().items())]
        for name in ANOMALIES + ALLOWED:
            items = getattr(self, name)
            if items:
                shown = ", ".join(repr(x) for x in items[:EXAMPLES_SHOWN])
                hidden = len(items) - EXAMPLES_SHOWN
                more = f" (+{hidden} more)" if hidden > 0 else ""
                lines.append(f"  {name}: {shown}{more}")
        return "\n".join(lines)


def _as_write(w) -> Write:
    return w if isinstance(w, Write) else Write(*w)


def _as_read(r) -> Read:
    return r if isinstance(r, Read) else Read(*r)


def check(writes: Iterable[Write | tuple], reads: Sequence[Iterable[Read | tuple]]) -> Report:
    """Checks a history; see the module doc. Tuples are accepted in the field order of
    Write (value, outcome, partition, offset) and Read (partition, offset, value)."""
    ws = [_as_write(w) for w in writes]
    assert not isinstance(reads, (str, bytes)), "reads is a list of passes"
    passes = [[_as_read(r) for r in p] for p in reads]
    rep = Report(passes=len(passes), records_read=sum(map(len, passes)))

    by_value: dict = {}
    for w in ws:
        assert w.value not in by_value, f"value {w.value!r} written twice: values must be unique"
        by_value[w.value] = w
    rep.writes = {o: sum(1 for w in ws if w.outcome == o) for o in OUTCOMES}

    # Every position each value was read at, and every value each position held.
    positions_of: dict = defaultdict(set)
    values_at: dict = defaultdict(set)
    for p in passes:
        for r in p:
            positions_of[r.value].add((r.partition, r.offset))
            values_at[(r.partition, r.offset)].add(r.value)

    _check_writes(rep, ws, positions_of, values_at)
    _check_reads(rep, by_value, positions_of, values_at)
    for i, p in enumerate(passes):
        rep.nonmonotonic.extend(_nonmonotonic(p, i))
    return rep


def _check_writes(rep: Report, ws: list[Write], positions_of, values_at):
    acked_at: dict = {}
    for w in ws:
        read_at = positions_of.get(w.value)
        if not read_at:
            if w.outcome == OK:
                rep.lost.append({"value": w.value, "acked": (w.partition, w.offset)})
            elif w.outcome == UNKNOWN:
                rep.unknown_unseen.append({"value": w.value, "partition": w.partition})
            continue
        if w.outcome == FAIL:
            rep.failed_read.append({"value": w.value, "read_at": sorted(read_at)})
        if w.outcome != OK:
            continue
        pos = (w.partition, w.offset)
        if pos in acked_at:
            rep.inconsistent_offset.append({"kind": "acked_twice", "at": pos,
                                            "values": [acked_at[pos], w.value]})
        acked_at[pos] = w.value
        others = values_at.get(pos, set()) - {w.value}
        if others:
            rep.inconsistent_offset.append({"kind": "overwritten", "at": pos, "acked": w.value,
                                            "read": sorted(others, key=repr)})
        if pos not in read_at:
            rep.inconsistent_offset.append({"kind": "moved", "value": w.value, "acked": pos,
                                            "read_at": sorted(read_at)})


def _check_reads(rep: Report, by_value: dict, positions_of, values_at):
    for value, at in positions_of.items():
        if len(at) > 1:
            rep.duplicate.append({"value": value, "read_at": sorted(at)})
        if value not in by_value:
            rep.unexpected.append({"value": value, "read_at": sorted(at)})
    for pos, values in values_at.items():
        if len(values) > 1:
            rep.inconsistent_offset.append({"kind": "divergent", "at": pos,
                                            "read": sorted(values, key=repr)})


def _nonmonotonic(records: list[Read], pass_index: int) -> list[dict]:
    out = []
    last: dict[int, int] = {}
    for r in records:
        prev = last.get(r.partition)
        if prev is not None and r.offset <= prev:
            out.append({"pass": pass_index, "partition": r.partition, "offset": r.offset,
                        "after": prev})
        last[r.partition] = r.offset
    return out
