//! What a Raft entry carries, and its validation (ARCHITECTURE.md, Offsets).
//!
//! - A **data** entry is `EntryNormal` whose `data` is one Kafka record batch (opaque here)
//!   and whose `context` is the batch's record count, 4 bytes big-endian:
//!
//!   ```text
//!   context: [record_count: u32 BE]     data: [Kafka RecordBatch v2 bytes, 1..=PAYLOAD_BYTES_MAX]
//!   ```
//!
//! - A **no-op** entry is `EntryNormal` with empty `data` and `context` (raft-rs appends one
//!   when a leader is elected). A **configuration** entry is `EntryConfChange(V2)`.
//!   Neither occupies a Kafka offset.
//! - A **log start** entry (DeleteRecords on a replicated partition) is `EntryNormal` whose
//!   `context` is `LOG_START_CONTEXT` and whose `data` is the new log start offset, 8 bytes
//!   big-endian, non-negative. Every replica applies it; it occupies no Kafka offset.
//!
//! Invariant: an entry that `classify` accepts has a record count in
//! `1..=RECORD_COUNT_MAX`. Entries from peers are classified before they reach a group, so
//! nothing malformed is ever stored.

use raft::eraftpb::{Entry, EntryType};

/// Largest record batch a data entry carries; Kafka's `message.max.bytes` default is
/// ~1 MiB and the broker enforces the configured value before proposing. A larger entry
/// from a peer is malformed.
pub const PAYLOAD_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Most records a batch may claim. Kafka's record count is an `i32`; a batch of 16 MiB
/// cannot hold more than one record per byte, so this is the tighter bound.
pub const RECORD_COUNT_MAX: u32 = 16 * 1024 * 1024;

/// Size of a data entry's `context`.
pub const CONTEXT_BYTES: usize = 4;

/// What an accepted entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A Kafka batch of `record_count` records.
    Data { record_count: u32 },
    /// A leader's empty entry.
    NoOp,
    /// A membership change.
    Config,
    /// The partition's log start offset moves to `offset` (DeleteRecords).
    LogStart { offset: i64 },
}

/// The `context` of a log start entry (no data entry has a 5-byte context).
pub const LOG_START_CONTEXT: &[u8] = b"start";

impl EntryKind {
    /// How many Kafka offsets the entry occupies.
    pub fn record_count(self) -> u32 {
        match self {
            EntryKind::Data { record_count } => record_count,
            EntryKind::NoOp | EntryKind::Config | EntryKind::LogStart { .. } => 0,
        }
    }
}

/// Classifies an entry, or says why it is malformed.
pub fn classify(entry: &Entry) -> Result<EntryKind, &'static str> {
    match entry.get_entry_type() {
        EntryType::EntryConfChange | EntryType::EntryConfChangeV2 => Ok(EntryKind::Config),
        EntryType::EntryNormal => classify_normal(&entry.data, &entry.context),
    }
}

fn classify_normal(data: &[u8], context: &[u8]) -> Result<EntryKind, &'static str> {
    if data.is_empty() {
        return if context.is_empty() {
            Ok(EntryKind::NoOp)
        } else {
            Err("no-op entry with a context")
        };
    }
    if context == LOG_START_CONTEXT {
        let bytes: [u8; 8] = data
            .try_into()
            .map_err(|_| "log start entry data is not 8 bytes")?;
        let offset = i64::from_be_bytes(bytes);
        if offset < 0 {
            return Err("log start entry with a negative offset");
        }
        return Ok(EntryKind::LogStart { offset });
    }
    if data.len() > PAYLOAD_BYTES_MAX {
        return Err("payload larger than PAYLOAD_BYTES_MAX");
    }
    let count_bytes: [u8; CONTEXT_BYTES] = context
        .try_into()
        .map_err(|_| "data entry context is not 4 bytes")?;
    let record_count = u32::from_be_bytes(count_bytes);
    if record_count == 0 || record_count > RECORD_COUNT_MAX {
        return Err("record count outside 1..=RECORD_COUNT_MAX");
    }
    Ok(EntryKind::Data { record_count })
}

/// The `data` and `context` of a log start entry moving the log start to `offset`.
pub fn log_start_entry(offset: i64) -> (Vec<u8>, &'static [u8]) {
    (offset.to_be_bytes().to_vec(), LOG_START_CONTEXT)
}

/// The `context` of a data entry of `record_count` records.
pub fn data_context(record_count: u32) -> [u8; CONTEXT_BYTES] {
    record_count.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(data: &[u8], context: &[u8], expected: Result<EntryKind, &'static str>) {
        let e = Entry {
            data: data.to_vec().into(),
            context: context.to_vec().into(),
            ..Entry::default()
        };
        assert_eq!(classify(&e), expected, "data {data:?} context {context:?}");
    }

    #[test]
    fn classifies_entries() {
        check(b"", b"", Ok(EntryKind::NoOp));
        check(b"", b"x", Err("no-op entry with a context"));
        check(
            b"batch",
            &data_context(3),
            Ok(EntryKind::Data { record_count: 3 }),
        );
        check(
            b"batch",
            &[0, 0, 1],
            Err("data entry context is not 4 bytes"),
        );
        check(
            b"batch",
            &data_context(0),
            Err("record count outside 1..=RECORD_COUNT_MAX"),
        );
        check(
            b"batch",
            &data_context(RECORD_COUNT_MAX + 1),
            Err("record count outside 1..=RECORD_COUNT_MAX"),
        );
        let (data, context) = log_start_entry(42);
        check(&data, context, Ok(EntryKind::LogStart { offset: 42 }));
        check(
            b"abc",
            LOG_START_CONTEXT,
            Err("log start entry data is not 8 bytes"),
        );
        check(
            &(-1i64).to_be_bytes(),
            LOG_START_CONTEXT,
            Err("log start entry with a negative offset"),
        );
    }

    #[test]
    fn config_entries_take_no_offsets() {
        let mut e = Entry::default();
        e.set_entry_type(EntryType::EntryConfChangeV2);
        assert_eq!(classify(&e).map(EntryKind::record_count), Ok(0));
    }
}
