//! Share groups on a shard (KIP-932): describing the share groups it coordinates
//! (membership changes arrive as ShareGroupHeartbeat requests routed here like every
//! single-group request), and the delivery state of the share partitions of the
//! partitions it leads (`share_work`).
//!
//! Invariants: a group is described only by the shard that coordinates it; a group id
//! this shard knows as a classic or consumer group is not a share group
//! (GROUP_ID_NOT_FOUND). A share partition's state lives on the shard of its partition and
//! is touched only synchronously (never across an await), so two fetches of it never see
//! it half changed; expired locks are let go whenever it is touched (no timer runs).

use kafka_protocol::messages::share_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{GroupId, TopicName};
use kafka_protocol::protocol::StrBytes;

use std::rc::Rc;

use bytes::Bytes;
use strand_storage::KafkaOffset;

use super::ops::{Op, Reply, ShareDone, ShareWork};
use super::{Shard, ShareKey};
use crate::cluster::group_config::{self, StartAt};
use crate::cluster::ClusterHost;
use crate::common::config::{SHARE_STATE_NUM_PARTITIONS, SHARE_STATE_TOPIC};
use crate::common::errors::code;
use crate::partition::txn_index::AbortedTxn;
use crate::partition::Partition;
use crate::share::partition::{AckError, Limits, LogBatch, SharePartition, ShareState};
use crate::share::records::Forget;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// A share group as its coordinator shard describes it: the ShareGroupDescribe answer,
/// and the topics whose share partitions may hold a state for it (empty for an error).
#[derive(Clone, Debug, Default)]
pub struct ShareDescribed {
    pub group: DescribedGroup,
    pub initialized: std::collections::BTreeSet<String>,
}

impl Shard {
    /// ShareGroupDescribe of `ids`, all coordinated here, in order.
    pub fn describe_share_groups_local(&self, ids: Vec<String>) -> Vec<ShareDescribed> {
        let meta = self.metadata();
        let assignment = |a: &crate::group::consumer::Assignment| {
            let tps = a
                .iter()
                .filter_map(|(t, ps)| {
                    let topic = meta.topics.get(t)?;
                    Some(
                        TopicPartitions::default()
                            .with_topic_id(uuid::Uuid::from_u128(topic.id))
                            .with_topic_name(TopicName(s(t.clone())))
                            .with_partitions(ps.iter().copied().collect()),
                    )
                })
                .collect();
            Assignment::default().with_topic_partitions(tps)
        };
        let groups = self.share_groups.borrow();
        ids.into_iter()
            .map(|id| {
                let base = DescribedGroup::default().with_group_id(GroupId(s(id.clone())));
                let refused = |group: DescribedGroup| ShareDescribed {
                    group,
                    initialized: Default::default(),
                };
                if let Err(error) = self.coordinator_check(&id) {
                    return refused(base.with_error_code(error));
                }
                let Some(g) = groups.get(&id) else {
                    return refused(
                        base.with_error_code(code::GROUP_ID_NOT_FOUND)
                            .with_error_message(Some(s(format!("Group {id} not found.")))),
                    );
                };
                let members = g
                    .members
                    .values()
                    .map(|m| {
                        Member::default()
                            .with_member_id(s(m.id.clone()))
                            .with_rack_id(m.rack_id.clone().map(s))
                            .with_member_epoch(m.epoch)
                            .with_client_id(s(m.client_id.clone()))
                            .with_client_host(s(m.client_host.clone()))
                            .with_subscribed_topic_names(
                                m.subscribed
                                    .iter()
                                    .map(|t| TopicName(s(t.clone())))
                                    .collect(),
                            )
                            .with_assignment(assignment(&m.assigned))
                    })
                    .collect::<Vec<_>>();
                let state = if members.is_empty() {
                    "Empty"
                } else {
                    "Stable"
                };
                let group = base
                    .with_group_state(StrBytes::from_static_str(state))
                    .with_group_epoch(g.epoch)
                    .with_assignment_epoch(g.assignment_epoch)
                    .with_assignor_name(StrBytes::from_static_str("simple"))
                    .with_members(members);
                ShareDescribed {
                    group,
                    initialized: g.initialized().clone(),
                }
            })
            .collect()
    }
}

impl Shard {
    /// Runs each `ShareWork` on its share partition, in order.
    pub async fn share_work(self: &Rc<Self>, work: Vec<ShareWork>) -> Vec<ShareDone> {
        let mut out = Vec::with_capacity(work.len());
        for w in work {
            out.push(self.share_one(w).await);
        }
        out
    }

    fn share_limits(&self) -> Limits {
        Limits {
            delivery_count_limit: u16::try_from(self.config.group_share_delivery_count_limit)
                .unwrap_or(u16::MAX),
            record_locks_max: i64::try_from(self.config.group_share_partition_max_record_locks)
                .unwrap_or(i64::MAX),
        }
    }

    /// Acknowledgements and release first (persisted before the answer when they changed
    /// anything), then the acquisition of what is available.
    async fn share_one(self: &Rc<Self>, w: ShareWork) -> ShareDone {
        let mut done = ShareDone::default();
        let Some(part) = self.partition(&w.topic, w.partition) else {
            done.error = code::UNKNOWN_TOPIC_OR_PARTITION;
            return done;
        };
        if !part.serving() {
            done.error = code::NOT_LEADER_OR_FOLLOWER;
            return done;
        }
        done.high_watermark = part.high_watermark().0;
        let key: ShareKey = (w.group.clone(), w.topic.clone(), w.partition);
        match self.load_share_partition(&key, &part).await {
            Ok(()) => {}
            // Still initializing (its state's keeper is moving): no records this time, as
            // Kafka keeps such a fetch waiting; the client asks again.
            Err(error) if retried(error) => return done,
            Err(error) => {
                done.error = error;
                return done;
            }
        }
        let now_ms = crate::common::clock::mono_ms();
        let meta = self.metadata();
        let lock_ms = group_config::number(
            meta.group_configs.get(&w.group),
            group_config::SHARE_RECORD_LOCK_DURATION_MS,
            self.config.group_share_record_lock_duration_ms,
        );
        let (from, changed) = self.settle(&key, &w, part.log().log_start_offset().0, &mut done);
        if let Some(mut state) = changed {
            state.leader_epoch = part.leader_epoch();
            let error = self.persist_share_state(&key, &state).await;
            if error == code::FENCED_LEADER_EPOCH {
                // A newer leader of the partition owns its share partitions now.
                self.share_partitions.borrow_mut().remove(&key);
                done.error = code::NOT_LEADER_OR_FOLLOWER;
                return done;
            }
            if error != code::NONE && done.ack_error == code::NONE {
                done.ack_error = error;
            }
        }
        let Some(from) = from else {
            return done;
        };
        // read_committed: up to the last stable offset, and an aborted transaction's
        // batches are finished without a delivery, like control batches (Kafka archives
        // them).
        let committed = group_config::read_committed(meta.group_configs.get(&w.group));
        let (records, aborted) = match part
            .fetch(KafkaOffset(from), w.max_bytes, true, committed)
            .await
        {
            Ok(read) => read,
            Err(e) => {
                done.error = e.code();
                return done;
            }
        };
        // Share fetch cuts acquired ranges out of one contiguous record set.
        let records = records.to_bytes();
        let batches = log_batches(&records, aborted.as_deref().unwrap_or_default());
        self.acquire(
            &key,
            &w,
            (&records, &batches),
            now_ms.saturating_add(lock_ms),
            &mut done,
        );
        done
    }

    /// Acquires for `w`'s member what `records` (read from the log) hold of `key`'s
    /// available records, locked until `lock_until_ms`, into `done`.
    fn acquire(
        &self,
        key: &ShareKey,
        w: &ShareWork,
        (records, (batches, ends)): (&Bytes, &(Vec<LogBatch>, Vec<usize>)),
        lock_until_ms: u64,
        done: &mut ShareDone,
    ) {
        let member: Rc<str> = Rc::from(w.member.as_str());
        let mut map = self.share_partitions.borrow_mut();
        let Some(sp) = map.get_mut(key) else {
            return;
        };
        done.acquired = sp.acquire(&member, batches, w.max_records, lock_until_ms);
        if let Some(last) = done.acquired.last().map(|a| a.last) {
            // The batches up to the one holding the last acquired offset.
            let upto = batches
                .iter()
                .zip(ends)
                .find(|(b, _)| b.last >= last)
                .map_or(records.len(), |(_, &end)| end);
            done.records = records.slice(..upto);
        }
    }

    /// Applies `w`'s acknowledgements and release to its share partition, after letting
    /// go of expired locks and of what the log no longer holds (`done.ack_error` says how
    /// the acknowledgements went). Returns where a fetch should read from (when `w`
    /// fetches and anything can be acquired) and the state to persist if it changed.
    fn settle(
        &self,
        key: &ShareKey,
        w: &ShareWork,
        log_start: i64,
        done: &mut ShareDone,
    ) -> (Option<i64>, Option<ShareState>) {
        let mut map = self.share_partitions.borrow_mut();
        let Some(sp) = map.get_mut(key) else {
            done.error = code::UNKNOWN_SERVER_ERROR;
            return (None, None);
        };
        let mut changed = sp.log_start_moved(log_start);
        changed |= sp.expire_locks(crate::common::clock::mono_ms());
        if !w.acks.is_empty() {
            match sp.acknowledge(&w.member, &w.acks) {
                Ok(c) => changed |= c,
                Err(AckError::NotAcquired(_)) => done.ack_error = code::INVALID_RECORD_STATE,
                Err(AckError::OutOfRange(_)) => done.ack_error = code::INVALID_REQUEST,
            }
        }
        if w.release {
            changed |= sp.release_member(&w.member);
        }
        let from = (w.max_records > 0).then(|| sp.fetch_from()).flatten();
        (from, changed.then(|| sp.state()))
    }

    /// Makes sure `key`'s share partition is in memory: from its persisted state, or new
    /// (at the log's end, or its start with `share.auto.offset.reset=earliest`).
    async fn load_share_partition(
        self: &Rc<Self>,
        key: &ShareKey,
        part: &Partition,
    ) -> Result<(), i16> {
        if self.share_partitions.borrow().contains_key(key) {
            return Ok(());
        }
        let stored = self.read_share_state(key, part.leader_epoch()).await?;
        let meta = self.metadata();
        let sp = match stored {
            Some(state) => SharePartition::from_state(&state, self.share_limits()),
            None => {
                let start = match group_config::start_at(meta.group_configs.get(&key.0)) {
                    StartAt::Earliest => part.log().log_start_offset().0,
                    StartAt::Latest => part.high_watermark().0,
                    StartAt::Ago { duration_ms } => {
                        let ago_ms = i64::try_from(duration_ms).unwrap_or(i64::MAX);
                        let at = crate::common::clock::wall_ms()
                            .saturating_sub(ago_ms)
                            .max(0);
                        match crate::partition::lookup::offset_for_time(part, at).await {
                            Ok((_, offset)) if offset >= 0 => offset,
                            Ok(_) => part.high_watermark().0,
                            Err(e) => return Err(e.code()),
                        }
                    }
                };
                SharePartition::new(start, self.share_limits())
            }
        };
        // Another request may have loaded it meanwhile: the first one stays.
        self.share_partitions
            .borrow_mut()
            .entry(key.clone())
            .or_insert(sp);
        Ok(())
    }

    /// Where `key`'s state is kept: the shard of this node leading its
    /// `__share_group_state` partition, or the Kafka listener of the node that does.
    fn share_state_home(&self, key: &ShareKey) -> Result<StateHome, i16> {
        let meta = self.metadata();
        let p = crate::share::records::partition_for(key, SHARE_STATE_NUM_PARTITIONS);
        let topic = meta
            .topics
            .get(SHARE_STATE_TOPIC)
            .ok_or(code::COORDINATOR_NOT_AVAILABLE)?;
        let leader = if self.clustered() {
            self.leader_of_group(topic.group_of(p)).0
        } else {
            self.config.node_id
        };
        if leader == self.config.node_id {
            let shard = meta.shard_of(SHARE_STATE_TOPIC, p);
            return shard
                .map(StateHome::Here)
                .ok_or(code::COORDINATOR_NOT_AVAILABLE);
        }
        let node = meta
            .nodes
            .get(&leader)
            .ok_or(code::COORDINATOR_NOT_AVAILABLE)?;
        let topic_id = meta
            .topics
            .get(&key.1)
            .ok_or(code::UNKNOWN_TOPIC_OR_PARTITION)?
            .id;
        Ok(StateHome::Node(
            node.host.clone(),
            node.kafka_port,
            topic_id,
        ))
    }

    /// `key`'s persisted state, retried while its keeper is moving (`retried`), for up to
    /// `STATE_RETRY_MS`, as Kafka's persister does.
    pub(crate) async fn read_share_state(
        self: &Rc<Self>,
        key: &ShareKey,
        leader_epoch: i32,
    ) -> Result<Option<ShareState>, i16> {
        let attempt = || self.read_share_state_once(key, leader_epoch);
        retrying(attempt, |r| matches!(r, Err(e) if retried(*e))).await
    }

    async fn read_share_state_once(
        self: &Rc<Self>,
        key: &ShareKey,
        leader_epoch: i32,
    ) -> Result<Option<ShareState>, i16> {
        match self.share_state_home(key)? {
            StateHome::Here(target) => {
                match self
                    .call(target, Op::ReadShareState(key.clone(), leader_epoch))
                    .await
                {
                    Reply::ShareState(state) => state,
                    _ => Err(code::COORDINATOR_NOT_AVAILABLE),
                }
            }
            StateHome::Node(host, port, topic_id) => {
                crate::share::remote::read((&host, port), key, topic_id, leader_epoch).await
            }
        }
    }

    /// Writes `key`'s state durably before its answer, retried while its keeper is moving
    /// (`retried`) for up to `STATE_RETRY_MS`; a code (NONE when written).
    pub(crate) async fn persist_share_state(
        self: &Rc<Self>,
        key: &ShareKey,
        state: &ShareState,
    ) -> i16 {
        let attempt = || self.persist_share_state_once(key, state);
        retrying(attempt, |e| retried(*e)).await
    }

    async fn persist_share_state_once(self: &Rc<Self>, key: &ShareKey, state: &ShareState) -> i16 {
        match self.share_state_home(key) {
            Err(e) => e,
            Ok(StateHome::Here(target)) => {
                match self
                    .call(target, Op::WriteShareState(key.clone(), state.clone()))
                    .await
                {
                    Reply::Codes(c) => c.first().copied().unwrap_or(code::UNKNOWN_SERVER_ERROR),
                    _ => code::COORDINATOR_NOT_AVAILABLE,
                }
            }
            Ok(StateHome::Node(host, port, topic_id)) => {
                crate::share::remote::write((&host, port), key, topic_id, state).await
            }
        }
    }

    /// The code refusing state requests for `key` here: NOT_COORDINATOR when this node
    /// does not lead its `__share_group_state` partition, COORDINATOR_LOAD_IN_PROGRESS
    /// while that partition is replayed; `None` when they are served.
    fn share_state_refusal(&self, key: &ShareKey) -> Option<i16> {
        let p = crate::share::records::partition_for(key, SHARE_STATE_NUM_PARTITIONS);
        let Some(part) = self.partition(SHARE_STATE_TOPIC, p) else {
            return Some(code::NOT_COORDINATOR);
        };
        if self.clustered() && !part.serving() {
            return Some(code::NOT_COORDINATOR);
        }
        self.share_states_loading
            .borrow()
            .contains(&p)
            .then_some(code::COORDINATOR_LOAD_IN_PROGRESS)
    }

    /// `key`'s persisted state, for its data partition's leader at `leader_epoch`: from
    /// now on a write from an older epoch is refused.
    pub fn read_share_state_here(
        &self,
        key: &ShareKey,
        leader_epoch: i32,
    ) -> Result<Option<ShareState>, i16> {
        if let Some(refused) = self.share_state_refusal(key) {
            return Err(refused);
        }
        let mut states = self.share_states.borrow_mut();
        let state = states.get_mut(key);
        Ok(state.map(|s| {
            s.leader_epoch = s.leader_epoch.max(leader_epoch);
            s.clone()
        }))
    }

    /// Appends `key`'s state to its `__share_group_state` partition (on this shard) with
    /// acks=all and keeps it as the newest; a code (FENCED_LEADER_EPOCH for a state from
    /// a leader older than the one that read or wrote it last).
    pub async fn write_share_state_here(&self, key: &ShareKey, state: &ShareState) -> i16 {
        if let Some(refused) = self.share_state_refusal(key) {
            return refused;
        }
        let newest_epoch = self.share_states.borrow().get(key).map(|s| s.leader_epoch);
        if newest_epoch.is_some_and(|e| e > state.leader_epoch) {
            return code::FENCED_LEADER_EPOCH;
        }
        let written = self.write_share_record(key, Some(state)).await;
        if written == code::NONE {
            self.share_states
                .borrow_mut()
                .insert(key.clone(), state.clone());
        }
        written
    }

    /// Appends `key`'s record (`None`: its tombstone) to its `__share_group_state`
    /// partition on this shard, acks=all; a code.
    async fn write_share_record(&self, key: &ShareKey, state: Option<&ShareState>) -> i16 {
        let p = crate::share::records::partition_for(key, SHARE_STATE_NUM_PARTITIONS);
        let Some(part) = self.partition(SHARE_STATE_TOPIC, p) else {
            return code::NOT_COORDINATOR;
        };
        let now = crate::common::clock::wall_ms();
        let mut b = strand_wire::BatchBuilder::new(now);
        let k = crate::share::records::key_bytes(key);
        let v = state.map(crate::share::records::value_bytes);
        b.push(now, Some(&k), v.as_deref(), &[]);
        match part.produce(b.build(), true).await {
            Ok(_) => code::NONE,
            Err(e) => {
                tracing::warn!(group = %key.0, topic = %key.1, partition = key.2, error = %e,
                    "writing __share_group_state failed");
                code::COORDINATOR_NOT_AVAILABLE
            }
        }
    }

    /// Forgets what `forget` names on this shard: its share partitions here, and the
    /// states kept in the `__share_group_state` partitions this shard leads (tombstoned;
    /// the leaders of the others forget theirs). A code: the first tombstone that failed.
    pub async fn forget_share_group(&self, forget: &Forget) -> i16 {
        self.share_partitions
            .borrow_mut()
            .retain(|k, _| !forget.covers(k));
        let keys: Vec<ShareKey> = self
            .share_states
            .borrow()
            .keys()
            .filter(|k| forget.covers(k) && self.share_state_refusal(k).is_none())
            .cloned()
            .collect();
        let mut first_error = code::NONE;
        for key in keys {
            match self.write_share_record(&key, None).await {
                code::NONE => {
                    self.share_states.borrow_mut().remove(&key);
                }
                e if first_error == code::NONE => first_error = e,
                _ => {}
            }
        }
        first_error
    }

    /// Writes share group `group`'s snapshot (`None`: its tombstone) to its
    /// `__consumer_offsets` partition and waits until it is durable.
    pub async fn persist_share_group(
        &self,
        group: &str,
        snapshot: Option<Vec<u8>>,
    ) -> Result<(), i16> {
        let record = (crate::group::records::share_group_key(group), snapshot);
        crate::group::coordinator::persist_group_records(self, group, vec![record], None)
            .await
            .map(|_| ())
    }

    /// On `group`'s coordinator shard: notes that `topics` hold a state for it (`true`) or
    /// no longer do, and writes the group when that changed it; a code.
    pub async fn note_share_topics(
        &self,
        group: &str,
        topics: &[String],
        initialized: bool,
    ) -> i16 {
        if let Err(error) = self.coordinator_check(group) {
            return error;
        }
        let snapshot = {
            let mut groups = self.share_groups.borrow_mut();
            let Some(g) = groups.get_mut(group) else {
                return code::GROUP_ID_NOT_FOUND;
            };
            if !g.note_initialized(topics, initialized) {
                return code::NONE;
            }
            g.snapshot()
        };
        match self.persist_share_group(group, Some(snapshot)).await {
            Ok(()) => code::NONE,
            Err(error) => error,
        }
    }

    /// Share group `group`'s session timeout: its group config, else the broker's.
    pub fn share_session_ms(&self, meta: &crate::cluster::metadata::Metadata, group: &str) -> u64 {
        crate::cluster::group_config::number(
            meta.group_configs.get(group),
            crate::cluster::group_config::SHARE_SESSION_TIMEOUT_MS,
            self.config.group_share_session_timeout_ms,
        )
    }

    /// Removes the share-group members whose session expired (no heartbeat for the
    /// group's session timeout) and writes each changed group, in the background: a group
    /// whose members all died shows Empty without waiting for another heartbeat.
    pub fn expire_share_members(self: &Rc<Self>) {
        let now_ms = crate::common::clock::mono_ms();
        let meta = self.metadata();
        let mut changed = Vec::new();
        for (id, g) in self.share_groups.borrow_mut().iter_mut() {
            if self.coordinator_check(id).is_err() {
                continue;
            }
            let session_ms = self.share_session_ms(&meta, id);
            let gone = g.expire(session_ms, now_ms);
            if !gone.is_empty() {
                tracing::info!(group = %id, members = ?gone, "share group members expired");
                changed.push((id.clone(), g.snapshot()));
            }
        }
        for (group, snapshot) in changed {
            let shard = self.clone();
            crate::runtime::task::spawn_local(async move {
                if let Err(e) = shard.persist_share_group(&group, Some(snapshot)).await {
                    tracing::warn!(%group, code = e, "writing a share group's state failed");
                }
            });
        }
    }

    /// On `group`'s coordinator shard, DeleteGroups of a share group: refused while it has
    /// members (NON_EMPTY_GROUP, as Kafka); else its tombstone is written, its membership
    /// goes, then it is forgotten on every shard of every node. `None` when `group` is not
    /// a share group here.
    pub async fn delete_share_group(self: &Rc<Self>, group: &str) -> Option<i16> {
        let members = self.share_groups.borrow().get(group)?.members.len();
        if members > 0 {
            return Some(code::NON_EMPTY_GROUP);
        }
        if let Err(error) = self.persist_share_group(group, None).await {
            return Some(error);
        }
        {
            let mut groups = self.share_groups.borrow_mut();
            // A member that joined while the tombstone was written keeps the group (its
            // snapshot follows the tombstone in the log).
            if groups.get(group).is_some_and(|g| !g.members.is_empty()) {
                return Some(code::NON_EMPTY_GROUP);
            }
            groups.remove(group);
        }
        Some(self.forget_everywhere(&Forget::group(group)).await)
    }

    /// Forgets what `forget` names on every shard of every node (`forget_share_group`);
    /// the first error (COORDINATOR_NOT_AVAILABLE for a node that did not answer within
    /// `STATE_RETRY_MS`).
    pub async fn forget_everywhere(self: &Rc<Self>, forget: &Forget) -> i16 {
        let local = (0..self.count).map(|t| self.call(t, Op::ForgetShareGroup(forget.clone())));
        let mut first_error = code::NONE;
        for reply in futures::future::join_all(local).await {
            let c = match reply {
                Reply::Codes(c) => c.first().copied().unwrap_or(code::NONE),
                _ => code::UNKNOWN_SERVER_ERROR,
            };
            if first_error == code::NONE {
                first_error = c;
            }
        }
        if self.clustered() {
            let meta = self.metadata();
            let id_of: &dyn Fn(&str) -> Option<u128> = &|t| meta.topics.get(t).map(|x| x.id);
            let others = meta.nodes.values().filter(|n| n.id != self.config.node_id);
            let calls = others.map(|n| {
                let node = (n.host.as_str(), n.kafka_port);
                retrying(
                    move || crate::share::remote::forget(node, forget, id_of),
                    |ok| !ok,
                )
            });
            for ok in futures::future::join_all(calls).await {
                if !ok && first_error == code::NONE {
                    first_error = code::COORDINATOR_NOT_AVAILABLE;
                }
            }
        }
        first_error
    }

    /// Replays an opened `__share_group_state` partition up to `end` into `share_states`.
    pub(super) async fn load_share_states(
        &self,
        part: &Partition,
        end: KafkaOffset,
    ) -> anyhow::Result<()> {
        let (from, records) = part.compacted_checkpoint();
        let from = match records {
            Some(records) => {
                let mut states = self.share_states.borrow_mut();
                for (k, v) in records.records() {
                    crate::share::records::apply(&mut states, k, Some(v));
                }
                from
            }
            None => part.log().log_start_offset(),
        };
        let (_, bytes) = crate::partition::checkpoint::replay_batches(part.log(), from, end, |b| {
            crate::partition::lookup::for_each_keyed_record(b, |k, v| {
                crate::share::records::apply(&mut self.share_states.borrow_mut(), k, v);
            });
        })
        .await?;
        part.metrics().state_replayed(bytes);
        Ok(())
    }

    /// Cluster mode, on becoming the leader of a `__share_group_state` partition: forgets
    /// what this node held of its states as a follower and replays its log. The caller
    /// marked it loading (`share_states_loading`); it is unmarked once replayed.
    pub(crate) async fn reload_share_states(&self, part: &Partition) {
        let index = part.index;
        self.share_states.borrow_mut().retain(|k, _| {
            crate::share::records::partition_for(k, SHARE_STATE_NUM_PARTITIONS) != index
        });
        if let Err(e) = self
            .load_share_states(part, part.log().log_end_offset())
            .await
        {
            tracing::error!(partition = index, error = %format!("{e:#}"),
                "reloading share-partition states after a leader change failed");
        }
        self.share_states_loading.borrow_mut().remove(&index);
    }

    /// Forgets the share partitions of `topic`-`partition` (this node became its leader
    /// again: what it held may have moved on under another leader).
    pub(crate) fn forget_share_partitions(&self, topic: &str, partition: i32) {
        self.share_partitions
            .borrow_mut()
            .retain(|k, _| !(k.1 == topic && k.2 == partition));
    }
}

/// How long a share partition's state is retried while its keeper refuses it for now.
const STATE_RETRY_MS: u64 = 5_000;
/// The pause between two tries.
const STATE_RETRY_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// `attempt` again every `STATE_RETRY_BACKOFF` while `again` holds of its result, for up
/// to `STATE_RETRY_MS`; the last result.
async fn retrying<T, F: std::future::Future<Output = T>>(
    mut attempt: impl FnMut() -> F,
    again: impl Fn(&T) -> bool,
) -> T {
    let until_ms = crate::common::clock::mono_ms().saturating_add(STATE_RETRY_MS);
    loop {
        let r = attempt().await;
        if !again(&r) || crate::common::clock::mono_ms() >= until_ms {
            return r;
        }
        crate::runtime::task::sleep(STATE_RETRY_BACKOFF).await;
    }
}

/// Whether a share-state refusal passes once the `__share_group_state` partition has a
/// settled leader (a new topic, a failover, a replay after one).
fn retried(error: i16) -> bool {
    matches!(
        error,
        code::COORDINATOR_NOT_AVAILABLE
            | code::COORDINATOR_LOAD_IN_PROGRESS
            | code::NOT_COORDINATOR
            | code::REQUEST_TIMED_OUT
    )
}

/// Where a share partition's state is kept (`Shard::share_state_home`).
enum StateHome {
    /// This node's shard.
    Here(usize),
    /// Another node's Kafka listener (host, port) and the partition's topic id.
    Node(String, u16, u128),
}

/// The batches of `records` (whole batches as a fetch reads them) and where each ends; a
/// transactional batch of one of the `aborted` transactions counts as a control batch
/// (never delivered).
fn log_batches(records: &Bytes, aborted: &[AbortedTxn]) -> (Vec<LogBatch>, Vec<usize>) {
    let mut batches = Vec::new();
    let mut ends = Vec::new();
    let mut at = 0usize;
    for b in strand_wire::batches(records.clone()) {
        let Ok(b) = b else {
            break;
        };
        at += b.as_bytes().len();
        let a = b.attributes();
        let in_aborted = |t: &AbortedTxn| {
            t.producer_id == b.producer_id()
                && (t.first_offset..t.last_offset).contains(&b.base_offset())
        };
        batches.push(LogBatch {
            first: b.base_offset(),
            last: b.last_offset(),
            control: a.is_control() || (a.is_transactional() && aborted.iter().any(in_aborted)),
        });
        ends.push(at);
    }
    (batches, ends)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of `n` records at `base`, transactional from `producer` when given.
    fn batch(base: i64, n: usize, producer: Option<i64>) -> Vec<u8> {
        let mut b = strand_wire::BatchBuilder::new(0);
        if let Some(pid) = producer {
            b = b.producer(pid, 0, 0).transactional();
        }
        for _ in 0..n {
            b.push(0, None, Some(b"v"), &[]);
        }
        let mut bytes = b.build().to_vec();
        strand_wire::set_base_offset(&mut bytes, base).expect("a batch");
        bytes
    }

    #[test]
    fn batches_of_an_aborted_transaction_are_never_delivered() {
        let records = Bytes::from(
            [
                batch(0, 2, Some(7)),
                batch(2, 1, None),
                batch(3, 2, Some(8)),
                batch(5, 1, Some(7)),
            ]
            .concat(),
        );
        let aborted = [AbortedTxn {
            producer_id: 7,
            first_offset: 0,
            last_offset: 4,
        }];
        let (batches, ends) = log_batches(&records, &aborted);
        let skipped: Vec<(i64, bool)> = batches.iter().map(|b| (b.first, b.control)).collect();
        // Producer 7's batch at 5 is after its abort marker: another transaction.
        assert_eq!(skipped, vec![(0, true), (2, false), (3, false), (5, false)]);
        assert_eq!(ends.last(), Some(&records.len()));
        let (plain, _) = log_batches(&records, &[]);
        assert!(plain.iter().all(|b| !b.control));
    }
}
