//! A strict walk over the protobuf encoding of a raft-proto 0.7 `eraftpb::Message`, run
//! before rust-protobuf parses it, so that a peer cannot make the parser allocate far more
//! than it sent (`ITEMS_PER_FRAME_MAX` says how much more it could).
//!
//! rust-protobuf 2 allocates one by one for repeated fields (an `Entry` per `entries`
//! element, a `u64` per `ConfState` node id) and for unknown fields; everything else is a
//! scalar overwritten in place or a byte string as long as its encoding.
//!
//! Invariant: `message_items` accepts only the protobuf wire format as rust-protobuf 2
//! reads it (varints of at most 64 bits, tags of at most 32, lengths within the input,
//! no groups), with every field in the schema under its wire type; for what it accepts it
//! returns exactly the number of entries and node ids the parser will push, which is
//! `items_of` of the parsed message. Unknown fields are refused rather than counted: a
//! v1 frame carries raft-proto 0.7's schema, and a peer's unknown fields would otherwise
//! be kept in our log and sent on.
//!
//! Recursion follows the schema (Message > Snapshot > SnapshotMetadata > ConfState, or
//! Message > Entry), so its depth is at most 4 whatever the input.

use raft::eraftpb::Message;

/// A message type of the schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Message,
    Entry,
    Snapshot,
    SnapshotMetadata,
    ConfState,
}

/// How a field is encoded, and what the parser allocates for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    /// Integer, bool or enum; a repeat overwrites.
    Varint,
    /// A byte string; a repeat replaces it.
    Bytes,
    /// A singular message; a repeat merges into it.
    Message(Shape),
    /// One more element of a repeated message: one item.
    RepeatedMessage(Shape),
    /// One element (varint) or several (packed): one item each.
    RepeatedU64,
}

const WIRE_VARINT: u32 = 0;
const WIRE_LEN: u32 = 2;

/// raft-proto 0.7's `eraftpb.proto`, field by field.
fn schema(shape: Shape, number: u32) -> Option<Field> {
    use Field::{Bytes, RepeatedMessage, RepeatedU64, Varint};
    let field = match (shape, number) {
        // msg_type to from term log_term index | commit | reject reject_hint |
        // request_snapshot deprecated_priority commit_term priority
        (Shape::Message, 1..=6 | 8 | 10 | 11 | 13..=16) => Varint,
        (Shape::Message, 7) => RepeatedMessage(Shape::Entry),
        (Shape::Message, 9) => Field::Message(Shape::Snapshot),
        (Shape::Message, 12) => Bytes, // context
        // entry_type term index sync_log | data context
        (Shape::Entry, 1..=3 | 5) => Varint,
        (Shape::Entry, 4 | 6) => Bytes,
        (Shape::Snapshot, 1) => Bytes, // data
        (Shape::Snapshot, 2) => Field::Message(Shape::SnapshotMetadata),
        (Shape::SnapshotMetadata, 1) => Field::Message(Shape::ConfState),
        (Shape::SnapshotMetadata, 2 | 3) => Varint, // index term
        // voters learners voters_outgoing learners_next | auto_leave
        (Shape::ConfState, 1..=4) => RepeatedU64,
        (Shape::ConfState, 5) => Varint,
        _ => return None,
    };
    Some(field)
}

/// Checks that `bytes` is an `eraftpb::Message` as the module doc says, and returns the
/// number of entries and node ids in it.
pub(super) fn message_items(bytes: &[u8]) -> Result<usize, &'static str> {
    let mut items = 0;
    walk(Shape::Message, bytes, &mut items)?;
    Ok(items)
}

/// The entries and node ids of `message`: what `message_items` counts in its encoding.
pub(super) fn items_of(message: &Message) -> usize {
    let conf = message.get_snapshot().get_metadata().get_conf_state();
    let ids = conf.voters.len()
        + conf.learners.len()
        + conf.voters_outgoing.len()
        + conf.learners_next.len();
    message.entries.len() + ids
}

fn walk(shape: Shape, mut bytes: &[u8], items: &mut usize) -> Result<(), &'static str> {
    while !bytes.is_empty() {
        let tag = u32::try_from(varint(&mut bytes)?).map_err(|_| "tag over 32 bits")?;
        let (number, wire) = (tag >> 3, tag & 7);
        if number == 0 {
            return Err("field number 0");
        }
        let field = schema(shape, number).ok_or("field not in raft-proto 0.7's schema")?;
        match (field, wire) {
            (Field::Varint, WIRE_VARINT) => {
                varint(&mut bytes)?;
            }
            (Field::RepeatedU64, WIRE_VARINT) => {
                varint(&mut bytes)?;
                *items += 1;
            }
            (Field::RepeatedU64, WIRE_LEN) => {
                let mut packed = len_delimited(&mut bytes)?;
                while !packed.is_empty() {
                    varint(&mut packed)?;
                    *items += 1;
                }
            }
            (Field::Bytes, WIRE_LEN) => {
                len_delimited(&mut bytes)?;
            }
            (Field::Message(child), WIRE_LEN) => walk(child, len_delimited(&mut bytes)?, items)?,
            (Field::RepeatedMessage(child), WIRE_LEN) => {
                *items += 1;
                walk(child, len_delimited(&mut bytes)?, items)?;
            }
            _ => return Err("wrong wire type for its field"),
        }
    }
    Ok(())
}

/// Reads a base-128 varint of at most 64 bits (10 bytes).
fn varint(bytes: &mut &[u8]) -> Result<u64, &'static str> {
    let mut value = 0_u64;
    for shift in (0..64).step_by(7) {
        let Some((&byte, rest)) = bytes.split_first() else {
            return Err("truncated varint");
        };
        *bytes = rest;
        let low = u64::from(byte & 0x7f);
        // The 10th byte holds bit 63 only.
        if shift == 63 && low > 1 {
            return Err("varint over 64 bits");
        }
        value |= low << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint over 64 bits")
}

/// Reads a length varint and that many bytes.
fn len_delimited<'a>(bytes: &mut &'a [u8]) -> Result<&'a [u8], &'static str> {
    let len = usize::try_from(varint(bytes)?).map_err(|_| "length past the end")?;
    let Some((head, tail)) = bytes.split_at_checked(len) else {
        return Err("length past the end");
    };
    *bytes = tail;
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(bytes: &[u8], expected: Result<usize, &'static str>) {
        assert_eq!(message_items(bytes), expected, "{bytes:02x?}");
    }

    #[test]
    fn walks_the_schema() {
        check(&[], Ok(0));
        check(&[0x08, 0x03, 0x10, 0x02], Ok(0)); // msg_type, to
        check(&[0x3a, 0x00, 0x3a, 0x00], Ok(2)); // two empty entries
        check(&[0x3a, 0x04, 0x22, 0x02, 0xaa, 0xbb], Ok(1)); // an entry with data
                                                             // snapshot > metadata > conf_state: voters packed [1, 300], learners unpacked 7
        let conf = [0x0a, 0x03, 0x01, 0xac, 0x02, 0x10, 0x07];
        let meta = [&[0x0a, conf.len() as u8][..], &conf].concat();
        let snap = [&[0x12, meta.len() as u8][..], &meta].concat();
        check(&[&[0x4a, snap.len() as u8][..], &snap].concat(), Ok(3));
    }

    #[test]
    fn refuses_what_protobuf_would_read_differently() {
        check(&[0x08], Err("truncated varint"));
        check(&[0x08, 0x80], Err("truncated varint"));
        let mut long = vec![0x08];
        long.extend([0xff; 9]);
        long.push(0x02);
        check(&long, Err("varint over 64 bits"));
        long.truncate(10);
        long.push(0x01);
        check(&long, Ok(0)); // u64::MAX
        check(
            &[0x80, 0x80, 0x80, 0x80, 0x10, 0x00],
            Err("tag over 32 bits"),
        );
        check(&[0x00, 0x00], Err("field number 0"));
        check(
            &[0xf8, 0x01, 0x00],
            Err("field not in raft-proto 0.7's schema"),
        );
        check(&[0x3b, 0x3c], Err("wrong wire type for its field")); // entries as a group
        check(
            &[0x39, 0, 0, 0, 0, 0, 0, 0, 0],
            Err("wrong wire type for its field"),
        );
        check(
            &[0x10, 0x00, 0x12, 0x00],
            Err("wrong wire type for its field"),
        ); // to as bytes
        check(&[0x62, 0x05, 0x00], Err("length past the end")); // context
        check(&[0x3a, 0x01, 0x80], Err("truncated varint")); // inside an entry
        check(
            &[0x3a, 0x02, 0xf8, 0x01],
            Err("field not in raft-proto 0.7's schema"),
        );
        check(&[0x3a, 0x01, 0x00], Err("field number 0"));
        check(
            &[0x4a, 0x04, 0x12, 0x02, 0x0a, 0x05],
            Err("length past the end"),
        ); // conf_state
    }
}
