//! Keyed records as compaction keeps them: the latest value of every key, tombstoned keys
//! gone. Keys are grouped in scopes, and the tombstone of a scope's own key deletes the
//! whole scope (an `__consumer_offsets` group's tombstone deletes its offsets too, as its
//! replay does). What a key's scope is comes from the partition's owner as a [`KeyScope`]
//! (the group layer's, for an offsets partition), so this module reads no record format.
//!
//! Records of open transactions wait beside them (`PendingTxnRecords`) until their
//! producer's marker.
//!
//! Invariant: replaying the held records (`records`) in any order yields what replaying
//! the records they were built from in log order does, for a replay that keeps the last
//! value of a key and drops a scope at its own key's tombstone. A scope's tombstone costs
//! that scope's keys, not a walk of every key.

use std::collections::BTreeMap;

/// The scope a record key belongs to and whether it is the scope's own key (whose
/// tombstone deletes the scope); `None` for a key compaction does not keep (unreadable).
pub type KeyScope = fn(&[u8]) -> Option<(String, bool)>;

/// Keyed records, compacted.
#[derive(Clone, Debug)]
pub struct Compacted {
    scope_of: KeyScope,
    scopes: BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl PartialEq for Compacted {
    /// The same records (the scope reader is not compared: two of them are equal only as
    /// addresses).
    fn eq(&self, other: &Self) -> bool {
        self.scopes == other.scopes
    }
}

impl Eq for Compacted {}

/// Why an encoded `Compacted` was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CompactedDecodeError {
    /// A count or length beyond the bytes left.
    #[error("compacted records: a count or length is beyond the bytes left")]
    Length,
    /// A key listed twice.
    #[error("compacted records: a key is listed twice")]
    Duplicate,
    /// A key that the partition's scope reader cannot read.
    #[error("compacted records: unreadable key")]
    Key,
}

impl Compacted {
    /// No records; keys are read with `scope_of`.
    pub fn new(scope_of: KeyScope) -> Compacted {
        Compacted {
            scope_of,
            scopes: BTreeMap::new(),
        }
    }

    /// Takes one record (`None` value: a tombstone).
    pub fn apply(&mut self, key: &[u8], value: Option<&[u8]>) {
        let Some((scope, own_key)) = (self.scope_of)(key) else {
            return;
        };
        match value {
            Some(v) => {
                self.scopes
                    .entry(scope)
                    .or_default()
                    .insert(key.to_vec(), v.to_vec());
            }
            None if own_key => {
                self.scopes.remove(&scope);
            }
            None => {
                if let Some(keys) = self.scopes.get_mut(&scope) {
                    keys.remove(key);
                    if keys.is_empty() {
                        self.scopes.remove(&scope);
                    }
                }
            }
        }
    }

    /// The held records, `(key, value)`, scope by scope.
    pub fn records(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.scopes
            .values()
            .flatten()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
    }

    /// Records held.
    pub fn count(&self) -> usize {
        self.scopes.values().map(BTreeMap::len).sum()
    }

    /// Appends the records to `out`: a count, then each key and value with u32 lengths
    /// (big-endian).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.count() as u32).to_be_bytes());
        for (k, v) in self.records() {
            out.extend_from_slice(&(k.len() as u32).to_be_bytes());
            out.extend_from_slice(k);
            out.extend_from_slice(&(v.len() as u32).to_be_bytes());
            out.extend_from_slice(v);
        }
    }

    /// Reads what `encode` wrote, checking each count and length against the bytes left
    /// and each key with `scope_of`; returns the bytes after it.
    pub fn decode(
        mut buf: &[u8],
        scope_of: KeyScope,
    ) -> Result<(Compacted, &[u8]), CompactedDecodeError> {
        fn chunk<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], CompactedDecodeError> {
            let (len, rest) = buf
                .split_first_chunk::<4>()
                .ok_or(CompactedDecodeError::Length)?;
            let len = u32::from_be_bytes(*len) as usize;
            let (bytes, rest) = rest
                .split_at_checked(len)
                .ok_or(CompactedDecodeError::Length)?;
            *buf = rest;
            Ok(bytes)
        }
        let (count, rest) = buf
            .split_first_chunk::<4>()
            .ok_or(CompactedDecodeError::Length)?;
        let count = u32::from_be_bytes(*count) as usize;
        buf = rest;
        // Each record takes at least its two lengths.
        if count > buf.len() / 8 {
            return Err(CompactedDecodeError::Length);
        }
        let mut out = Compacted::new(scope_of);
        for _ in 0..count {
            let k = chunk(&mut buf)?.to_vec();
            let v = chunk(&mut buf)?.to_vec();
            let (scope, _) = scope_of(&k).ok_or(CompactedDecodeError::Key)?;
            if out.scopes.entry(scope).or_default().insert(k, v).is_some() {
                return Err(CompactedDecodeError::Duplicate);
            }
        }
        Ok((out, buf))
    }
}

/// Keyed records of open transactions (an offsets partition's TxnOffsetCommit records),
/// held until their producer's marker: a commit applies them to the compacted records in
/// their order, an abort drops them. Each is (log offset, key, value).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PendingTxnRecords {
    by_producer: BTreeMap<i64, Vec<PendingRecord>>,
}

/// One record of an open transaction: its log offset, key and value (`None`: tombstone).
pub type PendingRecord = (i64, Vec<u8>, Option<Vec<u8>>);

impl PendingTxnRecords {
    /// Holds a record of producer `producer_id`'s open transaction.
    pub fn stage(&mut self, producer_id: i64, log_offset: i64, key: &[u8], value: Option<&[u8]>) {
        self.by_producer.entry(producer_id).or_default().push((
            log_offset,
            key.to_vec(),
            value.map(<[u8]>::to_vec),
        ));
    }

    /// Producer `producer_id`'s marker: its records, to apply (`commit`) or dropped.
    pub fn end(&mut self, producer_id: i64, commit: bool) -> Vec<PendingRecord> {
        let held = self.by_producer.remove(&producer_id).unwrap_or_default();
        if commit {
            held
        } else {
            Vec::new()
        }
    }

    /// Every held record with its producer id, producer by producer, in log order.
    pub fn iter(&self) -> impl Iterator<Item = (i64, &PendingRecord)> {
        self.by_producer
            .iter()
            .flat_map(|(pid, recs)| recs.iter().map(move |r| (*pid, r)))
    }

    /// Appends the records to `out`: a producer count, then per producer its id, a record
    /// count and each record's offset, key length and key, and value length (u32::MAX for
    /// a tombstone) and value (big-endian).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.by_producer.len() as u32).to_be_bytes());
        for (pid, recs) in &self.by_producer {
            out.extend_from_slice(&pid.to_be_bytes());
            out.extend_from_slice(&(recs.len() as u32).to_be_bytes());
            for (offset, k, v) in recs {
                out.extend_from_slice(&offset.to_be_bytes());
                out.extend_from_slice(&(k.len() as u32).to_be_bytes());
                out.extend_from_slice(k);
                match v {
                    Some(v) => {
                        out.extend_from_slice(&(v.len() as u32).to_be_bytes());
                        out.extend_from_slice(v);
                    }
                    None => out.extend_from_slice(&u32::MAX.to_be_bytes()),
                }
            }
        }
    }

    /// Reads what `encode` wrote, checking each count and length against the bytes left;
    /// returns the bytes after it.
    pub fn decode(mut buf: &[u8]) -> Result<(PendingTxnRecords, &[u8]), CompactedDecodeError> {
        fn take<'a, const N: usize>(
            buf: &mut &'a [u8],
        ) -> Result<&'a [u8; N], CompactedDecodeError> {
            let (head, rest) = buf
                .split_first_chunk::<N>()
                .ok_or(CompactedDecodeError::Length)?;
            *buf = rest;
            Ok(head)
        }
        fn bytes<'a>(buf: &mut &'a [u8], len: usize) -> Result<&'a [u8], CompactedDecodeError> {
            let (b, rest) = buf
                .split_at_checked(len)
                .ok_or(CompactedDecodeError::Length)?;
            *buf = rest;
            Ok(b)
        }
        let producers = u32::from_be_bytes(*take::<4>(&mut buf)?) as usize;
        // A producer takes at least its id and count; a record its offset and two lengths.
        if producers > buf.len() / 12 {
            return Err(CompactedDecodeError::Length);
        }
        let mut out = PendingTxnRecords::default();
        for _ in 0..producers {
            let pid = i64::from_be_bytes(*take::<8>(&mut buf)?);
            let count = u32::from_be_bytes(*take::<4>(&mut buf)?) as usize;
            if count > buf.len() / 16 {
                return Err(CompactedDecodeError::Length);
            }
            let mut recs = Vec::with_capacity(count);
            for _ in 0..count {
                let offset = i64::from_be_bytes(*take::<8>(&mut buf)?);
                let klen = u32::from_be_bytes(*take::<4>(&mut buf)?) as usize;
                let k = bytes(&mut buf, klen)?.to_vec();
                let v = match u32::from_be_bytes(*take::<4>(&mut buf)?) {
                    u32::MAX => None,
                    vlen => Some(bytes(&mut buf, vlen as usize)?.to_vec()),
                };
                recs.push((offset, k, v));
            }
            if out.by_producer.insert(pid, recs).is_some() {
                return Err(CompactedDecodeError::Duplicate);
            }
        }
        Ok((out, buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `scope/name` keys; the scope's own key is `scope/`; a key without `/` is unreadable.
    fn slash_scope(key: &[u8]) -> Option<(String, bool)> {
        let key = std::str::from_utf8(key).ok()?;
        let (scope, name) = key.split_once('/')?;
        Some((scope.to_string(), name.is_empty()))
    }

    /// Replays records in log order as the invariant's replay does.
    fn replay<'a>(
        records: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut out: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for (k, v) in records {
            let Some((scope, own)) = slash_scope(k) else {
                continue;
            };
            match v {
                Some(v) => {
                    out.insert(k.to_vec(), v.to_vec());
                }
                None if own => {
                    out.retain(|k, _| slash_scope(k).map(|s| s.0) != Some(scope.clone()))
                }
                None => {
                    out.remove(k);
                }
            }
        }
        out
    }

    fn record() -> impl Strategy<Value = (Vec<u8>, Option<Vec<u8>>)> {
        let key = prop_oneof![
            (0..3u8, 0..4u8).prop_map(|(s, n)| format!("s{s}/k{n}").into_bytes()),
            (0..3u8).prop_map(|s| format!("s{s}/").into_bytes()),
            Just(b"unreadable".to_vec()),
        ];
        (
            key,
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..6)),
        )
    }

    #[test]
    fn pending_records_apply_at_commit_drop_at_abort_and_round_trip() {
        let mut p = PendingTxnRecords::default();
        p.stage(7, 10, b"s/a", Some(b"1"));
        p.stage(8, 11, b"s/b", Some(b"2"));
        p.stage(7, 12, b"s/a", None);
        let mut bytes = Vec::new();
        p.encode(&mut bytes);
        bytes.push(9);
        let (back, rest) = PendingTxnRecords::decode(&bytes).expect("decodes");
        assert_eq!((back, rest), (p.clone(), &[9u8][..]));
        for cut in 0..bytes.len() - 1 {
            assert!(
                PendingTxnRecords::decode(&bytes[..cut]).is_err(),
                "cut {cut}"
            );
        }
        assert_eq!(
            p.end(7, true),
            vec![
                (10, b"s/a".to_vec(), Some(b"1".to_vec())),
                (12, b"s/a".to_vec(), None)
            ]
        );
        assert_eq!(p.end(8, false), Vec::new());
        assert_eq!(p.iter().count(), 0);
    }

    proptest! {
        #[test]
        fn compacted_records_replay_like_the_log_and_round_trip(
            log in proptest::collection::vec(record(), 0..40),
        ) {
            let mut c = Compacted::new(slash_scope);
            for (k, v) in &log {
                c.apply(k, v.as_deref());
            }
            let from_log = replay(log.iter().map(|(k, v)| (k.as_slice(), v.as_deref())));
            let from_compacted = replay(c.records().map(|(k, v)| (k, Some(v))));
            prop_assert_eq!(&from_compacted, &from_log);
            prop_assert_eq!(c.count(), from_log.len());

            let mut bytes = Vec::new();
            c.encode(&mut bytes);
            bytes.push(0xAA);
            let (back, rest) = Compacted::decode(&bytes, slash_scope).expect("decodes");
            prop_assert_eq!(&back, &c);
            prop_assert_eq!(rest, &[0xAA][..]);
            for cut in 0..bytes.len() - 1 {
                prop_assert!(Compacted::decode(&bytes[..cut], slash_scope).is_err(), "cut at {}", cut);
            }
        }
    }

    #[test]
    fn a_key_the_scope_reader_refuses_is_refused_when_decoded() {
        let mut bytes = 1u32.to_be_bytes().to_vec();
        for part in [&b"nokey"[..], b"v"] {
            bytes.extend_from_slice(&(part.len() as u32).to_be_bytes());
            bytes.extend_from_slice(part);
        }
        assert_eq!(
            Compacted::decode(&bytes, slash_scope).map(|_| ()),
            Err(CompactedDecodeError::Key)
        );
    }

    #[test]
    fn a_key_listed_twice_is_refused() {
        let mut bytes = 2u32.to_be_bytes().to_vec();
        for _ in 0..2 {
            for part in [&b"s/k"[..], b"v"] {
                bytes.extend_from_slice(&(part.len() as u32).to_be_bytes());
                bytes.extend_from_slice(part);
            }
        }
        assert_eq!(
            Compacted::decode(&bytes, slash_scope).map(|_| ()),
            Err(CompactedDecodeError::Duplicate)
        );
    }
}
