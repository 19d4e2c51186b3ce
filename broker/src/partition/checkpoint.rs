//! Checkpoints of the state a partition rebuilds from its log: its idempotent producers, its
//! transactions (open and aborted, `txn_index`) and,
//! for a `__consumer_offsets` partition, its records as compaction would keep them (the
//! groups' committed offsets and metadata). Opening a partition or gaining its leadership
//! replays only the log after the newest checkpoint instead of the whole log (Kafka keeps
//! producer-state snapshots, and compacts the offsets topic, for the same reason). A
//! checkpoint is kept in memory and in `CHECKPOINT_FILE` in the partition's directory.
//!
//! Invariant: a checkpoint at offset `X` holds exactly the state of the committed batches
//! that end at or before `X`, and `X` is a batch boundary (or the log start offset). It is
//! built by replaying committed log data into the previous checkpoint, never copied from a
//! leader's live state, which holds batches not yet committed. A checkpoint that cannot be
//! read (missing, torn, corrupt, or past the log end) is replaced by the empty one at the
//! log start offset: the state is rebuilt from the whole log, as before checkpoints.

use std::path::Path;

use strand_storage::{KafkaOffset, Log, StorageError};
use strand_wire::RecordBatch;

use crate::partition::compacted::{Compacted, CompactedDecodeError, KeyScope, PendingTxnRecords};
use crate::partition::lookup::for_each_keyed_record;
use crate::partition::producer_state::{batch_ids, ProducerStates, StateDecodeError};
use crate::partition::txn_index::{TxnDecodeError, TxnIndex};

/// File name of the checkpoint in a partition's directory.
pub const CHECKPOINT_FILE: &str = "partition-state.checkpoint";
/// Committed data appended between two saved checkpoints: bounds what a leader gain or an
/// open replays (about this much read back).
pub const CHECKPOINT_INTERVAL_BYTES: u64 = 16 << 20;
/// Committed data appended between two moves of the checkpoint in memory: small, so that
/// a move replays what the batch cache still holds. Moving only every 16 MiB read most of
/// it back from disk under load: 16 partitions taking 115 MiB/s read 256 MiB back every
/// 2.2 s, and flushes waiting behind those reads took 5-14 ms (open loop p99 85-155 ms).
pub const CHECKPOINT_ADVANCE_BYTES: u64 = 2 << 20;
const _: () = assert!(CHECKPOINT_ADVANCE_BYTES <= CHECKPOINT_INTERVAL_BYTES);
/// Bytes read per step of a replay (the shard may run other work between steps).
const REPLAY_READ_BYTES: usize = 1 << 20;
/// First bytes of a checkpoint file.
const MAGIC: [u8; 4] = *b"SPST";
/// Format version written: 2 added the transaction index after the producers, 3 the
/// records of open transactions after the compacted records.
const VERSION: u8 = 3;
/// The oldest version read (no transaction index: none was kept).
const VERSION_MIN: u8 = 1;
/// Magic, version and offset.
const HEADER_BYTES: usize = 4 + 1 + 8;
/// CRC-32C trailer.
const TRAILER_BYTES: usize = 4;

/// Partition state as of a log offset.
#[derive(Clone, Debug, Default)]
pub struct Checkpoint {
    /// The state covers the committed batches ending at or before this offset.
    pub offset: KafkaOffset,
    /// The idempotent producers.
    pub states: ProducerStates,
    /// The open and aborted transactions.
    pub txns: TxnIndex,
    /// An offsets partition's records, compacted (`None` for any other partition).
    pub records: Option<Compacted>,
    /// An offsets partition's records of open transactions (empty for any other).
    pub pending: PendingTxnRecords,
}

/// Why a checkpoint file was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckpointError {
    /// Too short for a header and trailer.
    #[error("checkpoint truncated ({0} bytes)")]
    Truncated(usize),
    /// Not a checkpoint file.
    #[error("not a partition-state checkpoint")]
    Magic,
    /// Written by a newer version.
    #[error("checkpoint version {0} is not supported")]
    Version(u8),
    /// The CRC does not match (torn or corrupt).
    #[error("checkpoint CRC mismatch")]
    Crc,
    /// A negative offset.
    #[error("checkpoint offset {0} is negative")]
    Offset(i64),
    /// The state inside is malformed.
    #[error(transparent)]
    State(#[from] StateDecodeError),
    /// The records inside are malformed.
    #[error(transparent)]
    Records(#[from] CompactedDecodeError),
    /// The transaction index inside is malformed.
    #[error(transparent)]
    Txns(#[from] TxnDecodeError),
    /// The records flag is neither 0 nor 1.
    #[error("checkpoint records flag {0}")]
    RecordsFlag(u8),
    /// Keyed records where the partition keeps none, or none where it keeps them.
    #[error("checkpoint of another kind of partition (keyed records: {0})")]
    Kind(bool),
    /// Bytes after the state.
    #[error("{0} bytes after the producer state")]
    Trailing(usize),
}

impl Checkpoint {
    /// No producers (and no records, kept when the partition's keys are read by `keyed`),
    /// as of `offset`.
    pub fn empty(offset: KafkaOffset, keyed: Option<KeyScope>) -> Checkpoint {
        Checkpoint {
            offset,
            states: ProducerStates::default(),
            txns: TxnIndex::default(),
            records: keyed.map(Compacted::new),
            pending: PendingTxnRecords::default(),
        }
    }

    /// The file's bytes: magic, version, offset, the producer state, the transaction index,
    /// a records flag (0 or 1) and the records, CRC-32C of all before it.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + TRAILER_BYTES + 64);
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.offset.0.to_be_bytes());
        self.states.encode(&mut out);
        self.txns.encode(&mut out);
        match &self.records {
            None => out.push(0),
            Some(r) => {
                out.push(1);
                r.encode(&mut out);
                self.pending.encode(&mut out);
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Reads a file written by `encode` for a partition whose keys `keyed` reads (`None`:
    /// one that keeps no records).
    pub fn decode(bytes: &[u8], keyed: Option<KeyScope>) -> Result<Checkpoint, CheckpointError> {
        if bytes.len() < HEADER_BYTES + TRAILER_BYTES {
            return Err(CheckpointError::Truncated(bytes.len()));
        }
        let (body, crc) = bytes.split_at(bytes.len() - TRAILER_BYTES);
        if body[..4] != MAGIC {
            return Err(CheckpointError::Magic);
        }
        if crc32c::crc32c(body).to_be_bytes() != crc {
            return Err(CheckpointError::Crc);
        }
        let version = body[4];
        if !(VERSION_MIN..=VERSION).contains(&version) {
            return Err(CheckpointError::Version(version));
        }
        let mut offset = [0u8; 8];
        offset.copy_from_slice(&body[5..HEADER_BYTES]);
        let offset = i64::from_be_bytes(offset);
        if offset < 0 {
            return Err(CheckpointError::Offset(offset));
        }
        let (states, rest) = ProducerStates::decode(&body[HEADER_BYTES..])?;
        let (txns, rest) = match version {
            1 => (TxnIndex::default(), rest),
            _ => TxnIndex::decode(rest)?,
        };
        let (records, pending, rest) = match (rest.split_first(), keyed) {
            (Some((0, rest)), None) => (None, PendingTxnRecords::default(), rest),
            (Some((1, rest)), Some(scope_of)) => {
                let (r, rest) = Compacted::decode(rest, scope_of)?;
                let (pending, rest) = match version {
                    1 | 2 => (PendingTxnRecords::default(), rest),
                    _ => PendingTxnRecords::decode(rest)?,
                };
                (Some(r), pending, rest)
            }
            (Some((&flag, _)), _) if flag <= 1 => return Err(CheckpointError::Kind(flag == 1)),
            (Some((&flag, _)), _) => return Err(CheckpointError::RecordsFlag(flag)),
            (None, _) => return Err(CheckpointError::Truncated(bytes.len())),
        };
        if !rest.is_empty() {
            return Err(CheckpointError::Trailing(rest.len()));
        }
        Ok(Checkpoint {
            offset: KafkaOffset(offset),
            states,
            txns,
            records,
            pending,
        })
    }

    /// The checkpoint saved in `log`'s directory, if it is readable, within the log (or
    /// `replicated`) and keeps records exactly when the partition does (`keyed`); otherwise (logged) the
    /// empty one at the log start offset. A replicated log may be behind its checkpoint: a
    /// follower saves the one a leader's snapshot shipped before its log reaches it, and
    /// the checkpoint holds committed data only, which Raft never takes from a log (a
    /// replica that lacks it cannot lead). An unreplicated log behind its checkpoint lost
    /// durable data: the checkpoint is refused.
    pub async fn load(log: &Log, keyed: Option<KeyScope>, replicated: bool) -> Checkpoint {
        let path = log.dir().join(CHECKPOINT_FILE);
        let empty = Checkpoint::empty(log.log_start_offset(), keyed);
        let bytes = match strand_storage::io::read_small_file(&path).await {
            Ok(Some(b)) => b,
            Ok(None) => return empty,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e,
                    "cannot read the partition-state checkpoint; replaying the whole log");
                return empty;
            }
        };
        match Checkpoint::decode(&bytes, keyed) {
            Err(CheckpointError::Kind(_)) => {
                tracing::warn!(path = %path.display(),
                    "partition-state checkpoint is of another kind of partition; replaying the whole log");
                empty
            }
            Ok(c) if replicated || c.offset <= log.log_end_offset() => c,
            Ok(c) => {
                tracing::warn!(path = %path.display(), offset = c.offset.0,
                    log_end_offset = log.log_end_offset().0,
                    "partition-state checkpoint is past the log end; replaying the whole log");
                empty
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e,
                    "partition-state checkpoint refused; replaying the whole log");
                empty
            }
        }
    }

    /// Writes the checkpoint to `dir` atomically (temporary file, fdatasync, rename).
    pub async fn save(&self, dir: &Path) -> Result<(), StorageError> {
        strand_storage::io::write_small_file_atomic_async(
            &dir.join(CHECKPOINT_FILE),
            &self.encode(),
        )
        .await
    }

    /// Records the batches of `log` from this checkpoint's offset up to `end` (a batch
    /// boundary at or below the committed end), moving the offset past them. Data below
    /// the log start offset is gone (retention, DeleteRecords, an installed snapshot): the
    /// replay starts at the log start and the state keeps what it knew. Returns the bytes
    /// read.
    pub async fn advance(&mut self, log: &Log, end: KafkaOffset) -> Result<u64, StorageError> {
        self.txns.trim_below(log.log_start_offset().0);
        let (states, txns) = (&mut self.states, &mut self.txns);
        let (records, pending) = (&mut self.records, &mut self.pending);
        let (next, bytes) = replay_batches(log, self.offset, end, |b| {
            let Ok(view) = RecordBatch::parse(b) else {
                return;
            };
            if let Some((pid, epoch, first, last)) = batch_ids(&view) {
                states.record(pid, epoch, first, last, view.base_offset());
            }
            if view.attributes().is_control() && view.producer_id() >= 0 {
                states.record_marker(view.producer_id(), view.producer_epoch());
            }
            txns.apply(&view, view.base_offset());
            if let Some(records) = records.as_mut() {
                keep_records(records, pending, view);
            }
        })
        .await?;
        if let Some(next) = next {
            self.offset = next;
        }
        Ok(bytes)
    }
}

/// Takes a batch into a keyed partition's compacted records: a plain batch's records at
/// once, a transaction's when its producer's commit marker comes (an abort drops them).
fn keep_records(records: &mut Compacted, pending: &mut PendingTxnRecords, view: RecordBatch) {
    let a = view.attributes();
    let pid = view.producer_id();
    if a.is_control() {
        if let Ok(m) = strand_wire::Marker::of(&view) {
            let commit = m.kind == strand_wire::MarkerKind::Commit;
            for (_, k, v) in pending.end(pid, commit) {
                records.apply(&k, v.as_deref());
            }
        }
    } else if a.is_transactional() {
        let mut offset = view.base_offset();
        for_each_keyed_record(view.into_bytes(), |k, v| {
            pending.stage(pid, offset, k, v);
            offset += 1;
        });
    } else {
        for_each_keyed_record(view.into_bytes(), |k, v| records.apply(k, v));
    }
}

/// Calls `f` with each batch of `log` from `from` (or the log start offset, if later) up
/// to `end`, in steps of `REPLAY_READ_BYTES` with a yield to the shard between steps
/// (steps served from the batch cache never wait). Returns the offset after the last batch
/// read (`None` when none was) and the bytes read.
pub async fn replay_batches(
    log: &Log,
    from: KafkaOffset,
    end: KafkaOffset,
    mut f: impl FnMut(bytes::Bytes),
) -> Result<(Option<KafkaOffset>, u64), StorageError> {
    let mut next = from.max(log.log_start_offset());
    let (mut reached, mut bytes) = (None, 0u64);
    while next < end {
        let r = log.read(next, end, REPLAY_READ_BYTES, true).await?;
        if r.batches.is_empty() {
            break;
        }
        r.batches.into_iter().for_each(&mut f);
        bytes += r.bytes as u64;
        next = r.next_offset;
        reached = Some(next);
        strand_storage::io_runtime::yield_now().await;
    }
    Ok((reached, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use strand_wire::{marker_batch, Marker, MarkerKind};

    /// Every key its own scope.
    fn whole_key_scope(key: &[u8]) -> Option<(String, bool)> {
        Some((String::from_utf8_lossy(key).into_owned(), true))
    }

    /// A keyed batch at `base`: one record `key`=`value`, of producer `pid`'s
    /// transaction when `pid` is set.
    fn keyed_batch(base: i64, key: &[u8], value: &[u8], pid: Option<i64>) -> RecordBatch {
        let mut b = strand_wire::BatchBuilder::new(1);
        if let Some(pid) = pid {
            b = b.producer(pid, 0, 0).transactional();
        }
        b.push(1, Some(key), Some(value), &[]);
        let view = RecordBatch::parse(b.build()).expect("batch");
        let bytes = strand_wire::BatchHeader {
            base_offset: base,
            ..strand_wire::BatchHeader::of(&view)
        }
        .encode(&view.as_bytes()[strand_wire::BATCH_HEADER_BYTES..]);
        RecordBatch::parse(bytes).expect("batch")
    }

    #[test]
    fn a_transactions_keyed_records_count_at_its_commit_and_never_after_an_abort() {
        let mut records = Compacted::new(whole_key_scope);
        let mut pending = PendingTxnRecords::default();
        keep_records(
            &mut records,
            &mut pending,
            keyed_batch(0, b"a", b"plain", None),
        );
        keep_records(
            &mut records,
            &mut pending,
            keyed_batch(1, b"a", b"txn-5", Some(5)),
        );
        keep_records(
            &mut records,
            &mut pending,
            keyed_batch(2, b"b", b"txn-6", Some(6)),
        );
        let held: Vec<(&[u8], &[u8])> = records.records().collect();
        assert_eq!(
            held,
            vec![(&b"a"[..], &b"plain"[..])],
            "open transactions wait"
        );
        // A checkpoint taken now keeps them, and reads them back.
        let c = Checkpoint {
            offset: KafkaOffset(3),
            states: ProducerStates::default(),
            txns: TxnIndex::default(),
            records: Some(records.clone()),
            pending: pending.clone(),
        };
        let back = Checkpoint::decode(&c.encode(), Some(whole_key_scope)).expect("decodes");
        assert_eq!(back.pending, pending);
        let marker = |pid, kind| {
            RecordBatch::parse(marker_batch(
                pid,
                0,
                Marker {
                    kind,
                    coordinator_epoch: 0,
                },
                1,
            ))
            .expect("marker")
        };
        keep_records(&mut records, &mut pending, marker(6, MarkerKind::Abort));
        keep_records(&mut records, &mut pending, marker(5, MarkerKind::Commit));
        let held: Vec<(&[u8], &[u8])> = records.records().collect();
        assert_eq!(held, vec![(&b"a"[..], &b"txn-5"[..])]);
        assert_eq!(pending.iter().count(), 0);
    }

    fn sample() -> Checkpoint {
        let mut states = ProducerStates::default();
        states.record(7, 0, 0, 4, 100);
        states.record(7, 0, 5, 9, 105);
        states.record(9, 3, i32::MAX - 1, 0, 110);
        let mut records = Compacted::new(whole_key_scope);
        records.apply(b"g", Some(b"{}"));
        let mut txns = TxnIndex::default();
        for (pid, offset, kind) in [
            (7, 100, None),
            (9, 101, None),
            (9, 103, Some(MarkerKind::Abort)),
        ] {
            let b = txn_batch(pid, offset, kind);
            txns.apply(&b, b.base_offset());
        }
        txns.settle(112);
        Checkpoint {
            offset: KafkaOffset(112),
            states,
            txns,
            records: Some(records),
            pending: PendingTxnRecords::default(),
        }
    }

    /// A transactional batch of `pid` at `offset`: data, or the marker of `kind`.
    fn txn_batch(pid: i64, offset: i64, kind: Option<MarkerKind>) -> RecordBatch {
        let bytes = match kind {
            Some(kind) => marker_batch(
                pid,
                0,
                Marker {
                    kind,
                    coordinator_epoch: 0,
                },
                0,
            ),
            None => {
                let mut b = strand_wire::BatchBuilder::new(0).producer(pid, 0, 0);
                b.push(0, Some(b"k"), Some(b"v"), &[]);
                let plain = RecordBatch::parse(b.build()).expect("batch");
                strand_wire::BatchHeader {
                    attributes: strand_wire::Attributes::from_raw(
                        strand_wire::Attributes::TRANSACTIONAL,
                    ),
                    ..strand_wire::BatchHeader::of(&plain)
                }
                .encode(&plain.as_bytes()[strand_wire::BATCH_HEADER_BYTES..])
            }
        };
        let mut raw = bytes.to_vec();
        strand_wire::set_base_offset(&mut raw, offset).expect("header");
        RecordBatch::parse(bytes::Bytes::from(raw)).expect("batch")
    }

    #[test]
    fn a_version_1_checkpoint_reads_with_no_transactions() {
        let mut c = sample();
        c.txns = TxnIndex::default();
        let mut bytes = c.encode();
        // Version 1: the same bytes without the (empty) transaction index...
        let at = HEADER_BYTES + {
            let mut p = Vec::new();
            c.states.encode(&mut p);
            p.len()
        };
        bytes.drain(at..at + 8);
        // ... and without the (empty) records of open transactions before the trailer.
        let n = bytes.len() - TRAILER_BYTES;
        bytes.drain(n - 4..n);
        bytes[4] = 1;
        let n = bytes.len() - TRAILER_BYTES;
        let crc = crc32c::crc32c(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_be_bytes());
        let back = Checkpoint::decode(&bytes, Some(whole_key_scope)).expect("version 1 reads");
        assert_eq!((back.offset, back.txns), (c.offset, TxnIndex::default()));
        assert_eq!(back.records, c.records);
    }

    #[test]
    fn a_checkpoint_round_trips() {
        for c in [sample(), Checkpoint::empty(KafkaOffset(0), None)] {
            let bytes = c.encode();
            let keyed = c.records.is_some().then_some(whole_key_scope as KeyScope);
            let back = Checkpoint::decode(&bytes, keyed).expect("decodes");
            assert_eq!(back.offset, c.offset);
            assert_eq!(back.records, c.records);
            assert_eq!(back.txns, c.txns);
            assert_eq!(back.encode(), bytes);
        }
        let back = Checkpoint::decode(&sample().encode(), Some(whole_key_scope)).expect("decodes");
        assert_eq!(
            back.states.check(7, 0, 5, 9),
            Ok(crate::partition::producer_state::Verdict::Duplicate { base_offset: 105 })
        );
    }

    #[test]
    fn a_checkpoint_of_another_kind_of_partition_is_refused() {
        assert_eq!(
            Checkpoint::decode(&sample().encode(), None).map(|c| c.offset),
            Err(CheckpointError::Kind(true))
        );
        let plain = Checkpoint::empty(KafkaOffset(3), None).encode();
        assert_eq!(
            Checkpoint::decode(&plain, Some(whole_key_scope)).map(|c| c.offset),
            Err(CheckpointError::Kind(false))
        );
    }

    #[test]
    fn a_torn_or_corrupt_checkpoint_is_refused() {
        let bytes = sample().encode();
        for cut in 0..bytes.len() {
            assert!(
                Checkpoint::decode(&bytes[..cut], Some(whole_key_scope)).is_err(),
                "cut at {cut}"
            );
        }
        for at in 0..bytes.len() {
            let mut b = bytes.clone();
            b[at] ^= 0x40;
            assert!(
                Checkpoint::decode(&b, Some(whole_key_scope)).is_err(),
                "flip at {at}"
            );
        }
    }

    #[test]
    fn counts_are_checked_before_allocating() {
        // A well-formed file whose producer count claims more than the bytes hold.
        let mut body = Vec::new();
        body.extend_from_slice(&MAGIC);
        body.push(VERSION);
        body.extend_from_slice(&0i64.to_be_bytes());
        body.extend_from_slice(&u32::MAX.to_be_bytes());
        let crc = crc32c::crc32c(&body);
        body.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(
            Checkpoint::decode(&body, None).map(|c| c.offset),
            Err(CheckpointError::State(StateDecodeError::Count(
                u32::MAX as usize
            )))
        );
    }

    proptest! {
        #[test]
        fn states_round_trip(
            offset in 0i64..1 << 40,
            batches in proptest::collection::vec((0i64..20, 0i16..3, 0i32..1000, 0i64..1 << 40), 0..60),
        ) {
            let mut states = ProducerStates::default();
            for (pid, epoch, seq, base) in batches {
                states.record(pid, epoch, seq, seq + 1, base);
            }
            let c = Checkpoint { offset: KafkaOffset(offset), states, txns: TxnIndex::default(), records: None, pending: PendingTxnRecords::default() };
            let bytes = c.encode();
            let back = Checkpoint::decode(&bytes, None).map(|b| b.encode());
            prop_assert_eq!(back, Ok(bytes));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = Checkpoint::decode(&bytes, None);
            let _ = Checkpoint::decode(&bytes, Some(whole_key_scope));
            let _ = ProducerStates::decode(&bytes);
        }
    }
}
