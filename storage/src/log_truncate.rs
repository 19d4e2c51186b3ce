//! Removing data: suffix truncation (a Raft follower discarding uncommitted entries),
//! prefix truncation (DeleteRecords) and retention (whole closed segments by age and size).
//!
//! Invariant: data is removed newest-first on suffix truncation (later segments are
//! unlinked before the cut segment is shortened), so a crash in between leaves a prefix of
//! the old log, never a log with a hole. The log start offset is persisted before any
//! segment below it is unlinked.

use bytes::Bytes;
use std::path::PathBuf;

use crate::error::StorageError;
use crate::frame::FrameHeader;
use crate::io::{self, align_down};
use crate::log::{Durable, Log, Tail};
use crate::recovery::{encode_log_start, LOG_START_FILE};
use crate::segment::SegmentMeta;
use crate::tail_buf::TailBuf;
use crate::types::{FilePos, KafkaOffset, RaftIndex, RaftTerm};

/// What retention removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    /// Segments deleted.
    pub segments_deleted: usize,
    /// Bytes freed.
    pub bytes_deleted: u64,
}

/// What retention would delete now: the closed segments before `offset` (the new log
/// start offset), whose entries end at Raft index `through`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionCut {
    /// The log start offset after the cut: the next offset of the last segment deleted.
    pub offset: KafkaOffset,
    /// The last Raft index of the last segment deleted.
    pub through: RaftIndex,
}

impl Log {
    /// Removes every entry with Raft index >= `from`. No flush may be in flight.
    pub async fn truncate_suffix(&self, from: RaftIndex) -> Result<(), StorageError> {
        let (first, next) = (self.first_index(), self.st.borrow().next_index);
        if from >= next {
            return Ok(());
        }
        if from < first {
            return Err(StorageError::IndexOutOfRange {
                requested: from,
                first,
                last: RaftIndex(next.0 - 1),
            });
        }
        let cut = self.read_entries(from, from.next(), 0).await?;
        let Some(cut) = cut.first().map(|f| f.header) else {
            return Err(StorageError::Usage("entry to truncate from vanished"));
        };
        self.forget_read_ahead();
        let (removed, keep) = self.truncate_suffix_in_memory(&cut)?;
        let result = self.truncate_suffix_on_disk(removed, keep, &cut).await;
        self.st.borrow_mut().busy = false;
        // A read begun during the truncation may have read ahead what it cut.
        self.forget_read_ahead();
        result
    }

    /// The synchronous half: drops later segments and cuts the segment holding `cut`.
    /// Returns the removed segments' paths and the cut segment's (key, new size).
    #[allow(clippy::type_complexity)]
    fn truncate_suffix_in_memory(
        &self,
        cut: &FrameHeader,
    ) -> Result<(Vec<PathBuf>, Option<(RaftIndex, u64)>), StorageError> {
        let mut guard = self.st.borrow_mut();
        let st = &mut *guard;
        self.check_usable(st)?;
        if st.flush_in_flight || st.busy {
            return Err(StorageError::Usage(
                "truncation while a flush or truncation runs",
            ));
        }
        let k = st
            .segments
            .iter()
            .position(|s| s.meta.last_index.is_some_and(|l| l >= cut.index))
            .expect("the frame just read is in a segment");
        // Compaction rewrites only committed entries, which Raft never truncates: a cut
        // into or below the segment being rewritten is a bug, refused before any change.
        if st.segments[k..]
            .iter()
            .any(|s| st.cleaning == Some(s.meta.name.raft_base_index))
        {
            return Err(StorageError::Usage(
                "truncation into a segment being rewritten by compaction",
            ));
        }
        st.busy = true;
        let whole = st.segments[k].meta.name.raft_base_index == cut.index;
        let split = if whole { k } else { k + 1 };
        let dropped: Vec<_> = st.segments.drain(split..).rev().collect();
        let removed: Vec<PathBuf> = st
            .retire_all(dropped, &self.dir)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        let keep = (!whole).then(|| {
            let seg = &mut st.segments[k];
            let pos = seg.meta.locate_index(cut.index);
            (seg.meta.name.raft_base_index, pos)
        });
        st.next_index = cut.index;
        st.log_end_offset = cut.kafka_base_offset;
        st.terms.retain(|&(i, _)| i < cut.index);
        st.durable = Durable {
            last_index: st.durable.last_index.min(RaftIndex(cut.index.0 - 1)),
            next_offset: st.durable.next_offset.min(cut.kafka_base_offset),
        };
        drop(guard);
        self.cache.truncate_from(self.cache_id, cut.index);
        Ok((removed, keep.map(|(key, pos)| (key, pos.0))))
    }

    async fn truncate_suffix_on_disk(
        &self,
        removed: Vec<PathBuf>,
        keep: Option<(RaftIndex, u64)>,
        cut: &FrameHeader,
    ) -> Result<(), StorageError> {
        {
            let _files = self.files_lock.lock().await;
            for path in &removed {
                for ext in ["log", "index", "timeindex"] {
                    io::remove_file(&path.with_extension(ext)).await?;
                }
            }
        }
        io::fsync_dir_async(&self.dir).await?;
        self.reap_retired().await;
        let Some((key, scan_from)) = keep else {
            return Ok(());
        };
        // Find the exact byte position of the cut frame from the sparse index position.
        let cut_pos = self.position_of(key, FilePos(scan_from), cut.index).await?;
        let rebuilt = self.rebuild_prefix(key, cut_pos).await?;
        let file = {
            let st = self.st.borrow();
            st.segment(key).and_then(|s| s.file.clone())
        };
        let base_pos = align_down(cut_pos);
        let mut partial = Bytes::new();
        if let Some(file) = &file {
            file.truncate(cut_pos).await?;
            file.fdatasync()
                .await
                .map_err(|_| self.fence("fdatasync after truncation failed".into()))?;
            partial = file
                .read(base_pos, usize::try_from(cut_pos - base_pos).unwrap_or(0))
                .await?;
        }
        let path = self.segment_path(key);
        for ext in ["index", "timeindex"] {
            io::remove_file(&path.with_extension(ext)).await?;
        }
        let mut st = self.st.borrow_mut();
        let seg = st
            .segments
            .iter_mut()
            .find(|s| s.meta.name.raft_base_index == key)
            .expect("busy flag keeps the cut segment in place");
        match seg.tail.as_mut() {
            // The cut is in bytes the tail buffer still holds.
            Some(t) if cut_pos >= t.base_pos => {
                t.buf
                    .truncate(usize::try_from(cut_pos - t.base_pos).unwrap_or(usize::MAX));
                t.flushed_pos = t.flushed_pos.min(cut_pos);
            }
            _ => {
                let t = Tail {
                    buf: TailBuf::from_bytes(partial),
                    base_pos,
                    flushed_pos: cut_pos,
                    preallocated_to: cut_pos,
                    zeroed_to: cut_pos,
                    zeros_to: cut_pos,
                };
                seg.tail = Some(t);
            }
        }
        seg.meta = rebuilt;
        seg.closed = false;
        Ok(())
    }

    /// Byte position of the frame with index `index` in segment `key`, scanning from `from`.
    async fn position_of(
        &self,
        key: RaftIndex,
        from: FilePos,
        index: RaftIndex,
    ) -> Result<u64, StorageError> {
        let mut pos = from.0;
        loop {
            let head = self
                .read_span(key, pos, crate::frame::FRAME_HEADER_BYTES as u64)
                .await?;
            let h = crate::frame::decode_header(&head).map_err(|e| StorageError::Corrupt {
                path: self.segment_path(key),
                pos: FilePos(pos),
                reason: e.to_string(),
            })?;
            if h.index == index {
                return Ok(pos);
            }
            pos += u64::from(h.frame_len_bytes);
        }
    }

    /// Segment metadata for the frames of segment `key` below `end`, by scanning them.
    async fn rebuild_prefix(&self, key: RaftIndex, end: u64) -> Result<SegmentMeta, StorageError> {
        let (name, created_ms) = {
            let st = self.st.borrow();
            let s = st.segment(key);
            let s = s.ok_or(StorageError::Usage("segment vanished during truncation"))?;
            (s.meta.name, s.meta.created_ms)
        };
        let mut meta = SegmentMeta::new(name, created_ms);
        let bytes = self.read_span(key, 0, end).await?;
        let stop = crate::frame::scan(&bytes, |f, body| {
            let max_ts = f.header.kind.has_kafka_batch().then(|| {
                strand_wire::RecordBatch::parse(bytes::Bytes::copy_from_slice(body))
                    .map_or(-1, |b| b.max_timestamp())
            });
            meta.on_frame(FilePos(f.at as u64), &f.header, max_ts);
        });
        if stop != crate::frame::ScanStop::Clean || meta.size_bytes != end {
            return Err(self.fence(format!(
                "segment {} unreadable while truncating",
                name.stem()
            )));
        }
        Ok(meta)
    }

    /// Moves the log start offset to `offset` (DeleteRecords) and deletes closed segments
    /// entirely below it. Returns the new log start offset.
    pub async fn truncate_prefix(&self, offset: KafkaOffset) -> Result<KafkaOffset, StorageError> {
        let before = self.log_start_offset();
        if self.set_log_start(offset).await? > before {
            self.delete_segments_below(offset, RaftIndex(u64::MAX))
                .await?;
        }
        Ok(self.log_start_offset())
    }

    /// Deletes closed, finalized segments whose data is all below `offset` and whose
    /// entries are all at or before `through` (never the active segment).
    async fn delete_segments_below(
        &self,
        offset: KafkaOffset,
        through: RaftIndex,
    ) -> Result<RetentionOutcome, StorageError> {
        let paths = {
            let mut guard = self.st.borrow_mut();
            let st = &mut *guard;
            let n = st.segments.len().saturating_sub(1);
            let k = st.segments[..n]
                .iter()
                .take_while(|s| {
                    s.tail.is_none()
                        && st.cleaning != Some(s.meta.name.raft_base_index)
                        && s.meta.next_offset <= offset
                        && s.meta.last_index.is_none_or(|l| l <= through)
                })
                .count();
            let dropped: Vec<_> = st.segments.drain(..k).collect();
            st.retire_all(dropped, &self.dir)
        };
        if let Some(first) = self.st.borrow().segments.first() {
            self.cache
                .truncate_below(self.cache_id, first.meta.name.raft_base_index);
        }
        let mut out = RetentionOutcome::default();
        let _files = self.files_lock.lock().await;
        for (path, size) in &paths {
            for ext in ["log", "index", "timeindex"] {
                io::remove_file(&path.with_extension(ext)).await?;
            }
            out.segments_deleted += 1;
            out.bytes_deleted += size;
        }
        if !paths.is_empty() {
            io::fsync_dir_async(&self.dir).await?;
            tracing::info!(dir = %self.dir.display(), segments = out.segments_deleted,
                bytes = out.bytes_deleted, "segments deleted");
        }
        self.reap_retired().await;
        Ok(out)
    }

    /// Applies `retention.ms` and `retention.bytes` to closed segments, oldest first.
    pub async fn apply_retention(&self) -> Result<RetentionOutcome, StorageError> {
        match self.retention_due(RaftIndex(u64::MAX))? {
            Some(cut) => self.apply_retention_cut(cut).await,
            None => Ok(RetentionOutcome::default()),
        }
    }

    /// The closed segments `retention.ms` and `retention.bytes` would delete now, oldest
    /// first, none with an entry past `max_index`; `None` when nothing is due. The caller
    /// may act before deleting them (`apply_retention_cut`), e.g. save the state their
    /// records built; a replicated log (`max_index` = its applied index) moves its Raft
    /// compaction point through `cut.through` first.
    pub fn retention_due(
        &self,
        max_index: RaftIndex,
    ) -> Result<Option<RetentionCut>, StorageError> {
        let now_ms = self.clock.now_ms();
        let config = self.config.borrow();
        let st = self.st.borrow();
        self.check_usable(&st)?;
        let mut total: u64 = st.segments.iter().map(|s| s.meta.size_bytes).sum();
        let n = st.segments.len().saturating_sub(1);
        let mut cut = None;
        for s in st.segments[..n].iter().take_while(|s| s.tail.is_none()) {
            let Some(last) = s.meta.last_index.filter(|&l| l <= max_index) else {
                break;
            };
            let newest_ms = if s.meta.max_timestamp_ms >= 0 {
                s.meta.max_timestamp_ms
            } else {
                s.meta.created_ms
            };
            let by_time =
                config.retention_ms >= 0 && now_ms.saturating_sub(newest_ms) > config.retention_ms;
            let by_size = config.retention_bytes >= 0
                && total.saturating_sub(s.meta.size_bytes) >= config.retention_bytes as u64;
            // Below the log start offset: DeleteRecords on a replicated log moved it.
            let below_start = s.meta.next_offset <= st.log_start_offset;
            if !(by_time || by_size || below_start) {
                break;
            }
            total -= s.meta.size_bytes;
            cut = Some(RetentionCut {
                offset: s.meta.next_offset,
                through: last,
            });
        }
        Ok(cut)
    }

    /// Moves the log start offset to `cut.offset` and deletes the closed segments below it
    /// (an unreplicated log; a replicated one moves its Raft compaction point first).
    pub async fn apply_retention_cut(
        &self,
        cut: RetentionCut,
    ) -> Result<RetentionOutcome, StorageError> {
        self.move_start_and_delete(cut.offset, cut.through).await
    }

    /// Deletes the closed segments whose entries are all at or before `through` (the Raft
    /// compaction point, already durable) and moves the log start offset past them.
    pub async fn delete_segments_through(
        &self,
        through: RaftIndex,
    ) -> Result<RetentionOutcome, StorageError> {
        let offset = {
            let st = self.st.borrow();
            self.check_usable(&st)?;
            let n = st.segments.len().saturating_sub(1);
            st.segments[..n]
                .iter()
                .take_while(|s| s.tail.is_none() && s.meta.last_index.is_some_and(|l| l <= through))
                .last()
                .map(|s| s.meta.next_offset)
        };
        match offset {
            Some(offset) => self.move_start_and_delete(offset, through).await,
            None => Ok(RetentionOutcome::default()),
        }
    }

    /// Persists a log start offset of at least `offset`, then deletes the segments below
    /// it (and at or before `through`).
    async fn move_start_and_delete(
        &self,
        offset: KafkaOffset,
        through: RaftIndex,
    ) -> Result<RetentionOutcome, StorageError> {
        self.set_log_start(offset).await?;
        self.delete_segments_below(offset, through).await
    }

    /// Moves the log start offset forward to `offset` (at most the log end offset) and
    /// persists it; deletes nothing (a replicated log deletes segments only after its Raft
    /// compaction point moved: retention then counts the segments below the start as due).
    /// Returns the log start offset.
    pub async fn set_log_start(&self, offset: KafkaOffset) -> Result<KafkaOffset, StorageError> {
        let start = self.advance_log_start(offset)?;
        self.persist_log_start().await?;
        Ok(start)
    }

    /// The in-memory half of [`Log::set_log_start`]: moves the log start offset forward at
    /// once (readers see it from now on); durable after [`Log::persist_log_start`].
    pub fn advance_log_start(&self, offset: KafkaOffset) -> Result<KafkaOffset, StorageError> {
        let mut st = self.st.borrow_mut();
        self.check_usable(&st)?;
        if offset > st.log_end_offset || offset < KafkaOffset(0) {
            return Err(StorageError::OffsetOutOfRange {
                requested: offset,
                start: st.log_start_offset,
                end: st.log_end_offset,
            });
        }
        if offset > st.log_start_offset {
            st.log_start_offset = offset;
        }
        Ok(st.log_start_offset)
    }

    /// Writes the current log start offset (one write at a time: they share a temporary
    /// file; each writes the latest value).
    pub async fn persist_log_start(&self) -> Result<(), StorageError> {
        let _writing = self.log_start_write.lock().await;
        let start = self.st.borrow().log_start_offset;
        io::write_small_file_atomic_async(&self.dir.join(LOG_START_FILE), &encode_log_start(start))
            .await
    }

    /// Replaces the whole log by an empty one whose next entry is Raft index `next_index`
    /// at Kafka offset `next_offset` (a follower installing the leader's snapshot). The log
    /// start offset is persisted first; the segments go newest first. A restart before the
    /// first new entry is appended reopens an empty log at index 1: the caller, which
    /// keeps the compaction point durably, calls this again. No flush may be in flight.
    pub async fn reset(
        &self,
        next_index: RaftIndex,
        next_offset: KafkaOffset,
    ) -> Result<(), StorageError> {
        let _writing = self.log_start_write.lock().await;
        let paths = {
            let mut guard = self.st.borrow_mut();
            let st = &mut *guard;
            self.check_usable(st)?;
            if st.flush_in_flight || st.busy {
                return Err(StorageError::Usage(
                    "reset while a flush or truncation runs",
                ));
            }
            let dropped: Vec<_> = st.segments.drain(..).rev().collect();
            let paths: Vec<PathBuf> = st
                .retire_all(dropped, &self.dir)
                .into_iter()
                .map(|(p, _)| p)
                .collect();
            st.next_index = next_index;
            st.log_start_offset = next_offset;
            st.log_end_offset = next_offset;
            st.terms.clear();
            st.durable = Durable {
                last_index: RaftIndex(next_index.0.saturating_sub(1)),
                next_offset,
            };
            paths
        };
        self.cache.truncate_from(self.cache_id, RaftIndex(0));
        self.forget_read_ahead();
        io::write_small_file_atomic_async(
            &self.dir.join(LOG_START_FILE),
            &encode_log_start(next_offset),
        )
        .await?;
        {
            let _files = self.files_lock.lock().await;
            for path in &paths {
                for ext in ["log", "index", "timeindex"] {
                    io::remove_file(&path.with_extension(ext)).await?;
                }
            }
        }
        io::fsync_dir_async(&self.dir).await?;
        self.reap_retired().await;
        tracing::info!(dir = %self.dir.display(), %next_index, %next_offset, segments = paths.len(),
            "log replaced by an empty one (snapshot installed)");
        Ok(())
    }

    /// Term of the last entry before `index` (for Raft's log matching), from memory.
    pub fn term_before(&self, index: RaftIndex) -> Option<RaftTerm> {
        index
            .0
            .checked_sub(1)
            .and_then(|i| self.term_at(RaftIndex(i)))
    }
}
