use std::path::PathBuf;

use bytes::{Bytes, BytesMut};
use proptest::collection::vec;
use proptest::prelude::*;
use protobuf::{Message as _, ProtobufEnum as _};
use raft::eraftpb::{ConfState, Entry, EntryType, Message, MessageType, Snapshot};

use super::*;
use crate::seed::Prng;

const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);

// ---- builders -------------------------------------------------------------------------

fn message(msg_type: MessageType, from: NodeId, to: NodeId) -> Message {
    let mut m = Message::default();
    m.set_msg_type(msg_type);
    (m.from, m.to, m.term, m.commit) = (from.0, to.0, 7, 41);
    m
}

fn entry(entry_type: EntryType, index: u64, data: &[u8], context: &[u8]) -> Entry {
    let mut e = Entry::default();
    e.set_entry_type(entry_type);
    (e.term, e.index) = (7, index);
    e.data = Bytes::copy_from_slice(data);
    e.context = Bytes::copy_from_slice(context);
    e
}

fn append(from: NodeId, to: NodeId, entries: Vec<Entry>) -> Message {
    let mut m = message(MessageType::MsgAppend, from, to);
    (m.index, m.log_term) = (40, 6);
    m.set_entries(entries.into());
    m
}

fn snapshot_message(from: NodeId, to: NodeId) -> Message {
    let mut m = message(MessageType::MsgSnapshot, from, to);
    let mut s = Snapshot {
        data: Bytes::from_static(&[0, 0, 0, 0, 0, 0, 1, 0]),
        ..Snapshot::default()
    };
    let meta = s.mut_metadata();
    (meta.index, meta.term) = (90, 6);
    let mut conf = ConfState::default();
    (conf.voters, conf.learners) = (vec![1, 2, 300], vec![4]);
    meta.set_conf_state(conf);
    m.set_snapshot(s);
    m
}

fn batch(from: NodeId, to: NodeId, messages: Vec<(u64, Message)>) -> RpcFrame {
    let messages = messages
        .into_iter()
        .map(|(group, message)| GroupMessage {
            group: GroupId(group),
            message,
        })
        .collect();
    RpcFrame::Batch(MessageBatch { from, to, messages })
}

fn hello() -> RpcFrame {
    RpcFrame::Hello(Hello {
        from_node: N1,
        to_node: N2,
        to_shard: ShardId(3),
        cluster_tag: 0x0123_4567_89ab_cdef,
    })
}

/// Encodes a frame that must fit one frame whole.
fn encode_one(frame: &RpcFrame) -> Vec<u8> {
    let mut out = BytesMut::new();
    let encoded = encode_into(frame, &mut out);
    assert_eq!(
        encoded,
        Encoded {
            frames: 1,
            skipped: 0
        },
        "{frame:?}"
    );
    out.to_vec()
}

/// Splits `out` into frames with `frame_len` and decodes each.
fn decode_all(mut out: &[u8]) -> Vec<RpcFrame> {
    let mut frames = Vec::new();
    while !out.is_empty() {
        let len = frame_len(out).unwrap().unwrap();
        assert!(len <= RPC_FRAME_BYTES_MAX);
        frames.push(decode(&out[..len]).unwrap());
        out = &out[len..];
    }
    frames
}

/// A frame with any header and body, its `len` computed.
fn raw(version: u16, kind: u16, body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len() + 4).unwrap();
    [
        &len.to_le_bytes()[..],
        &version.to_le_bytes(),
        &kind.to_le_bytes(),
        body,
    ]
    .concat()
}

/// A batch frame with any count and messages (`group`, protobuf bytes).
fn raw_batch(from: NodeId, to: NodeId, count: u32, messages: &[(u64, &[u8])]) -> Vec<u8> {
    let mut body = [from.0.to_le_bytes(), to.0.to_le_bytes()].concat();
    body.extend(count.to_le_bytes());
    for (group, bytes) in messages {
        body.extend(group.to_le_bytes());
        body.extend(u32::try_from(bytes.len()).unwrap().to_le_bytes());
        body.extend(*bytes);
    }
    raw(RPC_VERSION, KIND_BATCH, &body)
}

fn check(frame: &[u8], expected: Result<RpcFrame, RpcError>) {
    assert_eq!(decode(frame), expected);
}

fn check_len(prefix: &[u8], expected: Result<Option<usize>, RpcError>) {
    assert_eq!(frame_len(prefix), expected, "{prefix:02x?}");
}

fn undecodable(index: usize, group: u64, why: &str) -> Result<RpcFrame, RpcError> {
    Err(RpcError::Undecodable {
        index,
        group: GroupId(group),
        why: why.to_string(),
    })
}

// ---- round trips ----------------------------------------------------------------------

#[test]
fn hello_bytes_are_pinned() {
    let bytes = encode_one(&hello());
    let expected = [
        &[32, 0, 0, 0, 1, 0, 1, 0][..],
        &1_u64.to_le_bytes(),
        &2_u64.to_le_bytes(),
        &3_u32.to_le_bytes(),
        &0x0123_4567_89ab_cdef_u64.to_le_bytes(),
    ]
    .concat();
    assert_eq!(bytes, expected);
    check_len(&bytes[..4], Ok(Some(bytes.len())));
    check(&bytes, Ok(hello()));
}

#[test]
fn batches_round_trip() {
    let entries = vec![
        entry(
            EntryType::EntryNormal,
            41,
            b"kafka batch bytes",
            &[0, 0, 0, 3],
        ),
        entry(EntryType::EntryNormal, 42, b"", b""),
        entry(EntryType::EntryConfChangeV2, 43, b"conf change", b"ctx"),
    ];
    let mut vote = message(MessageType::MsgRequestPreVote, N1, N2);
    vote.context = Bytes::from_static(b"CampaignTransfer");
    vote.priority = -5;
    let mut reject = message(MessageType::MsgAppendResponse, N1, N2);
    (reject.reject, reject.reject_hint, reject.request_snapshot) = (true, 12, 3);
    let frames = [
        batch(N1, N2, vec![]),
        batch(N1, N2, vec![(5, append(N1, N2, entries))]),
        batch(N1, N2, vec![(0, snapshot_message(N1, N2))]),
        batch(
            N1,
            N2,
            vec![
                (1, message(MessageType::MsgHeartbeat, N1, N2)),
                (u64::MAX, vote),
                (2, reject),
                (
                    1,
                    Message {
                        from: 1,
                        to: 2,
                        ..Message::default()
                    },
                ),
            ],
        ),
    ];
    for frame in frames {
        let bytes = encode_one(&frame);
        check_len(&bytes, Ok(Some(bytes.len())));
        check(&bytes, Ok(frame));
    }
}

#[test]
fn frames_stream_back_to_back() {
    let one = batch(N1, N2, vec![(5, append(N1, N2, vec![]))]);
    let mut out = BytesMut::new();
    encode_into(&hello(), &mut out);
    encode_into(&one, &mut out);
    assert_eq!(decode_all(&out), vec![hello(), one]);
}

// ---- frame_len ------------------------------------------------------------------------

#[test]
fn frame_len_measures_and_refuses() {
    let max_len = u32::try_from(RPC_FRAME_BYTES_MAX - LEN_PREFIX_BYTES).unwrap();
    check_len(&[], Ok(None));
    check_len(&[9, 0, 0], Ok(None));
    check_len(&[4, 0, 0, 0], Ok(Some(FRAME_HEADER_BYTES)));
    check_len(&[4, 0, 0, 0, 1, 0], Ok(Some(FRAME_HEADER_BYTES)));
    check_len(&max_len.to_le_bytes(), Ok(Some(RPC_FRAME_BYTES_MAX)));
    let too_large = |len: u32| {
        Err(RpcError::FrameTooLarge {
            len_bytes: u64::from(len) + 4,
        })
    };
    check_len(&(max_len + 1).to_le_bytes(), too_large(max_len + 1));
    check_len(&u32::MAX.to_le_bytes(), too_large(u32::MAX));
    check_len(&[3, 0, 0, 0], Err(RpcError::FrameTooShort { len: 3 }));
    check_len(&[0, 0, 0, 0], Err(RpcError::FrameTooShort { len: 0 }));
}

// ---- decode errors --------------------------------------------------------------------

fn truncated_err(what: &'static str, need: usize, have: usize) -> Result<RpcFrame, RpcError> {
    Err(RpcError::Truncated { what, need, have })
}

#[test]
fn a_control_body_over_the_limit_is_refused() {
    let len = (CONTROL_BODY_BYTES_MAX + 1) as u32;
    let mut body = len.to_le_bytes().to_vec();
    body.resize(4 + CONTROL_BODY_BYTES_MAX + 1, 0);
    assert_eq!(
        decode(&raw(RPC_VERSION, KIND_CONTROL, &body)),
        Err(RpcError::ControlTooLarge { len })
    );
    let short = 10u32.to_le_bytes();
    assert!(matches!(
        decode(&raw(RPC_VERSION, KIND_CONTROL, &short)),
        Err(RpcError::Truncated { .. })
    ));
}

#[test]
fn framing_errors() {
    let good = encode_one(&hello());
    check(&good[..3], truncated_err("frame length", 4, 3));
    check(&good[..20], truncated_err("frame", good.len(), 20));
    let mut longer = good.clone();
    longer.push(0);
    check(&longer, Err(RpcError::TrailingBytes { count: 1 }));
    check(
        &u32::MAX.to_le_bytes(),
        Err(RpcError::FrameTooLarge {
            len_bytes: (1 << 32) + 3,
        }),
    );
    check(&[2, 0, 0, 0, 1, 0], Err(RpcError::FrameTooShort { len: 2 }));
    check(
        &raw(2, KIND_HELLO, &good[8..]),
        Err(RpcError::BadVersion { version: 2 }),
    );
    check(
        &raw(0, KIND_HELLO, &good[8..]),
        Err(RpcError::BadVersion { version: 0 }),
    );
    check(
        &raw(RPC_VERSION, 4, &good[8..]),
        Err(RpcError::UnknownKind { kind: 4 }),
    );
    check(
        &raw(RPC_VERSION, 0, &[]),
        Err(RpcError::UnknownKind { kind: 0 }),
    );
}

#[test]
fn hello_errors() {
    let good = encode_one(&hello());
    let body = &good[FRAME_HEADER_BYTES..];
    check(
        &raw(RPC_VERSION, KIND_HELLO, &body[..27]),
        truncated_err("hello cluster_tag", 8, 7),
    );
    check(
        &raw(RPC_VERSION, KIND_HELLO, &[]),
        truncated_err("hello from_node", 8, 0),
    );
    let long = [body, &[0, 0]].concat();
    check(
        &raw(RPC_VERSION, KIND_HELLO, &long),
        Err(RpcError::TrailingBytes { count: 2 }),
    );
}

#[test]
fn batch_header_errors() {
    let over = u32::try_from(MESSAGES_PER_BATCH_MAX + 1).unwrap();
    let count_err = |count| Err(RpcError::CountOverLimit { count });
    check(&raw_batch(N1, N2, over, &[]), count_err(over));
    check(&raw_batch(N1, N2, u32::MAX, &[]), count_err(u32::MAX));
    // A count within the limit but past the bytes left: refused before allocating.
    check(
        &raw_batch(N1, N2, 1000, &[]),
        truncated_err("message headers", 12_000, 0),
    );
    let header = &raw_batch(N1, N2, 0, &[])[FRAME_HEADER_BYTES..];
    check(
        &raw(RPC_VERSION, KIND_BATCH, &header[..12]),
        truncated_err("batch to", 8, 4),
    );
    check(
        &raw(RPC_VERSION, KIND_BATCH, &header[..17]),
        truncated_err("message count", 4, 1),
    );
    let hb = message(MessageType::MsgHeartbeat, N1, N2)
        .write_to_bytes()
        .unwrap();
    let two = raw_batch(N1, N2, 2, &[(1, &hb), (2, &hb)]);
    check(
        &raw_batch(N1, N2, 1, &[(1, &hb), (2, &hb)]),
        Err(RpcError::TrailingBytes {
            count: 12 + hb.len(),
        }),
    );
    let mut short = two.clone();
    short.truncate(two.len() - hb.len() - 12);
    let len = u32::try_from(short.len() - 4).unwrap();
    short[..4].copy_from_slice(&len.to_le_bytes());
    check(&short, truncated_err("message headers", 24, 12 + hb.len()));
}

#[test]
fn message_errors() {
    let hb = message(MessageType::MsgHeartbeat, N1, N2)
        .write_to_bytes()
        .unwrap();
    // A message length past the bytes left.
    let mut frame = raw_batch(N1, N2, 1, &[(7, &hb)]);
    let len_at = FRAME_HEADER_BYTES + BATCH_HEADER_BYTES + 8;
    frame[len_at..len_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    check(
        &frame,
        truncated_err("message", u32::MAX as usize, hb.len()),
    );
    // Shapes pb_scan refuses, and what protobuf itself refuses (an unknown message type).
    let unknown_field = [&hb[..], &[0xf8, 0x01, 0x00]].concat();
    let cases: [(&[u8], &str); 3] = [
        (&unknown_field[..], "field not in raft-proto 0.7's schema"),
        (&[0x3a, 0x05, 0x22], "length past the end"),
        (&hb[..hb.len() - 1], "truncated varint"),
    ];
    for (bytes, why) in cases {
        check(
            &raw_batch(N1, N2, 2, &[(9, &hb), (7, bytes)]),
            undecodable(1, 7, why),
        );
    }
    let unknown_type = [&hb[..], &[0x08, 0x63]].concat();
    let decoded = decode(&raw_batch(N1, N2, 1, &[(7, &unknown_type)]));
    assert!(
        matches!(
            &decoded,
            Err(RpcError::Undecodable {
                index: 0,
                group: GroupId(7),
                ..
            })
        ),
        "{decoded:?}"
    );
}

#[test]
fn addresses_must_match_the_batch() {
    let hb = message(MessageType::MsgHeartbeat, N1, N2)
        .write_to_bytes()
        .unwrap();
    let mismatch = |from, to, batch_from, batch_to| {
        Err(RpcError::AddressMismatch {
            index: 1,
            group: GroupId(4),
            from,
            to,
            batch_from,
            batch_to,
        })
    };
    let n3 = NodeId(3);
    check(
        &raw_batch(N1, n3, 2, &[(4, &hb), (4, &hb)]),
        Err(RpcError::AddressMismatch {
            index: 0,
            group: GroupId(4),
            from: 1,
            to: 2,
            batch_from: N1,
            batch_to: n3,
        }),
    );
    let other = message(MessageType::MsgHeartbeat, n3, N2)
        .write_to_bytes()
        .unwrap();
    check(
        &raw_batch(N1, N2, 2, &[(4, &hb), (4, &other)]),
        mismatch(3, 2, N1, N2),
    );
    let other = message(MessageType::MsgHeartbeat, N1, n3)
        .write_to_bytes()
        .unwrap();
    check(
        &raw_batch(N1, N2, 2, &[(4, &hb), (4, &other)]),
        mismatch(1, 3, N1, N2),
    );
}

#[test]
fn items_are_counted_across_the_frame_before_parsing() {
    // Empty entries: 2 bytes on the wire, an `Entry` each in memory. from = to = 0.
    let entries = |n: usize| [0x3a_u8, 0x00].repeat(n);
    let half = entries(ITEMS_PER_FRAME_MAX / 2);
    let frame = raw_batch(NodeId(0), NodeId(0), 2, &[(1, &half), (2, &half)]);
    let RpcFrame::Batch(decoded) = decode(&frame).unwrap() else {
        panic!("not a batch");
    };
    assert_eq!(
        decoded.messages[1].message.entries.len(),
        ITEMS_PER_FRAME_MAX / 2
    );
    let over = entries(1);
    check(
        &raw_batch(
            NodeId(0),
            NodeId(0),
            3,
            &[(1, &half), (2, &half), (3, &over)],
        ),
        Err(RpcError::ItemsOverLimit {
            index: 2,
            group: GroupId(3),
            items: ITEMS_PER_FRAME_MAX + 1,
        }),
    );
}

// ---- encoder --------------------------------------------------------------------------

#[test]
fn encoder_splits_a_batch_over_the_count() {
    let messages: Vec<_> = (0..=MESSAGES_PER_BATCH_MAX as u64)
        .map(|g| (g, message(MessageType::MsgHeartbeat, N1, N2)))
        .collect();
    let frame = batch(N1, N2, messages);
    let mut out = BytesMut::new();
    assert_eq!(
        encode_into(&frame, &mut out),
        Encoded {
            frames: 2,
            skipped: 0
        }
    );
    check_split(&frame, &out, &[MESSAGES_PER_BATCH_MAX, 1]);
}

#[test]
fn encoder_splits_a_batch_over_the_items() {
    let entries = |n: u64| {
        (1..=n)
            .map(|i| entry(EntryType::EntryNormal, i, b"", b""))
            .collect()
    };
    let third = ITEMS_PER_FRAME_MAX as u64 / 3;
    let frame = batch(
        N1,
        N2,
        (0..4)
            .map(|g| (g, append(N1, N2, entries(third))))
            .collect(),
    );
    let mut out = BytesMut::new();
    assert_eq!(
        encode_into(&frame, &mut out),
        Encoded {
            frames: 2,
            skipped: 0
        }
    );
    check_split(&frame, &out, &[3, 1]);
}

#[test]
fn encoder_splits_a_batch_over_the_bytes() {
    // One 16 MiB payload shared by every entry: five appends need two frames.
    let payload = Bytes::from(vec![0x5a; crate::entry::PAYLOAD_BYTES_MAX]);
    let big = |index| {
        let mut e = entry(EntryType::EntryNormal, index, b"", &[0, 0, 0, 1]);
        e.data = payload.clone();
        append(N1, N2, vec![e])
    };
    let frame = batch(N1, N2, (1..=5).map(|g| (g, big(g))).collect());
    let mut out = BytesMut::new();
    assert_eq!(
        encode_into(&frame, &mut out),
        Encoded {
            frames: 2,
            skipped: 0
        }
    );
    check_split(&frame, &out, &[4, 1]);
}

#[test]
fn encoder_skips_a_message_that_alone_breaks_a_limit() {
    let too_many = (1..=ITEMS_PER_FRAME_MAX as u64 + 1)
        .map(|i| entry(EntryType::EntryNormal, i, b"", b""))
        .collect();
    let mut too_big = entry(EntryType::EntryNormal, 1, b"", b"");
    too_big.data = Bytes::from(vec![0; RPC_FRAME_BYTES_MAX]);
    let hb = |g| (g, message(MessageType::MsgHeartbeat, N1, N2));
    let frame = batch(
        N1,
        N2,
        vec![
            hb(1),
            (2, append(N1, N2, too_many)),
            hb(3),
            (4, append(N1, N2, vec![too_big])),
        ],
    );
    let mut out = BytesMut::new();
    assert_eq!(
        encode_into(&frame, &mut out),
        Encoded {
            frames: 1,
            skipped: 2
        }
    );
    assert_eq!(decode_all(&out), vec![batch(N1, N2, vec![hb(1), hb(3)])]);
}

#[test]
#[should_panic(expected = "message 0 of g9 is from 1 to 3, its batch from n1 to n2")]
fn encoder_refuses_a_message_for_another_node() {
    let frame = batch(
        N1,
        N2,
        vec![(9, message(MessageType::MsgHeartbeat, N1, NodeId(3)))],
    );
    encode_into(&frame, &mut BytesMut::new());
}

/// `out` holds frames of `sizes` messages that together are `frame`'s messages, in order.
fn check_split(frame: &RpcFrame, out: &[u8], sizes: &[usize]) {
    let RpcFrame::Batch(whole) = frame else {
        panic!("not a batch");
    };
    let mut rest = whole.messages.as_slice();
    let frames = decode_all(out);
    assert_eq!(frames.len(), sizes.len());
    for (decoded, &size) in frames.iter().zip(sizes) {
        let RpcFrame::Batch(part) = decoded else {
            panic!("not a batch");
        };
        assert_eq!((part.from, part.to), (whole.from, whole.to));
        assert_eq!(part.messages.len(), size);
        assert!(
            part.messages == rest[..size],
            "messages changed in the split"
        );
        rest = &rest[size..];
    }
}

// ---- properties -----------------------------------------------------------------------

fn arb_entry() -> impl Strategy<Value = Entry> {
    let types = prop::sample::select(EntryType::values());
    let bytes = |n| vec(any::<u8>(), 0..n);
    (
        types,
        any::<u64>(),
        any::<u64>(),
        bytes(64),
        bytes(8),
        any::<bool>(),
    )
        .prop_map(|(entry_type, term, index, data, context, sync_log)| {
            let mut e = entry(entry_type, index, &data, &context);
            (e.term, e.sync_log) = (term, sync_log);
            e
        })
}

fn arb_snapshot() -> impl Strategy<Value = Snapshot> {
    let ids = || vec(any::<u64>(), 0..4);
    (
        vec(any::<u8>(), 0..16),
        any::<(u64, u64)>(),
        ids(),
        ids(),
        ids(),
        ids(),
        any::<bool>(),
    )
        .prop_map(
            |(data, (index, term), voters, learners, outgoing, next, auto_leave)| {
                let mut s = Snapshot {
                    data: data.into(),
                    ..Snapshot::default()
                };
                let meta = s.mut_metadata();
                (meta.index, meta.term) = (index, term);
                let conf = meta.mut_conf_state();
                (conf.voters, conf.learners) = (voters, learners);
                (conf.voters_outgoing, conf.learners_next) = (outgoing, next);
                conf.auto_leave = auto_leave;
                s
            },
        )
}

/// A message of any type and fields, from `from` to `to`.
fn arb_message(from: u64, to: u64) -> impl Strategy<Value = Message> {
    let types = prop::sample::select(MessageType::values());
    let numbers = any::<[u64; 8]>();
    let extras = (any::<bool>(), any::<i64>(), vec(any::<u8>(), 0..16));
    let body = (vec(arb_entry(), 0..4), proptest::option::of(arb_snapshot()));
    (types, numbers, extras, body).prop_map(move |(t, n, (reject, priority, context), body)| {
        let mut m = Message::default();
        m.set_msg_type(t);
        (m.from, m.to) = (from, to);
        (m.term, m.log_term, m.index, m.commit, m.commit_term) = (n[0], n[1], n[2], n[3], n[4]);
        (m.request_snapshot, m.reject_hint, m.deprecated_priority) = (n[5], n[6], n[7]);
        (m.reject, m.priority, m.context) = (reject, priority, context.into());
        m.set_entries(body.0.into());
        if let Some(snapshot) = body.1 {
            m.set_snapshot(snapshot);
        }
        m
    })
}

fn arb_batch() -> impl Strategy<Value = RpcFrame> {
    (any::<u64>(), any::<u64>()).prop_flat_map(|(from, to)| {
        vec((any::<u64>(), arb_message(from, to)), 0..6)
            .prop_map(move |messages| batch(NodeId(from), NodeId(to), messages))
    })
}

/// Frames cut, flipped or extended: the fuzz target's own checks decide.
fn arb_mangled_frame() -> impl Strategy<Value = Vec<u8>> {
    (
        arb_batch(),
        any::<prop::sample::Index>(),
        any::<u8>(),
        0..4_u8,
    )
        .prop_map(|(frame, at, byte, how)| {
            let mut bytes = encode_one(&frame);
            let i = at.index(bytes.len());
            match how {
                0 => bytes.truncate(i),
                1 => bytes[i] ^= byte | 1,
                2 => bytes[i] = byte,
                _ => bytes.insert(i, byte),
            }
            bytes
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn encode_then_decode_is_identity(frame in arb_batch()) {
        let bytes = encode_one(&frame);
        prop_assert_eq!(frame_len(&bytes), Ok(Some(bytes.len())));
        prop_assert_eq!(decode(&bytes), Ok(frame));
    }

    #[test]
    fn pb_scan_counts_what_items_of_counts(m in arb_message(1, 2)) {
        let bytes = m.write_to_bytes().unwrap();
        prop_assert_eq!(pb_scan::message_items(&bytes), Ok(pb_scan::items_of(&m)));
    }

    #[test]
    fn hellos_round_trip(h in any::<(u64, u64, u32, u64)>()) {
        let frame = RpcFrame::Hello(Hello {
            from_node: NodeId(h.0),
            to_node: NodeId(h.1),
            to_shard: ShardId(h.2),
            cluster_tag: h.3,
        });
        prop_assert_eq!(decode(&encode_one(&frame)), Ok(frame));
    }

    #[test]
    fn controls_round_trip(body in vec(any::<u8>(), 0..512)) {
        let frame = RpcFrame::Control(bytes::Bytes::from(body));
        prop_assert_eq!(decode(&encode_one(&frame)), Ok(frame));
    }

    #[test]
    fn any_control_body_never_panics(body in vec(any::<u8>(), 0..64)) {
        crate::fuzz::rpc_frame(&raw(RPC_VERSION, KIND_CONTROL, &body));
    }

    #[test]
    fn any_bytes_never_panic(data in vec(any::<u8>(), 0..256)) {
        crate::fuzz::rpc_frame(&data);
    }

    #[test]
    fn any_batch_body_never_panics(body in vec(any::<u8>(), 0..256)) {
        crate::fuzz::rpc_frame(&raw(RPC_VERSION, KIND_BATCH, &body));
    }

    #[test]
    fn mangled_frames_never_panic(bytes in arb_mangled_frame()) {
        crate::fuzz::rpc_frame(&bytes);
    }
}

// ---- fuzz corpus ----------------------------------------------------------------------

/// Mutations of each corpus file run on stable Rust by `corpus_replays`.
const MUTATIONS_PER_INPUT: usize = 300;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/rpc_frame")
}

/// The seed corpus of `raft/fuzz`: name and bytes. `STRAND_WRITE_FUZZ_SEEDS=1 cargo test
/// -p strand-raft --lib corpus` rewrites the files; otherwise the test checks them.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let entries = vec![
        entry(
            EntryType::EntryNormal,
            41,
            b"kafka batch bytes",
            &[0, 0, 0, 3],
        ),
        entry(EntryType::EntryConfChangeV2, 42, b"conf change", b""),
    ];
    let append = encode_one(&batch(N1, N2, vec![(5, append(N1, N2, entries))]));
    let mixed = encode_one(&batch(
        N1,
        N2,
        vec![
            (0, snapshot_message(N1, N2)),
            (3, message(MessageType::MsgHeartbeat, N1, N2)),
        ],
    ));
    let hello = encode_one(&hello());
    let mut bad_version = hello.clone();
    bad_version[4] = 2;
    vec![
        ("hello", hello.clone()),
        ("batch-append", append.clone()),
        ("batch-snapshot-heartbeat", mixed),
        ("batch-empty", encode_one(&batch(N1, N2, vec![]))),
        ("stream-hello-batch", [hello, append.clone()].concat()),
        ("truncated", append[..append.len() - 3].to_vec()),
        ("bad-version", bad_version),
        (
            "huge-length",
            [&u32::MAX.to_le_bytes()[..], &append[4..]].concat(),
        ),
        ("count-over-limit", raw_batch(N1, N2, u32::MAX, &[])),
    ]
}

#[test]
fn corpus_replays() {
    let dir = corpus_dir();
    if std::env::var_os("STRAND_WRITE_FUZZ_SEEDS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in seeds() {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    for (name, bytes) in seeds() {
        let on_disk = std::fs::read(dir.join(name)).unwrap_or_default();
        assert!(
            on_disk == bytes,
            "seed {name} differs; rewrite with STRAND_WRITE_FUZZ_SEEDS=1"
        );
    }
    let mut corpus: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    corpus.sort();
    let mut rng = Prng::new(0x5712_a9d0_f022_0002);
    for data in &corpus {
        crate::fuzz::rpc_frame(data);
        for _ in 0..MUTATIONS_PER_INPUT {
            crate::fuzz::rpc_frame(&mutate(data, &corpus, &mut rng));
        }
    }
}

/// One mutation: bit flips, byte writes, a cut, a `len` or `count` at its edges, a splice
/// with another input, or a duplication.
fn mutate(data: &[u8], corpus: &[Vec<u8>], rng: &mut Prng) -> Vec<u8> {
    let mut out = data.to_vec();
    let below = |rng: &mut Prng, n: usize| usize::try_from(rng.below(n as u64)).unwrap();
    match rng.below(6) {
        0 if !out.is_empty() => {
            for _ in 0..=rng.below(4) {
                let bit = below(rng, out.len() * 8);
                out[bit / 8] ^= 1 << (bit % 8);
            }
        }
        1 if !out.is_empty() => {
            for _ in 0..=rng.below(8) {
                let at = below(rng, out.len());
                out[at] = rng.next_u64().to_le_bytes()[0];
            }
        }
        2 => out.truncate(below(rng, out.len() + 1)),
        3 => {
            let len = u32::try_from(out.len()).unwrap_or(u32::MAX);
            let edges = [
                0,
                3,
                4,
                len.saturating_sub(5),
                len.saturating_sub(4),
                len,
                u32::MAX,
            ];
            let value = edges[below(rng, edges.len())];
            // `len` at 0, or a batch's `count` at 24.
            let at = if rng.below(2) == 0 { 0 } else { 24 };
            if out.len() >= at + 4 {
                out[at..at + 4].copy_from_slice(&value.to_le_bytes());
            }
        }
        4 => {
            let other = &corpus[below(rng, corpus.len())];
            out.truncate(below(rng, out.len() + 1));
            out.extend_from_slice(&other[below(rng, other.len() + 1)..]);
        }
        _ => out.extend_from_slice(data),
    }
    out
}
