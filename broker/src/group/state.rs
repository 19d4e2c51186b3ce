//! Group data: members, generation, protocol, assignments, committed offsets.
//!
//! Invariant: `generation` only grows; in `CompletingRebalance` and `Stable` every member
//! has joined the current generation; `leader` is a member whenever there are members.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use bytes::Bytes;
use futures::channel::oneshot;

/// Kafka's group states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupState {
    /// No members.
    Empty,
    /// Waiting for members to (re)join.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment.
    CompletingRebalance,
    /// Assignment distributed.
    Stable,
}

impl GroupState {
    /// Kafka's name for the state.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

/// What a parked JoinGroup receives.
#[derive(Clone, Debug)]
pub struct JoinOutcome {
    /// Error code (0 = joined).
    pub error: i16,
    /// Generation joined.
    pub generation: i32,
    /// Protocol chosen.
    pub protocol: Option<String>,
    /// Protocol type.
    pub protocol_type: Option<String>,
    /// Leader member id.
    pub leader: String,
    /// The member's id.
    pub member_id: String,
    /// For the leader: every member's (id, instance id, metadata for the chosen protocol).
    pub members: Vec<(String, Option<String>, Bytes)>,
}

/// What a parked SyncGroup receives: error code and assignment.
pub type SyncOutcome = (i16, Bytes);

/// One member.
#[derive(Debug)]
pub struct Member {
    /// Member id.
    pub id: String,
    /// Static membership id.
    pub instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Rebalance timeout.
    pub rebalance_timeout_ms: i32,
    /// Supported protocols in preference order: (name, metadata).
    pub protocols: Vec<(String, Bytes)>,
    /// Current assignment.
    pub assignment: Bytes,
    /// A JoinGroup waiting for the rebalance to complete.
    pub join_waiter: Option<oneshot::Sender<JoinOutcome>>,
    /// A SyncGroup waiting for the leader's assignment.
    pub sync_waiter: Option<oneshot::Sender<SyncOutcome>>,
    /// Last heartbeat (or join/sync).
    pub last_seen: Instant,
}

impl Member {
    /// This member's metadata for `protocol` (empty when it does not support it).
    pub fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, b)| b.clone())
            .unwrap_or_default()
    }
}

/// A committed offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// Offset.
    pub offset: i64,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Metadata string.
    pub metadata: String,
    /// When it was committed (ms since the epoch; for records written before commit
    /// times were kept, when it was loaded): each offset of a group without a protocol
    /// type expires `offsets.retention.minutes` after it (KIP-211).
    pub commit_timestamp_ms: i64,
}

/// An offset committed in an open transaction: (topic, partition), the
/// `__consumer_offsets` offset of its record, and the offset committed.
pub type StagedOffset = ((String, i32), i64, Committed);

/// A member id handed out with MEMBER_ID_REQUIRED and not yet used.
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    /// When it was handed out.
    pub since: Instant,
    /// The session timeout its JoinGroup asked for: unused for this long, it is dropped.
    pub session_timeout: std::time::Duration,
}

/// One group.
#[derive(Debug)]
pub struct Group {
    /// Group id.
    pub id: String,
    /// State.
    pub state: GroupState,
    /// Generation.
    pub generation: i32,
    /// Protocol type ("consumer", "connect", ...).
    pub protocol_type: Option<String>,
    /// Chosen protocol.
    pub protocol: Option<String>,
    /// Leader member id.
    pub leader: Option<String>,
    /// Members by id (ordered: deterministic leader choice and responses).
    pub members: BTreeMap<String, Member>,
    /// Ids handed out with MEMBER_ID_REQUIRED, not yet joined. Each expires after the
    /// session timeout its JoinGroup asked for; with `members` they count against
    /// `group_max_size`.
    pub pending: HashMap<String, Pending>,
    /// Committed offsets by (topic, partition).
    pub offsets: HashMap<(String, i32), Committed>,
    /// For each (topic, partition) a live commit or offset delete changed: the
    /// `__consumer_offsets` offset of the record that did. Requests of one connection run
    /// concurrently and one group commit makes several of their records durable at once,
    /// waking them in any order; applying a record only over an older one keeps `offsets`
    /// what replaying the log gives (the later record wins), not what finished last.
    pub offset_versions: HashMap<(String, i32), i64>,
    /// When the current rebalance gives up on members that did not rejoin.
    pub rebalance_deadline: Option<Instant>,
    /// Earliest time the current join phase may complete (initial rebalance delay).
    pub join_not_before: Option<Instant>,
    /// Since when the group has been Empty (ms since the epoch; `None` when it is not, or
    /// not yet seen Empty by the offset expiry): its offsets expire
    /// `offsets.retention.minutes` after it (KIP-211).
    pub empty_since_ms: Option<i64>,
    /// Offsets committed in open transactions (TxnOffsetCommit), by producer id: each
    /// (topic, partition), the `__consumer_offsets` offset of its record, and the offset.
    /// Applied when the producer's commit marker is written, dropped at its abort marker.
    pub pending_txn: HashMap<i64, Vec<StagedOffset>>,
    /// A group of the consumer protocol (KIP-848): its members and assignments. `None`
    /// for a classic group; a group changes protocol only while it has no members.
    pub consumer: Option<super::consumer::ConsumerGroup>,
}

impl Group {
    /// Applies the durable record at `log_offset` of `__consumer_offsets` that sets
    /// (`Some`) or deletes (`None`) the committed offset of `key`, unless a later record
    /// for `key` was applied already (see `offset_versions`).
    pub fn apply_offset_record(
        &mut self,
        key: (String, i32),
        log_offset: i64,
        committed: Option<Committed>,
    ) {
        if self
            .offset_versions
            .get(&key)
            .is_some_and(|&applied| applied > log_offset)
        {
            return;
        }
        self.offset_versions.insert(key.clone(), log_offset);
        match committed {
            Some(c) => {
                self.offsets.insert(key, c);
            }
            None => {
                self.offsets.remove(&key);
            }
        }
    }

    /// A new empty group.
    pub fn new(id: &str) -> Group {
        Group {
            id: id.to_string(),
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending: HashMap::new(),
            offsets: HashMap::new(),
            offset_versions: HashMap::new(),
            rebalance_deadline: None,
            join_not_before: None,
            empty_since_ms: None,
            pending_txn: HashMap::new(),
            consumer: None,
        }
    }

    /// Holds an offset committed in producer `producer_id`'s open transaction (its record
    /// at `log_offset`) until the transaction ends.
    pub fn stage_txn_offset(
        &mut self,
        producer_id: i64,
        key: (String, i32),
        log_offset: i64,
        committed: Committed,
    ) {
        self.pending_txn
            .entry(producer_id)
            .or_default()
            .push((key, log_offset, committed));
    }

    /// Ends producer `producer_id`'s transaction: its staged offsets become committed
    /// (`commit`) or are dropped.
    pub fn end_txn_offsets(&mut self, producer_id: i64, commit: bool) {
        let Some(staged) = self.pending_txn.remove(&producer_id) else {
            return;
        };
        if commit {
            for (key, log_offset, c) in staged {
                self.apply_offset_record(key, log_offset, Some(c));
            }
        }
    }

    /// Whether an open transaction holds an offset of `key` (OffsetFetch with
    /// `require_stable` answers UNSTABLE_OFFSET_COMMIT for it).
    pub fn unstable(&self, key: &(String, i32)) -> bool {
        self.pending_txn
            .values()
            .any(|staged| staged.iter().any(|(k, _, _)| k == key))
    }

    /// Nobody is in the group or waiting to be, it never formed (generation 0: no group
    /// record was written) and no offset record applies to it: dropping it loses nothing.
    pub fn holds_nothing(&self) -> bool {
        self.state == GroupState::Empty
            && self.generation == 0
            && self.members.is_empty()
            && self.pending.is_empty()
            && self.offsets.is_empty()
            && self.offset_versions.is_empty()
            && self.pending_txn.is_empty()
            && self.consumer.is_none()
    }

    /// Whether consumer-protocol members are in the group.
    pub fn has_consumer_members(&self) -> bool {
        self.consumer
            .as_ref()
            .is_some_and(|c| !c.members.is_empty())
    }

    /// The protocol every member supports with the most votes (each member votes for its
    /// first supported candidate), ties broken by the leader's preference order.
    pub fn select_protocol(&self) -> Option<String> {
        let mut candidates: Option<HashSet<&str>> = None;
        for m in self.members.values() {
            let names: HashSet<&str> = m.protocols.iter().map(|(n, _)| n.as_str()).collect();
            candidates = Some(match candidates {
                None => names,
                Some(c) => c.intersection(&names).copied().collect(),
            });
        }
        let candidates = candidates?;
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((n, _)) = m
                .protocols
                .iter()
                .find(|(n, _)| candidates.contains(n.as_str()))
            {
                *votes.entry(n.as_str()).or_default() += 1;
            }
        }
        let best = votes.values().copied().max()?;
        let first_member = self.members.values().next()?;
        first_member
            .protocols
            .iter()
            .map(|(n, _)| n.as_str())
            .find(|n| votes.get(n) == Some(&best))
            .map(str::to_string)
    }

    /// Whether a member with these protocols can join (type matches, one protocol in
    /// common with every member).
    pub fn accepts(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocols.is_empty();
        }
        if self
            .protocol_type
            .as_deref()
            .is_some_and(|t| t != protocol_type)
        {
            return false;
        }
        protocols.iter().any(|(n, _)| {
            self.members
                .values()
                .all(|m| m.protocols.iter().any(|(mn, _)| mn == n))
        })
    }

    /// The largest rebalance timeout among members (how long a rebalance waits).
    pub fn rebalance_timeout_ms(&self) -> i32 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }

    /// The member with this static instance id.
    pub fn member_by_instance(&self, instance: &str) -> Option<&Member> {
        self.members
            .values()
            .find(|m| m.instance_id.as_deref() == Some(instance))
    }

    /// KIP-345: a request naming a static instance id that now belongs to another member id
    /// comes from a member a newer one replaced (FENCED_INSTANCE_ID).
    pub fn fenced(&self, member_id: &str, instance: Option<&str>) -> bool {
        instance
            .and_then(|i| self.member_by_instance(i))
            .is_some_and(|m| m.id != member_id)
    }

    /// KIP-345: a static member rejoining with no member id replaces the one its instance
    /// id names: the member keeps its place (assignment, leadership) under a new member id,
    /// and the old id's waiting JoinGroup or SyncGroup is answered FENCED_INSTANCE_ID.
    /// Returns the new member id, or `None` when no member has this instance id.
    pub fn replace_static_member(&mut self, instance: &str) -> Option<String> {
        let old = self.member_by_instance(instance)?.id.clone();
        let mut m = self.members.remove(&old)?;
        let new = format!("{instance}-{}", uuid::Uuid::new_v4());
        if let Some(tx) = m.join_waiter.take() {
            let _ = tx.send(JoinOutcome {
                error: crate::common::errors::code::FENCED_INSTANCE_ID,
                generation: -1,
                protocol: None,
                protocol_type: None,
                leader: String::new(),
                member_id: old.clone(),
                members: Vec::new(),
            });
        }
        if let Some(tx) = m.sync_waiter.take() {
            let _ = tx.send((
                crate::common::errors::code::FENCED_INSTANCE_ID,
                Bytes::new(),
            ));
        }
        if self.leader.as_deref() == Some(old.as_str()) {
            self.leader = Some(new.clone());
        }
        m.id = new.clone();
        self.members.insert(new.clone(), m);
        Some(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, protocols: &[&str]) -> Member {
        Member {
            id: id.into(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "h".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocols: protocols
                .iter()
                .map(|p| (p.to_string(), Bytes::new()))
                .collect(),
            assignment: Bytes::new(),
            join_waiter: None,
            sync_waiter: None,
            last_seen: crate::common::clock::now(),
        }
    }

    #[test]
    fn protocol_selection_by_votes() {
        let mut g = Group::new("g");
        g.members
            .insert("a".into(), member("a", &["range", "roundrobin"]));
        g.members
            .insert("b".into(), member("b", &["roundrobin", "range"]));
        g.members.insert("c".into(), member("c", &["roundrobin"]));
        assert_eq!(g.select_protocol().as_deref(), Some("roundrobin"));
        assert!(g.accepts("consumer", &[("roundrobin".into(), Bytes::new())]));
        assert!(!g.accepts("consumer", &[("range".into(), Bytes::new())]));
    }

    #[test]
    fn a_replaced_static_member_keeps_its_place_and_the_old_id_is_fenced() {
        let mut g = Group::new("g");
        let mut old = member("old", &["range"]);
        old.instance_id = Some("i1".into());
        old.assignment = Bytes::from_static(b"mine");
        let (tx, mut sync) = futures::channel::oneshot::channel();
        old.sync_waiter = Some(tx);
        g.members.insert("old".into(), old);
        g.leader = Some("old".into());
        let new = g
            .replace_static_member("i1")
            .expect("instance i1 is a member");
        assert_ne!(new, "old");
        assert_eq!(
            g.leader.as_deref(),
            Some(new.as_str()),
            "leadership moves with it"
        );
        assert_eq!(g.members[&new].assignment, Bytes::from_static(b"mine"));
        assert!(g.fenced("old", Some("i1")));
        assert!(!g.fenced(&new, Some("i1")));
        assert!(
            !g.fenced("old", None),
            "without an instance id nothing is fenced"
        );
        assert_eq!(
            sync.try_recv().ok().flatten().map(|(code, _)| code),
            Some(crate::common::errors::code::FENCED_INSTANCE_ID)
        );
        assert!(g.replace_static_member("unknown").is_none());
    }

    fn committed(offset: i64) -> Committed {
        Committed {
            commit_timestamp_ms: 0,
            offset,
            leader_epoch: -1,
            metadata: String::new(),
        }
    }

    /// librdkafka's test 0030 (async commits of offsets 1..50 on one connection) read back 2:
    /// the commits completed in another order than their records were written.
    #[test]
    fn offset_records_apply_in_log_order_whatever_order_they_complete_in() {
        let mut g = Group::new("g");
        let key = ("t".to_string(), 0);
        // Records at log offsets 10 (offset 2) and 11 (offset 50) complete in reverse.
        g.apply_offset_record(key.clone(), 11, Some(committed(50)));
        g.apply_offset_record(key.clone(), 10, Some(committed(2)));
        assert_eq!(g.offsets[&key].offset, 50);
        // An older delete does not remove a newer commit; a newer one does, and an older
        // commit completing after it does not bring the entry back.
        g.apply_offset_record(key.clone(), 9, None);
        assert_eq!(g.offsets[&key].offset, 50);
        g.apply_offset_record(key.clone(), 12, None);
        assert!(!g.offsets.contains_key(&key));
        g.apply_offset_record(key.clone(), 11, Some(committed(50)));
        assert!(!g.offsets.contains_key(&key));
        g.apply_offset_record(key.clone(), 13, Some(committed(60)));
        assert_eq!(g.offsets[&key].offset, 60);
    }
}
