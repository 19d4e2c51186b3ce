//! Work one shard does for a request: the messages shards exchange and their execution.
//!
//! A request touching partitions on several shards is split once per shard into one
//! [`Op`] and the replies are merged (ARCHITECTURE.md, The shard runtime). Everything in
//! an `Op` is `Send` plain data; partitions never leave their shard.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::channel::oneshot;

use crate::cluster::metadata::{Command, MetaError, Metadata};
use crate::common::errors::KafkaError;

/// Producer ids reserved per metadata-log write.
pub const PRODUCER_ID_BLOCK: i64 = 1000;
use crate::partition::Partition;
use crate::shard::Shard;

/// One partition's batch in a produce.
#[derive(Debug)]
pub struct ProducePart {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The producer's batch bytes.
    pub batch: Bytes,
}

/// Outcome for one partition of a produce.
#[derive(Debug, Clone)]
pub struct ProduceResult {
    /// Error, if any.
    pub error: Option<KafkaError>,
    /// Base offset assigned.
    pub base_offset: i64,
    /// Log start offset.
    pub log_start_offset: i64,
}

/// One partition of a fetch.
#[derive(Debug, Clone)]
pub struct FetchPart {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// First offset wanted.
    pub offset: i64,
    /// `partition_max_bytes`.
    pub max_bytes: usize,
}

/// Outcome for one partition of a fetch.
#[derive(Debug, Clone, Default)]
pub struct FetchResult {
    /// Error, if any.
    pub error: Option<KafkaError>,
    /// High watermark.
    pub high_watermark: i64,
    /// Log start offset.
    pub log_start_offset: i64,
    /// Whole batches, concatenated.
    pub records: Bytes,
}

/// One partition of a ListOffsets.
#[derive(Debug, Clone)]
pub struct ListOffsetsPart {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// -2 earliest, -1 latest, -3 max timestamp, else a timestamp.
    pub timestamp: i64,
}

/// Work sent to a shard.
#[derive(Debug)]
pub enum Op {
    /// Append batches (acks -1 waits for durability).
    Produce {
        parts: Vec<ProducePart>,
        acks_all: bool,
    },
    /// Read batches.
    Fetch {
        parts: Vec<FetchPart>,
        max_bytes: usize,
    },
    /// Resolve when any listed partition's high watermark passes its offset, or timeout.
    WaitAppend {
        parts: Vec<(String, i32, i64)>,
        timeout: Duration,
    },
    /// Offsets by time.
    ListOffsets { parts: Vec<ListOffsetsPart> },
    /// DeleteRecords: move each partition's log start offset (-1 = high watermark).
    DeleteRecords { parts: Vec<(String, i32, i64)> },
    /// OffsetForLeaderEpoch: (topic, partition, current leader epoch, epoch asked).
    EpochEnd { parts: Vec<(String, i32, i32, i32)> },
    /// Open/close partitions for a new metadata snapshot.
    ApplyMetadata(Arc<Metadata>),
    /// Commit metadata commands (shard 0 only) and publish the result to every shard.
    MetaCommands(Vec<Command>),
    /// A single-group request, run on the group's coordinator shard.
    Group {
        /// API key.
        key: i16,
        /// Version.
        version: i16,
        /// Correlation id.
        correlation_id: i32,
        /// Client id.
        client_id: String,
        /// Client host.
        client_host: String,
        /// Request body.
        body: Bytes,
    },
    /// Describe these groups (all coordinated here).
    DescribeGroups(Vec<String>),
    /// List the groups coordinated here.
    ListGroups,
    /// Delete these groups (all coordinated here).
    DeleteGroups(Vec<String>),
    /// Native OffsetCommit outside any generation (run on the group's coordinator).
    CommitOffsets {
        /// Group id.
        group: String,
        /// (topic, partition, offset).
        offsets: Vec<(String, i32, crate::group::state::Committed)>,
    },
    /// Committed offsets of these groups (all coordinated here).
    OffsetFetch(Vec<(String, crate::gateway::kafka::groups::WantedOffsets)>),
    /// Leader changes of Raft groups (group, leader node or -1, epoch), from a shard's
    /// replicator to every shard.
    Leaders(Vec<crate::replication::LeaderChange>),
    /// Cluster mode: leaders another node announced (groups it leads).
    RemoteLeaders(Vec<crate::replication::LeaderChange>),
    /// Counters for admin HTTP.
    Stats,
    /// Hand out a new producer id (shard 0 only).
    AllocateProducerId,
    /// Cluster mode, shard 0: the controller group as this node sees it.
    ControllerView,
    /// Stop accepting, flush, and let the shard exit.
    Shutdown,
}

/// A shard's answer.
#[derive(Debug)]
pub enum Reply {
    /// Per part, in order.
    Produce(Vec<ProduceResult>),
    /// Per part, in order.
    Fetch(Vec<FetchResult>),
    /// (error, timestamp, offset, leader epoch) per part.
    ListOffsets(Vec<(Option<KafkaError>, i64, i64, i32)>),
    /// Per command.
    Meta(Vec<Result<(), MetaError>>),
    /// Per part, in order.
    Parts(Vec<PartReply>),
    /// An encoded response, or why the request failed.
    Encoded(Result<Bytes, String>),
    /// Described groups, in order.
    Described(Vec<kafka_protocol::messages::describe_groups_response::DescribedGroup>),
    /// Listed groups.
    Listed(Vec<kafka_protocol::messages::list_groups_response::ListedGroup>),
    /// Error codes, in order.
    Codes(Vec<i16>),
    /// Offsets per group, in order.
    Offsets(Vec<Result<crate::gateway::kafka::groups::GroupOffsets, i16>>),
    /// A shard's counters.
    Stats(Box<crate::admin::ShardSnapshot>),
    /// A producer id, or why none.
    ProducerId(Result<i64, MetaError>),
    /// A Raft group as this node sees it, if hosted here.
    View(Option<strand_raft::GroupView>),
    /// Done.
    Done,
}

/// A per-partition answer: an error or (epoch, offset).
#[derive(Debug, Clone)]
pub struct PartReply {
    /// Error, if any.
    pub error: Option<KafkaError>,
    /// Leader epoch (OffsetForLeaderEpoch) or -1.
    pub epoch: i32,
    /// The offset answered (low watermark, epoch end offset).
    pub offset: i64,
}

impl PartReply {
    fn err(e: KafkaError) -> PartReply {
        PartReply {
            error: Some(e),
            epoch: -1,
            offset: -1,
        }
    }
}

/// An op and where to send its reply.
pub struct Envelope {
    /// The work.
    pub op: Op,
    /// The reply channel.
    pub reply: oneshot::Sender<Reply>,
}

impl Shard {
    /// Executes `op` on this shard.
    pub async fn execute(self: &Rc<Self>, op: Op) -> Reply {
        match op {
            Op::Produce { parts, acks_all } => Reply::Produce(self.produce(parts, acks_all).await),
            Op::Fetch { parts, max_bytes } => Reply::Fetch(self.fetch(parts, max_bytes).await),
            Op::WaitAppend { parts, timeout } => {
                self.wait_append(parts, timeout).await;
                Reply::Done
            }
            Op::ListOffsets { parts } => Reply::ListOffsets(self.list_offsets(parts).await),
            Op::DeleteRecords { parts } => Reply::Parts(self.delete_records(parts).await),
            Op::EpochEnd { parts } => Reply::Parts(self.epoch_end(parts).await),
            Op::ApplyMetadata(meta) => {
                self.apply_metadata(meta).await;
                Reply::Done
            }
            Op::MetaCommands(cmds) => Reply::Meta(self.meta_commands(cmds).await),
            Op::Group {
                key,
                version,
                correlation_id,
                client_id,
                client_host,
                body,
            } => Reply::Encoded(
                self.run_group_request(key, version, correlation_id, client_id, client_host, body)
                    .await,
            ),
            Op::DescribeGroups(ids) => {
                self.wait_all_groups_loaded().await;
                Reply::Described(crate::gateway::kafka::groups::describe_local(self, ids))
            }
            Op::ListGroups => {
                self.wait_all_groups_loaded().await;
                Reply::Listed(crate::gateway::kafka::groups::list_local(self))
            }
            Op::DeleteGroups(ids) => {
                self.wait_all_groups_loaded().await;
                let mut codes = Vec::with_capacity(ids.len());
                for g in ids {
                    codes.push(match self.coordinator_check(&g) {
                        Ok(()) => self.delete_group(&g).await,
                        Err(error) => error,
                    });
                }
                Reply::Codes(codes)
            }
            Op::CommitOffsets { group, offsets } => {
                self.wait_group_loaded(&group).await;
                Reply::Codes(self.offset_commit(&group, "", -1, offsets).await)
            }
            Op::OffsetFetch(reqs) => {
                self.wait_all_groups_loaded().await;
                Reply::Offsets(crate::gateway::kafka::groups::offset_fetch_local(
                    self, reqs,
                ))
            }
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
            Op::ControllerView => Reply::View(self.replicator().and_then(|r| r.controller_view())),
            Op::Shutdown => {
                self.shutdown().await;
                Reply::Done
            }
        }
    }

    async fn produce(
        self: &Rc<Self>,
        parts: Vec<ProducePart>,
        acks_all: bool,
    ) -> Vec<ProduceResult> {
        let futs = parts.into_iter().map(|p| {
            let part = self.serving(&p.topic, p.partition);
            async move {
                let part = match part {
                    Ok(part) => part,
                    Err(e) => {
                        return ProduceResult {
                            error: Some(e),
                            base_offset: -1,
                            log_start_offset: -1,
                        }
                    }
                };
                let r = part.produce(p.batch, acks_all).await;
                let log_start_offset = part.log().log_start_offset().0;
                match r {
                    Ok(done) => ProduceResult {
                        error: None,
                        base_offset: done.base_offset.0,
                        log_start_offset,
                    },
                    Err(e) => ProduceResult {
                        error: Some(e),
                        base_offset: -1,
                        log_start_offset,
                    },
                }
            }
        });
        futures::future::join_all(futs).await
    }

    async fn fetch(self: &Rc<Self>, parts: Vec<FetchPart>, max_bytes: usize) -> Vec<FetchResult> {
        let mut out = Vec::with_capacity(parts.len());
        let mut used = 0usize;
        for p in parts {
            let part = match self.serving(&p.topic, p.partition) {
                Ok(part) => part,
                Err(e) => {
                    out.push(FetchResult {
                        error: Some(e),
                        ..Default::default()
                    });
                    continue;
                }
            };
            let budget = p.max_bytes.min(max_bytes.saturating_sub(used));
            let min_one = used == 0;
            let r = if budget == 0 && !min_one {
                Ok(Bytes::new())
            } else {
                part.fetch(p.offset, budget, min_one).await
            };
            let (error, records) = match r {
                Ok(b) => (None, b),
                Err(e) => (Some(e), Bytes::new()),
            };
            used += records.len();
            self.metrics.fetched(&records);
            out.push(FetchResult {
                error,
                high_watermark: part.high_watermark().0,
                log_start_offset: part.log().log_start_offset().0,
                records,
            });
        }
        out
    }

    async fn wait_append(self: &Rc<Self>, parts: Vec<(String, i32, i64)>, timeout: Duration) {
        let mut watchers = Vec::new();
        for (topic, p, offset) in parts {
            if let Some(part) = self.partition(&topic, p) {
                if part.high_watermark().0 > offset {
                    return;
                }
                watchers.push(part.watch_appends());
            }
        }
        if watchers.is_empty() {
            crate::shard::sleep(timeout).await;
            return;
        }
        let any = futures::future::select_all(watchers);
        let _ = crate::shard::timeout(timeout, any).await;
    }

    async fn list_offsets(
        self: &Rc<Self>,
        parts: Vec<ListOffsetsPart>,
    ) -> Vec<(Option<KafkaError>, i64, i64, i32)> {
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            let part = match self.serving(&p.topic, p.partition) {
                Ok(part) => part,
                Err(e) => {
                    out.push((Some(e), -1, -1, -1));
                    continue;
                }
            };
            let epoch = part.leader_epoch();
            let r = match p.timestamp {
                -2 => Ok((-1, part.log().log_start_offset().0)),
                -1 => Ok((-1, part.high_watermark().0)),
                ts => crate::gateway::kafka::list_offsets::offset_for_time(&part, ts).await,
            };
            out.push(match r {
                Ok((ts, off)) => (None, ts, off, epoch),
                Err(e) => (Some(e), -1, -1, -1),
            });
        }
        out
    }

    async fn delete_records(self: &Rc<Self>, parts: Vec<(String, i32, i64)>) -> Vec<PartReply> {
        let mut out = Vec::with_capacity(parts.len());
        for (topic, p, offset) in parts {
            let part = match self.serving(&topic, p) {
                Ok(part) => part,
                Err(e) => {
                    out.push(PartReply::err(e));
                    continue;
                }
            };
            let hw = part.high_watermark().0;
            let target = if offset == -1 { hw } else { offset };
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
                        offset: part.log().log_start_offset().0,
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
                    offset: start.0,
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
                    offset: o.0,
                },
                // No entries yet: the current epoch ends at the log end offset.
                Ok(None) if empty && epoch == ours => PartReply {
                    error: None,
                    epoch: ours,
                    offset: part.log().log_end_offset().0,
                },
                Ok(None) => PartReply {
                    error: None,
                    epoch: -1,
                    offset: -1,
                },
                Err(e) => PartReply::err(part.storage_error(e)),
            });
        }
        out
    }

    async fn run_group_request(
        self: &Rc<Self>,
        key: i16,
        version: i16,
        correlation_id: i32,
        client_id: String,
        client_host: String,
        body: Bytes,
    ) -> Result<Bytes, String> {
        let key = kafka_protocol::messages::ApiKey::try_from(key)
            .map_err(|_| "unknown api key".to_string())?;
        let ctx = crate::gateway::kafka::Ctx {
            key,
            version,
            correlation_id,
            client_id,
            client_host,
        };
        let group =
            crate::gateway::kafka::groups::group_of(&ctx, &body).map_err(|e| e.to_string())?;
        self.wait_group_loaded(&group).await;
        crate::gateway::kafka::groups::execute(self, &ctx, &group, body)
            .await
            .map_err(|e| e.to_string())
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

    /// Sends a snapshot to every shard (itself included) and waits until all applied it.
    pub async fn publish(self: &Rc<Self>, snapshot: Arc<Metadata>) {
        let calls = (0..self.count).map(|s| self.call(s, Op::ApplyMetadata(snapshot.clone())));
        futures::future::join_all(calls).await;
    }

    /// Opens partitions this shard now owns; closes and deletes those it no longer does.
    async fn apply_metadata(self: &Rc<Self>, meta: Arc<Metadata>) {
        self.applying_metadata.set(true);
        self.apply_metadata_inner(meta).await;
        self.applying_metadata.set(false);
    }

    async fn apply_metadata_inner(self: &Rc<Self>, meta: Arc<Metadata>) {
        let mut wanted: HashMap<(String, i32), ()> = HashMap::new();
        if self.clustered() {
            for k in crate::cluster::hosted_here(self, &meta) {
                wanted.insert(k, ());
            }
        } else {
            for (name, t) in &meta.topics {
                for (p, &s) in t.shards.iter().enumerate() {
                    if s as usize == self.id {
                        wanted.insert((name.clone(), p as i32), ());
                    }
                }
            }
        }
        let before = self.metadata();
        let stale: Vec<(String, i32)> = self
            .partition_keys()
            .into_iter()
            .filter(|k| !wanted.contains_key(k))
            .collect();
        for (topic, p) in stale {
            crate::cluster::unhost_partition(self, &before, &topic, p);
            if let Some(part) = self.remove_partition(&topic, p) {
                let dir = part.log().dir().to_path_buf();
                drop(part);
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    tracing::warn!(dir = %dir.display(), error = %e, "removing deleted partition");
                }
            }
        }
        for ((topic, p), ()) in wanted {
            let configs = meta
                .topics
                .get(&topic)
                .map(|t| t.configs.clone())
                .unwrap_or_default();
            if let Some(part) = self.partition(&topic, p) {
                let (lc, max) = crate::cluster::topic_config::log_config(&self.config, &configs);
                part.set_config(lc, max);
                if self.clustered() {
                    crate::cluster::refresh_partition(self, &meta, &part);
                }
                continue;
            }
            if let Err(e) = self.open_partition(&topic, p, &configs).await {
                tracing::error!(%topic, partition = p, error = %e, "cannot open partition");
                continue;
            }
            if let Some(part) = self.partition(&topic, p).filter(|_| self.clustered()) {
                crate::cluster::host_partition(self, &meta, part).await;
            }
        }
        if let Some(rep) = self.replicator() {
            rep.learn_peers(crate::cluster::peer_addrs(&meta));
        }
        let me = self.config.node_id;
        if self.id == 0 && before.nodes.contains_key(&me) && !meta.nodes.contains_key(&me) {
            tracing::error!(
                node = me,
                "this node was removed from the cluster (UnregisterBroker): it is not ready \
                 and hosts nothing; stop it (a restart registers it again)"
            );
        }
        self.set_metadata(meta);
    }

    /// The partition if this node serves it to clients. Cluster mode: a partition hosted
    /// elsewhere, or here but led by another node, is NOT_LEADER_OR_FOLLOWER (clients
    /// refresh metadata and retry); without a cluster only unknown partitions fail.
    fn serving(&self, topic: &str, p: i32) -> Result<Rc<Partition>, KafkaError> {
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

    fn partition(&self, topic: &str, p: i32) -> Option<Rc<Partition>> {
        self.partitions
            .borrow()
            .get(&(topic.to_string(), p))
            .cloned()
    }
}

/// Where a part's answer goes in the response: (topic index, partition index).
pub type Slot = (usize, usize);

/// A request's parts grouped by owning shard, each remembering its response slot: the
/// request is split once per shard and the replies merged by slot.
pub struct ShardSplit<T> {
    per_shard: Vec<(Vec<T>, Vec<Slot>)>,
}

impl<T> ShardSplit<T> {
    /// Empty, for `shards` shards.
    pub fn new(shards: usize) -> ShardSplit<T> {
        ShardSplit {
            per_shard: (0..shards).map(|_| (Vec::new(), Vec::new())).collect(),
        }
    }

    /// Adds a part owned by `shard` answering `slot`.
    pub fn push(&mut self, shard: usize, slot: Slot, part: T) {
        if let Some((parts, slots)) = self.per_shard.get_mut(shard) {
            parts.push(part);
            slots.push(slot);
        }
    }

    /// Shards with at least one part.
    pub fn involved(&self) -> Vec<usize> {
        (0..self.per_shard.len())
            .filter(|&s| !self.per_shard[s].0.is_empty())
            .collect()
    }

    /// The parts for `shard`.
    pub fn parts(&self, shard: usize) -> &[T] {
        self.per_shard.get(shard).map_or(&[], |p| &p.0)
    }

    /// The slots for `shard`, in the order of its parts.
    pub fn slots(&self, shard: usize) -> &[Slot] {
        self.per_shard.get(shard).map_or(&[], |p| &p.1)
    }

    /// Consumes the split: (shard, parts, slots) for every involved shard.
    pub fn into_groups(self) -> impl Iterator<Item = (usize, Vec<T>, Vec<Slot>)> {
        self.per_shard
            .into_iter()
            .enumerate()
            .filter(|(_, (parts, _))| !parts.is_empty())
            .map(|(s, (parts, slots))| (s, parts, slots))
    }
}
