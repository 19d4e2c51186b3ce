"""The transactional history checker (jepsen_txn_check.py) on crafted histories: a clean
one has no anomaly, and each anomaly is found, counted once and reported with where it was
found. No broker is started."""

from __future__ import annotations

import pytest

from jepsen_txn_check import ALLOWED, ANOMALIES, Lso, Read, Txn, check

A, B = "a", "b"

# t1 committed over two topics; t2 aborted; t3 unknown and committed in the end; t4 unknown
# and never visible; t5 unknown, its producer gone before calling commit, never visible.
TXNS = [
    Txn("t1", "commit", [(A, 0, "t1-0"), (B, 1, "t1-1")], commit_at=1.0),
    Txn("t2", "abort", [(A, 0, "t2-0"), (B, 1, "t2-1")]),
    Txn("t3", "unknown", [(A, 0, "t3-0"), (A, 1, "t3-1")], commit_at=3.0),
    Txn("t4", "unknown", [(A, 1, "t4-0")], commit_at=4.0),
    Txn("t5", "unknown", [(B, 1, "t5-0")], commit_called=False),
]
# Offsets: a/0: t1-0 0, marker 1, t2-0 2, marker 3, t3-0 4, marker 5;
# a/1: t3-1 0, marker 1, t4-0 2, marker 3;
# b/1: t1-1 0, marker 1, t2-1 2, marker 3, t5-0 4, marker 5.
# A consumer tailing during the run (with times), then the final full read.
TAIL = [Read(A, 0, 0, "t1-0", 1.2), Read(B, 1, 0, "t1-1", 1.3), Read(A, 1, 0, "t3-1", 3.4)]
FINAL = [Read(A, 0, 0, "t1-0", 9.0), Read(A, 0, 4, "t3-0", 9.0), Read(A, 1, 0, "t3-1", 9.0),
         Read(B, 1, 0, "t1-1", 9.1)]
LSOS = [Lso(A, 0, 0, 0.5), Lso(A, 0, 2, 1.5), Lso(A, 1, 0, 1.5), Lso(B, 1, 2, 1.6),
        # The broker restarts here; the LSOs pick up where they were.
        Lso(A, 0, 2, 5.0), Lso(A, 1, 2, 5.0), Lso(B, 1, 4, 5.1),
        Lso(A, 0, 6, 8.0), Lso(A, 1, 4, 8.0), Lso(B, 1, 6, 8.0)]


def only(report, **expected):
    """Asserts these anomaly counts and zero for every other anomaly; returns the report."""
    counts = {k: v for k, v in report.counts().items() if k in ANOMALIES}
    want = {name: 0 for name in ANOMALIES}
    want.update(expected)
    assert counts == want, str(report)
    assert len(report.anomalies) == sum(want.values())
    return report


def history(txns=TXNS, tail=TAIL, final=FINAL, lsos=LSOS, **kw):
    return check(txns, [tail, final], lsos, **kw)


def test_a_clean_history_has_no_anomaly():
    r = only(history())
    assert r.valid and r.anomalies == []
    assert r.txns == {"commit": 1, "abort": 1, "unknown": 3}
    assert r.unknown_committed == ["t3"] and r.unknown_invisible == ["t4", "t5"]
    assert (r.records_written, r.records_read, r.passes, r.lso_samples) == (8, 7, 2, 10)
    assert str(r).startswith("valid")


def test_tuples_are_accepted_and_times_are_optional():
    txns = [("t1", "commit", [(A, 0, "x")]), ("t2", "unknown", [(A, 0, "y")])]
    reads = [[(A, 0, 0, "x"), (A, 0, 2, "y")]]
    lsos = [(A, 0, 1), (A, 0, 4)]
    r = only(check(txns, reads, lsos))
    assert r.unknown_committed == ["t2"]


def test_a_record_of_an_aborted_transaction_read_is_an_aborted_read():
    r = only(history(final=FINAL + [Read(B, 1, 2, "t2-1", 9.2)]), aborted_read=1)
    assert not r.valid
    assert r.aborted_read == [{"txn": "t2", "value": "t2-1", "read_at": [(B, 1, 2)]}]
    assert r.anomalies[0]["anomaly"] == "aborted_read"
    assert str(r).startswith("INVALID") and "aborted_read: " in str(r)


def test_a_record_read_before_its_commit_was_called_is_an_intermediate_read():
    # t3 commits in the end, but the tailing consumer saw t3-1 at 2.5, before commit (3.0).
    tail = TAIL[:2] + [Read(A, 1, 0, "t3-1", 2.5)]
    r = only(history(tail=tail), intermediate_read=1)
    assert r.intermediate_read[0]["txn"] == "t3"
    assert "before commit" in r.intermediate_read[0]["why"]


def test_a_record_of_a_transaction_never_committed_read_is_an_intermediate_read():
    # t5's producer never called commit: read_committed must not return its record, even
    # at the end, and even though its outcome is unknown.
    r = only(history(final=FINAL + [Read(B, 1, 4, "t5-0", 9.2)]), intermediate_read=1)
    assert r.intermediate_read == [{"txn": "t5", "value": "t5-0", "read_at": [(B, 1, 4)],
                                    "why": "commit never called"}]


def test_a_committed_record_missing_from_the_final_read_is_an_incomplete_commit():
    # t1-1 was seen while tailing, but the final read lost it.
    final = [r for r in FINAL if r.value != "t1-1"]
    r = only(history(final=final), incomplete_commit=1)
    assert r.incomplete_commit == [{"txn": "t1", "missing": [(B, 1, "t1-1")], "of": 2}]


def test_without_a_final_read_nothing_is_required_to_be_visible():
    r = only(check(TXNS, [TAIL], LSOS, final=False))
    assert r.unknown_committed == [] and r.unknown_invisible == []


def test_an_unknown_transaction_partly_visible_at_the_end_is_partial():
    final = [r for r in FINAL if r.value != "t3-0"]
    r = only(history(final=final), partial_unknown=1)
    assert r.partial_unknown == [{"txn": "t3", "missing": [(A, 0, "t3-0")], "read": ["t3-1"],
                                  "of": 2}]


def test_an_unknown_transaction_seen_while_tailing_and_gone_at_the_end_is_partial():
    # Visible once means committed: all of it must be there at the end.
    final = [r for r in FINAL if r.value not in ("t3-0", "t3-1")]
    r = only(history(final=final), partial_unknown=1)
    assert r.partial_unknown[0]["read"] == ["t3-1"]
    assert len(r.partial_unknown[0]["missing"]) == 2


def test_a_value_at_two_offsets_is_a_duplicate():
    r = only(history(final=FINAL + [Read(B, 1, 6, "t1-0", 9.2)]), duplicate=1, unexpected=1)
    assert r.duplicate == [{"value": "t1-0", "read_at": [(A, 0, 0), (B, 1, 6)]}]
    # ... and in a partition it was not written to.
    assert r.unexpected == [{"value": "t1-0", "txn": "t1", "written_to": (A, 0),
                             "read_at": [(B, 1, 6)]}]


def test_a_value_at_two_offsets_of_its_partition_is_a_duplicate():
    r = only(history(final=FINAL + [Read(A, 0, 7, "t3-0", 9.2)]), duplicate=1)
    assert r.duplicate == [{"value": "t3-0", "read_at": [(A, 0, 4), (A, 0, 7)]}]


def test_a_value_delivered_twice_in_one_pass_is_a_duplicate():
    # Redelivered at the same offset: a duplicate, and the offsets did not increase.
    final = FINAL + [Read(A, 1, 0, "t3-1", 9.2)]
    r = only(history(final=final), duplicate=1, nonmonotonic=1)
    assert r.duplicate == [{"value": "t3-1", "pass": 1, "read_at": [(A, 1, 0)] * 2}]


def test_offsets_going_back_within_a_pass_are_nonmonotonic():
    final = [FINAL[1], FINAL[0]] + FINAL[2:]
    r = only(history(final=final), nonmonotonic=1)
    assert r.nonmonotonic == [{"pass": 1, "topic": A, "partition": 0, "offset": 0,
                               "after": 4}]


def test_each_pass_starts_again_at_offset_zero():
    only(check(TXNS, [FINAL, FINAL, FINAL], LSOS))
    only(check(TXNS, [FINAL + FINAL], LSOS), duplicate=4, nonmonotonic=3)


def test_one_offset_read_with_two_values_is_divergent():
    # The tailing consumer saw t4-0 where the final read found t3-1. And t4, once seen,
    # committed: it must be in the final read too.
    tail = TAIL[:2] + [Read(A, 1, 0, "t4-0", 4.5)]
    r = only(history(tail=tail), divergent=1, partial_unknown=1)
    assert r.divergent == [{"at": (A, 1, 0), "read": ["t3-1", "t4-0"]}]
    assert r.partial_unknown[0]["txn"] == "t4"


def test_a_value_nobody_wrote_is_unexpected():
    r = only(history(final=FINAL + [Read(B, 1, 6, "ghost", 9.2)]), unexpected=1)
    assert r.unexpected == [{"value": "ghost", "read_at": [(B, 1, 6)]}]


def test_an_lso_lower_than_the_sample_before_moved_backwards():
    # After the restart a/0's LSO is 1, below the 2 sampled before it.
    lsos = LSOS[:4] + [Lso(A, 0, 1, 5.0)] + LSOS[5:]
    r = only(history(lsos=lsos), lso_backwards=1)
    assert r.lso_backwards == [{"topic": A, "partition": 0, "lso": 1, "after": 2,
                                "sample": 4}]


def test_an_lso_not_past_a_record_read_before_it_is_behind_the_read():
    # t3-1 (a/1 offset 0) was read at 3.4; a sample of a/1 at 3.5 says 0. No sample moved
    # back (the one before also said 0): only the read shows the LSO was at least 1.
    lsos = LSOS[:4] + [Lso(A, 1, 0, 3.5)] + LSOS[4:]
    r = only(history(lsos=lsos), lso_behind_read=1)
    assert r.lso_behind_read == [{"topic": A, "partition": 1, "lso": 0, "read_offset": 0,
                                  "sample": 4}]


def test_examples_are_capped_in_the_text_but_complete_in_the_lists():
    txns = [Txn(f"t{i}", "abort", [(A, 0, f"v{i}")]) for i in range(20)]
    reads = [[Read(A, 0, i, f"v{i}") for i in range(20)]]
    r = only(check(txns, reads), aborted_read=20)
    assert len(r.aborted_read) == 20 and len(r.anomalies) == 20
    assert "(+15 more)" in str(r)


def test_every_anomaly_and_allowed_outcome_has_a_counter():
    assert set(ANOMALIES + ALLOWED) == set(check([], [[]]).counts())


@pytest.mark.parametrize("bad", [
    lambda: Txn("t", "maybe"),                                       # not an outcome
    lambda: Txn("t", "commit", [(A, 0, "x")], commit_called=False),  # commit without a call
    lambda: Txn("t", "unknown", [(A, "x")]),                         # write not a triple
    lambda: check([Txn("t", "commit", [(A, 0, "x")]), Txn("u", "abort", [(A, 1, "x")])],
                  [[]]),                                             # values not unique
    lambda: check([Txn("t", "commit"), Txn("t", "abort")], [[]]),    # ids not unique
    lambda: check([], "not passes"),
    lambda: check([], []),                                           # final without a read
])
def test_malformed_input_is_refused(bad):
    with pytest.raises(AssertionError):
        bad()
