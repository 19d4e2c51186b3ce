//! The records a transaction coordinator keeps in `__transaction_state`: key = the
//! transactional id, value = its metadata (`TxnMetadata`), a null value (tombstone) when
//! the id expired. Kafka's layout (`TransactionLogKey` v0, `TransactionLogValue` v0) with
//! Strand's `last_producer_epoch` appended (Kafka keeps it only in memory), so a
//! coordinator that takes over answers a retried InitProducerId as the old one would.
//!
//! Key: `version: int16 = 0`, `transactional_id: string (int16 length)`.
//! Value: `version: int16 = 1`, `producer_id: int64`, `producer_epoch: int16`,
//! `timeout_ms: int32`, `state: int8`, partitions: `int32` count of (`topic: string`,
//! `int32` count of `int32`), `last_update_ms: int64`, `start_ms: int64`,
//! `last_producer_epoch: int16`, then (version 1) `next_producer_id: int64`,
//! `prev_producer_id: int64` (Kafka's tagged fields 1 and 0 of `TransactionLogValue` v1).
//! Version 0 values (without the last two) are still read.
//!
//! Invariant: `decode_*` never panics and checks every count and length against the bytes
//! left before allocating; `encode_value` then `decode_value` gives back the metadata.

use std::collections::BTreeSet;

use super::metadata::{TxnMetadata, TxnState};
use crate::common::cursor::Cursor;

/// The key version.
const VERSION: i16 = 0;
/// The value version written: 1 appends `next_producer_id` and `prev_producer_id`
/// (transaction version 2's producer id rotation) to version 0.
const VALUE_VERSION: i16 = 1;

/// Why a `__transaction_state` record does not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TxnRecordError {
    /// The bytes end early.
    #[error("transaction record truncated")]
    Truncated,
    /// A version this broker does not read.
    #[error("transaction record version {0}")]
    Version(i16),
    /// A length or count that is negative or larger than the bytes left.
    #[error("transaction record length {0} out of range")]
    Length(i64),
    /// A string that is not UTF-8.
    #[error("transaction record string is not UTF-8")]
    Utf8,
    /// An unknown state code.
    #[error("transaction state code {0}")]
    State(i8),
    /// Bytes after the record.
    #[error("{0} bytes after the transaction record")]
    Trailing(usize),
}

/// Kafka's state codes (`TransactionState.id`).
fn state_code(s: TxnState) -> i8 {
    match s {
        TxnState::Empty => 0,
        TxnState::Ongoing => 1,
        TxnState::PrepareCommit => 2,
        TxnState::PrepareAbort => 3,
        TxnState::CompleteCommit => 4,
        TxnState::CompleteAbort => 5,
        TxnState::Dead => 6,
        TxnState::PrepareEpochFence => 7,
    }
}

fn state_of(code: i8) -> Result<TxnState, TxnRecordError> {
    Ok(match code {
        0 => TxnState::Empty,
        1 => TxnState::Ongoing,
        2 => TxnState::PrepareCommit,
        3 => TxnState::PrepareAbort,
        4 => TxnState::CompleteCommit,
        5 => TxnState::CompleteAbort,
        6 => TxnState::Dead,
        7 => TxnState::PrepareEpochFence,
        other => return Err(TxnRecordError::State(other)),
    })
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Transactional ids and topic names are far below i16::MAX bytes (the request codecs
    // read them as int16-length strings).
    let len = i16::try_from(s.len()).unwrap_or(i16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..len as usize]);
}

/// The record key of `transactional_id`.
pub fn encode_key(transactional_id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + transactional_id.len());
    out.extend_from_slice(&VERSION.to_be_bytes());
    put_str(&mut out, transactional_id);
    out
}

/// The record value of `m`.
pub fn encode_value(m: &TxnMetadata) -> Vec<u8> {
    let mut out = Vec::with_capacity(80);
    out.extend_from_slice(&VALUE_VERSION.to_be_bytes());
    out.extend_from_slice(&m.producer_id.to_be_bytes());
    out.extend_from_slice(&m.producer_epoch.to_be_bytes());
    out.extend_from_slice(&m.timeout_ms.to_be_bytes());
    out.push(state_code(m.state) as u8);
    let mut topics: Vec<(&str, Vec<i32>)> = Vec::new();
    for (t, p) in &m.partitions {
        match topics.last_mut() {
            Some((last, ps)) if *last == t.as_str() => ps.push(*p),
            _ => topics.push((t, vec![*p])),
        }
    }
    out.extend_from_slice(&(topics.len() as i32).to_be_bytes());
    for (t, ps) in topics {
        put_str(&mut out, t);
        out.extend_from_slice(&(ps.len() as i32).to_be_bytes());
        for p in ps {
            out.extend_from_slice(&p.to_be_bytes());
        }
    }
    out.extend_from_slice(&m.last_update_ms.to_be_bytes());
    out.extend_from_slice(&m.start_ms.to_be_bytes());
    out.extend_from_slice(&m.last_producer_epoch.to_be_bytes());
    out.extend_from_slice(&m.next_producer_id.to_be_bytes());
    out.extend_from_slice(&m.prev_producer_id.to_be_bytes());
    out
}

/// The fields of a record, each `Truncated` past the end.
struct Reader<'a>(Cursor<'a>);

impl Reader<'_> {
    fn i8(&mut self) -> Result<i8, TxnRecordError> {
        self.0.i8().ok_or(TxnRecordError::Truncated)
    }

    fn i16(&mut self) -> Result<i16, TxnRecordError> {
        self.0.i16().ok_or(TxnRecordError::Truncated)
    }

    fn i32(&mut self) -> Result<i32, TxnRecordError> {
        self.0.i32().ok_or(TxnRecordError::Truncated)
    }

    fn i64(&mut self) -> Result<i64, TxnRecordError> {
        self.0.i64().ok_or(TxnRecordError::Truncated)
    }

    fn string(&mut self) -> Result<String, TxnRecordError> {
        let len = self.i16()?;
        let s = usize::try_from(len)
            .ok()
            .and_then(|n| self.0.slice(n))
            .ok_or(TxnRecordError::Length(i64::from(len)))?;
        String::from_utf8(s.to_vec()).map_err(|_| TxnRecordError::Utf8)
    }

    /// A count of items of at least `min_bytes` each, checked against the bytes left.
    fn count(&mut self, min_bytes: usize) -> Result<usize, TxnRecordError> {
        let n = self.i32()?;
        if !self.0.fits(i64::from(n), min_bytes) {
            return Err(TxnRecordError::Length(i64::from(n)));
        }
        Ok(n as usize)
    }

    fn version(&mut self) -> Result<(), TxnRecordError> {
        match self.i16()? {
            VERSION => Ok(()),
            v => Err(TxnRecordError::Version(v)),
        }
    }

    fn end(self) -> Result<(), TxnRecordError> {
        match self.0.rest().len() {
            0 => Ok(()),
            n => Err(TxnRecordError::Trailing(n)),
        }
    }
}

/// The transactional id of a record key.
pub fn decode_key(bytes: &[u8]) -> Result<String, TxnRecordError> {
    let mut r = Reader(Cursor::new(bytes));
    r.version()?;
    let id = r.string()?;
    r.end()?;
    Ok(id)
}

/// The metadata of `transactional_id` in a record value.
pub fn decode_value(transactional_id: &str, bytes: &[u8]) -> Result<TxnMetadata, TxnRecordError> {
    let mut r = Reader(Cursor::new(bytes));
    let version = r.i16()?;
    if !(0..=VALUE_VERSION).contains(&version) {
        return Err(TxnRecordError::Version(version));
    }
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let timeout_ms = r.i32()?;
    let state = state_of(r.i8()?)?;
    let mut partitions = BTreeSet::new();
    // A topic takes at least its 2-byte length and 4-byte count.
    for _ in 0..r.count(6)? {
        let topic = r.string()?;
        for _ in 0..r.count(4)? {
            partitions.insert((topic.clone(), r.i32()?));
        }
    }
    let last_update_ms = r.i64()?;
    let start_ms = r.i64()?;
    let last_producer_epoch = r.i16()?;
    let (next_producer_id, prev_producer_id) = if version >= 1 {
        (r.i64()?, r.i64()?)
    } else {
        (-1, -1)
    };
    r.end()?;
    Ok(TxnMetadata {
        transactional_id: transactional_id.to_string(),
        producer_id,
        producer_epoch,
        last_producer_epoch,
        timeout_ms,
        state,
        partitions,
        start_ms,
        last_update_ms,
        next_producer_id,
        prev_producer_id,
    })
}

/// The compaction scope of a `__transaction_state` key: its transactional id, whose own
/// key it is (`partition::compacted::KeyScope`).
pub fn scope_of(key: &[u8]) -> Option<(String, bool)> {
    decode_key(key).ok().map(|id| (id, true))
}

/// Applies one `__transaction_state` record to `txns` (a tombstone removes the id); an
/// unreadable record is skipped with a warning.
pub fn apply(
    txns: &mut std::collections::HashMap<String, TxnMetadata>,
    key: &[u8],
    value: Option<&[u8]>,
) {
    let id = match decode_key(key) {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!(error = %e, "skipping an unreadable __transaction_state key");
            return;
        }
    };
    match value.map(|v| decode_value(&id, v)) {
        Some(Ok(m)) => {
            txns.insert(id, m);
        }
        Some(Err(e)) => {
            tracing::warn!(transactional_id = %id, error = %e,
                "skipping an unreadable __transaction_state value");
        }
        None => {
            txns.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> TxnMetadata {
        let mut m = TxnMetadata::new("orders-tx", 4_000, 60_000, 1_700_000_000_000);
        m.producer_epoch = 3;
        m.last_producer_epoch = 2;
        m.state = TxnState::PrepareCommit;
        m.start_ms = 1_699_999_999_000;
        for (t, p) in [("a", 0), ("a", 2), ("b", 1)] {
            m.partitions.insert((t.to_string(), p));
        }
        m
    }

    #[test]
    fn records_round_trip() {
        let m = sample();
        assert_eq!(
            decode_key(&encode_key(&m.transactional_id)),
            Ok(m.transactional_id.clone())
        );
        assert_eq!(decode_value(&m.transactional_id, &encode_value(&m)), Ok(m));
    }

    #[test]
    fn the_value_is_kafkas_v0_layout_then_the_last_epoch_and_the_rotation_ids() {
        let mut m = sample();
        m.next_producer_id = 9_000;
        let v = encode_value(&m);
        // version 1, producer id, epoch, timeout, state (PrepareCommit = 2).
        assert_eq!(&v[..2], &[0, 1]);
        assert_eq!(&v[2..10], &4_000i64.to_be_bytes());
        assert_eq!(&v[10..12], &3i16.to_be_bytes());
        assert_eq!(&v[12..16], &60_000i32.to_be_bytes());
        assert_eq!(v[16], 2);
        // Two topics: "a" with partitions 0 and 2, "b" with 1.
        assert_eq!(&v[17..21], &2i32.to_be_bytes());
        let tail = v.len() - 18;
        assert_eq!(&v[tail..tail + 2], &2i16.to_be_bytes());
        assert_eq!(&v[tail + 2..tail + 10], &9_000i64.to_be_bytes());
        assert_eq!(&v[tail + 10..], &(-1i64).to_be_bytes());
        // A version 0 value (written before the rotation ids) reads with none.
        let mut v0 = v[..tail + 2].to_vec();
        v0[..2].copy_from_slice(&0i16.to_be_bytes());
        let back = decode_value(&m.transactional_id, &v0).expect("v0");
        assert_eq!((back.next_producer_id, back.prev_producer_id), (-1, -1));
        assert_eq!(back.producer_epoch, m.producer_epoch);
    }

    #[test]
    fn bad_records_are_refused() {
        let v = encode_value(&sample());
        for cut in 0..v.len() {
            assert!(decode_value("t", &v[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = v.clone();
        trailing.push(0);
        assert_eq!(
            decode_value("t", &trailing),
            Err(TxnRecordError::Trailing(1))
        );
        let mut state = v.clone();
        state[16] = 9;
        assert_eq!(decode_value("t", &state), Err(TxnRecordError::State(9)));
        let mut count = v;
        count[17..21].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(
            decode_value("t", &count),
            Err(TxnRecordError::Length(i64::from(i32::MAX)))
        );
        assert_eq!(decode_key(&[0, 1]), Err(TxnRecordError::Version(1)));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_key(&bytes);
            let _ = decode_value("t", &bytes);
        }

        #[test]
        fn any_metadata_round_trips(
            pid in 0i64.., epoch in 0i16.., last in -1i16.., timeout in 1i32..,
            state in 0i8..8, parts in proptest::collection::btree_set(("[a-z]{1,5}", 0i32..100), 0..10),
            start in -1i64.., update in 0i64.., next in -1i64.., prev in -1i64..,
        ) {
            let m = TxnMetadata {
                transactional_id: "x".into(),
                producer_id: pid,
                producer_epoch: epoch,
                last_producer_epoch: last,
                timeout_ms: timeout,
                state: state_of(state).expect("state"),
                partitions: parts,
                start_ms: start,
                last_update_ms: update,
                next_producer_id: next,
                prev_producer_id: prev,
            };
            prop_assert_eq!(decode_value("x", &encode_value(&m)), Ok(m));
        }
    }
}
