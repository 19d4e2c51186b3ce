//! `GroupStorage`: raft-rs's `Storage` trait over a `LogStore` (ARCHITECTURE.md,
//! Replication). Terms come from the in-memory `LogIndex`; entries from the store.
//!
//! Invariant: answers only what the store holds; raft-rs's unstable entries are not here
//! until the driver appends them from a `Ready`. A snapshot is the compaction point and
//! the store's state beside the log (its data: the Kafka log start offset, 8 bytes
//! big-endian, then at most `SNAPSHOT_STATE_BYTES_MAX` bytes the store ships, opaque
//! here): the partition log is the state machine, and a log is compacted only where
//! retention deleted its data, so a follower that receives one drops its own log and
//! starts there: there are no entries before the point to ship, only what the broker
//! derived from them (its idempotent producers, an offsets partition's groups).

use std::cell::RefCell;

use raft::eraftpb::{Entry, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage};

use crate::error::StoreError;
use crate::log_index::CompactionPoint;
use crate::log_store::LogStore;
use crate::types::{KafkaOffset, RaftIndex, RaftTerm};

/// Bytes of a snapshot's data before the store's state: the Kafka offset after the
/// compaction point.
pub const SNAPSHOT_DATA_BYTES: usize = 8;

/// Most bytes of store state a snapshot carries. A store with more ships none (it says
/// so); the frame limit (`rpc::RPC_FRAME_BYTES_MAX`) must hold it with room to spare.
pub const SNAPSHOT_STATE_BYTES_MAX: usize = 32 * 1024 * 1024;
const _: () = assert!(
    SNAPSHOT_DATA_BYTES + SNAPSHOT_STATE_BYTES_MAX + 1024 * 1024 <= crate::rpc::RPC_FRAME_BYTES_MAX
);

/// A read raft-rs is waiting for: entries `lo..hi` (to send to a follower), and the
/// context to hand back through `RawNode::on_entries_fetched` once the store has them.
#[derive(Debug)]
pub struct WantedEntries {
    pub lo: RaftIndex,
    pub hi: RaftIndex,
    pub context: GetEntriesContext,
}

/// A group's `LogStore` as raft-rs sees it.
#[derive(Debug)]
pub struct GroupStorage<S> {
    store: S,
    /// Reads answered `LogTemporarilyUnavailable`, waiting for the driver to fetch them.
    wanted: RefCell<Vec<WantedEntries>>,
}

impl<S: LogStore> GroupStorage<S> {
    /// Wraps `store`.
    pub fn new(store: S) -> Self {
        Self {
            store,
            wanted: RefCell::new(Vec::new()),
        }
    }

    /// The reads raft-rs waits for (see `WantedEntries`); the caller fetches them into the
    /// store and hands each context back to raft-rs.
    pub fn take_wanted(&self) -> Vec<WantedEntries> {
        std::mem::take(&mut *self.wanted.borrow_mut())
    }

    /// Returns reads taken with `take_wanted` that are still waiting.
    pub fn put_back_wanted(&self, mut wanted: Vec<WantedEntries>) {
        self.wanted.borrow_mut().append(&mut wanted);
    }

    /// Whether raft-rs waits for a read.
    pub fn has_wanted(&self) -> bool {
        !self.wanted.borrow().is_empty()
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
        StoreError::NotInMemory { .. } => {
            raft::Error::Store(raft::StorageError::LogTemporarilyUnavailable)
        }
        other @ (StoreError::NotContiguous { .. }
        | StoreError::Sealed { .. }
        | StoreError::MalformedEntry { .. }
        | StoreError::SyncFailed { .. }) => {
            raft::Error::Store(raft::StorageError::Other(Box::new(other)))
        }
    }
}

/// The store state a snapshot carries after its compaction point (empty when none; call
/// after `compaction_point_of` accepted it).
pub fn snapshot_state(snapshot: &Snapshot) -> bytes::Bytes {
    snapshot
        .data
        .get(SNAPSHOT_DATA_BYTES..)
        .map_or_else(bytes::Bytes::new, |_| {
            snapshot.data.slice(SNAPSHOT_DATA_BYTES..)
        })
}

/// Decodes a snapshot into the compaction point it carries.
pub fn compaction_point_of(snapshot: &Snapshot) -> Result<CompactionPoint, StoreError> {
    let meta = snapshot.get_metadata();
    let malformed = StoreError::MalformedEntry {
        index: RaftIndex(meta.index),
        why: "snapshot data is not a non-negative kafka offset and at most SNAPSHOT_STATE_BYTES_MAX of state",
    };
    let data = snapshot.data.as_ref();
    if data.len() > SNAPSHOT_DATA_BYTES + SNAPSHOT_STATE_BYTES_MAX {
        return Err(malformed);
    }
    let bytes: [u8; SNAPSHOT_DATA_BYTES] = data
        .get(..SNAPSHOT_DATA_BYTES)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| malformed.clone())?;
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
        context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let (lo, hi) = (RaftIndex(low), RaftIndex(high));
        match self.store.entries(lo, hi, max_size.into()) {
            Err(StoreError::NotInMemory { .. }) if context.can_async() => {
                self.wanted
                    .borrow_mut()
                    .push(WantedEntries { lo, hi, context });
                Err(raft::Error::Store(
                    raft::StorageError::LogTemporarilyUnavailable,
                ))
            }
            other => other.map_err(to_raft),
        }
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

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let point = self.store.index().compaction_point();
        if request_index > point.index.0 {
            // Only the compaction point can be shipped; the broker compacts further later.
            return Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        // The configuration shipped is the one at the point: the receiver applies the
        // configuration entries after the point on top of it. A store that does not know it
        // (persisted before it kept its `ConfHistory`) ships the current one, which is
        // right unless a configuration entry follows the point: simple changes applied
        // twice change nothing, but a joint one entered twice or left twice is refused
        // (the receiver's group would be fenced), so none leaves while it is joint.
        let conf_state = match self.store.conf_state_at_point() {
            // raft-rs refuses a snapshot whose configuration lacks its receiver: one added
            // after the point is a learner in it until it applies the entry that added it
            // (early, and harmless: a learner neither votes nor campaigns).
            Some(mut at_point) => {
                let members = at_point.voters.iter().chain(&at_point.learners);
                if !members.chain(&at_point.voters_outgoing).any(|&n| n == to) {
                    at_point.learners.push(to);
                }
                at_point
            }
            None => {
                let current = self.store.conf_state();
                if !current.voters_outgoing.is_empty() {
                    return Err(raft::Error::Store(
                        raft::StorageError::SnapshotTemporarilyUnavailable,
                    ));
                }
                current
            }
        };
        let state = self.store.snapshot_state();
        let mut data = Vec::with_capacity(SNAPSHOT_DATA_BYTES + state.len());
        data.extend_from_slice(&point.kafka_end.0.to_be_bytes());
        if state.len() <= SNAPSHOT_STATE_BYTES_MAX {
            data.extend_from_slice(&state);
        } else {
            tracing::warn!(
                state_bytes = state.len(),
                limit = SNAPSHOT_STATE_BYTES_MAX,
                "snapshot ships without the store's state: it is over the limit"
            );
        }
        let mut snapshot = Snapshot {
            data: data.into(),
            ..Snapshot::default()
        };
        let meta = snapshot.mut_metadata();
        meta.index = point.index.0;
        meta.term = point.term.0;
        meta.set_conf_state(conf_state);
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use raft::eraftpb::{ConfState, Entry};
    use raft::Storage as _;

    use super::*;
    use crate::entry;
    use crate::mem_store::{DurableImage, MemLogStore, SyncBehaviour};
    use crate::types::RaftIndex;

    /// A snapshot ships the configuration at its point, joint or not, whatever the
    /// configuration entries after the point made of it since (see `snapshot`).
    #[test]
    fn a_snapshot_ships_the_configuration_at_its_point() {
        let mut s = MemLogStore::recover(DurableImage::new(&[1, 2, 3]), SyncBehaviour::Honest)
            .expect("an empty image recovers");
        let data = |index| Entry {
            index,
            term: 1,
            data: vec![1; 3].into(),
            context: entry::data_context(1).to_vec().into(),
            ..Entry::default()
        };
        s.append(&[data(1), data(2), data(3), data(4), data(5)])
            .expect("append");
        let joint = ConfState {
            voters: vec![2, 3, 4],
            voters_outgoing: vec![1, 2, 3],
            auto_leave: true,
            ..ConfState::default()
        };
        let moved = ConfState {
            voters: vec![2, 3, 4],
            ..ConfState::default()
        };
        s.set_conf_state(RaftIndex(3), &joint);
        s.set_conf_state(RaftIndex(4), &moved);
        let mut gs = GroupStorage::new(s);
        let shipped = |gs: &mut GroupStorage<MemLogStore>, through: u64| {
            gs.store_mut()
                .compact_through(RaftIndex(through))
                .expect("compact");
            let snap = gs.snapshot(through, 2).expect("a snapshot of the point");
            assert_eq!(snap.get_metadata().index, through);
            snap.get_metadata().get_conf_state().clone()
        };
        assert_eq!(shipped(&mut gs, 2).voters, vec![1, 2, 3]);
        // Node 4 was added after the point: it is a learner in what it receives.
        let to_4 = gs.snapshot(2, 4).expect("a snapshot of the point");
        let conf = to_4.get_metadata().get_conf_state();
        assert_eq!((&conf.voters, &conf.learners), (&vec![1, 2, 3], &vec![4]));
        assert_eq!(shipped(&mut gs, 3), joint);
        let snap_conf = shipped(&mut gs, 4);
        assert_eq!(snap_conf, moved);
        assert_eq!(gs.store().conf_state(), moved);
        // A store without state beside its log ships the point alone.
        let snap = gs.snapshot(4, 2).expect("a snapshot of the point");
        assert_eq!(snap.data.len(), SNAPSHOT_DATA_BYTES);
        assert!(snapshot_state(&snap).is_empty());
    }

    /// A snapshot's data is the Kafka offset after the point, then the store's state (at
    /// most `SNAPSHOT_STATE_BYTES_MAX`); anything else is refused as a peer's bad input.
    #[test]
    fn snapshot_data_is_the_offset_then_at_most_the_state_limit() {
        let snap = |data: Vec<u8>| {
            let mut s = Snapshot {
                data: data.into(),
                ..Snapshot::default()
            };
            s.mut_metadata().index = 7;
            s.mut_metadata().term = 2;
            s
        };
        let mut data = 42i64.to_be_bytes().to_vec();
        data.extend_from_slice(b"state");
        let s = snap(data);
        let point = compaction_point_of(&s).expect("offset and state");
        assert_eq!(
            (point.index, point.term, point.kafka_end),
            (RaftIndex(7), RaftTerm(2), KafkaOffset(42))
        );
        assert_eq!(&snapshot_state(&s)[..], b"state");
        for bad in [
            vec![0; SNAPSHOT_DATA_BYTES - 1],
            (-1i64).to_be_bytes().to_vec(),
            vec![0; SNAPSHOT_DATA_BYTES + SNAPSHOT_STATE_BYTES_MAX + 1],
        ] {
            assert!(compaction_point_of(&snap(bad)).is_err());
        }
        let largest = snap(vec![0; SNAPSHOT_DATA_BYTES + SNAPSHOT_STATE_BYTES_MAX]);
        assert_eq!(snapshot_state(&largest).len(), SNAPSHOT_STATE_BYTES_MAX);
    }
}
