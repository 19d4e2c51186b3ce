//! When and how a partition of a compacted topic (`cleanup.policy` with `compact`) is
//! cleaned: its cleanup settings, the records it refuses, whether a pass is due, and the
//! pass itself (`cleaner::clean_once` through `Partition::compact`).
//!
//! Invariants:
//! - A pass is due, as in Kafka, when the uncleaned share of the cleanable bytes reaches
//!   `min.cleanable.dirty.ratio`, when uncleaned data is older than
//!   `max.compaction.lag.ms`, or when a kept tombstone's delete horizon has passed.
//! - Offsets below `cleaned_to` were compacted by an earlier pass of this process (it
//!   starts at the log start, so the first pass after a restart maps everything again:
//!   cleaning twice is harmless).
//! - A compacted topic refuses records without a key (INVALID_RECORD, as Kafka), so only a
//!   topic made compacted later holds any, and the cleaner removes them.

use strand_storage::{IoBudget, KafkaOffset, StorageError};
use strand_wire::RecordBatch;

use super::cleaner::{CleanOutcome, CleanupConfig, OffsetMap};
use super::{codec, Partition};
use crate::common::errors::KafkaError;

/// Why a partition is worth a compaction pass now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Due {
    /// Uncleaned data is older than `max.compaction.lag.ms`, or a tombstone's horizon
    /// passed: cleaned first, whatever the ratio.
    pub must: bool,
    /// Uncleaned bytes over all cleanable bytes (0..=1).
    pub dirty_ratio: f64,
}

/// The cleanable part of a compacted partition's log: closed, durable segments of
/// committed data older than `min.compaction.lag.ms`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cleanable {
    /// Bytes a pass already compacted.
    pub clean_bytes: u64,
    /// Bytes not compacted yet.
    pub dirty_bytes: u64,
    /// When the oldest segment with dirty data was created (`i64::MAX`: none).
    pub oldest_dirty_ms: i64,
}

impl Cleanable {
    /// Dirty bytes over cleanable bytes (0 when nothing is cleanable).
    pub fn dirty_ratio(&self) -> f64 {
        match self.clean_bytes + self.dirty_bytes {
            0 => 0.0,
            total => self.dirty_bytes as f64 / total as f64,
        }
    }
}

/// What this process knows of a partition's cleaning (not persisted).
#[derive(Clone, Copy, Debug)]
pub(super) struct CleanerProgress {
    /// Offsets below this were compacted (the next pass has dirty data only above it).
    pub cleaned_to: KafkaOffset,
    /// The earliest delete horizon of a tombstone kept by the last pass (`i64::MAX`:
    /// none).
    pub earliest_horizon_ms: i64,
    /// When the last pass ended (ms since the epoch; -1: never).
    pub last_clean_ms: i64,
}

impl Default for CleanerProgress {
    fn default() -> Self {
        CleanerProgress {
            cleaned_to: KafkaOffset(0),
            earliest_horizon_ms: i64::MAX,
            last_clean_ms: -1,
        }
    }
}

impl Partition {
    /// Applies the topic's cleanup settings.
    pub fn set_cleanup(&self, c: CleanupConfig) {
        self.cleanup.set(c);
    }

    /// The topic's cleanup settings.
    pub fn cleanup(&self) -> CleanupConfig {
        self.cleanup.get()
    }

    /// When the last compaction pass ended (ms since the epoch; -1: never, in this
    /// process).
    pub fn last_clean_ms(&self) -> i64 {
        self.progress.get().last_clean_ms
    }

    /// A compacted topic takes only keyed records (Kafka: INVALID_RECORD). Decodes the
    /// batch (decompressing it, bounded), so only compacted topics pay for it.
    pub(super) fn require_keys(&self, view: &RecordBatch) -> Result<(), KafkaError> {
        if !self.cleanup.get().compact || view.attributes().is_control() {
            return Ok(());
        }
        let records = codec::records_of(view)
            .map_err(|e| KafkaError::CorruptMessage(format!("cannot read the records: {e}")))?;
        let why = format!(
            "Compacted topic cannot accept message without key in topic partition {}-{}.",
            self.topic, self.index
        );
        let keyless: Vec<(i32, String)> = (0i32..)
            .zip(&records)
            .filter(|(_, r)| r.key.is_none())
            .map(|(i, _)| (i, why.clone()))
            .collect();
        if keyless.is_empty() {
            return Ok(());
        }
        // Kafka's message for a batch refused for some of its records.
        let message = format!(
            "One or more records have been rejected due to {} record errors in total, and \
             only showing the first three errors at most: {:?}",
            keyless.len(),
            keyless.iter().take(3).map(|(i, _)| i).collect::<Vec<_>>()
        );
        Err(KafkaError::RecordErrors {
            message,
            records: keyless,
        })
    }

    /// Whether a compaction pass is due at `now_ms` (see the module invariants); `None`
    /// for a topic that is not compacted or has nothing cleanable.
    pub fn compaction_due(&self, now_ms: i64) -> Option<Due> {
        let c = self.cleanup.get();
        let cleanable = self.cleanable(now_ms)?;
        let (dirty, dirty_ratio) = (cleanable.dirty_bytes, cleanable.dirty_ratio());
        if cleanable.clean_bytes + dirty == 0 {
            return None;
        }
        let overdue =
            dirty > 0 && now_ms.saturating_sub(cleanable.oldest_dirty_ms) > c.max_compaction_lag_ms;
        let horizon = self.progress.get().earliest_horizon_ms <= now_ms;
        let by_ratio = dirty > 0 && dirty_ratio >= c.min_cleanable_dirty_ratio;
        (overdue || horizon || by_ratio).then_some(Due {
            must: overdue || horizon,
            dirty_ratio,
        })
    }

    /// The cleanable part of the log at `now_ms`; `None` unless the topic is compacted.
    pub fn cleanable(&self, now_ms: i64) -> Option<Cleanable> {
        let c = self.cleanup.get();
        if !c.compact {
            return None;
        }
        let cleaned_to = self.progress.get().cleaned_to;
        let committed = self.committed_end();
        let young = now_ms.saturating_sub(c.min_compaction_lag_ms);
        let mut out = Cleanable {
            oldest_dirty_ms: i64::MAX,
            ..Cleanable::default()
        };
        for s in self.log.segments_info().into_iter().take_while(|s| {
            s.rewritable && s.next_offset <= committed && s.max_timestamp_ms <= young
        }) {
            if s.next_offset > cleaned_to {
                out.dirty_bytes += s.size_bytes;
                out.oldest_dirty_ms = out.oldest_dirty_ms.min(s.created_ms);
            } else {
                out.clean_bytes += s.size_bytes;
            }
        }
        Some(out)
    }

    /// One compaction pass with the topic's settings; remembers how far it cleaned and
    /// the earliest tombstone horizon it kept.
    pub async fn compact_now(
        &self,
        map: &mut OffsetMap,
        budget: &mut IoBudget,
        now_ms: i64,
    ) -> Result<CleanOutcome, StorageError> {
        let c = self.cleanup.get();
        let out = self
            .compact(
                map,
                budget,
                now_ms,
                c.min_compaction_lag_ms,
                c.delete_retention_ms,
            )
            .await?;
        let mut p = self.progress.get();
        p.cleaned_to = p.cleaned_to.max(out.map_end);
        p.earliest_horizon_ms = out.earliest_horizon_ms;
        p.last_clean_ms = crate::common::clock::wall_ms();
        self.progress.set(p);
        Ok(out)
    }

    /// Closes the active segment once it is older than `segment.ms` (a quiet compacted
    /// partition's records become cleanable); on one node a flush then finalizes it.
    /// Replicated logs are finalized by the replicator's next flush.
    pub fn roll_if_idle(self: &std::rc::Rc<Self>) -> bool {
        let rolled = self.log.roll_if_idle();
        if rolled {
            self.ensure_flushing();
        }
        rolled
    }

    /// The end of the committed data a pass may clean: what this replica applied, or on
    /// one node the last stable offset (as Kafka's cleaner stops at the first unstable
    /// offset: a record of an open transaction, which may yet abort, must not supersede an
    /// older value). A pass is also bounded by the last stable offset of the
    /// partition-state checkpoint (`Partition::compact`), which every replica keeps.
    pub(super) fn committed_end(&self) -> KafkaOffset {
        if self.replicated() {
            self.applied_end.get()
        } else {
            self.last_stable_offset()
        }
    }
}
