//! Newtypes that keep Kafka offsets, Raft indexes, terms and file positions apart
//! (STYLE.md 3). A bare integer offset is never passed between modules. The three
//! positions shared with `raft` are `strand_wire::positions`' (one definition); the file
//! position is the storage engine's own.

use std::fmt;

pub use strand_wire::positions::{KafkaOffset, RaftIndex, RaftTerm};

/// A byte position inside one segment file.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FilePos(pub u64);

impl fmt::Debug for FilePos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pos({})", self.0)
    }
}

impl fmt::Display for FilePos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}
