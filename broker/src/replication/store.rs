//! `RaftLogStore`: a partition's Raft log (`strand_raft::LogStore`) over its storage-engine
//! log (ARCHITECTURE.md, Replication: the partition log *is* the Raft log). Entries are
//! frames; the hard state, the members and the compaction point live in the shard's
//! `RaftJournal` (one append per turn for all its groups).
//!
//! raft-rs drives the store synchronously, the disk is asynchronous: appends and suffix
//! truncations are staged in memory and taken as one [`PersistJob`] per loop turn, which
//! the shard's replication loop runs (truncate, append, one fdatasync; the state goes to
//! the journal when term, vote or members changed) before `sync` reports its outcome.
//!
//! Invariants: `index` always describes the logical log (staged changes included); every
//! entry after the last applied one is held in `mem` (applying never waits for the disk);
//! older entries come from the batch cache or are fetched asynchronously
//! (`NotInMemory`); `sync` is Ok only when every staged change reached the disk; after a
//! failed persist the store stays failed (the group is fenced). The commit index is
//! written only with a term/vote change (a stale commit index is relearned), so steady
//! produce costs one fdatasync per partition per turn.
//!
//! Frames of term 0 (written by a single node before the cluster: an upgraded data
//! directory) are entries of term 1 here ([`raft_term`]): raft-rs reads term 0 as "no such
//! entry", so a replica lacking them would accept what follows them. Every replica sees
//! the same terms (a copy is stored with term 1), and no leader ever wrote term 1 entries
//! before them: the group's first term was led by the only node holding them.

use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use bytes::Bytes;
use raft::eraftpb::{ConfState, Entry, EntryType, HardState};
use serde::{Deserialize, Serialize};
use strand_raft::entry::{classify, data_context};
use strand_raft::{
    raft_term, CompactionPoint, ConfHistory, KafkaOffset, LogIndex, LogStore, RaftIndex, RaftTerm,
    StoreError, FIRST_TERM,
};
use strand_storage::{AppendEntry, FrameHeader, FrameKind, LogFrame, StorageError};

use crate::partition::Partition;

/// Where earlier versions kept a group's state, in the partition directory (read when the
/// journal has none for the group).
pub const STATE_FILE: &str = "raft-state.json";
/// Applied entries left unsealed before the store seals them (`LogIndex::seal_through`):
/// the index holds at most about this many applied entries one by one. (A few in unit
/// tests, so that they seal.)
const SEAL_STEP_ENTRIES: u64 = if cfg!(test) { 8 } else { 512 };
/// The group's state (with its applied index) is written again once this many bytes of
/// entries were appended since it last was, so that an open, which reads the log from the
/// persisted applied index on, reads about this much of an applied log, not all of it
/// since the last election. (A few KiB in unit tests.)
const STATE_APPLIED_STEP_BYTES: u64 = if cfg!(test) { 4 << 10 } else { 16 << 20 };
/// Bytes read per window when the log is scanned at open.
const OPEN_SCAN_WINDOW_BYTES: usize = 4 << 20;

/// A group's persisted Raft state: kept in the shard's `RaftJournal` (earlier versions
/// wrote it to `STATE_FILE` in the partition directory, which is still read when the
/// journal has no state for the group).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct StateFile {
    pub(crate) term: u64,
    pub(crate) vote: u64,
    pub(crate) commit: u64,
    pub(crate) voters: Vec<u64>,
    /// Nodes that follow without voting (a joined node in the controller group).
    #[serde(default)]
    pub(crate) learners: Vec<u64>,
    /// The rest of a joint configuration (a partition move): the outgoing voters, the
    /// learners it will have, and whether the leader leaves it on its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) voters_outgoing: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) learners_next: Vec<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) auto_leave: bool,
    /// The applied index when this state was written: the configuration above reflects
    /// the configuration entries through it (`LogStore::persisted_applied`). Absent in a
    /// file of an older version (then the commit index counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) applied: Option<u64>,
    /// The compaction point (retention, or a snapshot installed from the leader): written
    /// before any segment it covers is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) compacted: Option<Compacted>,
    /// The configuration history (`ConfHistory`): the configuration at the compaction
    /// point (the one without an index) and after each configuration entry applied since.
    /// Absent in a file of an older version: the configuration at the point is unknown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) confs: Vec<ConfFile>,
}

/// A persisted configuration of the history (see `StateFile::confs`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct ConfFile {
    /// The configuration entry that gave it; `None`: the configuration at the point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    index: Option<u64>,
    voters: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    learners: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    voters_outgoing: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    learners_next: Vec<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    auto_leave: bool,
}

impl ConfFile {
    fn of(index: Option<RaftIndex>, c: &ConfState) -> Self {
        Self {
            index: index.map(|i| i.0),
            voters: c.voters.clone(),
            learners: c.learners.clone(),
            voters_outgoing: c.voters_outgoing.clone(),
            learners_next: c.learners_next.clone(),
            auto_leave: c.auto_leave,
        }
    }

    fn conf(&self) -> ConfState {
        ConfState {
            voters: self.voters.clone(),
            learners: self.learners.clone(),
            voters_outgoing: self.voters_outgoing.clone(),
            learners_next: self.learners_next.clone(),
            auto_leave: self.auto_leave,
            ..ConfState::default()
        }
    }

    /// The history a state file holds.
    fn history(files: &[ConfFile]) -> ConfHistory {
        let at_point = files.iter().find(|f| f.index.is_none()).map(Self::conf);
        let changes = files
            .iter()
            .filter_map(|f| Some((RaftIndex(f.index?), f.conf())))
            .collect();
        ConfHistory::from_parts(at_point, changes)
    }

    /// The state file form of `history`.
    fn files(history: &ConfHistory) -> Vec<ConfFile> {
        let at_point = history.at_point().map(|c| Self::of(None, c));
        let changes = history.changes().iter().map(|(i, c)| Self::of(Some(*i), c));
        at_point.into_iter().chain(changes).collect()
    }
}

/// A persisted [`CompactionPoint`].
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Compacted {
    index: u64,
    term: u64,
    kafka_end: i64,
}

impl Compacted {
    /// The last index compacted away.
    #[cfg(feature = "sim")]
    pub(crate) fn index(self) -> u64 {
        self.index
    }

    fn of(p: CompactionPoint) -> Self {
        Compacted {
            index: p.index.0,
            term: p.term.0,
            kafka_end: p.kafka_end.0,
        }
    }

    fn point(self) -> CompactionPoint {
        CompactionPoint {
            index: RaftIndex(self.index),
            term: point_term(self.index, self.term),
            kafka_end: KafkaOffset(self.kafka_end),
        }
    }
}

/// A change of the log's start staged for the next persist job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StartChange {
    /// Retention: delete the segments through the point.
    Compact(CompactionPoint),
    /// A snapshot from the leader: the whole log goes, the next entry follows the point.
    Restore(CompactionPoint),
}

/// The disk work of one turn. See the module doc.
pub struct PersistJob {
    part: Rc<Partition>,
    start: Option<StartChange>,
    /// The partition state a snapshot shipped (`Partition::snapshot_state`), saved before
    /// the journal records the restore (`take_before_state`).
    shipped_state: Option<Bytes>,
    truncate_from: Option<RaftIndex>,
    entries: Vec<Entry>,
    state: Option<StateFile>,
}

/// See the module doc.
pub struct RaftLogStore {
    part: Rc<Partition>,
    index: LogIndex,
    hard: HardState,
    conf: ConfState,
    confs: ConfHistory,
    /// Term and vote as last written to the state file.
    written: (u64, u64),
    /// The applied index the state it opened from was written with (capped by commit).
    resume: RaftIndex,
    /// The applied index as last reported (`applied_to`), written with the state.
    applied: u64,
    mem: VecDeque<Entry>,
    staged_start: Option<StartChange>,
    /// The partition state the staged restore's snapshot carried.
    staged_shipped_state: Option<Bytes>,
    staged_truncate: Option<RaftIndex>,
    staged: Vec<Entry>,
    state_dirty: bool,
    /// Bytes of entries appended since the state was last taken to be written.
    appended_since_state: u64,
    fetched: BTreeMap<u64, Entry>,
    failed: Option<String>,
}

/// The term of a compaction point at `index`: at least term 1 unless it is the empty log's
/// point (index 0). A point at a frame of term 0 is at term 1 (see `raft_term`), and so is
/// one whose term is unknown (a log whose prefix retention deleted before it was a Raft
/// log): raft-rs takes a snapshot of term 0 for one it already holds (term 0 is "no entry").
fn point_term(index: u64, term: u64) -> RaftTerm {
    match index {
        0 => RaftTerm(term),
        _ => RaftTerm(term.max(FIRST_TERM)),
    }
}

fn storage_index(i: RaftIndex) -> strand_storage::RaftIndex {
    strand_storage::RaftIndex(i.0)
}

/// The index of an opened log whose entries after `point` through `base` are sealed.
fn sealed_index(
    point: CompactionPoint,
    runs: Vec<(RaftIndex, RaftTerm)>,
    base: RaftIndex,
    base_kafka_end: KafkaOffset,
    log: &strand_storage::Log,
) -> Result<LogIndex, StoreError> {
    let term = log
        .term_at(storage_index(base))
        .map_or(point.term, raft_term);
    LogIndex::sealed(
        point,
        runs,
        CompactionPoint {
            index: base,
            term,
            kafka_end: base_kafka_end,
        },
    )
}

/// The Raft entry a stored frame holds.
pub fn entry_of(h: &FrameHeader, body: &Bytes) -> Entry {
    let mut e = Entry {
        index: h.index.0,
        term: raft_term(h.term).0,
        ..Entry::default()
    };
    match h.kind {
        FrameKind::Data | FrameKind::Control => {
            e.data = body.clone();
            e.context = Bytes::copy_from_slice(&data_context(h.offset_count));
        }
        FrameKind::NoOp => {}
        FrameKind::LogStart => {
            e.data = body.clone();
            e.context = Bytes::from_static(strand_raft::entry::LOG_START_CONTEXT);
        }
        FrameKind::RaftConfig => {
            e.set_entry_type(EntryType::EntryConfChangeV2);
            e.data = body.clone();
        }
        // What compaction left of a data batch goes out as an empty batch over its offsets,
        // which any follower stores as data.
        FrameKind::Cleaned => {
            e.data = cleaned_batch(h);
            e.context = Bytes::copy_from_slice(&data_context(h.offset_count));
        }
    }
    e
}

/// An empty batch (no records, no producer) over the offsets of a cleaned frame.
fn cleaned_batch(h: &FrameHeader) -> Bytes {
    strand_wire::BatchHeader {
        base_offset: h.kafka_base_offset.0,
        partition_leader_epoch: i32::try_from(h.term.0).unwrap_or(i32::MAX),
        attributes: strand_wire::Attributes::from_raw(0),
        last_offset_delta: i32::try_from(h.offset_count.saturating_sub(1)).unwrap_or(i32::MAX),
        first_timestamp_ms: NO_TIMESTAMP,
        max_timestamp_ms: NO_TIMESTAMP,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        record_count: 0,
    }
    .encode(&[])
}

/// Kafka's "no timestamp".
const NO_TIMESTAMP: i64 = -1;

/// The frame kind an entry is stored as, and the Kafka offsets it occupies.
fn frame_kind(e: &Entry) -> Result<(FrameKind, u32), StoreError> {
    let index = RaftIndex(e.index);
    let kind = classify(e).map_err(|why| StoreError::MalformedEntry { index, why })?;
    let count = kind.record_count();
    match kind {
        strand_raft::entry::EntryKind::Data { .. } => Ok((FrameKind::Data, count)),
        strand_raft::entry::EntryKind::NoOp => Ok((FrameKind::NoOp, count)),
        strand_raft::entry::EntryKind::LogStart { .. } => Ok((FrameKind::LogStart, count)),
        strand_raft::entry::EntryKind::Config => {
            if e.get_entry_type() == EntryType::EntryConfChangeV2 {
                Ok((FrameKind::RaftConfig, count))
            } else {
                Err(StoreError::MalformedEntry {
                    index,
                    why: "only ConfChangeV2 entries are stored",
                })
            }
        }
    }
}

impl RaftLogStore {
    /// Opens the Raft view of `part`'s log: takes its `saved` state (from the journal; else
    /// the state file of earlier versions; else a new group with `voters` and `learners`),
    /// indexes every frame, keeps the entries after the commit index in memory.
    #[expect(
        clippy::too_many_lines,
        reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
    )]
    pub(crate) async fn open(
        part: Rc<Partition>,
        voters: &[u64],
        learners: &[u64],
        saved: Option<StateFile>,
    ) -> anyhow::Result<RaftLogStore> {
        let state_path = part.log().dir().join(STATE_FILE);
        let legacy = |read: Result<Option<Vec<u8>>, strand_storage::StorageError>| match read {
            Ok(Some(b)) => serde_json::from_slice::<StateFile>(&b)
                .map_err(|e| anyhow::anyhow!("{}: {e}", state_path.display())),
            // No state yet. A log of term-0 frames was written by a single node before
            // the cluster (an upgraded data directory): each was acknowledged, so all of
            // it is committed.
            Ok(None) => Ok(StateFile {
                voters: voters.to_vec(),
                learners: learners.to_vec(),
                confs: vec![ConfFile {
                    voters: voters.to_vec(),
                    learners: learners.to_vec(),
                    ..ConfFile::default()
                }],
                commit: if part.log().last_term().0 == 0 {
                    part.log().last_index().0
                } else {
                    0
                },
                ..StateFile::default()
            }),
            Err(e) => Err(anyhow::anyhow!("{}: {e}", state_path.display())),
        };
        let file: StateFile = match saved {
            Some(s) => s,
            None => legacy(strand_storage::io::read_small_file(&state_path).await)?,
        };
        // Where raft-rs resumes applying (see `LogStore::persisted_applied`); the entries
        // after it stay in memory until applied.
        let resume = file.applied.map_or(file.commit, |a| a.min(file.commit));
        let log = part.log();
        let first = log.first_index();
        let next = strand_storage::RaftIndex(log.last_index().0 + 1);
        // The entries before `resume` were applied before: they are sealed (terms from the
        // log's term runs, no frame read), so opening reads the unapplied tail only, not
        // the whole log. The scan starts at `resume`, whose Kafka end the applied index needs.
        let scan_from = strand_storage::RaftIndex(resume.clamp(first.0, next.0));
        let point = CompactionPoint {
            index: RaftIndex(first.0 - 1),
            term: match file.compacted {
                Some(c) if c.index == first.0 - 1 => c.point().term,
                _ => point_term(first.0 - 1, log.term_before(first).map_or(0, |t| t.0)),
            },
            kafka_end: KafkaOffset(log.first_entry_offset().0),
        };
        let sealed_through = strand_storage::RaftIndex(scan_from.0 - 1);
        let mut runs: Vec<(RaftIndex, RaftTerm)> = log
            .term_runs(first, sealed_through)
            .into_iter()
            .map(|(i, t)| (RaftIndex(i.0), raft_term(t)))
            .collect();
        runs.dedup_by_key(|r| r.1);
        let mut mem = VecDeque::new();
        // The newest committed log start entry (DeleteRecords) in the unapplied tail read:
        // applied before a crash, but a commit index read from the state file may be older
        // than its apply was. (An applied one persisted the log start when it was applied.)
        let mut log_start: Option<i64> = None;
        let mut index: Option<LogIndex> = None;
        let mut lo = scan_from;
        while lo < next {
            let frames = log.read_entries(lo, next, OPEN_SCAN_WINDOW_BYTES).await?;
            let Some(last) = frames.last() else { break };
            lo = strand_storage::RaftIndex(last.header.index.0 + 1);
            for LogFrame { header: h, body } in frames {
                let idx = match index.as_mut() {
                    Some(idx) => idx,
                    None => index.insert(sealed_index(
                        point,
                        runs.clone(),
                        RaftIndex(h.index.0 - 1),
                        KafkaOffset(h.kafka_base_offset.0),
                        log,
                    )?),
                };
                idx.push(RaftIndex(h.index.0), raft_term(h.term), h.offset_count)?;
                if h.index.0 > resume {
                    mem.push_back(entry_of(&h, &body));
                } else if h.kind == FrameKind::LogStart {
                    let bytes = body.first_chunk::<8>().copied().unwrap_or_default();
                    log_start = log_start.max(Some(i64::from_be_bytes(bytes)));
                }
            }
        }
        let mut index = match index {
            Some(index) => index,
            None => sealed_index(
                point,
                runs,
                RaftIndex(next.0 - 1),
                KafkaOffset(log.log_end_offset().0),
                log,
            )?,
        };
        if let Some(c) = file.compacted {
            let point = c.point();
            match index.term_of(point.index) {
                // The log holds the point (a restart before retention deleted the
                // segments): it is compacted again and the segments go now.
                Ok(t) if t == point.term => {
                    index.compact_to(point)?;
                    log.delete_segments_through(storage_index(point.index))
                        .await?;
                }
                Err(strand_raft::StoreError::Compacted { .. }) => {}
                // The log ends before the point or disagrees at it: what is left of the log
                // a snapshot install was replacing (or the empty log it left).
                _ => {
                    log.reset(
                        strand_storage::RaftIndex(point.index.0 + 1),
                        strand_storage::KafkaOffset(point.kafka_end.0),
                    )
                    .await?;
                    index = LogIndex::new(point);
                    mem.clear();
                }
            }
            mem.retain(|e| e.index > point.index.0);
        }
        if let Some(offset) = log_start {
            log.set_log_start(strand_storage::KafkaOffset(offset))
                .await?;
        }
        if index.log_end_offset().0 != log.log_end_offset().0 {
            anyhow::bail!(
                "{}: raft index ends at offset {} but the log at {}",
                log.dir().display(),
                index.log_end_offset().0,
                log.log_end_offset().0
            );
        }
        let hard = HardState {
            term: file.term,
            vote: file.vote,
            commit: file.commit.min(index.last_index().0),
            ..HardState::default()
        };
        let conf = ConfState {
            voters: file.voters.clone(),
            learners: file.learners.clone(),
            voters_outgoing: file.voters_outgoing.clone(),
            learners_next: file.learners_next.clone(),
            auto_leave: file.auto_leave,
            ..ConfState::default()
        };
        let mut confs = ConfFile::history(&file.confs);
        // A file of an older version: its configuration reflects the configuration entries
        // through its applied index, so it is the one at the point if that is not past it.
        if confs.at_point().is_none() && resume <= index.compaction_point().index.0 {
            confs = ConfHistory::at(conf.clone());
        }
        // A new group writes no state file: until its first vote the file would only repeat
        // the voters the metadata gives on every open (and creating thousands of
        // partitions would pay two fsyncs each).
        let store = RaftLogStore {
            part,
            index,
            hard,
            conf,
            confs,
            written: (file.term, file.vote),
            resume: RaftIndex(resume),
            applied: resume,
            mem,
            staged_start: None,
            staged_shipped_state: None,
            staged_truncate: None,
            staged: Vec::new(),
            state_dirty: false,
            appended_since_state: 0,
            fetched: BTreeMap::new(),
            failed: None,
        };
        Ok(store.trimmed())
    }

    fn trimmed(mut self) -> Self {
        let resume = self.resume.0.min(self.hard.commit);
        while self.mem.front().is_some_and(|e| e.index <= resume) {
            self.mem.pop_front();
        }
        self
    }

    /// The commit index a state taken now may hold. The journal append of a job's state
    /// runs beside the job's log writes, so a crash can keep the state without them: the
    /// commit index must not cover an entry the log does not already hold durably with
    /// its final content (one the job truncates, or a snapshot's reset replaces), or a
    /// restart would apply an entry that was never committed (found by the simulator on
    /// the real storage path, seed 5007). A lower commit index is relearned from the
    /// leader.
    fn persistable_commit(&self) -> u64 {
        let point = self.index.compaction_point().index.0;
        let mut held = self.part.log().durable().last_index.0;
        if let Some(from) = self.staged_truncate {
            held = held.min(from.0.saturating_sub(1));
        }
        if matches!(self.staged_start, Some(StartChange::Restore(_))) {
            held = point;
        }
        self.hard.commit.min(held.max(point))
    }

    fn state_file(&self) -> StateFile {
        StateFile {
            term: self.hard.term,
            vote: self.hard.vote,
            commit: self.persistable_commit(),
            voters: self.conf.voters.clone(),
            learners: self.conf.learners.clone(),
            voters_outgoing: self.conf.voters_outgoing.clone(),
            learners_next: self.conf.learners_next.clone(),
            auto_leave: self.conf.auto_leave,
            applied: Some(self.applied),
            compacted: Some(self.index.compaction_point())
                .filter(|p| p.index.0 > 0)
                .map(Compacted::of),
            confs: ConfFile::files(&self.confs),
        }
    }

    /// The first index held in memory (every entry after the last applied one is): the
    /// entries before it are applied and read from the log.
    #[cfg(feature = "sim")]
    pub(crate) fn mem_first(&self) -> u64 {
        self.mem
            .front()
            .map_or(self.index.last_index().0 + 1, |e| e.index)
    }

    /// The partition whose log this is.
    #[cfg(feature = "sim")]
    pub(crate) fn partition(&self) -> &Rc<Partition> {
        &self.part
    }

    /// Takes this turn's disk work (None when nothing is staged).
    pub fn take_job(&mut self) -> Option<PersistJob> {
        let state = self.state_dirty.then(|| self.state_file());
        if self.staged_start.is_none()
            && self.staged_truncate.is_none()
            && self.staged.is_empty()
            && state.is_none()
        {
            return None;
        }
        self.state_dirty = false;
        if let Some(s) = &state {
            self.written = (s.term, s.vote);
            self.appended_since_state = 0;
        }
        Some(PersistJob {
            part: self.part.clone(),
            start: self.staged_start.take(),
            shipped_state: self.staged_shipped_state.take(),
            truncate_from: self.staged_truncate.take(),
            entries: std::mem::take(&mut self.staged),
            state,
        })
    }

    /// Records how the job taken by `take_job` ended.
    pub fn finish_job(&mut self, result: Result<(), String>) {
        if let Err(e) = result {
            self.failed.get_or_insert(e);
        }
    }

    /// Loads entries read from disk for raft-rs's asynchronous read path.
    pub fn load_fetched(&mut self, frames: Vec<LogFrame>) {
        for f in frames {
            self.fetched
                .insert(f.header.index.0, entry_of(&f.header, &f.body));
        }
    }

    /// Forgets fetched entries once raft-rs took them.
    pub fn clear_fetched(&mut self) {
        self.fetched.clear();
    }

    fn cached_or_fetched(&self, lo: u64, hi: u64, out: &mut Vec<Entry>) -> bool {
        if let Some(first) = self.fetched.get(&lo) {
            out.push(first.clone());
            for i in lo + 1..hi {
                match self.fetched.get(&i) {
                    Some(e) => out.push(e.clone()),
                    None => break,
                }
            }
            return true;
        }
        let log = self.part.log();
        log.read_cached_entries(strand_storage::RaftIndex(lo), |h, body| {
            if h.index.0 >= hi {
                return false;
            }
            out.push(entry_of(h, body));
            true
        }) && out.first().is_some_and(|e| e.index == lo)
    }
}

impl PersistJob {
    /// The state this job makes durable, for the shard's journal (taken once).
    pub(crate) fn take_state(&mut self) -> Option<StateFile> {
        self.state.take()
    }

    /// Disk work that must be durable before the journal records this job's state (taken
    /// once): the partition state a snapshot shipped, so that no restart finds the
    /// restore's compaction point without the state of the data before it. A crash after
    /// it and before the journal leaves the old log with a checkpoint past its end, which
    /// a replicated partition accepts (it holds committed data only; see
    /// `Checkpoint::load`), and the leader ships the snapshot again.
    pub(crate) fn take_before_state(
        &mut self,
    ) -> Option<futures::future::LocalBoxFuture<'static, ()>> {
        use futures::FutureExt;
        let state = self.shipped_state.take().filter(|s| !s.is_empty())?;
        let part = self.part.clone();
        Some(async move { part.adopt_checkpoint(&state).await }.boxed_local())
    }

    /// Truncates, appends and fdatasyncs the log while `state_written` (the journal append
    /// holding this job's state, if any) completes. A moved log start waits for the state
    /// (which holds the new compaction point) first and then deletes what it covers.
    pub async fn run(
        self,
        state_written: impl std::future::Future<Output = Result<(), String>>,
    ) -> Result<(), String> {
        if self.state.is_some() {
            return Err("the job's state was not taken for the journal".into());
        }
        if self.start.is_some() {
            state_written.await?;
            return self.run_log().await;
        }
        let (log, state) = futures::join!(self.run_log(), state_written);
        log.and(state)
    }

    async fn run_log(self) -> Result<(), String> {
        let log = self.part.log();
        let err = |e: StorageError| e.to_string();
        if let Some(change) = self.start {
            match change {
                StartChange::Compact(p) => {
                    let out = log
                        .delete_segments_through(storage_index(p.index))
                        .await
                        .map_err(err)?;
                    if out.segments_deleted > 0 {
                        tracing::info!(topic = %self.part.topic, partition = self.part.index,
                            segments = out.segments_deleted, bytes = out.bytes_deleted,
                            through = p.index.0, "retention deleted segments of a replicated log");
                    }
                }
                StartChange::Restore(p) => {
                    log.reset(
                        strand_storage::RaftIndex(p.index.0 + 1),
                        strand_storage::KafkaOffset(p.kafka_end.0),
                    )
                    .await
                    .map_err(err)?;
                }
            }
        }
        if let Some(from) = self.truncate_from {
            if from.0 <= log.last_index().0 {
                log.truncate_suffix(storage_index(from))
                    .await
                    .map_err(err)?;
            }
        }
        for e in &self.entries {
            if e.index != log.last_index().0 + 1 {
                return Err(format!(
                    "raft entry {} does not follow the log's last index {}",
                    e.index,
                    log.last_index().0
                ));
            }
            let (kind, _) = frame_kind(e).map_err(|e| e.to_string())?;
            let entry = AppendEntry {
                term: strand_storage::RaftTerm(e.term),
                kind,
                body: e.data.clone(),
            };
            log.append_one(&entry).map_err(err)?;
        }
        if self.truncate_from.is_some() || !self.entries.is_empty() {
            let started = crate::common::clock::now();
            log.flush().await.map_err(err)?;
            self.part
                .metrics()
                .storage_flush(crate::common::clock::now() - started);
        }
        Ok(())
    }
}

impl LogStore for RaftLogStore {
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
        let last = self.index.last_index();
        let mut out = Vec::new();
        if lo >= hi {
            return Ok(out);
        }
        let mem_first = self.mem.front().map_or(last.0 + 1, |e| e.index);
        if lo.0 >= mem_first {
            let from = (lo.0 - mem_first) as usize;
            let to = (hi.0 - mem_first) as usize;
            out.extend(self.mem.range(from..to).cloned());
        } else if !self.cached_or_fetched(lo.0, hi.0.min(mem_first), &mut out) {
            return Err(StoreError::NotInMemory { index: lo });
        } else if out.last().is_some_and(|e| e.index + 1 == mem_first) && hi.0 > mem_first {
            let to = (hi.0 - mem_first) as usize;
            out.extend(self.mem.range(..to).cloned());
        }
        raft::util::limit_size(&mut out, max_size_bytes);
        Ok(out)
    }

    fn append(&mut self, entries: &[Entry]) -> Result<(), StoreError> {
        let Some(head) = entries.first() else {
            return Ok(());
        };
        let from = RaftIndex(head.index);
        if from <= self.index.last_index() {
            self.truncate_suffix(from)?;
        }
        for e in entries {
            let index = RaftIndex(e.index);
            let (_, record_count) = frame_kind(e)?;
            self.index.push(index, RaftTerm(e.term), record_count)?;
            self.mem.push_back(e.clone());
            self.staged.push(e.clone());
            self.appended_since_state += e.data.len() as u64;
        }
        Ok(())
    }

    fn truncate_suffix(&mut self, from: RaftIndex) -> Result<(), StoreError> {
        self.index.truncate_from(from)?;
        self.mem.retain(|e| e.index < from.0);
        self.staged.retain(|e| e.index < from.0);
        let durable_last = self.part.log().last_index().0;
        if from.0 <= durable_last {
            self.staged_truncate = Some(self.staged_truncate.map_or(from, |t| t.min(from)));
        }
        Ok(())
    }

    fn hard_state(&self) -> HardState {
        self.hard.clone()
    }

    fn set_hard_state(&mut self, hard_state: &HardState) {
        self.hard = hard_state.clone();
        if (self.hard.term, self.hard.vote) != self.written {
            self.state_dirty = true;
        }
    }

    fn conf_state(&self) -> ConfState {
        self.conf.clone()
    }

    fn set_conf_state(&mut self, index: RaftIndex, conf_state: &ConfState) {
        self.conf = conf_state.clone();
        self.confs.record(index, conf_state);
        self.state_dirty = true;
    }

    fn conf_state_at_point(&self) -> Option<ConfState> {
        self.confs.at_point().cloned()
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        if self.failed.is_some() {
            return Err(StoreError::SyncFailed {
                why: "the log write or fdatasync failed",
            });
        }
        if !self.staged.is_empty()
            || self.staged_truncate.is_some()
            || self.staged_start.is_some()
            || self.state_dirty
        {
            return Err(StoreError::SyncFailed {
                why: "staged changes were not persisted before sync",
            });
        }
        Ok(())
    }

    fn applied_to(&mut self, index: RaftIndex) {
        self.applied = index.0;
        while self.mem.front().is_some_and(|e| e.index <= index.0) {
            self.mem.pop_front();
        }
        // Memory per entry stays bounded: the applied entries are sealed in steps (the
        // applied one itself stays indexed: the high watermark is its Kafka end).
        let through = RaftIndex(index.0.saturating_sub(1));
        if through.0 >= self.index.base().index.0 + SEAL_STEP_ENTRIES {
            self.index.seal_through(through);
        }
        if self.appended_since_state >= STATE_APPLIED_STEP_BYTES {
            self.state_dirty = true;
        }
    }

    fn persisted_applied(&self) -> Option<RaftIndex> {
        Some(self.resume)
    }

    fn compact_through(&mut self, through: RaftIndex) -> Result<(), StoreError> {
        match self.index.kafka_end_at(through) {
            // A sealed entry's Kafka end is not in the index; retention cuts at the end of
            // a closed segment, which the log knows.
            Err(StoreError::Sealed { .. }) => {
                let kafka_end = self
                    .part
                    .log()
                    .segment_end_offset(storage_index(through))
                    .ok_or(StoreError::Sealed {
                        index: through,
                        base: self.index.base().index,
                    })?;
                self.index.compact_to(CompactionPoint {
                    index: through,
                    term: self.index.term_of(through)?,
                    kafka_end: KafkaOffset(kafka_end.0),
                })?;
            }
            _ => self.index.compact_through(through)?,
        }
        self.mem.retain(|e| e.index > through.0);
        self.fetched.retain(|&i, _| i > through.0);
        let point = self.index.compaction_point();
        self.confs.compact(point.index);
        // A restore not yet persisted stays one: its job resets the log and the state file
        // holds the newest point either way.
        if !matches!(self.staged_start, Some(StartChange::Restore(_))) {
            self.staged_start = Some(StartChange::Compact(point));
        }
        self.state_dirty = true;
        Ok(())
    }

    /// The partition's checkpoint (producers; an offsets partition's groups), which covers
    /// at least the data before the compaction point (retention waits for it).
    fn snapshot_state(&self) -> Bytes {
        self.part.snapshot_state()
    }

    /// A snapshot is the compaction point and the leader's partition-state checkpoint: the
    /// data before the point was deleted by retention on the leader, so the follower keeps
    /// nothing of its own log, continues after the point, and takes its producers and
    /// groups from the checkpoint (saved by the job, `take_before_state`).
    fn restore(
        &mut self,
        point: CompactionPoint,
        conf_state: &ConfState,
        state: Bytes,
    ) -> Result<(), StoreError> {
        self.index = LogIndex::new(point);
        self.mem.clear();
        self.staged.clear();
        self.staged_truncate = None;
        self.fetched.clear();
        self.conf = conf_state.clone();
        self.confs.restore(conf_state);
        self.hard.commit = self.hard.commit.max(point.index.0);
        self.staged_start = Some(StartChange::Restore(point));
        self.staged_shipped_state = Some(state);
        self.state_dirty = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use strand_storage::{BatchCache, Log, LogConfig, SystemClock};

    fn data_entry(index: u64, term: u64, value: &[u8]) -> Entry {
        let mut b = strand_wire::BatchBuilder::new(1);
        b.push(1, None, Some(value), &[]);
        Entry {
            index,
            term,
            data: b.build(),
            context: Bytes::copy_from_slice(&data_context(1)),
            ..Entry::default()
        }
    }

    async fn open(dir: &Path) -> RaftLogStore {
        open_with(dir, LogConfig::default()).await
    }

    /// A cleaned frame goes to followers as a data entry: an empty batch over its offsets
    /// that raft-rs's classification and the follower's store accept.
    #[test]
    fn a_cleaned_frame_is_an_empty_data_entry() {
        let h = FrameHeader {
            frame_len_bytes: strand_storage::frame::FRAME_HEADER_BYTES as u32,
            body_crc: 0,
            kind: FrameKind::Cleaned,
            term: strand_storage::RaftTerm(4),
            index: strand_storage::RaftIndex(9),
            kafka_base_offset: strand_storage::KafkaOffset(30),
            offset_count: 5,
        };
        let e = entry_of(&h, &Bytes::new());
        assert_eq!((e.index, e.term), (9, raft_term(h.term).0));
        assert_eq!(
            frame_kind(&e).expect("stored as data"),
            (FrameKind::Data, 5)
        );
        let b = strand_wire::RecordBatch::parse(e.data.clone()).expect("a batch");
        b.validate_stored().expect("valid as stored");
        assert_eq!(
            (b.base_offset(), b.last_offset(), b.record_count()),
            (30, 34, 0)
        );
        assert_eq!((b.producer_id(), b.partition_leader_epoch()), (-1, 4));
    }

    async fn open_with(dir: &Path, lc: LogConfig) -> RaftLogStore {
        let lc = LogConfig {
            allow_buffered_io: true,
            ..lc
        };
        let cache = Rc::new(BatchCache::new(1 << 20));
        let log = Log::open(dir, lc, Rc::new(SystemClock), cache)
            .await
            .expect("open log");
        let metrics = Rc::new(crate::common::metrics::ShardMetrics::new(1));
        let part = Rc::new(Partition::new("t".into(), 0, log, 1 << 20, metrics));
        RaftLogStore::open(part, &[1, 2, 3], &[], None)
            .await
            .expect("open store")
    }

    /// Runs the store's job; its state goes to `STATE_FILE` (read back at open when no
    /// journal state is given), standing in for the shard's journal.
    async fn persist(s: &mut RaftLogStore) {
        let mut job = s.take_job().expect("something staged");
        let state = job.take_state();
        if let Some(before) = job.take_before_state() {
            before.await;
        }
        let path = s.part.log().dir().join(STATE_FILE);
        let r = job
            .run(async move {
                match state {
                    Some(st) => {
                        let bytes = serde_json::to_vec(&st).map_err(|e| e.to_string())?;
                        std::fs::write(&path, bytes).map_err(|e| e.to_string())
                    }
                    None => Ok(()),
                }
            })
            .await;
        s.finish_job(r);
        s.sync().expect("persisted");
    }

    #[test]
    fn entries_state_and_truncation_survive_a_reopen() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let mut s = open(&dir).await;
            assert_eq!(s.conf_state().voters, vec![1, 2, 3]);
            assert_eq!(s.index().last_index(), RaftIndex(0));
            let noop = Entry {
                index: 1,
                term: 1,
                ..Entry::default()
            };
            s.append(&[noop, data_entry(2, 1, b"a"), data_entry(3, 1, b"b")])
                .expect("append");
            s.set_hard_state(&HardState {
                term: 1,
                vote: 1,
                commit: 0,
                ..HardState::default()
            });
            assert!(s.sync().is_err(), "sync before the disk work is refused");
            persist(&mut s).await;
            assert_eq!(s.index().log_end_offset(), KafkaOffset(2));
            let got = s
                .entries(RaftIndex(1), RaftIndex(4), None)
                .expect("from memory");
            assert_eq!(got.iter().map(|e| e.index).collect::<Vec<_>>(), [1, 2, 3]);
            s.applied_to(RaftIndex(3));
            let got = s
                .entries(RaftIndex(2), RaftIndex(4), None)
                .expect("from the cache");
            assert_eq!(got.iter().map(|e| e.index).collect::<Vec<_>>(), [2, 3]);
            assert_eq!(got[1].context.as_ref(), data_context(1));
            // A new leader overwrites index 3 with its own term.
            s.append(&[data_entry(3, 2, b"c")])
                .expect("conflicting append");
            persist(&mut s).await;
            assert_eq!(s.index().term_of(RaftIndex(3)), Ok(RaftTerm(2)));
        })
        .expect("executor");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let s = open(&dir).await;
            assert_eq!(s.index().last_index(), RaftIndex(3));
            assert_eq!(s.index().term_of(RaftIndex(3)), Ok(RaftTerm(2)));
            assert_eq!(s.index().log_end_offset(), KafkaOffset(2));
            assert_eq!((s.hard_state().term, s.hard_state().vote), (1, 1));
            assert_eq!(s.conf_state().voters, vec![1, 2, 3]);
            // Nothing was committed: every entry is still in memory for raft-rs to apply.
            assert_eq!(
                s.entries(RaftIndex(1), RaftIndex(4), None).map(|e| e.len()),
                Ok(3)
            );
        })
        .expect("executor");
    }

    /// The journal append of a state runs beside its job's log writes, so the commit index
    /// it persists covers only entries already durable: not the job's own appends, nor
    /// what the job truncates (a crash keeping the state alone would apply them).
    #[test]
    fn a_persisted_commit_index_never_covers_entries_of_its_own_job() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let mut s = open(&dir).await;
            s.append(&[data_entry(1, 1, b"a"), data_entry(2, 1, b"b")])
                .expect("append");
            s.set_hard_state(&HardState {
                term: 1,
                vote: 1,
                commit: 2,
                ..HardState::default()
            });
            let mut job = s.take_job().expect("staged");
            assert_eq!(job.take_state().map(|st| st.commit), Some(0));
            let r = job.run(async { Ok(()) }).await;
            s.finish_job(r);
            s.append(&[data_entry(2, 2, b"c")]).expect("replace 2");
            s.set_hard_state(&HardState {
                term: 2,
                vote: 1,
                commit: 2,
                ..HardState::default()
            });
            let mut job = s.take_job().expect("staged");
            assert_eq!(
                job.take_state().map(|st| st.commit),
                Some(1),
                "entry 2 is being replaced: only 1 is held"
            );
        })
        .expect("executor");
    }

    /// A joint configuration (a partition move) survives a reopen whole, and raft-rs
    /// resumes applying where the state was written, not at the commit index: a
    /// configuration entry committed but not applied then is applied after the restart.
    #[test]
    fn a_joint_configuration_and_the_applied_index_survive_a_reopen() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let mut s = open(&dir).await;
            s.append(&[
                data_entry(1, 1, b"a"),
                data_entry(2, 1, b"b"),
                data_entry(3, 1, b"c"),
            ])
            .expect("append");
            s.set_hard_state(&HardState {
                term: 1,
                vote: 1,
                ..HardState::default()
            });
            persist(&mut s).await;
            s.applied_to(RaftIndex(1));
            s.set_hard_state(&HardState {
                term: 1,
                vote: 1,
                commit: 3,
                ..HardState::default()
            });
            s.set_conf_state(
                RaftIndex(2),
                &ConfState {
                    voters: vec![2, 3, 4],
                    voters_outgoing: vec![1, 2, 3],
                    learners_next: vec![1],
                    auto_leave: true,
                    ..ConfState::default()
                },
            );
            persist(&mut s).await;
        })
        .expect("executor");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let s = open(&dir).await;
            let c = s.conf_state();
            assert_eq!(
                (c.voters, c.voters_outgoing),
                (vec![2, 3, 4], vec![1, 2, 3])
            );
            assert_eq!((c.learners_next, c.auto_leave), (vec![1], true));
            // The configuration at the point (a snapshot ships it) is still the first one.
            let at_point = s.conf_state_at_point().expect("known");
            assert_eq!(
                (at_point.voters, at_point.voters_outgoing),
                (vec![1, 2, 3], vec![])
            );
            assert_eq!(s.hard_state().commit, 3);
            assert_eq!(s.persisted_applied(), Some(RaftIndex(1)));
            // The entries after it wait in memory: applying them never waits for the disk.
            assert_eq!(
                s.entries(RaftIndex(2), RaftIndex(4), None).map(|e| e.len()),
                Ok(2)
            );
        })
        .expect("executor");
    }

    /// The configuration history survives a reopen and folds into the configuration at
    /// the point when retention compacts past a change; a state file of an older version
    /// (no history) knows it only when its applied index is not past the point.
    #[test]
    fn the_configuration_at_the_point_survives_a_reopen() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        let moved = ConfState {
            voters: vec![2, 3, 4],
            ..ConfState::default()
        };
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let mut s = open(&dir).await;
            let entries: Vec<Entry> = (1..=4).map(|i| data_entry(i, 1, b"x")).collect();
            s.append(&entries).expect("append");
            s.set_hard_state(&HardState {
                term: 1,
                vote: 1,
                commit: 4,
                ..HardState::default()
            });
            persist(&mut s).await;
            s.set_conf_state(RaftIndex(3), &moved);
            s.applied_to(RaftIndex(4));
            s.compact_through(RaftIndex(2)).expect("compact");
            persist(&mut s).await;
        })
        .expect("executor");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let mut s = open(&dir).await;
            assert_eq!(s.conf_state(), moved);
            let at_point = s.conf_state_at_point().expect("known");
            assert_eq!(at_point.voters, vec![1, 2, 3]);
            s.compact_through(RaftIndex(3)).expect("compact");
            assert_eq!(s.conf_state_at_point(), Some(moved.clone()));
            persist(&mut s).await;
        })
        .expect("executor");
        // An older version's file: no history, applied past the point.
        let path = dir.join(STATE_FILE);
        let mut file: StateFile =
            serde_json::from_slice(&std::fs::read(&path).expect("state")).expect("json");
        file.confs.clear();
        file.applied = Some(4);
        std::fs::write(&path, serde_json::to_vec(&file).expect("json")).expect("write");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let s = open(&dir).await;
            assert_eq!(s.conf_state(), moved);
            assert_eq!(
                s.conf_state_at_point(),
                None,
                "unknown: applied past the point"
            );
        })
        .expect("executor");
        file.applied = Some(3);
        std::fs::write(&path, serde_json::to_vec(&file).expect("json")).expect("write");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let s = open(&dir).await;
            assert_eq!(s.conf_state_at_point(), Some(moved.clone()));
        })
        .expect("executor");
    }

    #[test]
    fn an_applied_log_is_sealed_and_reopens_without_reading_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        let terms = |s: &RaftLogStore| -> Vec<_> {
            (1..=s.index().last_index().0)
                .map(|i| s.index().term_of(RaftIndex(i)))
                .collect()
        };
        let seen = strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let mut s = open(&dir).await;
            fill(&mut s, 30).await;
            // A second term (the state is written for it), then more entries of it.
            let value = vec![7u8; 600];
            let entries: Vec<Entry> = (31..=40).map(|i| data_entry(i, 2, &value)).collect();
            s.append(&entries).expect("append");
            s.set_hard_state(&HardState {
                term: 2,
                vote: 1,
                commit: 40,
                ..HardState::default()
            });
            persist(&mut s).await;
            let entries: Vec<Entry> = (41..=50).map(|i| data_entry(i, 2, &value)).collect();
            s.append(&entries).expect("append");
            s.set_hard_state(&HardState {
                term: 2,
                vote: 1,
                commit: 50,
                ..HardState::default()
            });
            persist(&mut s).await;
            s.applied_to(RaftIndex(45));
            assert_eq!(
                s.index().base().index,
                RaftIndex(44),
                "sealed behind applied"
            );
            assert_eq!(s.index().kafka_end_at(RaftIndex(45)), Ok(KafkaOffset(45)));
            assert_eq!(s.index().kafka_base_of(RaftIndex(45)), Ok(KafkaOffset(44)));
            assert!(s.index().kafka_end_at(RaftIndex(20)).is_err(), "sealed");
            // Enough was appended since the state was written: it is written again, with
            // the applied index, though term and vote did not change.
            persist(&mut s).await;
            terms(&s)
        })
        .expect("executor");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let s = open(&dir).await;
            assert_eq!(
                s.index().base().index,
                RaftIndex(44),
                "opened sealed up to applied"
            );
            assert_eq!(terms(&s), seen);
            assert_eq!(s.index().kafka_end_at(RaftIndex(45)), Ok(KafkaOffset(45)));
            assert_eq!(s.index().log_end_offset(), KafkaOffset(50));
            // The unapplied tail is in memory for raft-rs to apply.
            assert_eq!(
                s.entries(RaftIndex(46), RaftIndex(51), None)
                    .map(|e| e.len()),
                Ok(5)
            );
        })
        .expect("executor");
    }

    #[test]
    fn a_failed_persist_keeps_the_store_failed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let mut s = open(&dir).await;
            s.append(&[data_entry(1, 1, b"a")]).expect("append");
            let job = s.take_job().expect("staged");
            drop(job);
            s.finish_job(Err("fdatasync failed".into()));
            assert!(s.sync().is_err());
            assert!(s.sync().is_err(), "stays failed");
        })
        .expect("executor");
    }

    /// Small segments (4 KiB) that retention by size keeps to about two.
    fn small_segments() -> LogConfig {
        LogConfig {
            segment_bytes: 4096,
            retention_bytes: 8192,
            preallocate_bytes: 4096,
            ..LogConfig::default()
        }
    }

    /// Appends `n` one-record entries of term 1 after the last one, persisted.
    async fn fill(s: &mut RaftLogStore, n: u64) {
        let first = s.index().last_index().0 + 1;
        let value = vec![7u8; 600];
        let entries: Vec<Entry> = (first..first + n)
            .map(|i| data_entry(i, 1, &value))
            .collect();
        s.append(&entries).expect("append");
        s.set_hard_state(&HardState {
            term: 1,
            vote: 1,
            commit: first + n - 1,
            ..HardState::default()
        });
        persist(s).await;
        s.applied_to(RaftIndex(first + n - 1));
    }

    #[test]
    fn retention_compacts_durably_then_deletes_segments() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        let through = strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let mut s = open_with(&dir, small_segments()).await;
            fill(&mut s, 40).await;
            let before = s.part.log().segment_count();
            let through = s
                .part
                .log()
                .retention_due(strand_storage::RaftIndex(40))
                .expect("usable")
                .expect("retention is due")
                .through;
            s.compact_through(RaftIndex(through.0)).expect("compacts");
            assert_eq!(s.index().first_index(), RaftIndex(through.0 + 1));
            assert_eq!(
                s.part.log().segment_count(),
                before,
                "nothing deleted before the job"
            );
            persist(&mut s).await;
            assert!(s.part.log().segment_count() < before);
            assert_eq!(s.part.log().first_index().0, through.0 + 1);
            let start = s.part.log().log_start_offset();
            assert_eq!(s.index().compaction_point().kafka_end.0, start.0);
            through.0
        })
        .expect("executor");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let s = open_with(&dir, small_segments()).await;
            let point = s.index().compaction_point();
            assert_eq!((point.index, point.term), (RaftIndex(through), RaftTerm(1)));
            assert_eq!(point.kafka_end, KafkaOffset(through as i64));
            assert_eq!(s.index().last_index(), RaftIndex(40));
        })
        .expect("executor");
    }

    /// The partition state in `bytes` (a checkpoint file's): its offset and what it knows
    /// of producer 7's batch of sequences 0..=4.
    fn shipped_view(bytes: &[u8]) -> (i64, Option<crate::partition::producer_state::Verdict>) {
        let c =
            crate::partition::checkpoint::Checkpoint::decode(bytes, None).expect("a checkpoint");
        (c.offset.0, c.states.check(7, 0, 0, 4).ok())
    }

    use crate::partition::checkpoint::Checkpoint;
    use strand_storage::KafkaOffset;

    /// A key reader for a keyed checkpoint: every key in one scope.
    fn every_key_one_scope(_: &[u8]) -> Option<(String, bool)> {
        Some((String::new(), false))
    }

    #[test]
    fn a_restored_snapshot_replaces_the_log_across_restarts() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        let point = CompactionPoint {
            index: RaftIndex(100),
            term: RaftTerm(3),
            kafka_end: KafkaOffset(90),
        };
        let conf = ConfState {
            voters: vec![1, 2, 3],
            ..ConfState::default()
        };
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let mut s = open_with(&dir, small_segments()).await;
            fill(&mut s, 10).await;
            // The leader's checkpoint: producer 7's batch at offset 92, covered through 95
            // (past the point: the follower's log reaches it as entries follow).
            let mut states = crate::partition::producer_state::ProducerStates::default();
            states.record(7, 0, 0, 4, 92);
            let shipped = crate::partition::checkpoint::Checkpoint {
                offset: strand_storage::KafkaOffset(95),
                states,
                txns: Default::default(),
                records: None,
                pending: Default::default(),
            };
            s.restore(point, &conf, Bytes::from(shipped.encode()))
                .expect("restore");
            persist(&mut s).await;
            assert_eq!(s.index().compaction_point(), point);
            assert_eq!(s.part.log().segment_count(), 0);
            assert_eq!(s.part.log().log_start_offset().0, 90);
            let duplicate =
                Some(crate::partition::producer_state::Verdict::Duplicate { base_offset: 92 });
            assert_eq!(shipped_view(&s.snapshot_state()), (95, duplicate));
            // A shipped state that is not a checkpoint, or is an offsets partition's (with
            // records) for this one, changes nothing.
            s.part.adopt_checkpoint(b"not a checkpoint").await;
            let keyed = Checkpoint::empty(KafkaOffset(99), Some(every_key_one_scope));
            s.part.adopt_checkpoint(&keyed.encode()).await;
            assert_eq!(shipped_view(&s.snapshot_state()), (95, duplicate));
        })
        .expect("executor");
        // Saved: a replicated partition takes it back though its log is behind it; an
        // unreplicated one refuses it (its log lost durable data).
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let s = open_with(&dir, small_segments()).await;
            s.part.load_producer_state(true, None).await.expect("state");
            let duplicate =
                Some(crate::partition::producer_state::Verdict::Duplicate { base_offset: 92 });
            assert_eq!(shipped_view(&s.snapshot_state()), (95, duplicate));
            s.part
                .load_producer_state(false, None)
                .await
                .expect("state");
            let unknown = Some(crate::partition::producer_state::Verdict::Append);
            assert_eq!(shipped_view(&s.snapshot_state()), (90, unknown));
        })
        .expect("executor");
        // Restarted before any entry followed the point: the empty log reopens at index 1
        // and is moved to the point again.
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let mut s = open_with(&dir, small_segments()).await;
            assert_eq!(s.index().compaction_point(), point);
            assert_eq!(s.part.log().last_index().0, 100);
            assert_eq!(s.hard_state().commit, 100);
            let e = data_entry(101, 3, b"next");
            s.append(&[e]).expect("append after the point");
            persist(&mut s).await;
        })
        .expect("executor");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let s = open_with(&dir, small_segments()).await;
            assert_eq!(s.index().compaction_point(), point);
            assert_eq!(s.index().last_index(), RaftIndex(101));
            assert_eq!(s.index().kafka_base_of(RaftIndex(101)), Ok(KafkaOffset(90)));
            assert_eq!(s.part.log().log_end_offset().0, 91);
        })
        .expect("executor");
    }

    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "longer than 70 lines when the lint came in (issue 27): split it when it next changes"
    )]
    fn frames_written_before_the_cluster_are_entries_of_term_one() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            // A single node's log (no replication): frames of term 0.
            let lc = LogConfig {
                allow_buffered_io: true,
                ..LogConfig::default()
            };
            let cache = Rc::new(BatchCache::new(1 << 20));
            let log = Log::open(&dir, lc, Rc::new(SystemClock), cache)
                .await
                .expect("open log");
            for (i, v) in [b"a", b"b", b"c"].iter().enumerate() {
                let body = data_entry(i as u64 + 1, 0, *v).data;
                let entry = AppendEntry {
                    term: strand_storage::RaftTerm(0),
                    kind: FrameKind::Data,
                    body,
                };
                log.append_one(&entry).expect("append");
            }
            log.flush().await.expect("flush");
        })
        .expect("executor");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let mut s = open(&dir).await;
            // All acknowledged, so committed; and of term 1 for Raft, from the index and
            // from the entries a follower is sent alike.
            assert_eq!(s.hard_state().commit, 3);
            for i in 1..=3 {
                assert_eq!(
                    s.index().term_of(RaftIndex(i)),
                    Ok(RaftTerm(1)),
                    "entry {i}"
                );
            }
            // Applied (committed at open): read from the disk, as for a follower.
            let frames = s
                .part
                .log()
                .read_entries(
                    strand_storage::RaftIndex(1),
                    strand_storage::RaftIndex(4),
                    1 << 20,
                )
                .await
                .expect("read");
            s.load_fetched(frames);
            let got = s
                .entries(RaftIndex(1), RaftIndex(4), None)
                .expect("fetched");
            assert_eq!(got.iter().map(|e| e.term).collect::<Vec<_>>(), [1, 1, 1]);
            s.clear_fetched();
            // The cluster's first leader goes on in term 1 (and a later one in term 2).
            s.append(&[data_entry(4, 1, b"d"), data_entry(5, 2, b"e")])
                .expect("append");
            s.set_hard_state(&HardState {
                term: 2,
                vote: 1,
                commit: 3,
                ..HardState::default()
            });
            persist(&mut s).await;
        })
        .expect("executor");
        strand_storage::io_runtime::block_on("raft-store-test", 1, async {
            let mut s = open(&dir).await;
            let frames = s
                .part
                .log()
                .read_entries(
                    strand_storage::RaftIndex(1),
                    strand_storage::RaftIndex(6),
                    1 << 20,
                )
                .await
                .expect("read");
            s.load_fetched(frames);
            let terms: Vec<_> = (1..=5).map(|i| s.index().term_of(RaftIndex(i))).collect();
            assert_eq!(terms, [1, 1, 1, 1, 2].map(|t| Ok(RaftTerm(t))));
            let got = s
                .entries(RaftIndex(1), RaftIndex(6), None)
                .expect("fetched");
            assert_eq!(
                got.iter().map(|e| e.term).collect::<Vec<_>>(),
                [1, 1, 1, 1, 2]
            );
        })
        .expect("executor");
    }

    #[test]
    fn a_compaction_point_at_a_frame_before_the_cluster_is_of_term_one() {
        let at = |index, term| {
            Compacted {
                index,
                term,
                kafka_end: 0,
            }
            .point()
            .term
        };
        assert_eq!(at(7, 0), RaftTerm(1));
        assert_eq!(at(7, 3), RaftTerm(3));
        assert_eq!(at(0, 0), RaftTerm(0), "the empty log's point");
        // A log start whose term nothing records (retention before the cluster).
        assert_eq!(point_term(40, 0), RaftTerm(1));
        assert_eq!(point_term(0, 0), RaftTerm(0));
    }
}
