//! Consumer groups of the next-generation protocol (KIP-848): members heartbeat with their
//! subscription, the coordinator computes the target assignment with a server-side
//! assignor (`uniform`, `range`), and each member moves to it one step at a time —
//! partitions it must give up are revoked first, and a partition is handed to a member only
//! once no other member owns it (the reconciliation of Kafka's `CurrentAssignmentBuilder`).
//!
//! Invariants: `group_epoch` only grows and `assignment_epoch <= group_epoch`; no partition
//! is in two members' `assigned ∪ revoking` at once; a member's `member_epoch` is the
//! assignment epoch it reached (it never runs ahead of `assignment_epoch`).
//!
//! Pure data and decisions; the requests, persistence and timers are `coordinator`'s.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::common::errors::code;

/// A member's partitions: topic name → partition indexes.
pub type Assignment = BTreeMap<String, BTreeSet<i32>>;

/// The member epoch of a heartbeat that joins (or re-joins) the group.
pub const JOIN_EPOCH: i32 = 0;
/// The member epoch of a heartbeat that leaves the group.
pub const LEAVE_EPOCH: i32 = -1;
/// The member epoch of a static member's heartbeat that leaves for now: it keeps its
/// partitions for its instance id until its session expires.
pub const STATIC_LEAVE_EPOCH: i32 = -2;
/// The assignors the coordinator runs (Kafka's `group.consumer.assignors`); the first is
/// the default.
pub const ASSIGNORS: [&str; 2] = ["uniform", "range"];
/// Longest subscription regex accepted (bytes), and the compiled program's bound.
pub const REGEX_BYTES_MAX: usize = 1024;
const REGEX_PROGRAM_BYTES_MAX: usize = 1 << 20;

/// Where a member stands on its way to its target assignment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberState {
    /// It owns its target at the assignment epoch.
    #[default]
    Stable,
    /// It must give up `revoking` before it moves on (its epoch stays behind).
    UnrevokedPartitions,
    /// It is at the assignment epoch but waits for partitions other members still own.
    UnreleasedPartitions,
}

/// What a member's liveness is made of: not persisted, restarted when loaded, and left
/// out of equality (a heartbeat that only refreshes it changes nothing durable).
#[derive(Clone, Debug, Default)]
pub struct Liveness {
    /// Last heartbeat (`None` until the first since the group was loaded).
    pub last_seen: Option<Instant>,
    /// For a member in `UnrevokedPartitions`: when it is removed if it has not revoked.
    pub revoke_deadline: Option<Instant>,
    /// The assignment last sent to the member (`None`: send the next in full).
    pub sent: Option<Assignment>,
}

impl PartialEq for Liveness {
    fn eq(&self, _: &Liveness) -> bool {
        true
    }
}

/// What a member of the classic protocol in a consumer group joined with (Kafka 4's
/// mixed groups: a group being upgraded member by member, or downgraded).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassicMeta {
    /// Its session timeout (JoinGroup's).
    pub session_timeout_ms: i32,
    /// Its protocols in preference order: (name, metadata).
    pub protocols: Vec<(String, Vec<u8>)>,
}

/// A classic JoinGroup to a consumer group.
#[derive(Clone, Debug, Default)]
pub struct ClassicJoin {
    /// Member id (the coordinator made it).
    pub member_id: String,
    /// Static membership id.
    pub instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// What the member joined with.
    pub meta: ClassicMeta,
    /// Rebalance timeout.
    pub rebalance_timeout_ms: i32,
}

/// One member.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConsumerMember {
    /// Member id.
    pub id: String,
    /// Static membership id.
    pub instance_id: Option<String>,
    /// Rack.
    pub rack_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// How long it may take to revoke partitions.
    pub rebalance_timeout_ms: i32,
    /// Topics subscribed by name.
    pub subscribed_topic_names: Vec<String>,
    /// Topics subscribed by regular expression (RE2 syntax).
    pub subscribed_topic_regex: Option<String>,
    /// The assignor it asked for.
    pub server_assignor: Option<String>,
    /// Its epoch: the assignment epoch it reached, or `STATIC_LEAVE_EPOCH`.
    pub member_epoch: i32,
    /// The epoch before it (a heartbeat whose answer was lost may still carry it).
    pub previous_member_epoch: i32,
    /// Where it stands.
    pub state: MemberState,
    /// The partitions it owns now.
    pub assigned: Assignment,
    /// The partitions it must revoke (still its own until it has).
    pub revoking: Assignment,
    /// For a member speaking the classic protocol (JoinGroup, SyncGroup, Heartbeat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classic: Option<ClassicMeta>,
    /// With the authorizer: the topics its regex matched that its principal may describe,
    /// as of its last heartbeat (Kafka resolves a regex to those only); `None`: every
    /// match counts (no authorizer, or a member loaded from the log until it heartbeats).
    #[serde(skip)]
    pub regex_describable: Option<BTreeSet<String>>,
    /// Liveness.
    #[serde(skip)]
    pub live: Liveness,
}

/// `ConsumerGroup::persisted_by`: group epoch, assignment epoch, member ids, the member.
type PersistedBy = (i32, i32, Vec<String>, Option<ConsumerMember>);

/// A consumer group's protocol state (its committed offsets are the classic group's).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConsumerGroup {
    /// Bumped with every persisted snapshot: replay keeps the newest whatever order
    /// concurrent writes reached the log in.
    pub version: u64,
    /// Bumped by every change of membership, subscriptions or subscribed metadata.
    pub group_epoch: i32,
    /// The group epoch the target assignment was computed at.
    pub assignment_epoch: i32,
    /// Members by id.
    pub members: BTreeMap<String, ConsumerMember>,
    /// The target assignment by member id.
    pub target: BTreeMap<String, Assignment>,
    /// Partition counts of the subscribed topics when the group epoch last moved.
    pub subscribed: BTreeMap<String, i32>,
}

/// A ConsumerGroupHeartbeat as the coordinator reads it (topic ids resolved to names).
#[derive(Clone, Debug, Default)]
pub struct Heartbeat {
    /// Member id (client-generated from v1; empty on a v0 join: the coordinator makes one).
    pub member_id: String,
    /// Member epoch.
    pub member_epoch: i32,
    /// Static membership id.
    pub instance_id: Option<String>,
    /// Rack.
    pub rack_id: Option<String>,
    /// Rebalance timeout (-1: unchanged).
    pub rebalance_timeout_ms: i32,
    /// Topic names (`None`: unchanged).
    pub subscribed_topic_names: Option<Vec<String>>,
    /// Regex (`None`: unchanged; empty: none).
    pub subscribed_topic_regex: Option<String>,
    /// With the authorizer: the topics the member's regex matches that the request's
    /// principal may describe (`None`: no authorizer or no regex; see
    /// `ConsumerMember::regex_describable`).
    pub regex_describable: Option<BTreeSet<String>>,
    /// Assignor (`None`: unchanged).
    pub server_assignor: Option<String>,
    /// Partitions the client owns (`None`: unchanged since its last heartbeat).
    pub owned: Option<Assignment>,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
}

/// The answer to a heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Error code.
    pub error: i16,
    /// Error message.
    pub message: Option<String>,
    /// The member's id.
    pub member_id: String,
    /// The member's epoch.
    pub member_epoch: i32,
    /// Its assignment, when it changed or the member (re)joined.
    pub assignment: Option<Assignment>,
    /// Whether durable state changed: the group must be persisted before the answer.
    pub changed: bool,
}

impl Answer {
    /// A refusal of `hb`: `error` with `message`, nothing changed.
    pub fn error(error: i16, message: impl Into<String>, hb: &Heartbeat) -> Answer {
        Answer {
            error,
            message: Some(message.into()),
            member_id: hb.member_id.clone(),
            member_epoch: hb.member_epoch,
            assignment: None,
            changed: false,
        }
    }
}

/// Kafka's state names of a consumer group.
pub fn state_name(g: &ConsumerGroup) -> &'static str {
    if g.members.is_empty() {
        "Empty"
    } else if g.assignment_epoch < g.group_epoch {
        "Assigning"
    } else if g
        .members
        .values()
        .any(|m| m.member_epoch != g.assignment_epoch || m.state != MemberState::Stable)
    {
        "Reconciling"
    } else {
        "Stable"
    }
}

/// Whether `a` and `b` share a partition.
fn intersects(a: &Assignment, b: &Assignment) -> bool {
    a.iter()
        .any(|(t, ps)| b.get(t).is_some_and(|qs| !ps.is_disjoint(qs)))
}

/// Whether every partition of `a` is in `b`.
fn is_subset(a: &Assignment, b: &Assignment) -> bool {
    a.iter()
        .all(|(t, ps)| ps.is_empty() || b.get(t).is_some_and(|qs| ps.is_subset(qs)))
}

/// `a` minus `b`, without empty topics.
fn minus(a: &Assignment, b: &Assignment) -> Assignment {
    a.iter()
        .filter_map(|(t, ps)| {
            let left: BTreeSet<i32> = match b.get(t) {
                Some(qs) => ps.difference(qs).copied().collect(),
                None => ps.clone(),
            };
            (!left.is_empty()).then(|| (t.clone(), left))
        })
        .collect()
}

/// `a` ∩ `b`, without empty topics.
fn intersection(a: &Assignment, b: &Assignment) -> Assignment {
    a.iter()
        .filter_map(|(t, ps)| {
            let both: BTreeSet<i32> = ps.intersection(b.get(t)?).copied().collect();
            (!both.is_empty()).then(|| (t.clone(), both))
        })
        .collect()
}

/// Partitions in an assignment.
pub fn count(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}

/// The topics and owned partitions (version 1+) of a classic member's
/// `ConsumerProtocolSubscription` metadata (version-prefixed), if it is one.
pub fn decode_subscription(meta: &[u8]) -> Option<(Vec<String>, Assignment)> {
    use kafka_protocol::messages::ConsumerProtocolSubscription;
    use kafka_protocol::protocol::Decodable;
    let version = i16::from_be_bytes(*meta.first_chunk::<2>()?);
    let mut body = bytes::Bytes::copy_from_slice(&meta[2..]);
    let s = ConsumerProtocolSubscription::decode(&mut body, version.clamp(0, 3)).ok()?;
    let names = s.topics.iter().map(|t| t.to_string()).collect();
    let mut owned = Assignment::new();
    for tp in &s.owned_partitions {
        owned
            .entry(tp.topic.to_string())
            .or_default()
            .extend(tp.partitions.iter().copied());
    }
    Some((names, owned))
}

/// The partitions of a classic member's `ConsumerProtocolAssignment` (version-prefixed);
/// empty when it is not one.
pub fn decode_assignment(bytes: &[u8]) -> Assignment {
    use kafka_protocol::messages::ConsumerProtocolAssignment;
    use kafka_protocol::protocol::Decodable;
    let Some(version) = bytes.first_chunk::<2>().map(|v| i16::from_be_bytes(*v)) else {
        return Assignment::new();
    };
    let mut body = bytes::Bytes::copy_from_slice(&bytes[2..]);
    let Ok(a) = ConsumerProtocolAssignment::decode(&mut body, version.clamp(0, 3)) else {
        return Assignment::new();
    };
    let mut out = Assignment::new();
    for tp in &a.assigned_partitions {
        out.entry(tp.topic.to_string())
            .or_default()
            .extend(tp.partitions.iter().copied());
    }
    out
}

/// A classic member's assignment as SyncGroup carries it: `ConsumerProtocolAssignment`
/// version 0, prefixed with its version.
pub fn encode_assignment(a: &Assignment) -> bytes::Bytes {
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
    use kafka_protocol::messages::{ConsumerProtocolAssignment, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    let parts = a
        .iter()
        .map(|(t, ps)| {
            TopicPartition::default()
                .with_topic(TopicName(StrBytes::from_string(t.clone())))
                .with_partitions(ps.iter().copied().collect())
        })
        .collect();
    let msg = ConsumerProtocolAssignment::default().with_assigned_partitions(parts);
    let mut out = bytes::BytesMut::new();
    out.extend_from_slice(&0i16.to_be_bytes());
    if msg.encode(&mut out, 0).is_err() {
        return bytes::Bytes::new();
    }
    out.freeze()
}

thread_local! {
    /// This shard's resolved regexes (`regex_matches`).
    static MATCHES: std::cell::RefCell<RegexMatches> = std::cell::RefCell::default();
}

/// The topics each subscription regex matches in one topic map (the one `topic_partitions`
/// made of the shard's current metadata): resolved once per regex per metadata change
/// instead of at every heartbeat of every member, which compiled each member's regex and
/// matched it against every topic (480 ms per heartbeat for 100 regex members over 10,000
/// topics). Holding the map keeps its address from being reused by another.
#[derive(Default)]
struct RegexMatches {
    topics: Option<std::rc::Rc<BTreeMap<String, i32>>>,
    by_regex: HashMap<String, std::rc::Rc<Vec<String>>>,
}

/// Most regexes kept resolved per shard; past it the cache starts over.
const REGEX_MATCHES_MAX: usize = 1024;

/// Makes `topics` the map whose regex matches are kept (the others are forgotten).
pub fn remember_topics(topics: std::rc::Rc<BTreeMap<String, i32>>) {
    MATCHES.with(|m| {
        let mut m = m.borrow_mut();
        if !m
            .topics
            .as_ref()
            .is_some_and(|t| std::rc::Rc::ptr_eq(t, &topics))
        {
            m.topics = Some(topics);
            m.by_regex.clear();
        }
    });
}

/// The topics of `topics` that `regex` matches, internal ones (`__`) left out; `None` for
/// a regex that does not compile. Cached when `topics` is the remembered map.
pub fn regex_matches(
    topics: &BTreeMap<String, i32>,
    regex: &str,
) -> Option<std::rc::Rc<Vec<String>>> {
    let resolve = || {
        let re = compile_regex(regex).ok()?;
        let matched = topics
            .keys()
            .filter(|t| !t.starts_with("__") && re.is_match(t))
            .cloned()
            .collect();
        Some(std::rc::Rc::new(matched))
    };
    MATCHES.with(|m| {
        let remembered = m
            .borrow()
            .topics
            .as_ref()
            .is_some_and(|t| std::ptr::eq(t.as_ref(), topics));
        if !remembered {
            return resolve();
        }
        if let Some(found) = m.borrow().by_regex.get(regex) {
            return Some(found.clone());
        }
        let matched = resolve()?;
        let mut m = m.borrow_mut();
        if m.by_regex.len() >= REGEX_MATCHES_MAX {
            m.by_regex.clear();
        }
        m.by_regex.insert(regex.to_string(), matched.clone());
        Some(matched)
    })
}

/// A subscription regex compiled with bounds, or why it is refused.
pub fn compile_regex(re: &str) -> Result<regex::Regex, String> {
    if re.len() > REGEX_BYTES_MAX {
        return Err(format!(
            "the subscription regex is over {REGEX_BYTES_MAX} bytes"
        ));
    }
    regex::RegexBuilder::new(&format!("^(?:{re})$"))
        .size_limit(REGEX_PROGRAM_BYTES_MAX)
        .build()
        .map_err(|e| format!("invalid subscription regex: {e}"))
}

/// The checks of a heartbeat's assignor and regex.
fn check_fields(hb: &Heartbeat) -> Result<(), Answer> {
    if let Some(a) = hb.server_assignor.as_deref() {
        if !ASSIGNORS.contains(&a) {
            return Err(Answer::error(
                code::UNSUPPORTED_ASSIGNOR,
                format!("assignor {a} is not one of {ASSIGNORS:?}"),
                hb,
            ));
        }
    }
    if let Some(re) = hb
        .subscribed_topic_regex
        .as_deref()
        .filter(|r| !r.is_empty())
    {
        if let Err(e) = compile_regex(re) {
            return Err(Answer::error(code::INVALID_REGULAR_EXPRESSION, e, hb));
        }
    }
    Ok(())
}

/// The checks of a heartbeat that need no group state (a join's fields, the assignor and
/// regex): made before a classic group is upgraded for it.
pub fn precheck(hb: &Heartbeat) -> Result<(), Answer> {
    check_fields(hb)?;
    if hb.member_epoch == JOIN_EPOCH {
        check_join_fields(hb)?;
    }
    Ok(())
}

/// Kafka's checks of a join (epoch 0): every field a member starts from is set.
fn check_join_fields(hb: &Heartbeat) -> Result<(), Answer> {
    let why = if hb.rebalance_timeout_ms <= 0 {
        "RebalanceTimeoutMs must be provided in the first request"
    } else if hb.subscribed_topic_names.is_none() && hb.subscribed_topic_regex.is_none() {
        "SubscribedTopicNames or SubscribedTopicRegex must be set in the first request"
    } else if hb.owned.as_ref().is_none_or(|o| count(o) > 0) {
        "TopicPartitions must be set and empty when (re-)joining"
    } else {
        return Ok(());
    };
    Err(Answer::error(code::INVALID_REQUEST, why, hb))
}

impl ConsumerMember {
    /// Takes what the heartbeat sets (fields it leaves out stay); whether its subscription
    /// changed.
    fn update(&mut self, hb: &mut Heartbeat, now: Instant) -> bool {
        self.live.last_seen = Some(now);
        if hb.rebalance_timeout_ms > 0 {
            self.rebalance_timeout_ms = hb.rebalance_timeout_ms;
        }
        if hb.rack_id.is_some() {
            self.rack_id = hb.rack_id.take();
        }
        self.client_id = std::mem::take(&mut hb.client_id);
        self.client_host = std::mem::take(&mut hb.client_host);
        if let Some(a) = hb.server_assignor.take() {
            self.server_assignor = Some(a);
        }
        let mut changed = false;
        if let Some(mut names) = hb.subscribed_topic_names.take() {
            names.sort();
            names.dedup();
            changed |= names != self.subscribed_topic_names;
            self.subscribed_topic_names = names;
        }
        if let Some(re) = hb.subscribed_topic_regex.take() {
            let re = Some(re).filter(|r| !r.is_empty());
            changed |= re != self.subscribed_topic_regex;
            self.subscribed_topic_regex = re;
        }
        let describable = hb.regex_describable.take();
        changed |= describable != self.regex_describable;
        self.regex_describable = describable;
        changed
    }

    /// The existing topics it subscribes to (by name, or by regex; internal topics, whose
    /// names start with `__`, only by name; with the authorizer, a regex only those its
    /// principal may describe).
    pub fn topics<'a>(&self, topics: &'a BTreeMap<String, i32>) -> BTreeSet<&'a str> {
        let mut out: BTreeSet<&str> = self
            .subscribed_topic_names
            .iter()
            .filter_map(|n| topics.get_key_value(n).map(|(k, _)| k.as_str()))
            .collect();
        if let Some(matched) = self
            .subscribed_topic_regex
            .as_deref()
            .and_then(|r| regex_matches(topics, r))
        {
            let describable = |t: &String| {
                self.regex_describable
                    .as_ref()
                    .is_none_or(|d| d.contains(t))
            };
            out.extend(
                matched
                    .iter()
                    .filter(|t| describable(t))
                    .filter_map(|t| topics.get_key_value(t).map(|(k, _)| k.as_str())),
            );
        }
        out
    }
}

impl ConsumerGroup {
    /// Partition counts of every topic some member subscribes to. Run at every heartbeat:
    /// members usually share one subscription, so a regex is resolved once for all the
    /// members that subscribe with it (and the same describable topics), not once each.
    fn subscription_metadata(&self, topics: &BTreeMap<String, i32>) -> BTreeMap<String, i32> {
        let mut out: BTreeMap<String, i32> = BTreeMap::new();
        let add = |t: &String, out: &mut BTreeMap<String, i32>| {
            if !out.contains_key(t) {
                if let Some(&n) = topics.get(t) {
                    out.insert(t.clone(), n);
                }
            }
        };
        let mut resolved: Vec<(&str, Option<&BTreeSet<String>>)> = Vec::new();
        for m in self.members.values() {
            for t in &m.subscribed_topic_names {
                add(t, &mut out);
            }
            let Some(re) = m.subscribed_topic_regex.as_deref() else {
                continue;
            };
            let describable = m.regex_describable.as_ref();
            if resolved.contains(&(re, describable)) {
                continue;
            }
            resolved.push((re, describable));
            for t in regex_matches(topics, re).iter().flat_map(|m| m.iter()) {
                if describable.is_none_or(|d| d.contains(t)) {
                    add(t, &mut out);
                }
            }
        }
        out
    }

    /// The assignor the members asked for most (ties to the first in `ASSIGNORS`).
    pub fn assignor(&self) -> &'static str {
        let mut votes = [0usize; ASSIGNORS.len()];
        for m in self.members.values() {
            if let Some(i) = m
                .server_assignor
                .as_deref()
                .and_then(|a| ASSIGNORS.iter().position(|x| *x == a))
            {
                votes[i] += 1;
            }
        }
        let best = (0..ASSIGNORS.len())
            .max_by_key(|&i| (votes[i], std::cmp::Reverse(i)))
            .unwrap_or(0);
        ASSIGNORS[best]
    }

    /// Moves the group epoch when the subscribed topics' partitions changed (unless
    /// `bumped`: this heartbeat moved it already), then recomputes the target assignment
    /// if it is behind the group epoch.
    fn refresh_target(&mut self, topics: &BTreeMap<String, i32>, bumped: bool) {
        let subscribed = self.subscription_metadata(topics);
        if subscribed != self.subscribed {
            self.subscribed = subscribed;
            if !bumped {
                self.group_epoch = self.group_epoch.saturating_add(1);
            }
        }
        if self.assignment_epoch >= self.group_epoch {
            return;
        }
        let subs: BTreeMap<String, BTreeSet<String>> = self
            .members
            .values()
            .map(|m| {
                let ts = m.topics(topics).into_iter().map(str::to_string).collect();
                (m.id.clone(), ts)
            })
            .collect();
        self.target = match self.assignor() {
            "range" => range(&subs, topics),
            _ => uniform(&subs, topics, &self.target),
        };
        self.assignment_epoch = self.group_epoch;
    }

    /// Who owns each partition now (`assigned` or `revoking`), other than `except`.
    fn owners(&self, except: &str) -> HashMap<(&str, i32), &str> {
        let mut owners = HashMap::new();
        for m in self.members.values().filter(|m| m.id != except) {
            for a in [&m.assigned, &m.revoking] {
                for (t, ps) in a {
                    for &p in ps {
                        owners.insert((t.as_str(), p), m.id.as_str());
                    }
                }
            }
        }
        owners
    }

    /// Moves member `id` toward its target (`owned`: what its client says it owns).
    fn reconcile(&mut self, id: &str, owned: Option<&Assignment>, now: Instant) {
        let Some(m) = self.members.get(id) else {
            return;
        };
        if m.state == MemberState::UnrevokedPartitions {
            match owned {
                Some(o) if !intersects(o, &m.revoking) => {}
                _ => return,
            }
        }
        let target_epoch = self.assignment_epoch;
        if m.member_epoch == target_epoch && m.state == MemberState::Stable {
            return;
        }
        let target = self.target.get(id).cloned().unwrap_or_default();
        let keep = intersection(&m.assigned, &target);
        let revoke = minus(&m.assigned, &target);
        let free: Assignment = {
            let owners = self.owners(id);
            minus(&target, &m.assigned)
                .into_iter()
                .filter_map(|(t, ps)| {
                    let ps: BTreeSet<i32> = ps
                        .into_iter()
                        .filter(|&p| !owners.contains_key(&(t.as_str(), p)))
                        .collect();
                    (!ps.is_empty()).then_some((t, ps))
                })
                .collect()
        };
        let wanted = count(&minus(&target, &m.assigned));
        let Some(m) = self.members.get_mut(id) else {
            return;
        };
        m.revoking.clear();
        // A member that says it owns none of them has revoked them already (a classic
        // member rejoining, eager ones having given up everything).
        if !revoke.is_empty() && owned.is_none_or(|o| intersects(o, &revoke)) {
            m.assigned = keep;
            m.revoking = revoke;
            m.state = MemberState::UnrevokedPartitions;
            let timeout = Duration::from_millis(u64::try_from(m.rebalance_timeout_ms).unwrap_or(0));
            m.live.revoke_deadline = Some(now + timeout);
            return;
        }
        m.live.revoke_deadline = None;
        m.assigned = keep;
        let granted = count(&free);
        for (t, ps) in free {
            m.assigned.entry(t).or_default().extend(ps);
        }
        if m.member_epoch != target_epoch {
            m.previous_member_epoch = m.member_epoch;
            m.member_epoch = target_epoch;
        }
        m.state = if granted < wanted {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        };
    }

    /// Handles one heartbeat; `topics` are the cluster's topics with their partition
    /// counts, `max_size` the members the group may hold.
    pub fn heartbeat(
        &mut self,
        mut hb: Heartbeat,
        topics: &BTreeMap<String, i32>,
        now: Instant,
        max_size: usize,
    ) -> Answer {
        if let Err(a) = check_fields(&hb) {
            return a;
        }
        if matches!(hb.member_epoch, LEAVE_EPOCH | STATIC_LEAVE_EPOCH) {
            return self.leave(&hb);
        }
        // Kafka sends the assignment to a join, to a full request (one with every field
        // set) and when it changed.
        let full = hb.rebalance_timeout_ms != -1
            && (hb.subscribed_topic_names.is_some() || hb.subscribed_topic_regex.is_some())
            && hb.owned.is_some();
        // What this heartbeat may change, not the whole group: cloning and comparing a
        // group of thousands of partitions at every heartbeat cost more than the rest.
        let before = self.persisted_by(&hb.member_id);
        #[cfg(debug_assertions)]
        let whole_before = self.clone();
        let new_member = match self.admit(&mut hb, max_size) {
            Ok(new) => new,
            Err(a) => return a,
        };
        let Some(m) = self.members.get_mut(&hb.member_id) else {
            return Answer::error(code::UNKNOWN_MEMBER_ID, "member vanished", &hb);
        };
        let bumped = m.update(&mut hb, now) || new_member;
        if bumped {
            self.group_epoch = self.group_epoch.saturating_add(1);
        }
        self.refresh_target(topics, bumped);
        self.reconcile(&hb.member_id, hb.owned.as_ref(), now);
        let Some(m) = self.members.get_mut(&hb.member_id) else {
            return Answer::error(code::UNKNOWN_MEMBER_ID, "member vanished", &hb);
        };
        let assignment =
            (hb.member_epoch == JOIN_EPOCH || full || m.live.sent.as_ref() != Some(&m.assigned))
                .then(|| m.assigned.clone());
        if assignment.is_some() {
            m.live.sent = Some(m.assigned.clone());
        }
        let member_epoch = m.member_epoch;
        let changed = self.persisted_by(&hb.member_id) != before;
        #[cfg(debug_assertions)]
        assert_eq!(
            changed,
            *self != whole_before,
            "persisted_by missed a change"
        );
        Answer {
            error: code::NONE,
            message: None,
            member_id: hb.member_id.clone(),
            member_epoch,
            assignment,
            changed,
        }
    }

    /// What a heartbeat of `member_id` can change of the persisted group: the epochs (the
    /// target and the subscribed topics change only with them), which members there are
    /// (a join; a static member taking its instance over), and that member (reconciliation
    /// touches no other). Equal before and after a heartbeat: nothing to persist.
    fn persisted_by(&self, member_id: &str) -> PersistedBy {
        (
            self.group_epoch,
            self.assignment_epoch,
            self.members.keys().cloned().collect(),
            self.members.get(member_id).cloned(),
        )
    }

    /// Lets the heartbeat's member in: a join, or a member at its epoch (or at the one
    /// before, when the answer that moved it on was lost: it owns no more than it has).
    /// Whether the member is new to the group.
    fn admit(&mut self, hb: &mut Heartbeat, max_size: usize) -> Result<bool, Answer> {
        match hb.member_epoch {
            JOIN_EPOCH => self.join(hb, max_size),
            e if e > 0 => {
                let Some(m) = self.members.get(&hb.member_id) else {
                    return Err(Answer::error(
                        code::UNKNOWN_MEMBER_ID,
                        format!("member {} is not in the group", hb.member_id),
                        hb,
                    ));
                };
                let lost_answer = e == m.previous_member_epoch
                    && hb.owned.as_ref().is_some_and(|o| is_subset(o, &m.assigned));
                if e != m.member_epoch && !lost_answer {
                    return Err(Answer::error(
                        code::FENCED_MEMBER_EPOCH,
                        format!(
                            "member epoch {e} is fenced: the member's epoch is {}",
                            m.member_epoch
                        ),
                        hb,
                    ));
                }
                Ok(false)
            }
            e => Err(Answer::error(
                code::INVALID_REQUEST,
                format!("member epoch {e} is not valid"),
                hb,
            )),
        }
    }

    /// A heartbeat with epoch 0: a new member, a member that lost its state (it starts
    /// over owning nothing), or a static member taking its instance id back; whether the
    /// member is new to the group.
    fn join(&mut self, hb: &mut Heartbeat, max_size: usize) -> Result<bool, Answer> {
        if hb.member_id.is_empty() {
            hb.member_id = uuid::Uuid::new_v4().simple().to_string();
        }
        check_join_fields(hb)?;
        if let Some(inst) = hb.instance_id.clone() {
            if self.take_instance(&inst, hb)? {
                return Ok(false);
            }
        }
        match self.members.get_mut(&hb.member_id) {
            Some(m) => {
                // Its client starts over: nothing owned, everything sent again.
                m.assigned.clear();
                m.revoking.clear();
                m.state = MemberState::Stable;
                m.previous_member_epoch = m.member_epoch;
                m.member_epoch = JOIN_EPOCH;
                m.live.sent = None;
                Ok(false)
            }
            None => {
                if self.members.len() >= max_size {
                    return Err(Answer::error(
                        code::GROUP_MAX_SIZE_REACHED,
                        format!("the group has reached its maximum size {max_size}"),
                        hb,
                    ));
                }
                self.members.insert(
                    hb.member_id.clone(),
                    ConsumerMember {
                        id: hb.member_id.clone(),
                        instance_id: hb.instance_id.clone(),
                        rebalance_timeout_ms: hb.rebalance_timeout_ms,
                        ..ConsumerMember::default()
                    },
                );
                Ok(true)
            }
        }
    }

    /// A static member joining with instance id `inst`: when the instance's previous
    /// member left for now (`STATIC_LEAVE_EPOCH`), the new one takes its place, partitions
    /// and epoch (true); when it is still in the group, UNRELEASED_INSTANCE_ID.
    fn take_instance(&mut self, inst: &str, hb: &Heartbeat) -> Result<bool, Answer> {
        let holder = self
            .members
            .values()
            .find(|m| m.instance_id.as_deref() == Some(inst) && m.id != hb.member_id)
            .map(|m| (m.id.clone(), m.member_epoch));
        match holder {
            None => Ok(false),
            Some((_, epoch)) if epoch != STATIC_LEAVE_EPOCH => Err(Answer::error(
                code::UNRELEASED_INSTANCE_ID,
                format!("instance id {inst} is still used by another member"),
                hb,
            )),
            Some((old, _)) => {
                let Some(mut m) = self.members.remove(&old) else {
                    return Err(Answer::error(
                        code::UNKNOWN_MEMBER_ID,
                        "member vanished",
                        hb,
                    ));
                };
                m.id = hb.member_id.clone();
                m.member_epoch = m.previous_member_epoch;
                m.live.sent = None;
                if let Some(t) = self.target.remove(&old) {
                    self.target.insert(m.id.clone(), t);
                }
                self.members.insert(m.id.clone(), m);
                Ok(true)
            }
        }
    }

    fn leave(&mut self, hb: &Heartbeat) -> Answer {
        let Some(m) = self.members.get_mut(&hb.member_id) else {
            return Answer::error(
                code::UNKNOWN_MEMBER_ID,
                format!("member {} is not in the group", hb.member_id),
                hb,
            );
        };
        if hb.member_epoch == STATIC_LEAVE_EPOCH {
            // Its partitions stay its instance's until the session expires.
            if m.member_epoch != STATIC_LEAVE_EPOCH {
                m.previous_member_epoch = m.member_epoch;
                m.member_epoch = STATIC_LEAVE_EPOCH;
            }
        } else {
            self.remove(&hb.member_id);
        }
        Answer {
            error: code::NONE,
            message: None,
            member_id: hb.member_id.clone(),
            member_epoch: hb.member_epoch,
            assignment: None,
            changed: true,
        }
    }

    /// Removes a member; its partitions are free for the others.
    pub fn remove(&mut self, id: &str) {
        if self.members.remove(id).is_some() {
            self.target.remove(id);
            self.group_epoch = self.group_epoch.saturating_add(1);
        }
    }

    /// Removes members whose session expired (a classic member's own session timeout, the
    /// others' `session_timeout`) or that did not revoke in time; their ids.
    pub fn expire(&mut self, now: Instant, session_timeout: Duration) -> Vec<String> {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                let timeout = m.classic.as_ref().map_or(session_timeout, |c| {
                    Duration::from_millis(u64::try_from(c.session_timeout_ms).unwrap_or(0))
                });
                let seen = m
                    .live
                    .last_seen
                    .is_some_and(|s| now.duration_since(s) >= timeout);
                let late = m.live.revoke_deadline.is_some_and(|d| now >= d);
                seen || late
            })
            .map(|m| m.id.clone())
            .collect();
        for id in &gone {
            self.remove(id);
        }
        gone
    }

    /// A classic JoinGroup of a member of this consumer group (a mixed group): the member
    /// is added or updated from its subscription (its first protocol whose metadata is a
    /// consumer subscription), moved toward its target with the partitions it says it
    /// still owns, and answered at once with its epoch as the generation.
    pub fn classic_join(
        &mut self,
        j: ClassicJoin,
        topics: &BTreeMap<String, i32>,
        now: Instant,
        max_size: usize,
    ) -> Result<(i32, bool), i16> {
        let Some((names, owned)) = j
            .meta
            .protocols
            .iter()
            .find_map(|(_, m)| decode_subscription(m))
        else {
            return Err(code::INCONSISTENT_GROUP_PROTOCOL);
        };
        let before = self.clone();
        let mut bumped = false;
        if let Some(inst) = j.instance_id.as_deref() {
            // KIP-345: the new incarnation of a static member takes its place.
            let old = self
                .members
                .values()
                .find(|m| m.instance_id.as_deref() == Some(inst) && m.id != j.member_id)
                .map(|m| m.id.clone());
            if let Some(mut m) = old.and_then(|o| self.members.remove(&o)) {
                if let Some(t) = self.target.remove(&m.id) {
                    self.target.insert(j.member_id.clone(), t);
                }
                m.id = j.member_id.clone();
                self.members.insert(m.id.clone(), m);
            }
        }
        if !self.members.contains_key(&j.member_id) {
            if self.members.len() >= max_size {
                return Err(code::GROUP_MAX_SIZE_REACHED);
            }
            let m = ConsumerMember {
                id: j.member_id.clone(),
                previous_member_epoch: -1,
                ..ConsumerMember::default()
            };
            self.members.insert(j.member_id.clone(), m);
            bumped = true;
        }
        let Some(m) = self.members.get_mut(&j.member_id) else {
            return Err(code::UNKNOWN_MEMBER_ID);
        };
        m.instance_id = j.instance_id;
        m.client_id = j.client_id;
        m.client_host = j.client_host;
        m.rebalance_timeout_ms = j.rebalance_timeout_ms;
        m.classic = Some(j.meta);
        m.live.last_seen = Some(now);
        let mut names = names;
        names.sort();
        names.dedup();
        bumped |= names != m.subscribed_topic_names || m.subscribed_topic_regex.is_some();
        m.subscribed_topic_names = names;
        m.subscribed_topic_regex = None;
        if bumped {
            self.group_epoch = self.group_epoch.saturating_add(1);
        }
        self.refresh_target(topics, bumped);
        self.reconcile(&j.member_id, Some(&owned), now);
        let epoch = self.members.get(&j.member_id).map_or(0, |m| m.member_epoch);
        Ok((epoch, *self != before))
    }

    /// A classic SyncGroup: the member's assignment at `generation` (its epoch).
    pub fn classic_sync(&self, member_id: &str, generation: i32) -> Result<&Assignment, i16> {
        let m = self.members.get(member_id).ok_or(code::UNKNOWN_MEMBER_ID)?;
        if generation != m.member_epoch {
            return Err(code::ILLEGAL_GENERATION);
        }
        Ok(&m.assigned)
    }

    /// A classic Heartbeat: REBALANCE_IN_PROGRESS while the member is not at its target
    /// (it rejoins to move on); whether durable state changed.
    pub fn classic_heartbeat(
        &mut self,
        member_id: &str,
        generation: i32,
        topics: &BTreeMap<String, i32>,
        now: Instant,
    ) -> (i16, bool) {
        let before = self.clone();
        self.refresh_target(topics, false);
        let target_epoch = self.assignment_epoch;
        let code = match self.members.get_mut(member_id) {
            None => code::UNKNOWN_MEMBER_ID,
            Some(m) if m.member_epoch != generation => code::ILLEGAL_GENERATION,
            Some(m) => {
                m.live.last_seen = Some(now);
                if m.member_epoch == target_epoch && m.state == MemberState::Stable {
                    code::NONE
                } else {
                    code::REBALANCE_IN_PROGRESS
                }
            }
        };
        (code, *self != before)
    }

    /// Whether every member speaks the classic protocol (the group can go back to it).
    pub fn only_classic_members(&self) -> bool {
        !self.members.is_empty() && self.members.values().all(|m| m.classic.is_some())
    }

    /// The persisted form of the group, under a new version.
    pub fn snapshot(&mut self) -> Vec<u8> {
        self.version += 1;
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// After loading: every member's session starts now and every assignment is sent in
    /// full with the next heartbeat.
    pub fn loaded(&mut self, now: Instant) {
        for m in self.members.values_mut() {
            m.live.last_seen = Some(now);
            m.live.sent = None;
            if m.state == MemberState::UnrevokedPartitions {
                let timeout =
                    Duration::from_millis(u64::try_from(m.rebalance_timeout_ms).unwrap_or(0));
                m.live.revoke_deadline = Some(now + timeout);
            }
        }
    }
}

/// Kafka's `uniform` assignor, sticky: each member keeps what it had in the previous
/// target while that stays balanced; free partitions go to the eligible member with the
/// fewest; then partitions move from a member to an eligible one with at least two fewer
/// until none can.
pub fn uniform(
    subs: &BTreeMap<String, BTreeSet<String>>,
    topics: &BTreeMap<String, i32>,
    previous: &BTreeMap<String, Assignment>,
) -> BTreeMap<String, Assignment> {
    let mut owner: BTreeMap<(String, i32), String> = BTreeMap::new();
    let mut counts: BTreeMap<&str, usize> = subs.keys().map(|m| (m.as_str(), 0)).collect();
    for (m, a) in previous {
        let Some(s) = subs.get(m) else { continue };
        for (t, ps) in a {
            let n = topics.get(t).copied().unwrap_or(0);
            if !s.contains(t) {
                continue;
            }
            for &p in ps.iter().filter(|&&p| p < n) {
                if owner.insert((t.clone(), p), m.clone()).is_none() {
                    *counts.entry(m.as_str()).or_default() += 1;
                }
            }
        }
    }
    let eligible = |t: &str| -> Vec<&str> {
        subs.iter()
            .filter(|(_, s)| s.contains(t))
            .map(|(m, _)| m.as_str())
            .collect()
    };
    let all: BTreeSet<&String> = subs.values().flatten().collect();
    for t in all {
        let n = topics.get(t).copied().unwrap_or(0);
        let members = eligible(t);
        for p in 0..n {
            if owner.contains_key(&(t.clone(), p)) {
                continue;
            }
            if let Some(&m) = members.iter().min_by_key(|m| (counts[*m], **m)) {
                owner.insert((t.clone(), p), m.to_string());
                *counts.entry(m).or_default() += 1;
            }
        }
    }
    // Balance: a partition moves only toward a member with at least two fewer, so the sum
    // of squared counts falls with every move and the loop ends.
    loop {
        let mut moved = false;
        let keys: Vec<(String, i32)> = owner.keys().cloned().collect();
        for tp in keys {
            let from = owner[&tp].clone();
            let to = eligible(&tp.0)
                .into_iter()
                .min_by_key(|m| (counts[*m], *m))
                .filter(|m| counts[*m] + 1 < counts[from.as_str()]);
            if let Some(to) = to {
                *counts.entry(to).or_default() += 1;
                if let Some(c) = counts.get_mut(from.as_str()) {
                    *c -= 1;
                }
                owner.insert(tp, to.to_string());
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    let mut out: BTreeMap<String, Assignment> = subs
        .keys()
        .map(|m| (m.clone(), Assignment::new()))
        .collect();
    for ((t, p), m) in owner {
        out.entry(m).or_default().entry(t).or_default().insert(p);
    }
    out
}

/// Kafka's `range` assignor: per topic, its subscribers in member id order get
/// consecutive ranges, the first `partitions % members` one more.
pub fn range(
    subs: &BTreeMap<String, BTreeSet<String>>,
    topics: &BTreeMap<String, i32>,
) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = subs
        .keys()
        .map(|m| (m.clone(), Assignment::new()))
        .collect();
    let all: BTreeSet<&String> = subs.values().flatten().collect();
    for t in all {
        let n = topics.get(t).copied().unwrap_or(0);
        let members: Vec<&String> = subs
            .iter()
            .filter(|(_, s)| s.contains(t))
            .map(|(m, _)| m)
            .collect();
        let k = i32::try_from(members.len()).unwrap_or(i32::MAX).max(1);
        let mut next = 0;
        for (i, m) in (0..).zip(members) {
            let take = n / k + i32::from(i < n % k);
            let ps: BTreeSet<i32> = (next..next + take).collect();
            next += take;
            if !ps.is_empty() {
                out.entry(m.clone()).or_default().insert(t.clone(), ps);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics(list: &[(&str, i32)]) -> BTreeMap<String, i32> {
        list.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    fn a(list: &[(&str, &[i32])]) -> Assignment {
        list.iter()
            .map(|(t, ps)| (t.to_string(), ps.iter().copied().collect()))
            .collect()
    }

    fn join(id: &str, names: &[&str]) -> Heartbeat {
        Heartbeat {
            member_id: id.into(),
            member_epoch: 0,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(names.iter().map(|s| s.to_string()).collect()),
            owned: Some(Assignment::new()),
            ..Heartbeat::default()
        }
    }

    fn beat(id: &str, epoch: i32, owned: Option<Assignment>) -> Heartbeat {
        Heartbeat {
            member_id: id.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: -1,
            owned,
            ..Heartbeat::default()
        }
    }

    /// No partition is owned by two members.
    fn exclusive(g: &ConsumerGroup) {
        let mut seen = BTreeSet::new();
        for m in g.members.values() {
            for (t, ps) in m.assigned.iter().chain(&m.revoking) {
                for p in ps {
                    assert!(seen.insert((t.clone(), *p)), "{t}-{p} owned twice: {g:?}");
                }
            }
        }
    }

    #[test]
    fn a_lone_member_gets_every_partition_at_the_first_epoch() {
        let mut g = ConsumerGroup::default();
        let now = crate::common::clock::now();
        let t = topics(&[("t", 3)]);
        let r = g.heartbeat(join("a", &["t"]), &t, now, 10);
        assert_eq!(r.error, 0, "{r:?}");
        assert_eq!(r.member_epoch, 1);
        assert_eq!(r.assignment, Some(a(&[("t", &[0, 1, 2])])));
        assert!(r.changed);
        // A heartbeat that changes nothing sends no assignment and persists nothing.
        let r = g.heartbeat(beat("a", 1, None), &t, now, 10);
        assert_eq!(
            (r.error, r.member_epoch, r.assignment, r.changed),
            (0, 1, None, false)
        );
        assert_eq!(state_name(&g), "Stable");
    }

    #[test]
    fn a_second_member_gets_partitions_only_after_the_first_revoked_them() {
        let mut g = ConsumerGroup::default();
        let now = crate::common::clock::now();
        let t = topics(&[("t", 4)]);
        g.heartbeat(join("a", &["t"]), &t, now, 10);
        let r = g.heartbeat(join("b", &["t"]), &t, now, 10);
        // b is at the new epoch but waits: a still owns everything.
        assert_eq!(
            (r.member_epoch, r.assignment.clone()),
            (2, Some(Assignment::new()))
        );
        assert_eq!(g.members["b"].state, MemberState::UnreleasedPartitions);
        assert_eq!(state_name(&g), "Reconciling");
        // a is told to keep two: it stays at epoch 1 until it has revoked the others.
        let r = g.heartbeat(beat("a", 1, None), &t, now, 10);
        assert_eq!(r.member_epoch, 1);
        let kept = r.assignment.clone().expect("a's new assignment");
        assert_eq!(count(&kept), 2);
        exclusive(&g);
        // Still owning all four: nothing moves.
        let r = g.heartbeat(beat("a", 1, Some(a(&[("t", &[0, 1, 2, 3])]))), &t, now, 10);
        assert_eq!((r.member_epoch, r.assignment), (1, None));
        let r = g.heartbeat(beat("b", 2, None), &t, now, 10);
        assert_eq!(r.assignment, None);
        // a revoked: it reaches epoch 2; then b gets the released two.
        let r = g.heartbeat(beat("a", 1, Some(kept.clone())), &t, now, 10);
        assert_eq!(r.member_epoch, 2);
        let r = g.heartbeat(beat("b", 2, None), &t, now, 10);
        let got = r.assignment.expect("b's partitions");
        assert_eq!(count(&got), 2);
        assert!(!intersects(&got, &kept));
        exclusive(&g);
        assert_eq!(state_name(&g), "Stable");
    }

    #[test]
    fn epochs_are_fenced_except_a_lost_answer() {
        let mut g = ConsumerGroup::default();
        let now = crate::common::clock::now();
        let t = topics(&[("t", 2)]);
        g.heartbeat(join("a", &["t"]), &t, now, 10);
        assert_eq!(
            g.heartbeat(beat("a", 5, None), &t, now, 10).error,
            code::FENCED_MEMBER_EPOCH
        );
        assert_eq!(
            g.heartbeat(beat("x", 1, None), &t, now, 10).error,
            code::UNKNOWN_MEMBER_ID
        );
        // b joins: a revokes one partition and moves to epoch 2.
        g.heartbeat(join("b", &["t"]), &t, now, 10);
        let kept = g
            .heartbeat(beat("a", 1, None), &t, now, 10)
            .assignment
            .expect("a");
        assert_eq!(
            g.heartbeat(beat("a", 1, Some(kept.clone())), &t, now, 10)
                .member_epoch,
            2
        );
        // The answer was lost: epoch 1 with what it owns is still accepted.
        let r = g.heartbeat(beat("a", 1, Some(kept)), &t, now, 10);
        assert_eq!((r.error, r.member_epoch), (0, 2));
        // Epoch 1 owning more than it has is fenced.
        let r = g.heartbeat(beat("a", 1, Some(a(&[("t", &[0, 1])]))), &t, now, 10);
        assert_eq!(r.error, code::FENCED_MEMBER_EPOCH);
    }

    #[test]
    fn a_member_that_leaves_or_expires_frees_its_partitions() {
        let mut g = ConsumerGroup::default();
        let now = crate::common::clock::now();
        let t = topics(&[("t", 2)]);
        g.heartbeat(join("a", &["t"]), &t, now, 10);
        g.heartbeat(join("b", &["t"]), &t, now, 10);
        let kept = g
            .heartbeat(beat("a", 1, None), &t, now, 10)
            .assignment
            .expect("a");
        g.heartbeat(beat("a", 1, Some(kept)), &t, now, 10);
        g.heartbeat(beat("b", 2, None), &t, now, 10);
        let r = g.heartbeat(beat("a", 2, None), &t, now, 10);
        assert_eq!(r.error, 0);
        let r = g.heartbeat(beat("a", LEAVE_EPOCH, None), &t, now, 10);
        assert_eq!((r.error, r.member_epoch), (0, LEAVE_EPOCH));
        let r = g.heartbeat(beat("b", 2, None), &t, now, 10);
        assert_eq!(
            (r.member_epoch, r.assignment),
            (3, Some(a(&[("t", &[0, 1])])))
        );
        // b's session expires.
        let later = now + Duration::from_secs(46);
        assert_eq!(
            g.expire(later, Duration::from_secs(45)),
            vec!["b".to_string()]
        );
        assert_eq!(state_name(&g), "Empty");
    }

    #[test]
    fn a_member_that_does_not_revoke_in_time_is_removed() {
        let mut g = ConsumerGroup::default();
        let now = crate::common::clock::now();
        let t = topics(&[("t", 2)]);
        g.heartbeat(join("a", &["t"]), &t, now, 10);
        g.heartbeat(join("b", &["t"]), &t, now, 10);
        g.heartbeat(beat("a", 1, None), &t, now, 10);
        assert_eq!(g.members["a"].state, MemberState::UnrevokedPartitions);
        assert!(g
            .expire(now + Duration::from_secs(29), Duration::from_secs(45))
            .is_empty());
        assert_eq!(
            g.expire(now + Duration::from_secs(30), Duration::from_secs(45)),
            vec!["a".to_string()]
        );
    }

    #[test]
    fn requests_that_break_the_rules_are_refused() {
        let mut g = ConsumerGroup::default();
        let now = crate::common::clock::now();
        let t = topics(&[("t", 2)]);
        let mut j = join("a", &["t"]);
        j.rebalance_timeout_ms = -1;
        assert_eq!(g.heartbeat(j, &t, now, 10).error, code::INVALID_REQUEST);
        let mut j = join("a", &["t"]);
        j.subscribed_topic_names = None;
        assert_eq!(g.heartbeat(j, &t, now, 10).error, code::INVALID_REQUEST);
        let mut j = join("a", &["t"]);
        j.owned = Some(a(&[("t", &[0])]));
        assert_eq!(g.heartbeat(j, &t, now, 10).error, code::INVALID_REQUEST);
        let mut j = join("a", &["t"]);
        j.server_assignor = Some("sticky".into());
        assert_eq!(
            g.heartbeat(j, &t, now, 10).error,
            code::UNSUPPORTED_ASSIGNOR
        );
        let mut j = join("a", &["t"]);
        j.subscribed_topic_regex = Some("(".into());
        assert_eq!(
            g.heartbeat(j, &t, now, 10).error,
            code::INVALID_REGULAR_EXPRESSION
        );
        assert_eq!(g.heartbeat(join("a", &["t"]), &t, now, 1).error, 0);
        assert_eq!(
            g.heartbeat(join("b", &["t"]), &t, now, 1).error,
            code::GROUP_MAX_SIZE_REACHED
        );
        assert_eq!(g.members.keys().collect::<Vec<_>>(), vec!["a"]);
    }

    #[test]
    fn a_static_member_that_left_is_replaced_by_its_next_incarnation() {
        let mut g = ConsumerGroup::default();
        let now = crate::common::clock::now();
        let t = topics(&[("t", 2)]);
        let mut j = join("a1", &["t"]);
        j.instance_id = Some("i".into());
        assert_eq!(g.heartbeat(j.clone(), &t, now, 10).member_epoch, 1);
        let mut j2 = j.clone();
        j2.member_id = "a2".into();
        assert_eq!(
            g.heartbeat(j2.clone(), &t, now, 10).error,
            code::UNRELEASED_INSTANCE_ID
        );
        let r = g.heartbeat(beat("a1", STATIC_LEAVE_EPOCH, None), &t, now, 10);
        assert_eq!((r.error, r.member_epoch), (0, STATIC_LEAVE_EPOCH));
        let r = g.heartbeat(j2, &t, now, 10);
        assert_eq!((r.error, r.member_epoch), (0, 1));
        assert_eq!(r.assignment, Some(a(&[("t", &[0, 1])])));
        assert_eq!(g.group_epoch, 1, "a static member's return moves no epoch");
    }

    #[test]
    fn new_partitions_and_regex_subscriptions_move_the_group_epoch() {
        let mut g = ConsumerGroup::default();
        let now = crate::common::clock::now();
        let mut j = join("a", &[]);
        j.subscribed_topic_regex = Some("orders-.*".into());
        let t = topics(&[("orders-1", 1), ("other", 1), ("__consumer_offsets", 1)]);
        let r = g.heartbeat(j, &t, now, 10);
        assert_eq!(r.assignment, Some(a(&[("orders-1", &[0])])));
        let t = topics(&[("orders-1", 2), ("orders-2", 1), ("other", 1)]);
        let r = g.heartbeat(beat("a", 1, None), &t, now, 10);
        assert_eq!(r.member_epoch, 2);
        assert_eq!(
            r.assignment,
            Some(a(&[("orders-1", &[0, 1]), ("orders-2", &[0])]))
        );
    }

    #[test]
    fn a_regex_is_resolved_once_per_topic_map_and_again_for_a_new_one() {
        let t = std::rc::Rc::new(topics(&[("orders-1", 1), ("other", 1), ("__x", 1)]));
        remember_topics(t.clone());
        let first = regex_matches(&t, "orders-.*|__x").expect("compiles");
        assert_eq!(
            *first,
            vec!["orders-1".to_string()],
            "internal topics only by name"
        );
        let again = regex_matches(&t, "orders-.*|__x").expect("compiles");
        assert!(std::rc::Rc::ptr_eq(&first, &again), "resolved once");
        assert!(
            regex_matches(&t, "(").is_none(),
            "a regex that does not compile"
        );
        // New metadata: a new map, the regex resolved against it.
        let grown = std::rc::Rc::new(topics(&[("orders-1", 1), ("orders-2", 1)]));
        remember_topics(grown.clone());
        let now = regex_matches(&grown, "orders-.*|__x").expect("compiles");
        assert_eq!(*now, vec!["orders-1".to_string(), "orders-2".to_string()]);
        // A map that is not the remembered one is resolved without the cache.
        let other = topics(&[("orders-9", 1)]);
        assert_eq!(
            *regex_matches(&other, "orders-.*").expect("compiles"),
            vec!["orders-9"]
        );
    }

    #[test]
    fn members_sharing_a_regex_with_different_describable_topics_each_count() {
        let mut g = ConsumerGroup::default();
        let now = crate::common::clock::now();
        let t = topics(&[("orders-1", 1), ("orders-2", 1), ("orders-3", 1)]);
        let describable = |names: &[&str]| Some(names.iter().map(|n| n.to_string()).collect());
        for (id, may) in [
            ("a", ["orders-1"]),
            ("b", ["orders-2"]),
            ("c", ["orders-2"]),
        ] {
            let mut j = join(id, &[]);
            j.subscribed_topic_regex = Some("orders-.*".into());
            j.regex_describable = describable(&may);
            g.heartbeat(j, &t, now, 10);
        }
        let subscribed: Vec<&str> = g.subscribed.keys().map(String::as_str).collect();
        assert_eq!(subscribed, ["orders-1", "orders-2"]);
    }

    #[test]
    fn a_regex_takes_only_the_topics_its_principal_may_describe() {
        let mut g = ConsumerGroup::default();
        let now = crate::common::clock::now();
        let t = topics(&[("orders-1", 1), ("orders-2", 1)]);
        let describable = |names: &[&str]| Some(names.iter().map(|n| n.to_string()).collect());
        let mut j = join("a", &[]);
        j.subscribed_topic_regex = Some("orders-.*".into());
        j.regex_describable = describable(&["orders-1"]);
        let r = g.heartbeat(j, &t, now, 10);
        assert_eq!(r.assignment, Some(a(&[("orders-1", &[0])])));
        // The principal may describe the other topic now (an ACL added): the next heartbeat
        // brings it in and moves the group epoch.
        let mut b = beat("a", 1, None);
        b.regex_describable = describable(&["orders-1", "orders-2"]);
        let r = g.heartbeat(b, &t, now, 10);
        assert_eq!(r.member_epoch, 2);
        assert_eq!(
            r.assignment,
            Some(a(&[("orders-1", &[0]), ("orders-2", &[0])]))
        );
    }

    /// A classic member's subscription metadata (ConsumerProtocolSubscription v1).
    fn subscription(topics: &[&str]) -> Vec<u8> {
        use kafka_protocol::messages::ConsumerProtocolSubscription;
        use kafka_protocol::protocol::{Encodable, StrBytes};
        let msg = ConsumerProtocolSubscription::default().with_topics(
            topics
                .iter()
                .map(|t| StrBytes::from_string(t.to_string()))
                .collect(),
        );
        let mut b = bytes::BytesMut::new();
        b.extend_from_slice(&1i16.to_be_bytes());
        msg.encode(&mut b, 1).expect("encode");
        b.to_vec()
    }

    fn classic(id: &str, topics: &[&str]) -> ClassicJoin {
        ClassicJoin {
            member_id: id.into(),
            meta: ClassicMeta {
                session_timeout_ms: 10_000,
                protocols: vec![("range".into(), subscription(topics))],
            },
            rebalance_timeout_ms: 10_000,
            ..ClassicJoin::default()
        }
    }

    #[test]
    fn a_classic_member_joins_a_consumer_group_and_rejoins_to_move_on() {
        let mut g = ConsumerGroup::default();
        let now = crate::common::clock::now();
        let t = topics(&[("t", 2)]);
        g.heartbeat(join("a", &["t"]), &t, now, 10);
        // The classic member joins at the new epoch but waits: a owns both partitions.
        let (generation, changed) = g
            .classic_join(classic("c", &["t"]), &t, now, 10)
            .expect("join");
        assert_eq!((generation, changed), (2, true));
        assert_eq!(g.classic_sync("c", 2), Ok(&Assignment::new()));
        assert_eq!(g.classic_sync("c", 1), Err(code::ILLEGAL_GENERATION));
        assert_eq!(
            g.classic_heartbeat("c", 2, &t, now).0,
            code::REBALANCE_IN_PROGRESS
        );
        assert_eq!(
            g.classic_heartbeat("x", 2, &t, now).0,
            code::UNKNOWN_MEMBER_ID
        );
        // a revokes one; c rejoins and gets it; its heartbeats are quiet then.
        let kept = g
            .heartbeat(beat("a", 1, None), &t, now, 10)
            .assignment
            .expect("a");
        assert_eq!(
            g.heartbeat(beat("a", 1, Some(kept.clone())), &t, now, 10)
                .member_epoch,
            2
        );
        let (generation, _) = g
            .classic_join(classic("c", &["t"]), &t, now, 10)
            .expect("rejoin");
        assert_eq!(generation, 2);
        let got = g.classic_sync("c", 2).expect("sync").clone();
        assert_eq!(count(&got), 1);
        assert!(!intersects(&got, &kept));
        assert_eq!(g.classic_heartbeat("c", 2, &t, now).0, code::NONE);
        exclusive(&g);
        // The bytes a classic client reads back.
        assert_eq!(decode_assignment(&encode_assignment(&got)), got);
        // Only the classic member left: the group can go back to the classic protocol.
        g.heartbeat(beat("a", LEAVE_EPOCH, None), &t, now, 10);
        assert!(g.only_classic_members());
    }

    #[test]
    fn an_eager_classic_member_gives_up_what_moves_when_it_rejoins() {
        let mut g = ConsumerGroup::default();
        let now = crate::common::clock::now();
        let t = topics(&[("t", 2)]);
        let (generation, _) = g
            .classic_join(classic("c", &["t"]), &t, now, 10)
            .expect("join");
        assert_eq!(g.classic_sync("c", generation).map(count), Ok(2));
        // A consumer-protocol member joins: the classic one is told to rejoin.
        let r = g.heartbeat(join("a", &["t"]), &t, now, 10);
        assert_eq!(r.assignment, Some(Assignment::new()));
        let (code, _) = g.classic_heartbeat("c", generation, &t, now);
        assert_eq!(code, code::REBALANCE_IN_PROGRESS);
        // It rejoins owning nothing (eager): it keeps one, the other goes to a.
        let (generation, _) = g
            .classic_join(classic("c", &["t"]), &t, now, 10)
            .expect("rejoin");
        assert_eq!(g.classic_sync("c", generation).map(count), Ok(1));
        let r = g.heartbeat(beat("a", 2, None), &t, now, 10);
        assert_eq!(r.assignment.as_ref().map(count), Some(1));
        exclusive(&g);
        assert_eq!(g.classic_heartbeat("c", generation, &t, now).0, code::NONE);
    }

    fn subs(list: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        list.iter()
            .map(|(m, ts)| (m.to_string(), ts.iter().map(|t| t.to_string()).collect()))
            .collect()
    }

    #[test]
    fn uniform_balances_and_keeps_what_it_can() {
        let t = topics(&[("x", 6), ("y", 3)]);
        let s = subs(&[("a", &["x", "y"]), ("b", &["x", "y"]), ("c", &["x"])]);
        let first = uniform(&s, &t, &BTreeMap::new());
        let counts: Vec<usize> = first.values().map(count).collect();
        assert_eq!(counts.iter().sum::<usize>(), 9);
        assert!(counts.iter().all(|&c| c == 3), "{first:?}");
        assert!(first["c"].keys().all(|t| t == "x"));
        // A fourth member takes partitions from the others; nobody else's move.
        let s4 = subs(&[
            ("a", &["x", "y"]),
            ("b", &["x", "y"]),
            ("c", &["x"]),
            ("d", &["x", "y"]),
        ]);
        let second = uniform(&s4, &t, &first);
        for m in ["a", "b", "c"] {
            assert!(
                is_subset(&second[m], &first[m]),
                "{m} got new partitions: {second:?}"
            );
        }
        let counts: Vec<usize> = second.values().map(count).collect();
        assert!(
            counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1,
            "{second:?}"
        );
    }

    #[test]
    fn range_gives_consecutive_ranges_per_topic() {
        let t = topics(&[("x", 5)]);
        let s = subs(&[("a", &["x"]), ("b", &["x"])]);
        let r = range(&s, &t);
        assert_eq!(r["a"], a(&[("x", &[0, 1, 2])]));
        assert_eq!(r["b"], a(&[("x", &[3, 4])]));
    }

    #[test]
    fn the_group_serializes_without_liveness() {
        let mut g = ConsumerGroup::default();
        let now = crate::common::clock::now();
        g.heartbeat(join("a", &["t"]), &topics(&[("t", 1)]), now, 10);
        let back: ConsumerGroup =
            serde_json::from_slice(&serde_json::to_vec(&g).expect("json")).expect("parse");
        assert_eq!(back, g);
        assert!(back.members["a"].live.last_seen.is_none());
    }
}
