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

use crate::errors::KafkaError;
use crate::metadata::{Command, MetaError, Metadata};
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
    /// Open/close partitions for a new metadata snapshot.
    ApplyMetadata(Arc<Metadata>),
    /// Commit metadata commands (shard 0 only) and publish the result to every shard.
    MetaCommands(Vec<Command>),
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
    /// Done.
    Done,
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
            Op::ApplyMetadata(meta) => {
                self.apply_metadata(meta).await;
                Reply::Done
            }
            Op::MetaCommands(cmds) => Reply::Meta(self.meta_commands(cmds).await),
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
            let part = self.partition(&p.topic, p.partition);
            async move {
                let Some(part) = part else {
                    return ProduceResult {
                        error: Some(KafkaError::UnknownTopicOrPartition),
                        base_offset: -1,
                        log_start_offset: -1,
                    };
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
            let Some(part) = self.partition(&p.topic, p.partition) else {
                out.push(FetchResult {
                    error: Some(KafkaError::UnknownTopicOrPartition),
                    ..Default::default()
                });
                continue;
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
            let Some(part) = self.partition(&p.topic, p.partition) else {
                out.push((Some(KafkaError::UnknownTopicOrPartition), -1, -1, -1));
                continue;
            };
            let epoch = part.leader_epoch();
            let r = match p.timestamp {
                -2 => Ok((-1, part.log().log_start_offset().0)),
                -1 => Ok((-1, part.high_watermark().0)),
                ts => crate::kafka::list_offsets::offset_for_time(&part, ts).await,
            };
            out.push(match r {
                Ok((ts, off)) => (None, ts, off, epoch),
                Err(e) => (Some(e), -1, -1, -1),
            });
        }
        out
    }

    async fn meta_commands(self: &Rc<Self>, cmds: Vec<Command>) -> Vec<Result<(), MetaError>> {
        let results = {
            let Some(mut store) = self.take_metastore() else {
                return cmds
                    .iter()
                    .map(|_| Err(MetaError::UnknownTopic("metadata not on this shard".into())))
                    .collect();
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
                    cmds.iter()
                        .map(|_| Err(MetaError::UnknownTopic(format!("metadata log: {e}"))))
                        .collect()
                }
            }
        };
        results
    }

    /// Sends a snapshot to every shard (itself included) and waits until all applied it.
    pub async fn publish(self: &Rc<Self>, snapshot: Arc<Metadata>) {
        let calls = (0..self.count).map(|s| self.call(s, Op::ApplyMetadata(snapshot.clone())));
        futures::future::join_all(calls).await;
    }

    /// Opens partitions this shard now owns; closes and deletes those it no longer does.
    async fn apply_metadata(self: &Rc<Self>, meta: Arc<Metadata>) {
        let mut wanted: HashMap<(String, i32), ()> = HashMap::new();
        for (name, t) in &meta.topics {
            for (p, &s) in t.shards.iter().enumerate() {
                if s as usize == self.id {
                    wanted.insert((name.clone(), p as i32), ());
                }
            }
        }
        let stale: Vec<(String, i32)> = self
            .partition_keys()
            .into_iter()
            .filter(|k| !wanted.contains_key(k))
            .collect();
        for (topic, p) in stale {
            if let Some(part) = self.remove_partition(&topic, p) {
                let dir = part.log().dir().to_path_buf();
                drop(part);
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    tracing::warn!(dir = %dir.display(), error = %e, "removing deleted partition");
                }
            }
        }
        for ((topic, p), ()) in wanted {
            if self.partition(&topic, p).is_some() {
                continue;
            }
            let configs = meta
                .topics
                .get(&topic)
                .map(|t| t.configs.clone())
                .unwrap_or_default();
            if let Err(e) = self.open_partition(&topic, p, &configs).await {
                tracing::error!(%topic, partition = p, error = %e, "cannot open partition");
            }
        }
        self.set_metadata(meta);
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
