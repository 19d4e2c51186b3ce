//! Group coordinator request handling on the shard that owns the group's
//! `__consumer_offsets` partition: the classic rebalance protocol as Kafka runs it, with
//! parked JoinGroup/SyncGroup requests, a per-rebalance driver task and a session sweeper.
//!
//! Invariant: no `RefCell` borrow of `groups` is held across an await; every state change
//! that must survive a restart is written (acks=all) before it is acknowledged.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use futures::channel::oneshot;
use strand_wire::BatchBuilder;

use super::records::{self, Key, OffsetValue};
use super::state::{Committed, Group, GroupState, JoinOutcome, Member, Pending};
use super::GroupHost;
use super::{partition_for, OFFSETS_TOPIC};

/// Kafka's `group.min.session.timeout.ms` and `group.max.session.timeout.ms` defaults.
pub const SESSION_TIMEOUT_MS_MIN: i32 = 6_000;
/// See [`SESSION_TIMEOUT_MS_MIN`].
pub const SESSION_TIMEOUT_MS_MAX: i32 = 1_800_000;
/// Kafka's `offset.metadata.max.bytes`.
pub const OFFSET_METADATA_BYTES_MAX: usize = 4096;
/// How often a rebalance checks whether it can complete.
pub const REBALANCE_POLL: Duration = Duration::from_millis(10);
/// How often member sessions are checked: a session ends at most this long after its
/// deadline (Kafka's timer ends it at the deadline; librdkafka's test 0081 deletes a group
/// of static members session timeout + 1 s after they closed, and 250 ms was too late).
pub const SESSION_SWEEP: Duration = Duration::from_millis(50);
/// A shard logs at most one refused new group per this interval (`groups_per_shard`).
pub const GROUP_REFUSED_LOG_INTERVAL: Duration = Duration::from_secs(10);

pub use crate::common::errors::code;

/// A JoinGroup as the coordinator sees it.
#[derive(Debug)]
pub struct JoinRequest {
    /// Group.
    pub group: String,
    /// Member id ("" on first join).
    pub member_id: String,
    /// Static id.
    pub instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Rebalance timeout.
    pub rebalance_timeout_ms: i32,
    /// Protocol type.
    pub protocol_type: String,
    /// Protocols.
    pub protocols: Vec<(String, Bytes)>,
    /// Request version (MEMBER_ID_REQUIRED needs v4+).
    pub version: i16,
}

/// A JoinGroup refused with `error` (no generation, protocol or leader).
pub(crate) fn failed_join(error: i16, member_id: String) -> JoinOutcome {
    JoinOutcome {
        error,
        generation: -1,
        protocol: None,
        protocol_type: None,
        leader: String::new(),
        member_id,
        members: Vec::new(),
    }
}

/// Longest group id and group.instance.id accepted (INVALID_GROUP_ID beyond): each is a
/// key in memory and in `__consumer_offsets` records, so a peer must not choose its size.
/// Kafka sets no limit; real ids are far shorter.
pub const GROUP_ID_BYTES_MAX: usize = 1024;

/// JoinGroup.
pub async fn group_join<H: GroupHost>(host: &Rc<H>, r: JoinRequest) -> JoinOutcome {
    let too_long = r.group.len() > GROUP_ID_BYTES_MAX
        || r.instance_id
            .as_ref()
            .is_some_and(|i| i.len() > GROUP_ID_BYTES_MAX);
    if r.group.is_empty() || too_long {
        return failed_join(code::INVALID_GROUP_ID, r.member_id);
    }
    if !(SESSION_TIMEOUT_MS_MIN..=SESSION_TIMEOUT_MS_MAX).contains(&r.session_timeout_ms) {
        return failed_join(code::INVALID_SESSION_TIMEOUT, r.member_id);
    }
    if let Err(error) = super::heartbeat::make_classic(host, &r.group).await {
        return failed_join(error, r.member_id);
    }
    if let Some(outcome) = super::heartbeat::classic_join(host, &r).await {
        return outcome;
    }
    let rx = {
        let mut groups = host.groups().borrow_mut();
        if !groups.contains_key(&r.group) && groups.len() >= host.groups_max() {
            refused_new_group(&r.group, groups.len());
            return failed_join(code::COORDINATOR_NOT_AVAILABLE, r.member_id);
        }
        let g = groups
            .entry(r.group.clone())
            .or_insert_with(|| Group::new(&r.group));
        match admit(host, g, &r) {
            Err(outcome) => return *outcome,
            Ok(rx) => rx,
        }
    };
    match rx.await {
        Ok(o) => o,
        Err(_) => failed_join(code::REBALANCE_IN_PROGRESS, r.member_id),
    }
}

/// Decides what a JoinGroup does; parks it (returns the receiver) or answers at once.
#[expect(
    clippy::too_many_lines,
    reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
)]
fn admit<H: GroupHost>(
    host: &Rc<H>,
    g: &mut Group,
    r: &JoinRequest,
) -> Result<oneshot::Receiver<JoinOutcome>, Box<JoinOutcome>> {
    let now = crate::common::clock::now();
    if !g.accepts(&r.protocol_type, &r.protocols) {
        return Err(Box::new(failed_join(
            code::INCONSISTENT_GROUP_PROTOCOL,
            r.member_id.clone(),
        )));
    }
    // group.max.size, as Kafka: a join that would add a member (or a pending member id)
    // to a full group is refused.
    let adds_member = match (&r.instance_id, r.member_id.is_empty()) {
        (Some(inst), _) => g.member_by_instance(inst).is_none(),
        (None, empty) => empty,
    };
    if adds_member && g.members.len() + g.pending.len() >= host.group_max_size() {
        return Err(Box::new(failed_join(
            code::GROUP_MAX_SIZE_REACHED,
            r.member_id.clone(),
        )));
    }
    let member_id = match (&r.instance_id, r.member_id.is_empty()) {
        (Some(inst), true) => g
            .replace_static_member(inst)
            .unwrap_or_else(|| format!("{inst}-{}", uuid::Uuid::new_v4())),
        (Some(inst), false) => {
            if g.fenced(&r.member_id, Some(inst)) {
                return Err(Box::new(failed_join(
                    code::FENCED_INSTANCE_ID,
                    r.member_id.clone(),
                )));
            }
            r.member_id.clone()
        }
        (None, true) => {
            let id = format!("{}-{}", r.client_id, uuid::Uuid::new_v4());
            if r.version >= 4 {
                let session_timeout =
                    Duration::from_millis(u64::try_from(r.session_timeout_ms).unwrap_or(0));
                g.pending.insert(
                    id.clone(),
                    Pending {
                        since: now,
                        session_timeout,
                    },
                );
                return Err(Box::new(failed_join(code::MEMBER_ID_REQUIRED, id)));
            }
            id
        }
        (None, false) => {
            if !g.members.contains_key(&r.member_id) && !g.pending.contains_key(&r.member_id) {
                return Err(Box::new(failed_join(
                    code::UNKNOWN_MEMBER_ID,
                    r.member_id.clone(),
                )));
            }
            r.member_id.clone()
        }
    };
    g.pending.remove(&member_id);
    // A follower rejoining a stable group with unchanged protocols gets the current
    // generation without a rebalance (as Kafka does).
    if g.state == GroupState::Stable && g.leader.as_deref() != Some(member_id.as_str()) {
        if let Some(m) = g.members.get_mut(&member_id) {
            if m.protocols == r.protocols {
                m.last_seen = now;
                return Err(Box::new(JoinOutcome {
                    error: code::NONE,
                    generation: g.generation,
                    protocol: g.protocol.clone(),
                    protocol_type: g.protocol_type.clone(),
                    leader: g.leader.clone().unwrap_or_default(),
                    member_id,
                    members: Vec::new(),
                }));
            }
        }
    }
    let (tx, rx) = oneshot::channel();
    if g.members.is_empty() {
        g.protocol_type = Some(r.protocol_type.clone());
    }
    let m = g
        .members
        .entry(member_id.clone())
        .or_insert_with(|| Member {
            id: member_id.clone(),
            instance_id: r.instance_id.clone(),
            client_id: r.client_id.clone(),
            client_host: r.client_host.clone(),
            session_timeout_ms: r.session_timeout_ms,
            rebalance_timeout_ms: r.rebalance_timeout_ms,
            protocols: Vec::new(),
            assignment: Bytes::new(),
            join_waiter: None,
            sync_waiter: None,
            last_seen: now,
        });
    m.protocols = r.protocols.clone();
    m.session_timeout_ms = r.session_timeout_ms;
    m.rebalance_timeout_ms = r.rebalance_timeout_ms;
    m.join_waiter = Some(tx);
    m.last_seen = now;
    if g.state != GroupState::PreparingRebalance {
        prepare_rebalance(host, g);
    }
    Ok(rx)
}

/// Moves a group to PreparingRebalance and starts the task that completes the join.
pub(crate) fn prepare_rebalance<H: GroupHost>(host: &Rc<H>, g: &mut Group) {
    let now = crate::common::clock::now();
    for m in g.members.values_mut() {
        if let Some(tx) = m.sync_waiter.take() {
            let _ = tx.send((code::REBALANCE_IN_PROGRESS, Bytes::new()));
        }
    }
    let was_empty = g.state == GroupState::Empty;
    g.state = GroupState::PreparingRebalance;
    let timeout = Duration::from_millis(u64::try_from(g.rebalance_timeout_ms()).unwrap_or(0));
    g.rebalance_deadline = Some(now + timeout);
    let delay = Duration::from_millis(host.initial_rebalance_delay_ms());
    g.join_not_before = Some(if was_empty {
        now + delay.min(timeout)
    } else {
        now
    });
    let (me, id) = (host.clone(), g.id.clone());
    crate::runtime::task::spawn_local(async move { drive_rebalance(me, id).await });
}

/// Completes the join phase once every member rejoined (after the initial delay for a
/// new group) or the rebalance timeout passed (dropping members that did not rejoin).
async fn drive_rebalance<H: GroupHost>(host: Rc<H>, group: String) {
    loop {
        crate::runtime::task::sleep(REBALANCE_POLL).await;
        let persist = {
            let mut groups = host.groups().borrow_mut();
            let Some(g) = groups.get_mut(&group) else {
                return;
            };
            if g.state != GroupState::PreparingRebalance {
                return;
            }
            let now = crate::common::clock::now();
            let expired = g.rebalance_deadline.is_some_and(|t| now >= t);
            let pending_wait = g.pending.iter().any(|(id, p)| {
                now.duration_since(p.since)
                    < Duration::from_millis(u64::try_from(SESSION_TIMEOUT_MS_MIN).unwrap_or(0))
                    && !id.is_empty()
            });
            let all_joined = g.members.values().all(|m| m.join_waiter.is_some()) && !pending_wait;
            let delay_done = g.join_not_before.is_none_or(|t| now >= t);
            if !(expired || (all_joined && delay_done)) {
                continue;
            }
            if expired {
                g.members.retain(|_, m| m.join_waiter.is_some());
                g.pending.clear();
            }
            complete_join(g);
            (g.state == GroupState::Empty).then(|| records::group_value(g))
        };
        if let Some(v) = persist {
            let rec = (
                records::key_bytes(&Key::Group {
                    group: group.clone(),
                }),
                Some(records::value_bytes(&v)),
            );
            if let Err(e) = persist_group_records(&*host, &group, vec![rec], None).await {
                tracing::warn!(%group, code = e, "persisting empty group failed");
            }
        }
        return;
    }
}

/// SyncGroup: (error code, assignment). In a consumer group (a classic member of a mixed
/// group), the member's assignment from the consumer group's state.
pub async fn group_sync<H: GroupHost>(
    host: &Rc<H>,
    group: &str,
    member: (&str, Option<&str>),
    generation: i32,
    assignments: Vec<(String, Bytes)>,
) -> (i16, Bytes) {
    match super::heartbeat::classic_sync(host, group, member.0, generation) {
        Some(answer) => answer,
        None => classic_group_sync(host, group, member, generation, assignments).await,
    }
}

async fn classic_group_sync<H: GroupHost>(
    host: &Rc<H>,
    group: &str,
    (member_id, instance_id): (&str, Option<&str>),
    generation: i32,
    assignments: Vec<(String, Bytes)>,
) -> (i16, Bytes) {
    let (rx, persist) = {
        let mut groups = host.groups().borrow_mut();
        let Some(g) = groups.get_mut(group) else {
            return (code::UNKNOWN_MEMBER_ID, Bytes::new());
        };
        if g.fenced(member_id, instance_id) {
            return (code::FENCED_INSTANCE_ID, Bytes::new());
        }
        let Some(m) = g.members.get_mut(member_id) else {
            return (code::UNKNOWN_MEMBER_ID, Bytes::new());
        };
        m.last_seen = crate::common::clock::now();
        if generation != g.generation {
            return (code::ILLEGAL_GENERATION, Bytes::new());
        }
        match g.state {
            GroupState::PreparingRebalance => return (code::REBALANCE_IN_PROGRESS, Bytes::new()),
            GroupState::Empty => return (code::UNKNOWN_MEMBER_ID, Bytes::new()),
            GroupState::Stable => return (code::NONE, m.assignment.clone()),
            GroupState::CompletingRebalance => {}
        }
        let (tx, rx) = oneshot::channel();
        m.sync_waiter = Some(tx);
        let persist = if g.leader.as_deref() == Some(member_id) {
            for m in g.members.values_mut() {
                m.assignment = Bytes::new();
            }
            for (id, a) in assignments {
                if let Some(m) = g.members.get_mut(&id) {
                    m.assignment = a;
                }
            }
            g.state = GroupState::Stable;
            Some((g.generation, records::group_value(g)))
        } else {
            None
        };
        (rx, persist)
    };
    if let Some((gen, value)) = persist {
        let rec = (
            records::key_bytes(&Key::Group {
                group: group.to_string(),
            }),
            Some(records::value_bytes(&value)),
        );
        let result = persist_group_records(&**host, group, vec![rec], None).await;
        let mut groups = host.groups().borrow_mut();
        if let Some(g) = groups
            .get_mut(group)
            .filter(|g| g.generation == gen && g.state == GroupState::Stable)
        {
            let now = crate::common::clock::now();
            for m in g.members.values_mut() {
                m.last_seen = now;
                if let Some(tx) = m.sync_waiter.take() {
                    let answer = match result {
                        Ok(_) => (code::NONE, m.assignment.clone()),
                        Err(c) => (c, Bytes::new()),
                    };
                    let _ = tx.send(answer);
                }
            }
        }
    }
    rx.await
        .unwrap_or((code::REBALANCE_IN_PROGRESS, Bytes::new()))
}

/// Heartbeat: error code.
pub fn group_heartbeat<H: GroupHost>(
    host: &Rc<H>,
    group: &str,
    (member_id, instance_id): (&str, Option<&str>),
    generation: i32,
) -> i16 {
    if let Some(code) = super::heartbeat::classic_heartbeat(host, group, member_id, generation) {
        return code;
    }
    let mut groups = host.groups().borrow_mut();
    let Some(g) = groups.get_mut(group) else {
        return code::UNKNOWN_MEMBER_ID;
    };
    if g.fenced(member_id, instance_id) {
        return code::FENCED_INSTANCE_ID;
    }
    let state = g.state;
    let current = g.generation;
    let Some(m) = g.members.get_mut(member_id) else {
        return code::UNKNOWN_MEMBER_ID;
    };
    m.last_seen = crate::common::clock::now();
    match state {
        GroupState::Empty => code::UNKNOWN_MEMBER_ID,
        _ if generation != current => code::ILLEGAL_GENERATION,
        GroupState::PreparingRebalance => code::REBALANCE_IN_PROGRESS,
        GroupState::CompletingRebalance | GroupState::Stable => code::NONE,
    }
}

/// LeaveGroup: per (member id, instance id), an error code.
/// When the last member leaves, the group goes Empty at once (as Kafka does) and that
/// is written before the response, so a kill -9 cannot bring the member back.
pub async fn group_leave<H: GroupHost>(
    host: &Rc<H>,
    group: &str,
    members: &[(String, Option<String>)],
) -> Vec<i16> {
    if let Some(codes) = super::heartbeat::classic_leave(host, group, members).await {
        return codes;
    }
    let (codes, persist) = leave_members(host, group, members);
    if let Some(v) = persist {
        let key = records::key_bytes(&Key::Group {
            group: group.to_string(),
        });
        if let Err(e) = persist_group_records(
            &**host,
            group,
            vec![(key, Some(records::value_bytes(&v)))],
            None,
        )
        .await
        {
            tracing::warn!(%group, code = e, "persisting empty group failed");
        }
    }
    codes
}

fn leave_members<H: GroupHost>(
    host: &Rc<H>,
    group: &str,
    members: &[(String, Option<String>)],
) -> (Vec<i16>, Option<records::GroupValue>) {
    let mut groups = host.groups().borrow_mut();
    let Some(g) = groups.get_mut(group) else {
        return (vec![code::UNKNOWN_MEMBER_ID; members.len()], None);
    };
    let mut removed = false;
    let codes = members
        .iter()
        .map(|(id, inst)| {
            // KIP-345: a static member leaving by instance id with the member id of one a
            // newer member replaced is fenced (an empty member id leaves by instance id alone).
            if !id.is_empty() && g.fenced(id, inst.as_deref()) {
                return code::FENCED_INSTANCE_ID;
            }
            let key = match inst {
                Some(i) => g.member_by_instance(i).map(|m| m.id.clone()),
                None => g.members.contains_key(id).then(|| id.clone()),
            };
            match key.and_then(|k| g.members.remove(&k)) {
                Some(m) => {
                    if let Some(tx) = m.join_waiter {
                        let _ = tx.send(failed_join(code::UNKNOWN_MEMBER_ID, m.id.clone()));
                    }
                    removed = true;
                    code::NONE
                }
                None if g.pending.remove(id).is_some() => code::NONE,
                None => code::UNKNOWN_MEMBER_ID,
            }
        })
        .collect();
    if !removed {
        return (codes, None);
    }
    if g.members.is_empty() {
        complete_join(g);
        return (codes, Some(records::group_value(g)));
    }
    if g.state != GroupState::PreparingRebalance {
        prepare_rebalance(host, g);
    }
    (codes, None)
}

/// Logs (at most once per `GROUP_REFUSED_LOG_INTERVAL` per shard) a group not created
/// because this shard coordinates `groups_per_shard` already.
fn refused_new_group(group: &str, groups: usize) {
    thread_local! {
        static LOG: crate::common::logging::RateLimit =
            crate::common::logging::RateLimit::new(GROUP_REFUSED_LOG_INTERVAL);
    }
    LOG.with(|log| {
        if let Some(suppressed) = log.allow(crate::common::clock::now()) {
            tracing::warn!(
                group,
                groups,
                suppressed,
                "a new consumer group was refused (COORDINATOR_NOT_AVAILABLE): this shard \
                 coordinates groups_per_shard groups already; raise groups_per_shard or \
                 delete unused groups"
            );
        }
    });
}

/// Removes members whose session expired and pending ids never used, rebalancing their
/// groups; drops groups with nothing durable (never formed, no offsets) and nobody in
/// them, such as those a refused JoinGroup left: an empty group costs memory and counts
/// against `groups_per_shard` until then.
pub fn expire_sessions<H: GroupHost>(host: &Rc<H>) {
    let now = crate::common::clock::now();
    let mut groups = host.groups().borrow_mut();
    groups.retain(|_, g| !g.holds_nothing());
    for g in groups.values_mut() {
        let before = g.members.len();
        g.members.retain(|_, m| {
            m.join_waiter.is_some()
                || m.sync_waiter.is_some()
                || now.duration_since(m.last_seen)
                    < Duration::from_millis(u64::try_from(m.session_timeout_ms).unwrap_or(0))
        });
        g.pending
            .retain(|_, p| now.duration_since(p.since) < p.session_timeout);
        if g.members.len() != before {
            tracing::info!(group = %g.id, expired = before - g.members.len(), "member sessions expired");
            if g.state != GroupState::PreparingRebalance {
                prepare_rebalance(host, g);
            }
        }
    }
}

/// One group's expiry: its id, the (topic, partition) offsets that expire, and whether
/// its group record is deleted too.
type ExpiryPlan = (String, Vec<(String, i32)>, bool);

/// Expires committed offsets as Kafka does (KIP-211, `offsets.retention.minutes` =
/// `retention_ms`): every offset of a group with a protocol type once it has been Empty
/// that long; each offset of a group without one (commits outside group management) that
/// long after its commit; and in a Stable consumer group the offsets of topics no member
/// subscribes to any more (KIP-496), that long after their commit. Tombstones go to the
/// log first (offset keys before the group's own, which log compaction relies on); a
/// group left Empty with no offsets is deleted, as Kafka deletes it.
pub async fn expire_offsets<H: GroupHost>(host: &Rc<H>, now_ms: i64, retention_ms: i64) {
    let plans: Vec<ExpiryPlan> = {
        let mut groups = host.groups().borrow_mut();
        groups
            .values_mut()
            .filter_map(|g| {
                let expired = expired_offsets(g, now_ms, retention_ms);
                let drop_group = g.state == GroupState::Empty
                    && g.members.is_empty()
                    && g.pending.is_empty()
                    && expired.len() == g.offsets.len();
                let recorded = g.generation > 0 || g.consumer.is_some();
                (!expired.is_empty()).then(|| (g.id.clone(), expired, drop_group && recorded))
            })
            .collect()
    };
    for (group, parts, drop_group) in plans {
        let mut recs: Vec<(Vec<u8>, Option<Vec<u8>>)> = parts
            .iter()
            .map(|(t, p)| offset_tombstone(&group, t, *p))
            .collect();
        if drop_group {
            recs.push((
                records::key_bytes(&Key::Group {
                    group: group.clone(),
                }),
                None,
            ));
        }
        let base = match persist_group_records(&**host, &group, recs, None).await {
            Ok(base) => base,
            Err(e) => {
                tracing::warn!(%group, code = e, "expiring committed offsets failed; retried at the next check");
                continue;
            }
        };
        let mut groups = host.groups().borrow_mut();
        let Some(g) = groups.get_mut(&group) else {
            continue;
        };
        for (log_offset, (t, p)) in (base..).zip(&parts) {
            g.apply_offset_record((t.clone(), *p), log_offset, None);
        }
        tracing::info!(%group, offsets = parts.len(), "committed offsets expired");
        let gone = g.state == GroupState::Empty && g.members.is_empty() && g.offsets.is_empty();
        if gone && (drop_group || g.generation == 0) {
            groups.remove(&group);
        }
    }
}

/// The offsets of `g` that expire at `now_ms` (see `expire_offsets`); notes when an Empty
/// group was first seen Empty.
fn expired_offsets(g: &mut Group, now_ms: i64, retention_ms: i64) -> Vec<(String, i32)> {
    let old = |c: &Committed| c.commit_timestamp_ms.saturating_add(retention_ms) <= now_ms;
    if g.has_consumer_members() {
        g.empty_since_ms = None;
        return Vec::new();
    }
    match g.state {
        GroupState::Empty => {
            let since = *g.empty_since_ms.get_or_insert(now_ms);
            if g.protocol_type.is_some() {
                if since.saturating_add(retention_ms) > now_ms {
                    return Vec::new();
                }
                return g.offsets.keys().cloned().collect();
            }
            g.offsets
                .iter()
                .filter(|(_, c)| old(c))
                .map(|(k, _)| k.clone())
                .collect()
        }
        GroupState::Stable if g.protocol_type.as_deref() == Some("consumer") => {
            g.empty_since_ms = None;
            let subscribed = subscribed_topics(g);
            if subscribed.is_empty() {
                // No subscription read: nothing is known to be unsubscribed.
                return Vec::new();
            }
            g.offsets
                .iter()
                .filter(|((t, _), c)| !subscribed.contains(t) && old(c))
                .map(|(k, _)| k.clone())
                .collect()
        }
        _ => {
            g.empty_since_ms = None;
            Vec::new()
        }
    }
}

/// The newest OffsetCommit version served (9: members of consumer-protocol groups commit
/// with their member epoch).
pub const OFFSET_COMMIT_VERSION_MAX: i16 = 9;

/// OffsetCommit (of request version `version`) for one group: per (topic, partition), an
/// error code.
pub async fn offset_commit<H: GroupHost>(
    host: &Rc<H>,
    group: &str,
    (member_id, instance_id): (&str, Option<&str>),
    (generation, version): (i32, i16),
    offsets: Vec<(String, i32, Committed)>,
) -> Vec<i16> {
    let group_code =
        commit_group_code(host, group, (member_id, instance_id), (generation, version));
    write_offsets(host, group, group_code, offsets, None).await
}

/// TxnOffsetCommit for one group: the offsets are written in producer `producer`'s (id,
/// epoch) transaction and take effect at its commit marker. The group checks are Kafka's
/// (KIP-447): a named member must be in the group and a generation (≥ 0) current; a
/// producer that names neither (the pre-KIP-447 API) commits to any group.
pub async fn txn_offset_commit<H: GroupHost>(
    host: &Rc<H>,
    group: &str,
    producer: (i64, i16),
    (member_id, generation): (&str, i32),
    offsets: Vec<(String, i32, Committed)>,
) -> Vec<i16> {
    let group_code = {
        let groups = host.groups().borrow();
        let g = groups.get(group);
        if group.len() > GROUP_ID_BYTES_MAX {
            code::INVALID_GROUP_ID
        } else if let Some(c) = g.and_then(|g| g.consumer.as_ref()) {
            consumer_commit_code(c, member_id, generation, None)
        } else if !member_id.is_empty() && !g.is_some_and(|g| g.members.contains_key(member_id)) {
            code::UNKNOWN_MEMBER_ID
        } else if generation >= 0 && g.map_or(0, |g| g.generation) != generation {
            code::ILLEGAL_GENERATION
        } else if g.is_none() && groups.len() >= host.groups_max() {
            refused_new_group(group, groups.len());
            code::COORDINATOR_NOT_AVAILABLE
        } else {
            code::NONE
        }
    };
    write_offsets(host, group, group_code, offsets, Some(producer)).await
}

/// Writes the offsets a commit checked as `group_code` allows; per (topic, partition), an
/// error code. Plain commits apply at once, a transaction's (`producer`) are staged.
async fn write_offsets<H: GroupHost>(
    host: &Rc<H>,
    group: &str,
    group_code: i16,
    offsets: Vec<(String, i32, Committed)>,
    producer: Option<(i64, i16)>,
) -> Vec<i16> {
    let meta = host.metadata();
    let mut codes: Vec<i16> = offsets
        .iter()
        .map(|(t, p, c)| {
            if group_code != code::NONE {
                group_code
            } else if meta.shard_of(t, *p).is_none() {
                code::UNKNOWN_TOPIC_OR_PARTITION
            } else if c.metadata.len() > OFFSET_METADATA_BYTES_MAX {
                code::OFFSET_METADATA_TOO_LARGE
            } else {
                code::NONE
            }
        })
        .collect();
    let accepted: Vec<&(String, i32, Committed)> = offsets
        .iter()
        .zip(&codes)
        .filter(|(_, c)| **c == code::NONE)
        .map(|(o, _)| o)
        .collect();
    if accepted.is_empty() {
        return codes;
    }
    let recs = accepted
        .iter()
        .map(|(t, p, c)| {
            let key = Key::Offset {
                group: group.to_string(),
                topic: t.clone(),
                partition: *p,
            };
            let value = OffsetValue {
                offset: c.offset,
                leader_epoch: c.leader_epoch,
                metadata: c.metadata.clone(),
                commit_timestamp_ms: Some(c.commit_timestamp_ms),
            };
            (records::key_bytes(&key), Some(records::value_bytes(&value)))
        })
        .collect();
    match persist_group_records(&**host, group, recs, producer).await {
        Ok(base) => {
            let mut groups = host.groups().borrow_mut();
            let g = groups
                .entry(group.to_string())
                .or_insert_with(|| Group::new(group));
            for (log_offset, (t, p, c)) in (base..).zip(accepted) {
                let key = (t.clone(), *p);
                match producer {
                    Some((pid, _)) => g.stage_txn_offset(pid, key, log_offset, c.clone()),
                    None => g.apply_offset_record(key, log_offset, Some(c.clone())),
                }
            }
        }
        Err(e) => {
            for c in codes.iter_mut().filter(|c| **c == code::NONE) {
                *c = e;
            }
        }
    }
    codes
}

/// Whether `group` takes a commit from this member at all. A group is created only by a
/// commit that is made durable: a refused commit for an unknown group leaves nothing.
fn commit_group_code<H: GroupHost>(
    host: &Rc<H>,
    group: &str,
    (member_id, instance_id): (&str, Option<&str>),
    (generation, version): (i32, i16),
) -> i16 {
    if group.len() > GROUP_ID_BYTES_MAX {
        return code::INVALID_GROUP_ID;
    }
    let groups = host.groups().borrow();
    match groups.get(group) {
        Some(g) if g.fenced(member_id, instance_id) => code::FENCED_INSTANCE_ID,
        Some(Group {
            consumer: Some(c), ..
        }) => consumer_commit_code(c, member_id, generation, Some(version)),
        Some(g) => commit_allowed(g, member_id, generation),
        None if groups.len() >= host.groups_max() => {
            refused_new_group(group, groups.len());
            code::COORDINATOR_NOT_AVAILABLE
        }
        None => commit_allowed(&Group::new(group), member_id, generation),
    }
}

/// Deletes an empty group and its offsets.
pub async fn delete_group<H: GroupHost>(host: &Rc<H>, group: &str) -> i16 {
    let recs = {
        let groups = host.groups().borrow();
        let Some(g) = groups.get(group) else {
            return code::GROUP_ID_NOT_FOUND;
        };
        if !g.members.is_empty() || g.has_consumer_members() {
            return code::NON_EMPTY_GROUP;
        }
        let mut recs: Vec<(Vec<u8>, Option<Vec<u8>>)> = g
            .offsets
            .keys()
            .map(|(t, p)| offset_tombstone(group, t, *p))
            .collect();
        recs.push((
            records::key_bytes(&Key::Group {
                group: group.to_string(),
            }),
            None,
        ));
        recs
    };
    match persist_group_records(&**host, group, recs, None).await {
        Ok(_) => {
            host.groups().borrow_mut().remove(group);
            code::NONE
        }
        Err(e) => e,
    }
}

/// OffsetDelete: per (topic, partition), an error code.
pub async fn offset_delete<H: GroupHost>(
    host: &Rc<H>,
    group: &str,
    parts: Vec<(String, i32)>,
) -> Result<Vec<i16>, i16> {
    let (codes, recs) = {
        let groups = host.groups().borrow();
        let Some(g) = groups.get(group) else {
            return Err(code::GROUP_ID_NOT_FOUND);
        };
        let subscribed = subscribed_topics(g);
        let codes: Vec<i16> = parts
            .iter()
            .map(|(t, _)| {
                if subscribed.contains(t) {
                    code::GROUP_SUBSCRIBED_TO_TOPIC
                } else {
                    code::NONE
                }
            })
            .collect();
        let recs: Vec<(Vec<u8>, Option<Vec<u8>>)> = parts
            .iter()
            .zip(&codes)
            .filter(|(_, c)| **c == code::NONE)
            .map(|((t, p), _)| offset_tombstone(group, t, *p))
            .collect();
        (codes, recs)
    };
    if !recs.is_empty() {
        let base = persist_group_records(&**host, group, recs, None).await?;
        let mut groups = host.groups().borrow_mut();
        if let Some(g) = groups.get_mut(group) {
            let deleted = parts.iter().zip(&codes).filter(|(_, c)| **c == code::NONE);
            for (log_offset, ((t, p), _)) in (base..).zip(deleted) {
                g.apply_offset_record((t.clone(), *p), log_offset, None);
            }
        }
    }
    Ok(codes)
}

/// Writes records to the group's offsets partition and waits until durable; the offset
/// of the first (the others follow it, in order). With `producer`, the batch is part of
/// that producer's (id, epoch) transaction (TxnOffsetCommit).
pub(crate) async fn persist_group_records<H: GroupHost>(
    host: &H,
    group: &str,
    recs: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    producer: Option<(i64, i16)>,
) -> Result<i64, i16> {
    let meta = host.metadata();
    let n = meta.topics.get(OFFSETS_TOPIC).map_or(0, |t| t.shards.len());
    let p = partition_for(group, n);
    let part = host.partition(OFFSETS_TOPIC, p);
    let Some(part) = part else {
        return Err(code::NOT_COORDINATOR);
    };
    let now = crate::common::clock::wall_ms();
    let mut b = BatchBuilder::new(now);
    if let Some((pid, epoch)) = producer {
        b = b.producer(pid, epoch, -1).transactional();
    }
    for (k, v) in &recs {
        b.push(now, Some(k), v.as_deref(), &[]);
    }
    let written = match producer {
        Some(_) => part.append_coordinator_batch(b.build()).await,
        None => part.produce(b.build(), true).await.map(|p| p.base_offset),
    };
    written.map(|o| o.0).map_err(|e| {
        tracing::warn!(%group, error = %e, "writing __consumer_offsets failed");
        code::COORDINATOR_NOT_AVAILABLE
    })
}
/// The tombstone of `group`'s committed offset of `topic`/`partition`.
fn offset_tombstone(group: &str, topic: &str, partition: i32) -> (Vec<u8>, Option<Vec<u8>>) {
    let key = Key::Offset {
        group: group.to_string(),
        topic: topic.to_string(),
        partition,
    };
    (records::key_bytes(&key), None)
}

/// Kafka's commit checks in a consumer-protocol group (`ConsumerGroup.validateOffsetCommit`):
/// a commit without a member (epoch < 0) only while the group has no members; a member's
/// at its current epoch (STALE_MEMBER_EPOCH, or ILLEGAL_GENERATION in a transaction:
/// `version` `None`), and with OffsetCommit v9 or later.
fn consumer_commit_code(
    c: &super::consumer::ConsumerGroup,
    member_id: &str,
    epoch: i32,
    version: Option<i16>,
) -> i16 {
    if epoch < 0 && c.members.is_empty() {
        return code::NONE;
    }
    let Some(m) = c.members.get(member_id) else {
        return code::UNKNOWN_MEMBER_ID;
    };
    // A classic member of a mixed group commits as a classic member: any version, and
    // ILLEGAL_GENERATION for a wrong generation.
    let version = version.filter(|_| m.classic.is_none());
    match version {
        Some(v) if v < OFFSET_COMMIT_VERSION_MAX => code::UNSUPPORTED_VERSION,
        _ if m.member_epoch == epoch => code::NONE,
        Some(_) => code::STALE_MEMBER_EPOCH,
        None => code::ILLEGAL_GENERATION,
    }
}

/// Kafka's commit checks: simple commits only to empty groups; members must be current.
fn commit_allowed(g: &Group, member_id: &str, generation: i32) -> i16 {
    if generation < 0 && member_id.is_empty() {
        return if g.members.is_empty() {
            code::NONE
        } else {
            code::UNKNOWN_MEMBER_ID
        };
    }
    if !g.members.contains_key(member_id) {
        return code::UNKNOWN_MEMBER_ID;
    }
    if generation != g.generation {
        return code::ILLEGAL_GENERATION;
    }
    if g.state == GroupState::CompletingRebalance {
        return code::REBALANCE_IN_PROGRESS;
    }
    code::NONE
}

/// Ends the join phase: next generation, protocol, leader; answers every parked join.
fn complete_join(g: &mut Group) {
    g.generation += 1;
    g.rebalance_deadline = None;
    g.join_not_before = None;
    if g.members.is_empty() {
        g.state = GroupState::Empty;
        g.empty_since_ms = Some(crate::common::clock::wall_ms());
        g.protocol = None;
        g.leader = None;
        return;
    }
    g.protocol = g.select_protocol();
    if !g.leader.as_ref().is_some_and(|l| g.members.contains_key(l)) {
        g.leader = g.members.keys().next().cloned();
    }
    g.state = GroupState::CompletingRebalance;
    let leader = g.leader.clone().unwrap_or_default();
    let protocol = g.protocol.clone().unwrap_or_default();
    let all: Vec<(String, Option<String>, Bytes)> = g
        .members
        .values()
        .map(|m| {
            let meta = m.metadata_for(&protocol);
            (m.id.clone(), m.instance_id.clone(), meta)
        })
        .collect();
    // Every member's session restarts now (as Kafka does): a member that waited long in
    // JoinGroup must not expire before it can send SyncGroup.
    let now = crate::common::clock::now();
    for m in g.members.values_mut() {
        m.last_seen = now;
        if let Some(tx) = m.join_waiter.take() {
            let _ = tx.send(JoinOutcome {
                error: code::NONE,
                generation: g.generation,
                protocol: g.protocol.clone(),
                protocol_type: g.protocol_type.clone(),
                leader: leader.clone(),
                member_id: m.id.clone(),
                members: if m.id == leader {
                    all.clone()
                } else {
                    Vec::new()
                },
            });
        }
    }
}

/// Topics the members of a "consumer" group subscribe to.
fn subscribed_topics(g: &Group) -> Vec<String> {
    use kafka_protocol::messages::ConsumerProtocolSubscription;
    use kafka_protocol::protocol::Decodable;
    if g.protocol_type.as_deref() != Some("consumer") {
        return Vec::new();
    }
    let protocol = g.protocol.clone().unwrap_or_default();
    let mut out = Vec::new();
    for m in g.members.values() {
        // Empty when the member lacks the protocol: the version read below then fails.
        let mut buf = m.metadata_for(&protocol);
        let Some(v) = buf.first_chunk::<2>().map(|a| i16::from_be_bytes(*a)) else {
            continue;
        };
        let mut body = buf.split_off(2);
        if let Ok(s) = ConsumerProtocolSubscription::decode(&mut body, v.clamp(0, 3)) {
            out.extend(s.topics.iter().map(|t| t.to_string()));
        }
    }
    out
}

/// Rebuilds the groups of offsets partition `index` (of `partitions`) from one of its
/// batches: a plain batch applies, a transactional one is staged under its producer, and
/// a transaction marker applies or drops what its producer staged in this partition's
/// groups.
pub fn replay_batch(
    groups: &mut std::collections::HashMap<String, Group>,
    shares: &mut records::ShareGroups,
    (index, partitions): (i32, usize),
    batch: Bytes,
) {
    let Ok(view) = strand_wire::RecordBatch::parse(batch.clone()) else {
        tracing::warn!("skipping an unreadable batch in a replay");
        return;
    };
    let a = view.attributes();
    let pid = view.producer_id();
    if a.is_control() {
        if let Ok(m) = strand_wire::Marker::of(&view) {
            end_txn_offsets(
                groups,
                (index, partitions),
                pid,
                m.kind == strand_wire::MarkerKind::Commit,
            );
        }
        return;
    }
    if !a.is_transactional() {
        crate::partition::lookup::for_each_keyed_record(batch, |k, v| {
            records::apply(groups, shares, k, v)
        });
        return;
    }
    let mut log_offset = view.base_offset();
    crate::partition::lookup::for_each_keyed_record(batch, |k, v| {
        records::stage(groups, pid, log_offset, k, v);
        log_offset += 1;
    });
}

/// Producer `producer_id`'s transaction marker in offsets partition `index` (of
/// `partitions`): the offsets it staged in that partition's groups are committed or
/// dropped.
pub fn end_txn_offsets(
    groups: &mut std::collections::HashMap<String, Group>,
    (index, partitions): (i32, usize),
    producer_id: i64,
    commit: bool,
) {
    for g in groups.values_mut() {
        if g.pending_txn.contains_key(&producer_id) && partition_for(&g.id, partitions) == index {
            g.end_txn_offsets(producer_id, commit);
        }
    }
}

/// Requested offsets of one group: `None` = every committed partition.
pub type WantedOffsets = Option<Vec<(String, Vec<i32>)>>;

/// One group of an OffsetFetch: its id, the offsets wanted, and (v9) the asking member's
/// id and epoch, which a consumer-protocol group checks.
pub type OffsetFetchAsk = (String, WantedOffsets, Option<(String, i32)>);
/// Answer for one group: per topic, per partition, the committed offset if any and an
/// error code (UNSTABLE_OFFSET_COMMIT, with `require_stable`, while a transaction holds an
/// offset of the partition).
pub type GroupOffsets = Vec<(String, Vec<(i32, Option<Committed>, i16)>)>;

/// Parses a group's offsets from the requested list, answering -1 where none; with
/// `require_stable`, a requested partition an open transaction committed an offset of
/// gets UNSTABLE_OFFSET_COMMIT (KIP-447), as from Kafka.
pub fn fetch_offsets(
    g: Option<&Group>,
    wanted: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> GroupOffsets {
    match wanted {
        Some(ts) => ts
            .into_iter()
            .map(|(t, ps)| {
                let parts = ps
                    .into_iter()
                    .map(|p| {
                        let key = (t.clone(), p);
                        if require_stable && g.is_some_and(|g| g.unstable(&key)) {
                            return (p, None, code::UNSTABLE_OFFSET_COMMIT);
                        }
                        (p, g.and_then(|g| g.offsets.get(&key).cloned()), code::NONE)
                    })
                    .collect();
                (t, parts)
            })
            .collect(),
        None => {
            let mut by_topic: std::collections::BTreeMap<
                String,
                Vec<(i32, Option<Committed>, i16)>,
            > = Default::default();
            if let Some(g) = g {
                for ((t, p), c) in &g.offsets {
                    let unstable = require_stable && g.unstable(&(t.clone(), *p));
                    let entry = if unstable {
                        (*p, None, code::UNSTABLE_OFFSET_COMMIT)
                    } else {
                        (*p, Some(c.clone()), code::NONE)
                    };
                    by_topic.entry(t.clone()).or_default().push(entry);
                }
            }
            by_topic
                .into_iter()
                .map(|(t, mut ps)| {
                    ps.sort_by_key(|(p, _, _)| *p);
                    (t, ps)
                })
                .collect()
        }
    }
}
