//! Bodies of the fuzz targets in `storage/fuzz/fuzz_targets/`, one public function per
//! target: the frame scan that recovery trusts, and recovery itself over a segment of
//! arbitrary bytes. They live in the library so that `cargo fuzz` (nightly) and the stable
//! replay in `storage/tests/fuzz_corpus_replay.rs` run the same code. Each panics only when
//! a property is broken: an `Err` for bad input is success. Not for the hot path.

use std::hint::black_box;
use std::rc::Rc;

use crate::frame::{self, ScanStop, FRAME_HEADER_BYTES};
use crate::{BatchCache, Clock, KafkaOffset, Log, LogConfig, RaftIndex};

/// `data` with every frame header and body CRC made right where a frame's declared length
/// fits, so that the fuzzer's mutations reach past the CRCs into what the frames say.
pub fn repair_crcs(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    let mut at = 0usize;
    while let Some(head) = out.get(at..at + FRAME_HEADER_BYTES) {
        let mut len = [0u8; 4];
        len.copy_from_slice(&head[4..8]);
        let len = u32::from_le_bytes(len) as usize;
        if len < FRAME_HEADER_BYTES || at + len > out.len() {
            break;
        }
        let body_crc = crc32c::crc32c(&out[at + FRAME_HEADER_BYTES..at + len]);
        out[at + 8..at + 12].copy_from_slice(&body_crc.to_le_bytes());
        let head_crc = crc32c::crc32c(&out[at + 4..at + FRAME_HEADER_BYTES]);
        out[at..at + 4].copy_from_slice(&head_crc.to_le_bytes());
        at += len;
    }
    out
}

/// Fuzz target `frame_scan`: scans `data`, as it is and with its CRCs repaired, as
/// recovery scans a segment.
///
/// Panics if the frames visited are not back to back from the start within `data`, if a
/// visited header does not encode to one that decodes the same, or if the stop does not
/// match what follows the last frame (zeros for a clean end).
pub fn frame_scan(data: &[u8]) {
    for buf in [data.to_vec(), repair_crcs(data)] {
        let mut next = 0usize;
        let stop = frame::scan(&buf, |f, body| {
            assert_eq!(f.at, next, "frames back to back");
            let len = f.header.frame_len_bytes as usize;
            assert!(len >= FRAME_HEADER_BYTES && f.at + len <= buf.len());
            assert_eq!(body.len(), len - FRAME_HEADER_BYTES);
            // Values, not bytes: the reserved bytes are covered by the CRC, not decoded.
            assert_eq!(
                frame::decode_header(&frame::encode_header(&f.header)),
                Ok(f.header),
                "header re-encodes"
            );
            next = f.at + len;
        });
        match stop {
            ScanStop::Clean => assert!(buf[next..].iter().all(|&b| b == 0)),
            ScanStop::Bad { at, error } => {
                assert_eq!(at, next, "stops where the last frame ended");
                assert!(frame::decode_frame(&buf[at..]).is_err());
                black_box(error.to_string());
            }
        }
    }
}

struct FixedClock;

impl Clock for FixedClock {
    fn now_ms(&self) -> i64 {
        1_700_000_000_000
    }
}

/// The segment file recovery finds (first Raft index 1, Kafka offset 0, term 1).
const SEGMENT_FILE: &str = "00000000000000000000-00000000000000000001-00000000000000000001.log";

/// Fuzz target `segment_recovery`: writes `data` (its CRCs repaired) as a partition's only
/// segment and opens the log, as a restart after a crash does, then opens it again.
///
/// Panics if recovery keeps a frame the scan rejects, if what it kept cannot be read
/// back, or if a second recovery of the recovered log changes anything. Needs a glommio
/// executor on the thread (`io_runtime::block_on`).
/// Returns the frames recovery kept (`None` when it refused the segment).
pub async fn segment_recovery(dir: &std::path::Path, data: &[u8]) -> Option<u64> {
    let buf = repair_crcs(data);
    let mut valid = 0u64;
    frame::scan(&buf, |_, _| valid += 1);
    let _ = crate::io::remove_dir_all(dir).await;
    crate::io::create_dir_all(dir)
        .await
        .expect("fuzz directory");
    crate::io::write_small_file_atomic_async(&dir.join(SEGMENT_FILE), &buf)
        .await
        .expect("write segment");
    let config = LogConfig {
        allow_buffered_io: true,
        ..LogConfig::default()
    };
    let open = || {
        Log::open(
            dir,
            config.clone(),
            Rc::new(FixedClock),
            Rc::new(BatchCache::new(1 << 20)),
        )
    };
    let log = match open().await {
        Ok(log) => log,
        Err(e) => {
            black_box(e.to_string());
            return None;
        }
    };
    let (first, last, end) = (log.first_index(), log.last_index(), log.log_end_offset());
    assert!(
        last.0 < first.0 + valid.max(1),
        "recovery kept more than the scan found"
    );
    if last >= first {
        let frames = log
            .read_entries(first, RaftIndex(last.0 + 1), usize::MAX)
            .await
            .unwrap_or_else(|e| panic!("recovered frames {first}..={last} unreadable: {e}"));
        assert_eq!(frames.len() as u64, last.0 + 1 - first.0);
    }
    assert!(end >= KafkaOffset(0));
    drop(log);
    let again = open().await.expect("a recovered log opens again");
    assert_eq!(
        (
            again.first_index(),
            again.last_index(),
            again.log_end_offset()
        ),
        (first, last, end),
        "a second recovery changed the log"
    );
    Some(last.0 + 1 - first.0)
}
