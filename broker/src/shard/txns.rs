//! The transactional ids a shard coordinates: loading them from its `__transaction_state`
//! partitions (the checkpoint, then the log after it), reloading them when this node
//! becomes a partition's leader, whether this shard coordinates an id now, and writing a
//! transaction's markers at each partition's leader (a shard of this node, or another
//! node through its Kafka listener's WriteTxnMarkers). The requests themselves are the
//! gateway's and the transaction coordinator's (`txn::coordinator`).
//!
//! Invariant: a coordinator never answers from ids that are not loaded yet, and a loaded
//! Prepare* transaction is completed (`txns_resume`, picked up by the shard's
//! transaction sweeper).

use std::rc::Rc;
use std::time::Duration;

use futures::future::LocalBoxFuture;

use super::ops::{spread_codes, Op, Reply, ShardSplit, TxnCheck};
use super::Shard;
use crate::cluster::ClusterHost;
use crate::common::errors::code;
use crate::partition::Partition;
use crate::txn::coordinator::{Markers, TXN_STATE_TOPIC};

/// Transaction version 2: how long a partition leader asks the coordinator again to add
/// its partition while the producer's previous transaction completes (Kafka's
/// `add.partitions.to.txn.retry.backoff.max.ms`).
const TXN_ADD_RETRY_MAX: Duration = Duration::from_millis(100);
/// The wait between those asks (`add.partitions.to.txn.retry.backoff.ms`).
const TXN_ADD_RETRY_BACKOFF: Duration = Duration::from_millis(20);

/// The answer of [`Shard::check_txn_at_once`].
pub(crate) struct TxnChecked {
    /// The partitions asked for (added with transaction version 2, else verified).
    pub partitions: Vec<(String, i32)>,
    /// The coordinator's answer for all of them, as a Produce gets it.
    pub answer: Result<(), i16>,
}

/// The error a Produce gets for a coordinator's answer to its verification or add
/// (Kafka's `AddPartitionsToTxnManager`): a fenced producer is INVALID_PRODUCER_EPOCH, a
/// coordinator that cannot answer NOT_ENOUGH_REPLICAS (retriable for every client), and
/// CONCURRENT_TRANSACTIONS passes only to transaction version 2 producers (`add`).
fn produce_txn_error(c: i16, add: bool) -> i16 {
    match c {
        code::PRODUCER_FENCED => code::INVALID_PRODUCER_EPOCH,
        code::CONCURRENT_TRANSACTIONS if add => c,
        code::CONCURRENT_TRANSACTIONS
        | code::NOT_COORDINATOR
        | code::COORDINATOR_LOAD_IN_PROGRESS
        | code::COORDINATOR_NOT_AVAILABLE
        | code::REQUEST_TIMED_OUT => code::NOT_ENOUGH_REPLICAS,
        other => other,
    }
}

/// How often the sweeper looks for loaded transactions to complete.
pub const TXN_RESUME_CHECK: Duration = Duration::from_millis(100);

impl crate::txn::coordinator::TxnHost for Shard {
    fn txns(
        &self,
    ) -> &std::cell::RefCell<std::collections::HashMap<String, crate::txn::metadata::TxnMetadata>>
    {
        &self.txns
    }

    fn txns_busy(&self) -> &crate::txn::coordinator::BusyIds {
        &self.txns_busy
    }

    fn txn_max_timeout_ms(&self) -> i32 {
        i32::try_from(self.config.transaction_max_timeout_ms).unwrap_or(i32::MAX)
    }

    fn metadata(&self) -> std::sync::Arc<crate::cluster::metadata::Metadata> {
        Shard::metadata(self)
    }

    fn partition(&self, topic: &str, index: i32) -> Option<Rc<Partition>> {
        self.partitions
            .borrow()
            .get(&(topic.to_string(), index))
            .cloned()
    }

    fn txn_coordinator_check(&self, transactional_id: &str) -> Result<(), i16> {
        self.coordinator_check_in(TXN_STATE_TOPIC, transactional_id, &self.txns_loading)
    }

    fn new_producer_id(self: &Rc<Self>) -> LocalBoxFuture<'_, Result<i64, i16>> {
        Box::pin(async move {
            match self.call(0, Op::AllocateProducerId).await {
                Reply::ProducerId(Ok(id)) => Ok(id),
                Reply::ProducerId(Err(e)) => Err(e.kafka_code()),
                _ => Err(code::COORDINATOR_NOT_AVAILABLE),
            }
        })
    }

    fn write_markers(self: &Rc<Self>, markers: Markers) -> LocalBoxFuture<'_, Vec<i16>> {
        Box::pin(self.write_markers_anywhere(markers))
    }

    fn txn_ended(&self, committed: bool, duration: Duration) {
        self.metrics.transaction_ended(committed, duration);
    }
}

impl Shard {
    /// Rebuilds the transactional ids of a `__transaction_state` partition from its
    /// records (when it opens), and asks the sweeper to complete loaded Prepare* ones.
    pub(super) async fn load_txns(&self, part: &Partition) -> anyhow::Result<()> {
        self.replay_txns(part, part.high_watermark()).await
    }

    async fn replay_txns(
        &self,
        part: &Partition,
        end: strand_storage::KafkaOffset,
    ) -> anyhow::Result<()> {
        let (from, records) = part.compacted_checkpoint();
        let from = match records {
            Some(records) => {
                let mut txns = self.txns.borrow_mut();
                for (k, v) in records.records() {
                    crate::txn::records::apply(&mut txns, k, Some(v));
                }
                from
            }
            None => part.log().log_start_offset(),
        };
        let (_, bytes) = crate::partition::checkpoint::replay_batches(part.log(), from, end, |b| {
            crate::txn::coordinator::replay_batch(&mut self.txns.borrow_mut(), b)
        })
        .await?;
        part.metrics().state_replayed(bytes);
        self.txns_resume.set(true);
        Ok(())
    }

    /// Cluster mode, on becoming the leader of a `__transaction_state` partition: forgets
    /// what this node held of its ids as a follower and replays the log. The caller marked
    /// the partition loading (`txns_loading`); it is unmarked once replayed.
    pub(crate) async fn reload_txns(&self, part: &Partition) {
        let partitions = self
            .metadata()
            .topics
            .get(TXN_STATE_TOPIC)
            .map_or(1, |t| t.shards.len());
        self.txns
            .borrow_mut()
            .retain(|id, _| crate::group::partition_for(id, partitions) != part.index);
        if let Err(e) = self.replay_txns(part, part.log().log_end_offset()).await {
            tracing::error!(partition = part.index, error = %format!("{e:#}"),
                "reloading transactional ids after a coordinator change failed");
        }
        self.txns_loading.borrow_mut().remove(&part.index);
    }

    /// Writes `markers` at each partition's leader: shards of this node directly, other
    /// nodes through WriteTxnMarkers. An error code per partition, in order.
    async fn write_markers_anywhere(self: &Rc<Self>, markers: Markers) -> Vec<i16> {
        let meta = self.metadata();
        let mut codes = vec![code::NONE; markers.partitions.len()];
        // Per target: this node's shard, or another node; the slots of its partitions.
        let mut local = ShardSplit::new(self.count);
        let mut remote: std::collections::BTreeMap<i32, Vec<usize>> = Default::default();
        for (i, (t, p)) in markers.partitions.iter().enumerate() {
            let (Some(topic), Some(shard)) = (meta.topics.get(t), meta.shard_of(t, *p)) else {
                codes[i] = code::UNKNOWN_TOPIC_OR_PARTITION;
                continue;
            };
            let leader = if self.clustered() {
                self.leader_of_group(topic.group_of(*p)).0
            } else {
                self.config.node_id
            };
            if leader == self.config.node_id {
                local.push(shard, (0, i), (t.clone(), *p));
            } else if leader < 0 {
                codes[i] = code::NOT_LEADER_OR_FOLLOWER;
            } else {
                remote.entry(leader).or_default().push(i);
            }
        }
        let pick = |slots: &[usize]| Markers {
            partitions: slots
                .iter()
                .map(|&i| markers.partitions[i].clone())
                .collect(),
            ..markers.clone()
        };
        let remote_calls = remote.into_iter().map(|(node, slots)| {
            let m = pick(&slots);
            let meta = meta.clone();
            async move {
                let c = match meta.nodes.get(&node) {
                    Some(n) => crate::cluster::markers::send(&n.host, n.kafka_port, &m).await,
                    None => Vec::new(),
                };
                let slots = slots.into_iter().map(|i| (0, i)).collect::<Vec<_>>();
                (slots, Reply::Codes(c))
            }
        });
        let local_markers = |partitions| {
            Op::WriteMarkers(Markers {
                partitions,
                ..markers.clone()
            })
        };
        let (l, r) = futures::future::join(
            local.call_each(self, local_markers),
            futures::future::join_all(remote_calls),
        )
        .await;
        spread_codes(&mut codes, l);
        spread_codes(&mut codes, r);
        codes
    }

    /// KIP-890 verification on the coordinator shard of the id: the code for a Produce or
    /// TxnOffsetCommit (NONE: verified).
    pub(crate) fn verify_txn(&self, c: &super::ops::TxnCheck) -> i16 {
        let (id, pid, epoch) = (&c.transactional_id, c.producer_id, c.producer_epoch);
        crate::txn::coordinator::verify(self, id, pid, epoch, &c.partitions)
            .err()
            .unwrap_or(code::NONE)
    }

    /// Writes `markers` to partitions this shard leads (Op::WriteMarkers); an offsets
    /// partition's marker also commits or drops the producer's staged group offsets.
    pub(crate) async fn write_markers_local(self: &Rc<Self>, markers: Markers) -> Vec<i16> {
        let kind = if markers.commit {
            strand_wire::MarkerKind::Commit
        } else {
            strand_wire::MarkerKind::Abort
        };
        let marker = strand_wire::Marker {
            kind,
            coordinator_epoch: markers.coordinator_epoch,
        };
        let writes = markers.partitions.iter().map(|(t, p)| {
            let part = self.serving(t, *p);
            async move {
                let part = part.map_err(|e| e.code())?;
                part.append_marker(markers.producer_id, markers.producer_epoch, marker)
                    .await
                    .map_err(|e| e.code())?;
                Ok::<_, i16>(part)
            }
        });
        let done = futures::future::join_all(writes).await;
        let offsets_partitions = self
            .metadata()
            .topics
            .get(crate::group::OFFSETS_TOPIC)
            .map_or(1, |t| t.shards.len());
        done.into_iter()
            .map(|r| match r {
                Ok(part) => {
                    if part.topic == crate::group::OFFSETS_TOPIC {
                        crate::group::coordinator::end_txn_offsets(
                            &mut self.groups.borrow_mut(),
                            (part.index, offsets_partitions),
                            markers.producer_id,
                            markers.commit,
                        );
                    }
                    code::NONE
                }
                Err(c) => c,
            })
            .collect()
    }

    /// KIP-890 for a transactional batch of producer `id` on `part`: unless the producer
    /// has a transaction open here already, its coordinator confirms the partition is in
    /// the transaction (`add`: transaction version 2, adds it, asking again while the
    /// previous transaction completes, for up to TXN_ADD_RETRY_MAX). The error is the one
    /// Kafka gives a Produce.
    pub(crate) async fn verify_txn_append(
        self: &Rc<Self>,
        part: &Partition,
        id: &str,
        batch: &bytes::Bytes,
        add: bool,
    ) -> Result<(), i16> {
        let view =
            strand_wire::RecordBatch::parse(batch.clone()).map_err(|_| code::CORRUPT_MESSAGE)?;
        if part.has_open_txn(view.producer_id(), view.producer_epoch()) {
            return Ok(());
        }
        let check = TxnCheck {
            transactional_id: id.to_string(),
            producer_id: view.producer_id(),
            producer_epoch: view.producer_epoch(),
            partitions: vec![(part.topic.clone(), part.index)],
        };
        self.ask_for_produce(check, add).await
    }

    /// For a Produce's parts on this shard: checks at once every partition whose
    /// transactional batch starts the producer's transaction here (a request carries one
    /// producer's) with its coordinator — one ask, not one per partition, each waiting
    /// for the last. Transaction version 2 adds them; version 1 verifies them (KIP-890
    /// part 1), and a failed verification of several is asked again per partition by the
    /// caller (`verify_txn_append`), so that only the partitions not in the transaction
    /// fail, as Kafka answers. The partitions asked for and the answer
    /// (`verify_txn_append`'s), or `None` when none needs a check.
    pub(crate) async fn check_txn_at_once(
        self: &Rc<Self>,
        parts: &[super::ops::ProducePart],
    ) -> Option<TxnChecked> {
        let mut check: Option<(TxnCheck, bool)> = None;
        for p in parts {
            let Some(id) = &p.transactional_id else {
                continue;
            };
            let Ok(part) = self.serving(&p.topic, p.partition) else {
                continue;
            };
            let Ok(view) = strand_wire::RecordBatch::parse(p.batch.clone()) else {
                continue;
            };
            let (pid, epoch) = (view.producer_id(), view.producer_epoch());
            if !view.attributes().is_transactional() || part.has_open_txn(pid, epoch) {
                continue;
            }
            let (c, add) = check.get_or_insert_with(|| {
                let c = TxnCheck {
                    transactional_id: id.clone(),
                    producer_id: pid,
                    producer_epoch: epoch,
                    partitions: Vec::new(),
                };
                (c, p.add_to_txn)
            });
            if (&c.transactional_id, c.producer_id, c.producer_epoch, *add)
                == (id, pid, epoch, p.add_to_txn)
            {
                c.partitions.push((p.topic.clone(), p.partition));
            }
        }
        let (check, add) = check?;
        let partitions = check.partitions.clone();
        Some(TxnChecked {
            partitions,
            answer: self.ask_for_produce(check, add).await,
        })
    }

    /// Whether the transactional batch of `p` (on `part`, of transactional id `id`) may be
    /// appended: the answer of the request's check (`check_txn_at_once`) when it covered
    /// this partition, except a failed verification of several partitions, which is asked
    /// again for this one alone (only the partitions not in the transaction fail).
    pub(crate) async fn txn_verified(
        self: &Rc<Self>,
        checked: Option<&TxnChecked>,
        part: &Partition,
        id: &str,
        p: &super::ops::ProducePart,
    ) -> Result<(), i16> {
        let asked = checked.filter(|c| {
            c.partitions
                .iter()
                .any(|(t, i)| *t == p.topic && *i == p.partition)
        });
        match asked {
            Some(c) if c.answer.is_ok() || p.add_to_txn || c.partitions.len() == 1 => c.answer,
            _ => {
                self.verify_txn_append(part, id, &p.batch, p.add_to_txn)
                    .await
            }
        }
    }

    /// Asks the check's coordinator to verify (or `add`) its partitions for a Produce:
    /// again while the previous transaction completes, for up to TXN_ADD_RETRY_MAX when
    /// adding; the error is the one Kafka gives a Produce.
    async fn ask_for_produce(self: &Rc<Self>, check: TxnCheck, add: bool) -> Result<(), i16> {
        let deadline = crate::common::clock::now() + TXN_ADD_RETRY_MAX;
        loop {
            match self.verify_with_coordinator(check.clone(), add).await {
                Err(code::CONCURRENT_TRANSACTIONS)
                    if add && crate::common::clock::now() < deadline =>
                {
                    crate::runtime::task::sleep(TXN_ADD_RETRY_BACKOFF).await;
                }
                r => return r.map_err(|c| produce_txn_error(c, add)),
            }
        }
    }

    /// Asks the coordinator of the check's transactional id (a shard of this node, or
    /// another node through AddPartitionsToTxn v4) whether the producer's open transaction
    /// has every partition named, or (`add`) to add them.
    pub async fn verify_with_coordinator(
        self: &Rc<Self>,
        check: TxnCheck,
        add: bool,
    ) -> Result<(), i16> {
        let meta = self.metadata();
        let Some(t) = meta.topics.get(TXN_STATE_TOPIC) else {
            return Err(code::INVALID_TXN_STATE);
        };
        let p = crate::group::partition_for(&check.transactional_id, t.shards.len());
        let leader = if self.clustered() {
            self.leader_of_group(t.group_of(p)).0
        } else {
            self.config.node_id
        };
        if leader != self.config.node_id {
            let Some(n) = meta.nodes.get(&leader) else {
                return Err(code::COORDINATOR_NOT_AVAILABLE);
            };
            let producer = (check.producer_id, check.producer_epoch);
            let (id, parts) = (&check.transactional_id, &check.partitions);
            return crate::cluster::markers::verify(
                &n.host,
                n.kafka_port,
                id,
                producer,
                parts,
                add,
            )
            .await;
        }
        let Some(target) = meta.shard_of(TXN_STATE_TOPIC, p) else {
            return Err(code::COORDINATOR_NOT_AVAILABLE);
        };
        let op = if add {
            Op::AddTxnPartitions(check)
        } else {
            Op::VerifyTxn(check)
        };
        match self.call(target, op).await {
            Reply::Codes(c) => match c.iter().copied().find(|&c| c != code::NONE) {
                None if !c.is_empty() => Ok(()),
                None => Err(code::INVALID_TXN_STATE),
                Some(e) => Err(e),
            },
            _ => Err(code::COORDINATOR_NOT_AVAILABLE),
        }
    }

    /// Runs an op of the transactional ids this shard coordinates, or a describe or list
    /// op of transactions or producers.
    pub(crate) async fn execute_txn_op(self: &Rc<Self>, op: Op) -> Reply {
        match op {
            Op::AddTxnPartitions(c) => {
                self.wait_loaded(TXN_STATE_TOPIC, &c.transactional_id).await;
                let (id, pid, epoch) = (&c.transactional_id, c.producer_id, c.producer_epoch);
                let r =
                    crate::txn::coordinator::add_partitions(self, id, pid, epoch, &c.partitions);
                Reply::Codes(match r.await {
                    Ok(()) => vec![0; c.partitions.len()],
                    Err(crate::txn::coordinator::AddError::All(code)) => {
                        vec![code; c.partitions.len()]
                    }
                    Err(crate::txn::coordinator::AddError::Each(codes)) => codes,
                })
            }
            Op::VerifyTxn(check) => {
                self.wait_loaded(TXN_STATE_TOPIC, &check.transactional_id)
                    .await;
                Reply::Codes(vec![self.verify_txn(&check)])
            }
            Op::DescribeTxns(ids) => {
                for id in &ids {
                    self.wait_loaded(TXN_STATE_TOPIC, id).await;
                }
                Reply::TxnStates(ids.iter().map(|id| self.describe_txn(id)).collect())
            }
            Op::ListTxns(filter) => Reply::TxnList(self.list_txns(&filter)),
            Op::DescribeProducers(parts) => Reply::Producers(
                parts
                    .iter()
                    .map(|(t, p)| self.describe_producers(t, *p))
                    .collect(),
            ),
            _ => Reply::Done,
        }
    }

    /// DescribeTransactions of one id.
    fn describe_txn(
        &self,
        id: &str,
    ) -> kafka_protocol::messages::describe_transactions_response::TransactionState {
        use kafka_protocol::messages::describe_transactions_response::{
            TopicData, TransactionState,
        };
        use kafka_protocol::messages::{ProducerId, TopicName, TransactionalId};
        let base = TransactionState::default()
            .with_transactional_id(TransactionalId(super::groups::s(id)))
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
            .with_transaction_start_time_ms(-1);
        if let Err(c) = crate::txn::coordinator::TxnHost::txn_coordinator_check(self, id) {
            return base.with_error_code(c);
        }
        let txns = self.txns.borrow();
        let Some(m) = txns.get(id) else {
            return base.with_error_code(code::TRANSACTIONAL_ID_NOT_FOUND);
        };
        let mut topics: Vec<TopicData> = Vec::new();
        for (t, p) in &m.partitions {
            match topics.last_mut() {
                Some(last) if last.topic.0.as_str() == t => last.partitions.push(*p),
                _ => topics.push(
                    TopicData::default()
                        .with_topic(TopicName(super::groups::s(t.clone())))
                        .with_partitions(vec![*p]),
                ),
            }
        }
        base.with_transaction_state(super::groups::s(m.state.name()))
            .with_transaction_timeout_ms(m.timeout_ms)
            .with_transaction_start_time_ms(m.start_ms)
            .with_producer_id(ProducerId(m.producer_id))
            .with_producer_epoch(m.producer_epoch)
            .with_topics(topics)
    }

    /// ListTransactions: the ids this shard coordinates now that pass `filter`.
    fn list_txns(
        &self,
        filter: &super::ops::TxnFilter,
    ) -> Vec<kafka_protocol::messages::list_transactions_response::TransactionState> {
        use kafka_protocol::messages::list_transactions_response::TransactionState;
        use kafka_protocol::messages::{ProducerId, TransactionalId};
        let now_ms = crate::common::clock::wall_ms();
        let mut out: Vec<TransactionState> = self
            .txns
            .borrow()
            .values()
            .filter(|m| {
                crate::txn::coordinator::TxnHost::txn_coordinator_check(self, &m.transactional_id)
                    .is_ok()
            })
            .filter(|m| {
                filter.states.is_empty() || filter.states.iter().any(|s| s == m.state.name())
            })
            .filter(|m| {
                filter.producer_ids.is_empty() || filter.producer_ids.contains(&m.producer_id)
            })
            .filter(|m| {
                filter.min_duration_ms < 0
                    || (m.start_ms >= 0
                        && now_ms.saturating_sub(m.start_ms) >= filter.min_duration_ms)
            })
            .map(|m| {
                TransactionState::default()
                    .with_transactional_id(TransactionalId(super::groups::s(
                        m.transactional_id.clone(),
                    )))
                    .with_producer_id(ProducerId(m.producer_id))
                    .with_transaction_state(super::groups::s(m.state.name()))
            })
            .collect();
        out.sort_by(|a, b| a.transactional_id.0.cmp(&b.transactional_id.0));
        out
    }

    /// DescribeProducers of one partition this shard holds.
    fn describe_producers(
        &self,
        topic: &str,
        p: i32,
    ) -> kafka_protocol::messages::describe_producers_response::PartitionResponse {
        use kafka_protocol::messages::describe_producers_response::{
            PartitionResponse, ProducerState,
        };
        use kafka_protocol::messages::ProducerId;
        let base = PartitionResponse::default().with_partition_index(p);
        let part = match self.serving(topic, p) {
            Ok(part) => part,
            Err(e) => return base.with_error_code(e.code()),
        };
        let producers = part
            .producers()
            .into_iter()
            .map(|(v, txn_start)| {
                ProducerState::default()
                    .with_producer_id(ProducerId(v.producer_id))
                    .with_producer_epoch(i32::from(v.epoch))
                    .with_last_sequence(v.last_sequence)
                    .with_last_timestamp(-1)
                    .with_coordinator_epoch(-1)
                    .with_current_txn_start_offset(txn_start)
            })
            .collect();
        base.with_active_producers(producers)
    }
}
