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

    /// Records the configuration that applying the configuration entry at `index` gave
    /// (and keeps it in its `ConfHistory`); durable at the next `sync`.
    fn set_conf_state(&mut self, index: RaftIndex, conf_state: &ConfState);

    /// The configuration as of the compaction point, which a snapshot ships
    /// (`ConfHistory`); `None` when unknown (a store persisted before the history was kept).
    fn conf_state_at_point(&self) -> Option<ConfState>;

    /// Makes every change so far durable (write + fdatasync).
    fn sync(&mut self) -> Result<(), StoreError>;

    /// Drops the entries through `through` (already applied and retained elsewhere); the
    /// configuration changes through it fold into the configuration at the point.
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
    /// leader, with the configuration at the point and the `state` the leader's store
    /// shipped); durable at the next `sync`.
    fn restore(
        &mut self,
        point: CompactionPoint,
        conf_state: &ConfState,
        state: bytes::Bytes,
    ) -> Result<(), StoreError>;
}

/// The commit index a replica's log implies past `applied` (where it resumes applying
/// after a restart). raft-rs's leader proposes a configuration change only once it applied
/// every configuration entry before it, so every entry up to a configuration entry that
/// another one follows in the log is committed. The persisted commit index can be older
/// (it is written with a term or vote change, and with an applied configuration entry in a
/// later write than the apply): a restart that did not learn this would resume in a
/// configuration older than one it had applied, and a replica holding the entry that
/// leaves a joint configuration could campaign in the configuration before the joint one,
/// counting only the old voters (found by the storage simulator, seeds 2943 and 13689:
/// two leaders in one term after a move). `applied` when nothing more is implied.
pub fn implied_commit<S: LogStore + ?Sized>(store: &S, applied: RaftIndex) -> RaftIndex {
    let last = store.index().last_index();
    if last <= applied {
        return applied;
    }
    let lo = RaftIndex(applied.0 + 1);
    let Ok(entries) = store.entries(lo, RaftIndex(last.0 + 1), None) else {
        return applied;
    };
    let config = |e: &&Entry| {
        matches!(
            e.get_entry_type(),
            raft::eraftpb::EntryType::EntryConfChange | raft::eraftpb::EntryType::EntryConfChangeV2
        )
    };
    let configs: Vec<u64> = entries.iter().filter(config).map(|e| e.index).collect();
    match configs.as_slice() {
        [.., before_last, _] => RaftIndex(*before_last).max(applied),
        _ => applied,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry;
    use crate::mem_store::{DurableImage, MemLogStore, SyncBehaviour};

    fn data(index: u64) -> Entry {
        Entry {
            index,
            term: 1,
            data: vec![1; 3].into(),
            context: entry::data_context(1).to_vec().into(),
            ..Entry::default()
        }
    }

    fn config(index: u64) -> Entry {
        let mut e = Entry {
            index,
            term: 1,
            ..Entry::default()
        };
        e.set_entry_type(raft::eraftpb::EntryType::EntryConfChangeV2);
        e
    }

    #[test]
    fn a_configuration_entry_followed_by_another_is_committed() {
        let mut s = MemLogStore::recover(DurableImage::new(&[1, 2, 3]), SyncBehaviour::Honest)
            .expect("an empty image recovers");
        s.append(&[
            data(1),
            config(2),
            data(3),
            config(4),
            data(5),
            config(6),
            data(7),
        ])
        .expect("append");
        assert_eq!(implied_commit(&s, RaftIndex(0)), RaftIndex(4));
        assert_eq!(
            implied_commit(&s, RaftIndex(5)),
            RaftIndex(5),
            "one configuration after it"
        );
        assert_eq!(implied_commit(&s, RaftIndex(7)), RaftIndex(7));
        s.truncate_suffix(RaftIndex(4)).expect("truncate");
        assert_eq!(
            implied_commit(&s, RaftIndex(0)),
            RaftIndex(0),
            "the last one may not be"
        );
    }
}
