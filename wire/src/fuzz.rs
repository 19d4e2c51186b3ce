//! Bodies of the fuzz targets in `wire/fuzz/fuzz_targets/`, one public function per target.
//!
//! They live in the library so that `cargo fuzz` (nightly) and the stable replay test
//! `wire/tests/fuzz_corpus_replay.rs` run the same code. Each takes arbitrary bytes and
//! panics only when a property of this crate is broken: an `Err` for bad input is success.
//! Not for the hot path: they copy and allocate freely.

use std::hint::black_box;

use bytes::Bytes;

use crate::record_batch::{
    batches, set_base_offset, set_partition_leader_epoch, RecordBatch, BATCH_HEADER_BYTES,
    BATCH_LENGTH_FIELD_END,
};

/// Fuzz target `record_batch`: splits `data` with [`batches`], validates each batch, reads
/// every getter, and rewrites base offset and leader epoch on a copy. Also parses `data` as
/// one batch and runs the in-place setters on the raw bytes.
///
/// Panics if a yielded batch breaks its framing invariant, if the iterator yields anything
/// after an error, or if a setter changes the validation verdict or does not read back.
pub fn record_batch(data: &[u8]) {
    let records = Bytes::copy_from_slice(data);
    let mut framed_bytes = 0_usize;
    let mut iter = batches(records.clone());
    for item in iter.by_ref() {
        match item {
            Ok(batch) => {
                framed_bytes += batch.len_bytes();
                exercise(&batch);
            }
            Err(error) => {
                black_box(error.to_string());
                break;
            }
        }
    }
    assert!(
        iter.next().is_none(),
        "batches() yielded after an error or the end"
    );
    assert!(
        framed_bytes <= data.len(),
        "framed {framed_bytes} of {} bytes",
        data.len()
    );

    if let Ok(batch) = RecordBatch::parse(records) {
        exercise(&batch);
    }
    let mut raw = data.to_vec();
    let short = data.len() < BATCH_HEADER_BYTES;
    assert_eq!(
        set_base_offset(&mut raw, 1).is_err(),
        short,
        "set_base_offset on {short}"
    );
    assert_eq!(
        set_partition_leader_epoch(&mut raw, 1).is_err(),
        short,
        "set_epoch on {short}"
    );
}

fn exercise(batch: &RecordBatch) {
    let len = batch.len_bytes();
    let declared = usize::try_from(batch.batch_length()).ok();
    assert_eq!(
        declared.map(|l| l + BATCH_LENGTH_FIELD_END),
        Some(len),
        "framing invariant"
    );
    assert_eq!(batch.as_bytes().len(), len);

    let verdict = batch.validate();
    black_box(batch.validate_produce().is_ok());
    black_box(crate::control::Marker::of(batch).ok());
    if verdict.is_ok() {
        assert_eq!(batch.crc(), batch.compute_crc());
        assert!(batch.record_count() >= 1);
        assert!(batch.last_offset() >= batch.base_offset());
    }
    read_all_fields(batch);

    let (base_offset, epoch) = (
        batch.base_offset().wrapping_add(1_000),
        !batch.partition_leader_epoch(),
    );
    let mut copy = batch.as_bytes().to_vec();
    assert_eq!(set_base_offset(&mut copy, base_offset), Ok(()));
    assert_eq!(set_partition_leader_epoch(&mut copy, epoch), Ok(()));
    let rewritten = RecordBatch::parse(Bytes::from(copy));
    let rewritten = rewritten.expect("a rewrite of a framed batch stays framed");
    assert_eq!(rewritten.base_offset(), base_offset);
    assert_eq!(rewritten.partition_leader_epoch(), epoch);
    assert_eq!(
        rewritten.validate(),
        verdict,
        "the CRC does not cover the rewritten fields"
    );
    assert_eq!(rewritten.crc(), batch.crc());
}

fn read_all_fields(batch: &RecordBatch) {
    let attributes = batch.attributes();
    black_box((
        batch.base_offset(),
        batch.partition_leader_epoch(),
        batch.magic(),
        batch.crc(),
        attributes.raw(),
        attributes.compression(),
        attributes.timestamp_type(),
        attributes.is_transactional(),
        attributes.is_control(),
        attributes.has_delete_horizon(),
        batch.last_offset_delta(),
        batch.first_timestamp(),
        batch.max_timestamp(),
    ));
    black_box((
        batch.producer_id(),
        batch.producer_epoch(),
        batch.base_sequence(),
        batch.record_count(),
        batch.last_offset(),
        batch.compute_crc(),
    ));
}

/// Fuzz target `native_frame`: reads `data` as a stream of native frames the way the broker
/// does (header with a small limit, then the body), decodes each body (both ways: unpacked,
/// and as the broker takes a request, which must agree), re-encodes what decoded and
/// decodes that again, and decodes the records of every produce batch.
///
/// Panics if a decoded message does not survive re-encoding unchanged, or if the header
/// parser accepts a length past its limit.
pub fn native_frame(data: &[u8]) {
    use crate::native::generated::BodyT;
    use crate::native::{
        decode_body, decode_request, split_trailer, take_trailer, Encoder, FrameHeader,
        ProduceView, Request, FRAME_HEADER_BYTES,
    };
    const LIMIT_BYTES: usize = 1 << 20;
    let mut rest = data;
    let mut encoder = Encoder::new();
    while let Some((header, tail)) = rest.split_first_chunk::<FRAME_HEADER_BYTES>() {
        let Ok(h) = FrameHeader::parse(header, LIMIT_BYTES) else {
            break;
        };
        assert!(h.body_bytes + FRAME_HEADER_BYTES <= LIMIT_BYTES);
        let Some((body, tail)) = tail.split_at_checked(h.body_bytes) else {
            break;
        };
        rest = tail;
        let Ok((body, mut trailer)) = split_trailer(&h, Bytes::copy_from_slice(body)) else {
            continue;
        };
        let Ok(msg) = decode_body(&body) else {
            assert!(
                decode_request(body).is_err(),
                "the broker's decoding took what decode_body refused"
            );
            continue;
        };
        // The broker's decoding takes the same message (a Produce's batches as slices).
        match (
            decode_request(body.clone()).expect("decodes as decode_body did"),
            &msg.body,
        ) {
            (Request::Produce(view), BodyT::ProduceRequest(r)) => {
                assert_eq!(view, ProduceView::from((**r).clone()));
            }
            (Request::Other(m), _) => assert_eq!(m, msg),
            (Request::Produce(_), _) => panic!("decode_request saw a produce decode_body did not"),
        }
        if let crate::native::generated::BodyT::FetchResponse(f) = &msg.body {
            for part in f.partitions.iter().flatten() {
                black_box(take_trailer(&mut trailer, part.trailer_bytes).ok());
            }
        }
        let frame = encoder.frame(h.version, h.correlation_id, &msg);
        let again = decode_body(&frame[FRAME_HEADER_BYTES..]).expect("re-encoded body decodes");
        assert_eq!(msg, again, "re-encoding changed the message");
        if let crate::native::generated::BodyT::ProduceRequest(p) = &msg.body {
            for part in p.partitions.iter().flatten() {
                let records = Bytes::copy_from_slice(part.records.as_deref().unwrap_or(&[]));
                for batch in batches(records).flatten() {
                    let body = batch.as_bytes().slice(BATCH_HEADER_BYTES..);
                    black_box(crate::records::decode_records(body, batch.record_count()).ok());
                }
            }
        }
    }
}
