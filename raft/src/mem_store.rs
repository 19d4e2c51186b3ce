//! `MemLogStore`: an in-memory `LogStore` that models durability explicitly, for unit tests
//! and the simulator.
//!
//! Invariant: `durable` is exactly what a crash leaves (plus, at the crash, any prefix of
//! the unsynced appends, as a disk may have written some of them): `live.entries[..dirty_from]`
//! equals `durable.entries[..dirty_from]`, and `sync` copies only the part after `dirty_from`.
//! A failed sync (injected with `fail_next_sync`) leaves `durable` untouched.
//! `SyncBehaviour::LiesAboutSync` is a planted bug: it reports success and persists nothing,
//! so the simulator can prove that it detects lost writes.

use raft::eraftpb::{ConfState, Entry, HardState};

use crate::conf_history::ConfHistory;
use crate::entry;
use crate::error::StoreError;
use crate::log_index::{CompactionPoint, LogIndex};
use crate::log_store::LogStore;
use crate::types::{RaftIndex, RaftTerm};

/// Whether `sync` keeps its promise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncBehaviour {
    /// `sync` persists everything before it.
    Honest,
    /// Planted bug for the simulator's self-test: `sync` says Ok and persists nothing.
    LiesAboutSync,
}

/// What survives a crash.
#[derive(Clone, Debug, Default)]
pub struct DurableImage {
    hard_state: HardState,
    conf_state: ConfState,
    confs: ConfHistory,
    point: CompactionPoint,
    entries: Vec<Entry>,
    /// The applied index when the state was last synced (`LogStore::persisted_applied`).
    applied: u64,
}

impl DurableImage {
    /// A fresh group's image: no entries, the given voters.
    pub fn new(voters: &[u64]) -> Self {
        Self::with_conf(ConfState {
            voters: voters.to_vec(),
            ..ConfState::default()
        })
    }

    fn with_conf(conf_state: ConfState) -> Self {
        Self {
            confs: ConfHistory::at(conf_state.clone()),
            conf_state,
            ..Self::default()
        }
    }
}

impl DurableImage {
    /// A new replica's image of a group whose first voters are `voters` (a partition move
    /// brings it in): it knows itself only as a learner, and learns the rest from the log.
    pub fn joining(voters: &[u64], me: u64) -> Self {
        Self::with_conf(ConfState {
            voters: voters.iter().copied().filter(|&v| v != me).collect(),
            learners: vec![me],
            ..ConfState::default()
        })
    }

    /// Whether the image holds raft index `index` with `term` (a compacted index counts:
    /// it was applied before it was compacted).
    pub fn holds(&self, index: u64, term: u64) -> bool {
        if index <= self.point.index.0 {
            return true;
        }
        let k = usize::try_from(index - self.point.index.0 - 1).unwrap_or(usize::MAX);
        self.entries.get(k).is_some_and(|e| e.term == term)
    }
}

/// See the module doc.
#[derive(Debug)]
pub struct MemLogStore {
    live: DurableImage,
    // Invariant: live.entries[..dirty_from] == durable.entries[..dirty_from].
    dirty_from: usize,
    durable: DurableImage,
    index: LogIndex,
    behaviour: SyncBehaviour,
    fail_next_sync: bool,
    sync_count: u64,
    /// `applied` of the image this store recovered from.
    opened_applied: u64,
}

impl MemLogStore {
    /// A store recovered from `image` (all of it durable).
    pub fn recover(image: DurableImage, behaviour: SyncBehaviour) -> Result<Self, StoreError> {
        let mut index = LogIndex::new(image.point);
        for e in &image.entries {
            let kind = entry::classify(e).map_err(|why| StoreError::MalformedEntry {
                index: RaftIndex(e.index),
                why,
            })?;
            index.push(RaftIndex(e.index), RaftTerm(e.term), kind.record_count())?;
        }
        // As the real store opens: what was applied is sealed.
        let resume = image.applied.min(image.hard_state.commit);
        index.seal_through(RaftIndex(resume.saturating_sub(1)));
        Ok(Self {
            opened_applied: image.applied,
            dirty_from: image.entries.len(),
            live: image.clone(),
            durable: image,
            index,
            behaviour,
            fail_next_sync: false,
            sync_count: 0,
        })
    }

    /// What a crash now leaves: with `unsynced_survivors == 0` the durable image as of the
    /// last sync; otherwise a disk that wrote part of the unsynced tail: any truncation
    /// since the sync took effect and the first `unsynced_survivors` appended entries
    /// survive.
    pub fn crash_image(&self, unsynced_survivors: usize) -> DurableImage {
        let mut image = self.durable.clone();
        let partial_write_possible =
            self.behaviour == SyncBehaviour::Honest && image.point == self.live.point;
        if unsynced_survivors > 0 && partial_write_possible {
            image.entries.truncate(self.dirty_from);
            let unsynced = self.live.entries.get(self.dirty_from..).unwrap_or(&[]);
            let keep = unsynced_survivors.min(unsynced.len());
            image.entries.extend_from_slice(&unsynced[..keep]);
        }
        image
    }

    /// Whether the durable image holds raft index `index` with `term` (no copy).
    pub fn durable_holds(&self, index: u64, term: u64) -> bool {
        self.durable.holds(index, term)
    }

    /// The next `sync` fails (an injected fdatasync error).
    pub fn fail_next_sync(&mut self) {
        self.fail_next_sync = true;
    }

    /// Successful syncs so far.
    pub fn sync_count(&self) -> u64 {
        self.sync_count
    }

    /// Kafka offset just past entry `through`, summed from the entries (for a sealed one,
    /// whose end the index no longer holds).
    fn kafka_end_from_entries(&self, through: RaftIndex) -> Result<crate::KafkaOffset, StoreError> {
        let point = self.index.compaction_point();
        let upto = self.position(RaftIndex(through.0 + 1));
        let mut end = point.kafka_end.0;
        for e in self.live.entries.get(..upto).unwrap_or(&[]) {
            let index = RaftIndex(e.index);
            let kind =
                entry::classify(e).map_err(|why| StoreError::MalformedEntry { index, why })?;
            end += i64::from(kind.record_count());
        }
        Ok(crate::KafkaOffset(end))
    }

    fn position(&self, index: RaftIndex) -> usize {
        let first = self.index.first_index();
        usize::try_from(index.0.saturating_sub(first.0)).unwrap_or(usize::MAX)
    }
}

impl LogStore for MemLogStore {
    fn index(&self) -> &LogIndex {
        &self.index
    }

    fn entries(
        &self,
        lo: RaftIndex,
        hi: RaftIndex,
        max_size_bytes: Option<u64>,
    ) -> Result<Vec<Entry>, StoreError> {
        self.index.check_range(lo, hi)?;
        let (from, to) = (self.position(lo), self.position(hi));
        let mut out = self.live.entries.get(from..to).unwrap_or(&[]).to_vec();
        raft::util::limit_size(&mut out, max_size_bytes);
        Ok(out)
    }

    fn append(&mut self, entries: &[Entry]) -> Result<(), StoreError> {
        let Some(head) = entries.first() else {
            return Ok(());
        };
        self.truncate_suffix(RaftIndex(head.index))?;
        for e in entries {
            let index = RaftIndex(e.index);
            let kind =
                entry::classify(e).map_err(|why| StoreError::MalformedEntry { index, why })?;
            self.index
                .push(index, RaftTerm(e.term), kind.record_count())?;
            self.live.entries.push(e.clone());
        }
        Ok(())
    }

    fn truncate_suffix(&mut self, from: RaftIndex) -> Result<(), StoreError> {
        self.index.truncate_from(from)?;
        let keep = self.position(from);
        if keep < self.live.entries.len() {
            self.live.entries.truncate(keep);
            self.dirty_from = self.dirty_from.min(keep);
        }
        Ok(())
    }

    fn hard_state(&self) -> HardState {
        self.live.hard_state.clone()
    }

    fn set_hard_state(&mut self, hard_state: &HardState) {
        self.live.hard_state = hard_state.clone();
    }

    fn conf_state(&self) -> ConfState {
        self.live.conf_state.clone()
    }

    fn set_conf_state(&mut self, index: RaftIndex, conf_state: &ConfState) {
        self.live.conf_state = conf_state.clone();
        self.live.confs.record(index, conf_state);
    }

    fn conf_state_at_point(&self) -> Option<ConfState> {
        self.live.confs.at_point().cloned()
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        if self.fail_next_sync {
            self.fail_next_sync = false;
            return Err(StoreError::SyncFailed {
                why: "injected fdatasync error",
            });
        }
        if self.behaviour == SyncBehaviour::LiesAboutSync {
            return Ok(());
        }
        if self.durable.point != self.live.point {
            self.durable = self.live.clone();
        } else {
            self.durable.entries.truncate(self.dirty_from);
            let unsynced = self.live.entries.get(self.dirty_from..).unwrap_or(&[]);
            self.durable.entries.extend_from_slice(unsynced);
            self.durable.hard_state = self.live.hard_state.clone();
            self.durable.conf_state = self.live.conf_state.clone();
            self.durable.confs = self.live.confs.clone();
            self.durable.applied = self.live.applied;
        }
        self.dirty_from = self.live.entries.len();
        self.sync_count += 1;
        Ok(())
    }

    fn applied_to(&mut self, index: RaftIndex) {
        self.live.applied = index.0;
        // Sealed at once (the real store seals in steps): the simulator exercises it most.
        self.index
            .seal_through(RaftIndex(index.0.saturating_sub(1)));
    }

    fn persisted_applied(&self) -> Option<RaftIndex> {
        Some(RaftIndex(self.opened_applied))
    }

    fn compact_through(&mut self, through: RaftIndex) -> Result<(), StoreError> {
        let drop = self.position(RaftIndex(through.0 + 1));
        match self.index.kafka_end_at(through) {
            Err(StoreError::Sealed { .. }) => {
                let kafka_end = self.kafka_end_from_entries(through)?;
                self.index.compact_to(CompactionPoint {
                    index: through,
                    term: self.index.term_of(through)?,
                    kafka_end,
                })?;
            }
            _ => self.index.compact_through(through)?,
        }
        self.live.entries.drain(..drop.min(self.live.entries.len()));
        self.live.point = self.index.compaction_point();
        self.live.confs.compact(through);
        // Positions moved: the next sync copies the whole image.
        self.dirty_from = 0;
        Ok(())
    }

    fn restore(
        &mut self,
        point: CompactionPoint,
        conf_state: &ConfState,
        _state: bytes::Bytes,
    ) -> Result<(), StoreError> {
        self.index = LogIndex::new(point);
        self.live.entries.clear();
        self.live.point = point;
        self.live.conf_state = conf_state.clone();
        self.live.confs.restore(conf_state);
        self.dirty_from = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::KafkaOffset;

    fn data(index: u64, term: u64, records: u32) -> Entry {
        Entry {
            index,
            term,
            data: vec![index as u8; 3].into(),
            context: entry::data_context(records).to_vec().into(),
            ..Entry::default()
        }
    }

    fn fresh() -> MemLogStore {
        MemLogStore::recover(DurableImage::new(&[1, 2, 3]), SyncBehaviour::Honest)
            .expect("an empty image recovers")
    }

    fn indexes(image: DurableImage) -> Vec<u64> {
        let store = MemLogStore::recover(image, SyncBehaviour::Honest).expect("recovers");
        let ix = store.index();
        (ix.first_index().0..=ix.last_index().0).collect()
    }

    #[test]
    fn unsynced_appends_vanish_on_crash() {
        let mut s = fresh();
        s.append(&[data(1, 1, 2), data(2, 1, 1)]).expect("append");
        s.sync().expect("sync");
        s.append(&[data(3, 1, 1)]).expect("append");
        assert_eq!(indexes(s.crash_image(0)), vec![1, 2]);
        assert_eq!(indexes(s.crash_image(5)), vec![1, 2, 3]);
        assert_eq!(s.index().kafka_end_at(RaftIndex(3)), Ok(KafkaOffset(4)));
    }

    #[test]
    fn truncation_below_synced_is_undone_by_a_crash_before_sync() {
        let mut s = fresh();
        s.append(&[data(1, 1, 1), data(2, 1, 1), data(3, 1, 1)])
            .expect("append");
        s.sync().expect("sync");
        s.append(&[data(2, 2, 5)]).expect("append truncates 2..");
        assert_eq!(s.index().log_end_offset(), KafkaOffset(6));
        // Either nothing since the sync reached the disk, or the truncation and a prefix of
        // the new tail did.
        assert_eq!(indexes(s.crash_image(0)), vec![1, 2, 3]);
        assert_eq!(indexes(s.crash_image(1)), vec![1, 2]);
        assert_eq!(s.crash_image(1).entries[1].term, 2);
        s.sync().expect("sync");
        let image = s.crash_image(0);
        assert_eq!(image.entries[1].term, 2);
    }

    #[test]
    fn failed_and_lying_syncs_persist_nothing() {
        let mut s = fresh();
        s.append(&[data(1, 1, 1)]).expect("append");
        s.fail_next_sync();
        assert!(s.sync().is_err());
        assert_eq!(indexes(s.crash_image(0)), Vec::<u64>::new());
        let mut liar = MemLogStore::recover(DurableImage::new(&[1]), SyncBehaviour::LiesAboutSync)
            .expect("recovers");
        liar.append(&[data(1, 1, 1)]).expect("append");
        liar.sync().expect("the liar says ok");
        assert_eq!(indexes(liar.crash_image(0)), Vec::<u64>::new());
    }

    #[test]
    fn compaction_keeps_offsets() {
        let mut s = fresh();
        s.append(&[data(1, 1, 2), data(2, 1, 3), data(3, 2, 1)])
            .expect("append");
        s.compact_through(RaftIndex(2)).expect("compact");
        assert_eq!(s.index().first_index(), RaftIndex(3));
        assert_eq!(s.index().kafka_base_of(RaftIndex(3)), Ok(KafkaOffset(5)));
        let got = s
            .entries(RaftIndex(3), RaftIndex(4), None)
            .expect("entries");
        assert_eq!(got.len(), 1);
        s.sync().expect("sync");
        let back = MemLogStore::recover(s.crash_image(0), SyncBehaviour::Honest).expect("ok");
        assert_eq!(back.index().log_end_offset(), KafkaOffset(6));
    }
}
