//! The messages shards exchange: the work one shard does for a request ([`Op`]), its
//! answer ([`Reply`]), and the split of a request's partitions by owning shard
//! ([`ShardSplit`]). Execution is `exec`'s.
//!
//! A request touching partitions on several shards is split once per shard into one
//! [`Op`] and the replies are merged (ARCHITECTURE.md, The shard runtime). Everything in
//! an `Op` is `Send` plain data; partitions never leave their shard.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::channel::oneshot;

use crate::cluster::metadata::{Command, MetaError, Metadata};
use crate::common::errors::KafkaError;

use strand_storage::KafkaOffset;

/// Producer ids reserved per metadata-log write.
pub const PRODUCER_ID_BLOCK: i64 = 1000;

/// One partition's batch in a produce.
#[derive(Debug)]
pub struct ProducePart {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The producer's batch bytes.
    pub batch: Bytes,
    /// The request's transactional id: a transactional batch is taken only once its
    /// coordinator confirms this partition is in the producer's open transaction (KIP-890).
    pub transactional_id: Option<String>,
    /// Transaction version 2 (Produce v12+): the coordinator adds the partition to the
    /// open transaction instead of only confirming it is in.
    pub add_to_txn: bool,
}

/// Outcome for one partition of a produce.
#[derive(Debug, Clone)]
pub struct ProduceResult {
    /// Error, if any.
    pub error: Option<KafkaError>,
    /// Base offset assigned.
    pub base_offset: KafkaOffset,
    /// Log start offset.
    pub log_start_offset: KafkaOffset,
    /// When its steps happened on the partition's shard (a slow request's timeline).
    pub timing: Option<crate::partition::AppendTiming>,
    /// The append time stamped into the batch (topics with `LogAppendTime`), else -1.
    pub log_append_time_ms: i64,
}

/// One partition of a fetch.
#[derive(Debug, Clone)]
pub struct FetchPart {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// First offset wanted.
    pub offset: KafkaOffset,
    /// `partition_max_bytes`.
    pub max_bytes: usize,
    /// `isolation_level` 1: read only up to the last stable offset, and return the
    /// aborted transactions of the range read.
    pub read_committed: bool,
}

/// Outcome for one partition of a fetch.
#[derive(Debug, Clone, Default)]
pub struct FetchResult {
    /// Error, if any.
    pub error: Option<KafkaError>,
    /// High watermark.
    pub high_watermark: KafkaOffset,
    /// Log start offset.
    pub log_start_offset: KafkaOffset,
    /// Last stable offset.
    pub last_stable_offset: KafkaOffset,
    /// Whole batches.
    pub records: crate::partition::record_set::RecordSet,
    /// read_committed: the aborted transactions of the range read (`None`: read
    /// uncommitted, where Kafka sends null).
    pub aborted: Option<Vec<crate::partition::txn_index::AbortedTxn>>,
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
    /// `isolation_level` 1: latest is the last stable offset.
    pub read_committed: bool,
}

/// A single-group Kafka request as it crosses to the group's coordinator shard: the
/// request header's fields and the undecoded body.
#[derive(Debug)]
pub struct GroupRequest {
    /// API key.
    pub key: i16,
    /// Version.
    pub version: i16,
    /// Correlation id.
    pub correlation_id: i32,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// The connection's principal (the coordinator authorizes per topic with it).
    pub principal: String,
    /// The connection's listener (index in `config.listeners`).
    pub listener: usize,
    /// Request body.
    pub body: Bytes,
}

/// How much one shard's part of a fetch may read: at most `max_bytes`, except that with
/// `first_batch_whole` its first non-empty partition returns its first batch whatever its
/// size (KIP-74; not when the answer has no room for records at all).
#[derive(Clone, Copy, Debug)]
pub struct FetchLimit {
    /// Record bytes.
    pub max_bytes: usize,
    /// Whether the first batch is returned whole.
    pub first_batch_whole: bool,
}

/// What a partition leader asks a transactional id's coordinator before it takes a
/// transactional batch (KIP-890 part 1).
#[derive(Debug, Clone)]
pub struct TxnCheck {
    /// Transactional id.
    pub transactional_id: String,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// (topic, partition) the producer writes to.
    pub partitions: Vec<(String, i32)>,
}

/// ListTransactions' filters (empty lists: no filter).
#[derive(Debug, Clone, Default)]
pub struct TxnFilter {
    /// State names (Kafka's, e.g. "Ongoing").
    pub states: Vec<String>,
    /// Producer ids.
    pub producer_ids: Vec<i64>,
    /// Only transactions open at least this long (ms; negative: no filter).
    pub min_duration_ms: i64,
}

/// One member's work on one share partition (ShareFetch, ShareAcknowledge, a session's
/// end), run on the partition's shard.
#[derive(Debug)]
pub struct ShareWork {
    /// Share group.
    pub group: String,
    /// Member id.
    pub member: String,
    /// Topic.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Acknowledgements to apply first: `(first, last, types)`.
    pub acks: Vec<(i64, i64, Vec<crate::share::partition::AckType>)>,
    /// The member's session ended: its records go back (after the acknowledgements).
    pub release: bool,
    /// Records to acquire afterwards, about (0: none).
    pub max_records: usize,
    /// Bytes of records to read at most.
    pub max_bytes: usize,
}

/// What `ShareWork` did.
#[derive(Debug, Default)]
pub struct ShareDone {
    /// The partition's error (the fetch's).
    pub error: i16,
    /// The acknowledgements' error.
    pub ack_error: i16,
    /// Whole batches holding the acquired records (and maybe others, which the client
    /// skips).
    pub records: Bytes,
    /// The acquired ranges with their delivery counts.
    pub acquired: Vec<crate::share::partition::Acquired>,
    /// The partition's high watermark when the work ran (a waiting fetch waits past it).
    pub high_watermark: i64,
}

/// Work sent to a shard.
#[derive(Debug)]
pub enum Op {
    /// Append batches (acks -1 waits for durability).
    Produce {
        parts: Vec<ProducePart>,
        acks_all: bool,
    },
    /// Share-group work on share partitions of this shard, in order.
    Share(Vec<ShareWork>),
    /// Write a share partition's state to its `__share_group_state` partition (here),
    /// durably; answered `Codes` with one code.
    WriteShareState(
        crate::share::records::ShareKey,
        crate::share::partition::ShareState,
    ),
    /// Forget a deleted share group, or some of its partitions, on this shard
    /// (`Shard::forget_share_group`); answered `Codes` with one code.
    ForgetShareGroup(crate::share::records::Forget),
    /// The persisted state of a share partition (its `__share_group_state` partition is
    /// here), for its data partition's leader at the leader epoch given.
    ReadShareState(crate::share::records::ShareKey, i32),
    /// Read batches, within `limit`.
    Fetch {
        parts: Vec<FetchPart>,
        limit: FetchLimit,
    },
    /// Resolve when any listed partition's high watermark passes its offset, or timeout.
    WaitAppend {
        parts: Vec<(String, i32, KafkaOffset)>,
        timeout: Duration,
    },
    /// Offsets by time.
    ListOffsets { parts: Vec<ListOffsetsPart> },
    /// DeleteRecords: move each partition's log start offset (offset -1 = high watermark).
    DeleteRecords {
        parts: Vec<(String, i32, KafkaOffset)>,
    },
    /// OffsetForLeaderEpoch: (topic, partition, current leader epoch, epoch asked).
    EpochEnd { parts: Vec<(String, i32, i32, i32)> },
    /// Open/close partitions for a new metadata snapshot.
    ApplyMetadata(Arc<Metadata>),
    /// Commit metadata commands (shard 0 only) and publish the result to every shard.
    MetaCommands(Vec<Command>),
    /// Cluster mode, shard 0: catch up with the controller log until these topics are
    /// known or nothing committed is missing (`cluster::catch_up`); answers `Done`.
    CatchUpTopics(Vec<String>),
    /// A single-group request, run on the group's coordinator shard by the gateway's
    /// handler (`Shard::run_group_request`).
    Group(GroupRequest),
    /// Describe these groups (all coordinated here).
    DescribeGroups(Vec<String>),
    /// Describe these consumer-protocol groups (all coordinated here; KIP-848).
    DescribeConsumerGroups(Vec<String>),
    /// Describe these share groups (all coordinated here; KIP-932).
    DescribeShareGroups(Vec<String>),
    /// Note on share group `group` (coordinated here) that `topics` hold a state (`true`:
    /// their offsets were altered) or no longer do (deleted); answered `Codes` with one.
    NoteShareTopics {
        group: String,
        topics: Vec<String>,
        initialized: bool,
    },
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
    /// With `require_stable` (the bool), a partition an open transaction holds an offset
    /// of gets UNSTABLE_OFFSET_COMMIT.
    OffsetFetch(Vec<crate::group::coordinator::OffsetFetchAsk>, bool),
    /// Leader changes of Raft groups (group, leader node or -1, epoch), from a shard's
    /// replicator to every shard.
    Leaders(Vec<crate::replication::LeaderChange>),
    /// Cluster mode: leaders another node announced (groups it leads).
    RemoteLeaders(Vec<crate::replication::LeaderChange>),
    /// Counters for admin HTTP.
    Stats,
    /// Hand out a new producer id (shard 0 only).
    AllocateProducerId,
    /// Write a transaction's markers to partitions this shard leads (codes in order).
    WriteMarkers(crate::cluster::markers::Markers),
    /// AddPartitionsToTxn v4 (a broker's batched form, not verify-only) on the id's
    /// coordinator shard: a code per partition.
    AddTxnPartitions(TxnCheck),
    /// DescribeTransactions of these ids (all coordinated by this shard's partitions).
    DescribeTxns(Vec<String>),
    /// ListTransactions: the ids this shard coordinates that pass the filter.
    ListTxns(TxnFilter),
    /// DescribeProducers of these partitions (all on this shard).
    DescribeProducers(Vec<(String, i32)>),
    /// KIP-890 verification at the coordinator shard of a transactional id: whether the
    /// producer's open transaction includes these partitions (one code).
    VerifyTxn(TxnCheck),
    /// Cluster mode, shard 0: the controller group as this node sees it.
    ControllerView,
    /// Shard 0: count a new Kafka connection from this address, or refuse it
    /// (shard::admission).
    AdmitConnection(std::net::IpAddr),
    /// Shard 0: a connection `AdmitConnection` counted has ended.
    ReleaseConnection(std::net::IpAddr),
    /// Answered once this shard has applied its first metadata snapshot (its partitions
    /// are open), or is stopping.
    FirstMetadata,
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
    ListOffsets(Vec<(Option<KafkaError>, i64, KafkaOffset, i32)>),
    /// Per command.
    Meta(Vec<Result<(), MetaError>>),
    /// Per part, in order.
    Parts(Vec<PartReply>),
    /// An encoded response, or why the request failed.
    Encoded(Result<Bytes, String>),
    /// Described groups, in order.
    Described(Vec<kafka_protocol::messages::describe_groups_response::DescribedGroup>),
    /// Described consumer-protocol groups, in order.
    DescribedConsumerGroups(
        Vec<kafka_protocol::messages::consumer_group_describe_response::DescribedGroup>,
    ),
    /// What each `ShareWork` did, in order.
    Share(Vec<ShareDone>),
    /// A share partition's persisted state, if any.
    ShareState(Result<Option<crate::share::partition::ShareState>, i16>),
    /// Described share groups, in order.
    DescribedShareGroups(Vec<super::share::ShareDescribed>),
    /// Listed groups.
    Listed(Vec<kafka_protocol::messages::list_groups_response::ListedGroup>),
    /// Error codes, in order.
    Codes(Vec<i16>),
    /// DescribeTransactions answers, in order.
    TxnStates(Vec<kafka_protocol::messages::describe_transactions_response::TransactionState>),
    /// ListTransactions answers.
    TxnList(Vec<kafka_protocol::messages::list_transactions_response::TransactionState>),
    /// DescribeProducers answers, in order.
    Producers(Vec<kafka_protocol::messages::describe_producers_response::PartitionResponse>),
    /// Offsets per group, in order.
    Offsets(Vec<Result<crate::group::coordinator::GroupOffsets, i16>>),
    /// A shard's counters.
    Stats(Box<crate::common::metrics::ShardSnapshot>),
    /// A producer id, or why none.
    ProducerId(Result<i64, MetaError>),
    /// A Raft group as this node sees it, if hosted here.
    View(Option<strand_raft::GroupView>),
    /// A connection admitted, or why not.
    Admission(Result<(), crate::shard::admission::Refusal>),
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
    pub offset: KafkaOffset,
}

impl PartReply {
    pub(crate) fn err(e: KafkaError) -> PartReply {
        PartReply {
            error: Some(e),
            epoch: -1,
            offset: KafkaOffset(-1),
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

/// Where a part's answer goes in the response: (topic index, partition index).
pub type Slot = (usize, usize);

/// Puts each shard's `Reply::Codes` into `codes` at its slots' partition index; a part
/// its shard left unanswered gets REQUEST_TIMED_OUT.
pub fn spread_codes(codes: &mut [i16], replies: Vec<(Vec<Slot>, Reply)>) {
    for (slots, reply) in replies {
        let answered = match reply {
            Reply::Codes(c) => c,
            _ => Vec::new(),
        };
        for (k, (_, i)) in slots.into_iter().enumerate() {
            if let Some(c) = codes.get_mut(i) {
                *c = answered
                    .get(k)
                    .copied()
                    .unwrap_or(crate::common::errors::code::REQUEST_TIMED_OUT);
            }
        }
    }
}

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

    /// Sends every involved shard one `op(its parts)`, all at once: each reply with the
    /// slots of the parts it answers, in their order.
    pub async fn call_each(
        self,
        shard: &std::rc::Rc<super::Shard>,
        op: impl Fn(Vec<T>) -> Op,
    ) -> Vec<(Vec<Slot>, Reply)> {
        let calls = self.into_groups().map(|(s, parts, slots)| {
            let o = op(parts);
            async move { (slots, shard.call(s, o).await) }
        });
        futures::future::join_all(calls).await
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
