//! Execution of the work a shard does for a request ([`Op`]), on the shard that owns the
//! partitions or groups it names: produce, fetch and its long-poll wait, offsets, records,
//! metadata commands, producer ids, groups and stats.
//!
//! Invariant: a partition is served only where `serving` says this node serves it
//! (NOT_LEADER_OR_FOLLOWER otherwise); nothing here holds a `RefCell` borrow across an await.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::metadata::{Command, MetaError};
use crate::cluster::ClusterHost;
use crate::common::errors::KafkaError;

use strand_storage::KafkaOffset;

use crate::partition::record_set::RecordSet;
use crate::partition::turns::Turn;
use crate::partition::Partition;
use crate::shard::ops::*;
use crate::shard::Shard;

impl Shard {
    /// Executes `op` on this shard.
    pub async fn execute(self: &Rc<Self>, op: Op) -> Reply {
        match op {
            Op::Produce { parts, acks_all } => Reply::Produce(self.produce(parts, acks_all).await),
            Op::Fetch { parts, limit } => Reply::Fetch(self.fetch(parts, limit).await),
            Op::Share(work) => Reply::Share(self.share_work(work).await),
            Op::WriteShareState(key, state) => {
                Reply::Codes(vec![self.write_share_state_here(&key, &state).await])
            }
            Op::ForgetShareGroup(forget) => {
                Reply::Codes(vec![self.forget_share_group(&forget).await])
            }
            Op::NoteShareTopics {
                group,
                topics,
                initialized,
            } => Reply::Codes(vec![
                self.note_share_topics(&group, &topics, initialized).await,
            ]),
            Op::ReadShareState(key, leader_epoch) => {
                Reply::ShareState(self.read_share_state_here(&key, leader_epoch))
            }
            Op::WaitAppend { parts, timeout } => {
                self.wait_append(parts, timeout).await;
                Reply::Done
            }
            Op::ListOffsets { parts } => Reply::ListOffsets(self.list_offsets(parts).await),
            Op::DeleteRecords { parts } => Reply::Parts(self.delete_records(parts).await),
            Op::EpochEnd { parts } => Reply::Parts(self.epoch_end(parts).await),
            op @ (Op::ApplyMetadata(_) | Op::FirstMetadata) => self.execute_placement_op(op).await,
            Op::MetaCommands(cmds) => Reply::Meta(self.meta_commands(cmds).await),
            Op::CatchUpTopics(names) => self.catch_up_topics(names).await,
            Op::Group(req) => Reply::Encoded(self.run_group_request(req).await),
            op @ (Op::DescribeGroups(_)
            | Op::DescribeConsumerGroups(_)
            | Op::DescribeShareGroups(_)
            | Op::ListGroups
            | Op::DeleteGroups(_)
            | Op::CommitOffsets { .. }
            | Op::OffsetFetch(..)) => self.execute_group_op(op).await,
            Op::Stats => Reply::Stats(Box::new(self.snapshot())),
            Op::Leaders(changes) => {
                self.note_leaders(changes);
                Reply::Done
            }
            Op::RemoteLeaders(changes) => {
                self.note_remote_leaders(changes);
                Reply::Done
            }
            Op::AllocateProducerId => Reply::ProducerId(self.allocate_producer_id().await),
            Op::WriteMarkers(m) => Reply::Codes(self.write_markers_local(m).await),
            op @ (Op::DescribeTxns(_)
            | Op::ListTxns(_)
            | Op::DescribeProducers(_)
            | Op::AddTxnPartitions(_)
            | Op::VerifyTxn(_)) => self.execute_txn_op(op).await,
            Op::ControllerView => Reply::View(self.replicator().and_then(|r| r.controller_view())),
            Op::AdmitConnection(ip) => Reply::Admission(self.admission.borrow_mut().admit(ip)),
            Op::ReleaseConnection(ip) => {
                self.admission.borrow_mut().release(ip);
                Reply::Done
            }
            Op::Shutdown => {
                self.shutdown().await;
                Reply::Done
            }
        }
    }

    /// Executes an op of the groups this shard coordinates.
    async fn execute_group_op(self: &Rc<Self>, op: Op) -> Reply {
        match op {
            Op::DescribeGroups(ids) => {
                self.wait_all_groups_loaded().await;
                Reply::Described(self.describe_groups_local(ids))
            }
            Op::DescribeConsumerGroups(ids) => {
                self.wait_all_groups_loaded().await;
                Reply::DescribedConsumerGroups(self.describe_consumer_groups_local(ids))
            }
            Op::DescribeShareGroups(ids) => {
                Reply::DescribedShareGroups(self.describe_share_groups_local(ids))
            }
            Op::ListGroups => {
                self.wait_all_groups_loaded().await;
                Reply::Listed(self.list_groups_local())
            }
            Op::DeleteGroups(ids) => {
                self.wait_all_groups_loaded().await;
                let mut codes = Vec::with_capacity(ids.len());
                for g in ids {
                    codes.push(match self.coordinator_check(&g) {
                        Ok(()) => match self.delete_share_group(&g).await {
                            Some(c) => c,
                            None => crate::group::coordinator::delete_group(self, &g).await,
                        },
                        Err(error) => error,
                    });
                }
                Reply::Codes(codes)
            }
            Op::CommitOffsets { group, offsets } => {
                self.wait_loaded(crate::group::OFFSETS_TOPIC, &group).await;
                Reply::Codes(
                    crate::group::coordinator::offset_commit(
                        self,
                        &group,
                        ("", None),
                        (-1, crate::group::coordinator::OFFSET_COMMIT_VERSION_MAX),
                        offsets,
                    )
                    .await,
                )
            }
            Op::OffsetFetch(reqs, require_stable) => {
                self.wait_all_groups_loaded().await;
                Reply::Offsets(self.offset_fetch_local(reqs, require_stable))
            }
            _ => Reply::Done,
        }
    }

    async fn produce(
        self: &Rc<Self>,
        parts: Vec<ProducePart>,
        acks_all: bool,
    ) -> Vec<ProduceResult> {
        // Each transactional batch takes its producer's turn at its partition here, in
        // arrival order, before anything awaits (`partition::turns`).
        let placed: Vec<_> = parts
            .iter()
            .map(|p| {
                let part = self.serving(&p.topic, p.partition).and_then(|part| {
                    if acks_all {
                        self.check_in_sync(&p.topic, p.partition, &part)?;
                    }
                    Ok(part)
                });
                let turn = match (&part, &p.transactional_id) {
                    (Ok(part), Some(_)) => txn_turn(part, &p.batch),
                    _ => None,
                };
                (part, turn)
            })
            .collect();
        // The partitions starting the producer's transaction here are verified (or, with
        // transaction version 2, added) in one ask, not one per partition.
        let checked = self.check_txn_at_once(&parts).await;
        let checked = &checked;
        let futs = parts.into_iter().zip(placed).map(|(p, (part, turn))| {
            async move {
                let part = match part {
                    Ok(part) => part,
                    Err(e) => {
                        return ProduceResult {
                            error: Some(e),
                            base_offset: KafkaOffset(-1),
                            log_start_offset: KafkaOffset(-1),
                            timing: None,
                            log_append_time_ms: -1,
                        }
                    }
                };
                let r = match (p.transactional_id.as_deref(), turn) {
                    (Some(id), Some(turn)) => {
                        let verified = self.txn_verified(checked.as_ref(), &part, id, &p).await;
                        match verified {
                            Ok(()) => part.produce_transactional(p.batch, acks_all, turn).await,
                            // The turn ends failed: the producer's later batches wait for
                            // its retry of this one.
                            Err(c) => Err(KafkaError::TxnVerification(c)),
                        }
                    }
                    _ => part.produce(p.batch, acks_all).await,
                };
                let log_start_offset = part.log().log_start_offset();
                match r {
                    Ok(done) => ProduceResult {
                        error: None,
                        base_offset: done.base_offset,
                        log_start_offset,
                        timing: done.timing,
                        log_append_time_ms: done.log_append_time_ms.unwrap_or(-1),
                    },
                    Err(e) => ProduceResult {
                        error: Some(e),
                        base_offset: KafkaOffset(-1),
                        log_start_offset,
                        timing: None,
                        log_append_time_ms: -1,
                    },
                }
            }
        });
        futures::future::join_all(futs).await
    }

    async fn fetch(self: &Rc<Self>, parts: Vec<FetchPart>, limit: FetchLimit) -> Vec<FetchResult> {
        let FetchLimit {
            max_bytes,
            first_batch_whole,
        } = limit;
        let mut out = Vec::with_capacity(parts.len());
        let mut used = 0usize;
        for p in parts {
            let part = match self.serving(&p.topic, p.partition) {
                Ok(part) => part,
                Err(e) => {
                    // Kafka sends a null aborted list with an error from its read path.
                    out.push(FetchResult {
                        error: Some(e),
                        ..Default::default()
                    });
                    continue;
                }
            };
            let budget = p.max_bytes.min(max_bytes.saturating_sub(used));
            let min_one = first_batch_whole && used == 0;
            let r = if budget == 0 && !min_one {
                Ok((RecordSet::default(), p.read_committed.then(Vec::new)))
            } else {
                part.fetch(p.offset, budget, min_one, p.read_committed)
                    .await
            };
            let (error, records, aborted) = match r {
                Ok((b, aborted)) => (None, b, aborted),
                Err(e) => (Some(e), RecordSet::default(), None),
            };
            used += records.len();
            self.metrics.fetched(records.len(), records.record_count());
            out.push(FetchResult {
                error,
                high_watermark: part.high_watermark(),
                log_start_offset: part.log().log_start_offset(),
                last_stable_offset: part.last_stable_offset(),
                records,
                aborted,
            });
        }
        out
    }

    async fn wait_append(
        self: &Rc<Self>,
        parts: Vec<(String, i32, KafkaOffset)>,
        timeout: Duration,
    ) {
        let mut watchers = Vec::new();
        for (topic, p, offset) in parts {
            if let Some(part) = self.partition(&topic, p) {
                if part.high_watermark() > offset {
                    return;
                }
                watchers.push(part.watch_appends());
            }
        }
        if watchers.is_empty() {
            crate::runtime::task::sleep(timeout).await;
            return;
        }
        let any = futures::future::select_all(watchers);
        let _ = crate::runtime::task::timeout(timeout, any).await;
    }

    async fn list_offsets(
        self: &Rc<Self>,
        parts: Vec<ListOffsetsPart>,
    ) -> Vec<(Option<KafkaError>, i64, KafkaOffset, i32)> {
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            let part = match self.serving(&p.topic, p.partition) {
                Ok(part) => part,
                Err(e) => {
                    out.push((Some(e), -1, KafkaOffset(-1), -1));
                    continue;
                }
            };
            let epoch = part.leader_epoch();
            let r = match p.timestamp {
                -2 => Ok((-1, part.log().log_start_offset().0)),
                -1 if p.read_committed => Ok((-1, part.last_stable_offset().0)),
                -1 => Ok((-1, part.high_watermark().0)),
                crate::partition::lookup::MAX_TIMESTAMP => {
                    crate::partition::lookup::offset_of_max_timestamp(&part).await
                }
                ts => crate::partition::lookup::offset_for_time(&part, ts).await,
            };
            out.push(match r {
                Ok((ts, off)) => (None, ts, KafkaOffset(off), epoch),
                Err(e) => (Some(e), -1, KafkaOffset(-1), -1),
            });
        }
        out
    }

    async fn delete_records(
        self: &Rc<Self>,
        parts: Vec<(String, i32, KafkaOffset)>,
    ) -> Vec<PartReply> {
        let mut out = Vec::with_capacity(parts.len());
        for (topic, p, offset) in parts {
            let part = match self.serving(&topic, p) {
                Ok(part) => part,
                Err(e) => {
                    out.push(PartReply::err(e));
                    continue;
                }
            };
            if !part.cleanup().delete {
                // As Kafka: a compact-only topic's records go only by compaction.
                out.push(PartReply::err(KafkaError::PolicyViolation(format!(
                    "records of partition {topic}-{p} can not be deleted due to the configured policy"
                ))));
                continue;
            }
            let hw = part.high_watermark().0;
            let target = if offset.0 == -1 { hw } else { offset.0 };
            if target < 0 || target > hw {
                out.push(PartReply::err(KafkaError::OffsetOutOfRange));
                continue;
            }
            if part.replicated() {
                let start = part.log().log_start_offset();
                let r = if target <= start.0 {
                    Ok(())
                } else {
                    part.propose_log_start(strand_storage::KafkaOffset(target))
                        .await
                };
                out.push(match r {
                    Ok(()) => PartReply {
                        error: None,
                        epoch: -1,
                        offset: part.log().log_start_offset(),
                    },
                    Err(e) => PartReply::err(e),
                });
                continue;
            }
            // The state of the records that go is kept in the checkpoint first.
            let target = strand_storage::KafkaOffset(target);
            part.checkpoint_before_delete(target, "DeleteRecords").await;
            let r = part.log().truncate_prefix(target).await;
            out.push(match r {
                Ok(start) => PartReply {
                    error: None,
                    epoch: -1,
                    offset: start,
                },
                Err(e) => PartReply::err(part.storage_error(e)),
            });
        }
        out
    }

    async fn epoch_end(self: &Rc<Self>, parts: Vec<(String, i32, i32, i32)>) -> Vec<PartReply> {
        let mut out = Vec::with_capacity(parts.len());
        for (topic, p, current, epoch) in parts {
            let part = match self.serving(&topic, p) {
                Ok(part) => part,
                Err(e) => {
                    out.push(PartReply::err(e));
                    continue;
                }
            };
            let ours = part.leader_epoch();
            if current != -1 && current < ours {
                out.push(PartReply::err(KafkaError::FencedLeaderEpoch));
                continue;
            }
            if current > ours {
                out.push(PartReply::err(KafkaError::UnknownLeaderEpoch));
                continue;
            }
            let r = match u64::try_from(epoch) {
                Ok(epoch) => part.epoch_end(epoch).await,
                Err(_) => Ok(None),
            };
            let empty = part.log().last_index() < part.log().first_index();
            out.push(match r {
                Ok(Some((t, o))) => PartReply {
                    error: None,
                    epoch: i32::try_from(t).unwrap_or(i32::MAX),
                    offset: o,
                },
                // No entries yet: the current epoch ends at the log end offset.
                Ok(None) if empty && epoch == ours => PartReply {
                    error: None,
                    epoch: ours,
                    offset: part.log().log_end_offset(),
                },
                Ok(None) => PartReply {
                    error: None,
                    epoch: -1,
                    offset: KafkaOffset(-1),
                },
                Err(e) => PartReply::err(part.storage_error(e)),
            });
        }
        out
    }

    /// `Op::CatchUpTopics`.
    async fn catch_up_topics(self: &Rc<Self>, names: Vec<String>) -> Reply {
        crate::cluster::catch_up(self, |m| names.iter().all(|n| m.topics.contains_key(n))).await;
        Reply::Done
    }

    async fn meta_commands(self: &Rc<Self>, cmds: Vec<Command>) -> Vec<Result<(), MetaError>> {
        let _serial = self.lock_metadata().await;
        if self.clustered() {
            return crate::cluster::meta_commands(self, cmds).await;
        }
        let Some(mut store) = self.take_metastore() else {
            let e = MetaError::Internal("metadata is not on this shard".into());
            return cmds.iter().map(|_| Err(e.clone())).collect();
        };
        let r = store.commit(cmds.clone()).await;
        let snapshot = Arc::new(store.state().clone());
        self.put_metastore(store);
        match r {
            Ok(r) => {
                self.publish(snapshot).await;
                r
            }
            Err(e) => {
                tracing::error!(error = %e, "metadata log write failed");
                let e = MetaError::Internal(format!("metadata log: {e}"));
                cmds.iter().map(|_| Err(e.clone())).collect()
            }
        }
    }

    /// Allocates a producer id that was never handed out before, even across restarts:
    /// ids are reserved in blocks persisted in the metadata log before use.
    async fn allocate_producer_id(self: &Rc<Self>) -> Result<i64, MetaError> {
        if self.clustered() {
            return self.allocate_producer_id_clustered().await;
        }
        loop {
            let reserved = self.metadata().producer_ids_reserved_to;
            let next = self
                .next_producer_id
                .get()
                .max(self.producer_id_floor.get());
            if next < reserved {
                self.next_producer_id.set(next + 1);
                return Ok(next);
            }
            let cmd = Command::ReserveProducerIds {
                owner: None,
                up_to: reserved + PRODUCER_ID_BLOCK,
            };
            let r = self.meta_commands(vec![cmd]).await.pop().unwrap_or(Ok(()));
            // A concurrent allocation may have reserved the block first: that is fine.
            if let Err(e) = r {
                if self.metadata().producer_ids_reserved_to <= reserved {
                    return Err(e);
                }
            }
        }
    }

    /// Cluster mode: every node hands out ids only from blocks it reserved itself (the
    /// controller records each block's owner), so two nodes never hand out the same id.
    async fn allocate_producer_id_clustered(self: &Rc<Self>) -> Result<i64, MetaError> {
        let me = self.config.node_id;
        loop {
            let (next, end) = self.producer_id_block.get();
            if next < end {
                self.producer_id_block.set((next + 1, end));
                return Ok(next);
            }
            let reserved = self.committed_metadata().producer_ids_reserved_to;
            let up_to = reserved + PRODUCER_ID_BLOCK;
            let cmd = Command::ReserveProducerIds {
                up_to,
                owner: Some(me),
            };
            let r = self.meta_commands(vec![cmd]).await.pop().unwrap_or(Ok(()));
            let m = self.committed_metadata();
            if m.producer_ids_reserved_to == up_to && m.producer_ids_owner == Some(me) {
                self.producer_id_block.set((reserved, up_to));
            } else if let Err(e) = r {
                if m.producer_ids_reserved_to == reserved {
                    return Err(e);
                }
            }
        }
    }

    /// The partition if this node serves it to clients. Cluster mode: a partition hosted
    /// elsewhere, or here but led by another node, is NOT_LEADER_OR_FOLLOWER (clients
    /// refresh metadata and retry); without a cluster only unknown partitions fail.
    /// An acks=all produce needs the topic's `min.insync.replicas` replicas in sync, as
    /// in Kafka (checked before the append; NOT_ENOUGH_REPLICAS otherwise). One node is
    /// one replica.
    fn check_in_sync(&self, topic: &str, p: i32, part: &Partition) -> Result<(), KafkaError> {
        let min = part.min_insync_replicas();
        if min <= 1 {
            return Ok(());
        }
        let in_sync = if self.clustered() {
            let meta = self.metadata();
            let Some(t) = meta.topics.get(topic) else {
                return Err(KafkaError::UnknownTopicOrPartition);
            };
            let group = t.group_of(p);
            let (_, epoch) = self.leader_of_group(group);
            self.in_sync_replicas(group, epoch, t.replicas_of(p)).len()
        } else {
            1
        };
        if in_sync < min {
            return Err(KafkaError::NotEnoughReplicas { in_sync, min });
        }
        Ok(())
    }

    pub(crate) fn serving(&self, topic: &str, p: i32) -> Result<Rc<Partition>, KafkaError> {
        match self.partition(topic, p) {
            Some(part) if part.serving() => Ok(part),
            Some(_) => Err(KafkaError::NotLeader),
            None if self.clustered()
                && self
                    .metadata()
                    .topics
                    .get(topic)
                    .is_some_and(|t| p >= 0 && (p as usize) < t.shards.len()) =>
            {
                Err(KafkaError::NotLeader)
            }
            None => Err(KafkaError::UnknownTopicOrPartition),
        }
    }

    pub(super) fn partition(&self, topic: &str, p: i32) -> Option<Rc<Partition>> {
        self.partitions
            .borrow()
            .get(&(topic.to_string(), p))
            .cloned()
    }
}

/// The producer's turn at `part` for a batch that claims to be part of a transaction
/// (`None` for any other, a malformed one included: the partition's checks refuse it).
fn txn_turn(part: &Partition, batch: &bytes::Bytes) -> Option<Turn> {
    let view = strand_wire::RecordBatch::parse(batch.clone()).ok()?;
    view.attributes().is_transactional().then(|| {
        part.txn_turn(
            view.producer_id(),
            view.producer_epoch(),
            view.base_sequence(),
        )
    })
}
