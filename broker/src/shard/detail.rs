//! What a shard reports of its partitions, groups and health at scrape time
//! (`/metrics`, `/v1/status`): plain data gathered on the shard's own thread.

use super::Shard;
use crate::cluster::ClusterHost;

/// Replicas of every partition without a cluster (ARCHITECTURE.md, Replication).
const REPLICAS_PER_PARTITION: u64 = 1;

/// What `/metrics` and `/v1/status` show of one partition.
fn snapshot(
    p: &crate::partition::Partition,
    now_ms: i64,
) -> crate::common::metrics::PartitionSnapshot {
    crate::common::metrics::PartitionSnapshot {
        topic: p.topic.clone(),
        partition: p.index,
        high_watermark: p.high_watermark().0,
        log_end_offset: p.log().log_end_offset().0,
        size_bytes: p.log().size_bytes(),
        fenced: p.log().fenced().is_some(),
        serving: p.serving(),
        dirty: p
            .cleanable(now_ms)
            .map(|c| (c.dirty_bytes, c.dirty_ratio())),
        last_clean_ms: p.last_clean_ms(),
        last_stable_offset: p.last_stable_offset().0,
        open_transactions: p.open_transactions(),
    }
}

/// Collects the detail of `shard` (runs on that shard).
pub fn detail(shard: &Shard) -> crate::common::metrics::ShardDetail {
    let meta = shard.metadata();
    let parts = shard.partitions.borrow();
    let now_ms = crate::common::clock::wall_ms();
    let partitions: Vec<crate::common::metrics::PartitionSnapshot> =
        parts.values().map(|p| snapshot(p, now_ms)).collect();
    let mut leaderless = 0;
    let mut under_replicated = 0;
    let rpc_dropped_frames = shard.replicator().map_or(0, |r| r.rpc_dropped_frames());
    let rpc_tls_refused = shard.replicator().map_or(0, |r| r.rpc_tls_refused());
    let raft_append_acks = shard.replicator().map_or_else(
        || crate::common::metrics::Histogram::default().snapshot(),
        |r| r.append_acks(),
    );
    if let Some(rep) = shard.replicator() {
        // Cluster mode: what the Raft groups of this shard say after their last turn.
        let h = rep.health();
        leaderless = h.leaderless;
        under_replicated = h.under_replicated;
    }
    for (name, t) in meta.topics.iter().filter(|_| !shard.clustered()) {
        for (k, &s) in t.shards.iter().enumerate() {
            if s as usize != shard.id {
                continue;
            }
            let key = (name.clone(), i32::try_from(k).unwrap_or(i32::MAX));
            let serving = parts.get(&key).filter(|p| p.log().fenced().is_none());
            match serving {
                None => leaderless += 1,
                Some(_) => {
                    // The leader itself is the one in-sync replica.
                    let in_sync = 1;
                    if in_sync < REPLICAS_PER_PARTITION {
                        under_replicated += 1;
                    }
                }
            }
        }
    }
    let committed = shard
        .groups
        .borrow()
        .values()
        .flat_map(|g| {
            g.offsets.iter().map(|((topic, partition), c)| {
                crate::common::metrics::CommittedSnapshot {
                    group: g.id.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                    offset: c.offset,
                }
            })
        })
        .collect();
    let share_partitions = share_partitions(shard);
    let (transactions_by_state, oldest_transaction_ms) = transactions(shard, now_ms);
    crate::common::metrics::ShardDetail {
        transactions_by_state,
        oldest_transaction_ms,
        in_flight_bytes: shard.in_flight_bytes_used(),
        partitions,
        committed,
        share_partitions,
        leaderless_partitions: leaderless,
        under_replicated_partitions: under_replicated,
        metadata_log_writable: shard.metadata_log_writable(),
        rpc_dropped_frames,
        rpc_tls_refused,
        raft_append_acks,
        fenced_groups: shard.replicator().map_or(0, |r| r.fenced_groups()),
    }
}

/// The transactional ids `shard` coordinates now, counted by state, and the age of its
/// oldest open transaction (ms).
fn transactions(shard: &Shard, now_ms: i64) -> (Vec<(&'static str, u64)>, u64) {
    let mut by_state: std::collections::BTreeMap<&'static str, u64> = Default::default();
    let mut oldest_ms = 0u64;
    for m in shard.txns.borrow().values() {
        *by_state.entry(m.state.name()).or_default() += 1;
        if m.state == crate::txn::metadata::TxnState::Ongoing && m.start_ms >= 0 {
            oldest_ms = oldest_ms.max(u64::try_from(now_ms - m.start_ms).unwrap_or(0));
        }
    }
    (by_state.into_iter().collect(), oldest_ms)
}

/// The share partitions (KIP-932) of this shard's partitions: start offset and records in
/// flight now (a lock that ran out counts as given back).
fn share_partitions(shard: &Shard) -> Vec<crate::common::metrics::ShareSnapshot> {
    let now_ms = crate::common::clock::mono_ms();
    shard
        .share_partitions
        .borrow()
        .iter()
        .map(|((group, topic, partition), sp)| {
            let (available, acquired, archived) = sp.in_flight_at(now_ms);
            crate::common::metrics::ShareSnapshot {
                group: group.clone(),
                topic: topic.clone(),
                partition: *partition,
                start: sp.start(),
                available: available as u64,
                acquired: acquired as u64,
                archived,
            }
        })
        .collect()
}
