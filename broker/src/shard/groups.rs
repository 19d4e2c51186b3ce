//! The groups a shard coordinates: loading them from its `__consumer_offsets` partitions
//! (the checkpoint, then the log after it), reloading them when this node becomes a
//! partition's leader, whether this shard coordinates a group now, and the local answers
//! to DescribeGroups, ListGroups and OffsetFetch. The requests themselves are the
//! gateway's and the group coordinator's (`group::coordinator`).
//!
//! Invariant: a coordinator never answers from groups that are not loaded yet (it waits,
//! bounded by `GROUP_LOAD_WAIT`, or answers COORDINATOR_LOAD_IN_PROGRESS).

use std::time::Duration;

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;

use super::{Shard, GROUP_LOAD_WAIT};
use crate::group::coordinator::{fetch_offsets, GroupOffsets};
use crate::group::state::Group;
use crate::partition::Partition;
use crate::runtime::task::sleep;

/// A kafka-protocol string from any string.
pub(crate) fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// The coordinator (`group::coordinator`) runs over the shard that owns the groups.
impl crate::group::GroupHost for Shard {
    fn groups(&self) -> &std::cell::RefCell<std::collections::HashMap<String, Group>> {
        &self.groups
    }

    fn initial_rebalance_delay_ms(&self) -> u64 {
        self.config.group_initial_rebalance_delay_ms
    }

    fn group_max_size(&self) -> usize {
        self.config.group_max_size
    }

    fn groups_max(&self) -> usize {
        self.config.groups_per_shard
    }

    fn consumer_session_timeout_ms(&self) -> u64 {
        self.config.group_consumer_session_timeout_ms
    }

    fn metadata(&self) -> std::sync::Arc<crate::cluster::metadata::Metadata> {
        Shard::metadata(self)
    }

    fn partition(&self, topic: &str, index: i32) -> Option<std::rc::Rc<Partition>> {
        self.partitions
            .borrow()
            .get(&(topic.to_string(), index))
            .cloned()
    }
}

impl Shard {
    /// Cluster mode, on becoming the coordinator of an offsets partition: forgets what this
    /// node knew of its groups (it followed without applying) and replays the log. The
    /// caller marked the partition loading (`groups_loading`) when leadership came; it is
    /// unmarked here once the groups are replayed.
    pub(crate) async fn reload_groups(&self, part: &Partition) {
        self.replay_after_leader_gain(part).await;
        self.groups_loading.borrow_mut().remove(&part.index);
    }

    /// Whether this shard coordinates `group` now (`coordinator_check_in` of
    /// `__consumer_offsets`).
    pub fn coordinator_check(&self, group: &str) -> Result<(), i16> {
        self.coordinator_check_in(crate::group::OFFSETS_TOPIC, group, &self.groups_loading)
    }

    async fn replay_after_leader_gain(&self, part: &Partition) {
        let partitions = self
            .metadata()
            .topics
            .get(crate::group::OFFSETS_TOPIC)
            .map_or(1, |t| t.shards.len());
        let elsewhere = |g: &String| crate::group::partition_for(g, partitions) != part.index;
        self.groups.borrow_mut().retain(|g, _| elsewhere(g));
        self.share_groups.borrow_mut().retain(|g, _| elsewhere(g));
        let end = part.log().log_end_offset();
        if let Err(e) = self.replay_groups(part, end, partitions).await {
            tracing::error!(partition = part.index, error = %format!("{e:#}"),
                "reloading consumer groups after a coordinator change failed");
        }
    }

    /// Rebuilds the groups of an offsets partition (of `partitions`) from its records.
    pub(super) async fn load_groups(
        &self,
        part: &Partition,
        partitions: usize,
    ) -> anyhow::Result<()> {
        self.replay_groups(part, part.high_watermark(), partitions)
            .await
    }

    async fn replay_groups(
        &self,
        part: &Partition,
        end: strand_storage::KafkaOffset,
        partitions: usize,
    ) -> anyhow::Result<()> {
        // The checkpoint's compacted records and the transactions open at its offset, then
        // the log after it.
        let (from, records) = part.compacted_checkpoint();
        let shares = std::cell::RefCell::new(crate::group::records::ShareGroups::new());
        let from = match records {
            Some(records) => {
                let mut groups = self.groups.borrow_mut();
                let shares = &mut shares.borrow_mut();
                crate::group::records::replay_compacted(&records, &mut groups, shares);
                for (pid, (offset, k, v)) in part.pending_checkpoint_records() {
                    crate::group::records::stage(&mut groups, pid, offset, &k, v.as_deref());
                }
                from
            }
            None => part.log().log_start_offset(),
        };
        let (_, bytes) = crate::partition::checkpoint::replay_batches(part.log(), from, end, |b| {
            crate::group::coordinator::replay_batch(
                &mut self.groups.borrow_mut(),
                &mut shares.borrow_mut(),
                (part.index, partitions),
                b,
            )
        })
        .await?;
        part.metrics().state_replayed(bytes);
        self.restore_share_groups(shares.into_inner());
        Ok(())
    }

    /// The share groups whose snapshots a replay found, decoded into `share_groups` (their
    /// members' sessions start now).
    fn restore_share_groups(&self, snapshots: crate::group::records::ShareGroups) {
        let now_ms = crate::common::clock::mono_ms();
        let mut groups = self.share_groups.borrow_mut();
        for (id, bytes) in snapshots {
            match crate::share::group::ShareGroup::restored(&bytes, now_ms) {
                Some(g) => {
                    groups.insert(id, g);
                }
                None => tracing::warn!(group = %id, "skipping an unreadable share group snapshot"),
            }
        }
    }

    /// Waits (bounded) until every `__consumer_offsets` partition this shard owns is loaded.
    pub async fn wait_all_groups_loaded(&self) {
        let deadline = crate::common::clock::now() + GROUP_LOAD_WAIT;
        while crate::common::clock::now() < deadline && !self.stopping() {
            let meta = self.metadata();
            if meta.version == 0 || self.applying_metadata.get() {
                sleep(Duration::from_millis(10)).await;
                continue;
            }
            let Some(t) = meta.topics.get(crate::group::OFFSETS_TOPIC) else {
                return;
            };
            let loaded = {
                let parts = self.partitions.borrow();
                t.shards.iter().enumerate().all(|(p, &s)| {
                    s as usize != self.id
                        || parts.contains_key(&(crate::group::OFFSETS_TOPIC.to_string(), p as i32))
                })
            };
            if loaded {
                return;
            }
            sleep(Duration::from_millis(10)).await;
        }
    }

    /// Describes groups held by this shard (Dead for unknown ones, as Kafka answers).
    pub fn describe_groups_local(&self, ids: Vec<String>) -> Vec<DescribedGroup> {
        let groups = self.groups.borrow();
        ids.into_iter()
            .map(|id| {
                let base = DescribedGroup::default().with_group_id(GroupId(s(id.clone())));
                if let Err(error) = self.coordinator_check(&id) {
                    return base.with_error_code(error);
                }
                let Some(g) = groups.get(&id) else {
                    return base.with_group_state(s("Dead"));
                };
                if g.consumer.is_some() {
                    // Not a classic group: Kafka answers Dead (v0-5; v6 adds the error).
                    return base.with_group_state(s("Dead"));
                }
                let protocol = g.protocol.clone().unwrap_or_default();
                let members = g
                    .members
                    .values()
                    .map(|m| {
                        let meta = m.metadata_for(&protocol);
                        DescribedGroupMember::default()
                            .with_member_id(s(m.id.clone()))
                            .with_group_instance_id(m.instance_id.clone().map(s))
                            .with_client_id(s(m.client_id.clone()))
                            .with_client_host(s(m.client_host.clone()))
                            .with_member_metadata(meta)
                            .with_member_assignment(m.assignment.clone())
                    })
                    .collect();
                base.with_group_state(s(g.state.name()))
                    .with_protocol_type(s(g.protocol_type.clone().unwrap_or_default()))
                    .with_protocol_data(s(protocol))
                    .with_members(members)
            })
            .collect()
    }

    /// Describes consumer-protocol groups held by this shard (ConsumerGroupDescribe):
    /// GROUP_ID_NOT_FOUND for unknown and classic ones, as Kafka answers.
    pub fn describe_consumer_groups_local(
        &self,
        ids: Vec<String>,
    ) -> Vec<kafka_protocol::messages::consumer_group_describe_response::DescribedGroup> {
        use kafka_protocol::messages::consumer_group_describe_response::{
            Assignment, DescribedGroup, Member, TopicPartitions,
        };
        let meta = self.metadata();
        let assignment = |a: &crate::group::consumer::Assignment| {
            let tps = a
                .iter()
                .filter_map(|(t, ps)| {
                    let topic = meta.topics.get(t)?;
                    Some(
                        TopicPartitions::default()
                            .with_topic_id(uuid::Uuid::from_u128(topic.id))
                            .with_topic_name(kafka_protocol::messages::TopicName(s(t.clone())))
                            .with_partitions(ps.iter().copied().collect()),
                    )
                })
                .collect();
            Assignment::default().with_topic_partitions(tps)
        };
        let groups = self.groups.borrow();
        ids.into_iter()
            .map(|id| {
                let base = DescribedGroup::default().with_group_id(GroupId(s(id.clone())));
                if let Err(error) = self.coordinator_check(&id) {
                    return base.with_error_code(error);
                }
                let Some(c) = groups.get(&id).and_then(|g| g.consumer.as_ref()) else {
                    let why = match groups.get(&id) {
                        Some(_) => format!("group {id} is not a consumer group"),
                        None => format!("group {id} not found"),
                    };
                    return base
                        .with_error_code(crate::common::errors::code::GROUP_ID_NOT_FOUND)
                        .with_error_message(Some(s(why)));
                };
                let members = c
                    .members
                    .values()
                    .map(|m| {
                        let target = c.target.get(&m.id).cloned().unwrap_or_default();
                        Member::default()
                            .with_member_id(s(m.id.clone()))
                            .with_instance_id(m.instance_id.clone().map(s))
                            .with_rack_id(m.rack_id.clone().map(s))
                            .with_member_epoch(m.member_epoch)
                            .with_client_id(s(m.client_id.clone()))
                            .with_client_host(s(m.client_host.clone()))
                            .with_subscribed_topic_names(
                                m.subscribed_topic_names
                                    .iter()
                                    .map(|t| kafka_protocol::messages::TopicName(s(t.clone())))
                                    .collect(),
                            )
                            .with_subscribed_topic_regex(m.subscribed_topic_regex.clone().map(s))
                            .with_assignment(assignment(&m.assigned))
                            .with_target_assignment(assignment(&target))
                            .with_member_type(if m.classic.is_some() { 0 } else { 1 })
                    })
                    .collect();
                base.with_group_state(s(crate::group::consumer::state_name(c)))
                    .with_group_epoch(c.group_epoch)
                    .with_assignment_epoch(c.assignment_epoch)
                    .with_assignor_name(s(c.assignor()))
                    .with_members(members)
            })
            .collect()
    }

    /// Groups this shard coordinates now (a cluster node lists those of the offsets
    /// partitions it leads, as a Kafka broker lists its coordinator's groups).
    pub fn list_groups_local(&self) -> Vec<ListedGroup> {
        self.groups
            .borrow()
            .values()
            .filter(|g| self.coordinator_check(&g.id).is_ok())
            .map(|g| {
                let (kind, state) = match &g.consumer {
                    Some(c) => ("consumer", crate::group::consumer::state_name(c)),
                    None => ("classic", g.state.name()),
                };
                ListedGroup::default()
                    .with_group_id(GroupId(s(g.id.clone())))
                    .with_protocol_type(s(g.protocol_type.clone().unwrap_or_default()))
                    .with_group_state(s(state))
                    .with_group_type(s(kind))
            })
            .chain(
                self.share_groups
                    .borrow()
                    .iter()
                    .filter(|(id, _)| self.coordinator_check(id).is_ok())
                    .map(|(id, g)| {
                        let state = if g.members.is_empty() {
                            "Empty"
                        } else {
                            "Stable"
                        };
                        ListedGroup::default()
                            .with_group_id(GroupId(s(id.clone())))
                            .with_protocol_type(s("share"))
                            .with_group_state(s(state))
                            .with_group_type(s("share"))
                    }),
            )
            .collect()
    }

    /// Offsets of groups held by this shard, or why it does not coordinate a group now
    /// (`require_stable`: see `fetch_offsets`).
    pub fn offset_fetch_local(
        &self,
        reqs: Vec<crate::group::coordinator::OffsetFetchAsk>,
        require_stable: bool,
    ) -> Vec<Result<GroupOffsets, i16>> {
        let groups = self.groups.borrow();
        reqs.into_iter()
            .map(|(g, wanted, member)| {
                self.coordinator_check(&g)?;
                let group = groups.get(&g);
                if let (Some(c), Some((id, epoch))) =
                    (group.and_then(|g| g.consumer.as_ref()), member)
                {
                    // OffsetFetch v9 from a member of a consumer-protocol group: it must be
                    // current (Kafka's `ConsumerGroup.validateOffsetFetch`).
                    match c.members.get(&id) {
                        None => return Err(crate::common::errors::code::UNKNOWN_MEMBER_ID),
                        Some(m) if m.member_epoch != epoch => {
                            return Err(crate::common::errors::code::STALE_MEMBER_EPOCH)
                        }
                        Some(_) => {}
                    }
                }
                Ok(fetch_offsets(group, wanted, require_stable))
            })
            .collect()
    }
}
