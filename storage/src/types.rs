//! Newtypes that keep Kafka offsets, Raft indexes, terms and file positions apart
//! (STYLE.md 3). A bare integer offset is never passed between modules.

use std::fmt;

/// A Kafka record offset: counts records only.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct KafkaOffset(pub i64);

/// A Raft log index: counts every entry (data, configuration, no-op).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RaftIndex(pub u64);

/// A Raft term; the Kafka leader epoch of the batches written in it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RaftTerm(pub u64);

/// A byte position inside one segment file.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FilePos(pub u64);

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
debug_as!(FilePos, "pos");

impl RaftIndex {
    /// The index after this one.
    pub fn next(self) -> RaftIndex {
        RaftIndex(self.0 + 1)
    }
}
