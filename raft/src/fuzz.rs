//! Bodies of the fuzz targets in `raft/fuzz/fuzz_targets/`, one public function per target.
//!
//! They live in the library so that `cargo fuzz` (nightly) and the stable tests in
//! `rpc/tests.rs` run the same code. Each takes arbitrary bytes and panics only when a
//! property of this crate is broken: an `Err` for bad input is success. Not for the hot
//! path: they allocate freely.

use std::hint::black_box;

use bytes::BytesMut;

use crate::rpc::{self, RpcFrame, FRAME_HEADER_BYTES, LEN_PREFIX_BYTES, RPC_FRAME_BYTES_MAX};

/// Fuzz target `rpc_frame`: reads `data` as a stream of RPC frames the way a connection
/// does (`frame_len`, then `decode` of that many bytes), and also decodes `data` as one
/// frame. Every frame that decodes is encoded again and decoded once more.
///
/// Panics if `frame_len` accepts a length outside the frame limits, or if a decoded frame
/// does not re-encode to frames that decode to the same value.
pub fn rpc_frame(data: &[u8]) {
    let mut rest = data;
    loop {
        match rpc::frame_len(rest) {
            Ok(Some(len)) => {
                assert!(len >= FRAME_HEADER_BYTES, "frame_len accepted {len} bytes");
                assert!(len <= RPC_FRAME_BYTES_MAX, "frame_len accepted {len} bytes");
                let Some((frame, tail)) = rest.split_at_checked(len) else {
                    break;
                };
                rest = tail;
                match rpc::decode(frame) {
                    Ok(decoded) => round_trip(&decoded, frame.len()),
                    Err(error) => {
                        black_box(error.to_string());
                    }
                }
            }
            Ok(None) => {
                assert!(
                    rest.len() < LEN_PREFIX_BYTES,
                    "no length in {} bytes",
                    rest.len()
                );
                break;
            }
            Err(error) => {
                black_box(error.to_string());
                break;
            }
        }
    }
    if let Ok(decoded) = rpc::decode(data) {
        round_trip(&decoded, data.len());
    }
}

/// Re-encoding a decoded frame gives frames that decode to the same value. Protobuf's own
/// encoding can be longer than one it accepts (a single unpacked node id costs a byte
/// more packed), so a frame near the size limit may come back as two; one below half the
/// limit comes back as one.
fn round_trip(decoded: &RpcFrame, input_bytes: usize) {
    let mut out = BytesMut::new();
    let encoded = rpc::encode_into(decoded, &mut out);
    assert_eq!(
        encoded.skipped, 0,
        "a decoded message re-encodes within the limits"
    );
    if input_bytes <= RPC_FRAME_BYTES_MAX / 2 {
        assert_eq!(encoded.frames, 1, "a small frame re-encodes as one frame");
    }
    let mut rest = &out[..];
    let mut again: Option<RpcFrame> = None;
    while !rest.is_empty() {
        let len = rpc::frame_len(rest)
            .expect("an encoded frame is within the limits")
            .expect("an encoded frame has its length");
        let (frame, tail) = rest.split_at(len);
        rest = tail;
        let frame = rpc::decode(frame).expect("a re-encoded frame decodes");
        again = Some(match (again, frame) {
            (Some(RpcFrame::Batch(mut a)), RpcFrame::Batch(b)) => {
                assert_eq!(
                    (a.from, a.to),
                    (b.from, b.to),
                    "split frames keep the addresses"
                );
                a.messages.extend(b.messages);
                RpcFrame::Batch(a)
            }
            (None, frame) => frame,
            (Some(a), b) => panic!("one frame re-encoded as {a:?} and {b:?}"),
        });
    }
    assert_eq!(
        again.as_ref(),
        Some(decoded),
        "re-encoding changed the frame"
    );
}
