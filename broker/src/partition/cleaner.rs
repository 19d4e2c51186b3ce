//! Log compaction of one partition's log (issue 21; storage/COMPACTION-PLAN.md): one pass
//! maps the latest offset of every key in the closed segments below a bound, then
//! rewrites those segments keeping, per key, only that record (`storage::log_clean`).
//!
//! Invariants, as Kafka's cleaner keeps them:
//! - Offsets never change and the newest record of every key below the map's end stays;
//!   records at or past the map's end, and segments past the bound, are untouched.
//! - A tombstone (null value) stays until `delete.retention.ms` after the pass that first
//!   saw it, which stamps that horizon in its batch (KIP-534: `baseTimestamp` with the
//!   attribute bit, record timestamps re-based so they keep their values).
//! - Records without a key are removed (only a topic made compacted later has any).
//! - A batch that loses every record becomes a stub, except the last batch of each
//!   producer and the log's last data batch, which stay as empty batches (sequence checks
//!   and consumers reaching the end need them).
//! - A batch that cannot be read is kept whole and counted; nothing is dropped on doubt.
//! - The records of aborted transactions are never mapped, so they never supersede a
//!   committed record of their key, and every pass removes them (as Kafka's cleaner
//!   does). The caller's bound stops before any transaction whose outcome is not known
//!   yet.
//! - A transaction marker stays while any batch of its transaction is in the log (an
//!   emptied batch kept for its producer included: replaying the log never meets a
//!   transaction without its end), and while it may be its producer's last entry (a
//!   remembered producer with no later entry seen: its epoch). Past that it goes as a
//!   tombstone does: the first pass stamps its delete horizon, a pass after the horizon
//!   removes it (Kafka's cleaner, KIP-534).

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use bytes::{Bytes, BytesMut};
use strand_storage::{
    FrameHeader, FrameKind, FrameRewrite, IoBudget, KafkaOffset, Log, StorageError,
};
use strand_wire::records::{encode_record, Record};
use strand_wire::{empty_batch, BatchHeader, Marker, MarkerKind, RecordBatch, TimestampType};

use crate::partition::codec;
use crate::partition::txn_index::AbortedTxn;

/// Bytes of one key slot of the offset map.
const SLOT_BYTES: usize = std::mem::size_of::<Slot>();
/// Largest share of the offset map's slots in use (open addressing slows past it).
const LOAD_FACTOR_MAX: f64 = 0.9;
/// Bytes of the log read per step while mapping keys.
const MAP_READ_BYTES: usize = 1024 * 1024;

/// One slot: a key's 128-bit hash and its latest offset (`EMPTY`: unused).
#[derive(Clone, Copy, Debug)]
struct Slot {
    h1: u64,
    h2: u64,
    offset: i64,
}

const EMPTY: i64 = -1;

/// Key → latest offset, in a fixed memory budget (Kafka's `SkimpyOffsetMap`): keys are
/// kept as 128-bit hashes, so two keys share a slot only with a vanishing probability.
pub struct OffsetMap {
    slots: Vec<Slot>,
    used: usize,
    capacity: usize,
}

fn key_hash(key: &[u8]) -> (u64, u64) {
    let one = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        salt.hash(&mut h);
        key.hash(&mut h);
        h.finish()
    };
    (one(1), one(2))
}

impl OffsetMap {
    /// A map in `memory_bytes` (at least 16 slots).
    pub fn with_memory(memory_bytes: usize) -> OffsetMap {
        let n = (memory_bytes / SLOT_BYTES).max(16);
        OffsetMap {
            slots: vec![
                Slot {
                    h1: 0,
                    h2: 0,
                    offset: EMPTY
                };
                n
            ],
            used: 0,
            capacity: (n as f64 * LOAD_FACTOR_MAX) as usize,
        }
    }

    /// Forgets every key.
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| s.offset = EMPTY);
        self.used = 0;
    }

    fn find(&self, h: (u64, u64)) -> usize {
        let n = self.slots.len();
        let mut at = (h.0 as usize) % n;
        loop {
            let s = &self.slots[at];
            if s.offset == EMPTY || (s.h1, s.h2) == h {
                return at;
            }
            at = (at + 1) % n;
        }
    }

    /// Records `offset` for `key` (the larger offset wins). False when a new key does not
    /// fit: the map is full.
    pub fn put(&mut self, key: &[u8], offset: i64) -> bool {
        let h = key_hash(key);
        let at = self.find(h);
        let s = &mut self.slots[at];
        if s.offset == EMPTY {
            if self.used >= self.capacity {
                return false;
            }
            self.used += 1;
            *s = Slot {
                h1: h.0,
                h2: h.1,
                offset,
            };
        } else {
            s.offset = s.offset.max(offset);
        }
        true
    }

    /// The latest offset of `key`, if mapped.
    pub fn get(&self, key: &[u8]) -> Option<i64> {
        let s = self.slots[self.find(key_hash(key))];
        (s.offset != EMPTY).then_some(s.offset)
    }

    /// Keys mapped.
    pub fn len(&self) -> usize {
        self.used
    }

    /// Whether no key is mapped.
    pub fn is_empty(&self) -> bool {
        self.used == 0
    }
}

/// Kafka's `delete.retention.ms` default (one day).
pub const DELETE_RETENTION_MS_DEFAULT: i64 = 86_400_000;
/// Kafka's `min.cleanable.dirty.ratio` default.
pub const MIN_CLEANABLE_DIRTY_RATIO_DEFAULT: f64 = 0.5;

/// A topic's cleanup settings: `cleanup.policy` and the compaction configs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CleanupConfig {
    /// `cleanup.policy` holds `compact`: the cleaner keeps the latest record per key.
    pub compact: bool,
    /// `cleanup.policy` holds `delete`: retention deletes old segments.
    pub delete: bool,
    /// `delete.retention.ms`: how long a tombstone stays after a pass first sees it.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio`: the share of uncleaned bytes that makes a pass due.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: records younger than this are not cleaned.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: uncleaned data older than this makes a pass due.
    pub max_compaction_lag_ms: i64,
}

impl Default for CleanupConfig {
    fn default() -> Self {
        CleanupConfig {
            compact: false,
            delete: true,
            delete_retention_ms: DELETE_RETENTION_MS_DEFAULT,
            min_cleanable_dirty_ratio: MIN_CLEANABLE_DIRTY_RATIO_DEFAULT,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
        }
    }
}

/// What one pass needs besides the log.
pub struct CleanContext {
    /// Now, in ms since the epoch.
    pub now_ms: i64,
    /// How long a tombstone stays after a pass first sees it.
    pub delete_retention_ms: i64,
    /// Each producer's last batch (base offset), kept as an empty batch at least.
    pub producer_last_batches: HashMap<i64, i64>,
    /// The producers the partition remembers: a marker that may be the last entry of one
    /// stays (replaying the log gives the producer its epoch).
    pub producers: HashSet<i64>,
    /// Offsets from here on are not touched (the caller's bound: committed, applied,
    /// below the partition-state checkpoint, past `min.compaction.lag.ms`).
    pub clean_end: KafkaOffset,
    /// Keys are mapped from here (an earlier pass's map end: the data below holds one
    /// record per key already, and a key the map lacks keeps its record), so a pass
    /// neither maps the compacted part again nor stops where a full map stopped before.
    pub map_from: KafkaOffset,
    /// The aborted transactions of the cleaned range.
    pub aborted: AbortedRanges,
}

/// Aborted transactions by producer: a transactional data batch of producer `p` at offset
/// `o` is aborted when one of `p`'s ranges `[first offset, marker offset)` holds `o` (a
/// producer's transactions in a partition never overlap).
#[derive(Clone, Debug, Default)]
pub struct AbortedRanges(HashMap<i64, Vec<(i64, i64)>>);

impl AbortedRanges {
    /// The ranges of `txns` (ordered by marker offset, as `TxnIndex` keeps them).
    pub fn of(txns: &[AbortedTxn]) -> AbortedRanges {
        let mut by_producer: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
        for t in txns {
            by_producer
                .entry(t.producer_id)
                .or_default()
                .push((t.first_offset, t.last_offset));
        }
        AbortedRanges(by_producer)
    }

    /// Whether `view` is a data batch of an aborted transaction.
    pub fn holds(&self, view: &RecordBatch) -> bool {
        let a = view.attributes();
        if !a.is_transactional() || a.is_control() {
            return false;
        }
        let at = view.base_offset();
        self.0.get(&view.producer_id()).is_some_and(|ranges| {
            let i = ranges.partition_point(|(_, marker)| *marker <= at);
            ranges.get(i).is_some_and(|(first, _)| *first <= at)
        })
    }
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanOutcome {
    /// Offsets below this were compacted (the next pass maps from here).
    pub map_end: KafkaOffset,
    /// Segments rewritten.
    pub segments: u64,
    /// Segment bytes before and after.
    pub bytes_before: u64,
    /// Segment bytes after.
    pub bytes_after: u64,
    /// Records removed.
    pub records_removed: u64,
    /// Batches kept whole because they could not be read.
    pub unreadable_batches: u64,
    /// Transaction markers removed.
    pub markers_removed: u64,
    /// The offsets of the abort markers removed, ascending: the partition forgets those
    /// aborted transactions (no record of theirs is left to skip).
    pub aborts_removed: Vec<i64>,
    /// The earliest delete horizon of a tombstone or marker kept (`i64::MAX`: none): the
    /// partition is worth a pass then even if nothing else changed.
    pub earliest_horizon_ms: i64,
}

/// What one pass learns of producers while it reads the log, for the markers.
#[derive(Debug, Default)]
struct MarkerWatch {
    /// Each producer's latest batch (data or marker) seen while mapping: a marker below
    /// it is not the producer's last entry.
    latest: HashMap<i64, i64>,
    /// Producers with a transactional data batch met by the rewrite since their last
    /// marker, and whether one of those batches stays after this pass: the marker stays
    /// then; when all of them go in this pass it may be stamped, not removed (a pass after
    /// the batches' removal is durable removes it).
    open: HashMap<i64, bool>,
    /// A batch whose producer could not be read was met: markers after it stay.
    doubt: bool,
}

impl MarkerWatch {
    /// Notes a batch read while mapping.
    fn mapped(&mut self, view: &RecordBatch) {
        if view.producer_id() >= 0 {
            let latest = self.latest.entry(view.producer_id()).or_insert(i64::MIN);
            *latest = (*latest).max(view.base_offset());
        }
    }

    /// Notes a data batch the rewrite met, and whether it `stays` (in any form).
    fn met(&mut self, view: &RecordBatch, stays: bool) {
        if view.attributes().is_transactional() {
            *self.open.entry(view.producer_id()).or_default() |= stays;
        }
    }
}

/// Maps every key of the closed segments below `clean_end` (from the log start), up to
/// what the map holds, then rewrites the segments it covers. One pass; the caller runs it
/// when the partition is worth cleaning.
pub async fn clean_once(
    log: &Log,
    map: &mut OffsetMap,
    budget: &mut IoBudget,
    ctx: &CleanContext,
) -> Result<CleanOutcome, StorageError> {
    let segments: Vec<_> = log
        .segments_info()
        .into_iter()
        .take_while(|s| s.rewritable && s.next_offset <= ctx.clean_end)
        .collect();
    let mut out = CleanOutcome {
        earliest_horizon_ms: i64::MAX,
        ..CleanOutcome::default()
    };
    let (Some(first), Some(last)) = (segments.first(), segments.last()) else {
        return Ok(out);
    };
    map.clear();
    let from = first.base_offset.max(ctx.map_from);
    let mut watch = MarkerWatch::default();
    out.map_end = build_map(
        log,
        (map, budget, &mut watch),
        (from, last.next_offset),
        ctx,
        &mut out,
    )
    .await?;
    let last_data_offset = last_data_batch(log).await?;
    let map_end = out.map_end;
    for seg in segments.iter().take_while(|s| s.base_offset < map_end) {
        let mut decide = |h: &FrameHeader, body: &Bytes| {
            decide_frame(h, body, map, ctx, (&mut out, &mut watch), last_data_offset)
        };
        let rewritten = log.rewrite_segment(seg, &mut decide, budget).await?;
        if let Some(r) = rewritten.filter(|r| r.frames_replaced + r.frames_stubbed > 0) {
            out.segments += 1;
            out.bytes_before += r.bytes_before;
            out.bytes_after += r.bytes_after;
        }
    }
    Ok(out)
}

/// Maps the keys of `from..end` but those of aborted transactions; returns where the map
/// stops (at a batch boundary when it filled up, else `end`).
async fn build_map(
    log: &Log,
    (map, budget, watch): (&mut OffsetMap, &mut IoBudget, &mut MarkerWatch),
    (from, end): (KafkaOffset, KafkaOffset),
    ctx: &CleanContext,
    out: &mut CleanOutcome,
) -> Result<KafkaOffset, StorageError> {
    let mut next = from.max(log.log_start_offset());
    while next < end {
        let r = log.read(next, end, MAP_READ_BYTES, true).await?;
        if r.batches.is_empty() {
            break;
        }
        let read_bytes = r.batches.iter().map(|b| b.len() as u64).sum::<u64>();
        for b in r.batches {
            let Ok(view) = RecordBatch::parse(b) else {
                out.unreadable_batches += 1;
                continue;
            };
            watch.mapped(&view);
            if view.attributes().is_control() || ctx.aborted.holds(&view) {
                continue;
            }
            let Ok(records) = codec::records_of(&view) else {
                out.unreadable_batches += 1;
                continue;
            };
            let base = view.base_offset();
            let fits = records.iter().all(|r| match &r.key {
                Some(k) => map.put(k, base + i64::from(r.offset_delta)),
                None => true,
            });
            if !fits {
                return Ok(KafkaOffset(base));
            }
        }
        next = r.next_offset;
        budget.read(read_bytes).await;
    }
    Ok(end)
}

/// Base offset of the log's last data batch, if any (kept even when emptied).
async fn last_data_batch(log: &Log) -> Result<Option<i64>, StorageError> {
    let Some(last) = log
        .segments_info()
        .into_iter()
        .rev()
        .find_map(|s| s.last_index)
    else {
        return Ok(None);
    };
    let first = log.first_index();
    let mut hi = last.next();
    while hi > first {
        let lo = strand_storage::RaftIndex(hi.0.saturating_sub(64).max(first.0));
        let frames = log.read_entries(lo, hi, usize::MAX).await?;
        if let Some(f) = frames
            .iter()
            .rev()
            .find(|f| f.header.kind.occupies_offsets())
        {
            return Ok(Some(f.header.kafka_base_offset.0));
        }
        hi = lo;
    }
    Ok(None)
}

/// What the rewrite does with one frame (see the module invariants).
fn decide_frame(
    h: &FrameHeader,
    body: &Bytes,
    map: &OffsetMap,
    ctx: &CleanContext,
    (out, watch): (&mut CleanOutcome, &mut MarkerWatch),
    last_data_offset: Option<i64>,
) -> FrameRewrite {
    if h.kind != FrameKind::Data || h.next_offset() > out.map_end {
        return FrameRewrite::Keep;
    }
    let Ok(view) = RecordBatch::parse(body.clone()) else {
        out.unreadable_batches += 1;
        watch.doubt = true;
        return FrameRewrite::Keep;
    };
    if view.attributes().is_control() {
        return decide_marker(&view, ctx, watch, out, last_data_offset);
    }
    let rewrite = decide_data(&view, map, ctx, out, last_data_offset);
    watch.met(&view, rewrite != FrameRewrite::Stub);
    rewrite
}

/// What the rewrite does with a data batch.
fn decide_data(
    view: &RecordBatch,
    map: &OffsetMap,
    ctx: &CleanContext,
    out: &mut CleanOutcome,
    last_data_offset: Option<i64>,
) -> FrameRewrite {
    let Ok(records) = codec::records_of(view) else {
        out.unreadable_batches += 1;
        return FrameRewrite::Keep;
    };
    let base = view.base_offset();
    let a = view.attributes();
    let horizon = if a.has_delete_horizon() {
        view.first_timestamp()
    } else {
        ctx.now_ms.saturating_add(ctx.delete_retention_ms)
    };
    let total = records.len();
    let aborted = ctx.aborted.holds(view);
    let kept: Vec<Record> = records
        .into_iter()
        .filter(|r| {
            let Some(k) = &r.key else { return false };
            if aborted {
                return false;
            }
            let offset = base + i64::from(r.offset_delta);
            if map.get(k).is_some_and(|latest| latest > offset) {
                return false;
            }
            r.value.is_some() || ctx.now_ms < horizon
        })
        .collect();
    out.records_removed += (total - kept.len()) as u64;
    let tombstones = kept.iter().any(|r| r.value.is_none());
    if tombstones {
        out.earliest_horizon_ms = out.earliest_horizon_ms.min(horizon);
    }
    let needs_horizon = tombstones && !a.has_delete_horizon();
    if kept.len() == total && !needs_horizon {
        return FrameRewrite::Keep;
    }
    if kept.is_empty() {
        let producers_last = view.producer_id() >= 0
            && ctx.producer_last_batches.get(&view.producer_id()) == Some(&base);
        return if producers_last || last_data_offset == Some(base) {
            FrameRewrite::Replace(empty_batch(view))
        } else {
            FrameRewrite::Stub
        };
    }
    match rebuild(view, &kept, tombstones.then_some(horizon)) {
        Ok(b) => FrameRewrite::Replace(b),
        Err(e) => {
            tracing::warn!(error = %e, offset = base, "a cleaned batch could not be re-compressed; kept whole");
            out.unreadable_batches += 1;
            FrameRewrite::Keep
        }
    }
}

/// What the rewrite does with a transaction marker (see the module invariants).
fn decide_marker(
    view: &RecordBatch,
    ctx: &CleanContext,
    watch: &mut MarkerWatch,
    out: &mut CleanOutcome,
    last_data_offset: Option<i64>,
) -> FrameRewrite {
    let (producer, base) = (view.producer_id(), view.base_offset());
    let batches = watch.open.remove(&producer);
    if batches == Some(true) || watch.doubt || last_data_offset == Some(base) {
        return FrameRewrite::Keep;
    }
    let a = view.attributes();
    // A stamped marker was not its producer's last entry when a pass stamped it, and
    // stays so: the later entry that showed it is followed by the producer's last, which
    // no pass removes.
    if !a.has_delete_horizon() {
        let latest = watch
            .latest
            .get(&producer)
            .copied()
            .max(ctx.producer_last_batches.get(&producer).copied());
        let maybe_last = ctx.producers.contains(&producer) && latest.is_none_or(|l| l <= base);
        if maybe_last {
            return FrameRewrite::Keep;
        }
    }
    let horizon = if a.has_delete_horizon() {
        view.first_timestamp()
    } else {
        ctx.now_ms.saturating_add(ctx.delete_retention_ms)
    };
    if ctx.now_ms >= horizon && batches.is_none() {
        out.markers_removed += 1;
        if Marker::of(view).is_ok_and(|m| m.kind == MarkerKind::Abort) {
            out.aborts_removed.push(base);
        }
        return FrameRewrite::Stub;
    }
    out.earliest_horizon_ms = out.earliest_horizon_ms.min(horizon);
    if a.has_delete_horizon() {
        return FrameRewrite::Keep;
    }
    match codec::records_of(view).map(|records| rebuild(view, &records, Some(horizon))) {
        Ok(Ok(b)) => FrameRewrite::Replace(b),
        _ => {
            out.unreadable_batches += 1;
            FrameRewrite::Keep
        }
    }
}

/// `view` with only `kept` (in order), compressed with its codec; with `horizon`, the
/// delete horizon is stamped and record timestamps re-based on it.
fn rebuild(
    view: &RecordBatch,
    kept: &[Record],
    horizon: Option<i64>,
) -> Result<Bytes, codec::CodecError> {
    let a = view.attributes();
    // Record times are relative to `baseTimestamp`, a stamped horizon included.
    let old_base = view.first_timestamp();
    let new_base = horizon.unwrap_or(old_base);
    let mut section = BytesMut::new();
    let mut max_ts = i64::MIN;
    for r in kept {
        let ts = old_base.saturating_add(r.timestamp_delta_ms);
        max_ts = max_ts.max(ts);
        let rebased = Record {
            timestamp_delta_ms: ts.saturating_sub(new_base),
            ..r.clone()
        };
        encode_record(&mut section, &rebased);
    }
    let codec = a.compression();
    let packed = codec::compress(codec, &section)?;
    let attributes = if horizon.is_some() {
        a.with_delete_horizon()
    } else {
        a
    };
    let max_timestamp_ms = if a.timestamp_type() == TimestampType::LogAppendTime {
        view.max_timestamp()
    } else {
        max_ts
    };
    Ok(BatchHeader {
        attributes,
        first_timestamp_ms: new_base,
        max_timestamp_ms,
        record_count: kept.len() as i32,
        ..BatchHeader::of(view)
    }
    .encode(&packed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;
    use strand_storage::{AppendEntry, BatchCache, LogConfig, RaftTerm, SystemClock};
    use strand_wire::{BatchBuilder, Compression};

    const NOW_MS: i64 = 1_000_000;
    const RETENTION_MS: i64 = 5_000;

    async fn open(dir: &std::path::Path) -> Log {
        let lc = LogConfig {
            allow_buffered_io: true,
            segment_bytes: 4096,
            ..LogConfig::default()
        };
        Log::open(dir, lc, Rc::new(SystemClock), Rc::new(BatchCache::new(0)))
            .await
            .expect("open log")
    }

    /// One batch of `(key, value)` records, compressed with `codec`, from producer `pid`.
    fn batch(
        records: &[(Option<&str>, Option<&str>)],
        codec: Compression,
        pid: i64,
        seq: i32,
    ) -> Bytes {
        let mut b = BatchBuilder::new(500);
        if pid >= 0 {
            b = b.producer(pid, 0, seq);
        }
        for (i, (k, v)) in records.iter().enumerate() {
            b.push(
                500 + i as i64,
                k.map(str::as_bytes),
                v.map(str::as_bytes),
                &[],
            );
        }
        let packed = codec::compress(codec, b.records_bytes()).expect("compress");
        b.build_with_records(codec, &packed)
    }

    /// `len` characters no codec shrinks much, different for each `seed`.
    fn noise(seed: u64, len: usize) -> String {
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                char::from(b'!' + (x >> 58) as u8)
            })
            .collect()
    }

    fn append(log: &Log, body: Bytes) -> i64 {
        let e = AppendEntry {
            term: RaftTerm(1),
            kind: FrameKind::Data,
            body,
        };
        log.append_one(&e).expect("append").kafka_base_offset.0
    }

    /// Every record left: (offset, key, value, timestamp), with batches checked as stored.
    async fn records(log: &Log) -> Vec<(i64, Option<String>, Option<String>, i64)> {
        let r = log
            .read(
                log.log_start_offset(),
                log.log_end_offset(),
                usize::MAX,
                true,
            )
            .await
            .expect("read");
        let s = |b: &Option<Bytes>| b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
        let mut out = Vec::new();
        for b in r.batches {
            let v = RecordBatch::parse(b).expect("parses");
            v.validate_stored().expect("valid");
            for r in codec::records_of(&v).expect("readable") {
                let offset = v.base_offset() + i64::from(r.offset_delta);
                out.push((
                    offset,
                    s(&r.key),
                    s(&r.value),
                    v.first_timestamp() + r.timestamp_delta_ms,
                ));
            }
        }
        out
    }

    fn ctx(log: &Log, now_ms: i64, producers: HashMap<i64, i64>) -> CleanContext {
        CleanContext {
            now_ms,
            delete_retention_ms: RETENTION_MS,
            producer_last_batches: producers,
            producers: HashSet::new(),
            clean_end: log.log_end_offset(),
            map_from: KafkaOffset(0),
            aborted: AbortedRanges::default(),
        }
    }

    /// Kafka's example records, then twenty of four keys that roll segments.
    fn fill_example(log: &Log, codec: Compression) {
        append(
            log,
            batch(
                &[(Some("u1"), Some("a")), (Some("u2"), Some("b"))],
                codec,
                -1,
                0,
            ),
        );
        append(
            log,
            batch(
                &[(Some("u1"), Some("c")), (None, Some("keyless"))],
                codec,
                -1,
                0,
            ),
        );
        append(
            log,
            batch(&[(Some("u3"), Some("d")), (Some("u2"), None)], codec, -1, 0),
        );
        for i in 0..20 {
            append(
                log,
                batch(
                    &[(Some(&format!("f{}", i % 4)), Some(&noise(i, 300)))],
                    codec,
                    -1,
                    0,
                ),
            );
        }
    }

    /// Kafka's example: the latest value per key stays at its offset, in every codec; a
    /// tombstone stays (its batch stamped) until its horizon passes; keyless records go.
    #[test]
    fn the_latest_record_of_each_key_stays_at_its_offset() {
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let tmp = tempfile::tempdir().expect("tempdir");
            let ran = strand_storage::io_runtime::block_on("cleaner-test", 1, async {
                let log = open(tmp.path()).await;
                fill_example(&log, codec);
                log.flush().await.expect("flush");
                log.flush().await.expect("finalize");
                let before = records(&log).await;
                let mut map = OffsetMap::with_memory(1 << 16);
                let out = clean_once(
                    &log,
                    &mut map,
                    &mut IoBudget::unlimited(),
                    &ctx(&log, NOW_MS, HashMap::new()),
                )
                .await
                .expect("clean");
                assert!(
                    out.segments >= 1 && out.records_removed > 0,
                    "{codec:?}: {out:?}"
                );
                let after = records(&log).await;
                let keep = |r: &&(i64, Option<String>, Option<String>, i64)| {
                    let Some(k) = &r.1 else { return false };
                    // The map covers the offsets below its end only.
                    let latest = before
                        .iter()
                        .filter(|b| b.1.as_ref() == Some(k) && b.0 < out.map_end.0)
                        .map(|b| b.0)
                        .max();
                    latest == Some(r.0) || r.0 >= out.map_end.0
                };
                let want: Vec<_> = before.iter().filter(keep).cloned().collect();
                assert_eq!(after, want, "{codec:?}");
                assert!(
                    after
                        .iter()
                        .any(|r| r.1.as_deref() == Some("u2") && r.2.is_none()),
                    "tombstone kept"
                );
                assert_eq!(out.earliest_horizon_ms, NOW_MS + RETENTION_MS);

                // Past the horizon the tombstone goes; nothing else changes.
                let out = clean_once(
                    &log,
                    &mut map,
                    &mut IoBudget::unlimited(),
                    &ctx(&log, NOW_MS + RETENTION_MS, HashMap::new()),
                )
                .await
                .expect("clean");
                assert_eq!(out.records_removed, 1, "{codec:?}");
                let want: Vec<_> = want.into_iter().filter(|r| r.2.is_some()).collect();
                assert_eq!(records(&log).await, want, "{codec:?}");
            });
            ran.expect("runtime");
        }
    }

    /// A producer's last batch stays as an empty batch over its offsets when all its
    /// records are superseded; other emptied batches become stubs that reads skip.
    #[test]
    fn a_producers_last_batch_stays_empty() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ran = strand_storage::io_runtime::block_on("cleaner-test", 1, async {
            let log = open(tmp.path()).await;
            let pad = "y".repeat(400);
            let first = append(
                &log,
                batch(&[(Some("k"), Some("1"))], Compression::None, 7, 0),
            );
            let last_of_7 = append(
                &log,
                batch(&[(Some("k"), Some("2"))], Compression::None, 7, 1),
            );
            for i in 0..20 {
                append(
                    &log,
                    batch(&[(Some("k"), Some(&pad))], Compression::None, 8, i),
                );
            }
            log.flush().await.expect("flush");
            log.flush().await.expect("finalize");
            let producers = HashMap::from([(7, last_of_7), (8, 21)]);
            let mut map = OffsetMap::with_memory(1 << 16);
            let out = clean_once(
                &log,
                &mut map,
                &mut IoBudget::unlimited(),
                &ctx(&log, NOW_MS, producers),
            )
            .await
            .expect("clean");
            assert!(out.segments >= 1);
            let r = log
                .read(KafkaOffset(first), log.log_end_offset(), usize::MAX, true)
                .await
                .expect("read");
            let first_batch = RecordBatch::parse(r.batches[0].clone()).expect("parses");
            assert_eq!(
                (first_batch.base_offset(), first_batch.record_count()),
                (last_of_7, 0)
            );
            assert_eq!(first_batch.producer_id(), 7);
            let frames = log
                .read_entries(
                    strand_storage::RaftIndex(1),
                    strand_storage::RaftIndex(2),
                    usize::MAX,
                )
                .await
                .expect("frames");
            assert_eq!(
                frames[0].header.kind,
                FrameKind::Cleaned,
                "producer 7's first batch"
            );
        });
        ran.expect("runtime");
    }

    /// With a map too small for the log, each pass maps from where the last one stopped,
    /// so passes go on until every key keeps one record.
    #[test]
    fn passes_continue_where_a_full_map_stopped() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ran = strand_storage::io_runtime::block_on("cleaner-test", 1, async {
            let log = open(tmp.path()).await;
            for round in 0..2 {
                for k in 0..40 {
                    let key = format!("k{k}");
                    let seq = round * 40 + k;
                    append(
                        &log,
                        batch(&[(Some(&key), Some("v"))], Compression::None, 9, seq),
                    );
                }
            }
            append(
                &log,
                batch(&[(Some("end"), Some("v"))], Compression::None, 9, 80),
            );
            log.flush().await.expect("flush");
            log.flush().await.expect("finalize");
            let mut map = OffsetMap::with_memory(16 * SLOT_BYTES);
            let mut c = ctx(&log, NOW_MS, HashMap::new());
            let mut ends: Vec<i64> = Vec::new();
            for _ in 0..10 {
                let out = clean_once(&log, &mut map, &mut IoBudget::unlimited(), &c)
                    .await
                    .expect("clean");
                if ends.last() == Some(&out.map_end.0) {
                    break; // every closed segment is mapped
                }
                ends.push(out.map_end.0);
                c.map_from = out.map_end;
            }
            assert!(
                ends.len() > 2,
                "passes went past the first full map: {ends:?}"
            );
            let end = *ends.last().expect("a pass");
            let r = log
                .read(KafkaOffset(0), KafkaOffset(end), usize::MAX, true)
                .await
                .expect("read");
            let mut keys = Vec::new();
            for b in r.batches {
                let v = RecordBatch::parse(b).expect("parses");
                for rec in codec::records_of(&v).expect("records") {
                    if v.base_offset() + i64::from(rec.offset_delta) < end {
                        keys.push(rec.key.expect("keyed"));
                    }
                }
            }
            let n = keys.len();
            keys.sort();
            keys.dedup();
            assert_eq!(n, keys.len(), "one record per key below {end}: {ends:?}");
            assert_eq!(n, 40, "each of the 40 keys below {end}");
        });
        ran.expect("runtime");
    }

    /// Batches larger than the cleaner's 64 KiB reads, and batches its reads cut in two:
    /// the right records stay, and no byte is read more than once per phase (mapping the
    /// keys, rewriting the segments).
    #[test]
    fn batches_larger_than_a_read_and_cut_by_one_are_cleaned_reading_each_byte_once() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ran = strand_storage::io_runtime::block_on("cleaner-test", 1, async {
            let lc = LogConfig {
                allow_buffered_io: true,
                segment_bytes: 512 * 1024,
                ..LogConfig::default()
            };
            let cache = Rc::new(BatchCache::new(0));
            let log = Log::open(tmp.path(), lc, Rc::new(SystemClock), cache)
                .await
                .expect("open log");
            for i in 0..40u64 {
                // 40 KiB batches (most cut by a 64 KiB read) and, every fifth, 100 KiB.
                let len = if i % 5 == 0 { 100 * 1024 } else { 40 * 1024 };
                let key = format!("k{}", i % 4);
                let value = noise(i, len);
                append(
                    &log,
                    batch(&[(Some(&key), Some(&value))], Compression::None, -1, 0),
                );
            }
            log.flush().await.expect("flush");
            log.flush().await.expect("finalize");
            let before = records(&log).await;
            let size_bytes = log.size_bytes();
            let mut budget = IoBudget::unlimited();
            let mut map = OffsetMap::with_memory(1 << 16);
            let out = clean_once(
                &log,
                &mut map,
                &mut budget,
                &ctx(&log, NOW_MS, HashMap::new()),
            )
            .await
            .expect("clean");
            assert!(out.records_removed > 0, "{out:?}");
            let after = records(&log).await;
            let want: Vec<_> = before
                .iter()
                .filter(|r| {
                    r.0 >= out.map_end.0
                        || !before
                            .iter()
                            .any(|l| l.1 == r.1 && l.0 > r.0 && l.0 < out.map_end.0)
                })
                .cloned()
                .collect();
            assert_eq!(after, want);
            // Two phases read the log once each; a cut frame read again would add up to
            // the size of every cut batch on top.
            assert!(
                budget.read_bytes() <= 2 * size_bytes + 64 * 1024,
                "read {} of a {size_bytes}-byte log",
                budget.read_bytes()
            );
        });
        ran.expect("runtime");
    }

    #[test]
    fn a_full_map_stops_at_a_batch_boundary() {
        let mut map = OffsetMap::with_memory(16 * SLOT_BYTES);
        let mut n = 0;
        while map.put(format!("key-{n}").as_bytes(), n) {
            n += 1;
        }
        assert_eq!(map.len(), 14, "90% of 16 slots");
        assert!(map.put(b"key-3", 100), "a mapped key still updates");
        assert_eq!(map.get(b"key-3"), Some(100));
        assert!(map.put(b"key-3", 5));
        assert_eq!(map.get(b"key-3"), Some(100), "the larger offset wins");
        assert_eq!(map.get(b"absent"), None);
        map.clear();
        assert!(map.is_empty() && map.get(b"key-3").is_none());
    }
}
