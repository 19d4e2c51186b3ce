//! Lookups in a partition's committed log that decode records: the offset of the first
//! record at or after a timestamp (ListOffsets by time), and the keyed records of a batch
//! (replays of compacted state). Cold paths, never Produce or Fetch, which keep batches
//! undecoded.

use kafka_protocol::records::RecordBatchDecoder;

use super::Partition;
use crate::common::errors::KafkaError;

/// The first record at or after `ts` in the committed log: (its timestamp, its offset), or
/// (-1, -1). Decodes one batch's records (a cold path, never Produce or Fetch).
pub async fn offset_for_time(part: &Partition, ts: i64) -> Result<(i64, i64), KafkaError> {
    if ts < 0 {
        return Err(KafkaError::InvalidRequest(format!(
            "unsupported timestamp {ts}"
        )));
    }
    let found = part
        .log()
        .find_by_timestamp(ts)
        .await
        .map_err(|e| part.storage_error(e))?;
    let Some(frame) = found else {
        return Ok((-1, -1));
    };
    if frame.header.kafka_base_offset >= part.high_watermark() {
        return Ok((-1, -1));
    }
    let mut body = frame.body.clone();
    let set = RecordBatchDecoder::decode(&mut body)
        .map_err(|e| KafkaError::CorruptMessage(e.to_string()))?;
    let start = part.log().log_start_offset().0;
    for r in set.records {
        if r.timestamp >= ts && r.offset >= start {
            return Ok((r.timestamp, r.offset));
        }
    }
    Ok((-1, -1))
}

/// The ListOffsets timestamp that asks for the record with the largest timestamp (v7+).
pub const MAX_TIMESTAMP: i64 = -3;

/// ListOffsets MAX_TIMESTAMP (-3, KIP-734): the largest timestamp in the committed log and
/// the offset of the first record that has it, or (-1, -1) for an empty log, as Kafka
/// answers (its first batch reaching the maximum, that batch's first record with it).
pub async fn offset_of_max_timestamp(part: &Partition) -> Result<(i64, i64), KafkaError> {
    match part.log().max_timestamp_ms() {
        ts if ts < 0 => Ok((-1, -1)),
        ts => offset_for_time(part, ts).await,
    }
}

/// Calls `f` with the key and value (`None`: a tombstone) of each keyed record of `batch`
/// (records without a key are skipped). An unreadable batch is logged and skipped: it can
/// only come from a bug, since every batch was checked when it was produced.
pub fn for_each_keyed_record(batch: bytes::Bytes, mut f: impl FnMut(&[u8], Option<&[u8]>)) {
    let mut buf = batch;
    match RecordBatchDecoder::decode(&mut buf) {
        Ok(set) => {
            for r in set.records {
                if let Some(k) = r.key.as_ref() {
                    f(k, r.value.as_deref());
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "skipping an unreadable batch in a replay"),
    }
}
