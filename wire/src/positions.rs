//! The positions every layer passes around, defined once (STYLE.md 3): a Kafka offset, a
//! Raft index and a Raft term are different quantities and never mix. `storage` (the frame
//! header, the log's indexes) and `raft` (entries, the driver) re-export these same types,
//! so the broker never converts between two definitions of one thing.
//!
//! They live here, in the lowest crate, because both `storage` and `raft` use them and
//! `raft` does not depend on `storage` (that would pull glommio into the replication layer).

use std::fmt;

/// A Kafka record offset: counts records only (data entries occupy Kafka offsets; Raft
/// configuration and no-op entries do not).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct KafkaOffset(pub i64);

/// A Raft log index: counts every entry (data, configuration, no-op).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RaftIndex(pub u64);

/// A Raft term; the Kafka leader epoch of the batches written in it (ARCHITECTURE.md,
/// Offsets).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RaftTerm(pub u64);

macro_rules! debug_as {
    ($t:ty, $name:literal) => {
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($name, "({})"), self.0)
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}
debug_as!(KafkaOffset, "offset");
debug_as!(RaftIndex, "index");
debug_as!(RaftTerm, "term");

impl RaftIndex {
    /// The index after this one.
    pub fn next(self) -> RaftIndex {
        RaftIndex(self.0 + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_print_with_their_kind() {
        assert_eq!(format!("{:?}", KafkaOffset(5)), "offset(5)");
        assert_eq!(format!("{:?}", RaftIndex(6)), "index(6)");
        assert_eq!(format!("{}", RaftTerm(7)), "7");
        assert_eq!(RaftIndex(6).next(), RaftIndex(7));
    }
}
