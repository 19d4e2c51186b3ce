//! What a partition log written by a single node before the cluster (an upgraded data
//! directory) needs before it becomes a Raft group: its log start offset as an entry.
//!
//! Such a log holds frames of term 0 and no Raft state (see `store`). Its log start
//! offset, which retention or DeleteRecords moved, lives in the log's own file and may
//! lie past the first entry: it is persisted before the segments below it are deleted (a
//! stop or crash in between keeps some), and DeleteRecords deletes whole segments only.
//! A replica that joins later starts from a snapshot of the Raft compaction point, the
//! first entry, and learns later log start moves only from log start entries (a
//! replicated DeleteRecords). So the upgrade appends one, committed like every term-0
//! frame: each replica applies it once it holds the log up to there, as it would apply
//! a DeleteRecords the group replicated.
//!
//! Invariant: the entry is appended only to a non-empty term-0 log without Raft state,
//! at most once (a reopen finds it as the last entry). Deletes nothing; a replicated
//! log's retention deletes the segments below the log start later.

use anyhow::Context as _;
use strand_storage::{AppendEntry, FrameKind, KafkaOffset, Log, RaftIndex, RaftTerm};

use crate::replication::store::STATE_FILE;

/// Appends a log start entry to the upgraded log of a group the journal holds no state
/// for, when its log start offset lies past its first entry and no such entry ends it
/// yet. Returns the offset appended, if any (durable on return).
pub(crate) async fn replicate_log_start(log: &Log) -> anyhow::Result<Option<KafkaOffset>> {
    let start = log.log_start_offset();
    let last = log.last_index();
    let unreplicated = log.last_term() == RaftTerm(0)
        && last >= log.first_index()
        && start > log.first_entry_offset()
        && start <= log.log_end_offset();
    if !unreplicated {
        return Ok(None);
    }
    // A state file of an earlier version: a group's log, not a single node's.
    let state_path = log.dir().join(STATE_FILE);
    if strand_storage::io::read_small_file(&state_path)
        .await
        .with_context(|| state_path.display().to_string())?
        .is_some()
    {
        return Ok(None);
    }
    let frames = log.read_entries(last, RaftIndex(last.0 + 1), 0).await?;
    let written = frames.last().is_some_and(|f| {
        f.header.kind == FrameKind::LogStart
            && f.body
                .first_chunk::<8>()
                .is_some_and(|b| i64::from_be_bytes(*b) >= start.0)
    });
    if written {
        return Ok(None);
    }
    let (data, _context) = strand_raft::entry::log_start_entry(start.0);
    log.append_one(&AppendEntry {
        term: RaftTerm(0),
        kind: FrameKind::LogStart,
        body: data.into(),
    })?;
    log.flush().await?;
    tracing::info!(dir = %log.dir().display(), log_start_offset = start.0,
        first_entry_offset = log.first_entry_offset().0,
        "upgraded log: its log start offset appended as an entry for the replicas");
    Ok(Some(start))
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::rc::Rc;

    use bytes::Bytes;
    use strand_raft::LogStore as _;
    use strand_storage::{BatchCache, LogConfig, SystemClock};

    use super::*;
    use crate::partition::Partition;
    use crate::replication::store::RaftLogStore;

    async fn open_log(dir: &Path) -> Log {
        let lc = LogConfig {
            allow_buffered_io: true,
            segment_bytes: 4096,
            ..LogConfig::default()
        };
        let cache = Rc::new(BatchCache::new(1 << 20));
        Log::open(dir, lc, Rc::new(SystemClock), cache)
            .await
            .expect("open log")
    }

    /// A single node's log (term 0) of `records` one-record batches of about 1 KB.
    async fn single_node_log(dir: &Path, records: u64) -> Log {
        let log = open_log(dir).await;
        for i in 0..records {
            let mut b = strand_wire::BatchBuilder::new(1);
            b.push(1, None, Some(&[i as u8; 1000][..]), &[]);
            log.append_one(&AppendEntry {
                term: RaftTerm(0),
                kind: FrameKind::Data,
                body: b.build(),
            })
            .expect("append");
        }
        log.flush().await.expect("flush");
        log
    }

    fn last_frame_kind(frames: &[strand_storage::LogFrame]) -> Option<(FrameKind, Bytes)> {
        frames.last().map(|f| (f.header.kind, f.body.clone()))
    }

    /// Retention persisted the log start but stopped before deleting the segments below
    /// it: the upgrade appends the start once, committed, and leaves a log whose start is
    /// its first entry alone.
    #[test]
    fn an_upgraded_log_starting_past_its_first_entry_gets_a_log_start_entry() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("upgrade-test", 1, async {
            let log = single_node_log(&dir, 12).await;
            assert!(log.segment_count() > 2, "several segments");
            // Nothing to carry: the log starts at its first entry.
            assert_eq!(replicate_log_start(&log).await.expect("upgrade"), None);
            log.set_log_start(KafkaOffset(7)).await.expect("start");
            assert_eq!(log.first_entry_offset(), KafkaOffset(0));
            assert_eq!(
                replicate_log_start(&log).await.expect("upgrade"),
                Some(KafkaOffset(7))
            );
            assert_eq!(log.last_index(), RaftIndex(13));
            let frames = log
                .read_entries(RaftIndex(13), RaftIndex(14), 0)
                .await
                .expect("read");
            let (kind, body) = last_frame_kind(&frames).expect("the entry");
            assert_eq!(kind, FrameKind::LogStart);
            assert_eq!(&body[..], &7i64.to_be_bytes());
            // Once only.
            assert_eq!(replicate_log_start(&log).await.expect("again"), None);
            assert_eq!(log.last_index(), RaftIndex(13));
        })
        .expect("executor");
        strand_storage::io_runtime::block_on("upgrade-test", 1, async {
            // Durable, and once only after a reopen too; committed with the log.
            let log = open_log(&dir).await;
            assert_eq!(log.last_index(), RaftIndex(13));
            assert_eq!(replicate_log_start(&log).await.expect("reopen"), None);
            let metrics = Rc::new(crate::common::metrics::ShardMetrics::new(1));
            let part = Rc::new(Partition::new("t".into(), 0, log, 1 << 20, metrics));
            let store = RaftLogStore::open(part, &[1], &[], None)
                .await
                .expect("open store");
            assert_eq!(store.hard_state().commit, 13);
        })
        .expect("executor");
    }

    /// A log with Raft state (an earlier version's state file) is a group's log: its log
    /// start entries are in its log already.
    #[test]
    fn a_log_with_raft_state_gets_no_entry() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("t-0");
        strand_storage::io_runtime::block_on("upgrade-test", 1, async {
            let log = single_node_log(&dir, 12).await;
            log.set_log_start(KafkaOffset(7)).await.expect("start");
            std::fs::write(dir.join(STATE_FILE), b"{}").expect("state file");
            assert_eq!(replicate_log_start(&log).await.expect("upgrade"), None);
            assert_eq!(log.last_index(), RaftIndex(12));
        })
        .expect("executor");
    }
}
