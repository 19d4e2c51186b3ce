//! One share partition's delivery state (KIP-932's `SharePartition`): which offsets of a
//! topic partition a share group handed out, to which member, how many times, and with
//! what outcome. Pure data and decisions; the caller reads the log, keeps the time and
//! persists [`ShareState`].
//!
//! Invariants:
//! - Every offset below `start` (the share-partition start offset, SPSO) is finished:
//!   acknowledged, archived, or never to be delivered (a control batch, a gap in the log).
//! - `records` holds exactly the unfinished offsets of `[start, end)`: AVAILABLE or
//!   ACQUIRED. An offset of that range it does not hold is finished, so `start` is always
//!   its first key, or `end` when it is empty.
//! - An ACQUIRED offset has an owner and a lock deadline; only its owner acknowledges it.
//! - A delivery count grows by one at each acquisition and only a session-close release
//!   takes it back (Kafka's `DeliveryCountOps.DECREASE`); a record released or whose lock
//!   expired at `delivery_count_limit` deliveries is archived.
//! - An acknowledgement applies to all its offsets or to none.

use std::collections::BTreeMap;
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::common::config::{
    GROUP_SHARE_DELIVERY_COUNT_LIMIT_DEFAULT, GROUP_SHARE_PARTITION_MAX_RECORD_LOCKS_DEFAULT,
};
/// Widest `[start, end)` a stored state is read with: Kafka's largest record-lock limit
/// (10,000) and one fetch's overshoot past it. A wider one (a corrupt record) is cut, so a
/// state never makes more than this many entries.
pub const STATE_SPAN_MAX: i64 = 20_000;
/// Largest start offset a stored state is read with (a corrupt one is cut to it, so the
/// offset arithmetic never overflows); real offsets stay far below.
pub const STATE_START_MAX: i64 = i64::MAX / 4;

/// The limits one share partition applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Deliveries after which a released or timed-out record is archived.
    pub delivery_count_limit: u16,
    /// Offsets in flight (`end - start`) past which no new record is acquired.
    pub record_locks_max: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            delivery_count_limit: GROUP_SHARE_DELIVERY_COUNT_LIMIT_DEFAULT as u16,
            record_locks_max: GROUP_SHARE_PARTITION_MAX_RECORD_LOCKS_DEFAULT as i64,
        }
    }
}

/// How a member acknowledges a record (ShareFetch/ShareAcknowledge `AcknowledgeTypes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckType {
    /// 0: no record at that offset (a compaction hole, a control record): archived.
    Gap,
    /// 1: processed: acknowledged, never delivered again.
    Accept,
    /// 2: give it back: available again (archived at the delivery limit).
    Release,
    /// 3: unprocessable: archived, never delivered again.
    Reject,
}

impl AckType {
    /// The type of wire value `v`, if it is one of v1's four.
    pub fn from_wire(v: i8) -> Option<AckType> {
        match v {
            0 => Some(AckType::Gap),
            1 => Some(AckType::Accept),
            2 => Some(AckType::Release),
            3 => Some(AckType::Reject),
            _ => None,
        }
    }
}

/// Why an acknowledgement was refused (nothing of it was applied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckError {
    /// An offset not acquired by this member (INVALID_RECORD_STATE).
    NotAcquired(i64),
    /// An offset past anything ever delivered, or a malformed range (INVALID_REQUEST).
    OutOfRange(i64),
}

/// A range of offsets handed to a member by one fetch, with its delivery count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired {
    pub first: i64,
    pub last: i64,
    pub delivery_count: u16,
}

/// A log batch as the fetch read it: its offsets, and whether it is a control batch (a
/// transaction marker: never delivered, finished at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogBatch {
    pub first: i64,
    pub last: i64,
    pub control: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Slot {
    Available,
    Acquired { owner: Rc<str>, lock_until_ms: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct InFlight {
    slot: Slot,
    delivery_count: u16,
}

/// The durable part of a share partition: what `__share_group_state` holds for it. The
/// offsets of `[start, end)` outside `available` are finished; acquired ones are stored as
/// available with their delivery count (an acquisition is not written, as in Kafka, but
/// the count of the next write keeps it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareState {
    pub start: i64,
    pub end: i64,
    /// `(first, last, delivery_count)` runs of unfinished offsets, in order.
    pub available: Vec<(i64, i64, u16)>,
    /// The leader epoch of the data partition whose leader wrote it: a write from an
    /// older epoch (a deposed leader) is refused (states written before it existed: 0).
    #[serde(default)]
    pub leader_epoch: i32,
}

/// One share partition (see the module doc).
#[derive(Clone, Debug)]
pub struct SharePartition {
    start: i64,
    end: i64,
    records: BTreeMap<i64, InFlight>,
    limits: Limits,
    /// Records archived (rejected, a gap, or past the delivery limit) since it was loaded.
    archived: u64,
}

impl SharePartition {
    /// A share partition whose delivery begins at `start` (from `share.auto.offset.reset`).
    pub fn new(start: i64, limits: Limits) -> Self {
        SharePartition {
            start,
            end: start,
            records: BTreeMap::new(),
            limits,
            archived: 0,
        }
    }

    /// The share partition `state` describes (after a restart or a leadership change).
    pub fn from_state(state: &ShareState, limits: Limits) -> Self {
        let start = state.start.clamp(0, STATE_START_MAX);
        let end = state.end.clamp(start, start + STATE_SPAN_MAX);
        let mut records = BTreeMap::new();
        for &(first, last, delivery_count) in &state.available {
            for o in first.max(start)..=last.min(end - 1) {
                records.insert(
                    o,
                    InFlight {
                        slot: Slot::Available,
                        delivery_count,
                    },
                );
            }
        }
        let mut p = SharePartition {
            start,
            end,
            records,
            limits,
            archived: 0,
        };
        p.advance_start();
        p
    }

    /// What to persist.
    pub fn state(&self) -> ShareState {
        let mut available: Vec<(i64, i64, u16)> = Vec::new();
        for (&o, r) in &self.records {
            match available.last_mut() {
                Some((_, last, count)) if *last + 1 == o && *count == r.delivery_count => {
                    *last = o;
                }
                _ => available.push((o, o, r.delivery_count)),
            }
        }
        ShareState {
            start: self.start,
            end: self.end,
            available,
            leader_epoch: 0,
        }
    }

    /// The share-partition start offset (SPSO).
    pub fn start(&self) -> i64 {
        self.start
    }

    /// One past the last offset ever acquired (SPEO + 1).
    pub fn end(&self) -> i64 {
        self.end
    }

    /// Offsets in flight: `(available, acquired)`.
    pub fn in_flight(&self) -> (usize, usize) {
        let acquired = self
            .records
            .values()
            .filter(|r| matches!(r.slot, Slot::Acquired { .. }))
            .count();
        (self.records.len() - acquired, acquired)
    }

    /// What `in_flight` and `archived` say once the locks that ran out by `now_ms` are
    /// given back: `(available, acquired, archived)`. Locks are applied when a fetch or an
    /// acknowledgement of the partition comes (`expire_locks`); this is the view of a
    /// partition nobody fetches from (a stuck member's records are not held any more).
    pub fn in_flight_at(&self, now_ms: u64) -> (usize, usize, u64) {
        let limit = self.limits.delivery_count_limit;
        let (mut available, mut acquired, mut archived) = (0, 0, self.archived);
        for r in self.records.values() {
            match r.slot {
                Slot::Acquired { lock_until_ms, .. } if lock_until_ms > now_ms => acquired += 1,
                Slot::Acquired { .. } if r.delivery_count >= limit => archived += 1,
                _ => available += 1,
            }
        }
        (available, acquired, archived)
    }

    /// The first offset a fetch should read the log from: the first available offset
    /// already delivered once, else the end when there is room for new records; `None`
    /// when nothing can be acquired now.
    pub fn fetch_from(&self) -> Option<i64> {
        self.records
            .iter()
            .find(|(_, r)| r.slot == Slot::Available)
            .map(|(&o, _)| o)
            .or_else(|| (self.end - self.start < self.limits.record_locks_max).then_some(self.end))
    }

    /// Acquires for `member`, from `batches` (the log as read from `fetch_from`, in
    /// order), available offsets and new ones, until about `max_records` (new records are
    /// taken by whole batches, as Kafka does) or the in-flight limit; each lock lasts until
    /// `lock_until_ms`. Returns the acquired ranges.
    pub fn acquire(
        &mut self,
        member: &Rc<str>,
        batches: &[LogBatch],
        max_records: usize,
        lock_until_ms: u64,
    ) -> Vec<Acquired> {
        let mut out: Vec<Acquired> = Vec::new();
        let mut taken = 0usize;
        for b in batches {
            if taken >= max_records || b.last < self.start {
                continue;
            }
            // Offsets of this batch already known: re-acquire the available ones.
            for o in b.first.max(self.start)..=b.last.min(self.end - 1) {
                if taken >= max_records {
                    break;
                }
                let Some(r) = self.records.get_mut(&o) else {
                    continue;
                };
                if r.slot != Slot::Available {
                    continue;
                }
                r.slot = Slot::Acquired {
                    owner: member.clone(),
                    lock_until_ms,
                };
                r.delivery_count = r.delivery_count.saturating_add(1);
                push(&mut out, o, r.delivery_count);
                taken += 1;
            }
            // New offsets: the whole rest of the batch, if there is room for it.
            if b.last < self.end || taken >= max_records {
                continue;
            }
            if self.end - self.start >= self.limits.record_locks_max {
                break;
            }
            let first_new = b.first.max(self.end);
            if !b.control {
                for o in first_new..=b.last {
                    self.records.insert(
                        o,
                        InFlight {
                            slot: Slot::Acquired {
                                owner: member.clone(),
                                lock_until_ms,
                            },
                            delivery_count: 1,
                        },
                    );
                    push(&mut out, o, 1);
                }
                taken += usize::try_from(b.last - first_new + 1).unwrap_or(usize::MAX);
            }
            // Offsets between the old end and this batch hold nothing: finished.
            self.end = b.last + 1;
        }
        self.advance_start();
        out
    }

    /// Applies `member`'s acknowledgements: `(first, last, types)` with one type for the
    /// whole range or one per offset. All or nothing; offsets below the start offset are
    /// skipped (already finished). Returns whether anything changed.
    pub fn acknowledge(
        &mut self,
        member: &str,
        batches: &[(i64, i64, Vec<AckType>)],
    ) -> Result<bool, AckError> {
        let mut changes: Vec<(i64, AckType)> = Vec::new();
        for (first, last, types) in batches {
            let (first, last) = (*first, *last);
            let width = last
                .checked_sub(first)
                .and_then(|w| usize::try_from(w).ok());
            let Some(width) = width else {
                return Err(AckError::OutOfRange(first));
            };
            if types.is_empty() || (types.len() > 1 && types.len() != width + 1) {
                return Err(AckError::OutOfRange(first));
            }
            if last >= self.end {
                return Err(AckError::OutOfRange(last));
            }
            for (i, o) in (first..=last).enumerate() {
                if o < self.start {
                    continue;
                }
                let owned = self.records.get(&o).is_some_and(
                    |r| matches!(&r.slot, Slot::Acquired { owner, .. } if &**owner == member),
                );
                if !owned {
                    return Err(AckError::NotAcquired(o));
                }
                let t = if types.len() == 1 { types[0] } else { types[i] };
                changes.push((o, t));
            }
        }
        let changed = !changes.is_empty();
        for (o, t) in changes {
            match t {
                AckType::Accept => {
                    self.records.remove(&o);
                }
                AckType::Reject | AckType::Gap => {
                    self.records.remove(&o);
                    self.archived += 1;
                }
                AckType::Release => self.give_back(o),
            }
        }
        self.advance_start();
        Ok(changed)
    }

    /// Locks that ran out by `now_ms` give their records back (archived at the delivery
    /// limit). Returns whether anything changed.
    pub fn expire_locks(&mut self, now_ms: u64) -> bool {
        let expired: Vec<i64> = self
            .records
            .iter()
            .filter(|(_, r)| {
                matches!(r.slot, Slot::Acquired { lock_until_ms, .. } if lock_until_ms <= now_ms)
            })
            .map(|(&o, _)| o)
            .collect();
        for &o in &expired {
            self.give_back(o);
        }
        self.advance_start();
        !expired.is_empty()
    }

    /// `member` closed its share session: its records are available again, this delivery
    /// not counted. Returns whether anything changed.
    pub fn release_member(&mut self, member: &str) -> bool {
        let mut changed = false;
        for r in self.records.values_mut() {
            if matches!(&r.slot, Slot::Acquired { owner, .. } if &**owner == member) {
                r.slot = Slot::Available;
                r.delivery_count = r.delivery_count.saturating_sub(1);
                changed = true;
            }
        }
        changed
    }

    /// Records archived (rejected, a gap, or past the delivery limit) since it was loaded.
    pub fn archived(&self) -> u64 {
        self.archived
    }

    /// The earliest lock deadline, if any record is acquired.
    pub fn next_lock_deadline_ms(&self) -> Option<u64> {
        self.records
            .values()
            .filter_map(|r| match r.slot {
                Slot::Acquired { lock_until_ms, .. } => Some(lock_until_ms),
                Slot::Available => None,
            })
            .min()
    }

    /// The log no longer holds offsets below `log_start` (retention, DeleteRecords):
    /// nothing below it is delivered any more. Returns whether anything changed.
    pub fn log_start_moved(&mut self, log_start: i64) -> bool {
        if log_start <= self.start {
            return false;
        }
        self.records = self.records.split_off(&log_start);
        self.end = self.end.max(log_start);
        self.start = log_start;
        self.advance_start();
        true
    }

    /// A record whose lock ended or that was released: available again, or archived once
    /// delivered `delivery_count_limit` times.
    fn give_back(&mut self, o: i64) {
        let limit = self.limits.delivery_count_limit;
        let archive = match self.records.get_mut(&o) {
            Some(r) if r.delivery_count >= limit => true,
            Some(r) => {
                r.slot = Slot::Available;
                false
            }
            None => false,
        };
        if archive {
            self.records.remove(&o);
            self.archived += 1;
        }
    }

    fn advance_start(&mut self) {
        self.start = self.records.keys().next().copied().unwrap_or(self.end);
    }
}

/// Appends offset `o` to the acquired ranges, extending the last one when contiguous with
/// the same count.
fn push(out: &mut Vec<Acquired>, o: i64, delivery_count: u16) {
    match out.last_mut() {
        Some(a) if a.last + 1 == o && a.delivery_count == delivery_count => a.last = o,
        _ => out.push(Acquired {
            first: o,
            last: o,
            delivery_count,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str) -> Rc<str> {
        Rc::from(id)
    }

    fn data(first: i64, last: i64) -> LogBatch {
        LogBatch {
            first,
            last,
            control: false,
        }
    }

    fn range(first: i64, last: i64, delivery_count: u16) -> Acquired {
        Acquired {
            first,
            last,
            delivery_count,
        }
    }

    #[test]
    fn records_go_to_one_member_at_a_time_in_whole_batches() {
        let mut p = SharePartition::new(0, Limits::default());
        let (a, b) = (m("a"), m("b"));
        assert_eq!(p.fetch_from(), Some(0));
        let log = [data(0, 4), data(5, 9), data(10, 14)];
        // About 3 records: the whole first batch.
        assert_eq!(p.acquire(&a, &log, 3, 100), vec![range(0, 4, 1)]);
        assert_eq!(p.fetch_from(), Some(5));
        assert_eq!(p.acquire(&b, &log[1..], 500, 100), vec![range(5, 14, 1)]);
        assert_eq!(p.in_flight(), (0, 15));
        assert_eq!(
            p.fetch_from(),
            Some(15),
            "nothing available: new records next"
        );
        // b cannot acknowledge a's records; nothing of the request applies.
        let both = vec![(5, 6, vec![AckType::Accept]), (0, 0, vec![AckType::Accept])];
        assert_eq!(p.acknowledge("b", &both), Err(AckError::NotAcquired(0)));
        assert_eq!(p.in_flight(), (0, 15));
        assert_eq!(
            p.acknowledge("a", &[(0, 4, vec![AckType::Accept])]),
            Ok(true)
        );
        assert_eq!(
            p.start(),
            5,
            "the start offset moves past the finished prefix"
        );
    }

    #[test]
    fn a_released_record_is_delivered_again_and_archived_at_the_limit() {
        let limits = Limits {
            delivery_count_limit: 3,
            ..Limits::default()
        };
        let mut p = SharePartition::new(0, limits);
        let a = m("a");
        let log = [data(0, 1)];
        for delivery in 1..=3u16 {
            let got = p.acquire(&a, &log, 10, 100);
            assert_eq!(got, vec![range(0, 1, delivery)], "delivery {delivery}");
            assert_eq!(
                p.acknowledge("a", &[(0, 1, vec![AckType::Release])]),
                Ok(true)
            );
        }
        // Released at their third delivery: archived, never delivered again.
        assert_eq!(p.start(), 2);
        assert_eq!(p.archived(), 2);
        assert_eq!(p.acquire(&a, &log, 10, 100), vec![]);
        assert_eq!(p.in_flight(), (0, 0));
    }

    #[test]
    fn an_expired_lock_makes_the_record_available_to_another_member() {
        let mut p = SharePartition::new(10, Limits::default());
        let (a, b) = (m("a"), m("b"));
        let log = [data(10, 12)];
        assert_eq!(p.acquire(&a, &log, 10, 1_000), vec![range(10, 12, 1)]);
        assert_eq!(p.next_lock_deadline_ms(), Some(1_000));
        assert!(!p.expire_locks(999));
        assert!(p.expire_locks(1_000));
        assert_eq!(p.acquire(&b, &log, 10, 2_000), vec![range(10, 12, 2)]);
        // The first owner's late acknowledgement is refused.
        let late = [(10, 12, vec![AckType::Accept])];
        assert_eq!(p.acknowledge("a", &late), Err(AckError::NotAcquired(10)));
        assert_eq!(p.acknowledge("b", &late), Ok(true));
        assert_eq!((p.start(), p.end()), (13, 13));
    }

    /// The view of a partition nobody fetches from: a lock that ran out counts as given
    /// back (archived at the delivery limit) before `expire_locks` applies it.
    #[test]
    fn in_flight_now_counts_run_out_locks_as_given_back() {
        let limits = Limits {
            delivery_count_limit: 2,
            ..Limits::default()
        };
        let mut p = SharePartition::new(0, limits);
        let a = m("a");
        p.acquire(&a, &[data(0, 1)], 10, 1_000);
        assert_eq!(p.in_flight_at(999), (0, 2, 0));
        assert_eq!(p.in_flight_at(1_000), (2, 0, 0));
        assert!(p.expire_locks(1_000));
        p.acquire(&a, &[data(0, 2)], 10, 2_000);
        assert_eq!(p.in_flight_at(1_500), (0, 3, 0));
        // Offsets 0-1 at their second delivery (the limit): archived once their lock runs
        // out; offset 2 at its first: available.
        assert_eq!(p.in_flight_at(2_000), (1, 0, 2));
        assert!(p.expire_locks(2_000));
        assert_eq!((p.in_flight(), p.archived()), ((1, 0), 2));
    }

    #[test]
    fn rejected_and_gap_records_are_never_delivered_again() {
        let mut p = SharePartition::new(0, Limits::default());
        let a = m("a");
        let log = [data(0, 3)];
        p.acquire(&a, &log, 10, 100);
        let types = vec![
            AckType::Reject,
            AckType::Gap,
            AckType::Release,
            AckType::Accept,
        ];
        assert_eq!(p.acknowledge("a", &[(0, 3, types)]), Ok(true));
        assert_eq!(p.acquire(&a, &log, 10, 100), vec![range(2, 2, 2)]);
    }

    #[test]
    fn a_session_close_gives_records_back_uncounted() {
        let mut p = SharePartition::new(0, Limits::default());
        let (a, b) = (m("a"), m("b"));
        p.acquire(&a, &[data(0, 1)], 10, 100);
        p.acquire(&b, &[data(2, 2)], 10, 100);
        assert!(p.release_member("a"));
        assert!(!p.release_member("nobody"));
        assert_eq!(p.fetch_from(), Some(0));
        assert_eq!(p.acquire(&b, &[data(0, 1)], 10, 100), vec![range(0, 1, 1)]);
    }

    #[test]
    fn control_batches_and_log_gaps_are_finished_without_a_delivery() {
        let mut p = SharePartition::new(0, Limits::default());
        let a = m("a");
        let marker = LogBatch {
            first: 3,
            last: 3,
            control: true,
        };
        // Offsets 5..=7 are not in the log (compaction): a gap between batches.
        let log = [data(0, 2), marker, data(4, 4), data(8, 9)];
        let got = p.acquire(&a, &log, 100, 100);
        assert_eq!(got, vec![range(0, 2, 1), range(4, 4, 1), range(8, 9, 1)]);
        let acks = [
            (0, 2, vec![AckType::Accept]),
            (4, 4, vec![AckType::Accept]),
            (8, 9, vec![AckType::Accept]),
        ];
        assert_eq!(p.acknowledge("a", &acks), Ok(true));
        assert_eq!((p.start(), p.end()), (10, 10));
        // Acknowledging a finished offset below the start is a no-op, past the end an error.
        assert_eq!(
            p.acknowledge("a", &[(3, 3, vec![AckType::Accept])]),
            Ok(false)
        );
        let past = [(10, 10, vec![AckType::Accept])];
        assert_eq!(p.acknowledge("a", &past), Err(AckError::OutOfRange(10)));
    }

    #[test]
    fn malformed_acknowledgements_change_nothing() {
        let mut p = SharePartition::new(0, Limits::default());
        let a = m("a");
        p.acquire(&a, &[data(0, 9)], 100, 100);
        for bad in [
            vec![(5, 4, vec![AckType::Accept])],
            vec![(0, 3, vec![])],
            vec![(0, 3, vec![AckType::Accept, AckType::Reject])],
        ] {
            assert!(p.acknowledge("a", &bad).is_err(), "{bad:?}");
        }
        assert_eq!(p.in_flight(), (0, 10));
    }

    #[test]
    fn new_records_stop_at_the_in_flight_limit() {
        let limits = Limits {
            record_locks_max: 4,
            ..Limits::default()
        };
        let mut p = SharePartition::new(0, limits);
        let a = m("a");
        let log = [data(0, 2), data(3, 5), data(6, 8)];
        // The limit is checked before each new batch: one batch may overshoot it.
        assert_eq!(p.acquire(&a, &log, 100, 100), vec![range(0, 5, 1)]);
        assert_eq!(p.fetch_from(), None);
        p.acknowledge("a", &[(0, 2, vec![AckType::Accept])])
            .unwrap();
        assert_eq!(p.fetch_from(), Some(6));
    }

    #[test]
    fn the_state_round_trips_and_acquired_records_come_back_available() {
        let mut p = SharePartition::new(0, Limits::default());
        let (a, b) = (m("a"), m("b"));
        p.acquire(&a, &[data(0, 4)], 100, 100);
        let mut types = vec![AckType::Release; 5];
        types[0] = AckType::Accept;
        p.acknowledge("a", &[(0, 4, types)]).unwrap();
        p.acquire(&b, &[data(5, 7)], 100, 100);
        p.acquire(&b, &[data(1, 1)], 100, 100);
        let s = p.state();
        assert_eq!(s.start, 1);
        assert_eq!(s.end, 8);
        assert_eq!(s.available, vec![(1, 1, 2), (2, 7, 1)]);
        let json = serde_json::to_string(&s).unwrap();
        let back: ShareState = serde_json::from_str(&json).unwrap();
        let q = SharePartition::from_state(&back, Limits::default());
        assert_eq!(
            q.in_flight(),
            (7, 0),
            "acquired at the crash: available again"
        );
        assert_eq!(q.fetch_from(), Some(1));
        assert_eq!(q.state(), s);
    }

    #[test]
    fn a_corrupt_state_makes_no_more_than_the_span_limit_of_entries() {
        let huge = ShareState {
            start: 5,
            end: i64::MAX,
            available: vec![(0, i64::MAX - 1, 1), (i64::MIN, -3, 2)],
            leader_epoch: 0,
        };
        let p = SharePartition::from_state(&huge, Limits::default());
        assert_eq!(p.end(), 5 + STATE_SPAN_MAX);
        assert_eq!(p.in_flight(), (STATE_SPAN_MAX as usize, 0));
    }

    #[test]
    fn a_log_start_past_the_start_offset_finishes_what_it_removed() {
        let mut p = SharePartition::new(0, Limits::default());
        let a = m("a");
        p.acquire(&a, &[data(0, 9)], 100, 100);
        p.log_start_moved(6);
        assert_eq!((p.start(), p.end(), p.in_flight()), (6, 10, (0, 4)));
        p.log_start_moved(20);
        assert_eq!((p.start(), p.end(), p.in_flight()), (20, 20, (0, 0)));
    }
}
