//! A share group's membership (KIP-932's ShareGroupHeartbeat on the group coordinator):
//! members, epochs, and the partitions each is given by Kafka's `SimpleAssignor`. Pure
//! data and decisions; the caller keeps the time and answers the request.
//!
//! Invariants:
//! - The group epoch grows whenever the membership, a subscription or the subscribed
//!   topics' partitions change; the assignment is recomputed for every member when the
//!   group epoch passed the assignment epoch, and a member that heartbeats then moves
//!   straight to its target (share groups revoke nothing: a partition may have several
//!   members at once, the records themselves are handed out one owner at a time).
//! - A member's epoch is the assignment epoch it last received; a request with an epoch
//!   the member does not hold (bar the previous one, whose answer may have been lost) is
//!   fenced.
//! - Every partition of a subscribed topic is given to at least one member while the
//!   group has members.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::group::consumer::Assignment;

/// The member epoch of a heartbeat that joins.
pub const JOIN_EPOCH: i32 = 0;
/// The member epoch of a heartbeat that leaves.
pub const LEAVE_EPOCH: i32 = -1;

/// One member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareMember {
    pub id: String,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: BTreeSet<String>,
    /// The assignment epoch it reached.
    pub epoch: i32,
    pub previous_epoch: i32,
    pub assigned: Assignment,
    /// Its last heartbeat, in the caller's milliseconds (not persisted: a loaded member's
    /// session starts when it is loaded).
    #[serde(skip)]
    pub last_seen_ms: u64,
}

/// A heartbeat as the coordinator reads it.
#[derive(Clone, Debug, Default)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    /// `None`: unchanged since the last heartbeat.
    pub subscribed: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
}

/// What a heartbeat is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The member's epoch and, when sent, its whole assignment.
    Ok {
        epoch: i32,
        assignment: Option<Assignment>,
    },
    /// The member left.
    Left,
    /// A Kafka error code, and a message for the client.
    Error(i16, &'static str),
}

/// One share group, persisted whole (`snapshot`) in `__consumer_offsets` whenever a
/// heartbeat, an expiry or a deletion changed it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ShareGroup {
    /// Bumped by each snapshot: replay keeps the newest.
    #[serde(default)]
    pub version: u64,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ShareMember>,
    /// Partition counts of the subscribed topics the assignment was computed with.
    topics_seen: BTreeMap<String, usize>,
    /// Each member's partitions at `assignment_epoch`.
    target: BTreeMap<String, Assignment>,
    /// The topics whose share partitions may hold a state for this group (Kafka's
    /// initialized partitions, by topic): each topic ever given to a member or whose
    /// offsets were altered, until its offsets are deleted. What DescribeShareGroupOffsets
    /// without topics answers, members or not.
    #[serde(default)]
    initialized: BTreeSet<String>,
}

impl ShareGroup {
    /// Handles one heartbeat at `now_ms`; `partitions` gives a topic's partition count
    /// (`None`: no such topic). Validation of the request itself (blank ids, an epoch
    /// below -1, a join without topics) is the caller's, before this.
    pub fn heartbeat(
        &mut self,
        hb: Heartbeat,
        partitions: &dyn Fn(&str) -> Option<usize>,
        members_max: usize,
        now_ms: u64,
    ) -> Answer {
        use crate::common::errors::code;
        if hb.member_epoch == LEAVE_EPOCH {
            if self.members.remove(&hb.member_id).is_none() {
                return Answer::Error(code::UNKNOWN_MEMBER_ID, "unknown member");
            }
            self.epoch += 1;
            return Answer::Left;
        }
        let full = hb.member_epoch == JOIN_EPOCH || hb.subscribed.is_some();
        let known = match self.admit(&hb, members_max) {
            Ok(known) => known,
            Err(refused) => return refused,
        };
        let member = self
            .members
            .entry(hb.member_id.clone())
            .or_insert_with(|| ShareMember {
                id: hb.member_id.clone(),
                rack_id: None,
                client_id: String::new(),
                client_host: String::new(),
                subscribed: BTreeSet::new(),
                epoch: 0,
                previous_epoch: 0,
                assigned: Assignment::new(),
                last_seen_ms: now_ms,
            });
        member.last_seen_ms = now_ms;
        member.rack_id = hb.rack_id;
        member.client_id = hb.client_id;
        member.client_host = hb.client_host;
        let mut changed = !known;
        if let Some(topics) = hb.subscribed {
            let topics: BTreeSet<String> = topics.into_iter().collect();
            changed |= topics != member.subscribed;
            member.subscribed = topics;
        }
        let seen = self.subscribed_topics(partitions);
        changed |= seen != self.topics_seen;
        if changed {
            self.epoch += 1;
            self.topics_seen = seen;
        }
        if self.epoch > self.assignment_epoch {
            self.reassign();
        }
        let Some(member) = self.members.get_mut(&hb.member_id) else {
            return Answer::Error(code::UNKNOWN_MEMBER_ID, "unknown member");
        };
        let before = member.assigned.clone();
        if member.epoch != self.assignment_epoch {
            member.previous_epoch = member.epoch;
            member.epoch = self.assignment_epoch;
            member.assigned = self.target.get(&hb.member_id).cloned().unwrap_or_default();
        }
        let send = full || member.assigned != before;
        Answer::Ok {
            epoch: member.epoch,
            assignment: send.then(|| member.assigned.clone()),
        }
    }

    /// Whether `hb`'s member may heartbeat: `Ok(known)` (an existing member, or a new one
    /// joining with room), else the answer that refuses it.
    fn admit(&self, hb: &Heartbeat, members_max: usize) -> Result<bool, Answer> {
        use crate::common::errors::code;
        let Some(member) = self.members.get(&hb.member_id) else {
            if hb.member_epoch != JOIN_EPOCH {
                return Err(Answer::Error(code::UNKNOWN_MEMBER_ID, "unknown member"));
            }
            if self.members.len() >= members_max {
                return Err(Answer::Error(
                    code::GROUP_MAX_SIZE_REACHED,
                    "the share group is full",
                ));
            }
            return Ok(false);
        };
        // A member fenced or told it is unknown joins again with epoch 0 and the same id
        // (the Java client does): a rejoin, given the whole current assignment. (Kafka 4.1
        // fences it unless its previous epoch was 0, which only delays the rejoin.)
        let rejoin = hb.member_epoch == JOIN_EPOCH;
        let lost_answer =
            hb.member_epoch == member.previous_epoch && hb.member_epoch < member.epoch;
        if hb.member_epoch != member.epoch && !lost_answer && !rejoin {
            return Err(Answer::Error(
                code::FENCED_MEMBER_EPOCH,
                "the member epoch is fenced",
            ));
        }
        Ok(true)
    }

    /// What a heartbeat of `member_id` can change of the persisted group: the group's
    /// epochs (the target and subscribed topics move only with them) and that member
    /// (bar its last-seen time). Equal before and after a heartbeat: nothing to persist.
    pub fn persisted_by(&self, member_id: &str) -> (i32, i32, Option<ShareMember>) {
        let member = self.members.get(member_id).map(|m| ShareMember {
            last_seen_ms: 0,
            ..m.clone()
        });
        (self.epoch, self.assignment_epoch, member)
    }

    /// The group as persisted now (its version unchanged): what `snapshot` would write.
    pub fn persisted(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The persisted form of the group, under a new version.
    pub fn snapshot(&mut self) -> Vec<u8> {
        self.version += 1;
        self.persisted()
    }

    /// The group a snapshot holds, loaded at `now_ms`: every member's session starts now.
    /// `None` when the bytes are not a snapshot.
    pub fn restored(snapshot: &[u8], now_ms: u64) -> Option<ShareGroup> {
        let mut g: ShareGroup = serde_json::from_slice(snapshot).ok()?;
        for m in g.members.values_mut() {
            m.last_seen_ms = now_ms;
        }
        Some(g)
    }

    /// Removes the members silent for `session_timeout_ms` by `now_ms`; returns their ids.
    pub fn expire(&mut self, session_timeout_ms: u64, now_ms: u64) -> Vec<String> {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| now_ms.saturating_sub(m.last_seen_ms) >= session_timeout_ms)
            .map(|m| m.id.clone())
            .collect();
        for id in &gone {
            self.members.remove(id);
        }
        if !gone.is_empty() {
            self.epoch += 1;
        }
        gone
    }

    /// Partition counts of every topic a member subscribes to that exists.
    fn subscribed_topics(
        &self,
        partitions: &dyn Fn(&str) -> Option<usize>,
    ) -> BTreeMap<String, usize> {
        self.members
            .values()
            .flat_map(|m| m.subscribed.iter())
            .filter_map(|t| partitions(t).map(|n| (t.clone(), n)))
            .collect()
    }

    fn reassign(&mut self) {
        let current: BTreeMap<String, Assignment> = self
            .members
            .iter()
            .map(|(id, m)| (id.clone(), m.assigned.clone()))
            .collect();
        let subscriptions: BTreeMap<String, BTreeSet<String>> = self
            .members
            .iter()
            .map(|(id, m)| (id.clone(), m.subscribed.clone()))
            .collect();
        self.target = simple_assign(&subscriptions, &self.topics_seen, &current);
        self.assignment_epoch = self.epoch;
        let given = self.target.values().flat_map(|a| a.keys());
        self.initialized.extend(given.cloned());
    }

    /// The topics whose share partitions may hold a state for this group, whether or not
    /// it has members now.
    pub fn initialized(&self) -> &BTreeSet<String> {
        &self.initialized
    }

    /// Notes that `topics` hold a state (`true`: their offsets were altered) or no longer
    /// do (their offsets were deleted); whether that changed anything.
    pub fn note_initialized(&mut self, topics: &[String], initialized: bool) -> bool {
        let before = self.initialized.len();
        for t in topics {
            match initialized {
                true => self.initialized.insert(t.clone()),
                false => self.initialized.remove(t),
            };
        }
        self.initialized.len() != before
    }
}

/// Kafka's `SimpleAssignor`: each member first gets the partition its id hashes to (Java's
/// `String.hashCode`; several members may land on one partition and share it), then keeps
/// partitions it owned that nobody hashed to while it holds fewer than its share
/// (`ceil(partitions / members)`), then the partitions nobody holds are dealt in turn to
/// the members subscribed to their topic that hold at most their share. Members are taken
/// in id order (Kafka: its map's order; only the pattern is the same).
pub fn simple_assign(
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    topics: &BTreeMap<String, usize>,
    current: &BTreeMap<String, Assignment>,
) -> BTreeMap<String, Assignment> {
    let mut a = Assigning {
        subscriptions,
        topics,
        out: subscriptions
            .keys()
            .map(|m| (m.clone(), Assignment::new()))
            .collect(),
        taken: BTreeSet::new(),
        share: 0,
    };
    let all: BTreeSet<(String, i32)> = subscriptions
        .keys()
        .flat_map(|m| a.partitions_of(m))
        .collect();
    if all.is_empty() {
        return a.out;
    }
    a.share = all.len().div_ceil(subscriptions.len());
    let hashed = a.hashed();
    a.keep(current, &hashed);
    a.deal(&all);
    a.out
}

/// The assignment `simple_assign` is building.
struct Assigning<'a> {
    subscriptions: &'a BTreeMap<String, BTreeSet<String>>,
    topics: &'a BTreeMap<String, usize>,
    out: BTreeMap<String, Assignment>,
    /// Partitions given to someone.
    taken: BTreeSet<(String, i32)>,
    /// `ceil(partitions / members)`.
    share: usize,
}

impl Assigning<'_> {
    fn partitions_of(&self, m: &str) -> Vec<(String, i32)> {
        let Some(ts) = self.subscriptions.get(m) else {
            return Vec::new();
        };
        ts.iter()
            .filter_map(|t| self.topics.get(t).map(|&n| (t, n)))
            .flat_map(|(t, n)| {
                (0..n).map(move |p| (t.clone(), i32::try_from(p).unwrap_or(i32::MAX)))
            })
            .collect()
    }

    fn count(&self, m: &str) -> usize {
        self.out
            .get(m)
            .map_or(0, |a| a.values().map(BTreeSet::len).sum())
    }

    fn give(&mut self, m: &str, (t, p): (String, i32)) {
        self.out
            .entry(m.to_string())
            .or_default()
            .entry(t.clone())
            .or_default()
            .insert(p);
        self.taken.insert((t, p));
    }

    /// Step 1: the partition each member's id hashes to; returns them.
    fn hashed(&mut self) -> BTreeSet<(String, i32)> {
        let mut hashed = BTreeSet::new();
        for m in self.subscriptions.keys() {
            let mine = self.partitions_of(m);
            let Ok(n) = i32::try_from(mine.len()) else {
                continue;
            };
            if n == 0 {
                continue;
            }
            let at = (crate::group::java_hash(m) % n).unsigned_abs() as usize;
            let tp = mine[at].clone();
            self.give(m, tp.clone());
            hashed.insert(tp);
        }
        hashed
    }

    /// Step 2: partitions a member owned that nobody hashed to, while it holds fewer than
    /// its share.
    fn keep(&mut self, current: &BTreeMap<String, Assignment>, hashed: &BTreeSet<(String, i32)>) {
        for (m, owned) in current {
            let mine: BTreeSet<(String, i32)> = self.partitions_of(m).into_iter().collect();
            for (t, ps) in owned {
                for &p in ps {
                    let tp = (t.clone(), p);
                    if !mine.contains(&tp) || hashed.contains(&tp) || self.taken.contains(&tp) {
                        continue;
                    }
                    if self.count(m) >= self.share {
                        break;
                    }
                    self.give(m, tp);
                }
            }
        }
    }

    /// Step 3: the partitions nobody holds, dealt in turn to subscribed members holding
    /// at most their share.
    fn deal(&mut self, all: &BTreeSet<(String, i32)>) {
        let members: Vec<String> = self.subscriptions.keys().cloned().collect();
        let mut turn = 0usize;
        for tp in all
            .iter()
            .filter(|tp| !self.taken.contains(*tp))
            .cloned()
            .collect::<Vec<_>>()
        {
            for step in 0..members.len() {
                let m = &members[(turn + step) % members.len()];
                let subscribed = self
                    .subscriptions
                    .get(m)
                    .is_some_and(|ts| ts.contains(&tp.0));
                if subscribed && self.count(m) <= self.share {
                    self.give(m, tp);
                    turn = (turn + step + 1) % members.len();
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::errors::code;

    fn hb(id: &str, epoch: i32, topics: Option<&[&str]>) -> Heartbeat {
        Heartbeat {
            member_id: id.into(),
            member_epoch: epoch,
            subscribed: topics.map(|ts| ts.iter().map(|t| t.to_string()).collect()),
            ..Heartbeat::default()
        }
    }

    fn parts(n: usize) -> impl Fn(&str) -> Option<usize> {
        move |t: &str| (t == "t").then_some(n)
    }

    fn owned(a: &Answer) -> usize {
        match a {
            Answer::Ok {
                assignment: Some(a),
                ..
            } => a.values().map(BTreeSet::len).sum(),
            other => panic!("no assignment in {other:?}"),
        }
    }

    #[test]
    fn members_of_a_one_partition_topic_all_share_it() {
        let mut g = ShareGroup::default();
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            let a = g.heartbeat(hb(id, 0, Some(&["t"])), &parts(1), 10, i as u64);
            assert_eq!(owned(&a), 1, "{id}");
        }
        // a and b catch up with the new epochs and still hold the partition.
        for id in ["a", "b"] {
            let epoch = g.members[id].epoch;
            let a = g.heartbeat(hb(id, epoch, None), &parts(1), 10, 5);
            let Answer::Ok { epoch: e, .. } = a else {
                panic!("{a:?}")
            };
            assert_eq!(e, g.assignment_epoch);
            assert_eq!(g.members[id].assigned["t"], BTreeSet::from([0]));
        }
    }

    #[test]
    fn partitions_are_spread_and_every_one_is_given() {
        let subs: BTreeMap<String, BTreeSet<String>> = ["a", "b"]
            .iter()
            .map(|m| (m.to_string(), BTreeSet::from(["t".to_string()])))
            .collect();
        let topics = BTreeMap::from([("t".to_string(), 6)]);
        let out = simple_assign(&subs, &topics, &BTreeMap::new());
        let counts: Vec<usize> = out
            .values()
            .map(|a| a.values().map(BTreeSet::len).sum())
            .collect();
        assert!(counts.iter().all(|&c| (3..=4).contains(&c)), "{out:?}");
        let given: BTreeSet<i32> = out.values().flat_map(|a| a["t"].iter().copied()).collect();
        assert_eq!(given, (0..6).collect());
        // Five members on two partitions: each gets one.
        let subs5: BTreeMap<String, BTreeSet<String>> = (0..5)
            .map(|i| (format!("m{i}"), BTreeSet::from(["t".to_string()])))
            .collect();
        let two = BTreeMap::from([("t".to_string(), 2)]);
        let out = simple_assign(&subs5, &two, &BTreeMap::new());
        let given: BTreeSet<i32> = out.values().flat_map(|a| a["t"].iter().copied()).collect();
        assert_eq!(given, BTreeSet::from([0, 1]));
        assert!(out.values().all(|a| !a["t"].is_empty()));
    }

    #[test]
    fn epochs_fence_stale_requests_and_a_lost_answer_is_forgiven() {
        let mut g = ShareGroup::default();
        g.heartbeat(hb("a", 0, Some(&["t"])), &parts(2), 10, 0);
        let e1 = g.members["a"].epoch;
        g.heartbeat(hb("b", 0, Some(&["t"])), &parts(2), 10, 0);
        // a's next heartbeat moves it to the new epoch; its answer is "lost" and it retries
        // with the previous epoch.
        g.heartbeat(hb("a", e1, None), &parts(2), 10, 1);
        let e2 = g.members["a"].epoch;
        assert!(e2 > e1);
        assert!(matches!(
            g.heartbeat(hb("a", e1, None), &parts(2), 10, 2),
            Answer::Ok { .. }
        ));
        let ahead = g.heartbeat(hb("a", e2 + 5, None), &parts(2), 10, 2);
        assert_eq!(
            ahead,
            Answer::Error(code::FENCED_MEMBER_EPOCH, "the member epoch is fenced")
        );
        let stranger = g.heartbeat(hb("z", 3, None), &parts(2), 10, 2);
        assert!(matches!(
            stranger,
            Answer::Error(code::UNKNOWN_MEMBER_ID, _)
        ));
    }

    #[test]
    fn leaving_and_expiry_hand_partitions_to_the_others() {
        let mut g = ShareGroup::default();
        g.heartbeat(hb("a", 0, Some(&["t"])), &parts(4), 10, 0);
        g.heartbeat(hb("b", 0, Some(&["t"])), &parts(4), 10, 0);
        let e = g.members["a"].epoch;
        let split = g.heartbeat(hb("a", e, None), &parts(4), 10, 1);
        assert!(owned(&split) < 4, "{split:?}");
        assert_eq!(
            g.heartbeat(hb("b", -1, None), &parts(4), 10, 1),
            Answer::Left
        );
        let e = g.members["a"].epoch;
        let a = g.heartbeat(hb("a", e, None), &parts(4), 10, 2);
        assert_eq!(owned(&a), 4);
        g.heartbeat(hb("c", 0, Some(&["t"])), &parts(4), 10, 3);
        assert_eq!(g.expire(1_000, 1_002), vec!["a".to_string()]);
        let e = g.members["c"].epoch;
        assert_eq!(
            owned(&g.heartbeat(hb("c", e, None), &parts(4), 10, 1_003)),
            4
        );
    }

    #[test]
    fn a_full_group_refuses_new_members_only() {
        let mut g = ShareGroup::default();
        g.heartbeat(hb("a", 0, Some(&["t"])), &parts(1), 1, 0);
        let b = g.heartbeat(hb("b", 0, Some(&["t"])), &parts(1), 1, 0);
        assert!(matches!(b, Answer::Error(code::GROUP_MAX_SIZE_REACHED, _)));
        let e = g.members["a"].epoch;
        assert!(matches!(
            g.heartbeat(hb("a", e, None), &parts(1), 1, 1),
            Answer::Ok { .. }
        ));
    }

    #[test]
    fn a_restored_snapshot_keeps_members_epochs_and_assignments() {
        let mut g = ShareGroup::default();
        g.heartbeat(hb("a", 0, Some(&["t"])), &parts(4), 10, 0);
        g.heartbeat(hb("b", 0, Some(&["t"])), &parts(4), 10, 0);
        let e = g.members["a"].epoch;
        g.heartbeat(hb("a", e, None), &parts(4), 10, 1);
        let before = g.persisted();
        let snapshot = g.snapshot();
        assert_ne!(before, snapshot, "a snapshot is a new version");
        let mut back = ShareGroup::restored(&snapshot, 500).expect("restored");
        assert_eq!(back.persisted(), snapshot);
        assert!(back.members.values().all(|m| m.last_seen_ms == 500));
        // Members heartbeat on at their epochs, unfenced, and expire from the load time.
        for id in ["a", "b"] {
            let epoch = back.members[id].epoch;
            let answer = back.heartbeat(hb(id, epoch, None), &parts(4), 10, 600);
            assert!(matches!(answer, Answer::Ok { .. }), "{id}: {answer:?}");
        }
        assert!(back.expire(1_000, 1_500).is_empty());
        assert!(ShareGroup::restored(b"{", 0).is_none());
        // The fuzz seed of a share group's snapshot is one.
        let seed = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fuzz/corpus/group_records/share-group"
        ))
        .expect("the fuzz seed");
        let at = seed.iter().position(|&b| b == 0).expect("key NUL value");
        let seeded = ShareGroup::restored(&seed[at + 1..], 0).expect("a share group");
        assert_eq!((seeded.version, seeded.members.len()), (3, 2));
    }

    #[test]
    fn what_a_heartbeat_changes_is_seen_without_serializing_the_group() {
        let mut g = ShareGroup::default();
        let steps: Vec<(&str, Option<&[&str]>, usize, u64)> = vec![
            ("a", Some(&["t"]), 4, 0),
            ("a", None, 4, 1),
            ("b", Some(&["t"]), 4, 2),
            ("a", None, 4, 3),
            ("a", None, 4, 4),
            ("b", None, 6, 5),
            ("b", Some(&["t"]), 6, 6),
        ];
        for (id, topics, n, now) in steps {
            let epoch = g.members.get(id).map_or(0, |m| m.epoch);
            let (before_bytes, before) = (g.persisted(), g.persisted_by(id));
            g.heartbeat(hb(id, epoch, topics), &parts(n), 10, now);
            assert_eq!(
                g.persisted_by(id) != before,
                g.persisted() != before_bytes,
                "{id} at {now}"
            );
        }
        let (before_bytes, before) = (g.persisted(), g.persisted_by("a"));
        g.heartbeat(hb("a", -1, None), &parts(6), 10, 7);
        assert!(g.persisted_by("a") != before && g.persisted() != before_bytes);
    }

    #[test]
    fn the_assignment_is_sent_on_a_join_a_full_request_or_a_change() {
        let mut g = ShareGroup::default();
        let first = g.heartbeat(hb("a", 0, Some(&["t"])), &parts(3), 10, 0);
        assert_eq!(owned(&first), 3);
        let e = g.members["a"].epoch;
        let quiet = g.heartbeat(hb("a", e, None), &parts(3), 10, 1);
        assert_eq!(
            quiet,
            Answer::Ok {
                epoch: e,
                assignment: None
            }
        );
        // The topic grew: a new epoch and the assignment with the new partition.
        let grown = g.heartbeat(hb("a", e, None), &parts(4), 10, 2);
        assert_eq!(owned(&grown), 4);
    }

    #[test]
    fn topics_given_once_stay_initialized_after_the_members_leave() {
        let mut g = ShareGroup::default();
        let two = |t: &str| ["t", "u"].contains(&t).then_some(2);
        g.heartbeat(hb("a", 0, Some(&["t", "u"])), &two, 10, 0);
        assert_eq!(g.heartbeat(hb("a", -1, None), &two, 10, 1), Answer::Left);
        assert!(g.members.is_empty());
        let both = BTreeSet::from(["t".to_string(), "u".to_string()]);
        assert_eq!(g.initialized(), &both);
        // A snapshot keeps them; altered offsets add a topic, deleted ones remove it.
        let mut g = ShareGroup::restored(&g.snapshot(), 2).expect("a snapshot");
        assert_eq!(g.initialized(), &both);
        assert!(g.note_initialized(&["v".to_string()], true));
        assert!(!g.note_initialized(&["v".to_string()], true));
        assert!(g.note_initialized(&["t".to_string()], false));
        let now = BTreeSet::from(["u".to_string(), "v".to_string()]);
        assert_eq!(g.initialized(), &now);
        // A snapshot written before the field existed loads with none.
        let old = br#"{"epoch":1,"assignment_epoch":1,"members":{},"topics_seen":{},"target":{}}"#;
        let g = ShareGroup::restored(old, 0).expect("an older snapshot");
        assert!(g.initialized().is_empty());
    }
}
