//! Internal RPC frames: how a `MessageBatch` travels between nodes (ARCHITECTURE.md,
//! Replication). Each (node, shard) pair has one TCP connection (default port
//! [`RPC_PORT_DEFAULT`]); it opens with a `Hello` and then carries batches.
//!
//! ```text
//! frame:    [len: u32][version: u16 = 1][kind: u16][body]     len = bytes after `len`
//! Hello (kind 1):  [from_node: u64][to_node: u64][to_shard: u32][cluster_tag: u64]
//! Batch (kind 2):  [from: u64][to: u64][count: u32] then `count` times:
//!                  [group: u64][len: u32][eraftpb::Message, protobuf, `len` bytes]
//! Control (kind 3): [len: u32][`len` bytes, at most CONTROL_BODY_BYTES_MAX]
//! ```
//!
//! A control frame carries a cluster-management request or its answer (a node joining
//! asks a seed for an id); the broker owns its contents.
//!
//! All integers are little-endian. A whole frame is at most [`RPC_FRAME_BYTES_MAX`] bytes,
//! a batch frame holds at most `MESSAGES_PER_BATCH_MAX` messages and
//! [`ITEMS_PER_FRAME_MAX`] entries and node ids.
//!
//! Invariant: `decode` returns a frame only if every length and count in it was checked
//! against the bytes left and against its limit before anything was allocated for it,
//! nothing follows the body, every message is raft-proto 0.7's schema with no unknown
//! field (`pb_scan`), and every message's `from`/`to` equal its batch's. `encode_into`
//! writes only frames `decode` accepts: it splits a batch over a frame's limits across
//! several frames and leaves out (and counts) a message that alone breaks one.
//!
//! Pure code, no I/O: the shard that owns a connection reads with `frame_len` until
//! `decode` can run. Deliberately absent: checking a hello's tag and destination (the
//! broker's job), the Raft-level checks of a message (entry shapes, snapshots: the
//! driver's `group::validate`), a checksum (a bit flipped past TCP's checksum goes
//! undetected here), and compression.

mod pb_scan;
#[cfg(test)]
mod tests;

use bytes::{BufMut, BytesMut};
use protobuf::Message as _;
use raft::eraftpb::Message;

use crate::multi_raft::APPEND_BYTES_MAX_DEFAULT;
use crate::transport::{GroupMessage, MessageBatch, MESSAGES_PER_BATCH_MAX};
use crate::types::{GroupId, NodeId, ShardId};

const MIB: usize = 1024 * 1024;

/// The port a node listens on for internal RPC unless configured otherwise.
pub const RPC_PORT_DEFAULT: u16 = 33145;

/// The frame format this code reads and writes. A peer with another version is refused;
/// a change of raft-proto's schema is a new version (`pb_scan` rejects unknown fields).
pub const RPC_VERSION: u16 = 1;

/// Bytes of the frame's `len` field.
pub const LEN_PREFIX_BYTES: usize = 4;
/// Bytes before the body: `len`, `version`, `kind`.
pub const FRAME_HEADER_BYTES: usize = LEN_PREFIX_BYTES + 2 + 2;
const HELLO_BODY_BYTES: usize = 8 + 8 + 4 + 8;
const BATCH_HEADER_BYTES: usize = 8 + 8 + 4;
const MESSAGE_HEADER_BYTES: usize = 8 + 4;

const KIND_HELLO: u16 = 1;
const KIND_BATCH: u16 = 2;
const KIND_CONTROL: u16 = 3;

/// Most bytes of a control frame's body.
pub const CONTROL_BODY_BYTES_MAX: usize = 64 * 1024;

/// Room for protobuf messages every batch frame has, whatever its message count: four
/// appends that each carry a largest entry (`entry::PAYLOAD_BYTES_MAX`, 16 MiB), or 64
/// appends of the default `APPEND_BYTES_MAX_DEFAULT` (1 MiB). A turn's messages for one
/// peer may exceed it; `encode_into` then writes several frames.
const MESSAGE_BYTES_PER_FRAME_MIN: usize = 64 * MIB;

/// Largest frame, `len` field included. The 1 MiB over `MESSAGE_BYTES_PER_FRAME_MIN` pays
/// for the headers: 12 bytes per message for `MESSAGES_PER_BATCH_MAX` messages is 768 KiB.
/// `frame_len` refuses a larger `len` before the reader buffers anything for it, and the
/// connection is closed (STYLE.md 5).
pub const RPC_FRAME_BYTES_MAX: usize = MESSAGE_BYTES_PER_FRAME_MIN + MIB;

/// Most entries and `ConfState` node ids in one frame, counted by `pb_scan` before protobuf
/// parses a message. rust-protobuf allocates an `Entry` (104 bytes, up to twice that in a
/// growing `Vec`) per entry however short its encoding (an empty entry is 2 bytes), so a
/// full frame of empty entries would cost ~6.6 GiB; this bounds it to ~52 MiB. With the
/// default `APPEND_BYTES_MAX_DEFAULT` one append carries at most 256 Ki entries (raft-rs
/// caps an append's entry bytes, and every entry has index and term >= 1, so 4 bytes or
/// more; raft-rs's `batch_append`, which would merge appends past the cap, stays off), and
/// `encode_into` starts a new frame when the next message would cross the limit.
pub const ITEMS_PER_FRAME_MAX: usize = 256 * 1024;

const _: () = assert!(
    FRAME_HEADER_BYTES
        + BATCH_HEADER_BYTES
        + MESSAGES_PER_BATCH_MAX * MESSAGE_HEADER_BYTES
        + MESSAGE_BYTES_PER_FRAME_MIN
        <= RPC_FRAME_BYTES_MAX
);
const _: () = assert!(4 * crate::entry::PAYLOAD_BYTES_MAX <= MESSAGE_BYTES_PER_FRAME_MIN);
const _: () = assert!(RPC_FRAME_BYTES_MAX - LEN_PREFIX_BYTES <= u32::MAX as usize); // `len` is a u32
const _: () = assert!(MESSAGES_PER_BATCH_MAX <= u32::MAX as usize); // `count` is a u32
const _: () = assert!(APPEND_BYTES_MAX_DEFAULT / 4 <= ITEMS_PER_FRAME_MAX as u64);

/// The first frame on a connection: who calls whom. The broker refuses a peer whose
/// `cluster_tag` (a hash of the cluster id) differs from its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The calling node.
    pub from_node: NodeId,
    /// The node called; the broker refuses a hello meant for another node.
    pub to_node: NodeId,
    /// The shard of `to_node` this connection serves.
    pub to_shard: ShardId,
    /// The broker's hash of its cluster id.
    pub cluster_tag: u64,
}

/// One internal RPC frame.
#[derive(Clone, Debug, PartialEq)]
pub enum RpcFrame {
    Hello(Hello),
    Batch(MessageBatch),
    /// At most `CONTROL_BODY_BYTES_MAX` bytes.
    Control(bytes::Bytes),
}

/// A frame a peer sent that we refuse; the connection is closed (STYLE.md 5).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RpcError {
    #[error("rpc frame of {len_bytes} bytes is over the limit of {RPC_FRAME_BYTES_MAX}")]
    FrameTooLarge { len_bytes: u64 },
    #[error("rpc frame declares {len} bytes after its length, less than a frame header")]
    FrameTooShort { len: u32 },
    #[error("rpc frame version {version}, expected {RPC_VERSION}")]
    BadVersion { version: u16 },
    #[error("unknown rpc frame kind {kind}")]
    UnknownKind { kind: u16 },
    #[error("rpc batch of {count} messages is over the limit of {MESSAGES_PER_BATCH_MAX}")]
    CountOverLimit { count: u32 },
    #[error("truncated rpc frame: {what} needs {need} bytes, {have} left")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("rpc control body of {len} bytes is over the limit of {CONTROL_BODY_BYTES_MAX}")]
    ControlTooLarge { len: u32 },
    #[error("{count} trailing bytes after the rpc frame")]
    TrailingBytes { count: usize },
    #[error("rpc message {index} for {group}: {items} entries and node ids in the frame, over the limit of {ITEMS_PER_FRAME_MAX}")]
    ItemsOverLimit {
        index: usize,
        group: GroupId,
        items: usize,
    },
    #[error("undecodable rpc message {index} for {group}: {why}")]
    Undecodable {
        index: usize,
        group: GroupId,
        why: String,
    },
    #[error("rpc message {index} for {group} is from {from} to {to}, its batch from {batch_from} to {batch_to}")]
    AddressMismatch {
        index: usize,
        group: GroupId,
        from: u64,
        to: u64,
        batch_from: NodeId,
        batch_to: NodeId,
    },
}

/// What `encode_into` wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Encoded {
    /// Frames appended: one, or more for a batch over a frame's limits.
    pub frames: usize,
    /// Messages left out because alone they break a frame's limits: over 256 Ki entries
    /// or ~65 MiB. Only an append size over `APPEND_BYTES_MAX_DEFAULT` can produce one;
    /// Raft resends it, so the caller must report it (the follower would not catch up).
    pub skipped: usize,
}

/// Given the first bytes of a frame, how many bytes the whole frame has (`len` field
/// included); `None` until the `len` field is complete.
pub fn frame_len(prefix: &[u8]) -> Result<Option<usize>, RpcError> {
    let Some((len, _)) = prefix.split_first_chunk::<LEN_PREFIX_BYTES>() else {
        return Ok(None);
    };
    let len = u32::from_le_bytes(*len);
    let total = u64::from(len) + LEN_PREFIX_BYTES as u64;
    let max = RPC_FRAME_BYTES_MAX as u64; // usize <= u64 on every target we build
    if total > max {
        return Err(RpcError::FrameTooLarge { len_bytes: total });
    }
    if total < FRAME_HEADER_BYTES as u64 {
        return Err(RpcError::FrameTooShort { len });
    }
    // total <= RPC_FRAME_BYTES_MAX, a usize.
    Ok(Some(
        usize::try_from(total).expect("a frame length under the limit fits usize"),
    ))
}

/// Decodes one whole frame (`len` field included, as `frame_len` measured it).
pub fn decode(frame: &[u8]) -> Result<RpcFrame, RpcError> {
    let total = match frame_len(frame)? {
        Some(total) => total,
        None => return Err(truncated("frame length", LEN_PREFIX_BYTES, frame.len())),
    };
    if frame.len() < total {
        return Err(truncated("frame", total, frame.len()));
    }
    if frame.len() > total {
        return Err(RpcError::TrailingBytes {
            count: frame.len() - total,
        });
    }
    let mut r = Reader {
        rest: frame.get(LEN_PREFIX_BYTES..).unwrap_or_default(),
    };
    let version = r.u16("version")?;
    if version != RPC_VERSION {
        return Err(RpcError::BadVersion { version });
    }
    let decoded = match r.u16("kind")? {
        KIND_HELLO => RpcFrame::Hello(decode_hello(&mut r)?),
        KIND_BATCH => RpcFrame::Batch(decode_batch(&mut r)?),
        KIND_CONTROL => {
            let len = r.u32("control length")?;
            if len as usize > CONTROL_BODY_BYTES_MAX {
                return Err(RpcError::ControlTooLarge { len });
            }
            let body = r.take(len as usize, "control body")?;
            RpcFrame::Control(bytes::Bytes::copy_from_slice(body))
        }
        kind => return Err(RpcError::UnknownKind { kind }),
    };
    if !r.rest.is_empty() {
        return Err(RpcError::TrailingBytes {
            count: r.rest.len(),
        });
    }
    Ok(decoded)
}

fn decode_hello(r: &mut Reader<'_>) -> Result<Hello, RpcError> {
    Ok(Hello {
        from_node: NodeId(r.u64("hello from_node")?),
        to_node: NodeId(r.u64("hello to_node")?),
        to_shard: ShardId(r.u32("hello to_shard")?),
        cluster_tag: r.u64("hello cluster_tag")?,
    })
}

fn decode_batch(r: &mut Reader<'_>) -> Result<MessageBatch, RpcError> {
    let from = NodeId(r.u64("batch from")?);
    let to = NodeId(r.u64("batch to")?);
    let count_field = r.u32("message count")?;
    let count = usize::try_from(count_field).unwrap_or(usize::MAX);
    if count > MESSAGES_PER_BATCH_MAX {
        return Err(RpcError::CountOverLimit { count: count_field });
    }
    // count <= MESSAGES_PER_BATCH_MAX, so the product cannot overflow.
    let headers_bytes = count * MESSAGE_HEADER_BYTES;
    if headers_bytes > r.rest.len() {
        return Err(truncated("message headers", headers_bytes, r.rest.len()));
    }
    let mut messages = Vec::with_capacity(count);
    let mut items = 0_usize;
    for index in 0..count {
        let group = GroupId(r.u64("group id")?);
        let len = usize::try_from(r.u32("message length")?).unwrap_or(usize::MAX);
        let bytes = r.take(len, "message")?;
        let undecodable = |why: String| RpcError::Undecodable { index, group, why };
        items += pb_scan::message_items(bytes).map_err(|why| undecodable(why.to_string()))?;
        if items > ITEMS_PER_FRAME_MAX {
            return Err(RpcError::ItemsOverLimit {
                index,
                group,
                items,
            });
        }
        // pb_scan accepted the shape and counted the items: protobuf allocates for them.
        let message = Message::parse_from_bytes(bytes).map_err(|e| undecodable(e.to_string()))?;
        if message.from != from.0 || message.to != to.0 {
            return Err(RpcError::AddressMismatch {
                index,
                group,
                from: message.from,
                to: message.to,
                batch_from: from,
                batch_to: to,
            });
        }
        messages.push(GroupMessage { group, message });
    }
    Ok(MessageBatch { from, to, messages })
}

/// Appends `frame` to `out`. A batch over a frame's limits becomes several frames, each a
/// batch with the same `from` and `to`, messages in order.
///
/// Panics if a message's `from`/`to` differ from its batch's: the driver builds batches
/// per destination from raft-rs's own messages, so that is our bug.
pub fn encode_into(frame: &RpcFrame, out: &mut BytesMut) -> Encoded {
    match frame {
        RpcFrame::Hello(hello) => {
            let start = open_frame(out, KIND_HELLO);
            out.put_u64_le(hello.from_node.0);
            out.put_u64_le(hello.to_node.0);
            out.put_u32_le(hello.to_shard.0);
            out.put_u64_le(hello.cluster_tag);
            close_frame(out, start);
            assert_eq!(out.len() - start, FRAME_HEADER_BYTES + HELLO_BODY_BYTES);
            Encoded {
                frames: 1,
                skipped: 0,
            }
        }
        RpcFrame::Batch(batch) => encode_batch(batch, out),
        RpcFrame::Control(body) => {
            assert!(
                body.len() <= CONTROL_BODY_BYTES_MAX,
                "a control body of {} bytes is over the limit",
                body.len()
            );
            let start = open_frame(out, KIND_CONTROL);
            out.put_u32_le(body.len() as u32);
            out.put_slice(body);
            close_frame(out, start);
            Encoded {
                frames: 1,
                skipped: 0,
            }
        }
    }
}

fn encode_batch(batch: &MessageBatch, out: &mut BytesMut) -> Encoded {
    let mut encoded = Encoded::default();
    let mut w = BatchWriter::open(out, batch.from, batch.to);
    for (index, gm) in batch.messages.iter().enumerate() {
        let m = &gm.message;
        assert!(
            m.from == batch.from.0 && m.to == batch.to.0,
            "message {index} of {} is from {} to {}, its batch from {} to {}",
            gm.group,
            m.from,
            m.to,
            batch.from,
            batch.to
        );
        // compute_size also caches the nested sizes that write_to_with_cached_sizes uses.
        let size = usize::try_from(m.compute_size()).unwrap_or(usize::MAX);
        let items = pb_scan::items_of(m);
        if !BatchWriter::fits_alone(size, items) {
            encoded.skipped += 1;
            continue;
        }
        if !w.has_room(size, items) {
            encoded.frames += w.close();
            w = BatchWriter::open(w.out, batch.from, batch.to);
        }
        w.push(gm.group, m, size, items);
    }
    encoded.frames += w.close();
    encoded
}

/// Writes one batch frame, then patches its `len` and `count`.
struct BatchWriter<'a> {
    out: &'a mut BytesMut,
    start: usize,
    count: usize,
    items: usize,
}

impl<'a> BatchWriter<'a> {
    fn open(out: &'a mut BytesMut, from: NodeId, to: NodeId) -> Self {
        let start = open_frame(out, KIND_BATCH);
        out.put_u64_le(from.0);
        out.put_u64_le(to.0);
        out.put_u32_le(0); // count, patched by close
        Self {
            out,
            start,
            count: 0,
            items: 0,
        }
    }

    fn fits_alone(size: usize, items: usize) -> bool {
        let frame_bytes = FRAME_HEADER_BYTES + BATCH_HEADER_BYTES + MESSAGE_HEADER_BYTES;
        size <= RPC_FRAME_BYTES_MAX - frame_bytes && items <= ITEMS_PER_FRAME_MAX
    }

    fn has_room(&self, size: usize, items: usize) -> bool {
        let frame_bytes = self.out.len() - self.start;
        let room_bytes = RPC_FRAME_BYTES_MAX.saturating_sub(frame_bytes + MESSAGE_HEADER_BYTES);
        self.count < MESSAGES_PER_BATCH_MAX
            && size <= room_bytes
            && items <= ITEMS_PER_FRAME_MAX.saturating_sub(self.items)
    }

    /// `size` is `message.compute_size()`, called just before.
    fn push(&mut self, group: GroupId, message: &Message, size: usize, items: usize) {
        assert!(
            self.has_room(size, items),
            "no room for {size} bytes, {items} items"
        );
        self.out.put_u64_le(group.0);
        self.out
            .put_u32_le(u32::try_from(size).expect("has_room bounds size by the frame limit"));
        let at = self.out.len();
        self.out.resize(at + size, 0);
        let mut os = protobuf::CodedOutputStream::bytes(&mut self.out[at..]);
        message
            .write_to_with_cached_sizes(&mut os)
            .expect("a message fits the buffer of its computed size");
        os.check_eof(); // panics unless the message filled exactly its computed size
        self.count += 1;
        self.items += items;
    }

    /// Patches `len` and `count`; returns the number of frames written (1).
    fn close(&mut self) -> usize {
        let count_at = self.start + FRAME_HEADER_BYTES + 16;
        let count = u32::try_from(self.count).expect("count <= MESSAGES_PER_BATCH_MAX");
        self.out[count_at..count_at + 4].copy_from_slice(&count.to_le_bytes());
        close_frame(self.out, self.start);
        1
    }
}

/// Appends `len` (patched by `close_frame`), version and kind; returns the frame's start.
fn open_frame(out: &mut BytesMut, kind: u16) -> usize {
    let start = out.len();
    out.put_u32_le(0);
    out.put_u16_le(RPC_VERSION);
    out.put_u16_le(kind);
    start
}

fn close_frame(out: &mut BytesMut, start: usize) {
    let total = out.len() - start;
    assert!(
        total <= RPC_FRAME_BYTES_MAX,
        "encoded a frame of {total} bytes"
    );
    let len = u32::try_from(total - LEN_PREFIX_BYTES).expect("the frame limit fits u32");
    out[start..start + LEN_PREFIX_BYTES].copy_from_slice(&len.to_le_bytes());
}

fn truncated(what: &'static str, need: usize, have: usize) -> RpcError {
    RpcError::Truncated { what, need, have }
}

/// Reads little-endian fields off the front of a frame.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RpcError> {
        let Some((head, tail)) = self.rest.split_at_checked(n) else {
            return Err(truncated(what, n, self.rest.len()));
        };
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], RpcError> {
        let Some((head, tail)) = self.rest.split_first_chunk::<N>() else {
            return Err(truncated(what, N, self.rest.len()));
        };
        self.rest = tail;
        Ok(*head)
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, RpcError> {
        self.array(what).map(u16::from_le_bytes)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, RpcError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, RpcError> {
        self.array(what).map(u64::from_le_bytes)
    }
}
