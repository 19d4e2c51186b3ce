//! `GroupStorage`: raft-rs's `Storage` trait over a `LogStore` (ARCHITECTURE.md,
//! Replication). Terms come from the in-memory `LogIndex`; entries from the store.
//!
//! Invariant: answers only what the store holds; raft-rs's unstable entries are not here
//! until the driver appends them from a `Ready`. A snapshot is the compaction point alone
//! (its data is the Kafka log start offset, 8 bytes big-endian): the partition log is the
//! state machine, so a follower that receives one starts its log there. Shipping the
//! compacted segments with it is not done yet.

use raft::eraftpb::{Entry, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage};

use crate::error::StoreError;
use crate::log_index::CompactionPoint;
use crate::log_store::LogStore;
use crate::types::{KafkaOffset, RaftIndex, RaftTerm};

/// Bytes of a snapshot's data: the Kafka offset after the compaction point.
pub const SNAPSHOT_DATA_BYTES: usize = 8;

/// A group's `LogStore` as raft-rs sees it.
#[derive(Debug)]
pub struct GroupStorage<S> {
    store: S,
}

impl<S: LogStore> GroupStorage<S> {
    /// Wraps `store`.
    pub fn new(store: S) -> Self {
        Self { store }
    }

    /// The wrapped store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The wrapped store, to append and sync from a `Ready`.
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }
}

fn to_raft(e: StoreError) -> raft::Error {
    match e {
        StoreError::Compacted { .. } => raft::Error::Store(raft::StorageError::Compacted),
        StoreError::Unavailable { .. } => raft::Error::Store(raft::StorageError::Unavailable),
        other @ (StoreError::NotContiguous { .. }
        | StoreError::MalformedEntry { .. }
        | StoreError::SyncFailed { .. }) => {
            raft::Error::Store(raft::StorageError::Other(Box::new(other)))
        }
    }
}

/// Decodes a snapshot into the compaction point it carries.
pub fn compaction_point_of(snapshot: &Snapshot) -> Result<CompactionPoint, StoreError> {
    let meta = snapshot.get_metadata();
    let malformed = StoreError::MalformedEntry {
        index: RaftIndex(meta.index),
        why: "snapshot data is not an 8-byte non-negative kafka offset",
    };
    let bytes: [u8; SNAPSHOT_DATA_BYTES] = snapshot
        .data
        .as_ref()
        .try_into()
        .map_err(|_| malformed.clone())?;
    let kafka_end = i64::from_be_bytes(bytes);
    if kafka_end < 0 {
        return Err(malformed);
    }
    Ok(CompactionPoint {
        index: RaftIndex(meta.index),
        term: RaftTerm(meta.term),
        kafka_end: KafkaOffset(kafka_end),
    })
}

impl<S: LogStore> Storage for GroupStorage<S> {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.store.hard_state(),
            self.store.conf_state(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        self.store
            .entries(RaftIndex(low), RaftIndex(high), max_size.into())
            .map_err(to_raft)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.store
            .index()
            .term_of(RaftIndex(idx))
            .map(|t| t.0)
            .map_err(to_raft)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.store.index().first_index().0)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.store.index().last_index().0)
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let point = self.store.index().compaction_point();
        if request_index > point.index.0 {
            // Only the compaction point can be shipped; the broker compacts further later.
            return Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        let mut snapshot = Snapshot {
            data: point.kafka_end.0.to_be_bytes().to_vec().into(),
            ..Snapshot::default()
        };
        let meta = snapshot.mut_metadata();
        meta.index = point.index.0;
        meta.term = point.term.0;
        meta.set_conf_state(self.store.conf_state());
        Ok(snapshot)
    }
}
