//! `LogStore`: what a Raft group needs from its partition log. The broker implements it
//! over `storage::Log` (frames on O_DIRECT segments); `MemLogStore` implements it in memory
//! for tests and the simulator.
//!
//! Durability contract: `append`, `truncate_suffix`, `set_hard_state` and `set_conf_state`
//! change the log *logically*; only a successful `sync` makes every change before it
//! durable. A crash loses (any suffix of) what was not synced. A failed `sync` leaves the
//! disk unknown: the caller fences the group and never acknowledges from it again.
//! Terms and Kafka offsets are answered from memory through `index()`.

use raft::eraftpb::{ConfState, Entry, HardState};

use crate::error::StoreError;
use crate::log_index::{CompactionPoint, LogIndex};
use crate::types::RaftIndex;

/// A group's Raft log, hard state and configuration. See the module doc.
pub trait LogStore {
    /// Terms and Kafka offsets of every entry, held in memory.
    fn index(&self) -> &LogIndex;

    /// Entries in `lo..hi`, at least one when the range is not empty, then no more than
    /// `max_size_bytes` in total (raft-rs's `limit_size` rule). A store that holds only
    /// part of its log in memory answers `NotInMemory` for the rest; it must hold every
    /// entry after the last `applied_to` (applying cannot wait).
    fn entries(
        &self,
        lo: RaftIndex,
        hi: RaftIndex,
        max_size_bytes: Option<u64>,
    ) -> Result<Vec<Entry>, StoreError>;

    /// Appends `entries` (contiguous, classified by `entry::classify`), first removing
    /// every entry at or after `entries[0].index`.
    fn append(&mut self, entries: &[Entry]) -> Result<(), StoreError>;

    /// Removes every entry at or after `from`.
    fn truncate_suffix(&mut self, from: RaftIndex) -> Result<(), StoreError>;

    /// The hard state (term, vote, commit) as last set.
    fn hard_state(&self) -> HardState;

    /// Records a new hard state; durable at the next `sync`.
    fn set_hard_state(&mut self, hard_state: &HardState);

    /// The voters and learners as last set.
    fn conf_state(&self) -> ConfState;

    /// Records a new configuration; durable at the next `sync`.
    fn set_conf_state(&mut self, conf_state: &ConfState);

    /// Makes every change so far durable (write + fdatasync).
    fn sync(&mut self) -> Result<(), StoreError>;

    /// Drops the entries through `through` (already applied and retained elsewhere).
    fn compact_through(&mut self, through: RaftIndex) -> Result<(), StoreError>;

    /// Every entry through `index` has been applied: a store that keeps unapplied entries
    /// in memory (so that applying never waits for a disk read) may drop them now.
    fn applied_to(&mut self, _index: RaftIndex) {}

    /// The applied index recorded with the persisted state this store opened from: the
    /// configuration read back reflects exactly the configuration entries through it, so a
    /// restart applies again from there (never past a configuration entry it lacks, never
    /// the same one twice). `None`: not recorded, every committed entry counts as applied.
    fn persisted_applied(&self) -> Option<RaftIndex> {
        None
    }

    /// State kept beside the log that a snapshot of the compaction point ships to a
    /// follower (`storage::SNAPSHOT_STATE_BYTES_MAX` at most; opaque to the driver). None by
    /// default.
    fn snapshot_state(&self) -> bytes::Bytes {
        bytes::Bytes::new()
    }

    /// Replaces the whole log by an empty one starting after `point` (a snapshot from the
    /// leader, with the `state` the leader's store shipped); durable at the next `sync`.
    fn restore(
        &mut self,
        point: CompactionPoint,
        conf_state: &ConfState,
        state: bytes::Bytes,
    ) -> Result<(), StoreError>;
}
