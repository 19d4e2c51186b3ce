"""The history checker (jepsen_check.py) on crafted histories: a clean one is all zero, and
each anomaly is found, counted once and reported with the position it was found at.
No broker is started."""

from __future__ import annotations

import pytest

from jepsen_check import ANOMALIES, Read, Write, check

# Three acknowledged writes on partition 0, two on partition 1.
WRITES = [
    Write("a", "ok", 0, 0),
    Write("b", "ok", 0, 1),
    Write("c", "ok", 0, 2),
    Write("d", "ok", 1, 0),
    Write("e", "ok", 1, 1),
]
CLEAN_PASS = [Read(0, 0, "a"), Read(0, 1, "b"), Read(1, 0, "d"), Read(0, 2, "c"),
              Read(1, 1, "e")]


def only(report, **expected):
    """Asserts these anomaly counts and zero for every other one; returns the report."""
    counts = report.counts()
    want = {name: 0 for name in counts}
    want.update(expected)
    want["unseen"] = want["lost"] + want["unknown_unseen"]
    assert counts == want, str(report)
    return report


def test_a_clean_history_has_no_anomaly():
    r = only(check(WRITES, [CLEAN_PASS, CLEAN_PASS]))
    assert r.valid
    assert r.writes == {"ok": 5, "fail": 0, "unknown": 0}
    assert r.records_read == 10 and r.passes == 2
    assert str(r).startswith("valid")


def test_tuples_are_accepted_for_writes_and_reads():
    ws = [("a", "ok", 0, 0), ("x", "unknown")]
    rs = [[(0, 0, "a"), (0, 1, "x")]]
    assert only(check(ws, rs)).valid


def test_an_acknowledged_write_never_read_is_lost():
    r = only(check(WRITES, [CLEAN_PASS[:-1]]), lost=1)
    assert not r.valid
    assert r.lost == [{"value": "e", "acked": (1, 1)}]
    assert "lost: " in str(r) and str(r).startswith("INVALID")


def test_an_unknown_write_never_read_is_allowed_but_reported():
    ws = WRITES + [Write("u", "unknown", 0), Write("f", "fail", 1)]
    r = only(check(ws, [CLEAN_PASS]), unknown_unseen=1)
    assert r.valid
    assert r.unknown_unseen == [{"value": "u", "partition": 0}]
    assert r.unseen == 1


def test_unknown_and_failed_writes_that_were_read_are_fine_or_failed_read():
    ws = WRITES + [Write("u", "unknown"), Write("f", "fail")]
    rs = CLEAN_PASS + [Read(0, 3, "u"), Read(0, 4, "f")]
    r = only(check(ws, [rs]), failed_read=1)
    assert r.failed_read == [{"value": "f", "read_at": [(0, 4)]}]


def test_a_value_at_two_offsets_is_a_duplicate():
    # The producer's retry was appended again: "b" at offsets 1 and 3.
    rs = CLEAN_PASS + [Read(0, 3, "b")]
    r = only(check(WRITES, [rs]), duplicate=1)
    assert r.duplicate == [{"value": "b", "read_at": [(0, 1), (0, 3)]}]


def test_a_value_in_two_partitions_is_a_duplicate():
    rs = CLEAN_PASS + [Read(1, 2, "a")]
    r = only(check(WRITES, [rs]), duplicate=1)
    assert r.duplicate[0]["read_at"] == [(0, 0), (1, 2)]


def test_an_acknowledged_offset_holding_another_value_is_inconsistent():
    # "b" was acknowledged at 0:1 but a new leader put an unknown write there and "b" at 0:3.
    ws = WRITES + [Write("u", "unknown")]
    rs = [Read(0, 0, "a"), Read(0, 1, "u"), Read(0, 2, "c"), Read(0, 3, "b"),
          Read(1, 0, "d"), Read(1, 1, "e")]
    r = only(check(ws, [rs]), inconsistent_offset=2)
    kinds = sorted(x["kind"] for x in r.inconsistent_offset)
    assert kinds == ["moved", "overwritten"]
    over = next(x for x in r.inconsistent_offset if x["kind"] == "overwritten")
    assert over == {"kind": "overwritten", "at": (0, 1), "acked": "b", "read": ["u"]}


def test_an_offset_read_with_two_values_across_passes_is_inconsistent():
    # Two nodes disagree about 1:2, which no acknowledged write claims.
    ws = WRITES + [Write("u", "unknown"), Write("v", "unknown")]
    p1 = CLEAN_PASS + [Read(1, 2, "u")]
    p2 = CLEAN_PASS + [Read(1, 2, "v")]
    r = only(check(ws, [p1, p2]), inconsistent_offset=1)
    assert r.inconsistent_offset == [{"kind": "divergent", "at": (1, 2), "read": ["u", "v"]}]


def test_two_writes_acknowledged_at_one_offset_is_inconsistent():
    ws = WRITES + [Write("z", "ok", 0, 2)]
    r = check(ws, [CLEAN_PASS + [Read(0, 3, "z")]])
    kinds = sorted(x["kind"] for x in r.inconsistent_offset)
    # 0:2 acknowledged twice, "c" is there so "z" is both overwritten-at and moved.
    assert kinds == ["acked_twice", "moved", "overwritten"], str(r)
    assert not r.valid


def test_offsets_going_back_within_a_pass_are_nonmonotonic():
    rs = [Read(0, 0, "a"), Read(0, 2, "c"), Read(0, 1, "b"), Read(1, 0, "d"), Read(1, 1, "e")]
    r = only(check(WRITES, [rs]), nonmonotonic=1)
    assert r.nonmonotonic == [{"pass": 0, "partition": 0, "offset": 1, "after": 2}]


def test_a_repeated_offset_within_a_pass_is_nonmonotonic():
    rs = CLEAN_PASS + [Read(1, 1, "e")]
    r = only(check(WRITES, [rs]), nonmonotonic=1)
    assert r.nonmonotonic[0]["offset"] == 1


def test_each_pass_starts_again_at_offset_zero():
    # Passes concatenated into one list would look nonmonotonic (once per partition, where
    # it goes back to offset 0); passes kept apart do not.
    assert only(check(WRITES, [CLEAN_PASS, CLEAN_PASS, CLEAN_PASS])).valid
    only(check(WRITES, [CLEAN_PASS + CLEAN_PASS]), nonmonotonic=2)


def test_a_value_nobody_wrote_is_unexpected():
    r = only(check(WRITES, [CLEAN_PASS + [Read(0, 3, "ghost")]]), unexpected=1)
    assert r.unexpected == [{"value": "ghost", "read_at": [(0, 3)]}]


def test_bytes_values_as_the_cluster_tests_record_them():
    ws = [Write(b"v-0", "ok", 2, 0), Write(b"v-1", "unknown", 2)]
    r = only(check(ws, [[Read(2, 0, b"v-0")]]), unknown_unseen=1)
    assert r.valid


def test_examples_are_capped_in_the_text_but_complete_in_the_lists():
    ws = [Write(f"w{i}", "ok", 0, i) for i in range(20)]
    r = only(check(ws, [[]]), lost=20)
    assert len(r.lost) == 20
    assert "(+15 more)" in str(r)


def test_every_anomaly_has_a_counter():
    assert set(ANOMALIES) <= set(check([], []).counts())


@pytest.mark.parametrize("bad", [
    lambda: Write("a", "ok", 0, None),        # ok without its offset
    lambda: Write("a", "maybe"),              # not ok/fail/unknown
    lambda: check([Write("a", "unknown"), Write("a", "fail")], []),  # values not unique
    lambda: check([], "not passes"),
])
def test_malformed_input_is_refused(bad):
    with pytest.raises(AssertionError):
        bad()
